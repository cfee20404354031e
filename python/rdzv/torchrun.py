# SPDX-License-Identifier: Apache-2.0
"""rdzv.torchrun: torchrun's `rdzv` rendezvous backend, kept in rdzvd.

Installing the package with pip (`pip install ./python` from a source
tree: there is no release on PyPI yet) registers it under torchrun's
`torchrun.handlers` entry points, so an unmodified torchrun, and every launcher that calls
torch.distributed.run (accelerate, Lightning, torchx, Kubeflow images):

    torchrun --rdzv_backend rdzv --rdzv_endpoint H:P[,H2:P2,...] \\
        --rdzv_id JOB --nnodes 2 --nproc_per_node 8 train.py

keeps its rendezvous in rdzvd's server-side rendezvous (rdzv.native
speaks its protocol): durable across a kill -9 of rdzvd, following the
leading rdzvd of a list across an etcd failover, and visible in `rdzvctl
members JOB` and on rdzvd's status page.

How torch's RendezvousHandler maps onto rdzvd's rounds:
  next_rendezvous   JOIN (once; a background thread beats and reconnects),
                    then the next RUNNING round rdzvd pushes: group rank
                    and size from it.  Called again while rdzvd still runs
                    the node's round (torchrun restarts its workers after
                    a failure), it reports a FAILURE first, which ends the
                    round on every node (one restart, job-wide); called
                    after rdzvd ended the round, it waits for the next.
  num_nodes_waiting 1 once rdzvd has ended the node's round (a node came,
                    failed or was lost) or closed the job, else 0: what
                    makes torchrun's healthy nodes restart their workers.
  store             the round's TCPStore on rdzvd (a fresh namespace and
                    port per round): the workers' env:// store
                    (use_agent_store, MASTER_ADDR:MASTER_PORT) and the
                    agent's, its keys apart, reconnected after rdzvd
                    restarts.
  shutdown          after the workers succeeded: SUCCEEDED, and rdzvd
                    closes the job DONE once every node said so; after a
                    failure (torchrun gave up): ADMIN_CLOSE, as torch's
                    handlers close the rendezvous for every node.
  set_closed        ADMIN_CLOSE; is_closed: rdzvd said DONE or FAILED.
rdzvd's max_restarts is torchrun's --max-restarts (read from the agent's
WorkerSpec that holds this handler; `max_restarts=` in --rdzv_conf says it
for other callers), counted job-wide where torchrun counts per node.

--rdzv_conf keys: token_file (else RDZV_TOKEN_FILE), tls_ca (else
RDZV_TLS_CA), join_timeout (s; else torchrun's timeout, 600), close_timeout
(30), read_timeout (the agent store's, 60), last_call_timeout (s; rdzvd's
default), lease (s; rdzvd's default), max_restarts, nproc_per_node.

What torchrun's own agent cannot do that rdzv-agent does: torchrun
restarts every worker of every node after any failure (a new round, the
model reloaded from a checkpoint).  rdzv-agent repairs in place: the
survivors keep their processes and step on in a smaller group, the dead
rank's replacement comes from a warm spare (a python that has imported
torch already) and gets the state from a peer; it also watches progress
(a hung rank is killed, stragglers named) and keeps one restart count
per job.  None of that is possible behind torch's RendezvousHandler,
which only decides who is in the next round.
"""

import logging
import os
import socket
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.elastic.rendezvous.api import (
    RendezvousClosedError, RendezvousConnectionError, RendezvousError,
    RendezvousHandler, RendezvousInfo, RendezvousStoreInfo,
    RendezvousTimeoutError)

from rdzv import native

log = logging.getLogger("rdzv.torchrun")

BACKEND = "rdzv"
AGENT_PREFIX = "torchrun.agent/"	# the agent's keys in the round's store
MSG_MAX = 1000			# bytes of a failure or close reason sent


def handler_creator():
    """The `torchrun.handlers` entry point: torch's registry calls it with
    no argument and registers what it returns, create_handler."""
    return create_handler


def create_handler(params):
    """A RdzvHandler for torch's RendezvousParameters."""
    return RdzvHandler(params)


def _seconds(params, key, default):
    v = params.get(key)
    return float(v) if v not in (None, "") else default


def _int(params, key):
    v = params.get(key)
    return int(v) if v not in (None, "") else None


class RdzvHandler(RendezvousHandler):
    """torch's RendezvousHandler on rdzvd's rounds (module docstring)."""

    def __init__(self, params):
        self._job = params.run_id
        self._eps = native.parse_endpoints(params.endpoint)
        self._min, self._max = params.min_nodes, params.max_nodes
        self._host = socket.gethostname()
        self._addr = params.local_addr or self._host
        self._join_timeout = _seconds(params, "join_timeout",
            _seconds(params, "timeout", 600.0))
        self._close_timeout = _seconds(params, "close_timeout", 30.0)
        self._read_timeout = _seconds(params, "read_timeout", 60.0)
        lc = _seconds(params, "last_call_timeout", None)
        self._last_call_ms = -1 if lc is None else int(lc * 1000)
        lease = _seconds(params, "lease", None)
        self._lease_ms = -1 if lease is None else int(lease * 1000)
        self._max_restarts = _int(params, "max_restarts")
        self._nproc = _int(params, "nproc_per_node")
        path = params.get("token_file") or \
            os.environ.get("RDZV_TOKEN_FILE")
        self._token = native.load_token(path) if path else None
        self._tls_ca = params.get("tls_ca") or \
            os.environ.get("RDZV_TLS_CA") or None
        self._member = None
        self._cv = threading.Condition()
        self._push = None	# the latest ROUND push to this node
        self._closed = None	# rdzvd's word when the job closed
        self._fatal = None	# a refusal no retry mends
        self._round = None	# the round handed to torchrun
        self._store = None	# the agent's store of that round

    # ---- torch's contract ----

    def get_backend(self):
        return BACKEND

    def get_run_id(self):
        return self._job

    @property
    def use_agent_store(self):
        """The workers' env:// store is the round's TCPStore on rdzvd,
        alive as long as the round (torch's opt-out honoured)."""
        return os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
            "0") != "1"

    def next_rendezvous(self):
        """Joins rdzvd's next round of the job: see the module
        docstring.  Raises RendezvousClosedError (the job closed),
        RendezvousTimeoutError (no round within join_timeout),
        RendezvousConnectionError (rdzvd unreachable or refusing the
        token) or RendezvousError (JOIN refused: the job's parameters
        differ)."""
        deadline = time.monotonic() + self._join_timeout
        spec, result = self._agent()
        self._start(spec)
        with self._cv:
            ours = self._round is not None and self._running(
                self._round.round)
        if ours:
            self._report_failure(result, deadline)
        r = self._wait_round(deadline)
        self._round = r
        log.info("job %s round %d: group rank %d of %d, store %s:%d",
            self._job, r.round, r.group_rank, r.group_world_size,
            self._member.host, r.store_port)
        if self._store is not None:
            self._store.drop()
        store = self._store = _RoundStore(self, r,
            timedelta(seconds=self._read_timeout))
        if self.use_agent_store:
            info = RendezvousStoreInfo(self._member.host, r.store_port)
        else:
            info = RendezvousStoreInfo.build(r.group_rank, store,
                local_addr=self._addr)
        return RendezvousInfo(store, r.group_rank, r.group_world_size,
            info)

    def is_closed(self):
        """Whether rdzvd said the job closed (DONE or FAILED)."""
        with self._cv:
            return self._closed is not None

    def set_closed(self):
        """Closes the job in rdzvd: every node gets FAILED with the
        reason, and their next rendezvous fails as closed."""
        self._close_job("closed by torchrun's rendezvous handler on %s "
            "(set_closed)" % self._host)

    def num_nodes_waiting(self):
        """1 once rdzvd ended this node's round or closed the job (the
        caller must rendezvous again), else 0."""
        with self._cv:
            if self._round is None:
                return 0
            if self._closed is not None or self._fatal is not None:
                return 1
            return 0 if self._running(self._round.round) else 1

    def shutdown(self):
        """Tells rdzvd how this node ended and lets go of it.  In
        torchrun's `finally`: with no exception in flight the workers
        succeeded (SUCCEEDED; waits up to close_timeout for the job to
        close), else torchrun gave up and the job is closed for every
        node, as torch's own handlers do.  Returns False if rdzvd could
        not be told."""
        exc = sys.exc_info()[1]
        if self._member is None:
            return True
        deadline = time.monotonic() + self._close_timeout
        try:
            with self._cv:
                closed = self._closed is not None
                r = self._round
            if self._store is not None:
                self._store.drop()	# the round's port closes
            if closed:
                return True
            if exc is None and r is not None:
                self._member.call(native.OP_SUCCEEDED,
                    lambda node: [self._job, node, r.round], deadline)
                with self._cv:
                    while self._closed is None and \
                        self._running(r.round) and \
                        time.monotonic() < deadline:
                        self._cv.wait(deadline - time.monotonic())
            else:
                self._close_job("torchrun on %s gave up: %s" %
                    (self._host, _why(exc)), deadline)
            return True
        except native.RdzvError as e:
            log.warning("could not tell rdzvd that this node ended: "
                "%s", e)
            return False
        finally:
            self._member.close()

    # ---- the link to rdzvd ----

    def _agent(self):
        """What torchrun's agent, the caller, knows: (its WorkerSpec
        holding this handler, its last RunResult), either None when
        called some other way."""
        try:
            from torch.distributed.elastic.agent.server.api import (
                RunResult, WorkerSpec)
        except ImportError:
            return None, None
        spec = result = None
        f = sys._getframe(1)
        for _ in range(16):
            if f is None:
                break
            if f.f_globals.get("__name__", "").startswith(
                "torch.distributed"):
                for v in list(f.f_locals.values()):
                    if spec is None and isinstance(v, WorkerSpec) \
                        and v.rdzv_handler is self:
                        spec = v
                    if result is None and isinstance(v, RunResult):
                        result = v
            f = f.f_back
        return spec, result

    def _start(self, spec):
        if self._member is not None:
            return
        nproc = self._nproc or (spec.local_world_size if spec else 1)
        mr = self._max_restarts
        if mr is None:
            mr = spec.max_restarts if spec else 0
        join = [self._host, self._addr, os.getpid(), nproc, self._min,
            self._max, mr, self._last_call_ms, self._lease_ms]
        self._member = native.Member(self._eps, self._job, join,
            self._event, token=self._token, tls_ca=self._tls_ca)
        self._member.start()

    def _event(self, kind, arg):
        """The member's news, from its thread."""
        with self._cv:
            if kind == "round":
                if arg.job != self._job or \
                    arg.node_id != self._member.node_id:
                    return
                self._push = arg
                if arg.state in (native.DONE, native.FAILED):
                    self._closed = arg.message or (
                        "done" if arg.state == native.DONE
                        else "failed")
            elif kind == "joined":
                if self._push is not None and \
                    self._push.node_id != arg:
                    # rdzvd forgot this node (its lease ran
                    # out): its round is gone.
                    self._push = None
            elif kind == "closed":
                self._closed = arg
            elif kind == "fatal":
                self._fatal = arg
            self._cv.notify_all()

    def _running(self, rnd):
        """Whether rdzvd runs round rnd with this node in it (cv held)."""
        p = self._push
        return p is not None and p.state == native.RUNNING and \
            p.round == rnd

    def _wait_round(self, deadline):
        """The next RUNNING round after the one torchrun had."""
        after = self._round.round if self._round is not None else 0
        with self._cv:
            while True:
                if self._closed is not None:
                    raise RendezvousClosedError("job %s is closed "
                        "in rdzvd: %s" % (self._job, self._closed))
                if self._fatal is not None:
                    raise self._error(self._fatal)
                p = self._push
                if p is not None and p.state == native.RUNNING and \
                    p.round > after:
                    return p
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
        if self._member.node_id is None:
            raise RendezvousConnectionError("rdzvd at %s not reached "
                "in %g s" % (self._member._where(), self._join_timeout))
        raise RendezvousTimeoutError("job %s: no round with this node "
            "formed in %g s (%s)" % (self._job, self._join_timeout,
            "standby: the job has its --nnodes maximum" if p is not None
            and p.state == native.STANDBY else "waiting for nodes"))

    def _error(self, e):
        if e.code == native.ECLOSED:
            return RendezvousClosedError(str(e))
        if e.code == native.EINVAL:
            return RendezvousError(str(e))
        return RendezvousConnectionError(str(e))

    def _call(self, op, fields, deadline):
        try:
            return self._member.call(op, fields, deadline)
        except native.RdzvError as e:
            if e.code == native.ETIMEDOUT:
                raise RendezvousConnectionError(str(e))
            raise self._error(e)

    def _report_failure(self, result, deadline):
        """FAILURE for torchrun's round: its workers failed (the first
        failure of its RunResult when the agent has one)."""
        rank = local = -1
        code, sig, msg = 1, 0, "torchrun's workers failed"
        fails = getattr(result, "failures", None) or {}
        if fails:
            # The first to fail; torchrun's SIGTERM to the others
            # is no cause (timestamps are whole seconds).
            rank = min(fails, key=lambda k: (fails[k].exitcode ==
                -15, fails[k].timestamp, k))
            f = fails[rank]
            local = f.local_rank
            if f.exitcode is not None and f.exitcode < 0:
                sig = -f.exitcode
            elif f.exitcode is not None:
                code = f.exitcode
            msg = str(f.message or msg)
        msg = ("%s (torchrun restarts its workers)" % msg)[:MSG_MAX]
        rnd = self._round.round
        self._call(native.OP_FAILURE, lambda node: [self._job, node,
            rnd, local, rank, code, sig, msg], deadline)

    def _close_job(self, reason, deadline=None):
        if deadline is None:
            deadline = time.monotonic() + self._close_timeout
        if self._member is None:
            self._start(None)
        try:
            self._member.call(native.OP_ADMIN_CLOSE,
                lambda node: [self._job, reason[:MSG_MAX]], deadline)
        except native.RdzvError as e:
            if e.code != native.ECLOSED:
                raise
        with self._cv:
            if self._closed is None:
                self._closed = reason
            self._cv.notify_all()


def _why(exc):
    """One line saying why torchrun ended with exc (None: no round)."""
    if exc is None:
        return "it ended before any round"
    first = getattr(exc, "get_first_failure", None)
    if first is not None:
        try:
            rank, f = first()
            what = f.message or "exit code %s" % f.exitcode
            return "workers failed, no restarts left: rank %d (local " \
                "rank %d): %s" % (rank, f.local_rank, what)
        except (ValueError, AttributeError):
            pass
    return "%s: %s" % (type(exc).__name__, " ".join(str(exc).split()))


class _RoundStore(dist.Store):
    """torchrun's agent store: the round's TCPStore on rdzvd, its keys
    under AGENT_PREFIX (the workers' are the round's own), connected
    again, to the rdzvd the handler follows, after a connection is lost
    (an rdzvd restart or failover); an op cut off is sent again, so an
    `add` may count twice then."""

    def __init__(self, handler, rnd, timeout):
        dist.Store.__init__(self)
        dist.Store.set_timeout(self, timeout)
        self._h = handler
        self._round = rnd
        self._tcp = None

    def _client(self, deadline):
        while self._tcp is None:
            left = deadline - time.monotonic()
            try:
                self._tcp = dist.TCPStore(self._h._member.host,
                    self._round.store_port, is_master=False,
                    timeout=timedelta(seconds=max(min(left, 5.0),
                    0.1)), wait_for_workers=False)
                self._tcp.set_timeout(self.timeout)
            except dist.DistNetworkError:
                if time.monotonic() >= deadline:
                    raise
        return self._tcp

    def _do(self, fn):
        deadline = time.monotonic() + self.timeout.total_seconds()
        while True:
            try:
                return fn(self._client(deadline))
            except dist.DistNetworkError:
                self._tcp = None
                with self._h._cv:
                    gone = not self._h._running(self._round.round)
                if gone or time.monotonic() >= deadline:
                    raise

    def drop(self):
        """Closes the connection (the round is over for the agent)."""
        self._tcp = None

    def set_timeout(self, timeout):
        dist.Store.set_timeout(self, timeout)
        if self._tcp is not None:
            self._tcp.set_timeout(timeout)

    def set(self, key, value):
        self._do(lambda s: s.set(AGENT_PREFIX + key, value))

    def get(self, key):
        return self._do(lambda s: s.get(AGENT_PREFIX + key))

    def add(self, key, value):
        return self._do(lambda s: s.add(AGENT_PREFIX + key, value))

    def compare_set(self, key, expected, desired):
        return self._do(lambda s: s.compare_set(AGENT_PREFIX + key,
            expected, desired))

    def append(self, key, value):
        self._do(lambda s: s.append(AGENT_PREFIX + key, value))

    def delete_key(self, key):
        return self._do(lambda s: s.delete_key(AGENT_PREFIX + key))

    def check(self, keys):
        return self._do(lambda s: s.check([AGENT_PREFIX + k for k in keys]))

    def wait(self, keys, timeout=None):
        keys = [AGENT_PREFIX + k for k in keys]
        if timeout is None:
            return self._do(lambda s: s.wait(keys))
        return self._do(lambda s: s.wait(keys, timeout))

    def multi_get(self, keys):
        return self._do(lambda s: s.multi_get([AGENT_PREFIX + k
            for k in keys]))

    def multi_set(self, keys, values):
        self._do(lambda s: s.multi_set([AGENT_PREFIX + k for k in keys],
            values))

    def num_keys(self):
        return self._do(lambda s: s.num_keys())
