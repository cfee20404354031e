#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# allreduce_vs_gloo.sh: librdzvworker's cpu allreduce beside torch's gloo
# (2.13 by default), in one run, on this host: world sizes 2 and 4, 1 KiB
# to 64 MiB, float32 sum.  Each round runs bench/allreduce_perf and then
# bench/gloo_allreduce.py as N local processes (RANK/WORLD_SIZE,
# MASTER_ADDR/MASTER_PORT; librdzvworker's rank 0 hosts the TCPStore,
# torch's env:// does the same), alternating so both see the same machine
# load; each program reports the median of its own repeats and the table
# shows the median over rounds, with busbw = 2(n-1)/n x bytes / time, and
# the spread: the lowest and highest of the per-round ratios (round k of
# one side against round k of the other, run back to back).
#
# usage: bench/allreduce_vs_gloo.sh [-n "2 4"] [-k rounds] [-r repeats]
#            [-b 1K] [-e 64M]
# Run from a build directory (or set RDZV_TOP_BUILDDIR).  The peer is the
# torch of TORCH_PYTHON (1.13: /usr/bin/python3), by default torch 2.13's
# (TORCH2_PYTHON, as scripts/deps.sh installs it).  Extra environment
# (RDZV_SHM=0, ...) is passed to the librdzvworker ranks.
set -eu

WORLDS="2 4"
ROUNDS=5
REPEATS=3
MINB=1K
MAXB=64M
while getopts "n:k:r:b:e:" o; do
	case $o in
	n) WORLDS=$OPTARG ;;
	k) ROUNDS=$OPTARG ;;
	r) REPEATS=$OPTARG ;;
	b) MINB=$OPTARG ;;
	e) MAXB=$OPTARG ;;
	*) sed -n '2,22p' "$0"; exit 2 ;;
	esac
done

SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/bench/lib.sh"
BUILD=${RDZV_TOP_BUILDDIR:-$PWD}
PERF=$BUILD/bench/allreduce_perf
GLOO=$SRC/bench/gloo_allreduce.py
PY=$(peer_python)
"$PY" -c 'import torch' 2>/dev/null || { echo "no torch in $PY" >&2; exit 1; }
[ -x "$PERF" ] || { echo "no $PERF: run from the build directory" >&2; exit 1; }
OUT=$(mktemp -d /tmp/allreduce_vs_gloo.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$OUT"
}
trap cleanup EXIT

free_port() {
	"$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run_group N OUTFILE CMD...: N ranks of CMD; rank 0's stdout to OUTFILE.
run_group() {
	local n=$1 out=$2 port r
	shift 2
	port=$(free_port)
	pids=()
	for r in $(seq 0 $((n - 1))); do
		env -u RDZV_ENDPOINT -u RDZV_NAMESPACE -u TORCHELASTIC_USE_AGENT_STORE \
		    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n \
		    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
		    RDZV_BACKEND=cpu "$@" > "$out.$r" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		if ! wait "$p"; then
			echo "a rank of '$*' failed:" >&2
			cat "$out".* >&2
			exit 1
		fi
	done
	pids=()
	mv "$out.0" "$out"
}

echo "# allreduce_vs_gloo: $(date -u +%FT%TZ) $(uname -n), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# peer: torch $("$PY" -c 'import torch; print(torch.__version__)') ($PY)"
echo "# rdzv env:$(env | grep '^RDZV_' | grep -v '^RDZV_TOP_BUILDDIR=' | sed 's/^/ /' | tr -d '\n')"
echo "# $ROUNDS rounds x $REPEATS repeats, f32 sum, sizes $MINB..$MAXB"
for n in $WORLDS; do
	for k in $(seq 1 "$ROUNDS"); do
		run_group "$n" "$OUT/rdzv.$n.$k" "$PERF" -b "$MINB" -e "$MAXB" -r "$REPEATS"
		run_group "$n" "$OUT/gloo.$n.$k" "$PY" "$GLOO" -b "$MINB" -e "$MAXB" -r "$REPEATS"
	done
done

"$PY" - "$OUT" "$WORLDS" "$ROUNDS" <<'PYEOF'
import statistics, sys
out, worlds, rounds = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])

def rows(path):
    r = {}
    for line in open(path):
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        r[int(f[0])] = (float(f[4]), float(f[6]))    # time_us, busbw
    return r

print("%5s %10s | %10s %9s | %10s %9s | %7s %13s | %s" % (
    "ranks", "bytes", "rdzv_us", "rdzv_bus", "gloo_us", "gloo_bus",
    "bus_x", "bus_x min-max", "target"))
for n in worlds:
    a = [rows("%s/rdzv.%s.%d" % (out, n, k)) for k in range(1, rounds + 1)]
    g = [rows("%s/gloo.%s.%d" % (out, n, k)) for k in range(1, rounds + 1)]
    for b in sorted(a[0]):
        at = statistics.median(x[b][0] for x in a)
        ab = statistics.median(x[b][1] for x in a)
        gt = statistics.median(x[b][0] for x in g)
        gb = statistics.median(x[b][1] for x in g)
        # Same bytes and ranks: the busbw ratio is the inverse time ratio
        # (exact, where busbw rounds to 0.000 for tiny messages).
        per = [y[b][0] / x[b][0] for x, y in zip(a, g)]
        target = ""
        if b >= 1 << 20:
            target = "bus>=1.5x %s" % ("met" if gt >= 1.5 * at else "MISSED")
        elif b < 64 << 10:
            target = "lat<=0.5x %s" % ("met" if at <= 0.5 * gt else "MISSED")
        print("%5s %10d | %10.1f %9.3f | %10.1f %9.3f | %7.2f %6.2f-%-6.2f | %s"
              % (n, b, at, ab, gt, gb, gt / at, min(per), max(per), target))
PYEOF
