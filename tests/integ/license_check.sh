#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# license_check.sh: rdzv is Apache-2.0: LICENSE holds the license's text,
# every tracked source file carries the SPDX line, and the Python
# package's metadata says the same.  Data (the fuzz corpus), pictures,
# prose (*.md) and the linker's symbol list carry no line.
set -uo pipefail

S=${RDZV_TOP_SRCDIR:?run from make check}
cd "$S" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

grep -q "Apache License" LICENSE 2>/dev/null &&
	grep -q "Version 2.0, January 2004" LICENSE || fail "LICENSE is not Apache-2.0's text"
grep -q '^license = { text = "Apache-2.0" }' python/pyproject.toml ||
	fail "python/pyproject.toml does not say Apache-2.0"

if ! git -C "$S" rev-parse --git-dir >/dev/null 2>&1; then
	# A release tarball: the check belongs to the tree it was made from.
	echo "SKIP: $S is not a git checkout (the SPDX check walks git's file list)"
	exit 77
fi
missing=$(git ls-files | grep -vE '^debian/(changelog|copyright|source/format)$|^tests/fuzz/corpus/|\.(md|png|sym)$|^tests/fuzz/README$|^LICENSE$' |
	while read -r f; do
		head -n 3 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0' || echo "$f"
	done)
[ -z "$missing" ] || fail "no SPDX line in the first 3 lines of:
$missing"
echo "# $(git ls-files | wc -l) tracked files, every source file tagged Apache-2.0"
echo "PASS"
