# SPDX-License-Identifier: Apache-2.0
"""An unmodified PyTorch 1.13 program under rdzv-agent: gloo with env://
(MASTER_ADDR and the round's MASTER_PORT served by rdzvd), DDP training
steps and all-reduces, a rank that dies in the first attempt, and the
whole group trained again in the second with the same restart count on
every node."""
import json
import os

import rdzvtest as rt
from agent_lib import Scope, agent_path, conf

PROGRAM = r'''
import json, os, sys
import torch
import torch.distributed as dist

d = sys.argv[1]
dist.init_process_group("gloo")        # env://, as under torchrun
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(32, 4) + rank
y = x.sum(1, keepdim=True)
losses = []
for step in range(20):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()                    # gradients all-reduced by DDP
    opt.step()
    losses.append(loss.item())
    if restart == 0 and rank == 1 and step == 3:
        os._exit(7)                    # dies mid-training
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
p = torch.cat([q.detach().flatten() for q in model.parameters()])
ps = [torch.zeros_like(p) for _ in range(world)]
dist.all_gather(ps, p)
with open(os.path.join(d, "result.%d.%d" % (restart, rank)), "w") as f:
    json.dump({"sum": t.item(), "same": all(bool(torch.equal(ps[0], q))
               for q in ps), "first": losses[0], "last": losses[-1],
               "world": world}, f)
dist.barrier()
dist.destroy_process_group()
# A torch gloo thread can still be releasing the last collective's tensors
# when the interpreter finalizes, which aborts the process ("terminate
# called without an active exception": a core shows pthread_exit from
# take_gil inside a gloo work's destructor).  Torch's race, not the
# launcher's: leave without finalizing, so every launcher sees exit 0.
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
'''


def test_gloo_ddp_through_a_restart():
    d = rt.Rdzvd()
    with Scope() as s:
        prog = os.path.join(s.tmp, "train.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        args = ["--nnodes", "2", "--nproc-per-node", "1",
                "--rdzv-endpoint", "127.0.0.1:%d" % d.port,
                "--rdzv-id", "torch", "--max-restarts", "2", "--grace", "1",
                "--rdzv-conf", conf(0.2, 2.0)]
        a = s.agent(args, program=[prog, s.tmp])
        b = s.agent(args, program=[prog, s.tmp])
        ra, rb = a.wait(100), b.wait(100)
        assert ra == 0 and rb == 0, (ra, rb, a.output()[-3000:],
                                     b.output()[-3000:])
        assert "exit code 7" in a.output() + b.output()
        for rank in (0, 1):
            assert not os.path.exists(os.path.join(s.tmp, "result.0.%d" %
                                                   rank))
            with open(os.path.join(s.tmp, "result.1.%d" % rank)) as f:
                r = json.load(f)
            assert r["world"] == 2 and r["sum"] == 3.0, r
            assert r["same"], r          # DDP kept replicas identical
            assert r["last"] < r["first"], r   # it trained
    d.stop()


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    try:
        import torch  # noqa: F401
    except ImportError:
        rt.skip_all("no torch in %s" % os.sys.executable)
    rt.main(globals(), per_test=120, total=150)
