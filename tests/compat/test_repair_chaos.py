# SPDX-License-Identifier: Apache-2.0
"""test_repair_chaos: in-place repair under a seeded random schedule of
failures, torch 2.13 gloo under a real rdzvd and two real rdzv-agents of
two workers each, the workers examples/torch_repair_ddp.py (job.loader():
a DataLoader with 2 worker processes and prefetch 4, AdamW, a logging
all_reduce outside the step, the sample ids of every committed step
logged).

For each seed of RDZV_CHAOS_SEEDS (default "1,2"), while the job trains,
the schedule draws one event every 1-3 s: a worker's SIGKILL (any of
them: rank 0, a replacement still loading), two workers killed 0-0.3 s
apart, `kill -9` of rdzvd (restarted on its database), a worker
SIGSTOPped until the agents' --progress_timeout kills it.  It always
leaves one worker that holds the job's state (in the group since the
last grow): with none left the job restarts, which is another test.
The job must end with both agents exiting 0, every rank at the same
test loss, and every sample of every epoch trained exactly once
(compatlib.check_samples: each committed step the global batch at the
job's position).  A failure says its seed; RDZV_CHAOS_SEEDS=N draws the
same events (their timing, and so what they hit, varies with the
machine).

Opt-in (RDZV_TEST_CHAOS=1) while it still finds defects: with the
default kinds, a batch of an epoch trained twice (its first global
batch again, late in the epoch: the job's position went back to 0 after
overlapping kills and rdzvd restarts; seeds 3, 6 and 7 have shown it),
and the end of training during a grow whose every replacement sits on
one node (the grow is called off but that node's replacements are then
caught by the watchdog and the job escalates to a restart).  With the
"stop" kind: a replacement SIGSTOPped as it joined is never caught by
the watchdog (it watches workers that have stepped), and every later
grow times out waiting for it.
"""

import os
import random
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib as cl                                  # noqa: E402
cl.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, conf, job_events          # noqa: E402
from compatlib import check, log                        # noqa: E402

TWIN = os.path.join(rt.top_srcdir(), "examples", "torch_repair_ddp.py")
LIMIT, EPOCHS, BATCH = 24000, 3, 16
ARGS = ["--limit", str(LIMIT), "--epochs", str(EPOCHS), "--batch",
        str(BATCH), "--workers", "2", "--hidden", "32", "--log-ids"]
EVENTS = 8			# at most, a seed
# What the schedule draws from; RDZV_CHAOS_KINDS=kill,two,rdzvd,stop
# (weights by repetition).  "stop" is not in the default yet: a stopped
# rank's watchdog kill can cascade over the ranks blocked on it (seen
# with seed 3), a defect still open.
KINDS = tuple(k for k in os.environ.get(
    "RDZV_CHAOS_KINDS", "kill,kill,kill,two,rdzvd").split(",") if k)


def agents(scope, d, job):
    argv = ["--nnodes", "2", "--nproc_per_node", "2",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
            "--max_restarts", "0", "--grace", "2", "--progress_timeout",
            "6", "--rdzv_conf", conf(0.2, 5.0)]
    env = {"PYTHON": sys.executable, "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.path.join(
               rt.top_srcdir(), "python")] + os.environ.get(
                   "PYTHONPATH", "").split(os.pathsep)).rstrip(os.pathsep)}
    return [scope.agent(argv, env=env, program=[TWIN] + ARGS)
            for _ in range(2)]


def workers(a, b):
    return a.children() + b.children()


def running(a, b):
    return a.alive() and b.alive()


def grows(d, job):
    """How many grow rounds the job has had (None: rdzvd not answering,
    e.g. just restarted)."""
    try:
        return sum(1 for t in job_events(d, job, soon=True)
                   if t.startswith("repair: grow"))
    except Exception:
        return None


def spare_one(victims, old):
    """victims, less one of them when they would take every worker of
    old (in the group since the last grow: they hold the job's state): a
    job with none of them left has nothing to repair from, and its
    restart is another test."""
    if not old or old - set(victims):
        return victims
    keep = min(old & set(victims))
    return [v for v in victims if v != keep]


def schedule(seed, d, a, b, job):
    """Draws and applies the seed's events while the job runs; returns
    what it did, one string an event."""
    rng = random.Random(seed)
    done = []
    stopped = None
    seen, old = 0, set(workers(a, b))
    for _ in range(EVENTS):
        time.sleep(rng.uniform(1.0, 3.0))
        if not running(a, b):
            break
        ws = workers(a, b)
        g = grows(d, job)
        if g is not None and g != seen:
            seen, old = g, set(ws)
        old &= set(ws)
        if stopped is not None:
            old.discard(stopped)
        if not ws:
            continue
        kind = rng.choice(KINDS)
        if kind == "stop" and stopped is not None:
            kind = "kill"
        if kind == "kill":
            v = spare_one([rng.choice(ws)], old)
            if not v:
                continue
            v = v[0]
            _kill(v)
            done.append("kill %d" % v)
        elif kind == "two":
            v = spare_one(rng.sample(ws, min(2, len(ws))), old)
            if not v:
                continue
            gap = rng.uniform(0.0, 0.3)
            _kill(v[0])
            time.sleep(gap)
            if len(v) > 1:
                _kill(v[1])
            done.append("kill %s, %.2f s apart" % (v, gap))
        elif kind == "rdzvd":
            d.kill9()
            time.sleep(rng.uniform(0.0, 1.0))
            d.start()
            done.append("rdzvd kill -9, restarted")
        else:
            v = spare_one([rng.choice(ws)], old)
            if not v:
                continue
            stopped = v[0]
            os.kill(stopped, signal.SIGSTOP)
            done.append("SIGSTOP %d" % stopped)
        log("seed %d: %s" % (seed, done[-1]))
    return done, stopped


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def one_seed(seed):
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    job = "chaos%d" % seed
    stopped = None
    with Scope("chaos-") as s:
        a, b = agents(s, d, job)
        rt.wait_until(lambda: len(cl.COMMIT_RE.findall(
            a.output() + b.output())) >= 40, timeout=180,
            what="the job stepping")
        try:
            done, stopped = schedule(seed, d, a, b, job)
            for x in (a, b):
                rc = x.wait(400)
                check(rc == 0, "seed %d: agent exit %s\n%s" % (
                    seed, rc, x.output()[-4000:]))
        except BaseException:
            log("seed %d (RDZV_CHAOS_SEEDS=%d repeats it): events %s" % (
                seed, seed, job_events(d, job, soon=True)))
            log("\n".join(ln for ln in (a.output() + b.output()
                                        ).splitlines()
                          if "COMMIT" not in ln)[-20000:])
            raise
        finally:
            if stopped is not None:
                _kill(stopped)
        out = a.output() + b.output()
        ev = job_events(d, job)
    d.stop()
    log("seed %d: %s; events: %s" % (seed, done, [t for t in ev if
        t.startswith(("repair", "restart"))]))
    check(not any(t.startswith("restart ") for t in ev),
          "seed %d: a restart: %s" % (seed, ev))
    finals = {float(x) for x in re.findall(
        r"FINAL rank \d+ step \d+ test_loss ([0-9.]+)", out)}
    check(len(finals) == 1, "seed %d: test losses %s" % (seed, finals))
    try:
        cl.check_samples(out, LIMIT, BATCH, EPOCHS)
    except AssertionError as e:
        raise AssertionError("seed %d (RDZV_CHAOS_SEEDS=%d repeats it): %s"
                             % (seed, seed, e))


def test_chaos():
    if os.environ.get("RDZV_TEST_CHAOS") != "1":
        rt.skip("opt-in while it still finds open defects (its "
                "docstring); RDZV_TEST_CHAOS=1 runs it")
    if not os.path.exists(os.path.join(cl.REPAIR_DATA,
                                       "train-images-idx3-ubyte.gz")):
        rt.skip_all("no Fashion-MNIST at %s" % cl.REPAIR_DATA)
    seeds = [int(x) for x in os.environ.get("RDZV_CHAOS_SEEDS",
                                            "1,2").split(",") if x]
    for seed in seeds:
        log("seed %d (RDZV_CHAOS_SEEDS=%d repeats it)" % (seed, seed))
        one_seed(seed)


if __name__ == "__main__":
    rt.main(globals(), per_test=900.0, total=900.0)
