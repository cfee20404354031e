# SPDX-License-Identifier: Apache-2.0
"""tcpstore2: torch 2.x's TCPStore dialect at the byte level.

torch 2.x is not installed here, so rdzvtest.TCPStore2 (struct-encoded
requests, see shared/reference/tcpstore-wire.md section 3) plays the
client.  Keys are sent exactly as given.
"""

import select
import struct
import time

import rdzvtest as rt


def daemon(*args):
    return rt.Rdzvd(list(args), durability="memory", db=":memory:")


def no_data(sock, wait):
    r, _, _ = select.select([sock], [], [], wait)
    return not r


def test_handshake():
    d = daemon()
    s = d.connect()
    # VALIDATE has no reply; PING echoes its 4 bytes
    s.sendall(b"\x00\xce\xf7\x85\x3c")
    assert no_data(s, 0.1)
    s.sendall(b"\x0d\x01\x02\x03\x04")
    assert rt.recv_exact(s, 4) == b"\x01\x02\x03\x04"
    t = rt.TCPStore2(s, handshake=False)
    for nonce in (0, 0xFFFFFFFF, 0x3C85F7CE):
        assert t.ping(nonce) == nonce
    assert t.add(b"init/", 1) == 1
    d.wait_metric("rdzvd_connections", 1, dialect="tcpstore2")


def test_handshake_split():
    d = daemon()
    s = d.connect()
    # the 5-byte magic split at every boundary must still be recognised
    rt.send_all_slowly(s, rt.enc2("validate") + rt.enc2("ping", 42), 1,
                       0.005)
    assert struct.unpack("<I", rt.recv_exact(s, 4))[0] == 42


def test_set_get_add_cas():
    d = daemon()
    t = d.tcps2()
    t.set(b"/a", b"hello")
    assert t.get(b"/a") == b"hello"
    t.set(b"/a", b"\0\xff")
    assert t.get(b"/a") == b"\0\xff"
    assert t.add(b"/n", 5) == 5
    assert t.add(b"/n", -8) == -3
    assert t.get(b"/n") == b"-3"
    assert t.compare_set(b"/x", b"", b"d1") == b"d1"
    assert t.compare_set(b"/y", b"e", b"d") == b"e"
    assert t.check([b"/y"]) == rt.NOT_READY
    assert t.compare_set(b"/x", b"d1", b"d2") == b"d2"
    assert t.compare_set(b"/x", b"no", b"d3") == b"d2"
    assert t.get(b"/x") == b"d2"


def test_check_wait_num_keys_delete():
    d = daemon()
    t = d.tcps2()
    assert t.num_keys() == 0
    assert t.check([b"a"]) == rt.NOT_READY
    t.set(b"a", b"1")
    t.set(b"b", b"1")
    assert t.check([b"a", b"b"]) == rt.READY
    assert t.check([b"a", b"c"]) == rt.NOT_READY
    assert t.check([]) == rt.READY
    assert t.wait([b"a", b"b"]) == rt.STOP_WAITING
    assert t.num_keys() == 2
    assert t.delete_key(b"a") == 1
    assert t.delete_key(b"a") == 0
    assert t.num_keys() == 1
    # wait woken by another connection
    o = d.tcps2()
    t.send_raw(rt.enc2("wait", [b"w1", b"w2"]))
    o.set(b"w1", b"x")
    assert no_data(t.sock, 0.15)
    o.append(b"w2", b"y")
    assert t.read_u8() == rt.STOP_WAITING


def test_get_missing_is_empty():
    # 2.x: like newer torch servers, a missing key reads as empty bytes and
    # the connection stays usable (1.13 closes it: see tcpstore113.py).
    d = daemon()
    t = d.tcps2()
    assert t.get(b"missing") == b""
    t.set(b"present", b"v")
    assert t.get(b"present") == b"v"
    assert t.ping(9) == 9


def test_append_multi():
    d = daemon()
    t = d.tcps2()
    t.append(b"log", b"ab")
    t.append(b"log", b"cd")
    assert t.get(b"log") == b"abcd"
    t.multi_set([(b"m1", b"1"), (b"m2", b""), (b"m3", b"3")])
    assert t.multi_get([b"m3", b"m1", b"m2"]) == [b"3", b"1", b""]
    assert t.multi_get([]) == []
    t.multi_set([])
    assert t.num_keys() == 4
    pairs = [(b"k%d" % i, b"v%d" % i) for i in range(300)]
    t.multi_set(pairs)
    assert t.multi_get([k for k, _ in pairs]) == [v for _, v in pairs]


def test_cancel_wait_nothing_pending():
    d = daemon()
    t = d.tcps2()
    # always answered, even with no wait pending
    assert t.cancel_wait() == [rt.WAIT_CANCELED]
    assert t.cancel_wait() == [rt.WAIT_CANCELED]
    assert t.ping(1) == 1


def waiting(key):
    """A new rdzvd d, its TCPStore 2 client t blocked in a WAIT on key
    (nothing answered), and another client o: (d, t, o)."""
    d = daemon()
    t = d.tcps2()
    o = d.tcps2()
    t.send_raw(rt.enc2("wait", [key]))
    assert no_data(t.sock, 0.2)
    return d, t, o


def test_cancel_wait_pending():
    # as torch's client does on a wait timeout: WAIT, nothing, CANCEL_WAIT
    d, t, o = waiting(b"never")
    assert t.cancel_wait() == [rt.WAIT_CANCELED]
    # the cancelled wait must never answer later
    o.set(b"never", b"1")
    assert t.ping(77) == 77, "stray STOP_WAITING after CANCEL_WAIT"
    assert no_data(t.sock, 0.1)
    # the connection is fully usable for another wait afterwards
    t.send_raw(rt.enc2("wait", [b"again"]))
    o.set(b"again", b"1")
    assert t.read_u8() == rt.STOP_WAITING


def test_cancel_wait_after_answer():
    d = daemon()
    t = d.tcps2()
    o = d.tcps2()
    # the wait answered just before the cancel arrived: the client reads
    # STOP_WAITING, then WAIT_CANCELED
    t.send_raw(rt.enc2("wait", [b"k"]))
    o.set(b"k", b"1")
    time.sleep(0.1)
    t.send_raw(rt.enc2("cancel_wait"))
    assert rt.recv_exact(t.sock, 2) == bytes([rt.STOP_WAITING,
                                              rt.WAIT_CANCELED])
    assert t.ping(5) == 5


def test_queue_ops():
    d = daemon()
    t = d.tcps2()
    assert t.queue_len(b"q") == 0
    assert t.queue_pop(b"q") is None
    for i in range(5):
        t.queue_push(b"q", b"item%d" % i)
    assert t.queue_len(b"q") == 5
    # QUEUE_POP replies the length before the pop, then the item
    t.send_raw(rt.enc2("queue_pop", b"q"))
    assert t.read_i64() == 5
    assert t.read_bytes() == b"item0"
    assert [t.queue_pop(b"q") for _ in range(4)] == \
        [b"item%d" % i for i in range(1, 5)]
    assert t.queue_pop(b"q") is None
    assert t.queue_len(b"q") == 0


def test_queue_blocking_pop_via_wait():
    # torch 2.8's blocking queue_pop is WAIT(key) then QUEUE_POP: a push
    # must satisfy a wait on the queue's name
    d, t, o = waiting(b"jobs")
    o.queue_push(b"jobs", b"work")
    assert t.read_u8() == rt.STOP_WAITING
    assert t.queue_pop(b"jobs") == b"work"
    assert t.check([b"jobs"]) == rt.NOT_READY


def test_list_keys():
    d = daemon()
    t = d.tcps2()
    assert t.list_keys() == []
    names = [b"/k%d" % i for i in range(50)] + [b"init/", b"\0bin"]
    for k in names:
        t.set(k, b"v")
    assert sorted(t.list_keys()) == sorted(names)
    t.queue_push(b"aqueue", b"x")
    assert b"aqueue" not in t.list_keys()


def test_barrier():
    d = daemon()
    n = 5
    ts = [d.tcps2() for _ in range(n)]
    for t in ts[:-1]:
        t.send_raw(rt.enc2("barrier", b"/b", n))
    for t in ts[:-1]:
        assert no_data(t.sock, 0.05), "barrier released early"
    assert ts[-1].barrier(b"/b", n, timeout=5) == rt.STOP_WAITING
    for t in ts[:-1]:
        assert t.read_u8() == rt.STOP_WAITING
    # the counter is visible as a key
    assert int(ts[0].get(b"/b")) >= n


def test_dialects_share_empty_namespace():
    d = daemon()
    t2 = d.tcps2()
    t1 = d.tcps113()
    nat = d.native()
    t2.set(b"/shared", b"2x")
    # SET has no reply: t2's own GET orders it before another connection
    # reads the key (a 1.13 GET of a missing key drops the connection).
    assert t2.get(b"/shared") == b"2x"
    assert t1.get(b"/shared") == b"2x"
    assert nat.get(b"/shared") == b"2x"
    t1.add(b"/ctr", 1)
    assert t2.add(b"/ctr", 1) == 2
    assert nat.add(b"/ctr", 1) == 3


def test_many_requests_one_segment():
    d = daemon()
    t = d.tcps2()
    blob = (rt.enc2("set", b"a", b"1") + rt.enc2("add", b"c", 2) +
            rt.enc2("get", b"a") + rt.enc2("ping", 3) +
            rt.enc2("check", [b"a", b"c"]) + rt.enc2("num_keys") +
            rt.enc2("cancel_wait") + rt.enc2("queue_push", b"q", b"z") +
            rt.enc2("queue_len", b"q"))
    t.send_raw(blob)
    assert t.read_i64() == 2
    assert t.read_bytes() == b"1"
    assert t.read_u32() == 3
    assert t.read_u8() == rt.READY
    assert t.read_i64() == 2
    assert t.read_u8() == rt.WAIT_CANCELED
    assert t.read_i64() == 1
    # and split at every byte boundary
    t2 = d.tcps2()
    rt.send_all_slowly(t2.sock, rt.enc2("compare_set", b"a", b"1", b"22"),
                       1, 0.002)
    assert t2.read_bytes() == b"22"


if __name__ == "__main__":
    rt.main(globals(), per_test=30, total=120)
