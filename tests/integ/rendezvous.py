"""rdzvd's server-side rendezvous, driven through the native protocol as an
agent would (PROTOCOL.md "Rendezvous"): rounds, ranks, restarts, leases,
standbys, rescale, closing, the per-round TCPStore port, and a kill -9 of
rdzvd that running jobs must not notice."""
import os
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
    a, b = Agent(d, "j2"), Agent(d, "j2")
    a.join(), b.join()
    p = a.push()
    b.push()
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
    a, b = Agent(d, "j3", max_restarts=1), Agent(d, "j3", max_restarts=1)
    a.join(), b.join()
    r1 = a.push()
    b.push()
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
    a, b = Agent(d, "j4"), Agent(d, "j4")
    a.join(), b.join()
    r = a.push()
    b.push()
    a.succeeded(r["round"])
    b.succeeded(r["round"])
    assert a.push()["state"] == DONE and b.push()["state"] == DONE
    st = a.c.call(OP_JOB_STATUS, "j4")[0].decode()
    assert "state succeeded" in st, st


def test_lease_expiry_smaller_round():
    d = daemon()
    a = Agent(d, "j5", nodes=(1, 2), lease_ms=800)
    b = Agent(d, "j5", nodes=(1, 2), lease_ms=800)
    a.join(), b.join()
    r1 = a.push()
    b.push()
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
    import json
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
    a, b = Agent(d, "j8", lease_ms=3000), Agent(d, "j8", lease_ms=3000)
    a.join(), b.join()
    r1 = a.push()
    b.push()
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
    assert b"max=1" in n.get(b"j9", ns=b"\0rdzv/job")


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
