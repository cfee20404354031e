# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent against a real rdzvd, several agents on loopback: restarts
after a worker's SIGKILL or non-zero exit (until max_restarts, then the
summary and exit 1), an agent killed with SIGKILL (its workers gone at
once, the others in a smaller round), scale-up below max, a standby that
replaces a failed node, rdzvd killed with SIGKILL and restarted (nothing
restarted, agents reconnected), SIGTERM to an agent (LEAVE, smaller
round), a job that succeeds, and two jobs on one rdzvd whose keys never
mix.  After every test no process of the test is left."""
import os
import signal
import time

import rdzvtest as rt
from agent_lib import (Scope, agent_path, by_round, conf,
                       job_status, starts, wait_starts)

LEASE = 1.0


def common(d, job, nnodes, nproc=2, restarts=3, extra=()):
    return ["--nnodes", nnodes, "--nproc_per_node", str(nproc),
            "--rdzv_backend", "c10d",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
            "--max_restarts", str(restarts), "--grace", "1",
            "--rdzv_conf", conf(0.2, LEASE)] + list(extra)


def round_with(tmp, world, after=0):
    """Waits for a round > after whose world_size ranks all started;
    returns (round, {rank: info})."""
    def pred(_):
        for r, ranks in sorted(by_round(tmp).items(), reverse=True):
            if r > after and len(ranks) == world and all(
                    i["WORLD_SIZE"] == str(world) for i in ranks.values()):
                return True
        return False
    wait_starts(tmp, pred, timeout=15, what="a round of %d ranks after "
                "round %d" % (world, after))
    for r, ranks in sorted(by_round(tmp).items(), reverse=True):
        if r > after and len(ranks) == world:
            return r, ranks


def two_running(s, d, job, nnodes, extra=(), env=None):
    """Agents a and b of job (2 workers each) in scope s; returns (a, b,
    round, {rank: info}) once the 4 ranks of a first round started."""
    a = s.agent(common(d, job, nnodes, extra=extra), env=env)
    b = s.agent(common(d, job, nnodes, extra=extra), env=env)
    r, ranks = round_with(s.tmp, 4)
    return a, b, r, ranks


def test_worker_sigkill_restarts_group():
    d = rt.Rdzvd()
    with Scope() as s:
        a, b, r1, ranks = two_running(s, d, "kill1", "2:2")
        assert {i["TORCHELASTIC_RESTART_COUNT"] for i in ranks.values()} \
            == {"0"}
        # Same port, namespace and restart count on every node.
        assert len({i["MASTER_PORT"] for i in ranks.values()}) == 1
        assert len({i["RDZV_NAMESPACE"] for i in ranks.values()}) == 1
        assert sorted(int(i["GROUP_RANK"]) for i in ranks.values()) == \
            [0, 0, 1, 1]
        t0 = time.time()
        os.kill(ranks[3]["pid"], signal.SIGKILL)
        r2, ranks2 = round_with(s.tmp, 4, after=r1)
        up = max(i["t"] for i in ranks2.values()) - t0
        print("  SIGKILL -> all 4 ranks of the next round running: %.0f ms"
              % (up * 1000))
        assert {i["TORCHELASTIC_RESTART_COUNT"] for i in ranks2.values()} \
            == {"1"}, ranks2
        assert not ({i["pid"] for i in ranks.values()} &
                    {i["pid"] for i in ranks2.values()})
        assert ranks2[0]["RDZV_NAMESPACE"] != ranks[0]["RDZV_NAMESPACE"]
        # Group ranks are stable for survivors.
        for r in range(4):
            assert ranks2[r]["GROUP_RANK"] == ranks[r]["GROUP_RANK"]
        assert a.alive() and b.alive()
    d.stop()


def test_nonzero_exit_until_max_restarts():
    d = rt.Rdzvd()
    with Scope() as s:
        env = {"W_EXIT": "0:1:2,1:1:2,2:1:2"}
        a = s.agent(common(d, "exit2", "2:2", restarts=2), env=env)
        b = s.agent(common(d, "exit2", "2:2", restarts=2), env=env)
        ra, rb = a.wait(30), b.wait(30)
        oa, ob = a.output(), b.output()
        assert ra == 1 and rb == 1, (ra, rb, oa, ob)
        restarts = sorted({int(i["TORCHELASTIC_RESTART_COUNT"])
                           for i in starts(s.tmp)})
        assert restarts == [0, 1, 2], restarts
        both = oa + ob
        assert both.count("Root Cause") == 2, both
        assert "exit code 2" in oa and "exit code 2" in ob
        assert "2 restarts used of 2" in oa and "2 restarts used of 2" in ob
        # The node that held rank 1 names it in its own section.
        assert "rank      : 1 (local_rank: 1)" in both
        assert "exitcode  : 2" in both
        try:
            c = d.native()
            c.call(21, "exit2", "x" * 8, "h", "a", 1, 2, 2, 2, 2, 200, 1000)
            raise AssertionError("a closed job accepted a JOIN")
        except rt.RdzvError as e:
            assert e.code == rt.RDZV_ECLOSED, e
    d.stop()


def test_agent_sigkill_smaller_round():
    d = rt.Rdzvd()
    with Scope() as s:
        a, b, r1, ranks = two_running(s, d, "shrink", "1:2")
        bpids = set(b.children())
        assert len(bpids) == 2
        t0 = time.monotonic()
        b.kill()
        rt.wait_until(lambda: not any(
            os.path.exists("/proc/%d" % p) and
            open("/proc/%d/stat" % p).read().split(") ")[1][0] != "Z"
            for p in bpids), timeout=1.0, what="b's workers gone")
        print("  agent SIGKILL -> its workers gone: %.0f ms" %
              ((time.monotonic() - t0) * 1000))
        r2, ranks2 = round_with(s.tmp, 2, after=r1)
        print("  agent SIGKILL -> smaller round running: %.0f ms" %
              ((time.monotonic() - t0) * 1000))
        # A lost node is a rescale, not a restart.
        assert {i["TORCHELASTIC_RESTART_COUNT"] for i in ranks2.values()} \
            == {"0"}
        assert {int(i["pid"]) for i in ranks2.values()} <= set(a.children())
        assert a.alive()
    d.stop()


def test_scale_up_below_max():
    d = rt.Rdzvd()
    with Scope() as s:
        s.agent(common(d, "grow", "1:3"))
        r1, _ = round_with(s.tmp, 2)
        s.agent(common(d, "grow", "1:3"))
        r2, ranks2 = round_with(s.tmp, 4, after=r1)
        assert {i["TORCHELASTIC_RESTART_COUNT"] for i in ranks2.values()} \
            == {"0"}
        assert {i["GROUP_WORLD_SIZE"] for i in ranks2.values()} == {"2"}
        s.agent(common(d, "grow", "1:3"))
        r3, ranks3 = round_with(s.tmp, 6, after=r2)
        assert {i["GROUP_WORLD_SIZE"] for i in ranks3.values()} == {"3"}
    d.stop()


def test_standby_replaces_failed_node():
    d = rt.Rdzvd()
    with Scope() as s:
        a, b, r1, ranks = two_running(s, d, "spare", "2:2")
        c = s.agent(common(d, "spare", "2:2"))
        rt.wait_until(lambda: "standby" in c.output(), timeout=5,
                      what="the third agent on standby")
        assert c.children() == []
        b.kill()
        r2, ranks2 = round_with(s.tmp, 4, after=r1)
        cpids = set(c.children())
        assert len(cpids) == 2, c.output()
        assert {int(i["pid"]) for i in ranks2.values()} == \
            cpids | set(a.children())
        assert {i["TORCHELASTIC_RESTART_COUNT"] for i in ranks2.values()} \
            == {"0"}
    d.stop()


def test_rdzvd_kill9_and_restart():
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    assert d.port == port
    with Scope() as s:
        a, b, r1, ranks = two_running(s, d, "phoenix", "2:2")
        n_before = len(starts(s.tmp))
        d.kill9()
        time.sleep(0.3)
        d.start()
        assert d.port == port
        # Both agents come back as the same nodes, well inside the lease.
        rt.wait_until(lambda: job_status(d, "phoenix").count(
            " connected") == 2, timeout=LEASE * 3, what="agents reconnected")
        time.sleep(LEASE * 1.5)
        st = job_status(d, "phoenix")
        assert "state running round %d restarts 0/" % r1 in st, st
        assert st.count(" member ") == 2, st
        assert len(starts(s.tmp)) == n_before, "a worker was restarted"
        assert a.alive() and b.alive()
        for i in ranks.values():
            os.kill(i["pid"], 0)        # still the same processes
        # The rendezvous works on: a failure now restarts the group.
        os.kill(ranks[0]["pid"], signal.SIGKILL)
        r2, ranks2 = round_with(s.tmp, 4, after=r1)
        assert {i["TORCHELASTIC_RESTART_COUNT"] for i in ranks2.values()} \
            == {"1"}
    d.stop()


def test_sigterm_agent_leaves():
    d = rt.Rdzvd()
    with Scope() as s:
        env = {"W_TRAPTERM": "1"}
        a, b, r1, ranks = two_running(
            s, d, "bye", "1:2", extra=["--rdzv_conf", conf(0.2, 30)], env=env)
        t0 = time.monotonic()
        b.signal(signal.SIGTERM)
        assert b.wait(10) == 143, b.output()
        terms = [n for n in os.listdir(s.tmp) if n.startswith("term.")]
        assert len(terms) >= 2, terms
        # LEAVE ends the round at once, long before the 30 s lease.
        r2, ranks2 = round_with(s.tmp, 2, after=r1)
        dt = time.monotonic() - t0
        assert dt < 5, dt
        st = job_status(d, "bye")
        assert st.count("\nnode ") == 1, st
        assert a.alive()
    d.stop()


def test_join_timeout_and_closed_job():
    d = rt.Rdzvd()
    with Scope() as s:
        a = s.agent(common(d, "lonely", "2:2", extra=[
            "--rdzv_conf", conf(0.2, 30, "join_timeout=0.5")]))
        assert a.wait(10) == 1, a.output()
        assert "join timeout" in a.output(), a.output()
        # It said goodbye: rdzvd does not wait for its 30 s lease.
        assert "\nnode " not in job_status(d, "lonely")
        b = s.agent(common(d, "over", "1:1"), env={"W_RUN": "0"})
        assert b.wait(20) == 0, b.output()
        c = s.agent(common(d, "over", "1:1"))
        assert c.wait(10) == 1, c.output()
        assert "refused to join job over" in c.output(), c.output()
        assert c.children() == [] and len(starts(s.tmp)) == 2
    d.stop()


def test_job_succeeds():
    d = rt.Rdzvd()
    with Scope() as s:
        env = {"W_RUN": "0.3"}
        a = s.agent(common(d, "fine", "2:2"), env=env)
        b = s.agent(common(d, "fine", "2:2"), env=env)
        assert a.wait(20) == 0, a.output()
        assert b.wait(20) == 0, b.output()
        assert len(starts(s.tmp)) == 4
        assert "state succeeded" in job_status(d, "fine")
    d.stop()


def test_two_jobs_never_mix_keys():
    d = rt.Rdzvd()
    with Scope() as s:
        env = {"W_STORE": "1", "W_RUN": "0"}
        agents = []
        for job in ("alpha", "beta"):
            for _ in range(2):
                agents.append(s.agent(common(d, job, "2:2"), env=env))
        for a in agents:
            assert a.wait(30) == 0, a.output()
        for job in ("alpha", "beta"):
            for rank in range(4):
                with open(os.path.join(s.tmp, "store.%s.%d" %
                                       (job, rank))) as f:
                    got = f.read()
                assert '"job": "%s"' % job in got, got
                assert '"count": 4' in got, got
        ports = {}
        for i in starts(s.tmp):
            ports.setdefault(i["RDZV_JOB"], set()).add(i["MASTER_PORT"])
        assert len(ports["alpha"]) == 1 and len(ports["beta"]) == 1
        assert ports["alpha"] != ports["beta"]
    d.stop()


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    rt.main(globals(), per_test=40, total=170)
