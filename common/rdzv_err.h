/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rdzv_err.h: the error codes every part of rdzv returns.
 *
 * Fallible functions return 0 (or a positive count) on success and one of
 * these negative codes on failure.  The same numbers travel in native
 * protocol error replies, so they are part of the wire format: never
 * renumber, only append.
 */
#ifndef RDZV_ERR_H
#define RDZV_ERR_H

enum rdzv_err {
	RDZV_OK = 0,
	RDZV_EINVAL = -1,	/* bad argument or malformed value */
	RDZV_EPROTO = -2,	/* peer broke the protocol */
	RDZV_ETOOBIG = -3,	/* over a configured limit */
	RDZV_ENOTFOUND = -4,	/* key or object does not exist */
	RDZV_ETIMEDOUT = -5,	/* deadline passed */
	RDZV_ECANCELED = -6,	/* wait cancelled */
	RDZV_ENOMEM = -7,	/* allocation failed or memory budget spent */
	RDZV_EIO = -8,		/* I/O or database error */
	RDZV_ECONN = -9,	/* connection refused, reset or closed */
	RDZV_EAUTH = -10,	/* authentication failed */
	RDZV_ECLOSED = -11,	/* job or store closed */
	RDZV_EEXIST = -12,	/* already exists */
	RDZV_ENOTINT = -13,	/* stored value is not a decimal integer */
	RDZV_EBUSY = -14,	/* resource busy, try again */
	RDZV_EVERSION = -15,	/* unsupported protocol version */
	RDZV_ETLS = -16,	/* TLS required, refused or failed */
	RDZV_EREPAIR = -17,	/* cut off by a repair round: drop the step */
};

#define RDZV_ERR_MIN	RDZV_EREPAIR

/* Returns a constant, human-readable description of code (never NULL). */
const char	*rdzv_strerror(int code);

#endif /* RDZV_ERR_H */
