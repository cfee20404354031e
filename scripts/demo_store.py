#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The store demo: unmodified PyTorch 1.13 against rdzvd, across a kill -9.

Run by scripts/demo.sh after the build.  Every process it starts is its
own and is stopped on the way out, whatever happens.
"""
import datetime
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time

from torch.distributed import TCPStore

BUILD = os.environ.get("RDZV_TOP_BUILDDIR", "build")
RDZVD = os.path.join(BUILD, "rdzvd", "rdzvd")
TIMEOUT = datetime.timedelta(seconds=10)


def say(msg):
    print("demo | " + msg, flush=True)


def start_rdzvd(workdir, db):
    port_file = os.path.join(workdir, "port")
    http_file = os.path.join(workdir, "http")
    for f in (port_file, http_file):
        if os.path.exists(f):
            os.unlink(f)
    log = open(os.path.join(workdir, "rdzvd.log"), "a")
    proc = subprocess.Popen(
        [RDZVD, "-d", "--listen", "127.0.0.1:0", "--port-file", port_file,
         "--http", "127.0.0.1:0", "--http-port-file", http_file,
         "--db", db, "--durability", "strict"],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 10
    while not (os.path.exists(port_file) and os.path.exists(http_file)):
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit("rdzvd did not start; see %s/rdzvd.log" % workdir)
        time.sleep(0.02)
    port = int(open(port_file).read())
    http = int(open(http_file).read())
    return proc, port, http


def waiter(port, q):
    """A second process that blocks until the key 'go' exists."""
    store = TCPStore("127.0.0.1", port, 1, False, timeout=TIMEOUT)
    t = time.time()
    store.wait(["go"])
    q.put((store.get("go"), time.time() - t))


def main():
    say("== part 1: the store, across a kill -9 of rdzvd")
    work = os.path.join(os.environ["RDZV_DEMO_DIR"], "store") \
        if os.environ.get("RDZV_DEMO_DIR") else \
        tempfile.mkdtemp(prefix="rdzv-demo-")
    os.makedirs(work, exist_ok=True)
    db = os.path.join(work, "rdzvd.db")
    proc = None
    try:
        proc, port, http = start_rdzvd(work, db)
        say("rdzvd is up: store on 127.0.0.1:%d, metrics on "
            "http://127.0.0.1:%d/metrics, database %s (strict durability)"
            % (port, http, db))

        store = TCPStore("127.0.0.1", port, 1, False, timeout=TIMEOUT)
        say("PyTorch %s TCPStore client connected" % __import__("torch").__version__)
        store.set("model/name", "mlp-fashion-mnist")
        store.set("model/hidden", "256")
        store.add("epochs_done", 3)
        store.compare_set("leader", "", "node-0")
        say("  set model/name, model/hidden; add epochs_done += 3; "
            "compare_set leader := node-0")

        q = mp.Queue()
        p = mp.Process(target=waiter, args=(port, q))
        p.start()
        time.sleep(0.5)
        say("  a second process is blocked in store.wait(['go']) ...")
        store.set("go", "now")
        value, waited = q.get(timeout=10)
        p.join(10)
        say("  ... released by store.set('go'): it read %r after %.2f s"
            % (value, waited))

        before = {k: store.get(k) for k in
                  ("model/name", "model/hidden", "epochs_done", "leader", "go")}
        say("  %d keys in the store: %s" % (store.num_keys(), before))

        say("kill -9 rdzvd (pid %d) ..." % proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc, port, http = start_rdzvd(work, db)
        say("rdzvd restarted on the same database, now on port %d" % port)

        store = TCPStore("127.0.0.1", port, 1, False, timeout=TIMEOUT)
        after = {k: store.get(k) for k in before}
        for k in before:
            say("  %-12s %-22r %s" % (k, after[k],
                                       "kept" if after[k] == before[k] else "LOST"))
        if after != before:
            say("FAIL part 1 (the store): keys were lost across the "
                "restart; rdzvd's log: %s/rdzvd.log" % work)
            return 1
        say("every key survived kill -9 of rdzvd.")
        say("PASS part 1: the store, across a kill -9 of rdzvd")
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as e:
        if not isinstance(e.code, str):
            raise
        say("FAIL part 1 (the store): " + e.code)
        sys.exit(1)
    except Exception as e:      # a store call failed: say so, as a verdict
        say("FAIL part 1 (the store): %s: %s" % (type(e).__name__, e))
        sys.exit(1)
