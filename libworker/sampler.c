/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sampler.c: the distributed sampler (rdzv_sampler_*), what torch's
 * DistributedSampler does for a C program.
 *
 * Each epoch the n sample indices are put in one order that every rank
 * computes alike: 0..n-1, or with RDZV_SAMPLER_SHUFFLE a Fisher-Yates
 * permutation drawn from a generator seeded by (seed, epoch).  The order
 * is made a multiple of size long (padded by repeating it from its start,
 * or cut with RDZV_SAMPLER_DROP_LAST) and rank r takes every size-th
 * entry from r on.  Because a rank's i-th sample is entry i * size + r,
 * the ranks' i-th..(i+b-1)-th samples together are entries i * size ..
 * (i + b) * size - 1: the same global batch, whatever the world size, as
 * a single process taking batches of b * size would see.  That is what
 * lets a data-parallel run follow the single-process loss curve.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "rdzv_worker.h"

struct rdzv_sampler {
	uint64_t	 n;		/* samples in the data set */
	uint64_t	 count;		/* per rank per epoch */
	uint64_t	 seed;
	uint64_t	 epoch;
	uint64_t	 start;		/* first position of this epoch's shards */
	int		 rank;
	int		 size;
	int		 flags;
	uint32_t	*perm32;	/* the epoch's order, when n < 2^32 */
	uint64_t	*perm64;	/* otherwise */
};

/* splitmix64 step: a fast generator with a well-mixed 64-bit output. */
static uint64_t
sampler_next(uint64_t *s)
{
	uint64_t	z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

/* Uniform in [0, bound), bound > 0, without modulo bias (rejection). */
static uint64_t
sampler_below(uint64_t *s, uint64_t bound)
{
	uint64_t	r, limit;

	/* The largest multiple of bound that fits, as UINT64_MAX + 1 - x. */
	limit = UINT64_MAX - (UINT64_MAX % bound + 1) % bound;
	do
		r = sampler_next(s);
	while (r > limit);
	return (r % bound);
}

static void
sampler_perm_set(struct rdzv_sampler *s, uint64_t i, uint64_t v)
{
	if (s->perm32 != NULL)
		s->perm32[i] = (uint32_t)v;
	else
		s->perm64[i] = v;
}

static uint64_t
sampler_perm_get(const struct rdzv_sampler *s, uint64_t i)
{
	if (s->perm32 != NULL)
		return (s->perm32[i]);
	return (s->perm64[i]);
}

/* Draws the epoch's order into the permutation array. */
static void
sampler_shuffle(struct rdzv_sampler *s)
{
	uint64_t	st, i, j, a, b;

	for (i = 0; i < s->n; i++)
		sampler_perm_set(s, i, i);
	/*
	 * Seed and epoch go through the generator's mixer separately, so
	 * nearby (seed, epoch) pairs give unrelated streams.
	 */
	st = s->seed;
	st = sampler_next(&st) ^ s->epoch;
	st = sampler_next(&st);
	for (i = s->n - 1; i > 0; i--) {
		j = sampler_below(&st, i + 1);
		a = sampler_perm_get(s, i);
		b = sampler_perm_get(s, j);
		sampler_perm_set(s, i, b);
		sampler_perm_set(s, j, a);
	}
}

/*
 * Shards n samples over size ranks.  Returns 0, RDZV_EINVAL (no samples,
 * rank outside 0..size-1, unknown flags, or DROP_LAST with fewer samples
 * than ranks) or RDZV_ENOMEM.
 */
/* Each rank's share of positions start..n-1. */
static void
sampler_count(struct rdzv_sampler *s)
{
	uint64_t	left = s->n - s->start, size = (uint64_t)s->size;

	if (s->flags & RDZV_SAMPLER_DROP_LAST)
		s->count = left / size;
	else
		s->count = left / size + (left % size != 0);
}

int
rdzv_sampler_new(uint64_t n, int rank, int size, uint64_t seed, int flags,
    struct rdzv_sampler **sp)
{
	struct rdzv_sampler	*s;

	*sp = NULL;
	if (n == 0 || size <= 0 || rank < 0 || rank >= size ||
	    (flags & ~(RDZV_SAMPLER_SHUFFLE | RDZV_SAMPLER_DROP_LAST)) != 0)
		return (RDZV_EINVAL);
	if ((flags & RDZV_SAMPLER_DROP_LAST) && n < (uint64_t)size)
		return (RDZV_EINVAL);
	if ((s = calloc(1, sizeof *s)) == NULL)
		return (RDZV_ENOMEM);
	s->n = n;
	s->rank = rank;
	s->size = size;
	s->seed = seed;
	s->flags = flags;
	sampler_count(s);
	if (flags & RDZV_SAMPLER_SHUFFLE) {
		/* Half the memory for every data set that fits in 32 bits. */
		if (n - 1 <= UINT32_MAX)
			s->perm32 = calloc(n, sizeof *s->perm32);
		else if (n <= SIZE_MAX / sizeof *s->perm64)
			s->perm64 = calloc(n, sizeof *s->perm64);
		if (s->perm32 == NULL && s->perm64 == NULL) {
			free(s);
			return (RDZV_ENOMEM);
		}
		sampler_shuffle(s);
	}
	*sp = s;
	return (0);
}

/* Frees the sampler; NULL is allowed. */
void
rdzv_sampler_free(struct rdzv_sampler *s)
{
	if (s == NULL)
		return;
	free(s->perm32);
	free(s->perm64);
	free(s);
}

/* Selects the epoch's order; returns 0 or RDZV_EINVAL for a NULL sampler. */
int
rdzv_sampler_set_epoch(struct rdzv_sampler *s, uint64_t epoch)
{
	if (s == NULL)
		return (RDZV_EINVAL);
	if (s->epoch == epoch)
		return (0);
	s->epoch = epoch;
	if (s->start != 0) {
		s->start = 0;
		sampler_count(s);
	}
	if (s->flags & RDZV_SAMPLER_SHUFFLE)
		sampler_shuffle(s);
	return (0);
}

int
rdzv_sampler_reshard(struct rdzv_sampler *s, int rank, int size,
    uint64_t start)
{
	if (s == NULL || size <= 0 || rank < 0 || rank >= size)
		return (RDZV_EINVAL);
	if (start > s->n)
		start = s->n;
	s->rank = rank;
	s->size = size;
	s->start = start;
	sampler_count(s);
	return (0);
}

/* This rank's samples per epoch. */
uint64_t
rdzv_sampler_count(const struct rdzv_sampler *s)
{
	return (s->count);
}

/*
 * This rank's i-th sample (i < count; larger i are taken modulo count so
 * the result is always a valid index).
 */
uint64_t
rdzv_sampler_index(const struct rdzv_sampler *s, uint64_t i)
{
	uint64_t	k;

	i = s->count > 0 ? i % s->count : 0;
	/* start + i * size + rank < start + count * size <= n + size: no
	 * overflow for sane n. */
	k = s->start + i * (uint64_t)s->size + (uint64_t)s->rank;
	/* Padding repeats the order from its start. */
	k %= s->n;
	if (s->flags & RDZV_SAMPLER_SHUFFLE)
		return (sampler_perm_get(s, k));
	return (k);
}
