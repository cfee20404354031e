/* SPDX-License-Identifier: Apache-2.0 */
/*
 * errnums.c: holds the error codes of the public header (rdzv_worker.h,
 * which cannot include anything of rdzv's) equal to common/rdzv_err.h's,
 * the ones that travel on the wire: the build fails when they drift.
 * Nothing here is compiled into code.
 *
 * Both headers guard their enum with RDZV_ERR_H, so one translation unit
 * sees one of them.  common's is read at file scope, its numbers copied
 * under other names; the public header is then read again inside a
 * function, where its enum's constants shadow common's, and each is
 * compared with the copy.  A code appended to common/rdzv_err.h moves
 * RDZV_ERR_MIN and fails the count below until it is listed here, and
 * listing it fails until rdzv_worker.h has it too.
 */
#include "config.h"

#include "rdzv_err.h"

#define ERRNUMS(X)							\
	X(OK) X(EINVAL) X(EPROTO) X(ETOOBIG) X(ENOTFOUND) X(ETIMEDOUT)	\
	X(ECANCELED) X(ENOMEM) X(EIO) X(ECONN) X(EAUTH) X(ECLOSED)	\
	X(EEXIST) X(ENOTINT) X(EBUSY) X(EVERSION) X(ETLS) X(EREPAIR)

#define ERRNUMS_COPY(e)		common_##e = RDZV_##e,
#define ERRNUMS_COUNT(e)	+ 1
#define ERRNUMS_SAME(e)							\
	_Static_assert((int)RDZV_##e == (int)common_##e, "RDZV_" #e " differs "	\
	    "between common/rdzv_err.h and libworker/rdzv_worker.h");

enum errnums_common {
	ERRNUMS(ERRNUMS_COPY)
	common_ERR_MIN = RDZV_ERR_MIN
};

_Static_assert(-common_ERR_MIN + 1 == 0 ERRNUMS(ERRNUMS_COUNT),
    "common/rdzv_err.h has a code errnums.c does not list");

static void __attribute__((unused))
errnums_same(void)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"	/* the point of it */
#undef RDZV_ERR_H
#undef RDZV_WORKER_H
#include "rdzv_worker.h"
#pragma GCC diagnostic pop
	ERRNUMS(ERRNUMS_SAME)
	_Static_assert((int)RDZV_ERR_MIN == (int)common_ERR_MIN,
	    "RDZV_ERR_MIN differs between the two headers");
}
