# SPDX-License-Identifier: Apache-2.0
"""elastic_ddp.py: data-parallel training of a small MLP on Fashion-MNIST
with torch.distributed (gloo, CPU) and DistributedDataParallel, started by
torchrun or rdzv-agent (it reads the variables both set: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT).

    rdzv-agent --nnodes=2 --nproc_per_node=1 ... elastic_ddp.py \\
        --epochs 3 --checkpoint ckpt.pt

With --checkpoint it resumes from the file when it exists, and saves it
when SIGUSR1 comes and at the end.  SIGUSR1 is Slurm's notice of a
preemption or of the time limit (scancel --signal=USR1, #SBATCH
--signal=USR1@N), which rdzv-agent forwards to every worker: every rank
agrees, at the next step, to save a checkpoint there; training goes on
until the job is stopped or ends, and a requeued run resumes from that
step.  Rank 0 prints one line per epoch and "final test_acc X" at the
end."""

import signal

# Before torch is imported (seconds): a notice that comes early must not
# kill the worker with SIGUSR1's default action.  A count, not a flag:
# every rank hears each notice, but not at the same step, and may hear
# it twice (Slurm signals every process of the step, and rdzv-agent
# forwards it too).
_usr1 = [0]
QUIET = 10.0	# seconds after a save in which a notice is the same one
signal.signal(signal.SIGUSR1, lambda s, f: _usr1.__setitem__(0, _usr1[0] + 1))

import argparse  # noqa: E402
import gzip  # noqa: E402
import os  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def read_idx(path):
    """An IDX file (gzip) as a uint8 tensor of its declared shape."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] != 8:
        raise SystemExit("%s: not an IDX file of unsigned bytes" % path)
    nd = raw[3]
    dims = struct.unpack(">%dI" % nd, raw[4:4 + 4 * nd])
    n = 1
    for d in dims:
        n *= d
    body = raw[4 + 4 * nd:]
    if len(body) != n:
        raise SystemExit("%s: %d bytes of data, the header says %d" %
                         (path, len(body), n))
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(dims)


def load(data, split, limit):
    pre = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data, pre + "-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data, pre + "-labels-idx1-ubyte.gz"))
    if limit:
        x, y = x[:limit], y[:limit]
    return x.reshape(len(x), -1).float().div_(255.0), y.long()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0,
                    help="training samples used (0: all)")
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--checkpoint", help="resume from and save to this file")
    a = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, a.hidden), nn.ReLU(),
                          nn.Linear(a.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    epoch, step = 0, 0          # where training goes on from
    if a.checkpoint and os.path.exists(a.checkpoint):
        ck = torch.load(a.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        epoch, step = ck["epoch"], ck["step"]
        print("rank %d: resumed from %s at epoch %d step %d" %
              (rank, a.checkpoint, epoch, step), flush=True)
    ddp = DDP(model)    # broadcasts rank 0's parameters
    x, y = load(a.data, "train", a.limit)
    per = len(x) // (world * a.batch)   # steps per epoch, every rank
    lossf = nn.CrossEntropyLoss()

    def save(e, s):
        if rank == 0:
            tmp = a.checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "epoch": e, "step": s}, tmp)
            os.replace(tmp, a.checkpoint)
        dist.barrier()

    acted = 0      # notices acted on
    saved_at = float("-inf")
    while epoch < a.epochs:
        t0 = time.monotonic()
        g = torch.Generator().manual_seed(1000 + epoch)
        order = torch.randperm(len(x), generator=g)
        total = torch.zeros(2)
        while step < per:
            # Every rank agrees on the most notices any of them has had,
            # and on whether any saved less than QUIET ago: a notice that
            # reaches a rank after the others acted on it, or a second
            # time by another way, is not a new one.
            heard = torch.tensor([_usr1[0], int(time.monotonic() - saved_at
                                                < QUIET)], dtype=torch.int32)
            dist.all_reduce(heard, op=dist.ReduceOp.MAX)
            if heard[0].item() > acted:
                acted = heard[0].item()
                if not heard[1].item():
                    saved_at = time.monotonic()
                    if a.checkpoint:
                        save(epoch, step)
                    print("rank %d: SIGUSR1 at epoch %d step %d: %s" % (
                        rank, epoch, step, "checkpoint saved" if
                        a.checkpoint else "no --checkpoint, nothing saved"),
                        flush=True)
            i = order[(step * world + rank) * a.batch:
                      (step * world + rank + 1) * a.batch]
            opt.zero_grad()
            loss = lossf(ddp(x[i]), y[i])
            loss.backward()
            opt.step()
            total += torch.tensor([loss.item(), 1.0])
            step += 1
        epoch, step = epoch + 1, 0
        if rank == 0 and total[1] > 0:
            print("epoch %d loss %.4f steps %d time %.1fs" %
                  (epoch, total[0] / total[1], int(total[1]),
                   time.monotonic() - t0), flush=True)

    if a.checkpoint:
        save(epoch, 0)      # a requeue of the finished job trains no more
    if rank == 0:
        tx, ty = load(a.data, "test", a.test_limit)
        with torch.no_grad():
            acc = (model(tx).argmax(1) == ty).float().mean().item()
        print("final test_acc %.4f world %d" % (acc, world), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
