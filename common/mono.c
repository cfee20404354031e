/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mono.c: readings of the monotonic clock (mono.h).
 */
#include "config.h"

#include <time.h>

#include "mono.h"

int64_t
mono_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
}

int64_t
mono_us(void)
{
	return (mono_ns() / 1000);
}

int64_t
mono_ms(void)
{
	return (mono_ns() / 1000000);
}
