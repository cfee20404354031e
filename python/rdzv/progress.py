# SPDX-License-Identifier: Apache-2.0
"""rdzv.progress: a job's training steps, reported where rdzv looks.

For any program under rdzv-agent, whether it repairs or not (a plain
script, Lightning, Accelerate, torchtitan, transformers' Trainer):

    from rdzv import progress
    ...
    progress.report(step)		# after each optimizer step
    ...
    progress.done()			# training ended (optional)

Each step reaches the agent at once (its --progress_timeout watchdog
kills a worker whose step stops moving) and rdzvd within a second
("progress/<RANK>" in the round's store, as librdzvworker's
rdzv_report_progress() and the repair helper write it), so
`rdzvctl members`, `rdzvctl top`, the status page and the per-job
metrics show the job's steps.  report() never blocks the training loop:
the agent gets one datagram (dropped when its socket is full), rdzvd is
written by a thread of this module.  Outside rdzv-agent (torchrun, a
plain python) report() does nothing.  A script that uses rdzv.repair
needs none of this: its Job reports its committed steps itself, and
report() leaves them alone.

The ready-made hooks for frameworks (rdzv.hooks) call report().
"""

import atexit
import os
import socket
import threading
import time

from . import log
from .channel import open_channel
from .native import Writer
# The repair helper's reporter's pace and patience, for the same writes.
from .watcher import STORE_EVERY, STORE_TIMEOUT

CHAN_EVERY = 0.1	# seconds between steps sent to the agent

_lock = threading.Lock()
_reporter = None	# the process's _Reporter, made by the first report()
_helper = False		# an rdzv.repair Job reports this process's steps


def report(step):
    """Reports that training reached step (an int >= 0: optimizer steps
    done, or any count that grows as training goes on).  Cheap enough
    to call at every step; never blocks and never raises for rdzv's
    sake (a step that is not an int >= 0 raises ValueError).  Does
    nothing outside rdzv-agent or when rdzv.repair reports the steps."""
    step = int(step)
    if step < 0:
        raise ValueError("step %d: want an int >= 0" % step)
    r = _get()
    if r is not None:
        r.note(step)


def done():
    """Tells the agent that training ended: its --progress_timeout
    watchdog stops watching this worker (a final evaluation, a
    checkpoint, the exit take no steps) until report() is called again.
    Does nothing where report() does nothing."""
    r = _get()
    if r is not None:
        r.done()


def last_step():
    """The last step report() took, or None (none yet, or not under an
    agent)."""
    r = _reporter
    return None if r is None or r is False else r.step


def helper_reports():
    """rdzv.repair's Job calls this as it starts: its own reporter owns
    this process's steps from then on, and report() stays quiet."""
    global _helper
    _helper = True


def _get():
    """The process's reporter, made on first use; None when there is
    nothing to report to (no agent, or the helper reports)."""
    global _reporter
    if _helper:
        return None
    r = _reporter
    if r is None:
        with _lock:
            if _reporter is None:
                _reporter = _Reporter.make() or False
            r = _reporter
    return r or None


class _Reporter:
    """What report() sends, and the thread that writes it to rdzvd."""

    def __init__(self, chan, ns, rank):
        self.chan = chan
        self.ns = ns		# the round's namespace on rdzvd
        self.rank = rank
        self.step = None
        self.sent_at = 0.0		# monotonic time of the last send
        self.closing = threading.Event()
        self.thread = None

    @classmethod
    def make(cls):
        """A reporter for this worker of rdzv-agent, or None outside
        one (no channel, or no RANK and MASTER_PORT)."""
        env = os.environ
        chan = open_channel()
        if chan is None:
            return None
        try:
            rank = int(env["RANK"])
        except (KeyError, ValueError):
            chan.close()
            return None
        r = cls(chan, env.get("RDZV_NAMESPACE", ""), rank)
        r.thread = threading.Thread(target=r._write_loop,
            name="rdzv-progress", daemon=True)
        r.thread.start()
        atexit.register(r.close)
        return r

    def note(self, step):
        """Takes step; sends it to the agent unless one was sent in the
        last CHAN_EVERY (the next report sends the newest)."""
        self.step = step
        now = time.monotonic()
        if now - self.sent_at < CHAN_EVERY:
            return
        self.sent_at = now
        try:
            self.chan.send(b"%d" % step, socket.MSG_DONTWAIT)
        except OSError:
            pass		# the agent's socket is full or gone

    def done(self):
        """Says "done" to the agent (never blocks)."""
        try:
            self.chan.send(b"done", socket.MSG_DONTWAIT)
        except OSError:
            pass

    def _write_loop(self):
        """Thread: writes the newest step to rdzvd when it moved, at most
        every STORE_EVERY, over a native connection of its own
        (rdzv.native.Writer: a write that waits for a restarting rdzvd
        holds nobody else); a failed write is tried again next time."""
        st, said = Writer.from_env(STORE_TIMEOUT), None
        if st is None or not self.ns:
            return		# no rdzvd named: the agent hears the steps
        while not self.closing.wait(STORE_EVERY):
            step = self.step
            if step is None or step == said:
                continue
            try:
                st.set(self.ns, "progress/%d" % self.rank, "%d %d 0" % (
                    step, int(time.time() * 1000)))
                said = step
            except Exception as e:
                log.debug("progress to rdzvd: %s",
                    str(e).splitlines()[0][:160] if str(e) else e)
        st.close()

    def close(self):
        """At the interpreter's exit: the writer finishes the write it
        is in and stops, so that no thread is inside torch's C++ code
        while Python finalizes (see rdzv.watcher.close)."""
        self.closing.set()
        t = self.thread
        if t is not None and t.is_alive() and \
            t is not threading.current_thread():
            t.join(STORE_TIMEOUT + 1.0)
