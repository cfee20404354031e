# SPDX-License-Identifier: Apache-2.0
"""join1000.py: N simulated agents join one job of rdzvd at once.

    /usr/bin/python3 join1000.py --port P [--n 1000] [--lws 8] [--job ID]

Opens N native connections to rdzvd on 127.0.0.1:P and finishes the
preamble on each (not timed).  Then, timed from just before the first
JOIN is written: every connection sends one JOIN for the same job with
min_nodes = max_nodes = N, and the client reads until each connection has
its JOIN reply and its ROUND push (state RUNNING).  The round can only
form once the N-th JOIN is in, so the last push is the end of the round.

Checks that the group ranks are exactly 0..N-1, that every push names the
same round, world size N*lws and rank_base = group_rank*lws; exits 1 when
they are not.  Prints one line:

    join n=1000 all_pushes_ms=... last_join_sent_ms=... first_push_ms=...
    client_cpu_ms=...

where every time is from the first JOIN written (CLOCK_MONOTONIC), and
client_cpu_ms is this client's own CPU time in the timed part (the client
shares the machine with rdzvd).  The protocol is common/PROTOCOL.md.

--heartbeats K: once the round runs, the first connection sends K
HEARTBEATs for its node, one after another, and a second line gives the
round trips' percentiles:

    heartbeat n=K p50_us=... p99_us=...
"""
import argparse
import os
import resource
import selectors
import socket
import struct
import sys
import time

MAGIC = b"RDZV"
OP_JOIN, OP_HEARTBEAT, OP_ROUND = 21, 22, 26
F_REPLY, F_ERROR, F_PUSH = 1, 2, 4
RUNNING = 1
ROUND_FIELDS = ("job", "round", "state", "node_id", "group_rank",
                "group_world_size", "world_size", "rank_base",
                "restart_count", "max_restarts", "store_ns", "store_port",
                "message")


def fields(*vals):
    out = []
    for v in vals:
        if isinstance(v, int):
            out.append(b"i" + struct.pack("<q", v))
        else:
            v = v.encode() if isinstance(v, str) else v
            out.append(b"b" + struct.pack("<I", len(v)) + v)
    return b"".join(out)


def frame(op, payload, id):
    return struct.pack("<IHHI", 8 + len(payload), op, 0, id) + payload


def parse(payload):
    out, i, n = [], 0, len(payload)
    while i < n:
        t = payload[i:i + 1]
        i += 1
        if t == b"i":
            out.append(struct.unpack_from("<q", payload, i)[0])
            i += 8
        elif t == b"b":
            ln = struct.unpack_from("<I", payload, i)[0]
            i += 4
            out.append(bytes(payload[i:i + ln]))
            i += ln
        else:
            raise ValueError("bad field tag %r" % t)
    return out


class Conn:
    __slots__ = ("sock", "buf", "reply", "push", "idx")

    def __init__(self, sock, idx):
        self.sock, self.idx = sock, idx
        self.buf = bytearray()
        self.reply = None
        self.push = None

    def frames(self):
        """Complete frames in buf, consumed."""
        while len(self.buf) >= 12:
            n, op, flags, id = struct.unpack_from("<IHHI", self.buf, 0)
            if len(self.buf) < 4 + n:
                return
            payload = bytes(self.buf[12:4 + n])
            del self.buf[:4 + n]
            yield op, flags, id, payload


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 64
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            sys.exit("join1000: need %d descriptors, hard limit %d" %
                     (want, hard))
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--lws", type=int, default=8)
    ap.add_argument("--job", default="join1000-%d" % os.getpid())
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--heartbeats", type=int, default=0)
    a = ap.parse_args()
    raise_nofile(a.n)

    conns = []
    for i in range(a.n):
        s = socket.create_connection((a.host, a.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(MAGIC + struct.pack("<B3x", 1))
        conns.append(Conn(s, i))
    for c in conns:
        got = b""
        while len(got) < 8:
            chunk = c.sock.recv(8 - len(got))
            if not chunk:
                sys.exit("join1000: rdzvd closed during the preamble")
            got += chunk
        if got[:4] != MAGIC or got[4] != 1:
            sys.exit("join1000: bad preamble answer %r" % got)
        c.sock.setblocking(False)

    joins = []
    for c in conns:
        payload = fields(a.job, "inst-%d-%d" % (os.getpid(), c.idx),
                         "host-%d" % c.idx, "127.0.0.%d" % (1 + c.idx % 200),
                         100000 + c.idx, a.lws, a.n, a.n, 0, -1, -1)
        joins.append(frame(OP_JOIN, payload, 1))

    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c.sock, selectors.EVENT_READ, c)
    cpu0 = time.process_time()
    t0 = time.monotonic()
    for c, f in zip(conns, joins):
        # 100-odd bytes into an empty socket buffer: written whole.
        if c.sock.send(f) != len(f):
            sys.exit("join1000: short send")
    t_sent = time.monotonic()
    t_first = None
    t_last = None
    pending = a.n
    deadline = t0 + a.timeout
    while pending > 0:
        left = deadline - time.monotonic()
        if left <= 0:
            sys.exit("join1000: %d of %d connections without a round "
                     "after %.0f s" % (pending, a.n, a.timeout))
        for key, _ in sel.select(left):
            c = key.data
            try:
                chunk = c.sock.recv(65536)
            except BlockingIOError:
                continue
            if not chunk:
                sys.exit("join1000: rdzvd closed connection %d" % c.idx)
            c.buf += chunk
            for op, flags, id, payload in c.frames():
                if flags & F_PUSH and op == OP_ROUND:
                    p = dict(zip(ROUND_FIELDS, parse(payload)))
                    if c.push is None:
                        c.push = p
                        pending -= 1
                        now = time.monotonic()
                        if t_first is None:
                            t_first = now
                        if pending == 0:
                            t_last = now
                elif flags & F_REPLY and op == OP_JOIN:
                    if flags & F_ERROR:
                        sys.exit("join1000: JOIN refused: %r" %
                                 parse(payload))
                    c.reply = parse(payload)
    cpu = time.process_time() - cpu0

    bad = []
    ranks = sorted(c.push["group_rank"] for c in conns)
    if ranks != list(range(a.n)):
        bad.append("group ranks are not 0..%d" % (a.n - 1))
    rounds = {c.push["round"] for c in conns}
    if len(rounds) != 1:
        bad.append("pushes name rounds %r" % sorted(rounds))
    for c in conns:
        p = c.push
        if p["state"] != RUNNING or p["world_size"] != a.n * a.lws or \
                p["group_world_size"] != a.n or \
                p["rank_base"] != p["group_rank"] * a.lws:
            bad.append("connection %d: push %r" % (c.idx, p))
            break
    if not bad and a.heartbeats > 0:
        hb = heartbeats(conns[0], a.job, a.heartbeats)
    for c in conns:
        c.sock.close()
    if bad:
        sys.exit("join1000: " + "; ".join(bad))
    print("join n=%d all_pushes_ms=%.2f last_join_sent_ms=%.2f "
          "first_push_ms=%.2f client_cpu_ms=%.1f" %
          (a.n, (t_last - t0) * 1e3, (t_sent - t0) * 1e3,
           (t_first - t0) * 1e3, cpu * 1e3), flush=True)
    if a.heartbeats > 0:
        hb.sort()
        print("heartbeat n=%d p50_us=%.1f p99_us=%.1f" % (
            len(hb), hb[len(hb) // 2] * 1e6,
            hb[min(len(hb) - 1, len(hb) * 99 // 100)] * 1e6), flush=True)


def heartbeats(c, job, k):
    """k HEARTBEAT round trips of c's node, one at a time; seconds each."""
    c.sock.setblocking(True)
    out = []
    f = frame(OP_HEARTBEAT, fields(job, c.push["node_id"]), 7)
    for _ in range(k):
        t = time.monotonic()
        c.sock.sendall(f)
        while True:
            got = [x for x in c.frames() if x[0] == OP_HEARTBEAT]
            if got:
                break
            chunk = c.sock.recv(65536)
            if not chunk:
                sys.exit("join1000: rdzvd closed during HEARTBEATs")
            c.buf += chunk
        if got[0][1] & F_ERROR:
            sys.exit("join1000: HEARTBEAT refused: %r" % parse(got[0][3]))
        out.append(time.monotonic() - t)
    return out


if __name__ == "__main__":
    main()
