/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hs_nonce.h: the client nonce the handshake tests and fuzzer fix, so
 * that rdzvd's right answer can be written beforehand (test_handshake.c,
 * fuzz_handshake.c, and tests/fuzz/make-corpus.py, which knows it too).
 */
#ifndef HS_NONCE_H
#define HS_NONCE_H

#include <stddef.h>
#include <stdint.h>

/* A handshake's random source: byte i is i * 7 + 1; never fails. */
static inline int
hs_fixed_random(void *buf, size_t n)
{
	uint8_t	*p = buf;
	size_t	 i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7 + 1);
	return (0);
}

#endif /* HS_NONCE_H */
