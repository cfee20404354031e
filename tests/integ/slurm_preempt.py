# SPDX-License-Identifier: Apache-2.0
"""Preemption and requeue under a real Slurm (scripts/slurm-cluster.sh):
scancel --signal=USR1 reaches every worker of an rdzv.sbatch job through
the agents (rdzvd, in the same job, ignores it), each rank checkpoints at
one agreed step, scontrol requeue brings the job back, and the requeued
run (rdzv job JOBID.1.r1: not the old run's, whose keys it must not
read) resumes from that checkpoint and ends COMPLETED with the model
trained.  And #SBATCH --signal=USR1@N reaches every worker too."""
import os
import re
import sys
import time

import rdzvtest as rt
import slurm_lib as sl

# About 2 s an epoch here; the notice comes after the first, so the rest
# (several seconds) leaves the requeue ample time to find it running.
TRAIN = ["--limit", "12000", "--hidden", "32", "--test-limit", "2000",
         "--epochs", "5"]
MIN_ACC = 0.70
C = None


def sbatch_script():
    return os.path.join(rt.top_srcdir(), "examples", "slurm", "rdzv.sbatch")


def requeue_now(jid):
    """scontrol requeue, then lets the job start in 5 s rather than the
    two minutes Slurm holds a requeued job back (its BeginTime): a start
    within the second of the requeue would meet the old run's revoked
    credential on the nodes and fail."""
    C.run(["scontrol", "requeue", str(jid)])
    rt.wait_until(lambda: C.job_state(jid) == "PENDING", timeout=60,
                  interval=0.2, what="job %d pending again" % jid)
    C.run(["scontrol", "update", "JobId=%d" % jid, "StartTime=now+5"])


# A worker that waits for SIGUSR1 (up to 100 s) and says so.
WAITER = r"""import os, signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(time.time()))
print("rank %s: waiting" % os.environ["RANK"], flush=True)
end = time.monotonic() + 100
while not got and time.monotonic() < end:
    time.sleep(0.05)
print("rank %s: %s" % (os.environ["RANK"], "SIGUSR1" if got else "nothing"),
      flush=True)
sys.exit(0 if got else 1)
"""
AT_N = None


def submit_at_n():
    """#SBATCH --signal=USR1@110 with a time limit of 2 minutes: the notice
    is due 10 s after the start, and comes when slurmctld next looks at
    time limits (every 30 s).  On one node, two workers, beside the
    other test's job (it has 2 of the 3 nodes), so that the wait costs
    nothing."""
    global AT_N
    if AT_N is None:
        with open(os.path.join(C.shared, "waiter.py"), "w") as f:
            f.write(WAITER)
        with open(os.path.join(C.shared, "at_n.sbatch"), "w") as f:
            f.write("#!/bin/bash\n#SBATCH --signal=USR1@110\n"
                    "#SBATCH --time=2\n"
                    "exec bash %s \"$@\"\n" % sbatch_script())
        # Its own port: the nodes share one network stack here.
        AT_N = C.sbatch(["--nodes=1", "at_n.sbatch", "waiter.py"],
                        env={"PYTHON": sys.executable, "RDZV_NPROC": "2",
                             "RDZV_PORT": "29410"})
    return AT_N


def test_usr1_checkpoint_requeue():
    submit_at_n()
    C.copy(os.path.join(rt.top_srcdir(), "examples", "slurm",
                        "elastic_ddp.py"))
    ck = os.path.join(C.shared, "ck.pt")
    jid = C.sbatch(["--nodes=2", "--requeue", "--open-mode=append",
                    sbatch_script(), "elastic_ddp.py", "--checkpoint", ck]
                   + TRAIN,
                   env={"PYTHON": sl.torch_python(), "RDZV_NPROC": "1"})
    C.wait_out(jid, r"^\[default0\]:epoch 1 ", timeout=120)
    C.run(["scancel", "--signal=USR1", str(jid)])
    # Every worker heard it, and all saved at one step.
    saved = (r"rank (\d): SIGUSR1 at epoch (\d+) step (\d+): "
             r"checkpoint saved")
    C.wait_out(jid, saved, count=2, timeout=60)
    # One agent's notice can reach its worker, and so the agreement, before
    # the other's slurmd has delivered it (seen under ASan), and each
    # worker hears it twice (slurmstepd signals every process of the step,
    # proctrack/linuxproc here as cgroup does, and its agent forwards it):
    # wait for both forwards, and a step more.  No second save.
    C.wait_out(jid, r"signal 10 \(SIGUSR1\): forwarded to 1 worker$",
               count=2, timeout=30)
    time.sleep(1)
    seen = C.wait_out(jid, saved, count=2, timeout=1)
    assert sorted(r for r, _, _ in seen) == ["0", "1"], seen
    assert len({(e, s) for _, e, s in seen}) == 1, seen
    _, epoch, step = seen[0]
    assert C.job_state(jid) == "RUNNING", C.diagnostics(jid)
    requeue_now(jid)
    rows = C.wait_state(jid, "COMPLETED", timeout=150)
    assert len(rows) == 2, rows     # the run requeued, then this one
    out = C.out(jid)
    # The requeued run is a job of its own in rdzvd (the same database:
    # the state directory is the job's), it resumed where the notice
    # saved, and trained to the end.
    assert re.search(r"job %d\.1: 1 worker here" % jid, out), out
    assert re.search(r"job %d\.1\.r1: 1 worker here" % jid, out), out
    assert re.search(r"joined job %d\.1\.r1 as node [12] \(restarts 0\)" %
                     jid, out), out
    for r in (0, 1):
        assert "rank %d: resumed from %s at epoch %s step %s" % (
            r, ck, epoch, step) in out, out
    assert sl.final_acc(out) >= MIN_ACC, out[-3000:]
    assert out.count("job %d.1.r1 succeeded" % jid) == 2, out


def test_signal_at_n():
    """#SBATCH --signal=USR1@N reaches both workers: the job ends
    COMPLETED when they have it."""
    jid = submit_at_n()
    C.wait_state(jid, "COMPLETED", timeout=120)
    out = C.out(jid)
    assert "signal 10 (SIGUSR1): forwarded to 2 workers" in out, out
    for r in (0, 1):
        assert "rank %d: SIGUSR1" % r in out, out


if __name__ == "__main__":
    sl.need_data()
    C = sl.cluster()
    rt.main(globals(), per_test=280, total=300)
