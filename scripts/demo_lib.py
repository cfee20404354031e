# SPDX-License-Identifier: Apache-2.0
"""demo_lib: what the demo's training parts share.

    Demo(work)          rdzvd on fixed ports (main and status page) for
                        every part; demo.ctl(...) runs rdzvctl and prints
                        the command line (so the user can run it too),
                        demo.ctl_json(...), .events(job), .steps(job) read
                        its --json output
    Sections(demo)      numbered parts of the story: begin(n, title),
                        check(ok, claim) prints "ok: claim" or "FAILED:
                        claim (detail)", end_section() the part's verdict
                        (PASS part N, or FAIL part N and what failed)
    Part(demo, job, show)  Sections of one job: its two agents (agent()),
                        their lines relayed as they come when show(line),
                        pids(), kill_worker_repaired(), finish_agents()
    run_part(demo, job, show, body)   body(part); what it waits for and
                        never comes fails the running part
    workers(agent)      an agent's worker pids (/proc)

The processes come from the test suite's own harness (tests/lib/
rdzvtest.py starts and tracks rdzvd, tests/integ/agent_lib.py the
agents): everything started is killed on the way out, on a failure, on
Ctrl-C.  Nothing is removed: the work directory (rdzvd's database and
log, each agent's output and its workers' logs) is there to read after.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

TOP_SRCDIR = os.environ.get("RDZV_TOP_SRCDIR") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
TOP_BUILDDIR = os.environ.get("RDZV_TOP_BUILDDIR") or os.path.join(
    TOP_SRCDIR, "build")
os.environ["RDZV_TOP_SRCDIR"] = TOP_SRCDIR
os.environ["RDZV_TOP_BUILDDIR"] = TOP_BUILDDIR
# The harness removes its temporary directories at exit; the demo's are
# in its work directory, kept for the user.
os.environ["RDZV_TEST_KEEP"] = "1"
sys.path[:0] = [os.path.join(TOP_SRCDIR, "tests", "lib"),
                os.path.join(TOP_SRCDIR, "tests", "integ")]

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, conf                       # noqa: E402

RDZVCTL = os.path.join(TOP_BUILDDIR, "client", "rdzvctl")
AGENT = os.path.join(TOP_BUILDDIR, "agent", "rdzv-agent")
DATA = "/usr/share/datasets/fashion-mnist"

_out = threading.Lock()


def say(msg=""):
    with _out:
        print("demo | " + msg if msg else "", flush=True)


class PartFailed(Exception):
    """Something the part waits for did not happen: the part ends."""


def wait_for(pred, timeout, what):
    """pred() polled until true (returned); PartFailed after timeout."""
    try:
        return rt.wait_until(pred, timeout=timeout, interval=0.1, what=what)
    except AssertionError as e:
        raise PartFailed(str(e))


def workers(agent):
    """The pids of agent's live workers, sorted."""
    return agent.children()


def env_rank(pid):
    """The RANK in pid's environment, or "?"."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            for kv in f.read().split(b"\0"):
                if kv.startswith(b"RANK="):
                    return kv[5:].decode()
    except OSError:
        pass
    return "?"


class Demo:
    """rdzvd for the whole demo, on ports that stay the same across a
    restart (the agents reconnect to the address they know, the status
    page's address stays valid)."""

    def __init__(self, work):
        self.work = work
        tempfile.tempdir = work         # the harness's directories
        self.port, self.http = rt.free_port(), rt.free_port()
        tmp = os.path.join(work, "rdzvd")
        os.makedirs(tmp, exist_ok=True)
        # History every 0.5 s: the chart of a job of seconds has points.
        self.d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % self.port,
                           "--http", "127.0.0.1:%d" % self.http,
                           "--history-interval-ms", "500"],
                          durability="strict", tmpdir=tmp)
        self.url = "http://127.0.0.1:%d/" % self.http
        self.verdicts = []

    def ctl_argv(self, *args):
        return [RDZVCTL, "-e", "127.0.0.1:%d" % self.port] + list(args)

    def ctl(self, *args, show=True, match=None):
        """Runs rdzvctl ARGS, prints the command and (lines matching
        `match`, else all of) its output; returns the output."""
        p = subprocess.run(self.ctl_argv(*args), capture_output=True,
                           text=True, timeout=20)
        if show:
            say("$ rdzvctl -e 127.0.0.1:%d %s" % (self.port, " ".join(args)))
            for line in p.stdout.splitlines():
                if match is None or re.search(match, line):
                    say("  " + line)
            if p.returncode != 0:
                say("  (rdzvctl exited %d: %s)" % (p.returncode,
                                                   p.stderr.strip()))
        return p.stdout

    def ctl_json(self, *args):
        """rdzvctl --json ARGS parsed, or None (no answer, no such job)."""
        try:
            p = subprocess.run(self.ctl_argv("--json", *args),
                               capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            return None
        if p.returncode != 0:
            return None
        try:
            return json.loads(p.stdout)
        except ValueError:
            return None

    def events(self, job):
        """job's events [{seq, time_ms, text}] (rdzvctl --json events)."""
        return self.ctl_json("events", job) or []

    def steps(self, job):
        """{node_id: lowest step its workers reported in the running
        round} of the connected members whose every worker reported,
        from rdzvctl --json members; {} if none."""
        doc = self.ctl_json("members", job)
        out = {}
        for m in (doc or {}).get("members", []):
            p = m.get("progress")
            if m.get("connected") and p and \
                    p.get("ranks_reporting") == m.get("local_world_size"):
                out[m["node_id"]] = p["min_step"]
        return out


def event_time(evs, prefix):
    """time_ms of the first event whose text starts with prefix, or
    None."""
    for e in evs:
        if e["text"].startswith(prefix):
            return e["time_ms"]
    return None


class Sections:
    """Numbered sections of the story, each with its claims (check()) and
    its verdict, which goes to demo.verdicts."""

    def __init__(self, demo):
        self.demo = demo
        self.section = None
        self.failed = []
        self.where = demo.work

    def begin(self, number, title):
        """Ends the running section (its verdict) and starts the next."""
        self.end_section()
        self.section = (number, title)
        self.failed = []
        self.t0 = time.monotonic()
        say()
        say("== part %d: %s" % (number, title))

    def check(self, ok, claim, detail=""):
        """Records a claim: 'ok: claim', or 'FAILED: claim (detail)'."""
        if ok:
            say("  ok: " + claim)
        else:
            say("  FAILED: %s%s" % (claim, " (%s)" % str(detail)[:800]
                                    if detail else ""))
            self.failed.append(claim)
        return ok

    def end_section(self, err=None):
        if self.section is None:
            return
        if err is not None:
            self.failed.append(str(err))
            say("  FAILED: %s" % err)
        number, title = self.section
        took = time.monotonic() - self.t0
        if self.failed:
            say("FAIL part %d (%s): %s; its files: %s" % (
                number, title, "; ".join(self.failed), self.where))
        else:
            say("PASS part %d: %s (%.0f s)" % (number, title, took))
        self.demo.verdicts.append((number, title, not self.failed))
        self.section = None


class Part(Sections):
    """One job of the demo: its agents under a Scope in the work
    directory, their lines relayed as they come (show(line) says which),
    told in one or more sections."""

    def __init__(self, demo, job, show):
        Sections.__init__(self, demo)
        self.job, self.show = job, show
        self.scope = Scope("%s-" % job)
        self.where = self.scope.tmp
        self.agents = []
        self.relays = []
        self.stop = threading.Event()

    def agent(self, name, program, env=None, extra=(), no_python=True):
        """An rdzv-agent (one of 2 nodes x 2 workers of the job, on the
        demo's rdzvd) named name in what it prints."""
        args = ["--nnodes", "2", "--nproc_per_node", "2",
                "--rdzv_endpoint", "127.0.0.1:%d" % self.demo.port,
                "--rdzv_id", self.job, "--max_restarts", "2", "--grace", "2",
                "--rdzv_conf", conf(0.2, 5.0),
                "--log_dir", os.path.join(self.scope.tmp, "logs-" + name)]
        if no_python:
            args.append("--no_python")
        a = self.scope.agent(args + list(extra), env=env, program=program)
        a.node = name
        self.agents.append(a)
        t = threading.Thread(target=self._relay, args=(a,), daemon=True)
        t.start()
        self.relays.append(t)
        return a

    def _relay(self, a):
        pos = 0
        buf = b""
        while True:
            done = self.stop.is_set()
            try:
                with open(a.out_path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
            except OSError:
                chunk = b""
            pos += len(chunk)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                if self.show(line):
                    with _out:
                        print("%s | %s" % (a.node, line), flush=True)
            if done:
                return
            time.sleep(0.1)

    def output(self):
        return "".join(a.output() for a in self.agents)

    def pids(self):
        """'node A: PID (rank R) ..., node B: ...' of the live workers."""
        return ", ".join("%s: %s" % (a.node, " ".join(
            "%d (rank %s)" % (p, env_rank(p)) for p in workers(a)))
            for a in self.agents)

    def kill_worker_repaired(self, timeout, joins):
        """SIGKILLs node B's first worker and waits for the job's grow
        round; checks that the survivors kept their PIDs, that node B
        runs one new worker, that rdzvd opened a shrink round of 3 for
        the death and then a grow round of 4, and no restart; says how
        long each round took to come (joins: what the replacement did in
        between).  Returns the survivors' pids."""
        a, b = self.agents
        demo, job = self.demo, self.job
        before = workers(a) + workers(b)
        self.check(len(workers(a)) == len(workers(b)) == 2,
                   "2 workers on each node", self.pids())
        say("workers before: " + self.pids())
        victim = workers(b)[0]
        survivors = set(before) - {victim}
        say("kill -9 worker pid %d (rank %s) of node B" %
            (victim, env_rank(victim)))
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: any(e["text"].startswith((
            "repair: grow", "restart ", "repair: no grow"))
            for e in demo.events(job)), timeout, "the grow round")
        say("workers after:  " + self.pids())
        now = set(workers(a)) | set(workers(b))
        new = now - survivors
        self.check(survivors <= now, "the 3 survivors kept their PIDs",
                   "before %s, now %s" % (sorted(survivors), sorted(now)))
        self.check(victim not in now and len(new) == 1 and
                   bool(set(workers(b)) & new),
                   "node B runs one new worker, the replacement",
                   "new: %s" % sorted(new))
        evs = demo.events(job)
        texts = [e["text"] for e in evs]
        told = [t for t in texts if t.startswith(("failure", "repair",
                                                  "restart"))]
        t_shrink = event_time(evs, "repair: shrink to 3")
        t_grow = event_time(evs, "repair: grow to 4")
        self.check(any(t.startswith("repair: shrink to 3") and
                       "died (signal 9)" in t for t in texts),
                   "rdzvd opened a shrink round of 3 for the death",
                   "its events: %s" % told)
        self.check(t_grow is not None, "then a grow round of 4 for the "
                   "replacement")
        self.check(not any(t.startswith("restart ") or "escalated" in t
                           for t in texts), "no restart")
        demo.ctl("events", job, match=r"EVENT|failure|repair")
        if t_shrink and t_grow:
            say("SIGKILL -> shrink round: %.0f ms; shrink -> grow round "
                "(the replacement %s and joined): %.2f s" % (
                    max(0, t_shrink - t_kill * 1000), joins,
                    (t_grow - t_shrink) / 1000))
        return survivors

    def finish_agents(self, timeout):
        """Waits for every agent; checks each exited 0."""
        for a in self.agents:
            try:
                rc = a.wait(timeout)
            except AssertionError:
                raise PartFailed("%s's agent still running after %d s"
                                 % (a.node, timeout))
            self.check(rc == 0, "%s's agent exited 0" % a.node,
                       "exit status %d" % rc)

    def close(self, err=None):
        """Stops what is left of the job and ends the running section."""
        try:
            self.scope.close()
        except AssertionError as e:
            self.failed.append(str(e))
        self.stop.set()
        for t in self.relays:
            t.join(5)
        self.end_section(err)


def run_part(demo, job, show, body):
    """body(part) on a new Part of job; a PartFailed or AssertionError in
    it fails the running section (and skips the job's later ones)."""
    part = Part(demo, job, show)
    try:
        body(part)
        err = None
    except (PartFailed, AssertionError) as e:
        err = e
    part.close(err)
