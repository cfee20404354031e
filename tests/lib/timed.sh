#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# timed.sh CMD [ARGS]: how `make check` runs every test: CMD as it is,
# its exit status kept (77 skip, 99 hard error), and then one more line
# in its log, "# elapsed S.mmm s", which scripts/test.sh gathers into the
# suite's per-test times.
start=$(date +%s%N)
"$@"
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
printf '# elapsed %d.%03d s\n' $((ms / 1000)) $((ms % 1000))
exit "$rc"
