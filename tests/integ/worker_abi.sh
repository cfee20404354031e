#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# worker_abi.sh: librdzvworker exports exactly the functions rdzv_worker.h
# declares.  Three lists must agree: the header's prototypes, the export
# list libtool links with (libworker/librdzvworker.sym) and the dynamic
# symbol table of the built library.  A helper leaking into the ABI (the
# common/ client, TLS, tokens) or an API function missing fails here.
set -u
src=${RDZV_TOP_SRCDIR:?}
build=${RDZV_TOP_BUILDDIR:?}
lib=$build/libworker/.libs/librdzvworker.so
[ -f "$lib" ] || { echo "SKIP: no shared librdzvworker at $lib (--disable-shared?)"; exit 77; }
command -v nm >/dev/null || { echo "FAIL: nm (binutils) not found"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

grep -oE '\brdzv_[a-z0-9_]+[[:space:]]*\(' "$src/libworker/rdzv_worker.h" |
	sed 's/[[:space:]]*($//' | sort -u >"$tmp/header"
grep -v '^#' "$src/libworker/librdzvworker.sym" | sort -u >"$tmp/sym"
nm -D --defined-only "$lib" | awk '$2 ~ /^[TWDBR]$/ { print $3 }' |
	grep -v '^_' | sort -u >"$tmp/lib"

rc=0
for pair in "header sym" "header lib"; do
	set -- $pair
	if ! diff -u "$tmp/$1" "$tmp/$2" >"$tmp/diff"; then
		echo "FAIL: $1 and $2 differ (- only in $1, + only in $2):"
		cat "$tmp/diff"
		rc=1
	fi
done
n=$(wc -l <"$tmp/lib")
[ "$n" -gt 0 ] || { echo "FAIL: no symbol read from $lib"; rc=1; }
[ $rc -eq 0 ] && echo "PASS: librdzvworker exports exactly the $n functions of rdzv_worker.h"
exit $rc
