# SPDX-License-Identifier: Apache-2.0
"""rdzv.watcher: the threads beside the training thread.

Owns, as functions of a repair.Job (the threads' bodies; Job starts
them): the watcher thread that reads the agent's messages (a round: note
it, agree on the switch step of a grow, break the group of a shrink;
stop: exit; leave: noted for the step's end), the "wait" it says while
the training thread is blocked on its peers, the backstop that ends a
rank whose gloo call outlived its group's break (backstop), and the
reporter thread
that writes the committed step where rdzvd reads it ("progress/<rank>"
= "STEP WALL_MS WAIT_MS" in the round's namespace, as librdzvworker's
rdzv_report_progress does; WAIT_MS is rdzv.waits' total), so that
rdzvctl members/top, the status page and the per-job metrics show a
torch job as they show a C one.

None of them moves the job's state (repair.State: the training
thread's): they post what they saw under job._cv (a round in
job._rounds, _leave_asked, _chan_gone, _target, a break of the group by
job._abort) and read the state through job._group_whole() and
job._in_step.  What rdzv.mesh's MeshJob does differently is in the Job
methods these call (job._in_torch, job._agree_world, job._abort,
job._on_round).
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
CUT_GRACE = 30.0		# seconds a gloo call may hold on a broken group
_KEY = "rdzv_repair/begun/%d"	# boundary agreement of a grow round


# sys._current_frames() holds the interpreter's thread-list lock while it
# makes frame objects, which may collect garbage and run a finalizer that
# lets the GIL go: a fork then (a DataLoader's workers, forked by the
# training thread) leaves the child stuck for ever in CPython's after-fork
# code on that lock (CPython issue 112275: 3.11.7, this project's python,
# has it; 3.12 reinitializes the lock first).  So every look at the
# frames takes _frames, and a fork waits for it.
_frames = threading.Lock()
os.register_at_fork(before=_frames.acquire,
    after_in_parent=_frames.release, after_in_child=_frames.release)


def frame_of(tid):
    """The innermost Python frame of thread tid (None if it has none),
    safe beside a fork (_frames)."""
    with _frames:
        return sys._current_frames().get(tid)


def switch_step(posts):
    """The step after which the survivors of a grow switch, from every
    rank's post in its store (agree: b"-1" or b"BEGUN ROUND WORLD"):
    the largest BEGUN when the ranks that are not -1 are the whole group
    of one round (as many as its WORLD), else None (a group that is not
    whole somewhere: the grow is repaired as a shrink is)."""
    whole = [tuple(int(x) for x in p.split()) for p in posts
        if p.strip() != b"-1"]
    if not whole or any(len(w) != 3 for w in whole) or \
        len({w[1:] for w in whole}) != 1 or len(whole) != whole[0][2]:
        return None
    return max(w[0] for w in whole)


def in_torch(job):
    """Whether the training thread's innermost Python frame is
    torch's own code (a collective, or the backward pass that runs
    DDP's allreduce), not the script's, or rdzv.group's waiting for
    a round's ranks to come (group.arrive: a rank blocked there by a
    stopped peer must not be taken for hung itself, or the watchdog
    kills it with the stopped one, and with it maybe the last rank
    that holds the job's state)."""
    f = frame_of(job._main)
    if f is None:
        return False
    return _torch_code(f) or f.f_code.co_filename == group.__file__


def say_wait(job):
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
    if not job._in_torch():
        job._blocked = None
        return
    if job._blocked is None or job._blocked[0] != job.step_count:
        job._blocked = (job.step_count, now)
        return
    if now - job._blocked[1] >= WAIT_EVERY and \
        now - job._waited >= WAIT_EVERY:
        job._waited = now
        job._send("wait")


def backstop(job):
    """Ends the process (exit 1: the agent replaces it) when its training
    thread has stayed in one call of torch's, on the same frame, for
    CUT_GRACE seconds (or half the repair timeout, if less) since this
    rank's watcher broke its gloo group while it was whole: a collective
    that the broken connections did not end.  gloo raises in such a
    call within ~0.1 s in every case we could make; one Lightning's
    barrier after a shrink did not, and held the rank (and the peers
    waiting for it in the new round) until rdzvd failed the job.  Its
    stacks go to stderr first.  Never during a repair (a large state's
    transfer may hold one frame for long), nor on NCCL (its abort
    ends its kernels)."""
    from .repair import State
    f = None
    if job.backend == "gloo":
        with job._cv:
            cut = job._cut_posted and job._state in (State.WHOLE,
                State.STEP)
        f = frame_of(job._main) if cut else None
    if f is None or not _torch_code(f):
        job._stuck = None
        return
    now, here = time.monotonic(), (f, f.f_lasti)
    if job._stuck is None or job._stuck[0] != here:
        job._stuck = (here, now)
        return
    grace = min(CUT_GRACE, job.repair_timeout / 2)
    if now - job._stuck[1] < grace:
        return
    log.warn("still inside %s:%d %.0f s after its group was broken by a "
        "peer's death: exiting so that the agent replaces this rank",
        f.f_code.co_filename, f.f_lineno, now - job._stuck[1])
    import faulthandler
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(1)


def _torch_code(f):
    """Whether frame f runs torch's own Python code."""
    import torch
    return f.f_code.co_filename.startswith(
        os.path.dirname(torch.__file__) + os.sep)


def watch(job):
    """The watcher thread's body: reads the agent's messages until the
    channel ends, then posts its end (job._chan_gone)."""
    try:
        _watch_chan(job)
    finally:
        with job._cv:
            job._chan_gone = True
            job._cv.notify_all()


def _watch_chan(job):
    import select
    warned = False
    p = select.poll()
    p.register(job._chan.fileno(), select.POLLIN)
    while True:
        try:
            ready = p.poll(WAIT_EVERY * 500)
            say_wait(job)
            backstop(job)
            if not ready:
                continue
            msg = job._chan.recv(MSG_MAX + 1)
        except InterruptedError:
            continue
        except OSError:
            return
        if not msg:
            if chan_eof(job._chan):
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
            job._on_round(r)
        elif verb == "stop":
            log.warn("the agent stopped the repair: exiting")
            os._exit(1)
        elif verb == "leave":
            # Its node leaves on purpose: at the step's end.
            log.info("the agent asks this worker to leave at the "
                "next step boundary")
            with job._cv:	# a cut step waiting for a round
                job._leave_asked = True
                job._cv.notify_all()
        else:
            log.debug("ignoring %r", msg[:64])


def on_round(job, r):
    """Watcher thread: posts round r for the training thread (a grow
    is agreed on by its own rdzv-agree thread while the group is whole
    on this rank; any other round breaks the group at once)."""
    with job._cv:
        job._rounds.append(r)
        # A grow keeps the group the survivors step in only if
        # that group is whole on every one of them (agree).
        healthy = r.kind == "grow" and job._joined and \
            job._group_whole()
        # A newer round supersedes a grow still being agreed on
        # (its replacement may be the peer that just died).
        job._freeze, job._target = (r if healthy else None), None
        mine = job._round
        job._cv.notify_all()
    # A round being made when this one came is called off, or
    # left once made, by the training thread (group.arrive).
    if r.kind == "grow":
        # Its own thread: the watcher must hear a round that
        # supersedes this one while the survivors agree.
        threading.Thread(target=agree, args=(job, r, healthy,
            mine), name="rdzv-agree", daemon=True).start()
    if not healthy and job._joined:
        job._abort()


def agree(job, r, healthy, mine):
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
        st = group.round_store(r, job.repair_timeout,
            lambda: not job._superseded(r))
        with job._cv:
            begun = job.step_count + (1 if job._in_step else 0)
        st.set(_KEY % r.rank, "%d %d %d" % (begun, mine.round,
            job._agree_world(mine)) if healthy else "-1")
        if not healthy:
            return
        keys = [_KEY % i for i in range(r.world)]
        end = time.monotonic() + job.repair_timeout
        while not group.posted(st, keys):
            with job._cv:
                if job._freeze is not r:
                    log.debug("round %d superseded", r.round)
                    return
            if time.monotonic() > end:
                raise TimeoutError("not every rank posted within "
                    "%.0f s" % job.repair_timeout)
            time.sleep(AGREE_POLL)
        target = switch_step([st.get(k) for k in keys])
    except Exception as e:
        log.warn("no agreement on round %d (%s): switching now",
            r.round, e)
    with job._cv:
        # Under the lock: once the training thread takes r
        # (_repair clears _freeze), its new group is not broken.
        if job._freeze is not r:
            return
        if target is None:
            job._freeze = None
            job._abort()
        else:
            job._target = target
        job._cv.notify_all()
    if target is None:
        log.debug("round %d: a rank's group was not whole: "
            "repairing from the committed steps", r.round)
    else:
        log.debug("round %d: switch after step %d", r.round,
            target)


def close(job):
    """At the interpreter's exit (atexit, before it finalizes): the
    reporter finishes the store write it is in and stops.  A daemon
    thread inside torch's C++ code (a TCPStore call, which lets the
    GIL go) when Python finalizes is ended as it asks for the GIL
    back, inside a C++ destructor, and that aborts the process
    ("terminate called without an active exception", SIGABRT)
    after the training has ended."""
    job._closing.set()
    t = job._reporter
    if t is not None and t.is_alive() and \
        t is not threading.current_thread():
        t.join(STORE_TIMEOUT + 1.0)


def report(job):
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
    while not job._closing.wait(STORE_EVERY):
        with job._cv:
            r, step = job._round, job.step_count
        # Nothing before this process committed a step (a
        # replacement: before it joined): a rank reporting has
        # offered repair, as librdzvworker's do.
        if r is None or not job._joined or (r, step) == said or \
            not (job._stepped or job.replacement):
            continue
        try:
            st.set(r.ns, "progress/%d" % r.rank, "%d %d %d" % (
                step, int(time.time() * 1000),
                int(job.wait_ms)))
            said = (r, step)
        except Exception as e:
            log.debug("progress to rdzvd: %s",
                str(e).splitlines()[0][:160] if str(e) else e)
    st.close()
