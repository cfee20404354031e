# SPDX-License-Identifier: Apache-2.0
"""test_tcpstore_client: torch 1.13's own TCPStore client against rdzvd.

Drives every operation the 1.13 Python Store API exposes (set, get, add,
compare_set, wait with and without a timeout, delete_key, num_keys,
set_timeout, timeout, host, port) plus PrefixStore over it, binary and
4 MiB values, the world_size "init/" counter from several processes, and a
wait in one process released by a set in another.  What the Python API
hides (CHECK, WATCH_KEY, the unprefixed "init/" key, GET of a missing key,
a malformed request) is sent byte for byte by compatlib.Raw113.  Against
rdzvd, /metrics must move by exactly the operations sent.

RDZV_COMPAT_SERVER=torch runs the same assertions (minus metrics) against
torch's own TCPStore server, which is how this test was validated.
"""

import datetime
import os
import subprocess
import time

import rdzvtest
import compatlib as cl
from compatlib import check, log

dist = cl.require_torch()
td = datetime.timedelta
HOST = "127.0.0.1"

OPS = ("set", "get", "add", "compare_set", "wait", "check", "delete",
    "num_keys", "watch")


def client(port, timeout=10.0, world_size=None):
    return dist.TCPStore(HOST, port, world_size, False, td(seconds=timeout))


class Counters:
    """Snapshot of rdzvd's op counters, to assert exact deltas."""

    def __init__(self, srv):
        self.srv = srv
        self.base = self.read()

    def read(self):
        if not self.srv.has_metrics:
            return None
        m = self.srv.metrics()
        out = {}
        for op in OPS:
            v = rdzvtest.metric_value(m, "rdzvd_ops_total", None, op=op)
            check(v is not None, "rdzvd_ops_total{op=%s} missing" % op)
            out[op] = v
        return out

    def expect(self, what, **delta):
        """ops_total moved by exactly delta (others by 0) since the last
        call."""
        if not self.srv.has_metrics:
            return
        now = self.read()
        got = {op: int(now[op] - self.base[op]) for op in OPS}
        want = {op: delta.get(op, 0) for op in OPS}
        check(got == want, "%s: rdzvd_ops_total moved by %s, want %s" %
            (what, got, want))
        self.base = now


def gauge(srv, name, **labels):
    return srv.metric(name, **labels)


def timed_raise(fn, lo, hi, what):
    """fn() must raise RuntimeError after at least lo and at most hi s."""
    t = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        dt = time.monotonic() - t
        check(lo <= dt <= hi, "%s raised after %.2f s, want %.1f..%.1f s (%s)"
            % (what, dt, lo, hi, e))
        log("%s raised after %.2f s: %s" % (what, dt, e))
        return
    raise AssertionError("%s returned after %.2f s instead of raising" %
        (what, time.monotonic() - t))


def run_basic(srv, ctr):
    c = client(srv.port)
    check(c.host == HOST and c.port == srv.port,
        "host/port %r:%r" % (c.host, c.port))
    check(c.timeout == td(seconds=10), "timeout %r" % c.timeout)
    # Every public member of torch 1.13's TCPStore is exercised by this
    # file; a torch with more would need more tests.
    api = {x for x in dir(c) if not x.startswith("_")}
    covered = {"add", "compare_set", "delete_key", "get", "host",
        "num_keys", "port", "set", "set_timeout", "timeout", "wait"}
    check(api == covered, "TCPStore API %r, this test covers %r" %
        (sorted(api), sorted(covered)))
    n0 = c.num_keys()
    check(n0 == 0, "fresh store has %d keys" % n0)

    c.set("k1", "v1")
    check(c.get("k1") == b"v1", "get k1")
    c.set("k1", "v1-overwritten")
    check(c.get("k1") == b"v1-overwritten", "overwrite k1")
    c.set("empty", "")
    check(c.get("empty") == b"", "empty value")
    # NUL bytes and every other byte value, in key and value.
    binval = bytes(range(256)) * 3 + b"\x00\x00"
    c.set("bin\x00key\xff", binval)
    check(c.get("bin\x00key\xff") == binval, "binary value round trip")
    c.set("uni/ключ", "värde")
    check(c.get("uni/ключ") == "värde".encode(), "utf-8 key and value")
    nk = c.num_keys()
    check(nk == 4, "num_keys after 4 distinct keys: %d" % nk)
    # each get() is a WAIT then a GET on the wire
    ctr.expect("set/get", set=5, get=5, wait=5, num_keys=2)

    check(c.add("ctr", 5) == 5, "add to a missing key starts at 0")
    check(c.add("ctr", -7) == -2, "add negative")
    check(c.add("ctr", 0) == -2, "add 0 reads")
    v = c.get("ctr")
    check(v == b"-2", "counter is stored as decimal text: %r" % v)
    check(c.add("big", 2 ** 62) == 2 ** 62, "add 2^62")
    check(c.add("big", 2 ** 62 - 1) == 2 ** 63 - 1, "add up to int64 max")
    c.set("preset", "41")
    check(c.add("preset", 1) == 42, "add to a value set as text")
    ctr.expect("add", add=6, set=1, get=1, wait=1)

    # compare_set: the 1.13 reference semantics, all four cases.
    check(c.compare_set("cas", "x", "y") == b"x",
        "cas missing key, expected non-empty: replies expected")
    nk = c.num_keys()
    check(nk == 7, "that cas stored nothing (%d keys)" % nk)
    check(c.compare_set("cas", "", "first") == b"first",
        "cas missing key, expected empty: creates")
    check(c.compare_set("cas", "wrong", "second") == b"first",
        "cas mismatch: replies current")
    check(c.compare_set("cas", "first", "second") == b"second",
        "cas match: replaces")
    check(c.get("cas") == b"second", "cas value stored")
    check(c.compare_set("cas", "second", binval) == binval, "cas binary")
    ctr.expect("compare_set", compare_set=5, num_keys=1, get=1, wait=1)

    # wait on present keys answers at once, with and without a timeout.
    t = time.monotonic()
    c.wait(["k1"])
    c.wait(["k1", "ctr", "cas"], td(seconds=5))
    check(time.monotonic() - t < 1.0, "wait on present keys took %.2f s" %
        (time.monotonic() - t))
    ctr.expect("wait present", wait=2)

    check(c.delete_key("k1") is True, "delete present -> True")
    check(c.delete_key("k1") is False, "delete again -> False")
    check(c.delete_key("never") is False, "delete missing -> False")
    nk = c.num_keys()
    check(nk == 7, "num_keys after delete: %d" % nk)
    c.set("k1", "back")
    check(c.get("k1") == b"back", "recreate after delete")
    ctr.expect("delete", delete=3, num_keys=1, set=1, get=1, wait=1)

    if srv.has_metrics:
        nk = c.num_keys()
        g = gauge(srv, "rdzvd_keys")
        check(g == nk, "rdzvd_keys %s != num_keys %d" % (g, nk))
        check(gauge(srv, "rdzvd_connections", dialect="tcpstore113") >= 1,
            "rdzvd_connections{tcpstore113} < 1 with a client open")
        ctr.expect("num_keys for gauge", num_keys=1)
    return c


def run_raw(srv, c, ctr):
    """What the 1.13 Python API does not expose, sent byte for byte."""
    r = srv.raw()
    check(r.check([b"/k1"]) == 0, "CHECK present key -> READY")
    check(r.check([b"/k1", b"/ctr", b"/cas"]) == 0, "CHECK 3 present")
    check(r.check([b"/k1", b"/absent"]) == 1, "CHECK with one absent -> "
        "NOT_READY")
    check(r.check([b"k1"]) == 1, "CHECK unprefixed name is another key")
    check(r.get(b"/k1") == b"back", "raw GET sees the Python client's key")
    a, b = r.num_keys(), c.num_keys()
    check(a == b, "raw and python num_keys disagree: %d vs %d" % (a, b))
    ctr.expect("raw check", check=4, get=1, num_keys=2)

    # WATCH_KEY (1.13's callback channel): registered, then a push per
    # change with old and new values.
    w = srv.raw()
    check(w.watch_key(b"/watched") == 3, "WATCH_KEY registered reply")
    c.set("watched", "w1")
    ev = w.read_watch_event()
    check(ev == (1, b"/watched", b"", b"w1"), "watch CREATED event %r" % (ev,))
    c.set("watched", "w2")
    ev = w.read_watch_event()
    check(ev == (0, b"/watched", b"w1", b"w2"), "watch UPDATED event %r" %
        (ev,))
    check(c.delete_key("watched"), "delete watched")
    ev = w.read_watch_event()
    check(ev == (2, b"/watched", b"w2", b""), "watch DELETED event %r" % (ev,))
    c.set("unwatched", "x")
    check(rdzvtest.still_open(w.sock, 0.3), "watch connection closed")
    w.close()
    ctr.expect("watch", watch=1, set=3, delete=1)

    # GET of a missing key: the connection is closed, nobody else hurt.
    # (Whether rdzvd counts the failed GET as an op is its business, so
    # the counters are re-read after the bad clients.)
    g = srv.raw()
    g.send_raw(rdzvtest.enc113("get", b"/no-such-key"))
    rdzvtest.expect_closed(g.sock, 5)
    g.close()
    # A malformed request (unknown query type): closed, counted.
    bad = srv.raw()
    m0 = srv.metrics() if srv.has_metrics else None
    bad.send_raw(bytes([0x7f]) + b"\x00" * 16)
    rdzvtest.expect_closed(bad.sock, 5)
    bad.close()
    if srv.has_metrics:
        ctr.base = ctr.read()
    a, b = r.num_keys(), c.num_keys()
    check(a == b, "num_keys after bad clients: %d vs %d" % (a, b))
    check(c.get("k1") == b"back", "python client fine after bad clients")
    if srv.has_metrics:
        m1 = srv.metrics()
        dm = rdzvtest.metric_value(m1, "rdzvd_errors_total", 0,
            kind="malformed") - rdzvtest.metric_value(m0,
            "rdzvd_errors_total", 0, kind="malformed")
        check(dm == 1, "rdzvd_errors_total{malformed} moved by %d, want 1"
            % dm)
        check("closing" in srv.log_text(), "no 'closing <peer>: <reason>' "
            "log line for the malformed request")
    ctr.expect("after bad clients", get=1, num_keys=2, wait=1)
    r.close()


def run_wait_timeout(srv, c, ctr):
    # A wait that times out raises after about its timeout; the client is
    # then unusable (1.13 sends nothing to cancel) but the store is not.
    w = client(srv.port)
    timed_raise(lambda: w.wait(["never-set"], td(seconds=1)), 0.9, 3.0,  # noqa: F821
        "wait(timeout=1s) on a missing key")
    if srv.has_metrics:
        check(gauge(srv, "rdzvd_waiters") == 1, "rdzvd_waiters should "
            "still hold the timed-out client's registration")
    del w
    if srv.has_metrics:
        v = cl.poll_metric(srv, "rdzvd_waiters", 0)
        check(v == 0, "rdzvd_waiters %s after the waiting client closed" % v)

    # set_timeout changes the default used by wait() and get().
    s = client(srv.port)
    s.set_timeout(td(milliseconds=700))
    check(s.timeout == td(milliseconds=700), "timeout after set_timeout")
    timed_raise(lambda: s.wait(["never-set-2"]), 0.6, 2.5,  # noqa: F821
        "wait() after set_timeout(0.7s)")
    del s
    g = client(srv.port, timeout=1)
    timed_raise(lambda: g.get("never-set-3"), 0.9, 3.0,  # noqa: F821
        "get() of a missing key (waits first, then times out)")
    del g

    n = client(srv.port)
    n.set("after-timeouts", "ok")
    check(n.get("after-timeouts") == b"ok", "new client works after timeouts")
    check(c.get("k1") == b"back", "old client unaffected by others' timeouts")
    n.set("never-set", "now")
    n.wait(["never-set"], td(seconds=5))
    ctr.expect("timeouts", wait=6, set=2, get=2)
    if srv.has_metrics:
        v = cl.poll_metric(srv, "rdzvd_waiters", 0)
        check(v == 0, "rdzvd_waiters %s with nobody waiting" % v)
    return n


def run_large(srv, c, ctr):
    big = os.urandom(4 << 20)
    big = big[:100] + b"\x00" * 100 + big[200:]
    t = time.monotonic()
    c.set("big4m", big)
    got = c.get("big4m")
    check(got == big, "4 MiB value round trip (%d bytes back)" % len(got))
    other = client(srv.port)
    check(other.get("big4m") == big, "4 MiB value seen by another client")
    check(other.compare_set("big4m", big, b"small") == b"small",
        "cas against a 4 MiB expected value")
    c.set("big4m", big)
    # SET has no reply in 1.13: only a later round trip on the same
    # connection proves it was applied before another connection reads.
    check(c.num_keys() > 0, "num_keys")
    r = srv.raw()
    check(r.get(b"/big4m") == big, "4 MiB via raw GET")
    r.close()
    log("4 MiB set+get x3 in %.3f s" % (time.monotonic() - t))
    ctr.expect("large", set=2, get=3, wait=2, compare_set=1, num_keys=1)
    del other


def run_prefix(srv, c, ctr):
    p = dist.PrefixStore("pfx", c)
    check(p.underlying_store is not None, "underlying_store")
    p.set("a", "1")
    check(c.get("pfx/a") == b"1", "PrefixStore key is 'pfx/a' underneath")
    check(p.get("a") == b"1", "get through the prefix")
    check(p.add("n", 3) == 3 and c.add("pfx/n", 1) == 4, "add through prefix")
    check(p.compare_set("a", "1", "2") == b"2", "cas through prefix")
    p.wait(["a", "n"], td(seconds=2))
    pp = dist.PrefixStore("inner", p)
    pp.set("z", "deep")
    check(c.get("pfx/inner/z") == b"deep", "nested PrefixStore key")
    check(p.delete_key("a") is True and p.delete_key("a") is False,
        "delete through prefix")
    nk, pk = c.num_keys(), p.num_keys()
    check(pk == nk, "PrefixStore.num_keys counts the whole store "
        "(%d vs %d)" % (pk, nk))
    r = srv.raw()
    check(r.check([b"/pfx/n", b"/pfx/inner/z"]) == 0,
        "prefixed keys on the wire are '/pfx/...'")
    r.close()
    ctr.expect("prefix", set=2, get=3, wait=4, add=2, compare_set=1,
        delete=2, num_keys=2, check=1)


WORKER = r"""
import sys, datetime, time
import torch.distributed as dist
port, ws, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
s = dist.TCPStore("127.0.0.1", port, ws, False, datetime.timedelta(seconds=30))
n = s.add("ws/arrived", 1)
print("arrived", n, flush=True)
s.wait(["ws/go"])
print("go", s.get("ws/go").decode(), name, flush=True)
"""

WAITER = r"""
import sys, datetime, time
import torch.distributed as dist
port, how = int(sys.argv[1]), sys.argv[2]
s = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=30))
print("ready", flush=True)
t = time.monotonic()
if how == "wait2":
    s.wait(["xp/key", "xp/key2"])
    v = s.get("xp/key2")
elif how == "add":
    s.wait(["xp/ctr"])
    v = s.get("xp/ctr")
else:
    v = s.get("xp/get")
print("released", how, v.hex(), "%.3f" % (time.monotonic() - t), flush=True)
"""


def run_processes(srv, c, ctr):
    r = srv.raw()
    init0 = 0
    if r.check([b"init/"]) == 0:
        init0 = int(r.get(b"init/"))
    N = 3
    procs = [rdzvtest.spawn([cl.TORCH_PY, "-c", WORKER, str(srv.port),
        str(N), "w%d" % i], stdout=subprocess.PIPE, text=True)
        for i in range(N)]
    # Each TCPStore(world_size=N, is_master=False) adds 1 to "init/".
    t = time.monotonic() + 30
    while time.monotonic() < t:
        if c.add("ws/arrived", 0) == N:
            break
        for p in procs:
            check(p.poll() is None, "world_size worker exited early: %s" %
                p.returncode)
        time.sleep(0.05)
    check(c.add("ws/arrived", 0) == N, "workers did not all arrive")
    init1 = int(r.get(b"init/"))
    check(init1 - init0 == N, "init/ went %d -> %d with %d world_size "
        "clients" % (init0, init1, N))
    c.set("ws/go", "yes")
    for p in procs:
        out, _ = p.communicate(timeout=20)
        check(p.returncode == 0, "world_size worker failed: %s" % out)
        check("go yes" in out, "worker output %r" % out)
    log("%d world_size clients: init/ %d -> %d" % (N, init0, init1))
    # wait_for_workers=False: a client that does not count itself in.
    q = dist.TCPStore(HOST, srv.port, 7, False, td(seconds=10),
        wait_for_workers=False)
    check(q.add("ws/arrived", 0) == N, "wait_for_workers=False client")
    init2 = int(r.get(b"init/"))
    check(init2 == init1, "wait_for_workers=False moved init/ %d -> %d" %
        (init1, init2))
    # multi_tenant only matters to a hosting instance; as a client it is
    # an ordinary client (and does count itself in).
    m = dist.TCPStore(HOST, srv.port, 2, False, td(seconds=10),
        multi_tenant=True)
    check(m.get("ws/go") == b"yes", "multi_tenant client reads")
    init3 = int(r.get(b"init/"))
    check(init3 == init1 + 1, "multi_tenant client: init/ %d -> %d" %
        (init1, init3))
    del q, m

    # Waits in other processes released from this one: a wait on two
    # keys (released only by the second), a get (which waits first), and
    # a wait on a key created by ADD.
    hows = ("wait2", "get", "add")
    ws = [rdzvtest.spawn([cl.TORCH_PY, "-c", WAITER, str(srv.port), how],
        stdout=subprocess.PIPE, text=True) for how in hows]
    for p in ws:
        line = p.stdout.readline()
        check(line.strip() == "ready", "waiter said %r" % line)
    if srv.has_metrics:
        v = cl.poll_metric(srv, "rdzvd_waiters", 3, timeout=10)
        check(v == 3, "rdzvd_waiters %s with three processes blocked" % v)
    else:
        time.sleep(1.0)
    for p in ws:
        check(p.poll() is None, "waiter returned before the set")
    payload = b"\x00released\x00"
    c.set("xp/key", b"first of two")
    check(c.get("xp/key") == b"first of two", "xp/key")
    time.sleep(0.3)
    check(ws[0].poll() is None, "a wait on two keys returned when only "
        "one existed")
    if srv.has_metrics:
        v = srv.metric("rdzvd_waiters")
        check(v == 3, "rdzvd_waiters %s after one of two keys" % v)
    t0 = time.monotonic()
    c.set("xp/key2", payload)
    c.set("xp/get", payload[::-1])
    check(c.add("xp/ctr", 1) == 1, "add xp/ctr")
    for p, want in zip(ws, (payload, payload[::-1], b"1")):
        out, _ = p.communicate(timeout=10)
        check(p.returncode == 0, "waiter failed: %r" % out)
        f = out.split()
        check(f[0] == "released" and bytes.fromhex(f[2]) == want,
            "waiter read %r" % out)
    log("cross-process waits released %.3f s after the writes" %
        (time.monotonic() - t0))
    if srv.has_metrics:
        v = cl.poll_metric(srv, "rdzvd_waiters", 0)
        check(v == 0, "rdzvd_waiters %s after release" % v)
    r.close()


# The tests share one server and one client, in definition order.
SRV = CTR = C = None


def test_basic():
    global C
    C = run_basic(SRV, CTR)


def after_basic(run):
    """A section that runs run(SRV, C, CTR) on test_basic's client."""
    @rdzvtest.needs("test_basic")
    def section():
        run(SRV, C, CTR)
    return section


test_raw_ops = after_basic(run_raw)
test_wait_timeout = after_basic(run_wait_timeout)
test_large_values = after_basic(run_large)
test_prefix_store = after_basic(run_prefix)
test_processes = after_basic(run_processes)


def test_idle_clients():
    """torch 1.13 keeps a silent callback connection and idles between
    requests: neither may be closed by --request-timeout-ms, which is only
    for a partially received request."""
    if not SRV.has_metrics:
        rdzvtest.skip("rdzvd's --request-timeout-ms")
    s = cl.RdzvdServer(args=["--request-timeout-ms", "300"],
        durability="memory", db=":memory:")
    c = client(s.port)
    c.set("idle", "1")
    check(c.get("idle") == b"1", "first get")
    t = cl.poll_metric(s, "rdzvd_connections", 1, dialect="tcpstore113")
    u = cl.poll_metric(s, "rdzvd_connections", 1, dialect="unknown")
    check(t == 1 and u == 1, "one torch client: connections tcpstore113 %s "
        "unknown %s, want 1 and 1 (main and silent callback)" % (t, u))
    time.sleep(1.2)
    c.set("idle", "2")
    check(c.get("idle") == b"2", "client idle 4x request timeout")
    t = s.metric("rdzvd_connections", dialect="tcpstore113")
    u = s.metric("rdzvd_connections", dialect="unknown")
    check(t == 1 and u == 1, "after idling: tcpstore113 %s unknown %s" %
        (t, u))
    # Half a request is another matter: closed after about 300 ms.
    r = s.raw()
    full = rdzvtest.enc113("set", b"/half", b"0123456789")
    r.send_raw(full[:12])
    t0 = time.monotonic()
    rdzvtest.expect_closed(r.sock, 5)
    dt = time.monotonic() - t0
    check(0.2 <= dt <= 2.5, "half request closed after %.2f s, want about "
        "0.3 s" % dt)
    n = s.metric("rdzvd_errors_total", kind="request_timeout")
    check(n == 1, "rdzvd_errors_total{request_timeout} %s" % n)
    check(c.get("idle") == b"2", "torch client fine after another's timeout")
    del c
    rc = s.stop()
    check(rc == 0, "second rdzvd exited %s" % rc)


@rdzvtest.needs("test_basic", "test_raw_ops", "test_wait_timeout",
    "test_large_values", "test_prefix_store", "test_processes")
def test_final_state():
    global C
    if not SRV.has_metrics:
        rdzvtest.skip("needs rdzvd's /metrics")
    nk = C.num_keys()
    g = gauge(SRV, "rdzvd_keys")
    check(g == nk, "rdzvd_keys %s != num_keys %d at the end" % (g, nk))
    acc = gauge(SRV, "rdzvd_connections_accepted_total")
    check(acc >= 20, "accepted_total %s, below the connections this test "
        "opened" % acc)
    st, body = SRV.healthz()
    check(st == 200 and body == b"ok\n", "healthz %r %r" % (st, body))
    C = None
    v = cl.poll_metric(SRV, "rdzvd_connections", 0, dialect="tcpstore113")
    check(v == 0, "rdzvd_connections{tcpstore113} %s with every client "
        "closed" % v)
    rc = SRV.stop()
    check(rc == 0, "rdzvd exited %s after SIGTERM, want 0" % rc)
    log("PASS against rdzvd")


if __name__ == "__main__":
    SRV = cl.make_server()
    CTR = Counters(SRV)
    rdzvtest.main(globals(), per_test=40, total=110, sections=True,
        server=SRV)
