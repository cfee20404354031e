# SPDX-License-Identifier: Apache-2.0
"""rdzvtest: the shared harness for rdzv's integration and compatibility tests.

Everything a test needs to drive a real rdzvd over loopback, in pure Python
(no torch needed, so it runs under any python3; /usr/bin/python3 is used by
`make check` because the compat tests also import torch).

Why about 2,000 lines: every integration test imports this one module
(one import, one place to look); its parts are listed below.

What is here
------------
Running rdzvd
    d = Rdzvd(extra_args, durability=..., db=...)   # starts it, waits for ready
    d.port, d.http_port, d.tmpdir, d.log_path, d.db, d.pid
    d.stop()      SIGTERM, SIGKILL after a grace; returns the exit status
    d.stop_clean()  d.stop(), asserting exit 0 and no sanitizer report in
                  its log (an --enable-asan build)
    d.kill9()     SIGKILL, no drain
    d.restart()   starts again with the same arguments and the same --db
    d.metrics()   /metrics parsed (see parse_metrics); d.metric(name, **labels)
    d.http_get(path) -> (status, body bytes)
    d.vmrss()     resident set size in bytes, from /proc/PID/status
    d.native(ns=b"") / d.tcps113() / d.tcps2() / d.connect()   clients
    d.native(tls_ca=certs["ca"])   the native client over TLS
    Rdzvd(tls_cert=, tls_key=, tls_mode="required"|"optional") adds
                  --tls-cert/--tls-key/--tls (tls=certs takes cert and key
                  from a make_tls_certs() dict and keeps certs["ca"] as
                  d.tls_ca)
    run_rdzvd(args) -> (rc, stdout, stderr) for start-up error tests
    Rdzvd(args, raw=True) passes only -d and args (e.g. --config FILE)
  Every process started here is tracked by pid and killed at exit, on a
  deadline, on SIGTERM/SIGINT and when a test fails: nothing is left behind,
  and nothing we did not start is ever signalled.
    p = spawn(argv, **popen_kw)   any other process (torch children, which
                  start their own): leads a new session, tracked as a group
    end(p, sig=SIGKILL)   signals p's group, reaps p; end_all() ends every
                  group spawn() started (not the servers)

Clients (all take a connected socket or (host, port); every socket has a
receive timeout so a missing reply fails instead of hanging)
    NativeClient      common/PROTOCOL.md: one method per native op; errors
                      raise RdzvError(code, message) with an RDZV_E* code
    TCPStore113       torch 1.13 dialect, raw struct encoding
    TCPStore2         torch 2.x dialect (handshake VALIDATE + PING)
    enc113(op, ...), enc2(op, ...)  raw request bytes for byte-level tests
    TorchServer(python=, backend=, world_size=)   torch's own TCPStore
                      server (1.13 by default, or a 2.x one, libuv or
                      classic) in a child process: the reference that
                      clients and rdzvd are held to

Helpers
    connect(host, port) / recv_exact(sock, n)   TCP_NODELAY, timeouts;
                      PeerClosed on EOF or reset
    expect_closed(sock, t)  asserts the peer closes within t; returns what
                      arrived first (b"" = closed without a reply)
    still_open(sock, wait)  True if not closed (AssertionError on data)
    send_all_slowly(sock, data, step, pause)   split a request
    wait_until(pred, timeout, what=)   poll until true or AssertionError
    parse_metrics(text) -> (samples, types); metric_value(samples, name,
                      default, **labels)
    mktemp()          a temp dir removed at exit
    secret_file(path, data) -> path: data (bytes or str) written, mode 0600
                      (a token or password file the daemons accept)
    make_tls_certs(dir) -> dict of PEM paths made with the openssl CLI: ca,
                      cert/key (localhost, 127.0.0.1, ::1, signed by ca),
                      other_ca (unrelated), wrong_host_cert/_key (signed by
                      ca, for another name only), other_key (matches no
                      certificate), other_cert/_key (signed by other_ca)
    tls_wrap(sock, ca, host)   a verifying client TLS socket (handshake
                      done); ssl errors become RdzvError(RDZV_ETLS)
    ts/u8/u32/u64/i64, nat_frame/nat_fields/nat_preamble   wire encoders
    RDZV_E* constants and ERR_NAMES (common/rdzv_err.h)

Test runner convention (one runner for tests/integ and tests/compat)
    def test_something(): ...         # plain asserts
    if __name__ == "__main__":
        rdzvtest.main(globals())
  main() runs every test_* function in definition order, prints "ok NAME",
  "FAIL NAME" (with the traceback) or "skip NAME: reason", and exits 0 only
  if nothing failed, 77 (automake's SKIP) if everything was skipped, else 1.
  A whole file may call skip_all(reason) before main() to exit 77.
  main(globals(), sections=True, server=SRV) (tests/compat) runs them as
  sections of one scenario instead: they share servers and processes, the
  first failure stops the file, and a section marked @needs("test_a")
  builds on what test_a left.
  One test alone: `python3 FILE.py test_a test_b` or RDZV_TEST_ONLY="test_a
  test_b" (for make check); a section also runs the sections it needs();
  `python3 FILE.py --list` lists them.
  Deadlines: each test gets `per_test` seconds (SIGALRM raises Deadline, a
  BaseException, so a broad `except Exception` in a test cannot swallow
  it); the whole file gets `total` seconds, enforced by a watchdog thread
  that cleans up and exits 1 even if the main thread is stuck.

Environment
    RDZV_TOP_BUILDDIR  where rdzvd/rdzvd is (default: two levels above this
                       file, i.e. an in-tree build)
    RDZV_TEST_KEEP=1   keep the temp dirs of rdzvd instances (for debugging)
    RDZV_TEST_VERBOSE=1  print rdzvd's log when a test fails (default on)
    RDZV_TEST_ONLY     the tests to run (see main())
"""

import atexit
import http.client
import os
import re
import select
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

__all__ = [
    "Rdzvd", "run_rdzvd", "rdzvd_path", "NativeClient", "TCPStore113",
    "TCPStore2", "TorchServer", "RdzvError", "PeerClosed", "Skip", "Deadline",
    "parse_metrics", "enc113", "enc2", "main", "skip", "skip_all",
    "TORCH_PYTHON", "TORCH2_PYTHON", "has_torch", "no_torch",
    "wait_until", "expect_closed", "still_open", "connect", "recv_exact",
    "send_all_slowly", "metric_value", "mktemp", "top_builddir",
    "top_srcdir", "make_tls_certs", "tls_wrap", "tls_client_context",
    "spawn", "end", "end_all", "needs",
]

# ---- error codes (common/rdzv_err.h; they travel on the wire) ----

RDZV_OK = 0
RDZV_EINVAL = -1
RDZV_EPROTO = -2
RDZV_ETOOBIG = -3
RDZV_ENOTFOUND = -4
RDZV_ETIMEDOUT = -5
RDZV_ECANCELED = -6
RDZV_ENOMEM = -7
RDZV_EIO = -8
RDZV_ECONN = -9
RDZV_EAUTH = -10
RDZV_ECLOSED = -11
RDZV_EEXIST = -12
RDZV_ENOTINT = -13
RDZV_EBUSY = -14
RDZV_EVERSION = -15
RDZV_ETLS = -16

ERR_NAMES = {v: k for k, v in globals().items() if k.startswith("RDZV_E")}


class RdzvError(Exception):
    """A native error reply (or a client-side protocol failure).

    .code is the negative RDZV_E* code, .message the server's text.
    """

    def __init__(self, code, message=""):
        self.code = code
        self.message = message
        name = ERR_NAMES.get(code, str(code))
        Exception.__init__(self, "%s (%d): %s" % (name, code, message))


class PeerClosed(RdzvError):
    """The server closed the connection (EOF or reset) mid-exchange."""

    def __init__(self, message="connection closed by peer"):
        RdzvError.__init__(self, RDZV_ECONN, message)


class Skip(Exception):
    """Raise (or call skip()) inside a test to report it as skipped."""


class Deadline(BaseException):
    """A test ran past its deadline.  BaseException so that a test's own
    `except Exception` does not swallow it."""


def skip(reason):
    raise Skip(reason)


def skip_all(reason):
    """Skips the whole file: prints the reason and exits 77."""
    print("SKIP: %s" % reason, flush=True)
    _cleanup()
    os._exit(77)


# ---- the PyTorch versions ----
#
# Debian's torch 1.13 and the torch 2.13 virtualenv scripts/deps.sh makes;
# configure passes both to make check (TORCH_PYTHON, TORCH2_PYTHON), the
# defaults are for a test run by hand.

TORCH_PYTHON = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")
TORCH2_PYTHON = os.environ.get("TORCH2_PYTHON", os.path.join(
    os.environ.get("RDZV_TORCH2_VENV", os.path.join(os.environ.get(
        "XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "rdzv",
        "torch-2.13")), "bin", "python"))


def has_torch(python, module="torch.distributed"):
    """Whether python can import module (torch.distributed by default)."""
    return os.access(python, os.X_OK) and subprocess.run(
        [python, "-c", "import " + module], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL).returncode == 0


def no_torch(reason, whole_file=True):
    """A missing torch: a failure where the suite promised one
    (RDZV_REQUIRE_TORCH=1: scripts/test.sh, so CI), a visible skip of the
    file (or, whole_file false, of the test) elsewhere."""
    if os.environ.get("RDZV_REQUIRE_TORCH") == "1":
        reason += " (RDZV_REQUIRE_TORCH=1: scripts/deps.sh installs it)"
        if not whole_file:
            raise AssertionError(reason)
        print("FAIL: %s" % reason, flush=True)
        _cleanup()
        os._exit(1)
    if whole_file:
        skip_all(reason)
    skip(reason)


# ---- process tracking and cleanup ----
#
# Every process started here is tracked until reaped.  Most are signalled
# by pid; those spawn() starts (torch children, which start children of
# their own: torchrun's workers) lead a new session and are signalled as a
# group, with killpg on their own pid, so only groups we created are ever
# signalled, and a worker that outlives its leader still ends.

_procs = {}             # pid -> (Popen, kind): "pid", "group" or "server"
_procs_lock = threading.Lock()
_tmpdirs = []


def _track(p, kind="pid"):
    with _procs_lock:
        _procs[p.pid] = (p, kind)


def _untrack(p):
    with _procs_lock:
        _procs.pop(p.pid, None)


def _signal_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_tracked():
    """SIGKILLs every process we started that has not been reaped, and
    every group spawn() started (even if its leader is gone)."""
    with _procs_lock:
        procs = list(_procs.values())
        _procs.clear()
    for p, kind in procs:
        if kind != "pid":
            _signal_group(p, signal.SIGKILL)
        elif p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            p.wait(timeout=5)
        except Exception:
            pass


def spawn(args, **kw):
    """subprocess.Popen(args, **kw) as the leader of a new session (stdin
    /dev/null unless given), tracked: end(p), end_all(), a failing test
    and the exit all end its whole group."""
    kw["start_new_session"] = True
    kw.setdefault("stdin", subprocess.DEVNULL)
    p = subprocess.Popen(args, **kw)
    _track(p, "group")
    return p


def end(p, sig=signal.SIGKILL):
    """Signals the group p leads (even if p itself is gone), then reaps
    p (waiting up to 10 s)."""
    _signal_group(p, sig)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return
    if sig == signal.SIGKILL:
        _untrack(p)     # else a child that ignored sig ends at exit


def end_all():
    """end() of every group spawn() started that is still tracked (not
    the servers: TorchServer, Rdzvd)."""
    with _procs_lock:
        ps = [p for p, kind in _procs.values() if kind == "group"]
    for p in ps:
        end(p)


def _cleanup():
    _kill_tracked()
    if os.environ.get("RDZV_TEST_KEEP") != "1":
        for d in _tmpdirs:
            shutil.rmtree(d, ignore_errors=True)
        del _tmpdirs[:]


atexit.register(_cleanup)


def _fatal_signal(signo, frame):
    _cleanup()
    os._exit(128 + signo)


for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    try:
        signal.signal(_s, _fatal_signal)
    except (ValueError, OSError):
        pass    # not the main thread: whoever imported us handles signals


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def mktemp(prefix="rdzvtest-"):
    """A fresh temporary directory, removed at exit unless RDZV_TEST_KEEP=1."""
    d = tempfile.mkdtemp(prefix=prefix)
    _tmpdirs.append(d)
    return d


def secret_file(path, data):
    """Writes data (bytes or str) to path, readable by its owner alone, as
    rdzvd and rdzv-agent want a token or password file; returns path."""
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    os.chmod(path, 0o600)
    return path


# ---- small helpers ----

def wait_until(pred, timeout=5.0, interval=0.01, what="condition"):
    """Polls pred() until it returns a true value (returned), or raises
    AssertionError after timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= end:
            raise AssertionError("timed out after %.1fs waiting for %s" %
                                 (timeout, what))
        time.sleep(interval)


def stacks(pids, frames=10, budget=60.0):
    """Where each of pids is, for a hang's verdict: one line per thread,
    "STACK pid N COMM thread T: inner < caller < ...", function names
    from gdb (Debian's gdb, scripts/deps.sh), within budget seconds in
    all; one line saying why when there is no gdb or no time left."""
    if shutil.which("gdb") is None:
        return ["STACK no gdb here: no stacks (apt-get install gdb)"]
    out = []
    end = time.monotonic() + budget
    frame_re = re.compile(r"#\d+\s+(?:0x[0-9a-f]+ in )?([^\s(]+)")
    for pid in pids:
        try:
            with open("/proc/%d/comm" % pid) as f:
                comm = f.read().strip()
        except OSError:
            continue
        left = end - time.monotonic()
        if left < 1:
            out.append("STACK pid %d %s: no time left for gdb" % (pid, comm))
            continue
        try:
            r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-q",
                                "-ex", "set pagination off",
                                "-ex", "thread apply all bt %d" % frames],
                               stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, errors="replace", timeout=left)
        except subprocess.TimeoutExpired:
            out.append("STACK pid %d %s: gdb ran past the budget" %
                       (pid, comm))
            continue
        threads = []
        for ln in r.stdout.splitlines():
            if ln.startswith("Thread "):
                threads.append([])
            elif threads and ln.startswith("#"):
                m = frame_re.match(ln)
                if m:
                    threads[-1].append(m.group(1))
        if not threads:
            out.append("STACK pid %d %s: gdb saw no thread: %s" %
                       (pid, comm, (r.stderr.strip().splitlines() or
                                    ["?"])[-1][:200]))
        for i, t in enumerate(threads):
            out.append("STACK pid %d %s thread %d: %s" %
                       (pid, comm, i + 1, " < ".join(t)))
    return out


def procs():
    """(pid, comm, state, ppid) of each process in /proc now (one that
    ends while it is read is left out): the one reader of
    /proc/PID/stat for the tests."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()
        out.append((int(name), st[st.find("(") + 1:st.rfind(")")],
                    fields[0], int(fields[1])))
    return out


def tree(pids):
    """pids and every live process descended from them, parents first."""
    kids = {}
    for pid, _, _, ppid in procs():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop(0)
        if pid not in out:
            out.append(pid)
            todo.extend(sorted(kids.get(pid, ())))
    return out


def _where_tracked():
    """stacks() of every process a test started and not yet reaped, and
    of their children (workers, their DataLoader processes): printed when
    a test runs past its deadline, before they are killed, so a hang's
    log says where each one waited."""
    with _procs_lock:
        pids = [p.pid for p, _ in _procs.values() if p.poll() is None]
    if pids:
        print("--- where the test's processes were ---")
        print("\n".join(stacks(tree(pids), budget=45.0)), flush=True)


def top_builddir():
    d = os.environ.get("RDZV_TOP_BUILDDIR")
    if d:
        return d
    return os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def top_srcdir():
    d = os.environ.get("RDZV_TOP_SRCDIR")
    if d:
        return d
    return os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def rdzvd_path():
    """Path of the rdzvd binary under test (need not exist)."""
    return os.path.join(top_builddir(), "rdzvd", "rdzvd")


def connect(host, port=None, timeout=10.0):
    """A TCP connection with TCP_NODELAY and a receive timeout.  host may be
    a (host, port) tuple."""
    if port is None:
        host, port = host
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(timeout)
    return s


def recv_exact(sock, n):
    """Reads exactly n bytes or raises PeerClosed (EOF/reset) or
    socket.timeout."""
    chunks = []
    left = n
    while left > 0:
        try:
            b = sock.recv(min(left, 1 << 20))
        except (ConnectionResetError, ConnectionAbortedError,
                ssl.SSLEOFError, ssl.SSLZeroReturnError) as e:
            raise PeerClosed("reset after %d of %d bytes: %s" %
                             (n - left, n, e))
        if not b:
            raise PeerClosed("EOF after %d of %d bytes" % (n - left, n))
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def expect_closed(sock, timeout=5.0):
    """Asserts the peer closes sock (EOF or reset) within timeout; returns
    whatever bytes arrived before the close."""
    end = time.monotonic() + timeout
    got = []
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError("connection still open after %.1fs "
                                 "(received %r)" % (timeout, b"".join(got)))
        # An SSL socket may hold decrypted bytes the fd no longer shows.
        if not _pending(sock):
            r, _, _ = select.select([sock], [], [], left)
            if not r:
                continue
        try:
            b = sock.recv(65536)
        except (ConnectionResetError, ConnectionAbortedError,
                BrokenPipeError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
            return b"".join(got)
        except ssl.SSLError:
            # A TLS alert from the peer also ends the connection.
            return b"".join(got)
        except socket.timeout:
            continue
        if not b:
            return b"".join(got)
        got.append(b)


def still_open(sock, wait=0.0):
    """True if, after waiting up to `wait` seconds, sock has neither been
    closed by the peer nor received unexpected data.  Raises AssertionError
    if data arrived (a test calling this expects silence)."""
    if isinstance(sock, ssl.SSLSocket):
        return _ssl_still_open(sock, wait)
    r, _, _ = select.select([sock], [], [], wait)
    if not r:
        return True
    try:
        b = sock.recv(65536, socket.MSG_PEEK)
    except (ConnectionResetError, ConnectionAbortedError):
        return False
    if not b:
        return False
    raise AssertionError("unexpected data on a silent connection: %r" % b)


def _pending(sock):
    return isinstance(sock, ssl.SSLSocket) and sock.pending() > 0


def _ssl_still_open(sock, wait):
    # No MSG_PEEK through TLS: a readable fd is read (with a short
    # timeout, as it may hold only part of a record or a session ticket).
    if not sock.pending():
        r, _, _ = select.select([sock], [], [], wait)
        if not r:
            return True
    old = sock.gettimeout()
    sock.settimeout(0.2)
    try:
        b = sock.recv(65536)
    except socket.timeout:
        return True
    except (ConnectionResetError, ConnectionAbortedError, ssl.SSLError):
        return False
    finally:
        sock.settimeout(old)
    if not b:
        return False
    raise AssertionError("unexpected data on a silent connection: %r" % b)


def send_all_slowly(sock, data, step=1, pause=0.0):
    """Sends data `step` bytes at a time (with TCP_NODELAY each send is its
    own segment on loopback), pausing between sends."""
    for i in range(0, len(data), step):
        sock.sendall(data[i:i + step])
        if pause:
            time.sleep(pause)


# ---- TLS test material (openssl CLI) and the client side ----

# A server certificate's extensions; each section adds its names.
_TLS_LEAF_EXT = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""
_TLS_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
""" + _TLS_LEAF_EXT + """\
subjectAltName = DNS:localhost, IP:127.0.0.1, IP:::1
[wrong_host_ext]
""" + _TLS_LEAF_EXT + """\
subjectAltName = DNS:not-this-host.example
"""

_tls_certs_cache = None


def _openssl(*args, cwd):
    p = subprocess.run(["openssl"] + list(args), cwd=cwd,
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise AssertionError("openssl %s failed (%d): %s" %
                             (" ".join(args), p.returncode,
                              p.stderr.decode(errors="replace")))


def make_tls_certs(dirpath=None):
    """Makes PEM test certificates with the openssl CLI in dirpath (a new
    temp dir, shared by the whole process, when None) and returns their
    paths: ca / ca_key (a CA), cert / key (a server certificate signed by
    ca for DNS:localhost, IP:127.0.0.1, IP:::1), other_ca / other_ca_key
    (an unrelated CA), wrong_host_cert / wrong_host_key (signed by ca, for
    not-this-host.example only), other_key (a key matching no certificate),
    other_cert / other_cert_key (like cert, but signed by other_ca: a
    rotated certificate).
    Keys are P-256 (quick to make), files mode 0600.  Skips the test when
    no openssl command exists."""
    global _tls_certs_cache
    if dirpath is None and _tls_certs_cache is not None:
        return dict(_tls_certs_cache)
    if shutil.which("openssl") is None:
        raise Skip("no openssl command (Debian package openssl)")
    d = dirpath or mktemp("rdzvtls-")
    os.makedirs(d, exist_ok=True)
    cnf = os.path.join(d, "openssl.cnf")
    with open(cnf, "w") as f:
        f.write(_TLS_CNF)
    newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
              "-nodes"]

    def ca(name, cn):
        _openssl("req", "-config", cnf, "-x509", *newkey, "-keyout",
                 name + ".key", "-out", name + ".pem", "-days", "3",
                 "-subj", "/CN=" + cn, "-extensions", "ca_ext", "-sha256",
                 cwd=d)

    def leaf(name, ext, cn, ca="ca"):
        _openssl("req", "-config", cnf, "-new", *newkey, "-keyout",
                 name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn,
                 cwd=d)
        _openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem",
                 "-CAkey", ca + ".key", "-set_serial",
                 str(int.from_bytes(os.urandom(8), "big")), "-days", "3",
                 "-sha256", "-extfile", cnf, "-extensions", ext, "-out",
                 name + ".pem", cwd=d)

    ca("ca", "rdzv test CA")
    ca("other-ca", "rdzv unrelated test CA")
    leaf("server", "server_ext", "localhost")
    leaf("wrong-host", "wrong_host_ext", "not-this-host.example")
    leaf("other-server", "server_ext", "localhost", ca="other-ca")
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-out", "other.key", cwd=d)
    for n in os.listdir(d):
        os.chmod(os.path.join(d, n), 0o600)
    j = lambda n: os.path.join(d, n)
    certs = {
        "dir": d, "ca": j("ca.pem"), "ca_key": j("ca.key"),
        "cert": j("server.pem"), "key": j("server.key"),
        "other_ca": j("other-ca.pem"), "other_ca_key": j("other-ca.key"),
        "wrong_host_cert": j("wrong-host.pem"),
        "wrong_host_key": j("wrong-host.key"),
        "other_key": j("other.key"),
        "other_cert": j("other-server.pem"),
        "other_cert_key": j("other-server.key"),
    }
    if dirpath is None:
        _tls_certs_cache = dict(certs)
    return certs


def tls_client_context(ca):
    """A verifying client context for CA bundle `ca` ("system" = the
    system store), TLS 1.2 at least, host names checked."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca == "system":
        ctx.load_default_certs()
    else:
        ctx.load_verify_locations(cafile=ca)
    return ctx


def tls_wrap(sock, ca, host=None):
    """Runs a verifying TLS handshake on the connected sock (host: the
    name or address the certificate must carry, default the peer's
    address) and returns the ssl.SSLSocket.  A failure closes sock and
    raises RdzvError(RDZV_ETLS, reason) with the ssl exception as
    .tls_error (None when the peer just closed)."""
    if host is None:
        host = sock.getpeername()[0]
    try:
        return tls_client_context(ca).wrap_socket(sock,
                                                  server_hostname=host)
    except (ssl.SSLError, ssl.CertificateError, ConnectionResetError,
            ConnectionAbortedError, BrokenPipeError) as e:
        sock.close()
        err = RdzvError(RDZV_ETLS, "TLS handshake with %s failed: %s" %
                        (host, e))
        err.tls_error = e if isinstance(e, ssl.SSLError) else None
        raise err from e


# ---- Prometheus text parsing ----

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*')


def _unescape_label(v):
    out = []
    i = 0
    while i < len(v):
        c = v[i]
        if c == "\\" and i + 1 < len(v):
            n = v[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(n, "\\" + n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _parse_value(s):
    if s in ("+Inf", "Inf"):
        return float("inf")
    if s == "-Inf":
        return float("-inf")
    if s == "NaN":
        return float("nan")
    return float(s)     # raises ValueError on junk


def parse_metrics(text, strict=True):
    """Parses Prometheus text exposition format 0.0.4.

    Returns (samples, types): samples maps (name, labels) -> float, where
    labels is a tuple of (label, value) pairs sorted by label; types maps a
    metric family name to its # TYPE.  With strict, any line that is not a
    comment, a blank line or a valid sample raises ValueError naming it, as
    do a duplicate sample and a TYPE that comes after its samples or is
    unknown.
    """
    samples = {}
    types = {}
    seen_families = set()
    for lineno, line in enumerate(text.split("\n"), 1):
        if line == "" or line.isspace():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                if not _NAME_RE.fullmatch(parts[2]):
                    raise ValueError("line %d: bad metric name in %r" %
                                     (lineno, line))
                if parts[1] == "TYPE":
                    if len(parts) != 4 or parts[3] not in (
                            "counter", "gauge", "histogram", "summary",
                            "untyped"):
                        raise ValueError("line %d: bad TYPE %r" %
                                         (lineno, line))
                    if strict and parts[2] in seen_families:
                        raise ValueError("line %d: TYPE after samples: %r" %
                                         (lineno, line))
                    types[parts[2]] = parts[3]
            continue
        m = _NAME_RE.match(line)
        if not m:
            raise ValueError("line %d: no metric name: %r" % (lineno, line))
        name = m.group(0)
        rest = line[m.end():]
        labels = []
        if rest.startswith("{"):
            close = rest.find("}")
            # a '}' may sit inside a quoted label value: scan properly
            i = 1
            while True:
                if i < len(rest) and rest[i] == "}":
                    close = i
                    break
                lm = _LABEL_RE.match(rest, i)
                if not lm:
                    raise ValueError("line %d: bad labels: %r" %
                                     (lineno, line))
                labels.append((lm.group(1), _unescape_label(lm.group(2))))
                i = lm.end()
                if i < len(rest) and rest[i] == ",":
                    i += 1
                elif i < len(rest) and rest[i] == "}":
                    continue
                else:
                    raise ValueError("line %d: bad labels: %r" %
                                     (lineno, line))
            rest = rest[close + 1:]
        if not rest.startswith((" ", "\t")):
            raise ValueError("line %d: no value: %r" % (lineno, line))
        fields = rest.split()
        if len(fields) not in (1, 2):
            raise ValueError("line %d: bad value: %r" % (lineno, line))
        try:
            value = _parse_value(fields[0])
            if len(fields) == 2:
                int(fields[1])
        except ValueError:
            raise ValueError("line %d: bad value: %r" % (lineno, line))
        key = (name, tuple(sorted(labels)))
        if strict and key in samples:
            raise ValueError("line %d: duplicate sample %r" % (lineno, line))
        samples[key] = value
        fam = name
        for suf in ("_bucket", "_sum", "_count"):
            if name.endswith(suf) and name[:-len(suf)] in types:
                fam = name[:-len(suf)]
        seen_families.add(fam)
    return samples, types


def metric_value(samples, name, default=None, **labels):
    """samples[(name, labels)] or default; labels given as keywords."""
    return samples.get((name, tuple(sorted(labels.items()))), default)


# ---- rdzvd process management ----

def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_rdzvd(args, timeout=10.0, binary=None):
    """Runs rdzvd with args to completion (for --help, start-up errors).
    Returns (exit status, stdout text, stderr text); a negative status is
    a signal.  Kills it and raises AssertionError if it outlives timeout."""
    p = subprocess.Popen([binary or rdzvd_path()] + list(args),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    _track(p)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError("rdzvd %s still running after %.1fs; stderr: %s"
                             % (" ".join(args), timeout,
                                err.decode(errors="replace")[-2000:]))
    finally:
        _untrack(p)
    return (p.returncode, out.decode(errors="replace"),
            err.decode(errors="replace"))


class Rdzvd:
    """One rdzvd instance on 127.0.0.1 in its own temp directory.

    Started with -d --listen 127.0.0.1:0 --port-file, --http 127.0.0.1:0
    --http-port-file, --log-file (unless log=False), --db (default
    TMP/rdzvd.db; pass db=":memory:" or durability="memory" for none) and
    the extra args.  start=False builds the object without starting it.
    raw=True passes only -d and the extra args (e.g. a --config file that
    names self.port_file and self.http_port_file itself); http=False with
    raw expects no HTTP port file.
    """

    instances = []

    def __init__(self, args=(), durability=None, db=None, http=True,
                 log=True, start=True, ready_timeout=10.0, binary=None,
                 tmpdir=None, env=None, raw=False, tls=None,
                 tls_cert=None, tls_key=None, tls_mode=None, tls_ca=None):
        self.tmpdir = tmpdir or mktemp("rdzvd-")
        if tls is not None:
            tls_cert = tls_cert or tls["cert"]
            tls_key = tls_key or tls["key"]
            tls_ca = tls_ca or tls["ca"]
        self.tls_cert, self.tls_key = tls_cert, tls_key
        self.tls_mode, self.tls_ca = tls_mode, tls_ca
        self.binary = binary or rdzvd_path()
        self.extra = list(args)
        self.durability = durability
        self.db = db if db is not None else os.path.join(self.tmpdir,
                                                         "rdzvd.db")
        self.http = http
        self.log_path = os.path.join(self.tmpdir, "rdzvd.log") if log else None
        self.stderr_path = os.path.join(self.tmpdir, "stderr")
        self.port_file = os.path.join(self.tmpdir, "port")
        self.http_port_file = os.path.join(self.tmpdir, "http-port")
        self.ready_timeout = ready_timeout
        self.env = env
        self.raw = raw
        self.proc = None
        self.port = None
        self.http_port = None
        self.host = "127.0.0.1"
        self.starts = 0
        Rdzvd.instances.append(self)
        if start:
            self.start()

    # -- life cycle --

    def argv(self):
        if self.raw:
            return [self.binary, "-d"] + self.extra
        a = [self.binary, "-d", "--listen", "127.0.0.1:0",
             "--port-file", self.port_file]
        if self.http:
            a += ["--http", "127.0.0.1:0", "--http-port-file",
                  self.http_port_file]
        else:
            a += ["--http", "off"]
        if self.db is not None:
            a += ["--db", self.db]
        if self.durability:
            a += ["--durability", self.durability]
        if self.log_path:
            a += ["--log-file", self.log_path]
        if self.tls_cert:
            a += ["--tls-cert", self.tls_cert]
        if self.tls_key:
            a += ["--tls-key", self.tls_key]
        if self.tls_mode:
            a += ["--tls", self.tls_mode]
        return a + self.extra

    def start(self, wait=True):
        """Starts rdzvd (removing old port files first) and, with wait,
        blocks until both port files exist.  Raises AssertionError with the
        log if it exits or is not ready in time."""
        if self.proc is not None and self.proc.poll() is None:
            raise AssertionError("rdzvd already running")
        for f in (self.port_file, self.http_port_file):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass
        self.port = self.http_port = None
        self.starts += 1
        errf = open(self.stderr_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=errf,
                stderr=errf, start_new_session=True, cwd=self.tmpdir,
                env=self.env)
        finally:
            errf.close()
        _track(self.proc)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=None):
        timeout = self.ready_timeout if timeout is None else timeout
        end = time.monotonic() + timeout
        files = [self.port_file] + ([self.http_port_file] if self.http else [])
        while True:
            if all(os.path.exists(f) for f in files):
                break
            rc = self.proc.poll()
            if rc is not None:
                _untrack(self.proc)
                raise AssertionError("rdzvd exited with %d before ready\n%s" %
                                     (rc, self.diagnostics()))
            if time.monotonic() >= end:
                raise AssertionError("rdzvd not ready after %.1fs\n%s" %
                                     (timeout, self.diagnostics()))
            time.sleep(0.005)
        self.port = self._read_port(self.port_file)
        if self.http:
            self.http_port = self._read_port(self.http_port_file)

    @staticmethod
    def _read_port(path):
        with open(path) as f:
            s = f.read()
        if not re.fullmatch(r"[0-9]+\n", s):
            raise AssertionError("port file %s holds %r, not a port and "
                                 "newline" % (path, s))
        p = int(s)
        if not 0 < p < 65536:
            raise AssertionError("port file %s: bad port %d" % (path, p))
        return p

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def addr(self):
        return (self.host, self.port)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signo):
        """Sends signo to our rdzvd (only if it is still our child)."""
        if self.running():
            os.kill(self.proc.pid, signo)

    def wait(self, timeout):
        """Waits for exit; returns the status or None if still running."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        _untrack(self.proc)
        return rc

    def stop(self, grace=5.0):
        """SIGTERM, then SIGKILL after grace seconds.  Returns the exit
        status (negative = killed by that signal)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            rc = self.wait(grace)
            if rc is None:
                os.kill(self.proc.pid, signal.SIGKILL)
                rc = self.wait(10)
        rc = self.proc.returncode
        _untrack(self.proc)
        return rc

    def stop_clean(self):
        """stop(), asserting a clean exit: status 0 and no sanitizer report
        in the log (an --enable-asan build: nothing leaked or overrun)."""
        assert self.stop() == 0, self.diagnostics()
        assert "Sanitizer" not in self.log_text(), self.diagnostics()

    def kill9(self):
        """SIGKILL, no chance to drain; returns once it is reaped."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self.proc is not None:
            _untrack(self.proc)

    def restart(self, kill=False, extra=None):
        """Stops (SIGTERM, or SIGKILL with kill=True) if running, then
        starts again with the same arguments (plus `extra` replacing the
        extra args if given) on the same --db.  Ports change."""
        if kill:
            self.kill9()
        else:
            self.stop()
        if extra is not None:
            self.extra = list(extra)
        return self.start()

    # -- observation --

    def log_text(self):
        """The log file (all generations) plus stderr, as text."""
        out = []
        for p in (self.log_path, self.stderr_path):
            if p and os.path.exists(p):
                with open(p, "rb") as f:
                    out.append(f.read().decode(errors="replace"))
        return "".join(out)

    def diagnostics(self, tail=4000):
        return ("argv: %s\n--- log/stderr tail ---\n%s" %
                (" ".join(self.argv()), self.log_text()[-tail:]))

    def vmrss(self):
        """Resident set size of rdzvd in bytes (VmRSS in /proc/PID/status)."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS for pid %d" % self.proc.pid)

    def http_get(self, path, timeout=5.0):
        """GET path on the HTTP port; returns (status, body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.http_port,
                                       timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read(), r
        finally:
            c.close()

    def metrics_text(self):
        st, body, _ = self.http_get("/metrics")
        if st != 200:
            raise AssertionError("/metrics answered %d" % st)
        return body.decode()

    def metrics(self):
        """/metrics parsed strictly: dict (name, sorted label pairs) -> float."""
        return parse_metrics(self.metrics_text())[0]

    def metric(self, name, default=0.0, **labels):
        """One sample from a fresh /metrics scrape (default when absent)."""
        return metric_value(self.metrics(), name, default, **labels)

    def wait_metric(self, name, want, timeout=5.0, **labels):
        """Waits until metric(name, **labels) == want; AssertionError
        after timeout seconds."""
        wait_until(lambda: self.metric(name, **labels) == want, timeout,
                   what="%s%s == %s" % (name, labels or "", want))

    # -- clients --

    def connect(self, timeout=10.0):
        return connect(self.host, self.port, timeout)

    def native(self, ns=b"", timeout=10.0, tls_ca=True, preamble=True):
        """A NativeClient; tls_ca=True uses self.tls_ca (plaintext when
        that is None), None/False plaintext, a path that CA bundle."""
        if tls_ca is True:
            tls_ca = self.tls_ca
        return NativeClient(self.connect(timeout), ns=ns,
                            tls_ca=tls_ca or None, preamble=preamble)

    def tls_connect(self, ca=None, timeout=10.0, host=None):
        """A raw TLS socket to the main port, verified against ca
        (default self.tls_ca)."""
        return tls_wrap(self.connect(timeout), ca or self.tls_ca, host)

    def tcps113(self, timeout=10.0):
        return TCPStore113(self.connect(timeout))

    def tcps2(self, timeout=10.0, handshake=True):
        return TCPStore2(self.connect(timeout), handshake=handshake)


# ---- native protocol (common/PROTOCOL.md, common/wire.h) ----

NAT_MAGIC = b"RDZV"
NAT_VERSION = 1
NAT_F_REPLY = 0x0001
NAT_F_ERROR = 0x0002
NAT_F_PUSH = 0x0004
NAT_PRE_AUTH = 0x01
NAT_PRE_TLS = 0x02

OP_PING = 1
OP_SET = 2
OP_GET = 3
OP_ADD = 4
OP_CAS = 5
OP_WAIT = 6
OP_CHECK = 7
OP_DELETE = 8
OP_NUM_KEYS = 9
OP_APPEND = 10
OP_MULTI_GET = 11
OP_MULTI_SET = 12
OP_QUEUE_PUSH = 13
OP_QUEUE_POP = 14
OP_QUEUE_LEN = 15
OP_LIST_KEYS = 16
OP_BARRIER = 17
OP_CANCEL = 18
OP_WATCH = 19
OP_WATCH_EVENT = 20

WATCH_UPDATED = 0
WATCH_CREATED = 1
WATCH_DELETED = 2


def _b(x):
    if isinstance(x, str):
        return x.encode()
    return bytes(x)


def nat_preamble(version=NAT_VERSION):
    return NAT_MAGIC + struct.pack("<B3x", version)


def nat_i64(v):
    return b"i" + struct.pack("<q", v)


def nat_bytes(v):
    v = _b(v)
    return b"b" + struct.pack("<I", len(v)) + v


def nat_fields(*fields):
    """Encodes a payload: ints become 'i' fields, bytes/str 'b' fields."""
    out = []
    for f in fields:
        if isinstance(f, bool):
            raise TypeError("bool field")
        if isinstance(f, int):
            out.append(nat_i64(f))
        else:
            out.append(nat_bytes(f))
    return b"".join(out)


def nat_frame(op, payload=b"", flags=0, id=0, length=None):
    """One frame; `length` overrides the u32 len field (for bad-input tests)."""
    n = 8 + len(payload) if length is None else length
    return struct.pack("<IHHI", n, op, flags, id) + payload


def nat_parse_fields(payload):
    """Decodes a payload into a list of ints and bytes; RdzvError(EPROTO)
    on a malformed one."""
    out = []
    i = 0
    n = len(payload)
    while i < n:
        t = payload[i:i + 1]
        i += 1
        if t == b"i":
            if n - i < 8:
                raise RdzvError(RDZV_EPROTO, "short i64 field")
            out.append(struct.unpack_from("<q", payload, i)[0])
            i += 8
        elif t == b"b":
            if n - i < 4:
                raise RdzvError(RDZV_EPROTO, "short bytes length")
            ln = struct.unpack_from("<I", payload, i)[0]
            i += 4
            if n - i < ln:
                raise RdzvError(RDZV_EPROTO, "short bytes field")
            out.append(bytes(payload[i:i + ln]))
            i += ln
        else:
            raise RdzvError(RDZV_EPROTO, "unknown field tag %r" % t)
    return out


class NatFrame:
    __slots__ = ("op", "flags", "id", "payload", "fields")

    def __init__(self, op, flags, id, payload):
        self.op, self.flags, self.id, self.payload = op, flags, id, payload
        self.fields = nat_parse_fields(payload)

    def __repr__(self):
        return "NatFrame(op=%d flags=%#x id=%d fields=%r)" % (
            self.op, self.flags, self.id, self.fields)


class NativeClient:
    """A native-protocol client on one connection.

    Methods block for their reply (matched by id; other replies and pushes
    that arrive meanwhile are kept).  Failures raise RdzvError with the
    server's code.  `ns` is the default namespace; every keyed method also
    takes ns=.  Keys and values may be str (UTF-8) or bytes; values come
    back as bytes.  For pipelining use send() then reply(id).
    tls_ca=PATH runs a verifying TLS handshake first (tls_wrap; host
    names/addresses checked against server_hostname, default the peer's
    address); a failure raises RdzvError(RDZV_ETLS).  A server that
    requires TLS answers a plaintext preamble with version 0 and
    NAT_PRE_TLS: handshake() raises RdzvError(RDZV_ETLS) for it.
    """

    def __init__(self, sock, ns=b"", preamble=True, version=NAT_VERSION,
                 tls_ca=None, server_hostname=None):
        if tls_ca:
            sock = tls_wrap(sock, tls_ca, server_hostname)
        self.sock = sock
        self.ns = _b(ns)
        self.next_id = 1
        self.replies = {}
        self.pushes = []
        self.server_version = None
        if preamble:
            self.handshake(version)

    def handshake(self, version=NAT_VERSION):
        self.sock.sendall(nat_preamble(version))
        p = recv_exact(self.sock, 8)
        if p[:4] == NAT_MAGIC and p[4] == 0 and p[5] == NAT_PRE_TLS and \
                p[6:] == b"\0\0":
            raise RdzvError(RDZV_ETLS, "server requires TLS")
        if p[:4] != NAT_MAGIC or p[5:] != b"\0\0\0":
            raise RdzvError(RDZV_EPROTO, "bad preamble reply %r" % p)
        self.server_version = p[4]
        if p[4] == 0:
            raise RdzvError(RDZV_EVERSION, "server refused version %d" %
                            version)
        return p[4]

    def close(self):
        self.sock.close()

    def settimeout(self, t):
        self.sock.settimeout(t)

    # -- framing --

    def send(self, op, *fields, id=None):
        """Sends a request; returns its id."""
        if id is None:
            id = self.next_id
            self.next_id += 1
        self.sock.sendall(nat_frame(op, nat_fields(*fields), 0, id))
        return id

    def read_frame(self):
        hdr = recv_exact(self.sock, 12)
        n, op, flags, id = struct.unpack("<IHHI", hdr)
        if n < 8:
            raise RdzvError(RDZV_EPROTO, "frame length %d < 8" % n)
        payload = recv_exact(self.sock, n - 8)
        return NatFrame(op, flags, id, payload)

    def _dispatch(self, f):
        if f.flags & NAT_F_PUSH:
            if f.id != 0:
                raise RdzvError(RDZV_EPROTO, "push with id %d" % f.id)
            self.pushes.append(f)
        elif f.flags & NAT_F_REPLY:
            if f.id in self.replies:
                raise RdzvError(RDZV_EPROTO, "two replies for id %d" % f.id)
            self.replies[f.id] = f
        else:
            raise RdzvError(RDZV_EPROTO, "frame with flags %#x" % f.flags)

    def reply_frame(self, id, timeout=None):
        """Waits for the reply to id and returns the raw NatFrame (error
        replies included)."""
        old = self.sock.gettimeout()
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            while id not in self.replies:
                self._dispatch(self.read_frame())
        finally:
            if timeout is not None:
                self.sock.settimeout(old)
        return self.replies.pop(id)

    def reply(self, id, op=None, timeout=None):
        """Waits for the reply to id; returns its fields, or raises
        RdzvError for an error reply."""
        f = self.reply_frame(id, timeout)
        if op is not None and f.op != op:
            raise RdzvError(RDZV_EPROTO, "reply op %d for request op %d" %
                            (f.op, op))
        if f.flags & NAT_F_ERROR:
            if len(f.fields) != 2 or not isinstance(f.fields[0], int) or \
                    not isinstance(f.fields[1], bytes):
                raise RdzvError(RDZV_EPROTO, "malformed error reply %r" % f)
            raise RdzvError(f.fields[0], f.fields[1].decode(errors="replace"))
        return f.fields

    def call(self, op, *fields, timeout=None):
        return self.reply(self.send(op, *fields), op, timeout)

    def next_push(self, timeout=5.0):
        """The next server push (a NatFrame), waiting up to timeout."""
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            while not self.pushes:
                self._dispatch(self.read_frame())
        finally:
            self.sock.settimeout(old)
        return self.pushes.pop(0)

    def _ns(self, ns):
        return self.ns if ns is None else _b(ns)

    @staticmethod
    def _shape(fields, kinds, what):
        if len(fields) != len(kinds) or not all(
                isinstance(f, k) for f, k in zip(fields, kinds)):
            raise RdzvError(RDZV_EPROTO, "%s: unexpected reply fields %r" %
                            (what, fields))
        return fields

    # -- one method per op --

    def ping(self, data=b""):
        return self._shape(self.call(OP_PING, _b(data)), [bytes], "ping")[0]

    def set(self, key, value, ns=None):
        self._shape(self.call(OP_SET, self._ns(ns), _b(key), _b(value)), [],
                    "set")

    def get(self, key, ns=None):
        return self._shape(self.call(OP_GET, self._ns(ns), _b(key)), [bytes],
                           "get")[0]

    def add(self, key, delta, ns=None):
        return self._shape(self.call(OP_ADD, self._ns(ns), _b(key), delta),
                           [int], "add")[0]

    def cas(self, key, expected, desired, ns=None):
        return self._shape(self.call(OP_CAS, self._ns(ns), _b(key),
                                     _b(expected), _b(desired)),
                           [bytes], "cas")[0]

    compare_set = cas

    def wait_send(self, keys, timeout_ms=-1, ns=None):
        """Sends a WAIT without waiting for its reply; returns the id."""
        return self.send(OP_WAIT, self._ns(ns), timeout_ms, len(keys),
                         *[_b(k) for k in keys])

    def wait(self, keys, timeout_ms=-1, ns=None, timeout=None):
        """Returns when every key exists; RdzvError ETIMEDOUT/ECANCELED."""
        id = self.wait_send(keys, timeout_ms, ns)
        self._shape(self.reply(id, OP_WAIT, timeout), [], "wait")

    def check(self, keys, ns=None):
        return self._shape(self.call(OP_CHECK, self._ns(ns), len(keys),
                                     *[_b(k) for k in keys]),
                           [int], "check")[0]

    def delete(self, key, ns=None):
        return self._shape(self.call(OP_DELETE, self._ns(ns), _b(key)),
                           [int], "delete")[0]

    def num_keys(self, ns=None):
        return self._shape(self.call(OP_NUM_KEYS, self._ns(ns)), [int],
                           "num_keys")[0]

    def append(self, key, value, ns=None):
        self._shape(self.call(OP_APPEND, self._ns(ns), _b(key), _b(value)),
                    [], "append")

    def multi_get(self, keys, ns=None):
        f = self.call(OP_MULTI_GET, self._ns(ns), len(keys),
                      *[_b(k) for k in keys])
        return self._shape(f, [bytes] * len(keys), "multi_get")

    def multi_set(self, pairs, ns=None):
        """pairs: a dict or a list of (key, value)."""
        if isinstance(pairs, dict):
            pairs = list(pairs.items())
        flat = []
        for k, v in pairs:
            flat += [_b(k), _b(v)]
        self._shape(self.call(OP_MULTI_SET, self._ns(ns), len(pairs), *flat),
                    [], "multi_set")

    def queue_push(self, key, value, ns=None):
        self._shape(self.call(OP_QUEUE_PUSH, self._ns(ns), _b(key),
                              _b(value)), [], "queue_push")

    def queue_pop_send(self, key, timeout_ms=-1, ns=None):
        return self.send(OP_QUEUE_POP, self._ns(ns), _b(key), timeout_ms)

    def queue_pop(self, key, timeout_ms=0, ns=None, timeout=None):
        """Pops the head; waits up to timeout_ms (<0 forever) for a push.
        RdzvError ETIMEDOUT when nothing came."""
        id = self.queue_pop_send(key, timeout_ms, ns)
        return self._shape(self.reply(id, OP_QUEUE_POP, timeout), [bytes],
                           "queue_pop")[0]

    def queue_len(self, key, ns=None):
        return self._shape(self.call(OP_QUEUE_LEN, self._ns(ns), _b(key)),
                           [int], "queue_len")[0]

    def list_keys(self, ns=None):
        f = self.call(OP_LIST_KEYS, self._ns(ns))
        if not f or not isinstance(f[0], int) or f[0] != len(f) - 1 or \
                not all(isinstance(k, bytes) for k in f[1:]):
            raise RdzvError(RDZV_EPROTO, "list_keys: bad reply %r" % f)
        return f[1:]

    def barrier_send(self, key, world, timeout_ms=-1, ns=None):
        return self.send(OP_BARRIER, self._ns(ns), _b(key), world,
                         timeout_ms)

    def barrier(self, key, world, timeout_ms=-1, ns=None, timeout=None):
        id = self.barrier_send(key, world, timeout_ms, ns)
        self._shape(self.reply(id, OP_BARRIER, timeout), [], "barrier")

    def cancel(self, req_id):
        self._shape(self.call(OP_CANCEL, req_id), [], "cancel")

    def watch(self, key, ns=None):
        """Registers a watch; events then arrive through next_event()."""
        self._shape(self.call(OP_WATCH, self._ns(ns), _b(key)), [], "watch")

    def next_event(self, timeout=5.0):
        """The next WATCH_EVENT push as (ns, key, kind, old, new)."""
        f = self.next_push(timeout)
        if f.op != OP_WATCH_EVENT:
            raise RdzvError(RDZV_EPROTO, "push op %d" % f.op)
        return tuple(self._shape(f.fields, [bytes, bytes, int, bytes, bytes],
                                 "watch event"))


# ---- TCPStore dialects (shared/reference/tcpstore-wire.md) ----

T113 = {
    "set": 0, "compare_set": 1, "get": 2, "add": 3, "check": 4, "wait": 5,
    "num_keys": 6, "watch_key": 7, "delete_key": 8,
}
T2 = {
    "validate": 0, "set": 1, "compare_set": 2, "get": 3, "add": 4,
    "check": 5, "wait": 6, "num_keys": 7, "delete_key": 8, "append": 9,
    "multi_get": 10, "multi_set": 11, "cancel_wait": 12, "ping": 13,
    "queue_push": 14, "queue_pop": 15, "queue_len": 16, "list_keys": 17,
    "barrier": 18,
}
V2_MAGIC = 0x3C85F7CE
READY = 0
NOT_READY = 1
STOP_WAITING = 0
WAIT_CANCELED = 1
WATCH_REGISTERED = 3


def ts(x):
    """A TCPStore string/bytes: u64 length + raw bytes."""
    x = _b(x)
    return struct.pack("<Q", len(x)) + x


def u8(v):
    return struct.pack("<B", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def i64(v):
    return struct.pack("<q", v)


def _enc(table, op, args):
    code = table[op]
    out = [u8(code)]
    if op in ("set", "append", "queue_push"):
        k, v = args
        out += [ts(k), ts(v)]
    elif op == "compare_set":
        k, e, d = args
        out += [ts(k), ts(e), ts(d)]
    elif op in ("get", "watch_key", "delete_key", "queue_pop", "queue_len"):
        (k,) = args
        out.append(ts(k))
    elif op in ("add", "barrier"):
        k, n = args
        out += [ts(k), i64(n)]
    elif op in ("check", "wait", "multi_get"):
        (keys,) = args
        out.append(u64(len(keys)))
        out += [ts(k) for k in keys]
    elif op == "multi_set":
        (pairs,) = args
        if isinstance(pairs, dict):
            pairs = list(pairs.items())
        out.append(i64(len(pairs)))
        for k, v in pairs:
            out += [ts(k), ts(v)]
    elif op in ("num_keys", "cancel_wait", "list_keys"):
        if args:
            raise TypeError("%s takes no arguments" % op)
    elif op == "validate":
        (m,) = args if args else (V2_MAGIC,)
        out.append(u32(m))
    elif op == "ping":
        (nonce,) = args
        out.append(u32(nonce))
    else:
        raise KeyError(op)
    return b"".join(out)


def enc113(op, *args):
    """Raw bytes of one torch 1.13 request, e.g. enc113("set", b"/a", b"1")."""
    return _enc(T113, op, args)


def enc2(op, *args):
    """Raw bytes of one torch 2.x request, e.g. enc2("ping", 7)."""
    return _enc(T2, op, args)


class _TCPStoreBase:
    """Shared reply readers; `sock` is public for byte-level tests."""

    def __init__(self, sock):
        self.sock = sock

    def close(self):
        self.sock.close()

    def settimeout(self, t):
        self.sock.settimeout(t)

    def send_raw(self, data):
        self.sock.sendall(data)

    def read_u8(self):
        return recv_exact(self.sock, 1)[0]

    def read_i64(self):
        return struct.unpack("<q", recv_exact(self.sock, 8))[0]

    def read_u32(self):
        return struct.unpack("<I", recv_exact(self.sock, 4))[0]

    def read_bytes(self, limit=64 << 20):
        n = struct.unpack("<Q", recv_exact(self.sock, 8))[0]
        if n > limit:
            raise RdzvError(RDZV_EPROTO, "reply length %d" % n)
        return recv_exact(self.sock, n)

    def read_u8_within(self, timeout):
        """read_u8 with the socket's timeout set to timeout (None: as it
        is) while it reads; socket.timeout propagates."""
        old = self.sock.gettimeout()
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            return self.read_u8()
        finally:
            self.sock.settimeout(old)

    def _req(self, op, *args):
        self.sock.sendall(self.enc(op, *args))

    # ops common to both dialects (key bytes are sent as given: torch's
    # Python client would put "/" in front; byte-level tests choose)

    def set(self, key, value):
        self._req("set", key, value)

    def compare_set(self, key, expected, desired):
        self._req("compare_set", key, expected, desired)
        return self.read_bytes()

    def get(self, key):
        self._req("get", key)
        return self.read_bytes()

    def add(self, key, delta):
        self._req("add", key, delta)
        return self.read_i64()

    def check(self, keys):
        """READY (0) or NOT_READY (1)."""
        self._req("check", keys)
        return self.read_u8()

    def wait(self, keys, timeout=None):
        """Blocks until the server answers (STOP_WAITING, 0); with timeout
        a socket.timeout propagates (1.13 sends nothing on timeout)."""
        self._req("wait", keys)
        return self.read_u8_within(timeout)

    def num_keys(self):
        self._req("num_keys")
        return self.read_i64()

    def delete_key(self, key):
        self._req("delete_key", key)
        return self.read_i64()


class TCPStore113(_TCPStoreBase):
    """torch 1.13's dialect: no handshake; WATCH_KEY with pushes."""

    enc = staticmethod(enc113)

    def watch_key(self, key):
        """Registers a watch; returns the ack byte (WATCH_REGISTERED, 3)."""
        self._req("watch_key", key)
        return self.read_u8()

    def read_watch_event(self):
        """One push: (kind, key, old, new); kind 0 updated, 1 created,
        2 deleted."""
        kind = self.read_u8()
        key = self.read_bytes()
        old = self.read_bytes()
        new = self.read_bytes()
        return kind, key, old, new


class TCPStore2(_TCPStoreBase):
    """torch 2.x's dialect: VALIDATE + PING handshake, then ops 1..18."""

    enc = staticmethod(enc2)

    def __init__(self, sock, handshake=True):
        _TCPStoreBase.__init__(self, sock)
        if handshake:
            self.handshake()

    def handshake(self, nonce=0x1234ABCD):
        self.sock.sendall(enc2("validate", V2_MAGIC))
        got = self.ping(nonce)
        if got != nonce:
            raise RdzvError(RDZV_EPROTO, "ping echoed %#x for %#x" %
                            (got, nonce))

    def ping(self, nonce):
        self._req("ping", nonce)
        return self.read_u32()

    def append(self, key, value):
        self._req("append", key, value)

    def multi_get(self, keys):
        self._req("multi_get", keys)
        return [self.read_bytes() for _ in keys]

    def multi_set(self, pairs):
        self._req("multi_set", pairs)

    def cancel_wait(self):
        """Sends CANCEL_WAIT and returns the byte(s) read as torch's client
        does: [WAIT_CANCELED], or [STOP_WAITING, WAIT_CANCELED] when a
        wait answered first."""
        self._req("cancel_wait")
        b = self.read_u8()
        if b == STOP_WAITING:
            return [b, self.read_u8()]
        return [b]

    def queue_push(self, key, value):
        self._req("queue_push", key, value)

    def queue_pop(self, key):
        """Returns the popped item, or None when the queue was empty."""
        self._req("queue_pop", key)
        n = self.read_i64()
        if n < 0:
            raise RdzvError(RDZV_EPROTO, "queue_pop length %d" % n)
        if n == 0:
            return None
        return self.read_bytes()

    def queue_len(self, key):
        self._req("queue_len", key)
        return self.read_i64()

    def list_keys(self):
        self._req("list_keys")
        n = self.read_i64()
        if n < 0:
            raise RdzvError(RDZV_EPROTO, "list_keys count %d" % n)
        return [self.read_bytes() for _ in range(n)]

    def barrier(self, key, world, timeout=None):
        self._req("barrier", key, world)
        return self.read_u8_within(timeout)


# ---- torch's own server: the reference the clients and rdzvd are held to ----

_TORCH_SERVER = r"""
import sys
import torch.distributed as dist
port, backend, world = int(sys.argv[1]), sys.argv[2], sys.argv[3]
kw = {}
if world == "none":
    kw["wait_for_workers"] = False
if backend != "default":
    kw["use_libuv"] = backend == "libuv"
s = dist.TCPStore("127.0.0.1", port, None if world == "none" else int(world),
                  True, **kw)
print(s.port, flush=True)
sys.stdin.read()
"""


class TorchServer:
    """torch's own TCPStore server in a helper process (spawn()) that holds
    the master TCPStore and nothing else.  python picks the torch
    (TORCH_PYTHON, 1.13, by default; TORCH2_PYTHON for 2.13); backend
    "libuv" or "classic" picks a 2.x server ("default": the torch's own
    default, libuv in 2.x; 1.13 has only the classic one).  With no
    world_size it never touches "init/", so a fresh store has 0 keys, as
    rdzvd's does; world_size=1 makes the hosting instance ADD("init/", 1)
    first, as a rank 0 does, so num_keys starts at 1.
    Without that python or its torch the test is skipped, or fails under
    RDZV_REQUIRE_TORCH=1 (no_torch).  It has the interface of compatlib's
    RdzvdServer: kind, has_metrics, port, raw(), log_text(),
    diagnostics(), stop(), kill9()."""

    kind = "torch"
    has_metrics = False

    def __init__(self, python=TORCH_PYTHON, port=0, backend="default",
                 world_size=None, timeout=60.0):
        if not os.path.exists(python):
            no_torch("%s not found" % python, whole_file=False)
        self.host = "127.0.0.1"
        self.log_path = os.path.join(mktemp("rdzv-torchserver-"), "stderr")
        with open(self.log_path, "wb") as errf:
            self.proc = spawn([python, "-c", _TORCH_SERVER, str(port),
                               backend, "none" if world_size is None else
                               str(world_size)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=errf)
        _track(self.proc, "server")
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if r else b""
        if not line.strip().isdigit():
            self.stop()
            err = self.log_text()
            if "No module named" in err:
                no_torch("torch not importable: %s" % err[-200:],
                         whole_file=False)
            raise AssertionError("torch TCPStore server did not start "
                                 "(%r): %s" % (line, err[-2000:]))
        self.port = int(line)

    @property
    def addr(self):
        return (self.host, self.port)

    def connect(self, timeout=10.0):
        return connect(self.host, self.port, timeout)

    def tcps113(self, timeout=10.0):
        return TCPStore113(self.connect(timeout))

    raw = tcps113

    def log_text(self):
        """What the server wrote on stderr."""
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def diagnostics(self, tail=4000):
        return "(torch server) stderr tail:\n" + self.log_text()[-tail:]

    def stop(self):
        """Ends the server's process group (SIGKILL: it holds nothing to
        save); returns 0."""
        end(self.proc)
        return 0

    kill9 = stop


# ---- the runner ----

def needs(*names):
    """Marks a section (main(sections=True)) as building on the state the
    sections `names` leave behind: run alone, it runs them first."""
    def mark(f):
        f.needs = names
        return f
    return mark


def _alarm(signo, frame):
    raise Deadline("test deadline passed")


def _selected(namespace, only):
    """The test_* names of namespace to run, in definition order: those in
    `only`, else those the command line names, else those RDZV_TEST_ONLY
    names (blank- or comma-separated; taken out of the environment so the
    processes a test starts do not see it), else all; each with the ones
    it needs().  --list prints the names (and what each needs) and exits
    0; an unknown name exits 2."""
    names = [n for n, f in namespace.items()
             if n.startswith("test_") and callable(f)]
    after = {n: list(getattr(namespace[n], "needs", ())) for n in names}
    args = sys.argv[1:]
    if args[:1] in (["--list"], ["-l"]):
        for n in names:
            print(n + ("  (needs %s)" % " ".join(after[n]) if after[n]
                       else ""))
        sys.stdout.flush()
        _cleanup()
        os._exit(0)
    env = os.environ.pop("RDZV_TEST_ONLY", "")
    wanted = list(only or args or env.replace(",", " ").split())
    unknown = [w for w in wanted + sum(after.values(), [])
               if w not in names]
    if unknown:
        print("no such test: %s (--list names them)" % " ".join(unknown),
              flush=True)
        _cleanup()
        os._exit(2)
    if not wanted:
        return names
    run = set()
    while wanted:
        n = wanted.pop()
        if n not in run:
            run.add(n)
            wanted += after[n]
    return [n for n in names if n in run]


def main(namespace, per_test=60.0, total=170.0, only=None, sections=False,
         server=None):
    """Runs the test_* functions in `namespace` (pass globals()) in
    definition order; which ones: see _selected (`FILE.py NAME...`,
    RDZV_TEST_ONLY=NAME, `FILE.py --list`).  Prints "ok NAME (T s)",
    "skip NAME: reason" or "FAIL NAME (T s)" with the traceback and
    diagnostics, then "# P passed, F failed, S skipped in T s".
    Deadlines: per_test seconds a test (SIGALRM raises Deadline), total
    for the file (a watchdog thread cleans up and exits 1 even if the main
    thread is stuck).
    Tests (default): each is on its own: what it started (Rdzvd
    instances, tracked processes) is killed after it, a failure shows the
    logs of the rdzvds it started (unless RDZV_TEST_VERBOSE=0) and the
    rest still run.  Exits 0 all passed, 1 a failure, 77 all skipped.
    sections=True (tests/compat): the functions are sections of one
    scenario that share servers and processes and build on each other
    (needs()): nothing is killed between them, the first failure stops
    the file and shows server's diagnostics (server: an object with .kind
    and .diagnostics(), or a callable returning one or None).  Exits 0
    when nothing failed, else 1."""
    names = _selected(namespace, only)
    start = time.monotonic()
    done = threading.Event()

    def watchdog():
        if not done.wait(total + 15):
            sys.stdout.write("FAIL watchdog: file ran past %.0fs, killing\n" %
                             (total + 15))
            sys.stdout.flush()
            _cleanup()
            os._exit(1)

    threading.Thread(target=watchdog, daemon=True).start()
    signal.signal(signal.SIGALRM, _alarm)
    verbose = os.environ.get("RDZV_TEST_VERBOSE", "1") == "1"
    passed = failed = skipped = 0
    for name in names:
        left = total - (time.monotonic() - start)
        if left <= 0:
            print("FAIL %s: file deadline (%.0fs) spent before it ran" %
                  (name, total), flush=True)
            failed += 1
            if sections:
                break
            continue
        ninst = len(Rdzvd.instances)
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, min(per_test, left))
        status = None
        try:
            try:
                namespace[name]()
                status = "ok"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except Skip as e:
            status = "skip"
            print("skip %s: %s" % (name, e), flush=True)
            skipped += 1
        except (Exception, Deadline):
            status = "FAIL"
            failed += 1
            print("FAIL %s (%.2fs)" % (name, time.monotonic() - t0),
                  flush=True)
            traceback.print_exc(file=sys.stdout)
            if isinstance(sys.exc_info()[1], Deadline):
                _where_tracked()
            if sections:
                srv = server() if callable(server) else server
                if srv is not None:
                    print("--- %s ---\n%s" % (srv.kind, srv.diagnostics()))
            elif verbose:
                for d in Rdzvd.instances[ninst:]:
                    print("--- rdzvd %s ---\n%s" % (d.tmpdir,
                                                   d.diagnostics()))
            sys.stdout.flush()
        if status == "ok":
            passed += 1
            print("ok %s (%.2fs)" % (name, time.monotonic() - t0), flush=True)
        if sections:
            if status == "FAIL":
                print("# stopped at %s: the sections after it build on it" %
                      name, flush=True)
                break
            continue
        # Nothing a test started outlives it.
        for d in Rdzvd.instances[ninst:]:
            if d.running():
                d.kill9()
        del Rdzvd.instances[ninst:]
        _kill_tracked()
    done.set()
    summary = "# %d passed, %d failed, %d skipped in %.1fs" % (
        passed, failed, skipped, time.monotonic() - start)
    print(summary, flush=True)
    # The file `make check`'s runner looks at (tests/lib/run_py_test.sh):
    # a file that exits 0 without getting here did not run its tests.
    if os.environ.get("RDZV_TEST_SUMMARY_FILE"):
        try:
            with open(os.environ["RDZV_TEST_SUMMARY_FILE"], "w") as f:
                f.write(summary + "\n")
        except OSError:
            pass
    _cleanup()
    if sections:
        # Threads a section left (proxies, readers) must not hold the exit.
        os._exit(1 if failed else 0)
    if failed:
        sys.exit(1)
    if skipped and not passed:
        sys.exit(77)
    sys.exit(0)
