# SPDX-License-Identifier: Apache-2.0
"""repair_nccl_abort: the torch helper's NCCL abort and commit logic
(python/rdzv/repair.py), without a GPU.

On NCCL the helper's watcher thread aborts the group when the agent
announces a shrink; kernels aborted that way may return without an error,
so the training thread's step can "finish" on what they left.  Checked
here with torch's default group replaced by a stand-in that records
abort() (no NCCL is run; what torch itself does on an abort is for
scripts/gpu-check.sh on a GPU):

  - the watcher aborts the communicator (the group's abort, or its CUDA
    backend's), never torch's _abort_process_group, which takes the
    default group away while the training thread may be using it;
  - a step that ends after such an abort is not committed (the step
    count stays), goes through the repair path, and leaves the rank's
    state marked as no donor's: it reports -1 to the survivors' step
    comparison, and with no clean rank left the repair raises instead of
    training on;
  - a step on a new group commits again.
"""

import os
import sys
import threading

import rdzvtest as rt

sys.path.insert(0, os.path.join(rt.top_srcdir(), "python"))


def torch_or_skip():
    try:
        import torch.distributed  # noqa: F401
    except Exception as e:
        rt.skip_all("no torch.distributed in %s: %s" % (sys.executable, e))


class FakeBackend:
    def __init__(self):
        self.aborts = 0

    def abort(self):
        self.aborts += 1


class FakeGroup(FakeBackend):
    """torch 2.x: the group hands out its CUDA backend."""

    def __init__(self, with_backend):
        super().__init__()
        self.backend = FakeBackend() if with_backend else None

    def _get_backend(self, device):
        assert str(device) == "cuda", device
        return self.backend


class FakeChan:
    """The agent's end of the channel: what the helper says, kept."""

    def __init__(self):
        self.said = []

    def send(self, data, flags=0):
        self.said.append(data)


def job_with(group):
    import torch.distributed as dist
    from rdzv import repair
    c10d = dist.distributed_c10d
    saved = (c10d._get_default_group,
             getattr(c10d, "_abort_process_group", None))

    def forbidden(*a, **kw):
        raise AssertionError("_abort_process_group clears the default "
                             "group under the training thread")
    c10d._get_default_group = lambda: group
    c10d._abort_process_group = forbidden
    job = repair.Job("nccl", None, chan=FakeChan())
    job._joined = True
    job._to(repair.State.WHOLE, "a made group (faked)")
    job.world = 2
    repaired = []
    job._wait_round = lambda: "round"
    job._repair = lambda r: (repaired.append(r),
                             setattr(job, "_nccl_cut", False))
    return job, repaired, saved


def restore(saved):
    import torch.distributed as dist
    c10d = dist.distributed_c10d
    c10d._get_default_group = saved[0]
    if saved[1] is not None:
        c10d._abort_process_group = saved[1]


def run_case(with_backend):
    g = FakeGroup(with_backend) if with_backend is not None else \
        FakeBackend()
    job, repaired, saved = job_with(g)
    try:
        # A clean step commits.
        with job.step():
            pass
        assert job.step_count == 1, job.step_count
        # The watcher aborts while the step runs; the step's body then
        # "finishes" without an error, as aborted NCCL kernels allow.
        with job.step():
            t = threading.Thread(target=job._abort)
            t.start()
            t.join()
        aborted = g.backend if with_backend else g
        assert aborted.aborts >= 1, "the communicator was not aborted"
        assert job.step_count == 1, \
            "a step cut off by an NCCL abort was committed (%d)" % \
            job.step_count
        assert repaired == ["round"], repaired
        assert job._tainted, "the cut step's state may still be a donor's"
        # On the new group (the repair cleared the cut) steps commit.
        with job.step():
            pass
        assert job.step_count == 2, job.step_count
    finally:
        restore(saved)
    return job


def test_watcher_abort_torch2_backend():
    run_case(True)


def test_watcher_abort_group_abort():
    run_case(None)


def test_tainted_rank_is_no_donor():
    """_sync: a tainted rank reports -1; with every rank tainted there is
    no state to resume from, and the repair raises."""
    import torch
    import torch.distributed as dist
    job = run_case(True)
    seen = {}

    def all_gather(out, t):
        seen["mine"] = int(t.item())
        for o in out:
            o.copy_(torch.tensor([-1], dtype=torch.int64))
    saved = dist.all_gather
    dist.all_gather = all_gather
    try:
        job._device = lambda: torch.device("cpu")
        try:
            job._sync(None)
        except RuntimeError as e:
            assert "NCCL abort" in str(e), e
        else:
            raise AssertionError("a repair with every state tainted went on")
        assert seen["mine"] == -1, seen
    finally:
        dist.all_gather = saved


if __name__ == "__main__":
    torch_or_skip()
    rt.main(globals(), per_test=60.0, total=120.0)
