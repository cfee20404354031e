"""goodput.py: training progress kept through repeated worker failures,
rdzv's in-place repair beside a full restart and torchrun, in one run.

    python3 bench/goodput.py BUILDDIR [--seconds 180] [--every 30,10]
        [--reps 1] [--sides repair,restart,torchrun] [--seed 1]
        [--torchrun PATH] [-- DDP_MLP_ARGS]

A job of 2 nodes x 2 workers on this host: two launchers, each with
--nproc_per_node 2, the workers examples/ddp_mlp (the real
Fashion-MNIST, ARGS below plus a fresh --checkpoint per job: it saves at
every epoch end and a restarted job resumes from it).  The sides:

  repair    two rdzv-agents against one rdzvd (as
            tests/integ/repair_agent.py starts them), ddp_mlp's default:
            a dead worker is repaired in place (shrink, then grow);
  restart   the same with RDZV_REPAIR=0 in the workers: a death restarts
            every worker, which resume from the checkpoint;
  torchrun  two torchrun (torch 2.13) agents, c10d rendezvous hosted by
            one of them, --no_python with the same ddp_mlp (no agent
            channel, so no repair: a death restarts every worker).

Every launcher gets --max_restarts 1000.  Each job runs for a window of
--seconds wall-clock seconds from the launch of its agents; a cell is a
side and a failure interval (0: no failure; N: a SIGKILL of one worker,
chosen at random among the job's live ddp_mlp processes, at N, 2N, ...
seconds while inside the window).  At the end of the window the job is
stopped.

Steps counted: the progress of the model, read from rank 0's lines
(whichever process is rank 0 at the time): "epoch E P% step S/T" means
E-1 + S/T epochs trained into the parameters, "epoch E loss ..." means E.
The figure is the last such line before the window's end, times the
steps per epoch of the 4-worker job (so a step is one global step of 4 x
--batch samples; a step of a shrunk world of 3 counts 3/4).  Work a
restart throws away (done after the last checkpoint) is not counted,
because the resumed rank 0 prints the checkpoint's position again.  The
resolution is a quarter epoch.

goodput = steps(failure every N) / steps(no failure) of the same side,
each the median over --reps; the cells are interleaved (every side runs
a cell before any side runs the next, and the order of the sides
rotates per repetition) so that load falls on all of them alike.
"""

import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ARGS = ["--hidden", "64", "--batch", "16", "--threads", "1",
        "--limit", "6400", "--test-limit", "1000", "--lr", "0.05",
        "--epochs", "100000"]
TORCHRUN = "/root/.cache/rdzv/torch-2.13/bin/torchrun"
PART_RE = re.compile(r"epoch (\d+)\s+\d+% step (\d+)/(\d+)")
END_RE = re.compile(r"epoch (\d+) loss ")
# rdzv-agent's round lines (each agent prints every round).
SHRINK_RE = re.compile(r"rdzv-agent\[\d+\]: round (\d+): repair \(shrink\)")
RESTART_RE = re.compile(r"rdzv-agent\[\d+\]: round \d+: group rank 0 .* "
                        r"restart (\d+)$")


class Job:
    """One job of one side: two launchers, their output read with the
    monotonic time of each line."""

    def __init__(self, side, argv_of, env, d):
        self.side = side
        self.d = d
        self.lines = []		# (t, text)
        self.lock = threading.Lock()
        self.procs = []
        self.t0 = time.monotonic()
        for i in range(2):
            argv = argv_of(i)
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT,
                                 start_new_session=True, env=env, cwd=d)
            self.procs.append(p)
            th = threading.Thread(target=self.read, args=(p, i),
                                  daemon=True)
            th.start()

    def read(self, p, i):
        with open(os.path.join(self.d, "agent%d.out" % i), "wb") as log:
            for raw in p.stdout:
                t = time.monotonic()
                log.write(raw)
                with self.lock:
                    self.lines.append((t, raw.decode(errors="replace")))

    def workers(self):
        """Live ddp_mlp processes whose parent is one of the launchers."""
        parents = {p.pid for p in self.procs}
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % pid) as f:
                    st = f.read()
            except OSError:
                continue
            name = st[st.find("(") + 1:st.rfind(")")]
            fields = st[st.rfind(")") + 2:].split()
            if (fields[0] not in ("Z", "X") and int(fields[1]) in parents
                    and name == "ddp_mlp"):
                out.append(int(pid))
        return sorted(out)

    def progress(self, until):
        """(epochs, steps per epoch at 4 workers) from the last rank-0
        line before until; (0, None) when there is none."""
        with self.lock:
            lines = list(self.lines)
        last = 0.0
        per = None
        for t, s in lines:
            m = PART_RE.search(s)
            if m and per is None and m.group(1) == "1":
                per = int(m.group(3))
            if t > until:
                continue
            if m:
                last = int(m.group(1)) - 1 + int(m.group(2)) / \
                    int(m.group(3))
            else:
                m = END_RE.search(s)
                if m:
                    last = float(m.group(1))
        return last, per

    def rounds(self):
        """(shrink rounds, restarts) rdzv-agent printed, or
        (None, None) under torchrun."""
        if self.side == "torchrun":
            return None, None
        with self.lock:
            lines = [s.rstrip("\n") for _, s in self.lines]
        rep = len({m.group(1) for m in map(SHRINK_RE.search, lines) if m})
        rst = max([int(m.group(1)) for m in map(RESTART_RE.search, lines)
                   if m] or [0])
        return rep, rst

    def stop(self, marker):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        end = time.monotonic() + 5
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        # Workers live in sessions of their own: whatever still runs
        # with this job's directory in its command line.
        for pid in marked(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def marked(marker):
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--every", default="30,10")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--sides", default="repair,restart,torchrun")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--torchrun", default=TORCHRUN)
    ap.add_argument("--keep", action="store_true",
                    help="keep the jobs' directories (agent output)")
    ap.add_argument("rest", nargs="*")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    os.environ.setdefault("RDZV_TOP_BUILDDIR", build)
    os.environ.setdefault("RDZV_TOP_SRCDIR", src)
    sys.path.insert(0, os.path.join(src, "tests", "lib"))
    import rdzvtest as rt

    sides = a.sides.split(",")
    if "torchrun" in sides and not os.access(a.torchrun, os.X_OK):
        print("goodput: no torchrun at %s: torchrun side left out"
              % a.torchrun)
        sides.remove("torchrun")
    every = [0.0] + [float(x) for x in a.every.split(",") if x]
    prog = [os.path.join(build, "examples", "ddp_mlp")] + \
        (a.rest or ARGS)
    agent = os.path.join(build, "agent", "rdzv-agent")
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="goodput-")
    d = rt.Rdzvd()
    res = {}		# (side, every) -> [steps]
    kills = {}		# (side, every) -> [n]
    njob = 0
    try:
        for rep in range(a.reps):
            order = sides[rep % len(sides):] + sides[:rep % len(sides)]
            for ev in every:
                for side in order:
                    njob += 1
                    name = "%s-%g-%d" % (side, ev, njob)
                    jd = os.path.join(tmp, name)
                    os.makedirs(jd)
                    wprog = prog + ["--checkpoint",
                                    os.path.join(jd, "ckpt")]
                    env = dict(os.environ)
                    if side == "torchrun":
                        port = rt.free_port()

                        def argv_of(i, port=port, name=name):
                            return [a.torchrun, "--nnodes", "2",
                                    "--nproc_per_node", "2",
                                    "--rdzv_backend", "c10d",
                                    "--rdzv_endpoint",
                                    "127.0.0.1:%d" % port,
                                    "--rdzv_id", name,
                                    "--max_restarts", "1000",
                                    "--no_python"] + wprog
                    else:
                        if side == "restart":
                            env["RDZV_REPAIR"] = "0"

                        def argv_of(i, name=name):
                            return [agent, "--nnodes", "2",
                                    "--nproc_per_node", "2",
                                    "--rdzv_backend", "rdzv",
                                    "--rdzv_endpoint",
                                    "127.0.0.1:%d" % d.port,
                                    "--rdzv_id", name,
                                    "--max_restarts", "1000",
                                    "--no_python"] + wprog
                    load = os.getloadavg()[0]
                    job = Job(side, argv_of, env, jd)
                    end = job.t0 + a.seconds
                    n = 0
                    nxt = job.t0 + ev if ev > 0 else end + 1
                    while True:
                        now = time.monotonic()
                        if now >= end:
                            break
                        if now >= nxt:
                            nxt += ev
                            ws = job.workers()
                            if ws:
                                os.kill(rng.choice(ws), signal.SIGKILL)
                                n += 1
                        time.sleep(min(0.05, max(0.0, min(end, nxt) -
                                                 time.monotonic())))
                    ep, per = job.progress(end)
                    rep_n, rst_n = job.rounds()
                    job.stop(jd)
                    steps = ep * per if per else 0.0
                    res.setdefault((side, ev), []).append(steps)
                    kills.setdefault((side, ev), []).append(n)
                    print("rep %d %-8s every %-4g kills %2d epochs %7.2f "
                          "steps %7.0f repairs %s restarts %s load %.1f"
                          % (rep + 1, side, ev, n, ep, steps,
                             "-" if rep_n is None else rep_n,
                             "-" if rst_n is None else rst_n, load),
                          flush=True)
    finally:
        d.stop()
    print()
    print("window %gs, %d rep(s); steps: median [min max]; goodput: "
          "median steps with failures / median steps with none"
          % (a.seconds, a.reps))
    for side in sides:
        base = statistics.median(res[(side, 0.0)])
        for ev in every:
            xs = res[(side, ev)]
            med = statistics.median(xs)
            g = med / base if base else float("nan")
            print("%-8s every %-4s kills %-10s steps %7.0f [%.0f %.0f]  "
                  "goodput %5.1f%%" % (side, "-" if ev == 0 else "%gs" % ev,
                                       ",".join(str(k) for k in
                                                kills[(side, ev)]),
                                       med, min(xs), max(xs), 100 * g))
    if a.keep:
        print("jobs' output kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
