# SPDX-License-Identifier: Apache-2.0
"""test_torchrun_backend: unmodified torchrun 2.13 with `--rdzv_backend rdzv`
(python/rdzv/torchrun.py), its rendezvous kept in rdzvd.

The rdzv package is installed the way a wheel would be (pip --target a
temporary directory, on PYTHONPATH), so torch's registry finds the backend
through the `torchrun.handlers` entry point of its dist-info: nothing is
patched.  Then two torchrun processes (`python -m torch.distributed.run
--nnodes 2 --nproc_per_node 2`) train a gloo DDP model until a gate file
exists:
  - the job trains on rdzvd's round store (MASTER_ADDR:MASTER_PORT of the
    workers is the round's TCPStore port) and both nodes are members in
    `rdzvctl members`;
  - rdzvd is killed with SIGKILL and started again on the same port and
    database: the handlers reconnect, no worker restarts, they go on
    stepping;
  - a worker's SIGKILL: torchrun restarts every worker (its node's with
    TORCHELASTIC_RESTART_COUNT 1), in a new round on a new port, and rdzvd
    counts one restart for the job;
  - the gate: both torchruns exit 0, every replica the same, and rdzvd
    closes the job as done;
  - on etcd (three rdzvds, one leads): the leading rdzvd killed mid-job,
    the handlers follow the new leader, no worker restarts, exit 0.
Every wait is on a condition (a file, a member count, a step), never on
time.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import (DDP_LINEAR, DDP_SAME, RECORD, children, ctl,  # noqa: E402
                       job_events, job_status)

JOB = "trun"
PKG = None          # the directory pip installed the rdzv package into
S = {}              # what the sections share: rdzvd, torchruns, tmp

# Trains until DIR/finish exists (every rank agrees through a MAX
# all-reduce, so they stop at the same step).  Each start writes
# DIR/start.<pid> (rank, restart count, store), each step DIR/step.<pid>.
PROGRAM = r'''
import json, os, sys, time
import torch
import torch.distributed as dist

d = sys.argv[1]
pid = os.getpid()
''' + RECORD + r'''

dist.init_process_group("gloo")        # env://, as torchrun's workers do
rank, world = dist.get_rank(), dist.get_world_size()
env = os.environ
record("start.%d" % pid, {"rank": rank, "world": world, "pid": pid,
       "restart": int(env["TORCHELASTIC_RESTART_COUNT"]),
       "addr": env["MASTER_ADDR"], "port": int(env["MASTER_PORT"]),
       "agent_store": env["TORCHELASTIC_USE_AGENT_STORE"],
       "group_rank": int(env["GROUP_RANK"])})
''' + DDP_LINEAR + r'''
step = 0
while True:
    train_step()
    step += 1
    record("step.%d" % pid, step)
    stop = torch.tensor([float(os.path.exists(os.path.join(d, "finish")))])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    if stop.item() > 0 and step >= 5:
        break
    time.sleep(0.02)
''' + DDP_SAME + r'''
record("result.%d" % pid, {"rank": rank, "world": world, "same": same,
       "first": losses[0], "last": losses[-1]})
dist.barrier()
dist.destroy_process_group()
# torch's gloo may abort the interpreter's finalization (a known race of
# torch 2.13, not the launcher's): leave without it.
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
'''


def install_package():
    """pip installs python/ (a copy: pip's build files stay out of the
    source tree) into a directory of its own, once for the file."""
    global PKG
    if PKG is not None:
        return PKG
    tmp = rt.mktemp("trun-pkg-")
    src = os.path.join(tmp, "src")
    shutil.copytree(os.path.join(rt.top_srcdir(), "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                  "__pycache__"))
    target = os.path.join(tmp, "site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                        "--no-deps", "--no-build-isolation", "--no-index",
                        "--target", target, src],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    PKG = target
    return PKG


def torch_env(extra=None):
    """The environment of a torchrun: the installed package on PYTHONPATH
    and nothing of the source tree."""
    e = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    e["PYTHONPATH"] = install_package()
    e["GLOO_SOCKET_IFNAME"] = "lo"
    e.update(extra or {})
    return e


class Torchrun:
    """`python -m torch.distributed.run` as one node of job, with the rdzv
    backend on endpoints, output to a file in tmp."""

    n = 0

    def __init__(self, tmp, endpoints, job, prog, conf="lease=2",
                 max_restarts=2, env=None, nnodes="2"):
        Torchrun.n += 1
        self.name = "torchrun%d" % Torchrun.n
        self.out_path = os.path.join(tmp, self.name + ".out")
        argv = [compatlib.TORCH2_PY, "-m", "torch.distributed.run",
                "--rdzv_backend", "rdzv", "--rdzv_endpoint", endpoints,
                "--rdzv_id", job, "--nnodes", nnodes, "--nproc_per_node", "2",
                "--max_restarts", str(max_restarts),
                "--monitor_interval", "0.1",
                "--rdzv_conf", conf, prog, tmp]
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True,
                                         env=torch_env(env), cwd=tmp)
        rt._track(self.proc)
        self.pid = self.proc.pid

    def output(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s still running after %.0f s:\n%s" % (
                self.name, timeout, self.output()[-4000:]))
        rt._untrack(self.proc)
        return rc

    def kill(self):
        for p in children([self.pid]) + [self.pid]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        rt._untrack(self.proc)


def read_all(tmp, prefix):
    """{pid: the object in tmp/<prefix>.<pid>}."""
    out = {}
    for name in os.listdir(tmp):
        if name.startswith(prefix + "."):
            try:
                with open(os.path.join(tmp, name)) as f:
                    out[int(name.split(".")[1])] = json.load(f)
            except (OSError, ValueError):
                pass
    return out


def training(tmp, port=None, not_port=None, steps=3, world=4):
    """{rank: start} of the `world` ranks stepping (at least `steps`
    steps) on one store port (port, or any but not_port), else None."""
    starts, stepped = read_all(tmp, "start"), read_all(tmp, "step")
    by_port = {}
    for pid, s in starts.items():
        if (port is None or s["port"] == port) and s["port"] != not_port \
                and stepped.get(pid, 0) >= steps:
            by_port.setdefault(s["port"], {})[s["rank"]] = s
    for ranks in by_port.values():
        if sorted(ranks) == list(range(world)):
            return ranks
    return None


def wait_stepping(tmp, pids, more=5, timeout=60):
    """Until every one of pids has stepped `more` steps past now."""
    base = read_all(tmp, "step")
    rt.wait_until(lambda: all(read_all(tmp, "step").get(p, 0) >=
                              base.get(p, 0) + more for p in pids),
                  timeout=timeout, interval=0.05,
                  what="ranks %s stepping on" % sorted(pids))


def end_job(tmp, runs, timeout=120):
    """Lets the job end (the gate) and checks both torchruns exit 0 and
    every rank of the last round trained one model."""
    with open(os.path.join(tmp, "finish"), "w"):
        pass
    for r in runs:
        rc = r.wait(timeout)
        assert rc == 0, (r.name, rc, r.output()[-4000:])
        # The agents' exit barrier ran through the round's store on
        # rdzvd, reconnected after rdzvd's restart or failover.
        assert "Error waiting on exit barrier" not in r.output(), \
            r.output()[-4000:]
    results = read_all(tmp, "result")
    assert sorted(v["rank"] for v in results.values()) == [0, 1, 2, 3], \
        results
    for v in results.values():
        assert v["world"] == 4 and v["same"], v     # DDP kept replicas equal
        assert v["last"] < v["first"], v            # it trained
    return results


def start_job(job, **kw):
    """An rdzvd and two torchruns of job training; returns (rdzvd, tmp,
    runs, {rank: start})."""
    d = S["d"] = rt.Rdzvd()
    tmp = rt.mktemp("trun-%s-" % job)
    prog = os.path.join(tmp, "train.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    runs = S["runs"] = [Torchrun(tmp, "127.0.0.1:%d" % d.port, job, prog,
                                 **kw) for _ in range(2)]
    ranks = rt.wait_until(lambda: training(tmp), timeout=120,
                          what="4 ranks training")
    return d, tmp, runs, ranks


def both_fail(runs, timeout=120):
    """Both torchruns exit non-zero; returns their outputs."""
    outs = []
    for r in runs:
        rc = r.wait(timeout)
        assert rc != 0, (r.name, r.output()[-3000:])
        outs.append(r.output())
    S.pop("runs")
    return outs


class Diag:
    """What a failed section shows: rdzvd's log and the torchruns'."""

    kind = "rdzvd"

    def diagnostics(self):
        out = []
        if "d" in S:
            out.append(S["d"].diagnostics())
        for r in S.get("runs", []):
            out.append("---- %s\n%s" % (r.name, r.output()[-4000:]))
        return "\n".join(out)


def test_registry_finds_rdzv():
    """torch's own registry, in a fresh interpreter with only the
    installed package on the path, finds `rdzv` and builds our handler."""
    code = (
        "from torch.distributed.elastic.rendezvous import registry\n"
        "from torch.distributed.elastic.rendezvous.api import "
        "RendezvousParameters\n"
        "h = registry.get_rendezvous_handler(RendezvousParameters("
        "'rdzv', '127.0.0.1:1,127.0.0.2:2', 'j', 1, 2))\n"
        "import rdzv.torchrun as t\n"
        "print(type(h).__name__, h.get_backend(), h.get_run_id(), "
        "h.use_agent_store, h.num_nodes_waiting(), h.is_closed(), "
        "t.__file__)\n")
    r = subprocess.run([compatlib.TORCH2_PY, "-c", code], env=torch_env(),
                       capture_output=True, text=True, timeout=120,
                       cwd=rt.mktemp("trun-reg-"))
    assert r.returncode == 0, r.stdout + r.stderr
    words = r.stdout.split()
    assert words[:6] == ["RdzvHandler", "rdzv", "j", "True", "0",
                         "False"], r.stdout
    assert words[6].startswith(PKG + "/"), (words[6], PKG)


@rt.needs("test_registry_finds_rdzv")
def test_native_token_and_tls():
    """rdzv.native alone against an rdzvd with a token and TLS: the
    challenge-response and the certificate check pass with the right
    token and CA (a one-node job runs, then SUCCEEDED closes it), a wrong
    token is refused for good."""
    sys.path.insert(0, PKG)
    from rdzv import native
    t = rt.make_tls_certs()
    tmp = rt.mktemp("trun-auth-")
    good, bad = os.path.join(tmp, "good"), os.path.join(tmp, "bad")
    for path, tok in ((good, "s3cret\n"), (bad, "wrong")):
        rt.secret_file(path, tok)
    d = rt.Rdzvd(["--token-file", good], tls=t)
    events = []
    lock = threading.Condition()

    def on_event(kind, arg):
        with lock:
            events.append((kind, arg))
            lock.notify_all()

    def wait_for(pred):
        with lock:
            assert lock.wait_for(lambda: any(pred(k, a) for k, a in
                                             events), 20), events

    join = ["h", "h", os.getpid(), 1, 1, 1, 0, -1, -1]
    m = native.Member([("127.0.0.1", d.port)], "auth", join, on_event,
                      token=native.load_token(good), tls_ca=t["ca"])
    m.start()
    wait_for(lambda k, a: k == "round" and a.state == native.RUNNING)
    rnd = [a for k, a in events if k == "round"][-1]
    assert rnd.group_rank == 0 and rnd.group_world_size == 1, rnd
    m.call(native.OP_SUCCEEDED, lambda node: ["auth", node, rnd.round],
           time.monotonic() + 10)
    wait_for(lambda k, a: k == "round" and a.state == native.DONE)
    m.close()
    del events[:]
    m = native.Member([("127.0.0.1", d.port)], "auth2", join, on_event,
                      token=native.load_token(bad), tls_ca=t["ca"])
    m.start()
    wait_for(lambda k, a: k == "fatal" and a.code == native.EAUTH)
    m.close()
    d.stop()


@rt.needs("test_registry_finds_rdzv")
def test_job_trains_and_is_listed():
    port = rt.free_port()
    S["d"] = d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port])
    S["tmp"] = tmp = rt.mktemp("trun-job-")
    prog = os.path.join(tmp, "train.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    eps = "127.0.0.1:%d" % d.port
    S["runs"] = runs = [Torchrun(tmp, eps, JOB, prog) for _ in range(2)]
    ranks = rt.wait_until(lambda: training(tmp), timeout=120,
                          what="4 ranks training")
    S["ranks0"] = ranks
    store_port = ranks[0]["port"]
    assert store_port != d.port, ranks
    for s in ranks.values():
        assert s["port"] == store_port and s["addr"] == "127.0.0.1" and \
            s["world"] == 4 and s["restart"] == 0 and \
            s["agent_store"] == "True", s
    r = ctl(d, "members", JOB)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "store port %d" % store_port in r.stdout, r.stdout
    lines = [ln for ln in r.stdout.splitlines() if " member " in ln]
    assert len(lines) == 2, r.stdout
    for t in runs:
        assert any(" %d " % t.pid in ln for ln in lines), (t.pid, r.stdout)
    ev = job_events(d, JOB)
    assert any(e.startswith("round 1 running: 2 nodes, world size 4")
               for e in ev), ev


@rt.needs("test_job_trains_and_is_listed")
def test_worker_sigkill_restarts():
    d, tmp, runs = S["d"], S["tmp"], S["runs"]
    old = S["ranks0"]
    victim = old[3]
    os.kill(victim["pid"], signal.SIGKILL)
    ranks = rt.wait_until(lambda: training(tmp, not_port=old[0]["port"]),
                          timeout=120, what="4 ranks training again")
    for r in (2, 3):    # the node whose worker died counts one restart
        assert ranks[r]["restart"] == 1 and \
            ranks[r]["group_rank"] == victim["group_rank"], ranks
    for s in ranks.values():
        assert s["pid"] not in {o["pid"] for o in old.values()}, \
            "torchrun restarts every worker: %r" % ranks
    st = job_status(d, JOB)
    assert "restarts 1/2" in st, st
    ev = job_events(d, JOB)
    assert any(e.startswith("failure round 1 ") for e in ev), ev
    assert any(e.startswith("round 2 running: 2 nodes, world size 4")
               for e in ev), ev
    out = "".join(t.output() for t in runs)
    assert "exitcode: -9" in out, out[-3000:]
    S["ranks1"] = ranks


@rt.needs("test_worker_sigkill_restarts")
def test_survives_rdzvd_kill9():
    d, tmp, runs = S["d"], S["tmp"], S["runs"]
    ranks = S["ranks1"]
    pids = {s["pid"] for s in ranks.values()}
    before = set(read_all(tmp, "start"))
    port = d.port
    d.kill9()
    d.start()
    assert d.port == port
    rt.wait_until(lambda: job_status(d, JOB).count(" connected") == 2,
                  timeout=30, what="both handlers reconnected")
    wait_stepping(tmp, pids)
    assert set(read_all(tmp, "start")) == before, "a worker restarted"
    st = job_status(d, JOB)
    assert st.count(" member ") == 2 and "restarts 1/2" in st, st
    # The workers' store is served again where they found it.
    assert " port %d\n" % ranks[0]["port"] in st, (st, ranks[0])
    for t in runs:
        assert "connection to rdzvd lost" in t.output(), t.output()[-3000:]


@rt.needs("test_survives_rdzvd_kill9")
def test_job_ends_0():
    d, tmp, runs = S["d"], S["tmp"], S["runs"]
    pids = {s["pid"] for s in S["ranks1"].values()}
    end_job(tmp, runs)
    assert pids <= set(read_all(tmp, "result")), "not the round-2 ranks"
    ev = job_events(d, JOB)
    assert ev[-1] == "close succeeded", ev
    r = ctl(d, "jobs")
    assert JOB in r.stdout and "succeeded" in r.stdout, r.stdout
    S.pop("runs")
    d.stop()


def test_torchrun_gives_up_closes_the_job():
    """--max_restarts 0, and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (worker
    rank 0 hosts the workers' store, torch's opt-out): a worker's SIGKILL
    and its torchrun gives up; its handler's shutdown closes the job in
    rdzvd, as torch's handlers close the rendezvous, so the other node
    ends too.  Both exit non-zero; rdzvd says why the job failed."""
    d, tmp, runs, ranks = start_job("giveup", max_restarts=0, env={
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
    for s in ranks.values():
        assert s["agent_store"] == "False" and \
            s["port"] == ranks[0]["port"], ranks
    st = job_status(d, "giveup")
    assert "restarts 0/0" in st and " port %d\n" % ranks[0]["port"] \
        not in st, st
    os.kill(ranks[1]["pid"], signal.SIGKILL)
    both_fail(runs)
    ev = job_events(d, "giveup")
    assert any(e.startswith("close failed: ") and " torchrun on " in e and
               " gave up: workers failed, no restarts left: rank " in e
               for e in ev), ev
    assert "failed" in ctl(d, "jobs").stdout
    d.stop()


def test_rdzvctl_close_ends_torchrun():
    """`rdzvctl close` of a running job: every torchrun stops its workers
    and exits non-zero on the closed rendezvous."""
    d, tmp, runs, ranks = start_job("closeme")
    r = ctl(d, "close", "closeme", "--reason", "operator says stop")
    assert r.returncode == 0, r.stdout + r.stderr
    for out in both_fail(runs):
        assert "RendezvousClosedError" in out and \
            "operator says stop" in out, out[-3000:]
    assert not children([r_.pid for r_ in runs])
    d.stop()


def test_node_joins_below_max():
    """--nnodes 1:2: one torchrun trains alone; a second one comes and
    rdzvd ends the round, the first torchrun restarts its workers as
    torchrun does for new nodes (not counted as a restart) and both train
    in a world of 4; the job ends 0."""
    d = S["d"] = rt.Rdzvd()
    tmp = rt.mktemp("trun-grow-")
    prog = os.path.join(tmp, "train.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    ep = "127.0.0.1:%d" % d.port
    conf = "lease=2,last_call_timeout=0.2"
    S["runs"] = runs = [Torchrun(tmp, ep, "grow", prog, conf=conf,
                                 nnodes="1:2")]
    alone = rt.wait_until(lambda: training(tmp, world=2), timeout=120,
                          what="one node's 2 ranks training")
    runs.append(Torchrun(tmp, ep, "grow", prog, conf=conf, nnodes="1:2"))
    ranks = rt.wait_until(lambda: training(tmp, not_port=alone[0]["port"]),
                          timeout=120, what="4 ranks training")
    for s in ranks.values():
        assert s["restart"] == 0 and s["world"] == 4, ranks
    assert {ranks[r]["group_rank"] for r in (0, 1)} == {0}, ranks
    st = job_status(d, "grow")
    assert "restarts 0/2" in st and st.count(" member ") == 2, st
    ev = job_events(d, "grow")
    assert any(e.startswith("round 1 ended: a node joined below max")
               for e in ev), ev
    end_job(tmp, runs)
    S.pop("runs")
    d.stop()


def test_etcd_leader_lost():
    """Three rdzvds on a three-member etcd; the job's torchruns are given
    all three: the leader is killed mid-job, the handlers follow the new
    leader, no worker restarts, both exit 0."""
    from etcd_lib import ETCD, EtcdCluster, etcd_trio
    if not os.access(ETCD, os.X_OK):
        rt.skip("etcd is not installed (scripts/deps.sh installs Debian's "
                "etcd-server)")
    etcd = EtcdCluster(3)
    leader, standbys = etcd_trio(etcd, timeout=30)
    ds = [leader] + standbys
    S["d"] = leader
    tmp = rt.mktemp("trun-etcd-")
    prog = os.path.join(tmp, "train.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    eps = ",".join(x.endpoint for x in ds)
    S["runs"] = runs = [Torchrun(tmp, eps, "ha", prog, conf="lease=5")
                        for _ in range(2)]
    ranks = rt.wait_until(lambda: training(tmp), timeout=120,
                          what="4 ranks training")
    pids = {s["pid"] for s in ranks.values()}
    ds[0].kill9()
    new = []

    def leading():
        for x in ds[1:]:
            if os.path.exists(x.port_file):
                new.append(x)
                return True
        return False
    rt.wait_until(leading, 30, 0.02, "a standby leading")
    lead = new[0]
    lead.wait_ready()
    S["d"] = lead
    rt.wait_until(lambda: job_status(lead, "ha").count(" connected") == 2,
                  timeout=30, what="both handlers on the new leader")
    wait_stepping(tmp, pids)
    end_job(tmp, runs)
    assert set(read_all(tmp, "start")) == pids, "a worker restarted"
    ev = job_events(lead, "ha")
    assert not any(e.startswith("restart ") for e in ev), ev
    assert ev[-1] == "close succeeded", ev
    S.pop("runs")
    for x in ds[1:]:
        x.stop()


if __name__ == "__main__":
    if not os.path.exists(os.path.join(rt.top_builddir(), "client",
                                       "rdzvctl")):
        rt.skip_all("client/rdzvctl not built")
    rt.main(globals(), per_test=240, total=900, sections=True,
            server=Diag())
