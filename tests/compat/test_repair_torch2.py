# SPDX-License-Identifier: Apache-2.0
"""test_repair_torch2: test_repair_torch's sections on torch 2.13 (gloo):
the survivors of a SIGKILL keep their processes and step on in a group of
3, the replacement joins with the donor's state, every rank ends with the
same parameters and the failure-free run's accuracy."""

import compatlib as cl

cl.use_torch2()

import test_repair_torch  # noqa: E402  (after the re-exec under torch 2)

test_repair_torch.main(torch2=True)
