/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dp.c: the data-parallel step (rdzv_dp_*), what torch's
 * DistributedDataParallel does for a C program: the parameters start out
 * equal (broadcast from rank 0), and each step's gradients are averaged
 * over the ranks in buckets whose all-reduce starts as soon as the
 * backward pass has produced them, so communication overlaps compute.
 *
 * Buckets are cut in reverse parameter order (backward produces the last
 * layer first), at most bucket_bytes each; the first one is kept small
 * (DP_FIRST_BUCKET) so the wire is busy early, as torch does.  A bucket
 * whose gradients lie back to back in memory (one flat gradient buffer,
 * the common case) is reduced in place; otherwise it is copied into a
 * flat buffer of its own and back.  Buckets start strictly in order, so
 * every rank issues the same sequence of asynchronous all-reduces even if
 * gradients are marked ready in a different order.
 *
 * Per step:
 *
 *	grad_ready(i) ...        bucket complete -> launch it (and any
 *	                         complete buckets after it, in order)
 *	finish()                 launch the rest, wait for all, copy back
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "gpulib.h"
#endif

#include "worker.h"

#define DP_FIRST_BUCKET	(1u << 20)

struct dp_bucket {
	size_t		 lo, hi;	/* parameter indices lo..hi */
	size_t		 count;		/* elements over all of them */
	size_t		 esize;
	enum rdzv_dtype	 dtype;
	void		*span;		/* in place: grads[lo] */
	void		*flat;		/* else: a buffer of count elements */
	int		 flat_dev;	/* flat is device memory */
	size_t		 pending;	/* gradients not yet ready this step */
	int		 launched;
	struct rdzv_request *req;
};

struct rdzv_dp {
	struct rdzv_comm		*comm;
	const struct rdzv_dp_param	*params;
	size_t				 n;
	size_t				*bucket_of;	/* per parameter */
	uint8_t				*ready;		/* per parameter */
	struct dp_bucket		*b;
	size_t				 nb;
	size_t				 next;		/* first not launched */
	int				 err;		/* first error of the step */
	uint64_t			 steps;
};

static int
dp_is_device(const void *p)
{
#ifdef HAVE_CUDA
	int	t = gpulib_mem_type(p);

	return (t == cudaMemoryTypeDevice || t == cudaMemoryTypeManaged);
#else
	(void)p;
	return (0);
#endif
}

static int	dp_bcast_params(struct rdzv_dp *, int, int);

/* Copies len bytes between the gradient and the flat buffer. */
static int
dp_copy(struct dp_bucket *b, void *dst, const void *src, size_t len)
{
#ifdef HAVE_CUDA
	if (b->flat_dev) {
		if (cudart.cudaMemcpy(dst, src, len, cudaMemcpyDeviceToDevice)
		    != cudaSuccess)
			return (RDZV_EIO);
		return (0);
	}
#endif
	(void)b;
	memcpy(dst, src, len);
	return (0);
}

static void
dp_flat_free(struct dp_bucket *b)
{
	if (b->flat == NULL)
		return;
#ifdef HAVE_CUDA
	if (b->flat_dev) {
		cudart.cudaFree(b->flat);
		b->flat = NULL;
		return;
	}
#endif
	free(b->flat);
	b->flat = NULL;
}

/* Gives bucket b its in-place span or a flat buffer. */
static int
dp_bucket_setup(struct rdzv_dp *dp, struct dp_bucket *b)
{
	const struct rdzv_dp_param	*p = dp->params;
	size_t				 i;
	int				 contiguous = 1;

	for (i = b->lo; i < b->hi; i++)
		if ((const char *)p[i].grad + p[i].count * b->esize !=
		    (const char *)p[i + 1].grad)
			contiguous = 0;
	if (contiguous) {
		b->span = p[b->lo].grad;
		return (0);
	}
	b->flat_dev = dp_is_device(p[b->lo].grad);
#ifdef HAVE_CUDA
	if (b->flat_dev) {
		if (cudart.cudaMalloc(&b->flat, b->count * b->esize) !=
		    cudaSuccess) {
			b->flat = NULL;
			return (RDZV_ENOMEM);
		}
		return (0);
	}
#endif
	if ((b->flat = malloc(b->count * b->esize)) == NULL)
		return (RDZV_ENOMEM);
	return (0);
}

/*
 * Creates the helper over n parameters.  Returns 0, RDZV_EINVAL (no comm,
 * a parameter without buffers or with an unknown dtype) or RDZV_ENOMEM.
 */
int
rdzv_dp_new(struct rdzv_comm *comm, const struct rdzv_dp_param *params,
    size_t n, size_t bucket_bytes, struct rdzv_dp **dpp)
{
	struct rdzv_dp		*dp;
	struct dp_bucket	*b = NULL;
	size_t			 i, k, bytes = 0, cap, esize;
	int			 rc;

	*dpp = NULL;
	if (comm == NULL || params == NULL || n == 0)
		return (RDZV_EINVAL);
	for (i = 0; i < n; i++) {
		esize = rdzv_dtype_size(params[i].dtype);
		if (esize == 0 || params[i].count == 0 ||
		    params[i].param == NULL || params[i].grad == NULL ||
		    params[i].count > SIZE_MAX / 2 / esize)
			return (RDZV_EINVAL);
	}
	if (bucket_bytes == 0)
		bucket_bytes = RDZV_DP_BUCKET_DEFAULT;
	if ((dp = calloc(1, sizeof *dp)) == NULL)
		return (RDZV_ENOMEM);
	dp->comm = comm;
	dp->params = params;
	dp->n = n;
	dp->bucket_of = calloc(n, sizeof *dp->bucket_of);
	dp->ready = calloc(n, 1);
	dp->b = calloc(n, sizeof *dp->b);	/* at most one per parameter */
	if (dp->bucket_of == NULL || dp->ready == NULL || dp->b == NULL) {
		rdzv_dp_free(dp);
		return (RDZV_ENOMEM);
	}

	/* Cut buckets walking from the last parameter to the first. */
	cap = bucket_bytes < DP_FIRST_BUCKET ? bucket_bytes : DP_FIRST_BUCKET;
	for (k = n; k-- > 0;) {
		esize = rdzv_dtype_size(params[k].dtype);
		if (b == NULL || b->dtype != params[k].dtype || bytes >= cap) {
			if (b != NULL)
				cap = bucket_bytes;
			b = &dp->b[dp->nb++];
			b->hi = k;
			b->dtype = params[k].dtype;
			b->esize = esize;
			bytes = 0;
		}
		b->lo = k;
		if (SIZE_MAX - b->count < params[k].count) {
			rdzv_dp_free(dp);
			return (RDZV_EINVAL);
		}
		b->count += params[k].count;
		bytes += params[k].count * esize;
		dp->bucket_of[k] = dp->nb - 1;
	}
	for (i = 0; i < dp->nb; i++) {
		b = &dp->b[i];
		b->pending = b->hi - b->lo + 1;
		if ((rc = dp_bucket_setup(dp, b)) != 0) {
			rdzv_dp_free(dp);
			return (rc);
		}
	}
	comm_log(comm, RDZV_LOG_DEBUG, "dp: %zu parameters in %zu buckets",
	    n, dp->nb);
	*dpp = dp;
	return (0);
}

/* Waits for anything in flight, then frees the helper; NULL allowed. */
void
rdzv_dp_free(struct rdzv_dp *dp)
{
	size_t	i;

	if (dp == NULL)
		return;
	for (i = 0; dp->b != NULL && i < dp->nb; i++) {
		if (dp->b[i].req != NULL)
			(void)rdzv_wait(dp->b[i].req);
		dp_flat_free(&dp->b[i]);
	}
	free(dp->b);
	free(dp->bucket_of);
	free(dp->ready);
	free(dp);
}

/*
 * Broadcasts every parameter from rank 0, one call per run of parameters
 * that lie back to back in memory with one dtype.
 */
int
rdzv_dp_broadcast_params(struct rdzv_dp *dp, int timeout_ms)
{
	if (dp == NULL)
		return (RDZV_EINVAL);
	return (dp_bcast_params(dp, 0, timeout_ms));
}

int
rdzv_dp_sync(struct rdzv_dp *dp, const struct rdzv_ckpt_part *parts,
    size_t n, uint64_t *step, int timeout_ms)
{
	struct rdzv_round	rd;
	uint64_t		st;
	size_t			i;
	int			rc;

	if (dp == NULL || (parts == NULL && n > 0))
		return (RDZV_EINVAL);
	(void)rdzv_comm_round(dp->comm, &rd);
	if (rdzv_size(dp->comm) > 1) {
		if ((rc = dp_bcast_params(dp, rd.donor, timeout_ms)) != 0)
			return (rc);
		for (i = 0; i < n; i++)
			if (parts[i].len > 0 && (rc = rdzv_broadcast(dp->comm,
			    parts[i].data, parts[i].len, RDZV_U8, rd.donor,
			    timeout_ms)) != 0)
				return (rc);
		st = step != NULL ? *step : dp->steps;
		if ((rc = rdzv_broadcast(dp->comm, &st, 1, RDZV_I64, rd.donor,
		    timeout_ms)) != 0)
			return (rc);
	} else
		st = step != NULL ? *step : dp->steps;
	dp->steps = st;
	if (step != NULL)
		*step = st;
	return (0);
}

/* Broadcasts every parameter from root, runs of adjacent ones at once. */
static int
dp_bcast_params(struct rdzv_dp *dp, int root, int timeout_ms)
{
	const struct rdzv_dp_param	*p;
	size_t				 i, j, count, esize;
	int				 rc;

	if (rdzv_size(dp->comm) == 1)
		return (0);
	p = dp->params;
	for (i = 0; i < dp->n; i = j) {
		esize = rdzv_dtype_size(p[i].dtype);
		count = p[i].count;
		for (j = i + 1; j < dp->n; j++) {
			if (p[j].dtype != p[i].dtype ||
			    (char *)p[j - 1].param + p[j - 1].count * esize !=
			    (char *)p[j].param)
				break;
			count += p[j].count;
		}
		rc = rdzv_broadcast(dp->comm, p[i].param, count, p[i].dtype,
		    root, timeout_ms);
		if (rc != 0)
			return (rc);
	}
	return (0);
}

/* Starts bucket b's all-reduce, copying into its flat buffer first. */
static int
dp_launch(struct rdzv_dp *dp, struct dp_bucket *b)
{
	const struct rdzv_dp_param	*p = dp->params;
	char				*dst;
	size_t				 i, len;
	int				 rc;

	b->launched = 1;
	if (dp->err != 0)
		return (dp->err);
	if (b->flat != NULL) {
		dst = b->flat;
		for (i = b->lo; i <= b->hi; i++) {
			len = p[i].count * b->esize;
			if ((rc = dp_copy(b, dst, p[i].grad, len)) != 0)
				return (dp->err = rc);
			dst += len;
		}
	}
	rc = rdzv_iallreduce(dp->comm, b->flat ? b->flat : b->span,
	    b->flat ? b->flat : b->span, b->count, b->dtype, RDZV_AVG, -1,
	    &b->req);
	if (rc != 0) {
		b->req = NULL;
		dp->err = rc;
	}
	return (rc);
}

/* Launches, in order, every complete bucket from dp->next on. */
static int
dp_launch_ready(struct rdzv_dp *dp, int all)
{
	struct dp_bucket	*b;
	int			 rc = 0;

	while (dp->next < dp->nb) {
		b = &dp->b[dp->next];
		if (b->pending > 0 && !all)
			break;
		dp->next++;
		if (dp_launch(dp, b) != 0 && rc == 0)
			rc = dp->err;
	}
	return (rc);
}

/*
 * Marks a gradient final.  Returns 0, RDZV_EINVAL (index out of range or
 * already marked this step) or the error of starting an all-reduce.
 */
int
rdzv_dp_grad_ready(struct rdzv_dp *dp, size_t index)
{
	struct dp_bucket	*b;

	if (dp == NULL || index >= dp->n || dp->ready[index])
		return (RDZV_EINVAL);
	dp->ready[index] = 1;
	if (rdzv_size(dp->comm) == 1)
		return (0);
	b = &dp->b[dp->bucket_of[index]];
	if (--b->pending > 0)
		return (0);
	return (dp_launch_ready(dp, 0));
}

/*
 * Ends the step: launches what is left, waits for every bucket, copies
 * flat buffers back and reports the step to the agent.  The next step
 * starts fresh even after an error (the communicator is then broken and
 * the caller is expected to stop).  Returns 0 or the first error.
 */
int
rdzv_dp_finish(struct rdzv_dp *dp, int timeout_ms)
{
	const struct rdzv_dp_param	*p;
	struct dp_bucket		*b;
	const char			*src;
	size_t				 i, k, len;
	int				 rc, err;

	(void)timeout_ms;	/* each all-reduce carries the default */
	if (dp == NULL)
		return (RDZV_EINVAL);
	p = dp->params;
	if (rdzv_size(dp->comm) > 1) {
		(void)dp_launch_ready(dp, 1);
		for (i = 0; i < dp->nb; i++) {
			b = &dp->b[i];
			if (b->req == NULL)
				continue;
			rc = rdzv_wait(b->req);
			b->req = NULL;
			if (rc != 0 && dp->err == 0)
				dp->err = rc;
			if (rc != 0 || b->flat == NULL)
				continue;
			src = b->flat;
			for (k = b->lo; k <= b->hi; k++) {
				len = p[k].count * b->esize;
				if ((rc = dp_copy(b, p[k].grad, src, len)) != 0 &&
				    dp->err == 0)
					dp->err = rc;
				src += len;
			}
		}
	}
	err = dp->err;
	/* Reset for the next step. */
	for (i = 0; i < dp->nb; i++) {
		dp->b[i].pending = dp->b[i].hi - dp->b[i].lo + 1;
		dp->b[i].launched = 0;
	}
	memset(dp->ready, 0, dp->n);
	dp->next = 0;
	dp->err = 0;
	if (err != 0)
		return (err);
	dp->steps++;
	/* A store hiccup here must not fail training: progress is advisory. */
	(void)rdzv_report_progress(dp->comm, dp->steps);
	return (0);
}
