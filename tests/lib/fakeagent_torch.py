"""fakeagent_torch: rdzv-agent's side of in-place repair for torch workers
(python/rdzv/repair.py), in Python, until the real agent does it.

The messages are those of notes/repair-spec.md; the method names follow
tests/lib/fakeagent.py (helper "wrepair", the C side), so the two can be
folded into one.  What is torch's here: every worker gets MASTER_ADDR and
MASTER_PORT, and a round's store is rdzvd's main port with the round's
namespace "job/<job>/round/<n>" as a PrefixStore prefix (the helper builds
PrefixStore(ns + "/", TCPStore(master_addr, master_port)) for every
round, the first one from RDZV_NAMESPACE).  Workers' stdout and stderr go
to files, read back by output().

    a = TorchFakeAgent([python, script, ...], 4, rdzvd_port)
    a.start(); a.wait_steps(5)
    t = a.kill(2); a.shrink()            # survivors renumbered 0..2
    w = a.spawn_replacement(2); a.wait_ready(w); a.grow()
    res = a.wait(120)                    # {local_rank: (rc, out, err)}
    a.close()
"""

import os
import selectors
import signal
import socket
import subprocess
import threading
import time

import rdzvtest as rt

ROUND_FMT = ("round round={round} kind={kind} ns={ns} rank={rank} "
             "world={world} donor={donor} master_addr={master_addr} "
             "master_port={master_port} local_rank={local_rank} "
             "local_world={local_world}")

_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                "MASTER_ADDR", "MASTER_PORT", "RDZV_ENDPOINT",
                "RDZV_NAMESPACE", "RDZV_JOB", "RDZV_ROUND",
                "RDZV_PROGRESS_FD", "RDZV_REPLACEMENT")


class Worker:
    def __init__(self, local_rank, rank, proc, sock, replacement, logs):
        self.local_rank = local_rank
        self.rank = rank
        self.proc = proc
        self.pid = proc.pid
        self.sock = sock
        self.replacement = replacement
        self.logs = logs                # (stdout path, stderr path)
        self.hello = None
        self.ready = None
        self.joined = not replacement   # a member of the current round
        self.steps = []                 # [(monotonic time, step)]
        self.other = []                 # [(time, text)] anything else

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


class TorchFakeAgent:
    _count = 0

    def __init__(self, argv, n, port, job=None, env=None):
        TorchFakeAgent._count += 1
        self.argv = list(argv)
        self.n = n
        self.port = port
        self.job = job or "fake-torch-%d-%d" % (os.getpid(),
                                                TorchFakeAgent._count)
        self.env = dict(env or {})
        self.dir = rt.mktemp("rdzv-fakeagent-")
        self.round = 0
        self.workers = {}
        self.gone = []
        self.early = {}                 # local rank -> early replacement
        self.sent = []
        self._cv = threading.Condition()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._stop = False
        self._spawned = 0
        self._thread = threading.Thread(target=self._read_loop, daemon=True)
        self._thread.start()

    def ns(self, rnd=None):
        return "job/%s/round/%d" % (self.job,
                                    self.round if rnd is None else rnd)

    def _spawn(self, local_rank, rank, world, replacement=False):
        mine, theirs = socket.socketpair(socket.AF_UNIX,
                                         socket.SOCK_SEQPACKET)
        e = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
        e.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
                  "TORCHELASTIC_USE_AGENT_STORE": "True",
                  "TORCHELASTIC_RESTART_COUNT": "0"})
        e.update(self.env)
        e.update({"RANK": str(rank), "WORLD_SIZE": str(world),
                  "LOCAL_RANK": str(local_rank),
                  "LOCAL_WORLD_SIZE": str(world),
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.port),
                  "RDZV_ENDPOINT": "127.0.0.1:%d" % self.port,
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
        for r in range(self.n):
            self.workers[r] = self._spawn(r, r, self.n)

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
        end = time.monotonic() + timeout
        with self._cv:
            while not pred():
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("fakeagent: timed out waiting for "
                                         "%s; %s" % (what, self.describe()))
                self._cv.wait(min(left, 0.5))

    def wait_steps(self, step, workers=None, after=None, timeout=60.0):
        """Waits until every worker of workers (default: the current
        ones) reported a step >= step (at or after time after)."""
        ws = list(workers or self.workers.values())

        def seen(w):
            return any(s >= step and (after is None or t >= after)
                       for t, s in w.steps)
        self.wait_for(lambda: all(seen(w) for w in ws), timeout,
                      "step %d from local ranks %s" % (
                          step, [w.local_rank for w in ws]))

    def all_said_hello(self):
        with self._cv:
            return all(w.hello is not None and w.hello.get("repair") == "1"
                       for w in self.workers.values())

    def wait_ready(self, w, timeout=90.0):
        self.wait_for(lambda: w.ready is not None, timeout,
                      "ready from local rank %d" % w.local_rank)
        return w.ready

    def kill(self, local_rank, sig=signal.SIGKILL):
        """Signals a worker and waits for it to die (as the agent learns
        of a death); returns the time the signal was sent."""
        w = self.workers[local_rank]
        t = time.monotonic()
        os.kill(w.pid, sig)
        w.proc.wait(30)
        rt._untrack(w.proc)
        del self.workers[local_rank]
        self.gone.append(w)
        if local_rank in self.early:
            self.workers[local_rank] = self.early.pop(local_rank)
        return t

    def _send_round(self, kind, members, donor):
        self.round += 1
        world = len(members)
        for rank, w in enumerate(members):
            w.rank = rank
            text = ROUND_FMT.format(
                round=self.round, kind=kind, ns=self.ns(), rank=rank,
                world=world, donor=donor, master_addr="127.0.0.1",
                master_port=self.port, local_rank=w.local_rank,
                local_world=world)
            w.sock.send(text.encode())
            with self._cv:
                self.sent.append((time.monotonic(), w, text))
        return time.monotonic()

    def shrink(self, donor=0):
        """Round kind=shrink to the members that are left, renumbered in
        their old order; returns the time the last message went."""
        members = sorted((w for w in self.workers.values() if w.joined),
                         key=lambda w: w.rank)
        return self._send_round("shrink", members, donor)

    def spawn_replacement(self, local_rank):
        """Starts a replacement (RDZV_REPLACEMENT=1, the stale
        environment of the rank it replaces).  Called before that rank
        is killed, it starts early: it takes the rank's place at kill(),
        so a test's replacement imports torch while the others train."""
        old = self.workers.get(local_rank) or [
            w for w in self.gone if w.local_rank == local_rank][-1]
        w = self._spawn(local_rank, old.rank, self.n, replacement=True)
        if local_rank in self.workers:
            self.early[local_rank] = w
        else:
            self.workers[local_rank] = w
        return w

    def grow(self, donor=0):
        """Round kind=grow to every current worker: the members keep
        their order, the replacements come after them."""
        old = sorted((w for w in self.workers.values() if w.joined),
                     key=lambda w: w.rank)
        new = sorted((w for w in self.workers.values() if not w.joined),
                     key=lambda w: w.local_rank)
        for w in new:
            w.joined = True
        return self._send_round("grow", old + new, donor)

    def stop(self):
        for w in self.workers.values():
            w.sock.send(b"stop")

    def wait(self, timeout=120.0):
        """Waits for every current worker to exit; {local_rank: (rc,
        stdout, stderr)}, rc None when it had to be killed."""
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
        for w in list(self.workers.values()) + self.gone + list(
                self.early.values()):
            if w.alive():
                w.proc.kill()
                w.proc.wait()
            rt._untrack(w.proc)
        self._stop = True
        os.write(self._wake_w, b"x")
        self._thread.join(5)
        for w in list(self.workers.values()) + self.gone + list(
                self.early.values()):
            w.sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
