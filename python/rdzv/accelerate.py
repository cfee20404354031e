# SPDX-License-Identifier: Apache-2.0
"""rdzv.accelerate: an Accelerate script repaired in place under rdzv-agent.

A script written the usual Accelerate way -- everything through
accelerator.prepare(), each step in `with accelerator.accumulate(model):`,
what follows a step under `if accelerator.sync_gradients:` -- changes its
import, and a step counter of its own if it keeps one:

    from rdzv.accelerate import Accelerator       # was from accelerate
    step = accelerator.step_count                 # was step += 1

(a replacement's local count would start at 0; the job's is the
donor's), and a worker's death costs the survivors one step, not a
restart: they keep their processes and go on in a smaller group; the
agent's replacement joins at a step boundary and receives the model, the
optimizers, the LR schedulers and the data position from a donor
(examples/accelerate_plain.py and examples/accelerate_repair.py).
Accelerator is accelerate's Accelerator (1.x) with rdzv.repair's helper
under it; outside rdzv-agent (no RDZV_PROGRESS_FD) it is accelerate's
own, unchanged.  What it changes, and why (accelerate 1.15's source):

- The group: __init__ makes it with rdzv.repair.init_process_group()
  before accelerate's; PartialState makes one only when none exists, so
  every collective of accelerate's (wait_for_everyone, reduce, gather)
  goes to the helper's group of the moment.  A replacement joins the
  job's grow round there and receives the state.  On a torch without
  CUDA it passes cpu=True (else accelerate sees DistributedType.NO: one
  process on its own); with CUDA the backend is NCCL on LOCAL_RANK's
  device, set before the group.  A timeout of InitProcessGroupKwargs in
  kwargs_handlers goes to the helper.
- The model: prepare_model() does accelerate's device placement and
  mixed precision, then wraps the model with job.ddp() in place of
  accelerate's DistributedDataParallel (fixed to the group of its
  making): job.ddp's is initialised again on each repaired group, the
  same object all along; DistributedDataParallelKwargs and its comm hook
  go to it.  backward(), clip_grad_norm_() and unwrap_model() take it.
- The optimizers and LR schedulers: prepare_optimizer() and
  prepare_scheduler() give the objects to job.track() (a replacement
  receives them), then wrap them as accelerate does.
- The data: the train DataLoader (shuffle=True: a RandomSampler without
  a generator, over a map-style data set) becomes job.loader(dataset,
  batch_size, policy="global", seed=DataLoaderConfiguration's data_seed
  or 0) with its num_workers, collate_fn, pin_memory and worker options:
  each step trains the global batch of a failure-free run at the job's
  position (shared among the survivors while the job is short), the
  position moves only when a step commits, no sample is trained twice or
  skipped within an epoch, an epoch keeps its number of steps and an
  incomplete last global batch is dropped.  Its n-th iteration is epoch
  n, so a replacement's `for epoch in range(E)` skips the epochs the job
  has done.  Batches go to accelerator.device when device placement is
  on.  A loader without shuffle (evaluation) is left to accelerate; one
  this cannot take apart (a sampler or batch_sampler of the script's, an
  IterableDataset, a second train loader) too, with a one-line warning.
- The step: accumulate(model) is job.step() around accelerate's own
  accumulate(): a step cut by a peer's death is swallowed and dropped,
  and accelerator.sync_gradients is False after it, so the usual
  `if accelerator.sync_gradients:` skips what follows a step (counting,
  logging); job.loader yields the same batch again, in the new group.
  accelerator.committed says whether the last step committed, and
  accelerator.job is rdzv.repair's Job (job.step_count, job.home ...).
  Every batch of the train loader must be trained inside accumulate().
- Who is who: process_index and num_processes are the group's now
  (job.rank, job.world), is_last_process follows; is_main_process is
  job.home == 0, the process that started as rank 0 and then its
  replacement, so a logger stays on one process across repairs;
  is_local_main_process is the worker's rank on its node (RDZV_LOCAL_RANK
  == 0: LOCAL_RANK is 0 in every worker when each has its own device);
  local_process_index stays accelerate's, the device's index.  Only this
  class's properties change: accelerate's PartialState and
  AcceleratorState keep the values of the start.
- gather() and reduce("mean") count the live ranks (accelerate's
  allocate and divide by the process count of the start).

Known not to survive a repair, or untested: gradient_accumulation_steps
> 1 (refused: a repair would lose the gradients accumulated);
gather_for_metrics() and evaluation loaders prepared by accelerate (they
stay sharded for the start's world: while the job is short a quarter of
the evaluation data goes unseen); AcceleratedScheduler steps the
schedule AcceleratorState's num_processes times per step, the process
count of the start (the full world, right for policy="global"), but a
replacement joining a smaller world (two deaths, one replacement ready)
counts fewer; a collective outside accumulate() cut by a death repairs
the job and returns without a result (rdzv.collectives); save_state()/
load_state() and skip_first_batches() (use job.save()/job.load());
trackers (init_trackers runs where is_main_process, home 0: a
replacement opens them again); FSDP, DeepSpeed, Megatron-LM, XLA and
tensor parallelism (refused: DDP only).  CPU and gloo are what is tested
(tests/compat/test_accelerate_repair.py).
"""

import contextlib
import os

import accelerate
import torch
import torch.distributed as dist
from accelerate.utils import (DistributedType, InitProcessGroupKwargs,
    parse_flag_from_env)
from accelerate.utils.operations import recursively_apply, send_to_device
from torch.utils.data import (BatchSampler, DataLoader, RandomSampler,
    SequentialSampler)

from . import data, log, repair
from .channel import open_channel

__all__ = ["Accelerator"]

# DataLoader options that go over to job.loader().
_DL_KEEP = ("num_workers", "collate_fn", "pin_memory", "timeout",
    "worker_init_fn", "multiprocessing_context", "prefetch_factor",
    "persistent_workers", "pin_memory_device", "in_order")
# Those that need worker processes.
_DL_WORKERS = ("timeout", "worker_init_fn", "multiprocessing_context",
    "prefetch_factor", "persistent_workers")
_DDP = (DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)


class _TrainLoader:
    """The train data prepare() returns: job.loader()'s Loader, whose
    n-th iteration is epoch n (a replacement's first ones, for epochs
    the job has done, yield nothing), with each batch sent to device."""

    def __init__(self, job, loader, device):
        self.job, self.loader, self.device = job, loader, device
        self._n = 0	# iterations begun: the script's epoch

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def __iter__(self):
        n, job = self._n, self.job
        self._n += 1
        if n < job.epoch:
            return
        for batch in self.loader:
            if self.device is not None:
                batch = send_to_device(batch, self.device)
            yield batch
            if job._in_step:
                raise repair.ScriptError("rdzv.accelerate: a batch of "
                    "the train loader was not trained inside `with "
                    "accelerator.accumulate(model):`; the job's position "
                    "moves only when a step commits, so wrap each "
                    "step's body in it")


def _sampler_order(dl):
    """(shuffle, None) for a DataLoader this can take apart, else
    (None, why not)."""
    s = dl.sampler
    if type(dl.batch_sampler) is not BatchSampler:
        return None, "a batch_sampler of its own"
    if type(s) is SequentialSampler:
        return False, None
    if type(s) is RandomSampler and s.generator is None and \
        not s.replacement and s._num_samples is None:
        return True, None
    return None, "a sampler of its own (%s)" % type(s).__name__


class Accelerator(accelerate.Accelerator):
    """accelerate's Accelerator on rdzv.repair's group: under
    rdzv-agent a worker's death is repaired in place (see the module's
    docstring); outside it, accelerate's Accelerator.  Takes the same
    arguments."""

    def __init__(self, *args, **kwargs):
        self.job = None
        self._train = None	# the train loader taken, if any
        self._repaired = []	# the models job.ddp() wrapped
        self._steps = 0		# steps committed, outside rdzv-agent
        chan = open_channel()
        if chan is not None:
            chan.close()
            self.job = self._group(kwargs)
        super().__init__(*args, **kwargs)
        if self.job is not None and self.distributed_type not in _DDP + \
            (DistributedType.NO,):
            raise repair.ScriptError("rdzv.accelerate: repairs "
                "DistributedDataParallel jobs only (MULTI_CPU, MULTI_GPU),"
                " not %s" % self.distributed_type)

    @staticmethod
    def _group(kwargs):
        """The job's process group, made before accelerate's: the
        backend accelerate would choose (cpu=True on a torch without
        CUDA), InitProcessGroupKwargs' timeout."""
        cpu = kwargs.get("cpu", False) or \
            parse_flag_from_env("ACCELERATE_USE_CPU") or \
            not torch.cuda.is_available()
        if cpu:
            kwargs["cpu"] = True
        else:
            # The helper's NCCL group is on the current device.
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        timeout = None
        for h in kwargs.get("kwargs_handlers") or ():
            if isinstance(h, InitProcessGroupKwargs) and h.timeout:
                timeout = h.timeout
        return repair.init_process_group("gloo" if cpu else "nccl",
            timeout=timeout)

    # ---- who is who ----

    @property
    def process_index(self):
        if self.job is None:
            return super().process_index
        return self.job.rank

    @property
    def num_processes(self):
        if self.job is None:
            return super().num_processes
        return self.job.world

    @property
    def is_main_process(self):
        if self.job is None:
            return super().is_main_process
        return self.job.home == 0

    @property
    def is_local_main_process(self):
        if self.job is None:
            return super().is_local_main_process
        return os.environ.get("RDZV_LOCAL_RANK",
            str(self.local_process_index)) == "0"

    @property
    def committed(self):
        """Whether the last step (accumulate()) committed; True outside
        rdzv-agent."""
        return self.job is None or self.job.committed

    @property
    def step_count(self):
        """Optimizer steps committed job-wide (job.step_count: a
        replacement starts at the donor's); outside rdzv-agent, the
        accumulate() blocks that ended with sync_gradients."""
        return self._steps if self.job is None else self.job.step_count

    # ---- prepare ----

    def prepare_model(self, model, device_placement=None,
        evaluation_mode=False):
        """accelerate's device placement and mixed precision, then the
        model wrapped by job.ddp() (not accelerate's DDP)."""
        job = self.job
        if job is None or evaluation_mode or \
            self.distributed_type not in _DDP:
            return super().prepare_model(model, device_placement,
                evaluation_mode)
        if any(model is m for m in self._repaired):
            return model
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            raise repair.ScriptError("rdzv.accelerate: the model is a "
                "DistributedDataParallel already, fixed to the group of "
                "its making; prepare the module itself")
        m = super().prepare_model(model, device_placement,
            evaluation_mode=True)
        kw = self.ddp_handler.to_kwargs() if self.ddp_handler else {}
        if self.device.type == "cuda":
            kw["device_ids"] = [self.device.index]
            kw["output_device"] = self.device.index
        ddp = job.ddp(m, **kw)
        if self.ddp_handler is not None and \
            isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
            self.ddp_handler.register_comm_hook(ddp)
        self._models[:] = [ddp if x is model or x is m else x
            for x in self._models]
        self._repaired.append(ddp)
        return ddp

    def prepare_optimizer(self, optimizer, device_placement=None):
        """The optimizer tracked (a replacement receives it), then
        wrapped as accelerate does."""
        if self.job is not None and \
            not getattr(optimizer, "_is_accelerate_prepared", False):
            self.job.track(optimizer)
        return super().prepare_optimizer(optimizer, device_placement)

    def prepare_scheduler(self, scheduler):
        """The LR scheduler tracked, then wrapped as accelerate does."""
        if self.job is not None and \
            not getattr(scheduler, "_is_accelerate_prepared", False):
            self.job.track(scheduler)
        return super().prepare_scheduler(scheduler)

    def prepare_data_loader(self, data_loader, device_placement=None,
        slice_fn_for_dispatch=None):
        """The train DataLoader made job.loader() (_TrainLoader); any
        other left to accelerate."""
        why = None
        if self.job is None or not isinstance(data_loader, DataLoader) or \
            getattr(data_loader, "_is_accelerate_prepared", False):
            shuffle = None
        else:
            shuffle, why = _sampler_order(data_loader)
            try:
                data.check_dataset(data_loader.dataset)
            except TypeError:
                shuffle, why = None, "an iterable data set"
            if shuffle and self._train is not None:
                shuffle, why = None, "a train loader taken already"
        if shuffle:
            return self._take(data_loader, device_placement)
        if why is not None:
            log.warn("rdzv.accelerate: a DataLoader with %s: left to "
                "accelerate, so after a repair each rank goes on with "
                "its old shard of it and a replacement starts the epoch "
                "again", why)
        return super().prepare_data_loader(data_loader, device_placement,
            slice_fn_for_dispatch)

    def _take(self, dl, device_placement):
        """dl as job.loader(): the data set, the batch per process at
        the full world, the seed, dl's worker options."""
        kw = {k: getattr(dl, k) for k in _DL_KEEP if hasattr(dl, k)}
        if not kw.get("num_workers"):
            for k in _DL_WORKERS:
                kw.pop(k, None)
        batch = dl.batch_size
        if self.split_batches:
            batch //= max(self.job.world, 1)
        seed = self.dataloader_config.data_seed
        loader = self.job.loader(dl.dataset, batch_size=batch,
            shuffle=True, seed=seed if seed is not None else 0,
            policy="global", **kw)
        if device_placement is None:
            device_placement = self.device_placement
        dev = self.device if device_placement and \
            self.device.type != "cpu" else None
        self._train = _TrainLoader(self.job, loader, dev)
        return self._train

    # ---- the step ----

    @contextlib.contextmanager
    def accumulate(self, *models):
        """accelerate's accumulate() inside job.step(): the step commits,
        or a peer's death cut it off, the job repaired and the step is
        dropped (sync_gradients False after it; the batch comes again)."""
        job = self.job
        if job is None:
            with super().accumulate(*models):
                yield
            self._steps += bool(self.sync_gradients)
            return
        if self.gradient_accumulation_steps != 1:
            raise repair.ScriptError("rdzv.accelerate: needs "
                "gradient_accumulation_steps=1 (a repair would lose the "
                "gradients accumulated so far)")
        with job.step():
            with super().accumulate(*models):
                yield
        if not job.committed:
            self.gradient_state._set_sync_gradients(False)

    # ---- collectives over the live group ----

    def gather(self, tensor):
        """accelerate's gather() over the group of the moment."""
        if self.job is None or not dist.is_initialized():
            return super().gather(tensor)

        def one(t):
            t = t.contiguous() if t.ndim else t.clone()[None]
            out = [torch.empty_like(t) for _ in
                range(dist.get_world_size())]
            dist.all_gather(out, t)
            return torch.cat(out, dim=0)
        return recursively_apply(one, tensor, error_on_other_type=True)

    def reduce(self, tensor, reduction="sum", scale=1.0):
        """accelerate's reduce(); "mean" divides by the live ranks."""
        if self.job is None or reduction != "mean" or \
            not dist.is_initialized():
            return super().reduce(tensor, reduction, scale)
        n = dist.get_world_size()
        return recursively_apply(lambda t: t / n,
            super().reduce(tensor, "sum", scale))
