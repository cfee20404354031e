#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# demo.sh: the README's main job.  Installs what rdzv needs, builds it,
# and shows the whole system on this machine, each part checking what it
# claims (PASS, or FAIL and what did not happen):
#  1. the store: rdzvd on its own sqlite database, an unmodified PyTorch
#     TCPStore client storing, waiting for and reading keys, rdzvd killed
#     with SIGKILL and started again, every key still there;
#  2. a worker of a training job (two rdzv-agents x two workers of
#     examples/ddp_mlp on Fashion-MNIST) SIGKILLed and repaired in place;
#  3. rdzvd SIGKILLed while that job trains, restarted, the workers
#     untouched;
#  4. the same failure in a job that cannot repair: a restart from its
#     checkpoint;
#  5. a PyTorch 2.x DDP program repaired in place by the rdzv.repair helper;
#  6. the status page, drawn by headless Chromium into a PNG.
# Exits 0 only when every part passed.  See usage() for the options.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/demo.sh [--no-install] [--store] [--train] [--torch]

Installs rdzv's dependencies (scripts/deps.sh), builds rdzv in build/ and
shows it working on this machine.  With no part named, every part runs.

  --store        part 1: the store across a kill -9 of rdzvd
  --train        parts 2-4: repair in place, kill -9 of rdzvd during
                 training, a restart from a checkpoint (and part 6)
  --torch        part 5: a PyTorch 2.x program repaired in place (and part 6)
  --no-install   use the existing build: no deps.sh, no configure, no make
                 (also RDZV_DEMO_NO_INSTALL=1)
  -h, --help     this help

Environment: RDZV_TOP_BUILDDIR, the build to use with --no-install
(default build/); RDZV_DEMO_DIR, where the demo's files go (default
BUILD/demo, emptied first; a directory given must be empty or absent);
TORCH2_PYTHON, a python with PyTorch 2.x (default the virtualenv
scripts/deps.sh makes, ~/.cache/rdzv/torch-2.13).  Exit status: 0 when
every part showed what it claims, 1 when one did not, 2 on a usage error.
EOF
}

top=$(cd "$(dirname "$0")/.." && pwd)
install=1
[ "${RDZV_DEMO_NO_INSTALL:-0}" = 1 ] && install=0
store=0 train=0 torch=0
for arg in "$@"; do
	case $arg in
	--no-install) install=0 ;;
	--store) store=1 ;;
	--train) train=1 ;;
	--torch) torch=1 ;;
	-h|--help) usage; exit 0 ;;
	*) echo "demo.sh: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
	esac
done
[ $store$train$torch = 000 ] && store=1 train=1 torch=1

if [ $install = 1 ]; then
	bash "$top/scripts/deps.sh"
	cd "$top"
	if [ ! -x configure ] || [ configure.ac -nt configure ]; then
		autoreconf -fi >/dev/null 2>&1
	fi
	mkdir -p build
	if [ ! -f build/Makefile ]; then
		(cd build && ../configure -q)
	fi
	echo "== building rdzv"
	make -C build -j2 >build/build.log 2>&1 || { tail -40 build/build.log; exit 1; }
	build=$top/build
else
	build=${RDZV_TOP_BUILDDIR:-$top/build}
	if [ ! -x "$build/rdzvd/rdzvd" ]; then
		echo "demo.sh: no rdzv build at $build (no rdzvd/rdzvd): run" \
		    "scripts/demo.sh without --no-install, or set RDZV_TOP_BUILDDIR" >&2
		exit 1
	fi
fi
build=$(cd "$build" && pwd)

if [ -n "${RDZV_DEMO_DIR:-}" ]; then
	work=$RDZV_DEMO_DIR
	if [ -e "$work" ] && [ -n "$(ls -A "$work")" ]; then
		echo "demo.sh: RDZV_DEMO_DIR=$work is not empty: name an empty" \
		    "or new directory" >&2
		exit 2
	fi
else
	work=$build/demo
	rm -rf "$work"
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)

export RDZV_TOP_BUILDDIR=$build RDZV_TOP_SRCDIR=$top RDZV_DEMO_DIR=$work
# Nothing written into the source tree (read-only under make distcheck).
export PYTHONDONTWRITEBYTECODE=1
rc=0
if [ $store = 1 ]; then
	"${TORCH_PYTHON:-/usr/bin/python3}" "$top/scripts/demo_store.py" || rc=1
fi
if [ $train = 1 ] || [ $torch = 1 ]; then
	args=()
	[ $train = 1 ] && args+=(--train)
	[ $torch = 1 ] && args+=(--torch)
	/usr/bin/python3 "$top/scripts/demo_train.py" "${args[@]}" || rc=1
fi
echo
if [ $rc -ne 0 ]; then
	echo "demo: FAILED: not every part showed what it claims (the FAIL lines above say what; files in $work)"
	exit 1
fi
echo "demo: PASS: every part showed what it claims (files in $work)"
