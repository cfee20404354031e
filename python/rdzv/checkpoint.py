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

DCP's own collectives run as torch's (rdzv/collectives.py passes calls
from torch's modules through); one called by the script directly in a
job that repairs is refused at once, since a peer's death inside it
would leave the ranks in different collectives: see refuse_direct().
"""

import os

from . import log

LATEST = "latest"
_STEP = "step-%09d"


def _optimizer(o):
    import torch
    return isinstance(o, torch.optim.Optimizer)


def _state(job):
    """The state dict a checkpoint of job holds (as it is now: a load
    fills it in place)."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict, get_optimizer_state_dict)
    st = {"job": {"step": job.step_count, "epoch": job.epoch,
        "pos": job.pos, "full_world": job.full_world}}
    m = job._module
    if m is not None:
        st["model"] = get_model_state_dict(m)
    for i, o in enumerate(job._tracked):
        if m is not None and _optimizer(o):
            st["tracked%d" % i] = get_optimizer_state_dict(m, o)
        else:
            st["tracked%d" % i] = o.state_dict()
    return st


def _apply(job, st):
    """Makes st (a loaded _state) job's state."""
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict, set_optimizer_state_dict)
    m = job._module
    if m is not None:
        set_model_state_dict(m, st["model"])
    for i, o in enumerate(job._tracked):
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


def save(job, root):
    """Checkpoints job in root as step-N; a peer's death during it is
    repaired and the save done again in the new group.  Returns the
    path."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    if job._in_step:
        raise RuntimeError("rdzv.repair: job.save() inside `with "
            "job.step():` would save a step that is not committed yet; "
            "call it after the step, where `job.committed` is True")
    os.makedirs(root, exist_ok=True)
    while True:
        final = os.path.join(root, _STEP % job.step_count)
        rnd = job._round.round if job._round is not None else 0
        tmp = "%s.r%d.partial" % (final, rnd)
        job._dcp = True
        try:
            dcp.save(_state(job), checkpoint_id=tmp)
            if not dist.is_initialized() or dist.get_rank() == 0:
                _publish(root, tmp, final)
            return final
        except Exception as e:
            if not job._recover(e, "job.save()"):
                raise
            log.info("rank %d: the save of step %d was cut by a peer's "
                "death: saving again in the new group", job.rank,
                job.step_count)
        finally:
            job._dcp = False


def load(job, root):
    """Loads root's latest checkpoint into job's model, tracked objects
    and position; False when there is none, or in a replacement (its
    state comes from a donor)."""
    import torch.distributed.checkpoint as dcp
    if job.replacement:
        log.info("rank %d (home %d) replaces a dead rank: its state comes "
            "from a live donor, not from %s", job.rank, job.home, root)
        return False
    if job._module is None:
        raise RuntimeError("rdzv.repair: job.load() before job.ddp(): "
            "give the model (and job.track() the optimizer) first, so "
            "that the checkpoint has somewhere to go")
    while True:
        path = latest(root)
        if path is None:
            return False
        st = _state(job)
        job._dcp = True
        try:
            dcp.load(st, checkpoint_id=path)
            _apply(job, st)
            log.info("rank %d: resumed from %s: epoch %d, step %d, %d "
                "samples of the epoch done", job.rank, path, job.epoch,
                job.step_count, job.pos)
            return True
        except Exception as e:
            if not job._recover(e, "job.load()"):
                raise
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
        "cuts a save, and never load in a replacement" % (name,
        "the replacement alone in dcp.load()" if job.replacement else
        "and the job hung"))
