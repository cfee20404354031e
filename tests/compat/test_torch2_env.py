# SPDX-License-Identifier: Apache-2.0
"""test_torch2_env: doc/rdzvd.md's env:// example on rdzvd's main port, run
again and again, with torch 2.13 and 1.13.

MASTER_ADDR:MASTER_PORT name rdzvd's main port and
TORCHELASTIC_USE_AGENT_STORE=True, so every rank is a TCPStore client of
rdzvd: torch 2.13 puts the group's keys under "/default_pg/" (no attempt
prefix), 1.13 under "//worker/attempt_0/default_pg/".  Without a rule the
second run's rank 1 would find the first run's keys already there and
connect to a dead rank 0 (2.13) or count a spent barrier (1.13): the
second run of each pair starts rank 0 three seconds late so that rank 1
always looks first.  rdzvd's rule (rdzvd/tcps_group.c): a new group's
first rank, once every connection of the previous group has closed, drops
the previous group's keys, and nothing else:

  rule      raw 2.x clients: members of a group keep each other's keys; an
            inspector that never added to "init/" neither joins nor drops;
            the next group's first rank drops only process-group keys
  torch2    two 2.13 runs in a row
  torch113  two 1.13 runs in a row
  restart   user keys (as scripts/demo_store.py sets them, with a
            world_size) and the last group's keys survive kill -9 of rdzvd
            in strict mode; a 2.13 run after the restart works; the user
            keys are still there
"""

import os

import rdzvtest
import compatlib as cl
from compatlib import check, log

cl.use_torch2()

import test_gloo_pg as gp  # noqa: E402  (needs the torch above)

SRV = None
USER = {b"/model/name": b"mlp-fashion-mnist", b"/model/hidden": b"256",
    b"/default_pg_notes": b"not a process-group key"}


def raw2():
    return rdzvtest.TCPStore2(SRV.d.connect())


def pg_keys(c):
    return sorted(k for k in c.list_keys() if b"default_pg/" in k)


def wait_closed(nconn, dialect="tcpstore2"):
    """rdzvd notices closes asynchronously: poll until only nconn
    connections of dialect are left."""
    v = cl.poll_metric(SRV, "rdzvd_connections", nconn, timeout=30,
        dialect=dialect)
    check(v == nconn, "rdzvd_connections{%s} %s, want %d" % (dialect, v,
        nconn))


def test_rule():
    u = raw2()
    check(u.add(b"init/", 1) >= 1, "ADD init/")
    for k, v in USER.items():
        u.set(k, v)
    u.close()
    a, b = raw2(), raw2()
    a.add(b"init/", 1)
    a.set(b"/default_pg/a", b"1")
    b.add(b"init/", 1)
    b.set(b"/default_pg/b", b"2")
    check(a.check([b"/default_pg/a", b"/default_pg/b"]) == 0,
        "members of one group must keep each other's keys")
    a.close()
    b.close()
    wait_closed(0)
    insp = raw2()
    check(insp.check([b"/default_pg/a"]) == 0 and
        insp.get(b"/default_pg/b") == b"2", "an inspector (no init/) "
        "reading an ended group's keys must not drop them")
    c = raw2()
    n0 = int(c.get(b"init/"))
    c.add(b"init/", 1)
    c.set(b"//worker/attempt_0/default_pg/c", b"3")
    check(pg_keys(c) == [b"//worker/attempt_0/default_pg/c"],
        "the next group's first rank must leave only its own "
        "process-group key: %r" % pg_keys(c))
    for k, v in USER.items():
        check(c.get(k) == v, "user key %r is %r" % (k, c.get(k)))
    check(int(c.get(b"init/")) == n0 + 1, "init/ must count on")
    for x in (c, insp):
        x.close()
    wait_closed(0)
    check("keys of the previous one dropped" in SRV.log_text(),
        "rdzvd did not log the drop")


def run_twice(python, tag, prefix):
    for i, delay in enumerate((None, {0: 3.0}, {1: 3.0})):
        res = gp.run_group(SRV.port, 2, 0, "%s run %d" % (tag, i + 1),
            python=python, delay=delay)
        gp.check_results(res, 2, "%s run %d" % (tag, i + 1))
        wait_closed(0, "tcpstore2" if python == cl.TORCH2_PY else
            "tcpstore113")
        c = raw2()
        keys = pg_keys(c)
        c.close()
        check(keys and all(k.startswith(prefix) for k in keys),
            "%s run %d: process-group keys %r, want them under %r" %
            (tag, i + 1, keys[:6], prefix))
    log("%s: two runs in a row, rank 0 late in the second" % tag)


def test_torch2_twice():
    run_twice(cl.TORCH2_PY, "torch 2.13", b"/default_pg/")


def test_torch113_twice():
    run_twice(cl.TORCH_PY, "torch 1.13", b"//worker/attempt_0/default_pg/")


@rdzvtest.needs("test_rule")
def test_restart():
    c = raw2()
    before = pg_keys(c)
    c.add(b"test/fence", 1)		# acknowledged after commit (strict)
    c.close()
    SRV.restart(kill=True)
    c = raw2()
    check(pg_keys(c) == before, "the ended group's keys after kill -9: "
        "%r, want %r" % (pg_keys(c), before))
    c.close()
    res = gp.run_group(SRV.port, 2, 0, "torch 2.13 after restart",
        python=cl.TORCH2_PY, delay={0: 3.0})
    gp.check_results(res, 2, "torch 2.13 after restart")
    wait_closed(0)
    c = raw2()
    keys = pg_keys(c)
    check(keys and all(k.startswith(b"/default_pg/") for k in keys),
        "process-group keys after the restart's run: %r" % keys[:6])
    for k, v in USER.items():
        check(c.get(k) == v, "user key %r is %r after kill -9" %
            (k, c.get(k)))
    c.close()


if __name__ == "__main__":
    SRV = cl.make_server(durability="strict")
    if SRV.kind != "rdzvd":
        rdzvtest.skip_all("the rule is rdzvd's (torch's store dies with "
            "each job)")
    if not os.access(cl.TORCH_PY, os.X_OK):
        cl._no_torch("no torch 1.13 python at %s" % cl.TORCH_PY)
    rdzvtest.main(globals(), per_test=60, total=170, sections=True,
        server=SRV)
