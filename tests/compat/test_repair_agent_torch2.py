"""test_repair_agent_torch2: in-place repair of an unmodified-but-for-the-
helper torch 2.13 DDP script (examples/torch_ddp_repair.py, gloo) under a
real rdzvd and two real rdzv-agents of two workers each (issue 12).  A
SIGKILLed worker: rdzvd opens a shrink round then a grow round, the
survivors' PIDs never change, no restart is counted, and every rank
(the replacement too) ends with the same model and optimizer digest.
"""

import json
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, conf, job_events as events  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
REPORT_RE = re.compile(r"REPORT (\{.*\})$", re.M)
STEP_RE = re.compile(r"STEP (\d+) (\d+) (\d+) ", re.M)


def example():
    return os.path.join(rt.top_srcdir(), "examples", "torch_ddp_repair.py")


def test_torch_kill_repairs_in_place():
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        rt.skip_all("no Fashion-MNIST at %s (Debian's dataset-fashion-mnist)"
                    % DATA)
    d = rt.Rdzvd()
    job = "torchrep"
    argv = ["--nnodes", "2", "--nproc_per_node", "2",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
            "--max_restarts", "2", "--grace", "2",
            "--rdzv_conf", conf(0.2, 5.0)]
    # Long enough (>= 470 steps of >= 50 ms) that the survivors are still
    # training when the replacement, importing torch, is ready to join.
    prog = [example(), "--limit", "12000", "--epochs", "5", "--batch", "32",
            "--hidden", "32", "--step-delay", "0.05", "--log-steps",
            "--report"]
    env = {"PYTHON": sys.executable, "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1"}
    with Scope("repair-torch-") as s:
        a = s.agent(argv, env=env, program=prog)
        b = s.agent(argv, env=env, program=prog)
        rt.wait_until(lambda: len(a.children()) == 2 and
                      len(b.children()) == 2 and
                      len(STEP_RE.findall(a.output() + b.output())) >= 8,
                      timeout=120, what="4 torch workers stepping")
        survivors = set(a.children())
        victim, other = sorted(b.children())
        survivors.add(other)
        t0 = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        rt.wait_until(lambda: any(t.startswith("repair: grow")
                                  for t in events(d, job)),
                      timeout=120, what="the grow round")
        print("  SIGKILL -> grow round: %.1f s" % (time.monotonic() - t0))
        now = set(a.children()) | set(b.children())
        assert survivors <= now, (survivors, now)
        assert victim not in now
        for x in (a, b):
            rc = x.wait(180)
            assert rc == 0, (rc, x.output()[-4000:])
        out = a.output() + b.output()
    reports = [json.loads(m) for m in REPORT_RE.findall(out)]
    assert sorted(r["rank"] for r in reports) == [0, 1, 2, 3], out[-4000:]
    assert len({r["digest"] for r in reports}) == 1, reports
    assert {r["pid"] for r in reports if not r["replacement"]} <= survivors, \
        (reports, survivors)
    assert sum(1 for r in reports if r["replacement"]) == 1, reports
    ev = events(d, job)
    assert any(t.startswith("repair: shrink to 3") for t in ev), ev
    assert not any(t.startswith("restart ") or "escalated" in t
                   for t in ev), ev
    assert d.metric("rdzvd_repairs_total") == 2
    assert d.metric("rdzvd_restarts_total") == 0
    d.stop()


if __name__ == "__main__":
    rt.main(globals(), per_test=400.0, total=420.0)
