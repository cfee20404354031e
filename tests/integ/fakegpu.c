/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fakegpu.c: a stand-in for libcudart and libnccl, for testing
 * librdzvworker's GPU path on a machine without a GPU (gpu_fake.py).
 * librdzvworker loads it as both (RDZV_CUDART_LIBRARY and
 * RDZV_NCCL_LIBRARY name this module).
 *
 * What it models is what the library's own logic depends on, with a
 * real GPU's blocking rules:
 *  - "device memory" is host memory this module handed out, reported as
 *    device memory by cudaPointerGetAttributes; cudaHostAlloc memory is
 *    pinned host memory, everything else pageable;
 *  - streams are queues run in order, lazily (whenever anything is
 *    queried or waited for); the legacy default stream is one of them;
 *  - a copy between a device and pageable host memory through
 *    cudaMemcpyAsync blocks the caller until the copy ran, i.e. until
 *    every kernel before it on its stream ended; cudaFree and
 *    cudaFreeHost wait for every stream (a device synchronization);
 *  - NCCL communicators have one rank (a collective is a copy); the
 *    FAKE_NCCL_HANG'th collective's kernel never ends (a dead peer) until
 *    ncclCommAbort; non-blocking init settles after a few polls.
 * What it cannot say: anything about real kernels, NCCL's transports,
 * several ranks, timing.  Blocking calls that would never return on a
 * GPU never return here either (after FAKE_GPU_SAY_MS, 3000 by default,
 * they say so on stderr once).
 *
 * Test hook: fake_gpu_fill(p, byte, delay_ms) queues a kernel on the
 * legacy default stream that fills a device buffer once delay_ms passed
 * (the caller's own work, for stream-ordering checks).
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

void		fake_gpu_fill(void *, int, int);
ncclResult_t	ncclGroupStart(void);
ncclResult_t	ncclGroupEnd(void);

enum op_kind { OP_COPY, OP_KERNEL, OP_RECORD, OP_WAIT, OP_FILL };

/* Communicators and events live until exit (queued work may name them). */
struct fcomm {
	int		 aborted;
	int		 calls;
	int		 hang_at;
	int		 init_polls;
	struct fcomm	*next;
};

struct fevent {
	int		 complete;
	struct fevent	*next;
};

struct op {
	enum op_kind	 kind;
	void		*dst;
	const void	*src;
	void		*tmp;		/* owned copy of src */
	size_t		 len;
	struct fevent	*ev;
	struct fcomm	*comm;
	int		 hung;
	int		 value;
	int64_t		 ready_ms;
	struct op	*next;
};

struct fstream {
	struct op	*head, *tail;
	struct fstream	*next;
};

struct alloc {
	char		*p;
	size_t		 len;
	int		 device;	/* else pinned host */
	struct alloc	*next;
};

static pthread_mutex_t	 fk_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fstream	 fk_legacy;
static struct fstream	*fk_streams = &fk_legacy;
static struct alloc	*fk_allocs;
static struct fcomm	*fk_comms;
static struct fevent	*fk_events;

static int64_t
fk_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static int
fk_env(const char *name, int dflt)
{
	const char	*v = getenv(name);

	return (v != NULL && *v != '\0' ? atoi(v) : dflt);
}

static struct fstream *
fk_stream(cudaStream_t s)
{
	if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread)
		return (&fk_legacy);
	return ((struct fstream *)s);
}

/* The allocation holding p, or NULL (pageable host memory). */
static struct alloc *
fk_find(const void *p)
{
	struct alloc	*a;

	for (a = fk_allocs; a != NULL; a = a->next)
		if ((const char *)p >= a->p && (const char *)p < a->p + a->len)
			return (a);
	return (NULL);
}

/* Runs the head op of s if it can; 1 if it ran.  Under fk_lock. */
static int
fk_step(struct fstream *s)
{
	struct op	*o = s->head;

	if (o == NULL)
		return (0);
	switch (o->kind) {
	case OP_KERNEL:
		if (o->hung && !o->comm->aborted)
			return (0);
		if (!o->comm->aborted)
			memmove(o->dst, o->src, o->len);
		break;
	case OP_COPY:
		memmove(o->dst, o->tmp != NULL ? o->tmp : o->src, o->len);
		break;
	case OP_RECORD:
		o->ev->complete = 1;
		break;
	case OP_WAIT:
		if (!o->ev->complete)
			return (0);
		break;
	case OP_FILL:
		if (fk_ms() < o->ready_ms)
			return (0);
		memset(o->dst, o->value, o->len);
		break;
	}
	s->head = o->next;
	if (s->head == NULL)
		s->tail = NULL;
	free(o->tmp);
	free(o);
	return (1);
}

static void
fk_progress(void)
{
	struct fstream	*s;
	int		 ran;

	do {
		ran = 0;
		for (s = fk_streams; s != NULL; s = s->next)
			while (fk_step(s))
				ran = 1;
	} while (ran);
}

static struct op *
fk_push(struct fstream *s, enum op_kind kind)
{
	struct op	*o;

	if ((o = calloc(1, sizeof *o)) == NULL)
		abort();
	o->kind = kind;
	if (s->tail != NULL)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	return (o);
}

/* Waits (lock held, dropped while sleeping) until done() holds. */
static void
fk_block(int (*done)(void *), void *arg, const char *what)
{
	int64_t	start = fk_ms();
	int	said = 0;

	for (;;) {
		fk_progress();
		if (done(arg))
			return;
		if (!said && fk_ms() - start > fk_env("FAKE_GPU_SAY_MS", 3000))
		    {
			fprintf(stderr, "fakegpu: %s blocked behind a kernel "
			    "that does not end (as on a GPU)\n", what);
			said = 1;
		}
		pthread_mutex_unlock(&fk_lock);
		usleep(1000);
		pthread_mutex_lock(&fk_lock);
	}
}

static int
fk_op_gone(void *arg)
{
	struct op	*o = arg, *x;
	struct fstream	*s;

	for (s = fk_streams; s != NULL; s = s->next)
		for (x = s->head; x != NULL; x = x->next)
			if (x == o)
				return (0);
	return (1);
}

static int
fk_all_idle(void *arg)
{
	struct fstream	*s;

	(void)arg;
	for (s = fk_streams; s != NULL; s = s->next)
		if (s->head != NULL)
			return (0);
	return (1);
}

/* ---- the CUDA runtime ---- */

cudaError_t
cudaGetDeviceCount(int *n)
{
	*n = fk_env("FAKE_GPU_DEVICES", 1);
	return (*n > 0 ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t
cudaGetLastError(void)
{
	return (cudaSuccess);
}

const char *
cudaGetErrorString(cudaError_t e)
{
	return (e == cudaSuccess ? "no error" : "fakegpu error");
}

cudaError_t
cudaSetDevice(int d)
{
	return (d >= 0 && d < fk_env("FAKE_GPU_DEVICES", 1) ? cudaSuccess :
	    cudaErrorInvalidDevice);
}

cudaError_t
cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	struct alloc	*x;

	memset(a, 0, sizeof *a);
	pthread_mutex_lock(&fk_lock);
	x = fk_find(p);
	a->type = x == NULL ? cudaMemoryTypeUnregistered : x->device ?
	    cudaMemoryTypeDevice : cudaMemoryTypeHost;
	pthread_mutex_unlock(&fk_lock);
	return (cudaSuccess);
}

static cudaError_t
fk_alloc(void **p, size_t len, int device)
{
	struct alloc	*a;

	if ((a = calloc(1, sizeof *a)) == NULL ||
	    (a->p = calloc(1, len ? len : 1)) == NULL) {
		free(a);
		return (cudaErrorMemoryAllocation);
	}
	a->len = len ? len : 1;
	a->device = device;
	pthread_mutex_lock(&fk_lock);
	a->next = fk_allocs;
	fk_allocs = a;
	pthread_mutex_unlock(&fk_lock);
	*p = a->p;
	return (cudaSuccess);
}

static cudaError_t
fk_free(void *p, const char *what)
{
	struct alloc	**ap, *a;

	if (p == NULL)
		return (cudaSuccess);
	pthread_mutex_lock(&fk_lock);
	fk_block(fk_all_idle, NULL, what);	/* a device synchronization */
	for (ap = &fk_allocs; (a = *ap) != NULL; ap = &a->next)
		if (a->p == p) {
			*ap = a->next;
			free(a->p);
			free(a);
			break;
		}
	pthread_mutex_unlock(&fk_lock);
	return (cudaSuccess);
}

cudaError_t
cudaMalloc(void **p, size_t len)
{
	return (fk_alloc(p, len, 1));
}

cudaError_t
cudaFree(void *p)
{
	return (fk_free(p, "cudaFree"));
}

cudaError_t
cudaHostAlloc(void **p, size_t len, unsigned int flags)
{
	(void)flags;
	return (fk_alloc(p, len, 0));
}

cudaError_t
cudaFreeHost(void *p)
{
	return (fk_free(p, "cudaFreeHost"));
}

cudaError_t
cudaMemcpyAsync(void *dst, const void *src, size_t len, enum cudaMemcpyKind k,
    cudaStream_t st)
{
	struct op	*o;
	int		 pageable_dst, pageable_src;

	(void)k;
	pthread_mutex_lock(&fk_lock);
	pageable_dst = fk_find(dst) == NULL;
	pageable_src = fk_find(src) == NULL;
	o = fk_push(fk_stream(st), OP_COPY);
	o->dst = dst;
	o->src = src;
	o->len = len;
	if (pageable_src) {
		/* Taken at once (the driver's own staging). */
		if ((o->tmp = malloc(len ? len : 1)) == NULL)
			abort();
		memcpy(o->tmp, src, len);
	}
	if (pageable_dst)	/* returns once the copy is done */
		fk_block(fk_op_gone, o, "cudaMemcpyAsync into pageable memory");
	pthread_mutex_unlock(&fk_lock);
	return (cudaSuccess);
}

cudaError_t
cudaMemcpy(void *dst, const void *src, size_t len, enum cudaMemcpyKind k)
{
	cudaError_t	e;
	struct op	*o;

	/* The legacy stream, synchronously: waits for what is on it. */
	(void)k;
	pthread_mutex_lock(&fk_lock);
	o = fk_push(&fk_legacy, OP_COPY);
	o->dst = dst;
	o->src = src;
	o->len = len;
	fk_block(fk_op_gone, o, "cudaMemcpy");
	pthread_mutex_unlock(&fk_lock);
	e = cudaSuccess;
	return (e);
}

cudaError_t
cudaStreamCreateWithFlags(cudaStream_t *st, unsigned int flags)
{
	struct fstream	*s;

	(void)flags;
	if ((s = calloc(1, sizeof *s)) == NULL)
		return (cudaErrorMemoryAllocation);
	pthread_mutex_lock(&fk_lock);
	s->next = fk_streams->next;
	fk_legacy.next = s;
	pthread_mutex_unlock(&fk_lock);
	*st = (cudaStream_t)s;
	return (cudaSuccess);
}

cudaError_t
cudaStreamCreate(cudaStream_t *st)
{
	return (cudaStreamCreateWithFlags(st, 0));
}

static int
fk_stream_idle(void *arg)
{
	return (((struct fstream *)arg)->head == NULL);
}

cudaError_t
cudaStreamSynchronize(cudaStream_t st)
{
	pthread_mutex_lock(&fk_lock);
	fk_block(fk_stream_idle, fk_stream(st), "cudaStreamSynchronize");
	pthread_mutex_unlock(&fk_lock);
	return (cudaSuccess);
}

cudaError_t
cudaMemset(void *p, int byte, size_t len)
{
	fake_gpu_fill(p, byte, 0);
	pthread_mutex_lock(&fk_lock);
	fk_block(fk_stream_idle, &fk_legacy, "cudaMemset");
	pthread_mutex_unlock(&fk_lock);
	(void)len;
	return (cudaSuccess);
}

cudaError_t
cudaStreamDestroy(cudaStream_t st)
{
	(void)st;	/* released once idle on a GPU: kept here */
	return (cudaSuccess);
}

cudaError_t
cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned int flags)
{
	struct op	*o;

	(void)flags;
	pthread_mutex_lock(&fk_lock);
	o = fk_push(fk_stream(st), OP_WAIT);
	o->ev = (struct fevent *)ev;
	pthread_mutex_unlock(&fk_lock);
	return (cudaSuccess);
}

cudaError_t
cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags)
{
	struct fevent	*e;

	(void)flags;
	if ((e = calloc(1, sizeof *e)) == NULL)
		return (cudaErrorMemoryAllocation);
	e->complete = 1;
	pthread_mutex_lock(&fk_lock);
	e->next = fk_events;
	fk_events = e;
	pthread_mutex_unlock(&fk_lock);
	*ev = (cudaEvent_t)e;
	return (cudaSuccess);
}

cudaError_t
cudaEventRecord(cudaEvent_t ev, cudaStream_t st)
{
	struct fevent	*e = (struct fevent *)ev;
	struct op	*o;

	pthread_mutex_lock(&fk_lock);
	e->complete = 0;
	o = fk_push(fk_stream(st), OP_RECORD);
	o->ev = e;
	fk_progress();
	pthread_mutex_unlock(&fk_lock);
	return (cudaSuccess);
}

cudaError_t
cudaEventQuery(cudaEvent_t ev)
{
	struct fevent	*e = (struct fevent *)ev;
	int		 done;

	pthread_mutex_lock(&fk_lock);
	fk_progress();
	done = e->complete;
	pthread_mutex_unlock(&fk_lock);
	return (done ? cudaSuccess : cudaErrorNotReady);
}

cudaError_t
cudaEventDestroy(cudaEvent_t ev)
{
	(void)ev;	/* a queued record may still name it: kept */
	return (cudaSuccess);
}

void
fake_gpu_fill(void *p, int byte, int delay_ms)
{
	struct alloc	*a;
	struct op	*o;

	pthread_mutex_lock(&fk_lock);
	a = fk_find(p);
	o = fk_push(&fk_legacy, OP_FILL);
	o->dst = p;
	o->len = a != NULL ? a->len - (size_t)((char *)p - a->p) : 0;
	o->value = byte;
	o->ready_ms = fk_ms() + delay_ms;
	pthread_mutex_unlock(&fk_lock);
}

/* ---- NCCL, one rank ---- */

static const size_t	fk_tsize[] = {
	[ncclInt8] = 1, [ncclUint8] = 1, [ncclInt32] = 4, [ncclUint32] = 4,
	[ncclInt64] = 8, [ncclUint64] = 8, [ncclFloat16] = 2,
	[ncclFloat32] = 4, [ncclFloat64] = 8, [ncclBfloat16] = 2,
};

ncclResult_t
ncclGetVersion(int *v)
{
	*v = fk_env("FAKE_NCCL_VERSION", NCCL_VERSION_CODE);
	return (ncclSuccess);
}

ncclResult_t
ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0x5a, sizeof *id);
	return (ncclSuccess);
}

ncclResult_t
ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id,
    int rank, ncclConfig_t *cfg)
{
	struct fcomm	*c;

	(void)id;
	*comm = NULL;
	if (nranks != 1 || rank != 0)
		return (ncclInvalidUsage);	/* one rank only */
	if ((c = calloc(1, sizeof *c)) == NULL)
		return (ncclSystemError);
	c->hang_at = fk_env("FAKE_NCCL_HANG", 0);
	pthread_mutex_lock(&fk_lock);
	c->next = fk_comms;
	fk_comms = c;
	pthread_mutex_unlock(&fk_lock);
	*comm = (ncclComm_t)c;
	if (cfg != NULL && cfg->blocking == 0) {
		c->init_polls = 3;
		return (ncclInProgress);
	}
	return (ncclSuccess);
}

ncclResult_t
ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	return (ncclCommInitRankConfig(comm, nranks, id, rank, NULL));
}

ncclResult_t
ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *r)
{
	struct fcomm	*c = (struct fcomm *)comm;

	pthread_mutex_lock(&fk_lock);
	if (c->init_polls > 0) {
		c->init_polls--;
		*r = ncclInProgress;
	} else
		*r = ncclSuccess;
	pthread_mutex_unlock(&fk_lock);
	return (ncclSuccess);
}

ncclResult_t
ncclCommFinalize(ncclComm_t comm)
{
	(void)comm;
	return (ncclSuccess);
}

ncclResult_t
ncclCommDestroy(ncclComm_t comm)
{
	(void)comm;	/* queued kernels may name it: kept */
	return (ncclSuccess);
}

ncclResult_t
ncclCommAbort(ncclComm_t comm)
{
	pthread_mutex_lock(&fk_lock);
	((struct fcomm *)comm)->aborted = 1;
	fk_progress();
	pthread_mutex_unlock(&fk_lock);
	return (ncclSuccess);
}

ncclResult_t
ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	(void)comm;
	*rank = 0;
	return (ncclSuccess);
}

const char *
ncclGetErrorString(ncclResult_t r)
{
	return (r == ncclSuccess ? "no error" : "fakegpu nccl error");
}

const char *
ncclGetLastError(ncclComm_t comm)
{
	(void)comm;
	return ("fakegpu: one rank per communicator");
}

/* A collective: a kernel copying len bytes (one rank). */
static ncclResult_t
fk_coll(const void *s, void *r, size_t count, ncclDataType_t t, ncclComm_t comm,
    cudaStream_t st)
{
	struct fcomm	*c = (struct fcomm *)comm;
	struct op	*o;

	pthread_mutex_lock(&fk_lock);
	if (c->aborted) {
		pthread_mutex_unlock(&fk_lock);
		return (ncclInvalidUsage);
	}
	o = fk_push(fk_stream(st), OP_KERNEL);
	o->dst = r;
	o->src = s;
	o->len = count * fk_tsize[t];
	o->comm = c;
	o->hung = ++c->calls == c->hang_at;
	pthread_mutex_unlock(&fk_lock);
	return (ncclSuccess);
}

ncclResult_t
ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t t,
    ncclRedOp_t op, ncclComm_t comm, cudaStream_t st)
{
	(void)op;
	return (fk_coll(s, r, count, t, comm, st));
}

ncclResult_t
ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t t,
    int root, ncclComm_t comm, cudaStream_t st)
{
	(void)root;
	return (fk_coll(s, r, count, t, comm, st));
}

ncclResult_t
ncclReduce(const void *s, void *r, size_t count, ncclDataType_t t,
    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t st)
{
	(void)op;
	(void)root;
	return (fk_coll(s, r, count, t, comm, st));
}

ncclResult_t
ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t t,
    ncclComm_t comm, cudaStream_t st)
{
	return (fk_coll(s, r, count, t, comm, st));
}

ncclResult_t
ncclReduceScatter(const void *s, void *r, size_t count, ncclDataType_t t,
    ncclRedOp_t op, ncclComm_t comm, cudaStream_t st)
{
	(void)op;
	return (fk_coll(s, r, count, t, comm, st));
}

ncclResult_t
ncclSend(const void *s, size_t count, ncclDataType_t t, int peer,
    ncclComm_t comm, cudaStream_t st)
{
	(void)s; (void)count; (void)t; (void)peer; (void)comm; (void)st;
	return (ncclInvalidUsage);	/* no peers */
}

ncclResult_t
ncclRecv(void *r, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
    cudaStream_t st)
{
	(void)r; (void)count; (void)t; (void)peer; (void)comm; (void)st;
	return (ncclInvalidUsage);
}

ncclResult_t
ncclGroupStart(void)
{
	return (ncclSuccess);
}

ncclResult_t
ncclGroupEnd(void)
{
	return (ncclSuccess);
}
