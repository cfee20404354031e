# SPDX-License-Identifier: Apache-2.0
"""test_repair_agent_torch1: test_repair_agent_torch2's in-place repair
under torch 1.13 (Debian's, the python running the test): a real rdzvd,
two real rdzv-agents of two workers each running
examples/torch_ddp_repair.py (gloo); a SIGKILLed worker brings a shrink
round then a grow round, the survivors' PIDs never change, no restart is
counted, and every rank ends with the same model and optimizer digest
(issue 12).  In the same run rdzvd is killed -9 and restarted on its
database while the survivors step in the shrink round and the
replacement starts: the repair resumes (the grow comes all the same).
One agent's workers cannot repair (RDZV_REPAIR=0: the helper never says
hello): a SIGKILL of a worker that can restarts the whole job (restart
1, every worker new, no repair round) and it succeeds.  A worker that
dies before its job.ddp(), while its peers are in DistributedDataParallel's
constructor, had not offered repair yet: the job restarts and succeeds.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.require_torch()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, job_events as events       # noqa: E402


def test_torch113_kill_repairs_in_place_through_rdzvd_kill9():
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    with Scope("repair-torch1-") as s:
        compatlib.repair_kill_in_place(d, s, "torch1rep", kill9=True)
    d.stop()


def test_torch113_not_repairable_restarts():
    """RDZV_REPAIR=0 on one node: a failure restarts the whole job."""
    d = rt.Rdzvd()
    job = "torch1norep"
    with Scope("repair-torch1-") as s:
        a, b = compatlib.repair_agents(
            s, d, job, ["--limit", "6000", "--epochs", "2", "--batch", "32",
                        "--hidden", "32", "--step-delay", "0.02"],
            env_b={"RDZV_REPAIR": "0"})
        before = set(a.children()) | set(b.children())
        os.kill(sorted(a.children())[0], signal.SIGKILL)
        rt.wait_until(lambda: any(t.startswith("restart 1 of")
                                  for t in events(d, job)),
                      timeout=60, what="a restart")
        rt.wait_until(lambda: len(a.children()) == 2 and
                      len(b.children()) == 2 and
                      not (set(a.children()) | set(b.children())) & before,
                      timeout=60, what="4 new workers")
        for x in (a, b):
            rc = x.wait(180)
            assert rc == 0, (rc, x.output()[-4000:])
        reports = compatlib.repair_reports(a.output() + b.output())
    assert sorted(r["rank"] for r in reports) == [0, 1, 2, 3], reports
    assert len({r["digest"] for r in reports}) == 1, reports
    assert not {r["pid"] for r in reports} & before, (reports, before)
    assert not any(r["repairs"] for r in reports), reports
    ev = events(d, job)
    # The killed worker's agent asks for a repair, which rdzvd refuses
    # (unless a survivor that cannot repair reported its own failure
    # first: then it is a plain restart).
    assert all("cannot repair" in t for t in ev if "escalated" in t), ev
    assert not any(t.startswith("repair: ") for t in ev), ev
    assert d.metric("rdzvd_repairs_total") == 0
    assert d.metric("rdzvd_restarts_total") == 1
    d.stop()


def test_torch113_death_before_ddp_restarts():
    """Rank 3 dies just before its job.ddp(), its peers in DDP's first
    broadcast: it had not offered repair (a worker offers it at its first
    job.ddp() or job.step()), so the job restarts as a plain job does,
    and every rank ends with the same digest."""
    d = rt.Rdzvd()
    job = "torch1ddp"
    with Scope("repair-torch1-") as s:
        a, b = compatlib.repair_agents(
            s, d, job, ["--limit", "6000", "--epochs", "2", "--batch", "32",
                        "--hidden", "32", "--crash-before-ddp", "3"])
        for x in (a, b):
            rc = x.wait(180)
            assert rc == 0, (rc, x.output()[-4000:])
        out = a.output() + b.output()
    assert "rank 3: SIGKILL to myself before DDP()" in out, out[-4000:]
    reports = compatlib.repair_reports(out)
    assert sorted(r["rank"] for r in reports) == [0, 1, 2, 3], reports
    assert len({r["digest"] for r in reports}) == 1, reports
    assert not any(r["replacement"] for r in reports), reports
    ev = events(d, job)
    assert any(t.startswith("restart 1 of") for t in ev), ev
    assert not any(t.startswith("repair") for t in ev), ev
    d.stop()


if __name__ == "__main__":
    rt.main(globals(), per_test=400.0, total=800.0)
