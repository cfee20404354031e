# SPDX-License-Identifier: Apache-2.0
"""rdzvctl forget JOB (ADMIN_FORGET, PROTOCOL.md "Operators"): a closed
job is forgotten at once, as --job-retention does when its time is up, so
its id starts a new job; a JOIN of the closed id says so.  A forming or
running job is refused with what to do, an unknown one is "no job"; the
keys of a job whose id merely starts with the forgotten one's stay; the
forgetting holds across a restart of rdzvd; --json."""
import json
import os

import rdzvtest as rt

OP_JOIN, OP_ROUND = 21, 26
RUNNING, FAILED = 1, 5
FIELDS = ("job", "round", "state", "node_id", "group_rank",
          "group_world_size", "world_size", "rank_base", "restart_count",
          "max_restarts", "store_ns", "store_port", "message")

CTL = os.path.join(rt.top_builddir(), "client", "rdzvctl")
if not os.access(CTL, os.X_OK):
    rt.skip_all("client/rdzvctl is not built")


def ctl(d, *args):
    """rdzvctl against d: (rc, stdout, stderr)."""
    import subprocess
    e = {k: v for k, v in os.environ.items()
         if k not in ("RDZV_ENDPOINT", "RDZV_TOKEN_FILE", "RDZV_TLS_CA")}
    p = subprocess.run([CTL, "-e", "127.0.0.1:%d" % d.port] + list(args),
                       env=e, timeout=20, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


class Agent:
    """A fake agent: one native connection, a JOIN, its pushes."""

    def __init__(self, d, job, nodes=(1, 1)):
        self.c = d.native()
        self.joined = self.c.call(
            OP_JOIN, job, os.urandom(8).hex(), "host", "127.0.0.1",
            os.getpid(), 1, nodes[0], nodes[1], 0, 0, 60000)

    def push(self):
        f = self.c.next_push(10.0)
        assert f.op == OP_ROUND, f
        return dict(zip(FIELDS, f.fields))


def running(d, job):
    a = Agent(d, job)
    r = a.push()
    assert r["state"] == RUNNING and r["round"] == 1, r
    return a, r


def job_ids(d):
    rc, out, err = ctl(d, "--json", "jobs")
    assert rc == 0, err
    return [j["job"] for j in json.loads(out)]


def test_forget_closed_job_frees_its_id():
    d = rt.Rdzvd(durability="memory")
    a, r = running(d, "train")
    ns = r["store_ns"].decode()
    assert ctl(d, "kv", "set", "--ns", ns, "k", "v")[0] == 0
    assert ctl(d, "kv", "set", "--ns", "job/train/own", "k", "v")[0] == 0
    rc, out, err = ctl(d, "close", "train")
    assert rc == 0, err
    assert a.push()["state"] == FAILED
    # The closed id is refused, and the refusal names the way out.
    try:
        Agent(d, "train")
        raise AssertionError("a closed job's id was taken")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ECLOSED, e
        assert "rdzvctl forget" in e.message, e.message
    rc, out, err = ctl(d, "forget", "train")
    assert rc == 0, (rc, err)
    assert out == "forgot job train: its id may be used again\n", out
    rt.wait_until(lambda: "job train forgotten by an operator" in
                  d.log_text(), 10, what="rdzvd's log line")
    assert "train" not in job_ids(d)
    rc, out, err = ctl(d, "members", "train")
    assert rc == 1 and 'no job "train"' in err, (rc, err)
    assert ctl(d, "kv", "list", "--ns", "job/train/own")[1] == ""
    # The id starts a new job from round 1, restarts counted anew.
    b, r2 = running(d, "train")
    assert r2["restart_count"] == 0, r2
    # Forgotten once: it is gone, "no job".
    rc, out, err = ctl(d, "forget", "nosuch")
    assert rc == 1 and 'no job "nosuch"' in err, (rc, err)


def test_forget_refuses_a_job_not_closed():
    d = rt.Rdzvd(durability="memory")
    a, r = running(d, "live")
    _forming = Agent(d, "forming", nodes=(2, 2))  # kept running
    for job in ("live", "forming"):
        rc, out, err = ctl(d, "forget", job)
        assert rc == 1, (job, rc, out, err)
        assert "job %s is not closed" % job in err, err
        assert "rdzvctl close %s" % job in err, err
        assert out == "", out
    assert sorted(job_ids(d)) == ["forming", "live"]
    # The running job goes on: its agent heard nothing.
    rc, out, err = ctl(d, "--json", "members", "live")
    assert json.loads(out)["state"] == "running", out


def test_forget_keeps_a_longer_ids_keys():
    d = rt.Rdzvd(durability="memory")
    a, _ = running(d, "a")
    b, rb = running(d, "a/b")
    bns = rb["store_ns"].decode()
    assert bns.startswith("job/a/b/"), bns
    assert ctl(d, "kv", "set", "--ns", bns, "k", "b's")[0] == 0
    assert ctl(d, "kv", "set", "--ns", "job/a/own", "k", "a's")[0] == 0
    assert ctl(d, "close", "a")[0] == 0
    rc, out, err = ctl(d, "forget", "a")
    assert rc == 0, err
    assert ctl(d, "kv", "get", "--ns", bns, "k")[1] == "b's\n"
    assert ctl(d, "kv", "list", "--ns", "job/a/own")[1] == ""
    assert job_ids(d) == ["a/b"]


def test_forget_holds_across_a_restart_and_json():
    d = rt.Rdzvd(durability="strict")
    a, _ = running(d, "kept")
    assert ctl(d, "close", "kept")[0] == 0
    rc, out, err = ctl(d, "--json", "forget", "kept")
    assert rc == 0, err
    assert json.loads(out) == {"job": "kept", "forgotten": True}, out
    assert d.stop() == 0
    d.restart()
    assert "kept" not in job_ids(d)
    b, r = running(d, "kept")
    assert r["round"] == 1, r


if __name__ == "__main__":
    rt.main(globals())
