"""rdzv.group: the process group's plumbing below the repair logic.

Owns what the helper needs from a torch process group besides making it:
the sockets a group opened (sockets, taken around its creation), breaking
them so no collective stays blocked on a dead peer (reset), telling a
peer's death from a bug in the step (comm_error), and a round's stores
(round_store: its namespace's PrefixStore; raw_store: the round port's
own namespace, where rdzvd reads "progress/<rank>").
"""

import datetime
import os
import re
import socket
import struct


def raw_store(r, timeout):
	"""A TCPStore client of round r's port (rdzvd serves the round's
	namespace there), timeout in seconds."""
	import torch.distributed as dist
	return dist.TCPStore(r.master_addr, r.master_port, None, False,
	    datetime.timedelta(seconds=timeout))


CONNECT_TRY = 2.0	# seconds of one try to reach a round's store


def round_store(r, timeout, current=None):
	"""Round r's store: PrefixStore(ns + "/", raw_store(r)), where its
	group and the helper's own agreement keys live.  current(): whether
	r is still the newest round; while it is, a port that refuses is
	tried again for up to timeout seconds, else given up at once (rdzvd
	closes a round's port when it opens the next one, and torch's client
	would try a closed port until its timeout)."""
	import datetime
	import time
	import torch.distributed as dist
	if current is None:
		return dist.PrefixStore(r.ns + "/", raw_store(r, timeout))
	end = time.monotonic() + timeout
	while True:
		left = end - time.monotonic()
		try:
			st = raw_store(r, max(min(CONNECT_TRY, left), 0.1))
			break
		except Exception as e:
			if not current():
				raise ConnectionError("round %d superseded while "
				    "connecting to its store" % r.round) from e
			if left <= CONNECT_TRY:
				raise
	if hasattr(st, "set_timeout"):
		st.set_timeout(datetime.timedelta(seconds=timeout))
	return dist.PrefixStore(r.ns + "/", st)


def sockets():
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


def _cut(fd, port=None):
	"""Resets fd when it is a TCP connection (to port, if given): the
	local side's operations fail at once, and with SO_LINGER 0 the
	owner's own close sends an RST.  Listeners are left alone: gloo 2.x
	aborts the process when its listener fails."""
	try:
		s = socket.socket(fileno=os.dup(fd))
	except OSError:
		return
	try:
		if s.family in (socket.AF_INET, socket.AF_INET6) and \
		    s.type == socket.SOCK_STREAM and not s.getsockopt(
		    socket.SOL_SOCKET, socket.SO_ACCEPTCONN) and \
		    (port is None or s.getpeername()[1] == port):
			s.getpeername()
			s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
			    struct.pack("ii", 1, 0))
			s.shutdown(socket.SHUT_RDWR)
	except OSError:
		pass
	finally:
		s.close()


def reset(socks):
	"""Resets the TCP connections of a broken gloo group (fds from
	sockets() taken around its creation), so a peer blocked sending to
	us fails too instead of waiting for its timeout.  gloo on 1.13 has
	no abort; 2.13's abort() hangs with an operation in flight."""
	now = sockets()
	for fd, link in socks.items():
		if now.get(fd) == link:	# not closed (and maybe reused) since
			_cut(fd)


def comm_error(e):
	"""Whether e looks like a collective cut off by a peer (gloo's
	"Connection closed by peer", NCCL errors, timeouts), not a bug in
	the step itself."""
	import torch.distributed as dist
	if isinstance(e, (ConnectionError, getattr(dist, "DistBackendError",
	    ()))):
		return True
	return isinstance(e, RuntimeError) and re.search(
	    r"(?i)gloo|nccl|connection|peer|socket|broken pipe|timed out",
	    str(e)) is not None


def reset_port(port):
	"""Resets this process's TCP connections to port (a round's store
	on rdzvd): a group being built for a round that a newer one has
	superseded stops waiting there for peers that will never come."""
	for fd in sockets():
		_cut(fd, port)


def reset_names():
	"""Numbers torch's next process group as the first again.  Each rank
	finds its peers under the store prefix of the group's number, which
	torch counts up as it makes groups and back to 0 when the default
	group is destroyed; one whose making failed (a repair cut off) is
	counted but never destroyed, so without this the ranks that saw the
	failure would look for their peers under "1/" and the others under
	"0/" in the next round."""
	import torch.distributed as dist
	c10d = dist.distributed_c10d
	if hasattr(c10d, "_group_count"):
		c10d._group_count = 0		# torch 1.13 and 2.x's global
	if hasattr(c10d, "_world") and hasattr(type(c10d._world),
	    "group_count"):
		try:
			c10d._world.group_count = 0
		except AttributeError:
			pass

