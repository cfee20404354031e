# SPDX-License-Identifier: Apache-2.0
"""A node lost under a real Slurm (scripts/slurm-cluster.sh), mid-job, in
an rdzv.sbatch job of examples/ddp_mlp on two nodes (--nnodes 1:2): the
second node's rdzv-agent SIGKILLed, or the node set DOWN in a --no-kill
job; and on three nodes for --nnodes 2:2, a member's agent killed and the
standby taking its place.  rdzvd repairs in place (the survivor goes on alone from where it
was), training ends, and the Slurm job ends COMPLETED although srun's
worst task failed: rdzv.sbatch asks rdzvd what became of the job."""
import os
import re
import signal

import rdzvtest as rt
import slurm_lib as sl

# Long enough (about 1 s an epoch on two ranks here) that the loss lands
# mid-training.
MLP = ["--limit", "24000", "--hidden", "32", "--test-limit", "2000",
       "--lr", "0.1", "--threads", "1", "--epochs", "10", "--batch", "20"]
ENV = {"RDZV_AGENT_ARGS": "--no_python --nnodes 1:2", "RDZV_NPROC": "1"}
MIN_ACC = 0.75
C = None


def ddp_mlp():
    return os.path.join(rt.top_builddir(), "examples", "ddp_mlp")


def sbatch_script():
    return os.path.join(rt.top_srcdir(), "examples", "slurm", "rdzv.sbatch")


def second_node(jid):
    nodes = C.run(["squeue", "-h", "-j", str(jid), "-o", "%N"]).stdout
    hosts = C.run(["scontrol", "show", "hostnames", nodes.strip()]).stdout
    hosts = hosts.split()
    assert len(hosts) == 2, (nodes, hosts)
    return hosts[1]


def check_repaired(jid, lost):
    rows = C.wait_state(jid, "COMPLETED", timeout=150)
    out = C.out(jid)
    # The survivor went on alone, from where it was, to the end.
    assert re.search(r"round 2: repair \(shrink\): ranks from 0 of 1", out), \
        out
    assert "repaired: round 2 (shrink), world 1" in out, out
    assert sl.final_acc(out) >= MIN_ACC, out[-3000:]
    assert "rdzvd says: %d.1 succeeded" % jid in out, out
    assert re.search(r"job %d\.1 succeeded" % jid, out), out
    return rows


def test_agent_killed():
    """The second node's rdzv-agent SIGKILLed mid-training (its worker
    dies with it): repaired, COMPLETED."""
    jid = C.sbatch(["--nodes=2", sbatch_script(), ddp_mlp()] + MLP, env=ENV)
    C.wait_out(jid, r"^\[default0\]:  epoch 1  25% ", timeout=120)
    node = second_node(jid)
    pids = C.agent_pids(jid, node)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    check_repaired(jid, node)
    assert re.search(r"srun: error: %s: task \d+: Killed" % node,
                     C.out(jid)), C.out(jid)


def test_node_down():
    """sbatch --no-kill, then the second node set DOWN mid-training:
    Slurm ends the job's tasks there and takes the node from the job,
    the step goes on (rdzv.sbatch's srun --no-kill), repaired,
    COMPLETED."""
    jid = C.sbatch(["--nodes=2", "--no-kill", sbatch_script(), ddp_mlp()]
                   + MLP, env=ENV)
    C.wait_out(jid, r"^\[default0\]:  epoch 1  25% ", timeout=120)
    node = second_node(jid)
    C.run(["scontrol", "update", "NodeName=" + node, "State=DOWN",
           "Reason=rdzv node loss test"])
    rows = check_repaired(jid, node)
    assert "Node failure on %s" % node in C.out(jid), C.out(jid)
    # The job lost a node (RESIZING) and then completed.
    assert rows[0][0] == "RESIZING", rows


def test_standby_takes_place():
    """Three nodes for --nnodes 2:2: the third agent waits as a standby;
    a member's agent SIGKILLed mid-training, the standby's workers take
    its place (the survivor goes on alone meanwhile, then the group
    grows back to two), COMPLETED."""
    jid = C.sbatch(["--nodes=3", sbatch_script(), ddp_mlp()] + MLP,
                   env=dict(ENV, RDZV_AGENT_ARGS="--no_python --nnodes 2:2"))
    C.wait_out(jid, r"^\[default0\]:  epoch 1  25% ", timeout=120)
    out = C.out(jid)
    assert "standby: job %d.1 has its maximum of nodes" % jid in out, out
    member = int(re.search(r"rdzv-agent\[(\d+)\]: round 1: group rank 1 "
                           r"of 2", out).group(1))
    ours = [p for n in ("n1", "n2", "n3") for p in C.agent_pids(jid, n)]
    assert member in ours, (member, ours)
    os.kill(member, signal.SIGKILL)
    C.wait_state(jid, "COMPLETED", timeout=150)
    out = C.out(jid)
    assert "takes a lost node's place" in out, out
    assert re.search(r"round \d+: repair \(grow\): ranks from", out), out
    assert sl.final_acc(out) >= MIN_ACC, out[-3000:]
    assert "rdzvd says: %d.1 succeeded" % jid in out, out


if __name__ == "__main__":
    sl.need_data()
    if not os.path.exists(ddp_mlp()):
        rt.skip_all("examples/ddp_mlp not built (needs OpenBLAS and zlib)")
    C = sl.cluster()
    rt.main(globals(), per_test=200, total=420)
