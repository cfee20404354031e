# SPDX-License-Identifier: Apache-2.0
"""repair_c.py: how long an in-place repair of C workers takes, under
the real rdzv-agent, beside rdzv's full restart and torchrun 2.13.

    python3 bench/repair_c.py BUILDDIR [--reps 5]
        [--sides repair,restart,torchrun] [--torchrun PATH]
        [--fake [--procs P]] [-- DDP_MLP_ARGS]

Each repetition runs one job per side, the sides in a rotating order
(interleaved, so that load falls on all of them alike).  A job is 2
nodes x 2 workers on this host (bench/jobs.py): examples/ddp_mlp
--threads 1 --limit 2048 --test-limit 256 --epochs 100000 (its defaults:
hidden 128, batch 64 per rank; it still reads and decompresses the whole
Fashion-MNIST at its start, then trains on 2048 samples, so that rank 0
prints a progress line every 2 steps) under:

  repair    two rdzv-agents against one rdzvd: a dead worker is repaired
            in place (shrink round for the survivors, a replacement, a
            grow round when it is ready);
  restart   the same with RDZV_REPAIR=0: every worker is restarted;
  torchrun  two torchrun 2.13 agents (c10d rendezvous), --no_python with
            the same ddp_mlp: every worker is restarted.

Once rank 0 printed 20 progress lines, one worker (local rank rep mod 4
of the sorted pids) gets SIGKILL.  Times from the SIGKILL, on this
process's monotonic clock, from the arrival of rank 0's lines through
the launchers' output (a step needs every rank's allreduce, so rank 0
stepping is every rank stepping):

  (a) survivors  repair: the first progress line after rank 0's
                 "repaired: round R (shrink)": the survivors stepping
                 again, target <= 0.1 s.  restart and torchrun: nothing
                 steps before every worker is new, so (a) = (b);
  grow           repair: the agents' "round R: repair (grow)" line: the
                 replacement said ready (its own start: exec, reading the
                 data set, rdzv_init) and rdzvd opened the grow round;
  (b) all        repair: the first progress line after rank 0's
                 "repaired: round R (grow)" (or, when the replacement is
                 rank 0, its "ddp_mlp: world 4" line after the grow
                 round): every rank, the replacement included, stepping
                 together, target <= 1 s.  restart and
                 torchrun: the first progress line after the new rank
                 0's "ddp_mlp: world 4" line (no checkpoint: the job
                 starts over; a real restart also reloads one).

A line's resolution is 2 steps (a few ms) plus the launcher's relay of
the line.  Prints one line per job, then median [min max] per side and
figure, and the ratios of the medians.

--fake: the earlier measurement, without rdzv-agent: P workers (default
4) under the fake agent of tests/lib/fakeagent.py (it sees the death by
waitpid and sends the round messages itself, so rdzvd's and the agent's
hops are left out) with the times from the workers' step reports on
the agent channel; beside it, a full restart of the P by the fake agent.
"""

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

import figures


def fake(a, build):
    """The fake agent's measurement (the header's --fake)."""
    import fakeagent
    import rdzvtest as rt

    argv = [os.path.join(build, "examples", "ddp_mlp"), "--threads", "1"]
    argv += a.rest or []
    figs = {"survivors": [], "ready": [], "all": [], "join": [],
            "restart": []}
    d = rt.Rdzvd()
    try:
        for rep in range(a.reps):
            ag = fakeagent.FakeAgent(argv, a.procs, "127.0.0.1:%d" % d.port)
            try:
                ag.start()
                ag.wait_steps(20, timeout=120)
                assert ag.all_said_hello(), ag.describe()
                victim = a.procs // 2
                survivors = [w for lr, w in ag.workers.items()
                             if lr != victim]
                t_kill = ag.kill(victim)
                t_shrink = ag.shrink()
                t_surv = ag.wait_steps(0, survivors, after=t_shrink)
                w = ag.spawn_replacement(victim)
                t_ready = ag.wait_ready(w)
                t_grow = ag.grow()
                t_all = ag.wait_steps(0, after=t_grow)
                # The same job, the old way: one dies, all restart.
                ag.wait_steps(ag.workers[0].last_step() + 5)
                t_kill2 = ag.kill(victim)
                ag.restart()
                t_again = ag.wait_steps(0, timeout=120)
                row = {"survivors": t_surv - t_kill,
                       "ready": t_ready - t_kill,
                       "all": t_all - t_kill,
                       "join": t_all - t_ready,
                       "restart": t_again - t_kill2}
                for k, v in row.items():
                    figs[k].append(v)
                print("rep %d: survivors %.3f s  ready %.3f s  all %.3f s  "
                      "join %.3f s  restart %.3f s" % (
                          rep + 1, row["survivors"], row["ready"],
                          row["all"], row["join"], row["restart"]),
                      flush=True)
            finally:
                ag.close()
            time.sleep(0.5)
    finally:
        d.stop()
    for k, v in figs.items():
        print("%-9s median %.3f s [%.3f %.3f] of %d" % (
            k, statistics.median(v), min(v), max(v), len(v)))


def real(a, build, src):
    """One job per side per repetition, under the real launchers."""
    import jobs
    import rdzvtest as rt

    prog = [os.path.join(build, "examples", "ddp_mlp"), "--threads", "1",
            "--limit", "2048", "--test-limit", "256", "--epochs", "100000"] + \
        (a.rest or [])
    a.torchrun = a.torchrun or jobs.TORCHRUN
    sides = a.sides.split(",")
    if "torchrun" in sides and not os.access(a.torchrun, os.X_OK):
        print("repair_c: no torchrun at %s: left out" % a.torchrun)
        sides.remove("torchrun")

    def progress(s):
        return jobs.PART_RE.search(s) or jobs.END_RE.search(s)

    figs = {}		# (side, figure) -> [seconds]
    failed = {}		# side -> jobs that did not recover
    tmp = tempfile.mkdtemp(prefix="repair-c-")
    d = rt.Rdzvd()
    try:
        for rep, side, n, name, jd in jobs.runs(sides, a.reps, tmp):
            load = os.getloadavg()[0]
            job = jobs.Job(side, prog + ["--seed", str(n)], jd, name,
                           d.port, build, torchrun=a.torchrun,
                           worker="ddp_mlp")
            try:
                t = job.t0
                for _ in range(20):
                    t, _ = job.wait_line(progress, t)
                ws = job.workers()
                assert len(ws) == 4, (side, ws)
                t_kill = time.monotonic()
                os.kill(ws[rep % 4], signal.SIGKILL)
                row = {}
                t, s = job.wait_line(
                    lambda s: "ddp_mlp: world 4" in s or
                    ("repaired: round" in s and "(shrink)" in s),
                    t_kill)
                if "repaired" in s:
                    row["survivors"] = job.wait_line(progress, t)[0]
                    row["grow"] = job.wait_line(
                        lambda s: "repair (grow)" in s, t_kill)[0]
                    # Rank 0 of the grow round: a survivor says
                    # "repaired", the replacement its first line.
                    t, _ = job.wait_line(
                        lambda s: "ddp_mlp: world 4" in s or
                        ("repaired: round" in s and "(grow)" in s),
                        row["grow"])
                    row["all"] = job.wait_line(progress, t)[0]
                else:
                    row["all"] = row["survivors"] = \
                        job.wait_line(progress, t)[0]
                row = {k: v - t_kill for k, v in row.items()}
            except AssertionError as e:
                # A job that does not recover: counted, not timed.
                print("rep %d %-8s did not recover: %s (output: %s)"
                      % (rep + 1, side, str(e).splitlines()[0], jd),
                      flush=True)
                failed[side] = failed.get(side, 0) + 1
                continue
            finally:
                rounds = job.end(jd)
            figures.add(figs, side, row)
            jobs.report("rep %d %-8s" % (rep + 1, side), row,
                        ("survivors", "grow", "all"), rounds, load)
    finally:
        d.stop()
        if not failed:
            shutil.rmtree(tmp, ignore_errors=True)
    med = {}
    for side in sides:
        for k in ("survivors", "grow", "all"):
            v = figs.get((side, k))
            if v:
                med[(side, k)] = statistics.median(v)
                print("%-8s %-9s median %.3f s [%.3f %.3f] of %d" % (
                    side, k, med[(side, k)], min(v), max(v), len(v)))
    for side, k in failed.items():
        print("%-8s %d job(s) did not recover within 120 s (left out "
              "above)" % (side, k))
    for other in ("restart", "torchrun"):
        for k in ("survivors", "all"):
            if ("repair", k) in med and (other, k) in med:
                print("%s / repair, %s: %.1fx" % (other, k,
                      med[(other, k)] / med[("repair", k)]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sides", default="repair,restart,torchrun")
    ap.add_argument("--torchrun", help="torch 2.13's torchrun (default: "
                    "bench/jobs.py's TORCHRUN)")
    ap.add_argument("--fake", action="store_true",
                    help="the fake agent instead of rdzv-agent")
    ap.add_argument("--procs", type=int, default=4,
                    help="workers under the fake agent")
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    os.environ.setdefault("RDZV_TOP_BUILDDIR", build)
    os.environ.setdefault("RDZV_TOP_SRCDIR", src)
    sys.path.insert(0, os.path.join(src, "tests", "lib"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if a.fake:
        fake(a, build)
    else:
        real(a, build, src)


if __name__ == "__main__":
    main()
