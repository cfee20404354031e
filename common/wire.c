/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.c: the pieces of wire.h shared by every protocol: byte slices and
 * the default decoding limits.
 */
#include "config.h"

#include <string.h>

#include "wire.h"

/* Returns s as a slice, without its NUL; NULL is the empty slice. */
struct slice
slice_str(const char *s)
{
	struct slice	sl;

	sl.p = (const uint8_t *)s;
	sl.len = s != NULL ? strlen(s) : 0;
	return (sl);
}

/* Returns 1 when a and b hold the same bytes, else 0. */
int
slice_eq(struct slice a, struct slice b)
{
	if (a.len != b.len)
		return (0);
	/* memcmp with a NULL pointer is undefined even for 0 bytes. */
	if (a.len == 0)
		return (1);
	return (memcmp(a.p, b.p, a.len) == 0);
}

/*
 * Fills lim with the limits of the newer reference TCPStore server (key
 * 8 KiB, value 8 MiB, 131072 keys per list) and a 1 KiB namespace.
 */
void
wire_limits_default(struct wire_limits *lim)
{
	lim->key_max = 8 * 1024;
	lim->value_max = 8 * 1024 * 1024;
	lim->keys_max = 131072;
	lim->ns_max = 1024;
}
