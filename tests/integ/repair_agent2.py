# SPDX-License-Identifier: Apache-2.0
"""repair_agent2: in-place repair's harder cases end to end (issue 12): a
real rdzvd, two real rdzv-agents of two workers each, examples/ddp_mlp
with its default flags (repair_agent.py has the plain SIGKILL and the
worker that cannot repair).  Checks:
  - a SIGSTOPped worker: the agent's --progress_timeout watchdog kills
    it, and that is repaired like any death (shrink, grow, survivors'
    PIDs unchanged, no restart); its peers, blocked on it, say "wait"
    on the channel and are spared;
  - a second failure while a replacement is pending (a survivor on the
    other node SIGKILLed after the shrink, before the grow): the round
    shrinks again to 2 (no restart), one grow round takes both
    replacements in once both are ready, the two untouched workers keep
    their PIDs, and the job succeeds with one set of parameters on every
    rank;
  - rdzvd kill -9 after the shrink, before the grow: rdzvd restarted on
    the same database (and port) resumes the repair: the replacement's
    readiness brings the grow, the survivors' PIDs never change, no
    restart, the job succeeds; the same when the replacement is ready
    while rdzvd is down (its agent tells the restarted rdzvd).
A replacement is held before it starts (so that the test can act while
it is pending) by starting every worker through a shell that, when
RDZV_REPLACEMENT=1, waits for a file the test creates, then execs
ddp_mlp (same pid, same channel).
"""

import os
import re
import signal

import rdzvtest as rt
from agent_lib import Scope, job_events as events, job_status, let_end, \
    until
from repair_agent import finish, need_data, prog, start_job

SHRUNK_RE = re.compile(r"repaired: round \d+ \(shrink\)")
# Held until GATE exists when it is a replacement; otherwise at once.
GATE_SH = ('if [ "$RDZV_REPLACEMENT" = 1 ]; then '
           'while [ ! -e "$RDZV_E2E_GATE" ]; do sleep 0.02; done; fi; '
           'exec "$@"')


def gated(gate, extra=()):
    """The agent's program and environment: replacements wait for gate,
    and the job trains on until end(gate) is called, so the survivors are
    still training when the held replacement joins, however slow the
    machine."""
    return ["/bin/sh", "-c", GATE_SH, "gate"] + until(
        prog() + list(extra), gate + ".end"), {"RDZV_E2E_GATE": gate}


def end(gate):
    """Lets a gated() job end (at its next epoch's end, --epochs done)."""
    let_end(gate + ".end")


def has(d, job, prefix):
    return any(t.startswith(prefix) for t in events(d, job))


def wait_event(d, job, prefix, agents, timeout, what):
    """Polls job's events for one that starts with prefix; on timeout
    the assertion names the events and the agents' output tails."""
    try:
        rt.wait_until(lambda: has(d, job, prefix), timeout=timeout,
                      what=what)
    except AssertionError as e:
        raise AssertionError("%s\nevents: %s\n%s" % (e, events(d, job),
                             "\n".join(x.output()[-3000:] for x in agents)))


def test_stopped_rank_watchdog_repairs():
    """SIGSTOP: the watchdog's kill is repaired in place.  A stopped
    rank stops the others too (they wait for it in their allreduce,
    reporting no step); they say "wait", so the watchdog gives them
    twice the timeout and kills the silent one (SIGCONT lets it take the
    SIGABRT) at the timeout; its death is repaired."""
    need_data()
    d = rt.Rdzvd()
    with Scope("repair-agent2-") as s:
        gate = os.path.join(s.tmp, "gate")
        program, env = gated(gate)
        open(gate, "w").close()         # replacements start at once
        a, b = start_job(s, d, "stopped", program=program, env=env,
                         extra=["--progress_timeout", "2"])
        survivors = set(a.children())
        victim, other = sorted(b.children())
        survivors.add(other)
        os.kill(victim, signal.SIGSTOP)
        try:
            wait_event(d, "stopped", "repair: grow", [a, b], 60,
                       "the grow round")
        finally:
            try:        # never leave a stopped process behind
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        now = set(a.children()) | set(b.children())
        assert survivors <= now, (survivors, now)
        assert victim not in now
        end(gate)
        hashes, _, ev = finish(d, "stopped", [a, b])
        out = a.output() + b.output()
    assert sorted(hashes) == [0, 1, 2, 3], hashes
    assert len(set(hashes.values())) == 1, hashes
    # Only the stopped rank was hung; its peers only waited on it.
    assert out.count("reported no progress") == 1, out[-3000:]
    assert "died (signal 6)" in "".join(ev), ev
    shrink = [t for t in ev if t.startswith("repair: shrink to 3")]
    assert len(shrink) == 1 and "died (signal" in shrink[0], ev
    assert sum(t.startswith("repair: grow to 4") for t in ev) == 1, ev
    assert not any(t.startswith("restart ") or "escalated" in t
                   for t in ev), ev
    assert d.metric("rdzvd_repairs_total") == 2
    assert d.metric("rdzvd_restarts_total") == 0
    d.stop()


def test_second_failure_shrinks_again():
    """A survivor dies while the replacement is pending: shrink again."""
    need_data()
    d = rt.Rdzvd()
    with Scope("repair-agent2-") as s:
        gate = os.path.join(s.tmp, "gate")
        program, env = gated(gate)
        a, b = start_job(s, d, "second", program=program, env=env)
        va, vb = sorted(a.children())[0], sorted(b.children())[0]
        kept = (set(a.children()) | set(b.children())) - {va, vb}
        os.kill(vb, signal.SIGKILL)
        wait_event(d, "second", "repair: shrink to 3", [a, b], 30,
                   "the shrink round")
        # Both agents are in the shrink round: the next death is one of
        # its own, not news of the old round's.
        rt.wait_until(lambda: all(": repair (shrink)" in x.output()
                                  for x in (a, b)),
                      timeout=30, what="the agents in the shrink round")
        assert not has(d, "second", "repair: grow")
        os.kill(va, signal.SIGKILL)
        wait_event(d, "second", "repair: shrink to 2", [a, b], 30,
                   "the second shrink round")
        assert kept <= set(a.children()) | set(b.children()), \
            (kept, events(d, "second"), a.output()[-3000:],
             b.output()[-3000:])
        with open(gate, "w"):
            pass        # both replacements go on
        wait_event(d, "second", "repair: grow to 4", [a, b], 60,
                   "the second grow round")
        assert kept <= set(a.children()) | set(b.children()), kept
        end(gate)
        try:
            hashes, _, ev = finish(d, "second", [a, b])
        except AssertionError:
            print(events(d, "second"), b.output()[-6000:])     # both
            raise
    print("  " + "\n  ".join(t for t in ev if t.startswith("repair")))
    assert sorted(hashes) == [0, 1, 2, 3], hashes
    assert len(set(hashes.values())) == 1, hashes
    assert any(t.startswith("repair: shrink to 2 after node") and
               t.endswith("(during a repair: another replacement on its "
                          "way)") for t in ev), ev
    assert [t for t in ev if t.startswith("repair: grow")] == [
        t for t in ev if t.startswith("repair: grow to 4, 2 replacements "
                                      "back in one round")], ev
    assert len([t for t in ev if t.startswith("repair: grow")]) == 1, ev
    assert not any(t.startswith("restart ") or "escalated" in t
                   for t in ev), ev
    assert d.metric("rdzvd_repairs_total") == 3
    assert d.metric("rdzvd_restarts_total") == 0
    d.stop()


def gated_kill(s, d, job):
    """A gated job (replacements wait for the returned gate file) whose
    node b loses a worker to SIGKILL; returns (a, b, gate, survivors,
    victim) once the survivors step on in the shrink round."""
    gate = os.path.join(s.tmp, "gate")
    program, env = gated(gate)
    a, b = start_job(s, d, job, program=program, env=env)
    survivors = set(a.children())
    victim, other = sorted(b.children())
    survivors.add(other)
    os.kill(victim, signal.SIGKILL)
    rt.wait_until(lambda: SHRUNK_RE.search(a.output() + b.output()),
                  timeout=30, what="the survivors in the shrink round")
    return a, b, gate, survivors, victim


def test_rdzvd_kill9_resumes_repair():
    """rdzvd dies after the shrink; restarted, it grows the job."""
    need_data()
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    with Scope("repair-agent2-") as s:
        a, b, gate, survivors, victim = gated_kill(s, d, "phoenix")
        assert not has(d, "phoenix", "repair: grow")
        d.kill9()
        d.start()
        assert d.port == port
        rt.wait_until(lambda: job_status(d, "phoenix").count(
                      " connected") == 2,
                      timeout=30, what="both agents back")
        with open(gate, "w"):
            pass
        wait_event(d, "phoenix", "repair: grow", [a, b], 60,
                   "the grow round after the restart")
        now = set(a.children()) | set(b.children())
        assert survivors <= now, (survivors, now)
        assert victim not in now
        end(gate)
        hashes, _, ev = finish(d, "phoenix", [a, b])
    assert sorted(hashes) == [0, 1, 2, 3], hashes
    assert len(set(hashes.values())) == 1, hashes
    assert sum(t.startswith("repair: shrink to 3") for t in ev) == 1, ev
    assert sum(t.startswith("repair: grow to 4") for t in ev) == 1, ev
    back = [i for i, t in enumerate(ev) if t.startswith("rdzvd restarted")]
    grow = [i for i, t in enumerate(ev) if t.startswith("repair: grow")]
    assert back and grow and back[0] < grow[0], ev
    assert not any(t.startswith("restart ") or "escalated" in t
                   for t in ev), ev
    d.stop()


def test_rdzvd_down_when_ready():
    """The replacement is ready while rdzvd is down: its agent tells the
    restarted rdzvd, which grows the job."""
    need_data()
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    with Scope("repair-agent2-") as s:
        a, b, gate, survivors, victim = gated_kill(s, d, "down")
        d.kill9()
        with open(gate, "w"):
            pass
        rt.wait_until(lambda: "its replacement is ready" in b.output(),
                      timeout=30, what="the replacement ready")
        d.start()
        wait_event(d, "down", "repair: grow", [a, b], 60,
                   "the grow round after the restart")
        now = set(a.children()) | set(b.children())
        assert survivors <= now, (survivors, now)
        end(gate)
        hashes, _, ev = finish(d, "down", [a, b])
    assert sorted(hashes) == [0, 1, 2, 3], hashes
    assert len(set(hashes.values())) == 1, hashes
    assert sum(t.startswith("repair: grow to 4") for t in ev) == 1, ev
    assert not any(t.startswith("restart ") or "escalated" in t
                   for t in ev), ev
    d.stop()


if __name__ == "__main__":
    rt.main(globals(), per_test=120.0, total=300.0)
