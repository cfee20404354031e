# SPDX-License-Identifier: Apache-2.0
"""jobs.py: a job of 2 nodes x 2 workers on this host under real
launchers, for the repair and goodput benchmarks.

    job = Job(side, prog, d, name, port, build, env=None, torchrun=PATH,
              worker=None, nnodes="2")

side is what launches it: "repair" (two rdzv-agents against the rdzvd
on port, in-place repair where the workers can, with the agents' warm
spare for a python program), "cold" (the same with --warm_spare 0: a
replacement is a new python), "restart" (the same with RDZV_REPAIR=0 in
the workers: a death restarts every worker) or "torchrun" (two torchrun
agents, c10d rendezvous hosted by one of them on a free port).  Every
launcher gets --nnodes 2 --nproc_per_node 2 --max_restarts 1000
--no_python prog, or, with python= (a python program: rdzv-agent keeps a
warm spare only for one), PYTHON=python in its environment and prog
without --no_python (torchrun: python prog with --no_python, as
before); its output (the workers' too,
prefixed "[defaultN]:" by the launcher) is read line by line with the
monotonic time of this process at arrival.

    job.add()            one more launcher (a node joining; nnodes "2:3")
    job.lines            [(t, text)] so far (a copy)
    job.lines_from(i)    the same from the i-th line on
    job.wait_line(pred, since, timeout)
                         the first (t, text) with t > since and pred(text)
    job.workers()        live workers (children of the launchers; named
                         worker, /proc/PID/stat's, when given)
    job.rounds()         (shrink rounds, restarts) rdzv-agent printed
    job.stop(marker)     SIGTERM to the launchers, then SIGKILL to what is
                         left, marker: a string in the workers' command
                         lines
    job.end(marker)      job.rounds(), then job.stop(marker)

    runs(sides, reps, tmp)  (rep, side, n, name, dir) of every job, sides
                         rotated by one a repetition
    report(label, row, keys, rounds, load)  a job's line: its figures,
                         rounds and the load average
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integ"))

import agent_lib  # noqa: E402
import rdzvtest as rt  # noqa: E402

TORCHRUN = "/root/.cache/rdzv/torch-2.13/bin/torchrun"
SIDES = ("repair", "cold", "restart", "torchrun")
# examples/ddp_mlp's progress lines (rank 0 prints them): at every
# quarter epoch, "epoch E P% step S/T", and at the epoch's end.
PART_RE = re.compile(r"epoch (\d+)\s+\d+% step (\d+)/(\d+)")
END_RE = re.compile(r"epoch (\d+) loss ")
# rdzv-agent's round lines (each agent prints every round).
SHRINK_RE = re.compile(r"rdzv-agent\[\d+\]: round (\d+): repair \(shrink\)")
RESTART_RE = re.compile(r"rdzv-agent\[\d+\]: round \d+: group rank 0 .* "
                        r"restart (\d+)$")


def runs(sides, reps, tmp):
    """(rep, side, n, name, d) for every job of a benchmark: reps
    repetitions of sides, each order rotated by one from the last (so that
    drifting machine load falls on every side alike); n counts the jobs
    from 1, name is "SIDE-n" and d a new directory of that name in tmp."""
    n = 0
    for rep in range(reps):
        for side in sides[rep % len(sides):] + sides[:rep % len(sides)]:
            n += 1
            name = "%s-%d" % (side, n)
            d = os.path.join(tmp, name)
            os.makedirs(d)
            yield rep, side, n, name, d


def report(label, row, keys, rounds, load, **kw):
    """Prints one line for a job: label, the figures of row ({name:
    seconds}) named in keys, rounds (Job.rounds(): "-" for None) and the
    load average before it (load) and now; kw go to print."""
    rp, rs = rounds
    print("%s %s  repairs %s restarts %s  load %.1f->%.1f" % (
        label, "  ".join("%s %.3f s" % (k, row[k]) for k in keys if k in row),
        "-" if rp is None else rp, "-" if rs is None else rs, load,
        os.getloadavg()[0]), flush=True, **kw)


def launcher_argv(side, prog, name, port, build, torchrun=TORCHRUN,
                  python=None, nnodes="2"):
    """One launcher's command line for side (see the header)."""
    if side == "torchrun":
        return [torchrun, "--nnodes", "2", "--nproc_per_node", "2",
                "--rdzv_backend", "c10d", "--rdzv_endpoint",
                "127.0.0.1:%d" % port, "--rdzv_id", name,
                "--max_restarts", "1000", "--no_python"] + \
            ([python] if python else []) + prog
    return [os.path.join(build, "agent", "rdzv-agent"), "--nnodes", nnodes,
            "--nproc_per_node", "2", "--rdzv_backend", "rdzv",
            "--rdzv_endpoint", "127.0.0.1:%d" % port, "--rdzv_id", name,
            "--max_restarts", "1000"] + \
        (["--warm_spare", "0"] if side == "cold" else []) + \
        ([] if python else ["--no_python"]) + prog


class Job:
    """One job of one side: two launchers, their output read with the
    monotonic time of each line."""

    def __init__(self, side, prog, d, name, port, build, env=None,
                 torchrun=TORCHRUN, worker=None, python=None, nnodes="2"):
        if side not in SIDES:
            raise ValueError("side %s: not one of %s" % (side, SIDES))
        self.side = side
        self.d = d
        self.worker = worker
        self._lines = []	# (t, text)
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.procs = []
        e = dict(os.environ if env is None else env)
        if side == "restart":
            e["RDZV_REPAIR"] = "0"
        if python:
            e["PYTHON"] = python
            # The warm spare runs python -m rdzv.spare: the source
            # tree's rdzv (else it exits and replacements start cold).
            pp = os.path.join(HERE, "..", "python")
            e["PYTHONPATH"] = pp + (":" + e["PYTHONPATH"] if
                                    e.get("PYTHONPATH") else "")
        if side == "torchrun":
            port = rt.free_port()
        self._argv = launcher_argv(side, prog, name, port, build, torchrun,
                                   python, nnodes)
        self._env = e
        self.t0 = time.monotonic()
        for i in range(2):
            self.add()

    def add(self):
        """Starts one more launcher of the job (a node joining it);
        returns the monotonic time it was started."""
        t = time.monotonic()
        p = subprocess.Popen(self._argv, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT,
                             start_new_session=True, env=self._env,
                             cwd=self.d)
        self.procs.append(p)
        th = threading.Thread(target=self._read,
                              args=(p, len(self.procs) - 1), daemon=True)
        th.start()
        return t

    def _read(self, p, i):
        with open(os.path.join(self.d, "agent%d.out" % i), "wb") as log:
            for raw in p.stdout:
                t = time.monotonic()
                log.write(raw)
                with self.cond:
                    self._lines.append((t, raw.decode(errors="replace")))
                    self.cond.notify_all()

    @property
    def lines(self):
        with self.lock:
            return list(self._lines)

    def lines_from(self, i):
        """The lines from the i-th on (i from 0, in arrival order)."""
        with self.lock:
            return self._lines[i:]

    def wait_line(self, pred, since, timeout=120.0):
        """The first (t, text) that arrived after since with pred(text)
        true; AssertionError after timeout seconds."""
        end = time.monotonic() + timeout
        i = 0
        with self.cond:
            while True:
                while i < len(self._lines):
                    t, s = self._lines[i]
                    i += 1
                    if t > since and pred(s):
                        return t, s
                left = end - time.monotonic()
                if left <= 0:
                    tail = "".join(s for _, s in self._lines[-30:])
                    raise AssertionError("%s: no such line within %.0f s;"
                                         " the last lines:\n%s"
                                         % (self.side, timeout, tail))
                self.cond.wait(min(left, 1.0))

    def workers(self):
        """Live workers whose parent is one of the launchers."""
        return agent_lib.children([p.pid for p in self.procs], self.worker)

    def rounds(self):
        """(shrink rounds, restarts) rdzv-agent printed, or
        (None, None) under torchrun."""
        if self.side == "torchrun":
            return None, None
        lines = [s.rstrip("\n") for _, s in self.lines]
        rep = len({m.group(1) for m in map(SHRINK_RE.search, lines) if m})
        rst = max([int(m.group(1)) for m in map(RESTART_RE.search, lines)
                   if m] or [0])
        return rep, rst

    def end(self, marker):
        """rounds(), then stop(marker): what the launchers printed of the
        job's rounds, once it is over."""
        rounds = self.rounds()
        self.stop(marker)
        return rounds

    def stop(self, marker):
        ws = self.workers()
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
        # Workers live in sessions of their own: those seen before, and
        # whatever still runs with marker in its command line.
        for pid in set(ws) | set(agent_lib.marked_pids(marker)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
