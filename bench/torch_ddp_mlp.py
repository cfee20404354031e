# SPDX-License-Identifier: Apache-2.0
"""torch_ddp_mlp.py: the PyTorch peer of examples/ddp_mlp for bench/ddp_vs_torch.sh.

The same data (Debian's Fashion-MNIST IDX files, pixels / 255), the same
model (Linear(784, H), ReLU, Linear(H, 10); torch's default init), the same
loss (softmax cross-entropy, mean over the batch), plain SGD with the same
learning rate, the same batch per rank, trained with DistributedDataParallel
over the gloo backend and a DistributedSampler (shuffle, seed).  Run it under
torchrun (one process per rank).  The data set is held in memory as tensors
and batches are taken by index, the fastest idiomatic input path (a
DataLoader over a TensorDataset only adds per-sample overhead).

Rank 0 prints, per epoch, a line in ddp_mlp's format:
    epoch N loss X train_acc A test_acc B samples/s S time Ts
"""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def load_idx(path):
    """Reads one gzip'ed IDX file of unsigned bytes into a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError("%s: not an IDX file of bytes" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(dirname, prefix, limit):
    x = load_idx(os.path.join(dirname, prefix + "-images-idx3-ubyte.gz"))
    y = load_idx(os.path.join(dirname, prefix + "-labels-idx1-ubyte.gz"))
    if limit:
        x, y = x[:limit], y[:limit]
    x = torch.from_numpy(x.reshape(len(x), -1).astype(np.float32) / 255.0)
    return x, torch.from_numpy(y.astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.seed)
    xtr, ytr = load(a.data, "train", a.limit)
    xte, yte = load(a.data, "t10k", 0)

    model = DDP(nn.Sequential(nn.Linear(xtr.shape[1], a.hidden), nn.ReLU(),
                              nn.Linear(a.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    lossf = nn.CrossEntropyLoss()
    sampler = DistributedSampler(range(len(xtr)), num_replicas=size,
                                 rank=rank, shuffle=True, seed=a.seed)
    if rank == 0:
        print("torch_ddp_mlp: world %d gloo hidden %d batch %d (global %d) "
              "lr %g train %d test %d" % (size, a.hidden, a.batch,
                                           a.batch * size, a.lr, len(xtr),
                                           len(xte)), flush=True)
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)), dtype=torch.int64)
        sums = torch.zeros(3, dtype=torch.float64)  # loss, seen, correct
        t0 = time.perf_counter()
        model.train()
        for lo in range(0, len(idx), a.batch):
            bi = idx[lo:lo + a.batch]
            x, y = xtr[bi], ytr[bi]
            opt.zero_grad(set_to_none=True)
            out = model(x)
            loss = lossf(out, y)
            loss.backward()
            opt.step()
            sums[0] += loss.item() * len(bi)
            sums[1] += len(bi)
            sums[2] += (out.argmax(1) == y).sum().item()
        dist.all_reduce(sums)
        dt = time.perf_counter() - t0
        # Test accuracy, the test set split over the ranks.
        model.eval()
        with torch.no_grad():
            xs, ys = xte[rank::size], yte[rank::size]
            right = torch.tensor([(model(xs).argmax(1) == ys).sum().item(),
                                  len(ys)], dtype=torch.int64)
        dist.all_reduce(right)
        if rank == 0:
            print("epoch %d loss %.6f train_acc %.4f test_acc %.4f "
                  "samples/s %.0f time %.2fs" % (
                      epoch + 1, sums[0] / sums[1], sums[2] / sums[1],
                      right[0].item() / right[1].item(), sums[1] / dt, dt),
                  flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
