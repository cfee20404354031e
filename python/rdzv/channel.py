# SPDX-License-Identifier: Apache-2.0
"""rdzv.channel: the worker <-> agent channel of rdzv-agent, Python side.

Owns the grammar of the channel's messages (common/chan.c has the C
side: parse_message, parse_round, Round), finding the agent's end of it
(open_channel: RDZV_PROGRESS_FD, trusted only as a local SOCK_SEQPACKET
socket) and telling its end from an empty datagram (chan_eof).  No torch
here: the grammar is tested without it.
"""

import os
import re
import socket

MSG_MAX = 512			# a channel datagram, either way


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
    "leave": {},
    "done": {},
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
    Round), "stop" or "leave"; None for a verb this side does not know (ignored:
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


def chan_eof(s):
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


def home_rank(env=None):
    """This process's home rank: the rank it started as, kept for the
    whole job however repairs renumber the group, and inherited by a
    replacement from the worker it replaces.  Under rdzv-agent,
    GROUP_RANK * LOCAL_WORLD_SIZE + RDZV_LOCAL_RANK (the node's place in
    the job and the worker's on the node, which a repair never moves);
    else RANK (torchrun), else 0."""
    env = os.environ if env is None else env
    try:
        if "GROUP_RANK" in env and "RDZV_LOCAL_RANK" in env:
            return int(env["GROUP_RANK"]) * \
                int(env.get("LOCAL_WORLD_SIZE", "1")) + \
                int(env["RDZV_LOCAL_RANK"])
        return int(env.get("RANK", "0"))
    except ValueError:
        return 0


def open_channel():
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
