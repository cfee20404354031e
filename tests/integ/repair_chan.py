"""repair_chan: the torch helper's side of the worker <-> agent channel
(python/rdzv/repair.py) as the C ends have it (common/chan_recv.c;
issue 12).  No torch needed.

  - an empty datagram is a legal message on SOCK_SEQPACKET, not the end
    of the channel: the helper's watcher ignores it and still hears the
    round after it, and still sees the end when the agent's end closes,
    even with empty datagrams and a round queued before it.
"""

import os
import queue
import socket
import sys
import threading

import rdzvtest as rt

sys.path.insert(0, os.path.join(rt.top_srcdir(), "python"))
from rdzv import repair  # noqa: E402

ROUND1 = (b"round round=1 kind=shrink ns=job/a/b/round/1 rank=0 world=3 "
          b"donor=1 master_addr=::1 master_port=1 local_rank=0 "
          b"local_world=1")
ROUND2 = (b"round round=2 kind=grow ns=job/j1/round/2 rank=3 world=4 "
          b"donor=0 master_addr=127.0.0.1 master_port=29500 local_rank=1 "
          b"local_world=2")


class Watched:
    """A Job's watcher thread on one end of a SOCK_SEQPACKET pair, as the
    helper runs it under an agent; the test holds the agent's end."""

    def __init__(self, before=()):
        self.agent, worker = socket.socketpair(socket.AF_UNIX,
                                               socket.SOCK_SEQPACKET)
        self.job = repair.Job("gloo", None, worker)
        self.rounds = queue.Queue()
        self.job._on_round = self.rounds.put
        for m in before:
            if m is None:
                self.agent.close()
            else:
                self.agent.send(m)
        self.thread = threading.Thread(target=self.job._watch, daemon=True)
        self.thread.start()

    def round(self):
        return self.rounds.get(timeout=30)


def test_empty_datagram_is_no_eof():
    """The agent sends an empty datagram, then a round: the watcher hears
    the round and is still there; after more empty ones and the close of
    the agent's end, it ends."""
    w = Watched()
    w.agent.send(b"")
    w.agent.send(ROUND1)
    r = w.round()
    assert (r.round, r.kind, r.rank, r.world) == (1, "shrink", 0, 3), r
    assert w.thread.is_alive()
    w.agent.send(b"")
    w.agent.send(b"")
    w.agent.send(ROUND2)
    assert w.round().round == 2
    assert w.thread.is_alive()
    w.agent.send(b"")
    w.agent.close()
    w.thread.join(30)
    assert not w.thread.is_alive(), "the watcher missed the channel's end"
    assert w.rounds.empty()


def test_empty_datagrams_before_the_end():
    """Queued before the watcher reads anything: "", a round, "" and the
    close of the agent's end: the round is heard, then the end."""
    w = Watched(before=(b"", ROUND2, b"", b"", None))
    assert w.round().round == 2
    w.thread.join(30)
    assert not w.thread.is_alive(), "the watcher missed the channel's end"
    assert w.rounds.empty()


def test_only_empty_then_end():
    """Nothing but empty datagrams and the end: no round, the watcher
    ends."""
    w = Watched(before=(b"", b"", None))
    w.thread.join(30)
    assert not w.thread.is_alive(), "the watcher missed the channel's end"
    assert w.rounds.empty()


if __name__ == "__main__":
    rt.main(globals(), per_test=60, total=150)
