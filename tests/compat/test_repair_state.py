# SPDX-License-Identifier: Apache-2.0
"""test_repair_state: what a donor sends (python/rdzv/state.py) on torch
2.13, without processes.  A replacement receives the job's state in
init_process_group, before its script has made the model and the
optimizer; if a peer dies before the script gives them (job.ddp(),
job.track()), the replacement can be the next round's donor.  What it
sends then must be the state it received -- the model's and every
tracked object's -- not its own empty or fresh objects' (an optimizer
of step 0 on one rank, Adam's moments on the others: the replicas
drift apart while every step still commits).  And the step at which the
survivors of a grow switch (watcher.switch_step): only a group whole on
every rank keeps stepping until then.  And the helper's states
(repair.State): moved by the training thread alone, through one table;
a break another thread posts is applied at the step's end; the counters
in job.stats."""

import compatlib as cl

cl.use_torch2()

import os                                               # noqa: E402
import sys                                              # noqa: E402

import rdzvtest as rt                                   # noqa: E402
from compatlib import check                             # noqa: E402

sys.path.insert(0, os.path.join(rt.top_srcdir(), "python"))
from rdzv import repair, state                          # noqa: E402


def job():
    return repair.Job("gloo", None, None)


def parts(seed):
    """A model, its AdamW and an LR schedule, after `seed` steps."""
    import torch
    torch.manual_seed(seed)
    m = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 50)
    for _ in range(seed):
        opt.zero_grad()
        m(torch.randn(8, 4)).sum().backward()
        opt.step()
        sched.step()
    return m, opt, sched


def given_parts(seed):
    """A job whose script gave it parts(seed): (job, model, optimizer,
    schedule)."""
    j = job()
    m, opt, sched = parts(seed)
    j._module = m
    j.track(opt, sched)
    return j, m, opt, sched


def received(donor):
    """The model, optimizer and schedule of a fresh rank (its own given)
    once it received donor's state."""
    fresh, m, opt, sched = given_parts(0)
    state.unpack(fresh, state.pack(donor))
    return m, opt, sched


def same(a, b):
    """Whether two state_dicts (nested) hold equal values."""
    import torch
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and \
            all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


def test_donor_with_received_state():
    donor, m, opt, sched = given_parts(5)
    donor.step_count, donor.epoch, donor.pos = 5, 1, 80
    blob = state.pack(donor)
    # A replacement: the state arrives before its model and optimizer.
    repl = job()
    state.unpack(repl, blob)
    check((repl.step_count, repl.epoch, repl.pos) == (5, 1, 80),
          (repl.step_count, repl.epoch, repl.pos))
    for given in (0, 1):	# nothing given yet; the model only
        r = job()
        state.unpack(r, blob)
        if given:
            m2, _, _ = parts(0)
            r._module = m2
            state.apply_model(r)
        # r is the donor of the next round: a fresh rank receives.
        m3, opt3, sched3 = received(r)
        check(same(m3.state_dict(), m.state_dict()),
              "the model of a donor that had not made its own (%d)" % given)
        check(same(opt3.state_dict(), opt.state_dict()),
              "the optimizer a donor had received but not tracked (%d)"
              % given)
        check(same(sched3.state_dict(), sched.state_dict()),
              "the schedule a donor had received but not tracked (%d)"
              % given)
    # Part tracked: the optimizer given, the schedule not yet.
    r = job()
    state.unpack(r, blob)
    m4, opt4, _ = parts(0)
    r._module = m4
    state.apply_model(r)
    r.track(opt4)
    _, opt5, sched5 = received(r)
    check(same(opt5.state_dict(), opt.state_dict()), "optimizer, part")
    check(same(sched5.state_dict(), sched.state_dict()), "schedule, part")


def test_grow_switch_step():
    # A grow keeps the survivors' group only when every rank of one
    # group posted "BEGUN ROUND WORLD"; "-1" are the replacements.
    from rdzv.watcher import switch_step
    check(switch_step([b"-1", b"10 6 3", b"12 6 3", b"11 6 3"]) == 12,
          "a whole group of 3 and its replacement")
    # A rank that left round 6's group for this one (a replacement that
    # had not finished joining it, or a survivor still making it) posts
    # -1: the one whose group looks whole must not step on in it alone.
    check(switch_step([b"-1", b"-1", b"-1", b"10 6 3"]) is None,
          "one survivor of 3 posted")
    check(switch_step([b"-1", b"10 6 3", b"10 5 3", b"10 6 3"]) is None,
          "two groups")
    check(switch_step([b"-1"] * 4) is None, "nobody whole")



def test_state_moves():
    import contextlib
    import io
    import threading
    S = repair.State
    check(set(repair._MOVES) == set(S) and all(b in S for bs in
          repair._MOVES.values() for b in bs), "a table of States")
    j = job()		# no channel: its group (none, or torchrun's) whole
    check(j._state is S.WHOLE and j._group_whole(), j._state)
    with j.step():
        check(j._state is S.STEP and j._in_step, j._state)
    check(j._state is S.WHOLE and j.step_count == 1, j._state)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        with j.step():
            # The watcher breaks the group (a shrink): it posts the
            # break; the training thread's state moves at the step's end.
            t = threading.Thread(target=j._cut_group)
            t.start()
            t.join()
            check(j._state is S.STEP and not j._group_whole(),
                  (j._state, "after a posted break"))
        check(j._state is S.CUT and not j._group_whole(), j._state)
        with j.step():
            check(j._state is S.CUT_STEP and j._in_step, j._state)
        check(j._state is S.CUT, j._state)
    check("internal error" not in err.getvalue(), err.getvalue())
    # A move the table has not: said, as an internal error.
    with contextlib.redirect_stderr(err):
        j._to(S.JOINING, "a test's illegal move")
    check("internal error: state CUT -> JOINING" in err.getvalue(),
          err.getvalue())



def test_stats_and_surface():
    # The counters are in job.stats (a heal's too, with replica groups);
    # neither module's __all__ names the channel's internals.
    from rdzv import channel, mesh
    st = job().stats
    check(st["steps"] == 0 and st["repairs"] == 0 and
          st["repair_seconds"] == [] and st["wait_ms"] == 0.0, st)
    m = mesh.MeshJob("gloo", None, None, 2, 4, 1)
    st = m.stats
    check(st["replica"] == 0 and st["shard"] == 1 and st["heals"] == 0 and
          st["heal_seconds"] == [] and st["heal_bytes"] == 0 and
          st["steps"] == 0, st)
    inner = set(n for n in dir(channel) if not n.startswith("__"))
    for mod in (repair, mesh):
        check(not set(mod.__all__) & inner, (mod.__name__, mod.__all__))


if __name__ == "__main__":
    rt.main(globals(), per_test=60.0, total=120.0)
