#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""warm_restart.py: kill to training again for a Lightning job that
restarts (it cannot repair in place), under rdzv-agent with warm spares,
rdzv-agent with cold workers, and torchrun 2.13.

    RDZV_TOP_BUILDDIR=build python3 bench/warm_restart.py [--runs 3]
        [--python /root/.cache/rdzv/torch-2.13/bin/python]
        [--sides warm,cold,torchrun]

One node, 2 workers (--standalone), Lightning 2.6's own DDP on the CPU
(a linear model, batches of 8) with --max_restarts 1:

  warm      rdzv-agent, RDZV_SPARE_IMPORTS=lightning: once the workers
            have run a while (30 s: the job reports no steps) the agent
            keeps one spare python per worker that has imported torch
            and Lightning; the kill waits until
            both are warm (named rdzv-spare), and the restart's workers
            are those spares;
  cold      rdzv-agent --warm_spare 0: the restart starts new pythons;
  torchrun  python -m torch.distributed.run with
            TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (without it torchrun 2.13
            hands the restarted workers the dead attempt's store keys and
            hangs after such a kill).

Each worker writes CLOCK_MONOTONIC at its attempt's first training step;
the figure is from the SIGKILL of rank 1 to the later of the two ranks'
first step of attempt 1.  Medians of --runs runs, sides interleaved.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(TOP, "tests", "lib"),
                os.path.join(TOP, "tests", "integ")]
from agent_lib import PL_LINEAR, children  # noqa: E402
from rdzvtest import wait_until  # noqa: E402

PROGRAM = r'''
import os, sys, time
import torch
import lightning.pytorch as pl

d = sys.argv[1]
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")

''' + PL_LINEAR + r'''

class Mark(pl.Callback):
    def __init__(self):
        self.first = True

    def on_train_batch_end(self, trainer, *a):
        if self.first:
            self.first = False
            p = os.path.join(d, "step.%s.%s" % (attempt,
                                                os.environ["RANK"]))
            with open(p + ".tmp", "w") as f:
                f.write("%d %.6f" % (os.getpid(), time.monotonic()))
            os.rename(p + ".tmp", p)
        done = os.path.exists(os.path.join(d, "finish"))
        if trainer.strategy.reduce_boolean_decision(done, all=False):
            trainer.should_stop = True
        time.sleep(0.01)


torch.manual_seed(0)
x = torch.randn(256, 4)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
trainer = pl.Trainer(accelerator="cpu", strategy="ddp", devices=2,
                     max_epochs=100000, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=d,
                     callbacks=[Mark()])
trainer.fit(Net(), torch.utils.data.DataLoader(data, batch_size=8))
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
'''


def marks(d, attempt):
    out = {}
    for r in (0, 1):
        p = os.path.join(d, "step.%d.%d" % (attempt, r))
        if os.path.exists(p):
            with open(p) as f:
                pid, t = f.read().split()
            out[r] = (int(pid), float(t))
    return out


def one(side, py, build):
    d = tempfile.mkdtemp(prefix="warm-restart-")
    prog = os.path.join(d, "train.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"),
               GLOO_SOCKET_IFNAME="lo")
    if side == "torchrun":
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        argv = [py, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node", "2", "--max_restarts", "1", prog, d]
    else:
        env["PYTHON_EXEC"] = py
        env["RDZV_SPARE_IMPORTS"] = "lightning,lightning.pytorch"
        argv = [os.path.join(build, "agent", "rdzv-agent"), "--standalone",
                "--nproc_per_node", "2", "--max_restarts", "1",
                "--warm_spare", "1" if side == "warm" else "0", prog, d]
    log = open(os.path.join(d, "out"), "w")
    p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        wait_until(lambda: len(marks(d, 0)) == 2, 180,
                   what="attempt 0 training")
        if side == "warm":
            wait_until(lambda: len(children([p.pid], "rdzv-spare",
                                            spares=True)) == 2,
                       180, what="2 warm spares")
            time.sleep(1.0)	# their imports done: they wait named
        victim = marks(d, 0)[1][0]
        t0 = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        m = wait_until(lambda: len(marks(d, 1)) == 2 and marks(d, 1), 180,
                       what="attempt 1 training")
        took = max(t for _, t in m.values()) - t0
        open(os.path.join(d, "finish"), "w").close()
        p.wait(120)
        return took
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        log.close()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--python",
                    default="/root/.cache/rdzv/torch-2.13/bin/python")
    ap.add_argument("--sides", default="warm,cold,torchrun")
    a = ap.parse_args()
    build = os.environ.get("RDZV_TOP_BUILDDIR", os.path.join(TOP, "build"))
    sides = a.sides.split(",")
    got = {s: [] for s in sides}
    for run in range(a.runs):
        for s in sides[run % len(sides):] + sides[:run % len(sides)]:
            t = one(s, a.python, build)
            got[s].append(t)
            print("run %d %-8s kill -> training again %.2f s" % (run, s, t),
                  flush=True)
    base = statistics.median(got["torchrun"]) if "torchrun" in got else None
    for s in sides:
        v = got[s]
        med = statistics.median(v)
        print("%-8s median %.2f s (%.2f-%.2f, %d runs)%s" % (
            s, med, min(v), max(v), len(v),
            "" if base is None else "  %.2fx torchrun's" % (med / base)))


if __name__ == "__main__":
    sys.exit(main())
