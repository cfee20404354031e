"""test_repair_hsdp: sharded training (FSDP2 inside replica groups, HSDP)
repairs in place under a real rdzvd and two real rdzv-agents (torch 2.13,
gloo, CPU): examples/torch_hsdp_repair.py, 2 replicas x 2 shards, one
replica group per agent.  A rank SIGKILLed in the middle of a step: the
other replica's processes are the same and step on alone, the failed
replica's survivor keeps its process and waits, the dead rank alone is
started again, and after the heal (shard by shard, from the other
replica) every shard's digest (parameters and optimizer state) is equal
across the replicas.  rdzv.mesh's topology (plan) is checked without
torch; torch 1.13 refuses HSDP with a message that names the fix.
"""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))
import compatlib                                        # noqa: E402
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, conf, job_events           # noqa: E402
from rdzv import mesh                                   # noqa: E402

check = compatlib.check
_LINE = re.compile(r"(START|REPORT) (\{.*\})$", re.M)
_HEALED = re.compile(r"rank (\d+) \(replica (\d+) shard (\d+)\): healed in "
                     r"round \d+, 2 of 2 replicas step, [0-9.]+ s lost, at "
                     r"step (\d+)")
_SHRUNK = re.compile(r"rank (\d+) \(replica (\d+) shard \d+\): shrink round "
                     r"\d+, 1 of 2 replicas step")
DIE_STEP, DIE_HOME = 6, 1	# replica 0, shard 1


def _example():
    return os.path.join(rt.top_srcdir(), "examples", "torch_hsdp_repair.py")


def _docs(out, kind):
    return [json.loads(m[1]) for m in _LINE.findall(out) if m[0] == kind]


def test_plan():
    """The topology of a round from the ranks' posts (home, step)."""
    p = mesh.plan([(0, 5), (1, 5), (2, 5), (3, 5)], 2, 2)
    check(p["whole"] == [0, 1] and p["current"] == [0, 1] and
          p["stale"] == [] and p["donor"] == 0 and p["top"] == 5, p)
    # Home 1 died: replica 0 is not whole; replica 1 steps alone.
    p = mesh.plan([(0, 5), (2, 5), (3, 5)], 2, 2)
    check(p["whole"] == [1] and p["donor"] == 1 and p["live"] ==
          {0: 0, 2: 1, 3: 2}, p)
    # Its replacement (-1) is in: replica 0 is whole but stale, healed
    # from replica 1, which went on meanwhile.
    p = mesh.plan([(0, 5), (1, -1), (2, 9), (3, 9)], 2, 2)
    check(p["whole"] == [0, 1] and p["current"] == [1] and
          p["stale"] == [0] and p["donor"] == 1 and p["top"] == 9, p)
    # Ranks of one replica at different steps: that replica is stale.
    p = mesh.plan([(0, 4), (1, 5), (2, 5), (3, 5)], 2, 2)
    check(p["stale"] == [0] and p["donor"] == 1, p)
    # One replica (plain FSDP2) that lost a rank: no donor.
    p = mesh.plan([(0, 5), (1, -1)], 1, 2)
    check(p["donor"] is None and p["stale"] == [0], p)
    for bad in ([(0, 1), (0, 1)], [(7, 1)]):
        try:
            mesh.plan(bad, 2, 2)
        except ValueError as e:
            check("rdzv.mesh" in str(e), e)
        else:
            raise AssertionError("plan(%r) did not refuse" % (bad,))


def test_hsdp_kill_heals_from_peer():
    d = rt.Rdzvd()
    with Scope("repair-hsdp-") as s:
        argv = ["--nnodes", "2", "--nproc_per_node", "2",
                "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
                "--rdzv_id", "hsdp", "--max_restarts", "0", "--grace", "2",
                "--warm_spare", "0",
                "--rdzv_conf", conf(0.2, 5.0, "replicas=2")]
        # The replacement sleeps 2 s before it says ready: the healthy
        # replica steps on meanwhile (to the end of the job, or some way:
        # it heals replica 0 where it is either way).
        prog = [_example(), "--epochs", "1", "--samples", "512",
                "--die-at", str(DIE_STEP), str(DIE_HOME),
                "--replacement-delay", "2"]
        env = {"PYTHON": sys.executable, "GLOO_SOCKET_IFNAME": "lo",
               "OMP_NUM_THREADS": "1", "RDZV_REPAIR_DEBUG": "1"}
        a = s.agent(argv, env=env, program=prog)
        b = s.agent(argv, env=env, program=prog)
        for x in (a, b):
            rc = x.wait(180)
            check(rc == 0, (rc, "\n".join(
                ln[:300] for ln in (a.output() + b.output()).splitlines()
                if "Warning" not in ln and "[rank" not in ln)[-12000:]))
        out = a.output() + b.output()
        ev = job_events(d, "hsdp")
        starts, reports = _docs(out, "START"), _docs(out, "REPORT")
        why = "\n".join(ln[:300] for ln in out.splitlines()
                        if "Warning" not in ln)[-10000:] + \
            "\nevents: %s" % ev
        check(sorted(r["rank"] for r in reports) == [0, 1, 2, 3], why)
        first = {r["rank"]: r["pid"] for r in starts
                 if not r["replacement"]}
        again = [r for r in starts if r["replacement"]]
        check(sorted(first) == [0, 1, 2, 3], why)
        check([r["rank"] for r in again] == [DIE_HOME], why)
        for r in reports:
            if r["rank"] == DIE_HOME:
                check(r["pid"] == again[0]["pid"] != first[DIE_HOME], why)
            else:	# the other replica, and the survivor of its own
                check(r["pid"] == first[r["rank"]], (r, first))
        # Every shard's parameters and optimizer state agree across the
        # replicas, at the same step.
        for shard in (0, 1):
            ds = {r["digest"] for r in reports if r["shard"] == shard}
            check(len(ds) == 1, reports)
        check(len({r["steps"] for r in reports}) == 1, reports)
        check(len({r["digest"] for r in reports}) == 2, reports)
        # Replica 1 stepped on alone; replica 0 (the survivor and the
        # replacement) was healed at a later step than the death's.
        shrunk = {int(m[0]) for m in _SHRUNK.findall(out)}
        check(shrunk == {2, 3}, why)
        healed = {int(m[0]): int(m[3]) for m in _HEALED.findall(out)}
        check(sorted(healed) == [0, 1], why)
        check(all(st > DIE_STEP for st in healed.values()), healed)
        # rdzvd knows the topology: the lost rank's group, shard, donor.
        check("replica group 0 lost rank 1 (shard 1 of 2): it waits for "
              "its replacement, the other replicas step on; donor of "
              "shard 1: rank 3" in ev, ev)
        check(any(t.startswith("repair: shrink to 3") for t in ev), ev)
        check(any(t.startswith("repair: grow to 4") for t in ev), ev)
        check(not any(t.startswith("restart ") or "escalated" in t
                      for t in ev), ev)
        compatlib.log("healed at step %s after a death at step %d; "
                      "reports %s" % (healed, DIE_STEP, reports))
    d.stop()


def _fsdp2_run(d, s, job, ckpt, die):
    """examples/torch_hsdp_repair.py as plain FSDP2 (one replica of 4
    shards over 2 agents), DCP checkpoints every 4 steps in ckpt; die:
    (step, rank) to SIGKILL in the first attempt, or None.  Returns the
    reports and the agents' output."""
    argv = ["--nnodes", "2", "--nproc_per_node", "2",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
            "--max_restarts", "1", "--grace", "2", "--warm_spare", "0",
            "--rdzv_conf", conf(0.2, 5.0, "replicas=1")]
    prog = [_example(), "--replicas", "1", "--epochs", "1", "--samples",
            "256", "--checkpoint", ckpt, "--ckpt-every", "4"]
    if die is not None:
        prog += ["--die-at", str(die[0]), str(die[1])]
    env = {"PYTHON": sys.executable, "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1"}
    a = s.agent(argv, env=env, program=prog)
    b = s.agent(argv, env=env, program=prog)
    for x in (a, b):
        rc = x.wait(180)
        check(rc == 0, (rc, x.output()[-6000:]))
    out = a.output() + b.output()
    reports = _docs(out, "REPORT")
    check(sorted(r["rank"] for r in reports) == [0, 1, 2, 3], out[-6000:])
    return reports, out


def test_fsdp2_restarts_from_checkpoint():
    """One replica (plain FSDP2): no peer holds a lost shard, so a death
    restarts the job (rdzvd's event says why) and it resumes from its
    last DCP checkpoint, ending with every shard bit for bit as a run
    without the death ends."""
    d = rt.Rdzvd()
    with Scope("repair-fsdp2-") as s:
        clean, _ = _fsdp2_run(d, s, "fsdp2a", os.path.join(s.tmp, "a"), None)
        hurt, out = _fsdp2_run(d, s, "fsdp2b", os.path.join(s.tmp, "b"),
                               (6, 1))
        ev = job_events(d, "fsdp2b")
        check("no repair: one replica (plain FSDP2): no peer holds the "
              "lost shard, so the job restarts from its checkpoint" in ev, ev)
        check("restart 1 of 1" in ev, ev)
        check(len(re.findall(r"rank \d: resumed from checkpoint at step 4",
                             out)) == 4, out[-6000:])
        want = {r["rank"]: (r["steps"], r["digest"]) for r in clean}
        got = {r["rank"]: (r["steps"], r["digest"]) for r in hurt}
        check(want == got, (want, got))
    d.stop()


def test_replicas_must_divide_world():
    """--rdzv_conf replicas=3 for 2 nodes x 2 workers: the job fails as
    its round would form, before any worker starts, saying why and what
    to change."""
    d = rt.Rdzvd()
    with Scope("repair-hsdp-") as s:
        argv = ["--nnodes", "2", "--nproc_per_node", "2",
                "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
                "--rdzv_id", "hsdp3", "--max_restarts", "0",
                "--rdzv_conf", conf(0.2, 5.0, "replicas=3")]
        a = s.agent(argv, program=[_example()])
        b = s.agent(argv, program=[_example()])
        for x in (a, b):
            rc = x.wait(60)
            check(rc != 0, (rc, x.output()[-3000:]))
            check("replicas=3 does not divide the world of 4 ranks" in
                  x.output(), x.output()[-3000:])
            check("START" not in x.output(), x.output()[-3000:])
    d.stop()


def test_torch1_refuses_hsdp():
    """Debian's torch 1.13 has no FSDP2: the example says so and what to
    do, and exits non-zero."""
    py = rt.TORCH_PYTHON
    if not os.access(py, os.X_OK):
        rt.skip("no torch 1.13 python at %s" % py)
    r = subprocess.run([py, _example()], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, WORLD_SIZE="4"))
    check(r.returncode != 0, r)
    check("needs torch 2.6 or newer" in r.stderr and "1.13" in
          r.stderr and "job.ddp()" in r.stderr, r.stderr[-2000:])


if __name__ == "__main__":
    rt.main(globals(), per_test=200.0, total=300.0)
