"""test_repair_agent_torch1: test_repair_agent_torch2's in-place repair
under torch 1.13 (Debian's, the python running the test): a real rdzvd,
two real rdzv-agents of two workers each running
examples/torch_ddp_repair.py (gloo); a SIGKILLed worker brings a shrink
round then a grow round, the survivors' PIDs never change, no restart is
counted, and every rank ends with the same model and optimizer digest
(issue 12).  In the same run rdzvd is killed -9 and restarted on its
database while the survivors step in the shrink round and the
replacement starts: the repair resumes (the grow comes all the same).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.require_torch()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope                             # noqa: E402


def test_torch113_kill_repairs_in_place_through_rdzvd_kill9():
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    with Scope("repair-torch1-") as s:
        compatlib.repair_kill_in_place(d, s, "torch1rep", kill9=True)
    d.stop()


if __name__ == "__main__":
    rt.main(globals(), per_test=400.0, total=420.0)
