/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nccl_be.h: what the nccl backend's core (nccl.c: the communicator, its
 * lock and abort, staging, polling, set-up and tear-down), its
 * collectives (nccl_coll.c) and its sends and receives (nccl_p2p.c)
 * share.  nccl.c's header comment tells how the backend works.
 */
#ifndef RDZV_NCCL_BE_H
#define RDZV_NCCL_BE_H

#include <sys/queue.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "worker.h"
#include "gpulib.h"

/* A message sent to oneself, kept until its receive comes. */
struct nccl_self {
	void			*buf;	/* host copy */
	size_t			 len;
	TAILQ_ENTRY(nccl_self)	 entry;
};
TAILQ_HEAD(nccl_selfq, nccl_self);

/*
 * A staging pair: device memory and its pinned host twin.  Host buffers
 * go through pinned memory so that no copy ever blocks the calling thread
 * (a copy into pageable memory waits for the kernel before it, which a
 * dead peer can hold forever).  Buffers are never freed while kernels of
 * ours may run (cudaFree waits for the whole device): replaced or
 * abandoned ones are retired and freed after the communicator is
 * destroyed or aborted.
 */
struct nccl_buf {
	void			*dev;
	void			*host;	/* pinned */
	size_t			 len;
	TAILQ_ENTRY(nccl_buf)	 entry;
};
TAILQ_HEAD(nccl_bufq, nccl_buf);

struct nccl_req;
TAILQ_HEAD(nccl_reqq, nccl_req);

struct nccl {
	ncclComm_t	 comm;
	cudaStream_t	 stream;
	cudaEvent_t	 ev;		/* completion of blocking calls */
	cudaEvent_t	 caller;	/* the caller's work, waited for */
	int		 dev;
	pthread_mutex_t	 lock;		/* held while using comm */
	int		 abort_req;	/* atomic: an abort is wanted */
	int		 aborted;	/* atomic: ncclCommAbort was called */
	int		 keep;		/* repair on: a broken comm is kept ... */
	int		 kept;		/* ... for ncclCommShrink (under lock) */
	struct nccl_buf	*stage;		/* host buffers', under lock */
	struct nccl_bufq pool;		/* iallreduce buffers to reuse */
	struct nccl_bufq retired;	/* to free once no kernel can run */
	struct nccl_reqq reqs;		/* iallreduce requests alive */
	int32_t		*one;		/* device: barrier token */
	struct nccl_selfq selfq;	/* self sends not yet received */
	struct req_list	 selfwait;	/* self receives waiting for one */
};

/*
 * An asynchronous all-reduce (REQ_BACKEND request).  n is NULL once the
 * communicator is gone (finalize or a repair): the request then holds
 * nothing of it and has failed.
 */
struct nccl_req {
	struct nccl	*n;
	cudaEvent_t	 ev;
	struct nccl_buf	*buf;		/* host buffers' staging */
	void		*hostr;		/* host result buffer, if staged */
	size_t		 count;
	size_t		 bytes;
	enum rdzv_dtype	 dtype;
	int		 int_avg;	/* integer AVG: divide on the host */
	int64_t		 deadline;
	int		 done;
	int		 result;
	TAILQ_ENTRY(nccl_req) entry;	/* n->reqs */
};

/*
 * The device views of a call's send and receive buffers: each is the
 * buffer itself when it is device memory, else a region of the staging
 * pair (the send region filled from the host through its pinned twin).
 * In place (s == r) both views are one region.
 */
struct xfer {
	const void	*s;
	void		*r;
	size_t		 sbytes, rbytes;
	const void	*ds;
	void		*dr;
	void		*hr;		/* dr's pinned twin */
	int		 stage_r;	/* copy dr back to r at the end */
};

/* ---- nccl.c: types, staging, polling ---- */

ncclDataType_t	nccl_type(enum rdzv_dtype dt);
ncclRedOp_t	nccl_op(enum rdzv_op op, enum rdzv_dtype dt);
int	nccl_is_int(enum rdzv_dtype dt);
/* Whether p is device (or managed) memory. */
int	nccl_is_dev(const void *p);
size_t	nccl_align(size_t n);
/* Takes n->lock for a call, or fails when the communicator is broken. */
int	nccl_enter(struct rdzv_comm *c, struct nccl *n);
/* Waits for ev (NULL: the pending NCCL call) under n->lock until
 * deadline; 0 or the code that broke the communicator. */
int	nccl_poll(struct rdzv_comm *c, struct nccl *n, cudaEvent_t ev,
	    int64_t deadline, const char *what);
/* The result of an enqueuing NCCL call: InProgress is polled to its end;
 * an error breaks the communicator. */
int	nccl_settle(struct rdzv_comm *c, struct nccl *n, ncclResult_t r,
	    int64_t deadline, const char *what);
/* A CUDA call's error breaks the communicator. */
int	nccl_cuda(struct rdzv_comm *c, struct nccl *n, cudaError_t e,
	    const char *what);
/* A staging pair of len bytes; NULL (communicator broken) on failure. */
struct nccl_buf	*nccl_buf_new(struct rdzv_comm *c, struct nccl *n,
		    size_t len);
/* Makes n->stage at least len bytes (under n->lock). */
int	nccl_stage(struct rdzv_comm *c, struct nccl *n, size_t len);
/* Stages x's host buffers in (nccl_xfer_in); ends a call: unstages the
 * result, waits for the stream, releases n->lock (nccl_xfer_out). */
int	nccl_xfer_in(struct rdzv_comm *c, struct nccl *n, struct xfer *x);
int	nccl_xfer_out(struct rdzv_comm *c, struct nccl *n, struct xfer *x,
	    int rc, int64_t deadline, const char *what);

/* ---- nccl_coll.c: the collectives, as backend_ops entries ---- */

int	nccl_allreduce(struct rdzv_comm *c, const void *s, void *r,
	    size_t count, enum rdzv_dtype dt, enum rdzv_op op,
	    int64_t deadline);
int	nccl_broadcast(struct rdzv_comm *c, void *buf, size_t count,
	    enum rdzv_dtype dt, int root, int64_t deadline);
int	nccl_reduce(struct rdzv_comm *c, const void *s, void *r,
	    size_t count, enum rdzv_dtype dt, enum rdzv_op op, int root,
	    int64_t deadline);
int	nccl_allgather(struct rdzv_comm *c, const void *s, void *r,
	    size_t count, enum rdzv_dtype dt, int64_t deadline);
int	nccl_reduce_scatter(struct rdzv_comm *c, const void *s, void *r,
	    size_t count, enum rdzv_dtype dt, enum rdzv_op op,
	    int64_t deadline);
int	nccl_gather(struct rdzv_comm *c, const void *s, void *r,
	    size_t count, enum rdzv_dtype dt, int root, int64_t deadline);
int	nccl_scatter(struct rdzv_comm *c, const void *s, void *r,
	    size_t count, enum rdzv_dtype dt, int root, int64_t deadline);
int	nccl_alltoall(struct rdzv_comm *c, const void *s, void *r,
	    size_t count, enum rdzv_dtype dt, int64_t deadline);
int	nccl_barrier(struct rdzv_comm *c, int64_t deadline);
int	nccl_iallreduce(struct rdzv_comm *c, const void *s, void *r,
	    size_t count, enum rdzv_dtype dt, enum rdzv_op op,
	    int64_t timeout_ms, struct rdzv_request **reqp);

/* ---- nccl_p2p.c: sends and receives ---- */

int	nccl_p2p(struct rdzv_comm *c, struct rdzv_request *first);

#endif /* RDZV_NCCL_BE_H */
