/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dp_sampler.c: unit tests of the distributed sampler
 * (libworker/sampler.c): shards disjoint and covering for world sizes 1
 * to 5 and sizes that do not divide evenly, padding and DROP_LAST counts,
 * one shuffled order shared by every rank (so a global batch is the same
 * whatever the world size), epochs and seeds that change the order,
 * resharding mid-epoch after a repair (the rest of the epoch's order, no
 * sample twice, none lost), and rejected arguments.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "rdzv_worker.h"

static const uint64_t	sizes_n[] = { 1, 2, 3, 7, 10, 13, 64, 1000, 60000 };

/*
 * Checks one (n, size, flags, epoch): every rank's count, that every
 * index is in range, and how often each appears over all ranks.
 */
static void
check_shards(uint64_t n, int size, int flags, uint64_t epoch)
{
	struct rdzv_sampler	*s;
	uint32_t		*seen;
	uint64_t		 count, i, total, twice = 0, never = 0;
	int			 r;

	seen = calloc(n, sizeof *seen);
	assert_non_null(seen);
	if (flags & RDZV_SAMPLER_DROP_LAST)
		count = n / (uint64_t)size;
	else
		count = (n + (uint64_t)size - 1) / (uint64_t)size;
	for (r = 0; r < size; r++) {
		assert_int_equal(rdzv_sampler_new(n, r, size, 1234, flags, &s),
		    0);
		assert_int_equal(rdzv_sampler_set_epoch(s, epoch), 0);
		assert_int_equal(rdzv_sampler_count(s), count);
		for (i = 0; i < count; i++) {
			uint64_t	k = rdzv_sampler_index(s, i);

			assert_true(k < n);
			seen[k]++;
		}
		rdzv_sampler_free(s);
	}
	total = count * (uint64_t)size;
	for (i = 0; i < n; i++) {
		if (seen[i] == 0)
			never++;
		else if (seen[i] > 1)
			twice += seen[i] - 1;
		/* Padding repeats each sample at most once more when n >= size. */
		if (n >= (uint64_t)size)
			assert_true(seen[i] <= 2);
	}
	if (flags & RDZV_SAMPLER_DROP_LAST) {
		/* Disjoint; exactly n mod size samples left out. */
		assert_int_equal(twice, 0);
		assert_int_equal(never, n - total);
	} else {
		/* Covering; exactly the padding repeated. */
		assert_int_equal(never, 0);
		assert_int_equal(twice, total - n);
	}
	free(seen);
}

static void
test_disjoint_and_covering(void **state)
{
	size_t	i;
	int	size, flags;

	(void)state;
	for (i = 0; i < sizeof sizes_n / sizeof sizes_n[0]; i++)
		for (size = 1; size <= 5; size++)
			for (flags = 0; flags < 4; flags++) {
				if ((flags & RDZV_SAMPLER_DROP_LAST) &&
				    sizes_n[i] < (uint64_t)size)
					continue;
				check_shards(sizes_n[i], size, flags, 0);
				check_shards(sizes_n[i], size, flags, 3);
			}
}

static void
test_counts(void **state)
{
	struct rdzv_sampler	*s;

	(void)state;
	/* torch's DistributedSampler counts: ceil(n/size), or floor. */
	assert_int_equal(rdzv_sampler_new(10, 0, 4, 0, 0, &s), 0);
	assert_int_equal(rdzv_sampler_count(s), 3);
	rdzv_sampler_free(s);
	assert_int_equal(rdzv_sampler_new(10, 3, 4, 0, RDZV_SAMPLER_DROP_LAST,
	    &s), 0);
	assert_int_equal(rdzv_sampler_count(s), 2);
	rdzv_sampler_free(s);
	assert_int_equal(rdzv_sampler_new(60000, 1, 4, 0,
	    RDZV_SAMPLER_SHUFFLE, &s), 0);
	assert_int_equal(rdzv_sampler_count(s), 15000);
	rdzv_sampler_free(s);
}

static void
test_unshuffled_order(void **state)
{
	struct rdzv_sampler	*s;

	(void)state;
	/* 10 over 4: entries 0..11, the last two padding (0, 1). */
	assert_int_equal(rdzv_sampler_new(10, 1, 4, 0, 0, &s), 0);
	assert_int_equal(rdzv_sampler_index(s, 0), 1);
	assert_int_equal(rdzv_sampler_index(s, 1), 5);
	assert_int_equal(rdzv_sampler_index(s, 2), 9);
	rdzv_sampler_free(s);
	assert_int_equal(rdzv_sampler_new(10, 3, 4, 0, 0, &s), 0);
	assert_int_equal(rdzv_sampler_index(s, 2), 1);
	rdzv_sampler_free(s);
	/* Fewer samples than ranks: padding cycles. */
	assert_int_equal(rdzv_sampler_new(2, 4, 5, 0, 0, &s), 0);
	assert_int_equal(rdzv_sampler_count(s), 1);
	assert_int_equal(rdzv_sampler_index(s, 0), 0);
	rdzv_sampler_free(s);
}

/*
 * Rank r's i-th sample is entry i * size + r of the one order a single
 * process would use: the global batch does not depend on the world size.
 */
static void
test_global_order(void **state)
{
	struct rdzv_sampler	*one, *s;
	uint64_t		 n = 1000, i;
	int			 size, r, flags = RDZV_SAMPLER_SHUFFLE;

	(void)state;
	assert_int_equal(rdzv_sampler_new(n, 0, 1, 99, flags, &one), 0);
	assert_int_equal(rdzv_sampler_set_epoch(one, 5), 0);
	for (size = 2; size <= 5; size++) {
		for (r = 0; r < size; r++) {
			assert_int_equal(rdzv_sampler_new(n, r, size, 99, flags,
			    &s), 0);
			assert_int_equal(rdzv_sampler_set_epoch(s, 5), 0);
			for (i = 0; i < rdzv_sampler_count(s); i++) {
				uint64_t k = i * (uint64_t)size + (uint64_t)r;

				assert_int_equal(rdzv_sampler_index(s, i),
				    rdzv_sampler_index(one, k % n));
			}
			rdzv_sampler_free(s);
		}
	}
	rdzv_sampler_free(one);
}

/*
 * A repair mid-epoch: 4 ranks consumed `start` positions, then the rest
 * is resharded over 3 (and back to 4): the new shards follow the epoch's
 * global order from start on, cover each remaining position once (plus
 * padding), and a new epoch starts from 0 again on the new world.
 */
static void
test_reshard(void **state)
{
	struct rdzv_sampler	*one, *s;
	uint64_t		 n = 1000, start, i, k, seen[1000];
	int			 size, r, flags = RDZV_SAMPLER_SHUFFLE;

	(void)state;
	assert_int_equal(rdzv_sampler_new(n, 0, 1, 7, flags, &one), 0);
	assert_int_equal(rdzv_sampler_set_epoch(one, 2), 0);
	for (start = 0; start <= n; start += 64 * 4 + 13) {
		for (size = 3; size <= 4; size++) {
			memset(seen, 0, sizeof seen);
			for (r = 0; r < size; r++) {
				assert_int_equal(rdzv_sampler_new(n, r % 4, 4, 7,
				    flags, &s), 0);
				assert_int_equal(rdzv_sampler_set_epoch(s, 2), 0);
				assert_int_equal(rdzv_sampler_reshard(s, r, size,
				    start), 0);
				assert_int_equal(rdzv_sampler_count(s),
				    (n - start + (uint64_t)size - 1) /
				    (uint64_t)size);
				for (i = 0; i < rdzv_sampler_count(s); i++) {
					k = start + i * (uint64_t)size +
					    (uint64_t)r;
					assert_int_equal(rdzv_sampler_index(s, i),
					    rdzv_sampler_index(one, k % n));
					if (k < n)
						seen[k]++;
				}
				/* The next epoch: whole again, on the new world. */
				assert_int_equal(rdzv_sampler_set_epoch(s, 3), 0);
				assert_int_equal(rdzv_sampler_count(s),
				    (n + (uint64_t)size - 1) / (uint64_t)size);
				rdzv_sampler_free(s);
			}
			for (k = start; k < n; k++)
				assert_int_equal(seen[k], 1);
		}
	}
	assert_int_equal(rdzv_sampler_new(n, 0, 1, 7, flags, &s), 0);
	assert_int_equal(rdzv_sampler_reshard(s, 3, 3, 0), RDZV_EINVAL);
	assert_int_equal(rdzv_sampler_reshard(s, 0, 0, 0), RDZV_EINVAL);
	assert_int_equal(rdzv_sampler_reshard(NULL, 0, 1, 0), RDZV_EINVAL);
	rdzv_sampler_free(s);
	rdzv_sampler_free(one);
}

static int
same_order(struct rdzv_sampler *a, struct rdzv_sampler *b)
{
	uint64_t	i;

	for (i = 0; i < rdzv_sampler_count(a); i++)
		if (rdzv_sampler_index(a, i) != rdzv_sampler_index(b, i))
			return (0);
	return (1);
}

static void
test_epochs_and_seeds(void **state)
{
	struct rdzv_sampler	*a, *b, *c;
	int			 flags = RDZV_SAMPLER_SHUFFLE;

	(void)state;
	assert_int_equal(rdzv_sampler_new(500, 0, 1, 7, flags, &a), 0);
	assert_int_equal(rdzv_sampler_new(500, 0, 1, 7, flags, &b), 0);
	assert_int_equal(rdzv_sampler_new(500, 0, 1, 8, flags, &c), 0);
	assert_true(same_order(a, b));
	assert_false(same_order(a, c));		/* seed matters */
	assert_int_equal(rdzv_sampler_set_epoch(b, 1), 0);
	assert_false(same_order(a, b));		/* epoch matters */
	assert_int_equal(rdzv_sampler_set_epoch(a, 1), 0);
	assert_true(same_order(a, b));		/* and is reproducible */
	assert_int_equal(rdzv_sampler_set_epoch(a, 2), 0);
	assert_int_equal(rdzv_sampler_set_epoch(a, 1), 0);
	assert_true(same_order(a, b));		/* going back gives it again */
	/* Shuffled, not the identity. */
	assert_int_equal(rdzv_sampler_set_epoch(c, 0), 0);
	{
		uint64_t	i, fixed = 0;

		for (i = 0; i < 500; i++)
			fixed += rdzv_sampler_index(c, i) == i;
		assert_true(fixed < 10);
	}
	rdzv_sampler_free(a);
	rdzv_sampler_free(b);
	rdzv_sampler_free(c);
}

/* Where sample 0 lands, over many epochs: near uniform over 10 places. */
static void
test_uniform(void **state)
{
	struct rdzv_sampler	*s;
	unsigned		 where[10] = { 0 };
	uint64_t		 e, i;

	(void)state;
	assert_int_equal(rdzv_sampler_new(10, 0, 1, 3, RDZV_SAMPLER_SHUFFLE,
	    &s), 0);
	for (e = 0; e < 5000; e++) {
		assert_int_equal(rdzv_sampler_set_epoch(s, e), 0);
		for (i = 0; i < 10; i++)
			if (rdzv_sampler_index(s, i) == 0)
				where[i]++;
	}
	/* Expect 500 each; 5 sigma is about 106. */
	for (i = 0; i < 10; i++)
		assert_in_range(where[i], 394, 606);
	rdzv_sampler_free(s);
}

static void
test_bad_arguments(void **state)
{
	struct rdzv_sampler	*s = (void *)1;

	(void)state;
	assert_int_equal(rdzv_sampler_new(0, 0, 1, 0, 0, &s), RDZV_EINVAL);
	assert_null(s);
	assert_int_equal(rdzv_sampler_new(10, 2, 2, 0, 0, &s), RDZV_EINVAL);
	assert_int_equal(rdzv_sampler_new(10, -1, 2, 0, 0, &s), RDZV_EINVAL);
	assert_int_equal(rdzv_sampler_new(10, 0, 0, 0, 0, &s), RDZV_EINVAL);
	assert_int_equal(rdzv_sampler_new(10, 0, 1, 0, 0x80, &s),
	    RDZV_EINVAL);
	assert_int_equal(rdzv_sampler_new(3, 0, 4, 0, RDZV_SAMPLER_DROP_LAST,
	    &s), RDZV_EINVAL);
	assert_int_equal(rdzv_sampler_set_epoch(NULL, 1), RDZV_EINVAL);
	rdzv_sampler_free(NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_disjoint_and_covering),
		cmocka_unit_test(test_counts),
		cmocka_unit_test(test_unshuffled_order),
		cmocka_unit_test(test_global_order),
		cmocka_unit_test(test_reshard),
		cmocka_unit_test(test_epochs_and_seeds),
		cmocka_unit_test(test_uniform),
		cmocka_unit_test(test_bad_arguments),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
