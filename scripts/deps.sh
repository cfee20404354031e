#!/usr/bin/env bash
# deps.sh: installs the Debian packages rdzv builds, tests and demos with.
# Safe to run again: it does nothing when everything is already there.
# Runs apt-get as root, or through sudo when run as another user.
set -euo pipefail

PKGS=(
	build-essential autoconf automake libtool pkg-config
	libevent-dev libsqlite3-dev libjansson-dev libsystemd-dev libssl-dev libbsd-dev uthash-dev
	libcmocka-dev sqlite3 curl openssl
	python3 python3-torch python3-pil chromium
	clang libclang-rt-14-dev
	libopenblas-dev zlib1g-dev dataset-fashion-mnist
	systemd procps man-db groff-base mandoc python3-yaml
)

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
