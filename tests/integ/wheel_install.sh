#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# wheel_install.sh: `pip install rdzv` from the wheel scripts/wheel.sh
# builds, into a fresh virtualenv that sees nothing of this tree (torch
# comes from the torch 2.13 virtualenv's site directory through a .pth,
# the only path added), with no PYTHONPATH and no LD_LIBRARY_PATH:
# - rdzv-agent, rdzvd and rdzvctl are the environment's commands and
#   load every library they need from the environment or the system's
#   glibc; the rdzv package, the header, librdzvworker and its
#   pkg-config file are there; the metadata says Apache-2.0;
# - rdzv-agent --standalone runs the plain DDP example to exit 0;
# - the repair example survives a worker's SIGKILL: the replacement is
#   the agent's warm spare (the virtualenv's python running rdzv.spare,
#   found with the virtualenv not on PATH), no restart, one digest;
# - a C program built against the wheel's header and library through
#   its pkg-config file runs as two ranks under the agent.
set -uo pipefail

S=${RDZV_TOP_SRCDIR:?run from make check}
TP=${TORCH2_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/rdzv/torch-2.13/bin/python}
skip() {
	if [ -n "${RDZV_REQUIRE_TORCH:-}" ]; then
		echo "FAIL (RDZV_REQUIRE_TORCH is set): $*"
		exit 1
	fi
	echo "SKIP: $*"
	exit 77
}
T=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-wheel-test-XXXXXX")
apid=
cleanup() {
	cd / || :
	[ -z "$apid" ] || kill -9 "$apid" 2>/dev/null
	# The workers and spare of a failed run: the test's own, by directory.
	for p in /proc/[0-9]*; do
		if [ "$(readlink "$p/cwd" 2>/dev/null)" = "$T/ex" ]; then
			kill -9 "${p#/proc/}" 2>/dev/null
		fi
	done
	[ -n "${RDZV_TEST_KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	for f in "$T"/*.log; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
	done
	exit 1
}

# scripts/wheel.sh builds the wheel's programs itself, never with this
# build's sanitizers: the sanitizer leg would run the same test again.
if [ "${RDZV_SANITIZERS:-0}" = 1 ] && [ -z "${RDZV_WHEEL:-}" ]; then
	echo "SKIP: the sanitizer leg: scripts/wheel.sh builds the wheel without this build's sanitizers (the plain leg tests it)"
	exit 77
fi
[ -x "$TP" ] || skip "no torch 2.x python at $TP (scripts/deps.sh makes it)"
"$TP" -c 'import torch, venv, ensurepip' 2>/dev/null ||
	skip "$TP cannot import torch, venv or ensurepip"
for t in readelf ldd pkg-config cc; do
	command -v "$t" >/dev/null || skip "no $t"
done
FM=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -f "$FM/t10k-labels-idx1-ubyte.gz" ] ||
	skip "no Fashion-MNIST in $FM (dataset-fashion-mnist)"

# ---- the wheel (RDZV_WHEEL: one built already, from this tree) ----
t0=$SECONDS
if [ -n "${RDZV_WHEEL:-}" ]; then
	mkdir -p "$T/dist" && cp "$RDZV_WHEEL" "$T/dist/" || fail "RDZV_WHEEL=$RDZV_WHEEL"
else
	# A make of its own, not the caller's job server.
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL JOBS="${JOBS:-2}" \
	    PYTHON="$TP" RDZV_WHEEL_WORK="$T/work" \
	    bash "$S/scripts/wheel.sh" "$T/dist" >"$T/wheel.log" 2>&1 ||
		fail "scripts/wheel.sh"
fi
whl=$(ls "$T"/dist/rdzv-*.whl) || fail "no wheel"
echo "# $(basename "$whl"): $(stat -c %s "$whl") bytes, built in $((SECONDS - t0)) s"
rm -rf "$T/work"

# ---- a fresh virtualenv, torch from the torch one, nothing else ----
V=$T/venv
"$TP" -m venv "$V" >"$T/venv.log" 2>&1 || fail "python -m venv"
site=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
tsite=$("$TP" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "$tsite" > "$site/torch-site.pth"
# A clean environment: no PYTHONPATH (make check's), no LD_LIBRARY_PATH,
# the system's PATH; VENVPATH has the virtualenv first, as activate does.
SYSPATH=/usr/local/bin:/usr/bin:/bin
clean() { env -i HOME="$HOME" TMPDIR="${TMPDIR:-/tmp}" FASHION_MNIST_DIR="$FM" "$@"; }
clean "$V/bin/python" -c 'import rdzv' 2>/dev/null &&
	fail "rdzv importable before the install: this tree is on a path"
clean "$V/bin/python" -m pip install -q --no-index "$whl" >"$T/pip.log" 2>&1 ||
	fail "pip install"

for p in rdzv-agent rdzvd rdzvctl; do
	[ -x "$V/bin/$p" ] || fail "$p not installed into $V/bin"
	head -c 4 "$V/bin/$p" | grep -q $'\x7fELF' || fail "$p is not the program"
done
for f in include/rdzv_worker.h lib/librdzvworker.so lib/pkgconfig/rdzvworker.pc; do
	[ -f "$V/$f" ] || fail "$f not installed"
done
# Each program and the library load only the environment's libraries
# and the system's glibc, libz and libresolv (the manylinux set).
for f in "$V"/bin/rdzv-agent "$V"/bin/rdzvd "$V"/bin/rdzvctl "$V"/lib/librdzvworker.so.*; do
	clean ldd "$f" >"$T/ldd.out" 2>&1 || fail "ldd $f"
	grep -q "not found" "$T/ldd.out" && fail "$f: $(grep 'not found' "$T/ldd.out")"
	bad=$(awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' "$T/ldd.out" |
	    grep -v " $V/" |
	    grep -vE '^(libc|libm|libz|libresolv|libpthread|libdl|librt|libgcc_s)\.so')
	[ -z "$bad" ] || fail "$f loads from the system: $bad"
	echo "# $(basename "$f"): $(grep -c " $V/" "$T/ldd.out") libraries from the wheel"
done
help=$(clean "$V/bin/rdzvd" --help 2>&1)
case "$help" in
*"(default /var/lib/rdzv/rdzvd.db;"*) ;;
*) fail "rdzvd --help does not name its default database: $help" ;;
esac
clean "$V/bin/rdzvctl" --help >/dev/null 2>&1 || fail "rdzvctl --help"
got=$(cd / && clean "$V/bin/python" -c 'import rdzv.repair, rdzv.spare; print(rdzv.repair.__file__)') ||
	fail "import rdzv.repair"
[ "$got" = "$site/rdzv/repair.py" ] || fail "rdzv.repair from $got"
show=$(clean "$V/bin/python" -m pip show rdzv 2>/dev/null)
case "$show" in
*"License: Apache-2.0"*) ;;
*) fail "pip show rdzv: no License: Apache-2.0: $show" ;;
esac

eps=$(clean "$V/bin/python" -c 'from importlib.metadata import entry_points
print([e.value for e in entry_points(group="torchrun.handlers") if e.name == "rdzv"])')
[ "$eps" = "['rdzv.torchrun:handler_creator']" ] ||
	fail "torchrun's rdzv entry point: $eps"

# ---- the plain DDP example, the virtualenv on PATH ----
mkdir "$T/ex"
cp "$S/examples/torch_plain_ddp.py" "$S/examples/torch_ddp_repair.py" "$T/ex/"
cd "$T/ex" || fail "cd"
clean PATH="$V/bin:$SYSPATH" rdzv-agent --standalone --nproc_per_node 2 \
    torch_plain_ddp.py --limit 2000 --epochs 1 --workers 1 \
    >"$T/plain.log" 2>&1 || fail "the plain DDP example under rdzv-agent"
[ "$(grep -c '^\[default[01]\]:FINAL rank' "$T/plain.log")" = 2 ] ||
	fail "the plain DDP example: not two FINAL lines"
echo "# plain DDP: 2 ranks, exit 0"

# ---- the repair example, the virtualenv not on PATH ----
# Long enough (5 epochs of 188 steps of >= 50 ms) that the survivor
# still trains while the spare, importing torch, gets warm.
# (env itself, not the function clean: $! is then the agent.)
env -i HOME="$HOME" TMPDIR="${TMPDIR:-/tmp}" FASHION_MNIST_DIR="$FM" \
    PATH="$SYSPATH" "$V/bin/rdzv-agent" --standalone --nproc_per_node 2 \
    torch_ddp_repair.py --limit 12000 --epochs 5 --batch 32 --hidden 32 \
    --step-delay 0.05 --report >"$T/repair.log" 2>&1 &
apid=$!
kids() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(awk '{ print $4 }' "$p/stat" 2>/dev/null)" = "$apid" ] &&
			echo "${p#/proc/}"
	done
}
is_spare() {
	local cmd
	cmd=$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)
	case "$cmd" in *" -m rdzv.spare "*) ;; *) return 1 ;; esac
	[ "$(readlink "/proc/$1/fd/1" 2>/dev/null)" = /dev/null ]
}
spare=
for _ in $(seq 1800); do
	kill -0 "$apid" 2>/dev/null || fail "the agent ended before its spare was warm"
	for k in $(kids); do
		is_spare "$k" && spare=$k
	done
	[ -n "$spare" ] && break
	sleep 0.1
done
[ -n "$spare" ] || fail "no warm spare after 180 s"
spy=$(tr '\0' '\n' < "/proc/$spare/cmdline" | head -n 1)
[ "$spy" = "$V/bin/python3" ] || fail "the spare runs $spy, not the virtualenv's python3"
victim=
for k in $(kids); do
	[ "$k" != "$spare" ] && victim=$k
done
[ -n "$victim" ] || fail "no worker to kill"
kill -9 "$victim" || fail "the job ended before the kill"
echo "# SIGKILL to worker $victim; the spare is $spare"
wait "$apid"
rc=$?
apid=
[ "$rc" = 0 ] || fail "the repair example: agent exit $rc"
grep -q "replacement pid $spare started (the warm spare)" "$T/repair.log" ||
	fail "the replacement was not the warm spare"
grep -E "round [0-9]+: .*restart [1-9]" "$T/repair.log" && fail "the job restarted"
sed -n 's/^\[default[01]\]:REPORT //p' "$T/repair.log" > "$T/reports.json"
clean "$V/bin/python" - "$T/reports.json" "$spare" <<'EOF' || fail "REPORTs"
import json
import sys

reps = [json.loads(x) for x in open(sys.argv[1])]
assert sorted(r["rank"] for r in reps) == [0, 1], reps
assert len({r["digest"] for r in reps}) == 1, reps
new = [r for r in reps if r["replacement"]]
assert len(new) == 1 and new[0]["pid"] == int(sys.argv[2]), reps
assert new[0]["step"] > new[0]["joined_step"], reps
print("# repaired: replacement pid %d joined at step %d, ended at %d" %
      (new[0]["pid"], new[0]["joined_step"], new[0]["step"]))
EOF

# ---- a C program on the wheel's librdzvworker ----
cat > "$T/ex/sum.c" <<'EOF'
#include <stdio.h>
#include <rdzv_worker.h>

int
main(void)
{
	struct rdzv_comm *c;
	char err[256];
	double x, sum;
	int n;

	if (rdzv_init(&c, NULL, err, sizeof err) != 0) {
		fprintf(stderr, "rdzv_init: %s\n", err);
		return 1;
	}
	x = rdzv_rank(c) + 1;
	n = rdzv_size(c);
	if (rdzv_allreduce(c, &x, &sum, 1, RDZV_F64, RDZV_SUM, -1) != 0 ||
	    sum != n * (n + 1) / 2.0) {
		fprintf(stderr, "allreduce: %g\n", sum);
		return 1;
	}
	printf("C rank %d of %d: sum %g\n", rdzv_rank(c), n, sum);
	return rdzv_finalize(c) != 0;
}
EOF
pc() { clean PKG_CONFIG_PATH="$V/lib/pkgconfig" pkg-config "$@" rdzvworker; }
flags=$(pc --cflags --libs) || fail "pkg-config rdzvworker"
libdir=$(pc --variable=libdir) || fail "pkg-config --variable=libdir"
cc -o "$T/ex/sum" "$T/ex/sum.c" $flags -Wl,-rpath,"$libdir" >"$T/cc.log" 2>&1 ||
	fail "cc $flags"
clean PATH="$V/bin:$SYSPATH" rdzv-agent --standalone --nproc_per_node 2 \
    --no_python ./sum >"$T/c.log" 2>&1 || fail "the C program under rdzv-agent"
[ "$(grep -c 'C rank [01] of 2: sum 3$' "$T/c.log")" = 2 ] ||
	fail "the C program: not two ranks summing to 3"
echo "# C program ($flags): 2 ranks, exit 0"
echo "PASS"
