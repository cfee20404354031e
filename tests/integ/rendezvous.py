# SPDX-License-Identifier: Apache-2.0
"""rdzvd's server-side rendezvous, driven through the native protocol as an
agent would (PROTOCOL.md "Rendezvous"): rounds, ranks, restarts, leases,
standbys, rescale, closing, the per-round TCPStore port, and a kill -9 of
rdzvd that running jobs must not notice."""
import json
import os
import sqlite3
import time

import rdzvtest as rt

OP_JOIN, OP_HEARTBEAT, OP_LEAVE, OP_FAILURE, OP_SUCCEEDED, OP_ROUND, \
    OP_JOB_STATUS = 21, 22, 23, 24, 25, 26, 27
RUNNING, STANDBY, STOP, DONE, FAILED = 1, 2, 3, 4, 5
FIELDS = ("job", "round", "state", "node_id", "group_rank",
          "group_world_size", "world_size", "rank_base", "restart_count",
          "max_restarts", "store_ns", "store_port", "message")


class Agent:
    """A fake agent: one native connection, JOIN, pushes as dicts."""

    def __init__(self, d, job, instance=None, lws=2, nodes=(2, 2),
                 max_restarts=3, last_call_ms=200, lease_ms=1500):
        self.d = d
        self.job = job
        self.instance = instance or os.urandom(8).hex()
        self.lws = lws
        self.nodes = nodes
        self.max_restarts = max_restarts
        self.last_call_ms = last_call_ms
        self.lease_ms = lease_ms
        self.c = d.native()
        self.node_id = None

    def join(self):
        f = self.c.call(OP_JOIN, self.job, self.instance, "host-" +
                        self.instance[:4], "127.0.0.1", os.getpid(),
                        self.lws, self.nodes[0], self.nodes[1],
                        self.max_restarts, self.last_call_ms, self.lease_ms)
        self.node_id, restarts, lease = f
        assert lease > 0
        return restarts

    def push(self, timeout=5.0):
        f = self.c.next_push(timeout)
        assert f.op == OP_ROUND, f
        p = dict(zip(FIELDS, f.fields))
        p["job"] = p["job"].decode()
        return p

    def heartbeat(self):
        return self.c.call(OP_HEARTBEAT, self.job, self.node_id)[0]

    def failure(self, rnd, msg="boom", code=1, sig=0, rank=0):
        self.c.call(OP_FAILURE, self.job, self.node_id, rnd, 0, rank, code,
                    sig, msg)

    def succeeded(self, rnd):
        self.c.call(OP_SUCCEEDED, self.job, self.node_id, rnd)

    def reconnect(self):
        self.c.close()
        self.c = self.d.native()


def daemon(*args, **kw):
    return rt.Rdzvd(args=list(args), **kw)


def running_pair(d, job, **kw):
    """Two Agents of job (kw: Agent's options), joined and pushed the first
    round: (a, b, a's push)."""
    a, b = Agent(d, job, **kw), Agent(d, job, **kw)
    a.join(), b.join()
    r = a.push()
    b.push()
    return a, b, r


def test_round_forms_at_max_with_ranks():
    d = daemon()
    a, b = Agent(d, "j1", lws=2), Agent(d, "j1", lws=3)
    assert a.join() == 0
    assert b.join() == 0
    pa, pb = a.push(), b.push()
    assert pa["state"] == RUNNING and pb["state"] == RUNNING
    assert (pa["group_rank"], pb["group_rank"]) == (0, 1)
    assert pa["group_world_size"] == pb["group_world_size"] == 2
    assert pa["world_size"] == pb["world_size"] == 5
    assert (pa["rank_base"], pb["rank_base"]) == (0, 2)
    assert pa["round"] == pb["round"] == 1
    assert pa["store_ns"] == pb["store_ns"] == b"job/j1/round/1"
    assert pa["store_port"] == pb["store_port"] > 0
    assert d.metric("rdzvd_jobs", state="running") == 1
    assert d.metric("rdzvd_nodes") == 2


def test_round_store_port_serves_its_namespace():
    d = daemon()
    a, b, p = running_pair(d, "j2")
    # A TCPStore 1.13 client on the round's port sees only that round.
    t = rt.TCPStore113(rt.connect("127.0.0.1", p["store_port"]))
    t.set(b"/x", b"round1")
    root = d.tcps113()
    root.set(b"/x", b"root")
    assert t.get(b"/x") == b"round1"
    n = d.native(ns=p["store_ns"])
    assert n.get(b"/x") == b"round1"
    # A failure ends the round: its keys go, the next round starts empty.
    a.failure(p["round"])
    assert a.push()["state"] == STOP and b.push()["state"] == STOP
    p2 = a.push()
    b.push()
    assert p2["round"] == 2 and p2["store_ns"] == b"job/j2/round/2"
    t2 = rt.TCPStore113(rt.connect("127.0.0.1", p2["store_port"]))
    assert t2.num_keys() == 0
    assert root.get(b"/x") == b"root"


def test_failure_restarts_then_fails():
    d = daemon()
    a, b, r1 = running_pair(d, "j3", max_restarts=1)
    b.failure(r1["round"], "worker 3 died", code=7, rank=3)
    a.failure(r1["round"], "collateral")     # survivors' echo: not counted
    assert a.push()["state"] == STOP
    r2 = a.push()
    assert b.push()["state"] == STOP
    assert r2["state"] == RUNNING and r2["restart_count"] == 1
    assert r2["group_rank"] == r1["group_rank"]       # ranks stay stable
    assert b.push()["restart_count"] == 1
    b.failure(r2["round"], "worker 3 died again", code=7, rank=3)
    fa, fb = a.push(), b.push()
    assert fa["state"] == FAILED and fb["state"] == FAILED
    assert b"rank 3" in fa["message"] and b"exit code 7" in fa["message"]
    assert b"worker 3 died again" in fa["message"]
    c = Agent(d, "j3", max_restarts=1)
    try:
        c.join()
        raise AssertionError("JOIN of a closed job accepted")
    except rt.RdzvError as e:
        assert e.code == -11, e
        assert "closed" in str(e)
    assert d.metric("rdzvd_restarts_total") == 1


def test_all_succeeded_closes():
    d = daemon()
    a, b, r = running_pair(d, "j4")
    a.succeeded(r["round"])
    b.succeeded(r["round"])
    assert a.push()["state"] == DONE and b.push()["state"] == DONE
    st = a.c.call(OP_JOB_STATUS, "j4")[0].decode()
    assert "state succeeded" in st, st


def test_heartbeat_unjoined_ends_a_finished_job():
    """A HEARTBEAT's last field names the node's replacements that never
    stepped: once another node succeeded (training ended), a node all of
    whose workers are such has nothing to report, and the job is DONE.
    A negative mask is refused (and, as every protocol error, ends the
    connection: an agent then leaves the field out, PROTOCOL.md)."""
    d = daemon()
    a, b, r = running_pair(d, "j4u")
    a.succeeded(r["round"])
    b.c.call(OP_HEARTBEAT, b.job, b.node_id, 0, 1)    # one of two
    try:
        b.c.call(OP_HEARTBEAT, b.job, b.node_id, 0, -1)
        raise AssertionError("a negative unjoined mask accepted")
    except rt.RdzvError:
        pass
    b.reconnect()		# rdzvd ends a connection that breaks the protocol
    b.c.call(OP_HEARTBEAT, b.job, b.node_id, 0, 3)
    assert a.push()["state"] == DONE and b.push()["state"] == DONE


def test_lease_expiry_smaller_round():
    d = daemon()
    a, b, r1 = running_pair(d, "j5", nodes=(1, 2), lease_ms=800)
    assert r1["group_world_size"] == 2
    b.c.close()                      # b dies; a keeps its lease
    t0 = time.time()
    while True:
        try:
            a.heartbeat()
        except rt.RdzvError:
            pass
        if a.c.pushes:
            break
        assert time.time() - t0 < 5, "no STOP after the lease"
        time.sleep(0.1)
    assert a.push()["state"] == STOP
    assert time.time() - t0 >= 0.5       # not before the lease ran out
    r2 = a.push()
    assert r2["state"] == RUNNING and r2["group_world_size"] == 1
    assert r2["restart_count"] == 0       # a lost node is no restart
    assert d.metric("rdzvd_lease_expiries_total") == 1


def test_standby_and_scale_up():
    d = daemon()
    a = Agent(d, "j6", nodes=(1, 2), last_call_ms=100)
    a.join()
    assert a.push()["group_world_size"] == 1      # after the last call
    b = Agent(d, "j6", nodes=(1, 2), last_call_ms=100)
    b.join()                                      # below max: rescale
    assert a.push()["state"] == STOP
    ra, rb = a.push(), b.push()
    assert ra["group_world_size"] == rb["group_world_size"] == 2
    assert ra["group_rank"] == 0 and rb["group_rank"] == 1
    c = Agent(d, "j6", nodes=(1, 2), last_call_ms=100)
    c.join()
    assert c.push()["state"] == STANDBY
    # b leaves: the standby steps in, a keeps rank 0.
    b.c.call(OP_LEAVE, "j6", b.node_id)
    assert a.push()["state"] == STOP
    ra2, rc2 = a.push(), c.push()
    assert ra2["group_rank"] == 0 and rc2["group_rank"] == 1
    assert rc2["state"] == RUNNING and ra2["restart_count"] == 0


def test_join_params_must_agree():
    d = daemon()
    Agent(d, "j7", nodes=(2, 2)).join()
    try:
        Agent(d, "j7", nodes=(1, 4)).join()
        raise AssertionError("disagreeing JOIN accepted")
    except rt.RdzvError as e:
        assert e.code == -1


def test_join_reply_carries_the_jobs_lease():
    d = daemon()
    a = Agent(d, "jl", nodes=(2, 2), lease_ms=700)
    b = Agent(d, "jl", nodes=(2, 2), lease_ms=-1)   # rdzvd's default
    fa = a.c.call(OP_JOIN, a.job, a.instance, "h", "127.0.0.1", 1, 2, 2, 2,
                  3, 200, 700)
    fb = b.c.call(OP_JOIN, b.job, b.instance, "h", "127.0.0.1", 1, 2, 2, 2,
                  3, 200, -1)
    assert fa[2] == 700 and fb[2] == 700, (fa, fb)   # the first JOIN's


def test_events_wait_answers_at_once_when_behind():
    d = daemon()
    a = Agent(d, "je", nodes=(1, 1))
    a.join()
    a.push()
    n = d.native()
    t0 = time.time()
    # Events 0.. exist: a wait from after=0 must not wait for a new one.
    ev = json.loads(n.call(31, "je", 0, 5000)[0])
    assert time.time() - t0 < 2, "waited although events were there"
    assert ev and ev[0]["seq"] == 1, ev


def test_rdzvd_kill9_is_invisible():
    d = daemon(durability="strict")
    a, b, r1 = running_pair(d, "j8", lease_ms=3000)
    t = rt.TCPStore113(rt.connect("127.0.0.1", r1["store_port"]))
    t.set(b"/k", b"v")
    t.num_keys()                        # a reply: the SET is committed
    d.kill9()
    d.restart()
    a.reconnect(), b.reconnect()
    assert a.join() == 0 and b.join() == 0
    ra, rb = a.push(), b.push()
    assert ra["state"] == RUNNING and ra["round"] == r1["round"]
    assert ra["restart_count"] == 0 and rb["group_rank"] == 1
    assert ra["store_port"] == r1["store_port"]   # same port for workers
    t2 = rt.TCPStore113(rt.connect("127.0.0.1", ra["store_port"]))
    assert t2.get(b"/k") == b"v"
    assert d.metric("rdzvd_rounds_total") == 0    # no new round formed


def legacy_row(**fields):
    """A row as rdzvd wrote it before rows were JSON: k=v lines."""
    return "".join("%s=%s\n" % kv for kv in fields.items()).encode()


def test_old_format_rows_load():
    """A database an older rdzvd left, its rendezvous rows in k=v text (a
    running round of two nodes, a job closed as failed with an escaped
    message, events), opens: jobs, members, ranks, failure and events come
    back, an agent rejoins its round, and the rows are JSON once written
    again."""
    d = daemon(durability="strict")
    d.stop()                    # the schema is there, no rows yet
    closed = int(time.time() * 1000) - 1000     # within --job-retention
    rows = [
        (b"\0rdzv/job", b"old", legacy_row(
            min=2, max=2, max_restarts=3, last_call_ms=200, lease_ms=5000,
            state=2, round=3, restarts=2, next_node=3, next_join=2,
            next_event=2, port=0, world=5, closed_ms=-1, failure="")),
        (b"\0rdzv/node/old", b"1", legacy_row(
            instance="inst-a", host="host-a", addr="127.0.0.1", pid=101,
            lws=3, state=2, group_rank=1, prev_rank=1, join_seq=0,
            succeeded=0, want_rank=-1)),
        (b"\0rdzv/node/old", b"2", legacy_row(
            instance="inst-b", host="host-b", addr="127.0.0.1", pid=102,
            lws=2, state=2, group_rank=0, prev_rank=0, join_seq=1,
            succeeded=0, want_rank=-1)),
        (b"\0rdzv/ev/old", b"%020d" % 0, b"1700000000000 job created"),
        (b"\0rdzv/ev/old", b"%020d" % 1,
         b"1700000000500 failure: line one\\nline two \\\\ end"),
        (b"\0rdzv/job", b"gone", legacy_row(
            min=1, max=1, max_restarts=0, last_call_ms=200, lease_ms=5000,
            state=4, round=1, restarts=0, next_node=2, next_join=1,
            next_event=0, port=0, world=0, closed_ms=closed,
            failure="rank 0: exit code 3\\nsecond line")),
        (b"\0rdzv/node/gone", b"1", legacy_row(
            instance="inst-g", host="host-g", addr="", pid=7, lws=1,
            state=2, group_rank=0, prev_rank=0, join_seq=0, succeeded=0,
            want_rank=-1)),
    ]
    db = sqlite3.connect(d.db)
    with db:
        db.executemany("INSERT INTO kv(ns, key, value) VALUES (?, ?, ?)",
                       rows)
    db.close()
    d.restart()

    n = d.native()
    old = json.loads(n.call(30, "old")[0])
    assert old["state"] == "running" and old["round"] == 3, old
    assert old["restarts"] == 2 and old["world_size"] == 5, old
    m = {x["node_id"]: x for x in old["members"]}
    assert m[1]["host"] == "host-a" and m[1]["group_rank"] == 1
    assert m[1]["rank_base"] == 2 and m[2]["rank_base"] == 0, m
    assert old["store_port"] > 0 and old["store_ns"] == "job/old/round/3"
    gone = json.loads(n.call(30, "gone")[0])
    assert gone["state"] == "failed", gone
    assert gone["failure"] == "rank 0: exit code 3\nsecond line", gone
    assert gone["members"][0]["host"] == "host-g"
    ev = json.loads(n.call(31, "old", -1, 0)[0])
    assert [(e["seq"], e["time_ms"]) for e in ev[:2]] == \
        [(0, 1700000000000), (1, 1700000000500)], ev
    assert ev[1]["text"] == "failure: line one\nline two \\ end", ev

    # The agent of node 1 comes back to its round, as after a restart.
    a = Agent(d, "old", instance="inst-a", lws=3, lease_ms=5000)
    assert a.join() == 2 and a.node_id == 1
    p = a.push()
    assert p["state"] == RUNNING and p["round"] == 3, p
    assert p["group_rank"] == 1 and p["rank_base"] == 2, p
    assert p["store_port"] == old["store_port"]
    # Written again (the round's new port), the job row is JSON.
    row = json.loads(n.get(b"old", ns=b"\0rdzv/job"))
    assert row["round"] == 3 and row["port"] == old["store_port"], row
    assert d.metric("rdzvd_rounds_total") == 0    # no new round formed


def test_two_jobs_never_mix():
    d = daemon()
    ja = [Agent(d, "alpha", nodes=(1, 1))]
    jb = [Agent(d, "beta", nodes=(1, 1))]
    ja[0].join(), jb[0].join()
    pa, pb = ja[0].push(), jb[0].push()
    assert pa["store_port"] != pb["store_port"]
    ta = rt.TCPStore113(rt.connect("127.0.0.1", pa["store_port"]))
    tb = rt.TCPStore113(rt.connect("127.0.0.1", pb["store_port"]))
    ta.set(b"/secret", b"a")
    tb.set(b"/secret", b"b")
    assert ta.get(b"/secret") == b"a" and tb.get(b"/secret") == b"b"
    assert ta.num_keys() == 1 and tb.num_keys() == 1


def test_reserved_namespace_read_only():
    d = daemon()
    Agent(d, "j9", nodes=(1, 1)).join()
    n = d.native()
    try:
        n.set(b"x", b"y", ns=b"\0rdzv/job")
        raise AssertionError("write into a reserved namespace accepted")
    except rt.RdzvError as e:
        assert e.code == -1
    assert json.loads(n.get(b"j9", ns=b"\0rdzv/job"))["max"] == 1


def test_thousand_agents_one_round():
    d = daemon()
    n = 1000
    agents = []
    for i in range(n):
        a = Agent(d, "big", lws=1, nodes=(n, n), last_call_ms=0)
        agents.append(a)
    t0 = time.time()
    for a in agents:
        a.c.send(OP_JOIN, a.job, a.instance, "h", "127.0.0.1", 1, 1, n, n,
                 0, 0, 5000)
    ranks = set()
    for a in agents:
        p = a.push(timeout=30)
        assert p["state"] == RUNNING and p["world_size"] == n
        ranks.add(p["group_rank"])
    elapsed = time.time() - t0
    assert ranks == set(range(n))
    print("# 1000 agents joined and got their round in %.3f s" % elapsed)


if __name__ == "__main__":
    rt.main(globals())
