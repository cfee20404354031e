# SPDX-License-Identifier: Apache-2.0
"""tcpstore113: torch 1.13's TCPStore dialect at the byte level.

Cases torch's own client never produces: every request split at every
byte boundary, several requests in one segment, WATCH_KEY pushes.  Each
scenario takes a server address; test_reference_server runs them all
against torch 1.13's own TCPStore server too, which proves the scenarios
(and the harness's encoder) describe the reference behaviour.
"""

import select
import time

import rdzvtest as rt


def daemon(*args):
    return rt.Rdzvd(list(args), durability="memory", db=":memory:")


def no_data(sock, wait):
    r, _, _ = select.select([sock], [], [], wait)
    return not r


def client(addr):
    return rt.TCPStore113(rt.connect(addr))


# Requests and the replies they must produce, in order, on a fresh store
# holding only what earlier entries set.  The keys carry a per-scenario
# prefix so runs against a shared server do not collide.
def script(p):
    k = lambda s: p + s
    return [
        (rt.enc113("set", k(b"/a"), b"value-a"), b""),
        (rt.enc113("get", k(b"/a")), rt.ts(b"value-a")),
        (rt.enc113("add", k(b"/n"), 7), rt.i64(7)),
        (rt.enc113("add", k(b"/n"), -2), rt.i64(5)),
        (rt.enc113("compare_set", k(b"/c"), b"", b"x"), rt.ts(b"x")),
        (rt.enc113("compare_set", k(b"/c"), b"x", b"yy"), rt.ts(b"yy")),
        (rt.enc113("compare_set", k(b"/c"), b"q", b"z"), rt.ts(b"yy")),
        (rt.enc113("compare_set", k(b"/none"), b"e", b"z"), rt.ts(b"e")),
        (rt.enc113("check", [k(b"/a"), k(b"/n")]), rt.u8(rt.READY)),
        (rt.enc113("check", [k(b"/a"), k(b"/zz")]), rt.u8(rt.NOT_READY)),
        (rt.enc113("wait", [k(b"/a"), k(b"/c")]), rt.u8(rt.STOP_WAITING)),
        (rt.enc113("set", k(b"/bin"), b"\0\xff\0"), b""),
        (rt.enc113("get", k(b"/bin")), rt.ts(b"\0\xff\0")),
        (rt.enc113("delete_key", k(b"/bin")), rt.i64(1)),
        (rt.enc113("delete_key", k(b"/bin")), rt.i64(0)),
    ]


def read_expected(sock, script_):
    want = b"".join(r for _, r in script_)
    return rt.recv_exact(sock, len(want)), want


def scn_split_every_byte(addr, p):
    s = rt.connect(addr)
    for req, rep in script(p):
        rt.send_all_slowly(s, req, 1, 0.0005)
        got = rt.recv_exact(s, len(rep))
        assert got == rep, (req, got, rep)


def scn_split_each_boundary(addr, p):
    # one request cut at each position in turn: two segments per request
    s = rt.connect(addr)
    req = rt.enc113("set", p + b"/split", b"0123456789")
    for i in range(1, len(req)):
        s.sendall(req[:i])
        time.sleep(0.002)
        s.sendall(req[i:])
    chk = rt.enc113("compare_set", p + b"/split", b"0123456789", b"ok")
    for i in range(1, len(chk)):
        s.sendall(chk[:i])
        time.sleep(0.002)
        s.sendall(chk[i:])
        got = rt.recv_exact(s, 10)
        assert got == rt.ts(b"ok"), (i, got)
        # put it back for the next round
        s.sendall(rt.enc113("set", p + b"/split", b"0123456789"))


def scn_one_segment(addr, p):
    s = rt.connect(addr)
    sc = script(p)
    s.sendall(b"".join(r for r, _ in sc))
    got, want = read_expected(s, sc)
    assert got == want, (got, want)
    assert no_data(s, 0.05)


def scn_segments_straddle(addr, p):
    # the stream cut at odd places across request boundaries
    s = rt.connect(addr)
    sc = script(p + b"x")
    blob = b"".join(r for r, _ in sc)
    for i in range(0, len(blob), 7):
        s.sendall(blob[i:i + 7])
        time.sleep(0.0005)
    got, want = read_expected(s, sc)
    assert got == want


def scn_watch_key(addr, p):
    key = p + b"/w"
    w = client(addr)
    m = client(addr)
    assert w.watch_key(key) == rt.WATCH_REGISTERED
    m.set(key, b"1")
    assert w.read_watch_event() == (rt.WATCH_CREATED, key, b"", b"1")
    m.set(key, b"2")
    assert w.read_watch_event() == (rt.WATCH_UPDATED, key, b"1", b"2")
    assert m.add(key, 5) == 7
    assert w.read_watch_event() == (rt.WATCH_UPDATED, key, b"2", b"7")
    assert m.compare_set(key, b"7", b"8") == b"8"
    assert w.read_watch_event() == (rt.WATCH_UPDATED, key, b"7", b"8")
    assert m.delete_key(key) == 1
    assert w.read_watch_event() == (rt.WATCH_DELETED, key, b"8", b"")
    m.set(p + b"/unrelated", b"x")
    assert no_data(w.sock, 0.1)


def scn_wait_woken(addr, p):
    a = client(addr)
    b = client(addr)
    a.send_raw(rt.enc113("wait", [p + b"/k1", p + b"/k2"]))
    b.set(p + b"/k1", b"x")
    assert no_data(a.sock, 0.1)
    assert b.add(p + b"/k2", 1) == 1
    assert a.read_u8() == rt.STOP_WAITING
    # and the connection carries on
    assert a.get(p + b"/k1") == b"x"


def scn_get_missing_closes(addr, p):
    a = client(addr)
    other = client(addr)
    a.send_raw(rt.enc113("get", p + b"/nope"))
    assert rt.expect_closed(a.sock, 5) == b""
    other.set(p + b"/alive", b"1")
    assert other.get(p + b"/alive") == b"1"


def scn_silent_callback_socket(addr, p):
    # torch 1.13 opens a second connection that sends nothing
    cb = rt.connect(addr)
    c = client(addr)
    c.set(p + b"/x", b"1")
    assert rt.still_open(cb, 0.3)
    assert c.get(p + b"/x") == b"1"


SCENARIOS = [scn_split_every_byte, scn_split_each_boundary, scn_one_segment,
             scn_segments_straddle, scn_watch_key, scn_wait_woken,
             scn_get_missing_closes, scn_silent_callback_socket]


def test_split_every_byte():
    scn_split_every_byte(daemon().addr, b"")


def test_split_each_boundary():
    scn_split_each_boundary(daemon().addr, b"")


def test_one_segment():
    scn_one_segment(daemon().addr, b"")


def test_segments_straddle():
    scn_segments_straddle(daemon().addr, b"")


def test_watch_key():
    scn_watch_key(daemon().addr, b"")


def test_wait_woken():
    scn_wait_woken(daemon().addr, b"")


def test_get_missing_closes():
    scn_get_missing_closes(daemon().addr, b"")


def test_silent_callback_socket():
    scn_silent_callback_socket(daemon().addr, b"")


def test_num_keys_and_init():
    d = daemon()
    c = d.tcps113()
    assert c.num_keys() == 0
    # what every torch 1.13 TCPStore instance sends first
    assert c.add(b"init/", 1) == 1
    assert c.num_keys() == 1
    c.set(b"/a", b"1")
    assert c.num_keys() == 2
    d.wait_metric("rdzvd_connections", 1, dialect="tcpstore113")


def test_watch_then_requests_on_same_connection():
    # 1.13 watches on the callback socket, but nothing stops a client from
    # mixing: pushes and replies must stay whole and in order
    d = daemon()
    c = d.tcps113()
    m = d.tcps113()
    assert c.watch_key(b"/w") == rt.WATCH_REGISTERED
    m.set(b"/w", b"v")
    assert c.read_watch_event() == (rt.WATCH_CREATED, b"/w", b"", b"v")
    assert c.add(b"/n", 1) == 1


def test_reference_server():
    """The scenarios hold against torch 1.13's own TCPStore server."""
    srv = rt.TorchServer(world_size=1)
    try:
        for i, scn in enumerate(SCENARIOS):
            try:
                scn(srv.addr, b"ref%d" % i)
            except BaseException as e:
                raise AssertionError("%s against torch's server: %r" %
                                     (scn.__name__, e))
    finally:
        srv.stop()


if __name__ == "__main__":
    rt.main(globals(), per_test=30, total=120)
