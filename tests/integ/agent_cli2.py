# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent takes torchrun 2.13's command line, signals and console habits
(issue 11, part B), checked against the real torchrun of the torch 2.13
virtualenv: every option of its --help is accepted in both spellings and as
PET_*; SIGUSR1, SIGUSR2 and what --signals_to_handle names reach every
worker (not a worker's own children) and the job goes on; a worker sees the
agent's terminal as a terminal (a pty here) and no prefix; the line prefix
template (torch's placeholders, ${hostname}) matches string.Template's;
--local_ranks_filter; --shutdown_timeout as the grace; --virtual_local_rank
and --gpus_per_worker give LOCAL_RANK 0; the failure summary has torchrun's
layout, line for line, and the root cause's error file reaches the agent's
own TORCHELASTIC_ERROR_FILE as torchrun's does.

Every run is --standalone: no rdzvd is needed.  The file runs under the
torch 2.13 python (compatlib.use_torch2), which also runs the workers."""
import glob
import json
import os
import re
import signal
import socket
import string
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "compat"))
import compatlib  # noqa: E402

compatlib.use_torch2()

import rdzvtest as rt  # noqa: E402
from agent_lib import Scope as _Scope, agent_path  # noqa: E402

# The workers: argv[1] is the test's directory, argv[2] the mode.
#   signals  trap SIGUSR1, SIGUSR2, SIGWINCH (record each); a forked child
#            keeps the default dispositions; exit 0 once all three came,
#            recording whether the child is still alive
#   print    isatty of stdout and stderr, a "\r" progress bar, a stderr line
#   fail     rank 1 exits 3 (writing torch's error file when W_ERRFILE=1);
#            the others wait to be stopped
#   ignterm  ignore SIGTERM, wait to be killed
#   env      record LOCAL_RANK, RDZV_LOCAL_RANK, CUDA_VISIBLE_DEVICES
#   affinity record the CPUs the worker may run on
WORKER = r'''
import json, os, signal, sys, time
d, mode = sys.argv[1], sys.argv[2]
env = os.environ
rank = int(env["RANK"])

def record(name, obj):
    tmp = os.path.join(d, ".%s.tmp" % name)
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, os.path.join(d, name))

if mode == "signals":
    want = {signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH}
    got = set()
    def on(s, f):
        got.add(s)
    for s in want:
        signal.signal(s, on)
    child = os.fork()
    if child == 0:
        for s in want:
            signal.signal(s, signal.SIG_DFL)
        time.sleep(120)
        os._exit(0)
    record("ready.%d" % rank, {"pid": os.getpid(), "child": child})
    end = time.time() + 60
    while got != want and time.time() < end:
        time.sleep(0.02)
    alive = os.waitpid(child, os.WNOHANG) == (0, 0)
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    record("sigs.%d" % rank, {"got": sorted(int(s) for s in got),
                              "child_alive": alive})
    sys.exit(0 if got == want else 1)
elif mode == "print":
    # One write per line: unbuffered print() writes the text and its
    # newline apart, and two ranks sharing the agent's stream (no prefix)
    # could interleave them ("isatty 0 0isatty 0 0").
    sys.stdout.write("isatty %d %d\n" % (os.isatty(1), os.isatty(2)))
    sys.stdout.flush()
    sys.stdout.write("bar 1\rbar 2\rdone %d\n" % rank)
    sys.stdout.flush()
    sys.stderr.write("err of %d\n" % rank)
    sys.stderr.flush()
elif mode == "fail":
    if rank == 1:
        time.sleep(0.2)
        if env.get("W_ERRFILE") == "1":
            with open(env["TORCHELASTIC_ERROR_FILE"], "w") as f:
                json.dump({"message": {"message": "ValueError: rank 1 broke",
                    "extraInfo": {"py_callstack": "Traceback (most recent "
                    "call last):\n  File \"w.py\", line 1\nValueError: "
                    "rank 1 broke", "timestamp": str(int(time.time()))}}}, f)
        sys.exit(3)
    time.sleep(120)
elif mode == "ignterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record("ready.%d" % rank, {})
    time.sleep(120)
elif mode == "affinity":
    record("aff.%d" % rank, sorted(os.sched_getaffinity(0)))
elif mode == "env":
    record("env.%d" % rank, {k: env.get(k) for k in ("LOCAL_RANK",
        "RDZV_LOCAL_RANK", "CUDA_VISIBLE_DEVICES")})
'''

TEMPLATE = "[${hostname} ${rank}/$local_rank ${role_name}] $$ ${nope} $"


def clean(out):
    """No sanitizer report (the ASan build) in an agent's output."""
    assert "Sanitizer" not in out and "runtime error:" not in out, out
    return out


class Scope(_Scope):
    """agent_lib's, checking every agent's output for sanitizer reports."""

    def close(self):
        for a in self.agents:
            clean(a.output())
        super().close()


def torchrun():
    return [sys.executable, "-m", "torch.distributed.run"]


def worker(s):
    p = os.path.join(s.tmp, "w2.py")
    with open(p, "w") as f:
        f.write(WORKER)
    return p


def clean_env(extra=None):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("PET_") or k.startswith("SLURM_") or \
                k.startswith("TORCHELASTIC_") or \
                k in ("CUDA_VISIBLE_DEVICES", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"):
            del e[k]
    if extra:
        e.update(extra)
    return e


def dry(args, env=None):
    p = subprocess.run([agent_path(), "--dry_run"] + list(args) + ["p.py"],
                       env=clean_env(env), capture_output=True, text=True,
                       timeout=30)
    cfg = {}
    for line in p.stdout.splitlines():
        if "=" in line and not line.startswith("env["):
            k, v = line.split("=", 1)
            cfg[k] = v
    return p.returncode, cfg, clean(p.stdout + p.stderr)


def wait_files(tmp, prefix, n, timeout=30.0):
    def check():
        got = [x for x in os.listdir(tmp) if x.startswith(prefix)]
        return got if len(got) >= n else None
    return rt.wait_until(check, timeout=timeout, interval=0.02,
                         what="%d %s* files" % (n, prefix))


def load(tmp, name):
    with open(os.path.join(tmp, name)) as f:
        return json.load(f)


def torchrun_options():
    """(option, metavar or None, choices) for each option torchrun's real
    --help shows, parsed from its usage lines."""
    p = subprocess.run(torchrun() + ["--help"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    usage = p.stdout.split("\n\n")[0]
    opts = []
    for m in re.finditer(r"\[(-{1,2}[\w-]+)(?: ([^\]]+))?\]", usage):
        opt, meta = m.group(1), m.group(2)
        choices = None
        if meta and meta.startswith("{"):
            choices = meta.strip("{}").split(",")
        opts.append((opt, meta, choices))
    # Both spellings are listed in the options part.
    spellings = {}
    for line in p.stdout.splitlines():
        m = re.match(r"  (-\S.*?)(?:\s{2,}|$)", line)
        if not m:
            continue
        names = re.findall(r"(?:^|, )(-{1,2}[\w-]+)", m.group(1))
        for n in names:
            spellings[n] = names
    return opts, spellings


# A value rdzv-agent accepts for each torchrun option that takes one; an
# option a newer torch adds has none here, and the test says which.
VALUES = {
    "nnodes": "1", "nproc_per_node": "2", "rdzv_backend": "c10d",
    "rdzv_endpoint": "127.0.0.1:29400", "rdzv_id": "j", "rdzv_conf":
    "join_timeout=5", "max_restarts": "1", "monitor_interval": "0.1",
    "event_log_handler": "console", "role": "trainer", "log_dir": "/tmp/x",
    "redirects": "3", "tee": "0:1", "local_ranks_filter": "0,1",
    "duplicate_stdout_filters": "apple,orange",
    "duplicate_stderr_filters": "pear", "node_rank": "0",
    "master_addr": "127.0.0.1", "master_port": "29500",
    "local_addr": "127.0.0.1", "logs_specs": "mine",
    "signals_to_handle": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2",
    "shutdown_timeout": "7",
}


def test_every_torchrun_option_accepted():
    opts, spellings = torchrun_options()
    assert len(opts) >= 25, opts     # the parse found torchrun's options
    missing, tried = [], 0
    for opt, meta, choices in opts:
        if opt in ("-h", "--help"):
            continue
        names = spellings.get(opt, [opt])
        longs = [n for n in names if n.startswith("--")]
        dest = (longs[0] if longs else opt).lstrip("-").replace("-", "_")
        if meta is None:
            vals = [None]
        elif choices:
            vals = choices
        elif dest in VALUES:
            vals = [VALUES[dest]]
        else:
            missing.append(opt)
            continue
        for name in names:
            for v in vals:
                args = [name] if v is None else [name, v]
                rc, cfg, out = dry(args)
                assert rc == 0, (args, out)
                tried += 1
        # The PET_ form torch reads (the long name, upper case).
        long = [n for n in names if n.startswith("--")]
        if long:
            pet = "PET_" + long[0].lstrip("-").replace("-", "_").upper()
            rc, cfg, out = dry([], {pet: "1" if vals[0] is None else
                                    vals[0]})
            assert rc == 0, (pet, out)
    assert not missing, "torchrun options this test has no value for " \
        "(new in torch?): %s" % missing
    print("  %d torchrun options, %d spellings and values" % (len(opts),
                                                             tried))
    # What is ignored says so in one line, and why.
    rc, _, out = dry(["--duplicate-stdout-filters", "a", "--logs_specs", "x",
                      "--event-log-handler", "console"])
    assert rc == 0
    for o in ("duplicate_stdout_filters a", "logs_specs x",
              "event_log_handler console"):
        line = [ln for ln in out.splitlines() if ("--" + o) in ln]
        assert len(line) == 1 and "ignored: " in line[0], (o, out)
    # Values that mean something here are read from every form.
    rc, cfg, out = dry(["--signals-to-handle", "SIGTERM,usr1,SIGWINCH",
                        "--local-ranks-filter", "1", "--numa-binding",
                        "exclusive", "--shutdown-timeout", "2.5"])
    assert rc == 0, out
    assert cfg["forwarded_signals"] == "SIGUSR1,SIGUSR2,SIGWINCH", cfg
    assert cfg["local_ranks_filter"] == "1" and cfg["grace"] == "2.500"
    assert cfg["numa_binding"] == "exclusive", cfg
    rc, cfg, out = dry([], {"PET_NUMA_BINDING": "",
                            "PET_LOCAL_RANKS_FILTER": ""})
    assert rc == 0 and cfg["numa_binding"] == "" and \
        cfg["local_ranks_filter"] == "", out
    rc, cfg, _ = dry([], {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "4"})
    assert cfg["grace"] == "4.000", cfg
    rc, cfg, _ = dry([], {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "4",
                          "PET_SHUTDOWN_TIMEOUT": "5"})
    assert cfg["grace"] == "5.000", cfg
    rc, cfg, _ = dry(["--grace", "6"], {"PET_SHUTDOWN_TIMEOUT": "5"})
    assert cfg["grace"] == "6.000", cfg
    # Bad values are usage errors (exit 2) naming the option.
    for args in (["--signals-to-handle", "SIGKILL"],
                 ["--signals-to-handle", "SIGNOPE"],
                 ["--local-ranks-filter", "0,x"],
                 ["--numa-binding", "everywhere"],
                 ["--shutdown-timeout", "soon"]):
        rc, _, out = dry(args)
        assert rc == 2 and args[0].lstrip("-").replace("-", "_") in \
            out.replace("-", "_"), (args, rc, out)


def test_virtual_local_rank_and_gpus_per_worker():
    with Scope("agentcli2-") as s:
        w = worker(s)
        a = s.agent(["--nproc_per_node", "2", "--virtual-local-rank"],
                    env={"CUDA_VISIBLE_DEVICES": "5,7"},
                    program=[w, s.tmp, "env"])
        assert a.wait(30) == 0, a.output()
        e = [load(s.tmp, "env.%d" % r) for r in (0, 1)]
        assert e[0] == {"LOCAL_RANK": "0", "RDZV_LOCAL_RANK": "0",
                        "CUDA_VISIBLE_DEVICES": "5"}, e
        assert e[1] == {"LOCAL_RANK": "0", "RDZV_LOCAL_RANK": "1",
                        "CUDA_VISIBLE_DEVICES": "7"}, e
    # --gpus_per_worker 1: torch.cuda.set_device(LOCAL_RANK) is device 0
    # of the one each worker sees, in every worker.
    rc, cfg, out = dry(["--nproc_per_node", "3", "--gpus_per_worker", "1"],
                       {"CUDA_VISIBLE_DEVICES": "2,4,6"})
    assert rc == 0, out
    envs = dict(re.findall(r"env\[(\d)\] LOCAL_RANK=(\d+)", out))
    assert envs == {"0": "0", "1": "0", "2": "0"}, out
    assert re.findall(r"env\[\d\] CUDA_VISIBLE_DEVICES=(\S+)", out) == \
        ["2", "4", "6"], out
    assert re.findall(r"env\[\d\] RDZV_LOCAL_RANK=(\d+)", out) == \
        ["0", "1", "2"], out
    # torch refuses more workers than CUDA_VISIBLE_DEVICES names; so do we.
    rc, _, out = dry(["--nproc_per_node", "3", "--virtual_local_rank"],
                     {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert rc == 2 and "virtual_local_rank" in out, out


def fake_sysfs(root, package):
    """A made-up topology of two NUMA nodes, CPU 0 on node 0 and CPU 1 on
    node 1, each its own core and L3; package(cpu) gives the socket."""
    def put(path, text):
        p = os.path.join(root, path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text + "\n")
    put("devices/system/node/online", "0-1")
    for c in (0, 1):
        put("devices/system/node/node%d/cpulist" % c, str(c))
        put("devices/system/cpu/cpu%d/topology/physical_package_id" % c,
            str(package(c)))
        put("devices/system/cpu/cpu%d/topology/thread_siblings_list" % c,
            str(c))
        put("devices/system/cpu/cpu%d/cache/index3/shared_cpu_list" % c,
            str(c))


def test_numa_binding():
    allowed = sorted(os.sched_getaffinity(0))
    with Scope("agentcli2-") as s:
        w = worker(s)
        # This machine's own topology: one node, nothing to bind, said so.
        a = s.agent(["--nproc_per_node", "2", "--numa-binding", "node"],
                    env={"CUDA_VISIBLE_DEVICES": ""},
                    program=[w, s.tmp, "affinity"])
        assert a.wait(30) == 0, a.output()
        nodes = glob.glob("/sys/devices/system/node/node[0-9]*")
        if len(nodes) == 1:
            assert "--numa_binding node: one NUMA node with CPUs here: " \
                "workers keep every CPU" in a.output(), a.output()
            for r in (0, 1):
                assert load(s.tmp, "aff.%d" % r) == allowed
        if not {0, 1} <= set(allowed):
            rt.skip("CPUs 0 and 1 are not both ours (%s)" % allowed)
        # Two nodes (made up, over CPUs 0 and 1): the workers, without
        # GPUs, are spread over them, and bound by the kernel.
        for mode, pkg, want in (("node", lambda c: c, [[0], [1]]),
                                ("socket", lambda c: 0, [[0, 1], [0, 1]]),
                                ("socket", lambda c: c, [[0], [1]]),
                                ("exclusive", lambda c: 0, [[0], [1]]),
                                ("core-complex", lambda c: 0, [[0], [1]])):
            root = rt.mktemp("agentcli2-sys-")
            fake_sysfs(root, pkg)
            for f in glob.glob(os.path.join(s.tmp, "aff.*")):
                os.unlink(f)
            a = s.agent(["--nproc_per_node", "2", "--numa_binding", mode],
                        env={"RDZV_SYSFS_ROOT": root,
                             "CUDA_VISIBLE_DEVICES": ""},
                        program=[w, s.tmp, "affinity"])
            assert a.wait(30) == 0, a.output()
            got = [load(s.tmp, "aff.%d" % r) for r in (0, 1)]
            assert got == want, (mode, got, a.output())
            assert "--numa_binding %s: local rank 1 on NUMA node 1, CPUs %s" \
                % (mode, ",".join(map(str, want[1])) if len(want[1]) == 1
                   else "0-1") in a.output(), a.output()
        # More workers than a node has cores: exclusive says so and gives
        # each its node.
        root = rt.mktemp("agentcli2-sys-")
        fake_sysfs(root, lambda c: 0)
        a = s.agent(["--nproc_per_node", "4", "--numa_binding", "exclusive"],
                    env={"RDZV_SYSFS_ROOT": root, "CUDA_VISIBLE_DEVICES": ""},
                    program=[w, s.tmp, "affinity"])
        assert a.wait(30) == 0, a.output()
        assert [load(s.tmp, "aff.%d" % r) for r in range(4)] == \
            [[0], [0], [1], [1]]
        assert "NUMA node 0 has 1 cores for 2 workers" in a.output()


def test_sigusr1_reaches_every_worker_job_goes_on():
    with Scope("agentcli2-") as s:
        w = worker(s)
        a = s.agent(["--nproc_per_node", "2", "--signals_to_handle",
                     "SIGTERM,SIGINT,SIGWINCH"],
                    program=[w, s.tmp, "signals"])
        wait_files(s.tmp, "ready.", 2)
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH):
            a.signal(sig)
            time.sleep(0.2)     # one at a time: no two merge as pending
        rc = a.wait(60)
        out = a.output()
        assert rc == 0, (rc, out)
        for r in (0, 1):
            got = load(s.tmp, "sigs.%d" % r)
            assert got["got"] == sorted([signal.SIGUSR1, signal.SIGUSR2,
                                         signal.SIGWINCH]), got
            # Forwarded to the worker, not its group: a DataLoader's
            # children would die of an unexpected SIGUSR1.
            assert got["child_alive"], got
        assert out.count("(SIGUSR1): forwarded to 2 workers") == 1, out
        assert "(SIGWINCH): forwarded to 2 workers" in out, out
        assert "job" in out and "succeeded" in out, out


def run_on_pty(args, env=None, timeout=30, argv0=None):
    """rdzv-agent (or argv0) with a pty as stdout and stderr; (rc,
    output)."""
    master, slave = os.openpty()
    e = clean_env({"PYTHON": sys.executable})
    if env:
        e.update(env)
    p = subprocess.Popen((argv0 or [agent_path()]) + args,
                         stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=slave, env=e,
                         start_new_session=True)
    rt._track(p)
    os.close(slave)
    chunks = []

    def reader():
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:
                return
            if not b:
                return
            chunks.append(b)
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    rc = p.wait(timeout)
    rt._untrack(p)
    t.join(10)
    os.close(master)
    return rc, clean(b"".join(chunks).decode(errors="replace"))


def test_worker_sees_the_agents_terminal():
    with Scope("agentcli2-") as s:
        w = worker(s)
        rc, out = run_on_pty(["--nproc_per_node", "2", w, s.tmp, "print"])
        assert rc == 0, out
        # The terminal itself: isatty, no prefix, the bar's "\r" as is.
        # (Two workers on one terminal may interleave their writes.)
        for r in (0, 1):
            assert "bar 1\rbar 2\rdone %d\r\n" % r in out, repr(out)
            assert "err of %d" % r in out, repr(out)
        assert out.count("isatty 1 1") == 2, repr(out)
        assert "[default" not in out, repr(out)
        # What torchrun does on a terminal: the same.
        rc, theirs = run_on_pty(["--standalone", "--nproc-per-node", "1", w,
                                 s.tmp, "print"], argv0=torchrun(),
                                timeout=120)
        assert rc == 0, theirs
        assert "isatty 1 1\r\n" in theirs, repr(theirs)
        assert "bar 1\rbar 2\rdone 0\r\n" in theirs, repr(theirs)
        # A template asks for a prefix: the agent's pipe, prefixed.
        rc, out = run_on_pty(["--nproc_per_node", "1",
                              "--log_line_prefix_template", "<${rank}>",
                              w, s.tmp, "print"])
        assert rc == 0, out
        assert "<0>isatty 0 0\r\n" in out, repr(out)
        assert "<0>bar 1\r<0>bar 2\r<0>done 0\r\n" in out, repr(out)
        # --tee goes through the agent too, with torchrun's prefix.
        rc, out = run_on_pty(["--nproc_per_node", "1", "--tee", "1",
                              w, s.tmp, "print"])
        assert rc == 0, out
        assert "[default0]:isatty 0 1\r\n" in out, repr(out)
        assert "err of 0" in out, repr(out)     # stderr: the pty itself


def expected_prefix(tmpl, rank):
    return string.Template(tmpl).safe_substitute(
        role_name="trainer", rank=rank, local_rank=rank,
        hostname=socket.gethostname())


def test_prefix_template_with_host():
    with Scope("agentcli2-") as s:
        w = worker(s)
        cases = [
            (["--log_line_prefix_template", TEMPLATE], {}, TEMPLATE),
            (["--log-line-prefix-template", "${rank}|"], {}, "${rank}|"),
            ([], {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "T${rank}:"},
             "T${rank}:"),
            ([], {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "T${rank}:",
                  "PET_LOG_LINE_PREFIX_TEMPLATE": "P${local_rank}:"},
             "P${local_rank}:"),
            (["--log_line_prefix_template", ""], {}, ""),
            ([], {}, "[${role_name}${local_rank}]:"),
        ]
        for args, env, tmpl in cases:
            a = s.agent(["--nproc_per_node", "2", "--role", "trainer"] +
                        args, env=env, program=[w, s.tmp, "print"])
            assert a.wait(30) == 0, a.output()
            lines = a.output().split("\n")
            for r in (0, 1):
                p = expected_prefix(tmpl, r)
                assert p + "isatty 0 0" in lines, (tmpl, p, lines)
                bar = "%sbar 1\r%sbar 2\r%sdone %d" % (p, p, p, r) if p \
                    else "bar 1\rbar 2\rdone %d" % r
                assert bar in lines, (tmpl, bar, lines)
                assert p + "err of %d" % r in lines, (tmpl, lines)
        assert socket.gethostname() in expected_prefix(TEMPLATE, 0)


def test_local_ranks_filter():
    with Scope("agentcli2-") as s:
        w = worker(s)
        logs = os.path.join(s.tmp, "logs")
        a = s.agent(["--nproc_per_node", "3", "--local-ranks-filter", "0,2",
                     "--tee", "0:3,1:2", "--log_dir", logs],
                    program=[w, s.tmp, "print"])
        assert a.wait(30) == 0, a.output()
        out = a.output()
        for r in (0, 2):
            assert "[default%d]:err of %d" % (r, r) in out, out
        assert "err of 1" not in out and "done 1" not in out, out
        # The log files of --tee keep the filtered rank's lines.
        f = glob.glob(os.path.join(logs, "*", "attempt_0", "1",
                                   "stderr.log"))
        assert len(f) == 1, glob.glob(os.path.join(logs, "**"),
                                      recursive=True)
        with open(f[0]) as fh:
            assert fh.read() == "err of 1\n"


def test_shutdown_timeout_is_the_grace():
    with Scope("agentcli2-") as s:
        w = worker(s)
        a = s.agent(["--nproc_per_node", "2", "--shutdown-timeout", "0.5"],
                    program=[w, s.tmp, "ignterm"])
        wait_files(s.tmp, "ready.", 2)
        rc, dt = a.term(20)
        assert rc == 143, (rc, a.output())
        assert 0.4 < dt < 10, dt
        assert a.output().count("still running after the grace period: "
                                "SIGKILL") == 2, a.output()


def summary_block(out, prog):
    """The lines of torchrun's failure block, from the title to the end of
    the root cause's traceback, as (label, value) pairs."""
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.endswith(prog +
                                                            " FAILED"))
    assert re.fullmatch(r"=+", lines[i - 1]), lines[i - 1:i + 1]
    block, root = [], False
    for ln in lines[i:]:
        block.append(ln)
        root = root or ln.startswith("Root Cause")
        if root and ln.startswith("  traceback : "):
            break
    return block


def labels(block):
    out = []
    for ln in block:
        if re.fullmatch(r"[=-]+", ln):
            out.append("<rule>")
        elif ":" in ln:
            out.append(ln.split(":", 1)[0])
        else:
            out.append(ln)
    return out


def test_torchrun_summary_layout_and_error_file():
    with Scope("agentcli2-") as s:
        w = worker(s)
        ours_ef = os.path.join(s.tmp, "ours.json")
        theirs_ef = os.path.join(s.tmp, "theirs.json")
        env = {"W_ERRFILE": "1"}
        a = s.agent(["--nproc_per_node", "2", "--grace", "1"],
                    env=dict(env, TORCHELASTIC_ERROR_FILE=ours_ef),
                    program=[w, s.tmp, "fail"])
        rc = a.wait(30)
        ours = a.output()
        assert rc == 1, ours
        t = subprocess.run(torchrun() + ["--standalone", "--nproc-per-node",
                                         "2", w, s.tmp, "fail"],
                           env=clean_env(dict(env,
                                              TORCHELASTIC_ERROR_FILE=theirs_ef,
                                              PYTHONPATH=os.environ.get(
                                                  "PYTHONPATH", ""))),
                           capture_output=True, text=True, timeout=120,
                           cwd=s.tmp)
        theirs = t.stdout + t.stderr
        assert t.returncode == 1, theirs
        bo, bt = summary_block(ours, w), summary_block(theirs, w)
        assert labels(bo) == labels(bt), (bo, bt)
        lo = labels(bo)
        assert lo[:4] == [w + " FAILED", "<rule>", "Failures", "[1]"], bo
        i = lo.index("Root Cause (first observed failure)")
        assert lo[i - 1] == "<rule>" and lo[i + 1:] == [
            "[0]", "  time      ", "  host      ", "  rank      ",
            "  exitcode  ", "  error_file", "  traceback "], bo
        # The worker the agent stopped, as torchrun lists it.
        assert any(re.fullmatch(r"  exitcode  : -15 \(pid: \d+\)  "
                                r"\(SIGTERM\)", ln) for ln in bo), bo
        for pat in (r"  rank      : 1 \(local_rank: 1\)",
                    r"  exitcode  : 3 \(pid: \d+\) ",
                    r"  time      : \d{4}-\d\d-\d\d_\d\d:\d\d:\d\d",
                    r"  error_file: /\S+/attempt_0/1/error\.json",
                    r"  traceback : Traceback \(most recent call last\):"):
            assert any(re.fullmatch(pat, ln) for ln in bo), (pat, bo)
            assert any(re.fullmatch(pat, ln) for ln in bt), (pat, bt)
        # The traceback's lines are indented like torch's.
        i = ours.index("  traceback : ", ours.index("Root Cause"))
        assert ours[i:].startswith("  traceback : Traceback (most recent "
                                   "call last):\n    File \"w.py\", line 1\n"
                                   "  ValueError: rank 1 broke\n"), ours[i:]
        # The nested launcher's error file: the worker's, as torchrun's.
        with open(ours_ef) as f:
            mine = json.load(f)
        with open(theirs_ef) as f:
            ref = json.load(f)
        assert mine["message"]["message"] == ref["message"]["message"] == \
            "ValueError: rank 1 broke", (mine, ref)
        assert mine["message"]["extraInfo"]["py_callstack"] == \
            ref["message"]["extraInfo"]["py_callstack"]
    # No error file from the worker: one of our own names the failure.
    with Scope("agentcli2-") as s:
        w = worker(s)
        ef = os.path.join(s.tmp, "ours.json")
        a = s.agent(["--nproc_per_node", "2", "--grace", "1"],
                    env={"TORCHELASTIC_ERROR_FILE": ef},
                    program=[w, s.tmp, "fail"])
        rc = a.wait(30)
        out = a.output()
        assert rc == 1, out
        assert "  error_file: <N/A>" in out, out
        assert "  traceback : To enable traceback see: https://pytorch.org/" \
            "docs/stable/elastic/errors.html" in out, out
        with open(ef) as f:
            mine = json.load(f)
        msg = mine["message"]["message"]
        assert "rank 1 (local_rank 1)" in msg and "exit code 3" in msg, mine
        assert int(mine["message"]["extraInfo"]["timestamp"]) > 0, mine


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    rt.main(globals(), per_test=50, total=170)
