/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_straggler.c: the straggler detector (rz/straggler.c), driven
 * directly with the reports a synchronous data-parallel job makes: every
 * rank at the same step, the fast ones waiting on the slow one.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "straggler.h"

#define RATIO	0.5
#define WINDOW	8000

/* A synchronous job: every rank at the same step, each rank's total
 * wait on its peers, the time. */
struct sim {
	int	n;
	int64_t	t, step, wait[8];
};

/* One second of the job: rank i computes a step in work[i] ms, then
 * waits for the slowest; every rank reports (with its wait or not). */
static void
sim_second(struct straggler *s, struct sim *j, const int64_t *work, int wait)
{
	int64_t	stept = 0, steps;
	int	i;

	for (i = 0; i < j->n; i++)
		if (work[i] > stept)
			stept = work[i];
	steps = 1000 / stept;
	j->t += 1000;
	j->step += steps;
	for (i = 0; i < j->n; i++) {
		j->wait[i] += steps * (stept - work[i]);
		straggler_report(s, i, j->step, j->t, wait ? j->wait[i] : -1);
	}
}

/* Runs the job for secs seconds, judging every second; returns the time
 * rank `who` was first named (-1 never) and fails if any other was. */
static int64_t
run(struct straggler *s, struct sim *j, const int64_t *work, int secs,
    int wait, int64_t who)
{
	struct straggler_verdict	v;
	int64_t				named = -1;
	size_t				k;

	while (secs-- > 0) {
		sim_second(s, j, work, wait);
		straggler_judge(s, RATIO, WINDOW, j->t, &v);
		for (k = 0; k < v.nnews; k++) {
			if (!v.news[k].named)
				continue;
			assert_int_equal(v.news[k].rank, who);
			assert_true(v.news[k].speed < RATIO * v.news[k].median);
			if (named < 0)
				named = j->t;
		}
	}
	return named;
}

/* One rank at a third of the others' speed: named once its speed has
 * been low for a window, never the ones waiting on it; one action. */
static void
test_slow_rank_named(void **state)
{
	struct straggler		*s = straggler_new();
	struct straggler_verdict	 v;
	struct sim			 j = { .n = 4 };
	int64_t				 work[4] = { 10, 10, 30, 10 }, t;
	int				 i;

	(void)state;
	assert_int_equal(straggler_round(s, 1, 4), 0);
	t = run(s, &j, work, 20, 1, 2);
	assert_true(t >= WINDOW && t <= WINDOW + 4000);
	assert_true(straggler_named(s, 2));
	assert_false(straggler_named(s, 0) || straggler_named(s, 1) ||
	    straggler_named(s, 3));
	assert_int_equal(straggler_count(s), 1);
	assert_true(straggler_speed(s, 2) > 0 && straggler_speed(s, 2) <
	    straggler_speed(s, 0));
	/* The action: offered, then not again within a window. */
	sim_second(s, &j, work, 1);
	straggler_judge(s, RATIO, WINDOW, j.t, &v);
	assert_int_equal(v.act, 2);
	assert_true(v.act_speed < RATIO * v.act_median);
	straggler_acted(s, j.t);
	for (i = 1; i < WINDOW / 1000; i++) {
		sim_second(s, &j, work, 1);
		straggler_judge(s, RATIO, WINDOW, j.t, &v);
		assert_int_equal(v.act, -1);
	}
	sim_second(s, &j, work, 1);
	straggler_judge(s, RATIO, WINDOW, j.t, &v);
	assert_int_equal(v.act, 2);
	straggler_free(s);
}

/* Two ranks: the one waiting on the slow one is never named. */
static void
test_two_ranks(void **state)
{
	struct straggler	*s = straggler_new();
	struct sim		 j = { .n = 2 };
	int64_t			 work[2] = { 40, 12 };

	(void)state;
	assert_int_equal(straggler_round(s, 3, 2), 0);
	assert_true(run(s, &j, work, 30, 1, 0) >= WINDOW);
	assert_false(straggler_named(s, 1));
	straggler_free(s);
}

/* Without the wait in the reports every rank of a synchronous job has
 * the same speed: nobody is named. */
static void
test_no_wait_names_nobody(void **state)
{
	struct straggler	*s = straggler_new();
	struct sim		 j = { .n = 3 };
	int64_t			 work[3] = { 10, 35, 10 };

	(void)state;
	assert_int_equal(straggler_round(s, 1, 3), 0);
	assert_int_equal(run(s, &j, work, 30, 0, -1), -1);
	assert_int_equal(straggler_count(s), 0);
	straggler_free(s);
}

/* Every rank equal: nobody; slow for less than a window: not named. */
static void
test_short_dip_and_equal(void **state)
{
	struct straggler	*s = straggler_new();
	struct sim		 j = { .n = 3 };
	int64_t			 slow[3] = { 10, 10, 40 }, even[3] = { 10, 10, 10 };

	(void)state;
	assert_int_equal(straggler_round(s, 1, 3), 0);
	assert_int_equal(run(s, &j, even, 10, 1, -1), -1);
	assert_int_equal(run(s, &j, slow, WINDOW / 2000, 1, -1), -1);
	assert_int_equal(run(s, &j, even, 20, 1, -1), -1);
	assert_int_equal(straggler_count(s), 0);
	straggler_free(s);
}

/* A named rank that is fast again for a window is cleared; a new round
 * forgets every rank. */
static void
test_cleared_and_new_round(void **state)
{
	struct straggler		*s = straggler_new();
	struct straggler_verdict	 v;
	struct sim			 j = { .n = 3 };
	int64_t				 slow[3] = { 10, 30, 10 };
	int64_t				 even[3] = { 10, 10, 10 };
	int64_t				 cleared = -1, back;
	size_t				 k;
	int				 i;

	(void)state;
	assert_int_equal(straggler_round(s, 1, 3), 0);
	assert_true(run(s, &j, slow, 20, 1, 1) > 0);
	back = j.t;
	for (i = 0; i < 20; i++) {
		sim_second(s, &j, even, 1);
		straggler_judge(s, RATIO, WINDOW, j.t, &v);
		for (k = 0; k < v.nnews; k++) {
			assert_int_equal(v.news[k].rank, 1);
			assert_int_equal(v.news[k].named, 0);
			cleared = j.t;
		}
	}
	assert_true(cleared >= back + WINDOW);
	assert_int_equal(straggler_count(s), 0);
	/* Named again, then a new round: forgotten. */
	assert_true(run(s, &j, slow, 20, 1, 1) > 0);
	assert_int_equal(straggler_count(s), 1);
	assert_int_equal(straggler_round(s, 2, 3), 0);
	assert_int_equal(straggler_count(s), 0);
	assert_true(straggler_speed(s, 1) < 0);
	straggler_free(s);
}

/* Reports: a repeat is ignored, a step going back forgets the past, a
 * rank out of range is ignored, too few ranks judge nobody, a bad round
 * size is refused. */
static void
test_reports_and_limits(void **state)
{
	struct straggler		*s = straggler_new();
	struct straggler_verdict	 v;

	(void)state;
	assert_int_equal(straggler_round(s, 1, 0), -1);
	assert_int_equal(straggler_round(s, 1, 2), 0);
	straggler_report(s, 5, 1, 1000, 0);
	straggler_report(s, -1, 1, 1000, 0);
	straggler_report(s, 0, 10, 1000, 0);
	straggler_report(s, 0, 10, 1000, 0);
	straggler_report(s, 0, 20, 3000, 0);
	/* One rank with a speed: nobody judged. */
	assert_int_equal(straggler_judge(s, RATIO, WINDOW, 3000, &v), 0);
	assert_true(straggler_speed(s, 0) > 4.9 && straggler_speed(s, 0) < 5.1);
	assert_true(straggler_speed(s, 1) < 0);
	assert_int_equal(v.act, -1);
	/* A rank that only waited: fast, and a finite figure. */
	straggler_report(s, 1, 10, 1000, 0);
	straggler_report(s, 1, 20, 3000, 2500);
	straggler_judge(s, RATIO, WINDOW, 3000, &v);
	assert_true(straggler_speed(s, 1) > 100 * straggler_speed(s, 0) / 5);
	assert_true(straggler_speed(s, 1) < 1e6);
	assert_false(straggler_named(s, 0) || straggler_named(s, 1));
	/* A step back: only the new report is left, no speed. */
	straggler_report(s, 0, 3, 4000, 0);
	straggler_judge(s, RATIO, WINDOW, 4000, &v);
	assert_true(straggler_speed(s, 0) < 0);
	straggler_free(s);
}

int
main(void)
{
	const struct CMUnitTest	tests[] = {
		cmocka_unit_test(test_slow_rank_named),
		cmocka_unit_test(test_two_ranks),
		cmocka_unit_test(test_no_wait_names_nobody),
		cmocka_unit_test(test_short_dip_and_equal),
		cmocka_unit_test(test_cleared_and_new_round),
		cmocka_unit_test(test_reports_and_limits),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
