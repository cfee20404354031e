#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# install_layout.sh: `make install DESTDIR=...` puts every file where the
# configured prefix says, the installed programs run, a program builds
# against the installed library through its pkg-config file, the units
# point at the installed programs, the python helper (rdzv.repair) imports
# from where it was installed and from a `pip install` of python/, the
# man pages, configuration files and `rdzvd --help` name the configured
# paths, rdzvd's state directory exists, a second `make install` keeps an
# edited configuration file, and `make uninstall` takes the rest away.
set -euo pipefail

B=${RDZV_TOP_BUILDDIR:?run from make check}
MAKE=${MAKE:-make}
D=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-install-XXXXXX")
trap 'rm -rf "$D" "$D.err"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A make run of our own in the build tree, not the caller's job server.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "$MAKE" -s -C "$B" "$@"; }
# A Makefile variable, fully expanded.
var() {
	printf 'print-%%:\n\t@echo $($*)\n' |
	    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "$MAKE" -s -C "$B" \
	    --no-print-directory -f Makefile -f - "print-$1" | tail -n 1
}

prefix=$(var prefix)
bindir=$(var bindir)
sbindir=$(var sbindir)
libdir=$(var libdir)
includedir=$(var includedir)
mandir=$(var mandir)
sysconfdir=$(var sysconfdir)
localstatedir=$(var localstatedir)
unitdir=$(var systemdsystemunitdir)
pythondir=$(var pythondir)
PYTHON=$(var PYTHON)
echo "# prefix $prefix, units in ${unitdir:-(none)}"

# make install's own status decides; its stderr is shown but for
# libtool's advice to run --finish (a staged install needs none).
mk install DESTDIR="$D" >/dev/null 2>"$D.err" || {
	cat "$D.err"; fail "make install"; }
grep -v "libtool --finish" "$D.err" >&2 || :

check_file() {
	[ -f "$D$1" ] || fail "$1 not installed"
}
check_exec() {
	[ -x "$D$1" ] && [ ! -d "$D$1" ] || fail "$1 not installed executable"
	# The real program, not a libtool wrapper script.
	head -c 4 "$D$1" | grep -q $'\x7fELF' || fail "$1 is not an ELF binary"
}

check_exec "$sbindir/rdzvd"
check_exec "$bindir/rdzv-agent"
check_exec "$bindir/rdzvctl"
check_file "$includedir/rdzv_worker.h"
check_file "$libdir/pkgconfig/rdzvworker.pc"
ls "$D$libdir"/librdzvworker.so.* >/dev/null 2>&1 ||
	fail "librdzvworker.so.N not in $libdir"
[ -L "$D$libdir/librdzvworker.so" ] || fail "librdzvworker.so link missing"
[ ! -e "$D$libdir/librdzvworker.a" ] || fail "static library installed"
for p in man8/rdzvd.8 man1/rdzv-agent.1 man1/rdzvctl.1; do
	check_file "$mandir/$p"
done
check_file "$sysconfdir/rdzv/rdzvd.conf"
check_file "$sysconfdir/rdzv/agent.conf"
check_file "$sysconfdir/rdzv/rdzvd-etcd.conf"
# rdzvd's default database is in a directory make install made.
[ -d "$D$localstatedir/lib/rdzv" ] || fail "$localstatedir/lib/rdzv not created"

# The pages, the configuration files and --help name the paths this build
# was configured with: they name them, and every /etc/rdzv/... and
# rdzvd.db path they name is one of them.
conf_path="$sysconfdir/rdzv/rdzvd.conf"
db_path="$localstatedir/lib/rdzv/rdzvd.db"
paths_agree() {
	local name=$1 text=$2 p rest
	shift 2
	for p in "$@"; do
		case $text in *"$p"*) ;; *) fail "$name does not name $p" ;; esac
	done
	rest=$(printf '%s\n' "$text" |
	    sed -e "s|$sysconfdir/rdzv/||g" -e "s|$db_path||g")
	if printf '%s\n' "$rest" | grep -nE '/etc/rdzv/|/lib/rdzv/rdzvd\.db' >&2; then
		fail "$name names a path this build was not configured with (above)"
	fi
}
paths_agree rdzvd.8 "$(cat "$D$mandir/man8/rdzvd.8")" "$conf_path" "$db_path"
paths_agree rdzv-agent.1 "$(cat "$D$mandir/man1/rdzv-agent.1")" \
    "$sysconfdir/rdzv/agent.conf"
paths_agree rdzvctl.1 "$(cat "$D$mandir/man1/rdzvctl.1")"
paths_agree rdzvd.conf "$(cat "$D$conf_path")" "$conf_path" "#db = $db_path"
paths_agree agent.conf "$(cat "$D$sysconfdir/rdzv/agent.conf")" \
    "$sysconfdir/rdzv/agent.conf"
paths_agree rdzvd-etcd.conf "$(cat "$D$sysconfdir/rdzv/rdzvd-etcd.conf")" \
    "$sysconfdir/rdzv/rdzvd-etcd.conf"
paths_agree "rdzvd --help" "$("$D$sbindir/rdzvd" --help 2>&1)" "$conf_path" \
    "$db_path"
# A database where no directory is: rdzvd says which directory is missing.
rc=0
got=$("$D$sbindir/rdzvd" -d --listen 127.0.0.1:0 --http off \
    --db "$D/none/rdzvd.db" 2>&1) || rc=$?
case "$rc:$got" in
1:*"directory $D/none does not exist"*) ;;
*) fail "rdzvd --db in a missing directory: $rc: $got" ;;
esac
# The three-host layout's drop-in: documentation, not an active drop-in.
docdir=$(var docdir)
check_file "$docdir/examples/rdzvd-etcd.conf"
grep -q "^ExecStart=$sbindir/rdzvd --config $sysconfdir/rdzv/rdzvd-etcd.conf$" \
    "$D$docdir/examples/rdzvd-etcd.conf" || fail "rdzvd-etcd.conf ExecStart"
[ -z "$unitdir" ] || [ ! -e "$D$unitdir/rdzvd.service.d" ] ||
	fail "a drop-in installed for rdzvd.service"
# Nothing of the build's own (libcommon, test programs) is installed.
extra=$(cd "$D" && find . -type f |
    grep -E 'libcommon|libkv|librz|librdzvstate|librdzvd|worker_check|storeload|ddp_mlp' || true)
[ -z "$extra" ] || fail "installed but internal: $extra"

# The programs run from where they were installed.
"$D$bindir/rdzvctl" --version | grep -q '^rdzvctl ' || fail "rdzvctl --version"
"$D$sbindir/rdzvd" --version >/dev/null || fail "rdzvd --version"
"$D$bindir/rdzv-agent" --version >/dev/null || fail "rdzv-agent --version"

# The units name the installed programs and configuration.
if [ -n "$unitdir" ]; then
	check_file "$unitdir/rdzvd.service"
	check_file "$unitdir/rdzv-agent@.service"
	grep -q "^ExecStart=$sbindir/rdzvd --config $sysconfdir/rdzv/rdzvd.conf " \
	    "$D$unitdir/rdzvd.service" || fail "rdzvd.service ExecStart"
	grep -q "^ExecStart=$bindir/rdzv-agent " "$D$unitdir/rdzv-agent@.service" ||
	    fail "rdzv-agent@.service ExecStart"
	grep -q "^EnvironmentFile=$sysconfdir/rdzv/agent-%i.conf$" \
	    "$D$unitdir/rdzv-agent@.service" || fail "agent EnvironmentFile"
fi

# A program built against the installed header and library.
grep -q "^prefix=$prefix\$" "$D$libdir/pkgconfig/rdzvworker.pc" ||
	fail "rdzvworker.pc prefix"
cat > "$D/use.c" <<'EOF'
#include <stdio.h>
#include <rdzv_worker.h>
int
main(void)
{
	puts(rdzv_strerror(-4));
	return 0;
}
EOF
flags=$(PKG_CONFIG_PATH="$D$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D" \
    pkg-config --cflags --libs rdzvworker) || fail "pkg-config rdzvworker"
# With the build's compiler and flags: a sanitizer build's library needs
# its runtime in the program too.
$(var CC) $(var CFLAGS) $(var LDFLAGS) -o "$D/use" "$D/use.c" $flags ||
	fail "cannot build against it"
out=$(LD_LIBRARY_PATH="$D$libdir" "$D/use") || fail "cannot run it"
[ -n "$out" ] || fail "rdzv_strerror said nothing"
rm -f "$D/use" "$D/use.c"

# The torch programs' helper, in the python's site directory; it imports
# there (torch itself is only needed once a job uses it).
if [ -n "$pythondir" ]; then
	check_file "$pythondir/rdzv/__init__.py"
	check_file "$pythondir/rdzv/repair.py"
	check_file "$pythondir/rdzv/spare.py"
	# rdzv-agent's warm spare is python -m rdzv.spare: it runs from
	# there and, started by hand, says what starts it and exits 2.
	rc=0
	got=$(cd / && PYTHONPATH="$D$pythondir" "$PYTHON" -m rdzv.spare 2>&1) ||
		rc=$?
	case "$rc:$got" in
	"2:rdzv.spare: rdzv-agent starts this"*) ;;
	*) fail "python -m rdzv.spare from $pythondir: $rc: $got" ;;
	esac
	got=$(cd / && PYTHONPATH="$D$pythondir" "$PYTHON" -c '
from rdzv import repair
r = repair.parse_round("round round=3 kind=grow ns=job/x/round/3 rank=1 "
    "world=4 donor=0 master_addr=h master_port=29500 local_rank=1 "
    "local_world=2 future=1")
print(repair.__file__, r.rank, r.world, r.kind)') ||
		fail "rdzv.repair does not import from $pythondir"
	case "$got" in
	"$D$pythondir/rdzv/repair.py 1 4 grow") ;;
	*) fail "rdzv.repair from the wrong place or wrong: $got" ;;
	esac
	# pip, from the tree's pyproject.toml (offline: no build isolation),
	# with the first of these pythons that has pip and setuptools.
	pip_py=
	for p in "$PYTHON" "${TORCH2_PYTHON:-}"; do
		if [ -n "$p" ] && "$p" -c 'import setuptools, pip' 2>/dev/null; then
			pip_py=$p
			break
		fi
	done
	if [ -n "$pip_py" ]; then
		cp -r "${RDZV_TOP_SRCDIR:?}/python" "$D/pysrc"
		"$pip_py" -m pip install -q --no-build-isolation --no-deps \
		    --no-index --target "$D/pip" "$D/pysrc" >"$D/pip.log" 2>&1 ||
			fail "pip install ./python: $(tail -5 "$D/pip.log")"
		got=$(cd / && PYTHONPATH="$D/pip" "$pip_py" -c \
		    'from rdzv import repair; print(repair.__file__)')
		[ "$got" = "$D/pip/rdzv/repair.py" ] ||
			fail "pip's rdzv.repair: $got"
		rm -rf "$D/pip" "$D/pip.log"
		# The README's one command, in a fresh virtualenv: its own pip
		# (offline, so setuptools and wheel come from the system's).
		if "$pip_py" -m venv --system-site-packages "$D/venv" \
		    >"$D/venv.log" 2>&1; then
			"$D/venv/bin/python" -m pip install -q --no-build-isolation \
			    --no-deps --no-index "$D/pysrc" >>"$D/venv.log" 2>&1 ||
				fail "pip install ./python in a virtualenv: $(tail -5 "$D/venv.log")"
			got=$(cd / && "$D/venv/bin/python" -c \
			    'from rdzv import repair; print(repair.__file__)')
			case "$got" in
			"$D"/venv/lib/python*/site-packages/rdzv/repair.py) ;;
			*) fail "the virtualenv's rdzv.repair: $got" ;;
			esac
		else
			echo "# $pip_py cannot make a virtualenv (python3-venv): the" \
			    "virtualenv install not tried"
		fi
		rm -rf "$D/venv" "$D/venv.log" "$D/pysrc"
	else
		echo "# no python with pip and setuptools: pip install ./python not tried"
	fi
fi

# make install again (an upgrade) keeps an edited rdzvd.conf and puts the
# new one beside it; an unchanged agent.conf is simply replaced.
conf=$D$conf_path
cmp -s "$conf" "$B/etc/configured/rdzvd.conf" ||
	fail "the installed rdzvd.conf is not the built one"
echo "log-level = debug  # edited here" >>"$conf"
mk install DESTDIR="$D" >/dev/null 2>"$D.err" || {
	cat "$D.err"; fail "a second make install"; }
grep -q "# edited here" "$conf" ||
	fail "a second make install overwrote the edited rdzvd.conf"
cmp -s "$conf.new" "$B/etc/configured/rdzvd.conf" ||
	fail "the new rdzvd.conf is not installed as rdzvd.conf.new"
[ ! -e "$D$sysconfdir/rdzv/agent.conf.new" ] ||
	fail "agent.conf.new beside an unchanged agent.conf"

# Uninstall leaves no file behind but the edited configuration.
mk uninstall DESTDIR="$D" >/dev/null
left=$(cd "$D" && find . -type f -o -type l)
[ "$left" = ".$conf_path" ] ||
	fail "after make uninstall, not just the edited rdzvd.conf: $left"
grep -q "# edited here" "$conf" || fail "make uninstall changed the edited rdzvd.conf"
echo "ok install_layout"
