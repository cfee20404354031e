# SPDX-License-Identifier: Apache-2.0
"""test_repair_chaos: in-place repair under a seeded random schedule of
failures, torch 2.13 gloo under a real rdzvd and two real rdzv-agents of
two workers each, the workers examples/torch_repair_ddp.py (job.loader():
a DataLoader with 2 worker processes and prefetch 4, AdamW, a logging
all_reduce outside the step, the sample ids of every committed step
logged).

For each seed (RDZV_CHAOS_SEEDS; default "1,2", and "3,4" in the
sanitizer leg, so that a suite run tries four), while the job trains,
the schedule draws one event every 1-3 s for CHAOS_S seconds (or until
training ends): a worker's SIGKILL (any of them: rank 0, a replacement
still loading), two workers killed 0-0.3 s apart, `kill -9` of rdzvd
(restarted on its database), a worker SIGSTOPped (the agents'
--progress_timeout kills it, or a later event does).  It always leaves
one worker that holds the job's state (a first worker, or a replacement
that joined a grow round) besides a stopped one: with none left the job
restarts, which is another test.  The job
must end with both agents exiting 0, no restart, every rank at the same
test loss, and every sample of every epoch trained exactly once
(compatlib.check_samples: each committed step the global batch at the
job's position).  A failure says its seed; RDZV_CHAOS_SEEDS=N draws the
same events (their timing, and so what they hit, varies with the
machine).  At most three replacements that have not joined are killed
or stopped in a seed: a fourth of one local rank between two grows is
rdzvd's rule for a replacement that cannot start (a restart), another
test.  RDZV_CHAOS_KINDS=kill,two,rdzvd,stop picks the kinds (weights
by repetition).

On in every suite run (RDZV_TEST_CHAOS=0 skips it, saying so).  Found
and fixed with it: a job-wide count of replacements dead before they
joined (now per local rank), a READY replacement forgotten by an rdzvd
restarted under it, the end of training waiting for a node whose every
worker was a replacement, a repair "from nothing" (every rank of a grow
a replacement that never got the state: epoch 0 trained again), a
store's error in a round's group build taken for a script error, a rank
waiting in group.arrive killed by the watchdog as hung, a replacement
stopped as it joined never caught, and a READY replacement taken into a
shrink round (a death while it waited for its grow) whose own death was
then taken for a replacement's dead before it joined: nothing shrank,
every survivor waited on it until the watchdog killed them, and the job
failed with no worker holding its state; and a shrink round sent with no
donor (the one worker left that held the state was the replacement
still named pending since the repair's first death, in a round since:
the donor's rule left it out, the repair's rule counted it), after which
the replacements trained epoch 0 again from nothing.
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
LIMIT, EPOCHS, BATCH = 24000, 6, 16
CHAOS_S = 60.0		# seconds of events, at most
ARGS = ["--limit", str(LIMIT), "--epochs", str(EPOCHS), "--batch",
        str(BATCH), "--workers", "2", "--hidden", "32", "--log-ids"]
KINDS = tuple(k for k in os.environ.get(
    "RDZV_CHAOS_KINDS", "kill,kill,kill,two,rdzvd,stop").split(",") if k)


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


# A replacement holds the job's state once it joined a grow round (the
# helper's line as it got the donor's state); a grow round pushed is not
# enough: its group may never form (a SIGSTOPped peer holds it).
JOINED_RE = re.compile(r"rdzv\.repair\[(\d+)\]: rank \d+: joined grow round")


def holders(a, b, old):
    """The workers that hold the job's state: old (the first workers,
    and each replacement since it joined) less the dead, plus the
    replacements that joined since."""
    joined = {int(p) for p in JOINED_RE.findall(a.output() + b.output())}
    live = set(workers(a, b))
    return (old | joined) & live


def spare_one(victims, old):
    """victims, less one of them when they would take every worker of
    old (holders(): they hold the job's state): a job with none of them
    left has nothing to repair from, and its restart (rdzvd: "no worker
    that holds the job's state would be left") is another test."""
    if not old or old - set(victims):
        return victims
    keep = min(old & set(victims))
    return [v for v in victims if v != keep]


# rdzvd restarts a job whose local rank's replacements die before they
# join more than 3 times between two grows (a replacement that cannot
# start is no repair: rz_failure).  The schedule kills (or stops) at most
# that many replacements that have not joined (not holders) in a seed:
# it cannot tell when rdzvd's count starts afresh (a grow's opening).
UNJOINED_KILLS = 3


def within_budget(victims, hold, budget):
    """victims, less the replacements that never joined (not in hold)
    beyond budget of them."""
    out = []
    for v in victims:
        if v not in hold:
            if budget <= 0:
                continue
            budget -= 1
        out.append(v)
    return out


def schedule(seed, d, a, b, job):
    """Draws and applies the seed's events while the job runs; returns
    what it did, one string an event."""
    rng = random.Random(seed)
    done = []
    stopped = None
    old = set(workers(a, b))
    unjoined = 0
    end = time.monotonic() + CHAOS_S
    while time.monotonic() < end:
        time.sleep(rng.uniform(1.0, 3.0))
        if not running(a, b):
            break
        ws = workers(a, b)
        old = holders(a, b, old)
        # A stopped worker holds the state but gives none: the
        # watchdog kills it, so another must be left.
        hold = old - {stopped}
        if not ws:
            continue
        kind = rng.choice(KINDS)
        if kind == "stop" and stopped is not None:
            kind = "kill"
        left = UNJOINED_KILLS - unjoined
        if kind == "kill":
            v = within_budget(spare_one([rng.choice(ws)], hold), old,
                              left)
            if not v:
                continue
            v = v[0]
            unjoined += v not in old
            _kill(v)
            done.append("kill %d" % v)
        elif kind == "two":
            v = within_budget(spare_one(rng.sample(ws, min(2, len(ws))),
                                        hold), old, left)
            unjoined += len([x for x in v if x not in old])
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
            v = within_budget(spare_one([rng.choice(ws)], hold), old,
                              left)
            if not v:
                continue
            stopped = v[0]
            unjoined += stopped not in old
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
        # The whole output (every COMMIT line) for whoever reads the
        # failure: beside the test's log.
        keep = os.path.abspath("test_repair_chaos.seed%d.out" % seed)
        with open(keep, "w") as f:
            f.write(out)
        raise AssertionError("seed %d (RDZV_CHAOS_SEEDS=%d repeats it): %s "
                             "(the agents' output: %s)" % (seed, seed, e,
                                                           keep))


def test_chaos():
    if os.environ.get("RDZV_TEST_CHAOS") == "0":
        rt.skip("RDZV_TEST_CHAOS=0 in the environment")
    if not os.path.exists(os.path.join(cl.REPAIR_DATA,
                                       "train-images-idx3-ubyte.gz")):
        rt.skip_all("no Fashion-MNIST at %s" % cl.REPAIR_DATA)
    default = "3,4" if os.environ.get("RDZV_SANITIZERS") == "1" else "1,2"
    seeds = [int(x) for x in os.environ.get("RDZV_CHAOS_SEEDS",
                                            default).split(",") if x]
    for seed in seeds:
        log("seed %d (RDZV_CHAOS_SEEDS=%d repeats it)" % (seed, seed))
        one_seed(seed)


if __name__ == "__main__":
    rt.main(globals(), per_test=900.0, total=900.0)
