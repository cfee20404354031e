# SPDX-License-Identifier: Apache-2.0
"""rdzv.group: the process group's plumbing below the repair logic.

Owns what the helper needs from a torch process group besides making it:
the sockets a group opened (sockets, taken around its creation), breaking
them so no collective stays blocked on a dead peer (reset), telling a
peer's death from a bug in the step (comm_error), a round's stores
(round_store: its namespace's PrefixStore; raw_store: the round port's
own namespace, where rdzvd reads "progress/<rank>"), the ranks' coming to
a round, which a newer round calls off on all or none (arrive), and the
timeout a round's group is made under (build_timeout).
"""

import datetime
import os
import re
import socket
import struct
import time


def raw_store(r, timeout):
    """A TCPStore client of round r's port (rdzvd serves the round's
    namespace there), timeout in seconds (at least 1 on torch 1.13,
    whose client counts it in whole seconds: 0.5 would be no try)."""
    import torch
    import torch.distributed as dist
    if torch.__version__.split(".")[0] in ("0", "1"):
        timeout = max(timeout, 1.0)
    return dist.TCPStore(r.master_addr, r.master_port, None, False,
        datetime.timedelta(seconds=timeout))


# Seconds of one try to reach a round's store: a port rdzvd closes for a
# newer round just as a try begins costs about twice that (torch's client
# tries it again itself), then the newer round is taken.
CONNECT_TRY = 0.5
PROBE_PAUSE = 0.05	# seconds between looks at a port that refused


def _refused(r):
    """Whether round r's port refuses a connection now (rdzvd closed
    it for a newer round, or has not opened it yet): a plain connect
    says so at once, where torch's client tries it again for seconds."""
    try:
        socket.create_connection((r.master_addr, r.master_port),
            timeout=CONNECT_TRY).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        pass		# torch's client says what is wrong
    return False


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
        if not current():
            raise ConnectionError("round %d superseded while "
                "connecting to its store" % r.round)
        if _refused(r) and left > 0:
            time.sleep(PROBE_PAUSE)
            continue
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


GONE = b"gone"		# a round's arrival count once a rank called it off
POLL_MIN, POLL_MAX = 0.001, 0.02	# seconds between looks at the count
_NONE = "\x01"			# a value no key of a round holds


def look(store, key):
    """key's value, or None when it is not there, without waiting for
    it (get() would): rdzvd drops a round's keys when a newer round
    opens.  A compare_set no value matches (1.13's PrefixStore has no
    check())."""
    v = store.compare_set(key, _NONE, _NONE)
    return None if v == _NONE.encode() else v


def posted(store, keys):
    """Whether every one of keys is set, without waiting for any:
    check() where the store has it (torch 2.x), else a look at each
    (torch 1.13's stores have no check())."""
    if hasattr(store, "check"):
        return store.check(keys)
    return all(look(store, k) is not None for k in keys)


def arrive(store, key, world, current, timeout):
    """Waits until all world ranks of a round have come to it (each
    adds 1 to key in the round's store), or calls the round off when
    current() says a newer one came: then raises ConnectionError, on
    this rank and on every rank that comes or looks after.  All or
    none: a rank calls a round off only by a compare_set of a count
    short of world, and no rank passes once the count is "gone", so no
    rank is left making a group with a peer that went to the newer
    round (gloo waits for a peer's connection up to five times the
    group's timeout, and nothing cuts that wait).  Keys that are gone
    (rdzvd dropped the round for a newer one) call it off too.  Not
    every rank within timeout seconds: called off, and TimeoutError."""
    # A look before adding: rdzvd ends a connection that adds to "gone".
    if look(store, key) == GONE:
        raise ConnectionError("round called off by a rank that left "
            "it for a newer one")
    try:
        n = store.add(key, 1)
    except Exception as e:	# rdzvd ends a connection that adds to "gone"
        raise ConnectionError("round called off as this rank came "
            "(%s)" % str(e).splitlines()[0][:120]) from e
    end = time.monotonic() + timeout
    pause = POLL_MIN
    while n < world:
        late = time.monotonic() > end
        if late or not current():
            v = store.compare_set(key, str(n), GONE.decode())
            if v == str(n).encode():	# not there: dropped
                v = None
            elif v == GONE:
                if late:
                    raise TimeoutError("%d of %d ranks came to "
                        "the round within %.0f s" % (n, world,
                        timeout))
                raise ConnectionError("round superseded while "
                    "its ranks came")
        else:
            time.sleep(pause)
            pause = min(pause * 1.5, POLL_MAX)
            v = look(store, key)
        if v is None:
            raise ConnectionError("round's keys dropped: a newer "
                "round opened")
        if v == GONE:
            raise ConnectionError("round called off by a rank that "
                "left it for a newer one")
        n = int(v)


def build_timeout(backend, timeout, repair_timeout):
    """(the timeout to make a round's group under, the one to give it
    after or None), from the group's own (None: torch's default).  Its
    ranks have all come (arrive), so a gloo group is made in well under
    a second; a peer that dies in that time would hold the others in
    gloo's connect for five times the group's timeout (30 min by
    default), so the group is made under a tenth of the repair timeout
    (at least 2 s) and given its own after.  torch 2.x and gloo only
    (1.13 cannot change a group's timeout once made)."""
    import torch.distributed as dist
    if backend != "gloo" or not hasattr(dist.ProcessGroupGloo,
        "_set_default_timeout"):
        return timeout, None
    own = timeout if timeout is not None else dist.default_pg_timeout
    short = datetime.timedelta(seconds=max(2.0, repair_timeout / 10))
    return (short, own) if short < own else (own, None)


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


def _cut(fd):
    """Resets fd when it is a TCP connection: the local side's
    operations fail at once, and with SO_LINGER 0 the owner's own close
    sends an RST.  Listeners are left alone: gloo 2.x
    aborts the process when its listener fails."""
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
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
    the step itself.  A store's error counts too (DistStoreError, e.g.
    a round's group whose peer's address never came: the peer died, or
    rdzvd restarted under the group being made): the next round
    repairs it.  A backend's refusal of the call itself ("Cannot use
    ReduceOp.PREMUL_SUM with Gloo", an unsupported op or dtype, NCCL's
    invalid usage) is the script's bug, raised before any peer was
    reached: taken for a death, it would wait for a repair no death
    brings, where it must fail at once with its traceback."""
    import torch.distributed as dist
    if isinstance(e, (ConnectionError, getattr(dist, "DistStoreError",
        ()))):
        return True
    if not isinstance(e, RuntimeError):
        return False
    text = str(e)
    if _USAGE.search(text) and not _PEER.search(text):
        return False
    return isinstance(e, getattr(dist, "DistBackendError", ())) or \
        re.search(r"(?i)gloo|nccl", text) is not None or \
        _PEER.search(text) is not None


# What a peer's death says, and what a refused call says (comm_error).
_PEER = re.compile(r"(?i)connection|peer|socket|broken pipe|timed out")
_USAGE = re.compile(r"(?i)cannot use|not supported|unsupported|"
    r"invalid usage|invalid argument")


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

