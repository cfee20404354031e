"""compatlib: helpers shared by the tests in tests/compat/.

Owns what those tests need beyond tests/lib/rdzvtest.py (which starts and
stops rdzvd, speaks the raw TCPStore dialects and parses /metrics): a
choice of server so each test can be validated against torch's own
TCPStore server, process groups for torch children (torchrun agents and
their workers) that are always ended, and a byte-logging TCP proxy that
records what torch sent and what came back.

Which PyTorch: a test runs under the python that runs it (TORCH_PYTHON,
Debian's torch 1.13, by default); torch 2.x tests call use_torch2() first,
which re-executes the file under TORCH2_PYTHON (the virtualenv with torch
2.13 that scripts/deps.sh makes).  A torch that cannot be imported skips
the file, except under RDZV_REQUIRE_TORCH=1 (scripts/test.sh, so CI),
where it fails it: a missing torch must never pass as a skip.

Which server the tests talk to is chosen by RDZV_COMPAT_SERVER:
  rdzvd (default)  the daemon built in RDZV_TOP_BUILDDIR
  torch            torch 1.13's own TCPStore server in a helper process;
                   checks that need rdzvd (metrics, restart, durability)
                   are left out, every other assertion must pass unchanged.
"""

import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import rdzvtest

TORCH_PY = rdzvtest.TORCH_PYTHON
TORCH2_PY = rdzvtest.TORCH2_PYTHON
_T0 = time.monotonic()


def log(*a):
	print("[%7.3f]" % (time.monotonic() - _T0), *a, flush=True)


def check(cond, msg):
	"""An assert that survives python -O and says what went wrong."""
	if not cond:
		raise AssertionError(msg)


_no_torch = rdzvtest.no_torch


def require_torch():
	"""torch.distributed, or the whole file is skipped (77); failed
	instead under RDZV_REQUIRE_TORCH=1."""
	try:
		import torch  # noqa: F401  (the import is the check)
		import torch.distributed as dist
	except Exception as e:
		_no_torch("torch not importable by %s: %s" % (sys.executable, e))
	if not dist.is_available():
		_no_torch("torch.distributed not available in %s" % sys.executable)
	return dist


def use_torch2():
	"""Re-executes this test file under TORCH2_PYTHON unless it already
	runs there; returns torch.distributed of a 2.x torch."""
	# Compared unresolved: a venv's python is a symlink to the base one.
	if os.path.abspath(sys.executable) != os.path.abspath(TORCH2_PY) \
	    and os.environ.get("RDZV_COMPAT_REEXEC") != "1":
		if not os.access(TORCH2_PY, os.X_OK):
			_no_torch("no torch 2.x python at %s (TORCH2_PYTHON)" %
			    TORCH2_PY)
		os.environ["RDZV_COMPAT_REEXEC"] = "1"
		sys.stdout.flush()
		os.execv(TORCH2_PY, [TORCH2_PY] + sys.argv)
	dist = require_torch()
	import torch
	if int(torch.__version__.split(".")[0]) < 2:
		_no_torch("%s has torch %s, not 2.x" % (sys.executable,
		    torch.__version__))
	return dist


def server_kind():
	k = os.environ.get("RDZV_COMPAT_SERVER", "rdzvd")
	if k not in ("rdzvd", "torch"):
		raise AssertionError("RDZV_COMPAT_SERVER must be rdzvd or torch, "
		    "not %r" % k)
	return k


# ---- process groups ---------------------------------------------------------
#
# torch children start children of their own (torchrun's workers; gloo has
# none but a stuck interpreter may), so each is started as the leader of a
# new session and ended with killpg on its own pid: only groups we created
# are ever signalled.

_groups = []
_glock = threading.Lock()


def spawn(args, **kw):
	kw["start_new_session"] = True
	kw.setdefault("stdin", subprocess.DEVNULL)
	p = subprocess.Popen(args, **kw)
	with _glock:
		_groups.append(p)
	return p


def end(p, sig=signal.SIGKILL):
	"""Signals the group p leads (even if p itself is gone), then reaps p."""
	try:
		os.killpg(p.pid, sig)
	except (ProcessLookupError, PermissionError):
		pass
	try:
		p.wait(timeout=10)
	except subprocess.TimeoutExpired:
		pass


def end_all():
	with _glock:
		ps = list(_groups)
		del _groups[:]
	for p in ps:
		end(p)


# rdzvtest's runner, watchdog and signal handlers call its module-level
# _cleanup() and then _exit; make that end our groups too.
_rdzvtest_cleanup = rdzvtest._cleanup


def _cleanup_both():
	end_all()
	_rdzvtest_cleanup()


rdzvtest._cleanup = _cleanup_both


# ---- servers ----------------------------------------------------------------

class RdzvdServer:
	"""rdzvd through rdzvtest.Rdzvd, with the interface TorchServer also
	has."""
	kind = "rdzvd"
	has_metrics = True

	def __init__(self, **kw):
		# A directory of our own naming, so nobody's tidying of
		# /tmp/rdzvd-* pulls the database from under a restart test.
		kw.setdefault("tmpdir", rdzvtest.mktemp("rdzv-compat-rdzvd-"))
		self.d = rdzvtest.Rdzvd(**kw)

	@property
	def port(self):
		return self.d.port

	def raw(self, timeout=10.0):
		return self.d.tcps113(timeout)

	def metrics(self):
		return self.d.metrics()

	def metric(self, name, **labels):
		"""One sample; a missing one fails the test."""
		v = rdzvtest.metric_value(self.metrics(), name, None, **labels)
		check(v is not None, "metric %s%s missing from /metrics" %
		    (name, labels or ""))
		return v

	def log_text(self):
		return self.d.log_text()

	def diagnostics(self):
		return self.d.diagnostics()

	def healthz(self):
		st, body, _ = self.d.http_get("/healthz")
		return st, body

	def stop(self):
		return self.d.stop()

	def kill9(self):
		self.d.kill9()

	def restart(self, kill=False):
		self.d.restart(kill=kill)
		log("rdzvd restarted: pid %d port %d" % (self.d.pid, self.port))


_TORCH_SERVER = r"""
import sys
import torch.distributed as dist
kw = {"wait_for_workers": False}
if sys.argv[2] != "default":
    kw["use_libuv"] = sys.argv[2] == "libuv"
s = dist.TCPStore("127.0.0.1", int(sys.argv[1]), None, True, **kw)
print(s.port, flush=True)
sys.stdin.read()
"""


class TorchServer:
	"""torch's own TCPStore server in a helper process that holds the
	master TCPStore and nothing else; with no world_size it never touches
	"init/", so a fresh store has 0 keys, as rdzvd's does.  python picks
	the torch (TORCH_PY, 1.13, by default; TORCH2_PY for 2.13); backend
	"libuv" or "classic" picks a 2.x server ("default": the torch's own
	default, libuv in 2.x; 1.13 has only the classic one)."""
	kind = "torch"
	has_metrics = False

	def __init__(self, port=0, python=None, backend="default"):
		self.proc = spawn([python or TORCH_PY, "-c", _TORCH_SERVER,
		    str(port), backend], stdin=subprocess.PIPE,
		    stdout=subprocess.PIPE)
		r, _, _ = select.select([self.proc.stdout], [], [], 60)
		line = self.proc.stdout.readline() if r else b""
		check(line.strip().isdigit(), "torch server did not start: %r" %
		    line)
		self.port = int(line)

	def raw(self, timeout=10.0):
		return rdzvtest.TCPStore113(rdzvtest.connect("127.0.0.1",
		    self.port, timeout))

	def log_text(self):
		return ""

	def diagnostics(self):
		return "(torch server)"

	def stop(self):
		end(self.proc)
		return 0

	kill9 = stop


def make_server(**kw):
	"""The server under test, per RDZV_COMPAT_SERVER; kw go to rdzvd."""
	if server_kind() == "torch":
		s = TorchServer()
	else:
		s = RdzvdServer(**kw)
	log("%s serving on 127.0.0.1:%d" % (s.kind, s.port))
	return s


def poll_metric(srv, name, want, timeout=5.0, **labels):
	"""Polls one rdzvd sample until it equals want (rdzvd notices closes
	asynchronously); returns the last value read."""
	t = time.monotonic() + timeout
	while True:
		v = srv.metric(name, **labels)
		if v == want or time.monotonic() > t:
			return v
		time.sleep(0.05)


# ---- runner -----------------------------------------------------------------

def run_sections(namespace, server=None, per_test=60.0, total=110.0):
	"""Runs the test_* functions of namespace in definition order, like
	rdzvtest.main(), except that processes and servers outlive a section:
	the sections of one file share a server and build on each other, so
	the first failure stops the file.  Prints "ok NAME" / "FAIL NAME" with
	the traceback and the server's log tail; exits 0, or 1 on a failure
	or a deadline (per section, and a watchdog for the whole file)."""
	import traceback
	names = [n for n, f in namespace.items()
	    if n.startswith("test_") and callable(f)]
	start = time.monotonic()
	done = threading.Event()

	def watchdog():
		if not done.wait(total + 10):
			print("FAIL watchdog: file ran past %.0f s" % (total + 10),
			    flush=True)
			rdzvtest._cleanup()
			os._exit(1)
	threading.Thread(target=watchdog, daemon=True).start()

	def alarm(signo, frm):
		raise rdzvtest.Deadline("section deadline passed")
	signal.signal(signal.SIGALRM, alarm)
	failed = None
	passed = skipped = 0
	for name in names:
		left = total - (time.monotonic() - start)
		t0 = time.monotonic()
		signal.setitimer(signal.ITIMER_REAL, max(0.1, min(per_test, left)))
		try:
			try:
				namespace[name]()
			finally:
				signal.setitimer(signal.ITIMER_REAL, 0)
		except rdzvtest.Skip as e:
			print("skip %s: %s" % (name, e), flush=True)
			skipped += 1
			continue
		except (Exception, rdzvtest.Deadline):
			print("FAIL %s (%.2fs)" % (name, time.monotonic() - t0),
			    flush=True)
			traceback.print_exc(file=sys.stdout)
			srv = server() if callable(server) else server
			if srv is not None:
				print("--- %s ---\n%s" % (srv.kind, srv.diagnostics()))
			failed = name
			break
		passed += 1
		print("ok %s (%.2fs)" % (name, time.monotonic() - t0), flush=True)
	done.set()
	print("# %d passed, %d skipped, %s in %.1fs" % (passed, skipped,
	    "failed at " + failed if failed else "none failed",
	    time.monotonic() - start), flush=True)
	sys.stdout.flush()
	rdzvtest._cleanup()
	os._exit(1 if failed else 0)


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

	def close(self):
		self.ls.close()

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


def wire_ops_113(data):
	"""Parses one 1.13 client->server byte stream into ([(op, [keys])],
	bytes parsed), op named as in rdzvtest.T113; stops at the first thing
	it cannot parse (an unknown byte or a truncated request)."""
	out = []
	i = done = 0
	inv = {v: k for k, v in rdzvtest.T113.items()}

	def string(i):
		n = struct.unpack_from("<Q", data, i)[0]
		if i + 8 + n > len(data):
			raise struct.error("short")
		return data[i + 8:i + 8 + n], i + 8 + n
	try:
		while i < len(data):
			op = inv.get(data[i])
			i += 1
			if op == "set":
				k, i = string(i)
				_, i = string(i)
				out.append((op, [k]))
			elif op == "compare_set":
				k, i = string(i)
				_, i = string(i)
				_, i = string(i)
				out.append((op, [k]))
			elif op in ("get", "watch_key", "delete_key"):
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
			if i > len(data):
				out.pop()
				break
			done = i
	except struct.error:
		pass
	return out, done
