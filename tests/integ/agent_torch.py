# SPDX-License-Identifier: Apache-2.0
"""An unmodified PyTorch program under rdzv-agent, each behaviour run once
with Debian's torch 1.13 (TORCH_PYTHON) and once with torch 2.13
(TORCH2_PYTHON): gloo with env:// (MASTER_ADDR and the round's MASTER_PORT
served by rdzvd), DDP training steps and all-reduces.

- a worker exits 7 mid-training in the first attempt: the whole group
  trains again in the second, with the same restart count on every node;
- 2 agents x 2 workers: a worker killed with SIGKILL (the group restarts
  once), then rdzvd killed with SIGKILL and started again on the same port
  and database while the second attempt trains (the agents reconnect; no
  worker notices or restarts).

Both end with the agents exiting 0 and every rank's replica the same."""
import json
import os
import signal
import time

import rdzvtest as rt
from agent_lib import (DDP_LINEAR, DDP_SAME, Scope, agent_path, conf,
                       job_status, let_end)

TORCH = rt.TORCH_PYTHON
TORCH2 = rt.TORCH2_PYTHON
LEASE = 2.0

# train.py DIR [EXIT_RANK]: trains until DIR/finish exists (every rank
# agrees through a MAX all-reduce, so they stop at the same step), at
# most 90 s; at step 3 each rank says it runs (DIR/running.RESTART.RANK),
# and in the first attempt rank EXIT_RANK, if given, exits 7 there.
PROGRAM = r'''
import json, os, sys, time
import torch
import torch.distributed as dist

d = sys.argv[1]
exit_rank = int(sys.argv[2]) if len(sys.argv) > 2 else -1
dist.init_process_group("gloo")        # env://, as under torchrun
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
''' + DDP_LINEAR + r'''
t0 = time.monotonic()
step = 0
while True:
    train_step()
    step += 1
    if step == 3:
        tmp = os.path.join(d, ".running.%d.%d" % (restart, rank))
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(),
                       "port": os.environ["MASTER_PORT"]}, f)
        os.rename(tmp, os.path.join(d, "running.%d.%d" % (restart, rank)))
        if restart == 0 and rank == exit_rank:
            os._exit(7)                # dies mid-training
    stop = torch.tensor([float(os.path.exists(os.path.join(d, "finish")) or
                         time.monotonic() - t0 > 90)])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    if stop.item() > 0 and step >= 5:
        break
    time.sleep(0.02)
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
''' + DDP_SAME + r'''
with open(os.path.join(d, "result.%d.%d" % (restart, rank)), "w") as f:
    json.dump({"sum": t.item(), "same": same, "first": losses[0],
               "last": losses[-1],
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


def need_torch(python):
    if not rt.has_torch(python):
        rt.no_torch("no torch at %s" % python, whole_file=False)


def start(s, python, args, prog_args=()):
    """Two agents running PROGRAM with python."""
    prog = os.path.join(s.tmp, "train.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    env = {"PYTHON": python, "GLOO_SOCKET_IFNAME": "lo"}
    program = [prog, s.tmp] + list(prog_args)
    return [s.agent(args, env=env, program=program) for _ in range(2)]


def check_results(tmp, python, world, pids=None):
    """Attempt 1 trained on every rank, attempt 0 finished nowhere."""
    major = "2." if python == TORCH2 else "1."
    for rank in range(world):
        assert not os.path.exists(os.path.join(tmp, "result.0.%d" % rank))
        with open(os.path.join(tmp, "result.1.%d" % rank)) as f:
            r = json.load(f)
        assert r["torch"].startswith(major), (python, r)
        if pids is not None:
            assert r["pid"] == pids[rank]["pid"], (r, pids[rank])
        assert r["world"] == world, r
        assert r["sum"] == world * (world + 1) / 2, r
        assert r["same"], r          # DDP kept replicas identical
        assert r["last"] < r["first"], r   # it trained


def wait_both(a, b, timeout):
    ra, rb = a.wait(timeout), b.wait(timeout)
    assert ra == 0 and rb == 0, (ra, rb, a.output()[-3000:],
                                 b.output()[-3000:])
    return a.output() + b.output()


def ddp_through_a_worker_exit(python):
    need_torch(python)
    d = rt.Rdzvd()
    with Scope("agent-torch-") as s:
        args = ["--nnodes", "2", "--nproc-per-node", "1",
                "--rdzv-endpoint", "127.0.0.1:%d" % d.port,
                "--rdzv-id", "torch", "--max-restarts", "2", "--grace", "1",
                "--rdzv-conf", conf(0.2, LEASE)]
        a, b = start(s, python, args, ["1"])
        rt.wait_until(lambda: len(running(s.tmp, 1)) == 2, timeout=90,
                      what="2 ranks training again in attempt 1")
        let_end(os.path.join(s.tmp, "finish"))
        assert "exit code 7" in wait_both(a, b, 90)
        check_results(s.tmp, python, 2)
    d.stop()


def ddp_through_worker_sigkill_and_rdzvd_kill9(python):
    need_torch(python)
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    with Scope("agent-torch-") as s:
        args = ["--nnodes", "2", "--nproc-per-node", "2",
                "--rdzv-endpoint", "127.0.0.1:%d" % port,
                "--rdzv-id", "torch2", "--max-restarts", "2", "--grace", "1",
                "--rdzv-conf", conf(0.2, LEASE)]
        a, b = start(s, python, args)
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
        let_end(os.path.join(s.tmp, "finish"))
        out = wait_both(a, b, 90)
        assert "signal 9" in out or "SIGKILL" in out, out[-3000:]
        assert not running(s.tmp, 2), ("a worker restarted after rdzvd's",
                                       job_status(d, "torch2"),
                                       out[-4000:])
        check_results(s.tmp, python, 4, pids=r1)
    d.stop()


def test_ddp_through_a_worker_exit_torch1():
    ddp_through_a_worker_exit(TORCH)


def test_ddp_through_a_worker_exit_torch2():
    ddp_through_a_worker_exit(TORCH2)


def test_ddp_through_worker_sigkill_and_rdzvd_kill9_torch1():
    ddp_through_worker_sigkill_and_rdzvd_kill9(TORCH)


def test_ddp_through_worker_sigkill_and_rdzvd_kill9_torch2():
    ddp_through_worker_sigkill_and_rdzvd_kill9(TORCH2)


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    rt.main(globals(), per_test=200, total=700)
