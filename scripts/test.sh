#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test.sh: installs what rdzv needs, builds it and runs the whole test
# suite: unit tests (cmocka), integration tests (real rdzvd processes on
# 127.0.0.1), PyTorch compatibility tests (Debian's python3-torch 1.13)
# and, in further builds, the same suite under ASan+UBSan and each fuzzer
# briefly.  Prints one summary line "tests: N passed, N failed, N skipped".
#
#   scripts/test.sh            everything
#   scripts/test.sh --quick    the plain build only
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
quick=0
[ "${1:-}" = "--quick" ] && quick=1

bash "$top/scripts/deps.sh" || exit 1
cd "$top" || exit 1
if [ ! -x configure ] || [ configure.ac -nt configure ]; then
	autoreconf -fi >/dev/null 2>&1 || { autoreconf -fi; exit 1; }
fi

# deps.sh installed both torch versions: a compatibility test that cannot
# import one fails instead of skipping.
export RDZV_REQUIRE_TORCH=1

# The NCCL backend compiles in every run (it runs only where a GPU is):
# CUDA's own directory, else the nvidia-nccl wheel deps.sh put into the
# torch 2.13 virtualenv.
nccl_args=()
venv=${RDZV_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rdzv/torch-2.13}
if [ ! -f /usr/local/cuda/include/nccl.h ]; then
	for d in "$venv"/lib/python3*/site-packages/nvidia/nccl; do
		[ -f "$d/include/nccl.h" ] && nccl_args=(--with-nccl="$d")
	done
fi

pass=0 fail=0 skip=0 rc=0
failed_logs=()
times=""	# "seconds leg test" lines, from each log's "# elapsed" line
walls=""	# each leg's make check, wall clock

# run NAME DIR CONFIGURE-ARGS...: build in DIR and run make check
# (with $CHECK_ARGS, e.g. a TESTS= override).
run() {
	local name=$1 dir=$2
	shift 2
	echo "== $name: configure $*"
	mkdir -p "$dir"
	(cd "$dir" && "$top/configure" -q "$@") || { rc=1; fail=$((fail + 1)); return; }
	echo "== $name: build"
	make -C "$dir" -j2 >"$dir/build.log" 2>&1 || {
		tail -40 "$dir/build.log"; rc=1; fail=$((fail + 1)); return; }
	echo "== $name: make check"
	local t0=$SECONDS
	make -C "$dir" -j2 check ${CHECK_ARGS:-} >"$dir/check.log" 2>&1
	local crc=$?
	walls+="   $name: make check took $((SECONDS - t0)) s"$'\n'
	grep -E '^(PASS|FAIL|SKIP|XFAIL|XPASS|ERROR):' "$dir/check.log" | sed "s/^/   /"
	local p f s
	p=$(grep -cE '^(PASS|XFAIL):' "$dir/check.log")
	f=$(grep -cE '^(FAIL|XPASS|ERROR):' "$dir/check.log")
	s=$(grep -cE '^SKIP:' "$dir/check.log")
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
	times+=$(find "$dir/tests" -name '*.log' -exec awk -v leg="$name" \
	    -v b="$dir/" '/^# elapsed [0-9.]+ s$/ { f = FILENAME;
	    sub(b, "", f); sub(/\.log$/, "", f); print $3, leg, f }' {} +)$'\n'
	if [ $crc -ne 0 ] || [ "$f" -ne 0 ]; then
		rc=1
		[ "$f" -eq 0 ] && fail=$((fail + 1)) && tail -40 "$dir/check.log"
		failed_logs+=("$dir")
	fi
}

run plain "$top/build" "${nccl_args[@]}"
# With CUDA here, a build without the NCCL backend is a failure, not a skip.
if [ -f /usr/local/cuda/include/cuda_runtime.h ]; then
	if grep -q '^#define HAVE_NCCL 1' "$top/build/config.h" 2>/dev/null &&
	    [ -f "$top/build/libworker/librdzvworker_la-nccl.lo" ]; then
		echo "   PASS: NCCL backend compiled (${nccl_args[*]:-CUDA directory})"
		pass=$((pass + 1))
	else
		echo "   FAIL: NCCL backend not compiled: no nccl.h (scripts/deps.sh installs nvidia-nccl-cu13)"
		fail=$((fail + 1))
		rc=1
	fi
fi
if [ $quick -eq 0 ] && [ -f "$top/build/Makefile" ]; then
	# The release tarball holds everything it needs: it configures, builds,
	# installs, uninstalls and cleans up (its tests are the plain run's).
	echo "== distcheck (TESTS= : the suite ran above)"
	if make -C "$top/build" -j2 distcheck TESTS= >"$top/build/distcheck.log" 2>&1; then
		echo "   PASS: make distcheck"
		pass=$((pass + 1))
		# Every tracked file but the CI's own is in it (EXTRA_DIST).
		if ! git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
			echo "   SKIP: the tarball's contents: not a git checkout"
			skip=$((skip + 1))
		else
			left=$(comm -23 <(git -C "$top" ls-files 2>/dev/null |
			    grep -vE '^(\.ci/|\.gitignore$)' | sort) \
			    <(tar tzf "$top"/build/rdzv-*.tar.gz | sed 's|^[^/]*/||' | sort))
			if [ -z "$left" ]; then
				echo "   PASS: the tarball holds every tracked file"
				pass=$((pass + 1))
			else
				echo "   FAIL: tracked but not in the tarball (add to EXTRA_DIST):" $left
				fail=$((fail + 1))
				rc=1
			fi
		fi
	else
		echo "   FAIL: make distcheck"
		tail -40 "$top/build/distcheck.log"
		fail=$((fail + 1))
		rc=1
	fi
fi
if [ $quick -eq 0 ]; then
	run asan "$top/build-asan" --enable-asan "${nccl_args[@]}"
	# The fuzz build runs only the fuzzers, each briefly.
	CHECK_ARGS='TESTS=$(FUZZ_TESTS)' run fuzz "$top/build-fuzz" CC=clang --enable-fuzzing
fi

# Each failed test's log tail; then, last, what failed in short (each
# test's verdict, its error line, and where a hung job's workers were), so
# that the end of a long CI log names the cause.
short=""
for d in "${failed_logs[@]}"; do
	echo "== failures in $d:"
	for log in $(grep -lE '^(FAIL|ERROR)' $(find "$d/tests" -name '*.log') 2>/dev/null); do
		echo "--- $log"
		tail -30 "$log"
		short+=$(grep -E '^(FAIL[ :]|STACK |\[  FAILED|==[0-9]+==ERROR|[A-Za-z_.]+(Error|Exception|Deadline)(:|$))' "$log" |
		    head -30 | cut -c1-700 | sed "s|^|   ${log#$top/}: |")$'\n'
	done
done
# Where the time went: each leg's total and the slowest tests.
if [ -n "${times//$'\n'/}" ]; then
	echo "== per-test times (seconds; the slowest 25 of $(grep -c . <<<"$times"))"
	printf '%s' "$walls"
	awk 'NF == 3 { t[$2] += $1 } END { for (l in t) printf "   %s: %.0f s in all\n", l, t[l] }' <<<"$times"
	sort -rn <<<"$times" | grep . | head -25 | awk '{ printf "   %8.1f  %-6s %s\n", $1, $2, $3 }'
fi
if [ -n "$short" ]; then
	echo "== failed, in short:"
	printf '%s' "$short"
fi
echo "tests: $pass passed, $fail failed, $skip skipped"
exit $rc
