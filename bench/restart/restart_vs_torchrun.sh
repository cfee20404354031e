#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# restart_vs_torchrun.sh: recovery after a worker failure, rdzv-agent beside
# torchrun (torch 2.13's by default, 1.13's with TORCH_PYTHON=/usr/bin/python3),
# side by side in one run, on 127.0.0.1.
#
#   bench/restart/restart_vs_torchrun.sh [BUILDDIR]
#
# Two nodes x two workers: two launchers on this machine per job, the same
# worker program under both (torchrun: c10d backend, store hosted by one of
# its agents, torch's default; rdzv-agent: one rdzvd with its defaults).
# Exact command lines: the header of restart.py.  Measures, REPS times each
# (jobs alternate launchers, up to max_restarts = 3 failures per job):
#   (a) a C worker (startmark) that only records its start: SIGKILL of one
#       worker -> the last of the 4 new ranks' start marks (CLOCK_MONOTONIC);
#       the same for a worker that marks its own exit then _exit(1)s;
#   (b) a torch gloo worker (gloo_ready.py): SIGKILL -> all 4 process groups
#       ready (init_process_group + a first all_reduce);
#   worker exit -> the agent noticing: the exiting worker's own timestamp
#       -> the SIGTERM mark of the other worker on its node (and for
#       rdzv-agent its "failed" log line);
#   the agent's VmRSS with 2 workers running;
#   1000 simulated agents joining one job -> all 1000 ROUND pushes
#       (join1000.py, a fresh rdzvd each time).
# (a) also runs rdzv-agent against rdzvd --durability strict and memory.
# Prints the date, machine and load average, then markdown tables; every
# sample is in $RESULTS_DIR/events.tsv (default: a temporary directory,
# kept and named at the end).
#
# Environment: REPS (5), ONLY (a,b,join), VARIANTS (strict,memory; empty
# for none), SETTLE (0.5 s before each failure), TORCH_PYTHON (the peer's
# python: default TORCH2_PYTHON, else ~/.cache/rdzv/torch-2.13/bin/python).
# torchrun 2.5+ with its defaults does not bring a gloo job (b) back after
# a SIGKILL: its workers share the agent's store and separate restarts by
# TORCHELASTIC_RESTART_COUNT, which only the failed node's agent raises, so
# the other node's workers read the dead round's addresses (pytorch/pytorch
# #135712).  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, passed through to both
# launchers, is torch's way out: rank 0 then hosts the workers' store.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-${RDZV_TOP_BUILDDIR:-$(pwd)}}" && pwd)
. "$here/../lib.sh"
python=$(peer_python)
REPS=${REPS:-5}
ONLY=${ONLY:-a,b,join}
VARIANTS=${VARIANTS-strict,memory}
SETTLE=${SETTLE:-0.5}

for f in "$build/agent/rdzv-agent" "$build/rdzvd/rdzvd" \
    "$build/bench/restart/startmark"; do
	[ -x "$f" ] || {
		echo "restart_vs_torchrun: $f not built (pass the build" \
		    "directory)" >&2
		exit 1
	}
done
tv=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) ||
	{ echo "restart_vs_torchrun: no torch in $python" >&2; exit 1; }

# join1000 holds 1000 sockets, rdzvd as many.
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt 1100 ]; then
	echo "restart_vs_torchrun: need 1100 descriptors, ulimit -Hn is $hard" >&2
	exit 1
fi
ulimit -n "$hard"

tmp=$(mktemp -d /tmp/restart_vs_torchrun.XXXXXX)
results=${RESULTS_DIR:-$tmp}
mkdir -p "$results"
driver=
cleanup() {
	local sid
	if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
		kill -TERM "$driver" 2>/dev/null || true
		wait "$driver" 2>/dev/null || true
	fi
	# Should the driver have died without its own clean-up: every
	# launcher and rdzvd it started leads a session (and process group)
	# of its own; rdzv-agent's workers die with their agent.
	if [ -f "$tmp/sessions" ]; then
		while read -r sid; do
			if grep -qF "$tmp" "/proc/$sid/cmdline" 2>/dev/null; then
				kill -KILL -- "-$sid" 2>/dev/null || true
			fi
		done < "$tmp/sessions"
	fi
	rm -f "$tmp"/*/rdzvd.db "$tmp"/*/rdzvd.db-wal "$tmp"/*/rdzvd.db-shm
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

load() { cut -d' ' -f1-3 /proc/loadavg; }
load0=$(load)
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	mem=$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
	echo "machine: $(nproc) cores, $mem, $(uname -srm)"
	echo "torch: $tv ($python); rdzv build: $build"
	echo "load average before: $load0"
} | tee "$results/header.txt" >&2

t0=$(date +%s)
"$python" "$here/restart.py" --build "$build" --reps "$REPS" --only "$ONLY" \
    --variants "$VARIANTS" --settle "$SETTLE" --results "$results" \
    --peer "torchrun $tv" \
    --tmp "$tmp" > "$results/report.md" &
driver=$!
wait "$driver"
driver=
t1=$(date +%s)

echo "load average after: $(load); run took $((t1 - t0)) s" |
	tee -a "$results/header.txt" >&2
echo
cat "$results/header.txt"
echo
cat "$results/report.md"
echo "restart_vs_torchrun: samples in $results/events.tsv" >&2
