# SPDX-License-Identifier: Apache-2.0
"""worker_fail: a rank that dies or hangs mid-collective must turn into an
error in every other rank within a bound, never a hang.

N ranks of tests/integ/worker_check loop on allreduce; the test then
SIGKILLs one (the others see its sockets close) or SIGSTOPs one (the
others hit their timeout).  Every survivor must print "broken", have its
later calls fail at once with RDZV_ECLOSED, and exit 3 within the bound.
Run over TCP and over shared memory.
"""

import os
import signal
import time

import rdzvtest as rt
import worker_lib as wl

RDZV_ECLOSED = -11


def start_loop(n, env, d, count=1 << 16):
    g = wl.Group(n, [wl.prog(), "loop", "60000", str(count)], d=d, env=env)
    for p in g.procs:
        line = p.stdout.readline()
        assert line.startswith("looping"), line
    time.sleep(0.3)     # well inside the loop
    return g


def survivors_fail(g, victim, t_kill, bound):
    res = g.wait(timeout=bound + 10, skip=(victim,))
    for r, x in enumerate(res):
        if r == victim:
            continue
        rc, out, err = x
        assert rc == 3, "rank %d rc=%r out=%s err=%s" % (r, rc, out[-800:],
                                                         err[-800:])
        assert "broken code=" in out, out
        assert "after code=%d" % RDZV_ECLOSED in out, out
    took = time.monotonic() - t_kill
    assert took < bound, "survivors took %.2fs (bound %.1fs)" % (took, bound)
    return took


def kill_one(n, shm, sig, count=1 << 16):
    d = rt.Rdzvd([], durability="memory", db=":memory:")
    env = {"RDZV_SHM": "1" if shm else "0",
           "WORKER_CHECK_TIMEOUT_MS": "2000"}
    g = start_loop(n, env, d, count)
    victim = n // 2
    t = time.monotonic()
    os.kill(g.procs[victim].pid, sig)
    # A dead peer is seen at once; a stopped one at the 2 s timeout.
    took = survivors_fail(g, victim, t, 1.5 if sig == signal.SIGKILL
                          else 6.0)
    if sig == signal.SIGSTOP:
        os.kill(g.procs[victim].pid, signal.SIGKILL)
    g.wait(timeout=10)
    print("  n=%d shm=%d count=%d %s: survivors out in %.3fs" %
          (n, shm, count, signal.Signals(sig).name, took), flush=True)
    d.stop()


def test_sigkill_tcp():
    for n in (2, 3, 5):
        kill_one(n, False, signal.SIGKILL)


def test_sigkill_shm():
    # Large messages read peers' memory directly; small ones go through
    # the arena's slots; both wait at the arena's barrier.
    for n in (2, 4):
        kill_one(n, True, signal.SIGKILL)
        kill_one(n, True, signal.SIGKILL, count=256)


def test_sigstop_timeout_tcp():
    kill_one(3, False, signal.SIGSTOP)


def test_sigstop_timeout_shm():
    kill_one(3, True, signal.SIGSTOP)


def test_timeouts_and_later_calls():
    # A receive nobody answers times out on its own deadline; the
    # communicator is then broken for that rank and, through its closed
    # sockets, for the other.
    for shm in ("0", "1"):
        wl.run_ok(2, [wl.prog(), "timeouts"], store="tcpstore",
                  env={"RDZV_SHM": shm}, timeout=30)


if __name__ == "__main__":
    rt.main(globals(), per_test=60.0, total=240.0)
