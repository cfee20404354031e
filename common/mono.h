/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mono.h: the monotonic clock (CLOCK_MONOTONIC) that every deadline,
 * timeout and duration in rdzv is measured on.  Never the wall clock:
 * it does not step when NTP or an operator sets the time.
 */
#ifndef RDZV_MONO_H
#define RDZV_MONO_H

#include <stdint.h>

int64_t	mono_ns(void);		/* nanoseconds since an arbitrary start */
int64_t	mono_us(void);		/* microseconds, the same start */
int64_t	mono_ms(void);		/* milliseconds, the same start */

#endif /* RDZV_MONO_H */
