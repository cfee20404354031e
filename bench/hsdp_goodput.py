# SPDX-License-Identifier: Apache-2.0
"""hsdp_goodput.py: training progress of an HSDP job (2 replica groups x 2
shards, FSDP2 on gloo) kept through a SIGKILL every N seconds: rdzv beside
torchft, in one run.

    python3 bench/hsdp_goodput.py BUILDDIR [--seconds 180] [--every 30]
        [--reps 1] [--sides rdzv,torchft] [--torchft VENV]
        [--torchft-dir DIR] [--seed 1] [--keep]

The sides, each with 0.05 s of emulated compute a step (as
bench/hsdp_repair.py runs them):

  rdzv     a real rdzvd and two rdzv-agents of two workers (one replica
           group each, PET_RDZV_CONF=replicas=2, warm spares on, as by
           default, --max_restarts 1000) running
           examples/torch_hsdp_repair.py --step-delay 0.05 --log-steps;
  torchft  torchft-nightly (../shared/peers/torchft, installed in
           /tmp/peers): its Lighthouse (heartbeat timeout 5 s, its
           default) and one torchrun --max_restarts 1000 per replica group
           running the peers' train_ft.py in MODE=hsdp (FSDP2 in the
           group, the replicas' all-reduce through torchft's Manager).

Each job runs for a window of --seconds from the launch of its launchers;
with failures, one worker chosen at random among the job's live workers
is SIGKILLed at N, 2N, ... seconds after the job's first committed step.
Progress p(t) is counted in steps of the whole job: each step number
committed by any replica counts once, as (replicas that stepped it) / 2,
at the time it was first committed (a step the healthy replica took alone
counts 1/2; work a restart throws away and does again is not counted
twice).  rdzv: the STEP lines (step, end time, replicas stepping);
torchft: train_ft.py's step log (step, t, committed, num_participants).

Two figures per job, as bench/goodput.py defines them: goodput = steps at
the window's end with failures / steps of the same side's failure-free
job (run just before it: a shared machine's load moves both); in-job =
1 - (seconds lost per kill, measured at the job's own rate around each
kill) / the time it trained.  One line per job, then a table.
"""

import argparse
import glob
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from goodput import at, done_with, lost  # noqa: E402

STEP_RE = re.compile(r"STEP (\d+) (\d+) (\d+) ([0-9.]+) ([0-9.]+) (\d+)$")


def tree(build):
    """The build folder (absolute), the source tree, and the tests'
    rdzvtest module (rdzvd, free ports), the tests' environment set."""
    build = os.path.abspath(build)
    src = os.path.dirname(HERE)
    os.environ.setdefault("RDZV_TOP_BUILDDIR", build)
    os.environ.setdefault("RDZV_TOP_SRCDIR", src)
    sys.path[:0] = [os.path.join(src, "tests", "lib"),
                    os.path.join(src, "tests", "integ")]
    import rdzvtest
    return build, src, rdzvtest


def window(job, t0, end, ev, rng, label, load):
    """Runs job (commits(), workers(), rounds(), stop()), launched at
    t0, until end, SIGKILLing one of its live workers chosen by rng
    every ev seconds from its first committed step (ev 0: none), then
    stops it and prints one line (label first; load: the load average
    at its launch).  Returns its steps at end, the seconds lost per
    kill, and the in-job figure (1 - lost / time trained)."""
    first, nxt, kills = None, None, []
    try:
        while time.time() < end:
            if first is None and job.commits():
                first = min(c[0] for c in job.commits())
                nxt = first + ev if ev else end + 1
            if nxt is not None and time.time() >= nxt:
                nxt += ev
                ws = job.workers()
                if ws:
                    os.kill(rng.choice(ws), signal.SIGKILL)
                    kills.append(time.time())
            time.sleep(0.05)
        time.sleep(0.3)	# lines in flight
        cv = progress(job.commits())
        what = job.rounds()
    finally:
        job.stop()
    ls = lost(cv, kills, ev, end) if ev else []
    t1 = cv[0][0] if cv else end	# the first step
    g = 1 - sum(ls) / (end - t1) if end > t1 else 0.0
    p = at(cv, end)
    print("%s every %-3g kills %2d steps %7.1f first step %5.1fs lost/kill "
          "%s in-job %5.1f%% %s load %.1f->%.1f" % (
              label, ev, len(kills), p, t1 - t0,
              ",".join("%.2f" % x for x in ls) or "-", 100 * g, what,
              load, os.getloadavg()[0]), flush=True)
    return p, ls, g


def progress(commits, replicas=2):
    """p(t): [(t, steps)] from [(t, step, replicas stepping)]: each step
    number once, at its first commit, weighted by the most replicas seen
    stepping it."""
    first = {}
    for t, st, n in commits:
        t0, n0 = first.get(st, (t, 0))
        first[st] = (min(t, t0), max(n, n0))
    out, p = [], 0.0
    for t, n in sorted(first.values()):
        p += n / float(replicas)
        out.append((t, p))
    return out


class Rdzv:
    """The rdzv side: two rdzv-agents (bench/jobs.py) against rdzvd."""

    def __init__(self, d, port, build, src, python, name):
        import jobs
        prog = [os.path.join(src, "examples", "torch_hsdp_repair.py"),
                "--epochs", "100000", "--samples", "9600",
                "--step-delay", "0.05", "--log-steps"]
        env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
                   PET_RDZV_CONF="replicas=2")
        self.d = d
        self.job = jobs.Job("repair", prog, d, name, port, build, env=env,
                            python=python)

    def commits(self):
        """[(wall time, step, replicas stepping)] committed so far."""
        out = []
        for _, s in self.job.lines:
            m = STEP_RE.search(s.rstrip("\n"))
            if m:
                out.append((float(m.group(5)), int(m.group(3)),
                            int(m.group(6))))
        return out

    def workers(self):
        return self.job.workers()

    def rounds(self):
        return "repairs %s restarts %s" % self.job.rounds()

    def stop(self):
        self.job.stop(self.d)


class Torchft:
    """The torchft side: its Lighthouse and a torchrun per group."""

    def __init__(self, d, venv, tdir, rep):
        self.d, self.procs = d, []
        lh_port = 29550 + rep % 20
        self.lh = subprocess.Popen(
            [os.path.join(venv, "bin", "torchft_lighthouse"),
             "--min_replicas", "1", "--quorum_tick_ms", "100",
             "--join_timeout_ms", "10000", "--heartbeat_timeout_ms", "5000",
             "--bind", "[::]:%d" % lh_port],
            stdout=open(os.path.join(d, "lighthouse.log"), "w"),
            stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(0.5)
        for g in range(2):
            env = dict(os.environ, REPLICA_GROUP_ID=str(g),
                       NUM_REPLICA_GROUPS="2", LOG_DIR=d,
                       TORCHFT_LIGHTHOUSE="http://localhost:%d" % lh_port,
                       MAX_STEPS="1000000", STEP_SLEEP="0.05", MODE="hsdp",
                       OMP_NUM_THREADS="1", RUST_LOG="warn", TRANSPORT="pg",
                       PG_TIMEOUT="5")
            self.procs.append(subprocess.Popen(
                [os.path.join(venv, "bin", "torchrun"), "--nnodes=1",
                 "--nproc_per_node=2",
                 "--master_port=%d" % (29700 + 10 * (rep % 20) + g),
                 "--max_restarts=1000", os.path.join(tdir, "train_ft.py")],
                stdout=open(os.path.join(d, "group%d.out" % g), "w"),
                stderr=subprocess.STDOUT, env=env, start_new_session=True))

    def _records(self):
        for path in glob.glob(os.path.join(self.d, "rg*_r*.jsonl")):
            with open(path) as f:
                for ln in f:
                    try:
                        yield path, json.loads(ln)
                    except ValueError:
                        pass	# a line being written

    def commits(self):
        return [(r["t"], r["step"], r["np"]) for _, r in self._records()
                if r["ev"] == "step" and r.get("committed")]

    def workers(self):
        live = {}
        for path, r in self._records():
            if r["ev"] == "proc_start":
                live[path] = r["pid"]
        return [p for p in live.values() if _alive(p)]

    def rounds(self):
        n = sum(1 for _, r in self._records() if r["ev"] == "proc_start")
        return "processes started %d" % n

    def stop(self):
        for p in self.procs + [self.lh]:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        for pid in self.workers():
            os.kill(pid, signal.SIGKILL)


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--every", type=float, default=30.0)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--sides", default="rdzv,torchft")
    ap.add_argument("--torchft", metavar="VENV",
                    default="/tmp/peers/venv-nightly")
    ap.add_argument("--torchft-dir", default="/tmp/peers/torchft")
    ap.add_argument("--python", default=os.path.expanduser(
        "~/.cache/rdzv/torch-2.13/bin/python"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    build, src, rt = tree(a.build)

    sides = a.sides.split(",")
    if "torchft" in sides and not os.access(
            os.path.join(a.torchft, "bin", "torchft_lighthouse"), os.X_OK):
        sys.exit("hsdp_goodput: no torchft in %s (../shared/peers/torchft/"
                 "README.md says how to install it)" % a.torchft)
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="hsdp-goodput-")
    d = rt.Rdzvd() if "rdzv" in sides else None
    steps, inj, losses, n = {}, {}, {}, 0
    try:
        for rep in range(a.reps):
            order = sides if rep % 2 == 0 else sides[::-1]
            for side in order:
                for ev in (0.0, a.every):
                    n += 1
                    jd = os.path.join(tmp, "%s-%g-%d" % (side, ev, n))
                    os.makedirs(jd)
                    load = os.getloadavg()[0]
                    t0 = time.time()
                    job = Rdzv(jd, d.port, build, src, a.python,
                               "hg%d" % n) if side == "rdzv" else \
                        Torchft(jd, a.torchft, a.torchft_dir, n)
                    p, ls, g = window(job, t0, t0 + a.seconds, ev, rng,
                                      "rep %d %-7s" % (rep + 1, side), load)
                    steps.setdefault((side, ev), []).append(p)
                    inj.setdefault((side, ev), []).append(g)
                    losses.setdefault((side, ev), []).extend(ls)
    finally:
        if d is not None:
            d.stop()
    print()
    print("window %gs, a kill every %gs, %d rep(s); goodput: median steps "
          "with kills / median steps without; lost: seconds per kill, "
          "median [min max]" % (a.seconds, a.every, a.reps))
    for side in sides:
        base = statistics.median(steps[(side, 0.0)])
        hurt = statistics.median(steps[(side, a.every)])
        ls = losses[(side, a.every)]
        print("%-7s steps %7.1f without kills, %7.1f with: goodput %5.1f%%  "
              "in-job %5.1f%%  lost %s" % (
                  side, base, hurt, 100 * hurt / base if base else 0,
                  100 * statistics.median(inj[(side, a.every)]),
                  "%.2fs [%.2f %.2f]" % (statistics.median(ls), min(ls),
                                         max(ls)) if ls else "-"))
    done_with(tmp, a.keep)


if __name__ == "__main__":
    main()
