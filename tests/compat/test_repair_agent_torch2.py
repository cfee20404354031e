# SPDX-License-Identifier: Apache-2.0
"""test_repair_agent_torch2: in-place repair of an unmodified-but-for-the-
helper torch 2.13 DDP script (examples/torch_ddp_repair.py, gloo) under a
real rdzvd and two real rdzv-agents of two workers each (issue 12).  A
SIGKILLed worker: rdzvd opens a shrink round then a grow round, the
survivors' PIDs never change, no restart is counted, and every rank
(the replacement too) ends with the same model and optimizer digest
(compatlib.repair_kill_in_place).  test_repair_agent_torch1.py runs it
under torch 1.13 (with an rdzvd kill -9 during the repair), and a job
that cannot repair.  A SIGSTOPped worker: the agents' --progress_timeout
watchdog kills it alone and that is repaired the same way.  rdzvd killed
-9 and restarted under a training torch job: its steps reach the new one.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope                             # noqa: E402


def test_torch_kill_repairs_in_place():
    d = rt.Rdzvd()
    with Scope("repair-torch-") as s:
        compatlib.repair_kill_in_place(d, s, "torchrep")
    d.stop()


def test_torch_stopped_rank_repairs_in_place():
    """SIGSTOP: the watchdog kills the stopped rank alone (its peers,
    blocked on it in gloo, say "wait"); that death is repaired."""
    d = rt.Rdzvd()
    with Scope("repair-torch-") as s:
        compatlib.repair_kill_in_place(d, s, "torchstop", stop=True)
    d.stop()


def test_torch_progress_through_rdzvd_kill9():
    """rdzvd killed -9 and restarted (same port, durability strict)
    while a torch job trains: its ranks' steps reach the new rdzvd
    (rdzvctl members' min_step rises past what it was before the
    kill), the job goes on untouched and succeeds."""
    from agent_lib import job_status
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    with Scope("repair-torch-") as s:
        a, b = compatlib.repair_agents(s, d, "torchprog", ["--limit",
            "12000", "--epochs", "5", "--batch", "32", "--hidden", "32",
            "--step-delay", "0.05"])
        compatlib.torch_surfaces(d, "torchprog")
        pids = set(a.children()) | set(b.children())
        d.kill9()
        d.start()
        compatlib.check(d.port == port, (d.port, port))
        rt.wait_until(lambda: job_status(d, "torchprog").count(
            " connected") == 2, timeout=30, what="both agents back")
        compatlib.torch_surfaces(d, "torchprog")
        compatlib.check(set(a.children()) | set(b.children()) == pids,
                        "a worker changed")
        for x in (a, b):
            rc = x.wait(180)
            compatlib.check(rc == 0, (rc, x.output()[-4000:]))
    d.stop()


if __name__ == "__main__":
    rt.main(globals(), per_test=400.0, total=800.0)
