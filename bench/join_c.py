# SPDX-License-Identifier: Apache-2.0
"""join_c.py: what the running workers lose when a node joins a C job,
joining in place beside today's rescale by restart.

    python3 bench/join_c.py BUILDDIR [--reps 5] [--torch [--python PY]]
        [-- DDP_MLP_ARGS]

Each repetition runs one job per side, the sides in a rotating order.
A job is 2 rdzv-agents x 2 workers against one rdzvd, --nnodes 2:3
(bench/jobs.py), running examples/ddp_mlp --threads 1 --limit 2048
--test-limit 256 --epochs 100000 (rank 0 prints a progress line every 2
steps); once rank 0 printed 20 progress lines a third agent joins:

  inplace  the workers repair in place: the joiner's workers start as
           replacements while the others train on, and one grow round
           takes them in;
  restart  the same with RDZV_REPAIR=0 in the workers: the round ends,
           every worker stops, and the job starts again in a world of 6
           (from scratch here: no checkpoint; a real one reloads one).

Times on this process's monotonic clock, from the lines' arrival
through the launchers' output:

  lost     what the running workers lose: the gap in rank 0's progress
           lines across the change (the last line before the grow round
           or the STOP to the first line in the world of 6) less the
           median gap between lines before it (the time those steps
           take anyway); target <= 0.1 s (C);
  world6   from the third agent's start to the first progress line in
           the world of 6 (the joiner's start-up, in place while the
           others train).

--torch: the same with examples/torch_ddp_repair.py (torch 2.13, gloo,
the rdzv.repair helper; --limit 8000 --hidden 32 --step-delay 0.02
--log-steps: every rank prints "STEP rank step world" after each step,
rank 0's lines are the progress); restart runs it without the agent's
channel (rdzv.repair then never says hello: the job rescales by
restart).  Target for lost: <= 0.2 s.

A line's resolution is 2 steps (a few ms) plus the launcher's relay.
Prints one line per job, then median [min max] per side and figure.
"""

import argparse
import os
import re
import shutil
import statistics
import tempfile

SIDES = ("inplace", "restart")


STEP0_RE = re.compile(r"STEP 0 \d+ (\d+) ")


def one(side, n, a, build, d, tmp):
    import jobs
    name = "%s-%d" % (side, n)
    jd = os.path.join(tmp, name)
    os.makedirs(jd)
    kind = "repair" if side == "inplace" else "restart"
    if a.torch:
        src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        prog = [os.path.join(src, "examples", "torch_ddp_repair.py"),
                "--epochs", "100000", "--limit", "8000", "--hidden", "32",
                "--log-steps", "--step-delay", "0.02", "--seed", str(n)]
        # jobs.Job gives a python program's warm spare the source
        # tree's rdzv; the example finds it itself.
        env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
        if side == "inplace":
            job = jobs.Job(kind, prog, jd, name, d.port, build, env=env,
                           python=a.python, nnodes="2:3")
        else:
            job = jobs.Job(kind, ["env", "-u", "RDZV_PROGRESS_FD",
                                  a.python] + prog, jd, name, d.port, build,
                           env=env, nnodes="2:3")

        def progress(s):
            return STEP0_RE.search(s)

        def in6(s):
            m = STEP0_RE.search(s)
            return m is not None and m.group(1) == "6"
    else:
        prog = [os.path.join(build, "examples", "ddp_mlp"), "--threads",
                "1", "--limit", "2048", "--test-limit", "256", "--epochs",
                "100000", "--seed", str(n)] + (a.rest or [])
        job = jobs.Job(kind, prog, jd, name, d.port, build,
                       worker="ddp_mlp", nnodes="2:3")

        def progress(s):
            return jobs.PART_RE.search(s) or jobs.END_RE.search(s)

        def in6(s):
            # Rank 0 in the world of 6: "repaired ... world 6" (a
            # survivor) or "ddp_mlp: world 6" (a fresh start).
            return "world 6" in s and ("repaired: round" in s or
                                       "ddp_mlp:" in s)
    try:
        t = job.t0
        seen = []
        for _ in range(20):
            t, _ = job.wait_line(progress, t, timeout=300)
            seen.append(t)
        gap = statistics.median(b - x for x, b in zip(seen, seen[1:]))
        t_join = job.add()
        # The change: the grow round (in place) or the round's STOP.
        t_chg, _ = job.wait_line(lambda s: "repair (grow)" in s or
                                 "stopped" in s and "round 1" in s, t_join)
        before = max(x for x, s in job.lines if x < t_chg and progress(s))
        t6, _ = job.wait_line(in6, t_chg, timeout=300)
        first = t6 if a.torch else job.wait_line(progress, t6)[0]
        return {"lost": first - before - gap, "world6": first - t_join,
                "gap": gap}
    finally:
        job.stop(jd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--torch", action="store_true",
                    help="examples/torch_ddp_repair.py instead of ddp_mlp")
    ap.add_argument("--python", help="torch 2.13's python (default: "
                    "tests/lib/rdzvtest.py's TORCH2_PYTHON)")
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ.setdefault("RDZV_TOP_BUILDDIR", build)
    os.environ.setdefault("RDZV_TOP_SRCDIR", os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    import jobs         # noqa: F401 (puts tests/lib on the path)
    import rdzvtest as rt
    a.python = a.python or rt.TORCH2_PYTHON

    figs = {}
    tmp = tempfile.mkdtemp(prefix="join-c-")
    d = rt.Rdzvd()
    n = 0
    try:
        for rep in range(a.reps):
            order = SIDES[rep % 2:] + SIDES[:rep % 2]
            for side in order:
                n += 1
                load = os.getloadavg()[0]
                row = one(side, n, a, build, d, tmp)
                for k, v in row.items():
                    figs.setdefault((side, k), []).append(v)
                print("rep %d %-8s lost %.3f s  world6 %.3f s  (step gap "
                      "%.4f s)  load %.1f" % (
                          rep + 1, side, row["lost"], row["world6"],
                          row["gap"], load), flush=True)
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {}
    for side in SIDES:
        for k in ("lost", "world6"):
            v = figs.get((side, k))
            if v:
                med[(side, k)] = statistics.median(v)
                print("%-8s %-7s median %.3f s [%.3f %.3f] of %d" % (
                    side, k, med[(side, k)], min(v), max(v), len(v)))
    if med.get(("inplace", "lost"), 0) > 0:
        print("restart / inplace, lost: %.1fx" % (
            med[("restart", "lost")] / med[("inplace", "lost")]))


if __name__ == "__main__":
    main()
