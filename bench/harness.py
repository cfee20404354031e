# SPDX-License-Identifier: Apache-2.0
"""harness.py: what the bench scripts that drive a build's rdzvd and
agents through the test helpers (tests/lib, tests/integ) share: the
import path, the build folder, the torch 2.13 python."""

import os
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH2_PYTHON = os.path.expanduser("~/.cache/rdzv/torch-2.13/bin/python")


def use_build(build):
    """Makes rdzvtest, agent_lib and the integration tests importable and
    points them at the build folder `build`; returns the source tree's
    top folder."""
    sys.path[:0] = [os.path.join(TOP, "tests", "lib"),
                    os.path.join(TOP, "tests", "integ")]
    os.environ["RDZV_TOP_BUILDDIR"] = os.path.abspath(build)
    return TOP
