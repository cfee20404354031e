# SPDX-License-Identifier: Apache-2.0
"""test_repair_ddp_twin: a plain DDP script and its repairable twin
(examples/torch_plain_ddp.py, examples/torch_repair_ddp.py), torch 2.13
gloo under a real rdzvd and two real rdzv-agents of two workers each.

- The twin differs from the plain script in at most 10 lines each way
  (lines `diff` marks "<" and ">").
- The plain script, failure-free, gives the reference test loss.
- The twin goes through 3 SIGKILLs, each once the previous repair grew
  the job back: the first is a rank killing itself just before the
  logging all_reduce (outside the step: its peers are blocked in it), the
  next two at random points of a random rank's step.  It must end with no
  restart (3 shrinks, 3 grows), no traceback, every survivor saying one
  line per repair, each replacement starting with its process group
  (dist.get_rank() right after init_process_group), a test loss within
  0.1 of the reference, and, from the sample ids each rank logs at each
  committed step (a DataLoader with a worker process and prefetch), each
  epoch's committed samples exactly the epoch's full global batches: no
  sample trained twice or skipped.
"""

import os
import random
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib as cl                                  # noqa: E402
cl.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import Scope, conf, job_events          # noqa: E402
from compatlib import check, log                        # noqa: E402

EX = os.path.join(rt.top_srcdir(), "examples")
PLAIN = os.path.join(EX, "torch_plain_ddp.py")
TWIN = os.path.join(EX, "torch_repair_ddp.py")
LIMIT, EPOCHS, BATCH = 48000, 4, 16
ARGS = ["--limit", str(LIMIT), "--epochs", str(EPOCHS), "--batch",
    str(BATCH), "--workers", "1", "--hidden", "32", "--log-ids"]
TOLERANCE = 0.1			# test loss, absolute
_FINAL = re.compile(r"FINAL rank (\d+) step (\d+) test_loss ([0-9.]+)")
st = {}


def agents(scope, d, job, prog, extra=()):
    argv = ["--nnodes", "2", "--nproc_per_node", "2",
        "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
        "--max_restarts", "0", "--grace", "2", "--rdzv_conf", conf(0.2, 5.0)]
    # The workers' python finds rdzv (as an installed one would), so the
    # agents' warm spares work: a replacement is ready within ~0.1 s of
    # a kill, while the survivors make the group of the shrink.
    env = {"PYTHON": sys.executable, "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([os.path.join(rt.top_srcdir(),
            "python")] + os.environ.get("PYTHONPATH", "").split(
            os.pathsep)).rstrip(os.pathsep)}
    return [scope.agent(argv, env=env, program=[prog] + ARGS + list(extra))
        for _ in range(2)]


def finals(out):
    got = [(int(r), int(s), float(l)) for r, s, l in _FINAL.findall(out)]
    check(len(got) == 4 and len({x[2] for x in got}) == 1, out[-3000:])
    return got[0][2]


def test_diff():
    r = subprocess.run(["diff", PLAIN, TWIN], capture_output=True,
        text=True)
    lines = r.stdout.splitlines()
    gone = sum(1 for x in lines if x.startswith("<"))
    new = sum(1 for x in lines if x.startswith(">"))
    log("diff plain twin: %d lines out, %d in" % (gone, new))
    check(0 < gone <= 10 and 0 < new <= 10, r.stdout)


def test_reference():
    if not os.path.exists(os.path.join(cl.REPAIR_DATA,
            "train-images-idx3-ubyte.gz")):
        rt.skip_all("no Fashion-MNIST at %s" % cl.REPAIR_DATA)
    d = rt.Rdzvd()
    with Scope("twin-") as s:
        a, b = agents(s, d, "plain", PLAIN)
        for x in (a, b):
            check(x.wait(300) == 0, x.output()[-3000:])
        st["ref"] = finals(a.output() + b.output())
    d.stop()
    log("failure-free plain run: test loss %.4f" % st["ref"])


def test_twin_three_kills():
    # Opt-in: with the reference run it takes 3-5 minutes (4 epochs, so
    # that the third kill never comes as the job ends), too long for every
    # CI leg.  With warm spares a grow round comes ~0.1 s after each
    # shrink; it hung 1 run in 3 to 6 here until the helper's ranks came
    # to a round all together or not at all (group.arrive): a survivor
    # whose store wait the grow cut left the shrink's group while its
    # peers, already past the store, waited in gloo's connect to it.
    # RDZV_TEST_TWIN_KILLS=1 runs it; RDZV_TEST_SEED=N repeats a run's
    # kill points.  Seed 430863758 found two defects, both fixed: a grow
    # agreed on while a rank had left the survivors' group for it (the
    # job hung), and a replacement, donor before its script tracked its
    # optimizer, that sent none (the replicas drifted apart).
    if os.environ.get("RDZV_TEST_TWIN_KILLS") != "1":
        rt.skip("long (3-5 minutes with its reference run); "
                "RDZV_TEST_TWIN_KILLS=1 runs it")
    d = rt.Rdzvd()
    with Scope("twin-") as s:
        a, b = agents(s, d, "twin", TWIN, ["--die-at-log", "20", "3"])
        try:
            kill3(d, a, b)
        except BaseException:
            dump(d, a, b)
            raise
        try:
            for x in (a, b):
                check(x.wait(400) == 0, x.output()[-4000:])
        except BaseException:
            dump(d, a, b)
            raise
        out = a.output() + b.output()
    ev = job_events(d, "twin")
    d.stop()
    check_twin(ev, out)


def dump(d, a, b):
    """What a failure needs to be understood: the events, the agents'
    output but the sample ids."""
    log("events: %s" % events(d))
    log("agents' output but the COMMIT lines:\n" + "\n".join(
        ln for ln in (a.output() + b.output()).splitlines()
        if "COMMIT" not in ln)[-20000:])


def events(d):
    """The twin job's events; none before its first agent joined."""
    return job_events(d, "twin", soon=True)


def kill3(d, a, b):
    """The three kills (module docstring), each once the job is whole."""
    seed = int(os.environ.get("RDZV_TEST_SEED", "0")) or \
        random.randrange(1, 1 << 30)
    log("kill points: RDZV_TEST_SEED=%d repeats them" % seed)
    rng = random.Random(seed)
    for k in range(3):
        rt.wait_until(lambda: sum(1 for t in events(d)
            if t.startswith("repair: grow")) == k, timeout=180,
            what="grow %d" % k)
        rt.wait_until(lambda: len(a.children()) == 2 and
            len(b.children()) == 2, timeout=120, what="4 workers")
        if k > 0:	# the grow done: every rank committed a step in it
            at = (len(a.output()), len(b.output()))
            rt.wait_until(lambda: stepping4(a.output()[at[0]:] +
                b.output()[at[1]:]), timeout=180,
                what="4 ranks stepping after grow %d" % k)
        if k == 0:	# rank 3 kills itself at step 20's logging
            rt.wait_until(lambda: any(t.startswith("repair: shrink")
                for t in events(d)), timeout=180,
                what="the death at the logging all_reduce")
            continue
        time.sleep(rng.uniform(0.5, 2.0))
        victim = rng.choice(a.children() + b.children())
        log("kill %d: SIGKILL pid %d" % (k, victim))
        os.kill(victim, signal.SIGKILL)
        rt.wait_until(lambda: sum(1 for t in events(d)
            if t.startswith("repair: shrink")) == k + 1, timeout=60,
            what="shrink %d" % (k + 1))


def stepping4(out):
    """Whether out has a committed step of each of 4 ranks in world 4."""
    return len({r for _, _, w, r, _, _ in cl.COMMIT_RE.findall(out)
                if w == "4"}) == 4


def check_twin(ev, out):
    """What the module docstring says of the twin's run."""
    check(sum(1 for t in ev if t.startswith("repair: shrink")) == 3, ev)
    check(sum(1 for t in ev if t.startswith("repair: grow")) == 3, ev)
    check(not any(t.startswith("restart ") or "escalated" in t for t in ev),
        ev)
    # A crash's trace (RDZV_REPAIR_DEBUG=1's own lines quote the errors
    # a repair took, and torch's C++ log may say a group being made when
    # a peer died failed, which the helper took: not counted).
    plain = "\n".join(ln for ln in out.splitlines()
                      if "rdzv.repair[" not in ln and
                      not re.search(r"\[E\d{4} [0-9:.]+ ", ln))
    bad = [i for i in (plain.find("Traceback"),
                       plain.find("Connection closed")) if i >= 0]
    check(not bad, "\n".join(ln for ln in plain[max(min(bad or [0]) - 3000,
        0):min(bad or [0]) + 6000].splitlines() if "COMMIT" not in ln))
    check("dist.all_reduce outside `with job.step()` was cut off" in out,
        "no survivor was in the logging all_reduce: " + out[-3000:])
    # One line per repair, on each rank: 3 survivors of each of 3 deaths
    # (a survivor that found the grow already there goes to it at once).
    said = re.findall(r"rdzv\.repair\[\d+\]: rank \d+: (?:shrink|grow|"
                      r"joined grow) round \d+, world \d+ -> \d+, [0-9.]+ s "
                      r"lost, at step \d+", out)
    check(len(said) >= 9, "\n".join(ln for ln in out.splitlines()
                                    if "rdzv.repair" in ln))
    # dist.get_rank() right after init_process_group, in the replacements
    # too (one killed before it printed is not counted).
    check(len(re.findall(r"rank \d of \d starts", out)) >= 6, out[-3000:])
    loss = finals(out)
    log("twin through 3 kills: test loss %.4f, failure-free %.4f" % (
        loss, st["ref"]))
    check(abs(loss - st["ref"]) <= TOLERANCE, (loss, st["ref"]))
    cl.check_samples(out, LIMIT, BATCH, EPOCHS)


if __name__ == "__main__":
    rt.main(globals(), per_test=600.0, total=1200.0)
