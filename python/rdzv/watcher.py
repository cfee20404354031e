# SPDX-License-Identifier: Apache-2.0
"""rdzv.watcher: the threads beside the training thread.

Owns, as a mixin of repair.Job: the watcher thread that reads the agent's
messages (a round: note it, agree on the switch step of a grow, break the
group of a shrink; stop: exit; leave: noted for the step's end), the "wait" it says while the training
thread is blocked on its peers, and the reporter thread that writes the
committed step where rdzvd reads it ("progress/<rank>" = "STEP WALL_MS
WAIT_MS" in the round's namespace, as librdzvworker's rdzv_report_progress
does; WAIT_MS is rdzv.waits' total),
so that rdzvctl members/top, the status page and the per-job metrics
show a torch job as they show a C one.
"""

import os
import sys
import threading
import time

from . import group, log
from .channel import Round, chan_eof, parse_message, MSG_MAX

WAIT_EVERY = 1.0		# "wait" while blocked in torch this long, as often
STORE_EVERY = 1.0		# seconds between steps written to rdzvd's store
STORE_TIMEOUT = 2.0		# seconds a progress write may take
AGREE_POLL = 0.02		# seconds between looks at a grow's posts
_KEY = "rdzv_repair/begun/%d"	# boundary agreement of a grow round


def switch_step(posts):
    """The step after which the survivors of a grow switch, from every
    rank's post in its store (_agree: b"-1" or b"BEGUN ROUND WORLD"):
    the largest BEGUN when the ranks that are not -1 are the whole group
    of one round (as many as its WORLD), else None (a group that is not
    whole somewhere: the grow is repaired as a shrink is)."""
    whole = [tuple(int(x) for x in p.split()) for p in posts
        if p.strip() != b"-1"]
    if not whole or any(len(w) != 3 for w in whole) or \
        len({w[1:] for w in whole}) != 1 or len(whole) != whole[0][2]:
        return None
    return max(w[0] for w in whole)


class Watcher:
    """The watcher and reporter threads' half of Job."""

    def _in_torch(self):
        """Whether the training thread's innermost Python frame is
        torch's own code (a collective, or the backward pass that runs
        DDP's allreduce), not the script's, or rdzv.group's waiting for
        a round's ranks to come (group.arrive: a rank blocked there by a
        stopped peer must not be taken for hung itself, or the watchdog
        kills it with the stopped one, and with it maybe the last rank
        that holds the job's state)."""
        import torch
        f = sys._current_frames().get(self._main)
        if f is None:
            return False
        name = f.f_code.co_filename
        return name.startswith(os.path.dirname(torch.__file__) + os.sep) \
            or name == group.__file__

    def _say_wait(self):
        """Says "wait" (about once a second) while the training thread
        has been inside torch with no step done for WAIT_EVERY: blocked
        on its peers, not hung itself, so the agent's --progress_timeout
        watchdog gives it longer and kills the rank it waits on first
        (a stopped rank, or one stuck in the script's own code, says
        nothing).  A rank stuck inside torch's own computation looks
        the same; it is killed a timeout later, as a deadlock is."""
        now = time.monotonic()
        # A replacement joining its round too: its agent watches it
        # from the round's push (it must join in time).
        if not self._in_torch():
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
        try:
            self._watch_chan()
        finally:
            with self._cv:
                self._chan_gone = True
                self._cv.notify_all()

    def _watch_chan(self):
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
                if chan_eof(self._chan):
                    log.debug("the agent closed the channel")
                    return
                log.debug("ignoring an empty message")
                continue
            try:
                verb, f = parse_message(msg)
            except ValueError as e:
                # The agent's bug, not an attack: say so once.
                (log.debug if warned else log.warn)(
                    "ignoring a malformed message: %s", e)
                warned = True
                continue
            if verb == "round":
                r = Round(**f)
                log.debug("heard %r", r)
                self._on_round(r)
            elif verb == "stop":
                log.warn("the agent stopped the repair: exiting")
                os._exit(1)
            elif verb == "leave":
                # Its node leaves on purpose: at the step's end.
                log.info("the agent asks this worker to leave at the "
                    "next step boundary")
                with self._cv:	# a cut step waiting for a round
                    self._leave_asked = True
                    self._cv.notify_all()
            else:
                log.debug("ignoring %r", msg[:64])

    def _superseded(self, r):
        """Whether a round newer than r came and waits to be taken:
        rdzvd closed r's store port when it opened that one."""
        return bool(self._rounds) and self._rounds[-1].round > r.round

    def _on_round(self, r):
        with self._cv:
            self._rounds.append(r)
            # A grow keeps the group the survivors step in only if
            # that group is whole on every one of them (_agree).
            healthy = r.kind == "grow" and self._joined and \
                self._group_whole()
            # A newer round supersedes a grow still being agreed on
            # (its replacement may be the peer that just died).
            self._freeze, self._target = (r if healthy else None), None
            mine = self._round
            self._cv.notify_all()
        # A round being made when this one came is called off, or
        # left once made, by the training thread (group.arrive).
        if r.kind == "grow":
            # Its own thread: the watcher must hear a round that
            # supersedes this one while the survivors agree.
            threading.Thread(target=self._agree, args=(r, healthy,
                mine), name="rdzv-agree", daemon=True).start()
        if not healthy and self._joined:
            self._abort()

    def _agree_world(self, mine):
        """How many ranks step in the group of round mine (_agree's
        WORLD): all of that round's."""
        return mine.world

    def _agree(self, r, healthy, mine):
        """Every rank of the grow round r posts in its store what it
        brings: "-1" (a replacement, or a rank whose group is being made
        or was broken) or "BEGUN ROUND WORLD" (the steps it has begun in
        the whole group of round ROUND, of WORLD ranks).  The survivors
        keep stepping in their group up to the largest BEGUN, then
        switch (no step dropped), only if every rank of that one group
        posted so; else (a grow that came while the survivors were
        still making the group of the round before, or a rank that left
        it for this one) the group is broken everywhere and r is
        repaired from the committed steps as a shrink is.  Given up
        when a newer round supersedes r."""
        target = -1
        try:
            st = group.round_store(r, self.repair_timeout,
                lambda: not self._superseded(r))
            with self._cv:
                begun = self.step_count + (1 if self._in_step else 0)
            st.set(_KEY % r.rank, "%d %d %d" % (begun, mine.round,
                self._agree_world(mine)) if healthy else "-1")
            if not healthy:
                return
            keys = [_KEY % i for i in range(r.world)]
            end = time.monotonic() + self.repair_timeout
            while not group.posted(st, keys):
                with self._cv:
                    if self._freeze is not r:
                        log.debug("round %d superseded", r.round)
                        return
                if time.monotonic() > end:
                    raise TimeoutError("not every rank posted within "
                        "%.0f s" % self.repair_timeout)
                time.sleep(AGREE_POLL)
            target = switch_step([st.get(k) for k in keys])
        except Exception as e:
            log.warn("no agreement on round %d (%s): switching now",
                r.round, e)
        with self._cv:
            # Under the lock: once the training thread takes r
            # (_repair clears _freeze), its new group is not broken.
            if self._freeze is not r:
                return
            if target is None:
                self._freeze = None
                self._abort()
            else:
                self._target = target
            self._cv.notify_all()
        if target is None:
            log.debug("round %d: a rank's group was not whole: "
                "repairing from the committed steps", r.round)
        else:
            log.debug("round %d: switch after step %d", r.round,
                target)

    def _close(self):
        """At the interpreter's exit (atexit, before it finalizes): the
        reporter finishes the store write it is in and stops.  A daemon
        thread inside torch's C++ code (a TCPStore call, which lets the
        GIL go) when Python finalizes is ended as it asks for the GIL
        back, inside a C++ destructor, and that aborts the process
        ("terminate called without an active exception", SIGABRT)
        after the training has ended."""
        self._closing.set()
        t = self._reporter
        if t is not None and t.is_alive() and \
            t is not threading.current_thread():
            t.join(STORE_TIMEOUT + 1.0)

    def _report(self):
        """Reporter thread: writes the committed step, when it moved or
        the round changed, at most every STORE_EVERY, into the current
        round's namespace on rdzvd.  A native connection of its own
        (rdzv.native.Writer; torch's TCPStore client would log a C++
        stack trace each time a round's port closes under it): a write
        that waits for an rdzvd restarting blocks nobody but this thread,
        and a failed one is tried again next time."""
        from .native import Writer
        st, said = Writer.from_env(STORE_TIMEOUT), None
        if st is None:
            return		# no rdzvd named: the agent hears the steps
        while not self._closing.wait(STORE_EVERY):
            with self._cv:
                r, step = self._round, self.step_count
            # Nothing before this process committed a step (a
            # replacement: before it joined): a rank reporting has
            # offered repair, as librdzvworker's do.
            if r is None or not self._joined or (r, step) == said or \
                not (self._stepped or self.replacement):
                continue
            try:
                st.set(r.ns, "progress/%d" % r.rank, "%d %d %d" % (
                    step, int(time.time() * 1000),
                    int(self.wait_ms)))
                said = (r, step)
            except Exception as e:
                log.debug("progress to rdzvd: %s",
                    str(e).splitlines()[0][:160] if str(e) else e)
        st.close()
