# SPDX-License-Identifier: Apache-2.0
"""etcd_failover: three rdzvds (on 127.0.0.1, .2 and .3) on a
three-member etcd (127.0.0.1-3); one leads, the others stand by.

  - kill -9 the leading rdzvd: a standby leads, and every SET the old
    leader acknowledged (a client logs each) is there;
  - the host lost: kill -9 the leading rdzvd and the etcd member beside
    it: the same; the new leader says it leads in /metrics and in
    rdzvctl status (reached through the list of all three);
  - standbys serve HTTP, not the client port: /metrics says
    rdzvd_leader 0 with the leader's term, /readyz is 503 naming the
    leader's address (200 on the leader alone), /api/status says where
    the leader is, the rest of /api/ is 503, the status page loads; after
    a failover the remaining standby names the new leader;
  - SIGSTOP the leader past its lease: a standby leads; SIGCONT: the old
    leader commits nothing (a SET sent to it while it was stopped gets
    no reply and is not stored) and exits with status 75;
  - a 2x2 job of C workers (examples/ddp_mlp under two rdzv-agents given
    all three rdzvds, --rdzv_endpoint A,B,C): kill -9 the leading rdzvd
    while it trains; the agents follow the new leader, no worker is
    restarted or replaced; a worker killed afterwards is repaired in
    place by the new leader (shrink, grow, no restart); the job succeeds;
  - the same for an unmodified torch 2.13 DDP program (gloo, env://)
    under the two agents: no rank restarts, every replica the same.
"""

import os
import re
import signal
import subprocess

import rdzvtest as rt
from agent_lib import Scope, conf, job_events, let_end, until
from etcd_lib import EtcdCluster, etcd_trio, skip_without_etcd, standby_http
from etcd_store import DEPOSED, AckLog, check_acked

def check_standby(d, leader):
    """d stands by and says, on HTTP, that leader leads (and where)."""
    import json
    want = [leader.metric(m) for m in ("rdzvd_leader_term",
                                       "rdzvd_leader_failovers")]
    # The new leader counts its election just after it won.
    rt.wait_until(lambda: [d.metric(m) for m in (
        "rdzvd_leader_term", "rdzvd_leader_failovers")] == want, 20,
        what="the standby sees the leader's term and failovers")
    assert d.metric("rdzvd_leader", default=None) == 0
    assert "rdzvd_jobs" not in d.metrics_text()     # the leader's
    st, body, _ = d.http_get("/readyz")
    assert st == 503 and b"standing by" in body and \
        leader.endpoint.encode() in body, (st, body)
    assert leader.http_get("/readyz")[0] == 200
    assert d.http_get("/healthz")[0] == 200
    st, body, _ = d.http_get("/api/status")
    doc = json.loads(body)["leader"]
    assert st == 200 and not doc["leading"] and \
        doc["listen"] == leader.endpoint and \
        doc["http"] == "127.0.0.1:%d" % leader.http_port, (st, doc)
    st, body, _ = d.http_get("/api/jobs")
    assert st == 503 and b"stands by" in body, (st, body)
    st, body, _ = d.http_get("/")
    assert st == 200 and b"standing by" in body, st
    # Not listening for clients: they move on to the next address.
    try:
        rt.connect(d.host, int(d.endpoint.rsplit(":", 1)[1]), 2.0).close()
        raise AssertionError("a standby accepted a client")
    except (ConnectionRefusedError, OSError):
        pass


def next_leader(standbys, timeout=30.0):
    """Waits until one standby has written its port file; returns it."""
    found = []

    def ready():
        for d in standbys:
            if os.path.exists(d.port_file) and (
                    not d.http or os.path.exists(d.http_port_file)):
                found.append(d)
                return True
        return False
    rt.wait_until(ready, timeout, 0.02, "a standby leading")
    d = found[0]
    d.wait_ready()
    return d


def failover(kill_member):
    etcd = EtcdCluster(3)
    leader, standbys = etcd_trio(etcd)
    for d in standbys:
        check_standby(standby_http(d), leader)
    w = AckLog(leader)
    rt.wait_until(lambda: len(w.acked) > 200, 30, what="writes acked")
    leader.kill9()
    if kill_member:
        etcd.kill(0)        # the member on the leader's host
    w.join()
    new = next_leader(standbys)
    assert new.host != leader.host
    assert "leading" in new.log_text()
    check_acked(new, w.acked)
    # Who leads, in /metrics and in rdzvctl status (given all three).
    assert new.metric("rdzvd_leader") == 1
    assert new.metric("rdzvd_leader_failovers") == 1
    assert new.metric("rdzvd_leader_term") > 0
    eps = ",".join(d.endpoint for d in [leader] + standbys)
    st = subprocess.run([os.path.join(rt.top_builddir(), "client",
                                      "rdzvctl"), "-e", eps, "status"],
                        capture_output=True, text=True, timeout=30)
    assert st.returncode == 0, st.stderr
    assert re.search(r"leader +this rdzvd, term \d+, .* after 1 other",
                     st.stdout), st.stdout
    assert "store        " + etcd.store_arg in st.stdout, st.stdout
    assert "clients " + new.endpoint in st.stdout, st.stdout
    other = [d for d in standbys if d is not new][0]
    check_standby(other, new)
    # It takes writes of its own, and a second failover loses none.
    w2 = AckLog(new, prefix=b"second-")
    rt.wait_until(lambda: len(w2.acked) > 50, 30, what="writes acked")
    new.kill9()
    w2.join()
    last = next_leader([d for d in standbys if d is not new])
    check_acked(last, w.acked)
    check_acked(last, w2.acked)
    for d in standbys:
        d.stop()


def test_kill9_leader():
    failover(kill_member=False)


def test_host_lost():
    failover(kill_member=True)


def test_paused_leader_commits_nothing():
    etcd = EtcdCluster(3)
    leader, standbys = etcd_trio(etcd)
    c = leader.native(timeout=30)
    c.set(b"before", b"1")
    leader.signal(signal.SIGSTOP)
    try:
        new = next_leader(standbys)
        # Sent while the old leader sleeps: it reads it after SIGCONT.
        c.send(rt.OP_SET, b"", b"during", b"1")
    finally:
        leader.signal(signal.SIGCONT)
    assert rt.expect_closed(c.sock, 30) == b"", "a reply left the old leader"
    rc = leader.wait(30)
    assert rc == DEPOSED, "status %r\n%s" % (rc, leader.diagnostics())
    assert "no longer the leader" in leader.log_text()
    n = new.native()
    assert n.get(b"before") == b"1"
    try:
        n.get(b"during")
        raise AssertionError("the old leader committed a write")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ENOTFOUND, e
    for d in standbys:
        d.stop()


def c_job(leader, standbys, job):
    """The agents' arguments and program of a 2 x 2 ddp_mlp job given all
    three rdzvds, and the file that lets it end: it trains on (--until)
    until the test creates that file, whatever the machine's speed."""
    from repair_agent import prog
    eps = ",".join(d.endpoint for d in [leader] + standbys)
    end = os.path.join(rt.mktemp("etcd-end-"), "end")
    return (["--nnodes", "2", "--nproc_per_node", "2",
             "--rdzv_backend", "rdzv", "--rdzv_endpoint", eps,
             "--rdzv_id", job, "--max_restarts", "2", "--grace", "2",
             "--rdzv_conf", conf(0.2, 5.0), "--no_python"],
            until(prog(), end), end)


def test_job_survives_failover():
    from repair_agent import need_data
    need_data()
    etcd = EtcdCluster(3)
    leader, standbys = etcd_trio(etcd)
    job_args, program, end = c_job(leader, standbys, "ha")
    with Scope("etcd-job-") as s:
        a = s.agent(job_args, program=program)
        b = s.agent(job_args, program=program)
        rt.wait_until(lambda: len(a.children()) == 2 and
                      len(b.children()) == 2 and
                      "step " in a.output() + b.output(),
                      timeout=60, what="4 workers training")
        workers = set(a.children()) | set(b.children())
        leader.kill9()
        new = next_leader(standbys)
        rt.wait_until(lambda: "rejoined job ha" in a.output() and
                      "rejoined job ha" in b.output(), 30,
                      what="both agents on the new leader")
        assert workers == set(a.children()) | set(b.children())
        # A worker dies after the failover: the new leader repairs the
        # job in place (its replacement is told where the leader is).
        victim = sorted(b.children())[0]
        os.kill(victim, signal.SIGKILL)
        rt.wait_until(lambda: any("repair: grow" in t
                                  for t in job_events(new, "ha")),
                      timeout=60, what="the grow round on the new leader")
        assert workers - {victim} <= set(a.children()) | set(b.children())
        let_end(end)
        for x in (a, b):
            rc = x.wait(120)
            assert rc == 0, (rc, x.output()[-3000:])
        ev = job_events(new, "ha")
    assert not any(t.startswith("restart ") for t in ev), ev
    assert any(t.startswith("repair: shrink to 3") for t in ev), ev
    for d in standbys:
        d.stop()


def test_repair_in_flight_failover():
    """A worker dies and, while its replacement is still on its way, the
    leading rdzvd is killed: the new leader, from the rows in etcd, awaits
    the same replacement and grows the job when it is ready; no restart,
    the survivors keep their PIDs."""
    from repair_agent import need_data
    from repair_agent2 import GATE_SH
    need_data()
    etcd = EtcdCluster(3)
    leader, standbys = etcd_trio(etcd)
    job_args, program, end = c_job(leader, standbys, "inflight")
    program = ["/bin/sh", "-c", GATE_SH, "gate"] + program
    with Scope("etcd-inflight-") as s:
        gate = os.path.join(s.tmp, "gate")
        env = {"RDZV_E2E_GATE": gate}
        a = s.agent(job_args, program=program, env=env)
        b = s.agent(job_args, program=program, env=env)
        rt.wait_until(lambda: len(a.children()) == 2 and
                      len(b.children()) == 2 and
                      "step " in a.output() + b.output(),
                      timeout=60, what="4 workers training")
        victim = sorted(b.children())[0]
        kept = (set(a.children()) | set(b.children())) - {victim}
        os.kill(victim, signal.SIGKILL)
        rt.wait_until(lambda: any(t.startswith("repair: shrink to 3")
                                  for t in job_events(leader, "inflight")),
                      timeout=60, what="the shrink round on the leader")
        leader.kill9()
        new = next_leader(standbys)
        rt.wait_until(lambda: "rejoined job inflight" in a.output() and
                      "rejoined job inflight" in b.output(), 30,
                      what="both agents on the new leader")
        assert not any(t.startswith("repair: grow")
                       for t in job_events(new, "inflight"))
        with open(gate, "w"):
            pass        # the replacement goes on: READY to the new leader
        rt.wait_until(lambda: any(t.startswith("repair: grow to 4")
                                  for t in job_events(new, "inflight")),
                      timeout=60, what="the grow round on the new leader")
        assert kept <= set(a.children()) | set(b.children())
        let_end(end)
        for x in (a, b):
            rc = x.wait(120)
            assert rc == 0, (rc, x.output()[-3000:])
        ev = job_events(new, "inflight")
    assert not any(t.startswith("restart ") for t in ev), ev
    for d in standbys:
        d.stop()


def test_torch_job_survives_failover():
    import json
    from agent_torch import PROGRAM, running
    if not rt.has_torch(rt.TORCH2_PYTHON):
        rt.skip("no torch 2.x at %s (TORCH2_PYTHON)" % rt.TORCH2_PYTHON)
    etcd = EtcdCluster(3)
    leader, standbys = etcd_trio(etcd)
    eps = ",".join(d.endpoint for d in [leader] + standbys)
    with Scope("etcd-torch-") as s:
        prog = os.path.join(s.tmp, "train.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        args = ["--nnodes", "2", "--nproc-per-node", "2",
                "--rdzv-endpoint", eps, "--rdzv-id", "torch2",
                "--max-restarts", "2", "--grace", "1",
                "--rdzv-conf", conf(0.2, 5.0)]
        env = {"PYTHON": rt.TORCH2_PYTHON, "GLOO_SOCKET_IFNAME": "lo"}
        a = s.agent(args, env=env, program=[prog, s.tmp])
        b = s.agent(args, env=env, program=[prog, s.tmp])
        rt.wait_until(lambda: len(running(s.tmp, 0)) == 4, timeout=90,
                      what="4 ranks training")
        r0 = running(s.tmp, 0)
        leader.kill9()
        next_leader(standbys)
        rt.wait_until(lambda: "rejoined job torch2" in a.output() and
                      "rejoined job torch2" in b.output(), 30,
                      what="both agents on the new leader")
        with open(os.path.join(s.tmp, "finish"), "w"):
            pass
        ra, rb = a.wait(90), b.wait(90)
        assert ra == 0 and rb == 0, (ra, rb, a.output()[-3000:],
                                     b.output()[-3000:])
        assert not running(s.tmp, 1), "a rank restarted"
        for rank in range(4):
            with open(os.path.join(s.tmp, "result.0.%d" % rank)) as f:
                r = json.load(f)
            assert r["pid"] == r0[rank]["pid"], (r, r0[rank])
            assert r["world"] == 4 and r["same"], r
    for d in standbys:
        d.stop()


if __name__ == "__main__":
    skip_without_etcd()
    rt.main(globals(), per_test=150.0, total=500.0)
