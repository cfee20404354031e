#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tls_vs_plain.sh: what TLS costs rdzvd's native clients, per round trip
# and per connection, on 127.0.0.1.
#
#   bench/tls_vs_plain.sh [BUILDDIR]
#
# Makes a test CA and a server certificate for 127.0.0.1 with the test
# suite's make_tls_certs (tests/lib/rdzvtest.py, the openssl CLI; needs
# /usr/bin/python3 or $TEST_PYTHON), starts BUILDDIR's
# rdzvd with --tls optional (durability memory) so one server takes both
# kinds of connection, and runs bench/tlsload against it:
#   1. load: P processes, one connection each, SET/GET round trips of
#      VALUE bytes, plaintext and TLS in turn, for every P in PROCS and
#      every size in SIZES, REPS repetitions interleaved (plaintext first
#      in odd ones, TLS first in even ones);
#   2. connect: CONNECTS connections opened one after another, plaintext
#      (connect + native preamble) and TLS (CA bundle load + handshake +
#      preamble) in turn, REPS times.
# Prints markdown tables (medians, TLS/plain ratios, every sample) on
# stdout; progress and raw tlsload lines go to stderr and $RESULTS_DIR
# (default: a temporary directory, kept).  Checks rdzvd's
# rdzvd_tls_connections_total against the TLS connections it opened.
#
# Environment: REPS (5), PROCS ("1 16"), SIZES ("64 1048576"),
# DURATION (3 s), WARMUP (1 s), CONNECTS (50).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bench_build "${1:-}"

REPS=${REPS:-5}
PROCS=${PROCS:-"1 16"}
SIZES=${SIZES:-"64 1048576"}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
CONNECTS=${CONNECTS:-50}

for f in "$tlsload" "$rdzvd"; do
	[ -x "$f" ] || { echo "tls_vs_plain: $f not built (pass the build directory)" >&2; exit 1; }
done
command -v openssl > /dev/null || { echo "tls_vs_plain: no openssl command" >&2; exit 1; }

bench_dirs tls_vs_plain

log() { echo "tls_vs_plain: $*" >&2; }

# ---- certificates: the test suite's (a CA, and a server certificate it
# signed for 127.0.0.1), made by tests/lib/rdzvtest.py with the openssl CLI
PYTHONPATH="$here/../tests/lib" "${TEST_PYTHON:-/usr/bin/python3}" -c \
    'import sys, rdzvtest; rdzvtest.make_tls_certs(sys.argv[1])' "$tmp" \
    > "$results/openssl.log" 2>&1 || { cat "$results/openssl.log" >&2; exit 1; }
ca=$tmp/ca.pem

"$rdzvd" -d --listen 127.0.0.1:0 --port-file "$tmp/port" \
    --http 127.0.0.1:0 --http-port-file "$tmp/http.port" \
    --db :memory: --durability memory --log-level warn \
    --tls-cert "$tmp/server.pem" --tls-key "$tmp/server.key" --tls optional \
    2> "$results/rdzvd.log" &
rpid=$!
pids+=("$rpid")
ep=127.0.0.1:$(wait_port "$tmp/port")
hport=$(wait_port "$tmp/http.port")
log "rdzvd $rdzvd at $ep (TLS optional); raw results in $results"

tls_total() {
	exec 3<>"/dev/tcp/127.0.0.1/$hport"
	printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
	awk '$1 == "rdzvd_tls_connections_total" { print $2 }' <&3
	exec 3<&-
}
tls_opened=0
tls0=$(tls_total)

# run_tlsload MODE N ARGS...: one tlsload run against rdzvd with ARGS (and
# the CA in MODE tls); sets line (its output, or "failed") and used (ns of
# rdzvd's CPU time over the run); N TLS connections (MODE tls) are added
# to tls_opened.
run_tlsload() {
	local mode=$1 n=$2 c0 args=()

	shift 2
	[ "$mode" = tls ] && args=(--tls-ca "$ca")
	c0=$(cpu_ns "$rpid")
	line=$("$tlsload" --endpoint "$ep" "${args[@]}" "$@" \
	    2>>"$results/tlsload.err") || line=failed
	used=$(( $(cpu_ns "$rpid") - c0 ))
	echo "$line" >> "$results/tlsload.out"
	if [ "$mode" = tls ]; then
		tls_opened=$((tls_opened + n))
	fi
}

# ---- 1. load ----
started=$(date +%s)
for p in $PROCS; do
	for size in $SIZES; do
		for rep in $(seq 1 "$REPS"); do
			if [ $((rep % 2)) = 1 ]; then order="plain tls"; else order="tls plain"; fi
			for mode in $order; do
				run_tlsload "$mode" "$p" --procs "$p" \
				    --value-size "$size" --duration "$DURATION" \
				    --warmup "$WARMUP"
				if [ "$line" = failed ]; then
					log "P=$p size=$size rep $rep $mode: FAILED"
					printf 'load\t%s\t%s\t%s\t%s\tnan\tnan\tnan\tnan\tnan\n' \
					    "$p" "$size" "$rep" "$mode" >> "$raw"
					continue
				fi
				cpu=$(cpu_per_op "$used" "$line")
				printf 'load\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$p" \
				    "$size" "$rep" "$mode" "$(field ops_per_s "$line")" \
				    "$(field p50_us "$line")" "$(field p99_us "$line")" \
				    "$(field mb_per_s "$line")" "$cpu" >> "$raw"
				log "P=$p size=$size rep $rep $mode: $(field ops_per_s "$line") ops/s p50 $(field p50_us "$line") p99 $(field p99_us "$line") us, server $cpu us CPU/op"
			done
		done
	done
done
log "load phase took $(( $(date +%s) - started )) s"

# ---- 2. connect time ----
for rep in $(seq 1 "$REPS"); do
	if [ $((rep % 2)) = 1 ]; then order="plain tls"; else order="tls plain"; fi
	for mode in $order; do
		run_tlsload "$mode" "$CONNECTS" --connects "$CONNECTS"
		# rdzvd's CPU per connection: accept, handshake, preamble,
		# one PING, close.
		cpu=$(awk -v d="$used" -v n="$CONNECTS" \
		    'BEGIN { printf "%.1f", d / 1e3 / n }')
		printf 'connect\t1\t0\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" \
		    "$mode" "$(field connect_p50_us "$line")" \
		    "$(field connect_p90_us "$line")" \
		    "$(field connect_min_us "$line")" \
		    "$(field ca_load_p50_us "$line")" \
		    "$(field connect_cpu_p50_us "$line")" "$cpu" >> "$raw"
		log "connect rep $rep $mode: p50 $(field connect_p50_us "$line") us (CA load $(field ca_load_p50_us "$line"), client CPU $(field connect_cpu_p50_us "$line"), server CPU $cpu)"
	done
done
tls1=$(tls_total)
log "TLS handshakes counted by rdzvd: $((tls1 - tls0)), TLS connections opened: $tls_opened; load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ $((tls1 - tls0)) -lt "$tls_opened" ]; then
	log "FAILED: rdzvd counted fewer TLS handshakes than tlsload made"
	exit 1
fi

# raw.tsv: load P size rep mode ops p50 p99 mbps cpu
#          connect 1 0 rep mode p50 p90 min ca_load client_cpu server_cpu
awk -F'\t' -v reps="$REPS" "$AWK_TABLES"'
function ratio(a, b) {
	return (a == "nan" || b == "nan" || b + 0 == 0) ? "—" : sprintf("%.2fx", a / b)
}
function size(s) {
	return s >= 1048576 && s % 1048576 == 0 ? s / 1048576 " MiB" : \
	    s >= 1024 && s % 1024 == 0 ? s / 1024 " KiB" : s " B"
}
$1 == "load" {
	g = $2 "\t" $3
	if (!(g in seen)) { seen[g] = 1; order[++ng] = g }
	k = g "\t" $5
	add(ops, k, $6); add(p50, k, $7); add(p99, k, $8); add(mb, k, $9)
	add(cpu, k, $10)
	v[g "\t" $4 "\t" $5] = $6; l[g "\t" $4 "\t" $5] = $7
	row[++nr] = $0
}
$1 == "connect" {
	add(c50, $5, $6); add(c90, $5, $7); add(cmin, $5, $8); add(cload, $5, $9)
	add(ccpu, $5, $10); add(scpu, $5, $11)
	csmp[$5] = csmp[$5] " " fmt($6, 0)
}
END {
	printf "| P | value | plain ops/s | TLS ops/s | TLS/plain ops/s | (paired) | plain p50 µs | TLS p50 µs | TLS/plain p50 | (paired) | plain p99 µs | TLS p99 µs | plain MB/s | TLS MB/s | plain CPU µs/op | TLS CPU µs/op |\n"
	printf "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
	for (i = 1; i <= ng; i++) {
		g = order[i]; split(g, gk, "\t")
		po = paired(v, g, reps, "plain", "tls")
		pl = paired(l, g, reps, "plain", "tls")
		printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		    gk[1], size(gk[2]), thou(median(ops[g "\tplain"])),
		    thou(median(ops[g "\ttls"])),
		    ratio(median(ops[g "\ttls"]), median(ops[g "\tplain"])),
		    po != "" ? sprintf("%.2fx", median(po)) : "—",
		    fmt(median(p50[g "\tplain"]), 1), fmt(median(p50[g "\ttls"]), 1),
		    ratio(median(p50[g "\ttls"]), median(p50[g "\tplain"])),
		    pl != "" ? sprintf("%.2fx", median(pl)) : "—",
		    fmt(median(p99[g "\tplain"]), 1), fmt(median(p99[g "\ttls"]), 1),
		    fmt(median(mb[g "\tplain"]), 1), fmt(median(mb[g "\ttls"]), 1),
		    fmt(median(cpu[g "\tplain"]), 2), fmt(median(cpu[g "\ttls"]), 2)
	}
	printf "\nEvery load sample, in the order run:\n\n"
	printf "| P | value | rep | mode | ops/s | p50 µs | p99 µs | MB/s | server CPU µs/op |\n"
	printf "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n"
	for (i = 1; i <= nr; i++) {
		split(row[i], f, "\t")
		printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[2],
		    size(f[3]), f[4], f[5] == "tls" ? "TLS" : "plain", thou(f[6]),
		    fmt(f[7], 1), fmt(f[8], 1), fmt(f[9], 1), fmt(f[10], 2)
	}
	printf "\nConnect time, one connection at a time (medians of the %d runs'\'' own figures):\n\n", reps
	printf "| | connect p50 µs | p90 µs | min µs | TLS/plain p50 | TLS − plain p50 µs | CA bundle load alone µs | client CPU per connect µs | rdzvd CPU per connection µs | each run'\''s p50 µs |\n"
	printf "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n"
	a = median(c50["plain"]); b = median(c50["tls"])
	printf "| plain (connect + preamble) | %s | %s | %s | — | — | — | %s | %s |%s |\n",
	    fmt(a, 1), fmt(median(c90["plain"]), 1), fmt(median(cmin["plain"]), 1),
	    fmt(median(ccpu["plain"]), 1), fmt(median(scpu["plain"]), 1), csmp["plain"]
	printf "| TLS (CA load + handshake + preamble) | %s | %s | %s | %s | %s | %s | %s | %s |%s |\n",
	    fmt(b, 1), fmt(median(c90["tls"]), 1), fmt(median(cmin["tls"]), 1),
	    ratio(b, a), (a == "nan" || b == "nan") ? "—" : sprintf("%.0f", b - a),
	    fmt(median(cload["tls"]), 1), fmt(median(ccpu["tls"]), 1),
	    fmt(median(scpu["tls"]), 1), csmp["tls"]
}' "$raw"
