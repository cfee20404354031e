#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deps.sh: installs the Debian packages rdzv builds, tests and demos with.
# Safe to run again: it does nothing when everything is already there.
# Runs apt-get as root, or through sudo when run as another user.
#
# PyTorch 2.13 (CPU build), the version users run, goes into a virtualenv
# of its own, $RDZV_TORCH2_VENV (default ~/.cache/rdzv/torch-2.13), with
# `pip install torch==2.13.0`; Debian's python3-torch 1.13 stays with
# /usr/bin/python3.  The tests run against both.
set -euo pipefail

# install_torch2: the torch 2.13 virtualenv, unless it already imports,
# and the training frameworks the tests run (Lightning, Accelerate,
# transformers, torchtitan), from PyPI with torch held at 2.13.0 by
# scripts/torch-constraints.txt.
install_torch2() {
	local venv=${RDZV_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rdzv/torch-2.13}
	local cons
	cons="$(cd "$(dirname "$0")" && pwd)/torch-constraints.txt"
	if ! "$venv/bin/python" -c 'import torch.distributed' 2>/dev/null; then
		echo "deps.sh: installing torch 2.13 into $venv"
		rm -rf "$venv"
		mkdir -p "$(dirname "$venv")"
		python3 -m venv "$venv"
		"$venv/bin/pip" install -q torch==2.13.0 numpy
		"$venv/bin/python" -c 'import torch.distributed'
	fi
	"$venv/bin/python" -c 'import lightning, accelerate, transformers, torchtitan' \
		2>/dev/null &&
		"$venv/bin/python" -m ruff --version >/dev/null 2>&1 && return 0
	echo "deps.sh: installing Lightning, Accelerate, transformers, torchtitan and ruff into $venv"
	"$venv/bin/pip" install -q -c "$cons" 'lightning==2.6.*' \
	    'accelerate==1.15.*' 'transformers==5.24.*' 'torchtitan==0.3.0' \
	    'ruff==0.17.6'
	"$venv/bin/python" -c 'import lightning, accelerate, transformers, torchtitan, torch; assert torch.__version__.startswith("2.13.")'
}

# install_nccl: NCCL's headers and library for building the NCCL backend
# (it must compile in every run; it runs only where a GPU is).  CUDA's own
# directory has no nccl.h here, so PyPI's nvidia-nccl-cu13 wheel goes into
# the torch 2.13 virtualenv; scripts/test.sh passes its directory to
# configure --with-nccl.
install_nccl() {
	local venv=${RDZV_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rdzv/torch-2.13}
	[ -f /usr/local/cuda/include/nccl.h ] && return 0
	[ -f /usr/local/cuda/include/cuda_runtime.h ] || return 0
	ls "$venv"/lib/python3*/site-packages/nvidia/nccl/include/nccl.h >/dev/null 2>&1 && return 0
	echo "deps.sh: installing nvidia-nccl-cu13 into $venv"
	"$venv/bin/pip" install -q nvidia-nccl-cu13
}

PKGS=(
	build-essential autoconf automake libtool pkg-config
	libevent-dev libsqlite3-dev libjansson-dev libsystemd-dev libssl-dev libbsd-dev uthash-dev
	libcmocka-dev sqlite3 curl openssl
	libcurl4-openssl-dev etcd-server
	python3 python3-torch python3-pil chromium python3-prometheus-client
	clang libclang-rt-14-dev
	libopenblas-dev zlib1g-dev dataset-fashion-mnist
	systemd procps man-db groff-base mandoc python3-yaml
	# where a hung test's workers are (tests/lib/rdzvtest.py stacks())
	gdb
	# the Debian packages of debian/ (tests/integ/debian_pkg.sh)
	debhelper dh-python dpkg-dev lintian
	# a real Slurm on one machine: scripts/slurm-cluster.sh
	slurmctld slurmd slurm-client munge iproute2 util-linux
)

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	install_torch2
	install_nccl
	exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
	SUDO=()
elif command -v sudo >/dev/null; then
	SUDO=(sudo)
else
	echo "deps.sh: need root (or sudo) to install: ${missing[*]}" >&2
	exit 1
fi
echo "deps.sh: installing ${missing[*]}"
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
	"${missing[@]}" >/dev/null
install_torch2
install_nccl
