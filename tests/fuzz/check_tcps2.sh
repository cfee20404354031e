#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# make check: runs fuzz_tcps2 over a copy of its seed corpus for
# RDZV_FUZZ_SECONDS (default 20); fails on any crash.
exec bash "${RDZV_TOP_SRCDIR:-$(dirname "$0")/../..}/tests/fuzz/run-fuzzer.sh" \
    fuzz_tcps2 "${RDZV_FUZZ_SECONDS:-20}"
