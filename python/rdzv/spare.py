# SPDX-License-Identifier: Apache-2.0
"""rdzv.spare: a warm python that becomes a worker.

rdzv-agent (--warm_spare 1, its default for python programs) keeps one
per node in a job whose workers can repair in place (a replacement), and
one per local worker in a job whose workers would restart (every worker
of the restart), started as

    python -u -m rdzv.spare PROGRAM ARGS...      (or -m MODULE ARGS...)

in a session of its own, killed with the agent, stdout and stderr on
/dev/null (it prints nothing unless it is used) and a control socket
(SOCK_SEQPACKET) at fd RDZV_SPARE_FD.  It imports what is safe to import
before it knows its rank (preload()), then waits, named "rdzv-spare"
(/proc/PID/comm: ps, top) until it is used.  When a local worker
dies (or a restart starts the workers again), the agent sends it one
datagram,

    "rdzv-spare 1" NUL  N NUL  argv[0] NUL ... argv[N-1] NUL  env NUL ...

(the dead rank's command line and whole environment: RANK, LOCAL_RANK,
WORLD_SIZE, RDZV_*, RDZV_REPLACEMENT=1, ...) with three descriptors
(SCM_RIGHTS): the rank's stdout, stderr and progress channel, as a cold
replacement would have them.  The spare puts them at fds 1, 2 and 3,
takes the environment, and runs the program as python would (runpy: a
script as __main__ with its directory first on sys.path, or -m MODULE),
exiting as the program exits.  The agent closing the socket without a
datagram ends the spare quietly.

What is imported before the rank is known (preload()): torch and the
torch modules a DDP script uses (torch.distributed, torch.nn, torch.optim,
torch.utils.data, and torch._dynamo, which an optimizer's constructor
imports), rdzv.repair, and of the program's own top-level
imports those of the standard library, torch, torchvision, torchaudio,
numpy and rdzv ("from P import M" counts P.M too), with what such a
module lists in its SPARE_IMPORTS (rdzv.mesh: FSDP2's modules), plus the
modules RDZV_SPARE_IMPORTS names (a comma list: a framework the
program runs, e.g. RDZV_SPARE_IMPORTS=lightning, makes its restarts warm
too).
Nothing of the script itself runs, nor a module of the script's own
directory: such code may read RANK or start CUDA at import time.  An
import that fails is left for the program to fail on.
"""

import ast
import os
import runpy
import socket
import sys

__all__ = ["parse_handoff", "program", "preload_names", "main"]

MAGIC = b"rdzv-spare 1"
MSG_MAX = 160 * 1024		# the agent's SUP_SPARE_MSG_MAX
COMM = "rdzv-spare"		# /proc/PID/comm once warm, until used
# Packages whose import neither reads the rank nor starts a device.
SAFE = {"torch", "torchvision", "torchaudio", "numpy", "rdzv"}
# Of the standard library, those with an effect of their own at import.
UNSAFE = {"this", "antigravity", "__main__", "__future__"}
# torch._dynamo: a torch 2.x optimizer's first constructor imports it
# (with inductor and sympy: 1.2-1.4 s here, +73 MiB), and a replacement
# builds its optimizer after it said ready, while the others wait.
BASE = ["torch", "torch.distributed", "torch.nn", "torch.nn.functional",
    "torch.nn.parallel", "torch.optim", "torch.utils.data", "torch._dynamo",
    "rdzv.repair"]


def parse_handoff(data):
    """(argv, env) of a handoff datagram (bytes): argv a list of str,
    env a dict of bytes to bytes.  Raises ValueError naming what is
    wrong: not ending in NUL, another magic, a count that is not a
    number from 2 (python and the program) up to the strings there are,
    or an environment string without '=' or with an empty name."""
    if not data.endswith(b"\0"):
        raise ValueError("a handoff ends with a NUL")
    parts = data[:-1].split(b"\0")
    if parts[0] != MAGIC:
        raise ValueError("not a %r handoff" % MAGIC.decode())
    if len(parts) < 2 or not parts[1].isdigit() or len(parts[1]) > 9:
        raise ValueError("no argument count")
    n = int(parts[1])
    if n < 2 or 2 + n > len(parts):
        raise ValueError("%d arguments of %d strings" % (n,
            len(parts) - 2))
    argv = [os.fsdecode(a) for a in parts[2:2 + n]]
    env = {}
    for kv in parts[2 + n:]:
        k, eq, v = kv.partition(b"=")
        if not eq or not k:
            raise ValueError("environment string %r" % kv[:40])
        env[k] = v
    return argv, env


def program(argv):
    """("path", SCRIPT, ARGS) or ("module", NAME, ARGS) of the command
    line rdzv-agent gives a worker, python -u [-m] PROGRAM ARGS...;
    raises ValueError for any other shape."""
    a = list(argv[1:])
    while a[:1] == ["-u"]:
        a.pop(0)
    if a[:1] == ["-m"] and len(a) >= 2:
        return ("module", a[1], a[2:])
    if a and not a[0].startswith("-"):
        return ("path", a[0], a[1:])
    raise ValueError("cannot run %r as python would" % (argv,))


def _top_imports(tree):
    """The absolute module names a module's top level imports (inside
    if and try too, not inside functions or classes)."""
    out, todo = [], list(tree.body)
    while todo:
        n = todo.pop(0)
        if isinstance(n, ast.Import):
            out.extend(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            if n.level == 0 and n.module:
                # "from rdzv import mesh": the names may be modules.
                out.append(n.module)
                out.extend(n.module + "." + a.name for a in n.names
                    if a.name != "*")
        elif isinstance(n, (ast.If, ast.Try)):
            todo.extend(n.body + n.orelse +
                getattr(n, "finalbody", []) +
                [s for h in getattr(n, "handlers", []) for s in h.body])
    return out


def preload_names(argv, extra=""):
    """The modules preload() imports for the worker command line argv,
    in order: BASE, the program's own top-level imports that are safe
    (see the module's docstring), then extra's (a comma list)."""
    names = list(BASE)
    try:
        kind, target, _ = program(argv)
        if kind == "module" and "." in target:
            target = None	# finding it would run its package's code
        elif kind == "module":
            import importlib.util
            spec = importlib.util.find_spec(target)
            target = spec.origin if spec is not None else None
        if target:
            with open(target, "rb") as f:
                tree = ast.parse(f.read(), target)
            std = getattr(sys, "stdlib_module_names", frozenset())
            for m in _top_imports(tree):
                top = m.split(".")[0]
                if top not in UNSAFE and (top in SAFE or top in std):
                    names.append(m)
    except (OSError, SyntaxError, ValueError, ImportError):
        pass		# the program itself will say what is wrong
    names.extend(m.strip() for m in extra.split(",") if m.strip())
    seen = set()
    return [m for m in names if not (m in seen or seen.add(m))]


def preload(argv):
    """Imports preload_names(argv, $RDZV_SPARE_IMPORTS), and what a
    module imported says its users will import (its SPARE_IMPORTS:
    rdzv.mesh's FSDP2); failures are left for the program."""
    import importlib
    for m in preload_names(argv, os.environ.get("RDZV_SPARE_IMPORTS",
        "")):
        try:
            mod = importlib.import_module(m)
            for dep in getattr(mod, "SPARE_IMPORTS", ()):
                importlib.import_module(dep)
        except BaseException:		# noqa: B036 (SystemExit too)
            pass


def _comm(name):
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(name[:15])
    except OSError:
        pass


def _receive(fd):
    """(data, [fds]) of the agent's datagram on fd (fd stays open)."""
    s = socket.socket(fileno=fd)
    try:
        data, anc, _, _ = s.recvmsg(MSG_MAX,
            socket.CMSG_SPACE(3 * 4), socket.MSG_CMSG_CLOEXEC)
    finally:
        s.detach()
    fds = []
    for level, typ, body in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            n = len(body) - len(body) % 4
            fds.extend(int.from_bytes(body[i:i + 4], sys.byteorder)
                for i in range(0, n, 4))
    return data, fds


def _become(fd, argv, env, fds):
    """Takes the rank (a parsed handoff): descriptors, environment,
    then the program, whose exceptions and exit go up as python's."""
    kind, target, args = program(argv)
    prog = env.get(b"RDZV_PROGRESS_FD", b"")
    prog = int(prog) if prog.isdigit() else fd
    # Above every target first: a received fd may sit where another goes.
    import fcntl
    high = [fcntl.fcntl(got, fcntl.F_DUPFD_CLOEXEC, max(prog, 2) + 1)
        for got in fds]
    for got in fds:
        os.close(got)
    for want, got in zip((1, 2, prog), high):
        os.dup2(got, want)
    for got in high:
        os.close(got)
    if prog != fd:
        os.close(fd)
    os.environ.clear()
    os.environb.update(env)
    _comm(os.path.basename(argv[0]))
    sys.argv = [target] + args
    if kind == "module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    if not getattr(sys.flags, "safe_path", False):
        sys.path[0] = os.path.dirname(os.path.realpath(target))
    runpy.run_path(target, run_name="__main__")


def main():
    v = os.environ.pop("RDZV_SPARE_FD", "")
    if not v.isdigit():
        print("rdzv.spare: rdzv-agent starts this (--warm_spare), with "
            "RDZV_SPARE_FD", file=sys.stderr)
        sys.exit(2)
    fd = int(v)
    # The command line the agent gave: python -u -m rdzv.spare ARGS...
    preload([sys.executable, "-u"] + sys.argv[1:])
    _comm(COMM)		# warm: ps and top show it waiting
    data, fds = _receive(fd)
    if not data:
        os._exit(0)		# the agent let it go unused
    try:
        if len(fds) != 3:
            raise ValueError("%d descriptors, not 3" % len(fds))
        argv, env = parse_handoff(data)
        program(argv)
    except ValueError as e:
        if len(fds) >= 2:
            os.dup2(fds[1], 2)
        print("rdzv.spare: a bad handoff from rdzv-agent: %s" % e,
            file=sys.stderr, flush=True)
        sys.exit(1)
    _become(fd, argv, env, fds)


if __name__ == "__main__":
    main()
