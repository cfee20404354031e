# SPDX-License-Identifier: Apache-2.0
"""examples/slurm/rdzv.sbatch run on one machine with stand-ins for srun
and scontrol: rdzvd comes up on the "first node", one rdzv-agent per
node takes its job id and node count from SLURM_JOB_ID and SLURM_NNODES,
the job survives a worker failure, and everything is gone afterwards."""
import json
import os
import re
import subprocess
import sys

import rdzvtest as rt
from agent_lib import (Scope, agent_path, assert_gone, by_round,
                       starts)

# srun: starts --nodes copies of the command (one task per node) with the
# per-task SLURM_* variables, forwards SIGTERM/SIGINT, exits with the
# worst status.  Enough of srun for the script, nothing more.
FAKE_SRUN = r'''#!%s
import os, signal, subprocess, sys
args = sys.argv[1:]
nodes = 1
while args and args[0].startswith("-"):
    a = args.pop(0)
    if a == "--":
        break
    if "=" in a:
        k, v = a.split("=", 1)
    elif a in ("--overlap", "--no-kill"):
        continue
    else:
        k, v = a, args.pop(0)
    if k in ("--nodes", "-N"):
        nodes = int(v)
procs = []
for i in range(nodes):
    env = dict(os.environ, SLURM_NODEID=str(i), SLURM_PROCID=str(i),
               SLURM_LOCALID="0", SLURM_STEP_NUM_TASKS=str(nodes))
    procs.append(subprocess.Popen(args, env=env))
def fwd(sig, frame):
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
signal.signal(signal.SIGTERM, fwd)
signal.signal(signal.SIGINT, fwd)
rc = 0
for p in procs:
    r = p.wait()
    rc = rc or (r if r >= 0 else 128 - r)
sys.exit(rc)
''' % sys.executable

FAKE_SCONTROL = '''#!/bin/sh
[ "$1 $2" = "show hostnames" ] && echo 127.0.0.1
'''


def script():
    return os.path.join(rt.top_srcdir(), "examples", "slurm", "rdzv.sbatch")


def run_sbatch(s, env_extra, timeout=60):
    bindir = os.path.join(s.tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        p = os.path.join(bindir, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o755)
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("SLURM_") or k.startswith("PET_"):
            del env[k]
    env.update({
        "PATH": bindir + ":" + env.get("PATH", "/usr/bin:/bin"),
        "SLURM_JOB_ID": "4711", "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "127.0.0.1",
        "RDZVD": rt.rdzvd_path(), "RDZV_AGENT": agent_path(),
        "RDZV_PORT": str(rt.free_port()),
        "RDZV_STATE_DIR": os.path.join(s.tmp, "state"),
        "RDZV_NPROC": "2",
        "PYTHON": sys.executable,
        "PYTHONPATH": os.path.join(rt.top_srcdir(), "tests", "lib"),
        "TMPDIR": s.tmp,
    })
    env.update(env_extra)
    out_path = os.path.join(s.tmp, "sbatch.out")
    with open(out_path, "wb") as out:
        p = subprocess.Popen(["bash", script(), s.worker, s.tmp],
                             stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, env=env, cwd=s.tmp,
                             start_new_session=True)
        rt._track(p)
        try:
            rc = p.wait(timeout=timeout)
        finally:
            rt._untrack(p)
            if p.poll() is None:
                os.killpg(p.pid, 9)
    with open(out_path, "rb") as f:
        return rc, f.read().decode(errors="replace")


def test_sbatch_script_runs_a_job_through_a_failure():
    with Scope("agent-slurm-") as s:
        rc, out = run_sbatch(s, {
            "RDZV_AGENT_ARGS": "--max_restarts 1 --grace 1 --rdzv_conf "
                               "last_call_timeout=0.2,lease=1",
            "W_EXIT": "0:3:1", "W_RUN": "0"})
        assert rc == 0, (rc, out)
        rounds = by_round(s.tmp)
        last = rounds[max(rounds)]
        assert sorted(last) == [0, 1, 2, 3], rounds
        for i in last.values():
            assert i["RDZV_JOB"] == "4711"          # SLURM_JOB_ID
            assert i["TORCHELASTIC_RUN_ID"] == "4711"
            assert i["GROUP_WORLD_SIZE"] == "2"      # SLURM_NNODES
            assert i["WORLD_SIZE"] == "4"
            assert i["TORCHELASTIC_RESTART_COUNT"] == "1"
            assert i["MASTER_ADDR"] == "127.0.0.1"
        state = os.path.join(s.tmp, "state")
        assert os.path.exists(os.path.join(state, "rdzvd.db"))
        logs = os.listdir(os.path.join(state, "logs"))
        assert len(logs) == 2 and all(n.startswith("4711_") for n in logs)
        assert "job 4711 succeeded" in out, out
        # Two rounds and no worker started twice in one.  Round 1 may
        # have fewer than 4 starts: a rank that fails at once can stop
        # the round before a slower peer has recorded its start.
        st = starts(s.tmp)
        assert sorted(rounds) == [1, 2], rounds
        assert len(st) == len({(i["RDZV_ROUND"], i["RANK"]) for i in st})
        assert 4 < len(st) <= 8, len(st)
    assert_gone(s.tmp)


def test_sbatch_script_private_port_and_token():
    """The shipped script: #SBATCH --no-kill; rdzvd on a port of the job's
    own (RDZV_PORT unset: any free one, read back), asking for a token
    made for the job, kept private (0700 directory, 0600 file); the agents
    and workers have it, and unmodified torch's TCPStore (W_STORE) still
    reaches the round's store from the allocation's nodes."""
    with open(script()) as f:
        assert "\n#SBATCH --no-kill\n" in f.read()
    with Scope("agent-slurm-") as s:
        rc, out = run_sbatch(s, {
            "RDZV_PORT": "", "W_STORE": "1", "W_RUN": "0",
            "RDZV_AGENT_ARGS": "--rdzv_conf last_call_timeout=0.2,lease=1"})
        assert rc == 0, (rc, out)
        state = os.path.join(s.tmp, "state")
        token = os.path.join(state, "token")
        assert os.stat(state).st_mode & 0o777 == 0o700
        assert os.stat(token).st_mode & 0o777 == 0o600
        with open(token) as f:
            assert re.fullmatch(r"[0-9a-f]{64}", f.read()), token
        with open(os.path.join(state, "rdzvd.log")) as f:
            log = f.read()
        assert "authentication on" in log, log[-2000:]
        assert "TCPStore clients only from --tcpstore-allow" in log, \
            log[-2000:]
        port = int(re.search(r"listening on 0\.0\.0\.0:0 \(port (\d+)\)",
                             log).group(1))
        rounds = by_round(s.tmp)
        last = rounds[max(rounds)]
        assert sorted(last) == [0, 1, 2, 3], rounds
        for i in last.values():
            assert i["RDZV_ENDPOINT"] == "127.0.0.1:%d" % port, i
            # The job's credential, derived by the agent: never the
            # operator's secret (doc/security.md).
            assert i["RDZV_TOKEN_FILE"] != token, i
            assert "/rdzv-cred-" in i["RDZV_TOKEN_FILE"], i
        for r in range(4):
            with open(os.path.join(s.tmp, "store.4711.%d" % r)) as f:
                assert json.load(f) == {"job": "4711", "count": 4}
    assert_gone(s.tmp)


def test_sbatch_script_needs_a_program():
    with Scope("agent-slurm-"):
        p = subprocess.run(["bash", script()], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=10,
                           env=dict(os.environ, SLURM_JOB_ID="1"))
        assert p.returncode == 2 and b"usage" in p.stdout, p.stdout


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    rt.main(globals(), per_test=60, total=120)
