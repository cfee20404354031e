# SPDX-License-Identifier: Apache-2.0
"""gloo_allreduce: torch's gloo allreduce timed exactly like
bench/allreduce_perf (same sizes, iterations, warmup, repeats, median,
algbw and busbw), for side-by-side runs.  Start it N times with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT (env://), or under torchrun.

usage: PYTHON gloo_allreduce.py [-b 1K] [-e 64M] [-f 2] [-r 5]
           [-i 0] [-w 3]
"""

import argparse
import time

import torch
import torch.distributed as dist

REPEAT_S = 0.25     # seconds a repeat takes at most (about)


def size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.upper()
    if s[-1] in mult:
        return int(s[:-1]) * mult[s[-1]]
    return int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-b", type=size, default=1 << 10)
    ap.add_argument("-e", type=size, default=64 << 20)
    ap.add_argument("-f", type=int, default=2)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-i", type=int, default=0)
    ap.add_argument("-w", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    buf = torch.zeros(a.e // 4, dtype=torch.float32)
    if rank == 0:
        print("# torch %s gloo allreduce: %d ranks, f32 sum, %d repeats "
              "(median)" % (torch.__version__, n, a.r))
        print("# %12s %12s %5s %5s %10s %10s %10s" % (
            "bytes", "count", "type", "op", "time_us", "algbw_GB/s",
            "busbw_GB/s"))
    b = a.b
    while b <= a.e:
        count = b // 4
        t = buf[:count]
        it = a.i if a.i > 0 else (256 << 20) // b
        it = max(5, min(2000, it))
        t0 = time.monotonic()
        for _ in range(a.w):
            dist.all_reduce(t)
        if a.i <= 0 and a.w > 0:
            # As allreduce_perf: a repeat lasts about REPEAT_S at most;
            # rank 0 decides so every rank runs the same count.
            w = (time.monotonic() - t0) / a.w
            nit = torch.tensor([max(5, min(it, int(REPEAT_S / w)
                                           if w > 0 else it))])
            dist.broadcast(nit, 0)
            it = int(nit.item())
        times = []
        for _ in range(a.r):
            dist.barrier()
            t0 = time.monotonic()
            for _ in range(it):
                dist.all_reduce(t)
            times.append((time.monotonic() - t0) / it)
        times.sort()
        med = times[len(times) // 2]
        algbw = b / med / 1e9
        if rank == 0:
            print("  %12d %12d %5s %5s %10.2f %10.3f %10.3f" % (
                b, count, "f32", "sum", med * 1e6, algbw,
                algbw * 2.0 * (n - 1) / n), flush=True)
        b *= a.f
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
