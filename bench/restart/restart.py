# SPDX-License-Identifier: Apache-2.0
"""restart.py: recovery of rdzv-agent beside torchrun, in one run.

    PYTHON restart.py --build BUILDDIR [--reps N] [--only LIST]
                                [--results DIR] [--settle S]

Run by restart_vs_torchrun.sh (which says what is measured and how).
Every job is two nodes x two workers on 127.0.0.1: two launcher processes
(two agents on this machine), each in its own session.

  torchrun   PYTHON -m torch.distributed.run --nnodes 2
             --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint
             127.0.0.1:PORT --rdzv_id ID --monitor_interval 0.1
             --max_restarts 3 --redirects 9:1 --tee 9:1 [--no_python] PROG
             The c10d store is hosted by one of the two agents, torch's
             default (is_host unset: both agents match 127.0.0.1, the first
             to bind PORT hosts, the other connects).
  rdzv-agent BUILD/agent/rdzv-agent --nnodes 2 --nproc_per_node 2
             --rdzv_endpoint 127.0.0.1:RDZVD --rdzv_id ID --max_restarts 3
             [--no_python] PROG
             against one rdzvd started here with its defaults (durability
             relaxed, a sqlite file; no --rdzv_conf: min = max = 2 forms a
             round as soon as both nodes are in, so no last call applies).

Workers (the same under both): BUILD/bench/restart/startmark MARKS (C)
or PYTHON gloo_ready.py MARKS (torch gloo).  PYTHON is the interpreter
that runs restart.py: its torch is the peer (restart_vs_torchrun.sh picks
torch 2.13's unless TORCH_PYTHON names another).  Both append
"KIND RANK RESTART MONO_NS REAL_NS PID LOCAL_RANK" lines to MARKS.

Experiments (--only, comma-separated; default all):
  a     C worker.  Events alternate SIGKILL and SIGUSR1 (the worker marks
        "exit" with both clocks, then _exit(1)); up to 3 events per job
        (max_restarts 3), jobs alternate launchers.  Per SIGKILL: kill ->
        the last of the 4 ranks' next "start" mark.  Per exit: the same
        to the next round, plus exit -> "term" mark of the other worker on
        the same node (the agent noticed and began stopping its group; a
        nanosecond upper bound on noticing) and, for rdzv-agent, exit -> the
        agent's "worker N (rank R, pid P) failed" log line (millisecond
        stamps, truncated).  Agent VmRSS with its 2 workers running, read
        after each job's first round is up.
  b     gloo worker, SIGKILL only: kill -> the last of the 4 "ready" marks
        (process group initialised and a first all_reduce done); also
        kill -> the last "start" mark.
  join  join1000.py against a fresh rdzvd per repetition: 1000 native
        connections JOIN one job (min = max = 1000); all ROUND pushes in.

Prints a markdown table of medians on stdout; every sample goes to
RESULTS/events.tsv.  Progress goes to stderr.  Only processes started here
are ever signalled: launcher sessions, and processes whose command line
holds this run's temporary directory.
"""
import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
NODES, NPROC, MAX_RESTARTS = 2, 2, 3
WORLD = NODES * NPROC
KILL_CYCLE = (3, 0, 2, 1)	# ranks hit in turn: both nodes, both slots


def log(msg):
    print("restart: " + msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def vmrss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_ms(pid):
    """User + system CPU time of pid in ms (clock-tick resolution)."""
    with open("/proc/%d/stat" % pid) as f:
        st = f.read()
    f = st[st.rfind(")") + 2:].split()
    return (int(f[11]) + int(f[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def rdzvd_port(p, pf, d):
    """The port rdzvd p (started with --port-file pf) listens on, once it
    wrote pf; RuntimeError (naming directory d) when p exits first or 10 s
    pass."""
    end = time.monotonic() + 10
    while not os.path.exists(pf):
        if p.poll() is not None or time.monotonic() > end:
            raise RuntimeError("rdzvd did not start: see %s" % d)
        time.sleep(0.02)
    with open(pf) as f:
        return int(f.read().split()[0])


def proc_stat(pid):
    """(ppid, session, state) of pid, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return None
    f = st[st.rfind(")") + 2:].split()
    return int(f[1]), int(f[3]), f[0]


def children(pid):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = proc_stat(int(name))
            if s and s[0] == pid and s[2] != "Z":
                out.append(int(name))
    return out


class Bench:
    def __init__(self, a):
        self.build = os.path.abspath(a.build)
        self.agent = os.path.join(self.build, "agent", "rdzv-agent")
        self.rdzvd_bin = os.path.join(self.build, "rdzvd", "rdzvd")
        self.startmark = os.path.join(self.build, "bench", "restart",
                                      "startmark")
        self.gloo = os.path.join(HERE, "gloo_ready.py")
        self.tmp = a.tmp
        self.results = a.results
        self.reps = a.reps
        self.settle = a.settle
        self.timeout = a.timeout
        self.sessions = set()
        self.procs = []
        self.rows = []		# (experiment, launcher, metric, value, info)
        self.tsv = open(os.path.join(self.results, "events.tsv"), "a")
        self.rdzvds = {}	# launcher name -> (rdzvd process, port)
        self.variants = [v for v in a.variants.split(",") if v]
        self.launcher_set = a.launchers.split(",")
        self.njobs = 0

    # -- bookkeeping --

    def record(self, exp, launcher, metric, value, info=""):
        self.rows.append((exp, launcher, metric, value))
        self.tsv.write("%s\t%s\t%s\t%s\t%s\n" % (exp, launcher, metric,
                       "nan" if value is None else "%.3f" % value, info))
        self.tsv.flush()

    def spawn(self, argv, out, cwd, env=None):
        e = dict(os.environ)
        e["PYTHON"] = PY
        if env:
            e.update(env)
        with open(out, "ab") as f:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f,
                                 stderr=subprocess.STDOUT, cwd=cwd, env=e,
                                 start_new_session=True)
        self.sessions.add(p.pid)
        self.procs.append(p)
        self.save_sessions()
        return p

    def save_sessions(self):
        """The live sessions, for restart_vs_torchrun.sh's trap should
        this driver be killed."""
        path = os.path.join(self.tmp, "sessions")
        with open(path + ".tmp", "w") as f:
            f.write("".join("%d\n" % sid for sid in sorted(self.sessions)))
        os.rename(path + ".tmp", path)

    def ours(self, sessions, mark):
        """Live pids in sessions, or with mark (a directory of ours) in
        their command line."""
        me = os.getpid()
        mark = mark.encode()
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            pid = int(name)
            s = proc_stat(pid)
            if s is None or s[2] == "Z":
                continue
            if s[1] in sessions:
                out.append(pid)
                continue
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if mark in f.read():
                        out.append(pid)
            except OSError:
                pass
        return out

    def sweep(self, sessions=None, mark=None):
        """SIGKILLs whatever is left in sessions (default: all of ours)
        or holds mark (default: our directory); reaps the launchers."""
        if sessions is None:
            sessions = set(self.sessions)
        if mark is None:
            mark = self.tmp
        for _ in range(50):
            left = self.ours(sessions, mark)
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)
        for p in self.procs:
            if p.pid in sessions:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    log("pid %d did not die" % p.pid)
        self.procs = [p for p in self.procs if p.poll() is None]
        self.sessions -= sessions
        self.save_sessions()

    # -- rdzvd --

    def start_rdzvd(self, name, durability=None):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, exist_ok=True)
        pf = os.path.join(d, "port")
        argv = [self.rdzvd_bin, "-d", "--listen", "127.0.0.1:0",
                "--port-file", pf, "--http", "off",
                "--db", os.path.join(d, "rdzvd.db"),
                "--log-file", os.path.join(d, "rdzvd.log")]
        if durability:
            argv += ["--durability", durability]
        p = self.spawn(argv, os.path.join(d, "stderr"), d)
        return p, rdzvd_port(p, pf, d)

    def stop_proc(self, p, timeout=10):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.sessions.discard(p.pid)
        self.save_sessions()

    # -- one job --

    def job(self, launcher, worker, events, exp):
        self.njobs += 1
        name = "%s-%s-%d" % (exp, "tr" if launcher == "torchrun" else "ra",
                             self.njobs)
        if launcher != "torchrun" and launcher not in self.rdzvds:
            dur = launcher.split()[-1].rstrip(")") if "(" in launcher \
                else None
            self.rdzvds[launcher] = self.start_rdzvd(
                "rdzvd-" + (dur or "default"), dur)
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        marks = os.path.join(d, "marks")
        if worker == "c":
            prog = ["--no_python", self.startmark, marks]
        else:
            prog = [self.gloo, marks]
        if launcher == "torchrun":
            port = free_port()
            argv = [PY, "-m", "torch.distributed.run", "--nnodes", "2",
                    "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", "127.0.0.1:%d" % port,
                    "--rdzv_id", name, "--monitor_interval", "0.1",
                    "--max_restarts", str(MAX_RESTARTS),
                    "--redirects", "9:1", "--tee", "9:1"] + prog
        else:
            argv = [self.agent, "--nnodes", "2", "--nproc_per_node", "2",
                    "--rdzv_endpoint", "127.0.0.1:%d" %
                    self.rdzvds[launcher][1],
                    "--rdzv_id", name, "--max_restarts",
                    str(MAX_RESTARTS)] + prog
        agents = [self.spawn(argv, os.path.join(d, "agent%d.out" % i), d)
                  for i in range(NODES)]
        ready = "start" if worker == "c" else "ready"
        try:
            cur = self.wait_round(marks, ready, 0, agents, d)
            if cur is None:
                self.record(exp, launcher, "job did not start", None, name)
                return
            time.sleep(self.settle)
            if worker == "c":
                for i, ag in enumerate(agents):
                    kids = children(ag.pid)
                    rss = vmrss_kb(ag.pid)
                    self.record("rss", launcher, "agent VmRSS kB", rss,
                                "%s node%d workers=%d" % (name, i,
                                                           len(kids)))
            for ev, rank in events:
                time.sleep(self.settle)
                cur = self.event(exp, launcher, name, d, marks, ready, agents,
                                 cur, ev, rank)
                if cur is None:
                    break
        finally:
            for ag in agents:
                if ag.poll() is None:
                    ag.send_signal(signal.SIGTERM)
            end = time.monotonic() + 5
            for ag in agents:
                try:
                    ag.wait(timeout=max(0.1, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            self.sweep({ag.pid for ag in agents}, d + "/")

    def event(self, exp, launcher, name, d, marks, ready, agents, cur, ev,
              rank):
        victim = cur[rank]["pid"]
        sib = cur[rank ^ 1]["pid"]	# the other worker on the same node
        sig = signal.SIGKILL if ev == "kill" else signal.SIGUSR1
        t0 = time.monotonic_ns()
        os.kill(victim, sig)
        new = self.wait_round(marks, ready, t0, agents, d)
        info = "%s rank=%d" % (name, rank)
        if new is None:
            self.record(exp, launcher, ev + ": no next round", None, info)
            return None
        up = (max(m["mono"] for m in new.values()) - t0) / 1e6
        what = {"kill": "SIGKILL", "exit": "exit(1)"}[ev]
        if ready == "start":
            self.record(exp, launcher, what + " -> all 4 running", up, info)
        else:
            self.record(exp, launcher, what + " -> all 4 gloo ready", up,
                        info)
            ms = self.read_marks(marks)
            for kind, label in (("start", "started"),
                                ("imported", "imported torch")):
                st = self.first_after(ms, kind, t0)
                if len(st) == WORLD:
                    self.record(exp, launcher, "%s -> all 4 %s" % (what,
                                label), (max(m["mono"] for m in st.values())
                                         - t0) / 1e6, info)
        # Where the time went: the agent of the failed worker stopping its
        # other worker, and the other node's agent (told through rdzvd or
        # the c10d store) stopping both of its own.
        ms = self.read_marks(marks)
        pids = {cur[r]["pid"]: r for r in cur if r != rank}
        terms = {}
        for m in ms:
            if m["kind"] == "term" and m["pid"] in pids and \
                    m["pid"] not in terms:
                terms[m["pid"]] = m["mono"]
        if sib in terms:
            self.record(exp, launcher, what + " -> same-node worker SIGTERM",
                        (terms[sib] - t0) / 1e6, info)
        far = [terms.get(cur[r]["pid"]) for r in cur
               if r // NPROC != rank // NPROC]
        if all(far):
            self.record(exp, launcher, what + " -> other node's workers "
                        "SIGTERM", (max(far) - t0) / 1e6, info)
        if ev == "exit":
            ex = [m for m in ms if m["kind"] == "exit" and
                  m["pid"] == victim]
            tm = [m for m in ms if m["kind"] == "term" and m["pid"] == sib]
            if ex and tm:
                self.record("notice", launcher,
                            "exit -> sibling SIGTERM",
                            (tm[0]["mono"] - ex[0]["mono"]) / 1e6, info)
            else:
                self.record("notice", launcher, "exit -> sibling SIGTERM",
                            None, info + " marks missing")
            if launcher == "rdzv-agent" and ex:
                # The stamp is truncated to the millisecond: the line came
                # before stamp + 1 ms, which is what is recorded.
                t = self.agent_log_time(d, victim)
                if t is not None:
                    self.record("notice", launcher, "exit -> agent log line",
                                (t + 10**6 - ex[0]["real"]) / 1e6, info)
        return new

    @staticmethod
    def read_marks(path):
        out = []
        try:
            with open(path) as f:
                lines = f.readlines()
        except OSError:
            return out
        for line in lines:
            p = line.split()
            if len(p) != 7 or not line.endswith("\n"):
                continue
            out.append({"kind": p[0], "rank": int(p[1]),
                        "restart": int(p[2]), "mono": int(p[3]),
                        "real": int(p[4]), "pid": int(p[5]),
                        "local": int(p[6])})
        return out

    @staticmethod
    def first_after(ms, kind, t0):
        """{rank: first mark of kind after t0}."""
        out = {}
        for m in ms:
            if m["kind"] == kind and m["mono"] > t0 and m["rank"] not in out:
                out[m["rank"]] = m
        return out

    def wait_round(self, marks, kind, t0, agents, d):
        """Polls the marks until every rank has a kind mark after t0."""
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            got = self.first_after(self.read_marks(marks), kind, t0)
            if len(got) == WORLD and set(got) == set(range(WORLD)):
                return got
            if any(ag.poll() is not None for ag in agents):
                log("a launcher exited early in %s" % d)
                return None
            time.sleep(0.02)
        log("no round of %d %s marks within %.0f s in %s" %
            (WORLD, kind, self.timeout, d))
        return None

    @staticmethod
    def agent_log_time(d, pid):
        """REALTIME ns of rdzv-agent's "failed" line for pid (ms stamps,
        local time), or None."""
        pat = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3}) "
                         r"rdzv-agent\[\d+\]: worker \d+ \(rank \d+, pid "
                         r"%d\) failed" % pid)
        for i in range(NODES):
            try:
                with open(os.path.join(d, "agent%d.out" % i)) as f:
                    for line in f:
                        m = pat.match(line)
                        if m:
                            s = time.mktime(time.strptime(m.group(1),
                                            "%Y-%m-%dT%H:%M:%S"))
                            return int(s) * 10**9 + int(m.group(2)) * 10**6
            except OSError:
                pass
        return None

    # -- experiments --

    def launchers(self, j, exp):
        # Alternate which launcher goes first so drift in the machine's
        # load falls on both alike.  rdzvd durability variants (a only)
        # come after.
        pair = [x for x in ("torchrun", "rdzv-agent")
                if x in self.launcher_set]
        if j % 2:
            pair.reverse()
        if exp == "a":
            pair += ["rdzv-agent (rdzvd %s)" % v for v in self.variants]
        return pair

    def run_events(self, exp, worker, kinds):
        evs = []
        for i in range(self.reps * len(kinds)):
            evs.append((kinds[i % len(kinds)], KILL_CYCLE[i % 4]))
        jobs = [evs[i:i + MAX_RESTARTS] for i in range(0, len(evs),
                                                        MAX_RESTARTS)]
        for j, chunk in enumerate(jobs):
            for launcher in self.launchers(j, exp):
                log("%s job %d/%d under %s: %s" % (exp, j + 1, len(jobs),
                    launcher, ", ".join("%s r%d" % e for e in chunk)))
                self.job(launcher, worker, chunk, exp)

    def run_join(self):
        script = os.path.join(HERE, "join1000.py")
        for i in range(self.reps):
            p, port = self.start_rdzvd("rdzvd-join%d" % i)
            try:
                cpu0 = cpu_ms(p.pid)
                out = subprocess.run([PY, script, "--port", str(port),
                                      "--n", "1000", "--job", "j%d" % i],
                                     capture_output=True, text=True,
                                     timeout=120)
                m = re.search(r"all_pushes_ms=([\d.]+)", out.stdout)
                if out.returncode != 0 or not m:
                    log("join1000 failed: %s %s" % (out.stdout, out.stderr))
                    self.record("join", "rdzv-agent", "1000 joins -> all "
                                "ROUND pushes", None, "failed")
                    continue
                self.record("join", "rdzv-agent",
                            "1000 joins -> all ROUND pushes",
                            float(m.group(1)), out.stdout.strip())
                self.record("join", "rdzv-agent", "rdzvd VmRSS kB after",
                            vmrss_kb(p.pid), "")
                self.record("join", "rdzv-agent", "rdzvd CPU ms",
                            cpu_ms(p.pid) - cpu0, "")
            finally:
                self.stop_proc(p)

    # -- report --

    def samples(self, exp, launcher, metric):
        return [r[3] for r in self.rows if r[0] == exp and r[1] == launcher
                and r[2] == metric and r[3] is not None]


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "MiB":
        return "%.1f MiB" % (v / 1024.0)
    if v >= 100:
        return "%.0f ms" % v
    if v >= 10:
        return "%.1f ms" % v
    return "%.2f ms" % v


def med(xs):
    return statistics.median(xs) if xs else None


def report(b, peer):
    # exp, metric, unit, what, target, check(torchrun, rdzv-agent medians)
    table = [
        ("a", "SIGKILL -> all 4 running", "ms",
         "(a) C worker: SIGKILL -> last of the 4 new ranks started",
         ">= 20x", lambda t, r: t / r >= 20),
        ("a", "SIGKILL -> same-node worker SIGTERM", "ms",
         "(a) of which: SIGKILL -> the other worker of that node gets "
         "SIGTERM", "-", None),
        ("a", "SIGKILL -> other node's workers SIGTERM", "ms",
         "(a) of which: SIGKILL -> both workers of the other node got "
         "SIGTERM", "-", None),
        ("a", "exit(1) -> all 4 running", "ms",
         "(a) C worker: exit(1) -> last of the 4 new ranks started", "-",
         None),
        ("b", "SIGKILL -> all 4 gloo ready", "ms",
         "(b) gloo worker: SIGKILL -> all 4 process groups ready (init + "
         "allreduce)", "> 1x", lambda t, r: t / r > 1),
        ("b", "SIGKILL -> all 4 started", "ms",
         "(b) of which: SIGKILL -> all 4 python processes started", "-",
         None),
        ("b", "SIGKILL -> all 4 imported torch", "ms",
         "(b) of which: SIGKILL -> all 4 done with import torch", "-",
         None),
        ("notice", "exit -> sibling SIGTERM", "ms",
         "worker exit -> its node's other worker gets SIGTERM (agent "
         "noticed and acted)", "< 5 ms", lambda t, r: r < 5),
        ("notice", "exit -> agent log line", "ms",
         "worker exit -> agent's \"failed\" log line (upper bound: 1 ms "
         "stamps)", "< 5 ms", lambda t, r: r < 5),
        ("rss", "agent VmRSS kB", "MiB",
         "agent VmRSS, 2 workers running", "-", None),
        ("rss", "rdzvd VmRSS kB (restart jobs)", "MiB",
         "rdzvd VmRSS after the restart jobs (torchrun: its store is inside "
         "an agent)", "-", None),
        ("join", "1000 joins -> all ROUND pushes", "ms",
         "1000 simulated agents JOIN one job -> all 1000 ROUND pushes in",
         "< 1 s", lambda t, r: r < 1000),
        ("join", "rdzvd CPU ms", "ms",
         "rdzvd CPU time (user + sys) for those 1000 JOINs and pushes", "-",
         None),
        ("join", "rdzvd VmRSS kB after", "MiB",
         "rdzvd VmRSS after the 1000-node round", "-", None),
    ]
    out = ["| measurement | %s | rdzv-agent | torchrun / "
           "rdzv-agent | target | met |" % peer,
           "| --- | ---: | ---: | ---: | --- | --- |"]
    detail = []
    for exp, metric, unit, text, target, check in table:
        tr = b.samples(exp, "torchrun", metric)
        ra = b.samples(exp, "rdzv-agent", metric)
        if not tr and not ra:
            continue
        mt, mr = med(tr), med(ra)
        ratio = "%.1fx" % (mt / mr) if mt is not None and mr else "-"
        met = "-"
        if check is not None and mr is not None:
            try:
                met = "met" if check(mt, mr) else "**MISSED**"
            except TypeError:	# a ratio without a torchrun figure
                met = "-"
        out.append("| %s | %s | %s | %s | %s | %s |" % (
            text, fmt(mt, unit) + (" (n=%d)" % len(tr) if tr else ""),
            fmt(mr, unit) + (" (n=%d)" % len(ra) if ra else ""), ratio,
            target, met))
        for name, xs in (("torchrun", tr), ("rdzv-agent", ra)):
            if xs:
                detail.append(samples_line(metric, name, xs, unit))
    print("\n".join(out))

    # rdzv-agent in (a) against rdzvd in each durability mode.
    names = ["rdzv-agent"] + ["rdzv-agent (rdzvd %s)" % v
                              for v in b.variants]
    rows = [("a", "SIGKILL -> all 4 running", "SIGKILL -> all 4 running"),
            ("a", "SIGKILL -> other node's workers SIGTERM",
             "SIGKILL -> other node's workers SIGTERM"),
            ("a", "exit(1) -> all 4 running", "exit(1) -> all 4 running"),
            ("notice", "exit -> sibling SIGTERM", "exit -> sibling SIGTERM")]
    if b.variants and any(b.samples("a", n, rows[0][1]) for n in names[1:]):
        print()
        print("(a) under rdzv-agent by rdzvd durability (medians; relaxed is "
              "rdzvd's default and the figure above):")
        print()
        print("| rdzvd | " + " | ".join(r[2] for r in rows) + " |")
        print("| --- |" + " ---: |" * len(rows))
        for n in names:
            cells = []
            for exp, metric, _ in rows:
                xs = b.samples(exp, n, metric)
                cells.append(fmt(med(xs), "ms") + " (n=%d)" % len(xs)
                             if xs else "-")
                if xs and n != "rdzv-agent":
                    detail.append(samples_line(metric, n, xs, "ms"))
            label = "relaxed (default)" if n == "rdzv-agent" else \
                n.split()[-1].rstrip(")")
            print("| %s | %s |" % (label, " | ".join(cells)))
    print()
    print("Every sample:")
    print()
    print("\n".join(detail))
    bad = [r for r in b.rows if r[3] is None]
    if bad:
        print()
        print("Failed events: " + "; ".join("%s %s %s" % r[:3] for r in bad))


def samples_line(metric, name, xs, unit):
    conv = (lambda v: v / 1024.0) if unit == "MiB" else (lambda v: v)
    return "- %s, %s: %s %s" % (metric, name, ", ".join(
        "%.3g" % conv(x) for x in xs), "MiB" if unit == "MiB" else "ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="a,b,join")
    ap.add_argument("--results", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--settle", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--launchers", default="torchrun,rdzv-agent")
    ap.add_argument("--peer", default="torchrun",
                    help="the torchrun column's title (with its version)")
    ap.add_argument("--variants", default="strict,memory",
                    help="rdzvd --durability values also run in (a)")
    a = ap.parse_args()
    b = Bench(a)

    def on_signal(sig, frame):
        raise SystemExit(128 + sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    only = a.only.split(",")
    t_start = time.monotonic()
    try:
        if "a" in only:
            b.run_events("a", "c", ("kill", "exit"))
        if "b" in only:
            b.run_events("b", "gloo", ("kill",))
        for launcher, (p, port) in sorted(b.rdzvds.items()):
            b.record("rss", launcher, "rdzvd VmRSS kB (restart jobs)",
                     vmrss_kb(p.pid), "")
            b.stop_proc(p)
        if "join" in only:
            b.run_join()
    finally:
        b.sweep()
    log("done in %.0f s" % (time.monotonic() - t_start))
    report(b, a.peer)


if __name__ == "__main__":
    main()
