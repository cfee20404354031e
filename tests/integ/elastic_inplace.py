# SPDX-License-Identifier: Apache-2.0
"""elastic_inplace: nodes join and leave a running job without a restart.

A real rdzvd and real rdzv-agents of two workers each, the workers
examples/ddp_mlp with its default flags (it repairs in place).  Checks:
  - joining: two agents --nnodes 2:3 train; a third joins.  rdzvd takes it
    in place (no round ends, no restart counted), its workers start as
    replacements, say ready and come in with one grow round to a world of
    6; the survivors' PIDs never change, every rank ends with the same
    parameters (the hash each prints) and the accuracy of a failure-free
    3-node run, within a band;
  - two agents joining at once (--nnodes 2:4) come in with one grow round
    to a world of 8;
  - leaving on purpose: SIGTERM to one agent of three (--nnodes 2:3):
    its workers hear "leave", finish the step in flight and exit 0 at the
    step boundary after it (each prints where), the agent sends LEAVE
    and exits 0, rdzvd shrinks the round around it, and the others go on
    from exactly the sample the leavers stopped after (no restart, no
    step lost) and finish with the same parameters;
  - the same asked by rdzvd: rdzvctl evict (without --now) of that node
    pushes DRAIN to its agent, which leaves the same way; members shows
    it leaving meanwhile, the events say who asked.
"""

import json
import os
import re
import signal
import time

import rdzvtest as rt
from agent_lib import Scope, conf, ctl, job_events as events, let_end, \
    trained_epochs, until

DATA = "/usr/share/datasets/fashion-mnist"
ARGS = ["--hidden", "64", "--test-limit", "2000", "--lr", "0.1",
        "--threads", "1", "--batch", "16", "--print-hash"]
HASH_RE = re.compile(r"params rank (\d+) hash ([0-9a-f]{16})$", re.M)
ACC_RE = re.compile(r"final test_acc ([0-9.]+)$", re.M)
# A world of 4 then 6 changes the global batch for part of the run; the
# accuracy stays in this band of the failure-free run's.
ACC_BAND = 0.03


def prog(epochs=4, end=None):
    """ddp_mlp for epochs; with end, it trains on until the test calls
    let_end(end) (agent_lib.until), so a joiner or a leaver meets a job
    still training however slow the machine is."""
    p = [os.path.join(rt.top_builddir(), "examples", "ddp_mlp")] + \
        ARGS + ["--epochs", str(epochs)]
    return until(p, end) if end else p


def need_data():
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        rt.skip_all("no Fashion-MNIST at %s (Debian's dataset-fashion-mnist)"
                    % DATA)


def args(d, job, nnodes, last_call=0.2):
    return ["--nnodes", nnodes, "--nproc_per_node", "2",
            "--rdzv_backend", "rdzv",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port, "--rdzv_id", job,
            "--max_restarts", "2", "--grace", "5",
            "--rdzv_conf", conf(last_call, 5.0), "--no_python"]


def finish(agents, codes=None):
    """Each agent exits 0 (or its code in codes); returns their output."""
    for i, x in enumerate(agents):
        rc = x.wait(120)
        want = 0 if codes is None else codes[i]
        assert rc == want, (rc, x.output()[-3000:])
    return "".join(x.output() for x in agents)


def ended(out, world):
    """Every rank of a world of `world` holds the same parameters;
    returns the final accuracy."""
    hashes = {int(r): h for r, h in HASH_RE.findall(out)}
    assert sorted(hashes) == list(range(world)), hashes
    assert len(set(hashes.values())) == 1, hashes
    m = ACC_RE.search(out)
    assert m, out[-3000:]
    return float(m.group(1))


def training(agents, n=2):
    rt.wait_until(lambda: all(len(x.children()) == n for x in agents) and
                  "step " in "".join(x.output() for x in agents),
                  timeout=60, what="the workers training")


def no_restart(d, ev):
    assert not any(t.startswith("restart ") or "escalated" in t or
                   re.match(r"round \d+ ended", t) for t in ev), ev
    assert d.metric("rdzvd_restarts_total") == 0


def test_join_grows_in_place():
    """A third agent joins two: one grow round, nobody stops."""
    need_data()
    d = rt.Rdzvd()
    with Scope("elastic-") as s:
        end = os.path.join(s.tmp, "end")
        a = s.agent(args(d, "join", "2:3"), program=prog(end=end))
        b = s.agent(args(d, "join", "2:3"), program=prog(end=end))
        training([a, b])
        before = set(a.children()) | set(b.children())
        t0 = time.monotonic()
        c = s.agent(args(d, "join", "2:3"), program=prog(end=end))
        rt.wait_until(lambda: any(t.startswith("join: grow")
                                  for t in events(d, "join")),
                      timeout=60, what="the grow round")
        print("  join -> grow round: %.0f ms"
              % ((time.monotonic() - t0) * 1000))
        assert before <= set(a.children()) | set(b.children()), before
        let_end(end)
        out = finish([a, b, c])
        ev = events(d, "join")
        # The failure-free twin, three nodes from the start, trains as
        # many epochs as the job did.
        twin = [s.agent(args(d, "twin", "3"),
                        program=prog(trained_epochs(out)))
                for _ in range(3)]
        acc0 = ended(finish(twin), 6)
    print("  " + "\n  ".join(t for t in ev if t.startswith("join")))
    acc = ended(out, 6)
    print("  accuracy %.4f (failure-free 3 nodes %.4f)" % (acc, acc0))
    assert abs(acc - acc0) <= ACC_BAND, (acc, acc0)
    grows = [t for t in ev if t.startswith("join: grow")]
    assert len(grows) == 1 and grows[0].startswith(
        "join: grow to 6, 1 node in place (3) with 2 workers"), ev
    assert any(t.startswith("join: node 3 (host ") for t in ev), ev
    no_restart(d, ev)
    # Rank 0 saw the grow; nothing was read from a checkpoint.
    assert re.search(r"repaired: round 2 \(grow\), world 6", out), out
    assert "resumed from" not in out
    assert "replacement pid" not in out
    d.stop()


def test_two_join_one_grow():
    """Two agents join together: one grow round takes both in."""
    from repair_agent2 import GATE_SH
    need_data()
    d = rt.Rdzvd()
    with Scope("elastic-") as s:
        # The joiners' workers (replacements) wait for the gate until
        # both have joined: a grow takes in every joiner whose workers
        # are ready once the last call (1 s) after the latest join has
        # passed, so a second agent slower than that to start (a loaded
        # machine) would otherwise make a grow of its own.
        gate = os.path.join(s.tmp, "gate")
        end = os.path.join(s.tmp, "end")
        p = ["/bin/sh", "-c", GATE_SH, "gate"] + prog(end=end)
        env = {"RDZV_E2E_GATE": gate}
        a = s.agent(args(d, "two", "2:4", 1.0), program=p, env=env)
        b = s.agent(args(d, "two", "2:4", 1.0), program=p, env=env)
        training([a, b])
        before = set(a.children()) | set(b.children())
        c = s.agent(args(d, "two", "2:4", 1.0), program=p, env=env)
        e = s.agent(args(d, "two", "2:4", 1.0), program=p, env=env)
        rt.wait_until(lambda: sum(t.startswith(("join: node 3 (host ",
                                                "join: node 4 (host "))
                                  for t in events(d, "two")) == 2,
                      timeout=60, what="both joiners in")
        with open(gate, "w"):
            pass
        rt.wait_until(lambda: any(t.startswith("join: grow")
                                  for t in events(d, "two")),
                      timeout=60, what="the grow round")
        assert before <= set(a.children()) | set(b.children()), before
        let_end(end)
        out = finish([a, b, c, e])
        ev = events(d, "two")
    print("  " + "\n  ".join(t for t in ev if t.startswith("join")))
    grows = [t for t in ev if t.startswith("join: grow")]
    assert len(grows) == 1 and grows[0].startswith(
        "join: grow to 8, 2 nodes in place (3, 4) with 4 workers"), ev
    no_restart(d, ev)
    ended(out, 8)
    d.stop()


def test_not_repairable_rescales_by_restart():
    """Workers that cannot repair: a joiner restarts the job as before."""
    need_data()
    d = rt.Rdzvd()
    env = {"RDZV_REPAIR": "0"}
    with Scope("elastic-") as s:
        end = os.path.join(s.tmp, "end")
        small = prog(2, end) + ["--limit", "12000"]
        a = s.agent(args(d, "nr", "2:3"), program=small, env=env)
        b = s.agent(args(d, "nr", "2:3"), program=small, env=env)
        training([a, b])
        c = s.agent(args(d, "nr", "2:3"), program=small, env=env)
        rt.wait_until(lambda: "round 1 ended: a node joined below max" in
                      events(d, "nr"), timeout=60, what="the restart")
        let_end(end)
        out = finish([a, b, c])
        ev = events(d, "nr")
    assert any(re.match(r"join: node 3 cannot be taken in place \(node \d "
                        r"\(host \S+\) cannot repair\): rescale by restart",
                        t) for t in ev), ev
    assert "round 1 ended: a node joined below max" in ev, ev
    assert not any(t.startswith("join: grow") for t in ev), ev
    ended(out, 6)
    d.stop()


LEAVE_RE = re.compile(r"rank (\d+) leaves (.*) at epoch (\d+) sample (\d+)$",
                      re.M)
REPAIRED_RE = re.compile(r"repaired: round \d+ \(shrink\), world (\d+), "
                         r"epoch (\d+) at sample (\d+)$", re.M)


def leave_in_place(how):
    """One agent of three (--nnodes 2:3) leaves at a step boundary: how
    is "sigterm" (SIGTERM to it) or "evict" (rdzvctl evict, no --now)."""
    need_data()
    d = rt.Rdzvd()
    job = "lv-" + how
    with Scope("elastic-") as s:
        end = os.path.join(s.tmp, "end")
        a = s.agent(args(d, job, "2:3", 1.0), program=prog(end=end))
        b = s.agent(args(d, job, "2:3", 1.0), program=prog(end=end))
        c = s.agent(args(d, job, "2:3", 1.0), program=prog(end=end))
        training([a, b, c])
        before = set(a.children()) | set(b.children())
        node = re.search(r"joined job %s as node (\d+)" % job,
                         c.output()).group(1)
        # A few steps in the world of 6 first.
        rt.wait_until(lambda: "epoch 1  25%" in a.output() + b.output() +
                      c.output(), timeout=60, what="a quarter epoch")
        t0 = time.monotonic()
        if how == "sigterm":
            c.signal(signal.SIGTERM)
        else:
            r = ctl(d, "evict", job, node)
            assert r.returncode == 0, r
            assert "asked node %s of job %s to leave" % (node, job) in \
                r.stdout, r
            # While it goes, members says so.
            doc = json.loads(ctl(d, "--json", "members", job).stdout)
            m = [m for m in doc["members"] if m["node_id"] == int(node)]
            assert not m or m[0]["leaving_ms"] > 0, doc
        rc = c.wait(30)
        took = time.monotonic() - t0
        assert rc == 0, (rc, c.output()[-3000:])
        print("  %s -> agent exit 0: %.0f ms" % (how, took * 1000))
        assert before <= set(a.children()) | set(b.children()), before
        let_end(end)
        out = finish([a, b])
        ev = events(d, job)
    left = c.output()
    cause = "SIGTERM" if how == "sigterm" else "evicted by an operator"
    assert "%s: leaving job %s on purpose" % (cause, job) in left, \
        left[-3000:]
    # Both of its workers left at the same step boundary and the others
    # went on from exactly there.  The first to hear "leave" at a step's
    # end leaves there; the other may have begun the next step by then,
    # which its peer's going cuts (it is dropped by all, never half
    # applied: the others redo it).
    lv = LEAVE_RE.findall(left)
    lo, hi = map(int, re.search(r"round 1: group rank \d+ of 3, ranks "
                                r"(\d+)-(\d+) of 6", left).groups())
    assert sorted(int(r) for r, _, _, _ in lv) == list(range(lo, hi + 1)), \
        left[-3000:]
    assert "at a step boundary" in [how for _, how, _, _ in lv], lv
    assert all(how in ("at a step boundary", "with its step cut by a "
                       "peer leaving") for _, how, _, _ in lv), lv
    assert len({(e, smp) for _, _, e, smp in lv}) == 1, lv
    rep = REPAIRED_RE.findall(out)
    assert rep and rep[0][0] == "4", out[-3000:]
    assert rep[0][1:] == lv[0][2:], (rep, lv)
    print("  left at epoch %s sample %s; the others went on from epoch %s "
          "sample %s" % (lv[0][2], lv[0][3], rep[0][1], rep[0][2]))
    print("  " + "\n  ".join(t for t in ev if "leave" in t or
                              t.startswith("repair") or "evict" in t))
    assert any(re.match(r"repair: shrink to 4 after node %s \(host \S+\) "
                        r"was lost \(it left\)" % node, t) for t in ev), ev
    if how == "evict":
        assert any(t.startswith("evict: node %s host " % node) and
                   "asked to leave at its workers' next step boundary" in t
                   for t in ev), ev
        assert not any("did not leave" in t for t in ev), ev
    no_restart(d, ev)
    ended(out, 4)
    d.stop()


def test_sigterm_leaves_in_place():
    """SIGTERM to one agent of three: it leaves at a step boundary."""
    leave_in_place("sigterm")


def test_evict_leaves_in_place():
    """rdzvctl evict of one node of three: the same, asked by rdzvd."""
    leave_in_place("evict")


if __name__ == "__main__":
    rt.main(globals(), per_test=180.0, total=600.0)
