# SPDX-License-Identifier: Apache-2.0
"""fakeagent: rdzv-agent's side of in-place repair, in Python, for tests
and benchmarks of C workers (librdzvworker) and torch workers
(python/rdzv/repair.py) until the real agent does it (common/PROTOCOL.md
"Worker <-> agent channel").

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

Torch workers get env=torch_env(port) (MASTER_ADDR/MASTER_PORT of rdzvd's
main port and torchrun's variables); a round's store is then that port
with the round's namespace as PrefixStore prefix (the helper builds
PrefixStore(ns + "/", TCPStore(master_addr, master_port)) for every
round, the first one from RDZV_NAMESPACE).  A replacement spawned before
its rank is killed is an early spare: it starts up while the others run,
kill() puts it in the rank's place, and it is a member only from the grow
round on (Worker.joined).

Workers' stdout and stderr go to files, readable while they run
(Worker.output()).  Workers are tracked by rdzvtest, so a failing test
leaves none behind.  Times are time.monotonic().  Public: FakeAgent,
Worker, round_message, torch_env.
"""

import os
import selectors
import signal
import socket
import subprocess
import threading
import time

import rdzvtest as rt

# Launcher variables a test's own environment must not leak into workers.
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                "MASTER_ADDR", "MASTER_PORT", "RDZV_ENDPOINT",
                "RDZV_NAMESPACE", "RDZV_JOB", "RDZV_ROUND",
                "RDZV_PROGRESS_FD", "RDZV_REPLACEMENT")


def round_message(round, kind, ns, rank, world, donor, master_addr,
                  master_port, local_rank, local_world):
    """The agent -> worker round message (every field; the workers of one
    host have local_rank < local_world)."""
    return ("round round=%d kind=%s ns=%s rank=%d world=%d donor=%d "
            "master_addr=%s master_port=%d local_rank=%d local_world=%d" % (
                round, kind, ns, rank, world, donor, master_addr,
                master_port, local_rank, local_world))


def torch_env(port):
    """What torchrun gives its workers beside RANK and the like, for
    torch workers whose store is rdzvd's main port."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RESTART_COUNT": "0", "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo"}


class Worker:
    """One worker process and what it said on its channel."""

    def __init__(self, local_rank, rank, proc, sock, replacement, logs):
        self.local_rank = local_rank
        self.rank = rank                # global rank in the current round
        self.proc = proc
        self.pid = proc.pid
        self.sock = sock                # the agent's end of the channel
        self.replacement = replacement
        self.joined = not replacement   # a member of the current round
        self.logs = logs                # (stdout path, stderr path)
        self.hello = None               # {"repair": "1"} once it said hello
        self.ready = None               # time it said "ready"
        self.steps = []                 # [(time, step)] as reported
        self.waits = []                 # times it said "wait"
        self.done = None                # time it said "done"
        self.other = []                 # [(time, text)] anything else
        self.closed = None              # time its end of the channel closed

    def last_step(self):
        return self.steps[-1][1] if self.steps else None

    def alive(self):
        return self.proc.poll() is None

    def output(self):
        """(stdout, stderr) so far."""
        out = []
        for p in self.logs:
            with open(p, errors="replace") as f:
                out.append(f.read())
        return tuple(out)


class FakeAgent:
    """N workers of argv on this host, under a hand-driven agent."""

    def __init__(self, argv, n, endpoint, job=None, env=None, master=None):
        """endpoint: rdzvd's "host:port" (the native store); job: the job
        id in the namespaces (default "fake-<pid>-<k>"); env: extra
        variables for every worker (torch_env() for torch workers);
        master: optional (addr, port) put in round messages as
        master_addr/master_port (the torch helper's round store), else
        rdzvd's host and port."""
        FakeAgent._count += 1
        self.argv = list(argv)
        self.n = n
        self.endpoint = endpoint
        self.job = job or "fake-%d-%d" % (os.getpid(), FakeAgent._count)
        self.env = dict(env or {})
        host, port = endpoint.rsplit(":", 1)
        self.master = master or (host, int(port))
        self.dir = rt.mktemp("rdzv-fakeagent-")
        self.round = 0
        self.workers = {}               # local_rank -> current Worker
        self.early = {}                 # local_rank -> early replacement
        self.gone = []                  # workers killed or replaced
        self.sent = []                  # [(time, worker, text)]
        self._spawned = 0
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
        # As rdzv-agent leaves it (agent/progress.c): the worker's end is
        # O_NONBLOCK, so a worker waits for messages with poll().
        theirs.setblocking(False)
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
        self._spawned += 1
        logs = tuple(os.path.join(self.dir, "w%d-l%d.%s" % (
            self._spawned, local_rank, x)) for x in ("out", "err"))
        with open(logs[0], "w") as o, open(logs[1], "w") as er:
            p = subprocess.Popen(self.argv, env=e, stdout=o, stderr=er,
                                 stdin=subprocess.DEVNULL,
                                 pass_fds=(theirs.fileno(),))
        rt._track(p)
        theirs.close()
        w = Worker(local_rank, rank, p, mine, replacement, logs)
        with self._cv:
            self._sel.register(mine, selectors.EVENT_READ, w)
        os.write(self._wake_w, b"x")
        return w

    def start(self):
        """Starts the n workers in the current round."""
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
        elif text == "wait":             # blocked on its peers
            w.waits.append(now)
        elif text == "done":             # its training ended
            w.done = now
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
                      timeout, "step %d from local ranks %s" % (step, [
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

    def wait_ready(self, w, timeout=90.0):
        """Waits for w's "ready"; returns the time it came."""
        self.wait_for(lambda: w.ready is not None, timeout,
                      "ready from local rank %d" % w.local_rank)
        return w.ready

    # ---- failures and repairs ----

    def _end(self, w, sig):
        os.kill(w.pid, sig)
        w.proc.wait(30)
        rt._untrack(w.proc)
        self.gone.append(w)

    def kill(self, local_rank, sig=signal.SIGKILL):
        """Sends sig to a worker and waits for it to die (as the agent
        learns of a death); its early replacement, if any, takes its
        place.  Returns the time the signal was sent."""
        w = self.workers.pop(local_rank)
        t = time.monotonic()
        self._end(w, sig)
        if local_rank in self.early:
            self.workers[local_rank] = self.early.pop(local_rank)
        return t

    def _send_round(self, kind, members, donor):
        self.round += 1
        world = len(members)
        now = None
        for rank, w in enumerate(members):
            w.rank = rank
            text = round_message(self.round, kind, self.ns(), rank, world,
                                 donor, self.master[0], self.master[1],
                                 rank, world)
            w.sock.send(text.encode())
            now = time.monotonic()
            with self._cv:
                self.sent.append((now, w, text))
        return now

    def shrink(self, donor=0):
        """Round kind=shrink to the members that are left (not a
        replacement that has not joined), renumbered in their old rank
        order; returns the time the last message went."""
        members = sorted((w for w in self.workers.values() if w.joined),
                         key=lambda w: w.rank)
        return self._send_round("shrink", members, donor)

    def spawn_replacement(self, local_rank):
        """Starts a replacement for local_rank, with the stale environment
        of the worker it replaces plus RDZV_REPLACEMENT=1.  Called before
        that rank is killed it starts as an early spare (see kill())."""
        old = self.workers.get(local_rank) or [
            w for w in self.gone if w.local_rank == local_rank][-1]
        w = self._spawn(local_rank, old.rank, self.n, replacement=True)
        if local_rank in self.workers:
            self.early[local_rank] = w
        else:
            self.workers[local_rank] = w
        return w

    def grow(self, donor=0):
        """Round kind=grow to every current worker: the members keep their
        order, the replacements come after them (by local rank) and are
        members from now on; returns the time the last message went."""
        old = sorted((w for w in self.workers.values() if w.joined),
                     key=lambda w: w.rank)
        new = sorted((w for w in self.workers.values() if not w.joined),
                     key=lambda w: w.local_rank)
        for w in new:
            w.joined = True
        return self._send_round("grow", old + new, donor)

    def restart(self, sig=signal.SIGKILL):
        """What the agent does without repair: stops every worker (sig),
        spares included, and starts n fresh ones in a new round (no
        RDZV_REPLACEMENT); returns the time the first signal went."""
        t = time.monotonic()
        for w in list(self.workers.values()) + list(self.early.values()):
            self._end(w, sig)
        self.workers.clear()
        self.early.clear()
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
        (rc, stdout, stderr)}, rc None if it had to be killed."""
        end = time.monotonic() + timeout
        res = {}
        for lr, w in sorted(self.workers.items()):
            rc = None
            try:
                rc = w.proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            rt._untrack(w.proc)
            res[lr] = (rc,) + w.output()
        return res

    def describe(self):
        return "; ".join(
            "local %d pid %d rank %d hello %s ready %s last step %s%s" % (
                w.local_rank, w.pid, w.rank, w.hello, w.ready is not None,
                w.last_step(), "" if w.alive() else " (exited %s)" %
                w.proc.returncode) for w in self.workers.values())

    def close(self):
        """Kills what still runs and closes the channels."""
        ws = list(self.workers.values()) + list(self.early.values()) + \
            self.gone
        for w in ws:
            if w.alive():
                w.proc.kill()
                w.proc.wait()
            rt._untrack(w.proc)
        self._stop = True
        os.write(self._wake_w, b"x")
        self._thread.join(5)
        for w in ws:
            w.sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
