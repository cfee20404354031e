/* SPDX-License-Identifier: Apache-2.0 */
/*
 * straggler.c: the straggler detector of straggler.h.  Pure: memory,
 * arithmetic, nothing else; tests/unit/test_straggler.c drives it.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "straggler.h"

#define STRAG_OBS_MAX	64	/* reports kept per rank */

struct strag_obs {
	int64_t	t, step, wait;
};

struct strag_rank {
	struct strag_obs	obs[STRAG_OBS_MAX];	/* ring */
	size_t			n, head;		/* head: oldest */
	double			speed;			/* -1: none */
	int64_t			below_since;		/* -1: not below */
	int64_t			above_since;		/* named: -1 not */
	int			named;
};

struct straggler {
	int64_t			 round;
	struct strag_rank	*r;
	size_t			 nr;
	double			*scratch;
	int64_t			 last_act;		/* -1: never */
};

struct straggler *
straggler_new(void)
{
	struct straggler	*s;

	if ((s = calloc(1, sizeof *s)) == NULL)
		return NULL;
	s->round = -1;
	s->last_act = -1;
	return s;
}

void
straggler_free(struct straggler *s)
{
	if (s == NULL)
		return;
	free(s->r);
	free(s->scratch);
	free(s);
}

static void
strag_rank_reset(struct strag_rank *r)
{
	r->n = r->head = 0;
	r->speed = -1;
	r->below_since = r->above_since = -1;
	r->named = 0;
}

int
straggler_round(struct straggler *s, int64_t round, int64_t nranks)
{
	size_t	i;

	if (round == s->round && (size_t)nranks == s->nr && s->r != NULL)
		return 0;
	free(s->r);
	free(s->scratch);
	s->r = NULL;
	s->scratch = NULL;
	s->nr = 0;
	s->round = round;
	if (nranks < 1 || nranks > STRAGGLER_RANKS_MAX)
		return -1;
	if ((s->r = calloc((size_t)nranks, sizeof *s->r)) == NULL ||
	    (s->scratch = calloc((size_t)nranks, sizeof *s->scratch)) == NULL) {
		free(s->r);
		s->r = NULL;
		return -1;
	}
	s->nr = (size_t)nranks;
	for (i = 0; i < s->nr; i++)
		strag_rank_reset(&s->r[i]);
	return 0;
}

static struct strag_obs *
strag_at(struct strag_rank *r, size_t i)
{
	return &r->obs[(r->head + i) % STRAG_OBS_MAX];
}

void
straggler_report(struct straggler *s, int64_t rank, int64_t step,
    int64_t report_ms, int64_t wait_ms)
{
	struct strag_rank	*r;
	struct strag_obs	*last;

	if (rank < 0 || (size_t)rank >= s->nr)
		return;
	r = &s->r[rank];
	if (r->n > 0) {
		last = strag_at(r, r->n - 1);
		if (report_ms <= last->t)
			return;		/* seen, or a clock gone back */
		if (step < last->step)
			strag_rank_reset(r);
	}
	if (r->n == STRAG_OBS_MAX) {
		r->head = (r->head + 1) % STRAG_OBS_MAX;
		r->n--;
	}
	last = strag_at(r, r->n++);
	last->t = report_ms;
	last->step = step;
	last->wait = wait_ms;
}

/*
 * r's steps per second of work from its newest report back to the
 * newest one at least span before it (or its oldest), or -1: no report
 * within span of now, or less than half a span between the two.
 */
static double
strag_speed(struct strag_rank *r, int64_t now, int64_t span)
{
	struct strag_obs	*o0 = NULL, *o1;
	int64_t			 work;
	size_t			 i;

	/* Reports too old for any later span go. */
	while (r->n > 0 && strag_at(r, 0)->t < now - 4 * span) {
		r->head = (r->head + 1) % STRAG_OBS_MAX;
		r->n--;
	}
	if (r->n < 2)
		return -1;
	o1 = strag_at(r, r->n - 1);
	for (i = r->n - 1; i-- > 0; ) {
		o0 = strag_at(r, i);
		if (o1->t - o0->t >= span)
			break;
	}
	if (o1->t < now - span || o1->t - o0->t < span / 2)
		return -1;
	work = o1->t - o0->t;
	if (o0->wait >= 0 && o1->wait >= o0->wait)
		work -= o1->wait - o0->wait;
	/* A rank that did (almost) nothing but wait: a hundred times its
	 * wall-clock rate, fast by any measure and still a number. */
	if (work < (o1->t - o0->t) / 100 + 1)
		work = (o1->t - o0->t) / 100 + 1;
	return (double)(o1->step - o0->step) * 1000.0 / (double)work;
}

static int
strag_cmp(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median of the n sorted speeds a less one occurrence of v. */
static double
strag_median_without(const double *a, size_t n, double v)
{
	size_t	k, m = n - 1, j;
	double	lo, hi;

	for (k = 0; k < n && a[k] != v; k++)
		;
	j = m / 2;
	hi = a[j < k ? j : j + 1];
	if (m % 2 == 1)
		return hi;
	j = m / 2 - 1;
	lo = a[j < k ? j : j + 1];
	return (lo + hi) / 2;
}

size_t
straggler_judge(struct straggler *s, double ratio, int64_t window_ms,
    int64_t now, struct straggler_verdict *v)
{
	struct strag_rank	*r;
	struct straggler_news	*nw;
	int64_t			 span;
	double			 med, worst = 0;
	size_t			 i, n = 0;
	int			 below;

	memset(v, 0, sizeof *v);
	v->act = -1;
	span = window_ms / 2;
	if (span < STRAGGLER_SPAN_MIN_MS)
		span = STRAGGLER_SPAN_MIN_MS;
	for (i = 0; i < s->nr; i++) {
		r = &s->r[i];
		if ((r->speed = strag_speed(r, now, span)) >= 0)
			s->scratch[n++] = r->speed;
	}
	if (n < 2)
		return 0;
	qsort(s->scratch, n, sizeof *s->scratch, strag_cmp);
	for (i = 0; i < s->nr; i++) {
		r = &s->r[i];
		if (r->speed < 0)
			continue;
		med = strag_median_without(s->scratch, n, r->speed);
		below = r->speed < ratio * med;
		if (below) {
			r->above_since = -1;
			if (r->below_since < 0)
				r->below_since = now;
		} else {
			r->below_since = -1;
			if (r->named && r->above_since < 0)
				r->above_since = now;
		}
		nw = v->nnews < STRAGGLER_NEWS_MAX ? &v->news[v->nnews] : NULL;
		if (nw != NULL && !r->named && below &&
		    now - r->below_since >= window_ms) {
			r->named = 1;
			v->nnews++;
			nw->named = 1;
		} else if (nw != NULL && r->named && !below &&
		    now - r->above_since >= window_ms) {
			r->named = 0;
			r->above_since = -1;
			v->nnews++;
			nw->named = 0;
		} else
			nw = NULL;
		if (nw != NULL) {
			nw->rank = (int64_t)i;
			nw->speed = r->speed;
			nw->median = med;
		}
		if (r->named && below && (v->act < 0 ||
		    r->speed / med < worst)) {
			v->act = (int64_t)i;
			v->act_speed = r->speed;
			v->act_median = med;
			worst = r->speed / med;
		}
	}
	if (s->last_act >= 0 && now - s->last_act < window_ms)
		v->act = -1;
	return v->nnews;
}

void
straggler_acted(struct straggler *s, int64_t now)
{
	s->last_act = now;
}

int
straggler_named(const struct straggler *s, int64_t rank)
{
	return rank >= 0 && (size_t)rank < s->nr && s->r[rank].named;
}

size_t
straggler_count(const struct straggler *s)
{
	size_t	i, n = 0;

	for (i = 0; i < s->nr; i++)
		n += s->r[i].named;
	return n;
}

double
straggler_speed(const struct straggler *s, int64_t rank)
{
	if (rank < 0 || (size_t)rank >= s->nr)
		return -1;
	return s->r[rank].speed;
}
