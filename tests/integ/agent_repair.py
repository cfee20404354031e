"""rdzv-agent's local side of in-place recovery (issue 12), with real
worker processes: the two-way worker <-> agent channel (agent/progress.c,
agent/repair.c) and the respawn of one local rank alone (agent/sup.c).

tests/integ/repair_drv drives those files as the agent's main loop will
(see its header); the workers below are plain Python speaking the
channel's contract (common/PROTOCOL.md, "Worker <-> agent channel") on
their RDZV_PROGRESS_FD, so what they record is what a librdzvworker or
torch worker would hear:
  - every worker says "hello repair=1" (or not: W_NOHELLO=ranks), then
    reports its step (round * 1000 after a round, else 1) every 50 ms;
    W_JUNK=ranks first sends messages the agent must ignore;
  - a replacement (RDZV_REPLACEMENT=1) does its start-up, says "ready";
  - each records its environment, every "round" message it got, and any
    signal it got (none may come), and exits 0 on "stop".
"""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import rdzvtest as rt

WORKER = r'''
import json, os, select, signal, socket, sys, time
d = sys.argv[1]
env = os.environ
r = int(env["RDZV_LOCAL_RANK"])
pid = os.getpid()
replacement = env.get("RDZV_REPLACEMENT") == "1"

def record(name, obj):
    tmp = os.path.join(d, ".%s.tmp" % name)
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, os.path.join(d, name))

sigs = []
def onsig(s, f):
    sigs.append(s)
    record("sig.%d.%d" % (r, pid), sigs)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
          signal.SIGUSR1, signal.SIGUSR2, signal.SIGABRT, signal.SIGALRM,
          signal.SIGCONT, signal.SIGPIPE):
    signal.signal(s, onsig)

record("env.%d.%d" % (r, pid), dict(env))
sock = socket.socket(fileno=int(env["RDZV_PROGRESS_FD"]))

def send(msg):
    try:
        sock.send(msg.encode())
    except BlockingIOError:
        pass    # the agent is behind: a report is dropped, never waited

def ranks(name):
    return [int(x) for x in env.get(name, "").split(",") if x]

if r in ranks("W_JUNK"):
    for m in ("frobnicate x=1", "hello  repair=1", "x" * 600, "12x",
              "hello\trepair=1"):
        send(m)
if r not in ranks("W_NOHELLO"):
    send("hello repair=1")
if replacement:
    time.sleep(0.2)         # its own start-up: imports, data
    send("ready")
step = 1
send(str(step))
rounds = []
while True:
    rl, _, _ = select.select([sock], [], [], 0.05)
    if rl:
        msg = sock.recv(4096).decode()
        if msg == "":
            sys.exit(3)     # the agent is gone
        if msg == "stop":
            record("end.%d.%d" % (r, pid), {"rounds": rounds, "sigs": sigs,
                                            "replacement": replacement})
            sys.exit(0)
        if msg.startswith("round "):
            rounds.append(msg)
            kv = dict(w.split("=", 1) for w in msg.split(" ")[1:])
            step = int(kv["round"]) * 1000
    send(str(step))
'''


class Driver:
    """repair_drv with its stdout read line by line by a thread."""

    def __init__(self, args, env=None):
        self.tmp = rt.mktemp()
        self.worker = os.path.join(self.tmp, "worker.py")
        with open(self.worker, "w") as f:
            f.write(WORKER)
        path = os.path.join(rt.top_builddir(), "tests", "integ", "repair_drv")
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen(
            [path] + args + [sys.executable, self.worker, self.tmp],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, text=True)
        rt._track(self.p)
        self.lines = []
        self.q = queue.Queue()
        self.err = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.q.put(line.rstrip("\n"))
        self.q.put(None)

    def _read_err(self):
        for line in self.p.stderr:
            self.err.append(line)

    def until(self, pred, timeout=60):
        """Lines up to and including the first one pred accepts."""
        end = time.monotonic() + timeout
        while True:
            try:
                line = self.q.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                line = None
                if time.monotonic() < end:
                    continue
            if line is None:
                raise AssertionError("repair_drv: no such line; got %r; "
                                     "stderr %s" % (self.lines,
                                                    "".join(self.err)))
            self.lines.append(line)
            if pred(line):
                return line

    def finish(self, timeout=60):
        self.until(lambda l: l.startswith("done "), timeout)
        rc = self.p.wait(timeout)
        err = "".join(self.err)
        assert "Sanitizer" not in err and "runtime error:" not in err, err
        assert rc == 0 and self.lines[-1] == "done ok", (rc, self.lines, err)
        return err

    def has(self, line):
        return line in self.lines

    def records(self, prefix):
        """{(rank, pid): obj} of the files the workers wrote."""
        got = {}
        for n in os.listdir(self.tmp):
            if n.startswith(prefix + "."):
                _, r, pid = n.split(".")
                with open(os.path.join(self.tmp, n)) as f:
                    got[(int(r), int(pid))] = json.load(f)
        return got


def round_msg(rnd, kind, rank, world, local_rank, local_world):
    """The contract's text of a round message, written out here."""
    return ("round round=%d kind=%s ns=job/t/round/%d rank=%d world=%d "
            "donor=0 master_addr=127.0.0.1 master_port=%d local_rank=%d "
            "local_world=%d" % (rnd, kind, rnd, rank, world, 29400 + rnd,
                                local_rank, local_world))


def test_replace_one_rank():
    """Rank 1 of 3 SIGKILLed: the survivors hear a shrink round, rank 1
    alone is respawned with the dead worker's environment plus
    RDZV_REPLACEMENT=1 on a fresh socket, says ready, and every worker
    (replacement included) hears the grow round; the survivors keep their
    pids and get no signal."""
    d = Driver(["repair", "3", "1"])
    d.until(lambda l: l == "all-can-repair")
    assert d.has("before all=0 ready=0 respawn=%d" % rt.RDZV_ENOTFOUND), \
        d.lines
    pids = {}
    for l in d.lines:
        if l.startswith("pid "):
            _, r, p = l.split()
            pids[int(r)] = int(p)
    assert sorted(pids) == [0, 1, 2], d.lines
    # Until the last hello, the channel said no.
    hellos = [l for l in d.lines if l.startswith("hello ")]
    assert len(hellos) == 3 and hellos[-1].endswith("all=1"), hellos
    assert all(l.endswith("all=0") for l in hellos[:-1]), hellos
    os.kill(pids[1], signal.SIGKILL)
    line = d.until(lambda l: l.startswith("respawned "))
    new = int(line.split()[2])
    assert new not in pids.values(), (new, pids)
    d.until(lambda l: l.startswith("ready "))
    err = d.finish()

    L = d.lines
    assert "exit 1 %d signal 9 (SIGKILL) replacement=0" % pids[1] in L, L
    # The dead worker's hello still counted when its exit came; the fresh
    # socket forgets it until the replacement's own hello.
    assert "at-exit all=1" in L and "rearmed all=0 ready=0" in L, L
    assert "shrink 0 rv=0" in L and "shrink 2 rv=0" in L, L
    assert "send-dead rv=%d" % rt.RDZV_ECONN in L, L
    assert "bad-ns rv=%d" % rt.RDZV_EINVAL in L, L
    assert "respawn-again rv=%d" % rt.RDZV_EEXIST in L, L
    assert "ready 1 replacement=1" in L, L
    assert [l for l in L if l.startswith("grow ")] == \
        ["grow 0 rv=0", "grow 1 rv=0", "grow 2 rv=0"], L
    for r in range(3):
        assert "step %d 3000" % r in L, L
    assert "stop n=3" in L, L
    # Everyone ended on "stop"; the survivors with the pids they began with.
    assert "exit 0 %d exit code 0 replacement=0" % pids[0] in L, L
    assert "exit 2 %d exit code 0 replacement=0" % pids[2] in L, L
    assert "exit 1 %d exit code 0 replacement=1" % new in L, L

    ends = d.records("end")
    assert sorted(ends) == [(0, pids[0]), (1, new), (2, pids[2])], ends
    assert ends[(0, pids[0])]["rounds"] == [
        round_msg(2, "shrink", 0, 2, 0, 3),
        round_msg(3, "grow", 0, 3, 0, 3)], ends
    assert ends[(2, pids[2])]["rounds"] == [
        round_msg(2, "shrink", 1, 2, 2, 3),
        round_msg(3, "grow", 2, 3, 2, 3)], ends
    # Nothing meant for its predecessor (stop, the refused round).
    assert ends[(1, new)]["rounds"] == [round_msg(3, "grow", 1, 3, 1, 3)], \
        ends
    assert ends[(1, new)]["replacement"] is True, ends
    assert not any(e["sigs"] for e in ends.values()), ends
    assert d.records("sig") == {}, d.records("sig")

    envs = d.records("env")
    assert sorted(envs) == sorted([(0, pids[0]), (1, pids[1]), (1, new),
                                   (2, pids[2])]), envs
    old, rep = envs[(1, pids[1])], envs[(1, new)]
    assert "RDZV_REPLACEMENT" not in old, old
    assert rep.pop("RDZV_REPLACEMENT") == "1", rep
    assert rep == old, (rep, old)
    assert "malformed" not in err, err
    print("  killed pid %d, replacement pid %d, survivors %d %d" %
          (pids[1], new, pids[0], pids[2]))


def test_hello_decides():
    """A worker that never says hello keeps the node from repairing; junk
    on the channel (unknown verbs, a double space, 600 bytes, a bad step)
    is ignored, logged once, and the hello after it counts."""
    d = Driver(["hello", "3"], env={"W_NOHELLO": "1", "W_JUNK": "2"})
    err = d.finish()
    L = d.lines
    assert "can_repair 0 1" in L and "can_repair 1 0" in L and \
        "can_repair 2 1" in L, L
    assert "all 0" in L and "stop n=3" in L, L
    for r in range(3):
        assert any(l.startswith("exit %d " % r) and
                   "exit code 0 replacement=0" in l for l in L), L
    assert err.count("worker 2 sent a malformed message") == 1, err
    assert "worker 0 sent" not in err and "worker 1 sent" not in err, err
    ends = d.records("end")
    assert len(ends) == 3 and not any(e["rounds"] or e["sigs"]
                                      for e in ends.values()), ends


if __name__ == "__main__":
    rt.main(globals(), per_test=90, total=200)
