# SPDX-License-Identifier: Apache-2.0
"""straggler.py: a worker throttled to about 30% of its speed, with and
without straggler replacement, side by side.

    python3 bench/straggler.py BUILDDIR [--reps 3] [--window S]
        [--torch PYTHON]

Each repetition runs one job per side, the sides alternating first: a
real rdzvd and two rdzv-agents of two workers each running
examples/ddp_mlp (--hidden 256 --batch 64 --threads 1: a step's compute
outweighs its allreduce), or with --torch examples/torch_ddp_repair.py
under PYTHON (torch, gloo, the rdzv.repair helper; --hidden 512 --batch
128, OMP_NUM_THREADS=1), with --rdzv_conf straggler_window=S (default
5), straggler_ratio=0.5 and

  off       straggler_action=off (the default): the straggler is named
            and left alone, as any launcher without straggler handling
            (torchrun) leaves it;
  replace   straggler_action=replace: its agent kills it and the job
            repairs around it (shrink, then grow with a fresh worker).

Once the job trains, one worker (local rank 1 of the second agent) is
throttled by a SIGSTOP/SIGCONT duty cycle (30 ms run, 70 ms stopped).
Figures, each job's steps/s the median over its ranks of (step change /
time) between two reads of /api/jobs/JOB/history 4 s apart:

  before     the 4 s before the throttle;
  throttled  the first 4 s of it;
  named      the throttle's start to rdzvd's "straggler: rank R" event
             (the event's wall clock; detection delay);
  replaced   replace: the throttle's start to the "repair: grow" event;
  stepping   replace: ... to the job seen stepping again after it (a
             1 s read of its steps/s above 0);
  after      replace: the 4 s from 1 s after that; off: 3 s after the
             naming (still throttled);
  after/before  the two in the same job (the machine's load moves
             both; their ratio less).

Prints one line per job, then median [min max] per side and figure.
"""

import argparse
import os
import time

import figures
import harness


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--torch", metavar="PYTHON")
    a = ap.parse_args()
    src = harness.use_build(a.build)
    import rdzvtest as rt
    import straggler as st
    from agent_lib import Scope, Throttle, conf, job_events, steps_per_s

    st.WINDOW = a.window
    figs = {}

    def rate(d, job):
        return steps_per_s(d, job, 4.0)

    def start_job(s, d, job, extra):
        if a.torch is None:
            return st.start_job(s, d, job, extra)
        argv = ["--nnodes", "2", "--nproc_per_node", "2",
                "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
                "--rdzv_id", job, "--max_restarts", "2", "--grace", "5",
                "--rdzv_conf", conf(0.2, 5.0, "straggler_window=%d,"
                                    "straggler_ratio=0.5,%s"
                                    % (a.window, extra))]
        prog = [os.path.join(src, "examples", "torch_ddp_repair.py"),
                "--epochs", "100", "--batch", "128", "--hidden", "512"]
        env = {"PYTHON": a.torch, "GLOO_SOCKET_IFNAME": "lo",
               "OMP_NUM_THREADS": "1"}
        x = [s.agent(argv, env=env, program=prog) for _ in range(2)]
        rt.wait_until(lambda: all(len(y.children()) == 2 for y in x) and
                      steps_per_s(d, job, 1.0) > 0, timeout=180,
                      what="4 torch workers training")
        return x

    def first(d, job, prefix):
        for e in job_events(d, job, full=True):
            if e["text"].startswith(prefix):
                return e["time_ms"] / 1000.0
        return None

    def one(side, rep):
        d = rt.Rdzvd()
        job = "%s%d" % (side, rep)
        try:
            with Scope("straggler-bench-") as s:
                a_, b = start_job(s, d, job, "straggler_action=%s" % side)
                time.sleep(2)
                row = {"before": rate(d, job)}
                victim = sorted(b.children())[1]
                t0 = time.time()
                with Throttle(victim):
                    row["throttled"] = rate(d, job)
                    rt.wait_until(lambda: first(d, job, "straggler: rank ")
                                  is not None, timeout=90, what="named")
                    row["named"] = first(d, job, "straggler: rank ") - t0
                    if side == "replace":
                        rt.wait_until(lambda: first(d, job, "repair: grow")
                                      is not None, timeout=90,
                                      what="replaced")
                        row["replaced"] = first(d, job, "repair: grow") - t0
                        # The grow's group made (a torch replacement's
                        # DDP constructor can take seconds): stepping.
                        rt.wait_until(lambda: steps_per_s(d, job, 1.0) > 0,
                                      timeout=90, what="stepping again")
                        row["stepping"] = time.time() - t0
                        wait = 1.0
                    else:
                        wait = max(0.0, 1.0 + row["named"] + 2.0 -
                                   (time.time() - t0))
                    time.sleep(wait)
                    row["after"] = rate(d, job)
        finally:
            d.stop()
        row["after/before"] = row["after"] / max(row["before"], 1e-9)
        return row

    for rep in range(a.reps):
        sides = ["off", "replace"] if rep % 2 == 0 else ["replace", "off"]
        for side in sides:
            row = one(side, rep)
            figures.show(figs, side, "rep %d %-7s " % (rep + 1, side), row,
                         digits=2, load=False)
    figures.medians(figs, "%-7s %-9s median %8.2f [%.2f %.2f] of %d")


if __name__ == "__main__":
    main()
