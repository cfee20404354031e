/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stragwatch.c: straggler detection wired to the daemon.  A timer
 * (every STRAGWATCH_TICK_MS) reads every running job's ranks' progress
 * reports (docs_progress_read: step, wall ms, total wait on peers) into
 * the job's detector (rz/straggler.c), judges, and hands what it finds to
 * the rendezvous: an event per straggler named or cleared
 * (rz_straggler_news) and, with straggler_action=replace, at most one
 * action per window (round_straggler_replace).  The ranks named now are
 * kept here for the job document, `rdzvctl members`, the status page
 * and /metrics.  Cost: one kv lookup per rank per tick.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>
#include <uthash.h>

#include "log.h"
#include "rdzvd.h"
#include "straggler.h"

#define STRAGWATCH_TICK_MS	1000

struct sw_job {
	UT_hash_handle		 hh;
	char			 id[RZ_ID_MAX + 1];
	struct straggler	*det;
	int64_t			 round;
	int			 seen;
	int64_t			 named_total, actions_total;
};

static struct sw_job	*sw_jobs;
static struct event	*sw_timer;

static struct sw_job *
sw_find(const char *id, int create)
{
	struct sw_job	*sj;

	HASH_FIND_STR(sw_jobs, id, sj);
	if (sj != NULL || !create)
		return sj;
	if ((sj = calloc(1, sizeof *sj)) == NULL)
		return NULL;
	if ((sj->det = straggler_new()) == NULL) {
		free(sj);
		return NULL;
	}
	strlcpy(sj->id, id, sizeof sj->id);
	sj->round = -1;
	HASH_ADD_STR(sw_jobs, id, sj);
	return sj;
}

static void
sw_free(struct sw_job *sj)
{
	HASH_DEL(sw_jobs, sj);
	straggler_free(sj->det);
	free(sj);
}

/* One running job: read its ranks, judge, report and act. */
static void
sw_job_cb(void *arg, const struct rz_strag_view *v)
{
	struct straggler_verdict	 vd;
	struct sw_job			*sj;
	int64_t				 r, step, ms, wait, now = round_wall_ms();
	size_t				 k;

	(void)arg;
	if ((sj = sw_find(v->job, 1)) == NULL)
		return;
	sj->seen = 1;
	if (straggler_round(sj->det, v->round, v->world_size) != 0)
		return;
	sj->round = v->round;
	for (r = 0; r < v->world_size; r++)
		if (docs_progress_read(slice_str(v->ns), r, &step, &ms,
		    &wait) == 0)
			straggler_report(sj->det, r, step, ms, wait);
	straggler_judge(sj->det, v->ratio, v->window_ms, now, &vd);
	for (k = 0; k < vd.nnews; k++) {
		if (vd.news[k].named)
			sj->named_total++;
		log_info("job %s: rank %lld %s a straggler (%.1f vs %.1f "
		    "steps/s of work)", v->job, (long long)vd.news[k].rank,
		    vd.news[k].named ? "is" : "is no longer",
		    vd.news[k].speed, vd.news[k].median);
		(void)rz_straggler_news(server.rz, slice_str(v->job),
		    v->round, vd.news[k].rank, vd.news[k].named,
		    vd.news[k].speed, vd.news[k].median, mono_ms());
	}
	if (!v->replace || vd.act < 0)
		return;
	/* Tried or done, the next try is a window away: a job that cannot
	 * repair now says so once a window, not once a tick. */
	straggler_acted(sj->det, now);
	if (round_straggler_replace(slice_str(v->job), v->round, vd.act) == 0)
		sj->actions_total++;
}

void
stragwatch_tick(void)
{
	struct sw_job	*sj, *tmp;
	json_t		*doc;

	if (server.rz == NULL)
		return;
	HASH_ITER(hh, sw_jobs, sj, tmp)
		sj->seen = 0;
	/* The callback may act, which changes jobs but not the set of
	 * jobs rz_strag_each walks (no job is created or purged). */
	rz_strag_each(server.rz, sw_job_cb, NULL);
	/* Jobs no longer running: their named ranks go, their totals stay
	 * until the job is gone. */
	HASH_ITER(hh, sw_jobs, sj, tmp) {
		if (sj->seen)
			continue;
		if ((doc = rz_job_doc(server.rz, slice_str(sj->id),
		    mono_ms())) != NULL)
			(void)straggler_round(sj->det, -1, 0);
		else
			sw_free(sj);
		json_decref(doc);
	}
}

static void
sw_timer_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct timeval	tv = { 0, STRAGWATCH_TICK_MS * 1000 };

	(void)fd;
	(void)ev;
	(void)arg;
	stragwatch_tick();
	evtimer_add(sw_timer, &tv);
}

int
stragwatch_init(void)
{
	if ((sw_timer = evtimer_new(server.base, sw_timer_cb, NULL)) == NULL)
		return -1;
	sw_timer_cb(-1, 0, NULL);
	return 0;
}

void
stragwatch_fini(void)
{
	struct sw_job	*sj, *tmp;

	if (sw_timer != NULL) {
		event_free(sw_timer);
		sw_timer = NULL;
	}
	HASH_ITER(hh, sw_jobs, sj, tmp)
		sw_free(sj);
}

int
stragwatch_named(const char *job, int64_t round, int64_t rank)
{
	struct sw_job	*sj;

	return (sj = sw_find(job, 0)) != NULL && sj->round == round &&
	    straggler_named(sj->det, rank);
}

double
stragwatch_speed(const char *job, int64_t round, int64_t rank)
{
	struct sw_job	*sj;

	if ((sj = sw_find(job, 0)) == NULL || sj->round != round)
		return -1;
	return straggler_speed(sj->det, rank);
}

void
stragwatch_metrics(struct evbuffer *out)
{
	static const struct {
		const char	*name, *type, *help;
	} series[] = {
		{ "rdzvd_job_stragglers", "gauge",
		  "Ranks of the job's running round named stragglers now." },
		{ "rdzvd_job_stragglers_named_total", "counter",
		  "Times a rank of the job was named a straggler." },
		{ "rdzvd_job_straggler_actions_total", "counter",
		  "Stragglers replaced (straggler_action=replace)." },
	};
	struct sw_job	*sj, *tmp;
	double		 v;
	size_t		 i;

	for (i = 0; i < sizeof series / sizeof series[0]; i++) {
		evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n",
		    series[i].name, series[i].help, series[i].name,
		    series[i].type);
		HASH_ITER(hh, sw_jobs, sj, tmp) {
			v = i == 0 ? (double)straggler_count(sj->det) :
			    i == 1 ? (double)sj->named_total :
			    (double)sj->actions_total;
			evbuffer_add_printf(out, "%s{job=\"", series[i].name);
			history_label(out, sj->id);
			evbuffer_add_printf(out, "\"} %.6g\n", v);
		}
	}
}
