#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# runtime-packages.sh [--own DIR] PROGRAM...: the Debian packages holding
# the shared libraries PROGRAMs load (ldd, then dpkg -S), one a line,
# sorted: what an image needs to run programs built elsewhere, read from
# the programs themselves rather than kept by hand.  Libraries under DIR
# (the build's own, librdzvworker) are not asked for.  Exits 1 naming a
# library that is not found or that no installed package holds.
# The Dockerfile runs it on the programs it built.
set -eu

own=
if [ "${1:-}" = --own ]; then
	own=$2
	shift 2
fi
[ $# -gt 0 ] || { echo "usage: $0 [--own DIR] PROGRAM..." >&2; exit 2; }

libs=$(for p in "$@"; do
	ldd "$p" || echo "!$p"
done | awk '
	/^!/ { print; next }
	/=> not found/ { print "!" $1; next }
	$2 == "=>" && $3 ~ /^\// { print $3; next }
	$1 ~ /^\// { print $1 }' | sort -u)

# dpkg knows a file by the path its package ships, /lib or /usr/lib
# (merged /usr): ask for every name at once, then match the real paths.
set -f
names=$(for l in $libs; do
	case $l in !*) ;; *) echo "*/${l##*/}" ;; esac
done)
owners=$(dpkg -S $names 2>/dev/null | while IFS= read -r line; do
	echo "$(readlink -f "${line#*: }") ${line%%: *}"
done)
set +f
out=$(for l in $libs; do
	case $l in
	!*) echo "!${l#!}: not found (or ldd cannot read it)"; continue ;;
	esac
	real=$(readlink -f "$l")
	if [ -n "$own" ]; then
		case $real in "$(readlink -f "$own")"/*) continue ;; esac
	fi
	pkg=$(printf '%s\n' "$owners" | awk -v f="$real" '$1 == f {
		$1 = ""; gsub(/,/, " "); print }' | tr ' ' '\n' |
	    sed -e 's/:.*//' -e '/^$/d' | sort -u)
	echo "${pkg:-!$l: no installed package holds it}"
done)
bad=$(printf '%s\n' "$out" | sed -n 's/^!//p')
if [ -n "$bad" ]; then
	printf '%s\n' "$bad" | sed "s|^|$0: |" >&2
	exit 1
fi
printf '%s\n' "$out" | sed '/^$/d' | sort -u
