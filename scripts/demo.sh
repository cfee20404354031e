#!/usr/bin/env bash
# demo.sh: the README's main job.  Installs what rdzv needs, builds it,
# starts rdzvd on its own sqlite database, and has an unmodified PyTorch
# TCPStore client store, wait for and read keys; then kills rdzvd with
# SIGKILL, starts it again on the same database, and reads the keys back.
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
exec /usr/bin/python3 "$top/scripts/demo_store.py" "$@"
