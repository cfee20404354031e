#!/usr/bin/python3
"""The full demo: the whole of rdzv on one machine.

rdzvd, then two rdzv-agents (two "nodes") with two workers each train
examples/ddp_mlp data-parallel on Fashion-MNIST.  Partway through, one
worker is killed with SIGKILL: every worker stops, the job restarts
from its last checkpoint.  Later rdzvd itself is killed with SIGKILL and
started again on the same database: the job does not notice.  The job
ends with its test accuracy.  Run by scripts/demo.sh after the build;
every process it starts is stopped on the way out, whatever happens.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BUILD = os.environ.get("RDZV_TOP_BUILDDIR", "build")
RDZVD = os.path.join(BUILD, "rdzvd", "rdzvd")
AGENT = os.path.join(BUILD, "agent", "rdzv-agent")
RDZVCTL = os.path.join(BUILD, "client", "rdzvctl")
MLP = os.path.join(BUILD, "examples", "ddp_mlp")
DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = int(os.environ.get("DEMO_EPOCHS", "7"))
TARGET = 0.85

lock = threading.Lock()
lines = []          # (node, text) of every agent line, in order
procs = []


def say(msg):
    with lock:
        print("demo | " + msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_rdzvd(work, port, http):
    ready = os.path.join(work, "ready")
    if os.path.exists(ready):
        os.unlink(ready)
    p = subprocess.Popen(
        [RDZVD, "-d", "--listen", "127.0.0.1:%d" % port, "--port-file", ready,
         "--http", "127.0.0.1:%d" % http, "--db", os.path.join(work, "rdzvd.db"),
         "--log-file", os.path.join(work, "rdzvd.log"), "--lease-ms", "5000"],
        stdin=subprocess.DEVNULL, start_new_session=True)
    procs.append(p)
    deadline = time.time() + 15
    while not os.path.exists(ready):
        if p.poll() is not None or time.time() > deadline:
            raise SystemExit("rdzvd did not start; see %s/rdzvd.log" % work)
        time.sleep(0.02)
    return p


def relay(node, p):
    for raw in p.stdout:
        text = raw.decode(errors="replace").rstrip("\n")
        with lock:
            lines.append((node, text))
            # Rank 0's epoch lines and the agents' own lines tell the story.
            if ("epoch" in text and "%" not in text) or "rdzv-agent[" in text \
                    or "final" in text:
                print("%s | %s" % (node, text), flush=True)


def start_agent(node, port, work):
    argv = [AGENT, "--nnodes", "2", "--nproc_per_node", "2",
            "--rdzv_endpoint", "127.0.0.1:%d" % port, "--rdzv_id", "mnist",
            "--max_restarts", "3", "--grace", "5",
            "--log_dir", os.path.join(work, "logs-" + node),
            "--no_python", MLP, "--epochs", str(EPOCHS), "--batch", "32",
            "--lr", "0.1", "--hidden", "128", "--data", DATA,
            "--checkpoint", os.path.join(work, "ckpt"),
            "--checkpoint-every", "200", "--threads", "1"]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    procs.append(p)
    threading.Thread(target=relay, args=(node, p), daemon=True).start()
    return p


def wait_for(pattern, timeout, after=0):
    """Waits until an agent line past index `after` matches; returns its
    index."""
    rx = re.compile(pattern)
    deadline = time.time() + timeout
    while time.time() < deadline:
        with lock:
            for i in range(after, len(lines)):
                if rx.search(lines[i][1]):
                    return i
        time.sleep(0.05)
    raise SystemExit("timed out waiting for %r" % pattern)


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def ctl(port, *args):
    if not os.path.exists(RDZVCTL):
        return
    out = subprocess.run([RDZVCTL, "-e", "127.0.0.1:%d" % port] + list(args),
                         capture_output=True, timeout=10)
    for line in out.stdout.decode(errors="replace").splitlines():
        say("  " + line)


def main():
    for f in (RDZVD, AGENT, MLP):
        if not os.path.exists(f):
            raise SystemExit("missing %s: build first (scripts/demo.sh)" % f)
    work = tempfile.mkdtemp(prefix="rdzv-demo-")
    port, http = free_port(), free_port()
    rdzvd = start_rdzvd(work, port, http)
    say("rdzvd serves 127.0.0.1:%d; status page: http://127.0.0.1:%d/ "
        "(files in %s)" % (port, http, work))
    a = start_agent("node A", port, work)
    b = start_agent("node B", port, work)
    say("two agents joined job 'mnist': 2 nodes x 2 workers training "
        "ddp_mlp for %d epochs" % EPOCHS)

    i = wait_for(r"^(\[default0\]:)?epoch 1 ", 600)
    workers = children(b.pid)
    if not workers:
        raise SystemExit("node B has no workers to kill")
    say("SIGKILL to a worker of node B (pid %d) in epoch 2" % workers[0])
    os.kill(workers[0], signal.SIGKILL)
    i = wait_for(r"restart 1", 120, i)
    t0 = time.time()
    i = wait_for(r"resum", 120, i)
    say("the job restarted every worker and resumed from its checkpoint "
        "(%.2f s after the restart)" % (time.time() - t0))
    ctl(port, "jobs")

    i = wait_for(r"^(\[default0\]:)?epoch 3 ", 900, i)
    say("kill -9 rdzvd (pid %d) in epoch 4 ..." % rdzvd.pid)
    rdzvd.send_signal(signal.SIGKILL)
    rdzvd.wait()
    time.sleep(1)
    rdzvd = start_rdzvd(work, port, http)
    say("rdzvd restarted on the same database and port: the agents "
        "reconnect, the workers train on")

    for node, p in (("node A", a), ("node B", b)):
        rc = p.wait(timeout=1800)
        say("%s's agent exited %d" % (node, rc))
        if rc != 0:
            raise SystemExit(1)
    ctl(port, "events", "mnist")
    with lock:
        accs = [float(m.group(1)) for _, t in lines
                for m in [re.search(r"final test_acc ([0-9.]+)", t)] if m]
        restarts = sum(1 for _, t in lines if "restart 1" in t)
    acc = accs[-1] if accs else 0.0
    say("final test accuracy %.4f (target %.2f), one failure restart, "
        "rdzvd restarted once without a restart of the job" % (acc, TARGET))
    return 0 if acc >= TARGET and restarts > 0 else 1


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
    sys.exit(rc)
