#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# gpu_check_script.sh: scripts/gpu-check.sh, the one command for a GPU
# machine, kept runnable where there is none: with --cpu-only its CPU-side
# checks PASS and every GPU check SKIPs with a reason; with --fake-gpu its
# GPU checks run end to end against the stand-in libcudart+libnccl
# (tests/integ/fakegpu.c) and PASS, or SKIP where that cannot apply (torch,
# two GPUs).  Proves the script, its programs and its parsing work; proves
# nothing about a GPU.
set -euo pipefail

B=${RDZV_TOP_BUILDDIR:?run from make check}
S=${RDZV_TOP_SRCDIR:?run from make check}
O=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-gpucheck-XXXXXX")
trap 'rm -rf "$O"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for mode in --cpu-only --fake-gpu; do
	rc=0
	OUT=$O/$mode GPUCHECK_BUDGET_S=200 bash "$S/scripts/gpu-check.sh" \
	    "$mode" "$B" >"$O/out" 2>&1 || rc=$?
	sed 's/^/  /' "$O/out"
	[ $rc -eq 0 ] || fail "gpu-check.sh $mode exited $rc"
	grep -q ' FAIL' "$O/out" && fail "gpu-check.sh $mode: a check failed"
	for c in build starts-without-gpu-libs; do
		grep -q "^CHECK $c PASS" "$O/out" || fail "$mode: $c did not PASS"
	done
	n=$(grep -c '^CHECK ' "$O/out")
	[ "$n" -ge 12 ] || fail "$mode: only $n checks"
	grep -q '^CHECK [a-z_-]* SKIP *$' "$O/out" && fail "$mode: a SKIP without its reason"
	[ -s "$O/$mode/gpu-check/summary.txt" ] || fail "$mode: no summary under \$OUT"
	if [ -e "$B/tests/integ/.libs/libfakegpu.so" ]; then
		grep -q '^CHECK fake-gpu-logic PASS' "$O/out" || fail "$mode: fake-gpu-logic"
	fi
done
grep -q '^CHECK nccl-collectives SKIP --cpu-only' "$O/--cpu-only/gpu-check/summary.txt" ||
    fail "--cpu-only ran a GPU check"
if [ -e "$B/tests/integ/.libs/libfakegpu.so" ]; then
	for c in nccl-found nccl-bootstrap nccl-collectives nccl-overhead nccl-abort-reinit; do
		grep -q "^CHECK $c PASS" "$O/--fake-gpu/gpu-check/summary.txt" ||
		    fail "--fake-gpu: $c did not PASS"
	done
	# The example and the agent: one worker per (stand-in) GPU.
	if [ -x "$B/examples/ddp_mlp" ]; then
		for c in ddp_mlp-nccl agent-gpu; do
			grep -q "^CHECK $c PASS" "$O/--fake-gpu/gpu-check/summary.txt" ||
			    fail "--fake-gpu: $c did not PASS"
		done
	fi
fi
echo "ok gpu-check.sh --cpu-only and --fake-gpu"
