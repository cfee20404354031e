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
(restarted on its database), a worker that holds the job's state
SIGSTOPped (the agents' --progress_timeout kills it, or a later event
does; a replacement stopped before it said ready is caught by rdzvd's
repair timeout alone, a restart).  It always leaves
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

test_chaos_hsdp does the same to a sharded job: examples/
torch_hsdp_repair.py, 2 replica groups (one an agent) x 2 shards, FSDP2
(RDZV_CHAOS_HSDP_SEEDS; off by default, saying why: a known failure
below).  Its
kills keep one replica whole: they take workers of any group while both
are, else only of the one that is not (a rank holds its shard once it
arrived from the other replica); a death in each would leave no whole
replica, and the restart is another test.  It must end as the DDP job
does, every shard's parameters and optimizer state the same in both
replicas.  The known failure (seed 1, three runs of three on this
machine under load): a replica's replacement killed while its shard
peer, also a replacement, builds its model or waits for its heal leaves
that peer (or the other replica's donor, blocked in the heal's send)
without a step until the agent's watchdog kills it too; with no
replica whole the job restarts.

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

import json
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
HSDP = os.path.join(rt.top_srcdir(), "examples", "torch_hsdp_repair.py")
LIMIT, EPOCHS, BATCH = 24000, 6, 16
LWS = 2			# workers an agent
CHAOS_S = 60.0		# seconds of events, at most
ARGS = ["--limit", str(LIMIT), "--epochs", str(EPOCHS), "--batch",
        str(BATCH), "--workers", "2", "--hidden", "32", "--log-ids"]
# HSDP: 2 replica groups (one an agent) x 2 shards; --step-delay paces
# it to train about as long as the DDP job.
H_SAMPLES, H_EPOCHS, H_BATCH = 8192, 2, 8
H_ARGS = ["--samples", str(H_SAMPLES), "--epochs", str(H_EPOCHS),
          "--batch", str(H_BATCH), "--step-delay", "0.05", "--log-ids"]
KINDS = tuple(k for k in os.environ.get(
    "RDZV_CHAOS_KINDS", "kill,kill,kill,two,rdzvd,stop").split(",") if k)


def agents(scope, d, job, hsdp=False):
    argv = ["--nnodes", "2", "--nproc_per_node", str(LWS),
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
            "--max_restarts", "0", "--grace", "2", "--progress_timeout",
            "6", "--rdzv_conf", conf(0.2, 5.0, "replicas=2") if hsdp else
            conf(0.2, 5.0)]
    env = {"PYTHON": sys.executable, "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.path.join(
               rt.top_srcdir(), "python")] + os.environ.get(
                   "PYTHONPATH", "").split(os.pathsep)).rstrip(os.pathsep)}
    prog = [HSDP] + H_ARGS if hsdp else [TWIN] + ARGS
    return [scope.agent(argv, env=env, program=prog) for _ in range(2)]


def workers(*ags):
    return [w for x in ags for w in x.children()]


# A replacement holds the job's state once it joined a grow round (the
# helper's line as it got the donor's state); a grow round pushed is not
# enough: its group may never form (a SIGSTOPped peer holds it).
# HSDP: a replica group's rank once its shard arrived from the other
# replica (its heal is done; "healed in round" comes before).
JOINED_RE = re.compile(r"rdzv\.repair\[(\d+)\]: rank \d+(?:: joined grow "
                       r"round| \(replica \d+ shard \d+\): shard healed "
                       r"from replica)")


def holders(ags, old):
    """The workers that hold the job's state: old (the first workers,
    and each replacement since it joined) less the dead, plus the
    replacements that joined since."""
    joined = {int(p) for p in JOINED_RE.findall(
        "".join(x.output() for x in ags))}
    return (old | joined) & set(workers(*ags))


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


def ddp_victims(rng, ags, hold, n):
    """n workers of any agent; one spared when they would take every
    holder (spare_one)."""
    ws = workers(*ags)
    if not ws:          # the job ended since the schedule looked
        return []
    return spare_one(rng.sample(ws, min(n, len(ws))) if n > 1 else
                     [rng.choice(ws)], hold)


def hsdp_victims(rng, ags, hold, n):
    """n workers of one replica group (an agent's workers): any group's
    while every group is whole (its LWS workers all holders), else only
    the one that is not: the other holds every shard its heal needs.  A
    death in each would leave no whole replica (rdzvd restarts: "no
    replica whole"), which is another test."""
    broken = [x for x in ags if len(x.children()) != LWS or
              not set(x.children()) <= hold]
    if len(broken) > 1:
        return []
    ws = (broken or [rng.choice(ags)])[0].children()
    return rng.sample(ws, min(n, len(ws)))


def schedule(seed, d, ags, victims):
    """Draws and applies the seed's events while the job runs; returns
    what it did, one string an event, and the worker left stopped.
    victims(rng, agents, holders, n) picks the workers a kill may take."""
    rng = random.Random(seed)
    done = []
    stopped = None
    old = set(workers(*ags))
    unjoined = 0
    end = time.monotonic() + CHAOS_S
    while time.monotonic() < end:
        time.sleep(rng.uniform(1.0, 3.0))
        if not all(x.alive() for x in ags):
            break
        if not workers(*ags):
            continue
        old = holders(ags, old)
        # A stopped worker holds the state but gives none: the
        # watchdog kills it, so another must be left.
        hold = old - {stopped}
        kind = rng.choice(KINDS)
        if kind == "stop" and stopped is not None:
            kind = "kill"
        left = UNJOINED_KILLS - unjoined
        if kind in ("kill", "stop", "two"):
            v = within_budget(victims(rng, ags, hold, 2 if kind == "two"
                                      else 1), old, left)
            # A replacement stopped before it said ready is watched by
            # nothing but rdzvd's repair timeout (a restart): only a
            # holder is stopped, which the agent's watchdog catches.
            if not v or kind == "stop" and v[0] not in hold:
                continue
            unjoined += len([x for x in v if x not in old])
        if kind == "kill":
            _kill(v[0])
            done.append("kill %d" % v[0])
        elif kind == "two":
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


def one_seed(seed, hsdp=False):
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict")
    job = "chaos%s%d" % ("-hsdp" if hsdp else "", seed)
    name = "HSDP seed %d (RDZV_CHAOS_HSDP_SEEDS=%d" % (seed, seed) if hsdp \
        else "seed %d (RDZV_CHAOS_SEEDS=%d" % (seed, seed)
    stopped = None
    with Scope("chaos-") as s:
        ags = agents(s, d, job, hsdp)
        rt.wait_until(lambda: len(cl.COMMIT_RE.findall("".join(
            x.output() for x in ags))) >= 40, timeout=180,
            what="the job stepping")
        try:
            done, stopped = schedule(seed, d, ags, hsdp_victims if hsdp
                                     else ddp_victims)
            for x in ags:
                rc = x.wait(400)
                check(rc == 0, "%s): agent exit %s\n%s" % (
                    name, rc, x.output()[-4000:]))
        except BaseException:
            log("%s repeats it): events %s" % (
                name, job_events(d, job, soon=True)))
            log("\n".join(ln for ln in "".join(x.output() for x in ags
                                                ).splitlines()
                          if "COMMIT" not in ln)[-20000:])
            raise
        finally:
            if stopped is not None:
                _kill(stopped)
        out = "".join(x.output() for x in ags)
        ev = job_events(d, job)
    d.stop()
    log("%s): %s; events: %s" % (name, done, [t for t in ev if
        t.startswith(("repair", "restart"))]))
    check(not any(t.startswith("restart ") for t in ev),
          "%s): a restart: %s" % (name, ev))
    try:
        if hsdp:
            # Every shard's parameters and optimizer state the same in
            # both replicas, at the same step.
            reports = [json.loads(m) for m in re.findall(
                r"REPORT (\{.*\})$", out, re.M)]
            check(sorted(r["rank"] for r in reports) == [0, 1, 2, 3],
                  reports)
            for shard in (0, 1):
                ds = {r["digest"] for r in reports if r["shard"] == shard}
                check(len(ds) == 1, reports)
            check(len({r["steps"] for r in reports}) == 1, reports)
            cl.check_samples(out, H_SAMPLES, H_BATCH, H_EPOCHS)
        else:
            finals = {float(x) for x in re.findall(
                r"FINAL rank \d+ step \d+ test_loss ([0-9.]+)", out)}
            check(len(finals) == 1, "test losses %s" % finals)
            cl.check_samples(out, LIMIT, BATCH, EPOCHS)
    except AssertionError as e:
        # The whole output (every COMMIT line) for whoever reads the
        # failure: beside the test's log.
        keep = os.path.abspath("test_repair_chaos.%s%d.out" % (
            "hsdp" if hsdp else "seed", seed))
        with open(keep, "w") as f:
            f.write(out)
        raise AssertionError("%s repeats it): %s (the agents' output: %s)"
                             % (name, e, keep))


def _seeds(var, default):
    return [int(x) for x in os.environ.get(var, default).split(",") if x]


def _chaos_on():
    if os.environ.get("RDZV_TEST_CHAOS") == "0":
        rt.skip("RDZV_TEST_CHAOS=0 in the environment")


def test_chaos():
    _chaos_on()
    if not os.path.exists(os.path.join(cl.REPAIR_DATA,
                                       "train-images-idx3-ubyte.gz")):
        rt.skip_all("no Fashion-MNIST at %s" % cl.REPAIR_DATA)
    sanitizers = os.environ.get("RDZV_SANITIZERS") == "1"
    for seed in _seeds("RDZV_CHAOS_SEEDS", "3,4" if sanitizers else "1,2"):
        log("seed %d (RDZV_CHAOS_SEEDS=%d repeats it)" % (seed, seed))
        one_seed(seed)


def test_chaos_hsdp():
    _chaos_on()
    seeds = _seeds("RDZV_CHAOS_HSDP_SEEDS", "")
    if not seeds:
        rt.skip("off unless RDZV_CHAOS_HSDP_SEEDS names seeds: a known "
                "failure (a replica's replacement killed while its shard "
                "peer waits for its heal can leave the donor blocked in "
                "the heal's send past the next round, and the job "
                "restarts)")
    for seed in seeds:
        log("HSDP seed %d (RDZV_CHAOS_HSDP_SEEDS=%d repeats it)" % (
            seed, seed))
        one_seed(seed, hsdp=True)


if __name__ == "__main__":
    rt.main(globals(), per_test=900.0, total=1500.0)
