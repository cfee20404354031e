# SPDX-License-Identifier: Apache-2.0
"""rdzv under a real Slurm (scripts/slurm-cluster.sh: slurmctld, three
slurmd nodes, munge): the lines Slurm users run, each to the end with
sacct's COMPLETED and the trained model's accuracy checked.

- sbatch --nodes=2 examples/slurm/rdzv.sbatch ddp_mlp ...: rdzvd on the
  first node, one rdzv-agent per node;
- srun --nodes=2 ./torchrun_script.sh: PyTorch's torchrun script with the
  word torchrun replaced by rdzv-agent, elastic_ddp.py on torch;
- two srun steps of one allocation, one after the other and at once:
  each a job of its own in rdzvd (SLURM_JOB_ID.SLURM_STEP_ID)."""
import os
import re

import rdzvtest as rt
import slurm_lib as sl

# Small and quick: 6000 samples, a narrow hidden layer, 2 epochs (about
# 0.77 test accuracy; chance is 0.10).
MLP = ["--limit", "6000", "--hidden", "32", "--test-limit", "2000",
       "--lr", "0.1", "--threads", "1", "--epochs", "2", "--batch", "20"]
TORCH = ["--limit", "6000", "--hidden", "32", "--test-limit", "2000",
         "--epochs", "2"]
MIN_ACC = 0.70
C = None


def ddp_mlp():
    return os.path.join(rt.top_builddir(), "examples", "ddp_mlp")


def sbatch_script():
    return os.path.join(rt.top_srcdir(), "examples", "slurm", "rdzv.sbatch")


def test_sbatch_rdzv():
    """sbatch --nodes=2 examples/slurm/rdzv.sbatch ddp_mlp: rdzvd on the
    first node, an agent on each, trains to the end: COMPLETED."""
    jid = C.sbatch(["--nodes=2", sbatch_script(), ddp_mlp()] + MLP,
                   env={"RDZV_AGENT_ARGS": "--no_python", "RDZV_NPROC": "1"})
    C.wait_state(jid, "COMPLETED", timeout=150)
    out = C.out(jid)
    assert sl.final_acc(out) >= MIN_ACC, out[-3000:]
    # One job in rdzvd named after the agents' step, two nodes in it.
    assert re.search(r"job %d\.1: 1 worker here, 2-2 nodes" % jid, out), out
    for g in (0, 1):
        assert re.search(r"round 1: group rank %d of 2" % g, out), out
    # rdzvd ran on the first node of the allocation, from its database in
    # the shared directory.
    state = os.path.join(C.shared, "rdzv-%d" % jid)
    assert os.path.exists(os.path.join(state, "rdzvd.db")), state
    with open(os.path.join(state, "rdzvd.log")) as f:
        log = f.read()
    assert "job %d.1" % jid in log or "%d.1" % jid in log, log[-2000:]


def test_torchrun_script():
    """srun --nodes=2 ./torchrun_script.sh, PyTorch's script with
    rdzv-agent for torchrun: the first node's agent hosts the c10d
    rendezvous on 29400, torch's DDP trains on both nodes."""
    C.copy(os.path.join(rt.top_srcdir(), "examples", "slurm",
                        "torchrun_script.sh"),
           os.path.join(rt.top_srcdir(), "examples", "slurm",
                        "elastic_ddp.py"))
    os.chmod(os.path.join(C.shared, "torchrun_script.sh"), 0o755)
    with open(os.path.join(C.shared, "torchrun.sbatch"), "w") as f:
        f.write("#!/bin/bash\nsrun --nodes=2 ./torchrun_script.sh %s\n" %
                " ".join(TORCH))
    jid = C.sbatch(["--nodes=2", "torchrun.sbatch"],
                   env={"PYTHON": sl.torch_python()})
    C.wait_state(jid, "COMPLETED", timeout=150)
    out = C.out(jid)
    assert sl.final_acc(out) >= MIN_ACC, out[-3000:]
    assert "world 2" in out, out
    assert "hosting the c10d rendezvous of job 100 on port 29400" in out, out
    assert out.count("job 100 succeeded") == 2, out


STEPS = r"""#!/bin/bash
# rdzvd for the allocation, then srun steps of rdzv-agents: two one after
# the other, then two at once.
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --overlap --nodes=1 --ntasks=1 --nodelist="$head" rdzvd -d \
	--listen 0.0.0.0:29400 --http off --db rdzvd-$SLURM_JOB_ID.db \
	--port-file port-$SLURM_JOB_ID &
rdzvd=$!
for i in $(seq 1 300); do [ -s port-$SLURM_JOB_ID ] && break; sleep 0.1; done
step() {
	srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=0 \
		--output=step-$SLURM_JOB_ID-$1.out \
		rdzv-agent --rdzv_endpoint "$head:29400" --nproc_per_node 1 \
		--no_python %s
}
rc=0
step a || rc=1
step b || rc=1
step c & c=$!
step d & d=$!
wait $c || rc=1
wait $d || rc=1
rdzvctl -e "$head:29400" jobs > jobs-$SLURM_JOB_ID.txt
kill $rdzvd
wait $rdzvd
exit $rc
"""


def test_steps():
    """Two srun steps one after the other, then two at once, in one
    allocation with one rdzvd: four rdzv jobs (JOBID.STEPID), each
    trained to the end."""
    with open(os.path.join(C.shared, "steps.sbatch"), "w") as f:
        f.write(STEPS % " ".join([ddp_mlp()] + MLP))
    jid = C.sbatch(["--nodes=2", "steps.sbatch"])
    C.wait_state(jid, "COMPLETED", timeout=240)
    ids = set()
    for s in "abcd":
        out = C.out(jid, "step-%d-%s.out" % (jid, s))
        assert sl.final_acc(out) >= MIN_ACC, (s, out[-3000:])
        m = re.findall(r"job (%d\.\d+): 1 worker here, 2-2 nodes" % jid, out)
        assert len(m) == 2 and m[0] == m[1], (s, out)
        ids.add(m[0])
    # Step 0 is rdzvd's; the agents' steps are 1 to 4, four jobs.
    assert ids == {"%d.%d" % (jid, i) for i in (1, 2, 3, 4)}, ids
    jobs = C.out(jid, "jobs-%d.txt" % jid)
    for i in ids:
        assert i in jobs, jobs


if __name__ == "__main__":
    sl.need_data()
    if not os.path.exists(ddp_mlp()):
        rt.skip_all("examples/ddp_mlp not built (needs OpenBLAS and zlib)")
    C = sl.cluster()
    rt.main(globals(), per_test=260, total=600)
