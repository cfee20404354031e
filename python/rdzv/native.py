# SPDX-License-Identifier: Apache-2.0
"""rdzv.native: a node's membership of an rdzvd job, over rdzvd's native
protocol (common/PROTOCOL.md), in pure Python.

Only what a launcher's node needs: the preamble and the token's
challenge-response (TLS when a CA is given), JOIN, HEARTBEAT, FAILURE,
SUCCEEDED, LEAVE, ADMIN_CLOSE and the ROUND pushes.  rdzv-agent does the
same in C (agent/rdzv.c); the framing and the fields are common/wire.h's.

Member keeps one connection to the rdzvd that leads (of a list: the others
refuse connections while they stand by) in a background thread:

    IDLE --connect--> HELLO --preamble, token--> JOINING --JOIN reply--> JOINED
      ^                                                                     |
      +---- drop (EOF, error, rdzvd silent past the lease): backoff --------+
    any state --close()--> CLOSED;  a refusal no retry can mend --> FATAL

A reconnect JOINs again with the same instance id, which rdzvd takes as
the same node: a running round goes on untouched, and rdzvd pushes the
node's round again.  Other threads send requests (call) over the same
connection and wait for their replies by id; a request cut off by a drop
is sent again once the node is back, until its deadline.
"""

import hashlib
import hmac
import logging
import os
import select
import socket
import ssl
import struct
import threading
import time

log = logging.getLogger("rdzv.native")

# Ops, flags and codes of common/wire.h and common/rdzv_err.h (the wire's).
OP_JOIN = 21
OP_HEARTBEAT = 22
OP_LEAVE = 23
OP_FAILURE = 24
OP_SUCCEEDED = 25
OP_ROUND = 26
OP_JOB_STATUS = 27
OP_ADMIN_CLOSE = 32
OP_AUTH_CHALLENGE = 34
OP_AUTH = 35

F_REPLY = 1
F_ERROR = 2
F_PUSH = 4

PRE_AUTH = 1
PRE_TLS = 2
VERSION = 1
MAGIC = b"RDZV"

ENOTFOUND = -4
ECONN = -9
EAUTH = -10
ECLOSED = -11
EINVAL = -1
ETLS = -16
EVERSION = -15
EPROTO = -2
ETIMEDOUT = -5

# enum rdzv_round_state
RUNNING, STANDBY, STOP, DONE, FAILED = 1, 2, 3, 4, 5

TOKEN_MAX = 4096		# RDZV_TOKEN_MAX
FRAME_MAX = 64 << 20		# what a node accepts from rdzvd
CONNECT_S = 5.0			# one connect and handshake
NEXT_EP_S = 0.005		# to the next rdzvd of a list
BACKOFF_MIN_S = 0.02
BACKOFF_MAX_S = 1.0


class RdzvError(Exception):
    """A refusal by rdzvd (code: an RDZV_E* number) or a failure to reach
    it (ECONN, ETIMEDOUT)."""

    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code


def encode(fields):
    """The payload of fields: each int as 'i' + int64, each bytes (or str,
    UTF-8) as 'b' + u32 length + bytes."""
    out = []
    for f in fields:
        if isinstance(f, int):
            out.append(b"i" + struct.pack("<q", f))
        else:
            if isinstance(f, str):
                f = f.encode()
            out.append(b"b" + struct.pack("<I", len(f)) + f)
    return b"".join(out)


def decode(payload):
    """The fields of payload, ints and bytes in order; raises RdzvError
    (EPROTO) on a bad tag or a length past the end."""
    out, i, n = [], 0, len(payload)
    while i < n:
        tag = payload[i:i + 1]
        if tag == b"i" and n - i - 1 >= 8:
            out.append(struct.unpack_from("<q", payload, i + 1)[0])
            i += 9
        elif tag == b"b" and n - i - 1 >= 4:
            ln = struct.unpack_from("<I", payload, i + 1)[0]
            if n - i - 5 < ln:
                raise RdzvError(EPROTO, "field past the frame's end")
            out.append(bytes(payload[i + 5:i + 5 + ln]))
            i += 5 + ln
        else:
            raise RdzvError(EPROTO, "malformed field")
    return out


def frame(op, fields, id, flags=0):
    """One whole frame: u32 length, u16 op, u16 flags, u32 id, payload."""
    p = encode(fields)
    return struct.pack("<IHHI", 8 + len(p), op, flags, id) + p


def parse_endpoints(spec, default_port=29400):
    """[(host, port)] of "H:P[,H2:P2...]" (an IPv6 host in brackets);
    raises ValueError on an empty list or a bad port."""
    out = []
    for ep in spec.split(","):
        ep = ep.strip()
        if not ep:
            continue
        if ep.startswith("["):
            host, _, rest = ep[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        elif ep.count(":") == 1:
            host, port = ep.split(":")
        else:
            host, port = ep, ""
        port = int(port) if port else default_port
        if not host or not 0 < port < 65536:
            raise ValueError("bad rdzvd endpoint %r" % ep)
        out.append((host, port))
    if not out:
        raise ValueError("no rdzvd endpoint in %r" % spec)
    return out


def load_token(path):
    """The token in file path, without one trailing newline (as rdzvd
    reads its own); raises ValueError when empty or too long, OSError
    when unreadable."""
    with open(path, "rb") as f:
        tok = f.read(TOKEN_MAX + 2)
    if tok.endswith(b"\n"):
        tok = tok[:-1]
    if tok.endswith(b"\r"):
        tok = tok[:-1]
    if not tok or len(tok) > TOKEN_MAX:
        raise ValueError("token file %s is %s (1 to %d bytes)" % (path,
            "empty" if not tok else "too long", TOKEN_MAX))
    return tok


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        b = sock.recv(n - len(buf))
        if not b:
            raise RdzvError(ECONN, "rdzvd closed the connection")
        buf += b
    return bytes(buf)


def read_frame(sock):
    """(op, flags, id, fields) of the next frame on blocking sock."""
    ln = struct.unpack("<I", _recv_exact(sock, 4))[0]
    if ln < 8 or ln > FRAME_MAX:
        raise RdzvError(EPROTO, "frame of %d bytes" % ln)
    body = _recv_exact(sock, ln)
    op, flags, id = struct.unpack_from("<HHI", body)
    return op, flags, id, decode(body[8:])


def _error(fields):
    """(code, message) of an error reply's fields."""
    if len(fields) != 2 or not isinstance(fields[0], int):
        raise RdzvError(EPROTO, "malformed error reply")
    return fields[0], fields[1].decode(errors="replace")


def connect(host, port, token=None, tls_ca=None, timeout=CONNECT_S):
    """A socket to the rdzvd at host:port with the native handshake done
    (TLS first when tls_ca is a CA file or "system"; the token's
    challenge-response when rdzvd asks).  Raises OSError when it cannot
    be reached, RdzvError for a refusal: EAUTH, ETLS, EVERSION (no retry
    mends those) or EPROTO (not an rdzvd)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if tls_ca:
            ctx = ssl.create_default_context(cafile=None if
                tls_ca == "system" else tls_ca)
            try:
                sock = ctx.wrap_socket(sock, server_hostname=host)
            except ssl.SSLCertVerificationError as e:
                raise RdzvError(ETLS, "TLS handshake with %s:%d "
                    "failed: %s (is tls_ca the CA that signed "
                    "rdzvd's --tls-cert?)" % (host, port, e))
        sock.sendall(MAGIC + bytes([VERSION, 0, 0, 0]))
        pre = _recv_exact(sock, 8)
        if pre[:4] != MAGIC:
            raise RdzvError(EPROTO, "%s:%d is not an rdzvd (bad "
                "preamble)" % (host, port))
        if pre[4] == 0 and pre[5] & PRE_TLS:
            raise RdzvError(ETLS, "rdzvd at %s:%d requires TLS: give "
                "its CA with tls_ca= or RDZV_TLS_CA" % (host, port))
        if pre[4] != VERSION:
            raise RdzvError(EVERSION, "rdzvd at %s:%d does not speak "
                "native protocol version %d" % (host, port, VERSION))
        if pre[5] & PRE_AUTH:
            _authenticate(sock, token, "%s:%d" % (host, port))
        sock.settimeout(None)
        return sock
    except BaseException:
        sock.close()
        raise


CRED_HEADER = b"rdzv job credential v1"     # common/auth.h


def job_credential(token):
    """(job, key) when token (a token file's bytes) is a job credential
    (rdzvctl credential; common/auth.c rdzv_cred_parse), else None (the
    operator's secret); raises ValueError for a malformed one."""
    lines = token.split(b"\n")
    if lines[0].rstrip(b"\r") != CRED_HEADER:
        return None
    if len(lines) != 3 or not lines[1].startswith(b"job ") or \
        not lines[2].startswith(b"key "):
        raise ValueError("a malformed job credential: want \"job ID\" "
            "and \"key HEX\" lines")
    job, key = lines[1][4:], lines[2][4:]
    if not 1 <= len(job) <= 256 or \
        any(c <= 0x20 or c >= 0x7f for c in job) or len(key) != 64:
        raise ValueError("a malformed job credential")
    return job, bytes.fromhex(key.decode("ascii"))


def _authenticate(sock, token, where):
    """Answers rdzvd's challenge with the token and checks its proof.
    A job credential's key makes the MACs, and AUTH names its job."""
    if token is None:
        raise RdzvError(EAUTH, "rdzvd at %s requires a token: pass "
            "token_file= in --rdzv_conf or set RDZV_TOKEN_FILE" % where)
    try:
        cred = job_credential(token)
    except ValueError as e:
        raise RdzvError(EAUTH, "the token file is %s" % e) from None
    extra = []
    if cred is not None:
        extra, token = [cred[0]], cred[1]
    op, flags, _, f = read_frame(sock)
    if op != OP_AUTH_CHALLENGE or flags != F_PUSH or len(f) != 1 or \
        len(f[0]) != 32:
        raise RdzvError(EPROTO, "no challenge from %s" % where)
    sn, cn = f[0], os.urandom(32)
    mac = hmac.new(token, b"rdzv-auth-v1 client" + sn + cn,
        hashlib.sha256).digest()
    sock.sendall(frame(OP_AUTH, [cn, mac] + extra, 1))
    op, flags, id, f = read_frame(sock)
    if op != OP_AUTH or id != 1 or not flags & F_REPLY:
        raise RdzvError(EPROTO, "unexpected frame from %s while "
            "authenticating" % where)
    if flags & F_ERROR:
        code, msg = _error(f)
        if code == EAUTH:
            raise RdzvError(EAUTH, "rdzvd refused our token: check "
                "the token file against rdzvd's --token-file")
        raise RdzvError(code, "rdzvd at %s refused AUTH: %s" % (where,
            msg))
    want = hmac.new(token, b"rdzv-auth-v1 server" + cn + sn,
        hashlib.sha256).digest()
    if len(f) != 1 or not hmac.compare_digest(f[0], want):
        raise RdzvError(EAUTH, "the server at %s does not hold our "
            "token: not our rdzvd" % where)


OP_SET = 2


class Writer:
    """Keys SET in rdzvd's namespaces over one native connection of its
    own: how a worker publishes its progress (progress/<rank> in its
    round's namespace) without torch's TCPStore client, which logs a C++
    stack trace whenever rdzvd closes a round's port under it.  set()
    connects (to the first of the endpoints that takes it: a standby
    refuses) when it has no connection, and raises OSError or RdzvError
    on failure, dropping the connection for the next call to make again.
    Not thread-safe: one thread writes."""

    def __init__(self, endpoints, token=None, tls_ca=None,
        timeout=CONNECT_S):
        self.endpoints, self.token, self.tls_ca = endpoints, token, tls_ca
        self.timeout = timeout
        self.sock, self.id = None, 0

    @classmethod
    def from_env(cls, timeout=CONNECT_S):
        """A Writer to the rdzvd rdzv-agent names (RDZV_ENDPOINT,
        RDZV_TOKEN_FILE, RDZV_TLS_CA), or None outside one."""
        env = os.environ
        try:
            eps = parse_endpoints(env.get("RDZV_ENDPOINT", ""))
            path = env.get("RDZV_TOKEN_FILE")
            token = load_token(path) if path else None
        except (ValueError, OSError):
            return None
        return cls(eps, token, env.get("RDZV_TLS_CA") or None, timeout)

    def set(self, ns, key, value):
        """Sets key to value in namespace ns; returns once rdzvd
        acknowledged it."""
        if self.sock is None:
            err = None
            for host, port in self.endpoints:
                try:
                    self.sock = connect(host, port, self.token,
                        self.tls_ca, self.timeout)
                    break
                except (OSError, RdzvError) as e:
                    err = e
            if self.sock is None:
                raise err
        try:
            self.sock.settimeout(self.timeout)
            self.id = self.id % 0x7fffffff + 1
            self.sock.sendall(frame(OP_SET, [ns, key, value], self.id))
            while True:
                op, flags, id, f = read_frame(self.sock)
                if flags & F_REPLY and id == self.id:
                    break		# pushes and others' replies: none here
            if flags & F_ERROR:
                code, msg = _error(f)
                raise RdzvError(code, "rdzvd refused SET %s: %s" % (key,
                    msg))
        except BaseException:
            self.close()
            raise

    def close(self):
        s, self.sock = self.sock, None
        if s is not None:
            try:
                s.close()
            except OSError:
                pass


class Round:
    """One ROUND push: what rdzvd tells a node of its job's round."""

    FIELDS = ("round", "state", "node_id", "group_rank",
        "group_world_size", "world_size", "rank_base", "restart_count",
        "max_restarts")

    def __init__(self, fields):
        ints = fields[1:10] + fields[11:12] + fields[13:]
        if len(fields) not in (13, 16) or \
            not all(isinstance(x, int) for x in ints) or \
            not isinstance(fields[0], bytes) or \
            not isinstance(fields[10], bytes) or \
            not isinstance(fields[12], bytes):
            raise RdzvError(EPROTO, "malformed ROUND push")
        self.job = fields[0].decode(errors="replace")
        for name, v in zip(self.FIELDS, fields[1:10]):
            setattr(self, name, v)
        self.store_ns = fields[10].decode(errors="replace")
        self.store_port = fields[11]
        self.message = fields[12].decode(errors="replace")
        self.kind = fields[13] if len(fields) == 16 else 0

    def __repr__(self):
        return "round %d state %d group rank %d/%d port %d" % (
            self.round, self.state, self.group_rank,
            self.group_world_size, self.store_port)


class Member:
    """One node of job `job` on the rdzvds at endpoints [(host, port)].

    join: JOIN's fields after the instance (host, addr, pid,
    local_world_size, min_nodes, max_nodes, max_restarts, last_call_ms,
    lease_ms).  on_event(kind, arg) is called from the member's thread:
    ("round", Round) for each ROUND push, ("joined", node_id) after each
    JOIN, ("closed", message) when rdzvd says the job is closed, ("fatal",
    RdzvError) when no retry can help.  start() starts the thread."""

    def __init__(self, endpoints, job, join, on_event, token=None,
        tls_ca=None, heartbeat_s=1.0):
        self.eps = list(endpoints)
        self.job = job
        self.instance = os.urandom(16).hex()
        self.join_fields = list(join)
        self.on_event = on_event
        self.token = token
        self.tls_ca = tls_ca
        self.hb_s = heartbeat_s
        self.lease_ms = None
        self.node_id = None
        self.host = None	# the endpoint joined last
        self.state = "idle"
        self.fatal = None
        self.cv = threading.Condition()
        self.sock = None
        self.send_lock = threading.Lock()
        self.next_id = 1
        self.pending = {}	# id -> [reply fields or RdzvError]
        self.gen = 0		# bumps at every drop
        self.thread = threading.Thread(target=self._run, daemon=True,
            name="rdzv-member")

    def start(self):
        """Starts the member's thread: connect, JOIN, heartbeats."""
        self.thread.start()

    def close(self):
        """Stops the thread and closes the connection (no LEAVE: see
        leave())."""
        with self.cv:
            self.state = "closed"
            sock = self.sock
            self.cv.notify_all()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.thread.is_alive() and \
            self.thread is not threading.current_thread():
            self.thread.join(5)

    def wait_joined(self, deadline):
        """Blocks until the node is joined (returns its node id), the
        member failed (raises its RdzvError) or closed, or monotonic
        deadline passes (raises ETIMEDOUT)."""
        with self.cv:
            while self.state != "joined":
                if self.fatal is not None:
                    raise self.fatal
                if self.state == "closed":
                    raise RdzvError(ECONN, "closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RdzvError(ETIMEDOUT, "rdzvd at %s "
                        "not reached in time" % self._where())
                self.cv.wait(left)
            return self.node_id

    def call(self, op, fields, deadline):
        """Sends request op once the node is joined and returns the
        reply's fields.  fields(node_id) makes the request's fields.
        A connection lost before the reply: sent again once the node
        is back.  Raises RdzvError: rdzvd's refusal, or ETIMEDOUT past
        monotonic deadline."""
        while True:
            node = self.wait_joined(deadline)
            with self.cv:
                id = self.next_id
                self.next_id = self.next_id % 0xffffffff + 1
                slot = self.pending[id] = [None]
                gen, sock = self.gen, self.sock
            try:
                with self.send_lock:
                    sock.sendall(frame(op, fields(node), id))
            except OSError:
                self._drop_from(gen, "send failed")
            with self.cv:
                while slot[0] is None and self.gen == gen and \
                    time.monotonic() < deadline:
                    self.cv.wait(deadline - time.monotonic())
                self.pending.pop(id, None)
                got = slot[0]
            if isinstance(got, RdzvError):
                raise got
            if got is not None:
                return got
            if time.monotonic() >= deadline:
                raise RdzvError(ETIMEDOUT, "no answer from rdzvd "
                    "at %s in time" % self._where())

    def _where(self):
        return ",".join("%s:%d" % ep for ep in self.eps)

    # ---- the member's thread ----

    def _run(self):
        ep, tried, backoff = 0, 0, 0.0
        while True:
            with self.cv:
                if self.state == "closed" or self.fatal:
                    return
            host, port = self.eps[ep]
            try:
                sock = connect(host, port, self.token, self.tls_ca)
            except RdzvError as e:
                if e.code in (EAUTH, ETLS, EVERSION):
                    self._fail(e)
                    return
                log.debug("rdzvd %s:%d: %s", host, port, e)
                sock = None
            except OSError as e:
                log.debug("rdzvd %s:%d: %s", host, port, e)
                sock = None
            if sock is not None:
                with self.cv:
                    if self.state == "closed":
                        sock.close()
                        return
                    self.sock, self.state = sock, "joining"
                    self.host = host
                self._session(sock)
                tried, backoff = 0, 0.0
            # The other rdzvds of the list at once (one of them may
            # lead now); then a capped backoff.
            ep = (ep + 1) % len(self.eps)
            tried += 1
            if tried < len(self.eps):
                wait = NEXT_EP_S
            else:
                tried = 0
                backoff = min(max(backoff * 2, BACKOFF_MIN_S),
                    max(min(self.hb_s, BACKOFF_MAX_S), 0.05))
                wait = backoff
            with self.cv:
                if self.state != "closed":
                    self.cv.wait(wait)

    def _send(self, op, fields):
        """Sends from the member's thread; returns the request id."""
        with self.cv:
            id = self.next_id
            self.next_id = self.next_id % 0xffffffff + 1
        with self.send_lock:
            self.sock.sendall(frame(op, fields, id))
        return id

    def _join_fields(self):
        return [self.job, self.instance] + self.join_fields

    def _session(self, sock):
        """JOINs on sock, then beats and reads until the connection
        drops or the member closes."""
        why = "closed"
        try:
            join_id = self._send(OP_JOIN, self._join_fields())
            hb_id, last_rx = None, time.monotonic()
            next_hb = None
            while True:
                with self.cv:
                    if self.state == "closed" or self.fatal:
                        return
                now = time.monotonic()
                if next_hb is not None and now >= next_hb:
                    dead = max(3 * self.hb_s, (self.lease_ms or
                        0) / 1000.0)
                    if hb_id is not None and now - last_rx > dead:
                        why = "rdzvd silent"
                        return
                    if hb_id is None:
                        hb_id = self._send(OP_HEARTBEAT,
                            [self.job, self.node_id, 0])
                    next_hb = now + self.hb_s
                wait = None if next_hb is None else \
                    max(next_hb - now, 0)
                if not (isinstance(sock, ssl.SSLSocket) and
                    sock.pending()):
                    r, _, _ = select.select([sock], [], [], wait)
                    if not r:
                        continue
                op, flags, id, f = read_frame(sock)
                last_rx = time.monotonic()
                if flags & F_PUSH:
                    if op == OP_ROUND:
                        self.on_event("round", Round(f))
                    continue
                if not flags & F_REPLY:
                    continue
                err = _error(f) if flags & F_ERROR else None
                if id == join_id:
                    join_id = None
                    if err is None:
                        self._joined(f)
                        next_hb = time.monotonic() + self.hb_s
                        continue
                    if err[0] == ECLOSED:
                        self.on_event("closed", err[1])
                        self._fail(RdzvError(ECLOSED, err[1]))
                        return
                    if err[0] == EINVAL:
                        self._fail(RdzvError(EINVAL, "rdzvd "
                            "refused to join job %s: %s" %
                            (self.job, err[1])))
                        return
                    why = "JOIN refused: %s" % err[1]
                    return
                if id == hb_id:
                    hb_id = None
                    if err is not None and err[0] == ENOTFOUND:
                        # rdzvd dropped this node (lease):
                        # join again, as a new node.
                        log.warning("rdzvd no longer knows node "
                            "%s: joining again", self.node_id)
                        with self.cv:
                            self.state = "joining"
                        join_id = self._send(OP_JOIN,
                            self._join_fields())
                        next_hb = None
                    continue
                with self.cv:
                    slot = self.pending.get(id)
                    if slot is not None:
                        slot[0] = RdzvError(err[0], err[1]) \
                            if err else f
                        self.cv.notify_all()
        except RdzvError as e:
            why = str(e)
        except OSError as e:
            why = str(e)
        except Exception as e:	# never a silent end of the heartbeats
            log.exception("rdzvd session of job %s", self.job)
            why = repr(e)
        finally:
            self._drop(sock, why)

    def _joined(self, f):
        if len(f) != 3 or not all(isinstance(x, int) for x in f):
            raise RdzvError(EPROTO, "malformed JOIN reply")
        node_id, _, lease = f
        if lease > 0:
            self.lease_ms = lease
            # Beat well within the job's lease (the first JOIN
            # chose it), whatever this node asked for.
            self.hb_s = min(self.hb_s, max(lease / 4000.0, 0.01))
        with self.cv:
            old, self.node_id = self.node_id, node_id
            self.state = "joined"
            self.cv.notify_all()
        if old is None:
            log.info("joined job %s as node %d", self.job, node_id)
        else:
            log.info("rejoined job %s as node %d", self.job, node_id)
        self.on_event("joined", node_id)

    def _drop(self, sock, why):
        with self.cv:
            was = self.state
            if self.sock is sock:
                self.sock = None
            if self.state != "closed":
                self.state = "idle"
            self.gen += 1
            self.cv.notify_all()
        try:
            sock.close()
        except OSError:
            pass
        if was == "joined":
            log.warning("connection to rdzvd lost: %s; reconnecting",
                why)

    def _drop_from(self, gen, why):
        """A sender saw the connection of generation gen fail."""
        with self.cv:
            sock = self.sock if self.gen == gen else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _fail(self, e):
        with self.cv:
            self.fatal = e
            self.cv.notify_all()
        self.on_event("fatal", e)
