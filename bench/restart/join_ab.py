# SPDX-License-Identifier: Apache-2.0
"""join_ab.py: two rdzvd binaries under join1000.py, in turn.

    /usr/bin/python3 join_ab.py OLD_RDZVD NEW_RDZVD [--n 1000 5000]
        [--reps 5] [--durability relaxed]

For every N and every repetition, starts a fresh rdzvd of each binary
(--listen 127.0.0.1:0, a database in a temporary directory, no HTTP
listener), runs join1000.py --n N against it and stops it.  The two sides
alternate (OLD first in odd repetitions, NEW first in even ones) so that
drifting machine load falls on both alike.  Measures, per run, join1000's
all_pushes_ms (first JOIN written -> last ROUND push read) and rdzvd's own
CPU time (user + system, /proc/PID/stat) over the run.  Prints a markdown
table: each side's median with min and max, and NEW/OLD as a ratio of the
medians; then every sample.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"
sys.path.insert(0, HERE)
from restart import cpu_ms, rdzvd_port  # noqa: E402


def start(binary, d, durability):
    pf = os.path.join(d, "port")
    argv = [binary, "-d", "--listen", "127.0.0.1:0", "--port-file", pf,
            "--http", "off", "--db", os.path.join(d, "rdzvd.db"),
            "--durability", durability,
            "--log-file", os.path.join(d, "rdzvd.log")]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(d, "stderr"), "w"))
    return p, rdzvd_port(p, pf, d)


def one(binary, n, tmp, tag, durability):
    d = tempfile.mkdtemp(prefix=tag + "-", dir=tmp)
    p, port = start(binary, d, durability)
    try:
        cpu0 = cpu_ms(p.pid)
        out = subprocess.run([PY, os.path.join(HERE, "join1000.py"),
                              "--port", str(port), "--n", str(n),
                              "--timeout", "120"],
                             capture_output=True, text=True, timeout=180)
        cpu = cpu_ms(p.pid) - cpu0
        m = re.search(r"all_pushes_ms=([\d.]+)", out.stdout)
        if out.returncode != 0 or not m:
            sys.exit("join_ab: %s n=%d failed: %s %s" %
                     (tag, n, out.stdout, out.stderr))
        return float(m.group(1)), cpu
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def summary(xs):
    return "%.0f (%.0f-%.0f)" % (statistics.median(xs), min(xs), max(xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--n", type=int, nargs="+", default=[1000])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--durability", default="relaxed")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="join_ab-")
    rows = {}
    for n in a.n:
        for r in range(a.reps):
            sides = [("old", a.old), ("new", a.new)]
            if r % 2:
                sides.reverse()
            for tag, binary in sides:
                wall, cpu = one(binary, n, tmp, tag, a.durability)
                rows.setdefault((n, tag), []).append((wall, cpu))
                print("n=%d rep %d %s: all_pushes_ms %.1f rdzvd_cpu_ms "
                      "%.0f" % (n, r + 1, tag, wall, cpu), file=sys.stderr,
                      flush=True)
    print("| agents | old: all pushes ms | new: all pushes ms | new/old | "
          "old: rdzvd CPU ms | new: rdzvd CPU ms | new/old |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in a.n:
        o, w = rows[(n, "old")], rows[(n, "new")]
        ow, nw = [x[0] for x in o], [x[0] for x in w]
        oc, nc = [x[1] for x in o], [x[1] for x in w]
        print("| %d | %s | %s | %.2f | %s | %s | %.2f |" % (
            n, summary(ow), summary(nw),
            statistics.median(nw) / statistics.median(ow),
            summary(oc), summary(nc),
            statistics.median(nc) / max(statistics.median(oc), 1)))
    print()
    for (n, tag), xs in sorted(rows.items()):
        print("- n=%d %s: wall %s; CPU %s" % (
            n, tag, ", ".join("%.0f" % x[0] for x in xs),
            ", ".join("%.0f" % x[1] for x in xs)))


if __name__ == "__main__":
    main()
