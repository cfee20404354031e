# SPDX-License-Identifier: Apache-2.0
"""agent_lib: helpers for rdzv-agent's integration tests (agent_*.py).

    Agent(args, tmp, env=)   rdzv-agent in its own session, output to a file,
                             tracked by rdzvtest so it is killed at exit
    write_worker(tmp)        the worker program (python, no torch) below
    starts(tmp)              what every worker start recorded, oldest first
    wait_starts(tmp, pred)   polls starts() until pred(list) holds
    children(parents, name)  live pids whose parent is one of parents
    marked_pids(marker)      pids whose command line holds marker (/proc)
    assert_gone(marker, t)   no such process within t seconds
    job_status(d, job)       rdzvd's JOB_STATUS text
    until(prog, path)        ddp_mlp's argv, trained on until let_end(path)
    let_end(path)            lets such a job end; trained_epochs(out) after

Every test passes its own temporary directory as the worker's first
argument, so the directory's path marks every process the test started
(agents and workers): after the test none may be left.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import rdzvtest as rt

OP_ADMIN_EVENTS = 31
OP_JOB_STATUS = 27


def agent_path():
    return os.path.join(rt.top_builddir(), "agent", "rdzv-agent")


# Pieces of the Python programs the tests run as workers, joined into one
# program's source.  RECORD: record(name, obj) writes obj as JSON to
# DIR/name at once (a temporary file of this process's renamed: ranks
# that write one name at the same time each rename a whole file; the
# last one stays), d being DIR.  DDP_LINEAR:
# a DDP linear model for rank (torch, gloo initialised) with
# train_step(), one step whose loss it appends to losses.  DDP_SAME: same,
# whether every rank ends with the same parameters (an all_gather).
# PL_LINEAR: Net, a LightningModule of one linear layer (torch and
# lightning.pytorch as pl imported), for Lightning's own DDP.
RECORD = r'''
def record(name, obj):
    tmp = os.path.join(d, ".%s.%d.tmp" % (name, os.getpid()))
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, os.path.join(d, name))
'''
DDP_LINEAR = r'''
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.02)
x = torch.randn(32, 4) + rank
y = x.sum(1, keepdim=True)
losses = []


def train_step():
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()                    # gradients all-reduced by DDP
    opt.step()
    losses.append(loss.item())
'''
DDP_SAME = r'''
p = torch.cat([q.detach().flatten() for q in model.parameters()])
ps = [torch.zeros_like(p) for _ in range(dist.get_world_size())]
dist.all_gather(ps, p)
same = all(bool(torch.equal(ps[0], q)) for q in ps)
'''
PL_LINEAR = r'''
class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        x, y = batch
        return ((self.lin(x) - y) ** 2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.02)
'''

# The worker: records its start (env, pid) in DIR/start.<round>.<rank>.<pid>,
# then behaves as W_* variables say:
#   W_EXIT="restart:rank:code,..."  exit with code in that restart and rank
#   W_ERRFILE=1     write torch's error file before failing
#   W_RUN=S         exit 0 after S seconds (default: run until killed)
#   W_TRAPTERM=1    on SIGTERM record DIR/term.<rank>.<pid> and exit 0
#   W_IGNTERM=1     ignore SIGTERM (the grace period must end in SIGKILL)
#   W_STORE=1       use the round's TCPStore (MASTER_ADDR:MASTER_PORT):
#                   ADD "count", SET "job", wait for all, record both
#   W_DELAY=S       before failing (default 0.05)
WORKER = r'''
import json, os, signal, sys, time
d = sys.argv[1]
env = os.environ
rank = int(env["RANK"])
restart = int(env["TORCHELASTIC_RESTART_COUNT"])
rnd = env["RDZV_ROUND"]
pid = os.getpid()
''' + RECORD + r'''
if env.get("W_TRAPTERM") == "1":
    def onterm(s, f):
        record("term.%d.%d" % (rank, pid), {"rank": rank})
        os._exit(0)
    signal.signal(signal.SIGTERM, onterm)
if env.get("W_IGNTERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

keys = [k for k in env if k in ("LOCAL_RANK", "RANK", "GROUP_RANK",
        "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
        "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING")
        or k.startswith("TORCHELASTIC_") or k.startswith("RDZV_")]
info = {k: env[k] for k in keys}
info["pid"] = pid
info["t"] = time.time()
record("start.%s.%d.%d" % (rnd, rank, pid), info)
print("worker rank %d restart %d up" % (rank, restart), flush=True)
print("rank %d err" % rank, file=sys.stderr, flush=True)

if env.get("W_STORE") == "1":
    import rdzvtest as rt
    s = rt.TCPStore113(rt.connect(env["MASTER_ADDR"], int(env["MASTER_PORT"])))
    n = s.add("count", 1)
    if n == 1:
        s.set("job", env["RDZV_JOB"])
    s.wait(["job"])
    world = int(env["WORLD_SIZE"])
    deadline = time.time() + 10
    while s.add("count", 0) < world and time.time() < deadline:
        time.sleep(0.01)
    record("store.%s.%d" % (env["RDZV_JOB"], rank),
           {"job": s.get("job").decode(), "count": s.add("count", 0)})

for item in env.get("W_EXIT", "").split(","):
    if not item:
        continue
    r, k, code = (int(x) for x in item.split(":"))
    if r == restart and k == rank:
        time.sleep(float(env.get("W_DELAY", "0.05")))
        if env.get("W_ERRFILE") == "1":
            with open(env["TORCHELASTIC_ERROR_FILE"], "w") as f:
                json.dump({"message": {"message": "ValueError: rank %d "
                    "broke \"\u00e9\U0001F600\"" % rank, "extraInfo": {"py_callstack":
                    "Traceback: line 1", "timestamp": str(int(time.time()))}}}, f)
        print("rank %d failing with %d" % (rank, code), file=sys.stderr,
              flush=True)
        sys.exit(code)

if "W_RUN" in env:
    time.sleep(float(env["W_RUN"]))
    sys.exit(0)
while True:
    time.sleep(3600)
'''


def write_worker(tmp):
    p = os.path.join(tmp, "worker.py")
    with open(p, "w") as f:
        f.write(WORKER)
    return p


def conf(last_call=0.2, lease=1.0, extra=""):
    """A --rdzv_conf value with the short timeouts the tests use."""
    s = "last_call_timeout=%g,lease=%g" % (last_call, lease)
    return s + ("," + extra if extra else "")


class Agent:
    """One rdzv-agent.  args are its arguments (program included)."""

    n = 0

    def __init__(self, args, tmp, env=None, binary=None):
        Agent.n += 1
        self.name = "agent%d" % Agent.n
        self.out_path = os.path.join(tmp, self.name + ".out")
        e = dict(os.environ)
        e.setdefault("PYTHONPATH", "")
        e["PYTHONPATH"] = os.path.join(rt.top_srcdir(), "tests", "lib") + \
            (":" + e["PYTHONPATH"] if e["PYTHONPATH"] else "")
        e["PYTHON"] = sys.executable
        e["TMPDIR"] = tmp
        if env:
            e.update(env)
        self.argv = [binary or agent_path()] + list(args)
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, env=e,
                                         cwd=tmp)
        rt._track(self.proc)
        self.pid = self.proc.pid

    def output(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait(self, timeout=20.0):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Where it, its workers and theirs (a DataLoader's) are: a
            # hang's cause.
            where = "\n".join(rt.stacks(rt.tree([self.pid])))
            raise AssertionError(
                "%s still running after %.1fs; output:\n%s\nit and its "
                "workers:\n%s" % (self.name, timeout,
                                   self.output()[-4000:], where))
        rt._untrack(self.proc)
        return rc

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.proc.poll() is None:
            os.kill(self.pid, sig)

    def term(self, timeout):
        """SIGTERM, then wait(timeout); returns (exit status, seconds from
        the signal to the exit)."""
        t0 = time.monotonic()
        self.signal(signal.SIGTERM)
        rc = self.wait(timeout)
        return rc, time.monotonic() - t0

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        rt._untrack(self.proc)

    def children(self):
        """Pids whose parent is this agent (its workers)."""
        return children([self.pid])


def is_spare(pid):
    """Whether pid is an agent's warm spare that no rank took yet: its
    command line runs rdzv.spare and its stdout is still /dev/null (a
    spare that became a worker has the rank's)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read()
        out = os.readlink("/proc/%d/fd/1" % pid)
    except OSError:
        return False
    return b"\0-m\0rdzv.spare\0" in cmd and out == "/dev/null"


def spares(parents):
    """Live warm spares (is_spare) whose parent is one of parents."""
    return [p for p in children(parents, spares=True) if is_spare(p)]


def children(parents, name=None, spares=False):
    """Live pids whose parent is one of parents (and whose command name,
    /proc/PID/stat's, is name when given), sorted; a warm spare that no
    rank took yet (is_spare) is no worker: left out unless spares; nor
    is an agent's child that has not run its program yet (its command
    name still the agent's: a spare on a loaded machine, seen there
    for seconds)."""
    parents = set(parents)
    out = [pid for pid, comm, state, ppid in rt.procs()
           if state not in ("Z", "X") and ppid in parents and
           (name is None or comm == name) and
           (spares or comm != "rdzv-agent" and not is_spare(pid))]
    return sorted(out)


def starts(tmp):
    """Every worker start recorded in tmp, in start-time order."""
    out = []
    for name in os.listdir(tmp):
        if not name.startswith("start."):
            continue
        try:
            with open(os.path.join(tmp, name)) as f:
                info = json.load(f)
        except (OSError, ValueError):
            continue
        out.append(info)
    out.sort(key=lambda i: i["t"])
    return out


def by_round(tmp):
    """{round: {rank: info}} of the starts."""
    r = {}
    for i in starts(tmp):
        r.setdefault(int(i["RDZV_ROUND"]), {})[int(i["RANK"])] = i
    return r


def wait_starts(tmp, pred, timeout=10.0, what="worker starts"):
    """Polls starts(tmp) until pred(starts) is true; returns the starts."""
    def check():
        st = starts(tmp)
        return st if pred(st) else None
    return rt.wait_until(check, timeout=timeout, interval=0.02, what=what)


def marked_pids(marker):
    """Pids (not ours) whose command line contains marker."""
    me = os.getpid()
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read()
            with open("/proc/%s/stat" % pid) as f:
                st = f.read()
        except OSError:
            continue
        if st[st.rfind(")") + 2] == "Z":
            continue
        if marker.encode() in cmd:
            out.append(int(pid))
    return out


def assert_gone(marker, timeout=3.0):
    """No process of the test (marked by its directory) within timeout."""
    end = time.monotonic() + timeout
    while True:
        left = marked_pids(marker)
        if not left:
            return
        if time.monotonic() > end:
            info = []
            for p in left:
                try:
                    with open("/proc/%d/cmdline" % p, "rb") as f:
                        info.append("%d: %s" % (p, f.read().replace(
                            b"\0", b" ").decode(errors="replace")))
                except OSError:
                    pass
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            raise AssertionError("processes left behind:\n" +
                                 "\n".join(info))
        time.sleep(0.02)


def until(prog, path):
    """prog (ddp_mlp's argv) trained on past its --epochs until the test
    calls let_end(path) (ddp_mlp --until): a job that must outlive what a
    test waits for is told when it may end, whatever the machine's
    speed."""
    return list(prog) + ["--until", path]


def let_end(path):
    """Lets a job of until(prog, path) end, at its next epoch's end."""
    with open(path, "w"):
        pass


def trained_epochs(out):
    """How many epochs ddp_mlp said it trained in out (rank 0's lines)."""
    return max(int(e) for e in re.findall(r"epoch (\d+) loss ", out))


def job_status(d, job):
    c = d.native()
    try:
        return c.call(OP_JOB_STATUS, job)[0].decode()
    finally:
        c.close()


def ctl(d, *args):
    """rdzvctl against rdzvd d: the finished process (output as text)."""
    return subprocess.run([os.path.join(rt.top_builddir(), "client",
                                        "rdzvctl"),
                           "--endpoint", "127.0.0.1:%d" % d.port] +
                          list(args), capture_output=True, text=True,
                          timeout=30)


def job_events(d, job, full=False, soon=False):
    """The texts of job's events (ADMIN_EVENTS), oldest first; full: the
    events themselves ({"seq", "time_ms", "text"}); soon: none (not an
    error) while the job does not exist yet."""
    c = d.native()
    try:
        doc = c.call(OP_ADMIN_EVENTS, job, -1, 0)[0]
    except rt.RdzvError:
        if soon:
            return []
        raise
    finally:
        c.close()
    return json.loads(doc) if full else [e["text"] for e in json.loads(doc)]


def rank_of(pid):
    """The RANK a worker process was started with."""
    with open("/proc/%d/environ" % pid, "rb") as f:
        env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
    return int(env[b"RANK"])


class Throttle:
    """Runs pid about `duty` of the time: SIGCONT, run, SIGSTOP, pause,
    in 100 ms periods, until stop() or the process is gone; as a context
    manager, until the block ends."""

    def __init__(self, pid, duty=0.3, period=0.1):
        self.pid, self.duty, self.period = pid, duty, period
        self.done = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        try:
            while not self.done.is_set():
                os.kill(self.pid, signal.SIGCONT)
                time.sleep(self.period * self.duty)
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(self.period * (1 - self.duty))
        except ProcessLookupError:
            pass
        finally:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def stop(self):
        self.done.set()
        self.t.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def history(d, job):
    """The job's /api/jobs/JOB/history document."""
    status, body, _ = d.http_get("/api/jobs/%s/history" % job)
    assert status == 200, (status, body)
    return json.loads(body)


def steps_per_s(d, job, secs=3.0):
    """The job's steps/s over secs: the median over its ranks (those that
    reported at both ends, in the same round) of their step's change."""
    def read():
        return {r["rank"]: r["step"] for r in history(d, job)["ranks"]}
    r0, t0 = read(), time.monotonic()
    time.sleep(secs)
    r1 = read()
    dt = time.monotonic() - t0
    v = sorted((r1[k] - r0[k]) / dt for k in r0 if k in r1 and r1[k] >= r0[k])
    return v[len(v) // 2] if v else 0.0


def work_speeds(d, job):
    """{rank: steps per second of its own work} as rdzvd's detector sees
    them now (None: no speed yet), for a message when none was named."""
    return {r["rank"]: (None if r["work_steps_per_s"] is None else
                        round(r["work_steps_per_s"], 1))
            for r in history(d, job)["ranks"]}


def named(d, job):
    """The events naming a straggler."""
    return [t for t in job_events(d, job) if t.startswith("straggler: rank ")
            and "steps at" in t]


class Scope:
    """A test's directory, worker and agents; close() kills what is left
    and checks that nothing marked with the directory survives."""

    def __init__(self, prefix="agent-"):
        self.tmp = rt.mktemp(prefix)
        self.worker = write_worker(self.tmp)
        self.agents = []

    def agent(self, args, env=None, program=None):
        prog = program if program is not None else [self.worker, self.tmp]
        a = Agent(list(args) + ["--"] + prog, self.tmp, env=env)
        self.agents.append(a)
        return a

    def close(self):
        for a in self.agents:
            a.kill()
        assert_gone(self.tmp)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:
            # What each agent and its workers said, for the failure's
            # log (a flake in CI leaves nothing else behind).
            for i, a in enumerate(self.agents):
                lines = a.output().splitlines()[-80:]
                sys.stderr.write("---- agent %d of %s, its last %d lines\n%s\n"
                                 % (i, self.tmp, len(lines), "\n".join(lines)))
        try:
            self.close()
        except AssertionError:
            if exc[0] is None:
                raise
        return False
