# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent hosts the rendezvous where torchrun's agent would (issue 11):
a static rendezvous (--node_rank/--master_addr/--master_port and Kubeflow's
PET_* forms) hosted by node rank 0 even when it starts last, group rank =
node rank; c10d with an endpoint on this host (is_host); the host killed
is reported clearly by the other node, which exits; the environment's
python (a venv first on PATH, PYTHON_EXEC over it); etcd refused; torchrun's
--rdzv_conf keys; and a fresh job for every srun step of one allocation."""
import os
import subprocess
import sys

import rdzvtest as rt
from agent_lib import Scope, agent_path, assert_gone, starts, wait_starts


def clean_env(extra=None):
    """The environment without launcher variables, plus extra."""
    e = dict(os.environ)
    for k in list(e):
        if k.startswith(("PET_", "SLURM_", "TORCHELASTIC_")) or \
                k in ("PYTHON", "PYTHON_EXEC"):
            del e[k]
    e.update(extra or {})
    return e


def dry(args, env=None):
    """--dry_run's configuration as a dict; asserts exit 0."""
    p = subprocess.run([agent_path(), "--dry_run"] + list(args) + ["p.py"],
                       env=clean_env(env), timeout=10,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return dict(line.split("=", 1) for line in p.stdout.splitlines()
                if "=" in line and not line.startswith("env["))


def refused(args, env=None):
    p = subprocess.run([agent_path()] + list(args) + ["p.py"],
                       env=clean_env(env), timeout=10,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 2, (args, p.returncode, p.stderr)
    return p.stderr


def node_env(node, extra=None):
    """Marks the agent's workers with their node (recorded as RDZV_*)."""
    e = {"RDZV_TEST_NODE": str(node), "W_STORE": "1", "W_RUN": "0"}
    e.update(extra or {})
    return e


def check_static_world(tmp, nnodes, nproc):
    """Every rank started once, group rank = node rank, one store."""
    st = starts(tmp)
    assert len(st) == nnodes * nproc, st
    for i in st:
        node = int(i["RDZV_TEST_NODE"])
        assert i["GROUP_RANK"] == str(node), i
        assert int(i["RANK"]) == node * nproc + int(i["LOCAL_RANK"]), i
        assert i["WORLD_SIZE"] == str(nnodes * nproc), i
        assert i["MASTER_ADDR"] == "127.0.0.1", i
    assert sorted(int(i["RANK"]) for i in st) == \
        list(range(nnodes * nproc))
    assert len({i["MASTER_PORT"] for i in st}) == 1, st
    for r in range(nnodes * nproc):
        with open(os.path.join(tmp, "store.%s.%d" % (st[0]["RDZV_JOB"],
                                                     r))) as f:
            got = f.read()
        assert '"count": %d' % (nnodes * nproc) in got, got


def test_static_node0_last():
    """Node rank 1 waits for a rendezvous nobody hosts yet; node rank 0,
    started after it has tried, hosts it on --master_port."""
    port = rt.free_port()
    with Scope() as s:
        args = ["--nnodes", "2", "--nproc_per_node", "2", "--master_addr",
                "127.0.0.1", "--master_port", str(port)]
        a1 = s.agent(args + ["--node_rank", "1", "-v"], env=node_env(1))
        rt.wait_until(lambda: "Connection refused" in a1.output(),
                      timeout=10, what="node rank 1 finding nobody there")
        a0 = s.agent(args + ["--node-rank", "0"], env=node_env(0))
        assert a0.wait(30) == 0, a0.output()
        assert a1.wait(30) == 0, a1.output()
        assert "hosting the static rendezvous" in a0.output(), a0.output()
        assert "hosting" not in a1.output(), a1.output()
        check_static_world(s.tmp, 2, 2)


def test_static_pet_forms():
    """Kubeflow Trainer v2: nothing on the command line but the program."""
    port = rt.free_port()
    with Scope() as s:
        agents = []
        for node in (1, 0):
            agents.append(s.agent([], env=node_env(node, {
                "PET_NNODES": "2", "PET_NPROC_PER_NODE": "2",
                "PET_NODE_RANK": str(node), "PET_MASTER_ADDR": "127.0.0.1",
                "PET_MASTER_PORT": str(port)})))
        for a in agents:
            assert a.wait(30) == 0, a.output()
        check_static_world(s.tmp, 2, 2)


def c10d_pair(s, port):
    """Two c10d agents of one job on port; None when neither could host
    it (another process of the machine took the free port first: both
    say "cannot host" and would wait on it)."""
    args = ["--nnodes", "2", "--nproc_per_node", "2", "--rdzv_backend",
            "c10d", "--rdzv_endpoint", "127.0.0.1:%d" % port,
            "--rdzv_id", "c10djob", "--rdzv_conf", "last_call_timeout=0.2"]
    agents = [s.agent(args, env={"W_STORE": "1", "W_RUN": "0"})
              for _ in range(2)]
    said = rt.wait_until(lambda: [a for a in agents if "hosting the c10d "
                                  "rendezvous" in a.output()] or
                         all("cannot host" in a.output() for a in agents),
                         timeout=30, what="an agent hosting the rendezvous")
    if said is True:
        for a in agents:
            a.kill()
        return None
    return agents


def test_c10d_is_host():
    """c10d with an endpoint on this host and nothing there: one agent
    hosts it, the other finds the port taken and joins."""
    with Scope() as s:
        for _ in range(3):
            agents = c10d_pair(s, rt.free_port())
            if agents is not None:
                break
        assert agents is not None, "every free port was taken at once"
        for a in agents:
            assert a.wait(30) == 0, a.output()
        hosts = [a for a in agents
                 if "hosting the c10d rendezvous" in a.output()]
        assert len(hosts) == 1, [a.output() for a in agents]
        st = starts(s.tmp)
        assert sorted(int(i["RANK"]) for i in st) == [0, 1, 2, 3], st
        assert {i["WORLD_SIZE"] for i in st} == {"4"}, st
        # is_host=false: never hosts, so nothing is there to join.
        a = s.agent(["--nnodes", "1", "--rdzv_backend", "c10d",
                     "--rdzv_endpoint", "127.0.0.1:%d" % rt.free_port(),
                     "--rdzv_conf", "is_host=false,join_timeout=1"])
        assert a.wait(30) == 1, a.output()
        assert "hosting" not in a.output() and \
            "join timeout" in a.output(), a.output()


def test_host_killed_reported():
    """Node rank 0's agent is killed: node rank 1 says its static
    rendezvous is gone and why, stops its workers and exits 1."""
    port = rt.free_port()
    with Scope() as s:
        args = ["--nnodes", "2", "--nproc_per_node", "1", "--master_port",
                str(port), "--grace", "1", "--rdzv_conf", "read_timeout=2"]
        a0 = s.agent(args + ["--node_rank", "0"],
                     env={"RDZV_TEST_NODE": "0"})
        a1 = s.agent(args + ["--node_rank", "1"],
                     env={"RDZV_TEST_NODE": "1"})
        wait_starts(s.tmp, lambda st: len(st) == 2, timeout=20)
        a0.kill()
        assert a1.wait(30) == 1, a1.output()
        out = a1.output()
        assert "static rendezvous of node rank 0's rdzv-agent" in out, out
        assert "its host is gone" in out and "run rdzvd" in out, out
        assert "FAILED" in out, out      # the summary names the cause
        assert_gone(s.tmp)


def test_venv_python():
    """No PYTHON: the first python3 on PATH (a venv's, kept as the venv's
    link), and PYTHON_EXEC (torchrun's) over PYTHON over PATH."""
    with Scope() as s:
        venv = os.path.join(s.tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv],
                       check=True, timeout=60)
        prog = os.path.join(s.tmp, "which.py")
        with open(prog, "w") as f:
            f.write("import sys\nopen(sys.argv[1] + '/prefix', 'w')"
                    ".write(sys.prefix)\n")
        path = os.path.join(venv, "bin") + ":" + os.environ.get(
            "PATH", "/usr/bin:/bin")
        a = s.agent([], env={"PATH": path, "PYTHON": "", "PYTHON_EXEC": ""},
                    program=[prog, s.tmp])
        assert a.wait(30) == 0, a.output()
        with open(os.path.join(s.tmp, "prefix")) as f:
            assert os.path.samefile(f.read(), venv)
    c = dry([], {"PATH": path})
    assert c["command"].startswith(os.path.join(venv, "bin", "python3")), c
    c = dry([], {"PATH": path, "PYTHON": "/opt/py"})
    assert c["command"].startswith("/opt/py -u"), c
    c = dry([], {"PATH": path, "PYTHON": "/opt/py", "PYTHON_EXEC": "/x/py"})
    assert c["command"].startswith("/x/py -u"), c
    err = refused([], {"PATH": os.path.join(s.tmp, "nowhere")})
    assert "no python3 on PATH" in err, err


def test_etcd_refused_and_modes():
    for b in ("etcd", "etcd-v2"):
        err = refused(["--rdzv_backend", b, "--rdzv_endpoint", "h:2379",
                       "--nnodes", "2"])
        for word in ("etcd", "c10d", "static", "rdzvd"):
            assert word in err, (b, err)
    assert "unknown" in refused(["--rdzv_backend", "zk"])
    # torchrun's default is static; MIN:MAX needs c10d, ranks < nnodes.
    c = dry(["--nnodes", "2", "--node_rank", "1"])
    assert c["rdzv_backend"] == "static" and c["node_rank"] == "1", c
    assert c["rdzv_endpoint"] == "127.0.0.1:29500", c
    assert "fixed --nnodes" in refused(["--nnodes", "1:2", "--node_rank",
                                        "0", "--master_port", "1"])
    assert "not below" in refused(["--nnodes", "2", "--node_rank", "2"])
    # An endpoint alone is rdzvd (as always); with --node_rank static.
    c = dry(["--nnodes", "2", "--rdzv_endpoint", "h:5"])
    assert c["rdzv_backend"] == "rdzv" and c["reconnect_timeout"] == \
        "300.000", c
    c = dry(["--nnodes", "2", "--rdzv_endpoint", "h:5", "--node_rank", "1"])
    assert c["rdzv_backend"] == "static", c
    c = dry(["--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
             "h:5"])
    assert c["rdzv_backend"] == "c10d" and c["is_host"] == "-1", c
    assert c["reconnect_timeout"] == "60.000", c


def test_rdzv_conf_torchrun_keys():
    c = dry(["--rdzv_endpoint", "h:5", "--nnodes", "2", "--rdzv_conf",
             "keep_alive_interval=2,keep_alive_max_attempt=4"])
    assert c["heartbeat"] == "2.000" and c["lease"] == "8.000", c
    c = dry(["--rdzv_endpoint", "h:5", "--nnodes", "2", "--rdzv_conf",
             "heartbeat_timeout=7,read_timeout=9,close_timeout=3,"
             "timeout=100,is_host=f"])
    assert c["lease"] == "7.000" and c["reconnect_timeout"] == "9.000", c
    assert c["close_timeout"] == "3.000" and c["is_host"] == "0", c
    assert c["join_timeout"] == "100.000", c
    c = dry(["--rdzv_endpoint", "h:5", "--nnodes", "2", "--rdzv_conf",
             "timeout=100,join_timeout=5,lease=4,keep_alive_interval=1"])
    assert c["join_timeout"] == "5.000" and c["lease"] == "4.000", c
    assert c["heartbeat"] == "1.000", c
    p = subprocess.run([agent_path(), "--dry_run", "--rdzv_conf",
                        "store_type=tcp,use_libuv=1", "p.py"],
                       env=clean_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=10)
    assert p.returncode == 0 and "nothing to choose" in p.stderr, p.stderr
    assert "unknown key" not in p.stderr, p.stderr
    assert "is not a boolean" in refused(["--rdzv_conf", "is_host=maybe"])


def test_slurm_steps_get_fresh_jobs():
    """Two srun steps of one allocation (same SLURM_JOB_ID) against one
    rdzvd: the second is a new job, not the first one's closed one."""
    d = rt.Rdzvd()
    with Scope() as s:
        for step in ("0", "1"):
            a = s.agent(["--rdzv_endpoint", "127.0.0.1:%d" % d.port],
                        env={"SLURM_JOB_ID": "4711", "SLURM_NNODES": "1",
                             "SLURM_STEP_ID": step, "W_RUN": "0"})
            assert a.wait(30) == 0, a.output()
        assert sorted(i["RDZV_JOB"] for i in starts(s.tmp)) == \
            ["4711.0", "4711.1"]
    assert dry(["--rdzv_endpoint", "h:5"], {"SLURM_JOB_ID": "9",
                                            "SLURM_STEP_ID": "2"})[
        "rdzv_id"] == "9.2"
    # A requeued job (same id, steps from 0 again) is not the old run's.
    for rc, want in (("0", "9.2"), ("1", "9.2.r1"), ("12", "9.2.r12")):
        assert dry(["--rdzv_endpoint", "h:5"], {
            "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2",
            "SLURM_RESTART_COUNT": rc})["rdzv_id"] == want, (rc, want)
    d.stop()


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    rt.main(globals(), per_test=40, total=170)
