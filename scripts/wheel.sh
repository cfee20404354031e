#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# wheel.sh: builds `pip install`'s rdzv wheel from this tree.
#
#   scripts/wheel.sh [OUTDIR [CONFIGURE-OPTION...]]     (OUTDIR: ./dist)
#
# CONFIGURE-OPTIONs go to ./configure: --with-cuda=DIR, --with-nccl=DIR
# (their headers; librdzvworker loads CUDA's and NCCL's libraries when
# run, see doc/gpu.md, so the wheel carries neither).
# The wheel holds rdzv-agent, rdzvd and rdzvctl (installed into the
# environment's bin/), the rdzv python package, librdzvworker with
# rdzv_worker.h and rdzvworker.pc (lib/, include/, lib/pkgconfig/, for C
# programs), the man pages, and every shared library these need that the
# manylinux policy does not promise on the target (lib/rdzv/, found
# through an $ORIGIN rpath: no LD_LIBRARY_PATH).  Its tag is
# py3-none-manylinux_2_N_ARCH, N the newest glibc symbol version any of
# its files uses; the script fails if a file needs a library it neither
# carries nor may expect.
#
# The tree is configured and built afresh in a directory of its own
# (RDZV_WHEEL_WORK, default a temporary one, removed at the end; one
# given is configured once, then only rebuilt), with the system paths
# the .deb uses for rdzvd's defaults (/etc/rdzv, /var/lib/rdzv): from a
# wheel, rdzvd is given --db and --config.  Needs
# the build dependencies (scripts/deps.sh), readelf and a python 3
# (PYTHON, default python3); no network, no root.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$PWD/dist}
[ $# -eq 0 ] || shift
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
[ -x "$SRC/configure" ] || {
	echo "wheel.sh: no $SRC/configure: run autoreconf -fi first" >&2
	exit 1
}
if [ -n "${RDZV_WHEEL_WORK:-}" ]; then
	W=$RDZV_WHEEL_WORK
	mkdir -p "$W"
else
	W=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-wheel-XXXXXX")
	trap 'rm -rf "$W"' EXIT
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# ---- build and stage ----
# DT_RPATH (not RUNPATH): it also serves the bundled libraries' own
# dependencies.  bin/ and lib/ are siblings, so one rpath serves both the
# programs and librdzvworker.
mkdir -p "$W/build"
(
	cd "$W/build"
	[ -f Makefile ] || "$SRC/configure" -q --prefix=/usr/local \
	    --sysconfdir=/etc --localstatedir=/var \
	    --with-systemdsystemunitdir=no --disable-dependency-tracking "$@"
	# On both: a source touched meanwhile is relinked by the install.
	rpath='-Wl,--disable-new-dtags -Wl,-rpath,\$$ORIGIN/../lib/rdzv'
	make -s -j"$JOBS" LDFLAGS="$rpath"
	rm -rf "$W/stage"
	make -s install-strip LDFLAGS="$rpath" DESTDIR="$W/stage" \
	    >/dev/null 2>"$W/install.err" ||
		{ cat "$W/install.err" >&2; exit 1; }
)
version=$(sed -n 's/^PACKAGE_VERSION = //p' "$W/build/Makefile")
S=$W/stage/usr/local
T=$W/tree
D=$T/rdzv-$version.data/data
rm -rf "$T"
mkdir -p "$T/rdzv" "$D/bin" "$D/lib/rdzv" "$D/lib/pkgconfig" "$D/include" \
    "$D/share/man/man1" "$D/share/man/man8" "$D/share/rdzv"

cp "$SRC"/python/rdzv/*.py "$T/rdzv/"
cp "$S/bin/rdzv-agent" "$S/bin/rdzvctl" "$S/sbin/rdzvd" "$D/bin/"
so=$(cd "$S/lib" && ls librdzvworker.so.*.*.*)
soname=$(readelf -d "$S/lib/$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
cp "$S/lib/$so" "$D/lib/$soname"
# A zip holds no symbolic links: the name the linker looks for
# (-lrdzvworker) is a linker script naming the real one, as libc.so is.
echo "INPUT($soname)" > "$D/lib/librdzvworker.so"
cp "$S/include/rdzv_worker.h" "$D/include/"
# The pkg-config file is found wherever pip puts it: its prefix is the
# environment's, two levels above it.
sed -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' \
    -e 's|^exec_prefix=.*|exec_prefix=${prefix}|' \
    -e 's|^libdir=.*|libdir=${prefix}/lib|' \
    -e 's|^includedir=.*|includedir=${prefix}/include|' \
    "$S/lib/pkgconfig/rdzvworker.pc" > "$D/lib/pkgconfig/rdzvworker.pc"
cp "$S"/share/man/man1/*.1 "$D/share/man/man1/"
cp "$S"/share/man/man8/*.8 "$D/share/man/man8/"
cp "$W"/stage/etc/rdzv/*.conf "$D/share/rdzv/"

for f in "$D"/bin/* "$D/lib/$soname"; do
	readelf -d "$f" | grep -q 'RPATH.*\[\$ORIGIN/\.\./lib/rdzv\]' || {
		echo "wheel.sh: $f has no rpath \$ORIGIN/../lib/rdzv" >&2; exit 1; }
done

# ---- the libraries they need ----
# The manylinux policy's libraries (PEP 600: glibc's, libgcc_s,
# libstdc++, libz, ...) are the target's own; every other one is carried.
allowed=' libc.so.6 libm.so.6 libmvec.so.1 libdl.so.2 librt.so.1
 libpthread.so.0 libresolv.so.2 libnsl.so.1 libutil.so.1 libanl.so.1
 libgcc_s.so.1 libstdc++.so.6 libatomic.so.1 libz.so.1 libexpat.so.1
 ld-linux-x86-64.so.2 ld-linux-aarch64.so.1 linux-vdso.so.1 '
elfs="$D/bin/rdzv-agent $D/bin/rdzvd $D/bin/rdzvctl $D/lib/$soname"
for f in $elfs; do
	ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }
	    $2 == "=>" && $3 == "not" { print $1, "missing" }'
done | sort -u | while read -r name path; do
	case "$allowed" in *" $name "*) continue ;; esac
	[ "$path" != missing ] || { echo "wheel.sh: $name not found" >&2; exit 1; }
	cp -L "$path" "$D/lib/rdzv/$name"
	chmod 0644 "$D/lib/rdzv/$name"
done

# Every file's needs, now from the wheel's own directories: each NEEDED
# is carried or allowed, and the newest GLIBC_ version names the tag.
glibc=0
for f in $elfs "$D"/lib/rdzv/*; do
	for n in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		case "$allowed" in *" $n "*) continue ;; esac
		[ -f "$D/lib/rdzv/$n" ] || {
			echo "wheel.sh: $f needs $n, not carried" >&2; exit 1; }
	done
	v=$(readelf -V "$f" | grep -o 'GLIBC_2\.[0-9]*' | sed 's/GLIBC_2\.//' |
	    sort -n | tail -n 1)
	[ -z "$v" ] || [ "$v" -le "$glibc" ] || glibc=$v
done
arch=$(uname -m)
tag=py3-none-manylinux_2_${glibc}_$arch

# ---- the wheel ----
"$PYTHON" - "$SRC" "$T" "$OUT" "$version" "$tag" <<'EOF'
import base64
import hashlib
import os
import sys
import zipfile

src, tree, out, version, tag = sys.argv[1:]
dist = "rdzv-%s.dist-info" % version
os.makedirs(os.path.join(tree, dist, "licenses"), exist_ok=True)
meta = {
    "METADATA": """Metadata-Version: 2.1
Name: rdzv
Version: %s
Summary: Elastic launcher for distributed PyTorch training: rdzv-agent, rdzvd, rdzvctl, librdzvworker and the rdzv package
License: Apache-2.0
Classifier: License :: OSI Approved :: Apache Software License
Classifier: Operating System :: POSIX :: Linux
Requires-Python: >=3.7
License-File: LICENSE

rdzv-agent (a torchrun in C, with in-place repair), rdzvd (the
rendezvous daemon), rdzvctl, librdzvworker for C programs and the rdzv
python package (rdzv.repair, torchrun's rdzv backend).  torch is the
program's own: not a dependency.
""" % version,
    "WHEEL": "Wheel-Version: 1.0\nGenerator: rdzv scripts/wheel.sh\n"
             "Root-Is-Purelib: false\nTag: %s\n" % tag,
    "entry_points.txt": "[torchrun.handlers]\n"
                        "rdzv = rdzv.torchrun:handler_creator\n",
    "top_level.txt": "rdzv\n",
}
for name, text in meta.items():
    with open(os.path.join(tree, dist, name), "w") as f:
        f.write(text)
with open(os.path.join(src, "LICENSE"), "rb") as f:
    lic = f.read()
with open(os.path.join(tree, dist, "licenses", "LICENSE"), "wb") as f:
    f.write(lic)

files = []
for root, dirs, names in os.walk(tree):
    dirs.sort()
    for n in sorted(names):
        if n.endswith(".pyc"):
            continue
        p = os.path.join(root, n)
        files.append(os.path.relpath(p, tree))
record = dist + "/RECORD"
files = [f for f in files if f != record]
# The dist-info last, as pip writes them.
files.sort(key=lambda f: (f.startswith(dist), f))
path = os.path.join(out, "rdzv-%s-%s.whl" % (version, tag))
rows = []
with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
    for rel in files:
        p = os.path.join(tree, rel)
        with open(p, "rb") as f:
            data = f.read()
        zi = zipfile.ZipInfo(rel, date_time=(2020, 1, 1, 0, 0, 0))
        zi.compress_type = zipfile.ZIP_DEFLATED
        mode = 0o755 if os.access(p, os.X_OK) and "/bin/" in rel else 0o644
        zi.external_attr = (0o100000 | mode) << 16
        z.writestr(zi, data)
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
        rows.append("%s,sha256=%s,%d" % (rel, h.rstrip(b"=").decode(),
                                         len(data)))
    rows.append(record + ",,")
    zi = zipfile.ZipInfo(record, date_time=(2020, 1, 1, 0, 0, 0))
    zi.compress_type = zipfile.ZIP_DEFLATED
    zi.external_attr = (0o100644) << 16
    z.writestr(zi, "\n".join(rows) + "\n")
os.replace(path + ".tmp", path)
print(path)
EOF
