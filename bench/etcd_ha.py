# SPDX-License-Identifier: Apache-2.0
"""etcd_ha.py: rdzvd on etcd beside rdzvd on sqlite, and its failover.

    RDZV_TOP_BUILDDIR=BUILD python3 bench/etcd_ha.py [--runs 5]
        [--ttl-ms 1000] [--seconds 3] [--lat-runs 3]
        [--phases failover,latency,storage] [--storage-seconds 180]

Everything on loopback: a three-member etcd (127.0.0.1, .2, .3; heartbeat
50 ms, election 500 ms, as tests/integ/etcd_lib.py starts it) and rdzvds
on the same three addresses.

failover   three rdzvds, --leader-ttl-ms TTL; a client SETs through the
           endpoint list.  Timed from just before kill -9 of the leading
           rdzvd (and, for "host lost", of the etcd member on its address)
           to the first SET acknowledged by the new leader.  --runs runs
           of each; median, min and max.
latency    one rdzvd per backend and durability; BUILD/bench/storeload
           --proto native --conns 1 --mix set=100 (p50/p99 of SET), and
           bench/restart/join1000.py --n 1 run 20 times (JOIN to RUNNING
           round push of a one-node job; median), then 200 HEARTBEATs of
           that node one after another (p50/p99), and --n 1000 once (a
           round of 1,000 agents); --lat-runs rounds over the four.
storage    etcd's size while a job's ranks report progress: one relaxed
           rdzvd on etcd; storeload --conns 64 --keys 64 --mix set=100
           (64 ranks, each SETting its own key as fast as it can) for
           --storage-seconds; etcd's revision, database size and size in
           use (maintenance/status) and the keys under the prefix every
           10 s.  Time-compressed: the ops acknowledged divided by 64 x
           3600 is how many hours of a 64-rank job reporting every second
           that is; the leader compacts every real minute, so each minute
           here keeps many minutes of a real job's revisions: an upper
           bound on the real job's size.
Prints markdown tables.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(TOP, "tests", "lib"),
                os.path.join(TOP, "tests", "integ")]

import rdzvtest as rt                                   # noqa: E402
from etcd_lib import EtcdCluster, b64, etcd_rdzvd       # noqa: E402

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def first_ack(endpoints, key, deadline=30.0):
    """Seconds until a SET of key is acknowledged by one of endpoints."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for ep in endpoints:
            h, p = ep.rsplit(":", 1)
            try:
                c = rt.NativeClient(rt.connect(h, int(p), timeout=2.0))
                c.settimeout(5.0)
                c.set(key, b"1")
                c.close()
                return
            except (OSError, rt.PeerClosed, rt.RdzvError):
                pass
        time.sleep(0.005)
    raise RuntimeError("no rdzvd acknowledged a SET in %.0f s" % deadline)


def failover(etcd, ttl_ms, runs, host_lost):
    ds = [etcd_rdzvd(etcd, ttl_ms=ttl_ms, host=h, start=False)
          for h in HOSTS]
    ds[0].start()
    for d in ds[1:]:
        d.start(wait=False)
    eps = [d.endpoint for d in ds]
    out = []
    for r in range(runs):
        leader = [d for d in ds if d.running() and os.path.exists(
            d.port_file)][0]
        first_ack(eps, b"warm-%d" % r)
        i = ds.index(leader)
        t0 = time.monotonic()
        leader.kill9()
        if host_lost:
            etcd.kill(i)
        first_ack(eps, b"after-%d" % r)
        out.append(time.monotonic() - t0)
        if host_lost:
            etcd.start(i)
            etcd.wait_serving()
        leader.start(wait=False)        # back as a standby
        time.sleep(0.5)
    for d in ds:
        d.stop()
    return out


def storeload(d, seconds):
    exe = os.path.join(rt.top_builddir(), "bench", "storeload")
    o = subprocess.run([exe, "--proto", "native", "--host", d.host,
                        "--port", str(d.port), "--conns", "1",
                        "--duration", str(seconds), "--warmup", "1",
                        "--mix", "set=100"], capture_output=True, text=True,
                       check=True).stdout
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", o)}


def joins(d, n, times):
    exe = os.path.join(TOP, "bench", "restart", "join1000.py")
    out = []
    for i in range(times):
        o = subprocess.run([sys.executable, exe, "--port", str(d.port),
                            "--host", d.host, "--n", str(n), "--lws", "1",
                            "--job", "j%d-%d-%d" % (os.getpid(), n, i)],
                           capture_output=True, text=True, check=True).stdout
        out.append(float(re.search(r"all_pushes_ms=([0-9.]+)", o)[1]))
    return out


def heartbeat_us(d, times):
    """p50 and p99 of times HEARTBEAT round trips of a one-node job."""
    exe = os.path.join(TOP, "bench", "restart", "join1000.py")
    o = subprocess.run([sys.executable, exe, "--port", str(d.port),
                        "--host", d.host, "--n", "1", "--lws", "1",
                        "--job", "hb%d" % os.getpid(), "--heartbeats",
                        str(times)], capture_output=True, text=True,
                       check=True).stdout
    m = re.search(r"heartbeat n=\d+ p50_us=([0-9.]+) p99_us=([0-9.]+)", o)
    return float(m[1]), float(m[2])


def etcd_status(etcd):
    st = etcd.post("/v3/maintenance/status", {})
    keys = etcd.post("/v3/kv/range", {"key": b64(b"/rdzv/"),
                                      "range_end": b64(b"/rdzv0"),
                                      "count_only": True})
    return (int(st["header"]["revision"]), int(st.get("dbSize", 0)),
            int(st.get("dbSizeInUse", 0)), int(keys.get("count", 0)))


def storage(etcd, ttl_ms, seconds):
    d = etcd_rdzvd(etcd, ttl_ms=ttl_ms, durability="relaxed")
    exe = os.path.join(rt.top_builddir(), "bench", "storeload")
    p = subprocess.Popen([exe, "--proto", "native", "--host", d.host,
                          "--port", str(d.port), "--conns", "64",
                          "--keys", "64", "--duration", str(seconds),
                          "--warmup", "0", "--mix", "set=100"],
                         stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    samples = [(0.0,) + etcd_status(etcd)]
    while p.poll() is None:
        time.sleep(min(10.0, max(0.1, t0 + len(samples) * 10.0 -
                                 time.monotonic())))
        samples.append((time.monotonic() - t0,) + etcd_status(etcd))
    out = p.stdout.read()
    ops = {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", out)}
    d.stop()
    return ops, samples


def spread(xs, fmt="%.0f"):
    return (fmt + " (" + fmt + "–" + fmt + ")") % (
        statistics.median(xs), min(xs), max(xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ttl-ms", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--lat-runs", type=int, default=3)
    ap.add_argument("--phases", default="failover,latency,storage")
    ap.add_argument("--storage-seconds", type=int, default=180)
    a = ap.parse_args()
    phases = a.phases.split(",")
    print("etcd_ha: %s, load %s" % (time.strftime("%F %T UTC", time.gmtime()),
                                   os.getloadavg()), file=sys.stderr)

    etcd = EtcdCluster(3)
    if "failover" in phases:
        failovers(etcd, a)
    if "latency" in phases:
        latency(etcd, a)
    if "storage" in phases:
        ops, samples = storage(etcd, a.ttl_ms, a.storage_seconds)
        n = ops.get("ops", 0) * 1.0
        print("\n## etcd storage, 64 ranks reporting, %d s time-compressed"
              "\n" % a.storage_seconds)
        print("%.0f SETs acknowledged (%.0f/s): %.1f hours of a 64-rank job "
              "reporting every second\n" % (n, ops.get("ops_per_s", 0),
                                             n / (64 * 3600)))
        print("| s | etcd revision | db size MiB | db size in use MiB | "
              "keys under /rdzv/ |")
        print("| --- | --- | --- | --- | --- |")
        for t, rev, size, used, keys in samples:
            print("| %.0f | %d | %.2f | %.2f | %d |" % (
                t, rev, size / 2**20, used / 2**20, keys))
    etcd.kill_all()
    print("etcd_ha: done %s, load %s" % (
        time.strftime("%F %T UTC", time.gmtime()), os.getloadavg()),
        file=sys.stderr)


def failovers(etcd, a):
    print("## failover, --leader-ttl-ms %d, %d runs each\n" % (a.ttl_ms,
                                                              a.runs))
    print("| lost | kill -9 to first acknowledged SET, ms: median (min–max) |")
    print("| --- | --- |")
    for lost, hl in (("the leading rdzvd", False),
                     ("its host (rdzvd and its etcd member)", True)):
        xs = [x * 1000 for x in failover(etcd, a.ttl_ms, a.runs, hl)]
        print("| %s | %s |" % (lost, spread(xs)))
        sys.stdout.flush()


def latency(etcd, a):

    print("\n## latency, one client; %d rounds over the four rdzvds, "
          "median (min–max)\n" % a.lat_runs)
    print("| store | durability | SET p50 µs | SET p99 µs | "
          "JOIN→round ms (median of 20 per round) | HEARTBEAT p50 µs | "
          "HEARTBEAT p99 µs | round of 1,000 agents ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    configs = [(b, dur) for b in ("sqlite", "etcd")
               for dur in ("relaxed", "strict")]
    res = {c: {"p50": [], "p99": [], "j1": [], "j1000": [], "hb50": [],
               "hb99": []} for c in configs}
    for _ in range(a.lat_runs):
        for backend, dur in configs:
            if backend == "etcd":
                d = etcd_rdzvd(etcd, ttl_ms=a.ttl_ms, durability=dur)
            else:
                d = rt.Rdzvd(durability=dur)
            s = storeload(d, a.seconds)
            r = res[(backend, dur)]
            r["p50"].append(s["p50_us"])
            r["p99"].append(s["p99_us"])
            r["j1"].append(statistics.median(joins(d, 1, 20)))
            hb = heartbeat_us(d, 200)
            r["hb50"].append(hb[0])
            r["hb99"].append(hb[1])
            r["j1000"].append(joins(d, 1000, 1)[0])
            d.stop()
    for (backend, dur) in configs:
        r = res[(backend, dur)]
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            backend, dur, spread(r["p50"]), spread(r["p99"]),
            spread(r["j1"], "%.2f"), spread(r["hb50"]),
            spread(r["hb99"]), spread(r["j1000"])))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
