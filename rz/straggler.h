/* SPDX-License-Identifier: Apache-2.0 */
/*
 * straggler.h: naming the ranks of a running round that hold the job
 * back, a pure detector (no I/O, no clock: the caller passes the time
 * in, rdzvd/progwatch.c feeds it the ranks' progress reports).
 *
 * A rank's speed is its steps per second of its own work: steps over
 * the wall time between two of its reports less the time it spent
 * waiting on its peers in between (the third field of its progress
 * report; a report without it counts no wait).  In a synchronous job
 * every rank makes the same steps, but a rank that waits on a slow peer
 * has little work time and so a high speed, while the slow one waits
 * little: the one waiting is never the one named.
 *
 * Per rank, per judgement (about once a second):
 *
 *	fine --speed < ratio x the others' median--> below (since t)
 *	below --still below a whole window--> NAMED (news: named)
 *	below --not below--> fine
 *	NAMED --not below a whole window--> fine (news: cleared)
 *
 * Speeds are measured from a rank's newest report back over half a
 * window (at least 2 s), so a rank is named about 1.25 windows after
 * it slowed; a rank with no speed (no report within that span of now,
 * or reports covering less than half of it) is neither judged nor
 * counted in the median; fewer than two
 * ranks with a speed judge nobody.  A new round (ranks renumbered)
 * forgets every rank.  At most one action is offered per window, across
 * rounds: the slowest named rank, once straggler_acted() says the last
 * action was a window ago.
 */
#ifndef RDZV_STRAGGLER_H
#define RDZV_STRAGGLER_H

#include <stddef.h>
#include <stdint.h>

#define STRAGGLER_RATIO_DEFAULT		0.5
#define STRAGGLER_WINDOW_DEFAULT_MS	30000
#define STRAGGLER_SPAN_MIN_MS		2000
#define STRAGGLER_NEWS_MAX		16	/* transitions per judgement */
#define STRAGGLER_RANKS_MAX		(1 << 20)

struct straggler;

struct straggler_news {
	int64_t	rank;
	int	named;		/* 1 named, 0 cleared */
	double	speed;		/* its steps/s of work */
	double	median;		/* the others' median */
};

struct straggler_verdict {
	struct straggler_news	news[STRAGGLER_NEWS_MAX];
	size_t			nnews;
	/* The rank to act on (the slowest named), or -1. */
	int64_t			act;
	double			act_speed, act_median;
};

struct straggler	*straggler_new(void);
void			 straggler_free(struct straggler *);
/*
 * Round round of nranks ranks is running: a new round forgets every
 * rank (their numbers change); the same round keeps them.  Returns 0 or
 * -1 (no memory, or nranks out of range: then nobody is judged).
 */
int	straggler_round(struct straggler *, int64_t round, int64_t nranks);
/*
 * Rank's latest report: step, the worker's wall clock (ms) and its
 * total wait on peers (ms; -1 when it does not say).  A report seen
 * before (same time) is ignored; a step going back forgets its past.
 */
void	straggler_report(struct straggler *, int64_t rank, int64_t step,
	    int64_t report_ms, int64_t wait_ms);
/*
 * Judges every rank at now (the reports' clock, wall ms) with ratio
 * (0 < ratio < 1) and window_ms; fills v.  Returns the number of news.
 */
size_t	straggler_judge(struct straggler *, double ratio, int64_t window_ms,
	    int64_t now, struct straggler_verdict *v);
/* An action was taken at now: none is offered for a window. */
void	straggler_acted(struct straggler *, int64_t now);
/* Whether rank is named now; how many are; its speed (-1: none). */
int	straggler_named(const struct straggler *, int64_t rank);
size_t	straggler_count(const struct straggler *);
double	straggler_speed(const struct straggler *, int64_t rank);

#endif /* RDZV_STRAGGLER_H */
