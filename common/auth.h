/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.h: the credentials of the native protocol's challenge-response
 * (common/PROTOCOL.md "Authentication"; the MAC itself is in wire.h):
 * the operator's secret ("token", rdzvd's --token-file) and the job
 * credentials derived from it, one per job id, which a job's agents and
 * workers hold instead (doc/security.md).  A token file holds either;
 * a job credential's says so on its first line.
 */
#ifndef RDZV_AUTH_H
#define RDZV_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define RDZV_TOKEN_MAX	4096	/* bytes in a token file */

/* A job credential file's first line, and the derivation's label. */
#define RDZV_CRED_HEADER	"rdzv job credential v1"
#define RDZV_CRED_KEY_LEN	32	/* HMAC-SHA256 */
#define RDZV_CRED_JOB_MAX	256	/* bytes in a job id (RZ_ID_MAX) */
/* A job credential file's size at most (header, job, hex key). */
#define RDZV_CRED_FILE_MAX	(sizeof RDZV_CRED_HEADER + 5 + \
	RDZV_CRED_JOB_MAX + 5 + 2 * RDZV_CRED_KEY_LEN + 1)

/* A job credential: the job it speaks for and its key. */
struct rdzv_cred {
	char		job[RDZV_CRED_JOB_MAX + 1];
	size_t		joblen;
	uint8_t		key[RDZV_CRED_KEY_LEN];
};

/*
 * Reads the token in path: its bytes, one trailing newline dropped.
 * Returns 0 with *tok (malloc'ed) and *len, or a negative RDZV_E* with a
 * reason in why (size whysz): missing, unreadable, empty or too long.
 * *insecure is set when the file is readable by group or others.
 */
int	rdzv_token_load(const char *path, uint8_t **tok, size_t *len,
	    int *insecure, char *why, size_t whysz);

/*
 * Whether job (len bytes) is a valid job id: 1 to RDZV_CRED_JOB_MAX
 * printable characters, no space (rdzvd's own rule for ids).
 */
int	rdzv_cred_job_ok(const void *job, size_t len);

/*
 * Derives job's credential key from the operator's secret:
 * HMAC-SHA256(secret, RDZV_CRED_HEADER "\0" job).  One-way: a key says
 * nothing of the secret or of another job's key.  Returns 0, or -1 when
 * the id is not valid or OpenSSL fails.
 */
int	rdzv_cred_derive(const void *secret, size_t secretlen,
	    const void *job, size_t joblen, uint8_t key[RDZV_CRED_KEY_LEN]);

/*
 * Tells what a token file's bytes are: 0 the operator's secret (no
 * RDZV_CRED_HEADER line), 1 a job credential (cred filled in), or
 * RDZV_EINVAL, with a reason in why, when the header is there but the
 * rest is not "job ID" and "key HEX" (64 hex digits), one per line.
 */
int	rdzv_cred_parse(const uint8_t *tok, size_t len,
	    struct rdzv_cred *cred, char *why, size_t whysz);

/*
 * Writes a job credential file's text (header, job, key; a newline after
 * each) into buf; returns its length, or -1 when it does not fit.
 */
int	rdzv_cred_format(const struct rdzv_cred *cred, char *buf,
	    size_t bufsz);

/* Fills buf with n cryptographically random bytes; 0 or -1. */
int	rdzv_random(void *buf, size_t n);

#endif /* RDZV_AUTH_H */
