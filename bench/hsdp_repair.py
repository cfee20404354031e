# SPDX-License-Identifier: Apache-2.0
"""hsdp_repair.py: HSDP (2 replica groups x 2 shards, FSDP2 on gloo), one
rank SIGKILLed mid-run: rdzv beside torchft, one run.

    python3 bench/hsdp_repair.py BUILDDIR [--reps 5] [--torchft VENV]
        [--torchft-dir DIR]

rdzv: a real rdzvd and two rdzv-agents of two workers each (one replica
group per agent, --rdzv_conf replicas=2, warm spares on, as by default)
running examples/torch_hsdp_repair.py --step-delay 0.05 --log-steps (a
small transformer; 0.05 s of emulated compute a step, as torchft's side
has).  Once the healthy replica has committed 100 steps, the worker of
replica 0, shard 1 is SIGKILLed from here.  From the STEP lines:

  a   the kill to the healthy replica's first step committed of those
      begun after the kill (it drops the interrupted one, goes on alone);
  b   the kill to the replacement's first committed step (the failed
      group healed shard by shard from the healthy one, all four ranks
      stepping together again);
  step  the healthy replica's median step time before the kill.

torchft (with --torchft VENV, e.g. /tmp/peers/venv-nightly: torchft-nightly
2026.10.26; ../shared/peers/torchft): its run_failure.py --mode hsdp
--nproc 2 --victim_rank 1 --kill_at 100 --max_steps 400 --step_sleep 0.05
with its defaults (heartbeat timeout 5 s, lighthouse quorum tick 100 ms),
the Lighthouse and one torchrun per replica group: (a) is its
a_survivor_next_step_s, (b) its b_healed_s.  The sides alternate first.
Prints one line per run, then median [min max] per side.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import time

import figures
import harness

# The agents' output: each worker's line after its "[default0]:" tag.
STEP_RE = re.compile(r"^(?:\[\w+\]:)?STEP (\d+) (\d+) (\d+) ([0-9.]+) "
                     r"([0-9.]+) \d+$", re.M)
START_RE = re.compile(r"^(?:\[\w+\]:)?START (\{.*\})$", re.M)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--torchft", metavar="VENV")
    ap.add_argument("--torchft-dir", default="/tmp/peers/torchft",
                    help="the peers' torchft scripts (../shared/peers, "
                    "copied where they expect to live)")
    ap.add_argument("--python", default=harness.TORCH2_PYTHON)
    a = ap.parse_args()
    src = harness.use_build(a.build)
    import rdzvtest as rt
    from agent_lib import Scope, conf

    def rdzv(rep):
        d = rt.Rdzvd()
        job = "hsdp%d" % rep
        argv = ["--nnodes", "2", "--nproc_per_node", "2",
                "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
                "--rdzv_id", job, "--max_restarts", "0", "--grace", "2",
                "--rdzv_conf", conf(0.2, 5.0, "replicas=2")]
        prog = [os.path.join(src, "examples", "torch_hsdp_repair.py"),
                "--epochs", "1", "--samples", str(32 * 300),
                "--step-delay", "0.05", "--log-steps"]
        # The warm spare runs python -m rdzv.spare: the source tree's.
        env = {"PYTHON": a.python, "GLOO_SOCKET_IFNAME": "lo",
               "OMP_NUM_THREADS": "1", "PYTHONPATH": os.path.join(
                   src, "python")}
        try:
            with Scope("hsdp-bench-") as s:
                x = [s.agent(argv, env=env, program=prog) for _ in range(2)]

                def out():
                    return "".join(y.output() for y in x)

                def healthy_steps():
                    return [m for m in STEP_RE.findall(out())
                            if m[1] == "1"]
                rt.wait_until(lambda: len(healthy_steps()) >= 200,
                              timeout=300, what="the healthy replica at "
                              "step 100")
                starts = [json.loads(j) for j in START_RE.findall(out())]
                victim = [st["pid"] for st in starts
                          if st["replica"] == 0 and st["shard"] == 1][0]
                t_kill = time.time()
                os.kill(victim, signal.SIGKILL)
                for y in x:
                    rc = y.wait(300)
                    assert rc == 0, (rc, y.output()[-3000:])
                o = out()
        finally:
            d.stop()
        starts = [json.loads(j) for j in START_RE.findall(o)]
        steps = [(int(h), int(r), int(st), float(t0), float(t1))
                 for h, r, st, t0, t1 in STEP_RE.findall(o)]
        healthy = [s for s in steps if s[1] == 1]
        before = [s[4] - s[3] for s in healthy if s[4] < t_kill][-50:]
        ta = min(s[4] for s in healthy if s[3] > t_kill)
        new = [st["rank"] for st in starts if st["replacement"]]
        # The replacement's STEP lines follow its START in its agent's
        # output: its rank's steps ending after the kill.
        tb = min(s[4] for s in steps if s[0] in new and s[4] > t_kill)
        return {"a": ta - t_kill, "b": tb - t_kill,
                "step": statistics.median(before)}

    def torchft(rep):
        out = "/tmp/hsdp-bench-torchft-%d" % rep
        # Its step logs are appended to: an earlier run's would be read.
        shutil.rmtree(out, ignore_errors=True)
        r = subprocess.run(
            [os.path.join(a.torchft, "bin", "python"),
             os.path.join(a.torchft_dir, "run_failure.py"),
             "--reps", "1", "--mode", "hsdp", "--nproc", "2",
             "--victim_rank", "1", "--kill_at", "100", "--max_steps", "400",
             "--step_sleep", "0.05", "--out", out],
            capture_output=True, text=True, timeout=600,
            env=dict(os.environ, VENV=a.torchft))
        rows = [json.loads(ln) for ln in r.stdout.splitlines()
                if ln.startswith("{")]
        assert rows, r.stdout[-3000:] + r.stderr[-3000:]
        return {"a": rows[0]["a_survivor_next_step_s"],
                "b": rows[0]["b_healed_s"], "step": rows[0]["step_time_s"]}

    sides = [("rdzv", rdzv)] + ([("torchft", torchft)] if a.torchft else [])
    figs = {}
    for rep in range(a.reps):
        for name, fn in (sides if rep % 2 == 0 else sides[::-1]):
            row = fn(rep)
            figures.show(figs, name, "rep %d %-7s " % (rep + 1, name), row)
    figures.medians(figs, "%-7s %-4s median %7.3f s [%.3f %.3f] of %d")


if __name__ == "__main__":
    main()
