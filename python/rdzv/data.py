# SPDX-License-Identifier: Apache-2.0
"""rdzv.data: the job's position in its data, and the batches from it.

Owns which samples each rank trains at each step, so that a repair never
trains a sample twice or skips one within an epoch: the epoch's order is a
permutation every rank computes alike (seed + epoch), the job's position
(job.pos, samples of the epoch consumed) advances only when a step
commits, and a rank's batch is a slice of the next global batch at that
position for the group of the moment.  A repair (a new group, or a
donor's position) reshards from there.

The global batch after a shrink is the script's choice (policy):
  "rank"   (default) each rank keeps batch_size samples: the global batch
           is world * batch_size, smaller while the job is short of ranks;
           job.batch_scale (world / full world) is there to scale the LR.
  "global" the global batch stays full_world * batch_size (the job's world
           at its start): each rank takes an even share of it (the shares
           differ by at most one sample), so a step trains the same
           samples as in the failure-free run; a rank's batch grows while
           the job is short.
Batches() yields index lists; Loader is a torch DataLoader (workers,
prefetch) over the same slices, its iterator reset whenever a repair
moved the job (its workers kept), so nothing a worker prefetched for a
dropped or resharded step is trained.
"""


import os
import sys

from . import log

POLICIES = ("rank", "global")


class Plan:
    """The slices of a data set of n samples cut in global batches of
    batch_size per rank under policy; shuffle: a permutation per epoch
    seeded by seed + epoch, else the samples in order."""

    def __init__(self, n, batch_size, seed=0, shuffle=True, policy="rank",
        order=None):
        if policy not in POLICIES:
            raise ValueError("rdzv.repair: batch policy %r: use one of "
                "%s" % (policy, ", ".join(POLICIES)))
        if batch_size < 1:
            raise ValueError("rdzv.repair: batch_size %r: use 1 or more"
                % (batch_size,))
        self.n, self.batch_size = n, batch_size
        self.seed, self.shuffle, self.policy = seed, shuffle, policy
        self._order = order	# the script's: epoch -> sample order
        self._perm = (None, None)

    def size(self, epoch):
        """Samples in epoch's order (n, or what the script's order()
        gives)."""
        return self.n if self._order is None else len(self.order(epoch))

    def global_batch(self, job):
        """Samples the job trains in one step in its current group."""
        w = job.full_world if self.policy == "global" else job.world
        return max(w, 1) * self.batch_size

    def done(self, job):
        """Whether job's epoch has no full global batch left."""
        return self.size(job.epoch) - job.pos < self.global_batch(job)

    def order(self, epoch):
        """The epoch's sample order (a list, the same on every rank)."""
        if self._perm[0] != epoch and self._order is not None:
            p = [int(i) for i in self._order(epoch)]
            bad = [i for i in p if not 0 <= i < self.n]
            if bad:
                raise IndexError("rdzv.repair: job.loader()'s order(%d) "
                    "gave index %d, outside the data set's %d samples"
                    % (epoch, bad[0], self.n))
            self._perm = (epoch, p)
        if self._perm[0] != epoch:
            import torch
            if self.shuffle:
                g = torch.Generator()
                g.manual_seed(self.seed + epoch)
                p = torch.randperm(self.n, generator=g)
            else:
                p = torch.arange(self.n)
            self._perm = (epoch, p.tolist())
        return self._perm[1]

    def slice(self, job, pos):
        """(lo, hi) of job.rank's share of the global batch at pos."""
        g = self.global_batch(job)
        w, r = job.world, job.rank
        return (pos + r * g // w, pos + (r + 1) * g // w)

    def indices(self, job, pos=None):
        """job.rank's sample indices of the global batch at pos (default
        the job's position) of the current epoch."""
        lo, hi = self.slice(job, job.pos if pos is None else pos)
        return self.order(job.epoch)[lo:hi]

    def rest(self, job):
        """This rank's index lists of every global batch left in the
        epoch from the job's position, as the group is now."""
        out, pos, g = [], job.pos, self.global_batch(job)
        while self.size(job.epoch) - pos >= g:
            out.append(self.indices(job, pos))
            pos += g
        return out

    def commit(self, job):
        """A step committed: the job's position moves one global batch,
        to the next epoch when no full one is left."""
        job.pos += self.global_batch(job)
        if self.done(job):
            job.epoch += 1
            job.pos = 0


def _next_step(job, plan, e, what):
    """Before each batch of epoch e: begins the step (taking a pending
    round); False when the epoch is over (a donor's state moved the job
    on, or no full global batch is left).  Raises when the previous
    batch was not trained in job.step() (the position would not move)."""
    if job._in_step:
        if _read_ahead():
            raise RuntimeError("rdzv.repair: a DataLoader reads %s "
                "ahead of the steps (batch_sampler=%s with worker "
                "processes prefetches batches before their steps are "
                "trained), so the job's position cannot follow it; "
                "use job.loader(dataset, batch_size, num_workers=...) "
                "instead: it makes its workers again at the job's "
                "position after a repair" % (what, what))
        raise RuntimeError("rdzv.repair: a batch of %s was not trained "
            "inside `with job.step():`; the job's position moves only "
            "when a step commits, so wrap each step's body in it" % what)
    job._begin()
    if job.epoch != e:	# a donor's state moved it
        job._in_step = False
        return False
    if plan.done(job):
        job._in_step = False
        job.epoch, job.pos = e + 1, 0
        return False
    return True


def _read_ahead():
    """Whether the generator of job.batches() that called _next_step
    was asked for its next batch by torch's DataLoader (a script's own
    DataLoader(batch_sampler=job.batches(...)), which reads batches
    ahead with worker processes)."""
    f = sys._getframe(2)	# _next_step <- batches() <- its caller
    while f is not None:
        name = f.f_code.co_filename
        if name.endswith(os.path.join("torch", "utils", "data",
            "dataloader.py")):
            return True
        if not name.endswith(os.path.join("rdzv", "data.py")):
            return False
        f = f.f_back
    return False


def check_dataset(dataset):
    """Refuses, naming what to do, a data set job.loader() cannot keep
    a position in: one without len() and [i] (an IterableDataset)."""
    try:
        from torch.utils.data import IterableDataset
    except ImportError:
        IterableDataset = ()
    if isinstance(dataset, IterableDataset) or \
        not hasattr(dataset, "__len__") or \
        not hasattr(dataset, "__getitem__"):
        raise TypeError("rdzv.repair: job.loader() needs a map-style "
            "data set (len() and [i]) to keep the job's position in it "
            "through a repair; %s is not one (an IterableDataset has "
            "no position to resume from).  Use a map-style data set, or "
            "iterate your own one by job.rank and job.world inside `with "
            "job.step():` (a repair then resumes it where your own "
            "iterator is, which the job cannot check)" %
            type(dataset).__name__)


_sampler_said = False


def warn_own_sampler(frame):
    """Says once, when the code in frame (the script's, at its first
    job.step()) holds a DistributedSampler, or a DataLoader over one,
    that its order does not follow the job's position."""
    try:
        from torch.utils.data import DataLoader, DistributedSampler
    except ImportError:
        return
    global _sampler_said
    if _sampler_said:
        return
    seen = list(frame.f_locals.values()) + list(frame.f_globals.values())
    for v in seen:
        if isinstance(v, DataLoader):
            v = v.sampler
        if isinstance(v, DistributedSampler):
            _sampler_said = True
            log.warn("the script iterates a DistributedSampler of its "
                "own: its order does not follow the job's position, so "
                "after a repair it trains batches again or skips some; "
                "use job.loader(dataset, batch_size, ...) in its place "
                "(order= takes a sampler's order of your own)")
            return


def batches(job, plan):
    """Generator behind job.batches(): this rank's index list of each
    global batch left in the current epoch."""
    job._plan = plan
    e = job.epoch
    while job.epoch == e and _next_step(job, plan, e, "job.batches()"):
        yield plan.indices(job)


class _Rest:
    """The batch sampler of job.loader()'s DataLoader: each iteration
    yields this rank's index lists of the global batches left in the
    epoch, from the job's position and for the group, as they are when
    the iteration starts (a DataLoader iterator made or reset after a
    repair starts one)."""

    def __init__(self, job, plan):
        self.job, self.plan = job, plan

    def __iter__(self):
        return iter(self.plan.rest(self.job))

    def __len__(self):
        return len(self.plan.rest(self.job))


class Loader:
    """What job.loader() returns: iterating it yields the DataLoader's
    batches of this rank for every step left in the current epoch; see
    job.loader().  With worker processes its DataLoader keeps them
    (persistent_workers, unless the script says otherwise): a repair
    resets the DataLoader's iterator, which drops what the workers had
    prefetched and starts again at the job's position, without making
    the workers (and running their worker_init_fn) again."""

    def __init__(self, job, dataset, plan, kw):
        self.job, self.dataset, self.plan = job, dataset, plan
        self.kw = dict(kw)
        if self.kw.get("num_workers", 0) > 0:
            self.kw.setdefault("persistent_workers", True)
        self._keep = bool(self.kw.get("persistent_workers"))
        self._dl = None
        self.rebuilt = 0	# iterators made or reset (tests, curiosity)

    def __len__(self):
        """Steps of a whole epoch in the current group."""
        return self.plan.size(self.job.epoch) // \
            self.plan.global_batch(self.job)

    def set_epoch(self, epoch):
        """Nothing: the epoch is the job's (DistributedSampler's call,
        kept so a script may leave it)."""

    def _make(self):
        from torch.utils.data import DataLoader
        self.rebuilt += 1
        if self._dl is None or not self._keep:
            self._dl = DataLoader(self.dataset,
                batch_sampler=_Rest(self.job, self.plan), **self.kw)
        return iter(self._dl)

    def __iter__(self):
        job, plan = self.job, self.plan
        job._plan = plan
        e, it, expect = job.epoch, None, None
        try:
            while job.epoch == e and _next_step(job, plan, e,
                "job.loader()"):
                now = (job.repairs, job.rank, job.world, job.pos)
                if it is None or now != expect:
                    # A repair, or a dropped step: what the
                    # workers prefetched is for another cut.
                    if not self._keep:
                        _shutdown(it)
                    it = self._make()
                try:
                    batch = next(it)
                except StopIteration:
                    raise RuntimeError("rdzv.repair: the loader "
                        "ended before the epoch's position %d of %d"
                        % (job.pos, plan.size(e))) from None
                expect = (job.repairs, job.rank, job.world,
                    job.pos + plan.global_batch(job))
                yield batch
        finally:
            if not self._keep:
                _shutdown(it)


def _shutdown(it):
    """Ends a DataLoader iterator's worker processes now."""
    if it is not None and hasattr(it, "_shutdown_workers"):
        try:
            it._shutdown_workers()
        except Exception as e:
            log.debug("shutting the loader's workers down: %s", e)
