# SPDX-License-Identifier: Apache-2.0
"""titan_goodput.py: training progress of a torchtitan job kept through a
SIGKILL every N seconds: rdzv's RepairTrainer beside a whole-job restart
from torchtitan's checkpoint and torchft's torchtitan integration, in one
run.

    python3 bench/titan_goodput.py BUILDDIR [--seconds 180] [--every 30]
        [--reps 1] [--sides rdzv,restart[,torchft]] [--ckpt-every 10]
        [--python PATH] [--torchft VENV] [--seed 1] [--keep]

The job: torchtitan 0.3's llama3 debug model on the CPU with gloo, as
tests/compat/test_torchtitan_repair.py runs it (titanlib's shim and
debug_config: its word-level tokenizer and text, 32 tokens a sample, 2
samples a rank), HSDP of 2 replica groups x 2 shards, torchtitan's own
main (python -m torchtitan.train --module train --config bench) with
torchtitan's checkpoints every --ckpt-every steps, as a user would
configure them.  FSDP's reduce-scatter is made plain sums in every side
(torchtitan's PREMUL_SUM, which gloo lacks; RepairTrainer does it
itself).  The sides, the order rotated each rep:

  rdzv     rdzv.torchtitan.RepairTrainer under a real rdzvd and two
           rdzv-agents of two workers (one replica group each,
           PET_RDZV_CONF=replicas=2, warm spares on, --max_restarts
           1000): a dead rank's replica group is healed in place from
           the other one, which steps on alone meanwhile (its
           checkpoints: rdzv's job.save());
  restart  torchtitan's plain Trainer (data_parallel_replicate_degree
           2) under the same two agents with RDZV_REPAIR=0: a death
           restarts every worker, which resume from torchtitan's last
           checkpoint (DCP, checkpoint.folder under the job's
           dump_folder);
  torchft  torchtitan's own torchft integration (FaultTolerantTrainer,
           llama3_torchft_debugmodel's optimizer, checkpointer and
           loss, semi_sync_method off: HSDP with the replicas'
           all-reduce through torchft's Manager, process_group gloo) in
           the torchft-nightly venv (--torchft, ../shared/peers/torchft
           says how it is made; torchtitan 0.3.0 installed there with
           pip --no-deps): its Lighthouse (heartbeat timeout 5 s, its
           default) and one torchrun --max_restarts 1000 per replica
           group.  Not run by default: on this machine it trains no
           step (bench/RESULTS.md says why), and with --sides torchft
           it shows as 0 steps.

Each job runs for a window of --seconds from the launch of its
launchers; with failures, one worker chosen at random among the job's
live workers is SIGKILLed at N, 2N, ... seconds after the job's first
committed step, while inside the window.  Progress is the programs' own
step log: after each committed step every rank appends (time, step,
replicas that stepped it) to TG_DIR/steps.PID.jsonl (RepairTrainer: its
job's step count and stepping replicas; torchft: the Manager's step,
when it moved, and its participants; the plain Trainer: its step, both
replicas).  p(t) counts each step number once, at its first commit,
weighted by the replicas that stepped it (bench/hsdp_goodput.py's
progress: a step one replica took alone counts 1/2; steps a restart
trains again after resuming from a checkpoint are not counted twice).

Two figures per job, as bench/goodput.py defines them: goodput = steps
at the window's end with failures / steps of the same side's
failure-free job, run just before it (medians over --reps; each rep's
own ratio too, median [min max]); in-job = 1 - (seconds lost per
kill, at the job's own rate around it) / the time it trained, median
over --reps; a kill before which the job was not training (a restart
still under way) is left out of it, as goodput.py leaves it out.  One
line per job, then a table.
"""

import argparse
import glob
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from goodput import done_with  # noqa: E402
from hsdp_goodput import tree, window  # noqa: E402

SIDES = ("rdzv", "restart", "torchft")

# The program every side runs, titanlib's SHIM first; TG_SIDE picks the
# trainer, TG_DIR is the job's directory (dump_folder, step logs),
# TG_CKPT the checkpoint interval.  torchtitan's main imports this file
# again as the module "train" for its config function bench().
PROGRAM = r'''
from dataclasses import dataclass                                 # noqa: E402

SIDE = os.environ["TG_SIDE"]
OUT = os.environ["TG_DIR"]
if SIDE == "rdzv":
    from rdzv.torchtitan import RepairTrainer as Base             # noqa: E402
elif SIDE == "torchft":
    from torchtitan.experiments.torchft.trainer import (          # noqa: E402
        FaultTolerantTrainer as Base)
else:
    from torchtitan.trainer import Trainer as Base                # noqa: E402
_log = []


def record(**kw):
    """One line of this process's step log."""
    if not _log:
        _log.append(open(os.path.join(OUT, "steps.%d.jsonl" % os.getpid()),
                         "a", buffering=1))
    kw.update(t=time.time(), pid=os.getpid())
    _log[0].write(json.dumps(kw) + "\n")


def sum_only(parts):
    """FSDP's reduce-scatter as plain sums: torchtitan's gradient divide
    factor of 1 makes it a PREMUL_SUM, which gloo lacks (RepairTrainer
    does the same)."""
    from torch.distributed.fsdp import FSDPModule
    for m in (m for part in parts for m in part.modules()):
        if isinstance(m, FSDPModule):
            m.set_force_sum_reduction_for_comms(True)


class Bench(Base):
    @dataclass(kw_only=True, slots=True)
    class Config(Base.Config):
        pass

    def __init__(self, config):
        super().__init__(config)
        if SIDE != "rdzv":
            sum_only(self.model_parts)

    def train_step(self, data_iterator):
        ft = getattr(self, "ft_manager", None)
        ft = ft.manager if ft is not None and ft.enabled else None
        before = ft.current_step() if ft is not None else None
        r = super().train_step(data_iterator)
        job = getattr(self, "rdzv", None)
        if job is not None:
            if job.committed:
                record(ev="step", step=job.step_count, np=job.stepping)
        elif ft is not None:
            if ft.current_step() > before:
                record(ev="step", step=ft.current_step(),
                       np=ft.num_participants())
        else:
            record(ev="step", step=self.step, np=2)
        return r


def bench():
    c = debug_config(Bench.Config)
    c.dump_folder = OUT
    c.training.steps = 10 ** 6
    c.validator.enable = False
    c.metrics.log_freq = 10 ** 6
    c.parallelism.data_parallel_shard_degree = 2
    c.parallelism.data_parallel_replicate_degree = 2
    every = int(os.environ.get("TG_CKPT", "0"))
    if SIDE == "torchft":
        from torchtitan.experiments.torchft.llama3.config_registry import (
            llama3_torchft_debugmodel)
        ft = llama3_torchft_debugmodel()
        c.loss, c.optimizer, c.checkpoint = ft.loss, ft.optimizer, \
            ft.checkpoint
        c.profiler.enable_profiling = False
        c.parallelism.data_parallel_replicate_degree = 1
        f = c.fault_tolerance
        f.enable, f.process_group, f.min_replica_size = True, "gloo", 1
        f.replica_id = int(os.environ["REPLICA_GROUP_ID"])
        f.group_size = 2
        f.semi_sync_method = None
    c.checkpoint.enable = every > 0
    c.checkpoint.interval = max(every, 1)
    c.checkpoint.folder = "ckpt"
    return c


if __name__ == "__main__":
    record(ev="start", side=SIDE)
    from torchtitan.train import main
    sys.argv[1:] = ["--module", "train", "--config", "bench"]
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
'''


class Job:
    """One job of one side: its launchers, its workers and its step log
    (steps.PID.jsonl in d)."""

    def __init__(self, side, d, tmp, a, port, build, n):
        self.side, self.d, self.procs, self.job = side, d, [], None
        prog = os.path.join(tmp, "train.py")
        env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
                   TG_SIDE=side, TG_DIR=d, TG_CKPT=str(a.ckpt_every),
                   HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
        if side in ("rdzv", "restart"):
            import jobs
            if side == "rdzv":
                env["PET_RDZV_CONF"] = "replicas=2"
            self.job = jobs.Job("repair" if side == "rdzv" else "restart",
                                [prog, d], d, "tg%d" % n, port, build, env=env,
                                python=a.python)
            return
        import rdzvtest as rt
        lh_port = rt.free_port()
        self.procs.append(subprocess.Popen(
            [os.path.join(a.torchft, "bin", "torchft_lighthouse"),
             "--min_replicas", "1", "--quorum_tick_ms", "100",
             "--join_timeout_ms", "10000", "--heartbeat_timeout_ms", "5000",
             "--bind", "[::]:%d" % lh_port],
            stdout=open(os.path.join(d, "lighthouse.log"), "w"),
            stderr=subprocess.STDOUT, start_new_session=True))
        time.sleep(0.5)
        self.launchers = []
        for g in range(2):
            e = dict(env, REPLICA_GROUP_ID=str(g), NUM_REPLICA_GROUPS="2",
                     TORCHFT_LIGHTHOUSE="http://localhost:%d" % lh_port,
                     RUST_LOG="warn")
            p = subprocess.Popen(
                [os.path.join(a.torchft, "bin", "torchrun"), "--nnodes=1",
                 "--nproc_per_node=2", "--master_port=%d" % rt.free_port(),
                 "--max_restarts=1000", prog, d],
                stdout=open(os.path.join(d, "group%d.out" % g), "w"),
                stderr=subprocess.STDOUT, env=e, start_new_session=True,
                cwd=d)
            self.procs.append(p)
            self.launchers.append(p.pid)

    def _records(self):
        for path in glob.glob(os.path.join(self.d, "steps.*.jsonl")):
            with open(path) as f:
                for ln in f:
                    try:
                        yield json.loads(ln)
                    except ValueError:
                        pass	# a line being written

    def commits(self):
        """[(wall time, step, replicas stepping)] committed so far."""
        return [(r["t"], r["step"], r["np"]) for r in self._records()
                if r["ev"] == "step"]

    def workers(self):
        if self.job is not None:
            return self.job.workers()
        import agent_lib
        return agent_lib.children(self.launchers)

    def rounds(self):
        n = sum(1 for r in self._records() if r["ev"] == "start")
        if self.job is None:
            return "processes started %d" % n
        return "repairs %s restarts %s processes started %d" % (
            self.job.rounds() + (n,))

    def stop(self):
        if self.job is not None:
            self.job.stop(self.d)
            return
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        import agent_lib
        for pid in agent_lib.marked_pids(self.d):	# workers left
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def assets(tmp, python, src):
    """The program and the job's tokenizer and text in tmp (titanlib's,
    written by python: it has the tokenizers package)."""
    lib = os.path.join(src, "tests", "compat")
    subprocess.run([python, "-c", "import sys; sys.path.insert(0, %r); "
                    "import titanlib; titanlib.torchtitan_assets(%r, "
                    "lines=256); open(%r, 'w').write(titanlib.SHIM)"
                    % (lib, tmp, os.path.join(tmp, "shim.py"))], check=True)
    with open(os.path.join(tmp, "shim.py")) as f:
        shim = f.read()
    with open(os.path.join(tmp, "train.py"), "w") as f:
        f.write(shim + PROGRAM)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--every", type=float, default=30.0)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--sides", default="rdzv,restart",
                    help="of %s" % ",".join(SIDES))
    ap.add_argument("--ckpt-every", type=int, default=10,
                    help="torchtitan's checkpoint.interval (steps), every "
                    "side; 0: none")
    ap.add_argument("--python", default=os.path.expanduser(
        "~/.cache/rdzv/torch-2.13/bin/python"),
                    help="the rdzv and restart sides' python (torch 2.13, "
                    "torchtitan 0.3)")
    ap.add_argument("--torchft", metavar="VENV",
                    default="/tmp/peers/venv-nightly")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    build, src, rt = tree(a.build)

    sides = a.sides.split(",")
    for side in sides:
        if side not in SIDES:
            ap.error("unknown side %s (%s)" % (side, ",".join(SIDES)))
    if "torchft" in sides and not os.access(
            os.path.join(a.torchft, "bin", "torchft_lighthouse"), os.X_OK):
        sys.exit("titan_goodput: no torchft in %s (../shared/peers/torchft/"
                 "README.md says how to install it)" % a.torchft)
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="titan-goodput-")
    assets(tmp, a.python, src)
    d = rt.Rdzvd() if set(sides) & {"rdzv", "restart"} else None
    steps, inj, losses, ratio, n = {}, {}, {}, {}, 0
    try:
        for rep in range(a.reps):
            order = sides[rep % len(sides):] + sides[:rep % len(sides)]
            for side in order:
                for ev in (0.0, a.every):
                    n += 1
                    jd = os.path.join(tmp, "%s-%g-%d" % (side, ev, n))
                    os.makedirs(jd)
                    load = os.getloadavg()[0]
                    t0 = time.time()
                    job = Job(side, jd, tmp, a, d.port if d else 0, build, n)
                    p, ls, g = window(job, t0, t0 + a.seconds, ev, rng,
                                      "rep %d %-7s" % (rep + 1, side), load)
                    steps.setdefault((side, ev), []).append(p)
                    if ev and steps[(side, 0.0)][-1]:
                        ratio.setdefault(side, []).append(
                            p / steps[(side, 0.0)][-1])
                    inj.setdefault((side, ev), []).append(g)
                    losses.setdefault((side, ev), []).extend(ls)
    finally:
        if d is not None:
            d.stop()
    print()
    print("window %gs, a kill every %gs, checkpoints every %d steps, %d "
          "rep(s); steps: median [min max]; goodput: median steps with "
          "kills / median steps without; lost: seconds per kill, median "
          "[min max]; in-job: median of the jobs' own goodput"
          % (a.seconds, a.every, a.ckpt_every, a.reps))
    for side in sides:
        base, hurt = steps[(side, 0.0)], steps[(side, a.every)]
        ls = losses[(side, a.every)]
        print("%-7s steps %7.1f [%.1f %.1f] without kills, %7.1f [%.1f %.1f] "
              "with: goodput %5.1f%%  in-job %5.1f%%  lost %s" % (
                  side, statistics.median(base), min(base), max(base),
                  statistics.median(hurt), min(hurt), max(hurt),
                  100 * statistics.median(hurt) / statistics.median(base)
                  if statistics.median(base) else 0,
                  100 * statistics.median(inj[(side, a.every)]),
                  "%.2fs [%.2f %.2f]" % (statistics.median(ls), min(ls),
                                         max(ls)) if ls else "-"))
        rs = ratio.get(side, [])
        if rs:
            print("%-7s each rep's steps with kills / its failure-free job's "
                  "just before: median %5.1f%% [%.1f %.1f] of %d" % (
                      side, 100 * statistics.median(rs), 100 * min(rs),
                      100 * max(rs), len(rs)))
    done_with(tmp, a.keep)


if __name__ == "__main__":
    main()
