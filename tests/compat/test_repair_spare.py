# SPDX-License-Identifier: Apache-2.0
"""test_repair_spare: rdzv-agent's warm spare (--warm_spare, rdzv.spare)
under a real rdzvd and two real rdzv-agents of two torch 2.13 workers
each (examples/torch_ddp_repair.py, gloo).

- A SIGKILLed worker's replacement is the agent's spare: a process that
  was alive, idle, before the kill takes the rank (its REPORT names its
  pid), steps with the others, and the job repairs with no restart,
  every rank ending with the same model and optimizer digest; the agent
  then starts a new spare.  When the job ends, no spare is left.
- --warm_spare 0 (as PET_WARM_SPARE=0): no spare is ever started; a
  spare that cannot start (rdzv.spare not importable) is one log line;
  either way the replacement is a new process (a cold start), and the
  job repairs all the same.
- An agent killed with SIGKILL, another stopped with SIGTERM: neither
  leaves its spare running.
- The handoff parser and the preload policy of rdzv.spare, on good and
  bad input.
"""

import json
import os
import signal
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, job_events, spares         # noqa: E402
from compatlib import check, log                        # noqa: E402

sys.path.insert(0, os.path.join(rt.top_srcdir(), "python"))
from rdzv import spare as rs                            # noqa: E402

# rdzv.spare must be importable by the workers' python: the source tree's.
ENV = {"PYTHONPATH": os.path.join(rt.top_srcdir(), "tests", "lib") + ":" +
       os.path.join(rt.top_srcdir(), "python")}
PROG = ["--limit", "12000", "--epochs", "5", "--batch", "32", "--hidden",
        "32", "--step-delay", "0.05"]


def one_spare(agent):
    """The pid of agent's idle spare once there is exactly one."""
    got = rt.wait_until(lambda: spares([agent.pid]), timeout=120,
                        what="agent %s's warm spare" % agent.name)
    check(len(got) == 1, got)
    return got[0]


def gone(pid):
    """Whether pid has ended (a zombie no one reaped yet counts)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return "\nState:\tZ" in f.read()
    except OSError:
        return True


def test_handoff_parser():
    """parse_handoff and program take what sup.c sends and refuse the
    rest with a reason; preload_names keeps the script's own modules
    out."""
    env = [b"RANK=3", b"X=a=b", b"E="]
    good = b"\0".join([b"rdzv-spare 1", b"4", b"/py", b"-u", b"s.py",
                       b"--x"] + env) + b"\0"
    argv, e = rs.parse_handoff(good)
    check(argv == ["/py", "-u", "s.py", "--x"], argv)
    check(e == {b"RANK": b"3", b"X": b"a=b", b"E": b""}, e)
    check(rs.program(argv) == ("path", "s.py", ["--x"]), rs.program(argv))
    check(rs.program(["/py", "-u", "-m", "pkg.mod", "a"]) ==
          ("module", "pkg.mod", ["a"]), "module")
    bad = [good[:-1], b"rdzv-spare 2\0" + good[13:], b"rdzv-spare 1\0x\0",
           b"rdzv-spare 1\0" b"1\0/py\0", b"rdzv-spare 1\0" b"9\0/py\0s\0",
           b"rdzv-spare 1\0" b"2\0/py\0s\0NOEQ\0",
           b"rdzv-spare 1\0" b"2\0/py\0s\0=v\0", b"",
           b"rdzv-spare 1\0" b"99999999999\0/py\0s\0"]
    for data in bad:
        try:
            rs.parse_handoff(data)
        except ValueError as exc:
            log("refused %r: %s" % (data[:30], exc))
            continue
        raise AssertionError("accepted %r" % data)
    for argv in (["/py"], ["/py", "-u"], ["/py", "-u", "-c", "x"],
                 ["/py", "-m"]):
        try:
            rs.program(argv)
        except ValueError:
            continue
        raise AssertionError("ran %r" % argv)
    tmp = rt.mktemp("spare-parse-")
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write("import os, json\nimport torch.nn as nn\nimport mymodel\n"
                "from numpy import zeros\nfrom . import rel\nimport this\n"
                "try:\n    import torchvision\nexcept ImportError:\n"
                "    pass\ndef f():\n    import inner\n")
    names = rs.preload_names(["/py", "-u", script], "extra1, extra2")
    for m in ("torch", "torch.distributed", "os", "json", "torch.nn",
              "numpy", "numpy.zeros", "torchvision", "extra1", "extra2"):
        check(m in names, (m, names))
    for m in ("mymodel", "this", "inner", "rel"):
        check(m not in names, (m, names))
    # -m: a top-level module is read as a script is; a dotted one is not
    # even looked for (that would import its package).
    pkg = os.path.join(tmp, "pkgx")
    os.makedirs(pkg)
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write("raise SystemExit('pkgx ran')\n")
    with open(os.path.join(tmp, "modtrain.py"), "w") as f:
        f.write("import json\n")
    sys.path.insert(0, tmp)
    try:
        check("json" in rs.preload_names(["/py", "-u", "-m", "modtrain"]),
              "-m modtrain")
        check(rs.preload_names(["/py", "-u", "-m", "pkgx.train"]) ==
              rs.BASE and "pkgx" not in sys.modules, "-m pkgx.train")
    finally:
        sys.path.remove(tmp)


SCRIPT = """import json, os, sys
os.write(3, b"hello repair=1")
print(json.dumps({"name": __name__, "argv": sys.argv, "rank":
      os.environ.get("RANK"), "spare_fd": "RDZV_SPARE_FD" in os.environ,
      "path0": sys.path[0], "comm": open("/proc/self/comm").read().strip(),
      "torch": "torch" in sys.modules}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(7)
"""


def hand(argv, env, cwd):
    """Starts python -u -m rdzv.spare argv[2:] as rdzv-agent does (its
    stdout and stderr on /dev/null, a control socket; not at fd 3 here,
    which the spare then closes), waits
    until it is warm, hands it argv and env with fresh pipes and a
    channel, and returns (exit status, stdout, stderr, channel
    datagram)."""
    import socket
    import subprocess
    ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    e = dict(os.environ, PYTHONPATH=ENV["PYTHONPATH"] + ":" + cwd,
             RDZV_SPARE_FD=str(theirs.fileno()))
    e.pop("RANK", None)
    p = subprocess.Popen([sys.executable, "-u", "-m", "rdzv.spare"] +
                         argv[2:], env=e, cwd=cwd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         pass_fds=[theirs.fileno()])
    theirs.close()
    try:
        def warm():
            with open("/proc/%d/comm" % p.pid) as f:
                return f.read().strip() == "rdzv-spare"
        rt.wait_until(warm, timeout=120, what="the spare warm")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ch, ch_theirs = socket.socketpair(socket.AF_UNIX,
                                          socket.SOCK_SEQPACKET)
        msg = b"\0".join([b"rdzv-spare 1", b"%d" % len(argv)] +
                         [a.encode() for a in argv] +
                         [k + b"=" + v for k, v in env.items()]) + b"\0"
        ctl.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                             struct.pack("3i", out_w, err_w,
                                         ch_theirs.fileno()))])
        for fd in (out_w, err_w):
            os.close(fd)
        ch_theirs.close()
        rc = p.wait(timeout=60)
        with os.fdopen(out_r, "rb") as f:
            out = f.read().decode()
        with os.fdopen(err_r, "rb") as f:
            err = f.read().decode()
        ch.settimeout(5)
        said = ch.recv(512)
        ch.close()
        return rc, out, err, said
    finally:
        ctl.close()
        if p.poll() is None:
            p.kill()
            p.wait()


def test_preload_follows_mesh():
    """For a script that imports rdzv.mesh the spare imports rdzv.mesh
    and FSDP2's modules (its SPARE_IMPORTS: over a second a replacement
    would spend before it says ready), not the script.  (With torch
    2.13 every spare has FSDP2's modules: torch._dynamo, in the base
    imports, imports them.)"""
    import subprocess
    tmp = rt.mktemp("spare-mesh-")
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write("from rdzv import mesh\nraise SystemExit('it ran')\n")
    code = ("import sys\nfrom rdzv import spare\n"
            "w = ('rdzv.mesh',)\n"
            "spare.preload(['/py', '-u', '-c', 'x'])\n"
            "print([m for m in w if m in sys.modules])\n"
            "spare.preload(['/py', '-u', %r])\n"
            "print([m for m in w if m in sys.modules])\n"
            "print('torch.distributed.fsdp' in sys.modules)\n" % script)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=120, cwd=tmp, env=dict(
                           os.environ, PYTHONPATH=os.path.join(
                               rt.top_srcdir(), "python")))
    check(r.returncode == 0 and r.stdout.splitlines() == [
        "[]", "['rdzv.mesh']", "True"],
        (r.returncode, r.stdout, r.stderr[-2000:]))


def test_handoff_runs_the_program():
    """A warm spare handed a rank runs the program as python would: a
    script as __main__ with its argv, its directory first on sys.path,
    the environment it was handed (no RDZV_SPARE_FD left), stdout,
    stderr and fd 3 from the handoff, its exit status; -m MODULE too."""
    tmp = rt.mktemp("spare-hand-")
    sub = os.path.join(tmp, "sub")
    os.makedirs(sub)
    for path in (os.path.join(sub, "train.py"), os.path.join(tmp,
                                                             "trainmod.py")):
        with open(path, "w") as f:
            f.write(SCRIPT)
    env = {b"RANK": b"5", b"RDZV_PROGRESS_FD": b"3",
           b"PATH": os.environb.get(b"PATH", b"/usr/bin")}
    script = os.path.join(sub, "train.py")
    rc, out, err, said = hand([sys.executable, "-u", script, "--x", "1"],
                              env, tmp)
    log("script: rc %d out %r err %r channel %r" % (rc, out, err, said))
    got = json.loads(out)
    check(rc == 7 and said == b"hello repair=1" and err == "to stderr\n",
          (rc, err, said))
    check(got == {"name": "__main__", "argv": [script, "--x", "1"],
                  "rank": "5", "spare_fd": False, "path0": sub,
                  "comm": os.path.basename(sys.executable),
                  "torch": True}, got)
    rc, out, err, said = hand([sys.executable, "-u", "-m", "trainmod", "y"],
                              env, tmp)
    got = json.loads(out)
    check(rc == 7 and said == b"hello repair=1", (rc, err, said))
    check(got["name"] == "__main__" and got["argv"] == [
          os.path.join(tmp, "trainmod.py"), "y"] and got["rank"] == "5",
          got)


def test_spare_takes_the_rank():
    d = rt.Rdzvd()
    with Scope("repair-spare-") as s:
        a, b = compatlib.repair_agents(s, d, "spare", PROG, env=ENV)
        sa, sb = one_spare(a), one_spare(b)
        survivors = set(a.children())
        victim, other = sorted(b.children())
        survivors.add(other)
        check(sb not in survivors | {victim} and sa not in survivors,
              (sa, sb, survivors))
        t0 = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        rt.wait_until(lambda: any(t.startswith("repair: grow") for t in
                                  job_events(d, "spare")), timeout=120,
                      what="the grow round")
        log("SIGKILL -> grow round: %.1f s" % (time.monotonic() - t0))
        # The spare is b's worker now; a new spare replaces it.
        check(sb in b.children(), (sb, b.children()))
        check(survivors <= set(a.children()) | set(b.children()),
              survivors)
        nb = one_spare(b)
        check(nb != sb and spares([a.pid]) == [sa], (nb, sb, sa))
        reports, out, _ = compatlib.repair_done(d, "spare", a, b, survivors)
        check(d.metric("rdzvd_restarts_total") == 0, "restarts_total")
        rep = [r for r in reports if r["replacement"]][0]
        check(rep["pid"] == sb, (rep, sb))
        check(rep["step"] > rep["joined_step"], rep)  # it stepped
        check("(the warm spare)" in b.output(), b.output()[-3000:])
        check("ended before it was used" not in out, out[-3000:])
        for p in (sa, nb):
            rt.wait_until(lambda: gone(p), timeout=10,
                          what="spare %d gone after the job" % p)
    d.stop()


def test_opt_out_and_a_failed_spare_start_cold():
    """Agent a runs with PET_WARM_SPARE=0 (--warm_spare 0): it never
    starts a spare.  Agent b's spare cannot import rdzv.spare: b says so
    in one line, and b's replacement starts cold."""
    d = rt.Rdzvd()
    with Scope("repair-spare-") as s:
        nospare = {"PET_WARM_SPARE": "1", "PYTHONPATH": os.path.join(
            rt.top_srcdir(), "tests", "lib")}
        a, b = compatlib.repair_agents(s, d, "cold", PROG,
                                       env=dict(ENV, PET_WARM_SPARE="0"),
                                       env_b=nospare)
        rt.wait_until(lambda: "ended before it was used" in b.output(),
                      timeout=60, what="b's spare failing")
        before = set(a.children()) | set(b.children())
        victim = sorted(b.children())[0]
        survivors = before - {victim}
        os.kill(victim, signal.SIGKILL)
        rt.wait_until(lambda: any(t.startswith("repair: grow") for t in
                                  job_events(d, "cold")), timeout=120,
                      what="the grow round")
        check(spares([a.pid, b.pid]) == [], "a spare")
        reports, out, _ = compatlib.repair_done(d, "cold", a, b, survivors)
        rep = [r for r in reports if r["replacement"]][0]
        check(rep["pid"] not in before, (rep, before))
        check("warm spare" not in a.output(), a.output()[-3000:])
        said = [ln for ln in b.output().splitlines()
                if "spare" in ln or "replacement" in ln or "failed" in ln]
        check(b.output().count("warm spare") == 1 and
              "replacement pid %d started;" % rep["pid"] in b.output(),
              "replacement pid %d; agent b's lines about spares and "
              "replacements:\n%s" % (rep["pid"], "\n".join(said)))
    d.stop()


def test_agent_killed_leaves_no_spare():
    d = rt.Rdzvd()
    with Scope("repair-spare-") as s:
        a, b = compatlib.repair_agents(s, d, "kill", PROG, env=ENV)
        sa, sb = one_spare(a), one_spare(b)
        a.signal(signal.SIGKILL)
        b.signal(signal.SIGTERM)
        for p in (sa, sb):
            rt.wait_until(lambda: gone(p), timeout=20,
                          what="spare %d gone with its agent" % p)
        b.wait(60)
    d.stop()


if __name__ == "__main__":
    rt.main(globals(), per_test=300.0, total=900.0)
