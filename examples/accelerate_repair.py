#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""accelerate_plain.py and accelerate_repair.py: one Accelerate script, twice.

A small classifier (an MLP) on a seeded synthetic data set, AdamW, a
warm-up then linear-decay LR schedule, Accelerate's backward and gradient
clipping, the loss logged by one process.  accelerate_plain.py is the
script as people write it (everything through accelerator.prepare): under
rdzv-agent it runs as a plain job, and a worker's death restarts the job.
accelerate_repair.py is the same script repaired in place by rdzv.repair:
a worker's death costs the survivors one step, they keep their processes,
and the agent's replacement joins with the model, the optimizer's and the
schedule's state and the data position.  `diff -u examples/accelerate_plain.py
examples/accelerate_repair.py | grep -c '^[+-][^+-]'` counts 20 lines (a
plain DDP script's twin takes 18, a Lightning script's 3: Accelerate has no
strategy object the helper could stand in, so the script hands the helper
the group, the model's wrapper, the data and the step itself), these:

    from rdzv import repair                               # +
    job = repair.init_process_group("gloo")               # + before Accelerator()
    loader = job.loader(train, batch_size=B, seed=S,      # was DataLoader(shuffle=True)
                        policy="global")                  #   (not prepared)
    model = job.ddp(Net())                                # was Net() (not prepared)
    job.track(opt, sched)                                 # + what a replacement receives
    opt, sched = accelerator.prepare(opt, sched)          # was model, opt, loader, sched
    for epoch in job.epochs(EPOCHS):                      # was range(EPOCHS)
        for x, y in loader:
            with job.step():                              # + the step, or a repair
                loss = train_step(accelerator, model, ...)  # (indented)
            if not job.committed:                         # + cut off: the batch again
                continue
            step = job.step_count                         # was step += 1
            if job.home == 0 ...: print(loss)             # was accelerator.is_main_process

Why each, from accelerate 1.15's source:
- The group is the helper's: each repair destroys torch's default group
  and makes it again on the new ranks.  Accelerate's PartialState makes
  one only when none exists (`if not torch.distributed.is_initialized()`,
  MULTI_CPU here, the GPU backends too), so the helper's, made first, is
  the one Accelerate uses, and every collective of Accelerate's
  (reduce, gather, wait_for_everyone) goes to the current group.
- The model is not prepared: prepare_model wraps it in a
  DistributedDataParallel of its own, fixed to the group of the moment
  (and would wrap job.ddp's a second time).  job.ddp's is a
  DistributedDataParallel that each repair initialises again on the new
  group; accelerator.backward(), clip_grad_norm_() and unwrap_model() take
  it as they take Accelerate's.
- The DataLoader is not prepared: Accelerate shards it (BatchSamplerShard)
  by the process index and count it read at the start, and keeps no
  position a replacement could resume from.  job.loader's position moves
  only when a step commits and is resharded at each repair (no sample
  trained twice or skipped within an epoch).  policy="global" keeps the
  global batch of a failure-free run (B per process at the full world,
  shared among the survivors while the job is short), so each step trains
  what it would have and an epoch keeps its number of steps.
- The optimizer and the scheduler go through prepare (AcceleratedOptimizer
  and AcceleratedScheduler only delegate to them) and are tracked, the
  unwrapped objects, so that a replacement receives the moments and the
  schedule's step.  AcceleratedScheduler steps the schedule once per
  process per optimizer step, counting the processes it read when the
  Accelerator was made: the job's full world on every process, the
  survivors included (their count is not updated by a shrink), which with
  policy="global" is the right count: the schedule advances as in a
  failure-free run.
- job.step() around the step: a peer's death in it (gloo raises within
  ~0.1 s, in DDP's allreduce) repairs the job and drops the step; the
  same batch comes again in the new group.
- Logging from job.home == 0, the process that started as rank 0 and
  then its replacement: accelerator.is_main_process is process_index == 0,
  read once at the start (see below).

What does not survive a repair, because Accelerate reads it once, when
the Accelerator is made (PartialState caches it):
- accelerator.process_index, num_processes, is_main_process,
  is_last_process: the values at the process's start.  With rank 0
  killed, the shrink made home 1 the group's rank 0 while its
  process_index stayed 1 and num_processes 4 in a world of 3; the
  replacement got rank 0 back in the grow (so is_main_process was right
  again, but that is the grow's order, not a promise).  Read job.rank,
  job.world (or dist.get_rank(), get_world_size()) where they are used,
  and job.home for "one process logs".
- accelerator.gather() (and gather_for_metrics, pad_across_processes)
  allocate num_processes outputs: while the job is short of ranks gloo
  refuses them (RuntimeError: "invalid output tensor list").
  accelerator.reduce(t, "mean") divides a sum over the live ranks by the
  process count of the start.  Called outside job.step(), a death cutting
  them repairs the job and they return without a result
  (rdzv.collectives).
- A prepared DataLoader (its shards and seed), save_state()/load_state()
  (the model is not in accelerator._models; use job.save()/job.load()),
  trackers made by init_trackers() on is_main_process, and
  gradient_accumulation_steps > 1 (a repair loses the gradients
  accumulated so far: one job.step() per optimizer step) are untested or
  known not to follow a repair.  A replacement that joins a world smaller
  than the job's full one (two deaths, one replacement ready) would count
  fewer processes in its AcceleratedScheduler than the survivors: in such
  an elastic job step the schedule unprepared.  CPU and gloo are what is
  tested (tests/compat/test_accelerate_repair.py); on GPUs the batches
  need .to(accelerator.device) and job.ddp(model, device_ids=[...])
  (untested).  On a CPU-only torch, Accelerator() without cpu=True (or
  ACCELERATE_USE_CPU=1, which `accelerate launch --cpu` sets) is
  DistributedType.NO, one process on its own: hence cpu=True here.

    PYTHONPATH=python rdzv-agent --standalone --nproc_per_node 4 \\
        examples/accelerate_repair.py

(RDZV_SPARE_IMPORTS=accelerate has the agent's warm spare import
Accelerate before it is needed.)  --gate DIR --wait-at STEP are for the
tests: after step STEP each process writes DIR/atSTEP.RANK (its pid) and
waits for DIR/goSTEP.
"""

import argparse
import hashlib
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate import Accelerator
from rdzv import repair
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


def gate(d, step):
    """Tests: says this process waits after step (d/at<step>.<RANK>: its
    pid) and waits until d/go<step> exists."""
    p = os.path.join(d, "at%d.%s" % (step, os.environ.get("RANK", "0")))
    with open(p + ".tmp", "w") as f:
        f.write(str(os.getpid()))
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

    job = repair.init_process_group("gloo")
    accelerator = Accelerator(cpu=True)
    train = synthetic(a.samples, a.seed)
    # Accelerate steps the schedule once per process per optimizer step:
    # it is written in one process's steps.
    total = a.epochs * (a.samples // a.batch)
    warm = total // 10
    loader = job.loader(train, batch_size=a.batch, seed=a.seed, policy="global")
    model = job.ddp(Net())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm))))
    job.track(opt, sched)
    opt, sched = accelerator.prepare(opt, sched)
    step = 0
    for epoch in job.epochs(a.epochs):
        for x, y in loader:
            with job.step():
                loss = train_step(accelerator, model, opt, sched, x, y, a.clip)
            if not job.committed:
                continue
            step = job.step_count
            if job.home == 0 and step % a.log_every == 0:
                print("epoch %d step %d loss %.4f lr %.2e" % (epoch, step, loss.item(),
                                                              sched.get_last_lr()[0]), flush=True)
            if a.gate and step in a.wait_at:
                gate(a.gate, step)
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
