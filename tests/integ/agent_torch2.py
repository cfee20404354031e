# SPDX-License-Identifier: Apache-2.0
"""An unmodified PyTorch 2.13 program under rdzv-agent, 2 agents x 2
workers: gloo with env:// (the round's MASTER_PORT served by rdzvd), DDP
training steps, a worker killed with SIGKILL mid-training (the whole group
restarts once, the same count on both nodes), then rdzvd killed with
SIGKILL and started again on the same port and database while the second
attempt trains (the agents reconnect; no worker notices or restarts), and
the job ends with both agents exiting 0 and every rank's replica the same.
"""
import json
import os
import signal
import time

import rdzvtest as rt
from agent_lib import Scope, agent_path, conf, job_status

TORCH2 = rt.TORCH2_PYTHON
LEASE = 2.0

# Trains until DIR/finish exists (every rank agrees through a MAX
# all-reduce, so they stop at the same step), at most 90 s.
PROGRAM = r'''
import json, os, sys, time
import torch
import torch.distributed as dist

d = sys.argv[1]
dist.init_process_group("gloo")        # env://, as under torchrun
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.02)
x = torch.randn(32, 4) + rank
y = x.sum(1, keepdim=True)
losses = []
t0 = time.monotonic()
step = 0
while True:
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()                    # gradients all-reduced by DDP
    opt.step()
    losses.append(loss.item())
    step += 1
    if step == 3:
        tmp = os.path.join(d, ".running.%d.%d" % (restart, rank))
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(),
                       "port": os.environ["MASTER_PORT"]}, f)
        os.rename(tmp, os.path.join(d, "running.%d.%d" % (restart, rank)))
    stop = torch.tensor([float(os.path.exists(os.path.join(d, "finish")) or
                         time.monotonic() - t0 > 90)])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    if stop.item() > 0 and step >= 5:
        break
    time.sleep(0.02)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
p = torch.cat([q.detach().flatten() for q in model.parameters()])
ps = [torch.zeros_like(p) for _ in range(world)]
dist.all_gather(ps, p)
with open(os.path.join(d, "result.%d.%d" % (restart, rank)), "w") as f:
    json.dump({"sum": t.item(), "same": all(bool(torch.equal(ps[0], q))
               for q in ps), "first": losses[0], "last": losses[-1],
               "world": world, "steps": step, "pid": os.getpid(),
               "torch": torch.__version__}, f)
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


def running(tmp, restart):
    out = {}
    for r in range(4):
        p = os.path.join(tmp, "running.%d.%d" % (restart, r))
        if os.path.exists(p):
            with open(p) as f:
                out[r] = json.load(f)
    return out


def test_ddp_through_worker_sigkill_and_rdzvd_kill9():
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    with Scope("agent-torch2-") as s:
        prog = os.path.join(s.tmp, "train.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        args = ["--nnodes", "2", "--nproc-per-node", "2",
                "--rdzv-endpoint", "127.0.0.1:%d" % port,
                "--rdzv-id", "torch2", "--max-restarts", "2", "--grace", "1",
                "--rdzv-conf", conf(0.2, LEASE)]
        env = {"PYTHON": TORCH2, "GLOO_SOCKET_IFNAME": "lo"}
        a = s.agent(args, env=env, program=[prog, s.tmp])
        b = s.agent(args, env=env, program=[prog, s.tmp])
        rt.wait_until(lambda: len(running(s.tmp, 0)) == 4, timeout=60,
                      what="4 ranks training in attempt 0")
        os.kill(running(s.tmp, 0)[3]["pid"], signal.SIGKILL)
        rt.wait_until(lambda: len(running(s.tmp, 1)) == 4, timeout=60,
                      what="4 ranks training again in attempt 1")
        r1 = running(s.tmp, 1)
        assert len({i["port"] for i in r1.values()}) == 1, r1
        assert r1[0]["port"] != str(running(s.tmp, 0)[0]["port"]), \
            "attempt 1 reused attempt 0's store port"

        d.kill9()
        d.start()
        assert d.port == port
        rt.wait_until(lambda: job_status(d, "torch2").count(" connected")
                      == 2, timeout=LEASE * 5, what="agents reconnected")
        time.sleep(LEASE * 1.5)        # a lease passes: nobody is dropped
        st = job_status(d, "torch2")
        assert st.count(" member ") == 2 and "restarts 1/" in st, st
        with open(os.path.join(s.tmp, "finish"), "w"):
            pass
        ra, rb = a.wait(90), b.wait(90)
        assert ra == 0 and rb == 0, (ra, rb, a.output()[-3000:],
                                     b.output()[-3000:])
        out = a.output() + b.output()
        assert "signal 9" in out or "SIGKILL" in out, out[-3000:]
        assert not running(s.tmp, 2), ("a worker restarted after rdzvd's",
                                       job_status(d, "torch2"),
                                       out[-4000:])
        for rank in range(4):
            assert not os.path.exists(os.path.join(s.tmp, "result.0.%d" %
                                                   rank))
            with open(os.path.join(s.tmp, "result.1.%d" % rank)) as f:
                r = json.load(f)
            assert r["torch"].startswith("2."), r
            assert r["pid"] == r1[rank]["pid"], (r, r1[rank])
            assert r["world"] == 4 and r["sum"] == 10.0, r
            assert r["same"], r          # DDP kept replicas identical
            assert r["last"] < r["first"], r   # it trained
    d.stop()


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    if not rt.has_torch(TORCH2):
        rt.no_torch("no torch 2.x at %s (TORCH2_PYTHON)" % TORCH2)
    rt.main(globals(), per_test=200, total=230)
