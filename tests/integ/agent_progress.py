# SPDX-License-Identifier: Apache-2.0
"""Workers report their step to rdzv-agent (librdzvworker's
rdzv_report_progress over the RDZV_PROGRESS_FD socket): the failure summary
and rdzvd's root cause name each rank's last step; --progress_timeout turns
a rank that stops reporting into a failure (SIGABRT) and so a restart; a
descriptor that is not the agent's socket is left alone.

The workers are tests/integ/worker_check in its "progress" mode: STEPS
allreduce steps 20 ms apart, each reported, W_FAIL=rank:step exits 3 there,
W_HANG=rank:step stops there (restart 0 only)."""
import json
import os
import re
import subprocess
import time

import rdzvtest as rt
from agent_lib import Scope, agent_path, conf, ctl


def prog():
    return os.path.join(rt.top_builddir(), "tests", "integ", "worker_check")


def clean(out):
    """No sanitizer report in an agent's output (one exits 1, which the
    failure cases expect anyway)."""
    assert "Sanitizer" not in out and "runtime error:" not in out, out
    return out


def failed_run(s, opts, env):
    """The output of an agent (scope s) of two worker_check workers in
    "progress" mode for 400 steps (opts: its options besides
    --nproc_per_node 2 --no_python; env: theirs), once it exited 1."""
    a = s.agent(["--nproc_per_node", "2", "--no_python"] + opts, env=env,
                program=[prog(), "progress", "400", s.tmp])
    rc = a.wait(40)
    out = clean(a.output())
    assert rc == 1, (rc, out)
    return out


def steps_in_summary(out):
    """{rank: (step, age)} from the summary's progress section."""
    got = {}
    for m in re.finditer(r"rank (\d+) \(local_rank: \d+\): step (\d+), "
                         r"([0-9.]+) s ago", out):
        got[int(m.group(1))] = (int(m.group(2)), float(m.group(3)))
    return got


def test_summary_names_last_steps():
    with Scope() as s:
        out = failed_run(s, [], {"W_FAIL": "1:30"})
        assert "failing rank=1 step=30" in out, out
        assert "Last progress reported" in out, out
        got = steps_in_summary(out)
        assert sorted(got) == [0, 1], out
        # Reports go at most every 100 ms (5 steps here), never past the
        # failure, and both ranks were in step.
        for r, (step, age) in got.items():
            assert 24 <= step <= 30, (r, step, out)
            assert age < 10, (r, age, out)
        m = re.search(r"  job       : (.*)", out)
        assert m and "exit code 3: last step" in m.group(1), out
        # The error file is still only the worker's own (none here).
        assert "error_file: <N/A>" in out, out
        print("  last steps", got)


def test_report_without_a_comm():
    """rdzv_progress_report() in a program with no communicator (its
    collectives its own), two agents of one worker on a real rdzvd: the
    steps reach rdzvctl members (both ranks reporting, the step rising)
    and the failure summary's source, the agent."""
    d = rt.Rdzvd()
    with Scope() as s:
        gate = os.path.join(s.tmp, "gate")
        args = ["--nnodes", "2", "--nproc_per_node", "1", "--no_python",
                "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
                "--rdzv_id", "solo", "--rdzv_conf", conf(0.2, 5.0)]
        agents = [s.agent(args, program=[prog(), "solo", gate])
                  for _ in range(2)]

        def progress():
            r = ctl(d, "--json", "members", "solo")
            if r.returncode != 0:
                return None
            ps = [m.get("progress") for m in json.loads(r.stdout)["members"]]
            if len(ps) != 2 or any(p is None for p in ps):
                return None
            return (sum(p["ranks_reporting"] for p in ps),
                    min(p["min_step"] for p in ps))
        rt.wait_until(lambda: (progress() or (0, 0))[0] == 2, timeout=30,
                      what="both ranks' progress in rdzvctl members")
        first = progress()[1]
        rt.wait_until(lambda: (progress() or (0, -1))[1] > first,
                      timeout=30, what="min_step rising past %d" % first)
        open(gate, "w").close()
        for a in agents:
            rc = a.wait(30)
            out = clean(a.output())
            assert rc == 0 and "ok solo steps=" in out, (rc, out)
            assert "progress_report" not in out, out
        print("  members showed steps rising from", first)
    d.stop()


def test_watchdog_restarts_hung_rank():
    with Scope() as s:
        t0 = time.monotonic()
        a = s.agent(["--nproc_per_node", "2", "--no_python",
                     "--progress_timeout", "2", "--max_restarts", "1",
                     "--grace", "1"],
                    env={"W_HANG": "1:15"},
                    program=[prog(), "progress", "40", s.tmp])
        rc = a.wait(60)
        out = clean(a.output())
        took = time.monotonic() - t0
        assert rc == 0, (rc, out)
        assert "hanging rank=1 step=15" in out, out
        # Rank 0 stalls too (its next allreduce waits for rank 1), so the
        # watchdog may name either rank first.
        assert re.search(r"worker [01] \(rank [01]\) reported no progress "
                         r"for 2 s after step 1[0-5]: sending SIGABRT", out), out
        assert "signal 6 (SIGABRT)" in out, out
        assert re.search(r"round \d+: .* restart 1", out), out
        assert out.count("ok progress rank=") == 2, out
        print("  hang noticed and job restarted and finished in %.1f s"
              % took)


def test_watchdog_failure_summary():
    with Scope() as s:
        out = failed_run(s, ["--progress_timeout", "1", "--grace", "1"],
                         {"W_HANG": "0:10"})
        assert "signal    : 6 (SIGABRT)" in out, out
        assert "(no progress: stopped by the watchdog)" in out, out
        m = re.search(r"  job       : (.*)", out)
        assert m and re.search(r"signal 6: no progress for 1 s after step "
                               r"\d+: stopped by rdzv-agent's "
                               r"--progress_timeout", m.group(1)), out


def test_no_watchdog_without_reports():
    # The python worker never links the library: it never reports, so a
    # short --progress_timeout must not touch it.
    with Scope() as s:
        a = s.agent(["--nproc_per_node", "1", "--progress_timeout", "1"],
                    env={"W_RUN": "2.5"})
        rc = a.wait(30)
        out = clean(a.output())
        assert rc == 0, (rc, out)
        assert "no progress" not in out, out


# A worker that speaks the agent's channel itself: steps, then "done"
# when SAY_DONE=1, then 3 s of work with no step (a final evaluation).
AFTER_TRAINING = r'''
import os, socket, time
s = socket.socket(fileno=int(os.environ["RDZV_PROGRESS_FD"]))
for step in range(1, 6):
    s.send(str(step).encode())
    time.sleep(0.02)
if os.environ.get("SAY_DONE") == "1":
    s.send(b"done")
time.sleep(3.0)
print("evaluated after training", flush=True)
'''


def test_done_ends_the_watch():
    """A worker that said "done" (the torch helper at the end of
    job.epochs()) is not taken for hung while it works on with no step
    (a final evaluation, a checkpoint); one that did not say it is."""
    with Scope() as s:
        prog = os.path.join(s.tmp, "after_training.py")
        with open(prog, "w") as f:
            f.write(AFTER_TRAINING)
        opts = ["--nproc_per_node", "1", "--progress_timeout", "1",
                "--grace", "1"]
        a = s.agent(opts, env={"SAY_DONE": "1"}, program=[prog])
        rc = a.wait(30)
        out = clean(a.output())
        assert rc == 0, (rc, out)
        assert "evaluated after training" in out, out
        assert "no progress" not in out, out
        b = s.agent(opts, env={"SAY_DONE": "0"}, program=[prog])
        rc = b.wait(30)
        out = clean(b.output())
        assert rc == 1 and "reported no progress for 1 s after step 5" \
            in out, (rc, out)
        assert "evaluated after training" not in out, out


def test_bad_option():
    p = subprocess.run([agent_path(), "--progress_timeout", "soon",
                        "--standalone", "--", "true"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=10)
    out = p.stdout.decode()
    assert p.returncode == 2 and "--progress_timeout" in out, out


def test_foreign_fd_left_alone():
    # A wrapper may reuse fd 3 for a file of its own while
    # RDZV_PROGRESS_FD=3 is inherited: the library must not write there.
    tmp = rt.mktemp("progress-fd-")
    path = os.path.join(tmp, "mine")
    with open(path, "w") as f:
        fd = f.fileno()
        env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                   LOCAL_WORLD_SIZE="1", RDZV_PROGRESS_FD=str(fd))
        p = subprocess.run([prog(), "progress", "8", tmp], env=env,
                           pass_fds=(fd,), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
    out = p.stdout.decode()
    assert p.returncode == 0 and "ok progress rank=0 steps=8" in out, out
    assert os.path.getsize(path) == 0


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    if not os.path.exists(prog()):
        rt.skip_all("tests/integ/worker_check not built (make check "
                    "builds it)")
    rt.main(globals(), per_test=70, total=240)
