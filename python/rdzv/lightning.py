# SPDX-License-Identifier: Apache-2.0
"""rdzv.lightning: a Lightning job repaired in place under rdzv-agent.

A LightningModule script changes one line and adds one:

    import rdzv.lightning                                     # +
    trainer = pl.Trainer(strategy=rdzv.lightning.RepairStrategy(),
                         accelerator="cpu", devices=2, num_nodes=2, ...)
                                                              # was "ddp"

and a worker's death costs the survivors one step, not a restart: they
keep their processes and go on in a smaller group; the agent's
replacement joins at a step boundary and receives the model, the
optimizers and LR schedulers, the callbacks' state (ModelCheckpoint's
best paths) and the job's position from a donor.  RepairStrategy is
Lightning 2.x's DDPStrategy with the rdzv.repair helper under it; what
it changes, and why:

- The process group: setup_distributed() makes it through
  rdzv.repair.init_process_group() (the helper owns the group: each
  repair destroys and makes it again, so Lightning must never make its
  own).  In a replacement that call joins the job's grow round and
  receives the state, before Lightning has built anything.
- Ranks: global_rank and world_size are the current group's (job.rank,
  job.world): they change when the job repairs, and Lightning's own
  collectives (broadcast(src=0), all_gather) want the group's.  Rank
  zero for everything that writes (loggers, prints, the progress bar,
  checkpoint files: rank_zero_only.rank and is_global_zero) is job.home
  == 0 instead: the process that started as rank 0 and, after its
  death, its replacement.  A survivor never becomes a second writer; the
  seconds home 0 is being replaced go unlogged and a checkpoint due
  then is not written.
- The model: _setup_model wraps the LightningModule with job.ddp() (a
  DistributedDataParallel that each repair initialises again on the new
  group, the same object all along); the optimizers, the LR schedulers
  and a small object holding the callbacks' state and the loggers'
  versions are given to job.track(), so a replacement gets them.
- The step: Lightning's epoch loop broadcasts a SIGTERM flag from rank 0
  before each batch, a collective outside any step; the strategy puts
  job.begin_step() there instead (the agent's "leave" does what the flag
  was for), so a pending grow round is taken before the batch is
  fetched and every collective of the batch -- on_train_batch_start's,
  training_step's sync_dist logging, DDP's gradients -- is inside the
  step.  optimizer_step() ends it: job.end_step(None) when the optimizer
  stepped; when a peer's death cut it off (end_step returns False: the
  job repaired) the closure -- zero_grad, training_step, backward -- is
  run again on the new group with the same batch, so Lightning never
  sees a dropped step and its counters, schedulers and logs go on as
  in a run without the failure.  Retrying, not skipping, keeps the
  samples each step trains what they would have been.  One exception:
  when the repair gave this rank a donor's state that already holds the
  step (a death can cut an allreduce that some survivors finished), the
  step is done: it is not run again, the LR schedulers' update after it
  is skipped (the donor's schedulers have had it) and the strategy's
  collectives until the next batch are local (the donor's own ones for
  this batch were the repair's).
- The data: Lightning puts a DistributedSampler with the rank and world
  of its setup into the train DataLoader; process_dataloader() takes that
  DataLoader apart (its data set, batch size, shuffle, seed, collate_fn
  and worker options) and gives Lightning the job's data position
  instead (rdzv/data.py's Plan, "global" policy): each step trains the
  global batch at job.pos of the epoch's permutation (seed + epoch, the
  one DistributedSampler draws), cut among the ranks of the group of the
  moment; the position moves only when a step commits.  So no sample is
  trained twice or skipped within an epoch, a step trains the same
  samples as without the failure (shared unevenly while the job is
  short: 11/11/10 of 32 in a world of 3), and an epoch has the same
  number of steps (Lightning's len()).  A batch is made ahead of its step
  (by the DataLoader, its workers kept); training_step() checks that it
  was cut for the position and group the step has, and after a repair
  makes the right one from the data set (collate_fn, the batch transfer
  hooks) -- at most two batches a repair are made so.  A loader this
  cannot take apart (an IterableDataset, a sampler or batch_sampler of
  the script's) is left to Lightning, and said so: a dropped step's
  batch is retried and every rank trains every step, but after a repair
  each rank goes on with its old DistributedSampler slice, and a
  replacement starts its slice of the epoch from the beginning.
- A replacement starts Lightning from scratch: until its first step the
  strategy's collectives (the setup barriers, ModelCheckpoint's
  broadcast, the data length check) stay local -- the survivors are
  training, not in Lightning's setup -- its sanity check is skipped, and
  at on_train_start the loops' counters (epoch, global step, batch of
  the epoch) are set from the job's position, so its progress bar,
  checkpoints' names, epoch ends and validation come when the others'
  do.
- A whole-job restart (RDZV_REPAIR=0, a repair that failed, a job
  below its minimum) that resumes from one of Lightning's checkpoints
  (trainer.fit(ckpt_path="last")) starts the job's position at the
  checkpoint's step: the epoch's fixed number of steps places it, so the
  steps left train the batches they would have.
- Progress: the helper reports each committed step to the agent, so
  rdzv.hooks.LightningProgress is not needed (with it, it does nothing).

Limits: automatic optimization, one optimizer step per batch
(accumulate_grad_batches=1); a peer's death inside validation or in a
callback's collective outside the batch (an epoch-end sync_dist log, a
checkpoint's barrier) is repaired but that collective returns this
rank's own value (rdzv/collectives.py); a replacement skips the sanity
check; on_train_batch_end sees a batch made again after a repair only
when it is a list or a dict (refilled in place); CPU (gloo) is what is
tested (tests/compat/test_lightning_repair.py).
"""

import collections
import types

import torch.distributed as dist
from lightning.pytorch.loops.optimization.automatic import ClosureResult
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.trainer import call
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from lightning_utilities.core.rank_zero import rank_zero_only as \
    utils_rank_zero_only
from torch.utils.data import (BatchSampler, DataLoader, DistributedSampler,
    RandomSampler, SequentialSampler)

from . import data, log, repair
from .channel import open_channel

__all__ = ["RepairStrategy"]

# DataLoader options that go over to the loader the strategy makes.
_DL_KEEP = ("num_workers", "collate_fn", "pin_memory", "timeout",
    "worker_init_fn", "multiprocessing_context", "prefetch_factor",
    "persistent_workers", "pin_memory_device", "in_order")


class _At:
    """A group and epoch a batch is cut for: what Plan reads of a job."""

    def __init__(self, job, epoch):
        self.rank, self.world = job.rank, job.world
        self.full_world, self.epoch = job.full_world, epoch


class _From:
    """The batch sampler of the strategy's DataLoader: this rank's index
    lists of the global batches of cut's epoch from cut's position, for
    cut's group (set before each iterator is made)."""

    def __init__(self, plan):
        self.plan, self.cut = plan, None

    def __iter__(self):
        e, pos, at = self.cut
        g = self.plan.global_batch(at)
        while self.plan.size(e) - pos >= g:
            lo, hi = self.plan.slice(at, pos)
            yield self.plan.order(e)[lo:hi]
            pos += g

    def __len__(self):
        e, pos, at = self.cut
        return (self.plan.size(e) - pos) // self.plan.global_batch(at)


class _Batches:
    """What Lightning iterates as the train data: each iteration yields
    the batches of the steps left in the job's epoch, made by a
    DataLoader over the data set from the job's position, each recorded
    (pending) with the cut it was made for: (epoch, position, rank,
    world).  A batch is made for the position after those yielded and
    not yet trained; when the group or the position is not what the
    DataLoader's iterator was going on with, a new iterator starts there
    (persistent workers are kept)."""

    def __init__(self, job, dl, plan, kw):
        self.job, self.dataset, self.plan = job, dl.dataset, plan
        self.collate = dl.collate_fn
        self.kw = kw
        if kw.get("num_workers", 0) > 0:
            kw["persistent_workers"] = True	# kept across repairs
        else:
            kw.pop("persistent_workers", None)
            kw.pop("prefetch_factor", None)
        self.pending = collections.deque()
        self._sampler = _From(plan)
        self._dl = None
        self._it = None
        self._next = None	# the cut _it yields next

    def __len__(self):
        """Steps in a whole epoch (the same in every group: the global
        batch is the full world's)."""
        job = self.job
        return self.plan.size(job.epoch) // self.plan.global_batch(job)

    def _iterator(self, cut):
        self._sampler.cut = cut
        if self._dl is None or not self.kw.get("persistent_workers"):
            self._dl = DataLoader(self.dataset,
                batch_sampler=self._sampler, **self.kw)
        return iter(self._dl)

    def __iter__(self):
        job, plan = self.job, self.plan
        job._plan = plan	# the helper moves the position on commit
        e = job.epoch
        self.pending.clear()
        self._it = self._next = None
        while job.epoch == e:
            g = plan.global_batch(job)
            pos = job.pos + g * len(self.pending)
            if plan.size(e) - pos < g:
                return
            cut = (e, pos, job.rank, job.world)
            if self._it is None or self._next != cut:
                self._it = self._iterator((e, pos, _At(job, e)))
            try:
                batch = next(self._it)
            except StopIteration:
                raise RuntimeError("rdzv.lightning: the loader ended "
                    "before the epoch's position %d of %d" % (pos,
                    plan.size(e))) from None
            self._next = (e, pos + g, job.rank, job.world)
            self.pending.append(cut)
            yield batch

    def state_dict(self):
        """The job's position, for Lightning's checkpoints (a loader
        with state is one Lightning resumes without a warning; the
        position is restored from the checkpoint's step)."""
        return {"epoch": self.job.epoch, "pos": self.job.pos}

    def load_state_dict(self, sd):
        pass

    def make(self, job):
        """This rank's batch of the step at job's position, made here
        from the data set (not yet moved to the device)."""
        return self.collate([self.dataset[i] for i in
            self.plan.indices(job)])


class _TrainerState:
    """What a replacement needs of the trainer beyond the model and the
    optimizers (job.track() sends it, first): the loggers' versions,
    set at once (a replacement receives them in setup_distributed,
    before Lightning's setup hooks name directories after them: the
    replacement of home 0 writes where its predecessor did), and the
    callbacks' state as a Lightning checkpoint holds it, loaded by
    apply() once the callbacks are set up (ModelCheckpoint keeps its
    state only for the directory it has resolved)."""

    def __init__(self, strategy):
        self.strategy = strategy
        self._callbacks = None	# received, not yet loaded

    def _trainer(self):
        return self.strategy.lightning_module.trainer

    def state_dict(self):
        t = self._trainer()
        return {"callbacks": call._call_callbacks_state_dict(t),
            "versions": [getattr(lg, "_version", None)
                for lg in t.loggers]}

    def load_state_dict(self, sd):
        t = self._trainer()
        for lg, v in zip(t.loggers, sd.get("versions", [])):
            if v is not None and hasattr(lg, "_version"):
                lg._version = v
        self._callbacks = sd.get("callbacks")
        if self.strategy._trainer is not None:
            self.apply()	# a survivor behind a donor: set up already

    def apply(self):
        """Loads the callbacks' state received, if any."""
        if self._callbacks is not None:
            call._call_callbacks_load_state_dict(self._trainer(),
                {"callbacks": self._callbacks})
            self._callbacks = None


def no_result(closure):
    """Gives Lightning's closure of a step whose training this rank
    never finished (a peer's death cut it, and the donor's state holds
    the step) the result of a training_step that returned None:
    Lightning reads the closure's result after the optimizer's step,
    and one that never ran raises MisconfigurationException ("The
    closure hasn't been executed"), ending the rank."""
    if getattr(closure, "_result", False) is None:
        closure._result = ClosureResult.from_training_step_output(None)


def _progress_to(p, n):
    """Sets every count of a Lightning progress tracker to n."""
    for k in ("ready", "started", "processed", "completed"):
        if hasattr(p, k):
            setattr(p, k, n)


class RepairStrategy(DDPStrategy):
    """Lightning's DDPStrategy on rdzv.repair's group: a worker's death
    under rdzv-agent is repaired in place (see the module's docstring).
    Takes DDPStrategy's arguments (DistributedDataParallel's keyword
    arguments, process_group_backend, timeout); start_method is
    "popen" (rdzv-agent starts the processes).  Outside rdzv-agent it
    is Lightning's DDPStrategy, unchanged."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.job = None		# rdzv.repair's Job, from setup_distributed
        self._batches = None	# the train data, when it could be taken
        self._tag = None	# the cut the current batch was made for
        self._fresh = None	# (cut, batch) made here for the step
        self._local = False	# this rank's collectives stay local
        self._skip_sched = False	# the LR update after a donor's step
        self._trainer = None
        self._state = None	# the _TrainerState tracked

    # ---- ranks ----

    @property
    def global_rank(self):
        if self.job is None:
            return super().global_rank
        return self.job.rank

    @property
    def world_size(self):
        if self.job is None:
            return super().world_size
        return self.job.world

    @property
    def is_global_zero(self):
        if self.job is None:
            return super().is_global_zero
        return self.job.home == 0

    @property
    def distributed_sampler_kwargs(self):
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def setup_distributed(self):
        """The process group, made by rdzv.repair (a replacement joins
        the job's grow round and receives the state here)."""
        from lightning.fabric.utilities.seed import reset_seed
        chan = open_channel()
        if chan is None:
            # Not under rdzv-agent: nothing to repair; Lightning's own
            # group (its launcher's environment, or torchrun's).
            super().setup_distributed()
            return
        chan.close()
        reset_seed()
        self.set_world_ranks()
        self._process_group_backend = self._get_process_group_backend()
        if dist.is_available() and dist.is_initialized():
            raise RuntimeError("rdzv.lightning: a process group exists "
                "already; RepairStrategy makes the job's own (leave "
                "init_process_group to it)")
        self.job = repair.init_process_group(self._process_group_backend,
            timeout=self._timeout)
        self._local = self.job.replacement
        self._state = _TrainerState(self)
        self.job.track(self._state)
        rank_zero_only.rank = utils_rank_zero_only.rank = self.job.home

    # ---- the model, the optimizers ----

    def _setup_model(self, model):
        if self.job is None:
            return super()._setup_model(model)
        ids = self.determine_ddp_device_ids()
        kw = dict(self._ddp_kwargs)
        if ids is not None:
            kw["device_ids"] = ids
        return self.job.ddp(model, **kw)

    def setup(self, trainer):
        super().setup(trainer)
        self._trainer = trainer
        if self.job is None:
            return
        scheds = [c.scheduler for c in self.lr_scheduler_configs]
        self.job.track(*(list(self.optimizers) + scheds))
        self._state.apply()
        if self.job.replacement:
            # Validation alone would wait for peers that train.
            trainer.num_sanity_val_steps = 0

    # ---- collectives: local while this rank is not in step ----

    def barrier(self, *args, **kwargs):
        if not self._local:
            super().barrier(*args, **kwargs)

    def broadcast(self, obj, src=0):
        return obj if self._local else super().broadcast(obj, src)

    def _cut_ok(self, call, local):
        """call(), Lightning's collective of several calls (a barrier,
        then the reduction): when a peer's death cut one off outside a
        step, rdzv.collectives repaired the job there and returned
        without a result, and the next call of it meets the old group
        (torch's ValueError); local() then, this rank's own value, as
        rdzv.collectives gives.  In a step the death raises and the
        step runs again."""
        n = self.job.repairs if self.job is not None else 0
        try:
            return call()
        except ValueError:
            if self.job is None or self.job.repairs == n:
                raise
            return local()

    def reduce(self, tensor, group=None, reduce_op="mean"):
        if self._local:
            return tensor
        keep = tensor.detach().clone() if hasattr(tensor, "detach") \
            else tensor
        return self._cut_ok(lambda: super(RepairStrategy, self).reduce(
            tensor, group, reduce_op), lambda: keep)

    def all_gather(self, tensor, group=None, sync_grads=False):
        mine = tensor.unsqueeze(0) if hasattr(tensor, "unsqueeze") \
            else tensor
        if self._local:
            return mine
        return self._cut_ok(lambda: super(RepairStrategy, self).all_gather(
            tensor, group, sync_grads), lambda: mine)

    def reduce_boolean_decision(self, decision, all=True):
        if self._local:
            return bool(decision)
        return super().reduce_boolean_decision(decision, all)

    # ---- the data ----

    def process_dataloader(self, dataloader):
        """The train DataLoader Lightning prepared, made the job's data
        position (_Batches); any other left as it is."""
        dataloader = super().process_dataloader(dataloader)
        t = self._trainer or self.lightning_module.trainer
        if self.job is None or t is None or not t.training or \
            not isinstance(dataloader, DataLoader):
            return dataloader
        s = dataloader.sampler
        why = None
        if type(dataloader.batch_sampler) is not BatchSampler:
            why = "a batch_sampler of its own"
        elif type(s) is DistributedSampler:	# not Lightning's wrapper
            shuffle, seed = s.shuffle, s.seed
        elif type(s) is RandomSampler and s.generator is None:
            shuffle, seed = True, 0
        elif type(s) is SequentialSampler:
            shuffle, seed = False, 0
        else:
            why = "a sampler of its own (%s)" % type(s).__name__
        try:
            data.check_dataset(dataloader.dataset)
        except TypeError:
            why = "an iterable data set"
        if why is not None:
            log.warn("rdzv.lightning: the train DataLoader has %s: left "
                "to Lightning, so after a repair each rank goes on with "
                "its old slice of the data (a dropped step's batch is "
                "trained again)", why)
            return dataloader
        kw = {k: getattr(dataloader, k) for k in _DL_KEEP
            if hasattr(dataloader, k)}
        if kw.get("num_workers", 0) == 0:
            kw.pop("timeout", None)
            kw.pop("worker_init_fn", None)
            kw.pop("multiprocessing_context", None)
        plan = data.Plan(len(dataloader.dataset), dataloader.batch_size,
            seed, shuffle, "global")
        self._batches = _Batches(self.job, dataloader, plan, kw)
        self.job._plan = plan
        return self._batches

    def on_train_batch_start(self, batch, batch_idx):
        super().on_train_batch_start(batch, batch_idx)
        b = self._batches
        self._tag = b.pending.popleft() if b is not None and \
            b.pending else None
        self._fresh = None

    def _batch_now(self, batch):
        """The batch the step in flight must train: the one Lightning
        fetched, if it was cut for the job's position and group as they
        are now, else this rank's one made here (after a repair)."""
        job, b = self.job, self._batches
        want = (job.epoch, job.pos, job.rank, job.world)
        if self._tag is None or self._tag == want:
            return batch
        if self._fresh is not None and self._fresh[0] == want:
            return self._fresh[1]
        t = self._trainer
        x = b.make(job)
        x = t.precision_plugin.convert_input(x)
        x = t.lightning_module._on_before_batch_transfer(x,
            dataloader_idx=0)
        x = self.batch_to_device(x, dataloader_idx=0)
        # The batch Lightning holds is the one its hooks see after the
        # step (on_train_batch_end): a list or a dict is made this one.
        if type(batch) is list and type(x) is list:
            batch[:] = x
            x = batch
        elif type(batch) is dict and type(x) is dict:
            batch.clear()
            batch.update(x)
            x = batch
        self._fresh = (want, x)
        log.debug("rank %d: step %d's batch made again for world %d at "
            "position %d", job.rank, job.step_count, job.world, job.pos)
        return x

    def training_step(self, *args, **kwargs):
        if args and self.job is not None and self._batches is not None:
            args = (self._batch_now(args[0]),) + tuple(args[1:])
        return super().training_step(*args, **kwargs)

    # ---- the step ----

    def _begin(self):
        """Before each batch (in place of Lightning's SIGTERM flag
        broadcast): the step begins; a pending round is taken here."""
        self._local = False
        self._skip_sched = False
        self.job.begin_step()

    def optimizer_step(self, optimizer, closure, model=None, **kwargs):
        """The optimizer's step with its closure (zero_grad,
        training_step, backward) as the job's step: committed when it
        returns; when a peer's death cut it off, run again on the
        repaired group (or, when the donor's state has the step, done)."""
        job = self.job
        if job is None:
            return super().optimizer_step(optimizer, closure, model,
                **kwargs)
        start = job.step_count
        while True:
            if not job._in_step:	# a world of 1: no flag broadcast
                self._begin()
            try:
                out = super().optimizer_step(optimizer, closure, model,
                    **kwargs)
            except Exception as e:
                job.end_step(e)		# raises what is not a peer's death
                if job.step_count > start:
                    # The donor's state holds this step: done.
                    no_result(closure)
                    self._skip_sched = True
                    self._local = True
                    return None
                continue
            job.end_step(None)
            return out

    def on_train_start(self):
        """Checks what the strategy repairs, puts the step's start in
        the epoch loop, and in a replacement sets the loops' counters
        from the job's position (the donor's)."""
        super().on_train_start()
        t = self._trainer
        if self.job is None or t is None:
            return
        lm = t.lightning_module
        if not lm.automatic_optimization:
            raise repair.ScriptError("rdzv.lightning: RepairStrategy "
                "repairs automatic optimization only (a manual "
                "optimizer step is not a step boundary it can redo)")
        if t.accumulate_grad_batches != 1:
            raise repair.ScriptError("rdzv.lightning: RepairStrategy "
                "needs accumulate_grad_batches=1 (a repair would lose "
                "the gradients accumulated so far)")
        el = t.fit_loop.epoch_loop
        strategy = self

        def sigterm_flag(loop):
            strategy._begin()
        el._broadcast_sigterm_tensor = types.MethodType(sigterm_flag, el)

        sched = el.update_lr_schedulers

        def update_lr_schedulers(interval, update_plateau_schedulers):
            if not strategy._skip_sched:
                sched(interval, update_plateau_schedulers)
        el.update_lr_schedulers = update_lr_schedulers
        self._same_versions(t)
        self._resume_position(t)
        self._resume_counters(t)

    def _resume_position(self, t):
        """A job Lightning resumed from one of its checkpoints
        (trainer.fit(ckpt_path=...), after a whole-job restart): the
        job's position starts at the checkpoint's step, which the
        epoch's fixed number of steps places (epoch, batch of the
        epoch), so its batches go on where they were."""
        job, b = self.job, self._batches
        if job.replacement or job.step_count or not t.global_step or \
            b is None or not len(b):
            return
        job.step_count = t.global_step
        job.epoch, k = divmod(t.global_step, len(b))
        job.pos = k * b.plan.global_batch(job)
        log.debug("rank %d: resumed at step %d: epoch %d, position %d",
            job.rank, job.step_count, job.epoch, job.pos)

    def _same_versions(self, t):
        """Every rank's loggers take home 0's versions (a logger of
        another rank may have counted the directories after home 0 made
        its own), so that a donor sends the replacement of home 0 the
        version its predecessor wrote."""
        if self.job.replacement:
            return		# received from the donor
        ls = [lg for lg in t.loggers if hasattr(lg, "_version")]
        if not ls:
            return
        vs = [lg.version for lg in ls] if self.job.home == 0 else None
        vs = self.broadcast(vs, 0)	# group rank 0 is home 0 here
        for lg, v in zip(ls, vs or []):
            lg._version = v

    def _resume_counters(self, t):
        """A replacement (or any rank whose job is past step 0 at the
        start) starts Lightning's loops at the job's epoch, step and
        batch of the epoch."""
        job, el, fl = self.job, t.fit_loop.epoch_loop, t.fit_loop
        if job.step_count == 0:
            return
        if self._batches is not None:
            epoch = job.epoch
            done = job.pos // self._batches.plan.global_batch(job)
        else:
            # Lightning's own loader: the job keeps no position, but
            # every epoch has its length (a DistributedSampler fixed at
            # setup).  This rank's sampler starts the epoch again.
            n = t.num_training_batches
            epoch, done = divmod(job.step_count, n) if \
                0 < n < float("inf") else (job.epoch, 0)
        for p in (fl.epoch_progress.total, fl.epoch_progress.current):
            _progress_to(p, epoch)
        opt = el.automatic_optimization.optim_progress.optimizer
        _progress_to(opt.step.total, job.step_count)
        _progress_to(opt.zero_grad.total, job.step_count)
        _progress_to(el.batch_progress.total, job.step_count)
        el._batches_that_stepped = job.step_count
        if not done:
            return
        reset = el.reset

        def reset_once():
            reset()
            el.reset = reset	# the next epochs start at 0
            _progress_to(el.batch_progress.current, done)
        el.reset = reset_once
