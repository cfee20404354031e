# SPDX-License-Identifier: Apache-2.0
"""test_store_semantics: what PyTorch's own store tests (its
test/distributed/test_store.py, TCPStoreTest and StoreTestBase) expect of
a TCPStore server, held by rdzvd under torch 1.13 AND torch 2.13.

The file runs under TORCH_PYTHON (1.13), then re-runs itself under
TORCH2_PYTHON (2.13) in a child; both must pass.  Each check runs against
rdzvd's main port and, to validate the check itself, against that torch's
own TCPStore server.  Covered: num_keys counting the "init/" key of a
store made with a world_size, delete_key and a GET of a deleted key
timing out, add/set/get, compare_set on a missing key (expected non-empty
is echoed, nothing stored; empty creates), a wait timeout's exception type
and message, the multi-worker helper (fixed and open world size), and in
2.x append, multi_get/multi_set, queues (blocking, non-blocking, between
two threads through clone()) and the queue timeout's error.
"""

import datetime
import os
import subprocess
import sys
import threading

import rdzvtest
import compatlib as cl
from compatlib import check, log

INNER = os.environ.get("RDZV_STORE_SEM_INNER") == "1"
dist = cl.require_torch()
import torch  # noqa: E402  (after the check that it imports)

V2 = int(torch.__version__.split(".")[0]) >= 2
td = datetime.timedelta
HOST = "127.0.0.1"


def client(port, world_size=None, timeout=10.0):
    return dist.TCPStore(HOST, port, world_size, False, td(seconds=timeout))


def raises(fn, etype, pattern, what):
    """fn() must raise etype whose message matches pattern (a substring,
    case-insensitive); returns the message."""
    try:
        fn()
    except etype as e:
        msg = str(e).split("\n")[0]
        check(pattern.lower() in msg.lower(), "%s: %s message %r lacks %r"
            % (what, type(e).__name__, msg, pattern))
        return "%s: %s" % (type(e).__name__, msg)
    except Exception as e:
        raise AssertionError("%s raised %s (%s), want %s" % (what,
            type(e).__name__, e, etype.__name__))
    raise AssertionError("%s did not raise" % what)


def numkeys_delkeys(port):
    fs = client(port, world_size=1)
    # The init key a store made with a world_size coordinates with.
    check(fs.num_keys() == 1, "num_keys with init/: %d" % fs.num_keys())
    fs.add("key", 1)
    fs.add("key", 2)
    fs.add("key", 3)
    fs.set("key0", "value0")
    fs.add("key3", 1)
    fs.set("key1", "value1")
    check(fs.num_keys() == 5, "num_keys 5: %d" % fs.num_keys())
    check(fs.get("key") == b"6", "key %r" % fs.get("key"))
    fs.delete_key("key")
    check(fs.num_keys() == 4, "num_keys 4: %d" % fs.num_keys())
    fs.set_timeout(td(seconds=1))
    raises(lambda: fs.get("key"), RuntimeError, "timeout",
        "get of a deleted key")
    fs.delete_key("key0")
    fs.delete_key("key3")
    check(fs.num_keys() == 2, "num_keys 2: %d" % fs.num_keys())
    fs.set("key4", "value2")
    check(fs.num_keys() == 3, "num_keys 3: %d" % fs.num_keys())
    check(fs.get("key1") == b"value1" and fs.get("key4") == b"value2",
        "values after deletes")


def compare_set(port):
    s = client(port)
    n = s.num_keys()
    r = s.compare_set("cs_key0", "wrong_old_value", "new_value0")
    check(r == b"wrong_old_value", "cas on missing key: %r" % r)
    check(s.num_keys() == n, "cas on a missing key stored it")
    s.set("cs_key0", "value0")
    check(s.compare_set("cs_key0", "wrong_old_value", "x") == b"value0",
        "cas mismatch")
    check(s.compare_set("cs_key0", "value0", "new_value0") ==
        b"new_value0", "cas match")
    check(s.get("cs_key0") == b"new_value0", "cas stored")
    r = s.compare_set("cs_key1", "", "new_value1")
    check(r == b"new_value1" and s.get("cs_key1") == b"new_value1",
        "cas with empty expected creates: %r" % r)


def wait_timeout(port):
    s = client(port)
    etype = dist.DistStoreError if V2 else RuntimeError
    m = raises(lambda: s.wait(["never_set"], td(milliseconds=200)), etype,
        "timeout", "wait with a timeout")
    # The client is still in step after the timeout.
    s.set("after", "1")
    check(s.get("after") == b"1", "get after a wait timeout")
    return m


def multi_worker(port, world_size):
    server = client(port, world_size=world_size)
    server.set("key", "value")
    for i in range(world_size if world_size else 1):
        c = client(port, world_size=world_size)
        check(c.get("key") == b"value", "worker %d get" % i)
        c.set("new_key%d" % i, "new_value%d" % i)
        r = c.compare_set("new_key%d" % i, "new_value%d" % i,
            "next_value%d" % i)
        check(r == ("next_value%d" % i).encode(), "worker %d cas %r" %
            (i, r))


def extended(port):
    s = client(port)
    check(s.has_extended_api(), "2.x TCPStore without the extended API")
    s.set("foo", "po")
    s.append("foo", "tato")
    s.append("bar", "po")
    s.append("bar", "tato")
    check(s.get("foo") == b"potato" and s.get("bar") == b"potato", "append")
    s.multi_set(["mfoo", "mbar"], ["po", "tato"])
    check(s.multi_get(["mfoo", "mbar"]) == [b"po", b"tato"], "multi")
    check(not s.check(["qfoo"]) and s.queue_len("qfoo") == 0, "empty q")
    s.queue_push("qfoo", "1")
    s.queue_push("qfoo", "2")
    check(s.check(["qfoo"]) and s.queue_len("qfoo") == 2, "queue of 2")
    s.wait(["qfoo"])
    check(s.queue_pop("qfoo") == b"1" and s.queue_pop("qfoo") == b"2",
        "queue order")
    check(not s.check(["qfoo"]) and s.queue_len("qfoo") == 0, "drained")
    raises(lambda: s.queue_pop("qnb", block=False), dist.QueueEmptyError,
        "empty", "non-blocking pop of an empty queue")
    s.queue_push("qnb", "a")
    check(s.queue_pop("qnb", block=False) == b"a", "non-blocking pop")
    # Bidirectional, two threads on clones.
    errs = []

    def worker(push, pop, item, want):
        try:
            ls = s.clone()
            if push == "a":
                ls.queue_push(push, item)
                got = ls.queue_pop(pop)
            else:
                got = ls.queue_pop(pop)
                ls.queue_push(push, item)
            check(got == want, "%s popped %r" % (pop, got))
        except Exception as e:
            errs.append(e)
    ts = [threading.Thread(target=worker, args=("a", "b", "a1", b"b1")),
        threading.Thread(target=worker, args=("b", "a", "b1", b"a1"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    check(not errs and not any(t.is_alive() for t in ts),
        "bidirectional queues: %r" % errs)
    s.set_timeout(td(milliseconds=10))
    raises(lambda: s.queue_pop("non_existant"), dist.DistStoreError,
        "timeout", "blocking pop timeout")


CHECKS = [("numkeys_delkeys", numkeys_delkeys),
    ("compare_set", compare_set), ("wait_timeout", wait_timeout),
    ("multi_worker fixed", lambda p: multi_worker(p, 5)),
    ("multi_worker open", lambda p: multi_worker(p, None))]
if V2:
    CHECKS.append(("extended and queues", extended))


def run_against(kind):
    """Each check on a fresh store of its own (they count keys)."""
    msgs = []
    for name, fn in CHECKS:
        if kind == "torch":
            srv = rdzvtest.TorchServer(python=sys.executable)
        else:
            srv = cl.RdzvdServer()
        try:
            r = fn(srv.port)
            if r:
                msgs.append(r)
            log("torch %s, %s: %s ok" % (torch.__version__, kind, name))
        finally:
            srv.stop()
    return msgs


def test_torch_server():
    """The checks hold against torch's own server (they are right)."""
    state["torch"] = run_against("torch")


@rdzvtest.needs("test_torch_server")
def test_rdzvd():
    msgs = run_against("rdzvd")
    log("wait timeout: torch %r, rdzvd %r" % (state["torch"], msgs))
    # Type and message are the client's own, so they must be equal.
    check(msgs == state["torch"], "wait timeout error %r, torch's "
        "server gives %r" % (msgs, state["torch"]))


def test_torch2():
    """The same file under torch 2.13 (skipped when already there)."""
    if INNER or V2:
        raise rdzvtest.Skip("this run is the torch 2.x one")
    if not os.access(cl.TORCH2_PY, os.X_OK):
        cl._no_torch("no torch 2.x python at %s" % cl.TORCH2_PY)
    env = dict(os.environ, RDZV_STORE_SEM_INNER="1")
    p = rdzvtest.spawn([cl.TORCH2_PY, os.path.abspath(__file__)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = p.communicate(timeout=150)
    for line in out.decode(errors="replace").splitlines():
        if not line.startswith("[W") and not line.startswith("frame #"):
            print("  2.x| " + line)
    check(p.returncode == 0, "torch 2.x run failed (%d)" % p.returncode)


state = {}

if __name__ == "__main__":
    rdzvtest.main(globals(), per_test=170, total=280, sections=True)
