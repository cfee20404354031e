#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""repair_torch.py: how long a torch DDP job (gloo) takes to repair in
place through rdzv.repair after a SIGKILL, under the real rdzv-agent,
beside rdzv's full restart and torchrun 2.13.

    RDZV_TOP_BUILDDIR=build python3 bench/repair_torch.py [--runs 5]
        [--python /root/.cache/rdzv/torch-2.13/bin/python]
        [--sides repair,cold,restart,torchrun] [--step-delay 0.02]
        [--fake [--world 4]]

Each run starts one job per side, the sides in a rotating order
(interleaved, so that load falls on all of them alike): 2 nodes x 2
workers on this host (bench/jobs.py) of examples/torch_ddp_repair.py (a
small MLP on Fashion-MNIST, --log-steps, by default 20 ms of sleep per
step so the kill lands in any part of it) under:

  repair    two rdzv-agents against one rdzvd: rdzv.repair shrinks the
            group, the agent hands the dead rank to its warm spare (a
            python that has imported torch: rdzv.spare), which joins in
            a grow round; the kill waits until both agents' spares are
            warm, and their memory (RSS, PSS) is recorded then;
  cold      the same with --warm_spare 0: the replacement is a new
            python (python, import torch, the data);
  restart   the same with the workers' RDZV_PROGRESS_FD unset (rdzv.repair
            does not read RDZV_REPAIR=0; without the agent channel it
            never says it can repair): every worker restarts (from step
            0: the program keeps no checkpoint);
  torchrun  two torchrun 2.13 agents (c10d rendezvous): every worker
            restarts.

Once rank 0 committed step 10, one worker (local rank run mod 4 of the
sorted pids) gets SIGKILL.  Times from the SIGKILL, all on
CLOCK_MONOTONIC (the workers' "STEP rank step world time" lines print
it):
  (a) survivors   repair: every rank of the group of 3 committed a step
                  in it (when the grow round comes before they step in
                  it, they waited for the replacement: (a) = (b));
                  restart and torchrun: nothing steps before every
                  worker is new, so (a) = (b)
  ready           repair: the agent's "its replacement is ready" line
                  arrived (the replacement says it in
                  init_process_group: its python and torch start)
  (b) all         repair: every rank of the group of 4, the replacement
                  too, committed a step in it after the shrink; restart
                  and torchrun: every rank committed a step of the new
                  job (a step number below the one at the kill)
Medians with min-max and the ratios; one markdown table on stdout.

--fake: the earlier measurement, without rdzv-agent: one job of --world
workers under the fake agent of tests/lib/fakeagent.py (it sees the
death by waitpid and sends the round messages itself: rdzvd's and the
agent's hops are left out), --runs kills in the one job.
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time

import figures

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))

import rdzvtest  # noqa: E402
import fakeagent as fa  # noqa: E402
import jobs  # noqa: E402

EXAMPLE = os.path.join(HERE, "..", "examples", "torch_ddp_repair.py")
STEP_RE = re.compile(r"STEP (\d+) (\d+) (\d+) ([0-9.]+)$")


def steps(w):
    """[(time, step, world)] of a worker's STEP lines."""
    out = []
    for l in w.output()[0].splitlines():
        p = l.split()
        if len(p) == 5 and p[0] == "STEP":
            out.append((float(p[4]), int(p[2]), int(p[3])))
    return out


def first_after(w, t, world, timeout=120.0):
    """The time of w's first step in a group of world after t."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for ts, _, wd in steps(w):
            if ts > t and wd == world:
                return ts
        time.sleep(0.02)
    raise AssertionError("local rank %d: no step in a group of %d after "
        "the kill: %s" % (w.local_rank, world, w.output()[1][-2000:]))


def fmt(xs):
    return "%.3f (%.3f-%.3f)" % (statistics.median(xs), min(xs), max(xs))


def fake(a):
    """The fake agent's measurement (the header's --fake)."""
    d = rdzvtest.Rdzvd(tmpdir=rdzvtest.mktemp("rdzv-bench-repair-"))
    ag = fa.FakeAgent([a.python, EXAMPLE, "--epochs", "1000",
        "--limit", "8000", "--hidden", "32", "--log-steps",
        "--step-delay", a.step_delay], a.world, "127.0.0.1:%d" % d.port,
        env=fa.torch_env(d.port))
    rows = []
    try:
        ag.start()
        ag.wait_steps(10, timeout=300)
        for i in range(a.runs):
            lr = i % a.world
            surv = [w for l, w in ag.workers.items() if l != lr]
            t = ag.kill(lr)
            ag.shrink()
            ta = max(first_after(w, t, a.world - 1) for w in surv)
            rep = ag.spawn_replacement(lr)
            tr = ag.wait_ready(rep, timeout=300)
            ag.grow()
            tb = max(first_after(w, t, a.world)
                for w in ag.workers.values())
            rows.append((ta - t, tr - t, tb - t, tb - tr))
            print("# run %d: kill local rank %d: survivors %.3f s, ready "
                "%.3f s, all %.3f s" % (i + 1, lr, ta - t, tr - t, tb - t),
                file=sys.stderr, flush=True)
            # Let the job settle in its full group before the next kill.
            ag.wait_steps(max(w.last_step() or 0 for w in
                ag.workers.values()) + 10, timeout=120)
    finally:
        ag.close()
        d.stop()
    print("| torch %s gloo, %d workers, fake agent, %d runs, %s s sleep "
        "per step | median (min-max) s |" % (os.path.basename(
        os.path.dirname(os.path.dirname(a.python))), a.world, len(rows),
        a.step_delay))
    print("| --- | --- |")
    print("| (a) SIGKILL -> every survivor stepping again (group of %d) | %s |"
        % (a.world - 1, fmt([r[0] for r in rows])))
    print("| SIGKILL -> the replacement says ready (its own start-up) | %s |"
        % fmt([r[1] for r in rows]))
    print("| (b) SIGKILL -> every rank, the replacement too, stepping (group of %d) | %s |"
        % (a.world, fmt([r[2] for r in rows])))
    print("| ready -> every rank stepping (the join itself) | %s |"
        % fmt([r[3] for r in rows]))


def job_steps(job):
    """[(time, rank, step, world)] of the job's STEP lines so far."""
    out = []
    for _, s in job.lines:
        m = STEP_RE.search(s.rstrip("\n"))
        if m:
            out.append((float(m.group(4)), int(m.group(1)),
                int(m.group(2)), int(m.group(3))))
    return out


def firsts(job, pred, ranks, what, timeout=180.0):
    """{rank: time of its first STEP (t, rank, step, world) with pred}
    once every rank in ranks has one."""
    end = time.monotonic() + timeout
    while True:
        got = {}
        for st in job_steps(job):
            if st[1] in ranks and st[1] not in got and pred(st):
                got[st[1]] = st[0]
        if len(got) == len(ranks):
            return got
        if time.monotonic() > end:
            raise AssertionError("%s: %s: ranks %s only after %.0f s:\n%s"
                % (job.side, what, sorted(got), timeout,
                "".join(s for _, s in job.lines[-30:])))
        time.sleep(0.05)


def kib(path, key):
    """The value in KiB of a "Key:   N kB" line of a /proc file, or 0."""
    try:
        with open(path) as f:
            for l in f:
                if l.startswith(key + ":"):
                    return int(l.split()[1])
    except OSError:
        pass
    return 0


def warm_spares(job, timeout=120.0):
    """[(rss, pss)] in KiB of both agents' warm spares, once each agent
    has one that finished its imports (/proc/PID/comm "rdzv-spare")."""
    end = time.monotonic() + timeout
    while True:
        warm = []
        for p in jobs.agent_lib.spares([x.pid for x in job.procs]):
            try:
                with open("/proc/%d/comm" % p) as f:
                    if f.read().strip() == "rdzv-spare":
                        warm.append(p)
            except OSError:
                pass
        if len(warm) == 2:
            return [(kib("/proc/%d/status" % p, "VmRSS"),
                kib("/proc/%d/smaps_rollup" % p, "Pss")) for p in warm]
        if time.monotonic() > end:
            raise AssertionError("repair: %d warm spares after %.0f s" %
                (len(warm), timeout))
        time.sleep(0.1)


def real(a):
    """One job per side per run, under the real launchers."""
    build = rdzvtest.top_builddir()
    prog = [EXAMPLE, "--epochs", "100000", "--limit", "8000",
        "--hidden", "32", "--log-steps", "--step-delay", a.step_delay]
    # jobs.Job gives a python program's warm spare the source tree's
    # rdzv; the example finds it itself.
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    mem = []		# (rss, pss) of each warm spare, KiB
    sides = a.sides.split(",")
    if "torchrun" in sides and not os.access(a.torchrun, os.X_OK):
        print("# no torchrun at %s: left out" % a.torchrun,
            file=sys.stderr)
        sides.remove("torchrun")
    tmp = tempfile.mkdtemp(prefix="repair-torch-")
    d = rdzvtest.Rdzvd(tmpdir=rdzvtest.mktemp("rdzv-bench-repair-"))
    figs = {}		# (side, figure) -> [seconds]
    loads = []
    try:
        for run, side, n, name, jd in jobs.runs(sides, a.runs, tmp):
            loads.append(os.getloadavg()[0])
            # rdzv.repair does not read RDZV_REPAIR: without the
            # agent channel a worker never says hello, and the
            # agent restarts the job.
            py = side in ("repair", "cold")
            wprog = ["env", "-u", "RDZV_PROGRESS_FD", a.python] + \
                prog if side == "restart" else prog if py else \
                [a.python] + prog
            job = jobs.Job(side, wprog, jd, name, d.port, build,
                env=env, torchrun=a.torchrun,
                python=a.python if py else None)
            try:
                job.wait_line(lambda s: re.search(
                    r"STEP 0 (\d\d+) ", s) is not None,
                    job.t0, timeout=300)
                if side == "repair":
                    mem.extend(warm_spares(job))
                ws = job.workers()
                assert len(ws) == 4, (side, ws)
                at = max(st[2] for st in job_steps(job))
                tk = time.monotonic()
                os.kill(ws[run % 4], signal.SIGKILL)
                row = {}
                if side in ("repair", "cold"):
                    row["ready"] = job.wait_line(lambda s:
                        "replacement is ready" in s, tk,
                        timeout=300)[0]
                    row["all"] = max(firsts(job, lambda st:
                        st[0] > tk and st[3] == 4, range(4),
                        "a step in 4").values())
                    # (a): every survivor's first step in
                    # the group of 3; a grow that came first
                    # (the survivors waited for the
                    # replacement) makes (a) = (b).
                    ta = {}
                    for st in job_steps(job):
                        if tk < st[0] < row["all"] and \
                            st[3] == 3 and st[1] not in ta:
                            ta[st[1]] = st[0]
                    row["survivors"] = max(ta.values()) if \
                        len(ta) == 3 else row["all"]
                else:
                    row["all"] = row["survivors"] = max(firsts(
                        job, lambda st: st[0] > tk and
                        st[2] < at, range(4),
                        "a step of the new job").values())
                row = {k: v - tk for k, v in row.items()}
            except AssertionError as e:
                # A job that does not recover: counted, not timed.
                print("# run %d %-8s did not recover: %s (output: "
                    "%s)" % (run + 1, side, str(e).splitlines()[0], jd),
                    file=sys.stderr, flush=True)
                figs.setdefault((side, "failed"), []).append(1)
                continue
            finally:
                rounds = job.end(jd)
            figures.add(figs, side, row)
            jobs.report("# run %d %-8s" % (run + 1, side), row,
                        ("survivors", "ready", "all"), rounds, loads[-1],
                        file=sys.stderr)
            loads.append(os.getloadavg()[0])
    finally:
        d.stop()
        if not any(k[1] == "failed" for k in figs):
            shutil.rmtree(tmp, ignore_errors=True)

    def cell(side, k):
        v = figs.get((side, k))
        return fmt(v) if v else "-"

    def ratio(side, k):
        v, r = figs.get((side, k)), figs.get(("repair", k))
        if side == "cold" and k == "survivors":
            return "-"	# the same path, no spare involved
        if not v or not r:
            return "-"
        return "%.1fx" % (statistics.median(v) / statistics.median(r))

    print("| torch %s gloo, 2 x 2 workers, rdzv-agent, %d runs, %s s "
        "sleep per step, load %.1f-%.1f | %s |" % (os.path.basename(
        os.path.dirname(os.path.dirname(a.python))), a.runs,
        a.step_delay, min(loads), max(loads), " | ".join(
        "%s: median (min-max) s" % s for s in sides)))
    print("| --- |" + " --- |" * len(sides))
    for k, what in (("survivors", "(a) SIGKILL -> every survivor "
        "stepping again"), ("ready", "SIGKILL -> the replacement is "
        "ready (its own start-up)"), ("all", "(b) SIGKILL -> every "
        "rank, the replacement or the new workers too, stepping")):
        print("| %s | %s |" % (what, " | ".join(cell(s, k)
            for s in sides)))
    if mem:
        print("| warm spare's memory, %d spares: RSS %s MiB, PSS %s MiB "
            "(median (min-max)) |" % (len(mem), fmt([m[0] / 1024 for m in
            mem]), fmt([m[1] / 1024 for m in mem])))
    for s in sides:
        if figs.get((s, "failed")):
            print("| %s: %d job(s) did not recover within 180 s (left "
                "out above) |" % (s, len(figs[(s, "failed")])))
        if s != "repair":
            print("| %s / repair: (a) %s, (b) %s |" % (s,
                ratio(s, "survivors"), ratio(s, "all")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--python", default=rdzvtest.TORCH2_PYTHON)
    ap.add_argument("--sides", default="repair,cold,restart,torchrun")
    ap.add_argument("--torchrun", default=jobs.TORCHRUN)
    ap.add_argument("--step-delay", default="0.02",
        help="seconds of sleep in each step (default 0.02)")
    ap.add_argument("--fake", action="store_true",
        help="the fake agent instead of rdzv-agent")
    ap.add_argument("--world", type=int, default=4,
        help="workers under the fake agent")
    a = ap.parse_args()
    if a.fake:
        fake(a)
    else:
        real(a)


if __name__ == "__main__":
    main()
