#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# ddp_vs_torch.sh: one epoch of examples/ddp_mlp beside the same training in
# torch DDP over gloo (bench/torch_ddp_mlp.py), in one run: torch 2.13 by
# default, 1.13 with TORCH_PYTHON=/usr/bin/python3.
#
#   bench/ddp_vs_torch.sh [BUILDDIR]
#
# Same data (Fashion-MNIST, all 60000 training images, test on 10000), same
# model (784 -> HIDDEN ReLU -> 10), loss, plain SGD at LR, BATCH per rank
# and world size.  Both run under torchrun (--no_python for ddp_mlp), one
# process per rank with one math thread each, as torchrun sets
# OMP_NUM_THREADS=1.  For each world size in WORLDS, REPS repetitions
# alternate between the two so that machine noise falls on both alike.
# Both programs time their own training epoch (data already in memory, the
# test pass excluded) and print it; the table shows medians, the speedup,
# loss and test accuracy, and torchrun's wall time for the whole job
# (start-up, data loading, epoch, test, exit); the targets: ddp_mlp's
# samples/s at least 2x torch's, its test accuracy within 0.5 points.
#
# Environment: WORLDS ("2 4"), REPS (3), EPOCHS (1), BATCH (64), HIDDEN
# (128), LR (0.1), TORCH_PYTHON (the peer's python: default TORCH2_PYTHON,
# else ~/.cache/rdzv/torch-2.13/bin/python), RESULTS_DIR (kept logs).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-${RDZV_TOP_BUILDDIR:-$(pwd)}}
ddp=$build/examples/ddp_mlp
. "$here/lib.sh"
python=$(peer_python)
# torchrun 2.5+ makes the workers clients of a store its agent hosts, in
# the 2.x dialect (a VALIDATE handshake first), which librdzvworker's store
# client does not speak yet: it would wait there forever.  With the c10d
# rendezvous and this variable, worker rank 0 hosts the workers' store, as
# under torchrun 1.13, on both sides alike (the static rendezvous, which
# --master_port alone picks, ignores the variable); the timed epoch does
# not include it.
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
WORLDS=${WORLDS:-"2 4"}
REPS=${REPS:-3}
EPOCHS=${EPOCHS:-1}
BATCH=${BATCH:-64}
HIDDEN=${HIDDEN:-128}
LR=${LR:-0.1}

[ -x "$ddp" ] || { echo "ddp_vs_torch: $ddp not built (pass the build directory)" >&2; exit 1; }
results=${RESULTS_DIR:-$(mktemp -d /tmp/ddp_vs_torch.XXXXXX)}
mkdir -p "$results"
echo "ddp_vs_torch: logs in $results" >&2

free_port() {
	"$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run IMPL WORLD REP: one job under torchrun; its log in $results.  A job
# whose store lost the race for its port (torchrun picks MASTER_PORT free,
# then lets it go; another process may take it first) runs again, twice at
# most: that is no property of either program.
run() {
	local impl=$1 w=$2 rep=$3 log try
	log=$results/$impl-w$w-r$rep.log
	for try in 1 2 3; do
		run1 "$impl" "$w" "$log" && return 0
		grep -q "EADDRINUSE\|[Aa]ddress already in use" "$log" || break
		echo "  $impl w=$w rep $rep: a port was taken, again" >&2
	done
	echo "ddp_vs_torch: $impl world $w failed, see $log" >&2
	tail -20 "$log" >&2
	exit 1
}

# run1 IMPL WORLD LOG: one attempt; fails if no epoch line came.
run1() {
	local impl=$1 w=$2 log=$3 t0 t1
	local common=(--epochs "$EPOCHS" --batch "$BATCH" --hidden "$HIDDEN" --lr "$LR")
	t0=$(date +%s.%N)
	if [ "$impl" = ddp_mlp ]; then
		"$python" -m torch.distributed.run --nproc_per_node "$w" \
		    --rdzv_backend c10d \
		    --rdzv_endpoint "127.0.0.1:$(free_port)" --redirects 9:1 --tee 9:1 \
		    --no_python "$ddp" "${common[@]}" >"$log" 2>&1 || true
	else
		"$python" -m torch.distributed.run --nproc_per_node "$w" \
		    --rdzv_backend c10d \
		    --rdzv_endpoint "127.0.0.1:$(free_port)" --redirects 9:1 --tee 9:1 \
		    "$here/torch_ddp_mlp.py" "${common[@]}" --threads 1 >"$log" 2>&1 ||
		    true
	fi
	t1=$(date +%s.%N)
	echo "wall $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" >>"$log"
	# The last epoch line (torchrun may prefix lines with the rank).
	grep -Eo "epoch $EPOCHS loss .*" "$log" | tail -1 >"$log.epoch"
	[ -s "$log.epoch" ] || return 1
	echo "  $impl w=$w rep $rep: $(cat "$log.epoch") wall $(tail -1 "$log" | cut -d' ' -f2)" >&2
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) { v = $(i + 1); sub(/s$/, "", v); print v } }'; }

for w in $WORLDS; do
	for rep in $(seq 1 "$REPS"); do
		run ddp_mlp "$w" "$rep"
		run torch "$w" "$rep"
	done
done

echo "torch $("$python" -c 'import torch; print(torch.__version__)') ($python); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| world | batch/rank | program | epoch s | samples/s | loss | test_acc | job wall s | samples/s vs torch | runs (samples/s) | target |"
echo "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
for w in $WORLDS; do
	declare -A ep sps loss acc wall runs
	for impl in ddp_mlp torch; do
		e=$(cat "$results/$impl-w$w"-r*.log.epoch)
		ep[$impl]=$(echo "$e" | field time | median)
		sps[$impl]=$(echo "$e" | field samples/s | median)
		loss[$impl]=$(echo "$e" | field loss | median)
		acc[$impl]=$(echo "$e" | field test_acc | median)
		runs[$impl]=$(echo "$e" | field samples/s | tr '\n' ' ')
		wall[$impl]=$(for f in "$results/$impl-w$w"-r*.log; do tail -1 "$f" | cut -d' ' -f2; done | median)
	done
	for impl in ddp_mlp torch; do
		ratio=$(awk -v a="${sps[$impl]}" -v b="${sps[torch]}" 'BEGIN { printf "%.2fx", a / b }')
		target=-
		if [ "$impl" = ddp_mlp ]; then
			target=$(awk -v a="${sps[$impl]}" -v b="${sps[torch]}" \
			    -v x="${acc[$impl]}" -v y="${acc[torch]}" 'BEGIN {
				d = x - y; if (d < 0) d = -d
				printf "2x %s, acc %s", (a >= 2 * b) ? "met" : "MISSED",
				    (d <= 0.005) ? "met" : "MISSED" }')
		fi
		printf '| %d | %d | %s | %.2f | %.0f | %.4f | %.4f | %.1f | %s | %s| %s |\n' \
		    "$w" "$BATCH" "$impl" "${ep[$impl]}" "${sps[$impl]}" "${loss[$impl]}" \
		    "${acc[$impl]}" "${wall[$impl]}" "$ratio" "${runs[$impl]}" "$target"
	done
	unset ep sps loss acc wall runs
done
