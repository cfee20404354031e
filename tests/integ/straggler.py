# SPDX-License-Identifier: Apache-2.0
"""straggler: a slow rank named, and replaced, end to end.  A real rdzvd,
real rdzv-agents of two workers each running examples/ddp_mlp (its
collectives count the time they wait on their peers, which its progress
reports carry).  The test throttles one worker to about 30% of its speed
with a SIGSTOP/SIGCONT duty cycle of its own.  Checks:
  - straggler_action off (the default): the throttled rank is named
    within a generous deadline (one event, rdzvd_job_stragglers{job} 1,
    `rdzvctl members` and the job document mark it); no other rank (they
    all wait on it) is ever named; nothing is killed;
  - straggler_action=replace: its agent kills it, the job repairs around
    it (shrink, grow; no restart), the survivors keep their PIDs; the
    steps/s before, throttled and after are printed (not asserted);
  - replace with a standby agent waiting: the straggler's node is
    evicted and the standby takes its place in a repair (no restart).
"""

import os
import time

import rdzvtest as rt
from agent_lib import (Scope, Throttle, conf, ctl, history, named,
                       rank_of, steps_per_s, job_events as events)

DATA = "/usr/share/datasets/fashion-mnist"
ARGS = ["--hidden", "256", "--test-limit", "500", "--lr", "0.1",
        "--threads", "1", "--batch", "64", "--epochs", "100"]
# A short window; the default ratio.  The model is big enough that a
# step's compute outweighs its allreduce: the throttled rank, stopped
# 70% of the time, then works at 20-30% of the others' speed (a rank
# stopped while it waits would count the stop as waiting), the others
# at 0.9-1.0 of each other's, even on a loaded machine.
WINDOW = 4
RATIO = 0.5


def data_daemon():
    """A new rdzvd for a job on Fashion-MNIST; skips the file without the
    data set."""
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        rt.skip_all("no Fashion-MNIST at %s (Debian's dataset-fashion-mnist)"
                    % DATA)
    return rt.Rdzvd()


def prog():
    return [os.path.join(rt.top_builddir(), "examples", "ddp_mlp")] + ARGS


def args(d, job, extra_conf=""):
    c = conf(0.2, 5.0, "straggler_window=%d,straggler_ratio=%g%s"
             % (WINDOW, RATIO, "," + extra_conf if extra_conf else ""))
    return ["--nnodes", "2", "--nproc_per_node", "2",
            "--rdzv_backend", "rdzv",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
            "--max_restarts", "2", "--grace", "2", "--rdzv_conf", c,
            "--no_python"]


def start_job(s, d, job, extra_conf=""):
    a = s.agent(args(d, job, extra_conf), program=prog())
    b = s.agent(args(d, job, extra_conf), program=prog())
    rt.wait_until(lambda: len(a.children()) == 2 and
                  len(b.children()) == 2 and
                  "step " in a.output() + b.output(),
                  timeout=30, what="4 workers training")
    return a, b


def test_named_never_the_waiting():
    """Throttled to 30%: named; the ranks waiting on it never are."""
    d = data_daemon()
    with Scope("straggler-") as s:
        a, b = start_job(s, d, "slow")
        pids = sorted(a.children()) + sorted(b.children())
        victim = sorted(b.children())[1]
        vr = rank_of(victim)
        with Throttle(victim):
            t0 = time.monotonic()
            rt.wait_until(lambda: named(d, "slow"), timeout=40,
                          what="the straggler named")
            print("  named %.1f s after the throttle began (window %d s)"
                  % (time.monotonic() - t0, WINDOW))
            ev = named(d, "slow")
            assert len(ev) == 1, ev
            assert ev[0].startswith("straggler: rank %d " % vr), (vr, ev)
            rt.wait_until(lambda: d.metric("rdzvd_job_stragglers",
                                           job="slow") == 1,
                          timeout=10, what="the metric")
            assert d.metric("rdzvd_job_stragglers_named_total",
                            job="slow") == 1
            m = ctl(d, "members", "slow")
            assert m.returncode == 0, m.stderr
            assert "straggler: rank %d on node" % vr in m.stdout, m.stdout
            h = history(d, "slow")
            assert h["stragglers"] == [vr], h
            # Still throttled a while: the others are never named.
            time.sleep(WINDOW + 1)
        ev = named(d, "slow")
        assert all(t.startswith("straggler: rank %d " % vr) for t in ev), ev
        # Action off: nothing was killed, no repair, no restart.
        assert sorted(a.children()) + sorted(b.children()) == pids
        assert not any(t.startswith(("repair", "restart"))
                       for t in events(d, "slow")), events(d, "slow")
    d.stop_clean()


def test_replace():
    """straggler_action=replace: killed, the job repairs around it."""
    d = data_daemon()
    with Scope("straggler-") as s:
        a, b = start_job(s, d, "rep", "straggler_action=replace")
        victim = sorted(b.children())[1]
        vr = rank_of(victim)
        survivors = set(a.children()) | set(b.children())
        survivors.discard(victim)
        before = steps_per_s(d, "rep")
        with Throttle(victim):
            slow = steps_per_s(d, "rep")
            rt.wait_until(lambda: any(t.startswith("repair: grow to 4")
                                      for t in events(d, "rep")),
                          timeout=60, what="the straggler replaced")
        time.sleep(1)
        after = steps_per_s(d, "rep")
        print("  steps/s before %.1f, throttled %.1f, after replacement %.1f"
              % (before, slow, after))
        ev = events(d, "rep")
        assert any(t.startswith("straggler: rank %d " % vr) and "steps at" in t
                   for t in ev), ev
        assert any("its agent kills it to be replaced" in t for t in ev), ev
        assert any(t.startswith("repair: shrink to 3") for t in ev), ev
        assert any(t.startswith("failure ") and "killed by rdzv-agent as a "
                   "straggler" in t for t in ev), ev
        assert not any(t.startswith("restart ") or "escalated" in t
                       for t in ev), ev
        now = set(a.children()) | set(b.children())
        assert survivors <= now and victim not in now, (survivors, now)
        assert d.metric("rdzvd_job_straggler_actions_total", job="rep") == 1
    d.stop_clean()


def test_standby_takes_its_place():
    """replace with a standby: the straggler's node is evicted for it."""
    d = data_daemon()
    with Scope("straggler-") as s:
        a, b = start_job(s, d, "sb", "straggler_action=replace")
        c = s.agent(args(d, "sb", "straggler_action=replace"),
                    program=prog())
        rt.wait_until(lambda: "standby" in c.output(), timeout=20,
                      what="the standby")
        victim = sorted(b.children())[0]
        with Throttle(victim):
            rt.wait_until(lambda: any(t.startswith("repair: grow to 4")
                                      for t in events(d, "sb")),
                          timeout=60, what="the standby in")
        ev = events(d, "sb")
        assert any("evicted for standby node" in t for t in ev), ev
        assert any("takes its place" in t for t in ev), ev
        assert not any(t.startswith("restart ") or "escalated" in t
                       for t in ev), ev
        rt.wait_until(lambda: len(c.children()) == 2, timeout=20,
                      what="the standby's workers")
        assert b.wait(30) is not None
    d.stop_clean()


if __name__ == "__main__":
    rt.main(globals(), per_test=90.0, total=240.0)
