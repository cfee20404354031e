# SPDX-License-Identifier: Apache-2.0
"""rdzvd --job-retention: a closed job is forgotten (memory, sqlite rows,
every kv namespace under job/<id>/) once the retention has passed since it
closed, counted in rdzvd_jobs_purged_total and logged; its rdzv_id is
refused (naming the option) until then and starts a new job after;
running jobs are never purged, 0 keeps closed jobs forever, a restart
(even after SIGKILL) purges what came due while rdzvd was down, and a big
backlog is purged in batches while the daemon keeps answering."""
import datetime
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import rdzvtest as rt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rendezvous import Agent, OP_JOB_STATUS, RUNNING, DONE  # noqa: E402

OP_ADMIN_JOBS, OP_ADMIN_JOB = 29, 30


def daemon(retention, *args, **kw):
    return rt.Rdzvd(args=["--job-retention", str(retention)] + list(args),
                    **kw)


def jobs(d):
    return {j["job"]: j for j in
            json.loads(d.native().call(OP_ADMIN_JOBS)[0])}


def finish(d, job, nodes=2, lease_ms=60000):
    """Runs job to DONE with `nodes` fake agents; returns the round push
    (store_ns, round) and the wall time it closed."""
    agents = [Agent(d, job, nodes=(nodes, nodes), lease_ms=lease_ms)
              for _ in range(nodes)]
    for a in agents:
        a.join()
    pushes = [a.push() for a in agents]
    assert all(p["state"] == RUNNING for p in pushes), pushes
    for a in agents:
        a.succeeded(pushes[0]["round"])
    assert all(a.push()["state"] == DONE for a in agents)
    closed = time.time()
    hang_up(agents)
    return pushes[0], closed


def hang_up(agents):
    """Closes each agent's connection to rdzvd."""
    for a in agents:
        a.c.close()


def start_running(d, job):
    """A job left RUNNING (long leases, agents kept open)."""
    agents = [Agent(d, job, nodes=(2, 2), lease_ms=60000) for _ in range(2)]
    for a in agents:
        a.join()
    p = [a.push() for a in agents][0]
    assert p["state"] == RUNNING
    return agents, p


def db_rows(path, job, others=()):
    """Rows of job in rdzvd's sqlite file: its job row, node and event
    rows, and every key or queue item under job/<id>/ but not under
    job/<other>/ (opened read-only, beside a running rdzvd in WAL mode or
    after it exited)."""
    j = job.encode()
    pre = b"job/" + j + b"/"
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=5)
    db.create_function("mine", 1, lambda ns: ns.startswith(pre) and not any(
        ns.startswith(b"job/%s/" % o.encode()) for o in others))
    try:
        out = {}
        out["job"] = db.execute(
            "SELECT count(*) FROM kv WHERE ns = ? AND key = ?",
            (b"\0rdzv/job", j)).fetchone()[0]
        out["nodes"] = db.execute("SELECT count(*) FROM kv WHERE ns = ?",
                                  (b"\0rdzv/node/" + j,)).fetchone()[0]
        out["events"] = db.execute("SELECT count(*) FROM kv WHERE ns = ?",
                                   (b"\0rdzv/ev/" + j,)).fetchone()[0]
        out["keys"] = db.execute(
            "SELECT count(*) FROM kv WHERE mine(ns)").fetchone()[0]
        out["queue"] = db.execute(
            "SELECT count(*) FROM queue WHERE mine(ns)").fetchone()[0]
        return out
    finally:
        db.close()


def db_total(path):
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=5)
    try:
        return db.execute("SELECT count(*) FROM kv").fetchone()[0]
    finally:
        db.close()


def straggle(d, job, rnd):
    """What late writers leave after a job closed: librdzvworker's
    progress/<rank> in the ended round's namespace (its workers write over
    the main port, which no round end closes), a queue there, and a key
    in a namespace of the job's own."""
    c = d.native()
    ns = b"job/%s/round/%d" % (job.encode(), rnd)
    c.set(b"progress/0", b"41 0", ns=ns)
    c.set(b"progress/1", b"42 0", ns=ns)
    c.queue_push(b"q", b"item", ns=ns)
    c.set(b"note", b"mine", ns=b"job/%s/extra" % job.encode())
    return c


def join_refused(d, job):
    a = Agent(d, job, nodes=(2, 2))
    try:
        a.join()
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ECLOSED, e
        return str(e)
    raise AssertionError("JOIN of closed job %s accepted" % job)


def rdzvctl():
    p = os.path.join(rt.top_builddir(), "client", "rdzvctl")
    return p if os.access(p, os.X_OK) else None


def test_closed_job_purged_after_retention():
    d = daemon("1.5")
    # A running job whose namespaces start with job/r1/ too: r1's purge
    # must tell them apart.
    live, lp = start_running(d, "r1/live")
    assert lp["store_ns"] == b"job/r1/live/round/1"
    c = d.native()
    c.set(b"w", b"still here", ns=lp["store_ns"])
    p, closed = finish(d, "r1")
    assert p["store_ns"] == b"job/r1/round/1"
    s = straggle(d, "r1", 1)
    # Within the window: listed, its rows and keys kept, its id refused
    # with a message naming the option.
    assert jobs(d)["r1"]["state"] == "succeeded"
    assert "state succeeded" in c.call(OP_JOB_STATUS, "r1")[0].decode()
    assert s.num_keys(ns=b"job/r1/round/1") == 2
    assert s.queue_len(b"q", ns=b"job/r1/round/1") == 1
    assert s.list_keys(ns=b"job/r1/extra") == [b"note"]
    msg = join_refused(d, "r1")
    assert "--job-retention" in msg and "refused for another" in msg, msg
    rt.wait_until(lambda: db_rows(d.db, "r1", ["r1/live"])["keys"] == 3, 3,
                  what="r1's rows committed")
    rows = db_rows(d.db, "r1", ["r1/live"])
    assert rows["job"] == 1 and rows["nodes"] == 2 and rows["events"] >= 4, \
        rows
    assert rows["queue"] == 1, rows
    assert time.time() - closed < 1.4, "test too slow to see the window"
    assert d.metric("rdzvd_jobs_purged_total") == 0

    # Past it: gone from everything, counted, logged.
    rt.wait_until(lambda: "r1" not in jobs(d), 5, what="r1 purged")
    assert time.time() - closed >= 1.4, "purged before its retention"
    for op in (OP_JOB_STATUS, OP_ADMIN_JOB):
        try:
            c.call(op, "r1")
            raise AssertionError("op %d still knows r1" % op)
        except rt.RdzvError as e:
            assert e.code == rt.RDZV_ENOTFOUND, e
    assert s.num_keys(ns=b"job/r1/round/1") == 0
    assert s.list_keys(ns=b"job/r1/round/1") == []
    assert s.queue_len(b"q", ns=b"job/r1/round/1") == 0
    assert s.num_keys(ns=b"job/r1/extra") == 0
    assert d.metric("rdzvd_jobs_purged_total") == 1
    assert d.metric("rdzvd_jobs", state="closed") == 0
    rt.wait_until(lambda: re.search(
        r"job r1 purged: it succeeded [0-9.]+ s ago, --job-retention is "
        r"1\.5 s; \d+ keys dropped", d.log_text()), 3, what="purge log line")
    rt.wait_until(lambda: db_rows(d.db, "r1", ["r1/live"]) == dict(
        job=0, nodes=0, events=0, keys=0, queue=0), 3,
        what="r1's rows gone from sqlite")
    st, body, _ = d.http_get("/api/jobs")
    assert st == 200 and [j["job"] for j in json.loads(body)] == ["r1/live"]
    st, _, _ = d.http_get("/api/jobs/r1")
    assert st == 404
    ctl = rdzvctl()
    if ctl:
        r = subprocess.run([ctl, "-e", "127.0.0.1:%d" % d.port, "jobs",
                            "--json"], capture_output=True, text=True,
                           timeout=20)
        assert r.returncode == 0, r
        assert [j["job"] for j in json.loads(r.stdout)] == ["r1/live"], \
            r.stdout
        r = subprocess.run([ctl, "-e", "127.0.0.1:%d" % d.port, "jobs"],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r
        assert [ln.split()[0] for ln in r.stdout.splitlines()[1:]] == \
            ["r1/live"], r.stdout

    # The running job was left alone, keys and all.
    assert jobs(d)["r1/live"]["state"] == "running"
    assert c.get(b"w", ns=lp["store_ns"]) == b"still here"
    assert db_rows(d.db, "r1/live")["job"] == 1

    # The id is free: a new job, from round 1, that sees nothing old.
    a, b = Agent(d, "r1"), Agent(d, "r1")
    assert a.join() == 0 and b.join() == 0
    p2 = a.push()
    b.push()
    assert p2["state"] == RUNNING and p2["round"] == 1
    assert p2["restart_count"] == 0
    assert p2["store_ns"] == b"job/r1/round/1"
    assert c.num_keys(ns=p2["store_ns"]) == 0
    ev = json.loads(c.call(31, "r1", -1, 0)[0])
    assert ev[0]["seq"] == 0 and ev[0]["text"].startswith("job created"), ev
    a.succeeded(1)
    b.succeeded(1)
    assert a.push()["state"] == DONE
    assert c.get(b"w", ns=lp["store_ns"]) == b"still here"
    hang_up(live)
    d.stop_clean()


def test_failed_and_operator_closed_jobs_purged():
    d = daemon("0.5")
    agents, p = start_running(d, "op")
    d.native().call(32, "op", "maintenance")        # ADMIN_CLOSE
    f = Agent(d, "fail", nodes=(1, 1), max_restarts=0)
    f.join()
    r = f.push()
    f.failure(r["round"], "died")
    assert f.push()["state"] == 5                   # FAILED
    rt.wait_until(lambda: not jobs(d), 5, what="failed jobs purged")
    assert d.metric("rdzvd_jobs_purged_total") == 2
    assert re.search(r"job fail purged: it failed", d.log_text())
    hang_up(agents)
    d.stop_clean()


def test_running_job_never_purged():
    d = daemon("0.2")
    agents, p = start_running(d, "run")
    forming = Agent(d, "forming", nodes=(2, 2), lease_ms=60000)
    forming.join()
    time.sleep(1.0)
    got = jobs(d)
    assert got["run"]["state"] == "running", got
    assert got["forming"]["state"] == "forming", got
    assert d.metric("rdzvd_jobs_purged_total") == 0
    # Once it closes, the short retention applies.
    for a in agents:
        a.succeeded(p["round"])
    rt.wait_until(lambda: "run" not in jobs(d), 5, what="run purged")
    assert "forming" in jobs(d)
    d.stop_clean()


def test_retention_zero_keeps_closed_jobs():
    d = daemon(0)
    p, _ = finish(d, "kept")
    straggle(d, "kept", 1)
    time.sleep(1.5)
    assert jobs(d)["kept"]["state"] == "succeeded"
    assert d.metric("rdzvd_jobs_purged_total") == 0
    assert d.native().num_keys(ns=b"job/kept/extra") == 1
    msg = join_refused(d, "kept")
    assert "--job-retention 0" in msg, msg
    d.stop_clean()


def test_bad_retention_refused():
    for bad in ("-1", "abc", "1.2345", "1x", "", "7dd", "99999999999"):
        rc, out, err = rt.run_rdzvd(["--job-retention", bad, "--listen",
                                     "127.0.0.1:0", "--http", "off", "--db",
                                     ":memory:"])
        assert rc == 1 and "--job-retention" in err, (bad, rc, err)
    # Units and fractions are accepted (a refused JOIN states the total).
    for good, secs in (("1d", 86400), ("2h", 7200), ("0.5m", 30),
                       ("90s", 90), ("604800", 604800)):
        d = daemon(good)
        finish(d, "u")
        msg = join_refused(d, "u")
        assert "--job-retention (%d s)" % secs in msg, (good, msg)
        d.stop_clean()


def test_sigkill_then_restart_after_retention_purges_at_startup():
    d = daemon(1)
    p, closed = finish(d, "k9")
    straggle(d, "k9", 1)
    rt.wait_until(lambda: db_rows(d.db, "k9")["keys"] == 3, 3,
                  what="k9's rows committed")
    d.kill9()
    rows = db_rows(d.db, "k9")
    assert rows["job"] == 1 and rows["events"] > 0 and rows["keys"] == 3, \
        rows
    time.sleep(max(0.0, closed + 1.2 - time.time()))
    d.start()
    rt.wait_until(lambda: "k9" not in jobs(d), 3, what="k9 purged at start")
    assert d.metric("rdzvd_jobs_purged_total") == 1
    assert d.native().num_keys(ns=b"job/k9/round/1") == 0
    d.stop_clean()
    assert db_rows(d.db, "k9") == dict(job=0, nodes=0, events=0, keys=0,
                                       queue=0)
    assert db_total(d.db) == 0


def test_retention_counts_from_close_across_restart():
    d = daemon(3)
    _, closed = finish(d, "rs")
    time.sleep(1.5)
    d.kill9()
    d.start()
    assert "rs" in jobs(d)
    rt.wait_until(lambda: "rs" not in jobs(d), 10, interval=0.05,
                  what="rs purged")
    gone = time.time() - closed
    # From the close, not from the restart (which would be >= 4.5 s).
    assert 2.8 <= gone < 4.3, gone
    d.stop_clean()


def test_dead_round_namespaces_swept():
    """A running job's ended rounds: dropped when they end, and again
    (within a sweep interval: the retention, when under a minute) when a
    late writer brings one back; the live round and the job's other
    namespaces stay."""
    d = daemon("0.5")
    a, b = Agent(d, "sw", lease_ms=60000), Agent(d, "sw", lease_ms=60000)
    a.join(), b.join()
    r1 = a.push()
    b.push()
    c = d.native()
    c.set(b"progress/0", b"1 0", ns=r1["store_ns"])
    c.set(b"mine", b"x", ns=b"job/sw/extra")
    a.failure(r1["round"])
    assert a.push()["state"] == 3 and b.push()["state"] == 3     # STOP
    r2 = a.push()
    b.push()
    assert r2["round"] == 2 and r2["state"] == RUNNING
    # The round's keys went with it; a late worker writes there again.
    assert c.num_keys(ns=r1["store_ns"]) == 0
    c.set(b"progress/0", b"2 0", ns=r1["store_ns"])
    c.set(b"k", b"v", ns=r2["store_ns"])
    assert c.num_keys(ns=r1["store_ns"]) == 1
    rt.wait_until(lambda: c.num_keys(ns=r1["store_ns"]) == 0, 3,
                  what="the dead round swept")
    assert c.get(b"k", ns=r2["store_ns"]) == b"v"
    assert c.get(b"mine", ns=b"job/sw/extra") == b"x"
    assert jobs(d)["sw"]["state"] == "running"
    # Another job whose id extends this one's is its own.
    x, y = Agent(d, "sw/round/1", lease_ms=60000), \
        Agent(d, "sw/round/1", lease_ms=60000)
    x.join(), y.join()
    px = x.push()
    y.push()
    assert px["store_ns"] == b"job/sw/round/1/round/1"
    c.set(b"kx", b"1", ns=px["store_ns"])
    time.sleep(1.2)
    assert c.num_keys(ns=px["store_ns"]) == 1
    assert c.get(b"k", ns=r2["store_ns"]) == b"v"
    d.stop_clean()


def test_many_jobs_purged_in_batches_while_serving():
    n = 300
    d = daemon(3, "--log-level", "debug")
    c = d.native()
    t0 = time.time()
    ids = {}
    for i in range(n):
        job = "bulk-%03d" % i
        ids[job] = c.send(21, job, "inst-%d" % i, "h", "127.0.0.1", 1, 1,
                          1, 1, 0, 0, 60000)
    nodes = {job: c.reply(i, 21)[0] for job, i in ids.items()}
    sent = [c.send(25, job, nodes[job], 1) for job in ids]
    for i in sent:
        c.reply(i, 25)
    for job in ids:
        c.multi_set([(b"progress/0", b"9 0"), (b"a", b"1"), (b"b", b"2")],
                    ns=b"job/%s/round/1" % job.encode())
    made = time.time() - t0
    print("# %d jobs run and closed, 3 keys each, in %.2f s" % (n, made))
    assert made < 2.5, "too slow to build a backlog in time"
    assert d.metric("rdzvd_jobs", state="closed") == n
    assert d.metric("rdzvd_jobs_purged_total") == 0
    keys_before = d.metric("rdzvd_keys")
    assert keys_before >= n * (3 + 1 + 1 + 2), keys_before
    # Hold rdzvd still until every job is due, so all n are one backlog.
    pinger = d.native()
    pinger.ping(b"x")
    d.signal(signal.SIGSTOP)
    time.sleep(max(0.0, t0 + made + 3.2 - time.time()))
    lat = []
    stop = threading.Event()

    errors = []

    def ping_loop():
        try:
            while not stop.is_set():
                s = time.time()
                assert pinger.ping(b"x") == b"x"
                lat.append((s, time.time()))
        except Exception as e:      # reported by the main thread
            errors.append(e)

    th = threading.Thread(target=ping_loop, daemon=True)
    th.start()
    d.signal(signal.SIGCONT)
    # Only the pinger talks to rdzvd while the backlog goes.
    time.sleep(0.5)
    stop.set()
    th.join(10)
    rt.wait_until(lambda: d.metric("rdzvd_jobs_purged_total") == n, 10,
                  what="all jobs purged")
    assert not th.is_alive() and not errors, errors
    assert lat, "no ping completed"
    assert d.metric("rdzvd_keys") == 0
    assert jobs(d) == {}
    log = d.log_text()
    ticks = [float(m) for m in
             re.findall(r"purge tick: \d+ jobs in ([0-9.]+) ms", log)]
    assert len(ticks) >= n // 32, ticks        # batches, not one sweep
    # The purge's span, from its log lines (local time, ms), and the
    # pings that overlapped it; the first ping waited out the SIGSTOP.
    when = [datetime.datetime.strptime(m, "%Y-%m-%dT%H:%M:%S.%f").timestamp()
            for m in re.findall(r"^(\S+) rdzvd\[\d+\]: job bulk-\d+ purged",
                                log, re.M)]
    assert len(when) == n, len(when)
    t_a, t_b = min(when), max(when) + 0.001
    during = [e - s for s, e in lat[1:] if s < t_b and e > t_a]
    print("# purged %d jobs in %d ticks over %.1f ms (longest tick %.2f "
          "ms); %d pings overlapped it, worst %.2f ms; worst of all %d "
          "pings after SIGCONT %.2f ms" % (
              n, len(ticks), (t_b - t_a) * 1e3, max(ticks), len(during),
              max(during, default=0) * 1e3, len(lat) - 1,
              max([e - s for s, e in lat[1:]], default=0) * 1e3))
    d.stop_clean()
    assert db_total(d.db) == 0


if __name__ == "__main__":
    rt.main(globals())
