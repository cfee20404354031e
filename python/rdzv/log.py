# SPDX-License-Identifier: Apache-2.0
"""rdzv.log: the helper's lines on stderr, each "rdzv.repair[PID]: ...".

info: one line an operator wants (one per repair); warn: something went
wrong; debug: only with RDZV_REPAIR_DEBUG=1 in the environment, which
also turns on stall(): a step or a repair that holds for STALL_S seconds
dumps every thread's Python stack to stderr (where a hang waits).
"""

import faulthandler
import os
import sys

STALL_S = 20.0		# seconds a state may hold before stall() dumps


def _line(fmt, a):
    print("rdzv.repair[%d]: %s" % (os.getpid(), fmt % a), file=sys.stderr,
        flush=True)


def _debugging():
    return os.environ.get("RDZV_REPAIR_DEBUG", "0") not in ("", "0")


def debug(fmt, *a):
    if _debugging():
        _line(fmt, a)


def stall(watch):
    """With RDZV_REPAIR_DEBUG=1: watch True (a step or a repair began)
    dumps every thread's stack to stderr unless the next stall() comes
    within STALL_S seconds; False cancels.  faulthandler's one timer,
    so a script's own dump_traceback_later() is replaced while
    debugging.  Never in a forked child (a DataLoader worker): the
    timer's thread is not there, and arming or cancelling waits for it
    for ever."""
    if not _debugging():
        return
    if watch:
        faulthandler.dump_traceback_later(STALL_S, file=sys.stderr)
    else:
        faulthandler.cancel_dump_traceback_later()


def info(fmt, *a):
    _line(fmt, a)


warn = info
