# SPDX-License-Identifier: Apache-2.0
"""test_torchrun_dropin: rdzv-agent is torchrun with one word changed.

A table of real command lines -- from torchrun 2.13's documentation, a
Kubeflow Trainer v2 pod's environment, an sbatch script's srun line (srun
simulated by the SLURM_* variables it sets per task) and torchtitan's
run_train.sh -- each run twice by bash: once as written, with torch 2.13's
torchrun, and once with the word torchrun replaced by rdzv-agent.  Every
"node" is a launcher on 127.0.0.1; nothing else is running (no rdzvd), so
the rendezvous is hosted by a launcher in both runs.  The training script
is the same torch 2.13 DDP program (gloo, three SGD steps on per-rank
data); both runs must finish with exit 0 and the same world size, ranks,
local ranks, role, python environment and trained weights, and under a
static rendezvous group rank = node rank.

PATH starts with torch 2.13's virtualenv, as for a user who activated it:
rdzv-agent must run that python3 (torch 2.13), not /usr/bin/python3 (torch
1.13), which the recorded torch version shows.

torchrun 2.x's other options are each tried by tests/integ/agent_cli2.py.
"""

import json
import os
import re
import subprocess
import sys
import time

import rdzvtest
import compatlib as cl
from compatlib import check, log

dist = cl.use_torch2()

TRAIN = r'''
import datetime, json, os, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
r, w = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(1000 + r)
for step in range(3):
    x = torch.randn(16, 8, generator=g)
    y = x.sum(1, keepdim=True)
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
weights = [round(v, 5) for p in model.parameters()
           for v in p.detach().flatten().tolist()]
env = os.environ
rec = {"rank": r, "world": w, "local_rank": int(env["LOCAL_RANK"]),
       "local_world": int(env["LOCAL_WORLD_SIZE"]),
       "group_rank": int(env["GROUP_RANK"]), "node": env.get("NODE_MARK"),
       "role": env.get("ROLE_NAME"), "torch": torch.__version__,
       "prefix": sys.prefix, "weights": weights}
out = os.path.join(env["DROPIN_OUT"], "rank%d.json" % r)
with open(out + ".tmp", "w") as f:
    json.dump(rec, f)
os.rename(out + ".tmp", out)
dist.destroy_process_group()
# A torch gloo thread can still be releasing the last collective's tensors
# when the interpreter finalizes, which aborts the process ("terminate
# called without an active exception": a core shows pthread_exit from
# take_gil inside a gloo work's destructor).  Torch's race, not the
# launcher's: leave without finalizing, so every launcher sees exit 0.
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
'''

# (name, nodes, per-node environment (i: the node), command line, static)
ROWS = [
    ("torchrun docs: fault tolerant, c10d", 2,
        lambda i: {"JOB_ID": "dropin"},
        "torchrun --nnodes=2 --nproc-per-node=1 --max-restarts=3 "
        "--rdzv-id=$JOB_ID --rdzv-backend=c10d "
        "--rdzv-endpoint=127.0.0.1:$PORT dropin_train.py", False),
    ("Kubeflow Trainer v2 (PET_*)", 2,
        lambda i: {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": str(i), "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "$PORT"},
        "torchrun dropin_train.py", True),
    ("sbatch: srun torchrun, c10d on the head node", 2,
        lambda i: {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0",
        "SLURM_NNODES": "2", "SLURM_NODEID": str(i), "SLURM_PROCID": str(i),
        "SLURM_LOCALID": "0", "SLURM_JOB_NODELIST": "127.0.0.1",
        "head_node_ip": "127.0.0.1"},
        "torchrun --nnodes $SLURM_NNODES --nproc_per_node 1 "
        "--rdzv_id $SLURM_JOB_ID --rdzv_backend c10d "
        "--rdzv_endpoint $head_node_ip:$PORT dropin_train.py", False),
    ("torchtitan run_train.sh", 1,
        lambda i: {"NGPU": "2", "CONFIG_FILE": "./debug_model.toml",
        "TRAIN_FILE": "dropin_train", "LOG_RANK": "0"},
        'PYTORCH_ALLOC_CONF="expandable_segments:True" '
        'torchrun --nproc_per_node=${NGPU} --rdzv_backend c10d '
        '--rdzv_endpoint="localhost:0" --local-ranks-filter ${LOG_RANK} '
        '--role rank --tee 3 '
        '-m ${TRAIN_FILE} --job.config_file ${CONFIG_FILE}', False),
]

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
AGENT = os.path.join(rdzvtest.top_builddir(), "agent", "rdzv-agent")
RUN_TIMEOUT = 90


def base_env():
    """The user's environment in torch 2.13's activated virtualenv, with
    no launcher variables of the test's own run."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("PET_", "SLURM_", "TORCHELASTIC_", "RDZV_")) or \
            k in ("PYTHON", "PYTHON_EXEC", "PYTHONPATH", "MASTER_ADDR",
            "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
            del env[k]
    venv_bin = os.path.dirname(sys.executable)
    env["PATH"] = venv_bin + ":" + env.get("PATH", "/usr/bin:/bin")
    env["VIRTUAL_ENV"] = os.path.dirname(venv_bin)
    return env


def start_row(row, launcher, tmp, port):
    """Starts one row's nodes with launcher in place of the word
    torchrun, $PORT being port; returns what finish_row needs."""
    name, nodes, node_env, cmd, _ = row
    tag = "%s-%s" % (re.sub(r"[^a-z0-9]+", "_", name.lower())[:24],
        os.path.basename(launcher))
    d = os.path.join(tmp, tag)
    out = os.path.join(d, "out")
    os.makedirs(out)
    with open(os.path.join(d, "dropin_train.py"), "w") as f:
        f.write(TRAIN)
    line = re.sub(r"\btorchrun\b", launcher, cmd)
    port = str(port)
    procs = []
    for i in range(nodes):
        env = base_env()
        extra = node_env(i)
        env.update({k: v.replace("$PORT", port) for k, v in extra.items()})
        env.update({"PORT": port, "DROPIN_OUT": out, "NODE_MARK": str(i)})
        logp = os.path.join(d, "node%d.log" % i)
        logf = open(logp, "w")
        procs.append((rdzvtest.spawn(["bash", "-c", line], env=env,
            cwd=d, stdout=logf, stderr=subprocess.STDOUT), logf, logp))
    return (row, launcher, line, procs, out, time.monotonic())


def finish_row(started):
    """Waits for the nodes start_row started; returns ({rank: record},
    seconds from start to the last exit)."""
    row, launcher, line, procs, out, t0 = started
    name = row[0]
    rcs, texts = [], []
    for i, (p, logf, logp) in enumerate(procs):
        try:
            rcs.append(p.wait(timeout=max(1, RUN_TIMEOUT -
                (time.monotonic() - t0))))
        except subprocess.TimeoutExpired:
            rcs.append("timeout")
        logf.close()
        rdzvtest.end(p)
        with open(logp, errors="replace") as f:
            texts.append("--- node %d (exit %s) ---\n%s" % (i, rcs[-1],
                f.read()[-3000:]))
    check(rcs == [0] * len(procs), "%s: %s exited %s:\n%s\n%s" % (name,
        os.path.basename(launcher), rcs, line, "\n".join(texts)))
    recs = {}
    for fn in os.listdir(out):
        if fn.endswith(".json"):
            with open(os.path.join(out, fn)) as f:
                rec = json.load(f)
            recs[rec["rank"]] = rec
    return recs, time.monotonic() - t0


def compare(row, a, b):
    """torchrun's records a against rdzv-agent's b."""
    name, nodes, _, _, static = row
    world = len(a)
    check(world >= nodes and sorted(a) == list(range(world)),
        "%s: torchrun's ranks %s" % (name, sorted(a)))
    check(sorted(b) == sorted(a), "%s: ranks %s, torchrun's %s" % (name,
        sorted(b), sorted(a)))
    for r in sorted(a):
        for k in ("world", "local_rank", "local_world", "role", "torch",
            "prefix", "weights"):
            check(a[r][k] == b[r][k], "%s: rank %d %s: rdzv-agent %r, "
                "torchrun %r" % (name, r, k, b[r][k], a[r][k]))
        if static:
            for rec in (a[r], b[r]):
                check(str(rec["group_rank"]) == rec["node"],
                    "%s: rank %d: group rank %s on node %s" % (name,
                    r, rec["group_rank"], rec["node"]))
    check(b[0]["torch"].startswith("2."), "%s: workers ran torch %s" %
        (name, b[0]["torch"]))


def make_test(row):
    def test():
        tmp = rdzvtest.mktemp("dropin-")
        # Side by side (the two runs share no port and no file), so
        # that the file stays short on two cores.
        # Two ports that differ: free_port() may hand out one twice.
        pa = rdzvtest.free_port()
        pb = rdzvtest.free_port()
        while pb == pa:
            pb = rdzvtest.free_port()
        ta = start_row(row, TORCHRUN, tmp, pa)
        tb = start_row(row, AGENT, tmp, pb)
        a, sa = finish_row(ta)
        b, sb = finish_row(tb)
        compare(row, a, b)
        log("%s: world %d, both launchers agree (%.1f s)" % (row[0],
            len(a), max(sa, sb)))
    return test


for _n, _row in enumerate(ROWS):
    globals()["test_%d_%s" % (_n, re.sub(r"[^a-z0-9]+", "_",
        _row[0].lower()).strip("_")[:40])] = make_test(_row)


if __name__ == "__main__":
    if not os.access(TORCHRUN, os.X_OK):
        cl._no_torch("no torchrun beside %s" % sys.executable)
    if not os.access(AGENT, os.X_OK):
        rdzvtest.skip_all("agent/rdzv-agent not built")
    rdzvtest.main(globals(), per_test=2 * RUN_TIMEOUT + 10, total=600,
        sections=True)
