/* SPDX-License-Identifier: Apache-2.0 */
/* err.c: descriptions of the rdzv error codes. */
#include "config.h"

#include "rdzv_err.h"

const char *
rdzv_strerror(int code)
{
	switch (code) {
	case RDZV_OK:		return "success";
	case RDZV_EINVAL:	return "invalid argument";
	case RDZV_EPROTO:	return "protocol error";
	case RDZV_ETOOBIG:	return "over a configured limit";
	case RDZV_ENOTFOUND:	return "not found";
	case RDZV_ETIMEDOUT:	return "timed out";
	case RDZV_ECANCELED:	return "cancelled";
	case RDZV_ENOMEM:	return "out of memory";
	case RDZV_EIO:		return "I/O error";
	case RDZV_ECONN:	return "connection failed or closed";
	case RDZV_EAUTH:	return "authentication failed";
	case RDZV_ETLS:		return "TLS required, refused or failed";
	case RDZV_ECLOSED:	return "closed";
	case RDZV_EEXIST:	return "already exists";
	case RDZV_ENOTINT:	return "value is not an integer";
	case RDZV_EBUSY:	return "busy";
	case RDZV_EVERSION:	return "unsupported protocol version";
	case RDZV_EREPAIR:	return "cut off by a repair round";
	}
	return "unknown error";
}
