# SPDX-License-Identifier: Apache-2.0
"""test_torchrun: unmodified torchrun 1.13 with its c10d rendezvous on rdzvd.

Two agents (python3 -m torch.distributed.run --nnodes 2 --nproc_per_node 2
--rdzv_backend c10d --rdzv_endpoint 127.0.0.1:<rdzvd> --rdzv_conf
is_host=false), each with two gloo workers that allreduce and write their
result to a file.  Both agents must exit 0, every worker's sum must be
right, and the rendezvous state key /torch.rendezvous.<JOB> (base64 of a
pickled _RendezvousState) must be in rdzvd, read back through torch's own
TCPStore client: round 0, complete, closed, two participants.

Then durability, with the lists of keys and values read from rdzvd (2.x
LIST_KEYS + GET) before each kill:
  strict   kill -9 right after job A; restart on the same --db; every key
           of job A is back; job B completes on the restarted rdzvd.
  relaxed  restart that db with --durability relaxed; job C completes;
           wait well past --relaxed-window-ms; kill -9; restart; every key
           of jobs A, B and C is back.
Before each kill the test makes one acknowledged write of its own (ADD),
so that only acknowledged writes are held against rdzvd: torch's SETs get
no reply, but they were sent before the ADD on a connection that has
since closed, and rdzvd commits writes in order.

RDZV_COMPAT_SERVER=torch runs job A against torch's own TCPStore server
(no restarts: it keeps nothing).
"""

import base64
import datetime
import glob
import json
import os
import pickle
import subprocess
import time

import rdzvtest
import compatlib as cl
from compatlib import check, log

dist = cl.require_torch()

WORKER = r"""
import datetime, json, os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=40))
r, n = dist.get_rank(), dist.get_world_size()
t = torch.tensor([r + 1, 1 << 40], dtype=torch.int64)
dist.all_reduce(t)
dist.barrier()
env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE",
    "GROUP_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE",
    "MASTER_ADDR", "MASTER_PORT")}
out = os.path.join(os.environ["COMPAT_OUT"], "rank%d.json" % r)
with open(out + ".tmp", "w") as f:
    json.dump({"rank": r, "world": n, "sum": t.tolist(), "env": env}, f)
os.rename(out + ".tmp", out)
dist.destroy_process_group()
# A torch gloo thread can still be releasing the last collective's tensors
# when the interpreter finalizes, which aborts the process ("terminate
# called without an active exception": a core shows pthread_exit from
# take_gil inside a gloo work's destructor).  Torch's race, not the
# launcher's: leave without finalizing, so every launcher sees exit 0.
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""

NNODES, NPROC = 2, 2
JOB_TIMEOUT = 120	# a loaded 2-core machine took 42 s for a 60 s limit


def run_job(port, job, python=None, expect_rc=0):
    """Two torchrun agents for job against 127.0.0.1:port, under python
    (TORCH_PY by default); asserts they both exit expect_rc and, when that
    is 0, that every worker's allreduce is right.  Returns the seconds it
    took and the agents' logs."""
    d = rdzvtest.mktemp("rdzv-compat-torchrun-")
    script = os.path.join(d, "allreduce.py")
    with open(script, "w") as f:
        f.write(WORKER)
    outd = os.path.join(d, "out")
    os.mkdir(outd)
    env = dict(os.environ, COMPAT_OUT=outd, GLOO_SOCKET_IFNAME="lo",
        LOGLEVEL="INFO")
    for k in list(env):
        if k.startswith("PET_") or k.startswith("TORCHELASTIC_"):
            del env[k]
    agents = []
    t0 = time.monotonic()
    for a in range(NNODES):
        logp = os.path.join(d, "agent%d.log" % a)
        logf = open(logp, "w")
        p = rdzvtest.spawn([python or cl.TORCH_PY, "-m",
            "torch.distributed.run",
            "--nnodes", str(NNODES), "--nproc_per_node", str(NPROC),
            "--rdzv_backend", "c10d",
            "--rdzv_endpoint", "127.0.0.1:%d" % port,
            "--rdzv_id", job, "--rdzv_conf", "is_host=false",
            "--redirects", "9:1", "--tee", "9:1",
            "--monitor_interval", "0.1",
            "--log_dir", os.path.join(d, "logs"),
            script], env=env, stdout=logf, stderr=logf, cwd=d)
        agents.append((p, logf, logp))
    end = t0 + JOB_TIMEOUT
    logs = []
    for a, (p, logf, logp) in enumerate(agents):
        try:
            rc = p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            rc = "none (still running after %d s)" % JOB_TIMEOUT
        logf.close()
        with open(logp, errors="replace") as f:
            logs.append(f.read())
        if rc != expect_rc:
            rdzvtest.end_all()
            msg = ["job %s: agent %d exited %s" % (job, a, rc)]
            for _, _, lp in agents:
                with open(lp, errors="replace") as f:
                    msg.append("--- %s\n%s" % (lp, f.read()[-2500:]))
            raise AssertionError("\n".join(msg))
    dt = time.monotonic() - t0
    if expect_rc != 0:
        return dt, logs
    world = NNODES * NPROC
    res = {}
    for path in glob.glob(os.path.join(outd, "rank*.json")):
        with open(path) as f:
            r = json.load(f)
        res[r["rank"]] = r
    check(sorted(res) == list(range(world)), "job %s: results from ranks "
        "%s, want 0..%d" % (job, sorted(res), world - 1))
    want = [world * (world + 1) // 2, world << 40]
    for r, x in sorted(res.items()):
        e = x["env"]
        check(x["world"] == world and x["sum"] == want, "job %s rank %d: "
            "allreduce %r in a world of %d, want %r" % (job, r, x["sum"],
            x["world"], want))
        check(e["RANK"] == str(r) and e["WORLD_SIZE"] == str(world) and
            e["TORCHELASTIC_RUN_ID"] == job and
            e["LOCAL_WORLD_SIZE"] == str(NPROC) and
            e["TORCHELASTIC_RESTART_COUNT"] == "0",
            "job %s rank %d: environment %r" % (job, r, e))
    groups = sorted({x["env"]["GROUP_RANK"] for x in res.values()})
    check(groups == ["0", "1"], "group ranks %r" % groups)
    log("job %s: 2 agents x %d workers done in %.1f s" % (job, NPROC, dt))
    return dt, logs


def check_rdzv_state(port, job):
    """The rendezvous state, through torch's own TCPStore client."""
    c = dist.TCPStore("127.0.0.1", port, None, False,
        datetime.timedelta(seconds=10))
    blob = c.get("torch.rendezvous." + job)
    state = pickle.loads(base64.b64decode(blob))
    check(type(state).__name__ == "_RendezvousState", "state is %r" %
        type(state))
    check(state.round == 0 and state.complete and state.closed,
        "job %s state: round %r complete %r closed %r" % (job, state.round,
        state.complete, state.closed))
    check(sorted(state.participants.values()) == [0, 1],
        "job %s participants %r" % (job, state.participants))
    pfx = "torch.rendezvous.%s.0/" % job
    for k in ("MASTER_ADDR", "MASTER_PORT", "torchelastic/role_info0",
        "torchelastic/role_info1", "torchelastic/agent/terminal_state0",
        "torchelastic/agent/terminal_state1"):
        c.wait([pfx + k], datetime.timedelta(seconds=2))
    role = json.loads(c.get(pfx + "torchelastic/role_info1"))
    check(role == {"role": "default", "rank": 1, "local_world_size": NPROC},
        "role_info1 %r" % role)
    del c


def snapshot(srv):
    """Every key and value in rdzvd's TCPStore namespace, then an
    acknowledged write (the fence) that the caller holds rdzvd to."""
    c = rdzvtest.TCPStore2(srv.d.connect())
    keys = c.list_keys()
    snap = {k: c.get(k) for k in keys}
    fence = c.add(b"compat/fence", 1)
    snap[b"compat/fence"] = str(fence).encode()
    c.close()
    return snap


def compare(srv, before, what):
    c = rdzvtest.TCPStore2(srv.d.connect())
    keys = set(c.list_keys())
    lost = sorted(set(before) - keys)
    check(not lost, "%s: %d keys lost after kill -9 and restart: %r" %
        (what, len(lost), lost[:10]))
    changed = sorted(k for k in before if c.get(k) != before[k])
    check(not changed, "%s: values changed: %r" % (what, changed[:10]))
    c.close()
    log("%s: all %d keys back" % (what, len(before)))


SRV = None


def test_job_a():
    run_job(SRV.port, "JOBA")
    check_rdzv_state(SRV.port, "JOBA")
    if SRV.has_metrics:
        m = SRV.metrics()
        cas = rdzvtest.metric_value(m, "rdzvd_ops_total", 0,
            op="compare_set")
        check(cas >= 4, "rdzvd_ops_total{compare_set} %s: the c10d "
            "rendezvous runs on compare-and-set" % cas)
        n = rdzvtest.metric_value(m, "rdzvd_commit_seconds_count", 0)
        check(n > 0, "rdzvd_commit_seconds_count %s in strict mode" % n)


SNAP = {}


@rdzvtest.needs("test_job_a")
def test_strict_kill_restart_job_b():
    if not SRV.has_metrics:
        rdzvtest.skip("torch's server keeps nothing over a restart")
    before = snapshot(SRV)
    check(b"/torch.rendezvous.JOBA" in before, "state key missing from "
        "LIST_KEYS: %r" % sorted(before)[:20])
    SRV.restart(kill=True)
    compare(SRV, before, "strict, after job A")
    run_job(SRV.port, "JOBB")
    check_rdzv_state(SRV.port, "JOBB")
    check_rdzv_state(SRV.port, "JOBA")
    SNAP.update(before)


@rdzvtest.needs("test_strict_kill_restart_job_b")
def test_relaxed_kill_after_window():
    if not SRV.has_metrics:
        rdzvtest.skip("torch's server keeps nothing over a restart")
    window_ms = 50
    SRV.d.durability = "relaxed"
    SRV.d.extra = ["--relaxed-window-ms", str(window_ms)]
    SRV.restart(kill=True)
    before = snapshot(SRV)
    check(set(SNAP) <= set(before), "job A keys missing after the switch "
        "to relaxed")
    run_job(SRV.port, "JOBC")
    check_rdzv_state(SRV.port, "JOBC")
    before = snapshot(SRV)
    for j in (b"JOBA", b"JOBB", b"JOBC"):
        check(b"/torch.rendezvous." + j in before, "no state key of %r" % j)
    time.sleep(10 * window_ms / 1000.0)
    SRV.restart(kill=True)
    compare(SRV, before, "relaxed, killed %d ms after the last write" %
        (10 * window_ms))
    check_rdzv_state(SRV.port, "JOBC")
    check("relaxed" in SRV.log_text(), "rdzvd log does not mention relaxed")
    rc = SRV.stop()
    check(rc == 0, "rdzvd exited %s after SIGTERM" % rc)


if __name__ == "__main__":
    SRV = cl.make_server(durability="strict")
    rdzvtest.main(globals(), per_test=JOB_TIMEOUT + 30, total=400,
        sections=True, server=SRV)
