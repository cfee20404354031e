# SPDX-License-Identifier: Apache-2.0
"""compatlib: helpers shared by the tests in tests/compat/.

Owns what those tests need beyond tests/lib/rdzvtest.py (which starts and
stops rdzvd and torch's own TCPStore server (TorchServer), starts and ends
process groups (spawn, end, end_all), speaks the raw TCPStore dialects,
parses /metrics and runs the tests: main(globals(), sections=True)): the
choice of torch, a choice of server so each test can be validated against
torch's own TCPStore server, and a byte-logging TCP proxy that records
what torch sent and what came back.

Which PyTorch: a test runs under the python that runs it (TORCH_PYTHON,
Debian's torch 1.13, by default); torch 2.x tests call use_torch2() first,
which re-executes the file under TORCH2_PYTHON (the virtualenv with torch
2.13 that scripts/deps.sh makes).  A torch that cannot be imported skips
the file, except under RDZV_REQUIRE_TORCH=1 (scripts/test.sh, so CI),
where it fails it: a missing torch must never pass as a skip.

Which server the tests talk to is chosen by RDZV_COMPAT_SERVER:
  rdzvd (default)  the daemon built in RDZV_TOP_BUILDDIR
  torch            torch 1.13's own TCPStore server in a helper process;
                   checks that need rdzvd (metrics, restart, durability)
                   are left out, every other assertion must pass unchanged.
"""

import json
import os
import re
import signal
import socket
import struct
import sys
import threading
import time

import rdzvtest

TORCH_PY = rdzvtest.TORCH_PYTHON
TORCH2_PY = rdzvtest.TORCH2_PYTHON
_T0 = time.monotonic()


def log(*a):
    print("[%7.3f]" % (time.monotonic() - _T0), *a, flush=True)


def check(cond, msg):
    """An assert that survives python -O and says what went wrong."""
    if not cond:
        raise AssertionError(msg)


_no_torch = rdzvtest.no_torch


def require_torch():
    """torch.distributed, or the whole file is skipped (77); failed
    instead under RDZV_REQUIRE_TORCH=1."""
    try:
        import torch  # noqa: F401  (the import is the check)
        import torch.distributed as dist
    except Exception as e:
        _no_torch("torch not importable by %s: %s" % (sys.executable, e))
    if not dist.is_available():
        _no_torch("torch.distributed not available in %s" % sys.executable)
    return dist


def use_torch2():
    """Re-executes this test file under TORCH2_PYTHON unless it already
    runs there; returns torch.distributed of a 2.x torch."""
    # Compared unresolved: a venv's python is a symlink to the base one.
    if os.path.abspath(sys.executable) != os.path.abspath(TORCH2_PY) \
        and os.environ.get("RDZV_COMPAT_REEXEC") != "1":
        if not os.access(TORCH2_PY, os.X_OK):
            _no_torch("no torch 2.x python at %s (TORCH2_PYTHON)" %
                TORCH2_PY)
        os.environ["RDZV_COMPAT_REEXEC"] = "1"
        sys.stdout.flush()
        os.execv(TORCH2_PY, [TORCH2_PY] + sys.argv)
    dist = require_torch()
    import torch
    if int(torch.__version__.split(".")[0]) < 2:
        _no_torch("%s has torch %s, not 2.x" % (sys.executable,
            torch.__version__))
    return dist


def need_module(module):
    """True when this python (the torch 2.13 one, after use_torch2())
    finds module (a framework: lightning, accelerate, transformers,
    torchtitan); else a visible skip of the test, a failure under
    RDZV_REQUIRE_TORCH=1."""
    import importlib.util
    if importlib.util.find_spec(module) is not None:
        return True
    rdzvtest.no_torch("%s not importable by %s" % (module, sys.executable),
        whole_file=False)
    return False


def python_layer(what, whole_file=True):
    """Skips, in the sanitizer leg (RDZV_SANITIZERS=1) only, a test of a
    Python layer over rdzvd and rdzv-agent (a framework integration, a
    torch.compile path): under it the sanitized C programs do what the
    test_repair_* files already run them through in that leg, and the
    frameworks' imports and compiles would cost the leg minutes.  The
    plain leg runs it."""
    if os.environ.get("RDZV_SANITIZERS") != "1":
        return
    why = ("%s: a Python layer over the same rdzvd and agent paths the "
           "sanitizer leg runs in test_repair_*; the plain leg runs it"
           % what)
    if whole_file:
        rdzvtest.skip_all(why)
    rdzvtest.skip(why)


def server_kind():
    k = os.environ.get("RDZV_COMPAT_SERVER", "rdzvd")
    if k not in ("rdzvd", "torch"):
        raise AssertionError("RDZV_COMPAT_SERVER must be rdzvd or torch, "
            "not %r" % k)
    return k


# The names these tests used before rdzvtest held the one runner, process
# group starter and TorchServer; kept so tests written against them run.
spawn = rdzvtest.spawn
end = rdzvtest.end
end_all = rdzvtest.end_all
TorchServer = rdzvtest.TorchServer


# ---- servers ----------------------------------------------------------------

class RdzvdServer:
    """rdzvd through rdzvtest.Rdzvd, with the interface TorchServer also
    has."""
    kind = "rdzvd"
    has_metrics = True

    def __init__(self, **kw):
        # A directory of our own naming, so nobody's tidying of
        # /tmp/rdzvd-* pulls the database from under a restart test.
        kw.setdefault("tmpdir", rdzvtest.mktemp("rdzv-compat-rdzvd-"))
        self.d = rdzvtest.Rdzvd(**kw)

    @property
    def port(self):
        return self.d.port

    def raw(self, timeout=10.0):
        return self.d.tcps113(timeout)

    def metrics(self):
        return self.d.metrics()

    def metric(self, name, **labels):
        """One sample; a missing one fails the test."""
        v = rdzvtest.metric_value(self.metrics(), name, None, **labels)
        check(v is not None, "metric %s%s missing from /metrics" %
            (name, labels or ""))
        return v

    def log_text(self):
        return self.d.log_text()

    def diagnostics(self):
        return self.d.diagnostics()

    def healthz(self):
        st, body, _ = self.d.http_get("/healthz")
        return st, body

    def stop(self):
        return self.d.stop()

    def kill9(self):
        self.d.kill9()

    def restart(self, kill=False):
        self.d.restart(kill=kill)
        log("rdzvd restarted: pid %d port %d" % (self.d.pid, self.port))


def make_server(**kw):
    """The server under test, per RDZV_COMPAT_SERVER; kw go to rdzvd."""
    if server_kind() == "torch":
        s = rdzvtest.TorchServer()
    else:
        s = RdzvdServer(**kw)
    log("%s serving on 127.0.0.1:%d" % (s.kind, s.port))
    return s


def poll_metric(srv, name, want, timeout=5.0, **labels):
    """Polls one rdzvd sample until it equals want (rdzvd notices closes
    asynchronously); returns the last value read."""
    t = time.monotonic() + timeout
    while True:
        v = srv.metric(name, **labels)
        if v == want or time.monotonic() > t:
            return v
        time.sleep(0.05)


def run_sections(namespace, server=None, per_test=60.0, total=110.0):
    """rdzvtest.main(namespace, sections=True), under its old name."""
    rdzvtest.main(namespace, per_test, total, sections=True, server=server)


# ---- capture proxy ----------------------------------------------------------

class Proxy:
    """127.0.0.1:<port> -> target, logging every chunk with its direction,
    for reports of what torch sent and what came back."""

    def __init__(self, target_port, logpath=None):
        self.target = target_port
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self.records = []	# (conn no, "c>s"|"s>c", bytes)
        self.lock = threading.Lock()
        self.nconn = 0
        self.logpath = logpath
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.ls.close()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            s = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.nconn += 1
                n = self.nconn
            for a, b, d in ((c, s, "c>s"), (s, c, "s>c")):
                threading.Thread(target=self._pump, args=(n, a, b, d),
                    daemon=True).start()

    def _pump(self, n, a, b, d):
        while True:
            try:
                data = a.recv(65536)
            except OSError:
                data = b""
            with self.lock:
                self.records.append((n, d, data))
            if not data:
                try:
                    b.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                b.sendall(data)
            except OSError:
                return

    def dump(self, limit=200):
        lines = []
        with self.lock:
            for n, d, data in self.records:
                shown = data[:limit]
                lines.append("conn %d %s %5d %s%s" % (n, d, len(data),
                    shown.hex(" "), " ..." if len(data) > limit else ""))
        text = "\n".join(lines)
        if self.logpath:
            with open(self.logpath, "w") as f:
                f.write(text + "\n")
        return text

    def client_streams(self):
        """{connection number: every byte the client sent on it}."""
        out = {}
        with self.lock:
            for n, d, data in self.records:
                if d == "c>s":
                    out[n] = out.get(n, b"") + data
        return out


def wire_ops_113(data):
    """Parses one 1.13 client->server byte stream into ([(op, [keys])],
    bytes parsed), op named as in rdzvtest.T113; stops at the first thing
    it cannot parse (an unknown byte or a truncated request)."""
    out = []
    i = done = 0
    inv = {v: k for k, v in rdzvtest.T113.items()}

    def string(i):
        n = struct.unpack_from("<Q", data, i)[0]
        if i + 8 + n > len(data):
            raise struct.error("short")
        return data[i + 8:i + 8 + n], i + 8 + n
    try:
        while i < len(data):
            op = inv.get(data[i])
            i += 1
            if op == "set":
                k, i = string(i)
                _, i = string(i)
                out.append((op, [k]))
            elif op == "compare_set":
                k, i = string(i)
                _, i = string(i)
                _, i = string(i)
                out.append((op, [k]))
            elif op in ("get", "watch_key", "delete_key"):
                k, i = string(i)
                out.append((op, [k]))
            elif op == "add":
                k, i = string(i)
                i += 8
                out.append((op, [k]))
            elif op in ("check", "wait"):
                n = struct.unpack_from("<Q", data, i)[0]
                i += 8
                ks = []
                for _ in range(n):
                    k, i = string(i)
                    ks.append(k)
                out.append((op, ks))
            elif op == "num_keys":
                out.append((op, []))
            else:
                break
            if i > len(data):
                out.pop()
                break
            done = i
    except struct.error:
        pass
    return out, done


# ---- rdzv-agent jobs of examples/torch_ddp_repair.py (issue 12) ----
# test_repair_agent_torch{1,2}.py: two real rdzv-agents of two workers each
# under a real rdzvd, the workers the example under the python running the
# test (each file picks its torch first and puts tests/integ, where
# agent_lib is, on sys.path).

REPAIR_DATA = "/usr/share/datasets/fashion-mnist"
_REPORT_RE = re.compile(r"REPORT (\{.*\})$", re.M)
_STEP_RE = re.compile(r"STEP (\d+) (\d+) (\d+) ", re.M)
_STEP3_RE = re.compile(r"STEP \d+ \d+ 3 ", re.M)	# in a world of 3


def repair_agents(scope, d, job, prog_args, env_b=None, steps=8,
    agent_args=(), env=None):
    """Starts the two agents (scope: agent_lib.Scope) of job on rdzvd d
    (agent_args added to their options), each running
    examples/torch_ddp_repair.py prog_args --log-steps --report; env is
    added to both agents' environment, env_b then to the second one's.
    Returns (a, b) once 4 workers run and the job printed `steps` step
    lines.  No Fashion-MNIST skips the file."""
    from agent_lib import conf
    if not os.path.exists(os.path.join(REPAIR_DATA,
        "train-images-idx3-ubyte.gz")):
        rdzvtest.skip_all("no Fashion-MNIST at %s (Debian's "
            "dataset-fashion-mnist)" % REPAIR_DATA)
    argv = ["--nnodes", "2", "--nproc_per_node", "2",
        "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
        "--max_restarts", "2", "--grace", "2",
        "--rdzv_conf", conf(0.2, 5.0)] + list(agent_args)
    prog = [os.path.join(rdzvtest.top_srcdir(), "examples",
        "torch_ddp_repair.py")] + list(prog_args) + ["--log-steps",
        "--report"]
    env = dict({"PYTHON": sys.executable, "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1"}, **(env or {}))
    a = scope.agent(argv, env=env, program=prog)
    b = scope.agent(argv, env=dict(env, **(env_b or {})), program=prog)
    rdzvtest.wait_until(lambda: len(a.children()) == 2 and
        len(b.children()) == 2 and
        len(_STEP_RE.findall(a.output() + b.output())) >= steps,
        timeout=120, what="4 torch workers stepping")
    return a, b


def script_agents(scope, d, job, program, restarts, nodes=2, extra=(),
                  env=None):
    """Starts `nodes` agents (scope: agent_lib.Scope) of two workers each
    in job on rdzvd d, every worker running program (a script's text,
    written to scope.tmp/train.py) with scope.tmp as its argument, under
    TORCH2_PYTHON with the source tree's rdzv package; extra is added to
    the agents' options, env to their environment.  Returns the agents,
    a list, at once."""
    from agent_lib import conf
    prog = os.path.join(scope.tmp, "train.py")
    with open(prog, "w") as f:
        f.write(program)
    argv = ["--nnodes", str(nodes), "--nproc-per-node", "2",
            "--rdzv-endpoint", "127.0.0.1:%d" % d.port, "--rdzv-id", job,
            "--max-restarts", str(restarts), "--grace", "1",
            "--rdzv-conf", conf(0.2, 5.0)] + list(extra)
    env = dict({"PYTHON": TORCH2_PY, "GLOO_SOCKET_IFNAME": "lo",
                "PYTHONPATH": os.path.join(rdzvtest.top_srcdir(), "python")},
               **(env or {}))
    return [scope.agent(argv, env=env, program=[prog, scope.tmp])
            for _ in range(nodes)]


def script_finish(scope, agents, timeout):
    """Tells script_agents' scripts to end (scope.tmp/finish) and checks
    that each of agents then exits 0 within timeout seconds."""
    with open(os.path.join(scope.tmp, "finish"), "w"):
        pass
    for x in agents:
        rc = x.wait(timeout)
        check(rc == 0, (rc, x.output()[-3000:]))


def _ctl(d, *args):
    p = os.path.join(rdzvtest.top_builddir(), "client", "rdzvctl")
    import subprocess
    r = subprocess.run([p, "-e", "127.0.0.1:%d" % d.port] + list(args),
        capture_output=True, timeout=30, text=True)
    check(r.returncode == 0, (args, r))
    return r.stdout


def torch_surfaces(d, job, world=4):
    """A torch job's steps reach every operator surface as a C job's
    do: `rdzvctl --json members` shows every member's progress (all
    its ranks reporting, the step rising), `rdzvctl top` a step, the
    status page's history every rank, /metrics the job's last report."""
    def progress():
        doc = json.loads(_ctl(d, "--json", "members", job))
        ps = [m.get("progress") for m in doc["members"]]
        if any(p is None for p in ps):
            return None
        return (sum(p["ranks_reporting"] for p in ps),
            min(p["min_step"] for p in ps))
    rdzvtest.wait_until(lambda: (progress() or (0, 0))[0] == world,
        timeout=30, what="every rank's progress in rdzvctl members")
    first = progress()[1]
    rdzvtest.wait_until(lambda: (progress() or (0, -1))[1] > first,
        timeout=30, what="the members' min_step rising past %d" % first)
    top = _ctl(d, "top", job, "--count", "1")
    check(re.search(r"step \d+", top), top)
    def ranks():
        st, body, _ = d.http_get("/api/jobs/%s/history" % job)
        return len(json.loads(body).get("ranks", [])) if st == 200 else -1
    rdzvtest.wait_until(lambda: ranks() == world, timeout=30,
        what="every rank in the status page's history")
    def age():	# the job's series appear with its first sample
        return rdzvtest.metric_value(d.metrics(),
            "rdzvd_job_last_progress_age_seconds", None, job=job)
    rdzvtest.wait_until(lambda: (age() if age() is not None else -1) >= 0,
        timeout=30, what="the job's last progress age in /metrics")
    log("torch job %s on every surface: step %d -> %d" % (job, first,
        progress()[1]))


# "COMMIT epoch step world rank time ids" (examples' --log-ids): a rank's
# committed step, its world and rank in the group that stepped, its samples.
COMMIT_RE = re.compile(r"COMMIT (\d+) (\d+) (\d+) (\d+) ([0-9.]+) ([0-9,]+)")


def commits(out):
    """{(epoch, step): [(world, rank, ids)] of its latest group}: a step
    logged by a rank that died and done again after the shrink counts
    once, as the group that committed it last did it."""
    recs = {}
    for e, s, w, r, t, ids in COMMIT_RE.findall(out):
        recs.setdefault((int(e), int(s)), []).append(
            (float(t), int(w), int(r), [int(i) for i in ids.split(",")]))
    got = {}
    for k, rs in recs.items():
        rs.sort(reverse=True)
        w = rs[0][1]
        last, seen = [], set()
        for t, ww, r, ids in rs:
            if ww == w and r not in seen and len(last) < w:
                seen.add(r)
                last.append((ww, r, ids))
        got[k] = last
    return got


def check_samples(out, n, batch, epochs, full_world=4, seed=0,
    policy="rank"):
    """From the COMMIT lines in out (a job of n samples, batch per rank,
    the epoch's order torch.randperm seeded by seed + epoch): each
    committed step trained exactly the global batch at the job's
    position for its world (policy "global": for the full world), no
    sample twice in an epoch, and an epoch ended less than a full
    global batch from its end."""
    import torch
    got = commits(out)
    for e in range(epochs):
        g = torch.Generator()
        g.manual_seed(seed + e)
        perm = torch.randperm(n, generator=g).tolist()
        ids, pos, partial = [], 0, 0
        steps = sorted(s for (ee, s) in got if ee == e)
        for s in steps:
            rs = got[(e, s)]
            w = rs[0][0]
            g = (full_world if policy == "global" else w) * batch
            step_ids = sorted(i for _, _, x in rs for i in x)
            want = sorted(perm[pos:pos + g])
            if len(rs) < w:
                # A step some survivors finished and the others got
                # from the donor: only the finishers logged it.
                partial += 1
                check(set(step_ids) <= set(want), (e, s, rs))
            else:
                check(step_ids == want, "epoch %d step %d: trained %s, "
                    "the position says %s" % (e, s, step_ids[:8],
                    want[:8]))
            ids += step_ids
            pos += g
        check(len(ids) == len(set(ids)), "epoch %d: %d samples trained "
            "twice" % (e, len(ids) - len(set(ids))))
        check(n - pos < full_world * batch, "epoch %d ended at %d of %d"
            % (e, pos, n))
        log("epoch %d: %d steps, %d samples, each once (%d steps logged "
            "in part)" % (e, len(steps), pos, partial))


def checkpoints_complete(root):
    """rdzv.checkpoint's root: its step-N directories each have DCP's
    .metadata, and latest names one; returns latest's name."""
    names = sorted(os.listdir(root))
    for n in names:
        if n.startswith("step-") and not n.endswith(".partial"):
            check(os.path.exists(os.path.join(root, n, ".metadata")),
                "%s looks complete but has no .metadata" % n)
    with open(os.path.join(root, "latest")) as f:
        name = f.read().strip()
    check(name in names and not name.endswith(".partial"), (name, names))
    return name


def repair_reports(out):
    """The REPORT documents (dicts) in the workers' output."""
    return [json.loads(m) for m in _REPORT_RE.findall(out)]


def repair_done(d, job, a, b, survivors):
    """The end of a repaired repair_agents job: both agents exit 0, the
    four ranks report one digest, one of them is the replacement and
    the others are among survivors (pids), rdzvd's events show a shrink
    to 3, a grow to 4 and no restart.  Returns (reports, the agents'
    output, the events)."""
    from agent_lib import job_events
    for x in (a, b):
        rc = x.wait(180)
        check(rc == 0, (rc, x.output()[-4000:]))
    out = a.output() + b.output()
    reports = repair_reports(out)
    check(sorted(r["rank"] for r in reports) == [0, 1, 2, 3], "\n".join(
        ln[:300] for ln in out.splitlines() if "STEP" not in ln)[-12000:] +
        "\nevents: %s" % job_events(d, job))
    check(len({r["digest"] for r in reports}) == 1, reports)
    check({r["pid"] for r in reports if not r["replacement"]} <= survivors,
        (reports, survivors))
    check(sum(1 for r in reports if r["replacement"]) == 1, reports)
    ev = job_events(d, job)
    check(any(t.startswith("repair: shrink to 3") for t in ev), ev)
    check(any(t.startswith("repair: grow to 4") for t in ev), ev)
    check(not any(t.startswith("restart ") or "escalated" in t
        for t in ev), ev)
    return reports, out, ev


def repair_kill_in_place(d, scope, job, kill9=False, stop=False):
    """A SIGKILLed worker of a repair_agents job is repaired in place:
    a shrink round then a grow round, the survivors' PIDs unchanged, no
    restart, every rank (the replacement too) with the same model and
    optimizer digest, the job succeeds.  kill9: rdzvd (on a fixed port,
    durability strict) is killed -9 and restarted once the survivors
    step in the shrink round, while the replacement starts; the grow
    comes all the same.  stop: the worker is SIGSTOPped instead, and the
    agents' --progress_timeout 10 kills it alone (its peers, blocked on
    it inside torch, say "wait")."""
    from agent_lib import job_events, job_status
    # Long enough (>= 470 steps of >= 50 ms) that the survivors are still
    # training when the replacement, importing torch, is ready to join.
    # (stop: 3 epochs more for the watchdog's 10 s before the death.)
    a, b = repair_agents(scope, d, job, ["--limit", "12000", "--epochs",
        "8" if stop else "5", "--batch", "32", "--hidden", "32",
        "--step-delay", "0.05"],
        agent_args=["--progress_timeout", "10"] if stop else [])
    if not stop and not kill9:
        torch_surfaces(d, job)
    survivors = set(a.children())
    victim, other = sorted(b.children())
    survivors.add(other)
    t0 = time.monotonic()
    if stop:
        os.kill(victim, signal.SIGSTOP)
        try:
            rdzvtest.wait_until(lambda: any(t.startswith(
                "repair: shrink") for t in job_events(d, job)),
                timeout=60, what="the watchdog's kill and the shrink")
        finally:	# never leave a stopped process behind
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
    else:
        os.kill(victim, signal.SIGKILL)
    if kill9:
        rdzvtest.wait_until(lambda: len(_STEP3_RE.findall(a.output() +
            b.output())) >= 3, timeout=60,
            what="the survivors stepping in the shrink round")
        d.kill9()
        d.start()
        rdzvtest.wait_until(lambda: job_status(d, job).count(
            " connected") == 2, timeout=30, what="both agents back")
        log("rdzvd restarted %.1f s after the SIGKILL" %
            (time.monotonic() - t0))
    rdzvtest.wait_until(lambda: any(t.startswith("repair: grow")
        for t in job_events(d, job)), timeout=120, what="the grow round")
    log("%s -> grow round: %.1f s" % ("SIGSTOP" if stop else "SIGKILL",
        time.monotonic() - t0))
    now = set(a.children()) | set(b.children())
    check(survivors <= now, (survivors, now))
    check(victim not in now, (victim, now))
    if not stop and not kill9:
        torch_surfaces(d, job)		# the grow round's steps too
    reports, out, ev = repair_done(d, job, a, b, survivors)
    # The survivors agreed on the step after which they switch (else
    # the grow is repaired from the committed steps: correct, slower;
    # on torch 1.13, whose stores have no check(), it always was).
    check("no agreement on round" not in out, out[-4000:])
    if stop:
        # Only the stopped rank was called hung.
        check(out.count("reported no progress") == 1, out[-4000:])
        check(any("died (signal 6)" in t for t in ev), ev)
    if kill9:
        check(any(t.startswith("rdzvd restarted: round ") for t in ev),
            ev)
        return
    check(d.metric("rdzvd_repairs_total") == 2, ("repairs_total",
        d.metric("rdzvd_repairs_total"), ev))
    check(d.metric("rdzvd_restarts_total") == 0, ("restarts_total", ev))
