# SPDX-License-Identifier: Apache-2.0
"""test_repair_end_torch2: training that ends while a grow round is open,
torch 2.13 DDP through the rdzv.repair helper (gloo) under a real rdzvd
and one real rdzv-agent of four workers.

A first worker is SIGKILLed; its replacement joins in a grow round and
steps.  A second is SIGKILLed; its replacement is held (a gate) while
the survivors step on in the shrink round (rdzvd opens no grow before
a step there).  The survivors are then held
inside a step (a file they wait on), the job's end is decided (a file
each reads into that step's all-reduce), and the replacement is let go:
it says ready and rdzvd opens a grow round, which the survivors agree to
take after the step they are in.  Let go, they finish that step, see the
end and exit 0, never taking the grow; the replacement waits alone in
the grow round.  rdzvd calls the grow off ("repair: no grow: ... joined
grow round R: training ended, the grow is called off"), the agent stops
the replacement, and the job succeeds: exit 0, no restart, no process
left.  The repair timeout is an hour: a wait for it shows as this
test's own deadline.
"""

import json
import os
import re
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, assert_gone, conf, \
    job_events as events                                # noqa: E402
from compatlib import check                             # noqa: E402

OP_ADMIN_JOB = 30
HOUR = 3600
# Held until GATE exists when it is a replacement; otherwise at once.
GATE_SH = ('if [ "$RDZV_REPLACEMENT" = 1 ]; then '
           'while [ ! -e "$RDZV_E2E_GATE" ]; do sleep 0.02; done; fi; '
           'exec "$@"')
# Steps until DIR/end exists (agreed in each step's all-reduce); in a
# step where any rank finds DIR/go absent (agreed too) every rank marks
# itself (held.PID) and waits for it.
SCRIPT = r'''
import os, sys, time
sys.path.insert(0, sys.argv[2])
import torch
import torch.distributed as dist
from rdzv import repair
d = sys.argv[1]
torch.set_num_threads(1)
job = repair.init_process_group("gloo")
model = job.ddp(torch.nn.Linear(4, 1))
opt = job.track(torch.optim.SGD(model.parameters(), lr=0.01))
flag = torch.zeros(1)
while True:
    with job.step():
        # Held together: a rank that saw go and went on to the step's
        # all-reduce would wait there for ranks held before theirs.
        hold = torch.tensor([float(not os.path.exists(
            os.path.join(d, "go")))])
        dist.all_reduce(hold, op=dist.ReduceOp.MAX)
        if hold.item() > 0:
            open(os.path.join(d, "held.%d" % os.getpid()), "w").close()
            while not os.path.exists(os.path.join(d, "go")):
                time.sleep(0.01)
        flag = torch.tensor([float(os.path.exists(os.path.join(d, "end")))])
        opt.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if job.committed and flag.item() > 0:
        break
print("rank %d ends at step %d" % (job.rank, job.step_count), flush=True)
sys.stderr.flush()
os._exit(0)
'''


def reporting(d, job):
    """How many ranks of the running round reported a step in it (0
    while the job does not exist yet)."""
    c = d.native()
    try:
        doc = json.loads(c.call(OP_ADMIN_JOB, job)[0])
    except rt.RdzvError:
        return 0
    finally:
        c.close()
    return sum((m.get("progress") or {}).get("ranks_reporting", 0)
               for m in doc["members"])


def min_step(d, job):
    """The lowest step the running round's ranks reported in it (-1:
    none reported yet)."""
    c = d.native()
    try:
        doc = json.loads(c.call(OP_ADMIN_JOB, job)[0])
    finally:
        c.close()
    got = [(m.get("progress") or {}).get("min_step") for m in
           doc["members"]]
    return min(got) if got and None not in got else -1


def shrinks(d, job):
    """The job's shrink events after a worker's death, oldest first."""
    return [t for t in events(d, job)
            if t.startswith("repair: shrink to 3 after node 1 local rank")]


def touch(path):
    with open(path, "w"):
        pass


def wait_event(d, job, what, pred, a, timeout=120):
    try:
        return rt.wait_until(lambda: [t for t in events(d, job) if pred(t)],
                             timeout=timeout, what=what)
    except AssertionError as e:
        raise AssertionError("%s\nevents: %s\n%s" % (
            e, events(d, job), a.output()[-4000:]))


def test_torch_end_calls_off_open_grow():
    d = rt.Rdzvd()
    job = "torchend"
    with Scope("repair-end-torch-") as s:
        script = os.path.join(s.tmp, "train.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        gate, go = os.path.join(s.tmp, "gate"), os.path.join(s.tmp, "go")
        touch(gate)                     # the first replacement at once
        touch(go)
        argv = ["--nnodes", "1", "--nproc_per_node", "4",
                "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
                "--rdzv_id", job, "--max_restarts", "2", "--grace", "2",
                "--rdzv_conf", conf(0.2, 5.0, "repair_timeout=%d" % HOUR),
                "--no_python"]
        env = {"PYTHON": sys.executable, "GLOO_SOCKET_IFNAME": "lo",
               "OMP_NUM_THREADS": "1", "RDZV_E2E_GATE": gate,
               "RDZV_REPAIR_TIMEOUT_MS": str(HOUR * 1000)}
        prog = ["/bin/sh", "-c", GATE_SH, "gate", sys.executable, script,
                s.tmp, os.path.join(rt.top_srcdir(), "python")]
        a = s.agent(argv, env=env, program=prog)
        rt.wait_until(lambda: reporting(d, job) == 4, timeout=180,
                      what="4 torch workers stepping")
        first = sorted(a.children())[1]
        os.kill(first, signal.SIGKILL)
        wait_event(d, job, "the first grow",
                   lambda t: t.startswith("repair: grow to 4"), a)
        rt.wait_until(lambda: reporting(d, job) == 4, timeout=180,
                      what="its replacement stepping in the grow round")
        os.unlink(gate)                 # the next replacement is held
        second = [p for p in sorted(a.children()) if p != first][2]
        os.kill(second, signal.SIGKILL)
        rt.wait_until(lambda: len(shrinks(d, job)) == 2, timeout=60,
                      what="the second shrink")
        rnd = int(re.search(r", round (\d+),", shrinks(d, job)[1]).group(1))
        # The three survivors whole in it, stepping: a step committed
        # there (rdzvd opens no grow before one).
        took = r": shrink round %d, world .* at step (\d+)" % rnd
        rt.wait_until(lambda: len(re.findall(took, a.output())) == 3,
                      timeout=120, what="3 survivors in round %d" % rnd)
        at = max(int(x) for x in re.findall(took, a.output()))
        rt.wait_until(lambda: min_step(d, job) > at, timeout=120,
                      what="a step in round %d past step %d" % (rnd, at))
        os.unlink(go)                   # held inside their next step
        rt.wait_until(lambda: len([n for n in os.listdir(s.tmp)
                                   if n.startswith("held.")]) == 3,
                      timeout=60, what="3 survivors held in a step")
        touch(os.path.join(s.tmp, "end"))       # that step is the last
        touch(gate)                     # the replacement: ready, a grow
        wait_event(d, job, "the second grow round",
                   lambda t: t.startswith("repair: grow to 4") and
                   "round %d," % (rnd + 1) in t, a, timeout=180)
        touch(go)                       # they finish; it waits alone
        rc = a.wait(120)
        out = a.output()
        ev = events(d, job)
        print("  " + "\n  ".join(t for t in ev if "repair" in t))
        check(rc == 0, (rc, out[-4000:]))
        assert_gone(s.tmp)
    check(any(t.startswith("repair: no grow: node 1 finished before its "
                           "replacement of local rank ") and
              t.endswith("joined grow round %d: training ended, the grow "
                         "is called off" % (rnd + 1)) for t in ev), ev)
    check(not any(t.startswith("restart ") or "escalated" in t
                  for t in ev), ev)
    check(out.count(" ends at step ") == 3, out[-4000:])
    check("stopping the replacement" in out, out[-4000:])
    check(d.metric("rdzvd_restarts_total") == 0, "a restart")
    d.stop()


if __name__ == "__main__":
    rt.main(globals(), per_test=500.0, total=550.0)
