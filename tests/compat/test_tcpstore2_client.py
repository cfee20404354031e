# SPDX-License-Identifier: Apache-2.0
"""test_tcpstore2_client: torch 2.13's TCPStore client, side by side.

Every call of the 2.13 Python TCPStore API (the list is checked against
dir(TCPStore), so a torch with more fails here until it is covered) runs
against three servers: torch 2.13's own TCPStore server (libuv, its
default), rdzvd's main port, and the TCPStore port rdzvd opens for a
running rendezvous round.  Each call's outcome (the value, or the type of
the exception) must be the same on all three; the values torch's server
gives are also asserted outright, so agreeing on a wrong answer fails too.

Covered differences that rdzvd had: several blocking queue_pop consumers
(a push must wake one, not make the others raise QueueEmptyError), and ADD
on a value torch's std::stoll reads (" 5", "+5", "5x").
"""

import datetime
import os
import threading
import time

import rdzvtest
import compatlib as cl
from compatlib import check, log

dist = cl.use_torch2()
td = datetime.timedelta
HOST = "127.0.0.1"
OP_JOIN, OP_ROUND = 21, 26

API = {"add", "append", "barrier", "check", "clone", "compare_set",
    "delete_key", "get", "has_extended_api", "host", "libuvBackend",
    "list_keys", "multi_get", "multi_set", "num_keys", "port", "queue_len",
    "queue_pop", "queue_push", "set", "set_timeout", "timeout", "wait"}


def client(port, timeout=10.0):
    return dist.TCPStore(HOST, port, None, False, td(seconds=timeout))


def outcome(fn):
    """("ok", value) or ("raise", exception type name)."""
    try:
        return ("ok", fn())
    except Exception as e:	# the type is what is compared
        return ("raise", type(e).__name__)


def scenario(port):
    """Runs every API call against one server; returns [(what, outcome)]
    in order.  The store must be fresh (no keys)."""
    out = []
    c = client(port)

    def rec(what, fn):
        r = outcome(fn)
        out.append((what, r))
        return r

    api = {x for x in dir(c) if not x.startswith("_")}
    check(api == API, "TCPStore API %r, this test covers %r" %
        (sorted(api), sorted(API)))
    rec("host/port", lambda: (c.host == HOST, c.port == port))
    rec("timeout", lambda: c.timeout)
    rec("has_extended_api", c.has_extended_api)
    rec("num_keys fresh", c.num_keys)
    rec("set", lambda: c.set("k1", "v1"))
    rec("get", lambda: c.get("k1"))
    rec("set binary", lambda: c.set("bin\x00\xff", bytes(range(256))))
    rec("get binary", lambda: c.get("bin\x00\xff"))
    rec("add new", lambda: c.add("ctr", 5))
    rec("add neg", lambda: c.add("ctr", -7))
    rec("get ctr", lambda: c.get("ctr"))
    # std::stoll's reading of a stored value: blanks, a sign, garbage
    # after the digits.
    for v in (" 5", "+5", "5x", "\t-5 ", "007"):
        rec("add on %r" % v, lambda v=v: (c.set("lax", v),
            c.add("lax", 1), c.get("lax")))
    rec("cas missing, expected set", lambda: c.compare_set("cas", "x",
        "y"))
    rec("check cas", lambda: c.check(["cas"]))
    rec("cas missing, expected empty", lambda: c.compare_set("cas", "",
        "first"))
    rec("cas mismatch", lambda: c.compare_set("cas", "no", "second"))
    rec("cas match", lambda: c.compare_set("cas", "first", "second"))
    rec("check", lambda: (c.check(["k1", "cas"]), c.check(["k1", "nope"])))
    rec("num_keys", c.num_keys)
    rec("delete_key", lambda: (c.delete_key("k1"), c.delete_key("k1")))
    rec("append", lambda: (c.append("ap", "a"), c.append("ap", "bc"),
        c.get("ap")))
    rec("multi_set", lambda: c.multi_set(["m1", "m2"], ["1", b"\x00"]))
    rec("multi_get", lambda: c.multi_get(["m1", "m2", "ap"]))
    rec("list_keys", lambda: sorted(c.list_keys()))
    rec("num_keys again", c.num_keys)
    rec("wait present", lambda: c.wait(["m1", "m2"]))
    t0 = time.monotonic()
    rec("wait timeout", lambda: c.wait(["never"], td(milliseconds=300)))
    dt = time.monotonic() - t0
    check(dt < 8, "wait with a 0.3 s timeout took %.1f s" % dt)
    # After the cancelled wait the connection is in step.
    rec("after timeout", lambda: (c.get("m1"), c.num_keys()))
    c.set_timeout(td(milliseconds=300))
    rec("get missing", lambda: c.get("missing"))
    rec("multi_get missing", lambda: c.multi_get(["m1", "missing"]))
    c.set_timeout(td(seconds=10))
    rec("queue_len empty", lambda: c.queue_len("q"))
    rec("queue_pop nonblocking empty", lambda: c.queue_pop("q", False))
    rec("queue_push", lambda: (c.queue_push("q", "a"),
        c.queue_push("q", b"b\x00"), c.queue_len("q")))
    rec("queue is not a key", lambda: (c.num_keys(), c.check(["q"])))
    rec("queue_pop", lambda: (c.queue_pop("q"), c.queue_pop("q", False),
        c.queue_len("q")))
    c.set_timeout(td(milliseconds=300))
    rec("queue_pop blocking empty", lambda: c.queue_pop("q"))
    c.set_timeout(td(seconds=10))
    rec("after pop timeout", lambda: c.get("m1"))
    rec("barrier of 1", lambda: c.barrier("bar1", 1))
    rec("barrier timeout", lambda: c.barrier("bar2", 2,
        td(milliseconds=300)))
    c2 = c.clone()
    rec("clone", lambda: (c2.get("m1"), c2.port == port))
    # A barrier of 2 released by the second participant.
    res = {}
    t = threading.Thread(target=lambda: res.update(a=outcome(
        lambda: c2.barrier("bar3", 2, td(seconds=20)))))
    t.start()
    rec("barrier of 2", lambda: c.barrier("bar3", 2, td(seconds=20)))
    t.join(30)
    out.append(("barrier of 2, other", res.get("a")))
    # A value std::stoll cannot read: the server drops the client.
    rec("add on text", lambda: (c.set("txt", "abc"), c.add("txt", 1)))
    c = client(port)
    rec("reconnected", lambda: c.get("txt"))
    return out


def consumers(port):
    """Two blocking queue_pop consumers on two connections, then two
    pushes: each push must wake one, and both get an item."""
    got = {}
    cs = [client(port, 20) for _ in range(2)]
    ts = []
    for i, cc in enumerate(cs):
        t = threading.Thread(target=lambda i=i, cc=cc: got.update({
            i: outcome(lambda: cc.queue_pop("mq"))}))
        t.start()
        ts.append(t)
    p = client(port)
    # Both consumers have sent their WAIT once neither connection is
    # idle; there is no way to see that from here, so allow a moment and
    # accept either order of arrival.
    time.sleep(1.0)
    p.queue_push("mq", "one")
    rdzvtest.wait_until(lambda: len(got) >= 1, 20, what="first consumer")
    time.sleep(0.5)
    first = dict(got)
    p.queue_push("mq", "two")
    for t in ts:
        t.join(30)
    return first, got


def round_port(srv):
    """Joins a one-node job through the native protocol; returns the
    TCPStore port of its running round."""
    n = srv.d.native()
    n.call(OP_JOIN, "store2", os.urandom(8).hex(), "h", HOST, os.getpid(),
        1, 1, 1, 0, 200, 600000)
    f = n.next_push(20)
    check(f.op == OP_ROUND, "expected a ROUND push, got %r" % (f,))
    port = f.fields[11]
    check(port > 0, "round has no store port: %r" % (f.fields,))
    return n, port


state = {}


def test_servers():
    state["torch"] = rdzvtest.TorchServer(python=cl.TORCH2_PY,
        backend="libuv")
    state["rdzvd"] = cl.RdzvdServer()
    state["native"], state["round"] = round_port(state["rdzvd"])
    log("torch %d, rdzvd %d, round %d" % (state["torch"].port,
        state["rdzvd"].port, state["round"]))
    check(state["round"] != state["rdzvd"].port, "round port is the main")


@rdzvtest.needs("test_servers")
def test_side_by_side():
    ref = scenario(state["torch"].port)
    d = dict(ref)
    # torch's own answers, asserted outright.
    want = {
        "num_keys fresh": ("ok", 0),
        "get": ("ok", b"v1"),
        "add neg": ("ok", -2),
        "add on ' 5'": ("ok", (None, 6, b"6")),
        "add on '+5'": ("ok", (None, 6, b"6")),
        "add on '5x'": ("ok", (None, 6, b"6")),
        "add on '\\t-5 '": ("ok", (None, -4, b"-4")),
        "cas missing, expected set": ("ok", b"x"),
        "check cas": ("ok", False),
        "cas missing, expected empty": ("ok", b"first"),
        "cas mismatch": ("ok", b"first"),
        "cas match": ("ok", b"second"),
        "delete_key": ("ok", (True, False)),
        "append": ("ok", (None, None, b"abc")),
        "multi_get": ("ok", [b"1", b"\x00", b"abc"]),
        "wait timeout": ("raise", "DistStoreError"),
        "get missing": ("raise", "DistStoreError"),
        "queue_pop nonblocking empty": ("raise", "QueueEmptyError"),
        "queue_push": ("ok", (None, None, 2)),
        "queue_pop": ("ok", (b"a", b"b\x00", 0)),
        "barrier of 1": ("ok", None),
        "barrier of 2": ("ok", None),
        "barrier of 2, other": ("ok", None),
    }
    for k, v in want.items():
        check(d.get(k) == v, "torch's server: %s gave %r, this test "
            "expects %r" % (k, d.get(k), v))
    for name, port in (("rdzvd main port", state["rdzvd"].port),
        ("rdzvd round port", state["round"])):
        got = scenario(port)
        diff = [(w, r, g) for (w, r), (_, g) in zip(ref, got) if r != g]
        for w, r, g in diff:
            log("%s: %s: torch %r, rdzvd %r" % (name, w, r, g))
        check(not diff and len(got) == len(ref), "%s differs from "
            "torch's server in %d calls (first: %r)" % (name, len(diff),
            diff[:1]))
        log("%s: %d calls, same as torch's server" % (name, len(got)))


@rdzvtest.needs("test_servers")
def test_blocking_pop_consumers():
    for name, port in (("torch", state["torch"].port),
        ("rdzvd", state["rdzvd"].port), ("rdzvd round", state["round"])):
        first, got = consumers(port)
        log("%s: after one push %r, after two %r" % (name, first, got))
        check(len(first) == 1 and list(first.values())[0] ==
            ("ok", b"one"), "%s: one push woke %r" % (name, first))
        check(sorted(got.values()) == [("ok", b"one"), ("ok", b"two")],
            "%s: two consumers got %r" % (name, got))


if __name__ == "__main__":
    rdzvtest.main(globals(), per_test=90, total=200, sections=True,
        server=lambda: state.get("rdzvd"))
