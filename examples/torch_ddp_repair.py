#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch_ddp_repair.py: Fashion-MNIST with torch DDP that repairs in place.

Runs as it is under rdzv-agent (a worker's death costs the others one
step: they go on in a smaller group and the agent's replacement joins
with their state), under torchrun (no repair: torchrun restarts), or on
its own (one process, no group):

    rdzv-agent --standalone --nproc_per_node 4 examples/torch_ddp_repair.py
    torchrun --nproc_per_node 4 examples/torch_ddp_repair.py
    python3 examples/torch_ddp_repair.py

The lines marked "rdzv" are all that differ from a plain DDP script.
Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist,
FASHION_MNIST_DIR moves it).
"""

import argparse
import gzip
import hashlib
import json
import os
import signal
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
    "..", "python"))		# a source tree; installed, rdzv is on the path
from rdzv import repair		# rdzv


def load_idx(path):
    """An IDX file (gzip'ed) as a uint8 tensor of its shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] != 8:
        raise ValueError("%s: not an IDX file of bytes" % path)
    nd = data[3]
    dims = struct.unpack(">%dI" % nd, data[4:4 + 4 * nd])
    n = 1
    for d in dims:
        n *= d
    body = data[4 + 4 * nd:]
    if len(body) != n:
        raise ValueError("%s: %d bytes for shape %s" % (path, len(body),
            dims))
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).view(*dims)


def load(split, limit):
    d = os.environ.get("FASHION_MNIST_DIR",
        "/usr/share/datasets/fashion-mnist")
    x = load_idx(os.path.join(d, "%s-images-idx3-ubyte.gz" % split))
    y = load_idx(os.path.join(d, "%s-labels-idx1-ubyte.gz" % split))
    if limit:
        x, y = x[:limit], y[:limit]
    x = (x.reshape(len(x), -1).float() / 255.0 - 0.2860) / 0.3530
    return x, y.long()


class Net(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, hidden)
        self.fc2 = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def digest(module, opt):
    """sha256 of the parameters' and the optimizer state's bytes."""
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().numpy().tobytes())
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v):
                h.update(v.numpy().tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0,
        help="use the first N training samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step-delay", type=float, default=0.0,
        help="seconds to sleep in each step (tests, benchmarks)")
    ap.add_argument("--log-steps", action="store_true",
        help="print 'STEP rank step world time' after each step")
    ap.add_argument("--report", action="store_true",
        help="end with a line 'REPORT {json}'")
    ap.add_argument("--crash-before-ddp", type=int, default=-1,
        metavar="RANK", help="tests: rank RANK of the job's first "
        "attempt (not a replacement) SIGKILLs itself just before "
        "job.ddp(), while its peers are in DDP's first broadcast")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)

    # The data first: a replacement (or a node joining in place) says
    # ready in init_process_group, and the others wait for nothing of
    # its start-up after that.
    x, y = load("train", a.limit)
    tx, ty = load("t10k", 0)
    job = repair.init_process_group("gloo")			# rdzv
    if a.crash_before_ddp == job.rank and not job.replacement and \
        os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        print("rank %d: SIGKILL to myself before DDP()" % job.rank,
            flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    model = job.ddp(Net(a.hidden))				# rdzv
    opt = job.track(torch.optim.SGD(model.parameters(), lr=a.lr,	# rdzv
        momentum=0.9))
    joined, acc, loss = None, 0.0, torch.zeros(())
    for epoch in job.epochs(a.epochs):			# rdzv
        if joined is None:
            joined = job.step_count
        for idx in job.batches(len(x), a.batch, seed=a.seed):	# rdzv
            with job.step():			# rdzv
                opt.zero_grad()
                loss = F.cross_entropy(model(x[idx]), y[idx])
                if a.step_delay:	# the others wait in allreduce
                    time.sleep(a.step_delay)
                loss.backward()
                opt.step()
            if a.log_steps:
                print("STEP %d %d %d %.6f" % (job.rank, job.step_count,
                    job.world, time.monotonic()), flush=True)
        with torch.no_grad():
            acc = (model.module(tx).argmax(1) == ty).float().mean().item()
        if job.rank == 0:
            print("epoch %d step %d world %d loss %.4f test accuracy "
                "%.4f" % (epoch, job.step_count, job.world, loss.item(),
                acc), flush=True)
    if a.report:
        print("REPORT " + json.dumps({"rank": job.rank, "world": job.world,
            "pid": os.getpid(), "step": job.step_count,
            "epoch": job.epoch, "repairs": job.repairs,
            "repair_times": job.repair_times,
            "replacement": job.replacement, "joined_step": joined,
            "digest": digest(model.module, opt), "accuracy": acc}),
            flush=True)
    # PyTorch's gloo may abort a process that finalizes right after its
    # last collective (doc/rdzvd.md, "Using it from unmodified PyTorch"): a
    # worker of a repairing job that dies so is repaired, for nothing.
    if torch.distributed.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
