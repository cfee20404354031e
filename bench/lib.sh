# SPDX-License-Identifier: Apache-2.0
# bench/lib.sh: helpers the benchmark scripts source (bash).

# wait_port FILE [SECONDS]: waits up to SECONDS (10) for FILE to hold a port
# number (a bare number, or a "port N" line) and prints it.  Importing torch
# on a loaded machine can take longer than 10 s.
wait_port() {
	local file=$1 i
	for i in $(seq 1 $(( ${2:-10} * 20 ))); do
		if [ -s "$file" ]; then
			awk '/^[0-9]+$/ { print; exit } /^port [0-9]+$/ { print $2; exit }' "$file"
			return 0
		fi
		sleep 0.05
	done
	echo "${0##*/}: no port in $file" >&2
	return 1
}

# bench_build [DIR]: sets build, the build directory (DIR, else
# $RDZV_TOP_BUILDDIR, else the current directory), and rdzvd, storeload and
# tlsload, the programs built there.
bench_build() {
	build=${1:-${RDZV_TOP_BUILDDIR:-$(pwd)}}
	rdzvd=$build/rdzvd/rdzvd
	storeload=$build/bench/storeload
	tlsload=$build/bench/tlsload
}

# bench_dirs NAME: a temporary directory $tmp (/tmp/NAME.XXXXXX); the
# results directory $results ($RESULTS_DIR, else $tmp) holding an empty
# $raw (raw.tsv); an empty array pids and an EXIT trap, bench_kill, that
# ends every process in it (a script that needs more at exit traps its own
# function, which calls bench_kill).
bench_dirs() {
	tmp=$(mktemp -d "/tmp/$1.XXXXXX")
	results=${RESULTS_DIR:-$tmp}
	mkdir -p "$results"
	raw=$results/raw.tsv
	: > "$raw"
	pids=()
	trap bench_kill EXIT
}
bench_kill() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}

# CPU time all threads of process PID have used, in ns (/proc/PID/stat
# counts 10 ms ticks, too coarse for one connection's handshake).
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f", s }'; }

# The value of KEY in a "k1=v1 k2=v2 ..." line.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< " $2"; }

# cpu_per_op NS LINE: NS ns of a server's CPU time over the total_ops of
# load generator output LINE, in us per op (0 when LINE counts none).
cpu_per_op() {
	awk -v d="$1" -v n="$(field total_ops "$2")" \
	    'BEGIN { printf "%.2f", (n > 0 ? d / 1e3 / n : 0) }'
}

# The python whose torch is the peer of a side-by-side benchmark: TORCH_PYTHON
# if set (torch 1.13 is /usr/bin/python3), else torch 2.13's (TORCH2_PYTHON,
# or where scripts/deps.sh puts it).
peer_python() {
	echo "${TORCH_PYTHON:-${TORCH2_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/rdzv/torch-2.13/bin/python}}"
}

# The awk functions of the benchmarks' tables, to put in front of a program
# (awk "$AWK_TABLES"'...'): median(LIST) of a space-separated list ("nan"
# when empty); add(ARR, KEY, V) appends V to ARR[KEY] unless it is "nan" or
# empty; fmt(X, D) X with D decimals and thou(X) X with thousands
# separators, both "—" for "nan" or empty; paired(ARR, G, REPS, A, B) the
# ratios ARR[G "\t" r "\t" B] / ARR[G "\t" r "\t" A] of the repetitions r
# (1..REPS) where both are numbers, space-separated.
AWK_TABLES='
function median(list,    a, n, i, j, t) {
	n = split(list, a, " ")
	if (n == 0)
		return "nan"
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) {
			t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
		}
	return (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2)
}
function add(arr, key, v) {
	if (v == "nan" || v == "")
		return
	arr[key] = (key in arr) ? arr[key] " " v : v
}
function fmt(x, d) {
	return (x == "nan" || x == "") ? "—" : sprintf("%." d "f", x)
}
function thou(x,    s, r) {
	if (x == "nan" || x == "")
		return "—"
	s = sprintf("%.0f", x); r = ""
	while (length(s) > 3) {
		r = "," substr(s, length(s) - 2) r
		s = substr(s, 1, length(s) - 3)
	}
	return s r
}
function paired(arr, g, reps, a, b,    r, x, y, out) {
	out = ""
	for (r = 1; r <= reps; r++) {
		x = arr[g "\t" r "\t" a]; y = arr[g "\t" r "\t" b]
		if (x != "" && x != "nan" && y != "" && y != "nan" && x > 0)
			out = out " " y / x
	}
	return out
}
'
