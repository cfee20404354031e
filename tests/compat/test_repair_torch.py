# SPDX-License-Identifier: Apache-2.0
"""test_repair_torch: a torch DDP job repairs in place through rdzv.repair
(python/rdzv/repair.py), gloo on torch 1.13 (this file) and 2.13
(test_repair_torch2.py runs the same sections).

Four real workers of examples/torch_ddp_repair.py (Fashion-MNIST, a small
MLP, SGD with momentum) run under the fake agent of tests/lib/
fakeagent.py (the channel of notes/repair-spec.md; each round's
store is rdzvd's main port with the round's namespace as PrefixStore
prefix).  Local rank 2 is SIGKILLed while the job trains (a worker spends
most of a step in DDP's allreduce): the survivors must keep their PIDs,
step on in a group of 3 (their STEP lines say world 3, and they report
progress to the agent after the kill), take the replacement in at a step
boundary (world 4 again), and end with bit-identical parameters and
optimizer state on all four (the replacement's momentum buffers came from
the donor: had they not, the parameters would part after the join) and
the same step count.  Accuracy must be within 0.03 of the failure-free
run of the same job, computed in this process: the example without an
agent is one process, and with a global batch of 4 x 64 it trains on the
same batches in the same order as the 4-rank job.

The replacement is started early, with the job (as a spare whose
"ready" the agent holds until after the shrink), so that its torch import
overlaps the others' on a 2-core machine; what it says and when it joins
is as the spec has it.  A plain DDP script (env://, no helper) under the
same agent trains and never says hello, ready or a step.
"""

import contextlib
import io
import json
import os
import re
import runpy
import sys
import time

import rdzvtest
import compatlib as cl
from compatlib import check, log
import fakeagent as fa

EXAMPLE = os.path.join(rdzvtest.top_srcdir(), "examples",
    "torch_ddp_repair.py")
JOB = ["--limit", "8000", "--epochs", "2", "--hidden", "32", "--report"]
BATCH = 64
WORLD = 4

PLAIN = r"""
import datetime, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
torch.manual_seed(0)
m = DDP(torch.nn.Linear(8, 2))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(5):
    opt.zero_grad()
    m(torch.randn(4, 8)).sum().backward()
    opt.step()
print("PLAIN rank %d world %d done" % (dist.get_rank(), dist.get_world_size()))
"""


def reports(out):
    return [json.loads(l[7:]) for l in out.splitlines()
        if l.startswith("REPORT ")]


def worlds(out):
    """The world sizes of a worker's STEP lines, in order, runs merged."""
    ws = []
    for l in out.splitlines():
        if l.startswith("STEP "):
            w = int(l.split()[3])
            if not ws or ws[-1] != w:
                ws.append(w)
    return ws


def reference():
    """The failure-free job's accuracy: the example in this process,
    without an agent, one rank with the 4 ranks' global batch."""
    for k in ("RDZV_PROGRESS_FD", "WORLD_SIZE", "RANK", "MASTER_ADDR"):
        os.environ.pop(k, None)
    argv = sys.argv
    sys.argv = [EXAMPLE, "--batch", str(BATCH * WORLD)] + JOB
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(EXAMPLE, run_name="__main__")
    finally:
        sys.argv = argv
    r = reports(out.getvalue())
    check(len(r) == 1 and r[0]["world"] == 1 and r[0]["repairs"] == 0,
        "reference run: %r" % out.getvalue()[-2000:])
    return r[0]


def main(torch2=False):
    if torch2:
        cl.use_torch2()
    else:
        cl.require_torch()
    srv = rdzvtest.Rdzvd(tmpdir=rdzvtest.mktemp("rdzv-repair-torch-"))
    st = {}

    def agent(argv, n, **env):
        return fa.FakeAgent(argv, n, "127.0.0.1:%d" % srv.port,
            env=dict(fa.torch_env(srv.port), **env))

    def test_round_messages():
        sys.path.insert(0, os.path.join(rdzvtest.top_srcdir(), "python"))
        from rdzv import repair
        r = repair.parse_round(fa.round_message(round=7, kind="shrink",
            ns="job/a/b/round/7", rank=2, world=3, donor=1,
            master_addr="127.0.0.1", master_port=29500, local_rank=2,
            local_world=3) + " later=1 x=")
        check((r.round, r.kind, r.ns, r.rank, r.world, r.donor,
            r.master_port) == (7, "shrink", "job/a/b/round/7", 2, 3, 1,
            29500), "parsed %r" % r)
        good = "round round=1 kind=grow ns=n rank=0 world=2 donor=0 " \
            "master_addr=h master_port=1 local_rank=0 local_world=1"
        repair.parse_round(good)
        # (tests/integ/repair_chan.py checks the parser against
        # common/chan.c's on a whole corpus.)
        bad = ["", "round", "stop", good + " x",
            good.replace("kind=grow", "kind=hop"),
            good.replace("rank=0", "rank=2"), good.replace("world=2",
            "world=0"), good.replace("master_port=1", "master_port=70000"),
            good.replace("donor=0", "donor=x"), good.replace("ns=n", "ns="),
            good.replace("rank=0", "rank=99999999999"),
            good.replace(" master_addr=h", "")]
        for b in bad:
            try:
                repair.parse_round(b)
            except ValueError:
                continue
            raise AssertionError("parse_round accepted %r" % b)
        # Random mutations of a good message: a Round or ValueError, never
        # anything else.
        import random
        rnd = random.Random(12)
        for _ in range(3000):
            m = list(good)
            for _ in range(rnd.randint(1, 6)):
                i = rnd.randrange(len(m))
                m[i] = rnd.choice("= 0129-xk\x00\xff")
            try:
                repair.parse_round("".join(m))
            except ValueError:
                pass

    def test_comm_error():
        # A peer's death is repaired; a call the backend refuses (the
        # script's bug) is not: taken for a death it would wait for a
        # round no death brings instead of failing with its traceback.
        sys.path.insert(0, os.path.join(rdzvtest.top_srcdir(), "python"))
        import datetime
        import torch
        import torch.distributed as dist
        from rdzv import group
        said = {
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
            "Connection closed by peer [127.0.0.1]:41234": True,
            "[enforce fail at ../third_party/gloo/gloo/transport/tcp/"
            "pair.cc:446] op.preamble.length <= op.nbytes. 8 vs 4": True,
            "NCCL error: remote process exited or there was a network "
            "error": True,
            "Socket Timeout": True,
            "Cannot use ReduceOp.PREMUL_SUM with Gloo": False,
            "NCCL error in: x.cpp:1, invalid usage (run with "
            "NCCL_DEBUG=WARN for details)": False,
            "The size of tensor a (3) must match the size of tensor b "
            "(4)": False}
        for text, want in said.items():
            check(group.comm_error(RuntimeError(text)) == want,
                "comm_error(%r) is not %s" % (text, want))
        check(group.comm_error(ConnectionResetError()), "a reset socket")
        # The real refusal, from a group of one.
        if not hasattr(dist, "_make_nccl_premul_sum"):
            log("no PREMUL_SUM in torch %s: the literal case stands for "
                "it" % torch.__version__)
            return
        st = dist.TCPStore("127.0.0.1", 0, 1, True,
            datetime.timedelta(seconds=10))
        dist.init_process_group("gloo", store=st, rank=0, world_size=1)
        try:
            dist.all_reduce(torch.ones(2),
                op=dist._make_nccl_premul_sum(0.5))
            check(False, "gloo took PREMUL_SUM")
        except RuntimeError as e:
            check(not group.comm_error(e), "the refusal %r was taken for "
                "a peer's death" % str(e))
            log("gloo's refusal, not a death: %s" % str(e)[:80])
        finally:
            dist.destroy_process_group()

    def test_arrive_all_or_none():
        # group.arrive, the round barrier a newer round calls off: in
        # every trial the ranks all pass or all give up, never some of
        # each (a rank that passed would wait in gloo's connect for a
        # peer that left).  Four ranks, each its own client of rdzvd,
        # come at random times; in most trials a newer round comes to
        # each at its own random time, after some have passed.
        import random
        import threading
        import datetime
        import torch.distributed as dist
        sys.path.insert(0, os.path.join(rdzvtest.top_srcdir(), "python"))
        from rdzv import group
        rnd = random.Random(5)
        seen = {}
        for trial in range(60):
            ns = "arrive-%d/" % trial
            newer = [None if rnd.random() < 0.2 else rnd.uniform(0,
                0.012) for _ in range(4)]
            came = [rnd.uniform(0, 0.012) for _ in range(4)]
            t0 = time.monotonic() + 0.05
            out = [None] * 4

            def rank(i):
                st = dist.PrefixStore(ns, dist.TCPStore("127.0.0.1",
                    srv.port, None, False, datetime.timedelta(
                    seconds=10)))
                time.sleep(max(0, t0 + came[i] - time.monotonic()))
                try:
                    group.arrive(st, "came", 4, lambda: newer[i] is
                        None or time.monotonic() < t0 + newer[i], 10)
                    out[i] = "passed"
                except ConnectionError:
                    out[i] = "off"
            ts = [threading.Thread(target=rank, args=(i,))
                for i in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
            check(None not in out and len(set(out)) == 1, "trial %d: "
                "%s (came at %s, newer at %s)" % (trial, out, came,
                newer))
            seen[out[0]] = seen.get(out[0], 0) + 1
        # Both ends happened: the test saw the race it is about.
        check(len(seen) == 2, "outcomes %s" % seen)
        log("60 trials: %s" % seen)
        # Two of three come: both give up at the timeout; the third,
        # later, is told the round was called off.
        out = []
        st = [dist.PrefixStore("arrive-late/", dist.TCPStore("127.0.0.1",
            srv.port, None, False, datetime.timedelta(seconds=10)))
            for _ in range(3)]

        def two(i):
            try:
                group.arrive(st[i], "came", 3, lambda: True, 0.5)
                out.append("passed")
            except (TimeoutError, ConnectionError) as e:
                out.append(type(e).__name__)
        ts = [threading.Thread(target=two, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        check(out == ["TimeoutError", "ConnectionError"] or out == [
            "TimeoutError"] * 2 or sorted(out) == ["ConnectionError",
            "TimeoutError"], "two of three: %s" % out)
        try:
            group.arrive(st[2], "came", 3, lambda: True, 5)
            check(False, "the late rank passed a round called off")
        except ConnectionError:
            pass

    def test_start():
        # RDZV_REPAIR_DEBUG=1: the ranks say whose state they took.
        a = agent([sys.executable, EXAMPLE] + JOB +
            ["--log-steps", "--step-delay", "0.02"], WORLD,
            RDZV_REPAIR_DEBUG="1")
        st["a"] = a
        a.start()
        st["spare"] = a.spawn_replacement(2)
        p = agent([sys.executable, "-c", PLAIN], 2)
        st["plain"] = p
        p.start()
        st["ref"] = reference()
        log("failure-free accuracy %.4f at step %d" % (
            st["ref"]["accuracy"], st["ref"]["step"]))
        check(st["ref"]["accuracy"] > 0.6, "the reference did not learn")
        a.wait_steps(6, timeout=150)
        check(a.all_said_hello(), "a helper worker did not say hello: %s" %
            a.describe())
        # What a worker does not understand it ignores (the repairs
        # counted in test_outcome would be off otherwise).
        for m in (b"round round=9 kind=grow", b"later verb x=1",
            b"\xff\xfe", b"round " + b"x" * 500):
            a.workers[0].sock.send(m)

    def test_kill_shrink_grow():
        a = st["a"]
        st["pids"] = {lr: w.pid for lr, w in a.workers.items()}
        t = a.kill(2)
        a.shrink()
        surv = [w for w in a.workers.values() if w.joined]
        check(len(surv) == 3, "survivors: %s" % a.describe())
        top = max(w.last_step() for w in surv)
        a.wait_steps(top + 3, surv, after=t, timeout=60)
        log("survivors stepped on to %d after the kill" % (top + 3))
        a.wait_ready(st["spare"], timeout=120)
        check(st["spare"].steps == [], "the spare stepped before joining")
        # The donor is rdzvd's to choose (common/PROTOCOL.md): rank 2 of
        # the grow (local rank 3), not the lowest rank a worker would
        # take by itself.
        a.grow(donor=2)
        st["res"] = a.wait(150)

    def test_outcome():
        a, res, ref = st["a"], st["res"], st["ref"]
        reps = {}
        for lr, (rc, out, err) in sorted(res.items()):
            check(rc == 0, "local rank %d exited %s:\n%s" % (lr, rc,
                err[-3000:]))
            r = reports(out)
            check(len(r) == 1, "local rank %d reports %r" % (lr, out[-500:]))
            reps[lr] = (r[0], out)
        for lr in (0, 1, 3):
            r, out = reps[lr]
            check(r["pid"] == st["pids"][lr], "survivor %d's pid changed "
                "%d -> %d" % (lr, st["pids"][lr], r["pid"]))
            check(not r["replacement"] and r["repairs"] == 2,
                "survivor %d: %r" % (lr, r))
            check(worlds(out) == [4, 3, 4], "survivor %d stepped in "
                "worlds %s, not 4, 3, 4" % (lr, worlds(out)))
        r, out = reps[2]
        check(r["replacement"] and r["repairs"] == 1 and
            r["joined_step"] > 0, "replacement: %r" % r)
        check(worlds(out) == [4], "replacement worlds %s" % worlds(out))
        err = res[2][2]
        took = re.findall(r"state of step \d+ from rank (\d+)", err)
        check(took == ["2"], "the replacement took the state from ranks "
            "%s, not from rank 2, the donor its round named:\n%s" % (took,
            err[-3000:]))
        steps = {x["step"] for x, _ in reps.values()}
        digests = {x["digest"] for x, _ in reps.values()}
        check(len(steps) == 1, "step counts differ: %s" % steps)
        check(len(digests) == 1, "parameters differ after the join: %s" %
            {lr: x["digest"][:12] for lr, (x, _) in reps.items()})
        for lr, (x, _) in reps.items():
            check(x["accuracy"] >= ref["accuracy"] - 0.03, "local rank %d "
                "accuracy %.4f, failure-free %.4f" % (lr, x["accuracy"],
                ref["accuracy"]))
        log("one model on all 4 after the join (step %d, joined at %d), "
            "accuracy %.4f vs %.4f failure-free; repairs took %s" % (
            steps.pop(), r["joined_step"], r["accuracy"], ref["accuracy"],
            ["%.3f" % t for x, _ in reps.values()
            for t in x["repair_times"]]))
        for w in a.workers.values():
            check(w.other == [], "unexpected messages %r" % w.other)
            # It said its training ended (job.epochs() ran out), after
            # its last step.
            check(w.done is not None and w.steps and
                  w.done >= w.steps[-1][0],
                  "no \"done\" after the last step: %r %r" % (
                      w.done, w.steps[-3:]))
        a.close()

    def test_stop_exits():
        # A worker told "stop" (the repair failed, the job restarts the
        # old way) exits at once, from its watcher thread.
        code = ("import sys, time; sys.path.insert(0, %r)\n"
            "from rdzv import repair\n"
            "job = repair.Job('gloo', None, repair._channel())\n"
            "job._send('hello repair=1')\n"
            "job._watch()\n"
            "print('watcher returned')\n" % os.path.join(
            rdzvtest.top_srcdir(), "python"))
        s = agent([sys.executable, "-c", code], 1)
        s.start()
        s.wait_for(lambda: s.all_said_hello(), 60, "hello")
        s.workers[0].sock.send(b"later verb")
        s.stop()
        (rc, out, err), = s.wait(30).values()
        check(rc == 1 and "stopped the repair" in err and
            "watcher returned" not in out, "after stop: rc %s %r %r" % (
            rc, out, err))
        s.close()

    def test_plain_script_never_says_hello():
        p = st["plain"]
        res = p.wait(120)
        for lr, (rc, out, err) in sorted(res.items()):
            check(rc == 0 and "PLAIN rank %d world 2 done" % lr in out,
                "plain rank %d: rc %s %s" % (lr, rc, err[-2000:]))
        for w in p.workers.values():
            check(w.hello is None and w.ready is None and not w.steps and
                not w.other, "the plain script said something: %s" %
                p.describe())
        p.close()

    cl.run_sections(dict(test_round_messages=test_round_messages,
        test_comm_error=test_comm_error,
        test_arrive_all_or_none=test_arrive_all_or_none,
        test_start=test_start,
        test_kill_shrink_grow=test_kill_shrink_grow,
        test_outcome=test_outcome, test_stop_exits=test_stop_exits,
        test_plain_script_never_says_hello=
        test_plain_script_never_says_hello), server=None, per_test=200,
        total=330)


if __name__ == "__main__":
    main()
