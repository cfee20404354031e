#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# store_vs_torch.sh: rdzvd's store beside torch's own TCPStore servers (2.x,
# libuv, and 1.13), in one run, on 127.0.0.1.
#
#   bench/store_vs_torch.sh [BUILDDIR]
#
# Starts rdzvd three times (durability memory, relaxed and strict, the last
# two on temporary sqlite files) and both torch servers, then measures:
#   1. storeload at K = 1, 16, 256 connections, the same parameters for
#      every server, in each server's dialect (torch2: tcpstore2, torch113:
#      tcpstore113; rdzvd speaks both, and natively), REPS repetitions
#      interleaved across servers so that machine noise falls on all of
#      them alike; medians and ratios against the torch server of the
#      same dialect (native: against torch 2);
#   2. a barrier of N = 1000 and 10000 clients (ADD, last arriver SETs,
#      all WAIT) against each, with the connects timed too: clients that
#      connect one after another (seq) and all at once (burst);
#   3. the biggest barrier the machine allows (BIG_N, spread over BIG_SOURCES
#      loopback addresses) on a fresh rdzvd, with its CPU time and peak RSS
#      per client;
#   4. rdzvd's VmRSS with 10000 idle connections.
# Prints markdown tables on stdout; progress and the raw storeload lines go
# to stderr and to $RESULTS_DIR (default: a temporary directory, kept).
#
# Environment: REPS (3), DURATION (3 s), WARMUP (1 s), CONNS ("1 16 256"),
# TARGETS (server:dialect pairs of phase 1), BARRIER_NS ("1000 10000"; ""
# skips phase 2),
# BARRIER_MODES ("seq burst"), BARRIER_REPS (3), BARRIER_TIMEOUT (30 s; a
# server that times out is not tried again at that N and mode), BIG_N
# (19000), BIG_SOURCES (8), BIG_REPS (3; 0 skips phase 3), IDLE_N (10000;
# 0 skips phase 4), MIX, KEYS,
# KEY_SIZE, VALUE_SIZE, TORCH_PYTHON (/usr/bin/python3, torch 1.13),
# TORCH2_PYTHON (/root/.cache/rdzv/torch-2.13/bin/python).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_build "${1:-}"
python=${TORCH_PYTHON:-/usr/bin/python3}
python2=${TORCH2_PYTHON:-/root/.cache/rdzv/torch-2.13/bin/python}

REPS=${REPS:-3}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
CONNS=${CONNS:-"1 16 256"}
BARRIER_NS=${BARRIER_NS-"1000 10000"}
BARRIER_REPS=${BARRIER_REPS:-3}
BARRIER_MODES=${BARRIER_MODES:-"seq burst"}
BARRIER_TIMEOUT=${BARRIER_TIMEOUT:-30}
BIG_N=${BIG_N:-19000}
BIG_SOURCES=${BIG_SOURCES:-8}
BIG_REPS=${BIG_REPS:-3}
TARGETS=${TARGETS:-"memory:tcpstore113 relaxed:tcpstore113 strict:tcpstore113 torch113:tcpstore113 memory:tcpstore2 relaxed:tcpstore2 torch2:tcpstore2 relaxed:native"}
IDLE_N=${IDLE_N:-10000}
MIX=${MIX:-set=40,get=40,add=15,wait=5}
KEYS=${KEYS:-1000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-64}

for f in "$storeload" "$rdzvd"; do
	[ -x "$f" ] || { echo "store_vs_torch: $f not built (pass the build directory)" >&2; exit 1; }
done
for p in "$python" "$python2"; do
	"$p" -c "import torch.distributed" 2>/dev/null || {
		echo "store_vs_torch: $p has no torch (scripts/deps.sh installs torch 2.13)" >&2
		exit 1
	}
done

# Every client and server here needs descriptors for up to 10000 sockets.
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ]; then
	ulimit -n "$hard"
fi
need=$((IDLE_N + 100))
for n in $BARRIER_NS $BIG_N; do [ $((n + 100)) -gt $need ] && need=$((n + 100)); done
if [ "$hard" != unlimited ] && [ "$hard" -lt "$need" ]; then
	echo "store_vs_torch: need $need descriptors per process, ulimit -Hn is $hard" >&2
	exit 1
fi

# torch 2.x's server looks up the name of each peer; where no resolver can
# be reached (this machine's nameserver is outside its network) a lookup
# waits 5 s, and the server with it.  In a network namespace of our own,
# with only loopback, the lookup fails at once, as a cluster's working
# resolver answers at once, and other jobs' sockets (ports, TIME_WAIT) stay
# out of the figures.  NETNS=0 runs in the machine's namespace.
if [ "${STORE_BENCH_NETNS:-0}" != 1 ] && [ "${NETNS:-1}" = 1 ]; then
	if unshare --net true 2>/dev/null; then
		export STORE_BENCH_NETNS=1
		exec unshare --net -- bash "$0" "$build"
	fi
	echo "store_vs_torch: no network namespace (unshare --net needs root):" \
	    "torch 2.x's name lookups may stall" >&2
fi
if [ "${STORE_BENCH_NETNS:-0}" = 1 ]; then
	ip link set lo up
fi
echo "store_vs_torch: $(date -u '+%F %T UTC'), load: $(uptime)" >&2

bench_dirs store_vs_torch
cleanup() {
	bench_kill
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

# start_torch NAME PYTHON: torch's own server under that interpreter.
start_torch() {
	local name=$1 py=$2
	"$py" "$here/torch_store_server.py" > "$tmp/$name.port" \
	    2> "$results/$name.log" &
	pids+=($!)
	pid[$name]=$!
	port[$name]=$(wait_port "$tmp/$name.port" 60)
}

start_rdzvd memory memory :memory:
start_rdzvd relaxed relaxed "$tmp/relaxed.db"
start_rdzvd strict strict "$tmp/strict.db"
start_torch torch113 "$python"
start_torch torch2 "$python2"
log "servers: memory=${port[memory]} relaxed=${port[relaxed]} strict=${port[strict]} torch113=${port[torch113]} torch2=${port[torch2]}"
log "torch: $("$python" -c 'import torch; print(torch.__version__)') and $("$python2" -c 'import torch; print(torch.__version__)')"
log "raw results in $results"

# CPU time (user + system) a process has used, in clock ticks.
clk_tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

# Pulls key=value fields out of a storeload line.

# ---- 1. load ----
started=$(date +%s)
for k in $CONNS; do
	for rep in $(seq 1 "$REPS"); do
		for t in $TARGETS; do
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

# ---- 2. barrier, connects timed ----
# barrier_run SERVER PROTO N MODE [storeload options]: one barrier; prints
# its seconds ("nan" on failure, "timeout" past BARRIER_TIMEOUT).
barrier_run() {
	local srv=$1 proto=$2 n=$3 mode=$4 line s
	shift 4
	line=$("$storeload" --barrier "$n" --proto "$proto" --connect "$mode" \
	    --port "${port[$srv]}" --timeout "$BARRIER_TIMEOUT" "$@" \
	    2>>"$results/storeload.err") || true
	echo "barrier $srv $line" >> "$results/storeload.out"
	s=$(field seconds "$line")
	echo "${s:-nan}"
}

# settle PID: waits (up to 10 s) until the server has served its clients'
# closes, which are its work too, so its CPU time counts them.
settle() {
	local i
	for i in $(seq 1 100); do
		[ "$(ls /proc/"$1"/fd | wc -l)" -lt 100 ] && return
		sleep 0.1
	done
}

started=$(date +%s)
bar_targets="memory:tcpstore113 relaxed:tcpstore113 torch113:tcpstore113 relaxed:tcpstore2 torch2:tcpstore2"
declare -A gave_up
for n in $BARRIER_NS; do
	for rep in $(seq 1 "$BARRIER_REPS"); do
		for mode in $BARRIER_MODES; do
			for t in $bar_targets; do
				srv=${t%%:*} proto=${t#*:}
				if [ -n "${gave_up[$t/$n/$mode]:-}" ]; then
					continue
				fi
				c0=$(cpu_ns "${pid[$srv]}")
				s=$(barrier_run "$srv" "$proto" "$n" "$mode")
				settle "${pid[$srv]}"
				c1=$(cpu_ns "${pid[$srv]}")
				if [ "$s" = timeout ]; then
					gave_up[$t/$n/$mode]=1
					s=inf
				fi
				printf 'barrier\t%s\t%s\t%s\t%s\t%s\t%s\t%s\tnan\n' "$srv" "$proto" "$n" "$rep" "$s" "$mode" "$(( (c1 - c0) / n ))" >> "$raw"
				log "barrier N=$n $mode rep $rep $srv/$proto: $s s, server $(( (c1 - c0) / n )) ns CPU per client"
			done
		done
	done
done
log "barrier phase took $(( $(date +%s) - started )) s"

# ---- 3. the biggest barrier, on a fresh rdzvd: time, CPU and RSS ----
hwm_kib() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
start_rdzvd big relaxed "$tmp/big.db"
sleep 0.5
base_hwm=$(hwm_kib "${pid[big]}")
for rep in $(seq 1 "$BIG_REPS"); do
	for mode in $BARRIER_MODES; do
		c0=$(cpu_ns "${pid[big]}")
		s=$(barrier_run big tcpstore113 "$BIG_N" "$mode" --sources "$BIG_SOURCES")
		settle "${pid[big]}"
		c1=$(cpu_ns "${pid[big]}")
		hwm=$(hwm_kib "${pid[big]}")
		[ "$s" = timeout ] && s=inf
		printf 'big\tbig\ttcpstore113\t%s\t%s\t%s\t%s\t%s\t%s\n' "$BIG_N" "$rep" "$s" "$mode" \
		    "$(( (c1 - c0) / BIG_N ))" "$(( (hwm - base_hwm) * 1024 / BIG_N ))" >> "$raw"
		log "barrier N=$BIG_N $mode rep $rep (fresh rdzvd, $BIG_SOURCES sources): $s s, $(( (c1 - c0) / BIG_N )) ns CPU per client, peak RSS +$(( hwm - base_hwm )) KiB"
	done
done
kill "${pid[big]}" 2>/dev/null || true

# ---- 4. memory with idle connections, on a fresh rdzvd ----
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
[ "$IDLE_N" -gt 0 ] || PROTOS_IDLE=
start_rdzvd idle relaxed "$tmp/idle.db"
sleep 0.5
base=$(rss_kib "${pid[idle]}")
printf 'rss\tidle\tnone\t0\t1\t%s\tnan\tnan\tnan\n' "$base" >> "$raw"
for proto in ${PROTOS_IDLE-tcpstore113 native}; do
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

log "done $(date -u '+%F %T UTC'), load: $(uptime)"

# ---- tables ----
"$python" - "$raw" "$REPS" "$DURATION" "$WARMUP" "$MIX" "$KEYS" "$KEY_SIZE" "$VALUE_SIZE" "$BIG_SOURCES" "$BARRIER_TIMEOUT" <<'EOF'
import math
import statistics
import sys

raw, reps, dur, warm, mix, keys, ksz, vsz, sources, btimeout = sys.argv[1:]
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
    if math.isinf(x):
        return f"> {btimeout} s"
    return "n/a" if math.isnan(x) else f"{x:,.{nd}f}"


def ratio(a, b):
    if math.isnan(a) or math.isnan(b) or b == 0 or math.isinf(a):
        return "n/a"
    if math.isinf(b):
        return f"> {float(btimeout) / a:,.0f}x"
    return f"{a / b:.2f}x"


NAMES = {"torch113": "torch 1.13 TCPStore", "torch2": "torch 2.13 TCPStore (libuv)"}
PEER = {"tcpstore113": ("torch113", "tcpstore113"), "tcpstore2": ("torch2", "tcpstore2"),
        "native": ("torch2", "tcpstore2")}

load = {}
for kind, srv, proto, k, rep, a, b, c, d in rows:
    if kind == "load":
        load.setdefault((srv, proto, int(k)), []).append((num(a), num(b), num(c), num(d)))

print(f"### Store ops ({reps} runs each, medians; {dur} s after {warm} s warmup; "
      f"mix {mix}; {keys} keys of {ksz} B, values {vsz} B)\n")
print("Ratios are against torch's server of the same dialect (native: torch 2.13).\n")
print("| server | protocol | K | ops/s | p50 µs | p99 µs | ops/s vs torch | p99 vs torch "
      "| server CPU µs/op | runs (ops/s) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
order = [("memory", "tcpstore113"), ("relaxed", "tcpstore113"), ("strict", "tcpstore113"),
         ("torch113", "tcpstore113"), ("memory", "tcpstore2"), ("relaxed", "tcpstore2"),
         ("strict", "tcpstore2"), ("torch2", "tcpstore2"), ("memory", "native"),
         ("relaxed", "native"), ("strict", "native")]
for k in sorted({key[2] for key in load}):
    for srv, proto in order:
        r = load.get((srv, proto, k))
        if not r:
            continue
        t = load.get(PEER[proto] + (k,), [])
        t_ops = med([x[0] for x in t])
        t_p99 = med([x[2] for x in t])
        ops = med([x[0] for x in r])
        p50 = med([x[1] for x in r])
        p99 = med([x[2] for x in r])
        cpu = med([x[3] for x in r])
        name = NAMES.get(srv, f"rdzvd {srv}")
        vs = "—" if srv in NAMES else ratio(ops, t_ops)
        vp = "—" if srv in NAMES else ratio(p99, t_p99)
        runs = " ".join(fmt(x[0]) for x in r)
        print(f"| {name} | {proto} | {k} | {fmt(ops)} | {fmt(p50, 1)} | {fmt(p99, 1)} "
              f"| {vs} | {vp} | {fmt(cpu, 2)} | {runs} |")


def bmed(xs):
    # A timeout is slower than any time, so a median that is one is a bound.
    xs = sorted(x for x in xs if not math.isnan(x))
    return xs[(len(xs) - 1) // 2] if xs else float("nan")


bar, bcpu = {}, {}
for kind, srv, proto, n, rep, a, mode, c, d in rows:
    if kind == "barrier":
        bar.setdefault((srv, proto, int(n), mode), []).append(num(a))
        if math.isfinite(num(a)):
            bcpu.setdefault((srv, proto, int(n), mode), []).append(num(c))
if bar:
    print("\n### Barrier, connects included (ADD, last arriver SETs, all WAIT; seconds from "
          "the first connect to the last release, median)\n")
    print("seq: clients connect one after another, each sending its ADD once connected "
          "(2.x: after VALIDATE + PING); burst: all connect at once, each sending its ADD "
          f"once connected. A server that took over {btimeout} s was not tried again.\n")
    print("| N | connect | rdzvd memory 1.13 | rdzvd relaxed 1.13 | torch 1.13 | rdzvd relaxed 2.x "
          "| torch 2.13 | torch 1.13 / rdzvd | torch 2.13 / rdzvd 2.x | runs |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    cols = [("memory", "tcpstore113"), ("relaxed", "tcpstore113"), ("torch113", "tcpstore113"),
            ("relaxed", "tcpstore2"), ("torch2", "tcpstore2")]
    for n, mode in sorted({(key[2], key[3]) for key in bar}):
        m = [bmed(bar.get((s, p, n, mode), [])) for s, p in cols]
        runs = "; ".join(f"{s}/{p[8:]} " + " ".join(fmt(x, 3) for x in bar.get((s, p, n, mode), []))
                         for s, p in cols)
        print(f"| {n} | {mode} | " + " | ".join(fmt(x, 3) for x in m)
              + f" | {ratio(m[2], m[1])} | {ratio(m[4], m[3])} | {runs} |")
    print("\nThe same barriers, the server's CPU time per client (µs, median; all its threads, "
          "kernel work in its context included, the clients' closes too). A shared machine "
          "moves this far less than the seconds above.\n")
    print("| N | connect | rdzvd memory 1.13 | rdzvd relaxed 1.13 | torch 1.13 | rdzvd relaxed 2.x "
          "| torch 2.13 | torch 1.13 / rdzvd | torch 2.13 / rdzvd 2.x |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, mode in sorted({(key[2], key[3]) for key in bar}):
        m = [med(bcpu.get((s, p, n, mode), [])) / 1000 for s, p in cols]
        print(f"| {n} | {mode} | " + " | ".join(fmt(x, 1) for x in m)
              + f" | {ratio(m[2], m[1])} | {ratio(m[4], m[3])} |")

big = [(int(n), mode, num(a), num(c), num(d)) for kind, srv, proto, n, rep, a, mode, c, d in rows
       if kind == "big"]
if big:
    print(f"\n### The biggest barrier here: a fresh rdzvd (relaxed), clients over {sources} "
          "loopback addresses, connects included\n")
    print("| N | connect | seconds (median) | rdzvd CPU µs / client | rdzvd peak RSS B / client "
          "| runs (s) |")
    print("| ---: | --- | ---: | ---: | ---: | --- |")
    for n, mode in sorted({(b[0], b[1]) for b in big}):
        r = [b for b in big if b[0] == n and b[1] == mode]
        print(f"| {n} | {mode} | {fmt(bmed([b[2] for b in r]), 3)} "
              f"| {fmt(med([b[3] for b in r]) / 1000, 1)} | {fmt(max(b[4] for b in r))} "
              f"| {' '.join(fmt(b[2], 3) for b in r)} |")
    cpu = med([b[3] for b in big]) / 1e9
    rss = max(b[4] for b in big)
    secs = max(bmed([b[2] for b in big if b[1] == mode]) for mode in {b[1] for b in big})
    n0 = big[0][0]
    print(f"\nOn paper, 100,000 clients: rdzvd CPU {cpu * 1e5:.1f} s at the measured "
          f"{cpu * 1e6:.1f} µs per client (kernel TCP work included), the slower mode's "
          f"time scaled linearly {secs * 1e5 / n0:.1f} s, peak RSS "
          f"{rss * 1e5 / 2**20:.0f} MiB above the idle daemon.")

rss = [(proto, int(n), num(a)) for kind, srv, proto, n, rep, a, b, c, d in rows if kind == "rss"]
if rss:
    print("\n### rdzvd memory (fresh rdzvd, relaxed, VmRSS)\n")
    print("| idle connections | protocol | VmRSS MiB |")
    print("| ---: | --- | ---: |")
    for proto, n, kib in rss:
        print(f"| {n} | {proto} | {fmt(kib / 1024, 1)} |")
EOF
