#!/bin/bash
# store_vs_torch.sh: rdzvd's store beside torch 1.13's own TCPStore server,
# in one run, on 127.0.0.1.
#
#   bench/store_vs_torch.sh [BUILDDIR]
#
# Starts rdzvd three times (durability memory, relaxed and strict, the last
# two on temporary sqlite files) and torch's server, then measures:
#   1. storeload at K = 1, 16, 256 connections, the same parameters for
#      every server (TCPStore 1.13 dialect; rdzvd also natively), REPS
#      repetitions interleaved across servers so that machine noise falls
#      on all of them alike; medians and rdzvd/torch ratios;
#   2. a barrier of N = 1000 and 10000 clients (ADD, last arriver SETs,
#      all WAIT) against each;
#   3. rdzvd's VmRSS with 10000 idle connections.
# Prints markdown tables on stdout; progress and the raw storeload lines go
# to stderr and to $RESULTS_DIR (default: a temporary directory, kept).
#
# Environment: REPS (3), DURATION (3 s), WARMUP (1 s), CONNS ("1 16 256"),
# BARRIER_NS ("1000 10000"), BARRIER_REPS (3), IDLE_N (10000), MIX, KEYS,
# KEY_SIZE, VALUE_SIZE, TORCH_PYTHON (/usr/bin/python3).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
build=${1:-${RDZV_TOP_BUILDDIR:-$(pwd)}}
storeload=$build/bench/storeload
rdzvd=$build/rdzvd/rdzvd
python=${TORCH_PYTHON:-/usr/bin/python3}

REPS=${REPS:-3}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
CONNS=${CONNS:-"1 16 256"}
BARRIER_NS=${BARRIER_NS:-"1000 10000"}
BARRIER_REPS=${BARRIER_REPS:-3}
IDLE_N=${IDLE_N:-10000}
MIX=${MIX:-set=40,get=40,add=15,wait=5}
KEYS=${KEYS:-1000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-64}

for f in "$storeload" "$rdzvd"; do
	[ -x "$f" ] || { echo "store_vs_torch: $f not built (pass the build directory)" >&2; exit 1; }
done

# Every client and server here needs descriptors for up to 10000 sockets.
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ]; then
	ulimit -n "$hard"
fi
need=$((IDLE_N + 100))
for n in $BARRIER_NS; do [ $((n + 100)) -gt $need ] && need=$((n + 100)); done
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
	echo "store_vs_torch: need $need descriptors per process, ulimit -Hn is $hard" >&2
	exit 1
fi

tmp=$(mktemp -d /tmp/store_vs_torch.XXXXXX)
results=${RESULTS_DIR:-$tmp}
mkdir -p "$results"
raw=$results/raw.tsv
: > "$raw"
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -f "$tmp"/*.db "$tmp"/*.db-wal "$tmp"/*.db-shm
}
trap cleanup EXIT

log() { echo "store_vs_torch: $*" >&2; }


# start_rdzvd NAME DURABILITY DB: starts rdzvd, sets port_NAME and pid_NAME.
declare -A port pid
start_rdzvd() {
	local name=$1 dur=$2 db=$3
	"$rdzvd" -d --listen 127.0.0.1:0 --port-file "$tmp/$name.port" \
	    --http off --db "$db" --durability "$dur" --log-level warn \
	    2> "$results/$name.log" &
	pids+=($!)
	pid[$name]=$!
	port[$name]=$(wait_port "$tmp/$name.port")
}

start_torch() {
	"$python" "$here/torch_store_server.py" > "$tmp/torch.port" \
	    2> "$results/torch.log" &
	pids+=($!)
	pid[torch]=$!
	port[torch]=$(wait_port "$tmp/torch.port")
}

start_rdzvd memory memory :memory:
start_rdzvd relaxed relaxed "$tmp/relaxed.db"
start_rdzvd strict strict "$tmp/strict.db"
start_torch
log "servers: memory=${port[memory]} relaxed=${port[relaxed]} strict=${port[strict]} torch=${port[torch]}"
log "raw results in $results"

# CPU time (user + system) a process has used, in clock ticks.
clk_tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

# Pulls key=value fields out of a storeload line.

# ---- 1. load ----
targets="memory:tcpstore113 relaxed:tcpstore113 strict:tcpstore113 torch:tcpstore113 memory:native relaxed:native strict:native"
started=$(date +%s)
for k in $CONNS; do
	for rep in $(seq 1 "$REPS"); do
		for t in $targets; do
			srv=${t%%:*} proto=${t#*:}
			c0=$(cpu_ticks "${pid[$srv]}")
			line=$("$storeload" --proto "$proto" --port "${port[$srv]}" \
			    --conns "$k" --duration "$DURATION" --warmup "$WARMUP" \
			    --mix "$MIX" --keys "$KEYS" --key-size "$KEY_SIZE" \
			    --value-size "$VALUE_SIZE" 2>>"$results/storeload.err") || line="failed"
			c1=$(cpu_ticks "${pid[$srv]}")
			echo "load $srv $line" >> "$results/storeload.out"
			if [ "$line" = failed ]; then
				printf 'load\t%s\t%s\t%s\t%s\tnan\tnan\tnan\tnan\n' "$srv" "$proto" "$k" "$rep" >> "$raw"
				log "K=$k rep $rep $srv/$proto: FAILED"
				continue
			fi
			# Server CPU per op: noise from other processes on the
			# machine moves it far less than ops/s.
			cpu=$(awk -v d=$((c1 - c0)) -v t="$clk_tck" -v n="$(field total_ops "$line")" \
			    'BEGIN { printf "%.2f", (n > 0 ? d * 1e6 / t / n : 0) }')
			printf 'load\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$srv" "$proto" "$k" "$rep" \
			    "$(field ops_per_s "$line")" "$(field p50_us "$line")" \
			    "$(field p99_us "$line")" "$cpu" >> "$raw"
			log "K=$k rep $rep $srv/$proto: $(field ops_per_s "$line") ops/s p99 $(field p99_us "$line") us, server $cpu us CPU/op"
		done
	done
done
log "load phase took $(( $(date +%s) - started )) s"

# ---- 2. barrier ----
started=$(date +%s)
for n in $BARRIER_NS; do
	for rep in $(seq 1 "$BARRIER_REPS"); do
		for srv in memory relaxed strict torch; do
			line=$("$storeload" --barrier "$n" --proto tcpstore113 \
			    --port "${port[$srv]}" --timeout 120 \
			    2>>"$results/storeload.err") || true
			echo "barrier $srv $line" >> "$results/storeload.out"
			s=$(field seconds "$line")
			case $s in ''|timeout) s=nan ;; esac
			printf 'barrier\t%s\ttcpstore113\t%s\t%s\t%s\tnan\tnan\tnan\n' "$srv" "$n" "$rep" "$s" >> "$raw"
			log "barrier N=$n rep $rep $srv: $s s"
		done
	done
done
log "barrier phase took $(( $(date +%s) - started )) s"

# ---- 3. memory with idle connections, on a fresh rdzvd ----
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
start_rdzvd idle relaxed "$tmp/idle.db"
sleep 0.5
base=$(rss_kib "${pid[idle]}")
printf 'rss\tidle\tnone\t0\t1\t%s\tnan\tnan\tnan\n' "$base" >> "$raw"
for proto in tcpstore113 native; do
	"$storeload" --idle "$IDLE_N" --proto "$proto" --port "${port[idle]}" \
	    > "$tmp/idle.out" 2>>"$results/storeload.err" &
	ipid=$!
	for i in $(seq 1 600); do
		grep -q ready "$tmp/idle.out" 2>/dev/null && break
		kill -0 $ipid 2>/dev/null || break
		sleep 0.1
	done
	if grep -q ready "$tmp/idle.out"; then
		sleep 1
		rss=$(rss_kib "${pid[idle]}")
	else
		rss=nan
	fi
	printf 'rss\tidle\t%s\t%s\t1\t%s\tnan\tnan\tnan\n' "$proto" "$IDLE_N" "$rss" >> "$raw"
	log "rdzvd VmRSS with $IDLE_N idle $proto connections: $rss KiB (baseline $base KiB)"
	kill $ipid 2>/dev/null || true
	wait $ipid 2>/dev/null || true
	sleep 1
done

# ---- tables ----
"$python" - "$raw" "$REPS" "$DURATION" "$WARMUP" "$MIX" "$KEYS" "$KEY_SIZE" "$VALUE_SIZE" <<'EOF'
import math
import statistics
import sys

raw, reps, dur, warm, mix, keys, ksz, vsz = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(raw) if l.strip()]


def med(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def num(s):
    try:
        return float(s)
    except ValueError:
        return float("nan")


def fmt(x, nd=0):
    return "n/a" if math.isnan(x) else f"{x:,.{nd}f}"


def ratio(a, b):
    return "n/a" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}x"


load = {}
for kind, srv, proto, k, rep, a, b, c, d in rows:
    if kind == "load":
        load.setdefault((srv, proto, int(k)), []).append((num(a), num(b), num(c), num(d)))

print(f"### Store ops ({reps} runs each, medians; {dur} s after {warm} s warmup; "
      f"mix {mix}; {keys} keys of {ksz} B, values {vsz} B)\n")
print("| server | protocol | K | ops/s | p50 µs | p99 µs | ops/s vs torch | p99 vs torch "
      "| server CPU µs/op | runs (ops/s) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for k in sorted({key[2] for key in load}):
    t = load.get(("torch", "tcpstore113", k), [])
    t_ops = med([x[0] for x in t])
    t_p99 = med([x[2] for x in t])
    for srv, proto in [("memory", "tcpstore113"), ("relaxed", "tcpstore113"),
                       ("strict", "tcpstore113"), ("torch", "tcpstore113"),
                       ("memory", "native"), ("relaxed", "native"),
                       ("strict", "native")]:
        r = load.get((srv, proto, k))
        if not r:
            continue
        ops = med([x[0] for x in r])
        p50 = med([x[1] for x in r])
        p99 = med([x[2] for x in r])
        cpu = med([x[3] for x in r])
        name = "torch 1.13 TCPStore" if srv == "torch" else f"rdzvd {srv}"
        vs = "—" if srv == "torch" else ratio(ops, t_ops)
        vp = "—" if srv == "torch" else ratio(p99, t_p99)
        runs = " ".join(fmt(x[0]) for x in r)
        print(f"| {name} | {proto} | {k} | {fmt(ops)} | {fmt(p50, 1)} | {fmt(p99, 1)} "
              f"| {vs} | {vp} | {fmt(cpu, 2)} | {runs} |")

bar = {}
for kind, srv, proto, n, rep, a, b, c, d in rows:
    if kind == "barrier":
        bar.setdefault((srv, int(n)), []).append(num(a))
if bar:
    print("\n### Barrier (tcpstore113: ADD, last arriver SETs, all WAIT; "
          "seconds from first ADD to last release, median)\n")
    print("| N | rdzvd memory | rdzvd relaxed | rdzvd strict | torch | torch / rdzvd relaxed | runs |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for n in sorted({key[1] for key in bar}):
        m = {s: med(bar.get((s, n), [])) for s in ("memory", "relaxed", "strict", "torch")}
        runs = "; ".join(s + " " + " ".join(fmt(x, 3) for x in bar.get((s, n), []))
                         for s in ("memory", "relaxed", "strict", "torch"))
        print(f"| {n} | {fmt(m['memory'], 3)} | {fmt(m['relaxed'], 3)} | {fmt(m['strict'], 3)} "
              f"| {fmt(m['torch'], 3)} | {ratio(m['torch'], m['relaxed'])} | {runs} |")

rss = [(proto, int(n), num(a)) for kind, srv, proto, n, rep, a, b, c, d in rows if kind == "rss"]
if rss:
    print("\n### rdzvd memory (fresh rdzvd, relaxed, VmRSS)\n")
    print("| idle connections | protocol | VmRSS MiB |")
    print("| ---: | --- | ---: |")
    for proto, n, kib in rss:
        print(f"| {n} | {proto} | {fmt(kib / 1024, 1)} |")
EOF
