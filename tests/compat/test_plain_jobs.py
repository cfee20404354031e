# SPDX-License-Identifier: Apache-2.0
"""test_plain_jobs: torch 2.13 jobs that do not repair in place (a plain
DDP script, Lightning's own DDP) under two real rdzv-agents of two workers
each and a real rdzvd: rdzv.progress.report() and rdzv.hooks put their
steps where rdzv looks, and the repair helper initialised but not used
cannot hurt them.

- The job's steps reach every place an operator looks (`rdzvctl members`
  and `top`, the status page's history, /metrics), as a C job's and a
  repairing job's do; without report() the same script shows none.
- A SIGSTOPped worker of such a job (a plain script's, a Lightning
  job's) is caught by the agents' --progress_timeout (the job restarts:
  it cannot repair), and the restarted job trains to its end.
- A Lightning job (Lightning's own DDP under rdzv-agent) with
  rdzv.hooks.LightningProgress, and an Accelerate job with one
  report() a step: their steps on every surface too.
- report() outside rdzv-agent does nothing and says nothing; a negative
  step is refused.
- Its restarts are warm: once its workers have run a while each agent
  keeps a spare python per worker, and a restart's workers are those.
- A script that calls rdzv.repair.init_process_group() but trains with
  torch's own DDP, never job.ddp() or job.step(), never offered repair:
  a rank's SIGKILL restarts the job (no repair round, no rank training
  alone), and it trains on to its end.
"""

import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import PL_LINEAR, Scope, job_events      # noqa: E402
from agent_torch import running                         # noqa: E402
from compatlib import (check, script_agents,  # noqa: E402
                       script_finish, torch_surfaces)

PYDIR = os.path.join(rt.top_srcdir(), "python")

# A plain DDP script that reports its steps (REPORT=1) or not; it trains
# until DIR/finish exists (the ranks agree through a MAX all-reduce) and
# records its pid at step 3 of each attempt.
PROGRAM = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
from rdzv import progress

d = sys.argv[1]
if os.environ.get("HELPER") == "1":
    from rdzv import repair
    repair.init_process_group("gloo")   # the helper's group, never used
else:
    dist.init_process_group("gloo")
rank = dist.get_rank()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.02)
x = torch.randn(32, 4) + rank
y = x.sum(1, keepdim=True)
step = 0
while True:
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
    step += 1
    if os.environ.get("REPORT") == "1":
        progress.report(step)
    if step == 3:
        tmp = os.path.join(d, ".running.%d.%d" % (attempt, rank))
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid()}, f)
        os.rename(tmp, os.path.join(d, "running.%d.%d" % (attempt, rank)))
    stop = torch.tensor([float(os.path.exists(os.path.join(d, "finish")))])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    if stop.item() > 0 and step >= 5:
        break
    time.sleep(0.02)
dist.barrier()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)        # torch's gloo may abort a finalizing process
'''


def start(s, d, job, report, extra=(), env=None, program=PROGRAM,
          restarts=2, nodes=2):
    """nodes agents (two by default) of two workers each running program
    (its text, as DIR/train.py) in job, once its ranks train
    (agent_torch.running's files); returns the agents."""
    agents = tuple(script_agents(
        s, d, job, program, restarts, nodes=nodes, extra=extra,
        env=dict(REPORT="1" if report else "0", **(env or {}))))
    rt.wait_until(lambda: len(running(s.tmp, 0)) == 2 * nodes, timeout=120,
                  what="%d ranks training" % (2 * nodes))
    return agents


def finish(s, agents):
    script_finish(s, agents, 60)


def members_progress(d, job):
    doc = json.loads(compatlib._ctl(d, "--json", "members", job))
    return [m.get("progress") for m in doc["members"]]


def test_plain_job_on_every_surface():
    """report() puts a plain script's steps where operators look; the
    same script without report(), started first and training beside it
    all along, shows none (so the check is not one any job passes)."""
    d = rt.Rdzvd()
    with Scope("progress-api-") as q, Scope("progress-api-") as s:
        qa, qb = start(q, d, "silent", report=False)
        a, b = start(s, d, "plain", report=True)
        torch_surfaces(d, "plain")
        ps = members_progress(d, "silent")
        check(all(p is None or p.get("ranks_reporting", 0) == 0
                  for p in ps), ps)
        finish(s, [a, b])
        finish(q, [qa, qb])
    d.stop()


def test_stopped_worker_caught_by_watchdog():
    """SIGSTOP of a rank of a reporting plain job: --progress_timeout
    kills it, the job restarts (it cannot repair) and trains on."""
    d = rt.Rdzvd()
    with Scope("progress-api-") as s:
        a, b = start(s, d, "stop", report=True,
                     extra=["--progress_timeout", "3"])
        stop_one(s, d, "stop", [a, b], 3, timeout=90)
        finish(s, [a, b])
    d.stop()


def stop_one(s, d, job, agents, rank, timeout):
    """SIGSTOPs rank of job's first attempt; the agents' watchdog must
    kill it and the job restart with every rank training again."""
    victim = running(s.tmp, 0)[rank]["pid"]
    os.kill(victim, signal.SIGSTOP)
    try:
        rt.wait_until(lambda: len(running(s.tmp, 1)) == 4, timeout=timeout,
                      what="4 ranks training again after the watchdog's "
                      "kill")
    finally:        # never leave a stopped process behind
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out = "".join(x.output() for x in agents)
    check("reported no progress" in out, out[-3000:])
    ev = job_events(d, job)
    check(any(t.startswith("restart 1 of") for t in ev), ev)


# A LightningModule trained by Lightning's own DDP under rdzv-agent
# (TorchElasticEnvironment), its steps reported by rdzv.hooks'
# LightningProgress; it trains until DIR/finish exists (any rank's view,
# through Lightning's own reduce_boolean_decision).
LIGHTNING = r'''
import os, sys
import torch
import lightning.pytorch as pl
from rdzv.hooks import LightningProgress

d = sys.argv[1]

''' + PL_LINEAR + r'''

class Until(pl.Callback):
    def on_train_batch_end(self, trainer, *a):
        done = os.path.exists(os.path.join(d, "finish"))
        if trainer.strategy.reduce_boolean_decision(done, all=False):
            trainer.should_stop = True
        if trainer.global_step == 3:
            rank = int(os.environ["RANK"])
            p = os.path.join(d, "running.%s.%d" % (
                os.environ["TORCHELASTIC_RESTART_COUNT"], rank))
            with open(p + ".tmp", "w") as f:
                f.write('{"pid": %d}' % os.getpid())
            os.rename(p + ".tmp", p)


if os.environ.get("HELPER") == "1":
    from rdzv import repair
    repair.init_process_group("gloo")   # before the Trainer, never used
torch.manual_seed(0)
x = torch.randn(256, 4)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
trainer = pl.Trainer(accelerator="cpu", strategy="ddp", devices=2,
                     num_nodes=2, max_epochs=100000, logger=False,
                     enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     default_root_dir=d,
                     callbacks=[LightningProgress(), Until()])
trainer.fit(Net(), torch.utils.data.DataLoader(data, batch_size=8))
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
'''


def test_lightning_job_on_every_surface():
    """A Lightning job with rdzv.hooks.LightningProgress: its steps where
    operators look, as a repairing torch job's."""
    compatlib.python_layer("a Lightning job's surfaces", whole_file=False)
    if not compatlib.need_module("lightning"):
        return
    d = rt.Rdzvd()
    with Scope("progress-lightning-") as s:
        a, b = start(s, d, "pl", report=False, program=LIGHTNING,
                     restarts=0)
        torch_surfaces(d, "pl")
        finish(s, [a, b])
    d.stop()


def test_lightning_stopped_worker_caught():
    """SIGSTOP of a rank of a Lightning job reporting through
    LightningProgress: the agents' --progress_timeout kills it (the
    framework's own collectives would wait out gloo's 30 minutes), and
    the job restarts and trains on."""
    compatlib.python_layer("a stopped Lightning rank", whole_file=False)
    if not compatlib.need_module("lightning"):
        return
    d = rt.Rdzvd()
    with Scope("progress-lightning-") as s:
        a, b = start(s, d, "plstop", report=False, program=LIGHTNING,
                     restarts=1, extra=["--progress_timeout", "3"])
        stop_one(s, d, "plstop", [a, b], 1, timeout=120)
        finish(s, [a, b])
    d.stop()


# An Accelerate job (Accelerator(cpu=True): MULTI_CPU on gloo under
# rdzv-agent's environment) that reports each step with one call,
# rdzv.progress.report; it trains until DIR/finish exists (a sum over
# the ranks through Accelerate's own reduce).
ACCELERATE = r'''
import json, os, sys, time
import torch
from accelerate import Accelerator
from rdzv import progress

d = sys.argv[1]
acc = Accelerator(cpu=True)
assert acc.num_processes == 4, acc.state
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.02)
x = torch.randn(256, 4)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
model, opt, dl = acc.prepare(model, opt,
                             torch.utils.data.DataLoader(data, batch_size=8))
step, done = 0, False
while not done:
    for xb, yb in dl:
        opt.zero_grad()
        acc.backward(((model(xb) - yb) ** 2).mean())
        opt.step()
        step += 1
        progress.report(step)
        if step == 3:
            p = os.path.join(d, "running.0.%d" % acc.process_index)
            with open(p + ".tmp", "w") as f:
                json.dump({"pid": os.getpid()}, f)
            os.rename(p + ".tmp", p)
        stop = torch.tensor([float(os.path.exists(os.path.join(d, "finish")))])
        if acc.reduce(stop, reduction="sum").item() > 0 and step >= 5:
            done = True
            break
        time.sleep(0.02)
acc.wait_for_everyone()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
'''


def test_accelerate_job_on_every_surface():
    """An Accelerate job reporting with rdzv.progress.report: its steps
    on every surface, as a plain script's."""
    compatlib.python_layer("an Accelerate job's surfaces", whole_file=False)
    d = rt.Rdzvd()
    with Scope("progress-acc-") as s:
        a, b = start(s, d, "acc", report=True, program=ACCELERATE)
        torch_surfaces(d, "acc")
        finish(s, [a, b])
    d.stop()


def test_helper_unused_restarts():
    """repair.init_process_group() without job.ddp() or job.step(): a
    SIGKILLed rank restarts the job as a plain one's does (a plain
    script's and a Lightning job's, the helper's group made before the
    Trainer)."""
    _helper_unused("unused", PROGRAM)
    _helper_unused("unusedpl", LIGHTNING)


def _helper_unused(job, program):
    d = rt.Rdzvd()
    with Scope("plain-helper-") as s:
        a, b = start(s, d, job, report=False, env={"HELPER": "1"},
                     program=program)
        first = {r["pid"] for r in running(s.tmp, 0).values()}
        os.kill(running(s.tmp, 0)[3]["pid"], signal.SIGKILL)
        rt.wait_until(lambda: len(running(s.tmp, 1)) == 4, timeout=90,
                      what="4 ranks training again after a restart")
        check(not first & {r["pid"] for r in running(s.tmp, 1).values()},
              "a rank of the first attempt trained on in the second")
        finish(s, [a, b])
        ev = job_events(d, job)
        check(any(t.startswith("restart 1 of") for t in ev), ev)
        check(not any(t.startswith("repair") for t in ev), ev)
        out = a.output() + b.output()
        check("replacement pid" not in out, out[-3000:])
    d.stop()


def spares(agent_pids):
    """The pids of the warm spares (comm rdzv-spare, once warm) whose
    parent is one of agent_pids."""
    return {pid for pid, comm, _, ppid in rt.procs()
            if comm == "rdzv-spare" and ppid in agent_pids}


def test_restart_is_warm():
    """A plain job (it cannot repair) once its workers have run a while:
    each agent keeps one warm spare per worker, and a SIGKILL's restart
    starts every new worker from them (the new ranks' pids are the
    spares', each agent says so); --warm_spare 0 keeps none."""
    d = rt.Rdzvd()
    with Scope("warm-restart-") as s:
        a, b = start(s, d, "warm", report=True)
        agents = {a.proc.pid, b.proc.pid}
        rt.wait_until(lambda: len(spares(agents)) == 4, timeout=120,
                      what="4 warm spares (2 per agent)")
        warm = spares(agents)
        os.kill(running(s.tmp, 0)[3]["pid"], signal.SIGKILL)
        rt.wait_until(lambda: len(running(s.tmp, 1)) == 4, timeout=90,
                      what="4 ranks training again after a restart")
        now = {r["pid"] for r in running(s.tmp, 1).values()}
        check(now == warm, (now, warm))
        out = a.output() + b.output()
        check(out.count("of 2 workers from warm spares") == 2,
              out[-3000:])
        finish(s, [a, b])
    with Scope("cold-restart-") as s:
        a, b = start(s, d, "cold", report=True,
                     extra=["--warm_spare", "0"])
        agents = {a.proc.pid, b.proc.pid}
        os.kill(running(s.tmp, 0)[3]["pid"], signal.SIGKILL)
        rt.wait_until(lambda: len(running(s.tmp, 1)) == 4, timeout=90,
                      what="4 ranks training again after a restart")
        check(not spares(agents), spares(agents))
        out = a.output() + b.output()
        check("from warm spares" not in out, out[-3000:])
        finish(s, [a, b])
    d.stop()


OUTSIDE = r'''
import sys
from rdzv import progress
progress.report(5)
print("last", progress.last_step())
try:
    progress.report(-1)
except ValueError as e:
    print("refused", e)
'''


def test_outside_an_agent():
    """Without rdzv-agent's channel: nothing sent, nothing printed on
    stderr, a negative step refused."""
    env = dict(os.environ, PYTHONPATH=PYDIR)
    env.pop("RDZV_PROGRESS_FD", None)
    r = subprocess.run([rt.TORCH2_PYTHON, "-c", OUTSIDE], env=env,
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, r)
    check(r.stdout.splitlines() == ["last None", "refused step -1: want "
                                    "an int >= 0"], r.stdout)
    check(r.stderr == "", r.stderr)


if __name__ == "__main__":
    rt.main(globals(), per_test=150.0, total=420.0)
