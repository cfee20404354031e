# SPDX-License-Identifier: Apache-2.0
"""test_repair_backstop: the helper's last resort for a gloo call that a
broken group did not end (python/rdzv/watcher.py backstop), torch 2.13,
two real processes in one gloo group.  Rank 1 never enters the barrier
rank 0 waits in, so rank 0's training thread stays on one frame of
torch's distributed_c10d, as Lightning's barrier after a shrink once
did; its watcher thread runs as under an agent (RDZV_PROGRESS_FD's
channel a socketpair here), with a grace of 1 s.

- The group broken by the watcher (a shrink heard) while the rank is
  held there: it exits 1 with the frame named and the stacks dumped.
- Held there with the group unbroken (a long collective on a healthy
  group): it stays.
- The group broken while the training thread is in the script's own
  code (a long computation, a sleep): it stays.
"""

import compatlib as cl

cl.use_torch2()

import os                                               # noqa: E402
import subprocess                                       # noqa: E402
import sys                                              # noqa: E402

import rdzvtest as rt                                   # noqa: E402
from compatlib import check                             # noqa: E402

_RANK = r"""
import datetime, os, socket, sys, threading, time
sys.path.insert(0, sys.argv[1])
import torch.distributed as dist
from rdzv import repair, watcher
rank, port, mode = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
store = dist.TCPStore("127.0.0.1", port, 2, rank == 0,
                      timeout=datetime.timedelta(seconds=60))
dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
if rank == 1:
    time.sleep(120)
    sys.exit(0)
agent, chan = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
watcher.CUT_GRACE = 1.0
job = repair.Job("gloo", None, chan)
job._state = repair.State.WHOLE
if mode != "whole":
    job._cut_posted = True
threading.Thread(target=job._watch, daemon=True).start()
print("in", flush=True)
if mode == "own":
    time.sleep(8)
else:
    dist.barrier(timeout=datetime.timedelta(seconds=8))
"""


def run(mode):
    """Rank 0's (exit status, stdout, stderr) in mode; rank 1 killed."""
    py = os.path.join(rt.top_srcdir(), "python")
    port = str(rt.free_port())
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    peer = rt.spawn([sys.executable, "-c", _RANK, py, "1", port, mode],
                    env=env, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
    try:
        r = subprocess.run([sys.executable, "-c", _RANK, py, "0", port,
                            mode], env=env, capture_output=True, text=True,
                           timeout=90)
    finally:
        rt.end(peer)
    return r.returncode, r.stdout, r.stderr


def test_held_on_a_broken_group_exits():
    rc, out, err = run("cut")
    check(rc == 1 and out == "in\n", (rc, out, err))
    check("distributed_c10d.py" in err and "exiting so that the agent "
          "replaces this rank" in err, err)
    check("Thread 0x" in err or "Current thread" in err, err)


def test_held_on_a_whole_group_stays():
    """The barrier's own 8 s timeout ends it, not the backstop."""
    rc, out, err = run("whole")
    check(rc != 0 and "exiting so that" not in err, (rc, err))
    check("timed out" in err.lower() or "timeout" in err.lower(), err)


def test_broken_group_in_own_code_stays():
    rc, out, err = run("own")
    check(rc == 0 and "exiting so that" not in err, (rc, out, err))


if __name__ == "__main__":
    rt.main(globals(), per_test=120, total=360)
