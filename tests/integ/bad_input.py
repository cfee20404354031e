# SPDX-License-Identifier: Apache-2.0
"""bad_input: hostile and broken clients against a real rdzvd.

For every case: the offending connection is closed, the matching
rdzvd_errors_total{kind=...} counter rises by exactly one, a line
"closing 127.0.0.1:PORT: ..." names the peer in the log, and three
bystanders (native, 1.13, 2.x) connected the whole time keep working.
Also: silent connections are never closed for idleness, partial requests
are closed after --request-timeout-ms, --max-connections is enforced.
"""

import re
import select
import struct
import time

import rdzvtest as rt

TIMEOUT_MS = 300


class Env:
    def __init__(self, *args):
        self.d = rt.Rdzvd(["--request-timeout-ms", str(TIMEOUT_MS)] +
                          list(args), durability="memory", db=":memory:")
        self.nat = self.d.native()
        self.t113 = self.d.tcps113()
        self.t2 = self.d.tcps2()
        self.round = 0
        self.bystanders_ok()    # each has spoken: none left "unknown"

    def bystanders_ok(self):
        self.round += 1
        v = b"round%d" % self.round
        self.nat.set("by", v)
        assert self.t113.get(b"by") == v
        assert self.t2.get(b"by") == v
        assert self.t2.ping(self.round) == self.round
        assert self.nat.ping(v) == v


def errors(d):
    m = d.metrics()
    return {lab[0][1]: v for (n, lab), v in m.items()
            if n == "rdzvd_errors_total" and len(lab) == 1}


def safe_send(sock, data):
    """Sends what the peer will take; a close mid-send is fine here."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def bad_case(env, name, data, kinds, prefix=b"", native=False,
             handshake2=False, close_within=5.0, reply_ok=False,
             prefix_reply=0):
    """Opens a connection, optionally does a valid exchange first, sends
    data, and checks the close (with no reply unless reply_ok), the
    counter, the log line and the bystanders.  kinds: the error kinds
    acceptable for this input."""
    d = env.d
    before = errors(d)
    s = d.connect()
    port = s.getsockname()[1]
    if native:
        s.sendall(rt.nat_preamble())
        assert rt.recv_exact(s, 8)[:4] == b"RDZV"
    if handshake2:
        rt.TCPStore2(s)
    if prefix:
        # a valid request first; its reply read, so all that may follow
        # is the close
        s.sendall(prefix)
        rt.recv_exact(s, prefix_reply)
    safe_send(s, data)
    t0 = time.monotonic()
    got = rt.expect_closed(s, close_within)
    dt = time.monotonic() - t0
    assert reply_ok or got == b"", "%s: answered %r before closing" % (
        name, got[:64])

    def risen():
        now = errors(d)
        up = {k: now.get(k, 0) - before.get(k, 0) for k in now}
        return {k: v for k, v in up.items() if v}
    up = rt.wait_until(risen, 5, what="%s: an error counter to rise" % name)
    assert len(up) == 1 and list(up.values())[0] == 1, \
        "%s: counters moved %r" % (name, up)
    kind = list(up)[0]
    assert kind in kinds, "%s: counted as %s, expected one of %s" % (
        name, kind, kinds)
    pat = re.compile(r"closing 127\.0\.0\.1:%d: \S" % port)
    rt.wait_until(lambda: pat.search(d.log_text()), 5,
                  what="%s: log line 'closing 127.0.0.1:%d: <reason>'" %
                  (name, port))
    env.bystanders_ok()
    return dt


def nat_req(op, *fields, id=1):
    return rt.nat_frame(op, rt.nat_fields(*fields), 0, id)


def test_native_malformed():
    env = Env()
    F = rt.nat_fields
    cases = [
        ("missing field", nat_req(rt.OP_SET, b"", b"k")),
        ("extra field", nat_req(rt.OP_GET, b"", b"k", b"extra")),
        ("int for bytes", nat_req(rt.OP_GET, b"", 5)),
        ("bad tag", rt.nat_frame(rt.OP_GET, b"x" + F(b"", b"k")[1:], 0, 1)),
        ("bytes past payload",
         rt.nat_frame(rt.OP_GET, F(b"") + b"b" + struct.pack("<I", 100) +
                      b"abc", 0, 1)),
        ("short i64", rt.nat_frame(rt.OP_ADD, F(b"", b"k") + b"i\1\2", 0, 1)),
        ("count over entries", nat_req(rt.OP_CHECK, b"", 5, b"a", b"b")),
        ("count under entries", nat_req(rt.OP_CHECK, b"", 1, b"a", b"b")),
        ("negative count", nat_req(rt.OP_MULTI_GET, b"", -1)),
        ("frame len under header", struct.pack("<IHHI", 4, rt.OP_PING, 0, 1)),
        ("unknown op 99", nat_req(99, b"x")),
        ("op 0", nat_req(0)),
    ]
    # A server push sent by a client (WATCH_EVENT, ROUND, AUTH_CHALLENGE,
    # STRAGGLER, DRAIN): refused like any malformed frame, never served.
    cases += [("client sends push op %d" % op, nat_req(op, b"job", 1, 1, 1,
                                                       b"x"))
              for op in (20, 26, 34, 37, 38)]
    for name, data in cases:
        bad_case(env, name, data, {"malformed", "too_big"}
                 if "count" in name else {"malformed"}, native=True)


def test_native_oversized():
    env = Env()
    cases = [
        ("frame len 4G", struct.pack("<IHHI", 0xFFFFFFF0, rt.OP_SET, 0, 1)),
        ("key 8193", nat_req(rt.OP_SET, b"", b"k" * 8193, b"v")),
        ("namespace 1025", nat_req(rt.OP_SET, b"n" * 1025, b"k", b"v")),
        # a frame cannot be judged before it is whole (the op's fields
        # decide), so this one is sent in full
        ("value 8M+1", nat_req(rt.OP_SET, b"", b"k", b"v" * ((8 << 20) + 1))),
        ("too many keys",
         nat_req(rt.OP_CHECK, b"", 131073, *([b"k"] * 131073))),
    ]
    for name, data in cases:
        # a SET frame declaring 4 GiB can be refused from its header, by
        # the op's size limit or by the memory budget it would need
        kinds = {"too_big", "memory_budget"} if "4G" in name else {"too_big"}
        bad_case(env, name, data, kinds, native=True)
    # exactly at the limits is fine
    c = env.d.native()
    c.set(b"k" * 8192, b"v")
    c.set("big", b"\1" * (8 << 20))
    assert len(c.get("big")) == 8 << 20
    assert c.check([b"k"] * 131072) == 0
    c.set("k", b"1")
    assert c.check([b"k"] * 131072) == 1


def test_tcpstore_malformed_and_unknown():
    env = Env()
    nk = rt.enc113("num_keys")
    cases = [
        # 1.13: opcodes 0..8 exist
        ("1.13 op 9 first", b"\x09" + b"\0" * 16, {}),
        ("1.13 op 0x7f after a request", b"\x7f",
         {"prefix": nk, "prefix_reply": 8}),
        ("1.13 op 0xff", b"\xff" * 32, {}),
        # 2.x: opcodes 0..18 exist
        ("2.x op 19", b"\x13", {"handshake2": True}),
        ("2.x op 0xfe", b"\xfe" + b"\0" * 8, {"handshake2": True}),
        ("2.x multi_set count -1",
         rt.u8(11) + rt.i64(-1) + rt.ts(b"k") + rt.ts(b"v"),
         {"handshake2": True, "kinds": {"malformed", "too_big"}}),
        ("garbage HTTP", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", {}),
        ("garbage bad native magic", b"RDZX\x01\0\0\0", {}),
        ("native preamble reserved bytes", b"RDZV\x01\x01\x02\x03",
         {"reply_ok": True}),
    ]
    for name, data, kw in cases:
        kinds = kw.pop("kinds", {"malformed"})
        bad_case(env, name, data, kinds, **kw)


def test_tcpstore_oversized():
    env = Env()
    cases = [
        ("1.13 key 2^40", b"\x00" + rt.u64(1 << 40), {}),
        ("1.13 value 8M+1", b"\x00" + rt.ts(b"k") + rt.u64((8 << 20) + 1) +
         b"x" * 1000, {}),
        ("1.13 key 8193", rt.enc113("get", b"k" * 8193), {}),
        ("1.13 check 2^32 keys", b"\x04" + rt.u64(1 << 32) + rt.ts(b"k"), {}),
        ("1.13 wait 131073 keys", rt.enc113("wait", [b"k"] * 131073), {}),
        ("2.x queue_push 2^40", rt.u8(14) + rt.ts(b"q") + rt.u64(1 << 40),
         {"handshake2": True}),
        ("2.x multi_get 131073",
         rt.u8(10) + rt.u64(131073) + rt.ts(b"k"), {"handshake2": True}),
        ("2.x compare_set desired 8M+1",
         rt.u8(2) + rt.ts(b"k") + rt.ts(b"") + rt.u64((8 << 20) + 1),
         {"handshake2": True}),
    ]
    for name, data, kw in cases:
        dt = bad_case(env, name, data, {"too_big"}, **kw)
        # decided from the declared size, not after a request timeout
        assert dt < TIMEOUT_MS / 1000.0, "%s: closed after %.2fs" % (name, dt)
    # exactly at the limits is fine over TCPStore too
    env.t113.set(b"k" * 8192, b"x" * (8 << 20))
    assert len(env.t113.get(b"k" * 8192)) == 8 << 20


def test_truncated_then_idle():
    env = Env()
    cases = [
        ("native partial header", b"\x20\0\0\0\x02\0", {"native": True}),
        ("native partial body",
         nat_req(rt.OP_SET, b"", b"key", b"value")[:-3], {"native": True}),
        ("native partial preamble", b"RDZ", {}),
        ("1.13 partial set", rt.enc113("set", b"/k", b"0123456789")[:-4], {}),
        ("1.13 opcode only", b"\x00", {}),
        ("2.x partial magic", b"\x00\xce\xf7", {}),
        ("2.x partial ping", rt.enc2("ping", 1)[:3], {"handshake2": True}),
    ]
    for name, data, kw in cases:
        dt = bad_case(env, name, data, {"request_timeout"}, close_within=5,
                      **kw)
        assert dt >= TIMEOUT_MS / 1000.0 * 0.8, \
            "%s: closed after %.2fs, before the request timeout" % (name, dt)


def test_trickle_is_timed_out():
    # a request completed one byte at a time must still finish within the
    # timeout: the deadline runs from its first byte, not the last
    env = Env()
    d = env.d
    before = errors(d).get("request_timeout", 0)
    s = d.connect()
    req = rt.enc113("set", b"/slow", b"v" * 200)
    t0 = time.monotonic()
    closed = False
    for i in range(len(req) - 1):
        try:
            s.sendall(req[i:i + 1])
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        r, _, _ = select.select([s], [], [], 0.05)
        if r:
            try:
                if s.recv(1) == b"":
                    closed = True
                    break
            except ConnectionResetError:
                closed = True
                break
    if not closed:
        rt.expect_closed(s, 2)
    dt = time.monotonic() - t0
    assert dt < 3 * TIMEOUT_MS / 1000.0 + 0.5, "closed only after %.2fs" % dt
    rt.wait_until(lambda: errors(d).get("request_timeout", 0) == before + 1,
                  5, what="request_timeout counter")
    env.bystanders_ok()


def test_silent_connections_stay_open():
    env = Env()
    d = env.d
    silent = d.connect()                        # like torch 1.13's callback
    idle113 = d.tcps113()
    idle113.set(b"/x", b"1")                    # then nothing pending
    idle_nat = d.native()
    idle_nat.ping(b"")
    idle2 = d.tcps2()
    waiting = d.tcps113()
    waiting.send_raw(rt.enc113("wait", [b"/late"]))
    nwait = d.native()
    wid = nwait.wait_send(["late2"], -1)
    time.sleep(5 * TIMEOUT_MS / 1000.0)
    for s in (silent, idle113.sock, idle_nat.sock, idle2.sock, waiting.sock,
              nwait.sock):
        assert rt.still_open(s, 0), "an idle connection was closed"
    assert errors(d).get("request_timeout", 0) == 0
    # and each is still fully usable
    t = rt.TCPStore113(silent)
    assert t.add(b"init/", 1) == 1
    assert idle113.get(b"/x") == b"1"
    assert idle_nat.ping(b"a") == b"a"
    assert idle2.ping(3) == 3
    env.nat.set(b"/late", b"1")
    assert waiting.read_u8() == rt.STOP_WAITING
    env.nat.set(b"late2", b"1")
    assert nwait.reply(wid, rt.OP_WAIT, timeout=5) == []
    rt.wait_until(lambda: d.metric("rdzvd_connections",
                                   dialect="unknown") == 0, 5,
                  what="unknown gauge back to 0 once the silent one spoke")


def test_unknown_dialect_gauge():
    d = rt.Rdzvd([], durability="memory", db=":memory:")
    socks = [d.connect() for _ in range(3)]
    rt.wait_until(lambda: d.metric("rdzvd_connections",
                                   dialect="unknown") == 3, 5,
                  what="3 silent connections counted as unknown")
    for s in socks:
        s.close()
    rt.wait_until(lambda: d.metric("rdzvd_connections",
                                   dialect="unknown") == 0, 5,
                  what="gauge back to 0 after close")


def test_max_connections():
    n = 5
    d = rt.Rdzvd(["--max-connections", str(n)], durability="memory",
                 db=":memory:")
    acc0 = d.metric("rdzvd_connections_accepted_total")
    held = [d.native() for _ in range(n)]
    for c in held:
        assert c.ping(b"x") == b"x"
    extra = []
    for i in range(3):
        s = d.connect()
        extra.append(s)
        rt.expect_closed(s, 5)
    rt.wait_until(lambda: d.metric("rdzvd_connections_rejected_total") == 3,
                  5, what="3 rejections counted")
    assert d.metric("rdzvd_connections_accepted_total") - acc0 == n
    assert d.metric("rdzvd_connections", dialect="native") == n
    # the ones held are unaffected
    for c in held:
        c.set("k", b"v")
    # a slot freed is a slot usable again
    held.pop().close()

    def reconnect():
        try:
            c = d.native(timeout=2)
            return c if c.ping(b"y") == b"y" else None
        except (rt.PeerClosed, OSError):
            return None
    c = rt.wait_until(reconnect, 5, interval=0.05,
                      what="a connection accepted after one closed")
    assert c.get("k") == b"v"


if __name__ == "__main__":
    rt.main(globals(), per_test=40, total=150)
