# SPDX-License-Identifier: Apache-2.0
"""test_repair_data: rdzv.repair's data position (python/rdzv/data.py) on
torch 2.13, without processes: the global batch policies after a shrink
("rank", the default: each rank keeps its batch and job.batch_scale says
by how much the global batch shrank; "global": the global batch stays
and each rank takes an even share), and job.loader() -- a real
DataLoader with a worker process and prefetch -- trains each sample of an
epoch once when the group changes in the middle of it : what the worker had
prefetched for the old cut is never yielded, each batch is this rank's
share of the global batch at the job's position.  (Under real agents, with SIGKILLs: test_repair_ddp_twin.py.)"""

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


if __name__ == "__main__":
    rt.main(globals(), per_test=120.0, total=240.0)
