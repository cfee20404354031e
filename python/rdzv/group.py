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


def round_store(r, timeout):
	"""Round r's store: PrefixStore(ns + "/", raw_store(r)), where its
	group and the helper's own agreement keys live."""
	import torch.distributed as dist
	return dist.PrefixStore(r.ns + "/", raw_store(r, timeout))


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


def reset(socks):
	"""Resets the TCP connections of a broken gloo group (fds from
	sockets() taken around its creation): the local side's operations
	fail at once, and with SO_LINGER 0 gloo's own close sends an RST, so
	a peer blocked sending to us fails too instead of waiting for its
	timeout.  gloo on 1.13 has no abort; 2.13's abort() hangs with an
	operation in flight."""
	now = sockets()
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


def comm_error(e):
	"""Whether e looks like a collective cut off by a peer (gloo's
	"Connection closed by peer", NCCL errors, timeouts), not a bug in
	the step itself."""
	import torch.distributed as dist
	if isinstance(e, getattr(dist, "DistBackendError", ())):
		return True
	return isinstance(e, RuntimeError) and re.search(
	    r"(?i)gloo|nccl|connection|peer|socket|broken pipe|timed out",
	    str(e)) is not None
