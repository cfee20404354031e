# SPDX-License-Identifier: Apache-2.0
"""rdzv.state: what a donor sends a rank whose state is behind.

Owns the state blob (pack/unpack: step, epoch, position in the epoch, the
job's full world, the model's and every tracked object's state_dict) and
applying it late: a replacement receives it in init_process_group, before
the script has made its model or optimizer, so what has no object yet is
kept and loaded when job.ddp() or job.track() is given the object.
"""

import io


def pack(job):
    """The bytes of job's state (torch.save of a dict)."""
    import torch
    f = io.BytesIO()
    torch.save({"step": job.step_count, "epoch": job.epoch,
        "pos": job.pos, "full_world": job.full_world,
        "model": job._module.state_dict() if job._module is not None
        else job._pending_model,
        "tracked": tracked(job)}, f)
    return f.getvalue()


def tracked(job):
    """The states of the tracked objects a donor sends: those the
    script has given (job.track()), then those it received itself and
    has no object for yet.  A replacement can be the donor of a round
    that comes before its script tracked its optimizer (a peer died
    while it built its model): without the received states its
    receivers would keep, or start from, an optimizer of another step."""
    out = [o.state_dict() for o in job._tracked]
    return out + list(job._pending_tracked[len(out):])


def unpack(job, data):
    """Makes data (pack's bytes) job's state: the counters at once, the
    model's and tracked objects' state now or, for an object the script
    has not given yet, when it does (apply_model, apply_tracked)."""
    import torch
    f = io.BytesIO(data)
    try:
        st = torch.load(f, map_location="cpu", weights_only=False)
    except TypeError:	# a torch without weights_only
        f.seek(0)
        st = torch.load(f, map_location="cpu")
    job.step_count, job.epoch, job.pos = st["step"], st["epoch"], st["pos"]
    job.full_world = max(job.full_world, st.get("full_world", 0))
    job._pending_model = st["model"]
    job._pending_tracked = list(st["tracked"])
    job._tracked_applied = 0
    apply_model(job)
    apply_tracked(job)


def apply_model(job):
    """Loads a received model state into job's module, once there is
    one."""
    if job._module is not None and job._pending_model is not None:
        job._module.load_state_dict(job._pending_model)
        job._pending_model = None


def apply_tracked(job):
    """Loads received states into the tracked objects there are, in the
    order job.track() was given them (the donor's order)."""
    sts = job._pending_tracked
    if not sts:
        return
    done = job._tracked_applied
    while done < len(job._tracked) and done < len(sts):
        if sts[done] is not None:
            job._tracked[done].load_state_dict(sts[done])
        done += 1
    job._tracked_applied = done
    if done >= len(sts):
        job._pending_tracked = []
        job._tracked_applied = 0
