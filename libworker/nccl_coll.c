/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nccl_coll.c: the nccl backend's collectives.  Each takes the
 * communicator and stages host buffers (nccl_begin), enqueues its NCCL
 * call on the stream (gather, scatter and alltoall: a group of sends and
 * receives) and ends through nccl_xfer_out, which polls it under the
 * deadline (nccl.c).  NCCL's in-place forms are mapped onto ours, and an
 * integer AVG is a SUM divided on the host.  The asynchronous all-reduce
 * returns a request whose wait and test poll its event.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "nccl_be.h"

/* Integer AVG: the sum is in r (host or device); divide it on the host. */
static int
nccl_int_avg(struct rdzv_comm *c, void *r, size_t count, enum rdzv_dtype dt)
{
	size_t	bytes = count * rdzv_dtype_size(dt);
	void	*h;
	int	 rc = RDZV_EIO;

	if (!nccl_is_dev(r)) {
		reduce_avg_finish(r, count, dt, c->size);
		return (0);
	}
	if ((h = malloc(bytes)) == NULL)
		return (comm_fail(c, RDZV_ENOMEM, "nccl: integer average"));
	if (cudart.cudaMemcpy(h, r, bytes, cudaMemcpyDeviceToHost) !=
	    cudaSuccess)
		goto out;
	reduce_avg_finish(h, count, dt, c->size);
	if (cudart.cudaMemcpy(r, h, bytes, cudaMemcpyHostToDevice) !=
	    cudaSuccess)
		goto out;
	rc = 0;
out:
	free(h);
	return (rc == 0 ? 0 : comm_fail(c, rc, "nccl: integer average"));
}

/* After a reduction's rc: an integer AVG's division, else rc. */
static int
nccl_avg_after(struct rdzv_comm *c, int rc, void *r, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op)
{
	if (rc != 0 || op != RDZV_AVG || !nccl_is_int(dt))
		return (rc);
	return (nccl_int_avg(c, r, count, dt));
}

/*
 * Starts a collective on x: takes the communicator (nccl_enter) and
 * stages host buffers (nccl_xfer_in).  Returns 0, or the code to return
 * (staging that failed has been ended by nccl_xfer_out).
 */
static int
nccl_begin(struct rdzv_comm *c, struct nccl *n, struct xfer *x,
    int64_t deadline, const char *what)
{
	int	rc;

	if ((rc = nccl_enter(c, n)) != 0)
		return (rc);
	if ((rc = nccl_xfer_in(c, n, x)) != 0)
		return (nccl_xfer_out(c, n, x, rc, deadline, what));
	return (0);
}

/* ---- collectives ---- */

int
nccl_allreduce(struct rdzv_comm *c, const void *s, void *r, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	struct nccl	*n = c->be;
	struct xfer	 x;
	size_t		 bytes = count * rdzv_dtype_size(dt);
	int		 rc;

	x = (struct xfer){ .s = s, .r = r, .sbytes = bytes, .rbytes = bytes };
	if ((rc = nccl_begin(c, n, &x, deadline, "allreduce")) != 0)
		return (rc);
	rc = nccl_settle(c, n, libnccl.ncclAllReduce(x.ds, x.dr, count,
	    nccl_type(dt), nccl_op(op, dt), n->comm, n->stream), deadline,
	    "ncclAllReduce");
	rc = nccl_xfer_out(c, n, &x, rc, deadline, "allreduce");
	return (nccl_avg_after(c, rc, r, count, dt, op));
}

int
nccl_broadcast(struct rdzv_comm *c, void *buf, size_t count,
    enum rdzv_dtype dt, int root, int64_t deadline)
{
	struct nccl	*n = c->be;
	struct xfer	 x;
	size_t		 bytes = count * rdzv_dtype_size(dt);
	int		 rc;

	x = (struct xfer){ .s = buf, .r = buf, .sbytes = bytes,
	    .rbytes = bytes };
	if ((rc = nccl_begin(c, n, &x, deadline, "broadcast")) != 0)
		return (rc);
	rc = nccl_settle(c, n, libnccl.ncclBroadcast(x.ds, x.dr, count,
	    nccl_type(dt), root, n->comm, n->stream), deadline,
	    "ncclBroadcast");
	return (nccl_xfer_out(c, n, &x, rc, deadline, "broadcast"));
}

int
nccl_reduce(struct rdzv_comm *c, const void *s, void *r, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int root, int64_t deadline)
{
	struct nccl	*n = c->be;
	struct xfer	 x;
	size_t		 bytes = count * rdzv_dtype_size(dt);
	int		 rc, isroot = c->rank == root;

	/* Only the root has a receive buffer; NCCL wants a valid pointer
	 * elsewhere, which the send buffer is and never written. */
	x = (struct xfer){ .s = s, .r = isroot ? r : NULL, .sbytes = bytes,
	    .rbytes = isroot ? bytes : 0 };
	if ((rc = nccl_begin(c, n, &x, deadline, "reduce")) != 0)
		return (rc);
	rc = nccl_settle(c, n, libnccl.ncclReduce(x.ds,
	    isroot ? x.dr : (void *)x.ds, count, nccl_type(dt),
	    nccl_op(op, dt), root, n->comm, n->stream), deadline,
	    "ncclReduce");
	rc = nccl_xfer_out(c, n, &x, rc, deadline, "reduce");
	return (isroot ? nccl_avg_after(c, rc, r, count, dt, op) : rc);
}

int
nccl_allgather(struct rdzv_comm *c, const void *s, void *r, size_t count,
    enum rdzv_dtype dt, int64_t deadline)
{
	struct nccl	*n = c->be;
	struct xfer	 x;
	size_t		 bytes = count * rdzv_dtype_size(dt);
	char		*slot;
	int		 rc;

	x = (struct xfer){ .s = s, .r = r, .sbytes = bytes,
	    .rbytes = bytes * (size_t)c->size };
	if ((rc = nccl_begin(c, n, &x, deadline, "allgather")) != 0)
		return (rc);
	/*
	 * NCCL's in-place form reads this rank's block from its slot of the
	 * receive buffer; ours (s == r) has it at the start: move it.
	 */
	slot = (char *)x.dr + bytes * (size_t)c->rank;
	if (x.ds == x.dr && c->rank > 0)
		rc = nccl_cuda(c, n, cudart.cudaMemcpyAsync(slot, x.dr, bytes,
		    cudaMemcpyDeviceToDevice, n->stream), "allgather");
	if (rc == 0)
		rc = nccl_settle(c, n, libnccl.ncclAllGather(x.ds == x.dr ? slot
		    : x.ds, x.dr, count, nccl_type(dt), n->comm, n->stream),
		    deadline, "ncclAllGather");
	return (nccl_xfer_out(c, n, &x, rc, deadline, "allgather"));
}

int
nccl_reduce_scatter(struct rdzv_comm *c, const void *s, void *r,
    size_t count, enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	struct nccl	*n = c->be;
	struct xfer	 x;
	size_t		 bytes = count * rdzv_dtype_size(dt);
	char		*slot;
	int		 rc;

	x = (struct xfer){ .s = s, .r = r, .sbytes = bytes * (size_t)c->size,
	    .rbytes = bytes };
	if ((rc = nccl_begin(c, n, &x, deadline, "reduce_scatter")) != 0)
		return (rc);
	/* In place, NCCL writes our block's slot; ours wants the start. */
	slot = (char *)x.dr + bytes * (size_t)c->rank;
	rc = nccl_settle(c, n, libnccl.ncclReduceScatter(x.ds, x.ds == x.dr ?
	    slot : x.dr, count, nccl_type(dt), nccl_op(op, dt), n->comm,
	    n->stream), deadline, "ncclReduceScatter");
	if (rc == 0 && x.ds == x.dr && c->rank > 0)
		rc = nccl_cuda(c, n, cudart.cudaMemcpyAsync(x.dr, slot, bytes,
		    cudaMemcpyDeviceToDevice, n->stream), "reduce_scatter");
	rc = nccl_xfer_out(c, n, &x, rc, deadline, "reduce_scatter");
	return (nccl_avg_after(c, rc, r, count, dt, op));
}

/*
 * gather, scatter and alltoall as grouped sends and receives; a rank's
 * own block is a device copy.  root < 0: every rank both sends and
 * receives (alltoall).
 */
static int
nccl_p2p_coll(struct rdzv_comm *c, const void *s, void *r, size_t count,
    enum rdzv_dtype dt, int root, int kind, int64_t deadline)
{
	enum { GATHER, SCATTER, ALLTOALL };
	struct nccl	*n = c->be;
	struct xfer	 x;
	size_t		 bytes = count * rdzv_dtype_size(dt), all;
	ncclDataType_t	 t = nccl_type(dt);
	const char	*what = kind == GATHER ? "gather" : kind == SCATTER ?
			    "scatter" : "alltoall";
	const char	*sp;
	char		*rp;
	ncclResult_t	 nr = ncclSuccess;
	int		 rc, p, me = c->rank;

	all = bytes * (size_t)c->size;
	x = (struct xfer){ .s = s, .r = r,
	    .sbytes = kind == GATHER ? bytes : (kind == SCATTER ?
	    (me == root ? all : 0) : all),
	    .rbytes = kind == SCATTER ? bytes : (kind == GATHER ?
	    (me == root ? all : 0) : all) };
	if (kind == GATHER && me != root)
		x.r = NULL;
	if (kind == SCATTER && me != root)
		x.s = NULL;
	if ((rc = nccl_begin(c, n, &x, deadline, what)) != 0)
		return (rc);
	sp = x.ds;
	rp = x.dr;
	if ((rc = nccl_settle(c, n, libnccl.ncclGroupStart(), deadline, what))
	    != 0)
		return (nccl_xfer_out(c, n, &x, rc, deadline, what));
	for (p = 0; p < c->size && rc == 0; p++) {
		if (p == me)
			continue;
		/* Gather sends to the root, scatter from it, alltoall both
		 * ways; a block at the root is the peer's slot. */
		nr = ncclSuccess;
		if (kind == ALLTOALL || (kind == GATHER ? p == root :
		    me == root))
			nr = libnccl.ncclSend(kind == GATHER ? sp :
			    sp + bytes * (size_t)p, count, t, p, n->comm,
			    n->stream);
		if ((nr == ncclSuccess || nr == ncclInProgress) &&
		    (kind == ALLTOALL || (kind == GATHER ? me == root :
		    p == root)))
			nr = libnccl.ncclRecv(kind == SCATTER ? rp :
			    rp + bytes * (size_t)p, count, t, p, n->comm,
			    n->stream);
		/* Inside a group, InProgress settles at ncclGroupEnd. */
		if (nr != ncclSuccess && nr != ncclInProgress)
			rc = nccl_settle(c, n, nr, deadline, what);
	}
	if (rc == 0)
		rc = nccl_settle(c, n, libnccl.ncclGroupEnd(), deadline, what);
	else
		(void)libnccl.ncclGroupEnd();
	/* Our own block. */
	if (rc == 0 && bytes > 0 && (kind == ALLTOALL || me == root)) {
		const void	*from = kind == GATHER ? sp :
				    sp + bytes * (size_t)me;
		void		*to = kind == SCATTER ? (void *)rp :
				    rp + bytes * (size_t)me;

		rc = nccl_cuda(c, n, cudart.cudaMemcpyAsync(to, from, bytes,
		    cudaMemcpyDeviceToDevice, n->stream), what);
	}
	return (nccl_xfer_out(c, n, &x, rc, deadline, what));
}

int
nccl_gather(struct rdzv_comm *c, const void *s, void *r, size_t count,
    enum rdzv_dtype dt, int root, int64_t deadline)
{
	return (nccl_p2p_coll(c, s, r, count, dt, root, 0, deadline));
}

int
nccl_scatter(struct rdzv_comm *c, const void *s, void *r, size_t count,
    enum rdzv_dtype dt, int root, int64_t deadline)
{
	return (nccl_p2p_coll(c, s, r, count, dt, root, 1, deadline));
}

int
nccl_alltoall(struct rdzv_comm *c, const void *s, void *r, size_t count,
    enum rdzv_dtype dt, int64_t deadline)
{
	return (nccl_p2p_coll(c, s, r, count, dt, -1, 2, deadline));
}

int
nccl_barrier(struct rdzv_comm *c, int64_t deadline)
{
	struct nccl	*n = c->be;
	int		 rc;

	if ((rc = nccl_enter(c, n)) != 0)
		return (rc);
	rc = nccl_settle(c, n, libnccl.ncclAllReduce(n->one, n->one, 1,
	    ncclInt32, ncclMax, n->comm, n->stream), deadline, "barrier");
	return (nccl_xfer_out(c, n, NULL, rc, deadline, "barrier"));
}

/* ---- asynchronous all-reduce ---- */

/* A staging pair of at least len bytes from the pool, else a new one. */
static struct nccl_buf *
nccl_pool_get(struct rdzv_comm *c, struct nccl *n, size_t len)
{
	struct nccl_buf	*b;

	TAILQ_FOREACH(b, &n->pool, entry)
		if (b->len >= len) {
			TAILQ_REMOVE(&n->pool, b, entry);
			return (b);
		}
	return (nccl_buf_new(c, n, nccl_align(len)));
}

/*
 * rdzv_request.free: the staging pair goes back to the pool when its
 * all-reduce is known complete, else to the retired list (its kernel may
 * still run); both are freed only after the communicator is gone.
 */
static void
nccl_req_free(struct rdzv_request *r)
{
	struct nccl_req	*q = r->be;

	if (q == NULL)
		return;
	if (q->n != NULL) {
		pthread_mutex_lock(&q->n->lock);
		if (q->buf != NULL)
			TAILQ_INSERT_TAIL(q->done && q->result == 0 ?
			    &q->n->pool : &q->n->retired, q->buf, entry);
		TAILQ_REMOVE(&q->n->reqs, q, entry);
		pthread_mutex_unlock(&q->n->lock);
	}
	if (q->ev != NULL)
		cudart.cudaEventDestroy(q->ev);
	free(q);
	r->be = NULL;
}

/* Finishes a completed request (host copy-back, integer average). */
static int
nccl_req_finish(struct rdzv_request *r)
{
	struct nccl_req	*q = r->be;
	struct rdzv_comm *c = r->comm;

	q->done = 1;
	if (q->result == 0 && q->hostr != NULL)
		memcpy(q->hostr, q->buf->host, q->bytes);
	if (q->result == 0 && q->int_avg)
		q->result = nccl_int_avg(c, q->hostr != NULL ? q->hostr :
		    r->rbuf, q->count, q->dtype);
	return (q->result);
}

static int
nccl_req_wait(struct rdzv_request *r)
{
	struct nccl_req	*q = r->be;
	struct rdzv_comm *c = r->comm;
	int		 rc;

	if (q->done || q->n == NULL) {
		q->done = 1;
		return (q->result);
	}
	if ((rc = nccl_enter(c, q->n)) != 0) {
		q->done = 1;
		return (q->result = rc);
	}
	q->result = nccl_poll(c, q->n, q->ev, q->deadline, "iallreduce");
	pthread_mutex_unlock(&q->n->lock);
	return (nccl_req_finish(r));
}

static int
nccl_req_test(struct rdzv_request *r)
{
	struct nccl_req	*q = r->be;
	struct rdzv_comm *c = r->comm;
	cudaError_t	 ce;
	int		 rc;

	if (!q->done && q->n != NULL) {
		ce = cudart.cudaEventQuery(q->ev);
		if (ce == cudaErrorNotReady && mono_ms() < q->deadline &&
		    !comm_broken(c))
			return (0);
		/* Done, failed or late: wait() sorts out which. */
		return ((rc = nccl_req_wait(r)) == 0 ? 1 : rc);
	}
	q->done = 1;
	return (q->result == 0 ? 1 : q->result);
}

/*
 * backend_ops.iallreduce: enqueued and returned at once, host buffers
 * too (staged through a pinned pair of the request's own, so several can
 * be in flight); the result reaches a host buffer in wait/test.
 */
int
nccl_iallreduce(struct rdzv_comm *c, const void *s, void *r, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int64_t timeout_ms,
    struct rdzv_request **reqp)
{
	struct nccl		*n = c->be;
	struct rdzv_request	*req;
	struct nccl_req		*q;
	const void		*ds = s;
	void			*dr = r;
	int			 rc;

	*reqp = NULL;
	if ((req = request_new(c)) == NULL)
		return (RDZV_ENOMEM);
	if ((q = calloc(1, sizeof *q)) == NULL) {
		/* A plain request marked done: rdzv_wait just frees it. */
		req->done = 1;
		(void)rdzv_wait(req);
		return (RDZV_ENOMEM);
	}
	req->kind = REQ_BACKEND;
	req->be = q;
	req->wait = nccl_req_wait;
	req->test = nccl_req_test;
	req->free = nccl_req_free;
	q->count = count;
	q->dtype = dt;
	q->bytes = count * rdzv_dtype_size(dt);
	q->int_avg = op == RDZV_AVG && nccl_is_int(dt);
	q->deadline = comm_deadline(c, (int)timeout_ms);
	if ((rc = nccl_enter(c, n)) != 0)
		goto fail;
	q->n = n;
	TAILQ_INSERT_TAIL(&n->reqs, q, entry);
	rc = nccl_cuda(c, n, cudart.cudaEventCreateWithFlags(&q->ev,
	    cudaEventDisableTiming), "cudaEventCreate");
	if (rc == 0 && q->bytes > 0 && (!nccl_is_dev(s) || !nccl_is_dev(r))) {
		if ((q->buf = nccl_pool_get(c, n, q->bytes)) == NULL)
			rc = comm_broken(c) != 0 ? comm_broken(c) :
			    RDZV_ENOMEM;
		else if (!nccl_is_dev(s)) {
			memcpy(q->buf->host, s, q->bytes);
			rc = nccl_cuda(c, n, cudart.cudaMemcpyAsync(
			    q->buf->dev, q->buf->host, q->bytes,
			    cudaMemcpyHostToDevice, n->stream), "staging");
		} else
			rc = nccl_cuda(c, n, cudart.cudaMemcpyAsync(
			    q->buf->dev, s, q->bytes,
			    cudaMemcpyDeviceToDevice, n->stream), "staging");
		if (q->buf != NULL) {
			ds = dr = q->buf->dev;
			if (!nccl_is_dev(r))
				q->hostr = r;
		}
	}
	if (rc == 0)
		rc = nccl_settle(c, n, libnccl.ncclAllReduce(ds, dr, count,
		    nccl_type(dt), nccl_op(op, dt), n->comm, n->stream),
		    q->deadline, "ncclAllReduce");
	/* Into pinned memory, or the caller's device buffer: neither copy
	 * blocks this thread. */
	if (rc == 0 && q->buf != NULL)
		rc = nccl_cuda(c, n, q->hostr != NULL ?
		    cudart.cudaMemcpyAsync(q->buf->host, q->buf->dev, q->bytes,
		    cudaMemcpyDeviceToHost, n->stream) :
		    cudart.cudaMemcpyAsync(r, q->buf->dev, q->bytes,
		    cudaMemcpyDeviceToDevice, n->stream), "unstaging");
	if (rc == 0)
		rc = nccl_cuda(c, n, cudart.cudaEventRecord(q->ev, n->stream),
		    "cudaEventRecord");
	pthread_mutex_unlock(&n->lock);
	if (rc != 0)
		goto fail;
	*reqp = req;
	return (0);
fail:
	q->done = 1;
	q->result = rc;
	(void)rdzv_wait(req);
	return (rc);
}
