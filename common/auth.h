/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.h: the shared secret ("token") that rdzvd, rdzv-agent, rdzvctl
 * and librdzvworker use for the native protocol's challenge-response
 * (common/PROTOCOL.md "Authentication"; the MAC itself is in wire.h).
 */
#ifndef RDZV_AUTH_H
#define RDZV_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define RDZV_TOKEN_MAX	4096	/* bytes in a token file */

/*
 * Reads the token in path: its bytes, one trailing newline dropped.
 * Returns 0 with *tok (malloc'ed) and *len, or a negative RDZV_E* with a
 * reason in why (size whysz): missing, unreadable, empty or too long.
 * *insecure is set when the file is readable by group or others.
 */
int	rdzv_token_load(const char *path, uint8_t **tok, size_t *len,
	    int *insecure, char *why, size_t whysz);

/* Fills buf with n cryptographically random bytes; 0 or -1. */
int	rdzv_random(void *buf, size_t n);

#endif /* RDZV_AUTH_H */
