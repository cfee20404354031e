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
wrapped.
"""

import functools
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


def _wrap(name, fn):
    @functools.wraps(fn)
    def call(*a, **kw):
        job = _job
        if job is None or job._in_step or not job._joined or \
            kw.get("async_op") or job._chan is None or \
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
