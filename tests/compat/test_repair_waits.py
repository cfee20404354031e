# SPDX-License-Identifier: Apache-2.0
"""test_repair_waits: rdzv.waits on torch 2.13 (gloo), in one process (a
group of one): job.ddp() wraps the model with the timed comm hook, whose
last bucket adds to job.wait_ms; a comm hook the script registers through
job.ddp()'s model is called inside it, and still after the helper builds
its DistributedDataParallel again (as every repair does), where a hook
registered on the old one would be lost.  (The wait naming a straggler,
under real agents: test_elastic_torch2.py.)"""

import compatlib as cl

cl.use_torch2()

import os                                               # noqa: E402
import sys                                              # noqa: E402

import rdzvtest as rt                                   # noqa: E402
from compatlib import check                             # noqa: E402

sys.path.insert(0, os.path.join(rt.top_srcdir(), "python"))
from rdzv import repair                                 # noqa: E402


def test_timed_and_script_hook_kept():
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    store = dist.TCPStore("127.0.0.1", rt.free_port(), 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        j = repair.Job("gloo", None, None)
        torch.manual_seed(0)
        model = j.ddp(torch.nn.Sequential(torch.nn.Linear(64, 256),
                                          torch.nn.ReLU(),
                                          torch.nn.Linear(256, 4)))
        x = torch.randn(32, 64)

        def step():
            model(x).sum().backward()

        step()
        check(j.wait_ms > 0, j.wait_ms)
        calls = []

        def hook(state, bucket):
            calls.append(state)
            return default_hooks.allreduce_hook(None, bucket)

        model.register_comm_hook("mine", hook)
        w = j.wait_ms
        step()
        check(calls and set(calls) == {"mine"}, calls)
        check(j.wait_ms > w, (w, j.wait_ms))
        old, reducer = j._ddp, j._ddp.reducer
        j._ddp = j._wrap()              # what a repair does
        check(j._ddp is old and j._ddp.reducer is not reducer,
              "not initialised again")
        n = len(calls)
        step()
        check(len(calls) > n, (n, calls))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    rt.main(globals(), per_test=120.0, total=120.0)
