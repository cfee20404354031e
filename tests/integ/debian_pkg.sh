#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# debian_pkg.sh: the Debian packages of debian/, built from a copy of
# this tree with `dpkg-buildpackage -b -us -uc`; lintian finds no error
# (its warnings and notes are listed); then, in a throwaway copy of this
# machine (an overlay of / in a mount namespace of its own, chrooted, so
# nothing reaches the real system):
# - dpkg -i of rdzvd, rdzv-agent, librdzvworker0, librdzvworker-dev and
#   python3-rdzv puts every file at its FHS path, the configuration files
#   are conffiles, rdzvd --help, the man pages and the units name
#   /etc/rdzv and /var/lib/rdzv, rdzv.repair imports with /usr/bin/python3
#   and its torchrun entry point is registered, and a C program built
#   through rdzvworker.pc runs as two ranks under the installed agent;
# - a second dpkg -i keeps an edited /etc/rdzv/rdzvd.conf;
# - dpkg --purge leaves nothing: no file of the packages, no
#   configuration, no state directory (a database made as systemd's
#   StateDirectory= would), no unit enabled; the overlay's upper layer
#   holds no file but dpkg's own records.
# Needs root, dpkg-buildpackage, debhelper, lintian, the build
# dependencies, unshare and overlayfs: skipped, with the reason, without.
set -uo pipefail

fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

# ---- inside the chroot: install, reinstall, purge ----
if [ "${1:-}" = --inner ]; then
	cd "$2" || fail "cd $2"
	debs="rdzvd_*.deb rdzv-agent_*.deb librdzvworker0_*.deb librdzvworker-dev_*.deb python3-rdzv_*.deb"
	# shellcheck disable=SC2086
	dpkg -i $debs </dev/null >dpkg-i.log 2>&1 || { cat dpkg-i.log; fail "dpkg -i"; }
	ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
	for f in /usr/sbin/rdzvd /usr/bin/rdzv-agent /usr/bin/rdzvctl \
	    /usr/lib/$ma/librdzvworker.so.0 /usr/lib/$ma/librdzvworker.so \
	    /usr/lib/$ma/pkgconfig/rdzvworker.pc /usr/include/rdzv_worker.h \
	    /etc/rdzv/rdzvd.conf /etc/rdzv/agent.conf \
	    /lib/systemd/system/rdzvd.service /lib/systemd/system/rdzv-agent@.service \
	    /usr/share/man/man8/rdzvd.8.gz /usr/share/man/man1/rdzv-agent.1.gz \
	    /usr/share/man/man1/rdzvctl.1.gz /usr/share/doc/rdzvd/copyright \
	    /usr/lib/python3/dist-packages/rdzv/repair.py \
	    /usr/lib/python3/dist-packages/rdzv/spare.py; do
		[ -e "$f" ] || fail "$f not installed"
	done
	for p in rdzvd rdzv-agent librdzvworker0 librdzvworker-dev python3-rdzv; do
		dpkg -L "$p" | grep -q '^/var' && fail "$p ships a file in /var"
		cmp -s /usr/share/doc/rdzvd/copyright "/usr/share/doc/$p/copyright" ||
			fail "$p: no copyright file, or another"
	done
	grep -q '^License: Apache-2.0' /usr/share/doc/rdzvd/copyright ||
		fail "copyright: not Apache-2.0"
	cf=$(dpkg-query -W -f='${Conffiles}\n' rdzvd rdzv-agent)
	for f in /etc/rdzv/rdzvd.conf /etc/rdzv/agent.conf; do
		case "$cf" in *" $f "*) ;; *) fail "$f is no conffile: $cf" ;; esac
	done
	help=$(rdzvd --help 2>&1)
	case "$help" in
	*"(default /var/lib/rdzv/rdzvd.db;"*) ;;
	*) fail "rdzvd --help: $help" ;;
	esac
	zcat /usr/share/man/man8/rdzvd.8.gz | grep -q /etc/rdzv/rdzvd.conf ||
		fail "rdzvd(8) does not name /etc/rdzv/rdzvd.conf"
	grep -q '^ExecStart=/usr/sbin/rdzvd --config /etc/rdzv/rdzvd.conf ' \
	    /lib/systemd/system/rdzvd.service || fail "rdzvd.service's ExecStart"
	grep -q '^StateDirectory=rdzv$' /lib/systemd/system/rdzvd.service ||
		fail "rdzvd.service's StateDirectory"
	grep -q '^ExecStart=/usr/bin/rdzv-agent ' /lib/systemd/system/rdzv-agent@.service ||
		fail "rdzv-agent@.service's ExecStart"
	got=$(cd / && env -u PYTHONPATH /usr/bin/python3 -c '
import importlib.metadata as m, rdzv.repair
eps = m.entry_points()
eps = eps.select(group="torchrun.handlers") if hasattr(eps, "select") else eps.get("torchrun.handlers", [])
print(rdzv.repair.__file__, [e.value for e in eps if e.name == "rdzv"])') ||
		fail "import rdzv.repair"
	[ "$got" = "/usr/lib/python3/dist-packages/rdzv/repair.py ['rdzv.torchrun:handler_creator']" ] ||
		fail "rdzv.repair, torchrun's entry point: $got"
	cat > sum.c <<'EOF'
#include <stdio.h>
#include <rdzv_worker.h>

int
main(void)
{
	struct rdzv_comm *c;
	char err[256];
	int x, sum;

	if (rdzv_init(&c, NULL, err, sizeof err) != 0) {
		fprintf(stderr, "rdzv_init: %s\n", err);
		return 1;
	}
	x = rdzv_rank(c) + 1;
	if (rdzv_allreduce(c, &x, &sum, 1, RDZV_I32, RDZV_SUM, -1) != 0)
		return 1;
	printf("C rank %d of %d: sum %d\n", rdzv_rank(c), rdzv_size(c), sum);
	return rdzv_finalize(c) != 0;
}
EOF
	# shellcheck disable=SC2046
	cc -o sum sum.c $(pkg-config --cflags --libs rdzvworker) >cc.log 2>&1 ||
		{ cat cc.log; fail "cc against rdzvworker.pc"; }
	env -u LD_LIBRARY_PATH rdzv-agent --standalone --nproc_per_node 2 \
	    --no_python ./sum >c.log 2>&1 || { cat c.log; fail "the C program"; }
	[ "$(grep -c 'C rank [01] of 2: sum 3$' c.log)" = 2 ] ||
		{ cat c.log; fail "the C program: not two ranks summing to 3"; }
	echo "# installed: files at their paths, a C program ran under rdzv-agent"

	# Reinstall over an edited configuration file: it stays.
	echo "# edited by debian_pkg.sh" >> /etc/rdzv/rdzvd.conf
	dpkg -i rdzvd_*.deb </dev/null >dpkg-i2.log 2>&1 ||
		{ cat dpkg-i2.log; fail "dpkg -i again"; }
	grep -q '^# edited by debian_pkg.sh$' /etc/rdzv/rdzvd.conf ||
		fail "the edited rdzvd.conf was replaced"
	echo "# reinstalled: the edited rdzvd.conf kept"

	# What systemd would have made for rdzvd.service (DynamicUser=,
	# StateDirectory=rdzv), and what the packages listed.
	mkdir -p /var/lib/private/rdzv
	echo db > /var/lib/private/rdzv/rdzvd.db
	ln -s private/rdzv /var/lib/rdzv
	for p in rdzvd rdzv-agent librdzvworker0 librdzvworker-dev python3-rdzv; do
		dpkg -L "$p"
	done | sort -u > listed
	# shellcheck disable=SC2086
	dpkg --purge rdzvd rdzv-agent librdzvworker0 librdzvworker-dev python3-rdzv \
	    </dev/null >purge.log 2>&1 || { cat purge.log; fail "dpkg --purge"; }
	left=$(while read -r f; do
		[ -e "$f" ] && [ ! -d "$f" ] && echo "$f"
	done < listed)
	[ -z "$left" ] || fail "left after the purge: $left"
	for f in /etc/rdzv /var/lib/rdzv /var/lib/private/rdzv \
	    /usr/lib/python3/dist-packages/rdzv; do
		[ -e "$f" ] || [ -L "$f" ] && fail "$f left after the purge"
	done
	st=$(dpkg-query -W -f='${db:Status-Abbrev}' rdzvd 2>/dev/null)
	[ -z "$st" ] || [ "$st" = "un " ] || fail "rdzvd's dpkg status: $st"
	exit 0
fi

# ---- the namespace: an overlay of /, chrooted into ----
if [ "${1:-}" = --ns ]; then
	T=$2
	O=$T/ov
	mkdir -p "$O/upper" "$O/work" "$O/root"
	mount -t overlay overlay -o "lowerdir=/,upperdir=$O/upper,workdir=$O/work" \
	    "$O/root" || fail "mount overlay"
	mount --rbind /dev "$O/root/dev" && mount -t proc proc "$O/root/proc" &&
		mount -t tmpfs tmpfs "$O/root/run" || fail "mount /dev, /proc, /run"
	mkdir -p "$O/root/tmp/rdzv-deb"
	cp "$T"/*.deb "$0" "$O/root/tmp/rdzv-deb/" || fail "copy into the overlay"
	chroot "$O/root" /bin/bash "/tmp/rdzv-deb/$(basename "$0")" --inner \
	    /tmp/rdzv-deb || exit 1
	# The upper layer: what the install, reinstall and purge left
	# anywhere, but dpkg's, ldconfig's and man-db's records and our files.
	umount -l "$O/root/proc" "$O/root/dev" "$O/root/run" 2>/dev/null
	left=$(cd "$O/upper" && find . ! -type d ! -type c |
	    grep -vE '^\./(var/lib/dpkg/|var/log/|var/cache/(man|debconf|ldconfig)/|etc/ld\.so\.cache$|tmp/|var/lib/systemd/deb-systemd-helper-(enabled|masked)/?$)')
	[ -z "$left" ] || fail "files left on the system after the purge: $left"
	echo "# purged: nothing left (the overlay's upper layer checked)"
	exit 0
fi

S=${RDZV_TOP_SRCDIR:?run from make check}
# The packages are built from a copy of the source with Debian's flags,
# never this build's: the sanitizer leg would run the same test again.
[ "${RDZV_SANITIZERS:-0}" = 1 ] &&
	skip "the sanitizer leg: the packages are built with Debian's flags, not this build's (the plain leg tests them)"
[ "$(id -u)" = 0 ] || skip "not root: the packages are installed and purged"
for t in dpkg-buildpackage dh lintian dpkg-checkbuilddeps unshare chroot; do
	command -v "$t" >/dev/null || skip "no $t (apt-get install debhelper lintian dpkg-dev)"
done
T=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-deb-test-XXXXXX")
trap '[ -n "${RDZV_TEST_KEEP:-}" ] || rm -rf "$T"' EXIT

# A copy of the tree: git's files (with what is not committed yet), or
# the release tarball's.
mkdir "$T/src"
# (A tree inside another checkout, as make distcheck's, is a tarball's.)
top=$(git -C "$S" rev-parse --show-toplevel 2>/dev/null)
if [ -n "$top" ] && [ "$top" -ef "$S" ]; then
	(cd "$S" && git ls-files -co --exclude-standard -z |
	    xargs -0 cp --parents -t "$T/src") || fail "copy the tree"
else
	tar -C "$S" --exclude=./_build --exclude=./_inst -cf - . |
	    tar -C "$T/src" -xf - || fail "copy the tree"
fi
(cd "$T/src" && dpkg-checkbuilddeps) >"$T/deps.log" 2>&1 ||
	skip "build dependencies missing: $(cat "$T/deps.log")"

t0=$SECONDS
(cd "$T/src" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    dpkg-buildpackage -b -us -uc -j"${JOBS:-2}") >"$T/build.log" 2>&1 ||
	{ tail -n 60 "$T/build.log"; fail "dpkg-buildpackage"; }
echo "# built in $((SECONDS - t0)) s:"
for p in rdzvd rdzv-agent librdzvworker0 librdzvworker-dev python3-rdzv; do
	f=$(ls "$T"/${p}_*.deb 2>/dev/null) || fail "no $p package"
	echo "#   $(basename "$f"): $(stat -c %s "$f") bytes"
done
changes=$(ls "$T"/rdzv_*.changes) || fail "no .changes"

# lintian: errors fail; warnings, notes and the rest are listed.
lintian -I -E --pedantic "$changes" >"$T/lintian.log" 2>&1
grep -v '^running with root privileges' "$T/lintian.log" | sed 's/^/# lintian: /'
grep -q '^E: ' "$T/lintian.log" && fail "lintian errors"

unshare -m --propagation private bash "$0" --ns "$T" || exit 1
echo "PASS"
