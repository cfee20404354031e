# SPDX-License-Identifier: Apache-2.0
"""The demo's PyTorch part: examples/torch_ddp_repair.py, a DDP program
made repairable by the rdzv.repair helper, under two rdzv-agents with
PyTorch 2.x (TORCH2_PYTHON, default the torch 2.13 virtualenv that
scripts/deps.sh makes; the agents start it through PYTHON_EXEC).  A
worker is SIGKILLed: the survivors (same PIDs) go on in a shrink round,
the agent's replacement joins in a grow round with their state, and every
rank ends with the same model and optimizer (the digest each prints).
Run by demo_train.py --torch."""
import json
import os
import re
import subprocess

import demo_lib as dl
from demo_lib import PartFailed, say, wait_for, workers
from agent_lib import spares                            # noqa: E402

PROG = os.path.join(dl.TOP_SRCDIR, "examples", "torch_ddp_repair.py")
# 12000 samples, 4 x 32 a step, 8 epochs: about 750 steps of >= 50 ms
# (37 s or more), so the survivors still train when the replacement
# (python, import torch, the data) is ready to join: 5 to 21 s seen on a
# 2-core machine, idle to loaded.
ARGS = ["--limit", "12000", "--epochs", "8", "--batch", "32",
        "--hidden", "32", "--step-delay", "0.05", "--log-steps", "--report"]
# The agents' lines, rank 0's per-epoch line and the helper's own lines;
# not the per-step STEP lines nor the final REPORTs (summed up below).
SHOW = re.compile(r"rdzv-agent\[|^(\[\w+\]:)?(epoch \d+ step|rdzv\.repair)")
STEP_RE = re.compile(r"STEP (\d+) (\d+) (\d+) ", re.M)
REPORT_RE = re.compile(r"REPORT (\{.*\})$", re.M)


def torch2():
    """The torch 2.x python and its torch version; PartFailed if none."""
    py = dl.rt.TORCH2_PYTHON
    try:
        p = subprocess.run([py, "-c", "import torch.distributed, torch; "
                            "print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
        ver = p.stdout.strip()
    except OSError:
        ver = ""
    if not ver or not ver[0].isdigit() or int(ver.split(".")[0]) < 2:
        raise PartFailed("no PyTorch 2.x at %s: scripts/deps.sh installs "
                         "torch 2.13 there, or set TORCH2_PYTHON" % py)
    return py, ver


def warm(agent):
    """Whether agent's spare has imported what it preloads: it names
    itself rdzv-spare (/proc/PID/comm) then."""
    for pid in spares([agent.pid]):
        try:
            with open("/proc/%d/comm" % pid) as f:
                if f.read().strip() == "rdzv-spare":
                    return True
        except OSError:
            pass
    return False


def story(part):
    demo, job = part.demo, part.job
    part.begin(5, "a PyTorch 2.x DDP program repaired in place by the "
               "rdzv.repair helper")
    py, ver = torch2()
    # rdzv's python package on the path (what `pip install ./python` does
    # for a virtualenv), so each agent's warm spare (python -m rdzv.spare,
    # torch already imported) can take the dead rank's place.
    env = {"PYTHON_EXEC": py, "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.path.join(dl.TOP_SRCDIR, "python")}
    prog = [PROG] + ARGS
    a = part.agent("node A", prog, env=env, no_python=False)
    b = part.agent("node B", prog, env=env, no_python=False)
    say("two agents started job %r: examples/torch_ddp_repair.py under "
        "PyTorch %s (%s), gloo, 2 nodes x 2 workers" % (job, ver, py))
    wait_for(lambda: len(workers(a)) == 2 and len(workers(b)) == 2 and
             len(STEP_RE.findall(part.output())) >= 8, 240,
             "4 torch workers stepping")
    say("training: %d steps logged by the workers" %
        len(STEP_RE.findall(part.output())))
    # Each agent starts its spare once its workers said they can repair;
    # the kill waits for both, so that the story is the same on a machine
    # where the first steps come before the spare's python has started.
    wait_for(lambda: all(warm(x) for x in (a, b)), 120,
             "each agent's warm spare (python -m rdzv.spare) to have "
             "imported torch")
    say("warm spares: node A pid %s, node B pid %s (python, torch imported,"
        " waiting)" % (spares([a.pid])[0], spares([b.pid])[0]))
    survivors = part.kill_worker_repaired(
        240, "was the agent's warm spare (torch already imported), "
        "loaded its data")
    part.finish_agents(300)
    out = part.output()
    reports = [json.loads(m) for m in REPORT_RE.findall(out)]
    part.check(sorted(r["rank"] for r in reports) == [0, 1, 2, 3],
               "every rank of 4 finished", [r["rank"] for r in reports])
    digests = {r["digest"] for r in reports}
    part.check(len(digests) == 1, "every rank (the replacement too) ends "
               "with the same model and optimizer: sha256 %s..." %
               (sorted(digests)[0][:16] if digests else "?"), digests)
    part.check({r["pid"] for r in reports if not r["replacement"]} <=
               survivors and sum(r["replacement"] for r in reports) == 1,
               "three ranks are the survivors, one the replacement",
               [(r["rank"], r["pid"], r["replacement"]) for r in reports])
    for r in sorted(reports, key=lambda r: r["rank"]):
        say("  rank %d pid %d%s: step %d, world %d, repairs %d taking %s s,"
            " accuracy %.4f" % (
                r["rank"], r["pid"], " (replacement, joined at step %s)" %
                r["joined_step"] if r["replacement"] else "", r["step"],
                r["world"], r["repairs"], ", ".join(
                    "%.2f" % t for t in r["repair_times"]) or "-",
                r["accuracy"]))
    part.check("(the warm spare)" in out, "the replacement was the agent's "
               "warm spare, a python that had imported torch before the kill",
               [l for l in out.splitlines() if "replacement" in l])
    texts = [e["text"] for e in demo.events(job)]
    part.check("close succeeded" in texts, "the job succeeded", texts)

