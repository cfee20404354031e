# SPDX-License-Identifier: Apache-2.0
"""test_repair_data: rdzv.repair's data position (python/rdzv/data.py) on
torch 2.13, without processes: the global batch policies after a shrink
("rank", the default: each rank keeps its batch and job.batch_scale says
by how much the global batch shrank; "global": the global batch stays
and each rank takes an even share), and job.loader() -- a real
DataLoader with a worker process and prefetch -- trains each sample of an
epoch once when the group changes in the middle of it : what the worker had
prefetched for the old cut is never yielded, each batch is this rank's
share of the global batch at the job's position; its workers are kept
across the repair (worker_init_fn runs once per worker).  (Under real agents, with SIGKILLs: test_repair_ddp_twin.py.)"""

import compatlib as cl

cl.use_torch2()

import os                                               # noqa: E402
import sys                                              # noqa: E402

import rdzvtest as rt                                   # noqa: E402
from compatlib import check                             # noqa: E402

sys.path.insert(0, os.path.join(rt.top_srcdir(), "python"))
from rdzv import repair                                 # noqa: E402

N, B = 1000, 16


def job(world, full=4):
    j = repair.Job("gloo", None, None)
    j.world, j.full_world = world, full
    return j


def test_policies():
    for policy, per_rank, scale in (("rank", [16, 16, 16], 0.75),
                                    ("global", [21, 21, 22], 1.0)):
        j = job(3)
        p = repair.data.Plan(N, B, policy=policy)
        j._plan = p
        shares = []
        for r in range(3):
            j.rank = r
            shares.append(p.indices(j))
        check([len(s) for s in shares] == per_rank, (policy, shares))
        ids = sum(shares, [])
        check(len(set(ids)) == len(ids) == p.global_batch(j), policy)
        check(abs(j.batch_scale - scale) < 1e-9, (policy, j.batch_scale))
        j.world = 4
        check(j.batch_scale == 1.0, (policy, j.batch_scale))


def test_loader_reshards_without_repeats():
    import torch
    data = torch.arange(N)
    for policy in ("rank", "global"):
        j = job(4)
        ld = j.loader(data, B, seed=3, policy=policy, num_workers=1,
                      prefetch_factor=4)
        seen, steps = [], 0
        for batch in ld:
            want = j._plan.indices(j)
            check(batch.tolist() == want, (policy, steps, batch, want))
            with j.step():
                steps += 1
                if steps == 10:
                    # A shrink to 3 from here on: this rank is rank 0
                    # of 3, the others' shares are computed below.
                    j.world, j.repairs = 3, j.repairs + 1
                seen.append(batch.tolist())
        check(ld.rebuilt >= 2, (policy, ld.rebuilt))
        check(j.epoch == 1 and j.pos == 0, (policy, j.epoch, j.pos))
        g = torch.Generator()
        g.manual_seed(3)
        perm = torch.randperm(N, generator=g).tolist()
        flat = sum(seen, [])
        check(len(flat) == len(set(flat)), policy)
        check(set(flat) <= set(perm), policy)


def raises(fn, exc, *words):
    """fn() raises exc with every one of words in its message."""
    try:
        fn()
    except exc as e:
        check(all(w in str(e) for w in words), (words, str(e)))
        return str(e)
    raise AssertionError("%s did not raise %s" % (fn, exc.__name__))


def test_loader_refusals_name_the_fix():
    """What job.loader() cannot keep a position in is refused at once,
    the message naming what to do instead: an IterableDataset, a
    sampler of the script's own."""
    import torch

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(10))

    j = job(4)
    raises(lambda: j.loader(Stream(), B), TypeError, "map-style",
           "Stream", "IterableDataset", "job.rank")
    raises(lambda: j.loader(torch.arange(N), B,
                            sampler=torch.utils.data.SequentialSampler(
                                range(N))),
           TypeError, "leave sampler out", "Subset", "shuffle=False")
    raises(lambda: j.loader(torch.arange(N), B, batch_size=4), TypeError,
           "batch_size")


def test_prefetching_loader_over_batches_named():
    """A script's own DataLoader(batch_sampler=job.batches(...)) with
    worker processes reads batches ahead of their steps: refused at its
    first batches with a message naming job.loader(), not the message
    for a batch trained outside job.step()."""
    import torch
    j = job(1, 1)
    j.rank = 0
    dl = torch.utils.data.DataLoader(torch.arange(N),
                                     batch_sampler=j.batches(N, B),
                                     num_workers=2, prefetch_factor=2)

    def train():
        for batch in dl:
            with j.step():
                pass
    msg = raises(train, RuntimeError, "reads job.batches() ahead",
                 "job.loader(")
    check("was not trained inside" not in msg, msg)
    # The same generator read by the script itself, a batch left out of
    # job.step(): the other message.
    j2 = job(1, 1)
    j2.rank = 0

    def skip_step():
        for idx in j2.batches(N, B):
            pass
    raises(skip_step, RuntimeError, "was not trained inside")


def test_loader_order_of_the_scripts_own():
    """order=: a weighted sampler's order (with replacement, seeded by
    the epoch) drives job.loader(): each step trains this rank's share
    of the order at the job's position, through a shrink, and the epoch
    is as long as the order."""
    import torch
    weights = torch.linspace(0.1, 1.0, N)

    def order(epoch):
        g = torch.Generator()
        g.manual_seed(100 + epoch)
        return list(torch.utils.data.WeightedRandomSampler(
            weights, 600, replacement=True, generator=g))
    j = job(4)
    ld = j.loader(torch.arange(N), B, order=order)
    want = order(0)
    steps, last = 0, 0
    for batch in ld:
        lo, hi = j._plan.slice(j, j.pos)
        check(batch.tolist() == want[lo:hi], (steps, batch))
        last = j.pos + j._plan.global_batch(j)
        with j.step():
            steps += 1
            if steps == 5:
                j.world, j.repairs = 3, j.repairs + 1
    check(j.epoch == 1 and j.pos == 0, (j.epoch, j.pos))
    check(last <= 600 and 600 - last < 3 * B, last)
    raises(lambda: list(job(4).loader(torch.arange(10), 2,
                                      order=lambda e: [3, 12])),
           IndexError, "order(0)", "index 12", "10 samples")


def test_own_distributed_sampler_warned():
    """A DistributedSampler (or a DataLoader over one) in the script's
    frame at its first step: one warning naming job.loader()."""
    import subprocess
    prog = (
        "import sys, torch\n"
        "sys.path.insert(0, %r)\n"
        "from rdzv import data\n"
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "ds = torch.arange(8)\n"
        "dl = DataLoader(ds, sampler=DistributedSampler(ds, 2, 0))\n"
        "data.warn_own_sampler(sys._getframe(0))\n"
        "data.warn_own_sampler(sys._getframe(0))\n"
        % os.path.join(rt.top_srcdir(), "python"))
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 0, r.stderr[-2000:])
    check(r.stderr.count("DistributedSampler of its own") == 1 and
          "job.loader(" in r.stderr, r.stderr)
    r = subprocess.run([sys.executable, "-c", prog.replace(
        "sampler=DistributedSampler(ds, 2, 0)", "shuffle=True")],
        capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "DistributedSampler" not in r.stderr,
          r.stderr[-2000:])


def _slow_init(wid):
    """A worker_init_fn that takes 1 s and counts its calls."""
    import time
    time.sleep(1.0)
    with open(os.environ["INIT_LOG"], "a") as f:
        f.write("%d\n" % os.getpid())


def test_loader_workers_kept_across_a_repair():
    """job.loader() with 2 workers whose worker_init_fn takes 1 s: a
    repair in mid-epoch (the group shrinks) resets the DataLoader's
    iterator at the job's new position, its workers kept: worker_init
    runs twice in all (once per worker), the epoch trains every sample
    once, and the first batch after the repair is there in well under
    the second a new pair of workers would take."""
    import time
    import torch
    d = rt.mktemp("loader-workers-")
    os.environ["INIT_LOG"] = os.path.join(d, "init")
    j = job(4)
    ld = j.loader(torch.arange(N), B, seed=5, num_workers=2,
                  prefetch_factor=2, worker_init_fn=_slow_init)
    seen, steps, waits = [], 0, []
    t = time.monotonic()
    for batch in ld:
        if steps == 10:
            waits.append(time.monotonic() - t)
        check(batch.tolist() == j._plan.indices(j), (steps, batch))
        with j.step():
            steps += 1
            if steps == 10:
                j.world, j.repairs = 3, j.repairs + 1
            seen.append(batch.tolist())
        t = time.monotonic()
    with open(os.environ["INIT_LOG"]) as f:
        inits = f.read().split()
    check(len(inits) == 2, inits)
    st = j.stats
    check(st["steps"] == steps and st["repairs"] == 1 and
          st["world"] == 3 and not st["replacement"], st)
    flat = sum(seen, [])
    check(len(flat) == len(set(flat)), "a sample twice")
    cl.log("the first batch after the repair came in %.3f s; worker_init "
           "ran %d times (1 s each)" % (waits[0], len(inits)))


if __name__ == "__main__":
    rt.main(globals(), per_test=120.0, total=240.0)
