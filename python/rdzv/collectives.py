# SPDX-License-Identifier: Apache-2.0
"""rdzv.collectives: collectives a script calls outside `with job.step()`.

A step's collectives take part in a repair: the step is dropped and done
again in the new group.  One outside a step (a logging all_reduce every N
steps, a barrier) would otherwise end a survivor with gloo's "Connection
closed by peer".  install() wraps torch.distributed's collectives (the
names a script calls as dist.NAME; torch's own modules call theirs
unwrapped) so that, called from the training thread outside a step of a
job that repairs, a peer's death repairs the job there and the call
returns without a result: an all_reduce's, broadcast's or reduce's tensor
holds this rank's own value again, the outputs of the others are
undefined, and one line says so and names the fix (call it inside the
step to have it redone).  Asynchronous calls (async_op=True) are not
wrapped, and neither are calls from torch's own modules (DDP, DCP,
torch.compile): they see torch's behaviour, a peer's death raising in
them, which the step around them (or job.save()) repairs.  DCP called
by the script directly, outside job.save()/job.load(), is refused at
once (rdzv/checkpoint.py says why).
"""

import functools
import sys
import threading

from . import group, log

NAMES = ("all_reduce", "broadcast", "reduce", "all_gather",
    "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all", "all_to_all_single", "barrier", "gather", "scatter",
    "all_gather_object", "broadcast_object_list", "gather_object",
    "scatter_object_list")
_IN_PLACE = ("all_reduce", "broadcast", "reduce")	# (tensor, ...)

_job = None
_orig = {}
_said = set()


def _caller(depth=2):
    """The module name of the code that called dist.NAME."""
    try:
        return sys._getframe(depth).f_globals.get("__name__") or ""
    except ValueError:
        return ""


def _wrap(name, fn):
    @functools.wraps(fn)
    def call(*a, **kw):
        job = _job
        if job is None or job._chan is None or job._dcp:
            return fn(*a, **kw)
        who = _caller()
        if who.startswith("torch.distributed.checkpoint") and \
            job._repairing:
            from . import checkpoint
            checkpoint.refuse_direct(job, name)
        if who == "torch" or who.startswith("torch.") or \
            job._in_step or not job._joined or kw.get("async_op") or \
            threading.get_ident() != job._main:
            return fn(*a, **kw)
        keep = None
        if name in _IN_PLACE and a and hasattr(a[0], "clone"):
            keep = a[0].detach().clone()
        try:
            return fn(*a, **kw)
        except Exception as e:
            what = "dist.%s outside `with job.step()`" % name
            if not group.comm_error(e) or not job._recover(e, what):
                raise
        if keep is not None:
            a[0].detach().copy_(keep)
        if name not in _said:
            _said.add(name)
            log.warn("%s was cut off by a peer's death: the job "
                "repaired and it returned without a result (this "
                "rank's %s); call it inside the step to have it done "
                "again in the new group", what, "tensor as it was" if
                keep is not None else "outputs are undefined")
        return None
    return call


def install(job):
    """Wraps torch.distributed's collectives for job (once per process;
    a later job takes over)."""
    global _job
    import torch.distributed as dist
    _job = job
    if _orig:
        return
    for name in NAMES:
        fn = getattr(dist, name, None)
        if fn is not None:
            _orig[name] = fn
            setattr(dist, name, _wrap(name, fn))


def orig(name):
    """torch.distributed's own NAME, unwrapped: the helper's collectives
    are its repair's, never one to repair."""
    import torch.distributed as dist
    return _orig.get(name) or getattr(dist, name)
