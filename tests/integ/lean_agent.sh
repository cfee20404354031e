#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# lean_agent.sh: rdzv-agent, which runs on every compute node, loads
# neither libcurl (with its gnutls, krb5, ldap and ssh2) nor sqlite: the
# etcd and sqlite stores are rdzvd's alone, and the agent's embedded
# rdzvd (--standalone) keeps its state in memory.  The same check run on
# rdzvd must find libcurl, or it would pass without reading anything; and
# the lean agent's embedded rdzvd still runs a job to its end.
set -uo pipefail

B=${RDZV_TOP_BUILDDIR:?run from make check}
fail() { echo "FAIL: $*"; exit 1; }
command -v ldd >/dev/null ||
	{ echo "SKIP: no ldd (libc-bin) to list what a program loads"; exit 77; }

# The program itself, not a libtool wrapper script.
prog() {
	if [ -f "$B/$1/.libs/$2" ]; then
		echo "$B/$1/.libs/$2"
	else
		echo "$B/$1/$2"
	fi
}
agent=$(prog agent rdzv-agent)
rdzvd=$(prog rdzvd rdzvd)
for p in "$agent" "$rdzvd"; do
	head -c 4 "$p" 2>/dev/null | grep -q $'\x7fELF' || fail "$p is not an ELF program"
done

# Every library the program loads, directly or through another.
libs() {
	ldd "$1" | awk '$1 ~ /^lib/ { print $1 }' | sort -u
}
heavy='^lib(curl|sqlite3|gnutls|gssapi_krb5|krb5|ldap|lber|ssh2|rtmp)[.-]'

got=$(libs "$agent") || fail "ldd $agent"
echo "# rdzv-agent loads: $(echo $got)"
bad=$(echo "$got" | grep -E "$heavy")
[ -z "$bad" ] || fail "rdzv-agent loads what only rdzvd's stores need: $(echo $bad)"

got=$(libs "$rdzvd") || fail "ldd $rdzvd"
echo "$got" | grep -q '^libcurl\.' ||
	fail "rdzvd loads no libcurl: its etcd store moved, or this check reads nothing: $(echo $got)"

# The embedded rdzvd, memory alone, still hosts a job.
out=$(timeout 60 "$agent" --standalone --nproc_per_node 2 --no_python -- \
    /bin/sh -c 'echo "rank $RANK of $WORLD_SIZE"' 2>&1) ||
	fail "rdzv-agent --standalone: $out"
for r in 0 1; do
	echo "$out" | grep -q "rank $r of 2" ||
		fail "rdzv-agent --standalone: no rank $r: $out"
done
echo "PASS: rdzv-agent loads no libcurl or sqlite; --standalone runs"
