#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# rdzvd_ab.sh: two rdzvd binaries under the same store load, in turn, to
# see whether a change made rdzvd's store path slower or faster.
#
#   bench/rdzvd_ab.sh OLD_RDZVD NEW_RDZVD [BUILDDIR]
#
# Starts both binaries (durability DURABILITY, default memory, on a sqlite
# file each otherwise; plaintext, no HTTP listener)
# and runs BUILDDIR's bench/storeload in load mode against each with the
# parameters of store_vs_torch.sh, for every protocol in PROTOS and every
# K in CONNS.  REPS repetitions are interleaved, OLD first in odd ones and
# NEW first in even ones, so drifting machine load falls on both alike.
# Prints a markdown table (each side's median ops/s, p50, p99 and server
# CPU per op; NEW/OLD as a ratio of medians and as the median of each
# repetition's paired ratio) and then every sample.  Progress and the raw
# storeload lines go to stderr and $RESULTS_DIR (default: a temporary
# directory, kept).
#
# Environment: DURABILITY (memory), REPS (5), DURATION (3 s), WARMUP (1 s),
# CONNS (16),
# PROTOS ("tcpstore113 native"), MIX, KEYS, KEY_SIZE, VALUE_SIZE.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
	echo "usage: rdzvd_ab.sh OLD_RDZVD NEW_RDZVD [BUILDDIR]" >&2
	exit 2
fi
bin_old=$1
bin_new=$2
bench_build "${3:-}"

REPS=${REPS:-5}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
CONNS=${CONNS:-16}
PROTOS=${PROTOS:-"tcpstore113 native"}
MIX=${MIX:-set=40,get=40,add=15,wait=5}
KEYS=${KEYS:-1000}
KEY_SIZE=${KEY_SIZE:-16}
VALUE_SIZE=${VALUE_SIZE:-64}

for f in "$storeload" "$bin_old" "$bin_new"; do
	[ -x "$f" ] || { echo "rdzvd_ab: $f is not an executable" >&2; exit 1; }
done

bench_dirs rdzvd_ab

log() { echo "rdzvd_ab: $*" >&2; }


declare -A port pid
start() {
	local side=$1 bin=$2
	"$bin" -d --listen 127.0.0.1:0 --port-file "$tmp/$side.port" \
	    --http off --db "$tmp/$side.db" --durability "${DURABILITY:-memory}" \
	    --log-level warn \
	    2> "$results/$side.log" &
	pids+=($!)
	pid[$side]=$!
	port[$side]=$(wait_port "$tmp/$side.port")
}
start old "$bin_old"
start new "$bin_new"
log "old=$bin_old (port ${port[old]}) new=$bin_new (port ${port[new]})"
log "raw results in $results"


started=$(date +%s)
for k in $CONNS; do
	for rep in $(seq 1 "$REPS"); do
		if [ $((rep % 2)) = 1 ]; then order="old new"; else order="new old"; fi
		for proto in $PROTOS; do
			for side in $order; do
				c0=$(cpu_ns "${pid[$side]}")
				line=$("$storeload" --proto "$proto" \
				    --port "${port[$side]}" --conns "$k" \
				    --duration "$DURATION" --warmup "$WARMUP" \
				    --mix "$MIX" --keys "$KEYS" \
				    --key-size "$KEY_SIZE" \
				    --value-size "$VALUE_SIZE" \
				    2>>"$results/storeload.err") || line=failed
				c1=$(cpu_ns "${pid[$side]}")
				echo "$side $line" >> "$results/storeload.out"
				if [ "$line" = failed ]; then
					log "K=$k rep $rep $proto $side: FAILED"
					printf '%s\t%s\t%s\t%s\tnan\tnan\tnan\tnan\n' \
					    "$proto" "$k" "$rep" "$side" >> "$raw"
					continue
				fi
				cpu=$(cpu_per_op $((c1 - c0)) "$line")
				printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$proto" "$k" \
				    "$rep" "$side" "$(field ops_per_s "$line")" \
				    "$(field p50_us "$line")" "$(field p99_us "$line")" \
				    "$cpu" >> "$raw"
				log "K=$k rep $rep $proto $side: $(field ops_per_s "$line") ops/s p50 $(field p50_us "$line") p99 $(field p99_us "$line") us, server $cpu us CPU/op"
			done
		done
	done
done
log "took $(( $(date +%s) - started )) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# Tables from raw.tsv: proto K rep side ops p50 p99 cpu.
awk -F'\t' -v reps="$REPS" "$AWK_TABLES"'
{
	g = $1 "\t" $2
	if (!(g in seen)) { seen[g] = 1; order[++ng] = g }
	add(ops, g "\t" $4, $5); add(p50, g "\t" $4, $6)
	add(p99, g "\t" $4, $7); add(cpu, g "\t" $4, $8)
	val[g "\t" $3 "\t" $4] = $5
	cval[g "\t" $3 "\t" $4] = $8
	row[++nr] = $0
}
END {
	printf "| protocol | K | OLD ops/s | NEW ops/s | NEW/OLD (medians) | NEW/OLD (paired, median) | OLD p50 µs | NEW p50 µs | OLD p99 µs | NEW p99 µs | OLD CPU µs/op | NEW CPU µs/op | NEW/OLD CPU (paired) |\n"
	printf "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
	for (i = 1; i <= ng; i++) {
		g = order[i]; split(g, gk, "\t")
		pr = paired(val, g, reps, "old", "new")
		cr = paired(cval, g, reps, "old", "new")
		mo = median(ops[g "\told"]); mn = median(ops[g "\tnew"])
		printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		    gk[1], gk[2], thou(mo), thou(mn),
		    (mo != "nan" && mn != "nan" && mo > 0) ? sprintf("%.3fx", mn / mo) : "—",
		    pr != "" ? sprintf("%.3fx", median(pr)) : "—",
		    fmt(median(p50[g "\told"]), 1), fmt(median(p50[g "\tnew"]), 1),
		    fmt(median(p99[g "\told"]), 1), fmt(median(p99[g "\tnew"]), 1),
		    fmt(median(cpu[g "\told"]), 2), fmt(median(cpu[g "\tnew"]), 2),
		    cr != "" ? sprintf("%.3fx", median(cr)) : "—"
	}
	printf "\nEvery sample, in the order run:\n\n"
	printf "| protocol | K | rep | side | ops/s | p50 µs | p99 µs | server CPU µs/op |\n"
	printf "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n"
	for (i = 1; i <= nr; i++) {
		split(row[i], f, "\t")
		printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2],
		    f[3], toupper(f[4]), thou(f[5]), fmt(f[6], 1), fmt(f[7], 1),
		    fmt(f[8], 2)
	}
}' "$raw"
