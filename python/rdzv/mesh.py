# SPDX-License-Identifier: Apache-2.0
"""rdzv.mesh: in-place repair for sharded torch programs (FSDP2, HSDP).

The job's ranks form R replica groups of S ranks each (world = R * S).
Rank h (its home: GROUP_RANK * LOCAL_WORLD_SIZE + RDZV_LOCAL_RANK, fixed
for the whole job) is replica h // S, shard h % S.  Inside a replica the
model and optimizer are sharded with FSDP2's fully_shard over S ranks;
across replicas the same shard index holds the same bytes.

The replica group is the failure domain.  Its shard process group (the
default group of its ranks, the 1-D DeviceMesh job.mesh that fully_shard
is given) never changes while the replica is whole.  The replicate
dimension is the helper's own: one gloo group per shard index across the
replicas that step, in which FSDP's reduce-scattered gradient shard is
averaged (FSDPModule.set_all_reduce_hook, as torchft does).  A repair
rebuilds only that dimension:

- a rank dies: the other replicas' replicate all-reduce fails, every
  rank of a replica votes (one all-reduce in its shard group) to drop the
  step, and they go on at once with R-1 replicas.  The failed replica's
  survivors keep their processes and wait; the agent restarts the dead
  rank alone.
- its replacement is ready (a grow round): the failed replica's ranks
  make their shard group again, build the model, optimizer and scheduler
  again from the script's factories, and each receives, peer to peer from
  the rank of its own shard index in a healthy replica, that rank's
  local shards of the parameters and the optimizer state, the LR
  scheduler, the RNG, the step and the data position: one shard per
  pair, never a full state_dict on any rank.

With one replica (plain FSDP2) no peer holds a lost shard: the helper
does not offer repair, so a death restarts the job the old way (from its
checkpoint).  torch 1.13 has no FSDP2: the helper refuses.

Checkpoints: job.save(DIR) after a committed step (every rank, at the
same step) and job.load(DIR) before the loop, as in rdzv.repair
(rdzv/checkpoint.py owns them): DCP, with the model, optimizer,
scheduler and the job's position.  With replica groups the lowest
stepping replica writes over its shard group and the others meet it; a
death in that replica drops the save (its survivors are healed from a
peer), never leaving a latest that names an incomplete checkpoint; a
replacement never loads; a whole-job restart (every replica lost, below
the minimum, preemption) loads latest in every replica, each over its
shard group, and resumes at its step and data position.

A script (examples/torch_hsdp_repair.py):

    from rdzv import mesh
    job = mesh.init_process_group("gloo", replicas=2)
    model = job.fsdp(lambda m: build(m))        # build: fully_shard on m
    opt = job.optimizer(lambda ps: torch.optim.AdamW(ps, lr=1e-3))
    sched = job.scheduler(lambda o: LambdaLR(o, warmup))
    job.load(CKPT)                              # its latest, if any
    for epoch in job.epochs(E):
        for idx in job.batches(N, B, seed=0):
            with job.step():
                loss = model(x[idx]).loss; loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step(); sched.step(); opt.zero_grad()
            if job.committed and job.step_count % 100 == 0:
                job.save(CKPT)

model, opt and sched are stand-ins for the current objects (made again
by a heal).  job.replica, job.shard, job.replicas, job.shards say where
the rank is; job.digest() is a sha256 of its local shards.  RDZV_REPLICAS
in the environment (rdzv-agent --rdzv_conf replicas=R) overrides the
script's replicas.
"""

import datetime
import hashlib
import io
import os
import re
import time

from . import collectives, group, log
from .channel import Round, home_rank, open_channel
from .repair import Job, State, _start

__all__ = ["init_process_group", "MeshJob", "plan", "fully_shard"]
# What init_process_group imports before a replacement says ready (FSDP2,
# DTensor, the device mesh: over a second): an agent's warm spare
# (rdzv.spare) imports them ahead for a script that imports this module.
SPARE_IMPORTS = ("torch.distributed.fsdp", "torch.distributed.device_mesh",
    "torch.distributed.tensor")

_POST = "rdzv_mesh/%d"		# a rank's "home step" in a round's store
_ARRIVE = "rdzv_mesh/came"	# a round's arrival count (group.arrive)


def plan(posts, replicas, shards):
    """The topology of one round, from every live rank's post: posts is
    a list, by round rank, of (home, step) (step -1: no state).  Returns
    a dict: live (home -> round rank), whole (replica indices with all S
    ranks live, ascending), top (the latest step among them), current
    (whole replicas whose ranks are all at top), stale (whole ones
    behind), donor (the lowest current replica, or None).  Pure: tested
    without torch."""
    live = {}
    steps = {}
    for rr, (home, step) in enumerate(posts):
        if not 0 <= home < replicas * shards:
            raise ValueError("rdzv.mesh: rank %d of the round posts home "
                "rank %d, outside the job's %d x %d" % (rr, home,
                replicas, shards))
        if home in live:
            raise ValueError("rdzv.mesh: home rank %d posted twice"
                % home)
        live[home] = rr
        steps[home] = step
    whole = [g for g in range(replicas) if all(g * shards + s in live
        for s in range(shards))]
    low = {g: min(steps[g * shards + s] for s in range(shards))
        for g in whole}
    high = {g: max(steps[g * shards + s] for s in range(shards))
        for g in whole}
    top = max(low.values()) if whole else -1
    current = [g for g in whole if top >= 0 and low[g] == high[g] == top]
    stale = [g for g in whole if g not in current]
    return {"live": live, "whole": whole, "top": top,
        "current": current, "stale": stale,
        "donor": current[0] if current else None}


class _Current:
    """Stands for the job's current model, optimizer or scheduler (made
    again by a heal): calls and attributes go to it."""

    def __init__(self, job, attr):
        object.__setattr__(self, "_job", job)
        object.__setattr__(self, "_attr", attr)

    def _obj(self):
        o = getattr(self._job, self._attr)
        if o is None:
            raise RuntimeError("rdzv.mesh: no %s yet" % self._attr[1:])
        return o

    def __call__(self, *a, **kw):
        return self._obj()(*a, **kw)

    def __getattr__(self, name):
        return getattr(self._obj(), name)

    def __iter__(self):
        return iter(self._obj())


class _Optimizer(_Current):
    def step(self, *a, **kw):
        """The optimizer's step, once every rank of the replica agrees
        the step holds (its replicate all-reduce went through)."""
        return self._job._opt_step(a, kw)


class _Scheduler(_Current):
    def step(self, *a, **kw):
        if self._job._cut:
            return None	# the step is dropped: the LR stays
        return self._obj().step(*a, **kw)


class MeshJob(Job):
    """A sharded job: its replica, shard, mesh and heals; made by
    init_process_group()."""

    def __init__(self, backend, timeout, chan, replicas, world, home):
        super().__init__(backend, timeout, chan)
        if replicas < 1 or world % replicas != 0:
            raise ValueError("rdzv.mesh: %d ranks do not make %d replica "
                "groups of equal size: give replicas a divisor of the "
                "world size (--nproc_per_node x nodes)" % (world,
                replicas))
        self.replicas, self.shards = replicas, world // replicas
        self.home = home
        self.replica, self.shard = home // self.shards, home % self.shards
        self.full_world = world
        self.mesh = None		# the replica's 1-D shard DeviceMesh
        self.active = False		# this rank's replica steps
        self.stepping = 0		# replicas stepping now
        self._rep = None		# the replicate group (gloo), or None
        self._rep_socks = {}
        self._shard_socks = {}
        self._shard_ok = False		# the shard group is whole
        self._cut = False		# this step's all-reduce failed
        self._take = False		# the last vote: a round to take
        self._heal = None		# (group, donor index) to receive from
        self._factories = [None, None, None]
        self._model = self._opt = self._sched = None
        self.heal_times = []
        self.heal_bytes = 0		# the last heal's tensors
        self.heal_xfer = None		# its seconds from the first byte
        self.heal_peak = None		# its peak memory over before
        self._repairing = False		# said hello: a death repairs

    # ---- the objects a heal makes again ----

    def _build(self):
        """Makes the model, optimizer and scheduler from the factories
        given so far, on the current mesh."""
        from torch.distributed.fsdp import FSDPModule
        fm, fo, fs = self._factories
        self._model = self._opt = self._sched = None
        if fm is None:
            return
        self._model = fm(self.mesh)
        n = 0
        for m in self._model.modules():
            if isinstance(m, FSDPModule):
                m.set_all_reduce_hook(self._hook)
                n += 1
        if n == 0:
            raise RuntimeError("rdzv.mesh: the model job.fsdp() built "
                "has no fully_shard module: call fully_shard(module, "
                "mesh=m) on the mesh it is given")
        if fo is not None:
            self._opt = fo(self._model.parameters())
        if fs is not None and self._opt is not None:
            self._sched = fs(self._opt)

    def _hook(self, t):
        """FSDP's reduce-scattered gradient shard: averaged across the
        replicas that step.  A peer's death there drops the step (the
        vote in _opt_step) instead of raising inside FSDP."""
        if self._rep is None or self._cut:
            return
        try:
            self._rep.allreduce([t]).wait()
        except Exception as e:
            if not group.comm_error(e):
                raise
            log.debug("replicate all-reduce cut off: %s",
                str(e).splitlines()[0][:160])
            self._cut = True
            group.reset(self._rep_socks)
            return
        t.div_(self.stepping)

    def _opt_step(self, a, kw):
        import torch
        all_reduce = collectives.orig("all_reduce")
        import torch.distributed as dist
        with self._cv:
            pending = bool(self._rounds)
        # How many ranks' steps hold, and how many have a round to
        # take: all of them take it at the next step's beginning.
        vote = torch.tensor([0 if self._cut else 1, 1 if pending else 0],
            dtype=torch.int64)
        all_reduce(vote)
        self._take = int(vote[1].item()) > 0
        if int(vote[0].item()) < dist.get_world_size():
            self._cut = True
            return None
        return self._opt.step(*a, **kw)

    # ---- what a script calls ----

    def fsdp(self, build):
        """build(mesh) -> the model, fully_shard'ed on mesh (the replica's
        shard mesh); called again after a heal.  Returns its stand-in."""
        self._factories[0] = build
        self._build()
        return _Current(self, "_model")

    def optimizer(self, make):
        """make(params) -> the optimizer; returns its stand-in, whose
        step() applies a step only when the whole replica's did reduce."""
        self._factories[1] = make
        if self._model is not None:
            self._opt = make(self._model.parameters())
        return _Optimizer(self, "_opt")

    def scheduler(self, make):
        """make(optimizer) -> the LR scheduler; its stand-in's step()
        does nothing for a dropped step."""
        self._factories[2] = make
        if self._opt is not None:
            self._sched = make(self._opt)
        return _Scheduler(self, "_sched")

    def digest(self):
        """sha256 (hex) of this rank's local parameter shards and
        optimizer state shards, in order: equal across the replicas of
        a shard index when they agree."""
        import torch
        h = hashlib.sha256()
        for t in self._local_tensors():
            h.update(t.detach().cpu().contiguous().view(-1).view(
                torch.uint8).numpy().tobytes())
        return h.hexdigest()

    def _local_tensors(self):
        import torch
        out = []
        if self._model is None:
            return out
        params = list(self._model.parameters())
        out += [_local(p) for p in params]
        if self._opt is not None:
            for p in params:
                st = self._opt.state.get(p, {})
                for k in sorted(st):
                    if isinstance(st[k], torch.Tensor):
                        out.append(_local(st[k]))
        return out

    @property
    def stats(self):
        """rdzv.repair's job.stats, with the heals': how many, the
        seconds each took (last 100), the last one's bytes, seconds
        moving them and peak memory over before; and where this rank is
        (replica, shard) and how many replicas step."""
        st = super().stats
        st.update({"heals": len(self.heal_times),
            "heal_seconds": list(self.heal_times[-100:]),
            "heal_bytes": self.heal_bytes, "heal_xfer": self.heal_xfer,
            "heal_peak": self.heal_peak, "replica": self.replica,
            "shard": self.shard, "stepping": self.stepping})
        return st

    def objects(self):
        """(model, optimizer, scheduler) as they are now (for a
        checkpoint: a heal makes them again)."""
        return self._model, self._opt, self._sched

    def close(self):
        """Leaves the job's groups (at the end of the script)."""
        import torch.distributed as dist
        self._rep, self._rep_socks = None, {}
        if dist.is_initialized():
            dist.destroy_process_group()

    def epochs(self, n):
        """Yields epoch numbers up to n (see rdzv.repair); at the end,
        while a replica is missing, waits for its heal first, so that
        every replica ends with the job's state."""
        self._heal_pending()
        for e in super().epochs(n):
            yield e
        self._finish()

    def _finish(self):
        """The stepping replicas are done while a replica waits for its
        replacement: they wait for the grow round and heal it (the
        replica's ranks then find the job's epochs done).  A replacement
        that never comes ends the job through rdzvd's repair timeout."""
        said = False
        while self._repairing and self.active and \
            self.stepping < self.replicas:
            if not said:
                log.info("rank %d (replica %d shard %d): done with %d "
                    "of %d replicas stepping: waiting to heal the "
                    "others before the end", self.home, self.replica,
                    self.shard, self.stepping, self.replicas)
                said = True
            r = self._wait_round(forever=True)
            if r is None:
                return
            self._repair_in(r)
            self._heal_pending()
        if self._repairing and self.active:
            # No rank leaves before its replica's others are healed:
            # a replacement healed at the end has reported its step
            # (_heal_pending) before its peers can exit, so its agent
            # never takes it for one that training left behind.
            collectives.orig("barrier")()

    def batches(self, *a, **kw):
        self._heal_pending()
        return super().batches(*a, **kw)

    # ---- the step ----

    def _begin(self):
        """A round that did not cut the last step is taken when that
        step's vote (_opt_step, so with job.optimizer's) said a rank of
        the replica had one, by all of them: one that took it alone
        would leave its shard peers in FSDP's next all-gather, and wait
        for them in the round."""
        self._heal_pending()
        self._cut = False
        take, self._take = self._take, False
        with self._cv:
            if take:	# a peer heard it first: it comes here too
                end = time.monotonic() + self.repair_timeout
                self._peer_wait = True
                try:
                    while not self._rounds and not self._chan_gone and \
                        time.monotonic() < end:
                        self._cv.wait(end - time.monotonic())
                finally:
                    self._peer_wait = False
            elif self._repairing and self._joined and \
                self._factories[1] is not None and \
                not self._in_step and self._rounds and \
                self._freeze is not self._rounds[-1]:
                # Taken after the next vote.
                self._step_begins("a step before round %d's vote"
                    % self._rounds[-1].round)
                return
        super()._begin()
        self._heal_pending()

    def _end(self, e):
        if e is None and self._cut:
            e = ConnectionError("rdzv.mesh: a replica's all-reduce was "
                "cut off by a peer's death; step %d dropped"
                % self.step_count)
        out = super()._end(e)
        self._cut = False
        return out

    def _recover(self, e, what):
        if not self._repairing:
            return False	# one replica, or torchrun: no repair
        if isinstance(e, Exception) and group.comm_error(e) and \
            not str(e).startswith("rdzv.mesh: a replica's"):
            # Out of the shard group (FSDP's collectives): its peers
            # blocked on this rank must fail too.
            self._shard_ok = False
            group.reset(self._shard_socks)
        return super()._recover(e, what)

    def _abort(self):
        self._cut_group()
        group.reset(self._rep_socks)

    def _agree_world(self, mine):
        """The ranks of the replicas that step (not every rank of the
        round: a waiting replica's survivors are in it too)."""
        return self.world

    def _in_torch(self):
        """A replica waiting for its replacement is blocked on its peers
        as a rank inside a collective is: it says "wait", so the agent's
        --progress_timeout watchdog does not take it for hung; so is a
        rank in job.save() or job.load() (in another replica, waiting
        for the writer's save)."""
        return not self.active or self._dcp or super()._in_torch()

    # ---- repair ----

    def _repair_in(self, r):
        """Repairs in round r and the agent's next ones until this rank's
        replica steps (a survivor of a failed replica waits here, its
        process and state kept, until its replacement is in)."""
        while True:
            super()._repair_in(r)
            if self.active:
                return
            r = self._wait_round(forever=True)
            if r is None:
                raise RuntimeError("rdzv.mesh: the agent closed the "
                    "channel while this replica waited for its "
                    "replacement")

    def _repair(self, r):
        """Round r: every live rank posts its home and step; the whole
        replicas step on (the stale ones among them healed first), the
        others wait for a later round."""
        t0 = time.monotonic()
        lost = self._lost_since if self._lost_since is not None else t0
        current = lambda: not self._superseded(r)	# noqa: E731
        self._to(State.REPAIRING, "round %d" % r.round)
        self._take = False	# taken (a vote's or a cut step's)
        if not current():
            raise ConnectionError("round %d superseded" % r.round)
        # A port rdzvd closed (a newer round came while this one
        # connects) is given up at once, not tried for the timeout.
        store = group.round_store(r, self.repair_timeout, current)
        # A heal cut off holds nothing: what it received is partial.
        step = self.step_count if self._joined and self._heal is None \
            else -1
        store.set(_POST % r.rank, "%d %d" % (self.home, step))
        group.arrive(store, _ARRIVE, r.world, current,
            self.repair_timeout)
        posts = [group.look(store, _POST % i) for i in range(r.world)]
        if None in posts:	# rdzvd dropped the round for a newer one
            raise ConnectionError("round %d superseded" % r.round)
        posts = [tuple(int(x) for x in v.decode().split())
            for v in posts]
        p = plan(posts, self.replicas, self.shards)
        with self._cv:
            self._round = r
        if self.replica not in p["whole"]:
            self.active = False
            self._to(State.WAITING, "round %d: replica %d not whole"
                % (r.round, self.replica))
            self._drop_rep()
            log.info("rank %d (replica %d shard %d): replica %d waits "
                "for its replacement, round %d", self.home, self.replica,
                self.shard, self.replica, r.round)
            return
        if p["donor"] is None:
            raise RuntimeError("rdzv.mesh: no whole replica holds the "
                "job's state (steps %s): restart from the checkpoint"
                % sorted(set(s for _, s in posts)))
        stale = self.replica in p["stale"]
        if stale or not self._shard_ok:
            self._shard_group(r, store)
        # Not left when a newer round came meanwhile (as rdzv.repair's
        # group is): the shard group outlives the round, and a rank
        # that left it would leave its shard peer in FSDP's next
        # collective; both take the newer round at the step's end.
        self._rep_group(r, store, p)
        whole = p["whole"]
        self.stepping = len(whole)
        idx = whole.index(self.replica) * self.shards + self.shard
        with self._cv:
            self.rank, self.world = idx, len(whole) * self.shards
        self.active = True
        self._heal = None
        if stale:
            self._heal = whole.index(p["donor"])
        elif self.replica == p["donor"]:
            self._send_shards([whole.index(g) for g in p["stale"]])
        if self._heal is not None and self._model is not None:
            self._heal_pending()
        with self._cv:
            if self._freeze is r:
                self._freeze = self._target = None
            # Stepping in a whole group: a grow's agreement (the
            # watcher.agree) has its ranks switch after the same
            # step, not each at its next boundary (one would wait in
            # the new round while its shard peer began a step).  A
            # break posted while it was made is dropped, as in Job's.
            self._cut_posted = False
            self._to(State.WHOLE, "round %d made" % r.round)
        if r.kind != "start":
            self.repairs += 1
        self._lost_since = None
        now = time.monotonic()
        self.repair_times.append(now - t0)
        if r.kind == "start":
            log.debug("rank %d (replica %d shard %d): round %d, %d "
                "replicas", self.home, self.replica, self.shard,
                r.round, len(whole))
            return
        log.info("rank %d (replica %d shard %d): %s round %d, %d of %d "
            "replicas step, %.3f s lost, at step %d", self.home,
            self.replica, self.shard, "healed in" if stale else r.kind,
            r.round, len(whole), self.replicas, now - lost,
            p["top"] if stale else self.step_count)

    def _shard_group(self, r, store):
        """Makes this replica's shard group (the default group) and mesh
        in round r, and the model, optimizer and scheduler on it."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        group.reset(self._shard_socks)
        self._shard_ok = False
        self._model = self._opt = self._sched = None
        self.mesh = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as e:
                log.debug("destroy: %s", e)
        group.reset_names()
        before = group.sockets()
        build, own = group.build_timeout(self.backend, self.timeout,
            self.repair_timeout)
        kw = {} if build is None else {"timeout": build}
        dist.init_process_group(self.backend, store=dist.PrefixStore(
            "shard/%d/" % self.replica, store), rank=self.shard,
            world_size=self.shards, **kw)
        if own is not None:
            dist.distributed_c10d._set_pg_timeout(own)
        self.mesh = init_device_mesh("cpu" if self.backend == "gloo" else
            "cuda", (self.shards,), mesh_dim_names=("shard",))
        self._shard_socks = {fd: l for fd, l in group.sockets().items()
            if before.get(fd) != l}
        self._shard_ok = True
        self._build()

    def _drop_rep(self):
        if self._rep is not None:
            group.reset(self._rep_socks)
        self._rep, self._rep_socks = None, {}

    def _rep_group(self, r, store, p):
        """The replicate group of this shard index over the whole
        replicas, in round r."""
        import torch.distributed as dist
        self._drop_rep()
        whole = p["whole"]
        if len(whole) < 2:
            return
        before = group.sockets()
        build, own = group.build_timeout("gloo", datetime.timedelta(
            seconds=self.repair_timeout), self.repair_timeout)
        self._rep = dist.ProcessGroupGloo(dist.PrefixStore("rep/%d/"
            % self.shard, store), whole.index(self.replica), len(whole),
            build)
        if own is not None:
            self._rep._set_default_timeout(own)
        self._rep_socks = {fd: l for fd, l in group.sockets().items()
            if before.get(fd) != l}

    # ---- the heal ----

    def _heal_parts(self):
        """What a heal moves, from this rank: (meta, tensors).  tensors:
        every parameter's local shard, then each optimizer state tensor
        shaped as its parameter's shard (by parameter, keys sorted),
        streamed one by one into the receiver's own; meta (small,
        torch.save'd): the step, data position, the optimizer's groups
        and other state values, the scheduler, the RNG."""
        import torch
        params = list(self._model.parameters())
        tensors = [_local(p).detach() for p in params]
        opt = None
        if self._opt is not None:
            sd = self._opt.state_dict()
            state = {}
            for i in sorted(sd["state"]):
                st, like = {}, _local(params[i])
                for k in sorted(sd["state"][i]):
                    v = sd["state"][i][k]
                    v = _local(v) if isinstance(v, torch.Tensor) \
                        else v
                    if isinstance(v, torch.Tensor) and v.dim() > 0 \
                        and v.shape == like.shape:
                        st[k] = ("tensor", v.dtype)
                        tensors.append(v.detach())
                    else:
                        st[k] = ("value", v)
                state[i] = st
            opt = {"param_groups": sd["param_groups"], "state": state}
        meta = {"step": self.step_count, "epoch": self.epoch,
            "pos": self.pos, "nparams": len(params), "opt": opt,
            "sched": self._sched.state_dict() if self._sched is not None
            else None, "rng": torch.get_rng_state()}
        return meta, tensors

    def _send_shards(self, to):
        """Donor: this rank's shards to the ranks at replicate indices
        to, one after the other (each pair is its own shard index's):
        the meta, then each tensor as it is, no copy made."""
        import torch
        if not to:
            return
        t0 = time.monotonic()
        meta, tensors = self._heal_parts()
        f = io.BytesIO()
        torch.save(meta, f)
        buf = torch.frombuffer(bytearray(f.getvalue()), dtype=torch.uint8)
        n = torch.tensor([buf.numel()], dtype=torch.int64)
        size = sum(t.numel() * t.element_size() for t in tensors)
        # Each send waits for its receiver (a replacement builds its
        # model first): a wait on a peer, said so to the agent.
        self._peer_wait = True
        try:
            for i in to:
                self._rep.send([n], i, 1).wait()
                self._rep.send([buf], i, 2).wait()
                # All posted at once, then waited for: no round trip
                # a tensor.
                works = [self._rep.send([t.contiguous()], i, 3 + k)
                    for k, t in enumerate(tensors) if t.numel() > 0]
                for w in works:
                    w.wait()
        finally:
            self._peer_wait = False
        log.debug("sent %d bytes of shard %d to %s in %.3f s", size,
            self.shard, to, time.monotonic() - t0)

    def _recv_into(self, dst, src, tag, works, copies):
        """Posts the receive of a tensor from replicate index src into
        dst (works: the pending receives; copies: (dst, buffer) pairs
        for a dst that is not contiguous, copied once all are in)."""
        import torch
        if dst.numel() == 0:
            return
        if not dst.is_contiguous():
            tmp = torch.empty(dst.shape, dtype=dst.dtype)
            copies.append((dst, tmp))
            dst = tmp
        works.append(self._rep.recv([dst], src, tag))

    def _heal_pending(self):
        """Receives the donor's shards when a heal waits and the objects
        to load them in exist.  The donor's death during the transfer is
        repaired as a death in a step is: until its heal is done this
        rank holds nothing of the job's state (_repair posts step -1),
        so the next round's plan heals it again from another replica, or
        finds none whole and the job restarts."""
        if self._heal is None:
            return
        if self._model is None or self._factories[1] is not None and \
            self._opt is None:
            raise RuntimeError("rdzv.mesh: give job.fsdp(), "
                "job.optimizer() and job.scheduler() before the "
                "training loop: a heal loads them")
        while self._heal is not None:
            try:
                self._peer_wait = True		# on the donor
                try:
                    self._heal_from(self._heal)
                finally:
                    self._peer_wait = False
            except Exception as e:
                if not group.comm_error(e) or \
                    not self._recover(e, "the heal of this rank's shard"):
                    raise

    def _heal_from(self, src):
        """The heal from replica index src: each tensor straight into
        this rank's own (a parameter's shard, the optimizer state made
        for it), so it needs no memory beyond the state itself."""
        import torch
        t0, rss0 = time.monotonic(), _rss_mark()
        n = torch.zeros(1, dtype=torch.int64)
        self._rep.recv([n], src, 1).wait()
        t1 = time.monotonic()	# the donor is there: the transfer
        buf = torch.empty(int(n.item()), dtype=torch.uint8)
        self._rep.recv([buf], src, 2).wait()
        meta = torch.load(io.BytesIO(buf.numpy()), map_location="cpu",
            weights_only=False)
        params = list(self._model.parameters())
        if meta["nparams"] != len(params):
            raise RuntimeError("rdzv.mesh: the donor's model has %d "
                "parameters, this one %d" % (meta["nparams"],
                len(params)))
        tag, size, works, copies = 3, 0, [], []
        with torch.no_grad():
            for p in params:
                self._recv_into(_local(p), src, tag, works, copies)
                size += _local(p).numel() * _local(p).element_size()
                tag += 1
            opt, state = meta["opt"], None
            if opt is not None and self._opt is not None:
                state = {}
                for i, st in opt["state"].items():
                    like, state[i] = _local(params[i]), {}
                    for k, (kind, v) in st.items():
                        if kind == "tensor":
                            t = torch.empty(like.shape, dtype=v)
                            self._recv_into(t, src, tag, works,
                                copies)
                            size += t.numel() * t.element_size()
                            tag += 1
                            v = _like(t, params[i])
                        state[i][k] = v
            for w in works:
                w.wait()
            for dst, tmp in copies:
                dst.copy_(tmp)
            if state is not None:
                self._opt.load_state_dict({"param_groups":
                    opt["param_groups"], "state": state})
        if meta["sched"] is not None and self._sched is not None:
            self._sched.load_state_dict(meta["sched"])
        torch.set_rng_state(meta["rng"])
        with self._cv:
            self.step_count = meta["step"]
        self.epoch, self.pos = meta["epoch"], meta["pos"]
        self.heal_times.append(time.monotonic() - t0)
        self.heal_xfer = time.monotonic() - t1
        self.heal_bytes = size
        self.heal_peak = _rss_peak(rss0)
        self._heal = None
        self._joined = True
        self._send(str(self.step_count))	# its agent: it has joined
        log.info("rank %d (replica %d shard %d): shard healed from "
            "replica index %d, %d bytes in %.3f s (%.3f s of it moving "
            "them), at step %d%s", self.home, self.replica, self.shard,
            src, size, self.heal_times[-1], self.heal_xfer,
            self.step_count, "" if self.heal_peak
            is None else ", peak memory +%.1f MiB" % (self.heal_peak /
            2 ** 20))


def _rss_mark():
    """This process's resident bytes now, its peak reset to it (Linux's
    clear_refs 5), or None where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kib("VmRSS") * 1024
    except (OSError, ValueError):
        return None


def _rss_peak(mark):
    """Peak resident bytes since _rss_mark() returned mark, over mark."""
    if mark is None:
        return None
    try:
        return max(0, _status_kib("VmHWM") * 1024 - mark)
    except (OSError, ValueError):
        return None


def _status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise ValueError("no %s in /proc/self/status" % key)


def _local(t):
    """A DTensor's local shard, or t."""
    return t.to_local() if hasattr(t, "to_local") else t


def _like(v, p):
    """v (a local tensor of the donor's optimizer state) as the state of
    parameter p: a DTensor placed as p when p is one and v has its local
    shape."""
    import torch
    if not isinstance(v, torch.Tensor) or not hasattr(p, "to_local") or \
        v.shape != p.to_local().shape:
        return v
    from torch.distributed.tensor import DTensor
    return DTensor.from_local(v, p.device_mesh, p.placements,
        run_check=False, shape=p.shape, stride=p.stride())


def fully_shard(module, **kw):
    """torch's fully_shard(module, **kw) (FSDP2), after the check that
    this torch has it."""
    _refuse_old_torch()
    from torch.distributed.fsdp import fully_shard as fs
    return fs(module, **kw)


def _refuse_old_torch():
    import torch
    try:
        ver = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)",
            torch.__version__).groups())
    except (AttributeError, ValueError):
        ver = (0, 0)
    ok = ver >= (2, 6)
    if ok:		# an older torch's fsdp may not even import
        try:
            from torch.distributed.fsdp import FSDPModule
            ok = hasattr(FSDPModule, "set_all_reduce_hook")
        except Exception:
            ok = False
    if not ok:
        raise RuntimeError("rdzv.mesh: FSDP2/HSDP needs torch 2.6 or "
            "newer (fully_shard with set_all_reduce_hook); this is torch "
            "%s: run the job with a newer torch, or train it unsharded "
            "with rdzv.repair's job.ddp()" % torch.__version__)


def init_process_group(backend="gloo", replicas=1, timeout=None):
    """Makes this rank's shard group and mesh and returns its MeshJob.
    replicas: the replica groups (RDZV_REPLICAS, when rdzv-agent sets
    it, wins); the world must be a multiple of it.  Under rdzv-agent's
    channel with replicas >= 2 the job repairs in place (see above); a
    replacement (RDZV_REPLACEMENT=1) joins the next grow round and is
    healed.  Without a channel (torchrun) or with one replica nothing
    repairs: a death ends the job, for its launcher to restart."""
    import torch.distributed as dist
    _refuse_old_torch()
    # What the mesh and the heal use, imported before a replacement says
    # ready: the donors wait on it from then on.
    import torch.distributed.device_mesh  # noqa: F401
    import torch.distributed.tensor  # noqa: F401
    env = os.environ
    if env.get("RDZV_REPLICAS", "").isdigit():
        replicas = int(env["RDZV_REPLICAS"])
    world = int(env.get("WORLD_SIZE", "1"))
    home = home_rank(env)
    chan = open_channel()
    job = MeshJob(backend, timeout, chan, replicas, world, home)
    for var, mine in (("RDZV_REPLICA", job.replica), ("RDZV_SHARD",
        job.shard)):
        if env.get(var, str(mine)) != str(mine):
            raise RuntimeError("rdzv.mesh: the agent says %s=%s, this "
                "rank's home %d says %d: the launcher and the helper "
                "disagree on the topology" % (var, env[var], home, mine))
    job._joined = not job.replacement
    r = Round(round=int(env.get("RDZV_ROUND", "0") or 0), kind="start",
        ns=env.get("RDZV_NAMESPACE", "rdzv"), rank=job.home,
        world=world, donor=0, master_addr=env.get("MASTER_ADDR",
        "127.0.0.1"), master_port=int(env.get("MASTER_PORT", "29500")))
    if chan is None or replicas < 2:
        if chan is not None:
            log.info("rank %d: one replica (plain FSDP2): no peer holds "
                "a lost shard, so a failure restarts the job from its "
                "checkpoint", home)
        job._chan, job._joined = chan, True
        if world > 1:
            kw = {} if timeout is None else {"timeout": timeout}
            dist.init_process_group(backend, **kw)
        _mesh_only(job)
        return job
    job._repairing = _start(job, offer=job.replacement)
    if job.replacement:
        job._join()
    else:
        job._repair_in(r)
    return job


def _mesh_only(job):
    """No repair: the default group is the whole job's; the mesh is the
    replica's shard dimension of a 2-D (replicate, shard) mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    import torch.distributed as dist
    dev = "cpu" if job.backend == "gloo" else "cuda"
    if not dist.is_initialized():
        job.mesh = None		# one process: fully_shard(mesh=None)
    elif job.replicas > 1:
        job.mesh = init_device_mesh(dev, (job.replicas, job.shards),
            mesh_dim_names=("replicate", "shard"))
    else:
        job.mesh = init_device_mesh(dev, (job.shards,),
            mesh_dim_names=("shard",))
    job.active, job.stepping = True, 1
    job.rank, job.world = job.home, job.full_world
    job._state = State.WHOLE	# its start, not a move: nothing repairs
