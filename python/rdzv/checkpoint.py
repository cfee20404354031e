# SPDX-License-Identifier: Apache-2.0
"""rdzv.checkpoint: job.save() and job.load(), a repairing job's
checkpoints through torch.distributed.checkpoint (DCP).

A checkpoint holds what a replacement receives from a donor: the model
(job.ddp()'s module), every tracked object (an optimizer through DCP's
state_dict helpers, so a fresh one loads its moments too; a scheduler or
scaler by its own state_dict) and the job's position (step, epoch,
samples of the epoch consumed), so a whole-job restart (below the
minimum, preemption, a Slurm requeue) resumes where the checkpoint was
taken: the same samples, in the same order, none twice.

ROOT/step-NNNNNNNNN is the checkpoint of a step.  Each try is written to
its own ROOT/step-N.rR.partial (R: the group's round) and renamed by the
group's rank 0 once DCP's coordinator has written its .metadata, then
ROOT/latest (one line, the directory's name) is replaced atomically: a
directory named step-N is complete, and latest names the newest.  A save
cut by a peer's death repairs the job and saves again in the new group;
a try left behind stays .partial and is never loaded.  A replacement
never loads (its state comes from a live donor, newer than any
checkpoint).

With replica groups (rdzv.mesh, R replicas x S shards, repairing in
place) the default group is the replica's shard group and every stepping
replica holds the same state after a step, so one replica's shards are
the whole checkpoint: the writer is the lowest replica that steps
(job.rank < job.shards, its ranks the first S of the stepping ones), and
DCP saves over its shard group alone; rank 0 of that group publishes.
The other replicas write nothing: each rank meets its writer peer of the
same shard index in the replicate group (an all-reduce with the job's
collective timeout, not the repair timeout, so a long save never looks
like a death to them) and returns the same path.  A death in the writer
replica cuts its save: its survivors repair, wait and are healed from a
peer replica (newer than the save), and the save is dropped, never
published (the try stays .partial); the meet fails in the others, whose
next step is then cut and repaired as any step a death cuts.  A death in
another replica never touches the writer's save.  A load at the start
reads the same latest in every replica, each over its own shard group
(DCP reshards, so a checkpoint of any mesh of the same model loads); a
replica healed while it loaded keeps its donor's state.  Without an
agent's channel (torchrun) or with one replica the default group is the
whole job's and every rank takes part, as for DDP.

DCP's own collectives run as torch's (rdzv/collectives.py passes calls
from torch's modules through); one called by the script directly in a
job that repairs is refused at once, since a peer's death inside it
would leave the ranks in different collectives: see refuse_direct().

The model's state is taken with torch's get_model_state_dict and given
back with set_model_state_dict, unless the integration names its own
way (model_io(job, get, put)): torchtitan's models rename parameters in
state_dict hooks (a fused qkv weight saved as wq, wk, wv), which torch's
helpers cannot follow, so rdzv.torchtitan passes the model's own
state_dict() and load_state_dict(), as torchtitan's checkpointer does.
The optimizer goes through get/set_optimizer_state_dict either way (its
state is keyed by the parameters' own names).
"""

import os

from . import log

LATEST = "latest"
_STEP = "step-%09d"


def _optimizer(o):
    import torch
    return isinstance(o, torch.optim.Optimizer)


def _objects(job):
    """(the model or None, the objects saved beside it, in order):
    job.ddp()'s module and job.track()'s; a MeshJob's model, optimizer
    and scheduler as they are now (job.objects(): a heal makes them
    again), then job.track()'s."""
    if hasattr(job, "objects"):
        m, o, s = job.objects()
        return m, [x for x in (o, s) if x is not None] + \
            list(job._tracked)
    return job._module, job._tracked


def model_io(job, get, put):
    """Has job's checkpoints take its model's state as get(model) (a
    state dict, DTensors sharded as the model is) and give a loaded one
    back as put(model, state dict), in place of torch's
    get_model_state_dict and set_model_state_dict; model is the one
    _objects() finds at the time (a heal makes it again).  Call it
    before the first job.save() or job.load()."""
    job._model_io = (get, put)


def _model_get(job, m):
    io = getattr(job, "_model_io", None)
    if io is not None:
        return io[0](m)
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    return get_model_state_dict(m)


def _model_put(job, m, sd):
    io = getattr(job, "_model_io", None)
    if io is not None:
        return io[1](m, sd)
    from torch.distributed.checkpoint.state_dict import set_model_state_dict
    return set_model_state_dict(m, sd)


def _replicated(job):
    """Whether job's default group is one replica's shard group
    (rdzv.mesh with replica groups that repair in place): one replica
    then writes for all."""
    import torch.distributed as dist
    return getattr(job, "replicas", 1) > 1 and dist.is_initialized() \
        and dist.get_world_size() == job.shards


def _state(job):
    """The state dict a checkpoint of job holds (as it is now: a load
    fills it in place)."""
    from torch.distributed.checkpoint.state_dict import \
        get_optimizer_state_dict
    st = {"job": {"step": job.step_count, "epoch": job.epoch,
        "pos": job.pos, "full_world": job.full_world}}
    m, tracked = _objects(job)
    if m is not None:
        st["model"] = _model_get(job, m)
    for i, o in enumerate(tracked):
        if m is not None and _optimizer(o):
            st["tracked%d" % i] = get_optimizer_state_dict(m, o)
        else:
            st["tracked%d" % i] = o.state_dict()
    return st


def _apply(job, st):
    """Makes st (a loaded _state) job's state."""
    from torch.distributed.checkpoint.state_dict import \
        set_optimizer_state_dict
    m, tracked = _objects(job)
    if m is not None:
        _model_put(job, m, st["model"])
    for i, o in enumerate(tracked):
        if m is not None and _optimizer(o):
            set_optimizer_state_dict(m, o, st["tracked%d" % i])
        else:
            o.load_state_dict(st["tracked%d" % i])
    j = st["job"]
    job.step_count, job.epoch, job.pos = j["step"], j["epoch"], j["pos"]
    job.full_world = max(job.full_world, j["full_world"])


def latest(root):
    """The path of root's newest complete checkpoint, or None."""
    try:
        with open(os.path.join(root, LATEST)) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    path = os.path.join(root, name)
    if not name.startswith("step-") or "/" in name or \
        not os.path.exists(os.path.join(path, ".metadata")):
        raise RuntimeError("rdzv.checkpoint: %s names %r, which is no "
            "complete checkpoint (no .metadata): remove %s to start "
            "afresh, or write the name of a complete step-N directory "
            "there" % (os.path.join(root, LATEST), name,
            os.path.join(root, LATEST)))
    return path


def _publish(root, tmp, final):
    """Rank 0, once DCP's save returned: tmp becomes final (unless an
    earlier try of the same step made it already) and latest names it."""
    name = os.path.basename(final)
    if os.path.exists(os.path.join(final, ".metadata")):
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.rename(tmp, final)
    t = os.path.join(root, ".latest.%d" % os.getpid())
    with open(t, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(t, os.path.join(root, LATEST))


def _write(job, root):
    """One try: DCP saves job's state over the default group into
    step-N.rR.partial, which the group's rank 0 publishes.  Returns the
    final path."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    final = os.path.join(root, _STEP % job.step_count)
    rnd = job._round.round if job._round is not None else 0
    tmp = "%s.r%d.partial" % (final, rnd)
    dcp.save(_state(job), checkpoint_id=tmp)
    if not dist.is_initialized() or dist.get_rank() == 0:
        _publish(root, tmp, final)
    return final


def save(job, root):
    """Checkpoints job in root as step-N; every rank calls it after the
    same committed step.  A peer's death during it is repaired and the
    save done again in the new group; with replica groups, one replica
    writes and a death in it drops the save (see above).  Returns the
    path, or None where the save was dropped."""
    if job._in_step:
        raise RuntimeError("rdzv.repair: job.save() inside `with "
            "job.step():` would save a step that is not committed yet; "
            "call it after the step, where `job.committed` is True")
    os.makedirs(root, exist_ok=True)
    if _replicated(job):
        return _save_replicated(job, root)
    while True:
        job._dcp = True
        try:
            return _write(job, root)
        except Exception as e:
            if not job._recover(e, "job.save()"):
                raise
            log.info("rank %d: the save of step %d was cut by a peer's "
                "death: saving again in the new group", job.rank,
                job.step_count)
        finally:
            job._dcp = False


def _save_replicated(job, root):
    """save() with replica groups: the lowest stepping replica writes,
    the others meet it (see above)."""
    step = job.step_count
    path = os.path.join(root, _STEP % step)
    writer = job.rank < job.shards
    if writer:
        job._dcp = True
        try:
            _write(job, root)
        except Exception as e:
            if not job._recover(e, "job.save()"):
                raise
            log.info("rank %d (replica %d shard %d): the save of step %d "
                "was cut by a peer's death and dropped: the replica was "
                "healed from a peer at step %d", job.home, job.replica,
                job.shard, step, job.step_count)
            return None
        finally:
            job._dcp = False
    return path if _meet(job) or writer else None


def _meet(job):
    """Each rank of the stepping replicas meets its peers of the same
    shard index once the writer's save is done (the replicate group,
    under the job's collective timeout).  False when a death cut it:
    the replicate group is then reset, so the next step's all-reduce
    fails at once and the step is repaired as a cut one is."""
    import datetime
    import torch
    import torch.distributed as dist
    from . import group
    rep = job._rep
    if rep is None:
        return True		# one replica steps: it wrote
    opts = dist.AllreduceOptions()
    opts.timeout = job.timeout if isinstance(job.timeout,
        datetime.timedelta) else dist.default_pg_timeout
    job._dcp = True		# blocked on its peers (the watcher's "wait")
    try:
        rep.allreduce([torch.ones(1)], opts).wait()
    except Exception as e:
        if not group.comm_error(e):
            raise
        log.info("rank %d (replica %d shard %d): the replicas' meet "
            "after the save of step %d was cut by a death: the next "
            "step repairs", job.home, job.replica, job.shard,
            job.step_count)
        group.reset(job._rep_socks)
        return False
    finally:
        job._dcp = False
    return True


def load(job, root):
    """Loads root's latest checkpoint into job's model, tracked objects
    and position; False when there is none, or in a replacement (its
    state comes from a donor).  Every rank calls it before the loop; with
    replica groups each replica loads it over its own shard group."""
    import torch.distributed.checkpoint as dcp
    if job.replacement:
        log.info("rank %d (home %d) replaces a dead rank: its state comes "
            "from a live donor, not from %s", job.rank, job.home, root)
        return False
    if _objects(job)[0] is None:
        raise RuntimeError("rdzv.repair: job.load() before the model "
            "(job.ddp(), or job.fsdp() and job.optimizer() with "
            "rdzv.mesh): give it first, so that the checkpoint has "
            "somewhere to go")
    replicated = _replicated(job)
    while True:
        path = latest(root)
        if path is None:
            return False
        job._dcp = True
        try:
            # Inside: a model's state_dict hooks may gather (collectives
            # a death can cut, as DCP's own).
            st = _state(job)
            dcp.load(st, checkpoint_id=path)
            _apply(job, st)
            log.info("rank %d: resumed from %s: epoch %d, step %d, %d "
                "samples of the epoch done", job.rank, path, job.epoch,
                job.step_count, job.pos)
            return True
        except Exception as e:
            if not job._recover(e, "job.load()"):
                raise
            if replicated:
                # Healed from a peer replica, which loaded it.
                log.info("rank %d: a death cut the load of %s: the "
                    "state came from a peer replica, at step %d",
                    job.home, path, job.step_count)
                return True
        finally:
            job._dcp = False


def refuse_direct(job, name):
    """A DCP collective (dist.NAME) outside job.save()/job.load() in a job
    that repairs: raises at once, naming the fix."""
    from .repair import ScriptError
    raise ScriptError("rdzv.repair: torch.distributed.checkpoint was "
        "called directly (its dist.%s) in a job that repairs in place: "
        "a peer's death inside it would leave the ranks in different "
        "collectives, %s.  Use job.save(DIR) and job.load(DIR): they "
        "checkpoint the model, the tracked objects and the job's "
        "position through DCP, save again in the new group when a death "
        "cuts a save (with replica groups one replica writes, and a "
        "death in it drops that save), and never load in a replacement"
        % (name,
        "the replacement alone in dcp.load()" if job.replacement else
        "and the job hung"))
