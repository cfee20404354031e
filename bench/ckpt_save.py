#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ckpt_save.py: what a checkpoint costs the training loop: rdzv.repair's
job.save() (torch.distributed.checkpoint, synchronous, renamed complete)
beside DCP's own dcp.save and dcp.async_save, 2 ranks, gloo, the CPU.

    python3 bench/ckpt_save.py [--python PY] [--mib 64,256] [--runs 5]

Each rank holds an MLP of about MIB MiB of float32 parameters and its
AdamW state (twice that again), as job.ddp() and job.track() give them,
and saves into a fresh directory under /tmp: the time the training
thread is blocked (for async_save: until the call returns, the state
staged; and until its future completes), medians of --runs saves, the
two ranks' larger.  job.save() runs here without rdzv-agent (no repair:
the cost of the save itself and of its rename).
"""

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)

WORKER = r'''
import os, shutil, statistics, sys, tempfile, time
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from rdzv import repair

mib, runs = int(sys.argv[1]), int(sys.argv[2])
job = repair.init_process_group("gloo")
torch.manual_seed(0)
width = int((mib * 2 ** 20 / 4 / 2) ** 0.5)
net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                          torch.nn.Linear(width, width))
model = job.ddp(net)
opt = job.track(torch.optim.AdamW(model.parameters(), lr=1e-3))
model(torch.randn(4, width)).sum().backward()
opt.step()
root = tempfile.mkdtemp(prefix="ckpt-bench-", dir="/tmp")
obj = [root]
dist.broadcast_object_list(obj, 0)
root = obj[0]
got = {"job.save": [], "dcp.save": [], "async_save returns": [],
       "async_save done": []}
sd = {"model": net.state_dict(), "optim": opt.state_dict()}
for i in range(runs):
    dist.barrier()
    t = time.monotonic()
    job.save(os.path.join(root, "job"))
    got["job.save"].append(time.monotonic() - t)
    job.step_count += 1
    dist.barrier()
    t = time.monotonic()
    dcp.save(sd, checkpoint_id=os.path.join(root, "dcp%d" % i))
    got["dcp.save"].append(time.monotonic() - t)
    dist.barrier()
    t = time.monotonic()
    f = dcp.async_save(sd, checkpoint_id=os.path.join(root, "async%d" % i))
    got["async_save returns"].append(time.monotonic() - t)
    f.result()
    got["async_save done"].append(time.monotonic() - t)
meds = {k: statistics.median(v) for k, v in got.items()}
out = [None, None]
dist.all_gather_object(out, meds)
if dist.get_rank() == 0:
    size = sum(os.path.getsize(os.path.join(dp, f))
               for dp, _, fs in os.walk(os.path.join(root, "dcp0"))
               for f in fs)
    print("RESULT %d MiB of parameters, %.0f MiB on disk a checkpoint"
          % (mib, size / 2 ** 20))
    for k in got:
        print("RESULT   %-20s %.3f s" % (k, max(o[k] for o in out)))
    shutil.rmtree(root, ignore_errors=True)
dist.destroy_process_group()
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python",
                    default="/root/.cache/rdzv/torch-2.13/bin/python")
    ap.add_argument("--mib", default="64,256")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"),
               GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    env.pop("RDZV_PROGRESS_FD", None)
    fd, prog = tempfile.mkstemp(prefix="ckpt-bench-", suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(WORKER)
    for mib in a.mib.split(","):
        r = subprocess.run([a.python, "-m", "torch.distributed.run",
                            "--standalone", "--nproc_per_node", "2", prog,
                            mib, str(a.runs)], env=env,
                           capture_output=True, text=True, timeout=1800)
        lines = [ln[len("RESULT "):] for ln in r.stdout.splitlines()
                 if ln.startswith("RESULT ")]
        if r.returncode != 0 or not lines:
            print(r.stdout[-2000:], r.stderr[-3000:], file=sys.stderr)
            return 1
        print("\n".join(lines), flush=True)
    os.unlink(prog)
    return 0


if __name__ == "__main__":
    sys.exit(main())
