#!/usr/bin/env python3
"""repair_torch.py: how long a torch DDP job (gloo) takes to repair in
place through rdzv.repair after a SIGKILL, under the fake agent of
tests/lib/fakeagent.py (the real agent does not repair yet).

    RDZV_TOP_BUILDDIR=build python3 bench/repair_torch.py [--runs 5]
        [--python /root/.cache/rdzv/torch-2.13/bin/python] [--world 4]
        [--step-delay 0.02]

One job of --world workers of examples/torch_ddp_repair.py (a small MLP
on Fashion-MNIST, by default 20 ms of sleep per step so the kill lands
in any part of it) runs on rdzvd; --runs times the agent SIGKILLs one worker (local
ranks in turn, replacements included), sends the survivors a shrink round
at once, starts the replacement, and sends a grow round when it says
ready.  Per run, from the SIGKILL (CLOCK_MONOTONIC, which the workers'
STEP lines also print):
  (a) survivors   every survivor has committed a step in the group of N-1
  ready           the replacement said ready (its python + torch start-up)
  (b) all         every rank, the replacement too, committed a step in
                  the group of N again
Medians with min-max; one markdown table on stdout.
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))

import rdzvtest  # noqa: E402
import fakeagent as fa  # noqa: E402

EXAMPLE = os.path.join(HERE, "..", "examples", "torch_ddp_repair.py")


def steps(w):
	"""[(time, step, world)] of a worker's STEP lines."""
	out = []
	for l in w.output()[0].splitlines():
		p = l.split()
		if len(p) == 5 and p[0] == "STEP":
			out.append((float(p[4]), int(p[2]), int(p[3])))
	return out


def first_after(w, t, world, timeout=120.0):
	"""The time of w's first step in a group of world after t."""
	end = time.monotonic() + timeout
	while time.monotonic() < end:
		for ts, _, wd in steps(w):
			if ts > t and wd == world:
				return ts
		time.sleep(0.02)
	raise AssertionError("local rank %d: no step in a group of %d after "
	    "the kill: %s" % (w.local_rank, world, w.output()[1][-2000:]))


def fmt(xs):
	return "%.3f (%.3f-%.3f)" % (statistics.median(xs), min(xs), max(xs))


def main():
	ap = argparse.ArgumentParser()
	ap.add_argument("--runs", type=int, default=5)
	ap.add_argument("--world", type=int, default=4)
	ap.add_argument("--python", default=rdzvtest.TORCH2_PYTHON)
	ap.add_argument("--step-delay", default="0.02",
	    help="seconds of sleep in each step (default 0.02)")
	a = ap.parse_args()
	d = rdzvtest.Rdzvd(tmpdir=rdzvtest.mktemp("rdzv-bench-repair-"))
	ag = fa.FakeAgent([a.python, EXAMPLE, "--epochs", "1000",
	    "--limit", "8000", "--hidden", "32", "--log-steps",
	    "--step-delay", a.step_delay], a.world, "127.0.0.1:%d" % d.port,
	    env=fa.torch_env(d.port))
	rows = []
	try:
		ag.start()
		ag.wait_steps(10, timeout=300)
		for i in range(a.runs):
			lr = i % a.world
			surv = [w for l, w in ag.workers.items() if l != lr]
			t = ag.kill(lr)
			ag.shrink()
			ta = max(first_after(w, t, a.world - 1) for w in surv)
			rep = ag.spawn_replacement(lr)
			tr = ag.wait_ready(rep, timeout=300)
			ag.grow()
			tb = max(first_after(w, t, a.world)
			    for w in ag.workers.values())
			rows.append((ta - t, tr - t, tb - t, tb - tr))
			print("# run %d: kill local rank %d: survivors %.3f s, ready "
			    "%.3f s, all %.3f s" % (i + 1, lr, ta - t, tr - t, tb - t),
			    file=sys.stderr, flush=True)
			# Let the job settle in its full group before the next kill.
			ag.wait_steps(max(w.last_step() or 0 for w in
			    ag.workers.values()) + 10, timeout=120)
	finally:
		ag.close()
		d.stop()
	print("| torch %s gloo, %d workers, fake agent, %d runs, %s s sleep "
	    "per step | median (min-max) s |" % (os.path.basename(
	    os.path.dirname(os.path.dirname(a.python))), a.world, len(rows),
	    a.step_delay))
	print("| --- | --- |")
	print("| (a) SIGKILL -> every survivor stepping again (group of %d) | %s |"
	    % (a.world - 1, fmt([r[0] for r in rows])))
	print("| SIGKILL -> the replacement says ready (its own start-up) | %s |"
	    % fmt([r[1] for r in rows]))
	print("| (b) SIGKILL -> every rank, the replacement too, stepping (group of %d) | %s |"
	    % (a.world, fmt([r[2] for r in rows])))
	print("| ready -> every rank stepping (the join itself) | %s |"
	    % fmt([r[3] for r in rows]))


if __name__ == "__main__":
	main()
