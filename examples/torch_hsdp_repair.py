#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch_hsdp_repair.py: HSDP (replicas x shards, FSDP2) that repairs in place.

A small transformer on a synthetic token task, sharded with fully_shard
inside each replica group, AdamW, a warm-up LR schedule, gradient
clipping; rdzv.mesh gives the mesh, averages the gradients across the
replicas and heals a replica that lost a rank from its peers, shard by
shard.  With no arguments, under

    rdzv-agent --standalone --nproc_per_node 4 examples/torch_hsdp_repair.py

it trains 2 replicas x 2 shards and prints at exit one line per rank:

    REPORT {"rank": …, "replica": …, "shard": …, "pid": …, "steps": …,
            "loss": …, "eval_loss": …, "digest": "<sha256 of its
            parameter and optimizer shards>"}

so that anyone can check the replicas agree shard by shard.  With
--checkpoint DIR it resumes from DIR's latest checkpoint and saves one
every --ckpt-every steps (job.load/job.save: DCP, written by one
replica, where a whole-job restart resumes from).
"""

import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(_here, "..", "python")]	# a source tree
from rdzv import mesh  # noqa: E402


class Net(nn.Module):
    """Embedding, a few transformer encoder layers, a head."""

    def __init__(self, vocab, dim, layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, 256, dim) * 0.02)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(dim, 4,
            dim * 2, dropout=0.0, batch_first=True) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, x):
        h = self.emb(x) + self.pos[:, :x.shape[1]]
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def data(n, seq, vocab, seed):
    """n sequences of seq tokens; the target at each position is the
    token before it (attention must find it)."""
    g = torch.Generator()
    g.manual_seed(seed)
    x = torch.randint(0, vocab, (n, seq), generator=g)
    y = torch.roll(x, 1, dims=1)
    return x, y


def evaluate(model, x, y, vocab, batch):
    """The mean loss over a held-out set (every rank of a replica takes
    part: its forward gathers the shards)."""
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out = model(x[i:i + batch])
            total += F.cross_entropy(out.reshape(-1, vocab),
                y[i:i + batch].reshape(-1), reduction="sum").item()
    return total / y.numel()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8, help="per rank")
    ap.add_argument("--batch-policy", choices=("rank", "global"),
        default="rank", help="what a shrink does to the global batch: "
        "rank keeps --batch per rank (it shrinks), global keeps the "
        "full world's (each stepping rank takes more)")
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--eval-samples", type=int, default=256, metavar="N",
        help="the held-out set of the REPORT's eval_loss")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--die-at", type=int, nargs=2, metavar=("STEP", "RANK"),
        help="tests: rank RANK (not a replacement) SIGKILLs itself inside "
        "step STEP, after its forward")
    ap.add_argument("--checkpoint", metavar="DIR", help="DCP checkpoints "
        "in DIR (job.save/job.load: where a whole-job restart resumes "
        "from; with replica groups the lowest stepping replica writes)")
    ap.add_argument("--ckpt-every", type=int, default=20, metavar="N")
    ap.add_argument("--die-in-save", type=int, nargs=2,
        metavar=("STEP", "RANK"), help="tests: rank RANK (not a "
        "replacement) SIGKILLs itself as the save of step STEP begins, "
        "its shard peers in it")
    ap.add_argument("--hold-at", type=int, metavar="STEP", help="tests: "
        "every rank stops after step STEP (for the job to be killed "
        "there), unless it resumed from a checkpoint")
    ap.add_argument("--replacement-delay", type=float, default=0,
        metavar="S", help="tests: a replacement sleeps S seconds first")
    ap.add_argument("--step-delay", type=float, default=0, metavar="S",
        help="benchmarks: S seconds of emulated compute in each step")
    ap.add_argument("--log-steps", action="store_true", help="a line per "
        "committed step: STEP rank replica step start end (wall clock) "
        "replicas (how many stepped)")
    ap.add_argument("--log-ids", action="store_true", help="tests: a "
        "line per committed step: COMMIT epoch step world rank time ids "
        "(world and rank among the ranks that stepped)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if os.environ.get("RDZV_REPLACEMENT") == "1":
        time.sleep(a.replacement_delay)

    job = mesh.init_process_group("gloo", replicas=a.replicas)
    print("START " + json.dumps({"rank": job.home, "replica": job.replica,
        "shard": job.shard, "pid": os.getpid(), "replacement":
        job.replacement}), flush=True)
    x, y = data(a.samples, a.seq, a.vocab, a.seed)

    def build(m):
        torch.manual_seed(a.seed)	# the same weights in every replica
        net = Net(a.vocab, a.dim, a.layers)
        for layer in net.layers:
            mesh.fully_shard(layer, mesh=m)
        return mesh.fully_shard(net, mesh=m)

    model = job.fsdp(build)
    opt = job.optimizer(lambda ps: torch.optim.AdamW(ps, lr=a.lr,
        weight_decay=0.01))
    sched = job.scheduler(lambda o: torch.optim.lr_scheduler.LambdaLR(o,
        lambda s: min(1.0, (s + 1) / 20)))
    resumed = a.checkpoint is not None and job.load(a.checkpoint)
    if resumed:
        print("rank %d: resumed from checkpoint at step %d" % (job.home,
            job.step_count), flush=True)
    torch.manual_seed(a.seed + 1000 + job.home)
    loss = None		# a rank healed at the end never steps
    for epoch in job.epochs(a.epochs):
        for idx in job.batches(a.samples, a.batch, seed=a.seed,
            policy=a.batch_policy):
            t0, cut = time.time(), (job.world, job.rank)	# idx's
            with job.step():
                if a.step_delay:
                    time.sleep(a.step_delay)
                out = model(x[idx])
                loss = F.cross_entropy(out.reshape(-1, a.vocab),
                    y[idx].reshape(-1))
                if a.die_at == [job.step_count, job.home] and \
                    not job.replacement and os.environ.get(
                    "TORCHELASTIC_RESTART_COUNT", "0") == "0":
                    os.kill(os.getpid(), signal.SIGKILL)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                opt.zero_grad()
                loss = loss.detach()
            if a.log_ids and job.committed:
                print("COMMIT %d %d %d %d %.6f %s" % (epoch,
                    job.step_count, cut[0], cut[1], time.time(),
                    ",".join(map(str, idx))), flush=True)
            if a.log_steps and job.committed:
                print("STEP %d %d %d %.4f %.4f %d" % (job.home,
                    job.replica, job.step_count, t0, time.time(),
                    job.stepping), flush=True)
            if a.checkpoint and job.committed and \
                job.step_count % a.ckpt_every == 0:
                if a.die_in_save == [job.step_count, job.home] and \
                    not job.replacement:
                    os.kill(os.getpid(), signal.SIGKILL)
                job.save(a.checkpoint)
            if a.hold_at == job.step_count and job.committed and \
                not resumed:
                while True:
                    time.sleep(1)
            if job.step_count % 20 == 0 and job.shard == 0 and \
                loss is not None:
                print("replica %d epoch %d step %d loss %.4f" % (
                    job.replica, epoch, job.step_count, loss.item()),
                    flush=True)
    ex, ey = data(a.eval_samples, a.seq, a.vocab, a.seed + 1)
    print("REPORT " + json.dumps({"rank": job.home, "replica": job.replica,
        "shard": job.shard, "pid": os.getpid(), "steps": job.step_count,
        "loss":
        None if loss is None else round(loss.item(), 6), "eval_loss":
        round(evaluate(model, ex, ey, a.vocab, 64), 6), "digest": job.digest(),
        "repairs": job.repairs, "heals": len(job.heal_times), "heal_s":
        round(job.heal_times[-1], 4) if job.heal_times else None,
        "heal_xfer_s": None if job.heal_xfer is None else
        round(job.heal_xfer, 4), "heal_bytes": job.heal_bytes,
        "heal_peak": job.heal_peak}),
        flush=True)
    job.close()
    # PyTorch's gloo may abort a process that finalizes right after its
    # last collective (doc/rdzvd.md, "Using it from unmodified PyTorch").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
