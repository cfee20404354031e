# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent's local side of in-place recovery (issue 12), with real
worker processes: the two-way worker <-> agent channel (agent/progress.c,
common/chan.c) and the respawn of one local rank alone (agent/sup.c).

tests/integ/repair_drv drives those files as the agent's main loop will
(see its header); the workers below are plain Python speaking the
channel's contract (common/PROTOCOL.md, "Worker <-> agent channel") on
their RDZV_PROGRESS_FD, so what they record is what a librdzvworker or
torch worker would hear:
  - every worker says "hello repair=1" (or not: W_NOHELLO=ranks), then
    reports its step (round * 1000 after a round, else 1) every 50 ms;
    W_JUNK=ranks first sends messages the agent must ignore;
    W_EMPTY=ranks sends an empty datagram (a legal message, not the end
    of the channel) before each of its messages;
  - a replacement (RDZV_REPLACEMENT=1) does its start-up, says "ready";
  - each records its environment, every "round" message it got, and any
    signal it got (none may come), and exits 0 on "stop";
  - with W_PRINT=1 each writes numbered lines "W|<rank>|<pid>|..." to
    stdout ("tick <n>" every pass of its loop) and stderr;
  - with W_DIE=1, a first worker finding the file die.<rank> writes an
    error file in torch's format, a last line without its newline, and
    exits 1; a replacement writes its own error file on its grow round.
"""
import glob
import json
import os
import queue
import re
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

errfile = env.get("TORCHELASTIC_ERROR_FILE", "")
record("env.%d.%d" % (r, pid), dict(env))
record("errfile.%d.%d" % (r, pid), {"path": errfile,
                                    "existed": os.path.exists(errfile)})
printing = env.get("W_PRINT") == "1"
ticks = 0

def say(what, f=sys.stdout, end="\n"):
    if printing:
        f.write("W|%d|%d|%s%s" % (r, pid, what, end))
        f.flush()

def write_error(obj):
    tmp = errfile + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, errfile)

say("start replacement=%d" % replacement)
say("start-err", sys.stderr)
sock = socket.socket(fileno=int(env["RDZV_PROGRESS_FD"]))

def send(msg):
    try:
        if r in ranks("W_EMPTY"):
            sock.send(b"")
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
die = os.path.join(d, "die.%d" % r)
while True:
    ticks += 1
    say("tick %d" % ticks)
    if env.get("W_DIE") == "1" and not replacement and os.path.exists(die):
        write_error({"message": {"message": "worker %d pid %d gave up" %
                                 (r, pid), "extraInfo": {
                                     "py_callstack": "Traceback: %d" % pid,
                                     "timestamp": "1700000000"}}})
        say("dying", end="")
        sys.exit(1)
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
            if replacement and env.get("W_DIE") == "1":
                write_error({"message": "replacement %d pid %d" % (r, pid)})
            say("round %s" % kv["round"])
            step = int(kv["round"]) * 1000
    send(str(step))
'''


class Driver:
    """repair_drv with its stdout read line by line by a thread."""

    def __init__(self, args, env=None, log_dir=False):
        self.tmp = rt.mktemp()
        self.worker = os.path.join(self.tmp, "worker.py")
        with open(self.worker, "w") as f:
            f.write(WORKER)
        self.log_dir = os.path.join(self.tmp, "logs")
        if log_dir:
            args = args + ["--log_dir", self.log_dir]
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

    def pids(self):
        """{local_rank: pid} of the first workers ("pid R P" lines)."""
        got = {}
        for l in self.lines:
            if l.startswith("pid "):
                _, r, p = l.split()
                got[int(r)] = int(p)
        return got

    def attempt(self):
        """The one run directory's attempt_1 under --log_dir."""
        runs = glob.glob(os.path.join(self.log_dir, "*", "attempt_1"))
        assert len(runs) == 1, runs
        return runs[0]

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


def check_repaired(L, pids, new):
    """repair_drv's lines L of a repair of local rank 1 of 3 (first pids
    {rank: pid}, replacement pid new) that ran to its end: the ready
    heard, the grow round sent to all, every rank at step 3000, and
    everyone ended on "stop", the survivors with the pids they began
    with."""
    assert "ready 1 replacement=1" in L, L
    assert [l for l in L if l.startswith("grow ")] == \
        ["grow 0 rv=0", "grow 1 rv=0", "grow 2 rv=0"], L
    for r in range(3):
        assert "step %d 3000" % r in L, L
    assert "stop n=3" in L, L
    assert "exit 0 %d exit code 0 replacement=0" % pids[0] in L, L
    assert "exit 2 %d exit code 0 replacement=0" % pids[2] in L, L
    assert "exit 1 %d exit code 0 replacement=1" % new in L, L


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
    # Until every worker's hello had come, the channel said no.  Hellos
    # read in one pass of the loop are noted after it, so the note of an
    # earlier one may already count a later one: all=1 can come before
    # the last note, never before the last hello.
    if sum(l.startswith("hello ") for l in d.lines) < 3:
        d.until(lambda l: sum(x.startswith("hello ")
                              for x in d.lines) == 3)
    hellos = [l for l in d.lines if l.startswith("hello ")]
    assert sorted(l.split()[1] for l in hellos) == ["0", "1", "2"], hellos
    assert all("can_repair=1" in l for l in hellos), hellos
    first_yes = [i for i, l in enumerate(hellos) if l.endswith("all=1")]
    assert first_yes and all(l.endswith("all=1")
                             for l in hellos[first_yes[0]:]), hellos
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
    check_repaired(L, pids, new)

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


def test_empty_datagrams():
    """An empty datagram is a message on a SOCK_SEQPACKET channel, not
    its end: every worker sends one before each hello, ready and step,
    and the agent still hears them all at once (no poll of its own reads
    them here before the grow round: until then only the socket's read
    event does), repairs, and sees every rank's step 3000."""
    d = Driver(["repair", "3", "1"], env={"W_EMPTY": "0,1,2"})
    d.until(lambda l: l == "all-can-repair")
    pids = d.pids()
    os.kill(pids[1], signal.SIGKILL)
    new = int(d.until(lambda l: l.startswith("respawned ")).split()[2])
    d.until(lambda l: l.startswith("ready "))
    err = d.finish()
    # Nobody was taken for gone.
    check_repaired(d.lines, pids, new)
    ends = d.records("end")
    assert len(ends) == 3 and all(e["rounds"] for e in ends.values()), ends
    # Ignored quietly: a legal message, not a malformed one.
    assert "malformed" not in err, err


MARK = ("[rdzv-agent] local rank 1 replaced (replacement 1); the error file "
        "of the worker it replaces is now error.0.json")
WLINE = re.compile(r"^(.*?)W\|(\d+)\|(\d+)\|(.*)$")


def worker_lines(text, prefixes=None):
    """[(rank, pid, what)] of the "W|" lines in text, each checked whole
    (one per line) and, with prefixes ({rank: prefix}), prefixed by its
    rank's prefix and nothing else."""
    got = []
    for line in text.split("\n"):
        if "W|" not in line:
            continue
        assert line.count("W|") == 1, ("lines run together", line)
        m = WLINE.match(line)
        r, pid = int(m.group(2)), int(m.group(3))
        if prefixes is not None:
            assert m.group(1) == prefixes[r], (line, prefixes[r])
        else:
            assert m.group(1) == "", line
        got.append((r, pid, m.group(4)))
    return got


def check_ticks(lines, who):
    """The "tick n" lines of one worker run 1, 2, ... with none lost."""
    ticks = [int(w.split()[1]) for w in lines if w.startswith("tick ")]
    assert ticks and ticks == list(range(1, len(ticks) + 1)), (who, ticks)


def run_replaced_output(opts):
    """Rank 1 of 3 fails on its own (its error file written, a last line
    without its newline, exit 1) while every worker prints; it is
    replaced as in test_replace_one_rank.  Returns the driver, the first
    pids, the replacement's pid, the attempt directory and the driver's
    stderr."""
    d = Driver(["repair", "3", "1"] + opts,
               env={"W_PRINT": "1", "W_DIE": "1"}, log_dir=True)
    d.until(lambda l: l == "all-can-repair")
    pids = d.pids()
    assert sorted(pids) == [0, 1, 2], d.lines
    open(os.path.join(d.tmp, "die.1"), "w").close()
    new = int(d.until(lambda l: l.startswith("respawned ")).split()[2])
    d.until(lambda l: l.startswith("ready "))
    err = d.finish()
    att = d.attempt()
    L = d.lines
    old = pids[1]
    assert "exit 1 %d exit code 1 replacement=0" % old in L, L
    # The predecessor's error is read before it moves aside; the
    # replacement finds the path free and its own error is what is read.
    assert ("errfile-old rv=0 stamp=1700000000 msg=worker 1 pid %d gave up"
            % old) in L, L
    assert "rearm-bad rv=%d" % rt.RDZV_ENOTFOUND in L, L
    assert "logs-rearm moved=%s" % os.path.join(att, "1", "error.0.json") \
        in L, L
    assert "errfile-new rv=%d" % rt.RDZV_ENOTFOUND in L, L
    assert "errfile-end rv=0 msg=replacement 1 pid %d" % new in L, L
    ef = d.records("errfile")
    path = os.path.join(att, "1", "error.json")
    assert ef[(1, old)] == {"path": path, "existed": False}, ef
    assert ef[(1, new)] == {"path": path, "existed": False}, ef
    with open(os.path.join(att, "1", "error.0.json")) as f:
        assert json.load(f)["message"]["message"] == \
            "worker 1 pid %d gave up" % old
    with open(path) as f:
        assert json.load(f) == {"message": "replacement 1 pid %d" % new}
    for r in (0, 2):
        assert not os.path.exists(os.path.join(att, str(r), "error.json"))

    # The log files: each survivor's holds its own lines alone, unbroken;
    # rank 1's the predecessor's, the marker on a line of its own after
    # the unfinished last line, then the replacement's.
    for r in (0, 2):
        with open(os.path.join(att, str(r), "stdout.log")) as f:
            text = f.read()
        assert "rdzv-agent" not in text, text
        got = worker_lines(text)
        assert {(x, p) for x, p, _ in got} == {(r, pids[r])}, got
        w = [x[2] for x in got]
        assert w[0] == "start replacement=0" and "round 2" in w and \
            "round 3" in w, w
        check_ticks(w, r)
        with open(os.path.join(att, str(r), "stderr.log")) as f:
            assert f.read() == "W|%d|%d|start-err\n" % (r, pids[r])
    with open(os.path.join(att, "1", "stdout.log")) as f:
        text = f.read()
    before, sep, after = text.partition("\n" + MARK + "\n")
    assert sep and MARK not in after, text
    assert before.endswith("W|1|%d|dying" % old), before[-200:]
    b = worker_lines(before)
    a = worker_lines(after)
    assert {p for _, p, _ in b} == {old} and {p for _, p, _ in a} == {new}, \
        (b, a)
    check_ticks([x[2] for x in b], "predecessor")
    check_ticks([x[2] for x in a], "replacement")
    assert a[0][2] == "start replacement=1" and \
        [x[2] for x in a if x[2].startswith("round")] == ["round 3"], a
    with open(os.path.join(att, "1", "stderr.log")) as f:
        assert f.read() == "W|1|%d|start-err\n%s\nW|1|%d|start-err\n" % (
            old, MARK, new)
    return d, pids, new, att, err


def test_replacement_output_tee():
    """--tee 3 with a prefix template: the replacement's lines reach the
    console with rank 1's prefix (never bare) and its log files after
    the marker; the survivors' console lines and files are exactly what
    they wrote, the predecessor's unfinished line ends as a line."""
    prefix = "<${role_name}:${local_rank}/${rank}> "
    d, pids, new, att, err = run_replaced_output(
        ["--tee", "3", "--log_line_prefix_template", prefix])
    pfx = {r: "<default:%d/%d> " % (r, r) for r in range(3)}
    console = worker_lines("\n".join(d.lines), pfx)
    for r in range(3):
        with open(os.path.join(att, str(r), "stdout.log")) as f:
            files = worker_lines(f.read().replace(MARK, ""))
        mine = [x for x in console if x[0] == r]
        assert mine == files, (r, mine, files)
    assert (1, new, "start replacement=1") in console, console
    # stderr too, rank 1's predecessor before its replacement.
    errs = worker_lines(err, pfx)
    assert sorted(errs) == sorted((r, p, "start-err") for r, p in
                                  list(pids.items()) + [(1, new)]), err
    assert errs.index((1, pids[1], "start-err")) < \
        errs.index((1, new, "start-err")), errs
    print("  console: %d worker lines, all prefixed; replacement pid %d" %
          (len(console), new))


def test_replacement_output_redirect():
    """--redirects 3: the workers write their log files themselves; the
    replacement's go to rank 1's files after the marker (the unfinished
    last line its predecessor wrote is ended first) and nothing reaches
    the console."""
    d, pids, new, att, err = run_replaced_output(["--redirects", "3"])
    assert not any("W|" in l for l in d.lines), d.lines
    assert "W|" not in err, err


if __name__ == "__main__":
    rt.main(globals(), per_test=90, total=200)
