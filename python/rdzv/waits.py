# SPDX-License-Identifier: Apache-2.0
"""rdzv.waits: how long a rank waits on its peers, for rdzvd's straggler
detector.

DistributedDataParallel overlaps its gradient allreduce with the backward
pass and waits for it at the backward's end.  A rank's wait in a step is
the time from launching the step's last bucket (its own gradients all
computed) to that bucket's allreduce completing (every rank's in).  The
rank the others wait on waits least, and so has the least work time per
step: rdzvd names it, never the ranks waiting on it.  The progress
reports carry the total (their third field, as librdzvworker's do).

Owns a comm hook that every DistributedDataParallel the helper builds (a
repair rebuilds it) gets: torch's default allreduce, or the script's own
hook registered through job.ddp()'s model, timed.  On NCCL nothing is
timed (a future completes when the work is queued, not done): the
script's hook is registered as it is.
"""

import time


def _register(ddp, state, hook):
    """DistributedDataParallel's own register_comm_hook (job.ddp()'s
    model keeps a script's hook in the job instead)."""
    from torch.nn.parallel import DistributedDataParallel
    DistributedDataParallel.register_comm_hook(ddp, state, hook)


def attach(job, ddp):
    """Registers the timed hook on ddp, job's DistributedDataParallel made
    (again) for a new group."""
    if job.backend == "nccl":
        if job._comm_hook is not None:
            _register(ddp, *job._comm_hook)
        return
    _register(ddp, job, _timed)


def script_hook(job, state, hook):
    """The script registers its own comm hook: kept for every rebuilt
    DistributedDataParallel (on gloo, called inside the timed one)."""
    job._comm_hook = (state, hook)
    if job.backend == "nccl" and job._ddp is not None:
        _register(job._ddp, state, hook)


def _timed(job, bucket):
    """The comm hook: the script's or the default allreduce; the last
    bucket's time to completion added to job.wait_ms."""
    t0 = time.monotonic()
    if job._comm_hook is not None:
        fut = job._comm_hook[1](job._comm_hook[0], bucket)
    else:
        from torch.distributed.algorithms.ddp_comm_hooks import \
            default_hooks
        fut = default_hooks.allreduce_hook(None, bucket)
    if not bucket.is_last():
        return fut

    def done(f):
        job.wait_ms += (time.monotonic() - t0) * 1000.0
        return f.value()
    return fut.then(done)
