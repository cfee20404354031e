/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dp_check.c: the data-parallel step (libworker/dp.c) checked as real
 * ranks, started by tests/integ/dp_train.py.  Seven parameters: three
 * back to back in one allocation (reduced in place), the rest apart
 * (copied through flat buffers), in f32, f64 and f16, so small buckets
 * split at sizes and at dtype changes.  Checks that rank 0's parameters
 * reach everyone, that after each step every gradient is the average over
 * the ranks even though each rank marks them ready in its own order (and
 * one step marks none: finish starts them all), and that misuse is
 * refused.  Prints "dp_check ok rank R" and exits 0, or says what differs
 * and exits 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_worker.h"

#define NP	7

static int	rank, size;

static void __attribute__((noreturn))
fail(struct rdzv_comm *c, const char *what, int rc)
{
	fprintf(stderr, "dp_check: rank %d: %s: %s %s\n", rank, what,
	    rdzv_strerror(rc), c != NULL ? rdzv_comm_errmsg(c) : "");
	exit(1);
}

/* IEEE half of a float that is exactly representable (small values). */
static uint16_t
to_half(float f)
{
	uint32_t	u;
	int		e;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) == 0)
		return ((uint16_t)(u >> 16));
	e = (int)((u >> 23) & 0xff) - 127 + 15;
	return ((uint16_t)((u >> 16 & 0x8000) | (uint32_t)e << 10 |
	    (u >> 13 & 0x3ff)));
}

static float
from_half(uint16_t h)
{
	uint32_t	u;
	float		f;

	if ((h & 0x7fff) == 0)
		u = (uint32_t)(h & 0x8000) << 16;
	else
		u = (uint32_t)(h & 0x8000) << 16 |
		    (uint32_t)(((h >> 10) & 0x1f) - 15 + 127) << 23 |
		    (uint32_t)(h & 0x3ff) << 13;
	memcpy(&f, &u, 4);
	return (f);
}

static void
put(struct rdzv_dp_param *p, size_t i, int grad, double v)
{
	void	*b = grad ? p->grad : p->param;

	switch (p->dtype) {
	case RDZV_F64:
		((double *)b)[i] = v;
		break;
	case RDZV_F16:
		((uint16_t *)b)[i] = to_half((float)v);
		break;
	default:
		((float *)b)[i] = (float)v;
		break;
	}
}

static double
get(const struct rdzv_dp_param *p, size_t i, int grad)
{
	const void	*b = grad ? p->grad : p->param;

	switch (p->dtype) {
	case RDZV_F64:
		return (((const double *)b)[i]);
	case RDZV_F16:
		return (from_half(((const uint16_t *)b)[i]));
	default:
		return (((const float *)b)[i]);
	}
}

/* Small integers times small factors: exact in every dtype used. */
static double
val(size_t k, size_t i)
{
	return ((double)((i * 7 + k * 3) % 13 + 1));
}

int
main(void)
{
	static const size_t	 counts[NP] = { 1000, 300, 7, 513, 100000, 33,
				    5 };
	static const enum rdzv_dtype types[NP] = { RDZV_F32, RDZV_F32,
				    RDZV_F32, RDZV_F64, RDZV_F32, RDZV_F16,
				    RDZV_F32 };
	struct rdzv_dp_param	 p[NP];
	struct rdzv_comm	*c;
	struct rdzv_dp		*dp;
	char			 err[512];
	float			*block_p, *block_g;
	size_t			 k, i, order[NP];
	int			 rc, step;

	if ((rc = rdzv_init(&c, NULL, err, sizeof err)) != 0) {
		fprintf(stderr, "dp_check: rdzv_init: %s\n", err);
		return (1);
	}
	rank = rdzv_rank(c);
	size = rdzv_size(c);

	/* Parameters 0-2 back to back, the others on their own. */
	block_p = calloc(1307, sizeof (float));
	block_g = calloc(1307, sizeof (float));
	if (block_p == NULL || block_g == NULL)
		fail(c, "calloc", RDZV_ENOMEM);
	for (k = 0; k < NP; k++) {
		p[k].count = counts[k];
		p[k].dtype = types[k];
		if (k < 3) {
			size_t	off = k == 0 ? 0 : k == 1 ? 1000 : 1300;

			p[k].param = block_p + off;
			p[k].grad = block_g + off;
		} else {
			p[k].param = calloc(counts[k], rdzv_dtype_size(types[k]));
			p[k].grad = calloc(counts[k], rdzv_dtype_size(types[k]));
			if (p[k].param == NULL || p[k].grad == NULL)
				fail(c, "calloc", RDZV_ENOMEM);
		}
	}

	/* Refused: nothing, an empty or bufferless parameter. */
	if (rdzv_dp_new(c, p, 0, 0, &dp) != RDZV_EINVAL || dp != NULL)
		fail(c, "dp_new with no parameters was accepted", RDZV_EINVAL);
	{
		struct rdzv_dp_param	bad = p[0];

		bad.grad = NULL;
		if (rdzv_dp_new(c, &bad, 1, 0, &dp) != RDZV_EINVAL)
			fail(c, "dp_new without grad accepted", RDZV_EINVAL);
		bad = p[0];
		bad.dtype = (enum rdzv_dtype)99;
		if (rdzv_dp_new(c, &bad, 1, 0, &dp) != RDZV_EINVAL)
			fail(c, "dp_new with a bad dtype accepted",
			    RDZV_EINVAL);
	}

	/* 4 KiB buckets: several, cut at sizes and dtype changes. */
	if ((rc = rdzv_dp_new(c, p, NP, 4096, &dp)) != 0)
		fail(c, "rdzv_dp_new", rc);

	/* Every rank starts from different values; rank 0's win. */
	for (k = 0; k < NP; k++)
		for (i = 0; i < counts[k]; i++)
			put(&p[k], i, 0, val(k, i) + (double)rank * 100);
	if ((rc = rdzv_dp_broadcast_params(dp, -1)) != 0)
		fail(c, "rdzv_dp_broadcast_params", rc);
	for (k = 0; k < NP; k++)
		for (i = 0; i < counts[k]; i++)
			if (get(&p[k], i, 0) != val(k, i)) {
				fprintf(stderr, "dp_check: rank %d: param %zu[%zu]"
				    " = %g after broadcast, want %g\n", rank, k,
				    i, get(&p[k], i, 0), val(k, i));
				return (1);
			}

	for (step = 0; step < 4; step++) {
		/* Rank r's gradient is (r + 1) times a pattern: the average
		 * over ranks is (size + 1) / 2 times it, exactly. */
		for (k = 0; k < NP; k++)
			for (i = 0; i < counts[k]; i++)
				put(&p[k], i, 1, val(k + (size_t)step, i) *
				    (double)(rank + 1));
		/* Each rank its own order; step 3 marks none at all. */
		for (k = 0; k < NP; k++)
			order[k] = (k * (size_t)(rank % 6 + 1) + (size_t)step) %
			    NP;
		for (k = 0; k < NP && step != 3; k++)
			if ((rc = rdzv_dp_grad_ready(dp, order[k])) != 0)
				fail(c, "rdzv_dp_grad_ready", rc);
		if (step == 1 && rdzv_dp_grad_ready(dp, 0) != RDZV_EINVAL)
			fail(c, "a gradient marked twice was accepted",
			    RDZV_EINVAL);
		if (step == 1 && rdzv_dp_grad_ready(dp, NP) != RDZV_EINVAL)
			fail(c, "an index out of range was accepted",
			    RDZV_EINVAL);
		if ((rc = rdzv_dp_finish(dp, -1)) != 0)
			fail(c, "rdzv_dp_finish", rc);
		for (k = 0; k < NP; k++)
			for (i = 0; i < counts[k]; i++) {
				double	want = val(k + (size_t)step, i) *
				    (double)(size + 1) / 2.0;

				if (get(&p[k], i, 1) != want) {
					fprintf(stderr, "dp_check: rank %d: step "
					    "%d grad %zu[%zu] = %g, want %g\n",
					    rank, step, k, i, get(&p[k], i, 1),
					    want);
					return (1);
				}
			}
	}
	rdzv_dp_free(dp);
	for (k = 3; k < NP; k++) {
		free(p[k].param);
		free(p[k].grad);
	}
	free(block_p);
	free(block_g);
	/*
	 * Meet before finalizing: comm.c's rdzv_finalize() still counts the
	 * background thread's last all-reduce as pending for a moment after
	 * rdzv_wait() returned it, and breaks the peers that are finishing it.
	 */
	if ((rc = rdzv_barrier(c, -1)) != 0)
		fail(c, "rdzv_barrier", rc);
	if ((rc = rdzv_finalize(c)) != 0)
		fail(NULL, "rdzv_finalize", rc);
	printf("dp_check ok rank %d\n", rank);
	return (0);
}
