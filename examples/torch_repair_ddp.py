#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch_plain_ddp.py and torch_repair_ddp.py: one plain DDP script, twice.

Fashion-MNIST, a small MLP, DistributedSampler + DataLoader with worker
processes, AdamW with a per-step warm-up schedule, a logging all_reduce
every --log-every steps.  torch_plain_ddp.py is the script as people
write it: under torchrun or rdzv-agent a worker's death restarts the job.
torch_repair_ddp.py is the same script made to repair in place with
rdzv.repair: `diff examples/torch_plain_ddp.py examples/torch_repair_ddp.py`
shows every line it took.

    rdzv-agent --standalone --nproc_per_node 4 examples/torch_repair_ddp.py
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.join(_here, "..", "python")]	# a source tree
from torch_ddp_repair import Net, load  # noqa: E402  (data and model)
from rdzv import repair  # noqa: E402


class FashionMNIST(torch.utils.data.Dataset):
    """(image, label, sample index) of one split."""

    def __init__(self, split, limit):
        self.x, self.y = load(split, limit)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def train_step(model, opt, sched, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    sched.step()
    return loss.detach()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--limit", type=int, default=0, help="first N samples")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader's")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--log-ids", action="store_true",
        help="tests: 'COMMIT epoch step world rank time ids' per step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--die-at-log", type=int, nargs=2, metavar=("STEP", "RANK"),
        help="tests: rank RANK (not a replacement) SIGKILLs itself before "
        "the logging all_reduce of step STEP")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)

    job = repair.init_process_group("gloo")
    print("rank %d of %d starts" % (dist.get_rank(), dist.get_world_size()),
        flush=True)
    train, test = FashionMNIST("train", a.limit), FashionMNIST("t10k", 0)
    loader = job.loader(train, batch_size=a.batch, seed=a.seed, num_workers=a.workers, prefetch_factor=4)
    model = job.ddp(Net(a.hidden))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    job.track(opt, sched)
    step = 0
    for epoch in job.epochs(a.epochs):
        for x, y, ids in loader:
            with job.step():
                loss = train_step(model, opt, sched, x, y)
            if not job.committed: continue  # a peer died: the batch comes again
            step = job.step_count
            if a.log_ids:
                print("COMMIT %d %d %d %d %.6f %s" % (epoch, step,
                    dist.get_world_size(), dist.get_rank(), time.time(),
                    ",".join(map(str, ids.tolist()))), flush=True)
            if step % a.log_every == 0:
                if a.die_at_log == [step, dist.get_rank()] and not os.environ.get("RDZV_REPLACEMENT"):
                    os.kill(os.getpid(), 9)
                dist.all_reduce(loss)
                if dist.get_rank() == 0:
                    print("epoch %d step %d loss %.4f lr %.2e" % (epoch, step, loss.item() / dist.get_world_size(), sched.get_last_lr()[0]), flush=True)
    with torch.no_grad():
        out = model.module(test.x)
        tl, acc = F.cross_entropy(out, test.y).item(), (out.argmax(1) == test.y).float().mean().item()
    print("FINAL rank %d step %d test_loss %.4f test_acc %.4f" % (dist.get_rank(), step, tl, acc), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
