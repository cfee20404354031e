# SPDX-License-Identifier: Apache-2.0
"""worker_coll: librdzvworker's cpu backend between real processes.

tests/integ/worker_check (a C program on the public API) runs as N ranks,
N = 1..5, against a real rdzvd (native protocol, keys in a namespace) and
torchrun-style (MASTER_ADDR/MASTER_PORT, rank 0 hosting a TCPStore):
every collective, op and dtype, sizes that do not divide evenly, small and
large messages (direct, ring, chains), over TCP and over shared memory.
"""

import rdzvtest as rt
import worker_lib as wl


def daemon():
    return rt.Rdzvd([], durability="memory", db=":memory:")


def check_all_ok(res, mode):
    for r, (rc, out, err) in enumerate(res):
        assert ("ok %s rank=%d" % (mode, r)) in out, (r, out, err[-2000:])


def ok_on_daemon(sizes, args, env=None, timeout=150):
    """worker_check ARGS as a group of each size in sizes, one after the
    other, against one fresh rdzvd: every rank says ok ARGS[0]."""
    d = daemon()
    for n in sizes:
        res = wl.run_ok(n, [wl.prog()] + args, d=d, env=env,
                        timeout=timeout)
        check_all_ok(res, args[0])
    d.stop()


def test_world_1_needs_nothing():
    # No launcher variables at all: a world of one, no store.
    res = wl.run_ok(1, [wl.prog(), "init"], store=None,
                    rank_env=lambda r, n: {})
    assert "rank=0 size=1 local_rank=0 local_size=1" in res[0][1], res


def test_coll_native_tcp():
    ok_on_daemon((2, 3, 4, 5), ["coll", "quick"], env={"RDZV_SHM": "0"})


def test_coll_shm():
    ok_on_daemon((1, 2, 3, 4, 5), ["coll", "quick"])


def test_shm_small_slots():
    # Tiny arena slots: every size takes many chunks and windows, through
    # the copy path (no cross-memory attach) and through it.
    d = daemon()
    for cma in ("0", "1"):
        res = wl.run_ok(3, [wl.prog(), "coll"], d=d, timeout=150,
                        env={"RDZV_SHM_SLOT": "4096", "RDZV_SHM_CMA": cma,
                             "RDZV_SHM_CMA_MIN": "1024",
                             "RDZV_SHM_SMALL": "512"})
        check_all_ok(res, "coll")
    d.stop()


def test_coll_large_and_tcpstore():
    # torchrun-style: rank 0 serves a TCPStore on MASTER_PORT.
    for n in (2, 3):
        res = wl.run_ok(n, [wl.prog(), "coll"], store="tcpstore",
                        env={"RDZV_SHM": "0"}, timeout=150)
        check_all_ok(res, "coll")


def test_p2p_ordering():
    # Ordered matching, both directions at once (3 MiB each way), blocking
    # send/recv, sends to oneself, a mismatched length.
    ok_on_daemon((1, 2, 3, 4, 5), ["p2p"], timeout=120)


def test_async_allreduce():
    # iallreduce queued 8 deep, a blocking allreduce behind them, test()
    # and waitall(); over the arena and over TCP.
    d = daemon()
    for n in (2, 3):
        for shm in ("0", "1"):
            res = wl.run_ok(n, [wl.prog(), "async"], d=d,
                            env={"RDZV_SHM": shm}, timeout=120)
            check_all_ok(res, "async")
    d.stop()


def test_shm_needs_every_rank():
    # One rank refuses shared memory: all stay on TCP, results still right.
    res = wl.run_ok(3, [wl.prog(), "coll", "quick"], store="tcpstore",
                    rank_env=lambda r, n: {
                        "RANK": str(r), "WORLD_SIZE": str(n),
                        "RDZV_SHM": "0" if r == 1 else "1"}, timeout=150)
    check_all_ok(res, "coll")


def test_recursive_doubling():
    # Small allreduces among "many" ranks: recursive doubling, with the
    # ranks beyond the largest power of two folded in and out.
    ok_on_daemon((3, 5), ["coll", "quick"],
                 env={"RDZV_SHM": "0", "RDZV_CPU_DIRECT_RANKS": "1"})


def test_direct_threshold_off():
    # Every allreduce/allgather/reduce through the ring and chains.
    ok_on_daemon((4,), ["coll", "quick"],
                 env={"RDZV_SHM": "0", "RDZV_CPU_DIRECT_MAX": "0",
                      "RDZV_CPU_CHUNK": "4096"})


def test_chunk_of_odd_size():
    # The ring reduces each chunk as soon as it has arrived: a chunk size
    # that is no multiple of 8 (rounded down to one of 64) must still
    # reduce whole f64/i64 elements only.
    ok_on_daemon((2,), ["coll", "quick"],
                 env={"RDZV_SHM": "0", "RDZV_CPU_DIRECT_MAX": "0",
                      "RDZV_CPU_CHUNK": "6002"})


if __name__ == "__main__":
    rt.main(globals(), per_test=170.0, total=600.0)
