#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The training demo: rdzv keeping data-parallel jobs alive on one machine.

One rdzvd (its status page's address printed first) serves every part;
each part's job is two rdzv-agents ("node A", "node B") of two workers:

  2. examples/ddp_mlp on Fashion-MNIST; a worker is SIGKILLed and
     repaired in place: the survivors (same PIDs) go on in a shrink round
     of 3, the agent's replacement joins them in a grow round of 4;
  3. the same job, later: rdzvd is killed with SIGKILL once its members'
     step counts are seen rising, and started again on the same
     database: the agents reconnect, the workers (same PIDs) train on
     and the job finishes;
  4. the same failure in a job that cannot repair (RDZV_REPAIR=0): every
     worker stops, the job restarts (restart 1 on both nodes) and resumes
     from its checkpoint;
  5. (--torch) a PyTorch 2.x DDP program, examples/torch_ddp_repair.py,
     repaired in place by the rdzv.repair helper;
  6. a PNG of the status page (headless Chromium), its path named.

Each part checks its own claims and ends with PASS or FAIL and what did
not happen; the exit status is 0 only when every part passed.  Run by
scripts/demo.sh after the build:

    demo_train.py [--train] [--torch]      (default: both)

Environment: RDZV_TOP_BUILDDIR (the build), RDZV_DEMO_DIR (where its
files go, the screenshot too; default a new directory in /tmp),
TORCH2_PYTHON (a python with torch 2.x; default
~/.cache/rdzv/torch-2.13/bin/python).
"""
import os
import re
import signal
import sys
import tempfile
import time

import demo_lib as dl
from demo_lib import say, wait_for, workers

MLP = os.path.join(dl.TOP_BUILDDIR, "examples", "ddp_mlp")
# Each epoch is 469 steps of 4 x 32 samples, 1 to 6 s on a 2-core
# machine, idle to loaded.  Part 2's job trains 6 epochs: enough on the
# fastest for the replacement to join (about 1 s), then for two of
# rdzvd's progress samples (one a second) to show steps rising, and for
# rdzvd's kill and restart while it still trains.
MLP_ARGS = ["--batch", "32", "--lr", "0.1", "--hidden", "128",
            "--data", dl.DATA, "--threads", "1"]
# The story's lines: the agents' own, and rank 0's per-epoch, repair,
# resume and final lines (not its per-quarter progress).
MLP_SHOW = re.compile(r"rdzv-agent\[|^(\[\w+\]:)?(ddp_mlp: world|epoch \d+ "
                      r"loss|repaired:|resumed from|final test_acc)")
# Rank 0's progress lines: training going on.
TRAIN_RE = re.compile(r"epoch \d+ +(\d+% step \d+/\d+|loss [0-9.]+)")
ROUND_RE = re.compile(r"rdzv-agent\[\d+\]: round \d+: group rank \d+ of \d+"
                      r", ranks .*, restart (\d+)$", re.M)


def wait_training(demo, job, least=1, timeout=180):
    """Waits until both nodes' workers all reported a step >= least (in
    rdzvctl --json members); returns {node: step}."""
    return wait_for(lambda: (lambda s: s if len(s) == 2 and
                             min(s.values()) >= least else None)(
                                 demo.steps(job)),
                    timeout, "%s: both nodes' workers reporting steps" % job)


def repair_story(part):
    """Parts 2 and 3: a worker SIGKILLed and repaired in place; later
    rdzvd SIGKILLed and restarted, the workers untouched."""
    demo, job = part.demo, part.job
    part.begin(2, "a worker SIGKILLed, repaired in place")
    prog = [MLP, "--epochs", "6"] + MLP_ARGS
    a = part.agent("node A", prog)
    b = part.agent("node B", prog)
    say("two agents started job %r: 2 nodes x 2 workers of ddp_mlp, "
        "6 epochs (status: %s#%s)" % (job, demo.url, job))
    wait_training(demo, job)
    demo.ctl("members", job)
    part.kill_worker_repaired(120, "started, loaded its data")
    part.check(re.search(r"repaired: round \d+ \(shrink\), world 3",
                         part.output()) is not None,
               "the survivors went on in the shrink round (world 3)")

    part.begin(3, "kill -9 rdzvd mid-training, the workers untouched")
    # Training, seen from rdzvd: the members' step counts rising.
    s0 = wait_training(demo, job)
    s1 = wait_for(lambda: (lambda s: s if len(s) == 2 and all(
        s[n] > s0[n] for n in s0) else None)(demo.steps(job)), 60,
        "steps rising in rdzvctl members")
    say("steps rising in `rdzvctl --json members %s`: %s -> %s" % (
        job, sorted(s0.values()), sorted(s1.values())))
    pids = {x.node: workers(x) for x in (a, b)}
    say("workers: " + part.pids())
    seen = [len(x.output()) for x in (a, b)]
    old = demo.d.pid
    t0 = time.monotonic()
    demo.d.kill9()
    say("kill -9 rdzvd (pid %d); starting it again on the same database "
        "and port" % old)
    demo.d.start()
    say("rdzvd is back (pid %d) after %.2f s" % (demo.d.pid,
                                                 time.monotonic() - t0))
    wait_for(lambda: (lambda doc: doc and len(doc["members"]) == 2 and all(
        m["connected"] for m in doc["members"]))(
            demo.ctl_json("members", job)), 60,
        "both agents connected again (rdzvctl members)")
    part.check(True, "both agents reconnected (rdzvctl members: "
               "connected)")
    part.check({x.node: workers(x) for x in (a, b)} == pids,
               "the workers kept their PIDs", part.pids())
    # The workers' own lines since the kill: rank 0's progress.
    line = wait_for(lambda: next((m.group(0) for x, n in zip((a, b), seen)
                                  for m in [TRAIN_RE.search(
                                      x.output()[n:])] if m), None),
                    120, "rank 0 training on after the kill")
    part.check(True, "they trained on; rank 0 since: %r" % line)
    part.finish_agents(300)
    texts = [e["text"] for e in demo.events(job)]
    since = next((i for i, t in enumerate(texts)
                  if t.startswith("rdzvd restarted")), None)
    part.check(since is not None, "rdzvd's events record its restart",
               texts[-8:])
    part.check(since is not None and not any(
        t.startswith("restart ") for t in texts[since:]),
        "the job did not restart", texts[since or 0:])
    part.check("close succeeded" in texts, "the job succeeded", texts)
    m = re.search(r"final test_acc ([0-9.]+)", part.output())
    if m:
        say("final test accuracy %s" % m.group(1))
    demo.ctl("events", job)


def restart_story(part):
    """Part 4: the same failure when the workers cannot repair."""
    demo, job = part.demo, part.job
    part.begin(4, "the same failure in a job that cannot repair "
               "(RDZV_REPAIR=0): a restart from the checkpoint")
    ckpt = os.path.join(part.scope.tmp, "ckpt")
    prog = [MLP, "--epochs", "3", "--checkpoint", ckpt,
            "--checkpoint-every", "100"] + MLP_ARGS
    env = {"RDZV_REPAIR": "0"}
    a = part.agent("node A", prog, env=env)
    b = part.agent("node B", prog, env=env)
    say("two agents started job %r with RDZV_REPAIR=0: ddp_mlp, 3 epochs, "
        "a checkpoint every 100 steps" % job)
    wait_training(demo, job)
    # Killed once the first checkpoint is there, early in the job.
    wait_for(lambda: os.path.exists(ckpt), 120, "a checkpoint")
    before = set(workers(a)) | set(workers(b))
    say("workers before: " + part.pids())
    victim = workers(b)[0]
    say("kill -9 worker pid %d (rank %s) of node B, a checkpoint written"
        % (victim, dl.env_rank(victim)))
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(ROUND_RE.findall(a.output())) >= 2 and
             len(ROUND_RE.findall(b.output())) >= 2, 120,
             "a new round on both nodes")
    wait_for(lambda: len(workers(a)) == 2 and len(workers(b)) == 2, 60,
             "4 workers")
    say("workers after:  " + part.pids())
    now = set(workers(a)) | set(workers(b))
    part.check(not (now & before), "every worker was restarted (4 new "
               "PIDs)", "kept: %s" % sorted(now & before))
    part.finish_agents(300)
    for x in (a, b):
        counts = [int(c) for c in ROUND_RE.findall(x.output())]
        part.check(counts[-1:] == [1], "%s: restart count 1" % x.node,
                   "its rounds' restart counts: %s" % counts)
    m = re.search(r"resumed from \S+: epoch (\d+), (\d+) samples done",
                  part.output())
    part.check(m is not None and (int(m.group(1)), int(m.group(2))) !=
               (1, 0), "the job resumed from its checkpoint" +
               (" (epoch %s, %s samples done)" % m.groups() if m else ""))
    texts = [e["text"] for e in demo.events(job)]
    part.check(any(t.startswith("restart 1 of") for t in texts) and
               not any(t.startswith("repair: ") for t in texts),
               "rdzvd restarted it once, with no repair round", texts)
    part.check("close succeeded" in texts, "the job succeeded", texts)
    demo.ctl("events", job)


def main():
    parts = set(a.lstrip("-") for a in sys.argv[1:]) or {"train", "torch"}
    bad = parts - {"train", "torch"}
    if bad:
        sys.exit("usage: demo_train.py [--train] [--torch]")
    for f in (dl.rt.rdzvd_path(), dl.AGENT, dl.RDZVCTL, MLP):
        if not os.path.exists(f):
            sys.exit("demo: %s is missing: build rdzv first "
                     "(bash scripts/demo.sh builds it)" % f)
    if not os.path.exists(os.path.join(dl.DATA,
                                       "train-images-idx3-ubyte.gz")):
        sys.exit("demo: no Fashion-MNIST at %s: scripts/deps.sh installs "
                 "Debian's dataset-fashion-mnist" % dl.DATA)
    work = os.path.abspath(os.environ.get("RDZV_DEMO_DIR") or
                           tempfile.mkdtemp(prefix="rdzv-demo-"))
    if os.path.exists(os.path.join(work, "rdzvd")):
        sys.exit("demo: %s holds an earlier run's files: name an empty "
                 "directory in RDZV_DEMO_DIR" % work)
    os.makedirs(work, exist_ok=True)
    demo = dl.Demo(work)
    say("rdzvd is up: 127.0.0.1:%d, database %s" % (demo.port, demo.d.db))
    say("status page: %s  (open it while the demo runs)" % demo.url)
    say("files of this run: %s" % work)
    want = []
    if "train" in parts:
        want += [2, 3, 4]
        dl.run_part(demo, "mnist", MLP_SHOW.search, repair_story)
        dl.run_part(demo, "mnist-norepair", MLP_SHOW.search, restart_story)
    if "torch" in parts:
        import demo_torch
        want += [5]
        dl.run_part(demo, "torch-ddp", demo_torch.SHOW.search,
                    demo_torch.story)
    want += [6]
    import demo_page
    demo_page.part(demo, "mnist" if "train" in parts else "torch-ddp")
    demo.d.stop()
    got = {n: ok for n, _, ok in demo.verdicts}
    missing = [n for n in want if n not in got]
    failed = sorted(n for n, ok in got.items() if not ok) + missing
    say()
    if failed:
        say("FAILED: part%s %s (the lines above say what did not "
            "happen)" % ("s" if len(failed) > 1 else "",
                         ", ".join(map(str, failed))))
        return 1
    say("passed: part%s %s" % ("s" if len(got) > 1 else "",
        ", ".join(map(str, sorted(got)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
