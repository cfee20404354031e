#!/usr/bin/env bash
# demo.sh: the README's main job.  Installs what rdzv needs, builds it,
# and shows the whole system on this machine:
#  1. the store: rdzvd on its own sqlite database, an unmodified PyTorch
#     TCPStore client storing, waiting for and reading keys, rdzvd killed
#     with SIGKILL and started again, every key still there;
#  2. training: rdzvd and two rdzv-agents x two workers train ddp_mlp on
#     Fashion-MNIST; a worker is killed partway and the job resumes from
#     its checkpoint; rdzvd is killed and restarted mid-training without
#     the job noticing; the job ends with its test accuracy.
#   scripts/demo.sh [--store|--train]   one part only
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
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

export RDZV_TOP_BUILDDIR="$top/build" RDZV_TOP_SRCDIR="$top"
part=${1:-all}
if [ "$part" = all ] || [ "$part" = --store ]; then
	echo "== part 1: the store, across a kill -9"
	/usr/bin/python3 "$top/scripts/demo_store.py"
fi
if [ "$part" = all ] || [ "$part" = --train ]; then
	echo "== part 2: elastic data-parallel training"
	/usr/bin/python3 "$top/scripts/demo_train.py"
fi
