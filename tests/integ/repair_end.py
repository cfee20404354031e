# SPDX-License-Identifier: Apache-2.0
"""repair_end: the end of training during a repair, end to end: a real
rdzvd, one real rdzv-agent of four workers (examples/ddp_mlp, C workers
through librdzvworker).  Checks:
  - training ends while a replacement is on its way, after an earlier
    replacement joined and stepped: a first worker is SIGKILLed and its
    replacement grows the job back to 4 and steps; a second is
    SIGKILLed and its replacement is held (a gate) while the survivors
    finish and exit 0; only then is it let go (ready after the end).
    rdzvd calls the grow off ("repair: no grow: ... training ended,
    the grow is called off"), the agent stops the replacement, the job
    succeeds: agent exit 0, no restart, no escalation, no process left.
    The repair timeout is an hour, so a wait for it shows as this
    test's own deadline, not as a slow pass.  (A grow already open when
    training ends is tests/unit/test_rdzv.c's test_repair_ends_in_grow:
    C workers take a grow at once, so they cannot finish before it.)
  - a worker whose training ended and that lingers on its way out is
    killed after every other worker here exited 0: its replacement says
    ready with no step left; the agent reports the node's success
    then, and the job succeeds (it waited for ever before).
The replacements are held as in repair_agent2.py (gated()).
"""

import json
import os
import signal

import rdzvtest as rt
from agent_lib import Scope, assert_gone, conf, job_events as events
from repair_agent import need_data
from repair_agent2 import end, gated, wait_event

OP_ADMIN_JOB = 30
HOUR = 3600


def args(d, job):
    """One node of four workers; a replacement may take an hour."""
    return ["--nnodes", "1", "--nproc_per_node", "4",
            "--rdzv_backend", "rdzv",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
            "--max_restarts", "2", "--grace", "2",
            "--rdzv_conf", conf(0.2, 5.0, "repair_timeout=%d" % HOUR),
            "--no_python"]


def reporting(d, job):
    """How many ranks of the running round reported a step in it."""
    doc = json.loads(d.native().call(OP_ADMIN_JOB, job)[0])
    return sum((m.get("progress") or {}).get("ranks_reporting", 0)
               for m in doc["members"])


# Local rank 0 of the first attempt lingers after its program ended (as
# a process stuck on its way out), saying so in GATE.linger.
LINGER_SH = ('"$@"; rc=$?; if [ "$LOCAL_RANK" = 0 ] && '
             '[ "$RDZV_REPLACEMENT" != 1 ]; then : > "$RDZV_E2E_GATE.linger"; '
             'sleep 3600; fi; exit $rc')


def start(s, d, job, linger=False, env=None):
    """The gate, open (a replacement starts at once), and an agent of
    four workers (gated, with LINGER_SH when linger), once all four
    train: (the agent, the gate)."""
    gate = os.path.join(s.tmp, "gate")
    program, genv = gated(gate)
    if linger:
        program = ["/bin/sh", "-c", LINGER_SH, "linger"] + program
    open(gate, "w").close()
    a = s.agent(args(d, job), program=program, env={**genv, **(env or {})})
    rt.wait_until(lambda: len(a.children()) == 4 and
                  "step " in a.output(), timeout=30,
                  what="4 workers training")
    return a, gate


def test_end_calls_off_grow():
    """The survivors finish while a replacement is on its way."""
    need_data()
    d = rt.Rdzvd()
    job = "ending"
    with Scope("repair-end-") as s:
        a, gate = start(s, d, job, env={"RDZV_REPAIR_TIMEOUT_MS":
                                        str(HOUR * 1000)})
        first = sorted(a.children())[1]
        os.kill(first, signal.SIGKILL)
        wait_event(d, job, "repair: grow to 4", [a], 60, "the first grow")
        # Its replacement stepped in the grow round (its step is on
        # the agent's channel before it is in the store).
        rt.wait_until(lambda: reporting(d, job) == 4, timeout=30,
                      what="4 ranks stepping in the grow round")
        os.unlink(gate)                 # the next replacement is held
        second = [p for p in sorted(a.children()) if p != first][2]
        os.kill(second, signal.SIGKILL)
        rt.wait_until(lambda: sum(t.startswith("repair: shrink to 3")
                                  for t in events(d, job)) == 2,
                      timeout=30, what="the second shrink")
        end(gate)                       # the survivors finish
        # Left: the held replacement, or nothing once the job ended.
        rt.wait_until(lambda: not a.alive() or
                      len(a.children()) <= 1, timeout=60,
                      what="the survivors' exits")
        open(gate, "w").close()         # the replacement comes too late
        rc = a.wait(60)
        out = a.output()
        ev = events(d, job)
        print("  " + "\n  ".join(t for t in ev if "repair" in t))
        assert rc == 0, (rc, out[-3000:])
        assert_gone(s.tmp)
    assert any(t.startswith("repair: no grow: node 1 finished before ") and
               t.endswith(": training ended, the grow is called off")
               for t in ev), ev
    assert not any(t.startswith("restart ") or "escalated" in t
                   for t in ev), ev
    assert "stopping the replacement" in out, out[-3000:]
    assert d.metric("rdzvd_restarts_total") == 0
    d.stop()


def test_death_on_the_way_out():
    """Training ends; a worker whose training ended lingers on its way
    out and is killed after every other worker here exited 0.  The
    agent replaces it (a worker's death), but the replacement has no
    step to join: when it says ready the node reports its success, rdzvd
    calls its grow off and the job succeeds (it waited for ever
    before)."""
    need_data()
    d = rt.Rdzvd()
    job = "lingering"
    with Scope("repair-end-") as s:
        a, gate = start(s, d, job, linger=True)
        end(gate)
        rt.wait_until(lambda: os.path.exists(gate + ".linger") and
                      len(a.children()) == 1, timeout=60,
                      what="three workers done, local rank 0 lingering")
        os.kill(a.children()[0], signal.SIGKILL)
        rc = a.wait(60)
        out = a.output()
        ev = events(d, job)
        print("  " + "\n  ".join(ev))
        assert rc == 0, (rc, out[-3000:])
        assert_gone(s.tmp)
    assert "its replacement is ready, but training ended" in out, out[-3000:]
    assert "every local worker succeeded but replacements that never " \
        "stepped" in out, out[-3000:]
    assert not any(t.startswith("restart ") or "escalated" in t
                   for t in ev), ev
    d.stop()


if __name__ == "__main__":
    rt.main(globals(), per_test=120.0, total=150.0)
