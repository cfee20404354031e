#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# python_style.sh: rdzv's Python (the package, tests, examples, bench,
# scripts) passes `ruff check` with the tree's ruff.toml: four-space
# indentation, nothing pyflakes finds.  ruff comes with the torch 2.13
# virtualenv (scripts/deps.sh); without it the check fails under
# scripts/test.sh (RDZV_REQUIRE_TORCH=1) and skips, saying so, elsewhere.
set -uo pipefail

S=${RDZV_TOP_SRCDIR:?run from make check}
PY=${TORCH2_PYTHON:-python3}
cd "$S" || exit 1
if ! "$PY" -m ruff --version >/dev/null 2>&1; then
	if [ "${RDZV_REQUIRE_TORCH:-}" = 1 ]; then
		echo "FAIL: ruff not importable by $PY (scripts/deps.sh installs it)"
		exit 1
	fi
	echo "SKIP: ruff not importable by $PY (scripts/deps.sh installs it)"
	exit 77
fi
if git rev-parse --git-dir >/dev/null 2>&1; then
	mapfile -t files < <(git ls-files '*.py')
else
	mapfile -t files < <(find . -name '*.py' -not -path './build*')
fi
echo "# $("$PY" -m ruff --version), ${#files[@]} files"
"$PY" -m ruff check --no-cache --config ruff.toml "${files[@]}" || exit 1
echo "PASS"
