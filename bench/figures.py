# SPDX-License-Identifier: Apache-2.0
"""figures.py: a benchmark's samples, kept as {(key, figure): [values]}.

    add(figs, key, row)          each figure of row ({name: value}) to figs
    show(figs, key, label, row)  the same, then label, the row and (unless
                                 load=False) the load average on one line
    medians(figs, fmt)           a line per (key, figure), sorted:
                                 fmt % (key, figure, median, min, max, n)
"""

import os
import statistics


def add(figs, key, row):
    """Appends each value of row ({figure: value}) to figs[(key, figure)]."""
    for k, v in row.items():
        figs.setdefault((key, k), []).append(v)


def show(figs, key, label, row, digits=3, load=True):
    """add(), then prints label, each "figure value" of row (digits
    decimals) and, with load, the 1-minute load average, on one line."""
    add(figs, key, row)
    print(label + "  ".join("%s %.*f" % (k, digits, v)
                            for k, v in row.items()) +
          ("  load %.1f" % os.getloadavg()[0] if load else ""), flush=True)


def medians(figs, fmt):
    """Prints, for each (key, figure) of figs in order, fmt % (key, figure,
    median, min, max, number of samples)."""
    for (key, k), v in sorted(figs.items()):
        print(fmt % (key, k, statistics.median(v), min(v), max(v), len(v)))
