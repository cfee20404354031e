/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progwatch.c: workers' progress reports, read in one place.  Workers
 * write "progress/<rank>" = "<step> <unix_ms> [<wait_ms>]" into their
 * round's namespace; this file is the one reader of those keys
 * (progwatch_read, which docs.c's documents use too), and owns the one
 * per-job table and the one timer that sample them for the two
 * consumers that follow a job over time:
 *
 *   - history.c's ring of samples (every --history-interval-ms): every
 *     job, and for a running one the reports of its members' ranks;
 *   - the straggler detector (rz/straggler.c, every PROGWATCH_STRAG_MS):
 *     every running job whose detection is on (rz_strag_each), its
 *     ranks 0 .. world_size - 1, judged, and what it finds handed to the
 *     rendezvous: an event per straggler named or cleared
 *     (rz_straggler_news) and, with straggler_action=replace, at most
 *     one action per window (round_straggler_replace).
 *
 * Why a file of its own: the sampling was done twice before, by
 * history.c and by stragwatch.c (each with a table and a timer), on a
 * reader that lived in docs.c; none of the three owned it.  history.c
 * keeps what only it knows (its ring, marks and rows) and gets each
 * sample through history_update(); the straggler wiring, which was
 * nothing but sampling and feeding, lives here.  (Named after the
 * stragwatch.c it takes in, and apart from agent/progress.c, the
 * agent's channel to its workers.)
 *
 * The timer fires when the next of the two consumers is due, each on
 * its own period counted from its last turn, so each keeps the cadence
 * its own timer had.  A tick on which both are due reads a job's keys
 * once (history's read covers the detector's ranks too).  Cost: one kv
 * lookup per rank per tick; a sample keeps the reports found, so its
 * memory follows the keys in the store, not the ranks a peer declared.
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

#define PROGWATCH_STRAG_MS	1000	/* the detector's period */
/* Longest "progress/<rank>" value taken: "<step> <unix_ms> [<wait_ms>]",
 * int64 each. */
#define PROGWATCH_VALUE_MAX	64

struct progwatch_job {
	UT_hash_handle		 hh;
	char			 id[RZ_ID_MAX + 1];
	/* the reports read this tick (tick == progwatch_ticks) */
	struct progwatch_sample	 smp;
	char			 ns[RZ_ID_MAX + 64];
	size_t			 cap;		/* of smp.r */
	uint64_t		 tick;
	/* history.c's state: NULL until its turn first sees the job */
	struct hist_job		*hist;
	int			 hist_seen;
	/* the detector: NULL while detection is off */
	struct straggler	*det;
	int64_t			 det_round;
	int			 det_seen;
	int64_t			 named_total, actions_total;
};

static struct progwatch_job	*pw_jobs;
static struct event		*progwatch_timer;
static uint64_t			 progwatch_ticks;
static int64_t			 hist_left, strag_left, armed_ms;

/*
 * Parses a "progress/<rank>" value, "<step> <unix_ms>" in decimal, and
 * maybe " <wait_ms>" (the rank's total wait on its peers; *wait -1 when
 * absent).  Anyone who can reach the round's namespace may have written
 * it, so anything else (signs, blanks, a missing or extra field,
 * overflow) is refused with -1 rather than shown.
 */
static int
progwatch_parse(struct slice v, int64_t *step, int64_t *ms, int64_t *wait)
{
	char		 buf[PROGWATCH_VALUE_MAX + 1], *f[3];
	const char	*errstr;
	int64_t		*out[3] = { step, ms, wait };
	size_t		 i, nf = 1;

	if (v.len == 0 || v.len > PROGWATCH_VALUE_MAX)
		return -1;
	memcpy(buf, v.p, v.len);
	buf[v.len] = '\0';
	f[0] = buf;
	for (i = 0; i < v.len; i++) {
		if (buf[i] == ' ') {
			if (nf == 3)
				return -1;
			buf[i] = '\0';
			f[nf++] = buf + i + 1;
		} else if (buf[i] < '0' || buf[i] > '9')
			return -1;
	}
	if (nf < 2)
		return -1;
	*wait = -1;
	for (i = 0; i < nf; i++) {
		if (*f[i] == '\0')
			return -1;
		*out[i] = strtonum(f[i], 0, INT64_MAX, &errstr);
		if (errstr != NULL)
			return -1;
	}
	return 0;
}

/*
 * A rank's report is "progress/<rank>" as librdzvworker writes it, or
 * "/progress/<rank>" as a torch TCPStore client (the python helper's
 * reporter, rdzv/watcher.py) writes the same key: torch puts "/" before
 * every key it sends.
 */
int
progwatch_read(struct slice ns, int64_t rank, int64_t *step, int64_t *ms,
    int64_t *wait)
{
	struct slice	 key, v;
	char		 kbuf[48];
	int		 k;

	k = snprintf(kbuf, sizeof kbuf, "/progress/%" PRId64, rank);
	key.p = (const uint8_t *)kbuf + 1;
	key.len = (size_t)k - 1;
	if (kv_get(server.kv, ns, key, &v) != 0) {
		key.p = (const uint8_t *)kbuf;
		key.len = (size_t)k;
		if (kv_get(server.kv, ns, key, &v) != 0)
			return -1;
	}
	return progwatch_parse(v, step, ms, wait);
}

static struct progwatch_job *
progwatch_find(const char *id, int create)
{
	struct progwatch_job	*pj;

	HASH_FIND_STR(pw_jobs, id, pj);
	if (pj != NULL || !create || strlen(id) > RZ_ID_MAX)
		return pj;
	if ((pj = calloc(1, sizeof *pj)) == NULL)
		return NULL;
	strlcpy(pj->id, id, sizeof pj->id);
	pj->det_round = -1;
	HASH_ADD_STR(pw_jobs, id, pj);
	return pj;
}

/* Frees pj once neither consumer keeps anything in it. */
static void
progwatch_release(struct progwatch_job *pj)
{
	if (pj->hist != NULL || pj->det != NULL)
		return;
	HASH_DEL(pw_jobs, pj);
	free(pj->smp.r);
	free(pj);
}

/*
 * Reads ranks 0 .. n - 1 of round in namespace ns into pj's sample of
 * this tick: one lookup per rank, the reports found kept in rank order
 * (so memory follows the keys the store holds, not the ranks a peer
 * declared).  Returns the sample, or NULL when out of memory.
 */
static const struct progwatch_sample *
progwatch_sample(struct progwatch_job *pj, const char *ns, int64_t round,
    int64_t n)
{
	struct progwatch_rank	 pr, *r;
	size_t			 cap;
	int64_t			 i;

	pj->tick = 0;
	pj->smp.n = 0;
	for (i = 0; i < n; i++) {
		if (progwatch_read(slice_str(ns), i, &pr.step, &pr.ms,
		    &pr.wait) != 0)
			continue;
		if (pj->smp.n == pj->cap) {
			cap = pj->cap == 0 ? 16 : pj->cap * 2;
			if ((r = reallocarray(pj->smp.r, cap, sizeof *r)) ==
			    NULL)
				return NULL;
			pj->smp.r = r;
			pj->cap = cap;
		}
		pr.rank = i;
		pj->smp.r[pj->smp.n++] = pr;
	}
	strlcpy(pj->ns, ns, sizeof pj->ns);
	pj->smp.ns = pj->ns;
	pj->smp.round = round;
	pj->smp.nread = n > 0 ? n : 0;
	pj->tick = progwatch_ticks;
	return &pj->smp;
}

/*
 * A running job's sample for history: the ranks of its members (from
 * job doc's rank_base and local_world_size) and those of its world, so
 * that the detector's turn in the same tick reads nothing again.  NULL:
 * not running with a namespace, or out of memory.
 */
static const struct progwatch_sample *
progwatch_sample_doc(struct progwatch_job *pj, json_t *doc, const char *state)
{
	json_t		*m, *base;
	const char	*ns;
	int64_t		 n, end;
	size_t		 i;

	if (doc == NULL || strcmp(state, "running") != 0)
		return NULL;
	ns = json_string_value(json_object_get(doc, "store_ns"));
	if (ns == NULL || *ns == '\0' ||
	    !json_is_array(json_object_get(doc, "members")))
		return NULL;
	n = json_integer_value(json_object_get(doc, "world_size"));
	json_array_foreach(json_object_get(doc, "members"), i, m) {
		if (!json_is_integer(base = json_object_get(m, "rank_base")))
			continue;
		end = json_integer_value(base) + json_integer_value(
		    json_object_get(m, "local_world_size"));
		if (end > n)
			n = end;
	}
	return progwatch_sample(pj, ns, json_integer_value(json_object_get(doc,
	    "round")), n);
}

/* History's turn: every job the rendezvous has, sampled if running. */
static void
progwatch_hist_turn(void)
{
	struct progwatch_job		*pj, *tmp;
	const struct progwatch_sample	*smp;
	json_t				*jobs, *j, *doc;
	const char			*id, *state;
	int64_t				 wall = round_wall_ms();
	size_t				 i;

	if ((jobs = rz_jobs_doc(server.rz)) == NULL)
		return;
	HASH_ITER(hh, pw_jobs, pj, tmp)
		pj->hist_seen = 0;
	json_array_foreach(jobs, i, j) {
		id = json_string_value(json_object_get(j, "job"));
		state = json_string_value(json_object_get(j, "state"));
		if (id == NULL || state == NULL ||
		    (pj = progwatch_find(id, 1)) == NULL)
			continue;
		if (pj->hist == NULL && (pj->hist = history_new(id)) == NULL) {
			progwatch_release(pj);
			continue;
		}
		pj->hist_seen = 1;
		doc = NULL;
		if (strcmp(state, "running") == 0)
			doc = rz_job_doc(server.rz, slice_str(id), mono_ms());
		smp = progwatch_sample_doc(pj, doc, state);
		history_update(pj->hist, j, smp, doc, wall);
		json_decref(doc);
	}
	json_decref(jobs);
	/* A job the rendezvous no longer has (purged): forgotten too. */
	HASH_ITER(hh, pw_jobs, pj, tmp)
		if (pj->hist != NULL && !pj->hist_seen)
			progwatch_drop(pj->id);
}

/* One running job of the detector's turn: judge, report and act. */
static void
progwatch_strag_cb(void *arg, const struct rz_strag_view *v)
{
	const struct progwatch_sample	*smp;
	const struct progwatch_rank	*pr;
	struct straggler_verdict	 vd;
	struct progwatch_job		*pj;
	int64_t				 now = round_wall_ms();
	size_t				 k;

	(void)arg;
	if ((pj = progwatch_find(v->job, 1)) == NULL)
		return;
	if (pj->det == NULL && (pj->det = straggler_new()) == NULL) {
		progwatch_release(pj);
		return;
	}
	pj->det_seen = 1;
	if (straggler_round(pj->det, v->round, v->world_size) != 0)
		return;
	pj->det_round = v->round;
	/* History's turn of this tick read these ranks already. */
	smp = &pj->smp;
	if (pj->tick != progwatch_ticks || smp->round != v->round ||
	    strcmp(smp->ns, v->ns) != 0 || smp->nread < v->world_size)
		smp = progwatch_sample(pj, v->ns, v->round, v->world_size);
	for (k = 0; smp != NULL && k < smp->n; k++) {
		pr = &smp->r[k];
		if (pr->rank < v->world_size)
			straggler_report(pj->det, pr->rank, pr->step, pr->ms,
			    pr->wait);
	}
	straggler_judge(pj->det, v->ratio, v->window_ms, now, &vd);
	for (k = 0; k < vd.nnews; k++) {
		if (vd.news[k].named)
			pj->named_total++;
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
	straggler_acted(pj->det, now);
	if (round_straggler_replace(slice_str(v->job), v->round, vd.act) == 0)
		pj->actions_total++;
}

/* The detector's turn: every running job with detection on. */
static void
progwatch_strag_turn(void)
{
	struct progwatch_job	*pj, *tmp;
	json_t			*doc;

	HASH_ITER(hh, pw_jobs, pj, tmp)
		pj->det_seen = 0;
	/* The callback may act, which changes jobs but not the set of
	 * jobs rz_strag_each walks (no job is created or purged). */
	rz_strag_each(server.rz, progwatch_strag_cb, NULL);
	/* Jobs no longer judged: their named ranks go, their totals stay
	 * until the job is gone. */
	HASH_ITER(hh, pw_jobs, pj, tmp) {
		if (pj->det == NULL || pj->det_seen)
			continue;
		if ((doc = rz_job_doc(server.rz, slice_str(pj->id),
		    mono_ms())) != NULL)
			(void)straggler_round(pj->det, -1, 0);
		else {
			straggler_free(pj->det);
			pj->det = NULL;
			pj->det_round = -1;
			pj->named_total = pj->actions_total = 0;
			progwatch_release(pj);
		}
		json_decref(doc);
	}
}

/* Runs history's turn (hist) and the detector's (strag): one tick. */
static void
progwatch_tick(int hist, int strag)
{
	if (server.rz == NULL)
		return;
	progwatch_ticks++;
	if (hist)
		progwatch_hist_turn();
	if (strag)
		progwatch_strag_turn();
}

/* Runs the consumers due after armed_ms, then arms the next turn. */
static void
progwatch_timer_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct timeval	tv;
	int		hist, strag;

	(void)fd;
	(void)ev;
	(void)arg;
	hist_left -= armed_ms;
	strag_left -= armed_ms;
	hist = hist_left <= 0;
	strag = strag_left <= 0;
	progwatch_tick(hist, strag);
	if (hist)
		hist_left = history_interval_ms();
	if (strag)
		strag_left = PROGWATCH_STRAG_MS;
	armed_ms = hist_left < strag_left ? hist_left : strag_left;
	tv.tv_sec = armed_ms / 1000;
	tv.tv_usec = (armed_ms % 1000) * 1000;
	evtimer_add(progwatch_timer, &tv);
}

/* An adopt hook for history_init: job's entry, made for history. */
static struct hist_job *
progwatch_adopt(const char *job)
{
	struct progwatch_job	*pj;

	if ((pj = progwatch_find(job, 1)) == NULL)
		return NULL;
	if (pj->hist == NULL && (pj->hist = history_new(job)) == NULL) {
		progwatch_release(pj);
		return NULL;
	}
	return pj->hist;
}

int
progwatch_init(void)
{
	if (history_init(progwatch_adopt) != 0)
		return -1;
	if ((progwatch_timer = evtimer_new(server.base, progwatch_timer_cb,
	    NULL)) == NULL)
		return -1;
	hist_left = strag_left = armed_ms = 0;
	progwatch_timer_cb(-1, 0, NULL);
	return 0;
}

void
progwatch_fini(void)
{
	struct progwatch_job	*pj, *tmp;

	if (progwatch_timer != NULL) {
		event_free(progwatch_timer);
		progwatch_timer = NULL;
	}
	HASH_ITER(hh, pw_jobs, pj, tmp) {
		history_free(pj->hist);
		pj->hist = NULL;
		straggler_free(pj->det);
		pj->det = NULL;
		progwatch_release(pj);
	}
}

void
progwatch_drop(const char *job)
{
	struct progwatch_job	*pj;

	history_drop(job);
	if ((pj = progwatch_find(job, 0)) == NULL)
		return;
	history_free(pj->hist);
	pj->hist = NULL;
	progwatch_release(pj);
}

struct hist_job *
progwatch_history(struct slice job)
{
	struct progwatch_job	*pj;
	char			 id[RZ_ID_MAX + 1];

	if (job.len > RZ_ID_MAX)
		return NULL;
	memcpy(id, job.p, job.len);
	id[job.len] = '\0';
	return (pj = progwatch_find(id, 0)) != NULL ? pj->hist : NULL;
}

int
progwatch_named(const char *job, int64_t round, int64_t rank)
{
	struct progwatch_job	*pj;

	return (pj = progwatch_find(job, 0)) != NULL && pj->det != NULL &&
	    pj->det_round == round && straggler_named(pj->det, rank);
}

double
progwatch_speed(const char *job, int64_t round, int64_t rank)
{
	struct progwatch_job	*pj;

	if ((pj = progwatch_find(job, 0)) == NULL || pj->det == NULL ||
	    pj->det_round != round)
		return -1;
	return straggler_speed(pj->det, rank);
}

/* The detector's series: rdzvd_job_stragglers and the totals. */
static void
progwatch_strag_metrics(struct evbuffer *out)
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
	struct progwatch_job	*pj, *tmp;
	double			 v;
	size_t			 i;

	for (i = 0; i < sizeof series / sizeof series[0]; i++) {
		evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n",
		    series[i].name, series[i].help, series[i].name,
		    series[i].type);
		HASH_ITER(hh, pw_jobs, pj, tmp) {
			if (pj->det == NULL)
				continue;
			v = i == 0 ? (double)straggler_count(pj->det) :
			    i == 1 ? (double)pj->named_total :
			    (double)pj->actions_total;
			evbuffer_add_printf(out, "%s{job=\"", series[i].name);
			history_label(out, pj->id);
			evbuffer_add_printf(out, "\"} %.6g\n", v);
		}
	}
}

void
progwatch_metrics(struct evbuffer *out)
{
	struct hist_job		**v;
	struct progwatch_job	 *pj, *tmp;
	size_t			  n = 0;

	if ((v = calloc(HASH_COUNT(pw_jobs) + 1, sizeof *v)) != NULL) {
		HASH_ITER(hh, pw_jobs, pj, tmp)
			if (pj->hist != NULL)
				v[n++] = pj->hist;
		history_metrics(out, v, n);
		free(v);
	}
	progwatch_strag_metrics(out);
}
