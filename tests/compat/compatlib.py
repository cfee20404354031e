"""compatlib: helpers shared by the tests in tests/compat/.

Owns what those tests need beyond tests/lib/rdzvtest.py: a raw client for
the torch 1.13 TCPStore dialect (to reach what the Python API hides: CHECK,
the unprefixed "init/" counter, GET of a missing key), a torch-hosted
TCPStore server to validate the tests against, a Prometheus text parser,
a byte-logging TCP proxy for reports, and process bookkeeping that only
ever signals processes this file started.

Which server the tests talk to is chosen by RDZV_COMPAT_SERVER:
  rdzvd (default)  the daemon built in RDZV_TOP_BUILDDIR
  torch            torch's own TCPStore server in a helper process; checks
                   that need rdzvd (metrics, restart, durability) are
                   skipped, everything else must pass unchanged.
"""

import atexit
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

TORCH_PY = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")
SKIP = 77

HERE = os.path.dirname(os.path.abspath(__file__))
TOP_SRCDIR = os.environ.get("RDZV_TOP_SRCDIR",
    os.path.normpath(os.path.join(HERE, "..", "..")))
TOP_BUILDDIR = os.environ.get("RDZV_TOP_BUILDDIR", TOP_SRCDIR)


def log(*a):
	print("[%7.3f]" % (time.monotonic() - _T0), *a, flush=True)


_T0 = time.monotonic()


def fail(msg):
	log("FAIL:", msg)
	cleanup()
	os._exit(1)


def check(cond, msg):
	"""Assert that survives python -O and says what went wrong."""
	if not cond:
		fail(msg)


def require_torch():
	try:
		import torch  # noqa: F401
		import torch.distributed as dist
	except Exception as e:
		print("SKIP: torch not importable by %s: %s" % (sys.executable, e))
		sys.exit(SKIP)
	if not dist.is_available():
		print("SKIP: torch.distributed not available")
		sys.exit(SKIP)
	return dist


def server_kind():
	k = os.environ.get("RDZV_COMPAT_SERVER", "rdzvd")
	if k not in ("rdzvd", "torch"):
		fail("RDZV_COMPAT_SERVER must be rdzvd or torch, not %r" % k)
	return k


# ---- process bookkeeping -------------------------------------------------

_procs = []
_tmpdirs = []


def spawn(args, **kw):
	"""Popen in a new session (so its whole group can be ended), recorded
	for cleanup()."""
	kw.setdefault("start_new_session", True)
	p = subprocess.Popen(args, **kw)
	_procs.append(p)
	return p


def end(p, sig=signal.SIGKILL):
	"""Signal the process group of a child this file started, then reap."""
	if p.poll() is None:
		try:
			os.killpg(p.pid, sig)
		except ProcessLookupError:
			pass
	else:
		# The leader is gone but its group (e.g. torchrun's workers) may
		# live on; the group id is still ours.
		try:
			os.killpg(p.pid, sig)
		except (ProcessLookupError, PermissionError):
			pass
	try:
		p.wait(timeout=10)
	except subprocess.TimeoutExpired:
		pass


def cleanup():
	for p in _procs:
		end(p)
	del _procs[:]
	if not os.environ.get("RDZV_COMPAT_KEEP"):
		for d in _tmpdirs:
			shutil.rmtree(d, ignore_errors=True)
	del _tmpdirs[:]


atexit.register(cleanup)


def tmpdir(tag):
	d = tempfile.mkdtemp(prefix="rdzv-compat-%s-" % tag)
	_tmpdirs.append(d)
	return d


def deadline(seconds, what):
	"""Fail the whole test if it is still running after seconds."""
	def on_alarm(sig, frm):
		fail("%s: still running after %d s (hang)" % (what, seconds))
	signal.signal(signal.SIGALRM, on_alarm)
	signal.alarm(int(seconds))


def on_term():
	def handler(sig, frm):
		fail("killed by signal %d" % sig)
	signal.signal(signal.SIGTERM, handler)
	signal.signal(signal.SIGINT, handler)


def wait_file(path, proc, timeout, what):
	t = time.monotonic() + timeout
	while time.monotonic() < t:
		if os.path.exists(path):
			with open(path) as f:
				s = f.read()
			if s.endswith("\n"):
				return s.strip()
		if proc is not None and proc.poll() is not None:
			fail("%s exited with status %s before writing %s" %
			    (what, proc.returncode, path))
		time.sleep(0.02)
	fail("%s did not write %s within %.0f s" % (what, path, timeout))


def run_py(code, env=None, timeout=60, args=()):
	"""Run code under the torch python; return (rc, stdout, stderr)."""
	p = spawn([TORCH_PY, "-c", code] + list(args), env=env,
	    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
	try:
		out, err = p.communicate(timeout=timeout)
	except subprocess.TimeoutExpired:
		end(p)
		out, err = p.communicate()
		fail("child timed out after %d s\n--- stdout\n%s\n--- stderr\n%s" %
		    (timeout, out, err))
	return p.returncode, out, err


# ---- servers ----------------------------------------------------------------

class RdzvdServer:
	"""rdzvd on 127.0.0.1, any free port, HTTP on another free port."""
	kind = "rdzvd"
	has_metrics = True
	persistent = True

	def __init__(self, db=":memory:", durability=None, extra=(), tag="rdzvd"):
		self.bin = os.path.join(TOP_BUILDDIR, "rdzvd", "rdzvd")
		if not os.access(self.bin, os.X_OK):
			fail("no rdzvd binary at %s (build first)" % self.bin)
		self.dir = tmpdir(tag)
		self.db = db
		self.durability = durability
		self.extra = list(extra)
		self.proc = None
		self.port = None
		self.http_port = None
		self.starts = 0

	def start(self, timeout=15):
		self.starts += 1
		pf = os.path.join(self.dir, "port.%d" % self.starts)
		hf = os.path.join(self.dir, "http.%d" % self.starts)
		self.logpath = os.path.join(self.dir, "rdzvd.log.%d" % self.starts)
		args = [self.bin, "-d", "--listen", "127.0.0.1:0",
		    "--port-file", pf, "--http", "127.0.0.1:0",
		    "--http-port-file", hf, "--db", self.db,
		    "--log-level", "debug"]
		if self.durability:
			args += ["--durability", self.durability]
		args += self.extra
		self.logf = open(self.logpath, "w")
		self.proc = spawn(args, stdout=self.logf, stderr=subprocess.STDOUT,
		    stdin=subprocess.DEVNULL)
		self.port = int(wait_file(pf, self.proc, timeout, "rdzvd"))
		self.http_port = int(wait_file(hf, self.proc, timeout, "rdzvd"))
		log("rdzvd pid %d port %d http %d db %s durability %s" %
		    (self.proc.pid, self.port, self.http_port, self.db,
		    self.durability or "default"))
		return self

	def start_on(self, port, timeout=15):
		"""Restart on a fixed port (clients that already know it)."""
		return self._start_fixed(port, timeout)

	def _start_fixed(self, port, timeout):
		self.starts += 1
		pf = os.path.join(self.dir, "port.%d" % self.starts)
		hf = os.path.join(self.dir, "http.%d" % self.starts)
		self.logpath = os.path.join(self.dir, "rdzvd.log.%d" % self.starts)
		args = [self.bin, "-d", "--listen", "127.0.0.1:%d" % port,
		    "--port-file", pf, "--http", "127.0.0.1:0",
		    "--http-port-file", hf, "--db", self.db,
		    "--log-level", "debug"]
		if self.durability:
			args += ["--durability", self.durability]
		args += self.extra
		self.logf = open(self.logpath, "w")
		self.proc = spawn(args, stdout=self.logf, stderr=subprocess.STDOUT,
		    stdin=subprocess.DEVNULL)
		self.port = int(wait_file(pf, self.proc, timeout, "rdzvd"))
		self.http_port = int(wait_file(hf, self.proc, timeout, "rdzvd"))
		check(self.port == port, "rdzvd listened on %d, asked %d" %
		    (self.port, port))
		log("rdzvd restarted pid %d port %d" % (self.proc.pid, self.port))
		return self

	def alive(self):
		return self.proc is not None and self.proc.poll() is None

	def kill9(self):
		self.proc.send_signal(signal.SIGKILL)
		self.proc.wait(timeout=10)
		self.logf.close()

	def stop(self):
		"""SIGTERM: the contract says it drains and exits 0."""
		self.proc.send_signal(signal.SIGTERM)
		try:
			rc = self.proc.wait(timeout=15)
		except subprocess.TimeoutExpired:
			end(self.proc)
			fail("rdzvd did not exit within 15 s of SIGTERM")
		self.logf.close()
		check(rc == 0, "rdzvd exited %s after SIGTERM, want 0" % rc)

	def log_text(self):
		try:
			with open(self.logpath, errors="replace") as f:
				return f.read()
		except OSError:
			return ""

	def metrics(self):
		return fetch_metrics("127.0.0.1", self.http_port)

	def healthz(self):
		with urllib.request.urlopen("http://127.0.0.1:%d/healthz" %
		    self.http_port, timeout=5) as r:
			return r.status, r.read()


_TORCH_SERVER = r"""
import sys, os, time, datetime
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", int(sys.argv[2]), None, True,
    datetime.timedelta(seconds=300), wait_for_workers=False)
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write("%d\n" % s.port)
os.rename(tmp, sys.argv[1])
while True:
    time.sleep(3600)
"""


class TorchServer:
	"""torch 1.13's own TCPStore server, hosted by a helper process that
	holds the master TCPStore and does nothing else."""
	kind = "torch"
	has_metrics = False
	persistent = False

	def __init__(self, tag="torch"):
		self.dir = tmpdir(tag)
		self.proc = None
		self.port = None
		self.starts = 0

	def start(self, timeout=30, port=0):
		self.starts += 1
		pf = os.path.join(self.dir, "port.%d" % self.starts)
		self.proc = spawn([TORCH_PY, "-c", _TORCH_SERVER, pf, str(port)],
		    stdin=subprocess.DEVNULL)
		self.port = int(wait_file(pf, self.proc, timeout, "torch server"))
		log("torch TCPStore server pid %d port %d" % (self.proc.pid,
		    self.port))
		return self

	def alive(self):
		return self.proc is not None and self.proc.poll() is None

	def stop(self):
		end(self.proc)

	kill9 = stop

	def log_text(self):
		return ""


def make_server(tag="compat", **kw):
	if server_kind() == "torch":
		return TorchServer(tag=tag).start()
	return RdzvdServer(tag=tag, **kw).start()


# ---- metrics ----------------------------------------------------------------

_METRIC = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
	"""Prometheus text -> {(name, ((label, value), ...)): float}."""
	out = {}
	for line in text.splitlines():
		if not line or line.startswith("#"):
			continue
		m = _METRIC.match(line)
		if not m:
			raise ValueError("bad metrics line: %r" % line)
		labels = tuple(sorted(_LABEL.findall(m.group(3) or "")))
		out[(m.group(1), labels)] = float(m.group(4))
	return out


def fetch_metrics(host, port):
	with urllib.request.urlopen("http://%s:%d/metrics" % (host, port),
	    timeout=5) as r:
		check(r.status == 200, "/metrics status %d" % r.status)
		return parse_metrics(r.read().decode())


def metric(m, name, **labels):
	"""One sample; fails the test if rdzvd does not export it."""
	key = (name, tuple(sorted(labels.items())))
	if key not in m:
		fail("metric %s%s missing from /metrics" % (name, labels or ""))
	return m[key]


# ---- raw torch 1.13 TCPStore client --------------------------------------

Q113 = {"set": 0, "compare_set": 1, "get": 2, "add": 3, "check": 4,
    "wait": 5, "num_keys": 6, "watch": 7, "delete": 8}


def _s(b):
	if isinstance(b, str):
		b = b.encode()
	return struct.pack("<Q", len(b)) + b


class Closed(Exception):
	pass


class Raw113:
	"""Speaks the 1.13 dialect byte for byte; keys go on the wire exactly
	as given (no "/" prefix), so it reads what torch clients wrote."""

	def __init__(self, port, host="127.0.0.1", timeout=10):
		self.sock = socket.create_connection((host, port), timeout=timeout)
		self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

	def close(self):
		self.sock.close()

	def send(self, data):
		self.sock.sendall(data)

	def recv_exact(self, n):
		buf = b""
		while len(buf) < n:
			c = self.sock.recv(n - len(buf))
			if not c:
				raise Closed("connection closed after %d of %d bytes" %
				    (len(buf), n))
			buf += c
		return buf

	def u8(self):
		return self.recv_exact(1)[0]

	def i64(self):
		return struct.unpack("<q", self.recv_exact(8))[0]

	def bytes_(self):
		n = struct.unpack("<Q", self.recv_exact(8))[0]
		return self.recv_exact(n)

	def set(self, k, v):
		self.send(bytes([0]) + _s(k) + _s(v))

	def compare_set(self, k, exp, des):
		self.send(bytes([1]) + _s(k) + _s(exp) + _s(des))
		return self.bytes_()

	def get(self, k):
		self.send(bytes([2]) + _s(k))
		return self.bytes_()

	def add(self, k, d):
		self.send(bytes([3]) + _s(k) + struct.pack("<q", d))
		return self.i64()

	def check(self, keys):
		self.send(bytes([4]) + struct.pack("<Q", len(keys)) +
		    b"".join(_s(k) for k in keys))
		return self.u8()	# 0 READY, 1 NOT_READY

	def wait_send(self, keys):
		self.send(bytes([5]) + struct.pack("<Q", len(keys)) +
		    b"".join(_s(k) for k in keys))

	def wait(self, keys):
		self.wait_send(keys)
		return self.u8()	# 0 STOP_WAITING

	def num_keys(self):
		self.send(bytes([6]))
		return self.i64()

	def watch(self, k):
		self.send(bytes([7]) + _s(k))
		return self.u8()	# 3 registered

	def watch_event(self):
		t = self.u8()
		return t, self.bytes_(), self.bytes_(), self.bytes_()

	def delete(self, k):
		self.send(bytes([8]) + _s(k))
		return self.i64()

	def readable(self, timeout):
		r, _, _ = select.select([self.sock], [], [], timeout)
		return bool(r)

	def closed_by_peer(self, timeout=5):
		"""True if the peer closes within timeout (EOF or reset)."""
		t = time.monotonic() + timeout
		while time.monotonic() < t:
			if self.readable(t - time.monotonic()):
				try:
					return self.sock.recv(1) == b""
				except (ConnectionResetError, socket.timeout):
					return True
		return False


# ---- capture proxy ----------------------------------------------------------

class Proxy:
	"""127.0.0.1:<port> -> target, logging every chunk with its direction,
	for reports of what torch sent and what came back."""

	def __init__(self, target_port, logpath=None):
		self.target = target_port
		self.ls = socket.socket()
		self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
		self.ls.bind(("127.0.0.1", 0))
		self.ls.listen(64)
		self.port = self.ls.getsockname()[1]
		self.records = []	# (conn no, "c>s"|"s>c", bytes)
		self.lock = threading.Lock()
		self.nconn = 0
		self.logpath = logpath
		threading.Thread(target=self._accept, daemon=True).start()

	def _accept(self):
		while True:
			try:
				c, _ = self.ls.accept()
			except OSError:
				return
			s = socket.create_connection(("127.0.0.1", self.target))
			with self.lock:
				self.nconn += 1
				n = self.nconn
			for a, b, d in ((c, s, "c>s"), (s, c, "s>c")):
				threading.Thread(target=self._pump, args=(n, a, b, d),
				    daemon=True).start()

	def _pump(self, n, a, b, d):
		while True:
			try:
				data = a.recv(65536)
			except OSError:
				data = b""
			with self.lock:
				self.records.append((n, d, data))
			if not data:
				try:
					b.shutdown(socket.SHUT_WR)
				except OSError:
					pass
				return
			try:
				b.sendall(data)
			except OSError:
				return

	def dump(self, limit=200):
		lines = []
		with self.lock:
			for n, d, data in self.records:
				shown = data[:limit]
				lines.append("conn %d %s %5d %s%s" % (n, d, len(data),
				    shown.hex(" "), " ..." if len(data) > limit else ""))
		text = "\n".join(lines)
		if self.logpath:
			with open(self.logpath, "w") as f:
				f.write(text + "\n")
		return text

	def client_streams(self):
		"""{connection number: every byte the client sent on it}."""
		out = {}
		with self.lock:
			for n, d, data in self.records:
				if d == "c>s":
					out[n] = out.get(n, b"") + data
		return out


def wire_keys_113(data):
	"""Best-effort parse of a 1.13 client->server byte stream into
	(op, [keys]) tuples; stops at the first thing it cannot parse."""
	out = []
	i = 0
	inv = {v: k for k, v in Q113.items()}

	def string(i):
		n = struct.unpack_from("<Q", data, i)[0]
		return data[i + 8:i + 8 + n], i + 8 + n
	try:
		while i < len(data):
			q = data[i]
			i += 1
			op = inv.get(q)
			if op in ("set",):
				k, i = string(i)
				v, i = string(i)
				out.append((op, [k]))
			elif op == "compare_set":
				k, i = string(i)
				_, i = string(i)
				_, i = string(i)
				out.append((op, [k]))
			elif op in ("get", "watch", "delete"):
				k, i = string(i)
				out.append((op, [k]))
			elif op == "add":
				k, i = string(i)
				i += 8
				out.append((op, [k]))
			elif op in ("check", "wait"):
				n = struct.unpack_from("<Q", data, i)[0]
				i += 8
				ks = []
				for _ in range(n):
					k, i = string(i)
					ks.append(k)
				out.append((op, ks))
			elif op == "num_keys":
				out.append((op, []))
			else:
				break
	except struct.error:
		pass
	return out
