#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""accelerate_plain.py and accelerate_repair.py: one Accelerate script, twice.

A small classifier (an MLP) on a seeded synthetic data set, AdamW, a
warm-up then linear-decay LR schedule, Accelerate's backward and gradient
clipping, each step in accelerator.accumulate(model), the loss logged by
one process.  accelerate_plain.py is the script as people write it
(everything through accelerator.prepare): under rdzv-agent it runs as a
plain job, and a worker's death restarts the job.  accelerate_repair.py
is the same script on rdzv.accelerate's Accelerator, repaired in place: a
worker's death costs the survivors one step, they keep their processes,
and the agent's replacement joins with the model, the optimizer's and the
schedule's state and the data position.  `diff -u examples/accelerate_plain.py
examples/accelerate_repair.py | grep -c '^[+-][^+-]'` counts 4 lines (a
plain DDP script's twin takes 18, a Lightning script's 3), these:

    from rdzv.accelerate import Accelerator     # was from accelerate
    step = accelerator.step_count               # was step += 1

The import is the repair: rdzv.accelerate's Accelerator makes the group
with rdzv.repair before Accelerate's own, wraps the model with job.ddp()
in prepare (not Accelerate's DDP, fixed to the group of its making),
tracks the optimizer and the scheduler (a replacement receives them),
makes the shuffled train DataLoader job.loader(..., policy="global") (the
global batch of a failure-free run at the job's position, resharded at
each repair; no sample trained twice or skipped within an epoch), runs
accumulate() inside job.step(), and reads process_index, num_processes
and is_main_process live (is_main_process is home 0: the process that
started as rank 0, then its replacement; see python/rdzv/accelerate.py).
A step cut by a peer's death is dropped: accumulate() swallows the error,
sync_gradients is False after it, so `if not accelerator.sync_gradients:
continue` -- how an Accelerate script skips what follows a step that took
no optimizer step -- skips it too, and the loader yields the same batch
again in the new group.  The step counter is the one line a script must
change: a local count starts at 0 in a replacement, the job's is the
donor's (accelerator.step_count).

What does not follow a repair (python/rdzv/accelerate.py lists it):
accelerate's PartialState keeps the start's ranks, so AcceleratedScheduler
steps the schedule once per process of the start per optimizer step (the
full world: right with policy="global", the schedule advances as in a
failure-free run; a replacement joining a smaller world counts fewer);
gather_for_metrics and evaluation loaders stay sharded for the start's
world; save_state(), trackers and gradient_accumulation_steps > 1 are
untested or refused.  CPU and gloo are what is tested
(tests/compat/test_accelerate_repair.py).  On a CPU-only torch,
Accelerator() without cpu=True (or ACCELERATE_USE_CPU=1, which
`accelerate launch --cpu` sets) is DistributedType.NO, one process on its
own: hence cpu=True here (rdzv.accelerate's passes it itself).

    PYTHONPATH=python rdzv-agent --standalone --nproc_per_node 4 \\
        examples/accelerate_repair.py

(RDZV_SPARE_IMPORTS=accelerate has the agent's warm spare import
Accelerate before it is needed.)  --gate DIR --wait-at STEP are for the
tests: after step STEP each process writes DIR/atSTEP.RANK (its pid, who
it is to the group and to Accelerate) and waits for DIR/goSTEP.
"""

import argparse
import hashlib
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from rdzv.accelerate import Accelerator
from torch.utils.data import TensorDataset


class Net(torch.nn.Module):
    def __init__(self, d_in=16, hidden=64, classes=4):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.GELU(),
                                        torch.nn.Linear(hidden, classes))

    def forward(self, x):
        return self.body(x)


def synthetic(n, seed):
    """n samples of 16 features, labelled by a fixed random teacher (with
    noise): the same on every process."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, 4, generator=g)
    y = (x @ w + 0.5 * torch.randn(n, 4, generator=g)).argmax(1)
    return TensorDataset(x, y)


def train_step(accelerator, model, opt, sched, x, y, clip):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    sched.step()
    return loss.detach()


def gate(d, step, accelerator):
    """Tests: says this process waits after step (d/at<step>.<RANK>: its
    pid, its group rank and world, Accelerate's process_index,
    num_processes, is_main_process and reduce(1, "mean")) and waits until
    d/go<step> exists."""
    mean = accelerator.reduce(torch.ones(1), "mean").item()
    p = os.path.join(d, "at%d.%s" % (step, os.environ.get("RANK", "0")))
    with open(p + ".tmp", "w") as f:
        f.write("%d %d %d %d %d %d %g" % (os.getpid(), dist.get_rank(), dist.get_world_size(),
                                          accelerator.process_index, accelerator.num_processes,
                                          accelerator.is_main_process, mean))
    os.rename(p + ".tmp", p)
    while not os.path.exists(os.path.join(d, "go%d" % step)):
        time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8, help="per process")
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--log-every", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gate", help="tests: the gate files' directory")
    ap.add_argument("--wait-at", type=int, action="append", default=[])
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)

    accelerator = Accelerator(cpu=True)
    train = synthetic(a.samples, a.seed)
    # Accelerate steps the schedule once per process per optimizer step:
    # it is written in one process's steps.
    total = a.epochs * (a.samples // a.batch)
    warm = total // 10
    loader = torch.utils.data.DataLoader(train, batch_size=a.batch, shuffle=True)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm))))
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    step = 0
    for epoch in range(a.epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = train_step(accelerator, model, opt, sched, x, y, a.clip)
            if not accelerator.sync_gradients:  # no optimizer step
                continue
            step = accelerator.step_count
            if accelerator.is_main_process and step % a.log_every == 0:
                print("epoch %d step %d loss %.4f lr %.2e" % (epoch, step, loss.item(),
                                                              sched.get_last_lr()[0]), flush=True)
            if a.gate and step in a.wait_at:
                gate(a.gate, step, accelerator)
    accelerator.wait_for_everyone()
    net = accelerator.unwrap_model(model)
    with torch.no_grad():
        x, y = train.tensors
        final = F.cross_entropy(net(x), y).item()
        digest = hashlib.sha256(b"".join(p.numpy().tobytes() for p in net.parameters()))
    # What the group is now, and what Accelerate read at the start.
    now = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    print("FINAL rank %s pid %d step %d loss %.9f digest %s group %d of %d, accelerate's "
          "process_index %d of %d" % (
              os.environ.get("RANK", "0"), os.getpid(), step, final, digest.hexdigest()[:16],
              now[0], now[1], accelerator.process_index, accelerator.num_processes), flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
