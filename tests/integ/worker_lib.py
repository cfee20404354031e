# SPDX-License-Identifier: Apache-2.0
"""worker_lib: start a librdzvworker program as N real processes.

Shared by tests/integ/worker_*.py and bench/allreduce_vs_gloo.sh's
helpers.  Processes are tracked by rdzvtest, so a failing or timed-out
test leaves none behind.

    procs = Group(n, argv, store="native", d=rdzvd) | store="tcpstore"
    results = procs.wait(timeout)   -> list of (rc, stdout, stderr)
"""

import os
import subprocess
import time

import rdzvtest as rt

# Variables a launcher sets; cleared so the caller's environment (a test
# run under torchrun or Slurm) cannot leak into the ranks.
LAUNCH_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "RDZV_ENDPOINT", "RDZV_NAMESPACE", "RDZV_JOB",
    "RDZV_ROUND", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID",
)

_ns_counter = [0]


def prog(name="worker_check"):
    return os.path.join(rt.top_builddir(), "tests", "integ", name)


def base_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.setdefault("RDZV_BACKEND", "cpu")
    if extra:
        env.update(extra)
    return env


class Group:
    """N ranks of argv, started at once."""

    def __init__(self, n, argv, store="native", d=None, env=None,
                 ns=None, rank_env=None):
        self.n = n
        self.procs = []
        self.t0 = time.monotonic()
        if store == "native":
            _ns_counter[0] += 1
            ns = ns or "test/%d/%d" % (os.getpid(), _ns_counter[0])
            common = {"RDZV_ENDPOINT": "127.0.0.1:%d" % d.port,
                      "RDZV_NAMESPACE": ns}
        elif store == "tcpstore":
            common = {"MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(rt.free_port())}
        else:
            common = {}
        for r in range(n):
            e = base_env(env)
            e.update(common)
            if rank_env is not None:
                e.update(rank_env(r, n))
            else:
                e.update({"RANK": str(r), "WORLD_SIZE": str(n),
                          "LOCAL_RANK": str(r),
                          "LOCAL_WORLD_SIZE": str(n)})
            p = subprocess.Popen(argv, env=e, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            rt._track(p)
            self.procs.append(p)

    def wait(self, timeout=120.0, skip=()):
        """Waits for every rank but those in skip; returns [(rc, out, err)]
        (None for a skipped one).  Ranks still running at the deadline
        are killed (rc None)."""
        end = time.monotonic() + timeout
        res = []
        for i, p in enumerate(self.procs):
            if i in skip:
                res.append(None)
                continue
            try:
                out, err = p.communicate(
                    timeout=max(0.1, end - time.monotonic()))
                rc = p.returncode
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                rc = None
            rt._untrack(p)
            res.append((rc, out, err))
        return res


def run_ok(n, argv, timeout=120.0, **kw):
    """Runs a group and asserts every rank exits 0; returns the results."""
    res = Group(n, argv, **kw).wait(timeout)
    bad = [(r, rc, out[-2000:], err[-2000:])
           for r, (rc, out, err) in enumerate(res) if rc != 0]
    assert not bad, "ranks failed (n=%d %s): %r" % (n, argv, bad)
    return res
