# SPDX-License-Identifier: Apache-2.0
"""The TCPStore librdzvworker's rank 0 hosts (libworker/tstore_srv.c)
serves torch 2.x's queue ops, LIST_KEYS and BARRIER, and 1.13's requests
(WATCH_KEY included), as rdzvd does.  Rank 0 of a world of 2 hosts the
store and waits at init for a rank 1 that never comes; meanwhile raw
clients drive the ops on its port, then the same ops on rdzvd, and the
two must answer alike."""
import socket

import rdzvtest as rt
import worker_lib as wl


def drive(t):
    """The ops under test on one raw 2.x connection; returns what came
    back, in order."""
    out = []
    t.queue_push(b"/q", b"a")
    t.queue_push(b"/q", b"b\x00")
    out.append(t.queue_len(b"/q"))
    out.append(t.check([b"/q"]))
    out.append(t.queue_pop(b"/q"))
    out.append(t.queue_pop(b"/q"))
    out.append(t.queue_pop(b"/q"))          # empty: None
    out.append(t.queue_len(b"/nope"))
    t.set(b"/k1", b"v")
    t.set(b"/lax", b" +5")
    out.append(t.add(b"/lax", 1))           # std::stoll's reading
    t._req("barrier", b"/bar", 1)
    out.append(t.read_u8())                 # STOP_WAITING at once
    # Only this test's keys: the hosting rank writes its own.
    out.append(sorted(k for k in t.list_keys()
                      if k in (b"/bar", b"/k1", b"/lax")))
    return out


def hosted_port():
    port = rt.free_port()
    env = wl.base_env({"MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port), "RANK": "0",
                       "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                       "LOCAL_WORLD_SIZE": "1",
                       "WORKER_CHECK_TIMEOUT_MS": "60000"})
    p = rt.subprocess.Popen([wl.prog(), "init"], env=env,
                            stdout=rt.subprocess.DEVNULL,
                            stderr=rt.subprocess.DEVNULL)
    rt._track(p)

    def up():
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return True
        except OSError:
            return False
    rt.wait_until(up, 30, 0.05, "rank 0's hosted TCPStore listening")
    return p, port


def test_hosted_store_serves_queue_list_barrier():
    p, port = hosted_port()
    try:
        hosted = rt.TCPStore2(rt.connect("127.0.0.1", port))
        got = drive(hosted)
        d = rt.Rdzvd()
        want = drive(d.tcps2())
        assert got == want, (got, want)
        assert got[:6] == [2, 0, b"a", b"b\x00", None, 0], got
        assert got[6:8] == [6, 0], got
        assert got[8] == [b"/bar", b"/k1", b"/lax"], got
        # Blocking pop across two connections: one push, one wake.
        waiter = rt.TCPStore2(rt.connect("127.0.0.1", port))
        waiter._req("wait", [b"/q2"])
        assert rt.still_open(waiter.sock, 0.2)
        hosted.queue_push(b"/q2", b"x")
        waiter.settimeout(20)
        assert waiter.read_u8() == rt.STOP_WAITING
        assert waiter.queue_pop(b"/q2") == b"x"
        assert hosted.num_keys() >= 3      # the connection survived
    finally:
        p.kill()
        p.wait()
        rt._untrack(p)


def test_hosted_store_speaks_113_as_rdzvd():
    """Every tcpstore113.py scenario (requests split at every byte, WAIT
    woken from another connection, a GET of a missing key closing only
    that connection, WATCH_KEY pushes) holds on the hosted store as it
    does on rdzvd and on torch 1.13's server: both servers drive the one
    TCPStore mapping (kv/tcps_sess.c)."""
    import tcpstore113
    p, port = hosted_port()
    try:
        for i, scn in enumerate(tcpstore113.SCENARIOS):
            try:
                scn(("127.0.0.1", port), b"hosted%d" % i)
            except BaseException as e:
                raise AssertionError("%s against the hosted store: %r" %
                                     (scn.__name__, e))
    finally:
        p.kill()
        p.wait()
        rt._untrack(p)


if __name__ == "__main__":
    rt.main(globals())
