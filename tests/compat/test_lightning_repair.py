# SPDX-License-Identifier: Apache-2.0
"""test_lightning_repair: a Lightning 2.6 script repaired in place by
rdzv.lightning.RepairStrategy, torch 2.13 gloo on CPU, under a real
rdzvd and two real rdzv-agents of two workers each.

- The repairable script differs from the plain one (strategy="ddp") in
  the lines `diff -u` marks + and -: at most 3 (an import added, the
  Trainer's strategy changed).
- The plain script, failure-free, gives the reference: its final loss
  over the whole data set (and its steps' samples are the global batches
  of the permutation the strategy's data position follows).
- The scripts train a linear regression (SGD with momentum, a per-step
  StepLR, sync_dist logging, a DataLoader worker, validation at each
  epoch's end, a CSVLogger, a ModelCheckpoint every 8 steps).
- The repairable one has home 0 SIGKILLed at a gate (every rank waits
  after global step 5 until the test says go; the victim is killed
  there, so the survivors' next step is the one cut off), and waits
  again after step 12 until rdzvd has opened the grow round, so that
  the replacement joins while the job trains; then home 2 SIGKILLs
  itself inside step 29 (its peers cut off in that step's collectives)
  and the others wait after step 30 for the second grow; then home 1
  SIGKILLs itself after epoch 1's last validation batch, before the
  validation metrics' sync (a collective of Lightning's outside any
  step: a barrier, then the reduction), and
  the others wait after step 40 for the third grow.  It must end with
  exit 0, no restart (three shrinks to 3, three grows to 4), home 3
  with the pid it had before the kills, homes 0, 1 and 2 held by
  replacements, every rank with the same final loss (the replacements
  received the model, the momentum and the LR schedule) and that loss
  within the tolerance below of the plain run's, each rank having trained the
  same number of steps, and each committed step having trained the
  global batch at the job's position (from the sample ids each rank
  prints: none twice, none skipped, a DataLoader worker process each);
  home 0's replacement logs into the same logger version and writes the
  checkpoints after the repair.
- The repairable script with RDZV_REPAIR=0 and ckpt_path="last": a
  SIGKILL after step 12 restarts the job, which resumes from the
  checkpoint of step 8 mid-epoch; steps 9-12 are trained again with the
  samples of their position, and the final loss is the plain run's.
- The repairable script with a sampler of its own (left to Lightning):
  a SIGKILL is still repaired in place, every rank trains every step,
  the replicas stay the same.
"""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.python_layer("Lightning's RepairStrategy")
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, conf, job_events           # noqa: E402
from compatlib import check, log                        # noqa: E402

PYDIR = os.path.join(rt.top_srcdir(), "python")
EPOCHS, STEPS_PER_EPOCH = 3, 16         # the scripts' max_epochs; 512 / (8 x 4)
# The repaired run's steps at world 3 share each global batch of 32
# unevenly (11/11/10): DDP's mean of the ranks' means weighs those
# samples slightly differently than the plain run's mean over 32, so
# the final loss is close to the reference, not bit-equal (0.04-0.15%
# off here, as the replacements join after more or fewer such steps).
# What a wrong repair does moves it further: in a one-process replay
# of this regression, one step lost +4.4%, one step trained twice
# -5.8%, the momentum lost once -34%.  (Replicas that drifted apart
# are caught by the ranks' final losses differing.)
TOLERANCE = 0.01                        # relative, final loss
VICTIM = 0                              # the home rank killed at a gate
SECOND, DIE_STEP = 2, 28                # killing itself in step 29
THIRD = 1                               # and after epoch 1's validation

PLAIN = r'''
import json, os, sys, time
import torch
import lightning.pytorch as pl

d = sys.argv[1]
home = int(os.environ["RANK"])


def record(name, obj):
    with open(os.path.join(d, "." + name), "w") as f:
        json.dump(obj, f)
    os.rename(os.path.join(d, "." + name), os.path.join(d, name))


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        x, y, ids = batch
        if os.environ.get("DIE_AT") == "%d.%d" % (self.global_step, home) \
                and os.environ.get("RDZV_REPLACEMENT") != "1":
            os.kill(os.getpid(), 9)         # the test's second death
        loss = ((self.lin(x) - y) ** 2).mean()
        self.log("loss", loss, sync_dist=True)
        return loss

    def validation_step(self, batch, i):
        x, y, ids = batch
        self.log("val_loss", ((self.lin(x) - y) ** 2).mean(), sync_dist=True)

    def on_validation_batch_end(self, outputs, batch, i):
        if os.environ.get("DIE_VAL") == "%d.%d.%d" % (
                self.current_epoch, i, home) \
                and not self.trainer.sanity_checking \
                and os.environ.get("RDZV_REPLACEMENT") != "1":
            os.kill(os.getpid(), 9)         # the test's third death

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.02, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, 20, 0.5)
        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Gate(pl.Callback):
    """Prints each step's samples; waits after global step 5 until
    DIR/go, after 12 until DIR/go2, after 30 until DIR/go3, after 40
    until DIR/go4."""

    def on_train_batch_end(self, trainer, module, outputs, batch, i):
        print("COMMIT %d %d %d %d %.6f %s" % (trainer.current_epoch,
              trainer.global_step, trainer.world_size, trainer.global_rank,
              time.time(), ",".join(map(str, batch[2].tolist()))), flush=True)
        for step, name in ((5, "go"), (12, "go2"), (30, "go3"), (40, "go4")):
            if trainer.global_step == step:
                record("at%d.%d" % (step, home), {"pid": os.getpid()})
                while not os.path.exists(os.path.join(d, name)):
                    time.sleep(0.02)


torch.manual_seed(0)
x = torch.randn(512, 4)
y = x @ torch.tensor([[1.0], [-2.0], [3.0], [0.5]]) + 0.3 * torch.randn(512, 1)
data = torch.utils.data.TensorDataset(x, y, torch.arange(512))
trainer = pl.Trainer(strategy="ddp",
                     accelerator="cpu", devices=2, num_nodes=2,
                     max_epochs=3, default_root_dir=d,
                     logger=pl.loggers.CSVLogger(d), log_every_n_steps=4,
                     enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[Gate(), pl.callbacks.ModelCheckpoint(
                         every_n_train_steps=8, save_top_k=-1)])
net = Net()
trainer.fit(net, torch.utils.data.DataLoader(data, batch_size=8,
                                             num_workers=1),
            torch.utils.data.DataLoader(data, batch_size=64))
with torch.no_grad():
    loss = ((net.lin(x) - y) ** 2).mean().item()
print("FINAL home %d pid %d step %d replacement %s loss %.9f" % (
    home, os.getpid(), trainer.global_step,
    os.environ.get("RDZV_REPLACEMENT") == "1", loss), flush=True)
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)        # torch's gloo may abort a finalizing process
'''

REPAIR = PLAIN.replace(
    "import lightning.pytorch as pl\n",
    "import lightning.pytorch as pl\nimport rdzv.lightning\n").replace(
    'pl.Trainer(strategy="ddp",',
    "pl.Trainer(strategy=rdzv.lightning.RepairStrategy(),")

_FINAL = re.compile(r"FINAL home (\d+) pid (\d+) step (\d+) replacement "
                    r"(True|False) loss ([0-9.]+)")
_LOST = re.compile(r"rdzv\.repair\[\d+\]: rank \d+: (shrink|grow|joined "
                   r"grow) round \d+, world \d+ -> \d+, ([0-9.]+) s lost")
st = {}


def agents(s, d, job, program, env=None, restarts=0):
    prog = os.path.join(s.tmp, "train.py")
    with open(prog, "w") as f:
        f.write(program)
    args = ["--nnodes", "2", "--nproc-per-node", "2",
            "--rdzv-endpoint", "127.0.0.1:%d" % d.port, "--rdzv-id", job,
            "--max-restarts", str(restarts), "--grace", "2",
            "--rdzv-conf", conf(0.2, 5.0)]
    # The warm spare imports Lightning too (rdzv.lightning would import
    # it anyway), so a replacement does not after the kill.
    # RDZV_REPAIR_DEBUG: each rank's state moves, and the stacks of a
    # step or repair that holds 20 s, for a failure's log (where()).
    env = {"PYTHON": rt.TORCH2_PYTHON, "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": PYDIR,
           "RDZV_SPARE_IMPORTS": "lightning.pytorch",
           "RDZV_REPAIR_DEBUG": "1", **(env or {})}
    xs = [s.agent(args, env=env, program=[prog, s.tmp]) for _ in range(2)]
    threading.Thread(target=stacks_of_a_stall, args=(xs,),
                     daemon=True).start()
    return xs


def stacks_of_a_stall(xs):
    """Logs gdb's stacks of the agents and their workers (every thread:
    gloo's, the DataLoader's) at the first stall dump in their output, a
    step or repair held 20 s, while they are held: the C side of a
    hang, which the helper's Python dump lacks."""
    while any(x.alive() for x in xs):
        if any("Timeout (" in x.output() for x in xs):
            log("gdb stacks of the held job:\n" + "\n".join(rt.stacks(
                rt.tree([x.pid for x in xs]), frames=16, budget=90.0)))
            return
        time.sleep(1.0)


_WHERE = re.compile(r"rdzv-agent\[|rdzv\.repair\[|\]:(Timeout \(|Thread 0x|"
                    r"Current thread 0x|  File )")


def where(d, job, xs):
    """Logs the agents' output's tail, then each rank's lines: the
    agents', the helper's state moves and the stacks its stall timer
    dumped (RDZV_REPAIR_DEBUG), and rdzvd's events: a failure's log."""
    out = xs[0].output() + xs[1].output()
    log("agents' output:\n" + out[-12000:])
    log("agents' and helper's lines, stacks of a stall:\n" + "\n".join(
        ln[:300] for ln in out.splitlines() if _WHERE.search(ln))[-24000:])
    log("events: %s" % job_events(d, job, soon=True))


def running(xs):
    """True while every agent runs (one that ended fails the test at
    once, with its output)."""
    for x in xs:
        check(x.alive(), "an agent ended:\n" + x.output()[-4000:])
    return True


def finals(out):
    """{home: (pid, steps, replacement, loss)} of the FINAL lines."""
    got = {}
    for h, pid, step, rep, loss in _FINAL.findall(out):
        got[int(h)] = (int(pid), int(step), rep == "True", float(loss))
    check(sorted(got) == [0, 1, 2, 3], out[-4000:])
    return got


def at(tmp, step):
    """{home: pid} of the ranks waiting at the gate after step."""
    out = {}
    for n in os.listdir(tmp):
        m = re.match(r"at%d\.(\d+)$" % step, n)
        if m:
            with open(os.path.join(tmp, n)) as f:
                out[int(m.group(1))] = json.load(f)["pid"]
    return out


def test_cut_closure_is_a_none_step():
    """A step cut inside Lightning's closure (its training_step or
    backward) on a rank whose donor's state holds the step: the strategy
    gives the closure the result of a training_step that returned None
    (rdzv.lightning.no_result), so Lightning's read of it after the
    optimizer's step does not raise "The closure hasn't been executed"
    and end the rank (seen: two ranks cut in step 27's backward while
    the donor had committed it exited 1)."""
    sys.path.insert(0, PYDIR)
    from lightning.pytorch.loops.optimization.automatic import Closure
    from rdzv import lightning as rl

    def cut():
        raise ConnectionError("a peer's death")

    c = Closure(step_fn=cut)
    try:
        c()
    except ConnectionError:
        pass
    rl.no_result(c)
    r = c.consume_result()
    check(r.loss is None and r.closure_loss is None and r.extra == {}, r)
    done = Closure(step_fn=lambda: rl.ClosureResult.from_training_step_output(
        None))
    done()
    kept = done._result
    rl.no_result(done)          # a closure that ran keeps its result
    check(done.consume_result() is kept, kept)


def test_diff():
    """The lines a user changes: diff -u's + and - lines, counted."""
    with Scope("lightning-diff-") as s:
        a, b = os.path.join(s.tmp, "plain.py"), os.path.join(s.tmp,
                                                              "repair.py")
        for p, text in ((a, PLAIN), (b, REPAIR)):
            with open(p, "w") as f:
                f.write(text)
        r = subprocess.run(["diff", "-u", a, b], capture_output=True,
                           text=True)
    lines = [x for x in r.stdout.splitlines() if re.match(r"^[+-][^+-]", x)]
    log("diff -u plain repairable: %d lines:\n%s" % (len(lines),
                                                      "\n".join(lines)))
    check(0 < len(lines) <= 3, r.stdout)


def test_reference():
    """The plain script (Lightning's own DDP), failure-free."""
    compatlib.need_module("lightning")
    d = rt.Rdzvd()
    with Scope("lightning-plain-") as s:
        for name in ("go", "go2", "go3", "go4"):
            open(os.path.join(s.tmp, name), "w").close()
        xs = agents(s, d, "plplain", PLAIN)
        for x in xs:
            rc = x.wait(180)
            check(rc == 0, (rc, x.output()[-4000:]))
        got = finals(xs[0].output() + xs[1].output())
    d.stop()
    losses = {v[3] for v in got.values()}
    check(len(losses) == 1, got)
    check({v[1] for v in got.values()} == {EPOCHS * STEPS_PER_EPOCH}, got)
    # Lightning's DistributedSampler trains the global batches of the
    # permutation the strategy's position follows.
    compatlib.check_samples(xs[0].output() + xs[1].output(), 512, 8, EPOCHS,
                            policy="global")
    st["ref"] = losses.pop()
    log("failure-free plain run: final loss %.6f" % st["ref"])


def test_own_sampler_left_to_lightning():
    """A train DataLoader with a sampler of its own: left to Lightning
    (and said so); a SIGKILL is still repaired in place, every rank
    trains every step and the replicas stay the same."""
    compatlib.need_module("lightning")
    own = REPAIR.replace(
        "batch_size=8,\n",
        "batch_size=8, sampler=Order(),\n").replace(
        "torch.manual_seed(0)\nx =",
        "class Order(torch.utils.data.Sampler):\n"
        "    def __iter__(self):\n"
        "        return iter(range(511, -1, -1))\n\n"
        "    def __len__(self):\n"
        "        return 512\n\n\n"
        "torch.manual_seed(0)\nx =")
    check("sampler=Order()" in own and "class Order" in own, own)
    d = rt.Rdzvd()
    with Scope("lightning-own-") as s:
        xs = agents(s, d, "plown", own)
        try:
            rt.wait_until(lambda: running(xs) and len(at(s.tmp, 5)) == 4,
                          timeout=180, what="4 ranks at the gate after "
                          "step 5")
            before = at(s.tmp, 5)
            os.kill(before[3], signal.SIGKILL)
            open(os.path.join(s.tmp, "go"), "w").close()
            rt.wait_until(lambda: running(xs) and any(
                t.startswith("repair: grow") for t in job_events(d, "plown")),
                timeout=120, what="the grow round")
            for name in ("go2", "go3", "go4"):
                open(os.path.join(s.tmp, name), "w").close()
            for x in xs:
                rc = x.wait(180)
                check(rc == 0, (rc, x.output()[-6000:]))
        except BaseException:
            where(d, "plown", xs)
            raise
        out = xs[0].output() + xs[1].output()
        ev = job_events(d, "plown")
    d.stop()
    check("has a sampler of its own (DistributedSamplerWrapper): left to "
          "Lightning" in out, out[-4000:])
    check(not any(t.startswith("restart ") for t in ev), ev)
    got = finals(out)
    check(all(got[h][0] == before[h] for h in (0, 1, 2)), (got, before))
    check({v[1] for v in got.values()} == {EPOCHS * STEPS_PER_EPOCH}, got)
    check(len({v[3] for v in got.values()}) == 1, got)


def test_restart_resumes_from_lightning_checkpoint():
    """RDZV_REPAIR=0 (no repair: a death restarts the job) and the
    script resuming with ckpt_path="last": a worker SIGKILLed at the gate
    after step 12, the restarted job resumes from the checkpoint of step
    8 (mid-epoch) and trains the steps left, each step's samples those of
    its position, to the plain run's final loss."""
    compatlib.need_module("lightning")
    # A fixed logger version: the restarted job's checkpoint directory
    # is the first one's, where "last" is found.
    prog = REPAIR.replace(
        "every_n_train_steps=8, save_top_k=-1)",
        "every_n_train_steps=4, save_top_k=-1, save_last=True)").replace(
        "batch_size=64))",
        "batch_size=64),\n            ckpt_path=\"last\")").replace(
        "CSVLogger(d)", "CSVLogger(d, version=0)")
    check(prog.count('ckpt_path="last"') == 1 and "save_last" in prog and
          "version=0" in prog, prog)
    d = rt.Rdzvd()
    with Scope("lightning-resume-") as s:
        for name in ("go", "go3", "go4"):
            open(os.path.join(s.tmp, name), "w").close()
        xs = agents(s, d, "plres", prog, env={"RDZV_REPAIR": "0"},
                    restarts=1)
        try:
            rt.wait_until(lambda: running(xs) and len(at(s.tmp, 12)) == 4,
                          timeout=180, what="4 ranks at the gate after "
                          "step 12")
            os.kill(at(s.tmp, 12)[1], signal.SIGKILL)
            open(os.path.join(s.tmp, "go2"), "w").close()
            for x in xs:
                rc = x.wait(180)
                check(rc == 0, (rc, x.output()[-6000:]))
        except BaseException:
            where(d, "plres", xs)
            raise
        out = xs[0].output() + xs[1].output()
        ev = job_events(d, "plres")
    d.stop()
    check(any(t.startswith("restart 1 of") for t in ev), ev)
    check(not any(t.startswith("repair") for t in ev), ev)
    # Steps 1-8 were trained once (the first attempt), 9-12 twice (the
    # second resumed from step 8's checkpoint), the rest once.
    times = {}
    for _, step, _, _, _, _ in compatlib.COMMIT_RE.findall(out):
        times[int(step)] = times.get(int(step), 0) + 1
    log("ranks' commits of each step: %s" % times)
    check(all(times[k] == (8 if 9 <= k <= 12 else 4)
              for k in range(1, EPOCHS * STEPS_PER_EPOCH + 1)), times)
    compatlib.check_samples(out, 512, 8, EPOCHS, policy="global")
    got = finals(out)
    check({v[1] for v in got.values()} == {EPOCHS * STEPS_PER_EPOCH}, got)
    losses = {v[3] for v in got.values()}
    check(len(losses) == 1, got)
    ref = st.get("ref")
    log("restarted run: final loss %.6f, failure-free %s" % (
        min(losses), "%.6f" % ref if ref is not None else "not run"))
    if ref is not None:
        check(abs(min(losses) - ref) <= 1e-4 * ref, (losses, ref))


def test_kill_repairs_in_place():
    """Home 0 SIGKILLed at a gate, home 2 inside a step: each a shrink
    and a grow, the same survivors, the same loss; home 0's replacement
    logs and checkpoints where it did."""
    compatlib.need_module("lightning")
    d = rt.Rdzvd()
    with Scope("lightning-repair-") as s:
        xs = agents(s, d, "plrep", REPAIR,
                    env={"DIE_AT": "%d.%d" % (DIE_STEP, SECOND),
                         "DIE_VAL": "1.1.%d" % THIRD})
        try:
            rt.wait_until(lambda: running(xs) and len(at(s.tmp, 5)) == 4,
                          timeout=180, what="4 ranks at the gate after "
                          "step 5")
            before = at(s.tmp, 5)
            victim = before[VICTIM]
            t0 = time.monotonic()
            log("SIGKILL home %d (pid %d); survivors %s" % (VICTIM,
                victim, sorted(p for h, p in before.items()
                               if h != VICTIM)))
            os.kill(victim, signal.SIGKILL)
            open(os.path.join(s.tmp, "go"), "w").close()
            rt.wait_until(lambda: running(xs) and any(
                t.startswith("repair: grow") for t in job_events(d, "plrep")),
                timeout=120, what="the grow round")
            log("kill -> grow round opened: %.1f s" % (
                time.monotonic() - t0))
            open(os.path.join(s.tmp, "go2"), "w").close()
            # Home SECOND kills itself inside step DIE_STEP + 1; the
            # others wait after step 30 for its replacement.
            rt.wait_until(lambda: running(xs) and sum(
                t.startswith("repair: grow") for t in job_events(d, "plrep"))
                == 2, timeout=120, what="the second grow round")
            open(os.path.join(s.tmp, "go3"), "w").close()
            # Home THIRD kills itself after epoch 1's last validation
            # batch, before the metrics' sync; the others wait after step
            # 40.
            rt.wait_until(lambda: running(xs) and sum(
                t.startswith("repair: grow") for t in job_events(d, "plrep"))
                == 3, timeout=120, what="the third grow round")
            open(os.path.join(s.tmp, "go4"), "w").close()
            for x in xs:
                rc = x.wait(180)
                check(rc == 0, (rc, x.output()[-6000:]))
        except BaseException:
            where(d, "plrep", xs)
            raise
        out = xs[0].output() + xs[1].output()
        ev = job_events(d, "plrep")
        logs = os.path.join(s.tmp, "lightning_logs")
        versions = sorted(os.listdir(logs))
        with open(os.path.join(logs, "version_0", "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        ckpts = sorted(os.listdir(os.path.join(logs, "version_0",
                                               "checkpoints")))
    d.stop()
    log("events: %s" % ev)
    log("the ranks' repair lines:\n" + "\n".join(
        ln for ln in out.splitlines() if "rdzv.repair[" in ln))
    check(sum(t.startswith("repair: shrink to 3") for t in ev) == 3, ev)
    check(sum(t.startswith("repair: grow to 4") for t in ev) == 3, ev)
    check(not any(t.startswith("restart ") or "escalated" in t
                  for t in ev), ev)
    # Each committed step trained the global batch at the job's
    # position (shared among 3 while short), none twice, none skipped.
    compatlib.check_samples(out, 512, 8, EPOCHS, policy="global")
    got = finals(out)
    for h in range(4):
        if h not in (VICTIM, SECOND, THIRD):
            check(got[h][0] == before[h] and not got[h][2],
                  "home %d: pid %d, was %d" % (h, got[h][0], before[h]))
        else:
            check(got[h][0] != before[h] and got[h][2], got)
    check({v[1] for v in got.values()} == {EPOCHS * STEPS_PER_EPOCH}, got)
    losses = {v[3] for v in got.values()}
    check(len(losses) == 1, "the replicas differ: %s" % got)
    loss = losses.pop()
    lost = _LOST.findall(out)
    log("repairs: %s" % ", ".join("%s %s s" % x for x in lost))
    check(any(k == "shrink" for k, _ in lost), out[-4000:])
    # Home 0's replacement went on with its logger's version and its
    # checkpoints' names: one version, the last steps logged, a
    # checkpoint every 8 steps after the grow (the one due while home 0
    # was dead, at step 8, is not written).
    steps = sorted({int(r["step"]) for r in rows})
    log("logs %s, metrics.csv steps %s, checkpoints %s" % (versions,
                                                          steps, ckpts))
    check(versions == ["version_0"], versions)
    check(steps and steps[-1] >= EPOCHS * STEPS_PER_EPOCH - 4, steps)
    want = ["epoch=%d-step=%d.ckpt" % ((k - 1) // STEPS_PER_EPOCH, k)
            for k in range(16, EPOCHS * STEPS_PER_EPOCH + 1, 8)]
    check(set(want) <= set(ckpts), (want, ckpts))
    ref = st.get("ref")
    log("repaired run: final loss %.6f, failure-free %s" % (
        loss, "%.6f" % ref if ref is not None else "not run"))
    if ref is not None:
        check(abs(loss - ref) <= TOLERANCE * ref, (loss, ref))


if __name__ == "__main__":
    rt.main(globals(), per_test=200.0, total=400.0)
