# SPDX-License-Identifier: Apache-2.0
"""gloo_ready.py: the torch worker of bench/restart (run by torchrun or
rdzv-agent, the same program under both).

    /usr/bin/python3 gloo_ready.py FILE

Appends to FILE, in startmark's format (bench/restart/startmark.c),
"start RANK RESTART_COUNT MONOTONIC_NS REALTIME_NS PID LOCAL_RANK" as its
first statement, "imported ..." once torch is imported, then "ready ..."
once its gloo process group is usable:
init_process_group("gloo") by env:// (MASTER_ADDR/MASTER_PORT as the
launcher set them) and a first all_reduce that returned the right sum.
Then it sleeps until killed.  On SIGTERM it appends "term ..." and dies
of SIGTERM, like startmark.
"""
import os
import signal
import sys
import time

FILE = sys.argv[1]


def mark(kind):
    mono, real = time.monotonic_ns(), time.time_ns()
    env = os.environ
    line = "%s %s %s %d %d %d %s\n" % (
        kind, env.get("RANK", "-1"), env.get("TORCHELASTIC_RESTART_COUNT",
                                            "-1"),
        mono, real, os.getpid(), env.get("LOCAL_RANK", "-1"))
    fd = os.open(FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


mark("start")


def on_term(sig, frame):
    mark("term")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


signal.signal(signal.SIGTERM, on_term)

import torch                          # noqa: E402 (after the start mark)
import torch.distributed as dist      # noqa: E402

mark("imported")

dist.init_process_group("gloo")
world = dist.get_world_size()
t = torch.ones(1)
dist.all_reduce(t)
if int(t.item()) != world:
    sys.exit("gloo_ready: all_reduce gave %r, want %d" % (t.item(), world))
mark("ready")
while True:
    signal.pause()
