/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_tcps113.c: libFuzzer target for the TCPStore 1.13 request decoder
 * (tcps_decode), with tcps_sniff and the list iterator; see tcps_fuzz.h.
 */
#include "config.h"

#include "tcps_fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_tcps(TCPS_V113, data, size);
	return (0);
}
