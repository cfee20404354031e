# SPDX-License-Identifier: Apache-2.0
"""test_helper_scripts: the repair helper with scripts as people write
them, torch 2.13, under two real rdzv-agents of two workers each and a
real rdzvd.

- A script error before the first committed step (every rank raises in
  its first step) is never repaired: the job restarts as many times as
  --max-restarts says and then fails, the traceback in the agent's
  output, with no repair round in the job's events (the helper once
  repaired such a crash round after round until max_repairs).
- A replacement that raises before its first step (an error only the
  replacement's path has) withdraws its offer: the job restarts once
  and trains to its end, not one repair after another.
- A logger made by the rank whose job.home is 0: a SIGKILL of that
  process moves dist.get_rank() 0 to another survivor, but the log is
  written by home 0 alone, the original and then its replacement, into
  one file, the steps going on, the job never restarted.
- torch.compile(job.ddp(net)) and job.ddp(torch.compile(net)): job.ddp()
  returns a DistributedDataParallel (the same object across repairs), so
  both train, and a SIGKILLed rank is repaired in place, with no C++
  stack trace in the output.
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, job_events                 # noqa: E402
from agent_torch import running                         # noqa: E402
from compatlib import (check, checkpoints_complete, log,  # noqa: E402
                       script_agents, script_finish)

# A repairable script (job.ddp, job.track, job.batches, job.step) that
# trains until DIR/finish exists (the ranks agree inside the step).  At
# its first committed step a process records its pid under its home
# rank (running.ATTEMPT.HOME); home 0 keeps a log, one line per
# committed step, and every rank its sample ids (ids.ATTEMPT.HOME.PID:
# step epoch ids).  CKPT=DIR: job.load(DIR) at the start, job.save(DIR)
# every 5 steps (MODE=ckpt_cut: home 3 stops before its save at step
# 10, for the test to kill it there).  MODE=crash: every rank raises in
# its first step;
# MODE=crash_repl: a replacement does; MODE=compile_before,
# compile_after: torch.compile on the module or on job.ddp()'s model;
# MODE=driven: job.begin_step()/end_step() in place of `with`.
PROGRAM = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
from rdzv import repair

d, mode = sys.argv[1], os.environ.get("MODE", "")
job = repair.init_process_group("gloo")
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
torch.manual_seed(0)
net = torch.nn.Linear(4, 1)
if mode == "compile_before":
    net = torch.compile(net)
model = job.ddp(net)
if mode == "compile_after":
    model = torch.compile(model)
opt = job.track(torch.optim.AdamW(model.parameters(), lr=0.02))
ck = os.environ.get("CKPT")
if ck:
    job.load(ck)
x = torch.randn(256, 4)
y = x.sum(1, keepdim=True)
ids = open(os.path.join(d, "ids.%d.%d.%d" % (attempt, job.home,
                                              os.getpid())), "a")
log = open(os.path.join(d, "log.txt"), "a") if job.home == 0 else None
first = True
done = False


def train(idx):
    if mode == "crash" or (mode == "crash_repl" and job.replacement):
        train_stpe(model)   # the script's typo
    opt.zero_grad()
    ((model(x[idx]) - y[idx]) ** 2).mean().backward()
    opt.step()
    stop = torch.tensor([float(os.path.exists(os.path.join(d, "finish")))])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    return stop


for epoch in job.epochs(10 ** 6):
    for idx in job.batches(256, 4):
        if mode == "driven":    # a framework's loop: no `with`
            job.begin_step()
            try:
                stop, err = train(idx), None
            except Exception as e:
                err = e
            job.end_step(err)
        else:
            with job.step():
                stop = train(idx)
        if not job.committed:
            continue
        ids.write("%d %d %s\n" % (job.step_count, epoch,
                                  ",".join(map(str, idx))))
        ids.flush()
        if mode == "dcp_direct" and job.step_count == 3:
            import torch.distributed.checkpoint as dcp
            dcp.save({"model": model.state_dict()},
                     checkpoint_id=os.path.join(d, "direct"))
        if ck and job.step_count % 5 == 0:
            if mode == "ckpt_cut" and job.home == 3 and \
                    not job.replacement and job.step_count >= 10:
                # The others are in job.save()'s first collective now:
                # the test kills this rank there.
                open(os.path.join(d, "saving"), "w").close()
                while True:
                    time.sleep(1)
            job.save(ck)
        if log is not None:
            log.write("%d %d %d %d\n" % (os.getpid(), job.home,
                                         dist.get_rank(), job.step_count))
            log.flush()
        if dist.get_rank() == 0 and job.home != 0:
            open(os.path.join(d, "moved"), "a").close()  # rank 0 moved
        if first:
            first = False
            tmp = os.path.join(d, ".running.%d.%d" % (attempt, job.home))
            with open(tmp, "w") as f:
                json.dump({"pid": os.getpid(),
                           "replacement": job.replacement}, f)
            os.rename(tmp, os.path.join(d, "running.%d.%d" % (attempt,
                                                              job.home)))
        if stop.item() > 0:
            done = True
            break
        time.sleep(0.02)
    if done:
        break
dist.barrier()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
'''


def start(s, d, job, mode, restarts, env=None):
    return script_agents(s, d, job, PROGRAM, restarts,
                         env=dict(MODE=mode, **(env or {})))


def start_training(s, d, job, mode, restarts, timeout):
    """start(), once its 4 ranks train (within timeout seconds)."""
    agents = start(s, d, job, mode, restarts)
    rt.wait_until(lambda: len(running(s.tmp, 0)) == 4, timeout=timeout,
                  what="4 ranks training")
    return agents


def kill_replaced(s, home):
    """SIGKILLs the process at home rank `home`; returns once its
    replacement steps."""
    os.kill(running(s.tmp, 0)[home]["pid"], signal.SIGKILL)
    rt.wait_until(lambda: running(s.tmp, 0)[home]["replacement"],
                  timeout=240, what="home %d's replacement stepping" % home)


def finish(s, agents):
    script_finish(s, agents, 90)


def test_crash_at_start_fails_fast():
    """Every rank's first step raises NameError: restart 1 of 1, then
    the agents exit non-zero with the traceback; no repair at all."""
    d = rt.Rdzvd()
    with Scope("fail-fast-") as s:
        t0 = time.monotonic()
        agents = start(s, d, "crash", "crash", restarts=1)
        rcs = [x.wait(240) for x in agents]
        took = time.monotonic() - t0
        out = "".join(x.output() for x in agents)
        check(all(rc not in (0, None) for rc in rcs), (rcs, out[-3000:]))
        ev = job_events(d, "crash")
        check(not any(t.startswith("repair") for t in ev), ev)
        check(any(t.startswith("restart 1 of") for t in ev), ev)
        check("NameError: name 'train_stpe' is not defined" in out,
              out[-3000:])
        check("failed before its first committed step" in out, out[-3000:])
        check("replacement pid" not in out, out[-3000:])
        log("a script error at its first step ended the job in %.1f s "
               "(one restart, both agents exit %s)" % (took, rcs))
    d.stop()


def test_replacement_crash_restarts_once():
    """A SIGKILL is repaired, but the replacement raises in its first
    step: it withdraws its offer, the job restarts once (no second
    repair) and trains to its end."""
    d = rt.Rdzvd()
    with Scope("fail-fast-") as s:
        agents = start_training(s, d, "crashrepl", "crash_repl", restarts=1,
                                timeout=120)
        os.kill(running(s.tmp, 0)[3]["pid"], signal.SIGKILL)
        rt.wait_until(lambda: len(running(s.tmp, 1)) == 4, timeout=120,
                      what="4 ranks training after the restart")
        finish(s, agents)
        out = "".join(x.output() for x in agents)
        check("NameError: name 'train_stpe' is not defined" in out,
              out[-3000:])
        ev = job_events(d, "crashrepl")
        shrinks = [t for t in ev if t.startswith("repair: shrink")]
        check(len(shrinks) == 1, ev)
        check(sum(t.startswith("restart ") for t in ev) == 1, ev)
        check(out.count("replacement pid") == 1, out[-3000:])
    d.stop()


def test_home_zero_logger_across_its_kill():
    """The process at home 0 keeps the log; it is SIGKILLed: its
    replacement (home 0 again) goes on writing it while another
    survivor is rank 0; one file, home 0 alone, no restart."""
    d = rt.Rdzvd()
    with Scope("home-logger-") as s:
        agents = start_training(s, d, "logger", "", restarts=0,
                                timeout=120)
        victim = running(s.tmp, 0)[0]["pid"]
        path = os.path.join(s.tmp, "log.txt")

        def lines():
            with open(path) as f:
                return [tuple(map(int, ln.split())) for ln in f
                        if ln.endswith("\n")]
        rt.wait_until(lambda: len(lines()) >= 5, timeout=120,
                      what="5 steps in home 0's log")
        os.kill(victim, signal.SIGKILL)
        rt.wait_until(lambda: sum(ln[0] != victim for ln in lines()) >= 5,
                      timeout=120, what="home 0's replacement logging")
        finish(s, agents)
        got = lines()
        pids = []
        for pid, _, _, _ in got:
            if pid not in pids:
                pids.append(pid)
        check(len(pids) == 2 and pids[0] == victim, pids)
        check(all(home == 0 for _, home, _, _ in got), got[:5])
        before = [st for pid, _, _, st in got if pid == victim]
        after = [st for pid, _, _, st in got if pid != victim]
        check(after == sorted(after) and before == sorted(before) and
              after[-1] > before[-1], (before[-3:], after[:3]))
        # While home 0 was away, rank 0 was another process.
        check(os.path.exists(os.path.join(s.tmp, "moved")),
              "rank 0 never moved to another home")
        ev = job_events(d, "logger")
        check(not any(t.startswith("restart ") for t in ev), ev)
        check(any(t.startswith("repair: shrink") for t in ev), ev)
        log("home 0's log: %d lines by the original, %d by its "
               "replacement (ranks %s)" % (len(before), len(after),
                                            sorted({r for p, _, r, _ in got
                                                    if p != victim})))
    d.stop()


def committed(tmp, attempt):
    """step -> (epoch, sorted ids of the global batch) of an attempt."""
    out = {}
    for name in os.listdir(tmp):
        if not name.startswith("ids.%d." % attempt):
            continue
        with open(os.path.join(tmp, name)) as f:
            for ln in f:
                if not ln.endswith("\n"):
                    continue
                step, epoch, idx = ln.split()
                e, got = out.setdefault(int(step), (int(epoch), []))
                check(e == int(epoch), (name, ln))
                got.extend(int(i) for i in idx.split(","))
    return {k: (e, sorted(v)) for k, (e, v) in out.items()}


def test_checkpoint_cut_by_a_kill():
    """job.save() every 5 steps (DCP) and job.load() at the start: home
    3 is SIGKILLed while the others are inside the save of step 10.  The
    survivors repair and save again in the new group; the replacement
    does not load (its state comes from a donor); the job trains to its
    end with no restart; every step-N directory is complete and latest
    names one."""
    d = rt.Rdzvd()
    with Scope("ckpt-cut-") as s:
        root = os.path.join(s.tmp, "ckpt")
        agents = start(s, d, "ckptcut", "ckpt_cut", restarts=0,
                       env={"CKPT": root})
        rt.wait_until(lambda: os.path.exists(os.path.join(s.tmp,
                                                          "saving")),
                      timeout=240, what="home 3 at the save of step 10")
        kill_replaced(s, 3)
        rt.wait_until(lambda: checkpoints_complete(root) >= "step-%09d"
                      % 20, timeout=240, what="a checkpoint after the "
                      "replacement joined")
        finish(s, agents)
        out = "".join(x.output() for x in agents)
        ev = job_events(d, "ckptcut")
        check(not any(t.startswith("restart ") for t in ev), ev)
        check(out.count("was cut by a peer's death: saving again") >= 1,
              out[-3000:])
        check("replaces a dead rank: its state comes from a live donor"
              in out, out[-3000:])
        name = checkpoints_complete(root)
        log("checkpoints after a kill inside a save: latest %s, %d tries "
            "left .partial" % (name, sum(n.endswith(".partial")
                                         for n in os.listdir(root))))
    d.stop()


def test_restart_resumes_from_checkpoint():
    """A job that cannot repair (RDZV_REPAIR=0) with job.save() every 5
    steps: a SIGKILL restarts it, every rank of attempt 1 loads latest
    and resumes after its step, and the timeline (attempt 0 up to the
    checkpoint, attempt 1 after it) trains each global batch of every
    epoch once, the same batches as attempt 0 trained."""
    d = rt.Rdzvd()
    with Scope("ckpt-restart-") as s:
        root = os.path.join(s.tmp, "ckpt")
        agents = start(s, d, "ckptrestart", "", restarts=1,
                       env={"CKPT": root, "RDZV_REPAIR": "0"})
        rt.wait_until(lambda: len(running(s.tmp, 0)) == 4 and
                      os.path.exists(os.path.join(root, "latest")) and
                      checkpoints_complete(root) >= "step-%09d" % 20,
                      timeout=240, what="a checkpoint of step 20")
        os.kill(running(s.tmp, 0)[2]["pid"], signal.SIGKILL)
        rt.wait_until(lambda: len(running(s.tmp, 1)) == 4, timeout=240,
                      what="4 ranks training after the restart")
        rt.wait_until(lambda: len(committed(s.tmp, 1)) >= 10,
                      timeout=240, what="10 steps after the restart")
        finish(s, agents)
        out = "".join(x.output() for x in agents)
        a0, a1 = committed(s.tmp, 0), committed(s.tmp, 1)
        first = min(a1)
        resumed = [ln for ln in out.splitlines() if "resumed from" in ln]
        check(len(resumed) == 4 and all("step-%09d" % (first - 1) in ln
                                        for ln in resumed),
              (first, resumed))
        check((first - 1) % 5 == 0 and first - 1 <= max(a0), (first, a0))
        for k in sorted(a1):
            if k in a0:
                check(a0[k] == a1[k], "step %d: attempt 0 trained %s, "
                      "attempt 1 %s" % (k, a0[k], a1[k]))
        line = {k: v for k, v in a0.items() if k < first}
        line.update(a1)
        seen = {}
        for k in sorted(line):
            e, got = line[k]
            check(len(got) == 16, (k, got))
            before = seen.setdefault(e, set())
            check(not before & set(got), "epoch %d: step %d trains %s "
                  "again" % (e, k, sorted(before & set(got))))
            before.update(got)
        log("restart resumed at step %d from step-%09d (attempt 0 reached "
            "%d); %d steps checked" % (first, first - 1, max(a0),
                                      len(line)))
    d.stop()


def test_direct_dcp_refused():
    """dcp.save called by the script itself in a job that repairs: the
    first call raises, naming job.save(); the job ends (no repair)."""
    d = rt.Rdzvd()
    with Scope("dcp-direct-") as s:
        agents = start(s, d, "dcpdirect", "dcp_direct", restarts=0)
        rcs = [x.wait(240) for x in agents]
        out = "".join(x.output() for x in agents)
        check(all(rc not in (0, None) for rc in rcs), (rcs, out[-3000:]))
        check("Use job.save(DIR) and job.load(DIR)" in out, out[-3000:])
        ev = job_events(d, "dcpdirect")
        check(not any(t.startswith("repair") for t in ev), ev)
    d.stop()


def test_step_driven_by_a_framework():
    """begin_step()/end_step(error) in place of `with job.step():`, as a
    framework's hooks would call them: a SIGKILLed rank is repaired in
    place, the replacement steps, the job ends 0 with no restart, and
    every global batch of each epoch is trained once."""
    d = rt.Rdzvd()
    with Scope("driven-") as s:
        agents = start_training(s, d, "driven", "driven", restarts=0,
                                timeout=240)
        kill_replaced(s, 1)
        finish(s, agents)
        ev = job_events(d, "driven")
        check(not any(t.startswith("restart ") for t in ev), ev)
        check(any(t.startswith("repair: shrink") for t in ev), ev)
        steps = committed(s.tmp, 0)
        seen = {}
        for k in sorted(steps)[:-1]:	# the last may be logged in part
            e, got = steps[k]
            before = seen.setdefault(e, set())
            check(not before & set(got), "epoch %d: step %d trains %s "
                  "again" % (e, k, sorted(before & set(got))))
            before.update(got)
        log("driven by begin_step/end_step: %d steps through a kill, no "
            "sample twice" % len(steps))
    d.stop()


def _compiled(mode):
    """torch.compile before or after job.ddp(): a SIGKILLed rank is
    repaired in place (no restart), the replacement trains, the job ends
    0, and no C++ stack trace reaches the output."""
    d = rt.Rdzvd()
    with Scope("compile-") as s:
        job = mode.replace("_", "")
        agents = start_training(s, d, job, mode, restarts=0,
                                timeout=240)
        kill_replaced(s, 3)
        finish(s, agents)
        out = "".join(x.output() for x in agents)
        ev = job_events(d, job)
        check(not any(t.startswith("restart ") for t in ev), ev)
        check(any(t.startswith("repair: shrink") for t in ev), ev)
        check("frame #" not in out and "Exception raised from" not in out,
              out[-3000:])
        lost = [ln.split(" lost")[0].split(", ")[-1] for ln in
                out.splitlines() if "shrink round" in ln and " lost" in ln]
        log("%s: repaired, the shrink cost %s" % (mode, lost))
    d.stop()


def test_compile_after_ddp():
    compatlib.python_layer("torch.compile", whole_file=False)
    _compiled("compile_after")


def test_compile_before_ddp():
    compatlib.python_layer("torch.compile", whole_file=False)
    _compiled("compile_before")


if __name__ == "__main__":
    rt.main(globals(), per_test=300.0, total=1200.0)
