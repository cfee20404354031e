# SPDX-License-Identifier: Apache-2.0
"""rdzv.log: the helper's lines on stderr, each "rdzv.repair[PID]: ...".

info: one line an operator wants (one per repair); warn: something went
wrong; debug: only with RDZV_REPAIR_DEBUG=1 in the environment.
"""

import os
import sys


def _line(fmt, a):
    print("rdzv.repair[%d]: %s" % (os.getpid(), fmt % a), file=sys.stderr,
        flush=True)


def debug(fmt, *a):
    if os.environ.get("RDZV_REPAIR_DEBUG", "0") not in ("", "0"):
        _line(fmt, a)


def info(fmt, *a):
    _line(fmt, a)


warn = info
