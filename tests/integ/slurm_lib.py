# SPDX-License-Identifier: Apache-2.0
"""slurm_lib: a real Slurm cluster (scripts/slurm-cluster.sh: munged,
slurmctld, slurmd nodes n1..nN in namespaces of their own) for the
tests/integ/slurm_*.py tests, and the few things they ask of it.

    c = cluster()            # up, or the file skips (fails under CI=true)
    jid = c.sbatch(["--nodes=2", script, args...], env={...})
    c.wait_state(jid, "COMPLETED")     # sacct --completion, then asserted
    c.out(jid)               # the job's output file (%j.out, shared dir)
    c.run(["scontrol", ...]) # any Slurm command, against this cluster

Everything runs in c.shared, the directory every node sees.  The cluster
comes down (scripts/slurm-cluster.sh down) at exit, on a deadline and on
a fatal signal, with every process it started."""

import os
import re
import shutil
import subprocess
import sys
import time

import rdzvtest as rt

DATA = "/usr/share/datasets/fashion-mnist"
FINAL_RE = re.compile(r"final test_acc ([0-9.]+)", re.M)
_clusters = []


def _down_all():
    while _clusters:
        _clusters.pop().down()


# rdzvtest's cleanup runs at exit, on a deadline (the watchdog) and on
# SIGTERM: the cluster goes with it.
_rt_cleanup = rt._cleanup


def _cleanup():
    _down_all()
    _rt_cleanup()


rt._cleanup = _cleanup


def _unavailable(reason):
    """No cluster here: a failure under CI (which promises one), a visible
    skip elsewhere."""
    if os.environ.get("CI", "") not in ("", "0", "false"):
        print("FAIL: %s (CI=%s: scripts/deps.sh installs Slurm and the "
              "tests run as root)" % (reason, os.environ["CI"]), flush=True)
        rt._cleanup()
        os._exit(1)
    rt.skip_all(reason)


def torch_python():
    """The python the torch workers run with: torch 2.13's."""
    if rt.has_torch(rt.TORCH2_PYTHON):
        return rt.TORCH2_PYTHON
    if rt.has_torch(rt.TORCH_PYTHON):
        return rt.TORCH_PYTHON
    rt.no_torch("no python with torch.distributed")


class Cluster:
    def __init__(self, nodes=3):
        top = rt.mktemp("rdzv-slurm-")
        os.chmod(top, 0o755)    # munged wants its socket's path open to all
        self.dir = os.path.join(top, "cluster")
        self.script = os.path.join(rt.top_srcdir(), "scripts",
                                   "slurm-cluster.sh")
        self.shared = os.path.join(self.dir, "shared")
        self.bin = os.path.join(self.dir, "bin")
        self.conf = os.path.join(self.dir, "etc", "slurm.conf")
        r = subprocess.run(["bash", self.script, "up", "--dir", self.dir,
                            "--nodes", str(nodes), "--bindir",
                            rt.top_builddir()], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        self.up = r.returncode == 0
        self.up_output = r.stdout
        if self.up:
            _clusters.append(self)

    def down(self):
        if self.up:
            if os.environ.get("RDZV_TEST_KEEP") == "1":
                keep = rt.mktemp("rdzv-slurm-kept-")
                for d in ("shared", "log"):
                    shutil.copytree(os.path.join(self.dir, d),
                                    os.path.join(keep, d), symlinks=True,
                                    ignore_dangling_symlinks=True)
                print("slurm_lib: the cluster's shared directory and logs "
                      "are in %s" % keep, flush=True)
            subprocess.run(["bash", self.script, "down", "--dir", self.dir],
                           stdout=subprocess.DEVNULL, timeout=120)
            self.up = False

    def env(self, extra=None):
        """The submitting shell's environment: the cluster's commands and
        rdzv's programs first on PATH (sbatch and srun export it to the
        nodes), no SLURM_* of an outer job."""
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "PET_"))}
        e["PATH"] = self.bin + ":" + e.get("PATH", "/usr/bin:/bin")
        e["SLURM_CONF"] = self.conf
        e.update(extra or {})
        return e

    def run(self, argv, env=None, check=True, timeout=60, **kw):
        """A Slurm command (argv[0] from the cluster's bin) in c.shared;
        returns its CompletedProcess (stdout and stderr as text)."""
        r = subprocess.run([os.path.join(self.bin, argv[0])] + argv[1:],
                           cwd=kw.pop("cwd", self.shared),
                           env=self.env(env), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           timeout=timeout, **kw)
        if check:
            assert r.returncode == 0, "%s: rc %d\n%s%s" % (
                " ".join(argv), r.returncode, r.stdout, r.stderr)
        return r

    def sbatch(self, args, env=None):
        """Submits a batch job (output to c.shared/<jobid>.out unless args
        say otherwise); returns its id."""
        r = self.run(["sbatch", "--parsable", "--output=%j.out"] + args,
                     env=env)
        return int(r.stdout.strip().split(";")[0])

    def job_state(self, jid):
        """The job's state as slurmctld has it now (RUNNING, PENDING,
        COMPLETED, ...), or None once it has forgotten the job."""
        r = self.run(["squeue", "-h", "-t", "all", "-j", str(jid), "-o",
                      "%T"], check=False)
        s = r.stdout.strip()
        return s or None

    def sacct(self, jid):
        """sacct's records of the job (sacct --completion: this cluster
        keeps Slurm's job completion log, not a database): a list of
        (state, exit code), one per time the job ended (a requeued job
        ends more than once)."""
        r = self.run(["sacct", "--completion", "-n", "-P", "-j", str(jid),
                      "-o", "JobID,State,ExitCode"])
        rows = []
        for line in r.stdout.splitlines():
            f = line.split("|")
            if len(f) >= 3 and f[0] == str(jid):
                rows.append((f[1].strip(), f[2].strip()))
        return rows

    def wait_state(self, jid, state, timeout=120):
        """Waits for the job to end; asserts that sacct's last record of
        it is state with exit code 0:0 (COMPLETED) and returns the
        records."""
        def ended():
            s = self.job_state(jid)
            return s not in ("PENDING", "RUNNING", "CONFIGURING",
                             "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                             "REQUEUE_FED", "SUSPENDED", "RESIZING")
        try:
            rt.wait_until(ended, timeout=timeout, interval=0.2,
                          what="job %d to end" % jid)
        except AssertionError:
            raise AssertionError("job %d still %s after %d s\n%s" % (
                jid, self.job_state(jid), timeout, self.diagnostics(jid)))
        rows = []
        for _ in range(50):     # slurmctld writes the record as it ends
            rows = self.sacct(jid)
            if rows:
                break
            time.sleep(0.1)
        assert rows and rows[-1][0] == state, \
            "job %d: sacct says %s, want %s\n%s" % (
                jid, rows, state, self.diagnostics(jid))
        if state == "COMPLETED":
            assert rows[-1][1] == "0:0", (rows, self.diagnostics(jid))
        return rows

    def out(self, jid, name=None):
        p = os.path.join(self.shared, name or "%d.out" % jid)
        try:
            with open(p, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def wait_out(self, jid, pattern, count=1, timeout=90, name=None):
        """Waits until the job's output matches pattern count times;
        returns the matches."""
        rx = re.compile(pattern, re.M)
        try:
            rt.wait_until(lambda: len(rx.findall(self.out(jid, name)))
                          >= count, timeout=timeout, interval=0.1,
                          what="%r in job %d's output" % (pattern, jid))
        except AssertionError:
            raise AssertionError("%r not seen %d times in job %d's output"
                                 "\n%s" % (pattern, count, jid,
                                           self.diagnostics(jid)))
        return rx.findall(self.out(jid, name))

    def diagnostics(self, jid=None):
        parts = []
        if jid is not None:
            parts.append("---- %d.out\n%s" % (jid, self.out(jid)[-6000:]))
            r = self.run(["scontrol", "show", "job", str(jid)],
                         check=False)
            parts.append("---- scontrol show job\n" + r.stdout + r.stderr)
        for name in ("slurmctld.log", "slurmd-n1.log", "slurmd-n2.log"):
            p = os.path.join(self.dir, "log", name)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    lines = f.readlines()[-15:]
                parts.append("---- %s\n%s" % (name, "".join(lines)))
        return "\n".join(parts)

    def copy(self, *paths):
        """Copies files into the shared directory, as a user would."""
        for p in paths:
            shutil.copy(p, self.shared)

    def agent_pids(self, jid, node):
        """The rdzv-agent processes of job jid on node (SLURMD_NODENAME
        in their environment) in this cluster's network namespace:
        processes this cluster started (another cluster, of a test run
        beside this one, has its own job jid and node)."""
        with open(os.path.join(self.dir, "run", "ns.pid")) as f:
            netns = os.readlink("/proc/%d/ns/net" % int(f.read()))
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                if os.readlink("/proc/%s/ns/net" % p) != netns:
                    continue
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv0 = f.read().split(b"\0")[0]
                if not argv0.endswith(b"rdzv-agent"):
                    continue
                with open("/proc/%s/environ" % p, "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in
                               f.read().split(b"\0") if b"=" in kv)
            except OSError:
                continue
            if env.get(b"SLURM_JOB_ID") == str(jid).encode() and \
                    env.get(b"SLURMD_NODENAME") == node.encode():
                pids.append(int(p))
        return pids


def cluster(nodes=3):
    """The cluster for this file: up, or the file skips with the reason
    (fails under CI)."""
    if sys.platform != "linux":
        _unavailable("Slurm in namespaces needs Linux")
    if os.geteuid() != 0:
        _unavailable("a Slurm cluster on this machine needs root (slurmd "
                     "starts jobs as their user; the cluster runs in "
                     "namespaces of its own)")
    for p in ("slurmctld", "slurmd", "munged", "sbatch"):
        if shutil.which(p, path=os.environ.get("PATH", "") +
                        ":/usr/sbin:/sbin") is None:
            _unavailable("%s not installed (scripts/deps.sh installs "
                         "slurmctld, slurmd, slurm-client and munge)" % p)
    c = Cluster(nodes)
    if not c.up:
        _unavailable("scripts/slurm-cluster.sh up failed:\n" + c.up_output)
    return c


def final_acc(text):
    m = FINAL_RE.findall(text)
    assert m, "no final test_acc in:\n" + text[-4000:]
    return float(m[-1])


def need_data():
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        rt.skip_all("no Fashion-MNIST at %s (Debian's dataset-fashion-mnist)"
                    % DATA)
