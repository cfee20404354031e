# SPDX-License-Identifier: Apache-2.0
"""rdzv.torchtitan: a torchtitan job's replica groups (HSDP) healed in
place under rdzv-agent.

A torchtitan (0.3) job whose config function returns RepairTrainer's
Config, nothing else of it changed:

    from rdzv.torchtitan import RepairTrainer
    from torchtitan.config.override import derive
    def my_run():
        c = derive(llama3_8b(), RepairTrainer.Config)   # was llama3_8b()
        c.parallelism.data_parallel_replicate_degree = 2   # R replicas
        c.parallelism.data_parallel_shard_degree = 4       # of S shards
        return c

run by torchtitan's own main (python -m torchtitan.train --module M
--config my_run) under rdzv-agent: when a rank dies, the other replicas
step on, the failed replica's survivors keep their processes and wait,
the agent starts the dead rank again and the replica is healed shard by
shard from a peer replica (rdzv.mesh).  Outside rdzv-agent, or with one
replica, RepairTrainer is torchtitan's Trainer, unchanged.

Why a Trainer subclass: torchtitan 0.3 builds its process group, mesh,
model, optimizer and data loader in Trainer.__init__ and runs its loop
in Trainer.train(); a config function names the trainer class it runs
(Config.build() makes the class that owns the Config).  torchft's
integration (FaultTolerantTrainer) plugs in the same way: a subclass
with its own init_distributed(), its gradient averaging across replicas
through FSDP's all-reduce hook, and a wrapped optimizer step that
applies only when the replicas agree.  Here rdzv.mesh does those three
things, and the subclass overrides only these:

- init_distributed(): rdzv.mesh.init_process_group(replicas=R), R being
  data_parallel_replicate_degree (or the agent's replicas=).  The
  default group is the replica's shard group (S ranks), so torchtitan's
  ParallelDims is plain FSDP over S (dp_replicate 1): its mesh, its
  parallelize function and its loss normalisation (over the replica's
  tokens) are torchtitan's own; the replicate dimension is the helper's
  (each shard's reduce-scattered gradient averaged over the replicas
  that step).  Without debug.seed the helper sets 0: the replicas must
  start from the same weights, and torchtitan's own seed is drawn by
  each replica's rank 0.
- __init__(): the data loader is built again over the whole job (R x S
  slices, this rank's home one), not the replica's; then the model,
  optimizer and LR scheduler Trainer.__init__ made are handed to the
  helper (job.fsdp, job.optimizer, job.scheduler) with factories that a
  heal calls to make them again on the replica's new group, built the
  way Trainer.__init__ builds them (ParallelDims, the model spec's
  parallelize function, init_weights, the optimizer and LR scheduler
  containers).  The containers' step() goes through the helper's (a
  step the replicas did not all reduce is not applied).
- train_step(): each step in job.step(); a step a peer's death cut off
  is trained again on the same batches.  After a heal the trainer's
  step is the donor's and its data iterator is moved to that step
  (batches are read and dropped up to it: each rank's loader stays
  where step x gradient accumulation batches put it), so the healed
  replica steps in step with the others, its logs and LR schedule too.
- train(): torchtitan's loop inside job.epochs(1), whose end waits for a
  replica still being healed; set_pg_timeouts (a barrier outside any
  step, then new timeouts on groups the helper owns and rebuilds) is
  not called.
- checkpoints (checkpoint.enable): rdzv.checkpoint's job.save() and
  job.load() stand in for torchtitan's checkpointer (which would save
  in every replica at once, outside any step, where a death cannot be
  repaired).  Every checkpoint.interval steps (and at the last step,
  and at step 1 with enable_first_step_checkpoint) the committed step
  is saved in DUMP/FOLDER (dump_folder, checkpoint.folder) by the
  lowest stepping replica, the others meeting it; a death in that
  replica drops the save, never leaving latest on an incomplete one.
  At the start, job.load() reads DUMP/FOLDER/latest in every replica
  (a replacement never loads: its donor's state is newer) and the
  trainer's step is the checkpoint's, the rank's data iterator moved
  to it as after a heal, so a whole-job restart (every replica lost,
  below the minimum, preemption) resumes at the last complete
  checkpoint's step with its model, optimizer and LR scheduler.  The
  model's state goes through its own state_dict() and
  load_state_dict(), as torchtitan's checkpointer takes it (torch's
  get_model_state_dict cannot follow the state_dict hooks that save
  llama3's fused qkv weight as wq, wk, wv); rdzv.checkpoint.model_io.
  Not as torchtitan's: the layout (DUMP/FOLDER/step-NNNNNNNNN and
  latest, not step-N; a torchtitan checkpoint is not loaded, nor one of
  these by torchtitan's Trainer); async_mode (saved synchronously),
  keep_latest_k (every checkpoint is kept), last_save_model_only and
  export_dtype (the last save is whole, in the training dtype) are
  ignored, with a line in the log; ntokens_seen restarts from 0 (a
  metric); initial_load_path, load_step, exclude_from_loading,
  create_seed_checkpoint, load_only and last_save_in_hf are refused.

Limits (refused at start, with the reason): tensor, pipeline, context
and expert parallelism; one optimizer and one model part; the
checkpoint options above.  Validation runs outside the step: a death
during it is not repaired.
"""

import contextlib
import dataclasses
import os

from . import checkpoint, log, mesh

# The class is made when it is first named (module __getattr__), so
# importing rdzv.torchtitan needs no torchtitan.
__all__ = ["RepairTrainer"]  # noqa: F822


class _Batches:
    """torchtitan's batch iterator, positioned by committed steps: the
    batches a step took are trained again when the step is dropped,
    and seek(n) moves it to n batches done (after a heal)."""

    def __init__(self, src):
        self.src = src
        self.done = 0		# batches of committed steps
        self._held = []		# taken by the step in flight
        self._again = []	# a dropped step's, to be trained again

    def __iter__(self):
        return self

    def __next__(self):
        b = self._again.pop(0) if self._again else next(self.src)
        self._held.append(b)
        return b

    def commit(self):
        self.done += len(self._held)
        self._held = []

    def drop(self):
        self._again[:0] = self._held
        self._held = []

    def seek(self, n):
        """Moves to n batches done (n >= done: the data a heal skips
        is read and dropped, never trained)."""
        self.drop()
        if n < self.done:
            raise RuntimeError("rdzv.torchtitan: a heal puts this rank at "
                "batch %d of its data, behind the %d it trained" % (n,
                self.done))
        while self.done < n:
            if self._again:
                self._again.pop(0)
            else:
                next(self.src)
            self.done += 1


def _refuse(config):
    """Raises for what a repair in place cannot keep (see above)."""
    p = config.parallelism
    for name in ("tensor_parallel_degree", "pipeline_parallel_degree",
        "context_parallel_degree", "expert_parallel_degree"):
        if getattr(p, name, 1) > 1:
            raise RuntimeError("rdzv.torchtitan: parallelism.%s = %d: "
                "RepairTrainer heals replica groups of FSDP shards only "
                "(set it to 1, or use torchtitan's Trainer)" % (name,
                getattr(p, name)))
    _refuse_checkpoint(config.checkpoint)


# torchtitan's checkpoint options that job.save()/job.load() cannot
# keep: (name, the value that says "unused").
_CKPT_REFUSED = (("initial_load_path", None), ("load_step", -1),
    ("exclude_from_loading", []), ("create_seed_checkpoint", False),
    ("load_only", False), ("last_save_in_hf", False))
# Those it ignores, with a line in the log: (name, its default).
_CKPT_IGNORED = (("async_mode", "disabled"), ("keep_latest_k", 10),
    ("last_save_model_only", True), ("export_dtype", "float32"))


def _refuse_checkpoint(ck):
    """Raises for a checkpoint option RepairTrainer cannot keep (see
    above); logs the ones it ignores.  Nothing without enable."""
    if not ck.enable:
        return
    for name, unused in _CKPT_REFUSED:
        v = getattr(ck, name, unused)
        if v != unused:
            raise RuntimeError("rdzv.torchtitan: checkpoint.%s = %r: "
                "RepairTrainer's checkpoints are rdzv's job.save() and "
                "job.load() (latest of DUMP/FOLDER, whole state), which "
                "do not take it; leave it unset, or use torchtitan's "
                "Trainer" % (name, v))
    for name, default in _CKPT_IGNORED:
        v = getattr(ck, name, default)
        if v != default:
            log.info("torchtitan: checkpoint.%s = %r is ignored by "
                "RepairTrainer (see rdzv.torchtitan)", name, v)


def _replicas(config):
    """The replica groups the job asks for: the agent's replicas=
    (RDZV_REPLICAS), else data_parallel_replicate_degree."""
    if os.environ.get("RDZV_REPLICAS", "").isdigit():
        return int(os.environ["RDZV_REPLICAS"])
    return config.parallelism.data_parallel_replicate_degree


def _repairs():
    """True under rdzv-agent's channel: the helper makes the groups."""
    return os.environ.get("RDZV_PROGRESS_FD", "").isdigit()


@contextlib.contextmanager
def _no_pg_timeouts():
    from torchtitan.distributed import utils as dist_utils
    keep = dist_utils.set_pg_timeouts
    dist_utils.set_pg_timeouts = lambda **kw: None
    try:
        yield
    finally:
        dist_utils.set_pg_timeouts = keep


def _one(objs, what):
    objs = list(objs)
    if len(objs) != 1:
        raise RuntimeError("rdzv.torchtitan: %d %ss: RepairTrainer heals "
            "a job with one (one model part, one optimizer)" % (len(objs),
            what))
    return objs[0]


def _sum_only(model):
    """torchtitan sets FSDP's gradient divide factor to 1 (its loss is
    already over the tokens of the whole batch), which FSDP does with a
    PREMUL_SUM reduce-scatter that gloo lacks: plain sums do the same."""
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule
    if dist.get_backend() != "gloo":
        return model
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_force_sum_reduction_for_comms(True)
    return model


def _repair_trainer():
    from dataclasses import dataclass

    import torch
    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.config import TORCH_DTYPE_MAP
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.tools import utils
    from torchtitan.trainer import Trainer

    class RepairTrainer(Trainer):
        """torchtitan's Trainer whose replica groups heal in place under
        rdzv-agent (see rdzv.torchtitan).  self.rdzv is the job
        (rdzv.mesh's MeshJob), None where nothing repairs."""

        @dataclass(kw_only=True, slots=True)
        class Config(Trainer.Config):
            pass

        rdzv = None

        def init_distributed(self):
            c = self.config
            replicas = _replicas(c)
            if not _repairs() or replicas < 2:
                return super().init_distributed()
            _refuse(c)
            backend = "gloo" if utils.device_type == "cpu" else "nccl"
            self.rdzv = mesh.init_process_group(backend, replicas=replicas)
            if c.debug.seed is None:
                c.debug.seed = 0
            log.debug("torchtitan: home %d, replica %d shard %d of %d x %d",
                self.rdzv.home, self.rdzv.replica, self.rdzv.shard,
                self.rdzv.replicas, self.rdzv.shards)
            return self._parallel_dims()

        def _parallel_dims(self):
            """Plain FSDP over the replica's shard group (the default
            group of the moment)."""
            n = self.rdzv.shards
            return ParallelDims(dp_replicate=1, dp_shard=n, cp=1, tp=1,
                pp=1, ep=1, world_size=n,
                spmd_backend=self.config.parallelism.spmd_backend)

        def __init__(self, config):
            # torchtitan's checkpointer is built disabled where the job
            # repairs: job.save() and job.load() take its place.
            self._ckpt = self._ckpt_dir = None
            ck = config.checkpoint
            if ck.enable and _repairs() and _replicas(config) >= 2:
                _refuse(config)
                self._ckpt = ck
                self._ckpt_dir = os.path.join(config.dump_folder,
                    ck.folder)
                config.checkpoint = dataclasses.replace(ck, enable=False)
            super().__init__(config)
            job = self.rdzv
            if job is None:
                return
            checkpoint.model_io(job, lambda m: m.state_dict(),
                lambda m, sd: m.load_state_dict(sd))
            c = self.config
            # Each rank reads its own slice of the job's data (R x S),
            # as torchtitan's HSDP does over its batch mesh.
            self.dataloader = c.dataloader.build(
                dp_world_size=job.replicas * job.shards, dp_rank=job.home,
                tokenizer=self.tokenizer, seq_len=c.training.seq_len,
                local_batch_size=c.training.local_batch_size,
                snapshot_every_n_steps=None)
            self._batches = None
            self._adopt = True	# the factories' first call: __init__'s
            job.fsdp(self._model_for)
            self._gate = job.optimizer(self._optimizer_for)
            self._lr_gate = job.scheduler(self._scheduler_for)
            self._adopt = False
            self._route()

        # ---- what a heal makes again (rdzv.mesh calls them) ----

        def _model_for(self, m):
            if self._adopt:
                return _sum_only(_one(self.model_parts, "model part"))
            c = self.config
            spec = c.model_spec
            pd = self._parallel_dims()
            pd.build_mesh()
            with torch.device("meta"), utils.set_default_dtype(
                TORCH_DTYPE_MAP[c.training.dtype]):
                model = self.model_config.build()
            model = spec.parallelize_fn(model, parallel_dims=pd,
                training=c.training, parallelism=c.parallelism,
                compile_config=c.compile, ac_config=c.activation_checkpoint,
                dump_folder=c.dump_folder)
            model.to_empty(device=utils.device_type)
            with torch.no_grad():
                model.init_weights(buffer_device=None)
            model.train()
            _sum_only(model)
            if isinstance(self.loss_fn, ChunkedLossWrapper):
                self.loss_fn.set_lm_head(model.lm_head)
                model._skip_lm_head = True
            self.parallel_dims = pd
            self.model_parts = [model]
            self.train_context = dist_utils.get_spmd_context(
                parallel_dims=pd, spmd_typechecking=(
                    c.parallelism.spmd_backend == "spmd_types" and
                    c.debug.spmd_typechecking))
            self.metrics_processor.model_parts = self.model_parts
            return model

        def _optimizer_for(self, params):
            if not self._adopt:
                c = self.config
                self.optimizers = c.optimizer.build(
                    model_parts=self.model_parts)
                if c.model_spec.post_optimizer_build_fn is not None:
                    c.model_spec.post_optimizer_build_fn(self.optimizers,
                        self.model_parts, self.parallel_dims)
                self.metrics_processor.optimizers = self.optimizers
            opt = _one(self.optimizers.optimizers, "optimizer")
            want = list(self.model_parts[0].parameters())
            have = [p for g in opt.param_groups for p in g["params"]]
            if len(have) != len(want) or any(a is not b for a, b in
                zip(have, want)):
                raise RuntimeError("rdzv.torchtitan: the optimizer's "
                    "parameters are not the model's in order (param_groups "
                    "that split them): a heal could not match its state")
            return opt

        def _scheduler_for(self, opt):
            if not self._adopt:
                self.lr_schedulers = self.config.lr_scheduler.build(
                    optimizers=self.optimizers,
                    training_steps=self.config.training.steps)
                self._route()
            return _one(self.lr_schedulers.schedulers, "LR scheduler")

        def _route(self):
            """The containers' steps through the helper's: applied only
            when every replica that steps reduced the step."""
            self.optimizers.step = self._gate.step
            self.lr_schedulers.step = self._lr_gate.step

        # ---- the loop ----

        def _save_due(self, step):
            ck = self._ckpt
            return ck is not None and (step % ck.interval == 0 or
                step == self.config.training.steps or
                (step == 1 and ck.enable_first_step_checkpoint))

        def _load(self):
            """The latest complete checkpoint, where checkpoints are on
            (not in a replacement): the job's step and position are its,
            and the trainer's step; the data iterator follows at the
            first step (_catch_up)."""
            job = self.rdzv
            if self._ckpt is None or not job.load(self._ckpt_dir):
                return
            self.step = job.step_count
            log.info("torchtitan: home %d resumes at step %d from %s",
                job.home, self.step, self._ckpt_dir)

        def train(self):
            if self.rdzv is None:
                return super().train()
            self._load()
            with _no_pg_timeouts():
                for _ in self.rdzv.epochs(1):
                    super().train()
            # A replica healed after the others' last step (in the
            # epochs' end) trained none: its step is theirs.
            self.step = max(self.step, self.rdzv.step_count)
            return None

        def _catch_up(self, it):
            """This rank's step and data where the job's step puts them
            (after a heal: the donor's); torchtitan's loop has counted
            self.step up already."""
            done = self.rdzv.step_count
            if self.step - 1 != done:
                log.info("torchtitan: home %d at step %d (was %d)",
                    self.rdzv.home, done, self.step - 1)
                self.step = done + 1
            n = done * self.gradient_accumulation_steps
            if it.done != n:
                it.seek(n)

        def train_step(self, data_iterator):
            job = self.rdzv
            if job is None:
                return super().train_step(data_iterator)
            it = self._batches
            if it is None or it.src is not data_iterator:
                it = self._batches = _Batches(data_iterator)
            while True:
                self._catch_up(it)
                if self.step > self.config.training.steps:
                    self.step -= 1	# healed at the end: nothing left
                    return None
                seen = self.ntokens_seen
                with job.step():
                    super().train_step(it)
                if job.committed:
                    it.commit()
                    if self._save_due(job.step_count):
                        job.save(self._ckpt_dir)
                    return None
                it.drop()	# the same batches again, maybe healed
                self.ntokens_seen = seen

    return RepairTrainer


def __getattr__(name):
    if name != "RepairTrainer":
        raise AttributeError("module %r has no attribute %r" % (__name__,
            name))
    cls = _repair_trainer()
    globals()[name] = cls
    return cls
