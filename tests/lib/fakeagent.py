"""fakeagent: rdzv-agent's side of in-place repair, in Python, for tests
and benchmarks until the real agent does it (common/PROTOCOL.md "Worker
<-> agent channel").

It starts N workers of one host the way rdzv-agent does (each with its
own SOCK_SEQPACKET channel as RDZV_PROGRESS_FD, RANK/WORLD_SIZE/LOCAL_*,
the store of a real rdzvd through RDZV_ENDPOINT and a namespace per round
"job/<job>/round/<n>"), hears what they say (progress steps, "hello
repair=1", "ready"), and drives repairs by hand:

    import fakeagent
    a = fakeagent.FakeAgent(argv, 4, endpoint="127.0.0.1:%d" % d.port)
    a.start()
    a.wait_steps(20)                  # every worker reported step >= 20
    a.all_said_hello()                # True: the job may repair
    a.kill(2)                         # SIGKILL local rank 2
    a.shrink()                        # "round kind=shrink" to the survivors
    w = a.spawn_replacement(2)        # RDZV_REPLACEMENT=1, a new channel
    a.wait_ready(w)                   # it said "ready"
    a.grow()                          # "round kind=grow" to everyone
    res = a.wait(120)                 # {local_rank: (rc, stdout, stderr)}
    a.restart()                       # or: the old way, all stopped, n new
    a.close()

Workers are tracked by rdzvtest, so a failing test leaves none behind.
Times are time.monotonic().  Public: FakeAgent, Worker, ROUND_FMT.
"""

import os
import selectors
import signal
import socket
import subprocess
import threading
import time

import rdzvtest as rt

# The agent -> worker round message; every field is required but
# master_addr/master_port (the torch helper's store) and the local ones.
ROUND_FMT = ("round round={round} kind={kind} ns={ns} rank={rank} "
             "world={world} donor={donor} master_addr={master_addr} "
             "master_port={master_port} local_rank={local_rank} "
             "local_world={local_world}")

# Launcher variables a test's own environment must not leak into workers.
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                "MASTER_ADDR", "MASTER_PORT", "RDZV_ENDPOINT",
                "RDZV_NAMESPACE", "RDZV_JOB", "RDZV_ROUND",
                "RDZV_PROGRESS_FD", "RDZV_REPLACEMENT")


class Worker:
    """One worker process and what it said on its channel."""

    def __init__(self, local_rank, rank, proc, sock, replacement):
        self.local_rank = local_rank
        self.rank = rank                # global rank in the current round
        self.proc = proc
        self.pid = proc.pid
        self.sock = sock                # the agent's end of the channel
        self.replacement = replacement
        self.hello = None               # {"repair": "1"} once it said hello
        self.ready = None               # time it said "ready"
        self.steps = []                 # [(time, step)] as reported
        self.other = []                 # [(time, text)] anything else
        self.closed = None              # time its end of the channel closed

    def last_step(self):
        return self.steps[-1][1] if self.steps else None

    def alive(self):
        return self.proc.poll() is None


class FakeAgent:
    """N workers of argv on this host, under a hand-driven agent."""

    def __init__(self, argv, n, endpoint, job=None, env=None, master=None):
        """endpoint: rdzvd's "host:port" (the native store); job: the job
        id in the namespaces (default "fake-<pid>-<k>"); env: extra
        variables for every worker; master: optional (addr, port) put in
        round messages as master_addr/master_port (the torch helper's
        round store), else 127.0.0.1 and rdzvd's port."""
        FakeAgent._count += 1
        self.argv = list(argv)
        self.n = n
        self.endpoint = endpoint
        self.job = job or "fake-%d-%d" % (os.getpid(), FakeAgent._count)
        self.env = dict(env or {})
        host, port = endpoint.rsplit(":", 1)
        self.master = master or (host, int(port))
        self.round = 0
        self.workers = {}               # local_rank -> current Worker
        self.gone = []                  # workers killed or replaced
        self.sent = []                  # [(time, worker, text)]
        self._cv = threading.Condition()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._stop = False
        self._thread = threading.Thread(target=self._read_loop, daemon=True)
        self._thread.start()

    _count = 0

    # ---- starting workers ----

    def ns(self, rnd=None):
        """The store namespace of round rnd (default: the current one)."""
        return "job/%s/round/%d" % (self.job, self.round if rnd is None
                                    else rnd)

    def _spawn(self, local_rank, rank, world, replacement=False):
        mine, theirs = socket.socketpair(socket.AF_UNIX,
                                         socket.SOCK_SEQPACKET)
        e = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
        e.setdefault("RDZV_BACKEND", "cpu")
        e.update(self.env)
        e.update({"RANK": str(rank), "WORLD_SIZE": str(world),
                  "LOCAL_RANK": str(local_rank),
                  "LOCAL_WORLD_SIZE": str(world),
                  "RDZV_ENDPOINT": self.endpoint,
                  "RDZV_NAMESPACE": self.ns(), "RDZV_JOB": self.job,
                  "RDZV_ROUND": str(self.round),
                  "RDZV_PROGRESS_FD": str(theirs.fileno())})
        if replacement:
            e["RDZV_REPLACEMENT"] = "1"
        p = subprocess.Popen(self.argv, env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             pass_fds=(theirs.fileno(),))
        rt._track(p)
        theirs.close()
        w = Worker(local_rank, rank, p, mine, replacement)
        # The pipes are drained in the background so no worker blocks.
        w.out, w.err = [], []
        for f, acc in ((p.stdout, w.out), (p.stderr, w.err)):
            threading.Thread(target=lambda f=f, acc=acc: acc.append(
                f.read()), daemon=True).start()
        with self._cv:
            self._sel.register(mine, selectors.EVENT_READ, w)
        os.write(self._wake_w, b"x")
        return w

    def start(self):
        """Starts the n workers in round 0."""
        for r in range(self.n):
            self.workers[r] = self._spawn(r, r, self.n)

    # ---- hearing them ----

    def _read_loop(self):
        while not self._stop:
            for key, _ in self._sel.select(timeout=0.5):
                if key.data is None:
                    os.read(self._wake_r, 64)
                    continue
                w = key.data
                try:
                    msg = w.sock.recv(1024)
                except OSError:
                    msg = b""
                now = time.monotonic()
                with self._cv:
                    if not msg:
                        w.closed = now
                        self._sel.unregister(w.sock)
                    else:
                        self._heard(w, now, msg.decode("ascii", "replace"))
                    self._cv.notify_all()

    @staticmethod
    def _heard(w, now, text):
        if text.isdigit():
            w.steps.append((now, int(text)))
            return
        words = text.split(" ")
        if words[0] == "hello":
            w.hello = dict(x.split("=", 1) for x in words[1:] if "=" in x)
        elif words[0] == "ready":
            w.ready = now
        else:
            w.other.append((now, text))

    def wait_for(self, pred, timeout=60.0, what="condition"):
        """Waits until pred() (called under the agent's lock) is true."""
        end = time.monotonic() + timeout
        with self._cv:
            while not pred():
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("fakeagent: timed out waiting for "
                                         "%s; %s" % (what, self.describe()))
                self._cv.wait(min(left, 0.5))

    def wait_steps(self, step, workers=None, after=None, timeout=60.0):
        """Waits until every worker of workers (default: the current ones)
        reported a step >= step, at or after time after (any time when
        None); returns the time the last of them did."""
        ws = list(workers or self.workers.values())

        def first(w):
            for t, s in w.steps:
                if s >= step and (after is None or t >= after):
                    return t
            return None
        self.wait_for(lambda: all(first(w) is not None for w in ws),
                      timeout, "step %d from %s" % (step, [
                          w.local_rank for w in ws]))
        with self._cv:
            return max(first(w) for w in ws)

    def stepped_after(self, w, t):
        """The first (time, step) w reported after time t, or None."""
        with self._cv:
            for ts, s in w.steps:
                if ts > t:
                    return ts, s
        return None

    def all_said_hello(self):
        """What the agent decides a repair on: every current worker said
        "hello repair=1"."""
        with self._cv:
            return all(w.hello is not None and w.hello.get("repair") == "1"
                       for w in self.workers.values())

    def wait_ready(self, w, timeout=60.0):
        self.wait_for(lambda: w.ready is not None, timeout,
                      "ready from local rank %d" % w.local_rank)
        return w.ready

    # ---- failures and repairs ----

    def kill(self, local_rank, sig=signal.SIGKILL):
        """Sends sig to a worker and waits for it to die; returns the
        time the signal was sent."""
        w = self.workers[local_rank]
        t = time.monotonic()
        os.kill(w.pid, sig)
        w.proc.wait(30)
        rt._untrack(w.proc)
        del self.workers[local_rank]
        self.gone.append(w)
        return t

    def _send_round(self, kind, members, donor=0):
        self.round += 1
        world = len(members)
        now = None
        for rank, w in enumerate(members):
            w.rank = rank
            text = ROUND_FMT.format(
                round=self.round, kind=kind, ns=self.ns(), rank=rank,
                world=world, donor=donor, master_addr=self.master[0],
                master_port=self.master[1], local_rank=rank,
                local_world=world)
            w.sock.send(text.encode())
            now = time.monotonic()
            with self._cv:
                self.sent.append((now, w, text))
        return now

    def shrink(self, donor=0):
        """Round kind=shrink to the survivors, renumbered in their old
        rank order; returns the time the last message went."""
        members = sorted(self.workers.values(), key=lambda w: w.rank)
        return self._send_round("shrink", members, donor)

    def spawn_replacement(self, local_rank):
        """Starts a replacement for a dead local rank, with the stale
        environment of the worker it replaces plus RDZV_REPLACEMENT=1."""
        old = [w for w in self.gone if w.local_rank == local_rank][-1]
        w = self._spawn(local_rank, old.rank, self.n, replacement=True)
        self.workers[local_rank] = w
        return w

    def grow(self, donor=0):
        """Round kind=grow to every current worker: the survivors keep
        their order, the replacements come after them; returns the time
        the last message went."""
        old = sorted((w for w in self.workers.values()
                      if not w.replacement or w.steps),
                     key=lambda w: w.rank)
        new = sorted((w for w in self.workers.values() if w not in old),
                     key=lambda w: w.local_rank)
        return self._send_round("grow", old + new, donor)

    def restart(self, sig=signal.SIGKILL):
        """What the agent does without repair: stops every worker (sig)
        and starts n fresh ones in a new round (no RDZV_REPLACEMENT);
        returns the time the first signal went."""
        t = time.monotonic()
        for lr in sorted(self.workers):
            self.kill(lr, sig)
        self.round += 1
        self.start()
        return t

    def stop(self):
        """Tells every current worker the repair failed ("stop")."""
        for w in self.workers.values():
            w.sock.send(b"stop")

    # ---- the end ----

    def wait(self, timeout=120.0):
        """Waits for every current worker to exit; returns {local_rank:
        (rc, stdout, stderr)} (rc None if it had to be killed)."""
        end = time.monotonic() + timeout
        res = {}
        for lr, w in sorted(self.workers.items()):
            try:
                w.proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            rt._untrack(w.proc)
            self.wait_for(lambda: len(w.out) == 1 and len(w.err) == 1, 30,
                          "output of local rank %d" % lr)
            res[lr] = (w.proc.returncode, w.out[0], w.err[0])
        return res

    def describe(self):
        return "; ".join(
            "local %d pid %d rank %d hello %s ready %s last step %s%s" % (
                w.local_rank, w.pid, w.rank, w.hello, w.ready is not None,
                w.last_step(), "" if w.alive() else " (exited %s)" %
                w.proc.returncode) for w in self.workers.values())

    def close(self):
        """Kills what still runs and closes the channels."""
        for w in list(self.workers.values()) + self.gone:
            if w.alive():
                w.proc.kill()
                w.proc.wait()
            rt._untrack(w.proc)
        self._stop = True
        os.write(self._wake_w, b"x")
        self._thread.join(5)
        for w in list(self.workers.values()) + self.gone:
            w.sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
