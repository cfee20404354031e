# SPDX-License-Identifier: Apache-2.0
"""--round-ports: rounds' TCPStore ports from a range a firewall can let
through.  rdzvd gives each running round a port of LO-HI, skipping one
another process holds; with every port held, the job whose round needs
one fails, its agents told why (the range named) and rdzvd warning, and a
port freed by a closed job serves the next.  A bad range is refused at
start, on the command line and in a config file.  rdzv-agent's embedded
rdzvd (--standalone) takes --round_ports too."""
import os
import random
import socket
import subprocess
import sys

import rdzvtest as rt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent_lib as al  # noqa: E402

OP_JOIN, OP_ROUND, OP_ADMIN_CLOSE = 21, 26, 32
RUNNING, FAILED = 1, 5
FIELDS = ("job", "round", "state", "node_id", "group_rank",
          "group_world_size", "world_size", "rank_base", "restart_count",
          "max_restarts", "store_ns", "store_port", "message")


def free_range(n):
    """LO, HI: n consecutive ports nothing on 127.0.0.1 holds now (below
    Linux's ephemeral range, so no client socket takes one meanwhile)."""
    for _ in range(200):
        lo = random.randrange(20000, 32000 - n)
        socks = []
        try:
            for p in range(lo, lo + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return lo, lo + n - 1
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no %d free consecutive ports" % n)


def hold(port):
    """Another process's listener on port (here: ours)."""
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen(1)
    return s


def join(d, job):
    """A one-node job's agent (a native connection); its first push."""
    c = d.native()
    c.call(OP_JOIN, job, os.urandom(8).hex(), "host-" + job, "127.0.0.1",
           os.getpid(), 1, 1, 1, 0, 0, 60000)
    f = c.next_push(10.0)
    assert f.op == OP_ROUND, f
    return c, dict(zip(FIELDS, f.fields))


def store_works(port):
    """A TCPStore 2.x client (unmodified torch's) on the round's port."""
    t = rt.TCPStore2(rt.connect("127.0.0.1", port))
    t.set(b"k", b"v")
    assert t.get(b"k") == b"v"


def test_round_store_in_range():
    lo, hi = free_range(3)
    d = rt.Rdzvd(["--round-ports", "%d-%d" % (lo, hi)])
    got = []
    for job in ("a", "b", "c"):
        c, r = join(d, job)
        assert r["state"] == RUNNING, r
        assert lo <= r["store_port"] <= hi, (r, lo, hi)
        store_works(r["store_port"])
        got.append(r["store_port"])
    assert len(set(got)) == 3, got


def test_busy_port_skipped():
    lo, hi = free_range(3)
    held = [hold(lo), hold(lo + 1)]
    d = rt.Rdzvd(["--round-ports", "%d-%d" % (lo, hi)])
    c, r = join(d, "job")
    assert r["state"] == RUNNING and r["store_port"] == hi, (r, lo, hi)
    store_works(hi)
    for s in held:
        s.close()


def test_exhausted_range_fails_the_job_saying_so():
    lo, hi = free_range(2)
    held = hold(lo)
    d = rt.Rdzvd(["--round-ports", "%d-%d" % (lo, hi)])
    a, ra = join(d, "first")
    assert ra["state"] == RUNNING and ra["store_port"] == hi, ra
    b, rb = join(d, "second")
    assert rb["state"] == FAILED, rb
    msg = rb["message"].decode()
    assert "--round-ports %d-%d" % (lo, hi) in msg, msg
    assert "widen" in msg, msg
    rt.wait_until(lambda: "job second: no free port" in d.log_text(), 10,
                  what="rdzvd's warning")
    log = d.log_text()
    assert "--round-ports %d-%d" % (lo, hi) in log, log[-2000:]
    # The id is closed as failed: a JOIN again is refused, not hung.
    try:
        join(d, "second")
        raise AssertionError("a failed job's id was taken again")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ECLOSED, e
    # A port freed by a closed job serves the next job's round.
    a.call(OP_ADMIN_CLOSE, "first", "done")
    held.close()
    c, rc = join(d, "third")
    assert rc["state"] == RUNNING and lo <= rc["store_port"] <= hi, rc
    store_works(rc["store_port"])


def test_bad_range_refused_at_start():
    for bad, words in [("5-3", "the range is empty"),
                       ("0-10", "ports from 1 to 65535"),
                       ("1-65536", "ports from 1 to 65535"),
                       ("30000-", "LO-HI"), ("abc", "LO-HI"),
                       ("-5", "LO-HI"), ("+1-2", "LO-HI")]:
        rc, out, err = rt.run_rdzvd(["--round-ports", bad])
        assert rc != 0, (bad, rc, err)
        assert "--round-ports" in err and words in err, (bad, err)
        assert '"%s"' % bad in err, (bad, err)


def test_config_file_key():
    lo, hi = free_range(2)
    tmp = rt.mktemp("round-ports-")
    conf = os.path.join(tmp, "rdzvd.conf")
    with open(conf, "w") as f:
        f.write("round_ports = %d-%d\n" % (lo, hi))
    d = rt.Rdzvd(["--config", conf])
    c, r = join(d, "job")
    assert lo <= r["store_port"] <= hi, (r, lo, hi)
    with open(conf, "w") as f:
        f.write("round-ports = 9-8\n")
    rc, out, err = rt.run_rdzvd(["--config", conf])
    assert rc != 0 and "rdzvd.conf:1" in err and "9-8" in err, err


def standalone_agent(nports, script):
    """A standalone rdzv-agent with --round_ports on a free range of
    nports ports, the first held by another socket, its one worker
    running /bin/sh -c script (its %s: OUT, a path in a new folder).
    Returns (agent, lo, hi, held socket, OUT); skips the test when the
    agent is not built."""
    if not os.access(al.agent_path(), os.X_OK):
        rt.skip("agent/rdzv-agent is not built")
    lo, hi = free_range(nports)
    held = hold(lo)
    tmp = rt.mktemp("round-ports-agent-")
    out = os.path.join(tmp, "out")
    a = al.Agent(["--standalone", "--round_ports", "%d-%d" % (lo, hi),
                  "--no_python", "/bin/sh", "-c", script % out], tmp)
    return a, lo, hi, held, out


def test_agent_standalone_round_ports():
    a, lo, hi, held, out = standalone_agent(2, 'echo "$MASTER_PORT" > %s')
    assert a.wait() == 0, a.output()
    with open(out) as f:
        assert int(f.read()) == hi, (lo, hi)
    held.close()


def test_agent_range_full_fails_saying_so():
    """A real agent whose round can get no port: it exits 1 at once, its
    output naming the range, instead of starting workers on no store."""
    a, lo, hi, held, out = standalone_agent(1, "touch %s")
    assert a.wait() == 1, a.output()
    assert "--round-ports %d-%d" % (lo, hi) in a.output(), a.output()
    assert not os.path.exists(out)
    held.close()


def test_agent_bad_range():
    if not os.access(al.agent_path(), os.X_OK):
        rt.skip("agent/rdzv-agent is not built")
    p = subprocess.run([al.agent_path(), "--standalone", "--round_ports",
                        "9-1", "--no_python", "true"], capture_output=True,
                       timeout=20)
    err = p.stderr.decode()
    assert p.returncode == 2, (p.returncode, err)
    assert "--round_ports" in err and "the range is empty" in err, err


if __name__ == "__main__":
    rt.main(globals())
