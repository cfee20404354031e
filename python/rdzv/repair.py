"""rdzv.repair: in-place repair for torch DDP programs under rdzv-agent.

A worker's death costs the survivors one step, not a restart: they keep
their processes, rebuild the process group in a smaller round and go on;
the agent's replacement joins at a step boundary and receives the model,
the optimizer, the step and the sampler position from a donor.  The change
to a DDP script (the lines marked; the body of the step is unchanged):

    from rdzv import repair                                   # +
    job = repair.init_process_group("gloo")                   # was dist.init_process_group
    model = job.ddp(Net())                                    # was DDP(Net())
    opt = job.track(torch.optim.SGD(model.parameters(), lr))  # + job.track(...)
    for epoch in job.epochs(EPOCHS):                          # was range(EPOCHS)
        for idx in job.batches(len(train), BATCH):            # was the DistributedSampler loader
            with job.step():                                  # +, the body indented
                opt.zero_grad()
                F.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()

job.batches() yields this rank's sample indices of the next global batch
(one shuffled permutation per epoch, the same on every rank) and reshards
when the group changes; job.step() commits the step or, when a peer's
death cut it off, repairs and drops it (the same batch is tried again in
the new group).  job.rank, job.world, job.step_count, job.repairs say
where the job is.  Without an agent's channel nothing repairs: the job is
torch's env:// group (torchrun), or a single process with no group.
RDZV_REPAIR=0 in the environment vetoes repair (as for librdzvworker):
the worker never says hello, so a failure restarts the whole job.

The agent's side is the worker <-> agent channel: a SOCK_SEQPACKET socket
passed as fd RDZV_PROGRESS_FD, one ASCII message per datagram.  This
module sends "hello repair=1" at setup, the committed step as a decimal
number (at most every 100 ms) and, in a replacement (RDZV_REPLACEMENT=1),
"ready" once the script's own start-up is done; a watcher thread receives
"round round=R kind=shrink|grow ns=NS rank=r world=W donor=d
master_addr=A master_port=P ..." and "stop".  A round's store is
PrefixStore(NS + "/", TCPStore(A, P)), a fresh namespace per round.

How a repair goes:
- shrink (a peer died): gloo raises in every survivor within ~0.1 s (a
  survivor that raised also resets its own connections of the old group,
  so no peer stays blocked on it); the step in flight is dropped, the
  group rebuilt on the round, and the survivors compare their committed
  steps: if they differ (a death can cut an allreduce that some survivors
  had finished), the donor's state goes to every rank.  NCCL: the watcher
  aborts the group (torch's abort API on 2.x) so no kernel stays stuck.
- grow (a replacement is ready): the group is healthy, so no step is
  dropped: each survivor's watcher posts how many steps it has begun in
  the new round's store, they switch after the largest (every survivor
  finishes the steps another has begun), and the replacement, which posts
  -1, receives the donor's state.  Afterwards every rank holds
  bit-identical parameters (the bytes of the donor's tensors).
- stop: the repair failed and the job restarts the old way: exit.
"""

import datetime
import io
import os
import re
import socket
import struct
import sys
import threading
import time

__all__ = ["init_process_group", "Job", "Round", "parse_round",
    "parse_message"]

MSG_MAX = 512			# a channel datagram, either way
PROGRESS_EVERY = 0.1		# seconds between step reports
WAIT_EVERY = 1.0		# "wait" while blocked in torch this long, as often
_KEY = "rdzv_repair/begun/%d"	# boundary agreement of a grow round


def _debug(fmt, *a):
	if os.environ.get("RDZV_REPAIR_DEBUG"):
		print("rdzv.repair[%d]: %s" % (os.getpid(), fmt % a),
		    file=sys.stderr, flush=True)


def _warn(fmt, *a):
	print("rdzv.repair[%d]: %s" % (os.getpid(), fmt % a), file=sys.stderr,
	    flush=True)


class Round:
	"""One "round" message of the agent: the group to switch to."""

	def __init__(self, **kw):
		self.round = kw["round"]
		self.kind = kw["kind"]
		self.ns = kw["ns"]
		self.rank = kw["rank"]
		self.world = kw["world"]
		self.donor = kw["donor"]
		self.master_addr = kw["master_addr"]
		self.master_port = kw["master_port"]
		self.local_rank = kw.get("local_rank", 0)
		self.local_world = kw.get("local_world", 1)

	def __repr__(self):
		return "round %d %s rank %d/%d donor %d ns %s at %s:%d" % (
		    self.round, self.kind, self.rank, self.world, self.donor,
		    self.ns, self.master_addr, self.master_port)


# The channel's grammar, as common/chan.c has it (chan_keys[] there):
# each verb's key=value words, (type, lo, hi, required); for "word" hi is
# the C field's size, so a value has 1..hi-1 bytes.
_INT_MAX = 2 ** 31 - 1
_INT64_MAX = 2 ** 63 - 1
_NUM_MAX = 20			# digits of a number (RDZV_CHAN_NUM_MAX)
_HOST_MAX = 256			# RDZV_HOST_MAX, its NUL included
_VERBS = {
	"progress": {},
	"hello": {"repair": ("int", 0, 1, False)},
	"ready": {},
	"round": {
		"round": ("int", 0, _INT_MAX, True),
		"kind": ("kind", 0, 0, True),
		"ns": ("word", 0, MSG_MAX, True),
		"rank": ("int", 0, _INT_MAX - 1, True),
		"world": ("int", 1, _INT_MAX, True),
		"donor": ("int", 0, _INT_MAX - 1, True),
		"master_addr": ("word", 0, _HOST_MAX, True),
		"master_port": ("int", 1, 65535, True),
		"local_rank": ("int", 0, _INT_MAX - 1, True),
		"local_world": ("int", 1, _INT_MAX, True),
	},
	"stop": {},
	"wait": {},
}
_DIGITS = re.compile(r"[0-9]{1,%d}" % _NUM_MAX)


def _num(s, lo, hi, what):
	if not _DIGITS.fullmatch(s) or not lo <= int(s) <= hi:
		raise ValueError("bad %s=%r" % (what, s[:32]))
	return int(s)


def parse_message(data):
	"""(verb, fields) of one channel datagram (bytes), as common/chan.c
	chan_parse() decodes it: verb is "progress" (fields {"step": n}),
	"hello" ({"repair": 0 or 1}), "ready", "round" (every field of a
	Round) or "stop"; None for a verb this side does not know (ignored:
	a newer peer's).  A key=value word a known verb does not use is
	skipped; of a key given twice the last counts.  Raises ValueError
	when the message breaks the grammar: empty or over MSG_MAX bytes, a
	byte outside printable ASCII, an empty word, a word without '='
	after a known verb, a number not 1..20 digits or out of its range, a
	round without one of its fields or with rank, donor or local_rank not
	below world or local_world."""
	if not 1 <= len(data) <= MSG_MAX:
		raise ValueError("%d bytes" % len(data))
	if any(c < 0x20 or c > 0x7e for c in data):
		raise ValueError("a byte outside printable ASCII")
	words = data.decode("ascii").split(" ")
	if "" in words:
		raise ValueError("an empty word")
	verb, fields = words[0], {}
	if verb[0] in "0123456789":
		fields["step"] = _num(verb, 0, _INT64_MAX, "step")
		verb = "progress"
	elif verb not in _VERBS:
		return (None, {})
	keys = _VERBS[verb]
	if verb == "hello":
		fields["repair"] = 0
	for w in words[1:]:
		k, eq, v = w.partition("=")
		if not eq:
			raise ValueError("%r is no key=value word" % w[:32])
		if k not in keys:
			continue	# for a newer peer
		typ, lo, hi, _ = keys[k]
		if typ == "int":
			fields[k] = _num(v, lo, hi, k)
		elif typ == "kind":
			if v not in ("shrink", "grow"):
				raise ValueError("unknown kind %r" % v[:32])
			fields[k] = v
		else:
			if not 0 < len(v) < hi:
				raise ValueError("%s of %d bytes" % (k, len(v)))
			fields[k] = v
	for k, (_, _, _, required) in keys.items():
		if required and k not in fields:
			raise ValueError("%s without %s" % (verb, k))
	if verb == "round" and (fields["rank"] >= fields["world"] or
	    fields["donor"] >= fields["world"] or
	    fields["local_rank"] >= fields["local_world"]):
		raise ValueError("rank %d, donor %d of %d, local rank %d of %d" % (
		    fields["rank"], fields["donor"], fields["world"],
		    fields["local_rank"], fields["local_world"]))
	return (verb, fields)


def parse_round(text):
	"""A Round from the text of a "round" message; raises ValueError
	naming what is missing or malformed (parse_message's rules)."""
	try:
		data = text.encode("ascii")
	except UnicodeEncodeError:
		raise ValueError("a byte outside printable ASCII") from None
	verb, fields = parse_message(data)
	if verb != "round":
		raise ValueError("not a round message")
	return Round(**fields)


def _chan_eof(s):
	"""Whether a 0-byte read of the channel s was its end, not an empty
	datagram (a legal message on SOCK_SEQPACKET): only the end comes with
	the peer's hangup, and then with nothing queued but empty datagrams
	(SIOCINQ counts every queued datagram's bytes).  As common/
	chan_recv.c."""
	import array
	import fcntl
	import select
	import termios
	p = select.poll()
	p.register(s.fileno(), select.POLLIN | getattr(select, "POLLRDHUP", 0))
	ev = 0
	for _, ev in p.poll(0):
		pass
	if not ev & (select.POLLHUP | getattr(select, "POLLRDHUP", 0) |
	    select.POLLERR | select.POLLNVAL):
		return False
	inq = array.array("i", [0])
	try:
		fcntl.ioctl(s.fileno(), termios.FIONREAD, inq)
	except OSError:
		return True
	return inq[0] == 0


def _channel():
	"""The agent's end as a socket, or None: RDZV_PROGRESS_FD is trusted
	only when it is a local SOCK_SEQPACKET socket (a wrapper may have
	reused the number for something of its own)."""
	v = os.environ.get("RDZV_PROGRESS_FD", "")
	if not v.isdigit():
		return None
	try:
		s = socket.socket(fileno=os.dup(int(v)))
	except OSError:
		return None
	if s.family != socket.AF_UNIX or s.type != socket.SOCK_SEQPACKET:
		s.close()
		return None
	# rdzv-agent hands the worker's end over O_NONBLOCK (a worker must
	# never block sending to it); the watcher thread blocks in recv(),
	# and every send here says MSG_DONTWAIT.
	s.setblocking(True)
	return s


def _sockets():
	"""{fd: "socket:[inode]"} of this process."""
	out = {}
	for name in os.listdir("/proc/self/fd"):
		try:
			link = os.readlink("/proc/self/fd/" + name)
		except OSError:
			continue
		if link.startswith("socket:"):
			out[int(name)] = link
	return out


def _reset(socks):
	"""Resets the TCP connections of a broken gloo group (fds from
	_sockets() taken around its creation): the local side's operations
	fail at once, and with SO_LINGER 0 gloo's own close sends an RST, so
	a peer blocked sending to us fails too instead of waiting for its
	timeout.  gloo on 1.13 has no abort; 2.13's abort() hangs with an
	operation in flight."""
	now = _sockets()
	for fd, link in socks.items():
		if now.get(fd) != link:
			continue	# closed (and maybe reused) since
		try:
			s = socket.socket(fileno=os.dup(fd))
		except OSError:
			continue
		try:
			# Connections only: gloo 2.x aborts the process when
			# its listener fails.
			if s.family in (socket.AF_INET, socket.AF_INET6) and \
			    s.type == socket.SOCK_STREAM and not s.getsockopt(
			    socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
				s.getpeername()
				s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
				    struct.pack("ii", 1, 0))
				s.shutdown(socket.SHUT_RDWR)
		except OSError:
			pass
		finally:
			s.close()


def _comm_error(e):
	"""Whether e looks like a collective cut off by a peer (gloo's
	"Connection closed by peer", NCCL errors, timeouts), not a bug in
	the step itself."""
	import torch.distributed as dist
	if isinstance(e, getattr(dist, "DistBackendError", ())):
		return True
	return isinstance(e, RuntimeError) and re.search(
	    r"(?i)gloo|nccl|connection|peer|socket|broken pipe|timed out",
	    str(e)) is not None


class _Model:
	"""What job.ddp() returns: calls and attributes go to the current
	DistributedDataParallel (rebuilt by each repair), or to the module
	itself while there is no group."""

	def __init__(self, job):
		object.__setattr__(self, "_job", job)

	def _current(self):
		j = self._job
		return j._ddp if j._ddp is not None else j._module

	@property
	def module(self):
		return self._job._module

	def __call__(self, *a, **kw):
		return self._current()(*a, **kw)

	def __getattr__(self, name):
		return getattr(self._current(), name)


class _Step:
	def __init__(self, job):
		self.job = job

	def __enter__(self):
		self.job._begin()
		return self.job

	def __exit__(self, et, e, tb):
		return self.job._end(e)


class Job:
	"""A training job's group, state and sampler position; made by
	init_process_group()."""

	def __init__(self, backend, timeout, chan):
		self.backend = backend
		self.timeout = timeout
		self.rank, self.world = 0, 1
		self.step_count = 0		# steps committed, job-wide
		self.epoch = 0
		self.pos = 0			# samples of the epoch consumed
		self.repairs = 0
		self.repair_times = []		# seconds each repair took
		self._chan = chan
		self.replacement = chan is not None and \
		    os.environ.get("RDZV_REPLACEMENT") == "1"
		self._joined = not self.replacement
		ms = os.environ.get("RDZV_REPAIR_TIMEOUT_MS", "60000")
		self.repair_timeout = int(ms) / 1000.0 if ms.isdigit() else 60.0
		self._module = None
		self._ddp = None
		self._ddp_kw = {}
		self._tracked = []
		self._cv = threading.Condition()
		self._rounds = []		# received, not yet taken
		self._in_step = False
		self._freeze = None		# the grow round being agreed on
		self._target = None		# its switch step once agreed
		self._socks = {}		# the current group's sockets
		self._store = None
		self._reported = 0.0
		self._main = threading.get_ident()	# the training thread
		self._blocked = None		# (step, since) seen inside torch
		self._waited = 0.0
		self._batch = None		# (n, batch_size, seed, shuffle)
		self._perm = (None, None)
		self._advance = 0
		self._nccl_cut = False		# the group's NCCL comm aborted
		self._tainted = False		# a step ran on it and "ended"

	# ---- channel ----

	def _send(self, text):
		if self._chan is None:
			return
		try:
			self._chan.send(text.encode("ascii"), socket.MSG_DONTWAIT)
		except OSError:
			pass		# the agent has no room or is gone

	def _in_torch(self):
		"""Whether the training thread's innermost Python frame is
		torch's own code (a collective, or the backward pass that runs
		DDP's allreduce), not the script's."""
		import torch
		f = sys._current_frames().get(self._main)
		return f is not None and f.f_code.co_filename.startswith(
		    os.path.dirname(torch.__file__) + os.sep)

	def _say_wait(self):
		"""Says "wait" (about once a second) while the training thread
		has been inside torch with no step done for WAIT_EVERY: blocked
		on its peers, not hung itself, so the agent's --progress_timeout
		watchdog gives it longer and kills the rank it waits on first
		(a stopped rank, or one stuck in the script's own code, says
		nothing).  A rank stuck inside torch's own computation looks
		the same; it is killed a timeout later, as a deadlock is."""
		now = time.monotonic()
		if not self._joined or not self._in_torch():
			self._blocked = None
			return
		if self._blocked is None or self._blocked[0] != self.step_count:
			self._blocked = (self.step_count, now)
			return
		if now - self._blocked[1] >= WAIT_EVERY and \
		    now - self._waited >= WAIT_EVERY:
			self._waited = now
			self._send("wait")

	def _watch(self):
		import select
		warned = False
		p = select.poll()
		p.register(self._chan.fileno(), select.POLLIN)
		while True:
			try:
				if not p.poll(WAIT_EVERY * 500):
					self._say_wait()
					continue
				self._say_wait()
				msg = self._chan.recv(MSG_MAX + 1)
			except InterruptedError:
				continue
			except OSError:
				return
			if not msg:
				if _chan_eof(self._chan):
					_debug("the agent closed the channel")
					return
				_debug("ignoring an empty message")
				continue
			try:
				verb, f = parse_message(msg)
			except ValueError as e:
				# The agent's bug, not an attack: say so once.
				(_debug if warned else _warn)(
				    "ignoring a malformed message: %s", e)
				warned = True
				continue
			if verb == "round":
				r = Round(**f)
				_debug("heard %r", r)
				self._on_round(r)
			elif verb == "stop":
				_warn("the agent stopped the repair: exiting")
				os._exit(1)
			else:
				_debug("ignoring %r", msg[:64])

	def _on_round(self, r):
		with self._cv:
			self._rounds.append(r)
			healthy = r.kind == "grow" and self._joined
			if healthy:
				self._freeze, self._target = r, None
			self._cv.notify_all()
		if healthy:
			self._agree(r)
		elif self._joined:
			self._abort()

	def _agree(self, r):
		"""Watcher: the step after which the survivors switch to the
		grow round r, the largest number of steps any of them began."""
		target = -1
		try:
			st = self._round_store(r)
			with self._cv:
				begun = self.step_count + (1 if self._in_step else 0)
			st.set(_KEY % r.rank, str(begun))
			keys = [_KEY % i for i in range(r.world)]
			st.wait(keys, datetime.timedelta(seconds=self.repair_timeout))
			target = max(int(st.get(k)) for k in keys)
		except Exception as e:
			_warn("no agreement on round %d (%s): switching now", r.round, e)
		with self._cv:
			if self._freeze is r:
				self._target = target
				self._cv.notify_all()
		_debug("round %d: switch after step %d", r.round, target)

	def _abort(self):
		"""Breaks the current group so that no collective stays blocked
		on it (watcher on a shrink, or a survivor whose step failed)."""
		import torch
		import torch.distributed as dist
		if self.backend == "nccl":
			# The communicator only, never the group: the training
			# thread may be using the default group right now (taking
			# it away turns its next call into a ValueError, not a
			# communication error).  Kernels aborted this way may end
			# without an error: _end commits no step that ends on it.
			self._nccl_cut = True
			try:
				pg = dist.distributed_c10d._get_default_group()
				if hasattr(pg, "_get_backend"):
					pg = pg._get_backend(torch.device("cuda"))
				pg.abort()
			except Exception as e:
				_debug("abort: %s", e)
			return
		_reset(self._socks)

	# ---- groups ----

	def _round_store(self, r):
		import torch.distributed as dist
		st = dist.TCPStore(r.master_addr, r.master_port, None, False,
		    datetime.timedelta(seconds=self.repair_timeout))
		return dist.PrefixStore(r.ns + "/", st)

	def _group(self, r):
		"""Joins round r's process group as the default group."""
		import torch.distributed as dist
		store = self._round_store(r)
		before = _sockets()
		kw = {} if self.timeout is None else {"timeout": self.timeout}
		dist.init_process_group(self.backend, store=store, rank=r.rank,
		    world_size=r.world, **kw)
		self._socks = {fd: l for fd, l in _sockets().items()
		    if before.get(fd) != l}
		self._store = store
		self._nccl_cut = False
		self.rank, self.world = r.rank, r.world

	def _device(self):
		import torch
		if self.backend == "nccl":
			return torch.device("cuda", torch.cuda.current_device())
		return torch.device("cpu")

	def _wrap(self):
		from torch.nn.parallel import DistributedDataParallel as DDP
		return DDP(self._module, **self._ddp_kw)

	def _repair(self, r):
		"""Main thread: leaves the old group, joins round r's, makes
		every rank's state the donor's where the steps differ, wraps the
		model again."""
		import torch.distributed as dist
		t0 = time.monotonic()
		self._ddp = None
		if dist.is_initialized():
			try:
				dist.destroy_process_group()
			except Exception as e:
				_debug("destroy: %s", e)
		if self._module is not None:
			self._module.zero_grad(set_to_none=True)
		self._group(r)
		self._sync(r)
		if self._module is not None:
			self._ddp = self._wrap()
		with self._cv:
			if self._freeze is r:
				self._freeze = self._target = None
		self.repairs += 1
		self.repair_times.append(time.monotonic() - t0)
		_debug("%r done in %.3f s at step %d", r, self.repair_times[-1],
		    self.step_count)

	def _sync(self, r):
		import torch
		import torch.distributed as dist
		dev = self._device()
		mine = torch.tensor([self.step_count if self._joined and
		    not self._tainted else -1], dtype=torch.int64, device=dev)
		all_ = [torch.zeros_like(mine) for _ in range(self.world)]
		dist.all_gather(all_, mine)
		steps = [int(t.item()) for t in all_]
		top = max(steps)
		if top < 0 and self._tainted:
			raise RuntimeError("rdzv.repair: every rank's state may "
			    "hold a step cut off by an NCCL abort; none to resume")
		if top < 0 or min(steps) == top:
			return
		donor = r.donor if 0 <= r.donor < self.world and \
		    steps[r.donor] == top else steps.index(top)
		blob = self._pack() if self.rank == donor else b""
		n = torch.tensor([len(blob)], dtype=torch.int64, device=dev)
		dist.broadcast(n, donor)
		if self.rank == donor:
			buf = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
		else:
			buf = torch.empty(int(n.item()), dtype=torch.uint8)
		buf = buf.to(dev)
		dist.broadcast(buf, donor)
		if self.rank != donor:
			self._unpack(buf.cpu().numpy().tobytes())
			self._tainted = False
		_debug("state of step %d from rank %d (%d bytes), steps were %s",
		    top, donor, int(n.item()), steps)

	def _pack(self):
		import torch
		f = io.BytesIO()
		torch.save({"step": self.step_count, "epoch": self.epoch,
		    "pos": self.pos,
		    "model": self._module.state_dict() if self._module else None,
		    "tracked": [o.state_dict() for o in self._tracked]}, f)
		return f.getvalue()

	def _unpack(self, data):
		import torch
		f = io.BytesIO(data)
		try:
			st = torch.load(f, map_location="cpu", weights_only=False)
		except TypeError:	# a torch without weights_only
			f.seek(0)
			st = torch.load(f, map_location="cpu")
		if self._module is not None and st["model"] is not None:
			self._module.load_state_dict(st["model"])
		for o, sd in zip(self._tracked, st["tracked"]):
			o.load_state_dict(sd)
		self.step_count, self.epoch, self.pos = st["step"], st["epoch"], \
		    st["pos"]

	def _join(self):
		"""A replacement: says ready, waits for its grow round, joins it
		and receives the state."""
		self._send("ready")
		r = self._wait_round()
		if r is None:
			raise RuntimeError("rdzv.repair: no round from the agent "
			    "within %.0f s of ready" % self.repair_timeout)
		try:
			self._round_store(r).set(_KEY % r.rank, "-1")
		except Exception as e:
			_warn("posting to round %d: %s", r.round, e)
		self._repair(r)
		self._joined = True

	def _wait_round(self):
		"""The newest round received (waiting up to the repair timeout
		for one), taken; None at the timeout."""
		end = time.monotonic() + self.repair_timeout
		with self._cv:
			while not self._rounds:
				left = end - time.monotonic()
				if left <= 0:
					return None
				self._cv.wait(left)
			r = self._rounds[-1]
			del self._rounds[:]
			return r

	# ---- the step ----

	def _begin(self):
		"""Before a step's batch: takes a pending round (a grow round
		only once every step a survivor began is done)."""
		if self._in_step:
			return
		if not self._joined:	# a script that does not use epochs()
			self._join()
		while True:
			with self._cv:
				r = self._rounds[-1] if self._rounds else None
				if r is None:
					self._in_step = True
					return
				if self._freeze is r:
					end = time.monotonic() + self.repair_timeout
					while self._target is None and \
					    time.monotonic() < end:
						self._cv.wait(end - time.monotonic())
					if self._target is not None and \
					    self.step_count < self._target:
						self._in_step = True
						return
				del self._rounds[:]
			self._repair(r)

	def _end(self, e):
		if self._nccl_cut:
			# Ended on an aborted NCCL communicator: what its kernels
			# left is garbage, so the step is dropped, and a state it
			# may have updated is no donor's (_sync).
			if e is None:
				self._tainted = True
			e = RuntimeError("nccl: the group was aborted during step "
			    "%d" % self.step_count)
		with self._cv:		# what the watcher's _agree() reads
			self._in_step = False
			if e is None:
				self.step_count += 1
		if e is None:
			self.pos += self._advance
			if self._batch is not None and \
			    self._batch[0] - self.pos < self.world * self._batch[1]:
				self.epoch += 1
				self.pos = 0
			now = time.monotonic()
			if now - self._reported >= PROGRESS_EVERY:
				self._reported = now
				self._send(str(self.step_count))
			return False
		return self._recover(e, "step %d" % self.step_count)

	def _recover(self, e, what):
		"""Main thread: e, raised by what, is a peer's death (a gloo or
		NCCL communication error) in a job that repairs: aborts the
		group, waits for the agent's round and repairs in it.  True once
		repaired; False (raise e) otherwise."""
		if self._chan is None or not self._joined or \
		    not isinstance(e, Exception) or not _comm_error(e):
			return False
		_debug("%s cut off: %s", what, str(e).splitlines()[0][:160])
		self._abort()
		r = self._wait_round()
		if r is None:
			_warn("no round from the agent within %.0f s of a failed "
			    "%s", self.repair_timeout, what)
			return False
		self._repair(r)
		return True

	# ---- what a script calls ----

	def ddp(self, module, **kw):
		"""module wrapped in DistributedDataParallel(module, **kw),
		wrapped again after each repair; without a group, module."""
		import torch.distributed as dist
		self._module, self._ddp_kw = module, kw
		if dist.is_available() and dist.is_initialized():
			# DDP's constructor broadcasts the parameters: a peer that
			# dies then is repaired as in a step (_repair wraps again).
			try:
				self._ddp = self._wrap()
			except Exception as e:
				if not self._recover(e, "DistributedDataParallel()"):
					raise
		return _Model(self)

	def track(self, *objs):
		"""Objects with state_dict()/load_state_dict() (optimizers, LR
		schedulers, scalers) that a replacement receives with the model;
		returns the first."""
		self._tracked.extend(objs)
		return objs[0] if objs else None

	def step(self):
		"""Context manager around one training step: on success the
		step is committed (and reported to the agent); when a peer's
		death cuts it off, the job repairs and the exception is
		swallowed: the step is dropped."""
		return _Step(self)

	def epochs(self, n):
		"""Yields epoch numbers up to n; a replacement joins here and
		resumes at the donor's epoch."""
		if not self._joined:
			self._join()
		while self.epoch < n:
			e = self.epoch
			yield e
			if self.epoch == e:	# the body did not use batches()
				self.epoch, self.pos = e + 1, 0

	def batches(self, n, batch_size, seed=0, shuffle=True):
		"""Yields this rank's indices (a list) of each global batch
		left in the current epoch of a data set of n samples: the
		epoch's permutation (seeded by seed + epoch) cut in blocks of
		world * batch_size, block k's slice rank * batch_size on; an
		incomplete last block is dropped.  A repair reshards from the
		position the job reached."""
		import torch
		self._batch = (n, batch_size, seed, shuffle)
		e = self.epoch
		while self.epoch == e:
			self._begin()
			if self.epoch != e:	# a donor's state moved it
				self._in_step = False
				return
			if n - self.pos < self.world * batch_size:
				self._in_step = False
				self.epoch, self.pos = e + 1, 0
				return
			if self._perm[0] != (e, seed, shuffle):
				if shuffle:
					g = torch.Generator()
					g.manual_seed(seed + e)
					p = torch.randperm(n, generator=g)
				else:
					p = torch.arange(n)
				self._perm = ((e, seed, shuffle), p.tolist())
			lo = self.pos + self.rank * batch_size
			self._advance = self.world * batch_size
			yield self._perm[1][lo:lo + batch_size]


def init_process_group(backend="gloo", timeout=None):
	"""Makes the job's default process group and returns its Job.  Under
	an agent that passes the channel: says hello repair=1 (unless
	RDZV_REPAIR=0), starts the
	watcher, and joins the round of the environment (MASTER_ADDR,
	MASTER_PORT, RDZV_NAMESPACE, RANK, WORLD_SIZE), or, in a replacement,
	nothing yet (it joins in job.epochs()).  Without a channel: torch's
	env:// group when WORLD_SIZE is set (torchrun), else no group."""
	import torch.distributed as dist
	chan = _channel()
	job = Job(backend, timeout, chan)
	if chan is None:
		if os.environ.get("WORLD_SIZE") and dist.is_available():
			kw = {} if timeout is None else {"timeout": timeout}
			dist.init_process_group(backend, **kw)
			job.rank, job.world = dist.get_rank(), dist.get_world_size()
		return job
	if backend == "nccl":
		# The helper aborts a broken communicator itself; torch's own
		# error handling (which rdzv-agent and torchrun turn on) would
		# end the process first.
		os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
		os.environ["NCCL_ASYNC_ERROR_HANDLING"] = "0"
		# The host waits for each collective, so that one the watcher
		# aborts raises in DDP's backward, before the optimizer.
		os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
	# RDZV_REPAIR=0 vetoes, as for librdzvworker: no hello, so this
	# worker's job restarts on a failure (steps are still reported).
	if os.environ.get("RDZV_REPAIR") != "0":
		job._send("hello repair=1")
	threading.Thread(target=job._watch, name="rdzv-repair",
	    daemon=True).start()
	env = os.environ
	job.rank = int(env.get("RANK", "0"))
	job.world = int(env.get("WORLD_SIZE", "1"))
	if not job.replacement:
		r = Round(round=int(env.get("RDZV_ROUND", "0") or 0),
		    kind="grow", ns=env.get("RDZV_NAMESPACE", "rdzv"),
		    rank=job.rank, world=job.world, donor=0,
		    master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
		    master_port=int(env["MASTER_PORT"]))
		job._group(r)
	return job
