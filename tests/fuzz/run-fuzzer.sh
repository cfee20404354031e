#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# run-fuzzer.sh TARGET SECONDS [LIBFUZZER-ARGS...]
#
# Runs the libFuzzer target TARGET (fuzz_tcps113, fuzz_tcps2, fuzz_native)
# for SECONDS over a temporary copy of tests/fuzz/corpus/TARGET, so that
# a run never writes into the source tree.  Exits 0 on a clean run and
# non-zero on a crash, leak, timeout or out-of-memory; the inputs that
# caused it are kept in BUILDDIR/tests/fuzz/TARGET-crashes/.  With
# RDZV_FUZZ_KEEP_CORPUS=DIR the grown corpus is copied to DIR at the end.
#
# The binary is looked up under RDZV_TOP_BUILDDIR (set by make check), else
# the current directory (run it from a build configured with
# CC=clang ./configure --enable-fuzzing).
set -u

if [ $# -lt 2 ]; then
	echo "usage: $0 TARGET SECONDS [LIBFUZZER-ARGS...]" >&2
	exit 2
fi
target=$1
seconds=$2
shift 2

srcdir=${RDZV_TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
builddir=${RDZV_TOP_BUILDDIR:-$(pwd)}
bin=$builddir/tests/fuzz/$target
seeds=$srcdir/tests/fuzz/corpus/$target

if [ ! -x "$bin" ]; then
	echo "$0: no $bin; configure with CC=clang --enable-fuzzing" >&2
	exit 99		# a hard error to automake's test driver
fi
if [ ! -d "$seeds" ]; then
	echo "$0: no seed corpus $seeds" >&2
	exit 99
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-$target.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus" "$work/artifacts" || exit 99
cp "$seeds"/* "$work/corpus/" || exit 99

echo "$target: $seconds s over $(ls "$work/corpus" | wc -l) seeds"
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$@" "$work/corpus"
rc=$?

if [ -n "${RDZV_FUZZ_KEEP_CORPUS:-}" ]; then
	mkdir -p "$RDZV_FUZZ_KEEP_CORPUS" &&
	    cp "$work/corpus"/* "$RDZV_FUZZ_KEEP_CORPUS/"
fi
if [ $rc -ne 0 ] || [ -n "$(ls "$work/artifacts")" ]; then
	keep=$builddir/tests/fuzz/$target-crashes
	mkdir -p "$keep" && cp "$work/artifacts"/* "$keep/" 2>/dev/null
	echo "$target: FAILED (exit $rc); inputs kept in $keep" >&2
	# Not libFuzzer's own 77, which automake would read as a skip.
	exit 1
fi
echo "$target: clean"
exit 0
