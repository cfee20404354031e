# SPDX-License-Identifier: Apache-2.0
"""rdzv.repair: in-place repair for torch DDP programs under rdzv-agent.

A worker's death costs the survivors one step, not a restart: they keep
their processes, rebuild the process group in a smaller round and go on;
the agent's replacement joins at a step boundary and receives the model,
the optimizer, the step and the data position from a donor.  The change
to a plain DDP script (examples/torch_plain_ddp.py and its repairable
twin examples/torch_repair_ddp.py differ in these lines):

    from rdzv import repair                                 # +
    job = repair.init_process_group("gloo")                 # was dist.init_process_group
    loader = job.loader(train, batch_size=B, num_workers=2) # was DistributedSampler + DataLoader
    model = job.ddp(Net())                                  # was DDP(Net())
    opt = job.track(torch.optim.AdamW(model.parameters()))  # + job.track(...)
    sched = job.track(LambdaLR(opt, warmup))                # + job.track(...)
    for epoch in job.epochs(EPOCHS):                        # was range(EPOCHS)
        for x, y in loader:
            with job.step():                                # +, the body indented
                ...
            if not job.committed: continue                  # + (a dropped step)

The process group exists from init_process_group() on (dist.get_rank()
works there, in a replacement too), but job.rank and job.world -- and
dist.get_rank(), dist.get_world_size() -- change when the job repairs:
read them where they are used, not once at the start.  job.step_count,
job.epoch, job.pos, job.repairs say where the job is.

job.loader() is a torch DataLoader (any of its options: num_workers,
prefetch_factor, pin_memory, collate_fn ...) over this rank's slices of
one permutation per epoch; its position moves only when a step commits,
and it is rebuilt after a repair, so no sample is trained twice or
skipped within an epoch (rdzv/data.py).  Its policy says what a shrink
does to the global batch: "rank" (default) keeps each rank's batch (the
global batch shrinks: job.batch_scale is world / full world, for an LR
schedule that wants to follow it), "global" keeps the global batch.
job.batches() yields the index lists alone.

job.step() commits the step or, when a peer's death cut it off, repairs
and drops it (the same batch is tried again in the new group); either
way the code after the `with` runs, so what must follow a committed step
only (counting samples, logging it, a collective of the step's results)
goes after `if not job.committed: continue`.  A
collective outside the step (a logging all_reduce) repairs the job too
and returns without a result (rdzv/collectives.py).  Without an agent's
channel nothing repairs: the job is torch's env:// group (torchrun), or a
single process with no group.

The environment (rdzv-agent sets the first two):
  RDZV_PROGRESS_FD        the agent's channel (rdzv/channel.py)
  RDZV_REPLACEMENT=1      this worker replaces a dead one: it joins the
                          job's next grow round in init_process_group()
  RDZV_REPAIR_TIMEOUT_MS  how long to wait for a round (default 60000)
  RDZV_REPAIR=0           vetoes repair (as for librdzvworker): the worker
                          never says hello, so a failure restarts the job

A worker offers repair to its agent ("hello repair=1") only once it can
honour it: when its first step commits (a replacement at once: it joins
with the state).  Until then a failure restarts the job as a plain job's
does, so a script (or a framework such as Lightning) that calls
init_process_group() but trains outside the helper is never "repaired"
into a lone rank training in a group of its own, and a script error at
the start is never repaired round after round: a worker that dies of its
own exception before its first committed step withdraws its offer
("hello repair=0", _fail_fast), so the job restarts or fails with the
traceback as under torchrun.

job.home is the rank a process started as (channel.home_rank), kept
across repairs and inherited by a replacement: where a rank-0 logger
belongs, since dist.get_rank() == 0 moves when rank 0 dies.
  RDZV_REPAIR_DEBUG=1     every step of a repair on stderr, and a step or a
                          repair that holds 20 s dumps every thread's
                          stack there; without it a rank says one line
                          per repair.

How a repair goes:
- shrink (a peer died): gloo raises in every survivor within ~0.1 s (a
  survivor that raised also resets its own connections of the old group,
  so no peer stays blocked on it); the step in flight is dropped, the
  group rebuilt on the round, and the survivors compare their committed
  steps: if they differ (a death can cut an allreduce that some survivors
  had finished), the donor's state goes to every rank.  NCCL: the watcher
  aborts the group (torch's abort API on 2.x) so no kernel stays stuck.
- grow (a replacement is ready): when the survivors' group is whole
  (made, synced, unbroken) on every one of them, no step is dropped: each
  survivor's watcher posts how many steps it has begun in the new round's
  store (with its group's round and world), they switch after the largest
  (every survivor finishes the steps another has begun), and the
  replacement, which posts -1, receives the donor's state.  A grow that
  comes while a rank is still making the group of the round before (a
  warm spare is ready within ~0.1 s of the death, during the shrink), or
  that a rank reaches with no whole group, is repaired as a shrink is:
  every rank that is not whole posts -1, the group is broken everywhere
  and the ranks meet in the grow round from their committed steps.  Afterwards every rank holds
  bit-identical parameters (the bytes of the donor's tensors).
- a gloo call that the break of its group did not end (seen once: a
  barrier of Lightning's) ends the process after 30 s (or half the
  repair timeout) on one frame of torch's: exit 1, its stacks on
  stderr, and the agent replaces the rank (watcher.backstop).
- stop: the repair failed and the job restarts the old way: exit.
- leave: this node leaves the job on purpose (SIGTERM to its agent): the
  step in flight commits, then the process exits 0 at the step boundary
  (job.leave_requested is True meanwhile); the others shrink around it
  and lose no step.

The states of a process (State, one field: self._state) and the moves
between them (_MOVES, the one table Job._to checks every move against):

  JOINING (a replacement: said "ready", holds no state yet)
     | its round (_join: _wait_round, then _repair)
     v
  REPAIRING (_repair: the round's group, its ranks all come or none;
     |       _sync: the donor's state where the steps differ)
     |--- rdzv.mesh: this replica is not whole --> WAITING (its
     |    survivors wait, process and state kept) --the next round-->
     |    REPAIRING
     | the group made and synced (repair_times)
     v
  WHOLE --------------- job.step() (_begin) ---------------> STEP
     | ^ <------------------- commit or drop (_end) ---------+  |
     |                                                          |
     | a round pending at _begin (a grow agreed on while        |
     | WHOLE: once step_count reaches its _target, no step      |
     | dropped) --> REPAIRING                                   |
     |                                                          |
     | a break of the group                       a break of it |
     v                                                          v
  CUT (the group broken, _lost_since) ---a step---> CUT_STEP (a step
     |  ^--------------------- its end (_end) ------+  begun on it:
     |                                                 rdzv.mesh's
     | the newest round (_wait_round; None after       vote drops it)
     | repair_timeout: raise)
     v
  REPAIRING

  A break of the group: one another thread posted (_look applies it at
  the step's ends and in the waits), or the training thread's own (_abort
  in _recover: a peer's death raised in the step, a collective or DDP();
  in _repair_in: the repair itself cut off: REPAIRING -> CUT).  A break
  posted during a repair is dropped at its end (the newer round it came
  with is taken at the next step's beginning).  In any state: "leave"
  (_leave_asked) exits 0 at the step's end; "stop" exits 1; the
  channel's end (_chan_gone) ends every wait for a round.

The threads: the training thread (Job._main) owns the state, the group
and the step: only it moves the state, through Job._to (a move not in
_MOVES, or one made from another thread, is logged as an internal
error; RDZV_REPAIR_DEBUG=1 logs every move).  The others post, under
self._cv, for it to apply at its next look:
- the watcher (watcher.py), reading the channel: a round (appended to
  _rounds), "leave" (_leave_asked), the channel's end (_chan_gone), and a
  break of the group for a shrink or a grow the group is not whole for
  (_abort resets the group's sockets or aborts the NCCL communicator at
  once, as the training thread may be blocked in a collective, and posts
  _cut_posted); it reads _group_whole() and says "wait";
- one rdzv-agree thread per grow: the switch step (_target), or, with
  no agreement, the grow given up (_freeze None) and a break posted;
- the reporter writes the committed step to rdzvd; it posts nothing.
Beside the state, as data: _joined (this process holds the job's state:
a mesh replacement is in its whole group before its heal), _stepped,
_tainted, _nccl_cut, _lost_since, _freeze and _target (the grow round
being agreed on and its switch step), _dcp, _peer_wait (the training
thread in a wait of the helper's own on its peers: the watcher says
"wait" for it as for a collective).

The modules: channel (the agent's messages), watcher (the threads: rounds,
"wait", progress to rdzvd), group (sockets, stores, errors), state (what a
donor sends), data (the data position and loader), waits (the time spent
waiting on peers, for the straggler detector), collectives (calls
outside the step); this one holds the step and the repair itself.
"""

import atexit
import enum
import os
import socket
import sys
import threading
import time

from . import (checkpoint, collectives, data, group, log, progress,
    state, waits, watcher)
from .channel import Round, home_rank, open_channel
from .channel import MSG_MAX, parse_message, parse_round  # noqa: F401 (tests)

# The public surface; the channel's grammar (Round, parse_round,
# parse_message, MSG_MAX) is rdzv.channel's, importable here for tests.
__all__ = ["init_process_group", "Job", "ScriptError"]

PROGRESS_EVERY = 0.1		# seconds between step reports to the agent
_ARRIVE = "rdzv_repair/came"	# a round's arrival count (group.arrive)
WAIT_LONG = 5.0			# seconds between looks while waiting forever

_channel = open_channel		# its name before the split (tests)


# The helpers' names before the split, for the code that still says them.
_debug, _warn = log.debug, log.warn
_sockets, _reset, _comm_error = group.sockets, group.reset, group.comm_error


# What a DistributedDataParallel made again after a repair keeps of the
# one before: the hooks a script (or a library) registered on it.
_KEPT = ("_forward_hooks", "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_backward_hooks",
    "_backward_pre_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")
_ddp_class = None


def _repairable_ddp():
    """The DistributedDataParallel subclass job.ddp() returns (made at
    its first use: torch is imported then)."""
    global _ddp_class
    if _ddp_class is not None:
        return _ddp_class
    from torch.nn.parallel import DistributedDataParallel

    class RepairableDDP(DistributedDataParallel):
        """A DistributedDataParallel that stays the same object across
        repairs: each repair initialises it again on the new group
        (_rebuild), so torch.compile(model), a state_dict helper or an
        isinstance check keep working on what job.ddp() returned."""

        def register_comm_hook(self, state, hook):
            """The script's DDP comm hook: kept across repairs (each
            rebuilt group gets it; rdzv.waits)."""
            waits.script_hook(self.__dict__["_rdzv_job"], state, hook)

        def _rebuild(self, module, kw):
            """Initialises this object again on the current group (a
            peer's death may cut that off: the next repair does it
            again), keeping its hooks, its job and its train/eval mode."""
            d = self.__dict__
            kept = {k: d[k] for k in _KEPT + ("_rdzv_job",) if k in d}
            training = d.get("training", True)
            d.clear()
            try:
                DistributedDataParallel.__init__(self, module, **kw)
            finally:
                d.update(kept)
            self.train(training)

    _ddp_class = RepairableDDP
    return _ddp_class


def _single(module):
    """What job.ddp() returns without a process group (one process):
    module under .module, as DistributedDataParallel holds it, so that
    a script's model.module and its state_dict keys are the same."""
    import torch

    class Single(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.module = m

        def forward(self, *a, **kw):
            return self.module(*a, **kw)
    return Single(module)


class State(enum.Enum):
    """Where a process stands (the diagram above).  Only the training
    thread moves it (Job._to); the others post what they saw."""
    JOINING = "joining"	# a replacement before its round
    REPAIRING = "repairing"	# making a round's group, syncing the state
    WHOLE = "whole"		# the group made, synced, unbroken; no step
    STEP = "step"		# a step in flight on a whole group
    CUT = "cut"		# the group broken; waiting for a round
    CUT_STEP = "cut step"	# a step in flight on a broken group
    WAITING = "waiting"	# rdzv.mesh: the replica waits for its heal


# The moves State allows, written once: Job._to checks each against it.
_MOVES = {
    State.JOINING: (State.REPAIRING,),
    State.REPAIRING: (State.WHOLE, State.CUT, State.WAITING),
    State.WHOLE: (State.STEP, State.REPAIRING, State.CUT),
    State.STEP: (State.WHOLE, State.CUT_STEP),
    State.CUT: (State.REPAIRING, State.CUT_STEP),
    State.CUT_STEP: (State.CUT,),
    State.WAITING: (State.REPAIRING,),
}
_IN_STEP = (State.STEP, State.CUT_STEP)


class ScriptError(RuntimeError):
    """A use of the helper that cannot work (the script's to fix): it
    ends the job as a script error does (_fail_fast), never repaired."""


class _Step:
    def __init__(self, job):
        self.job = job

    def __enter__(self):
        self.job._enter_step(sys._getframe(1))
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
        self.home = home_rank()		# kept across repairs
        self.step_count = 0		# steps committed, job-wide
        self.epoch = 0
        self.pos = 0			# samples of the epoch consumed
        self.repairs = 0
        self.committed = False		# whether the last step committed
        self.repair_times = []		# seconds each repair took
        self._chan = chan
        self._offer = False		# hello repair=1 still to say
        self._stepped = False		# this process committed a step
        self._repairing = False		# offers repair (RDZV_REPAIR)
        self._dcp = False		# in job.save()/job.load()
        self.replacement = chan is not None and \
            os.environ.get("RDZV_REPLACEMENT") == "1"
        self._joined = not self.replacement
        ms = os.environ.get("RDZV_REPAIR_TIMEOUT_MS", "60000")
        self.repair_timeout = int(ms) / 1000.0 if ms.isdigit() else 60.0
        self._module = None
        self._ddp = None		# the model, while its group is whole
        self._ddp_model = None		# what job.ddp() returned
        self._ddp_kw = {}
        self._comm_hook = None		# the script's (state, hook)
        self.wait_ms = 0.0		# waited on peers (rdzv.waits)
        self._tracked = []
        self._cv = threading.Condition()
        self._rounds = []		# received, not yet taken
        self._freeze = None		# the grow round being agreed on
        self._target = None		# its switch step once agreed
        self._socks = {}		# the current group's sockets
        self._store = None
        self._reported = 0.0
        self._said_round = None	# the round of the last step sent
        self._main = threading.get_ident()	# the training thread
        self._blocked = None		# (step, since) seen inside torch
        self._stuck = None		# ((frame, at), since): watcher.backstop
        self._peer_wait = False		# in a wait of its own on its peers
        self._waited = 0.0
        self._plan = None		# the data.Plan steps advance
        self._round = None		# the group's round
        self.full_world = 0		# the job's world at its start
        self._pending_model = None	# received before job.ddp()
        self._pending_tracked = []	# received before job.track()
        self._tracked_applied = 0
        self._lost_since = None		# when the step in flight was cut
        self._chan_gone = False		# the watcher saw the channel end
        self._nccl_cut = False		# the group's NCCL comm aborted
        self._tainted = False		# a step ran on it and "ended"
        self._leave_asked = False	# "leave": go at the step's end
        # The state (the training thread's), and the group's break that
        # another thread posted for it (_cut_group).
        self._state = State.WHOLE if chan is None else \
            State.JOINING if self.replacement else State.REPAIRING
        self._cut_posted = False
        self._closing = threading.Event()	# the interpreter exits
        self._reporter = None		# the progress reporter thread

    # ---- the state ----

    def _to(self, new, why):
        """Training thread: moves the state to new (why: for the debug
        line), a move _MOVES allows; another move, or one from another
        thread, is an internal error: said, and made all the same."""
        with self._cv:
            old = self._state
            if new is old:
                return
            if new not in _MOVES[old] or \
                threading.get_ident() != self._main:
                log.warn("internal error: state %s -> %s (%s) in thread "
                    "%s: not a move of the table", old.name, new.name,
                    why, threading.current_thread().name)
            log.debug("state %s -> %s: %s", old.name, new.name, why)
            self._state = new
            log.stall(new is not State.WHOLE)

    def _look(self):
        """Training thread, at a step's ends and in its waits: applies a
        break of the group that another thread posted (a whole group is
        cut; elsewhere the group is not whole anyway, and a repair's end
        makes it whole, as the break was made before or during it)."""
        with self._cv:
            if not self._cut_posted:
                return
            self._cut_posted = False
            if self._state is State.WHOLE:
                self._to(State.CUT, "a break posted")
            elif self._state is State.STEP:
                self._to(State.CUT_STEP, "a break posted")

    def _cut_group(self):
        """The group is being broken (_abort): the training thread moves
        to CUT (CUT_STEP in a step) itself; another thread posts it,
        which _group_whole() reads at once and _look() applies."""
        with self._cv:
            if threading.get_ident() != self._main:
                self._cut_posted = True
                return
            self._cut_posted = False
            if self._state in _IN_STEP:
                self._to(State.CUT_STEP, "the group broken")
            elif self._state in (State.WHOLE, State.REPAIRING):
                self._to(State.CUT, "the group broken")

    def _group_whole(self):
        """Any thread: whether the group is made, synced and unbroken (a
        grow's agreement keeps it only then: the watcher's _on_round)."""
        with self._cv:
            return self._state in (State.WHOLE, State.STEP) and \
                not self._cut_posted

    @property
    def _in_step(self):
        """Whether a step is in flight (read by rdzv.data, collectives,
        checkpoint and the frameworks' modules)."""
        return self._state in _IN_STEP

    @_in_step.setter
    def _in_step(self, v):
        """rdzv.data: False for a step begun whose batch the epoch does
        not have (no step after all)."""
        if v:
            self._step_begins("begun")
        else:
            self._step_ends("not taken")

    def _step_begins(self, why):
        """Training thread: a step begins, on a whole group or, where a
        peer's death already broke it, on a broken one (rdzv.mesh: its
        vote drops it)."""
        with self._cv:
            self._look()
            self._to(State.CUT_STEP if self._state is State.CUT else
                State.STEP, why)

    def _step_ends(self, why):
        """Training thread: the step in flight ends (committed or not)."""
        with self._cv:
            self._look()
            if self._state is State.STEP:
                self._to(State.WHOLE, why)
            elif self._state is State.CUT_STEP:
                self._to(State.CUT, why)

    # ---- the other threads (their bodies: rdzv.watcher) ----

    def _watch(self):
        """The watcher thread (watcher.watch)."""
        watcher.watch(self)

    def _on_round(self, r):
        """Watcher thread: a round heard (watcher.on_round)."""
        watcher.on_round(self, r)

    def _in_torch(self):
        """Whether the training thread is blocked on its peers (the
        watcher's "wait"): inside torch (watcher.in_torch), or in a
        wait of the helper's own on them (a grow's switch step agreed
        by every rank of the round, rdzvd's next round): a survivor
        held there by a stopped replacement is not hung itself, or the
        watchdog kills it with the stopped one."""
        return self._peer_wait or watcher.in_torch(self)

    def _agree_world(self, mine):
        """How many ranks step in the group of round mine (a grow's
        agreement, watcher.agree): all of that round's."""
        return mine.world

    def _superseded(self, r):
        """Whether a round newer than r came and waits to be taken:
        rdzvd closed r's store port when it opened that one."""
        return bool(self._rounds) and self._rounds[-1].round > r.round

    def _close(self):
        """At the interpreter's exit: the reporter stops (watcher.close)."""
        watcher.close(self)

    # ---- channel ----

    def _send(self, text):
        if self._chan is None:
            return
        try:
            self._chan.send(text.encode("ascii"), socket.MSG_DONTWAIT)
        except OSError:
            pass		# the agent has no room or is gone

    def _abort(self):
        """Breaks the current group so that no collective stays blocked
        on it (watcher on a shrink, or a survivor whose step failed)."""
        import torch
        import torch.distributed as dist
        self._cut_group()
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

    def _group(self, r):
        """Joins round r's process group as the default group, once all
        its ranks came (group.arrive: a newer round calls it off on all
        of them or on none); leaves it again when a newer round came
        while it was made."""
        import torch.distributed as dist
        current = lambda: not self._superseded(r)	# noqa: E731
        if not current():
            raise ConnectionError("round %d superseded before its "
                "group was built" % r.round)
        if not dist.is_initialized():
            group.reset_names()
        store = group.round_store(r, self.repair_timeout, current)
        group.arrive(store, _ARRIVE, r.world, current,
            self.repair_timeout)
        before = group.sockets()
        build, own = group.build_timeout(self.backend, self.timeout,
            self.repair_timeout)
        kw = {} if build is None else {"timeout": build}
        dist.init_process_group(self.backend, store=store,
            rank=r.rank, world_size=r.world, **kw)
        if own is not None:
            dist.distributed_c10d._set_pg_timeout(own)
        self._socks = {fd: l for fd, l in group.sockets().items()
            if before.get(fd) != l}
        self._store = store
        self._nccl_cut = False
        with self._cv:
            self.rank, self.world, self._round = r.rank, r.world, r
        if self.full_world < r.world and not self.replacement:
            self.full_world = r.world
        if not current():
            raise ConnectionError("round %d superseded while its "
                "group was made" % r.round)

    def _device(self):
        import torch
        if self.backend == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _wrap(self):
        """The model wrapped for the current group: the object job.ddp()
        returned, initialised again (a RepairableDDP), or a new one."""
        state.apply_model(self)
        ddp = self._ddp_model
        if ddp is None:
            ddp = _repairable_ddp()(self._module, **self._ddp_kw)
            ddp.__dict__["_rdzv_job"] = self
            self._ddp_model = ddp
        else:
            ddp._rebuild(self._module, self._ddp_kw)
        waits.attach(self, ddp)
        return ddp

    def _repair(self, r):
        """Main thread: leaves the old group, joins round r's, makes
        every rank's state the donor's where the steps differ, wraps the
        model again; says one line (round, world, time lost)."""
        import torch.distributed as dist
        t0 = time.monotonic()
        lost = self._lost_since if self._lost_since is not None else t0
        old = self.world
        with self._cv:
            self._to(State.REPAIRING, "round %d" % r.round)
            if self._freeze is r:	# taken: no agreement breaks it now
                self._freeze = self._target = None
        self._ddp = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as e:
                log.debug("destroy: %s", e)
        if self._module is not None:
            self._module.zero_grad(set_to_none=True)
        self._group(r)
        self._sync(r)
        if self._module is not None:
            self._ddp = self._wrap()
        with self._cv:
            if self._freeze is r:
                self._freeze = self._target = None
            # A break posted while the group was made is dropped here:
            # a newer round (which that break came with) is taken at the
            # next step's beginning.
            self._cut_posted = False
            self._to(State.WHOLE, "round %d made" % r.round)
        self.repairs += 1
        self._lost_since = None
        now = time.monotonic()
        self.repair_times.append(now - t0)
        log.info("rank %d: %s round %d, world %d -> %d, %.3f s lost, at "
            "step %d", self.rank, "joined grow" if not self._joined else
            r.kind, r.round, old if self._joined else 0, self.world,
            now - lost, self.step_count)
        log.debug("%r done in %.3f s at step %d", r, self.repair_times[-1],
            self.step_count)

    def _repair_in(self, r):
        """Main thread: repairs in round r and, when a peer's death cuts
        that repair off too (its group's collectives, or DDP's in the
        model's wrapping), in the agent's next round, until one holds.
        Raises what is not a peer's death, or when no round comes."""
        while True:
            try:
                self._repair(r)
                return
            except Exception as e:
                if self._chan is None or not group.comm_error(e):
                    raise
                if self._lost_since is None:
                    self._lost_since = time.monotonic()
                log.debug("repair in round %d cut off: %s", r.round,
                    str(e).splitlines()[0][:160] if str(e) else e)
                self._abort()
                r = self._wait_round()
                if r is None and self._leave_asked:
                    self._leave("with its step cut by a peer "
                        "leaving")
                if r is None:
                    raise

    def _sync(self, r):
        """Every rank's committed step; where they differ, the donor's
        state to all (rdzv/state.py).  Torch's own collectives: the
        helper's are never repaired by collectives.py."""
        import torch
        all_gather = collectives.orig("all_gather")
        broadcast = collectives.orig("broadcast")
        dev = self._device()
        mine = torch.tensor([self.step_count if self._joined and
            not self._tainted else -1], dtype=torch.int64, device=dev)
        all_ = [torch.zeros_like(mine) for _ in range(self.world)]
        all_gather(all_, mine)
        steps = [int(t.item()) for t in all_]
        top = max(steps)
        if top < 0 and self._tainted:
            raise RuntimeError("rdzv.repair: every rank's state may "
                "hold a step cut off by an NCCL abort; none to resume")
        if top < 0:
            # Every rank a replacement that never received the state:
            # going on would train again from nothing and call it a
            # repair.  rdzvd sends no such round; an older one might.
            raise RuntimeError("rdzv.repair: no rank of round %d holds "
                "the job's state (each is a replacement that never "
                "received it); the job must restart" % r.round)
        if min(steps) == top:
            return
        donor = r.donor if 0 <= r.donor < self.world and \
            steps[r.donor] == top else steps.index(top)
        blob = state.pack(self) if self.rank == donor else b""
        n = torch.tensor([len(blob)], dtype=torch.int64, device=dev)
        broadcast(n, donor)
        if self.rank == donor:
            buf = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
        else:
            buf = torch.empty(int(n.item()), dtype=torch.uint8)
        buf = buf.to(dev)
        broadcast(buf, donor)
        if self.rank != donor:
            state.unpack(self, buf.cpu().numpy().tobytes())
            self._tainted = False
        log.debug("state of step %d from rank %d (%d bytes), steps were %s",
            top, donor, int(n.item()), steps)

    def _join(self):
        """A replacement: says ready, waits for its grow round, joins it
        and receives the state (init_process_group, so the group is
        there from the start; what the state holds for the model and
        the tracked objects is loaded when the script gives them)."""
        self._send("ready")
        # As long as the agent wants: it starts the grow round when
        # the others can take this rank, or stops the repair.
        r = self._wait_round(forever=True)
        if r is None:
            raise RuntimeError("rdzv.repair: the agent closed the "
                "channel before this replacement's round came")
        self._repair_in(r)
        self._joined = True
        # It holds the job's state now: its agent stops counting it a
        # replacement that never stepped (rdzvd never takes one for a
        # donor), and watches it from here.
        self._send(str(self.step_count))

    def _wait_round(self, forever=False):
        """The newest round received (waiting up to the repair timeout
        for one, or, forever, until the agent's end of the channel
        closes), taken; None at the timeout or the end, or (not
        forever) once this node leaves: no round comes for it."""
        end = time.monotonic() + self.repair_timeout
        with self._cv:
            self._look()
            self._peer_wait = True	# on rdzvd's next round
            try:
                while not self._rounds:
                    left = end - time.monotonic()
                    if self._chan_gone or (not forever and
                        (left <= 0 or self._leave_asked)):
                        return None
                    self._cv.wait(left if not forever else WAIT_LONG)
            finally:
                self._peer_wait = False
            r = self._rounds[-1]
            del self._rounds[:]
            return r

    # ---- the step ----

    def _begin(self):
        """Before a step's batch: takes a pending round (a grow round
        only once every step a survivor began is done)."""
        if self._in_step:
            return
        if not self._joined:	# a Job made without init_process_group
            self._join()
        while True:
            with self._cv:
                self._look()
                r = self._rounds[-1] if self._rounds else None
                if r is None:
                    self._step_begins("a step")
                    return
                if self._freeze is r:
                    end = time.monotonic() + self.repair_timeout
                    self._peer_wait = True	# on the grow's ranks
                    try:
                        while self._target is None and \
                            self._freeze is r and \
                            time.monotonic() < end:
                            self._cv.wait(end - time.monotonic())
                    finally:
                        self._peer_wait = False
                    if self._rounds[-1] is not r:
                        continue	# superseded: look again
                    if self._target is not None and \
                        self.step_count < self._target:
                        self._step_begins("a step before the switch "
                            "to round %d" % r.round)
                        return
                del self._rounds[:]
            self._repair_in(r)

    def _end(self, e):
        if self._nccl_cut:
            # Ended on an aborted NCCL communicator: what its kernels
            # left is garbage, so the step is dropped, and a state it
            # may have updated is no donor's (_sync).
            if e is None:
                self._tainted = True
            e = RuntimeError("nccl: the group was aborted during step "
                "%d" % self.step_count)
        with self._cv:		# what watcher.agree() reads
            self._step_ends("committed" if e is None else "not committed")
            self.committed = e is None
            if e is None:
                self.step_count += 1
        if e is None:
            self._stepped = True
            self._offer_repair()	# before the step: hello first
            if self._plan is not None:
                self._plan.commit(self)
            # The first commit in a round at once: rdzvd opens a grow
            # after a shrink only once a rank stepped in the shrink.
            now = time.monotonic()
            if now - self._reported >= PROGRESS_EVERY or \
                self._round is not self._said_round:
                self._reported, self._said_round = now, self._round
                self._send(str(self.step_count))
            if self._leave_asked:
                self._leave("at a step boundary")
            return False
        return self._recover(e, "step %d" % self.step_count)

    def _leave(self, how):
        """This node leaves the job on purpose (its agent got SIGTERM):
        the process ends here, exit 0, with every step it took part in
        committed; the others shrink around it and lose none.  Nothing
        collective runs on the way out (the group is left as it is)."""
        print("rank %d leaves %s at epoch %d step %d" % (self.rank, how,
            self.epoch, self.step_count), flush=True)
        sys.stderr.flush()
        os._exit(0)

    @property
    def leave_requested(self):
        """True once the agent asked this worker to leave: the job.step()
        in flight is the last (it exits 0 when it commits)."""
        return self._leave_asked

    def _recover(self, e, what):
        """Main thread: e, raised by what, is a peer's death (a gloo or
        NCCL communication error) in a job that repairs: aborts the
        group, waits for the agent's round and repairs in it.  True once
        repaired; False (raise e) otherwise."""
        if self._chan is None or not self._joined or \
            not isinstance(e, Exception) or not group.comm_error(e):
            return False
        if self._leave_asked:
            # A peer of this node left first: no round comes for it.
            self._leave("with its step cut by a peer leaving")
        self._lost_since = time.monotonic()
        log.debug("%s cut off: %s", what, str(e).splitlines()[0][:160])
        self._abort()
        r = self._wait_round()
        if r is None and self._leave_asked:
            # A peer of this node heard "leave" first and left at
            # its step boundary, cutting this step: leave too.
            self._leave("with its step cut by a peer leaving")
        if r is None:
            log.warn("no round from the agent within %.0f s of a failed "
                "%s", self.repair_timeout, what)
            return False
        self._repair_in(r)
        return True

    # ---- what a script calls ----

    @property
    def stats(self):
        """The job's counters as a dict: steps committed, repairs, the
        seconds each repair took (last 100), time waited on peers (ms),
        whether this process is a replacement and its home rank."""
        return {"steps": self.step_count, "repairs": self.repairs,
            "repair_seconds": list(self.repair_times[-100:]),
            "wait_ms": self.wait_ms, "replacement": self.replacement,
            "home": self.home, "rank": self.rank, "world": self.world}

    @property
    def batch_scale(self):
        """The global batch of a step now over the job's full one: 1.0
        but while a shrink has the job short of ranks under the "rank"
        batch policy (world / full world); for an LR schedule that
        follows the batch (LambdaLR(opt, lambda s: f(s) *
        job.batch_scale))."""
        p = self._plan
        if p is not None and p.policy == "global":
            return 1.0
        return self.world / float(max(self.full_world, self.world, 1))

    def ddp(self, module, **kw):
        """module wrapped in a DistributedDataParallel(module, **kw) (a
        subclass that each repair initialises again on the new group:
        the same object all along, for torch.compile, state_dict helpers
        and isinstance); without a group, an nn.Module that holds module
        as .module, as DistributedDataParallel does.  A replacement's
        module gets the donor's parameters first."""
        import torch.distributed as dist
        self._module, self._ddp_kw = module, kw
        state.apply_model(self)
        if dist.is_available() and dist.is_initialized():
            # DDP's constructor broadcasts the parameters: a peer that
            # dies then is repaired as in a step (_repair wraps again).
            try:
                self._ddp = self._wrap()
            except Exception as e:
                if not self._recover(e, "DistributedDataParallel()"):
                    raise
            if self._ddp_model is not None:
                return self._ddp_model
        return _single(module)

    def save(self, root):
        """Checkpoints the job in directory root (torch.distributed.
        checkpoint): the model, the tracked objects and the position,
        as root/step-N, then root/latest names it.  Call it after a
        committed step, on every rank; a peer's death during it is
        repaired and the save done again (with replica groups, a death
        in the writing replica drops that save: latest keeps naming the
        last complete one).  Returns the checkpoint's path
        (rdzv/checkpoint.py)."""
        return checkpoint.save(self, root)

    def load(self, root):
        """Loads root's latest checkpoint, if any, into the model, the
        tracked objects and the position (call it after job.ddp() and
        job.track(), before the loop); True when it did.  A replacement
        never loads: its state comes from a live donor."""
        return checkpoint.load(self, root)

    def track(self, *objs):
        """Objects with state_dict()/load_state_dict() (optimizers, LR
        schedulers, scalers) that a replacement receives with the model,
        in the order they are tracked (the same on every rank); returns
        the first."""
        self._tracked.extend(objs)
        state.apply_tracked(self)
        return objs[0] if objs else None

    def _offer_repair(self):
        """Says hello repair=1 to the agent, once, when _start left it to
        be said: from now on a peer's death is repaired in place."""
        if self._offer:
            self._offer = False
            self._send("hello repair=1")

    def step(self):
        """Context manager around one training step: on success the
        step is committed (and reported to the agent); when a peer's
        death cuts it off, the job repairs and the exception is
        swallowed: the step is dropped.  job.committed says which, after
        the `with`: a dropped step's batch comes again."""
        return _Step(self)

    def begin_step(self):
        """The start of a step, for a loop the script does not write (a
        framework's batch-start hook): what `with job.step():` does on
        entry; a pending round (a grow) is taken here."""
        self._enter_step(sys._getframe(1))

    def _enter_step(self, caller):
        """A step's start, from the script's frame caller: until this
        process has committed a step, a DistributedSampler of the
        script's own is looked for there (data.warn_own_sampler)."""
        if not self._stepped and not self._in_step and \
            self._chan is not None:
            data.warn_own_sampler(caller)
        self._begin()

    def end_step(self, error=None):
        """The end of a step begun by begin_step(): with error None the
        step commits (True); error, an exception the framework caught in
        the step, repairs the job and drops the step when it is a peer's
        death (False: the batch comes again); any other is raised."""
        if error is None:
            self._end(None)
            return True
        if self._end(error):
            return False
        raise error

    def epochs(self, n):
        """Yields epoch numbers up to n, from the one the job is in (a
        replacement's is the donor's).  At the end it tells the agent
        that training ended ("done"): what the script does after it (a
        final evaluation, a checkpoint) is not taken for a hang by the
        --progress_timeout watchdog."""
        if not self._joined:
            self._join()
        while self.epoch < n:
            e = self.epoch
            yield e
            if self.epoch == e:	# the body did not use batches()
                self.epoch, self.pos = e + 1, 0
        self._send("done")

    def batches(self, n, batch_size, seed=0, shuffle=True, policy="rank"):
        """Yields this rank's indices (a list) of each global batch
        left in the current epoch of a data set of n samples: the
        epoch's permutation (seeded by seed + epoch) cut in global
        batches (policy: see loader()), this rank's share of each; an
        incomplete last one is dropped.  A repair reshards from the
        position the job reached.  Each must be trained in job.step()."""
        return data.batches(self, data.Plan(n, batch_size, seed, shuffle,
            policy))

    def loader(self, dataset, batch_size, shuffle=True, seed=0,
        policy="rank", order=None, **kw):
        """A torch DataLoader over dataset (a map-style one: len() and
        [i]) for this rank, in place of DistributedSampler + DataLoader:
        iterating it yields the batches of every step left in the
        current epoch, each to be trained inside job.step().  kw are
        DataLoader's own options (num_workers, prefetch_factor,
        collate_fn, pin_memory, ...) but sampler, batch_sampler,
        shuffle and drop_last (an incomplete last global batch is
        dropped).  The epoch's order is a permutation seeded by seed +
        epoch (shuffle=False: the data set's order).  policy says what a
        shrink does to the global batch: "rank" (default) keeps
        batch_size per rank, so the global batch is world * batch_size
        (see batch_scale); "global" keeps full_world * batch_size, each
        rank taking an even share (a larger batch while the job is
        short).  order, a function of the epoch, gives the epoch's
        sample order instead (a sampler of the script's own:
        lambda e: list(sampler) with its generator seeded by e; the same
        on every rank; its length is the epoch's).  After a repair or a
        dropped step the DataLoader's iterator starts again from the
        job's position (its workers kept): what they prefetched is never
        trained."""
        for k in ("sampler", "batch_sampler"):
            if k in kw:
                raise TypeError("rdzv.repair: job.loader() cuts the "
                    "epoch's order itself, so that a repair resumes at "
                    "the job's position; leave %s out.  For an order of "
                    "your own, give job.loader(order=fn): fn(epoch) "
                    "returns the epoch's sample indices, the same on "
                    "every rank (e.g. lambda e: list(sampler) with the "
                    "sampler's generator seeded by e); or give the data "
                    "set in that order (torch.utils.data.Subset(dataset, "
                    "order)) with shuffle=False" % k)
        for k in ("drop_last", "batch_size"):
            if k in kw:
                raise TypeError("rdzv.repair: job.loader() chooses %s "
                    "itself (the job's data position); leave it out" % k)
        data.check_dataset(dataset)
        return data.Loader(self, dataset, data.Plan(len(dataset),
            batch_size, seed, shuffle, policy, order), kw)


def _close_in_child(job):
    """After a fork (a DataLoader's workers): the child closes its copies
    of the group's sockets and of the channel, so a dead trainer's peers
    and agent see its end at once, not when its children exit.  (The
    parent's stall timer is left alone: its thread is not in the child,
    and cancelling it here would wait for that thread for ever.)"""
    for fd, link in list(job._socks.items()):
        try:
            # Only while it is the same socket: a group made and
            # broken may have left a number the child uses now.
            if os.readlink("/proc/self/fd/%d" % fd) == link:
                os.close(fd)
        except OSError:
            pass
    try:
        job._chan.close()
        os.close(int(os.environ.get("RDZV_PROGRESS_FD", "")))
    except (OSError, ValueError):
        pass


def _fail_fast(job):
    """Chains sys.excepthook: a worker that dies of an exception of its
    own before its first committed step tells its agent that it cannot
    be repaired ("hello repair=0", a replacement's offer withdrawn): a
    crash there is the script's (a typo, a wrong shape, a bad path), and
    its replacement would crash the same way, round after round.  The
    job restarts (--max-restarts) or ends with this traceback, as under
    torchrun.  A peer's death never gets here: the step repairs it."""
    prev = sys.excepthook

    def hook(et, e, tb):
        if job._chan is not None and issubclass(et, Exception) and \
            (not job._stepped or issubclass(et, ScriptError)):
            job._send("hello repair=0")
            log.warn("rank %d (home %d) failed %s: %s: not repaired "
                "(the same error would end its replacement); the job "
                "restarts or ends as a plain job does", job.rank, job.home,
                "with a script error" if job._stepped else "before its "
                "first committed step", et.__name__)
        prev(et, e, tb)
    sys.excepthook = hook


def _start(job, offer=True):
    """Guards the collectives and, with offer, says hello repair=1 to
    the agent (else job._offer_repair() says it later), unless
    RDZV_REPAIR=0 vetoes (as for librdzvworker: no hello, so the worker's
    job restarts on a failure; steps are still reported); starts the
    watcher and the progress reporter; closes the group's sockets in
    forked children.  Returns whether this worker repairs."""
    repairing = os.environ.get("RDZV_REPAIR") != "0"
    job._repairing = repairing
    progress.helper_reports()	# the Job's reporter owns the steps
    if repairing:
        job._offer = True
        if offer:
            job._offer_repair()
        collectives.install(job)
    _fail_fast(job)
    threading.Thread(target=job._watch, name="rdzv-repair",
        daemon=True).start()
    job._reporter = threading.Thread(target=watcher.report, args=(job,),
        name="rdzv-progress", daemon=True)
    job._reporter.start()
    atexit.register(job._close)
    os.register_at_fork(after_in_child=lambda: _close_in_child(job))
    return repairing


def init_process_group(backend="gloo", timeout=None):
    """Makes the job's default process group and returns its Job.  Under
    an agent that passes the channel: says hello repair=1 (unless
    RDZV_REPAIR=0), starts the watcher and the progress reporter, wraps
    torch.distributed's collectives (rdzv/collectives.py) and joins the
    round of the environment (MASTER_ADDR, MASTER_PORT, RDZV_NAMESPACE,
    RANK, WORLD_SIZE), or, in a replacement (RDZV_REPLACEMENT=1), says
    ready and joins the next grow round, receiving the job's position at
    once (the model's and the tracked objects' state as the script gives
    them to job.ddp() and job.track()).  Either way dist.get_rank() works
    on return.  Without a channel: torch's env:// group when WORLD_SIZE
    is set (torchrun), else no group."""
    import torch.distributed as dist
    chan = open_channel()
    job = Job(backend, timeout, chan)
    if chan is None:
        if os.environ.get("WORLD_SIZE") and dist.is_available():
            kw = {} if timeout is None else {"timeout": timeout}
            dist.init_process_group(backend, **kw)
            job.rank, job.world = dist.get_rank(), dist.get_world_size()
        job.full_world = job.world
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
    # A replacement offers repair at once (it joins with the state);
    # the others when their first step commits (_end).
    _start(job, offer=job.replacement)
    env = os.environ
    job.rank = int(env.get("RANK", "0"))
    job.world = int(env.get("WORLD_SIZE", "1"))
    if job.replacement:
        job._join()
    else:
        r = Round(round=int(env.get("RDZV_ROUND", "0") or 0),
            kind="grow", ns=env.get("RDZV_NAMESPACE", "rdzv"),
            rank=job.rank, world=job.world, donor=0,
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env["MASTER_PORT"]))
        job._group(r)
        job._to(State.WHOLE, "the start round's group made")
    return job
