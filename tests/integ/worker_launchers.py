# SPDX-License-Identifier: Apache-2.0
"""worker_launchers: librdzvworker finds its place under every launcher.

The same program (tests/integ/worker_check) started by real torchrun 1.13
(c10d rendezvous: rank 0 hosts the TCPStore; static rendezvous: the
agent's store under /worker/attempt_N, a 1.13 server), by torchrun 2.13
(c10d: the rank-0 agent's store, a 2.x server; with
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 rank 0 hosts the store), and with the variables of Open
MPI, MPICH/PMI and Slurm (plus MASTER_ADDR/MASTER_PORT), and of rdzv-agent
(RDZV_ENDPOINT with RDZV_JOB/RDZV_ROUND instead of RDZV_NAMESPACE).  A
launch that lacks what it needs fails with a message naming it.
"""

import subprocess

import rdzvtest as rt
import worker_lib as wl

TORCH = rt.TORCH_PYTHON
TORCH2 = rt.TORCH2_PYTHON


def torchrun(args, timeout=120, python=TORCH, env=None):
    argv = [python, "-m", "torch.distributed.run"] + args
    p = subprocess.run(argv, env=wl.base_env(env), capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def need_torch(python=TORCH):
    """torchrun of python, or this test fails (CI) or skips."""
    if not rt.has_torch(python, "torch.distributed.run"):
        rt.no_torch("no torch in %s" % python, whole_file=False)


# The program checks the store mode torchrun chose before it runs.
def expect_agent_store(want):
    return ('[ "$TORCHELASTIC_USE_AGENT_STORE" = %s ] || { echo "agent '
            'store $TORCHELASTIC_USE_AGENT_STORE, want %s"; exit 9; }; '
            'exec "$0" "$@"' % (want, want))


def coll_ok(n, args, agent_store=None, python=TORCH, env=None):
    """torchrun of python with args runs the worker's quick collectives on
    n ranks (after checking, with agent_store, that
    TORCHELASTIC_USE_AGENT_STORE is it): it exits 0, every rank ok."""
    prog = [wl.prog(), "coll", "quick"]
    if agent_store is not None:
        prog = ["/bin/sh", "-c", expect_agent_store(agent_store)] + prog
    rc, out = torchrun(args + ["--nproc_per_node", str(n), "--no_python"] +
                       prog, python=python, env=env)
    assert rc == 0, out[-3000:]
    for r in range(n):
        assert "ok coll rank=%d" % r in out, out[-3000:]


def test_torchrun_c10d_rank0_hosts_store():
    need_torch()
    coll_ok(3, ["--standalone", "--redirects", "9:1", "--tee", "9:1"])


def test_torchrun_static_agent_store():
    need_torch()
    # The static rendezvous gives TORCHELASTIC_USE_AGENT_STORE=True: the
    # ranks are clients of the agent's TCPStore, keys under a prefix.
    coll_ok(2, ["--master_port", str(rt.free_port()), "--redirects", "9:1",
                "--tee", "9:1"], agent_store="True")


def test_torchrun2_rank0_hosts_store():
    need_torch(TORCH2)
    # torch 2.13's c10d agents share their TCPStore with the workers
    # unless told not to: then rank 0 hosts one, as under 1.13.
    coll_ok(3, ["--standalone"], agent_store="False", python=TORCH2,
            env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})


def test_torchrun2_agent_store():
    need_torch(TORCH2)
    # torch 2.13's default: the rank-0 agent hosts a TCPStore (a 2.x
    # server) and every worker is its client.
    coll_ok(3, ["--standalone"], agent_store="True", python=TORCH2)


def run_family(n, rank_env):
    res = wl.run_ok(n, [wl.prog(), "init"], store="tcpstore",
                    rank_env=rank_env)
    for r, (rc, out, err) in enumerate(res):
        assert "ok init rank=%d" % r in out, out
    return res


def test_openmpi_variables():
    res = run_family(3, lambda r, n: {
        "OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(n),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(r),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(n)})
    assert "rank=2 size=3 local_rank=2 local_size=3" in res[2][1]


def test_pmi_variables():
    res = run_family(2, lambda r, n: {"PMI_RANK": str(r),
                                       "PMI_SIZE": str(n)})
    # No local rank given: worked out from the peers' hosts.
    assert "rank=1 size=2 local_rank=1 local_size=2" in res[1][1]


def test_slurm_variables():
    res = run_family(3, lambda r, n: {"SLURM_PROCID": str(r),
                                       "SLURM_NTASKS": str(n),
                                       "SLURM_LOCALID": str(r)})
    assert "rank=1 size=3 local_rank=1" in res[1][1]


def test_rdzv_job_and_round():
    d = rt.Rdzvd([], durability="memory", db=":memory:")
    res = wl.run_ok(2, [wl.prog(), "init"], store=None,
                    rank_env=lambda r, n: {
                        "RANK": str(r), "WORLD_SIZE": str(n),
                        "RDZV_ENDPOINT": "127.0.0.1:%d" % d.port,
                        "RDZV_JOB": "jobA", "RDZV_ROUND": "3"})
    assert "ok init rank=1" in res[1][1]
    # The keys went to the round's scope, not the root namespace.
    c = d.native(ns=b"jobA/3")
    assert any(k.startswith(b"rdzvw/") for k in c.list_keys()), \
        c.list_keys()
    assert d.native(ns=b"").list_keys() == []
    d.stop()


def test_missing_store_is_named():
    res = wl.Group(2, [wl.prog(), "init"], store=None).wait(30)
    for rc, out, err in res:
        assert rc == 2, (rc, out, err)
        assert "needs a store" in out and "RDZV_ENDPOINT" in out and \
            "MASTER_ADDR" in out, out


def test_bad_rank_is_named():
    res = wl.Group(1, [wl.prog(), "init"], store=None,
                   rank_env=lambda r, n: {"RANK": "7", "WORLD_SIZE": "2",
                                          "MASTER_ADDR": "127.0.0.1",
                                          "MASTER_PORT": "1"}).wait(30)
    rc, out, err = res[0]
    assert rc == 2 and "RANK=\"7\"" in out, (rc, out)


def test_tuning_must_agree():
    # Ranks with different algorithm settings would pick different
    # algorithms for one call: init refuses, naming it.
    res = wl.Group(2, [wl.prog(), "init"], store="tcpstore",
                   rank_env=lambda r, n: {
                       "RANK": str(r), "WORLD_SIZE": str(n),
                       "RDZV_CPU_CHUNK": "65536" if r else "131072"}
                   ).wait(60)
    # Every rank fails; rank 0 (which serves the store until it gives up)
    # always gets as far as comparing.
    for rc, out, err in res:
        assert rc == 2, (rc, out)
    assert "RDZV_CPU_*" in res[0][1], res[0]


def test_unreachable_store_times_out():
    res = wl.Group(1, [wl.prog(), "init"], store=None,
                   rank_env=lambda r, n: {
                       "RANK": "1", "WORLD_SIZE": "2",
                       "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(rt.free_port()),
                       "RDZV_INIT_TIMEOUT_MS": "500"}).wait(30)
    rc, out, err = res[0]
    assert rc == 2 and "cannot reach the store" in out, (rc, out)


if __name__ == "__main__":
    rt.main(globals(), per_test=150.0, total=500.0)
