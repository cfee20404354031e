# SPDX-License-Identifier: Apache-2.0
"""native_ops: every op of the native protocol against a real rdzvd.

Each test starts its own rdzvd (memory durability, so no disk waits) on
127.0.0.1 and talks common/PROTOCOL.md through rdzvtest.NativeClient.
"""

import select
import struct
import threading
import time

import rdzvtest as rt
from rdzvtest import RdzvError


def daemon(*args):
    return rt.Rdzvd(list(args), durability="memory", db=":memory:")


def daemon_client():
    """A new rdzvd (daemon()) and a native client of it: (rdzvd, client)."""
    d = daemon()
    return d, d.native()


def expect_err(code, fn, *a, **kw):
    try:
        v = fn(*a, **kw)
    except RdzvError as e:
        assert e.code == code, "expected %s, got %s" % (
            rt.ERR_NAMES.get(code), e)
        return e
    raise AssertionError("expected %s, got a reply %r" %
                         (rt.ERR_NAMES.get(code), v))


def no_data(sock, wait):
    """True when nothing arrives on sock within wait seconds."""
    r, _, _ = select.select([sock], [], [], wait)
    return not r


def test_preamble_and_ping():
    d = daemon()
    s = d.connect()
    s.sendall(rt.nat_preamble())
    assert rt.recv_exact(s, 8) == b"RDZV\x01\0\0\0"
    c = rt.NativeClient(s, preamble=False)
    assert c.ping(b"") == b""
    assert c.ping(b"hello\0world") == b"hello\0world"
    big = bytes(range(256)) * 256
    assert c.ping(big) == big


def test_unsupported_version_refused():
    d = daemon()
    s = d.connect()
    s.sendall(b"RDZV\x63\0\0\0")
    # a preamble carrying version 0, then the connection closes
    got = rt.expect_closed(s, 5)
    assert got == b"RDZV\0\0\0\0", got


def test_set_get_delete():
    d, c = daemon_client()
    c.set("a", b"1")
    assert c.get("a") == b"1"
    c.set("a", b"\0\xff binary")
    assert c.get("a") == b"\0\xff binary"
    c.set("empty", b"")
    assert c.get("empty") == b""
    expect_err(rt.RDZV_ENOTFOUND, c.get, "missing")
    assert c.delete("a") == 1
    assert c.delete("a") == 0
    expect_err(rt.RDZV_ENOTFOUND, c.get, "a")
    # the connection survives an error reply
    assert c.ping(b"x") == b"x"
    # keys are bytes, not C strings
    c.set(b"k\0z", b"nul")
    assert c.get(b"k\0z") == b"nul"
    expect_err(rt.RDZV_ENOTFOUND, c.get, b"k")


def test_add():
    d, c = daemon_client()
    assert c.add("n", 5) == 5
    assert c.add("n", -7) == -2
    assert c.get("n") == b"-2"
    assert c.add("n", 0) == -2
    c.set("s", b"12")
    assert c.add("s", 30) == 42
    c.set("bad", b"x1")
    expect_err(rt.RDZV_ENOTINT, c.add, "bad", 1)
    assert c.get("bad") == b"x1"
    c.set("big", b"9223372036854775807")
    e = expect_err(rt.RDZV_EINVAL, c.add, "big", 1)
    assert c.get("big") == b"9223372036854775807", e


def test_cas():
    d, c = daemon_client()
    # missing key, empty expected: stored, reply desired
    assert c.cas("x", b"", b"d1") == b"d1"
    assert c.get("x") == b"d1"
    # missing key, non-empty expected: nothing stored, reply expected
    assert c.cas("y", b"e", b"d") == b"e"
    expect_err(rt.RDZV_ENOTFOUND, c.get, "y")
    # present and equal: replaced
    assert c.cas("x", b"d1", b"d2") == b"d2"
    # present and different: unchanged, reply current value
    assert c.cas("x", b"zz", b"d3") == b"d2"
    assert c.get("x") == b"d2"


def test_check_num_keys_list_keys():
    d, c = daemon_client()
    assert c.num_keys() == 0
    assert c.list_keys() == []
    assert c.check(["a"]) == 0
    c.set("a", b"1")
    c.set("b", b"2")
    assert c.check(["a"]) == 1
    assert c.check(["a", "b"]) == 1
    assert c.check(["a", "b", "c"]) == 0
    assert c.num_keys() == 2
    keys = ["k%03d" % i for i in range(100)]
    for k in keys:
        c.set(k, b"v")
    assert c.num_keys() == 102
    assert sorted(c.list_keys()) == sorted([b"a", b"b"] +
                                           [k.encode() for k in keys])
    c.delete("a")
    assert c.num_keys() == 101
    assert b"a" not in c.list_keys()


def test_append():
    d, c = daemon_client()
    c.append("log", b"ab")
    assert c.get("log") == b"ab"
    c.append("log", b"cd")
    c.append("log", b"")
    assert c.get("log") == b"abcd"


def test_multi_get_set():
    d, c = daemon_client()
    c.multi_set([("a", b"1"), ("b", b""), ("c", b"3")])
    assert c.multi_get(["c", "a", "b"]) == [b"3", b"1", b""]
    assert c.multi_get([]) == []
    expect_err(rt.RDZV_ENOTFOUND, c.multi_get, ["a", "nope"])
    pairs = {"m%d" % i: b"v%d" % i for i in range(500)}
    c.multi_set(pairs)
    assert c.multi_get(list(pairs)) == list(pairs.values())
    assert c.num_keys() == 503


def test_wait_present_and_woken():
    d, c = daemon_client()
    c.set("here", b"1")
    c.wait(["here"], 0)
    c.wait(["here"], -1)
    # woken by a set from another connection, only once all keys exist
    other = d.native()
    id = c.wait_send(["w1", "w2"], -1)
    other.set("w1", b"x")
    assert no_data(c.sock, 0.2), "wait answered with a key missing"
    other.add("w2", 1)
    assert c.reply(id, rt.OP_WAIT, timeout=5) == []
    # woken by append, multi_set
    id = c.wait_send(["ap"], 5000)
    other.append("ap", b"z")
    assert c.reply(id, rt.OP_WAIT, timeout=5) == []
    id = c.wait_send(["ms1", "ms2"], 5000)
    other.multi_set({"ms1": b"1", "ms2": b"2"})
    assert c.reply(id, rt.OP_WAIT, timeout=5) == []


def test_wait_timeout():
    d, c = daemon_client()
    t0 = time.monotonic()
    expect_err(rt.RDZV_ETIMEDOUT, c.wait, ["never"], 0)
    assert time.monotonic() - t0 < 1.0
    t0 = time.monotonic()
    expect_err(rt.RDZV_ETIMEDOUT, c.wait, ["never"], 200)
    dt = time.monotonic() - t0
    assert 0.18 <= dt < 2.0, dt
    # the timed-out wait is gone: setting the key sends nothing stray
    c.set("never", b"1")
    assert c.ping(b"p") == b"p"
    assert not c.replies and not c.pushes


def test_wait_cancel():
    d, c = daemon_client()
    wid = c.wait_send(["k"], -1)
    assert no_data(c.sock, 0.1)
    c.cancel(wid)
    f = c.reply_frame(wid, timeout=5)
    assert f.flags & rt.NAT_F_ERROR and f.fields[0] == rt.RDZV_ECANCELED, f
    # a cancelled wait never answers again
    c.set("k", b"1")
    assert c.ping(b"p") == b"p"
    assert not c.replies, c.replies
    # several pending waits: cancelling one leaves the others
    w1 = c.wait_send(["x"], -1)
    w2 = c.wait_send(["y"], -1)
    c.cancel(w1)
    f = c.reply_frame(w1, timeout=5)
    assert f.fields[0] == rt.RDZV_ECANCELED
    c.set("y", b"1")
    assert c.reply(w2, rt.OP_WAIT, timeout=5) == []


def test_waits_of_closed_connection_dropped():
    d, c = daemon_client()
    w = d.native()
    w.wait_send(["gone"], -1)
    w.queue_pop_send("q", -1)
    rt.wait_until(lambda: d.metric("rdzvd_waiters") >= 2, 5, what="waiters")
    w.close()
    rt.wait_until(lambda: d.metric("rdzvd_waiters") == 0, 5,
                  what="waiters released")
    # the dead popper must not swallow an item
    c.queue_push("q", b"item")
    assert c.queue_pop("q", 0) == b"item"
    c.set("gone", b"1")
    assert c.ping(b"ok") == b"ok"


def test_queue_ops():
    d, c = daemon_client()
    assert c.queue_len("q") == 0
    expect_err(rt.RDZV_ETIMEDOUT, c.queue_pop, "q", 0)
    for i in range(10):
        c.queue_push("q", b"item%d" % i)
    assert c.queue_len("q") == 10
    assert [c.queue_pop("q", 0) for _ in range(10)] == \
        [b"item%d" % i for i in range(10)]
    assert c.queue_len("q") == 0
    c.queue_push("q", b"")
    assert c.queue_pop("q", 0) == b""
    # queues are not keys
    c.queue_push("q2", b"x")
    assert c.num_keys() == 0
    expect_err(rt.RDZV_ENOTFOUND, c.get, "q2")


def test_queue_pop_timeout():
    d, c = daemon_client()
    t0 = time.monotonic()
    expect_err(rt.RDZV_ETIMEDOUT, c.queue_pop, "q", 200)
    dt = time.monotonic() - t0
    assert 0.18 <= dt < 2.0, dt
    # a timed-out pop does not eat the next push
    c.queue_push("q", b"a")
    assert c.queue_len("q") == 1
    assert c.queue_pop("q", 0) == b"a"


def test_queue_pop_woken_by_push():
    d = daemon()
    popper = d.native()
    pusher = d.native()
    pid = popper.queue_pop_send("jobs", -1)
    assert no_data(popper.sock, 0.2)
    t0 = time.monotonic()
    pusher.queue_push("jobs", b"work")
    assert popper.reply(pid, rt.OP_QUEUE_POP, timeout=5) == [b"work"]
    assert time.monotonic() - t0 < 1.0
    assert pusher.queue_len("jobs") == 0
    # two poppers, two pushes: each gets one item, first come first served
    p2 = d.native()
    a = popper.queue_pop_send("jobs", 5000)
    time.sleep(0.05)
    b = p2.queue_pop_send("jobs", 5000)
    time.sleep(0.05)
    pusher.queue_push("jobs", b"one")
    assert popper.reply(a, rt.OP_QUEUE_POP, timeout=5) == [b"one"]
    assert no_data(p2.sock, 0.1)
    pusher.queue_push("jobs", b"two")
    assert p2.reply(b, rt.OP_QUEUE_POP, timeout=5) == [b"two"]
    # cancel a blocking pop
    x = popper.queue_pop_send("jobs", -1)
    popper.cancel(x)
    f = popper.reply_frame(x, timeout=5)
    assert f.flags & rt.NAT_F_ERROR and f.fields[0] == rt.RDZV_ECANCELED


def test_barrier():
    d = daemon()
    n = 6
    cs = [d.native() for _ in range(n)]
    ids = [c.barrier_send("bar", n, -1) for c in cs[:-1]]
    for c in cs[:-1]:
        assert no_data(c.sock, 0.05), "barrier released early"
    t0 = time.monotonic()
    cs[-1].barrier("bar", n, -1, timeout=5)
    for c, i in zip(cs, ids):
        assert c.reply(i, rt.OP_BARRIER, timeout=5) == []
    assert time.monotonic() - t0 < 1.0
    # a barrier that cannot complete times out
    expect_err(rt.RDZV_ETIMEDOUT, cs[0].barrier, "bar2", 3, 150)


def test_watch_pushes():
    d = daemon()
    w = d.native()
    m = d.native()
    w.watch("cfg")
    m.set("cfg", b"v1")
    assert w.next_event() == (b"", b"cfg", rt.WATCH_CREATED, b"", b"v1")
    m.set("cfg", b"v2")
    assert w.next_event() == (b"", b"cfg", rt.WATCH_UPDATED, b"v1", b"v2")
    m.append("cfg", b"+")
    assert w.next_event() == (b"", b"cfg", rt.WATCH_UPDATED, b"v2", b"v2+")
    m.delete("cfg")
    assert w.next_event() == (b"", b"cfg", rt.WATCH_DELETED, b"v2+", b"")
    m.set("other", b"x")
    m.add("cfg", 3)
    assert w.next_event() == (b"", b"cfg", rt.WATCH_CREATED, b"", b"3")
    # a watch in a namespace reports that namespace, and the watcher's
    # connection keeps serving requests between pushes
    w.watch("k", ns=b"job1")
    m.set("k", b"root")                 # another namespace: no push
    m.set("k", b"in-ns", ns=b"job1")
    assert w.ping(b"still") == b"still"
    assert w.next_event() == (b"job1", b"k", rt.WATCH_CREATED, b"", b"in-ns")
    assert not w.pushes and no_data(w.sock, 0.1)


def test_namespaces_isolate():
    d = daemon()
    a = d.native(ns=b"jobA")
    b = d.native(ns=b"jobB")
    root = d.native()
    a.set("k", b"A")
    b.set("k", b"B")
    assert a.get("k") == b"A"
    assert b.get("k") == b"B"
    expect_err(rt.RDZV_ENOTFOUND, root.get, "k")
    assert a.num_keys() == 1 and b.num_keys() == 1 and root.num_keys() == 0
    assert a.list_keys() == [b"k"]
    assert a.add("n", 1) == 1 and b.add("n", 10) == 10
    assert a.check(["n"]) == 1 and root.check(["n"]) == 0
    a.queue_push("q", b"a")
    assert b.queue_len("q") == 0 and a.queue_len("q") == 1
    # a wait in one namespace is not woken by another
    wid = root.wait_send(["k"], -1)
    assert no_data(root.sock, 0.1)
    root.set("k", b"root")
    assert root.reply(wid, rt.OP_WAIT, timeout=5) == []
    # a namespace that is a prefix of another is distinct
    ab = d.native(ns=b"job")
    expect_err(rt.RDZV_ENOTFOUND, ab.get, "Ak")
    expect_err(rt.RDZV_ENOTFOUND, ab.get, "k")
    # the empty namespace is the one TCPStore clients see
    t = d.tcps113()
    assert t.get(b"k") == b"root"
    t.set(b"fromtcp", b"1")
    assert t.get(b"fromtcp") == b"1"      # SET has no reply: ordered here
    assert root.get("fromtcp") == b"1"
    expect_err(rt.RDZV_ENOTFOUND, a.get, "fromtcp")


def test_pipelined_requests():
    d, c = daemon_client()
    # one segment carrying many requests; replies matched by id
    frames = []
    ids = []
    for i in range(50):
        ids.append(c.next_id)
        frames.append(rt.nat_frame(rt.OP_ADD, rt.nat_fields(b"", b"ctr", 1),
                                   0, c.next_id))
        c.next_id += 1
    c.sock.sendall(b"".join(frames))
    got = sorted(c.reply(i, rt.OP_ADD)[0] for i in ids)
    assert got == list(range(1, 51)), got
    # a pending wait does not hold up later requests on the connection
    wid = c.wait_send(["later"], -1)
    assert c.ping(b"p") == b"p"
    c.set("later", b"1")
    assert c.reply(wid, rt.OP_WAIT, timeout=5) == []


def test_reply_header_fields():
    d = daemon()
    s = d.connect()
    s.sendall(rt.nat_preamble())
    rt.recv_exact(s, 8)
    s.sendall(rt.nat_frame(rt.OP_SET, rt.nat_fields(b"", b"k", b"v"), 0,
                           0xDEADBEEF))
    n, op, flags, id = struct.unpack("<IHHI", rt.recv_exact(s, 12))
    assert (n, op, flags, id) == (8, rt.OP_SET, rt.NAT_F_REPLY, 0xDEADBEEF)
    s.sendall(rt.nat_frame(rt.OP_GET, rt.nat_fields(b"", b"none"), 0, 7))
    n, op, flags, id = struct.unpack("<IHHI", rt.recv_exact(s, 12))
    assert op == rt.OP_GET and id == 7
    assert flags == rt.NAT_F_REPLY | rt.NAT_F_ERROR, flags
    body = rt.nat_parse_fields(rt.recv_exact(s, n - 8))
    assert body[0] == rt.RDZV_ENOTFOUND and isinstance(body[1], bytes), body


def test_concurrent_adds():
    d = daemon()
    n_threads, n_ops = 8, 200
    errs = []

    def worker():
        try:
            c = d.native()
            for _ in range(n_ops):
                c.add("ctr", 1)
        except Exception as e:      # reported below
            errs.append(e)

    ts = [threading.Thread(target=worker) for _ in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not errs, errs
    assert d.native().get("ctr") == b"%d" % (n_threads * n_ops)


if __name__ == "__main__":
    rt.main(globals(), per_test=30, total=120)
