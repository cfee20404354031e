/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nccl.c: the nccl backend, built when configure finds CUDA and NCCL.
 *
 * Bootstrap: rank 0 creates the NCCL unique id and publishes it in this
 * communicator's store scope (the round's, so a restarted rank can never
 * pick up a stale id); the others wait for it there.  From
 * NCCL_SCALABLE_MIN ranks on, one id per NCCL_RANKS_PER_ID ranks is made
 * by evenly spread ranks and ncclCommInitRankScalable spreads the
 * bootstrap load.  The device is the local rank modulo the visible
 * devices, unless the program chose one.
 *
 * The communicator is non-blocking (config.blocking = 0) so that no NCCL
 * call can hold us past a deadline: every operation is enqueued on our
 * stream and then polled, watching three things at once: the stream
 * (done), ncclCommGetAsyncError (a peer died or the network broke) and
 * the call's deadline.  An error or an expired deadline breaks the
 * communicator (comm_fail) and ends in ncclCommAbort, which makes every
 * peer's pending operation fail in turn instead of hanging.
 *
 * Locking: n->lock is held by whichever thread is using the NCCL
 * communicator.  An abort asked for from another thread (rdzv_abort,
 * comm_fail) takes the lock if it is free and aborts at once; otherwise
 * it leaves a flag that the thread holding the lock sees at its next poll
 * (within a millisecond), so ncclCommAbort never races another call on
 * the same communicator.
 *
 * Host buffers are staged through device memory, so the library's own
 * small collectives (checkpoints, barriers, the example's loss sums) work
 * with either backend.  Sends and receives to oneself never enter NCCL:
 * a send is copied and completed at once and matched by a later receive.
 *
 * This file owns the communicator (its lock, abort and failure), the
 * staging of host buffers, the polling, and set-up and tear-down; the
 * collectives are in nccl_coll.c, sends and receives in nccl_p2p.c
 * (nccl_be.h what they share).
 */
#include "config.h"

#include <sys/queue.h>

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl_be.h"

#define NCCL_SCALABLE_MIN	256	/* ranks: several unique ids from here */
#define NCCL_RANKS_PER_ID	128
#define NCCL_SPIN_US		200	/* busy-poll this long, then sleep */
#define NCCL_SLEEP_MAX_US	500
#define NCCL_ALIGN		256
#define NCCL_HOST_MAX		256

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
#define HAVE_NCCL_SCALABLE	1
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define HAVE_NCCL_SHRINK	1	/* ncclCommShrink, NCCL_SHRINK_ABORT */
#endif
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 10, 0)
#error "the nccl backend needs NCCL 2.10 or later (ncclAvg, ncclBfloat16)"
#endif

static const ncclDataType_t	nccl_types[RDZV_DTYPE_COUNT] = {
	[RDZV_F32] = ncclFloat32,
	[RDZV_F64] = ncclFloat64,
	[RDZV_F16] = ncclFloat16,
	[RDZV_BF16] = ncclBfloat16,
	[RDZV_I32] = ncclInt32,
	[RDZV_I64] = ncclInt64,
	[RDZV_U8] = ncclUint8,
};

/*
 * By op, then for float and for integer types: integer AVG is done as
 * SUM, then divided on the host (nccl_coll.c).
 */
static const ncclRedOp_t	nccl_ops[RDZV_OP_COUNT][2] = {
	[RDZV_SUM] = { ncclSum, ncclSum },
	[RDZV_PROD] = { ncclProd, ncclProd },
	[RDZV_MIN] = { ncclMin, ncclMin },
	[RDZV_MAX] = { ncclMax, ncclMax },
	[RDZV_AVG] = { ncclAvg, ncclSum },
};

/* dt and op were checked by the caller (comm.c). */
ncclDataType_t
nccl_type(enum rdzv_dtype dt)
{
	return (nccl_types[dt]);
}

int
nccl_is_int(enum rdzv_dtype dt)
{
	return (dt == RDZV_I32 || dt == RDZV_I64 || dt == RDZV_U8);
}

ncclRedOp_t
nccl_op(enum rdzv_op op, enum rdzv_dtype dt)
{
	return (nccl_ops[op][nccl_is_int(dt)]);
}

int
nccl_is_dev(const void *p)
{
	int	t = gpulib_mem_type(p);

	return (t == cudaMemoryTypeDevice || t == cudaMemoryTypeManaged);
}

size_t
nccl_align(size_t n)
{
	return ((n + NCCL_ALIGN - 1) / NCCL_ALIGN * NCCL_ALIGN);
}

/*
 * Calls ncclCommAbort once; the caller holds n->lock or knows it free.
 * Under repair with ncclCommShrink, the broken communicator is only
 * marked: a shrink round shrinks it with NCCL_SHRINK_ABORT (which stops
 * what is in flight), anything else aborts it (nccl_release).  Every
 * call checks `aborted` first, so a kept communicator is never used.
 */
static void
nccl_do_abort(struct nccl *n)
{
	if (n->comm == NULL ||
	    __atomic_exchange_n(&n->aborted, 1, __ATOMIC_SEQ_CST))
		return;
	if (n->keep) {
		n->kept = 1;
		return;
	}
	(void)libnccl.ncclCommAbort(n->comm);
}

/* Aborts a communicator nccl_do_abort kept; caller as above. */
static void
nccl_release(struct nccl *n)
{
	if (n->kept && n->comm != NULL)
		(void)libnccl.ncclCommAbort(n->comm);
	n->kept = 0;
}

/* backend_ops.abort: any thread. */
static void
nccl_abort(struct rdzv_comm *c)
{
	struct nccl	*n = c->be;

	if (n == NULL)
		return;
	__atomic_store_n(&n->abort_req, 1, __ATOMIC_SEQ_CST);
	if (pthread_mutex_trylock(&n->lock) == 0) {
		nccl_do_abort(n);
		pthread_mutex_unlock(&n->lock);
	}
}

/* Maps an NCCL failure to our codes and breaks the communicator. */
static int
nccl_fail(struct rdzv_comm *c, ncclResult_t r, const char *what)
{
	struct nccl	*n = c->be;
	const char	*last = "";
	int		 code;

	switch (r) {
	case ncclSystemError:
	case ncclRemoteError:
		code = RDZV_ECONN;	/* a peer or the network went away */
		break;
	case ncclInvalidArgument:
	case ncclInvalidUsage:
		code = RDZV_EINVAL;
		break;
	default:
		code = RDZV_EIO;
		break;
	}
	if (n != NULL && n->comm != NULL &&
	    !__atomic_load_n(&n->aborted, __ATOMIC_SEQ_CST))
		last = libnccl.ncclGetLastError(n->comm);
	return (comm_fail(c, code, "nccl: %s: %s%s%s", what,
	    libnccl.ncclGetErrorString(r), last != NULL && *last ? ": " : "",
	    last != NULL ? last : ""));
}

static void
nccl_backoff(int64_t start_us)
{
	struct timespec	ts;
	int64_t		waited = mono_us() - start_us;

	if (waited < NCCL_SPIN_US) {
		sched_yield();
		return;
	}
	ts.tv_sec = 0;
	ts.tv_nsec = (waited / 8 < NCCL_SLEEP_MAX_US ? waited / 8 :
	    NCCL_SLEEP_MAX_US) * 1000;
	nanosleep(&ts, NULL);
}

static int	nccl_poll_wait(struct rdzv_comm *, struct nccl *, cudaEvent_t,
		    int64_t, const char *);

/*
 * Polls until ev has completed (ev NULL: until the communicator's pending
 * non-blocking call has settled), the communicator reports an error, an
 * abort is asked for or deadline passes.  Called with n->lock held.
 * Returns 0 or the code that broke the communicator.
 */
int
nccl_poll(struct rdzv_comm *c, struct nccl *n, cudaEvent_t ev,
    int64_t deadline, const char *what)
{
	int	rc;

	rc = nccl_poll_wait(c, n, ev, deadline, what);
	comm_waiting(c, 0);
	return (rc);
}

/* nccl_poll's loop; the rank counts as waiting on its peers in it. */
static int
nccl_poll_wait(struct rdzv_comm *c, struct nccl *n, cudaEvent_t ev,
    int64_t deadline, const char *what)
{
	ncclResult_t	ar;
	cudaError_t	ce;
	int64_t		start = mono_us();
	int		rc;

	for (;;) {
		if (__atomic_load_n(&n->abort_req, __ATOMIC_SEQ_CST)) {
			nccl_do_abort(n);
			rc = comm_broken(c);
			return (rc != 0 ? rc : RDZV_ECLOSED);
		}
		if (libnccl.ncclCommGetAsyncError(n->comm, &ar) != ncclSuccess)
			ar = ncclInternalError;
		if (ar != ncclSuccess && ar != ncclInProgress) {
			rc = nccl_fail(c, ar, what);
			nccl_do_abort(n);
			return (rc);
		}
		if (ev != NULL) {
			ce = cudart.cudaEventQuery(ev);
			if (ce == cudaSuccess)
				return (0);
			if (ce != cudaErrorNotReady) {
				rc = comm_fail(c, RDZV_EIO, "nccl: %s: %s", what,
				    cudart.cudaGetErrorString(ce));
				nccl_do_abort(n);
				return (rc);
			}
		} else if (ar == ncclSuccess)
			return (0);
		if (mono_ms() >= deadline) {
			rc = comm_fail(c, RDZV_ETIMEDOUT, "nccl: %s: not done "
			    "within the timeout (a peer died or hangs); "
			    "communicator aborted", what);
			nccl_do_abort(n);
			return (rc);
		}
		comm_waiting(c, 1);
		nccl_backoff(start);
	}
}

/* Checks an enqueueing call's result; waits out ncclInProgress. */
int
nccl_settle(struct rdzv_comm *c, struct nccl *n, ncclResult_t r,
    int64_t deadline, const char *what)
{
	if (r == ncclSuccess)
		return (0);
	if (r == ncclInProgress)
		return (nccl_poll(c, n, NULL, deadline, what));
	nccl_fail(c, r, what);
	nccl_do_abort(n);
	return (comm_broken(c));
}

int
nccl_cuda(struct rdzv_comm *c, struct nccl *n, cudaError_t e,
    const char *what)
{
	int	rc;

	if (e == cudaSuccess)
		return (0);
	rc = comm_fail(c, e == cudaErrorMemoryAllocation ? RDZV_ENOMEM :
	    RDZV_EIO, "nccl: %s: %s", what, cudart.cudaGetErrorString(e));
	nccl_do_abort(n);
	return (rc);
}

/*
 * Starts a call: takes the lock, selects the device, checks for aborts,
 * and orders our stream after the work the caller queued on the legacy
 * default stream (kernels on other streams must be complete: see
 * rdzv_worker.h).
 */
int
nccl_enter(struct rdzv_comm *c, struct nccl *n)
{
	int	rc;

	pthread_mutex_lock(&n->lock);
	if (__atomic_load_n(&n->aborted, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&n->abort_req, __ATOMIC_SEQ_CST)) {
		nccl_do_abort(n);
		pthread_mutex_unlock(&n->lock);
		rc = comm_broken(c);
		return (rc != 0 ? rc : RDZV_ECLOSED);
	}
	if (cudart.cudaSetDevice(n->dev) != cudaSuccess) {
		pthread_mutex_unlock(&n->lock);
		return (comm_fail(c, RDZV_EIO, "nccl: cannot select device %d",
		    n->dev));
	}
	if ((rc = nccl_cuda(c, n, cudart.cudaEventRecord(n->caller,
	    cudaStreamLegacy), "ordering after the default stream")) != 0 ||
	    (rc = nccl_cuda(c, n, cudart.cudaStreamWaitEvent(n->stream,
	    n->caller, 0), "ordering after the default stream")) != 0) {
		pthread_mutex_unlock(&n->lock);
		return (rc);
	}
	return (0);
}

/* A staging pair of len bytes, or NULL after comm_fail (under n->lock). */
struct nccl_buf *
nccl_buf_new(struct rdzv_comm *c, struct nccl *n, size_t len)
{
	struct nccl_buf	*b;

	if ((b = calloc(1, sizeof *b)) == NULL) {
		comm_fail(c, RDZV_ENOMEM, "nccl: staging");
		return (NULL);
	}
	b->len = len;
	if (cudart.cudaMalloc(&b->dev, len) != cudaSuccess) {
		(void)cudart.cudaGetLastError();
		free(b);
		comm_fail(c, RDZV_ENOMEM, "nccl: cannot allocate %zu bytes of "
		    "device memory to stage host buffers", len);
		return (NULL);
	}
	if (cudart.cudaHostAlloc(&b->host, len, cudaHostAllocPortable) !=
	    cudaSuccess) {
		(void)cudart.cudaGetLastError();
		/* cudaFree would wait for every kernel on the device. */
		b->host = NULL;
		TAILQ_INSERT_TAIL(&n->retired, b, entry);
		comm_fail(c, RDZV_ENOMEM, "nccl: cannot allocate %zu bytes of "
		    "pinned host memory to stage host buffers", len);
		return (NULL);
	}
	return (b);
}

/* Frees b; only once no kernel of ours can be running (nccl_free). */
static void
nccl_buf_free(struct nccl_buf *b)
{
	if (b == NULL)
		return;
	cudart.cudaFree(b->dev);
	cudart.cudaFreeHost(b->host);
	free(b);
}

/* Grows the staging pair to at least len bytes (caller holds n->lock). */
int
nccl_stage(struct rdzv_comm *c, struct nccl *n, size_t len)
{
	struct nccl_buf	*b;
	size_t		 want = len;

	if (n->stage != NULL && len <= n->stage->len)
		return (0);
	/* Doubling bounds what retired buffers hold to twice the largest. */
	if (n->stage != NULL && want < 2 * n->stage->len)
		want = 2 * n->stage->len;
	if ((b = nccl_buf_new(c, n, want)) == NULL)
		return (comm_broken(c) != 0 ? comm_broken(c) : RDZV_ENOMEM);
	if (n->stage != NULL)
		TAILQ_INSERT_TAIL(&n->retired, n->stage, entry);
	n->stage = b;
	return (0);
}

int
nccl_xfer_in(struct rdzv_comm *c, struct nccl *n, struct xfer *x)
{
	int	hs = x->s != NULL && x->sbytes > 0 && !nccl_is_dev(x->s);
	int	hr = x->r != NULL && x->rbytes > 0 && !nccl_is_dev(x->r);
	size_t	need, roff;
	int	rc;

	x->ds = x->s;
	x->dr = x->r;
	x->hr = NULL;
	x->stage_r = 0;
	if (!hs && !hr)
		return (0);
	need = (x->s == x->r) ? nccl_align(x->rbytes > x->sbytes ?
	    x->rbytes : x->sbytes) : nccl_align(x->sbytes) +
	    nccl_align(x->rbytes);
	if ((rc = nccl_stage(c, n, need)) != 0)
		return (rc);
	if (hs) {
		memcpy(n->stage->host, x->s, x->sbytes);
		x->ds = n->stage->dev;
		rc = nccl_cuda(c, n, cudart.cudaMemcpyAsync(n->stage->dev,
		    n->stage->host, x->sbytes, cudaMemcpyHostToDevice,
		    n->stream), "staging a host buffer");
		if (rc != 0)
			return (rc);
	}
	if (hr) {
		roff = x->s == x->r ? 0 : nccl_align(x->sbytes);
		x->dr = (char *)n->stage->dev + roff;
		x->hr = (char *)n->stage->host + roff;
		x->stage_r = 1;
	}
	if (x->s == x->r)
		x->ds = x->dr;
	return (0);
}

/*
 * Ends a call: queues the copy of a staged result into pinned memory,
 * waits for the stream under the deadline (abort requests and the
 * communicator's errors seen within a millisecond), copies the result
 * to the caller's buffer, releases the lock.
 */
int
nccl_xfer_out(struct rdzv_comm *c, struct nccl *n, struct xfer *x,
    int rc, int64_t deadline, const char *what)
{
	if (rc == 0 && x != NULL && x->stage_r)
		rc = nccl_cuda(c, n, cudart.cudaMemcpyAsync(x->hr, x->dr,
		    x->rbytes, cudaMemcpyDeviceToHost, n->stream),
		    "unstaging a result");
	if (rc == 0)
		rc = nccl_cuda(c, n, cudart.cudaEventRecord(n->ev, n->stream),
		    "cudaEventRecord");
	if (rc == 0)
		rc = nccl_poll(c, n, n->ev, deadline, what);
	if (rc == 0 && x != NULL && x->stage_r)
		memcpy(x->r, x->hr, x->rbytes);
	pthread_mutex_unlock(&n->lock);
	return (rc);
}

/* ---- set-up and tear-down ---- */

/*
 * The local rank when the environment did not say: the number of lower
 * ranks that report the same host name through the store.
 */
static int
nccl_local_rank(struct rdzv_comm *c, int64_t deadline, int *lrp)
{
	char	 host[NCCL_HOST_MAX], key[128];
	void	*val;
	size_t	 len;
	int	 p, rc, lr = 0;

	if (gethostname(host, sizeof host) != 0)
		host[0] = '\0';
	host[sizeof host - 1] = '\0';
	snprintf(key, sizeof key, "%s/nccl/host/%d", c->keypfx, c->rank);
	if ((rc = wstore_set(c->store, key, host, strlen(host),
	    deadline_left(deadline))) != 0)
		return (rc);
	for (p = 0; p < c->rank; p++) {
		snprintf(key, sizeof key, "%s/nccl/host/%d", c->keypfx, p);
		if ((rc = wstore_get(c->store, key, &val, &len,
		    deadline_left(deadline))) != 0)
			return (rc);
		if (len == strlen(host) && memcmp(val, host, len) == 0)
			lr++;
		free(val);
	}
	*lrp = lr;
	return (0);
}

/* Publishes or fetches the unique ids; nid of them. */
static int
nccl_ids(struct rdzv_comm *c, ncclUniqueId *ids, int nid, int64_t deadline)
{
	char		 key[128];
	void		*val;
	size_t		 len;
	ncclResult_t	 nr;
	int		 i, maker, rc;

	/* Id i is made by rank i * size / nid: spread over the job. */
	for (i = 0; i < nid; i++) {
		maker = (int)((int64_t)i * c->size / nid);
		if (maker != c->rank)
			continue;
		if ((nr = libnccl.ncclGetUniqueId(&ids[i])) != ncclSuccess)
			return (comm_fail(c, RDZV_EIO, "nccl: ncclGetUniqueId: "
			    "%s", libnccl.ncclGetErrorString(nr)));
		snprintf(key, sizeof key, "%s/nccl/id/%d", c->keypfx, i);
		if ((rc = wstore_set(c->store, key, &ids[i], sizeof ids[i],
		    deadline_left(deadline))) != 0)
			return (comm_fail(c, rc, "nccl: publishing the unique "
			    "id: %s", rdzv_strerror(rc)));
	}
	for (i = 0; i < nid; i++) {
		maker = (int)((int64_t)i * c->size / nid);
		if (maker == c->rank)
			continue;
		snprintf(key, sizeof key, "%s/nccl/id/%d", c->keypfx, i);
		if ((rc = wstore_get(c->store, key, &val, &len,
		    deadline_left(deadline))) != 0)
			return (comm_fail(c, rc, "nccl: waiting for the unique "
			    "id of rank %d: %s", maker, rdzv_strerror(rc)));
		if (len != sizeof ids[i]) {
			free(val);
			return (comm_fail(c, RDZV_EPROTO, "nccl: unique id %d "
			    "has %zu bytes", i, len));
		}
		memcpy(&ids[i], val, len);
		free(val);
	}
	return (0);
}

static void
nccl_free(struct nccl *n)
{
	struct nccl_self	*m;
	struct nccl_buf		*b;

	if (n == NULL)
		return;
	/* The communicator is destroyed or aborted: no kernel of ours
	 * runs, and freeing device memory cannot wait on one. */
	while ((m = TAILQ_FIRST(&n->selfq)) != NULL) {
		TAILQ_REMOVE(&n->selfq, m, entry);
		free(m->buf);
		free(m);
	}
	while ((b = TAILQ_FIRST(&n->pool)) != NULL) {
		TAILQ_REMOVE(&n->pool, b, entry);
		nccl_buf_free(b);
	}
	while ((b = TAILQ_FIRST(&n->retired)) != NULL) {
		TAILQ_REMOVE(&n->retired, b, entry);
		nccl_buf_free(b);
	}
	nccl_buf_free(n->stage);
	cudart.cudaFree(n->one);
	if (n->ev != NULL)
		cudart.cudaEventDestroy(n->ev);
	if (n->caller != NULL)
		cudart.cudaEventDestroy(n->caller);
	if (n->stream != NULL)
		cudart.cudaStreamDestroy(n->stream);
	pthread_mutex_destroy(&n->lock);
	free(n);
}

static int
nccl_init(struct rdzv_comm *c)
{
	struct nccl	*n;
	ncclUniqueId	*ids = NULL;
	ncclConfig_t	 cfg = NCCL_CONFIG_INITIALIZER;
	ncclResult_t	 nr;
	int64_t		 deadline, t0 = mono_us();
	int		 ndev = 0, lr, nid = 1, rc, shared;
	int32_t		 one = 1;
	char		 why[RDZV_ERRMSG_MAX];

	deadline = mono_ms() + c->init_timeout_ms;
	if (gpulib_nccl(why, sizeof why) != 0)
		return (comm_fail(c, RDZV_EINVAL, "%s", why));
	if (cudart.cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
		(void)cudart.cudaGetLastError();
		return (comm_fail(c, RDZV_EINVAL, "nccl: no CUDA device is "
		    "visible"));
	}
	if ((n = calloc(1, sizeof *n)) == NULL)
		return (RDZV_ENOMEM);
	pthread_mutex_init(&n->lock, NULL);
	TAILQ_INIT(&n->selfq);
	TAILQ_INIT(&n->selfwait);
	TAILQ_INIT(&n->pool);
	TAILQ_INIT(&n->retired);
	TAILQ_INIT(&n->reqs);
	c->be = n;

	lr = c->local_rank;
	if (lr < 0 && c->store != NULL &&
	    (rc = nccl_local_rank(c, deadline, &lr)) != 0) {
		comm_fail(c, rc, "nccl: working out the local rank: %s",
		    rdzv_strerror(rc));
		goto fail;
	}
	if (lr < 0)
		lr = 0;
	if (c->opts.device >= ndev) {
		rc = comm_fail(c, RDZV_EINVAL, "nccl: device %d asked for, "
		    "%d visible", c->opts.device, ndev);
		goto fail;
	}
	n->dev = c->opts.device >= 0 ? c->opts.device :
	    wenv_device(&c->env, lr, c->local_size, ndev, &shared);
	if (c->opts.device < 0 && shared)
		comm_log(c, RDZV_LOG_WARN, "nccl: local rank %d shares device "
		    "%d with another rank of this host (%d visible); NCCL "
		    "may refuse it", lr, n->dev, ndev);
	c->device = n->dev;
	if (cudart.cudaSetDevice(n->dev) != cudaSuccess ||
	    cudart.cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking)
	    != cudaSuccess || cudart.cudaEventCreateWithFlags(&n->ev,
	    cudaEventDisableTiming) != cudaSuccess ||
	    cudart.cudaEventCreateWithFlags(&n->caller, cudaEventDisableTiming)
	    != cudaSuccess || cudart.cudaMalloc((void **)&n->one, sizeof
	    *n->one) != cudaSuccess || cudart.cudaMemcpy(n->one, &one, sizeof
	    one, cudaMemcpyHostToDevice) != cudaSuccess) {
		rc = comm_fail(c, RDZV_EIO, "nccl: setting up device %d: %s",
		    n->dev,
		    cudart.cudaGetErrorString(cudart.cudaGetLastError()));
		goto fail;
	}

#ifdef HAVE_NCCL_SCALABLE
	if (c->size >= NCCL_SCALABLE_MIN &&
	    libnccl.ncclCommInitRankScalable != NULL)
		nid = (c->size + NCCL_RANKS_PER_ID - 1) / NCCL_RANKS_PER_ID;
#endif
	if ((ids = calloc((size_t)nid, sizeof *ids)) == NULL) {
		rc = RDZV_ENOMEM;
		goto fail;
	}
	if (c->size == 1) {
		if ((nr = libnccl.ncclGetUniqueId(&ids[0])) != ncclSuccess) {
			rc = comm_fail(c, RDZV_EIO, "nccl: ncclGetUniqueId: "
			    "%s", libnccl.ncclGetErrorString(nr));
			goto fail;
		}
	} else if ((rc = nccl_ids(c, ids, nid, deadline)) != 0)
		goto fail;

	/* Non-blocking, so that init, too, answers to the deadline. */
	cfg.blocking = 0;
	pthread_mutex_lock(&n->lock);
#ifdef HAVE_NCCL_SCALABLE
	if (nid > 1)
		nr = libnccl.ncclCommInitRankScalable(&n->comm, c->size,
		    c->rank, nid, ids, &cfg);
	else
#endif
		nr = libnccl.ncclCommInitRankConfig(&n->comm, c->size, ids[0],
		    c->rank, &cfg);
	if (n->comm == NULL) {
		pthread_mutex_unlock(&n->lock);
		rc = comm_fail(c, RDZV_EIO, "nccl: ncclCommInitRank: %s",
		    libnccl.ncclGetErrorString(nr));
		goto fail;
	}
	rc = nccl_settle(c, n, nr, deadline, "ncclCommInitRank");
#ifdef HAVE_NCCL_SHRINK
	if (rc == 0 && libnccl.ncclCommShrink != NULL)
		n->keep = c->repair;
#endif
	pthread_mutex_unlock(&n->lock);
	if (rc != 0)
		goto fail;
	free(ids);
	comm_log(c, RDZV_LOG_INFO, "nccl %d.%d.%d: rank %d of %d on device "
	    "%d, %d unique id%s, ready in %.1f ms", libnccl.version / 10000,
	    libnccl.version / 100 % 100, libnccl.version % 100, c->rank,
	    c->size, n->dev, nid, nid > 1 ? "s" : "",
	    (double)(mono_us() - t0) / 1000.0);
	return (0);
fail:
	free(ids);
	if (n->comm != NULL)
		nccl_do_abort(n);
	c->be = NULL;
	nccl_free(n);
	return (rc != 0 ? rc : RDZV_EIO);
}

/*
 * backend_ops.fini: a healthy communicator is finalized (flushing what
 * is in flight) and destroyed, under the default timeout; a broken one
 * was aborted, which also freed it.
 */
static void
nccl_fini(struct rdzv_comm *c)
{
	struct nccl	*n = c->be;
	struct rdzv_request *r;
	struct nccl_req	*q;
	int64_t		 deadline;
	int		 rc;

	if (n == NULL)
		return;
	while ((r = TAILQ_FIRST(&n->selfwait)) != NULL) {
		TAILQ_REMOVE(&n->selfwait, r, qentry);
		comm_complete(r, RDZV_ECLOSED);
	}
	pthread_mutex_lock(&n->lock);
	/* Requests outliving us (a repair re-initializes the backend) keep
	 * nothing of ours: not done means failed. */
	while ((q = TAILQ_FIRST(&n->reqs)) != NULL) {
		TAILQ_REMOVE(&n->reqs, q, entry);
		if (q->buf != NULL)
			TAILQ_INSERT_TAIL(&n->retired, q->buf, entry);
		q->buf = NULL;
		q->hostr = NULL;
		q->n = NULL;
		if (!q->done) {
			q->done = 1;
			q->result = RDZV_ECLOSED;
		}
	}
	(void)cudart.cudaSetDevice(n->dev);
	if (n->comm != NULL && !__atomic_load_n(&n->aborted,
	    __ATOMIC_SEQ_CST) && comm_broken(c) == 0) {
		deadline = comm_deadline(c, -1);
		rc = nccl_settle(c, n, libnccl.ncclCommFinalize(n->comm),
		    deadline, "ncclCommFinalize");
		if (rc == 0 && !__atomic_load_n(&n->aborted,
		    __ATOMIC_SEQ_CST))
			(void)libnccl.ncclCommDestroy(n->comm);
		else
			nccl_do_abort(n);
	} else
		nccl_do_abort(n);
	nccl_release(n);
	n->comm = NULL;
	pthread_mutex_unlock(&n->lock);
	c->be = NULL;
	nccl_free(n);
}

#ifdef HAVE_NCCL_SHRINK
/*
 * backend_ops.shrink: a repair round that only drops ranks.  Every
 * member publishes its old rank in the round's store scope; the old ranks
 * missing are excluded with libnccl.ncclCommShrink(NCCL_SHRINK_ABORT), which
 * stops what the broken parent still has in flight, and the parent is
 * then aborted.  NCCL numbers the child's ranks in the parent's order,
 * so the round's numbering must keep that order (the agent's does: rdzvd
 * renumbers survivors in rank order); anything else, or any failure,
 * returns a code and comm.c falls back to abort and a fresh init.
 */
static int
nccl_shrink(struct rdzv_comm *c, int old_rank, int old_size)
{
	struct nccl		*n = c->be;
	struct rdzv_request	*r;
	ncclConfig_t		 cfg = NCCL_CONFIG_INITIALIZER;
	ncclComm_t		 parent, child = NULL;
	ncclResult_t		 nr;
	char			 key[128], val[32];
	void			*v;
	size_t			 len;
	int64_t			 deadline = mono_ms() + c->init_timeout_ms;
	int			*olds = NULL, *excl = NULL, nexcl = 0, i, j;
	int			 rc = RDZV_EINVAL, me = -1;

	if (n == NULL || n->comm == NULL || c->store == NULL ||
	    (__atomic_load_n(&n->aborted, __ATOMIC_SEQ_CST) && !n->kept) ||
	    c->size >= old_size || libnccl.ncclCommShrink == NULL)
		return (RDZV_EINVAL);
	if ((olds = calloc((size_t)c->size, sizeof *olds)) == NULL ||
	    (excl = calloc((size_t)old_size, sizeof *excl)) == NULL) {
		rc = RDZV_ENOMEM;
		goto out;
	}
	snprintf(key, sizeof key, "%s/nccl/shrink/%d", c->keypfx, c->rank);
	snprintf(val, sizeof val, "%d", old_rank);
	if ((rc = wstore_set(c->store, key, val, strlen(val),
	    deadline_left(deadline))) != 0)
		goto out;
	for (i = 0; i < c->size; i++) {
		snprintf(key, sizeof key, "%s/nccl/shrink/%d", c->keypfx, i);
		if ((rc = wstore_get(c->store, key, &v, &len,
		    deadline_left(deadline))) != 0)
			goto out;
		olds[i] = atoi(v);
		free(v);
		/* Strictly increasing: NCCL's child order is the parent's. */
		if (olds[i] < 0 || olds[i] >= old_size ||
		    (i > 0 && olds[i] <= olds[i - 1])) {
			rc = RDZV_EINVAL;
			goto out;
		}
	}
	for (i = j = 0; i < old_size; i++) {
		if (j < c->size && olds[j] == i)
			j++;
		else
			excl[nexcl++] = i;
	}

	pthread_mutex_lock(&n->lock);
	(void)cudart.cudaSetDevice(n->dev);
	while ((r = TAILQ_FIRST(&n->selfwait)) != NULL) {
		TAILQ_REMOVE(&n->selfwait, r, qentry);
		comm_complete(r, RDZV_ECLOSED);
	}
	parent = n->comm;
	cfg.blocking = 0;
	nr = libnccl.ncclCommShrink(parent, excl, nexcl, &child, &cfg,
	    NCCL_SHRINK_ABORT);
	if (child == NULL) {
		pthread_mutex_unlock(&n->lock);
		rc = comm_note(c, RDZV_EIO, "nccl: ncclCommShrink: %s",
		    libnccl.ncclGetErrorString(nr));
		goto out;
	}
	/* The child is the communicator from now on, healthy. */
	n->comm = child;
	n->kept = 0;
	__atomic_store_n(&n->aborted, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&n->abort_req, 0, __ATOMIC_SEQ_CST);
	rc = nccl_settle(c, n, nr, deadline, "ncclCommShrink");
	if (rc == 0 && (libnccl.ncclCommUserRank(child, &me) != ncclSuccess ||
	    me != c->rank))
		rc = comm_fail(c, RDZV_EINVAL, "nccl: ncclCommShrink made rank "
		    "%d, the round says %d", me, c->rank);
	(void)libnccl.ncclCommAbort(parent);
	if (rc != 0) {
		/* Broken: fini aborts the child as well. */
		n->keep = 0;
		nccl_do_abort(n);
	}
	pthread_mutex_unlock(&n->lock);
	if (rc == 0)
		comm_log(c, RDZV_LOG_INFO, "nccl: shrunk from %d to %d ranks",
		    old_size, c->size);
out:
	free(olds);
	free(excl);
	return (rc);
}
#endif

const struct backend_ops nccl_backend_ops = {
	.name = "nccl",
	.kind = RDZV_BACKEND_NCCL,
	.init = nccl_init,
	.fini = nccl_fini,
	.abort = nccl_abort,
	.allreduce = nccl_allreduce,
	.broadcast = nccl_broadcast,
	.reduce = nccl_reduce,
	.allgather = nccl_allgather,
	.reduce_scatter = nccl_reduce_scatter,
	.gather = nccl_gather,
	.scatter = nccl_scatter,
	.alltoall = nccl_alltoall,
	.barrier = nccl_barrier,
	.p2p = nccl_p2p,
	.iallreduce = nccl_iallreduce,
#ifdef HAVE_NCCL_SHRINK
	.shrink = nccl_shrink,
#endif
};
