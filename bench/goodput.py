# SPDX-License-Identifier: Apache-2.0
"""goodput.py: training progress kept through repeated worker failures,
rdzv's in-place repair beside a full restart and torchrun, in one run.

    python3 bench/goodput.py BUILDDIR [--seconds 180] [--every 30,10]
        [--reps 1] [--sides repair,restart,torchrun] [--seed 1]
        [--paired] [--from-first-step] [--torchrun PATH] [--python PATH]
        [--keep]

A job of 2 nodes x 2 workers on this host (bench/jobs.py): two
launchers, each with --nproc_per_node 2.  The sides, C workers (examples/ddp_mlp, the real
Fashion-MNIST, C_ARGS below plus a fresh --checkpoint per job: it saves
at every epoch end and a restarted job resumes from it):

  repair    two rdzv-agents against one rdzvd (as
            tests/integ/repair_agent.py starts them), ddp_mlp's default:
            a dead worker is repaired in place (shrink, then grow);
  restart   the same with RDZV_REPAIR=0 in the workers: a death restarts
            every worker, which resume from the checkpoint;
  torchrun  two torchrun (torch 2.13) agents, c10d rendezvous hosted by
            one of them, --no_python with the same ddp_mlp (no agent
            channel, so no repair: a death restarts every worker);

and torch workers (examples/torch_ddp_repair.py under --python, torch
2.13, gloo, TORCH_ARGS below; the program keeps no checkpoint):

  torch-repair    two rdzv-agents, rdzv.repair repairs in place;
  torch-torchrun  two torchrun 2.13 agents: a death restarts every
                  worker from step 0 (the program has no checkpoint).

Every launcher gets --max_restarts 1000.  Each job runs for a window of
--seconds wall-clock seconds from the launch of its agents; a cell is a
side and a failure interval (0: no failure; N: a SIGKILL of one worker,
chosen at random among the job's live workers, at N, 2N, ... seconds
while inside the window; with --from-first-step, N, 2N, ... seconds
after the job's first progress line, for programs whose start takes
longer than N).  At the end of the window the job is stopped.

Progress p(t), in global steps of the 4-worker job (4 x --batch
samples), from rank 0's lines as they arrive (monotonic time of this
process; whichever process is rank 0 at the time):
  C      "epoch E P% step S/T" is E-1 + S/T epochs trained into the
         parameters, "epoch E loss ..." is E epochs, times the steps per
         epoch of the 4-worker job (S/T is the share of the epoch's
         samples, so a step of a shrunk world of 3 counts 3/4).  Lines
         come at every quarter epoch and epoch end (25 steps).
  torch  --log-steps: every committed step prints "STEP rank step world
         time"; rank 0's lines, each new step counting world/4 (a step of
         a shrunk world counts 3/4), a step number below the previous one
         (torchrun's restart from scratch) starting over at that number.
Work a restart throws away is not counted (the resumed rank 0 prints the
checkpoint's position again, or step 0).

Two figures per job:

  steps     p at the window's end; goodput = steps(failure every N) /
            steps(no failure) of the same side, medians over --reps.
            This is the issue's figure, but it compares two jobs run at
            different times: on a shared machine their rates differ by
            10% or more with the load of others, which swamps the few
            percent a failure costs;
  lost      per failure, measured inside the job itself: with the kill
            at tk, X = 0.8 N and P = 0.2 N (so that the windows of two
            kills do not overlap), r = (p(tk) - p(tk - P)) / P the rate
            just before the kill, lost = X - (p(tk + X) - p(tk)) / r: the
            seconds of training at the job's own rate that the failure
            cost (detection, restart or repair, work thrown away, a
            slower shrunk world, the replacement's start).  The job's
            in-job goodput is 1 - (sum of lost) / (end - first progress
            line).  Load changes slower than N cancel out.  The same
            "lost" at the kill times of the N cell, computed on the
            failure-free job, is the metric's own noise (printed as
            "no failure: lost at the Ns cell's kill times").

--paired: every job runs at the same time as a failure-free twin (the
same side and program, its own job name and checkpoint), which sees the
same load from the rest of the machine; paired goodput = steps / the
twin's steps, median [min max] over --reps.  Both jobs share the two
cores: while one stalls the other gets more of them, which makes a loss
look up to twice as large on an idle machine (less on a loaded one).
With --paired, --every 0 (named in the list) is a control: two
failure-free jobs side by side, whose ratio is the pairing's own noise.

The cells are interleaved (every side runs a cell before any side runs
the next, and the order of the sides rotates per repetition) so that load
falls on all of them alike.  One line per job as it ends, then a table.
"""

import argparse
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time

C_ARGS = ["--hidden", "64", "--batch", "16", "--threads", "1",
          "--limit", "6400", "--test-limit", "1000", "--lr", "0.05",
          "--epochs", "100000"]
TORCH_ARGS = ["--hidden", "64", "--batch", "16", "--limit", "6400",
              "--lr", "0.05", "--epochs", "100000", "--log-steps"]
TORCH_STEPS = 100		# global steps per epoch of TORCH_ARGS at 4
PYTHON = "/root/.cache/rdzv/torch-2.13/bin/python"
STEP_RE = re.compile(r"STEP 0 (\d+) (\d+) [0-9.]+")
SIDES = ("repair", "restart", "torchrun", "torch-repair", "torch-torchrun")


def curve(lines, c):
    """p(t): [(t, steps)] in arrival order from a job's lines, C workers'
    (c) or torch workers', see the header."""
    out = []
    if c:
        per = None
        for t, s in lines:
            m = jobs.PART_RE.search(s)
            if m and per is None and m.group(1) == "1":
                per = int(m.group(3))
        if per is None:
            return []
        for t, s in lines:
            m = jobs.PART_RE.search(s)
            if m:
                out.append((t, per * (int(m.group(1)) - 1 +
                                      int(m.group(2)) / int(m.group(3)))))
                continue
            m = jobs.END_RE.search(s)
            if m:
                out.append((t, per * float(m.group(1))))
        return out
    p, last = 0.0, None
    for t, s in lines:
        m = STEP_RE.search(s)
        if not m:
            continue
        step, world = int(m.group(1)), int(m.group(2))
        if last is None or step < last:
            p = float(step)
        else:
            p += (step - last) * world / 4.0
        last = step
        out.append((t, p))
    return out


def at(curve, t):
    """p(t): the last value at or before t, 0 before the first."""
    v = 0.0
    for ti, pi in curve:
        if ti > t:
            break
        v = pi
    return v


def lost(curve, kills, every, end):
    """[seconds lost] per kill, measured inside the job (the header);
    a kill whose rate before it is 0 (not training yet) is left out."""
    out = []
    for tk in kills:
        x = min(0.8 * every, end - tk)
        pre = 0.2 * every
        r = (at(curve, tk) - at(curve, tk - pre)) / pre
        if r <= 0 or x <= 0:
            continue
        out.append(x - (at(curve, tk + x) - at(curve, tk)) / r)
    return out


def done_with(tmp, keep):
    """Removes the jobs' directory tmp, or says where it is with keep."""
    if keep:
        print("jobs' output kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    global jobs
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--every", default="30,10")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--sides", default="repair,restart,torchrun")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--torchrun", help="torch 2.13's torchrun (default: "
                    "bench/jobs.py's TORCHRUN)")
    ap.add_argument("--python", default=PYTHON,
                    help="the torch sides' python (torch 2.13)")
    ap.add_argument("--from-first-step", action="store_true",
                    help="the kills at N, 2N, ... s after the job's first "
                    "progress line instead of its launch")
    ap.add_argument("--paired", action="store_true",
                    help="run each job beside a failure-free twin (a "
                    "cell of --every 0 is then a control, left out "
                    "unless named)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the jobs' directories (agent output)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    os.environ.setdefault("RDZV_TOP_BUILDDIR", build)
    os.environ.setdefault("RDZV_TOP_SRCDIR", src)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jobs
    import rdzvtest as rt

    a.torchrun = a.torchrun or jobs.TORCHRUN

    sides = a.sides.split(",")
    for side in sides:
        if side not in SIDES:
            ap.error("unknown side %s (%s)" % (side, ",".join(SIDES)))
    for side in list(sides):
        if side.endswith("torchrun") and not os.access(a.torchrun, os.X_OK):
            print("goodput: no torchrun at %s: %s left out"
                  % (a.torchrun, side))
            sides.remove(side)
        elif side.startswith("torch-") and not os.access(a.python, os.X_OK):
            print("goodput: no python at %s: %s left out" % (a.python, side))
            sides.remove(side)
    every = [float(x) for x in a.every.split(",") if x]
    if not a.paired or not every:
        every = [0.0] + [x for x in every if x > 0]
    cprog = [os.path.join(build, "examples", "ddp_mlp")] + C_ARGS
    # A python program (python=): rdzv-agent keeps its warm spare.
    tprog = [os.path.join(src, "examples", "torch_ddp_repair.py")] + \
        TORCH_ARGS
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="goodput-")
    d = rt.Rdzvd()
    res = {}		# (side, every) -> [steps]
    kills = {}		# (side, every) -> [n]
    losses = {}		# (side, every) -> [seconds lost per kill]
    inj = {}		# (side, every) -> [in-job goodput]
    floor = {}		# (side, every) -> [lost at no kill]
    pr = {}		# (side, every) -> [steps / twin's steps] (--paired)
    njob = 0
    try:
        for rep in range(a.reps):
            order = sides[rep % len(sides):] + sides[:rep % len(sides)]
            for ev in every:
                for side in order:
                    njob += 1
                    name = "%s-%g-%d" % (side, ev, njob)
                    c = not side.startswith("torch-")
                    env = dict(os.environ)
                    if not c:
                        env.update({"OMP_NUM_THREADS": "1",
                                    "GLOO_SOCKET_IFNAME": "lo"})
                    load = os.getloadavg()[0]
                    started = []	# the job, then its twin (--paired)
                    for jn in [name] + ([name + "-twin"] if a.paired
                                        else []):
                        jd = os.path.join(tmp, jn)
                        os.makedirs(jd)
                        wprog = cprog + ["--checkpoint",
                                         os.path.join(jd, "ckpt")] \
                            if c else tprog
                        started.append((jobs.Job(
                            side.replace("torch-", ""), wprog, jd, jn,
                            d.port, build, env=env, torchrun=a.torchrun,
                            worker="ddp_mlp" if c else None,
                            python=None if c else a.python), jd))
                    job, jd = started[0]
                    end = job.t0 + a.seconds
                    tend = started[-1][0].t0 + a.seconds
                    tk = []
                    nxt = job.t0 + ev if ev > 0 else end + 1
                    seen, first = 0, None
                    if a.from_first_step and ev > 0:
                        nxt = end + 1
                    while True:
                        now = time.monotonic()
                        if now >= max(end, tend):
                            break
                        if a.from_first_step and ev > 0 and first is None:
                            new = job.lines_from(seen)
                            seen += len(new)
                            for t, s in new:
                                if (jobs.PART_RE.search(s) or
                                        jobs.END_RE.search(s)) if c \
                                        else STEP_RE.search(s):
                                    first = t
                                    nxt = t + ev
                                    break
                        if now >= nxt and now < end:
                            nxt += ev
                            ws = job.workers()
                            if ws:
                                os.kill(rng.choice(ws), signal.SIGKILL)
                                tk.append(time.monotonic())
                        time.sleep(min(0.05, max(0.0, min(end, nxt) -
                                                 time.monotonic())))
                    time.sleep(0.2)	# lines in flight at the end
                    twin = ""
                    if a.paired:
                        tj, tjd = started[1]
                        ts = at(curve(tj.lines, c), tend)
                        tj.stop(tjd)
                        if ts > 0:
                            pr.setdefault((side, ev), []).append(
                                at(curve(job.lines, c), end) / ts)
                        twin = " twin %7.0f" % ts
                    cv = curve(job.lines, c)
                    rep_n, rst_n = job.rounds()
                    job.stop(jd)
                    steps = at(cv, end)
                    ls = lost(cv, tk, ev, end)
                    t1 = cv[0][0] if cv else end
                    g = 1 - sum(ls) / (end - t1) if end > t1 else 0.0
                    if ev == 0:
                        # The metric's own noise: "lost" at the kill
                        # times of the other cells, where none happened.
                        for e in every[1:]:
                            fk = [job.t0 + e * k for k in
                                  range(1, int(a.seconds / e) + 1)
                                  if e * k < a.seconds]
                            floor.setdefault((side, e), []).extend(
                                lost(cv, fk, e, end))
                    res.setdefault((side, ev), []).append(steps)
                    kills.setdefault((side, ev), []).append(len(tk))
                    losses.setdefault((side, ev), []).extend(ls)
                    inj.setdefault((side, ev), []).append(g)
                    print("rep %d %-14s every %-4g kills %2d steps %7.0f%s "
                          "first step %5.1fs lost/kill %s in-job %5.1f%% "
                          "repairs %s restarts %s load %.1f->%.1f"
                          % (rep + 1, side, ev, len(tk), steps, twin,
                             t1 - job.t0,
                             ",".join("%.2f" % x for x in ls) or "-",
                             100 * g, "-" if rep_n is None else rep_n,
                             "-" if rst_n is None else rst_n, load,
                             os.getloadavg()[0]), flush=True)
    finally:
        d.stop()
    print()
    print("window %gs, %d rep(s); steps: median [min max]; goodput: "
          "median steps with failures / median steps with none; lost: "
          "seconds per failure, median [min max] over every kill; in-job: "
          "median of the jobs' own goodput" % (a.seconds, a.reps))
    for side in sides:
        for ev in every[1:]:
            fl = floor.get((side, ev), [])
            if fl:
                print("%-14s no failure: lost at the %gs cell's kill times "
                      "(the metric's noise): median %.2fs [%.2f %.2f] of %d"
                      % (side, ev, statistics.median(fl), min(fl), max(fl),
                         len(fl)))
        base = statistics.median(res[(side, 0.0)]) \
            if (side, 0.0) in res else None
        for ev in every:
            xs = res[(side, ev)]
            med = statistics.median(xs)
            g = med / base if base else float("nan")
            if base is None:
                g = float("nan")
            ls = losses[(side, ev)]
            print("%-14s every %-4s kills %-8s steps %7.0f [%.0f %.0f]  "
                  "goodput %5.1f%%  lost %s  in-job %5.1f%%"
                  % (side, "-" if ev == 0 else "%gs" % ev,
                     ",".join(str(k) for k in kills[(side, ev)]),
                     med, min(xs), max(xs), 100 * g,
                     "%.2fs [%.2f %.2f]" % (statistics.median(ls), min(ls),
                                            max(ls)) if ls else "-",
                     100 * statistics.median(inj[(side, ev)])), flush=True)
            if pr.get((side, ev)):
                xs = pr[(side, ev)]
                print("%-14s every %-4s paired goodput (steps / the twin's "
                      "steps): median %5.1f%% [%.1f %.1f] of %d"
                      % (side, "-" if ev == 0 else "%gs" % ev,
                         100 * statistics.median(xs), 100 * min(xs),
                         100 * max(xs), len(xs)), flush=True)
    done_with(tmp, a.keep)


if __name__ == "__main__":
    main()
