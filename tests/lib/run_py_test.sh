#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_py_test.sh FILE.py [ARGS]: how `make check` runs a Python test file
# (the Makefile's PY_LOG_COMPILER): with $TORCH_PYTHON.  rdzvtest.main()
# writes its summary ("# N passed, N failed, N skipped") to the file
# named by RDZV_TEST_SUMMARY_FILE as it ends; a file that exits 0 without
# having done so ended before its tests did (an os._exit(0) under it, in
# code it ran in-process): that is a failure, not a pass.
sum=$(mktemp "${TMPDIR:-/tmp}/rdzv-summary.XXXXXX") || exit 99
export RDZV_TEST_SUMMARY_FILE=$sum
"${TORCH_PYTHON:-python3}" "$@"
rc=$?
if [ "$rc" -eq 0 ] && [ ! -s "$sum" ]; then
	echo "FAIL: $1 exited 0 without its summary line (\"# N passed, ...\"):" \
	    "it ended before its tests did"
	rc=1
fi
rm -f "$sum"
exit "$rc"
