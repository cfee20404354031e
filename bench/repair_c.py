"""repair_c.py: how long an in-place repair of C workers takes.

    python3 bench/repair_c.py BUILDDIR [--reps N] [--procs P] [-- DDP_MLP_ARGS]

Each repetition starts examples/ddp_mlp (its default flags but
--threads 1; the real Fashion-MNIST) as P workers (default 4) on this
host under the fake agent of tests/lib/fakeagent.py, with a real rdzvd
(its defaults) as the store.  The real rdzv-agent does not drive repairs
yet: these figures leave out its own reaction (it sees the exit through
SIGCHLD, as the fake agent sees it through waitpid).  Once every worker
reported step 20, the fake agent SIGKILLs local rank P/2, waits for it,
sends the survivors a "round kind=shrink" message, starts a replacement
(RDZV_REPLACEMENT=1), waits for its "ready" and sends everyone a "round
kind=grow" message.  Times, from the SIGKILL, on the monotonic clock of
this process:

  survivors  the last survivor's first step reported after the shrink
             round (each worker reports the first step of a new round at
             once), i.e. the survivors stepping again, target <= 0.1 s;
  ready      the replacement said "ready" (its own start: exec, loading
             the data set, rdzv_init);
  all        the last of every rank, the replacement included, reporting
             a step after the grow round: every rank stepping together,
             target <= 1 s;
  join       all - ready: what the grow round itself costs;
  restart    beside it, in the same repetition: SIGKILL of one worker,
             then what the agent does without repair (every worker
             stopped, P fresh ones started in a new round), until all P
             report a step: the survivors' loss with a restart (it
             leaves out reloading a checkpoint: ddp_mlp runs without
             one here).

Prints one line per repetition and a median [min max] line per figure.
"""

import argparse
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    os.environ.setdefault("RDZV_TOP_BUILDDIR", build)
    os.environ.setdefault("RDZV_TOP_SRCDIR", src)
    sys.path.insert(0, os.path.join(src, "tests", "lib"))
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


if __name__ == "__main__":
    main()
