# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent on one node: the command line (both spellings, PET_*, SLURM_*,
--dry_run), --standalone runs with the embedded rdzvd, the worker
environment, prefixed console output, --log_dir/--redirects/--tee, the
failure summary with torch's error file, signals and the grace period,
and no worker left behind when the agent is killed."""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import time

import rdzvtest as rt
from agent_lib import Scope, agent_path, assert_gone, starts, wait_starts


def run(args, env=None, timeout=10):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("PET_") or k.startswith("SLURM_") or \
                k in ("CUDA_VISIBLE_DEVICES", "PYTHON", "PYTHON_EXEC"):
            del e[k]
    if env:
        e.update(env)
    p = subprocess.run([agent_path()] + list(args), env=e, timeout=timeout,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


# With neither PYTHON_EXEC nor PYTHON, the first python3 on PATH.
PY3 = shutil.which("python3")


def config(args, env=None):
    rc, out, err = run(["--dry_run"] + list(args), env)
    assert rc == 0, (rc, out, err)
    cfg, envs = {}, {}
    for line in out.splitlines():
        m = re.match(r"env\[(\d+)\] ([A-Z_0-9]+)=(.*)", line)
        if m:
            envs.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
        elif "=" in line:
            k, v = line.split("=", 1)
            cfg[k] = v
    return cfg, envs


def test_help_and_version():
    rc, out, _ = run(["--help"])
    assert rc == 0
    for opt in ("--nproc_per_node", "--rdzv_endpoint", "--rdzv_conf",
                "last_call_timeout", "--grace", "--gpus_per_worker",
                "--standalone", "PET_"):
        assert opt in out, opt
    rc, out, _ = run(["--version"])
    assert rc == 0 and out.startswith("rdzv-agent ")


def test_both_spellings_and_pet():
    a, _ = config(["--nnodes", "2:4", "--nproc_per_node", "3",
                   "--rdzv_endpoint", "h:1234", "--rdzv_id", "j",
                   "--max_restarts", "5", "--log_dir", "/x",
                   "--rdzv_conf", "last_call_timeout=0.25,lease=2,"
                   "join_timeout=7,timeout=900", "p.py", "arg"])
    b, _ = config(["--nnodes=2:4", "--nproc-per-node=3",
                   "--rdzv-endpoint", "h:1234", "--rdzv-id=j",
                   "--max-restarts", "5", "--log-dir", "/x",
                   "--rdzv-conf", "last_call_timeout=0.25,lease=2,"
                   "join_timeout=7,timeout=900", "--", "p.py", "arg"])
    assert a == b, (a, b)
    assert a["nnodes"] == "2:4" and a["nproc_per_node"] == "3"
    assert a["rdzv_endpoint"] == "h:1234" and a["master_addr"] == "h"
    assert a["last_call_timeout"] == "0.250" and a["lease"] == "2.000"
    assert a["heartbeat"] == "0.500", a   # lease / 4
    assert a["join_timeout"] == "7.000"
    assert a["command"] == "%s -u p.py arg" % PY3
    # PET_* fills what the command line leaves, and loses to it.
    c, _ = config(["--nproc_per_node", "2", "p.py"],
                  {"PET_NNODES": "1:3", "PET_NPROC_PER_NODE": "5",
                   "PET_RDZV_ENDPOINT": "[::1]:99", "PET_MAX_RESTARTS": "4",
                   "PET_NO_PYTHON": "1"})
    assert c["nnodes"] == "1:3" and c["nproc_per_node"] == "2", c
    assert c["rdzv_endpoint"] == "[::1]:99" and c["master_addr"] == "::1"
    assert c["max_restarts"] == "4" and c["command"] == "p.py", c
    # Slurm: the job id and node count, below PET_ and the command line.
    d, _ = config(["--rdzv_endpoint", "n1", "p.py"],
                  {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "3"})
    assert d["rdzv_id"] == "4242" and d["nnodes"] == "3:3", d
    assert d["rdzv_endpoint"] == "n1:29400", d
    e, _ = config(["--rdzv_endpoint", "n1", "--rdzv_id", "mine", "p.py"],
                  {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "3",
                   "PET_NNODES": "2:5"})
    assert e["rdzv_id"] == "mine" and e["nnodes"] == "2:5", e


def test_command_resolution():
    c, _ = config(["-m", "pkg.mod", "x"], {"PYTHON": "/opt/py"})
    assert c["command"] == "/opt/py -u -m pkg.mod x", c
    c, _ = config(["--no-python", "./bin", "-m", "--flag"])
    assert c["command"] == "./bin -m --flag", c
    c, _ = config(["--run_path", "s.py"])
    assert c["command"] == "%s -u s.py" % PY3, c
    rc, _, err = run(["--no_python", "-m", "x"])
    assert rc == 2 and "cannot be used together" in err, err
    rc, _, err = run(["--nproc_per_node", "2"])
    assert rc == 2 and "missing the program" in err, err


def test_standalone_defaults():
    # No endpoint and one node: the embedded rdzvd, a fresh id.
    c, _ = config(["p.py"])
    assert c["standalone"] == "1" and c["nnodes"] == "1:1"
    assert re.fullmatch(r"[0-9a-f-]{36}", c["rdzv_id"]), c
    c2, _ = config(["p.py"])
    assert c2["rdzv_id"] != c["rdzv_id"]
    rc, _, err = run(["--nnodes", "2:3", "--rdzv_backend", "rdzv", "p.py"])
    assert rc == 2 and "--rdzv_endpoint" in err, err
    c, _ = config(["--master_addr", "m", "--master_port", "1234",
                   "--nnodes", "2", "p.py"])
    assert c["rdzv_endpoint"] == "m:1234" and c["standalone"] == "0", c


def test_bad_options():
    for args in (["--nnodes", "3:2", "p"], ["--nnodes", "x", "p"],
                 ["--nproc_per_node", "0", "p"], ["--tee", "7", "p"],
                 ["--redirects", "0:9", "p"], ["--rdzv_conf", "lease", "p"],
                 ["--rdzv_conf", "lease=-1", "p"], ["--grace", "abc", "p"],
                 ["--rdzv_endpoint", "a:b:c", "--nnodes", "2", "p"],
                 ["--no-such-option", "p"]):
        rc, _, err = run(args)
        assert rc == 2, (args, rc, err)
        assert err.strip(), args
    rc, _, err = run(["--nproc_per_node", "4"], {"PET_STANDALONE": "maybe"})
    assert rc == 2, err


def test_rdzv_id_printable_without_spaces():
    """A job id with a space, a control character or a non-ASCII byte is
    a usage error naming --rdzv_id, the character's position and what it
    is, before anything starts.  torchrun's parser takes any string, but
    rdzvd has always refused such an id at JOIN (a vague failure after
    the agent started), and the repair channel's round message carries it
    in a space-separated word.  Ids real jobs use (Slurm's, k8s names,
    uuids, paths) are untouched."""
    for bad, pos, what in (("a b", 2, "a space"),
                           (" lead", 1, "a space"),
                           ("job\t7", 4, "a tab (0x09)"),
                           ("job\n7", 4, "a newline (0x0a)"),
                           ("x\x01", 2, "a control character (0x01)"),
                           ("x\x7f", 2, "a control character (0x7f)"),
                           ("j\u00f6b", 2, "byte 0xc3, not ASCII")):
        for args, env in ((["--rdzv_id", bad], None),
                          (["--rdzv-id=" + bad], None),
                          ([], {"PET_RDZV_ID": bad})):
            rc, out, err = run(["--dry_run"] + args + ["p.py"], env)
            assert rc == 2 and "rdzv_id=" not in out, (bad, rc, out, err)
            assert ("character %d is %s;" % (pos, what)) in err, (bad, err)
            assert err.startswith("rdzv-agent: --rdzv_id \"") and \
                err.count("\n") == 1, err
    # The id is shown with its unprintable bytes escaped.
    rc, _, err = run(["--dry_run", "--rdzv_id", "x\x01", "p.py"])
    assert '--rdzv_id "x\\x01"' in err, err
    for good in ("1234.0", "job/7", "mlp-fashion-3f1c", "a:b@c_d~e",
                 "$(JOB)", "0d9f0c6e-3f43-4b4b-9d0e-6c1f2f6a0b1e",
                 "x" * 200):
        c, _ = config(["--rdzv_id", good, "p.py"])
        assert c["rdzv_id"] == good, (good, c)


def test_std_mapping_and_gpus():
    c, _ = config(["--tee", "0:3,1:2", "-r", "1", "p"])
    assert c["tee"] == "0:3,1:2" and c["redirects"] == "1", c
    # --nproc_per_node counts what CUDA_VISIBLE_DEVICES leaves visible.
    c, envs = config(["--nproc_per_node", "gpu", "--gpus_per_worker", "1",
                      "p"], {"CUDA_VISIBLE_DEVICES": "3,5,6,7"})
    assert c["nproc_per_node"] == "4", c
    assert [envs[i]["CUDA_VISIBLE_DEVICES"] for i in range(4)] == \
        ["3", "5", "6", "7"], envs
    c, envs = config(["--nproc_per_node", "2", "--gpus-per-worker", "2",
                      "p"], {"CUDA_VISIBLE_DEVICES": "3,5,6,7"})
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == "3,5", envs[0]
    assert envs[1]["CUDA_VISIBLE_DEVICES"] == "6,7", envs[1]
    rc, _, err = run(["--nproc_per_node", "3", "--gpus_per_worker", "2",
                      "p"], {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert rc == 2 and "GPUs" in err, err
    rc, _, err = run(["--nproc_per_node", "gpu", "p"],
                     {"CUDA_VISIBLE_DEVICES": ""})
    assert rc == 2 and "no GPU" in err, err
    c, _ = config(["--nproc_per_node", "cpu", "p"])
    assert c["nproc_per_node"] == str(os.cpu_count()), c
    c, _ = config(["--nproc_per_node", "auto", "p"],
                  {"CUDA_VISIBLE_DEVICES": ""})
    assert c["nproc_per_node"] == str(os.cpu_count()), c


def test_standalone_run_env_and_console():
    with Scope() as s:
        a = s.agent(["--nproc_per_node", "2", "--rdzv_id", "basic"],
                    env={"W_RUN": "0", "OMP_NUM_THREADS": ""})
        assert a.wait(20) == 0, a.output()
        out = a.output()
        st = starts(s.tmp)
        assert len(st) == 2, st
        ranks = sorted(int(i["RANK"]) for i in st)
        assert ranks == [0, 1]
        for i in st:
            r = i["RANK"]
            assert i["LOCAL_RANK"] == r and i["ROLE_RANK"] == r
            assert i["GROUP_RANK"] == "0" and i["ROLE_NAME"] == "default"
            assert i["WORLD_SIZE"] == "2" and i["LOCAL_WORLD_SIZE"] == "2"
            assert i["GROUP_WORLD_SIZE"] == "1"
            assert i["ROLE_WORLD_SIZE"] == "2"
            assert i["MASTER_ADDR"] == "127.0.0.1"
            assert 0 < int(i["MASTER_PORT"]) < 65536
            assert i["TORCHELASTIC_RESTART_COUNT"] == "0"
            assert i["TORCHELASTIC_MAX_RESTARTS"] == "0"
            assert i["TORCHELASTIC_RUN_ID"] == "basic"
            assert i["TORCHELASTIC_USE_AGENT_STORE"] == "True"
            assert i["TORCHELASTIC_ERROR_FILE"].endswith(
                "/attempt_0/%s/error.json" % r), i
            assert i["TORCHELASTIC_ERROR_FILE"].startswith(s.tmp), i
            assert i["NCCL_ASYNC_ERROR_HANDLING"] == "1"
            assert i["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
            assert i["RDZV_JOB"] == "basic" and i["RDZV_ROUND"] == "1"
            assert i["RDZV_NAMESPACE"] == "job/basic/round/1", i
            assert re.fullmatch(r"127\.0\.0\.1:\d+", i["RDZV_ENDPOINT"])
            assert i["RDZV_NODE_ID"] == "1"
            # OMP_NUM_THREADS="" counts as set: torchrun only fills unset.
            assert i["OMP_NUM_THREADS"] == "", i
        assert "[default0]:worker rank 0 restart 0 up" in out, out
        assert "[default1]:worker rank 1 restart 0 up" in out, out
        assert "[default1]:rank 1 err" in out, out
        # The temporary log directory is gone with the agent.
        assert not glob.glob(os.path.join(s.tmp, "rdzv-agent-*")), \
            os.listdir(s.tmp)


def test_omp_default_and_user_env_kept():
    with Scope() as s:
        env = {"W_RUN": "0", "NCCL_ASYNC_ERROR_HANDLING": "0",
               "RANK": "99"}
        a = s.agent(["--nproc-per-node", "2"], env=env)
        e = dict(os.environ)
        assert a.wait(20) == 0, a.output()
        for i in starts(s.tmp):
            assert i["NCCL_ASYNC_ERROR_HANDLING"] == "0"
            assert i["RANK"] in ("0", "1")   # ours, not the agent's
            if "OMP_NUM_THREADS" not in e:
                assert i["OMP_NUM_THREADS"] == "1", i


def test_log_dir_redirects_tee():
    with Scope() as s:
        logs = os.path.join(s.tmp, "logs", "deep")
        a = s.agent(["--nproc_per_node", "2", "--rdzv_id", "lj",
                     "--log_dir", logs, "--redirects", "1",
                     "--tee", "0:2"], env={"W_RUN": "0"})
        assert a.wait(20) == 0, a.output()
        out = a.output()
        runs = glob.glob(os.path.join(logs, "lj_*"))
        assert len(runs) == 1, runs
        att = os.path.join(runs[0], "attempt_0")
        with open(os.path.join(att, "0", "stdout.log")) as f:
            assert "worker rank 0 restart 0 up" in f.read()
        with open(os.path.join(att, "1", "stdout.log")) as f:
            assert "worker rank 1 restart 0 up" in f.read()
        with open(os.path.join(att, "0", "stderr.log")) as f:
            assert f.read() == "rank 0 err\n"
        assert not os.path.exists(os.path.join(att, "1", "stderr.log"))
        # stdout went to the files only; rank 0's stderr to both.
        assert "worker rank" not in out, out
        assert "[default0]:rank 0 err" in out
        assert "[default1]:rank 1 err" in out
        # --log_dir is the user's: kept.
        assert os.path.isdir(att)


def test_failure_summary_with_error_file():
    with Scope() as s:
        logs = os.path.join(s.tmp, "logs")
        a = s.agent(["--nproc_per_node", "2", "--max_restarts", "1",
                     "--log_dir", logs, "--grace", "1"],
                    env={"W_EXIT": "0:1:3,1:1:3", "W_ERRFILE": "1"})
        rc = a.wait(20)
        out = a.output()
        assert rc == 1, (rc, out)
        restarts = sorted(set(int(i["TORCHELASTIC_RESTART_COUNT"])
                              for i in starts(s.tmp)))
        assert restarts == [0, 1], restarts
        assert "FAILED" in out and "Root Cause" in out, out
        assert "rank      : 1 (local_rank: 1)" in out, out
        assert "exitcode  : 3 (pid: " in out, out
        # JSON escapes decoded: a quote, U+00E9, a surrogate pair.
        assert 'message   : ValueError: rank 1 broke "\u00e9\U0001F600"' \
            in out, out
        assert "traceback : Traceback: line 1" in out, out
        assert "1 restarts used of 1" in out, out
        ef = glob.glob(os.path.join(logs, "*", "attempt_1", "1",
                                    "error.json"))
        assert len(ef) == 1 and "error_file: %s" % ef[0] in out, (ef, out)
        with open(ef[0]) as f:
            assert json.load(f)["message"]["message"].startswith(
                "ValueError")


def test_signal_failure_summary():
    with Scope() as s:
        a = s.agent(["--nproc_per_node", "2", "--grace", "1"])
        st = wait_starts(s.tmp, lambda l: len(l) == 2)
        victim = [i for i in st if i["RANK"] == "1"][0]["pid"]
        os.kill(victim, signal.SIGKILL)
        rc = a.wait(20)
        out = a.output()
        assert rc == 1, (rc, out)
        assert "exitcode  : -9 (pid: %d)" % victim in out, out
        assert "signal    : 9 (SIGKILL)" in out, out
        assert "signal 9" in out    # rdzvd's root cause


def test_exec_failure():
    with Scope() as s:
        a = s.agent(["--no_python"], program=[os.path.join(s.tmp, "nope"),
                                              s.tmp])
        rc = a.wait(20)
        out = a.output()
        assert rc == 1, (rc, out)
        assert "cannot run" in out and "exitcode  : 127" in out, out


def test_sigterm_and_sigint_forwarded():
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130),
                      (signal.SIGHUP, 129)):
        with Scope() as s:
            a = s.agent(["--nproc_per_node", "2"], env={"W_TRAPTERM": "1"})
            wait_starts(s.tmp, lambda l: len(l) == 2)
            a.signal(sig)
            rc = a.wait(10)
            assert rc == code, (sig, rc, a.output())
            terms = [n for n in os.listdir(s.tmp) if n.startswith("term.")]
            if sig == signal.SIGTERM:
                # Forwarded as is: both workers saw SIGTERM.
                assert len(terms) == 2, terms
            else:
                assert terms == [], terms


def test_grace_then_sigkill():
    with Scope() as s:
        a = s.agent(["--nproc_per_node", "2", "--grace", "0.5"],
                    env={"W_IGNTERM": "1"})
        wait_starts(s.tmp, lambda l: len(l) == 2)
        rc, dt = a.term(10)
        assert rc == 143, (rc, a.output())
        assert 0.4 < dt < 3.0, dt
        assert "SIGKILL" in a.output()


def test_agent_sigkill_leaves_no_worker():
    with Scope() as s:
        a = s.agent(["--nproc_per_node", "3"])
        st = wait_starts(s.tmp, lambda l: len(l) == 3)
        pids = [i["pid"] for i in st]
        assert sorted(a.children()) == sorted(pids)
        for p in pids:      # each worker leads its own process group
            assert os.getpgid(p) == p
        t0 = time.monotonic()
        a.kill()
        assert_gone(s.tmp, timeout=1.0)
        print("  workers gone %.0f ms after SIGKILL of the agent" %
              ((time.monotonic() - t0) * 1000))


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    rt.main(globals(), per_test=40, total=170)
