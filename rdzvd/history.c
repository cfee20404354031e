/* SPDX-License-Identifier: Apache-2.0 */
/*
 * history.c: each job's progress over time, for the status page's chart,
 * /api/jobs/JOB/history and the per-job series of /metrics.
 *
 * Every --history-interval-ms (10 s by default) progwatch.c, which owns
 * the per-job table, the timer and the reading of the running round's
 * "progress/<rank>" keys, hands each job to history_update: an open
 * job is sampled, the lowest step its ranks reported, how many ranks
 * reported, and the steps per second since the previous sample.
 * Nothing is done per store operation.
 *
 * Bounds: a job keeps its newest HIST_SAMPLES_MAX samples (4 hours at
 * the default interval; 32 bytes each, so at most 46 KiB a job, grown as
 * it runs) and its newest HIST_MARKS_MAX marks.  Jobs themselves are
 * bounded by --job-retention: round.c calls progwatch_drop for each job
 * rz_purge forgets, which drops its rows here (history_drop).
 *
 * Marks are the job's events (rz_events_doc, read incrementally each
 * tick) that interrupt training: failures and lapsed leases, restarts,
 * repairs, rescales and rdzvd restarts.  A mark's recovery is the time
 * from the mark to the earliest report of a rank made after it, known
 * at the first sample that sees one (so to within the reports' own
 * clocks, not the sample interval).
 *
 * Restart: samples are persisted, not rebuilt (the progress keys hold
 * only each rank's latest step, so the past cannot be rebuilt from
 * them).  Rows live in the reserved namespace "\0hist/<job>", written
 * through kv like the rendezvous rows:
 *   "s%020seq"  -> {"t": wall ms, "step", "ranks", "rate", "newest":
 *                   the newest report's unix ms}  (newest
 *                   HIST_SAMPLES_MAX kept; one row per sample)
 *   "r%020evseq" -> {"ms": recovery}  (a mark's recovery, once known)
 * Marks themselves come back from the job's event rows.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "log.h"
#include "rdzvd.h"

#define HIST_SAMPLES_MAX	1440	/* per job */
#define HIST_MARKS_MAX		256	/* per job */
#define HIST_TEXT_MAX		120	/* bytes of a mark's event text */
#define HIST_RATE_WINDOW_MS	5000	/* steps/s averaged over this */
#define HIST_NS_PREFIX		"\0hist/"
#define HIST_NS_PREFIX_LEN	6

enum hist_kind {
	HK_FAILURE, HK_RESTART, HK_REPAIR, HK_RESCALE, HK_RDZVD, HK_COUNT
};

static const char *hist_kind_names[HK_COUNT] = {
	[HK_FAILURE] = "failure", [HK_RESTART] = "restart",
	[HK_REPAIR] = "repair", [HK_RESCALE] = "rescale",
	[HK_RDZVD] = "rdzvd_restart",
};

struct hist_sample {
	int64_t	t, step, ranks;
	double	rate;		/* steps/s since the previous sample */
};

struct hist_mark {
	int64_t	t, evseq;
	/* ms; -1 pending, -2 unknown (lost over a restart), below -2 a
	 * candidate -3 - ms while a sample is being taken. */
	int64_t	recovery;
	int	kind;
	char	text[HIST_TEXT_MAX + 1];
};

struct hist_job {
	char			 id[RZ_ID_MAX + 1];
	struct hist_sample	*s;		/* ring of cap, n used */
	size_t			 cap, n, head;	/* head: oldest */
	int64_t			 next_seq;	/* of the next sample row */
	struct hist_mark	 m[HIST_MARKS_MAX];
	size_t			 nm, mhead;
	int64_t			 ev_after;	/* last event seq read */
	int64_t			 counts[HK_COUNT];
	int64_t			 world, newest_ms; /* newest report */
	int			 open;		/* forming or running */
	int			 loaded;	/* its rows were read */
};

static int64_t		 hist_interval_ms;
/* progwatch.c's hook, while history_init loads the rows */
static struct hist_job	*(*hist_adopt)(const char *);

static void
hist_ns(const char *id, char *buf, size_t sz, struct slice *ns)
{
	size_t	n = strlen(id);

	if (n > sz - HIST_NS_PREFIX_LEN)
		n = sz - HIST_NS_PREFIX_LEN;
	memcpy(buf, HIST_NS_PREFIX, HIST_NS_PREFIX_LEN);
	memcpy(buf + HIST_NS_PREFIX_LEN, id, n);
	ns->p = (const uint8_t *)buf;
	ns->len = HIST_NS_PREFIX_LEN + n;
}

static void
hist_put_row(const char *id, char kind, int64_t seq, json_t *doc)
{
	char		 nsbuf[HIST_NS_PREFIX_LEN + RZ_ID_MAX + 1], key[32];
	char		*text;
	struct slice	 ns;
	int		 k;

	if (doc == NULL)
		return;
	hist_ns(id, nsbuf, sizeof nsbuf, &ns);
	k = snprintf(key, sizeof key, "%c%020" PRId64, kind, seq);
	if ((text = json_dumps(doc, JSON_COMPACT)) != NULL)
		kv_set(server.kv, ns, (struct slice){ (const uint8_t *)key,
		    (size_t)k }, slice_str(text));
	free(text);
	json_decref(doc);
}

static void
hist_del_row(const char *id, char kind, int64_t seq)
{
	char		 nsbuf[HIST_NS_PREFIX_LEN + RZ_ID_MAX + 1], key[32];
	struct slice	 ns;
	int		 k;

	hist_ns(id, nsbuf, sizeof nsbuf, &ns);
	k = snprintf(key, sizeof key, "%c%020" PRId64, kind, seq);
	kv_delete(server.kv, ns, (struct slice){ (const uint8_t *)key,
	    (size_t)k });
}

struct hist_job *
history_new(const char *id)
{
	struct hist_job	*hj;

	if (strlen(id) > RZ_ID_MAX || (hj = calloc(1, sizeof *hj)) == NULL)
		return NULL;
	strlcpy(hj->id, id, sizeof hj->id);
	hj->ev_after = -1;
	return hj;
}

void
history_free(struct hist_job *hj)
{
	if (hj == NULL)
		return;
	free(hj->s);
	free(hj);
}

static struct hist_sample *
hist_at(struct hist_job *hj, size_t i)
{
	return &hj->s[(hj->head + i) % hj->cap];
}

/* Appends a sample, the oldest going once HIST_SAMPLES_MAX are kept.
 * Returns 0, or -1 when out of memory (the sample is lost). */
static int
hist_push(struct hist_job *hj, const struct hist_sample *smp)
{
	struct hist_sample	*ns;
	size_t			 cap, i;

	if (hj->n == hj->cap && hj->cap < HIST_SAMPLES_MAX) {
		cap = hj->cap == 0 ? 64 : hj->cap * 2;
		if (cap > HIST_SAMPLES_MAX)
			cap = HIST_SAMPLES_MAX;
		if ((ns = calloc(cap, sizeof *ns)) == NULL)
			return -1;
		for (i = 0; i < hj->n; i++)
			ns[i] = *hist_at(hj, i);
		free(hj->s);
		hj->s = ns;
		hj->cap = cap;
		hj->head = 0;
	}
	if (hj->n == hj->cap) {
		hj->s[hj->head] = *smp;
		hj->head = (hj->head + 1) % hj->cap;
	} else
		hj->s[(hj->head + hj->n++) % hj->cap] = *smp;
	return 0;
}

static struct hist_mark *
hist_mark_at(struct hist_job *hj, size_t i)
{
	return &hj->m[(hj->mhead + i) % HIST_MARKS_MAX];
}

/* The kind of mark an event's text makes, or -1 for none. */
static int
hist_classify(const char *text)
{
	if (strncmp(text, "failure ", 8) == 0 ||
	    strncmp(text, "lease expired", 13) == 0)
		return HK_FAILURE;
	if (strncmp(text, "restart ", 8) == 0)
		return HK_RESTART;
	/* A repair round opened; an escalation is marked by its restart,
	 * and "repair: no grow" opens none. */
	if (strncmp(text, "repair: no grow", 15) == 0 ||
	    strncmp(text, "repair escalated", 16) == 0)
		return -1;
	if (strncmp(text, "repair: ", 8) == 0)
		return HK_REPAIR;
	if (strncmp(text, "rescale", 7) == 0)
		return HK_RESCALE;
	if (strncmp(text, "rdzvd restarted", 15) == 0)
		return HK_RDZVD;
	return -1;
}

/* Reads hj's events after the last one seen into marks.  recov (when
 * loading, else NULL): the recovery rows by key; a mark without one is
 * still pending if no report newer than it was seen, else unknown. */
static void
hist_read_events(struct hist_job *hj, json_t *recov)
{
	json_t		*evs, *e, *r;
	struct hist_mark *mk;
	const char	*text;
	char		 key[32];
	size_t		 i;
	int		 kind;

	if ((evs = rz_events_doc(server.rz, slice_str(hj->id),
	    hj->ev_after)) == NULL)
		return;
	json_array_foreach(evs, i, e) {
		hj->ev_after = json_integer_value(json_object_get(e, "seq"));
		text = json_string_value(json_object_get(e, "text"));
		if (text == NULL || (kind = hist_classify(text)) < 0)
			continue;
		hj->counts[kind]++;
		if (hj->nm == HIST_MARKS_MAX) {
			mk = hist_mark_at(hj, 0);
			if (mk->recovery >= 0)
				hist_del_row(hj->id, 'r', mk->evseq);
			hj->mhead = (hj->mhead + 1) % HIST_MARKS_MAX;
			hj->nm--;
		}
		mk = hist_mark_at(hj, hj->nm++);
		mk->t = json_integer_value(json_object_get(e, "time_ms"));
		mk->evseq = hj->ev_after;
		mk->kind = kind;
		mk->recovery = -1;
		strlcpy(mk->text, text, sizeof mk->text);
		if (recov != NULL) {
			snprintf(key, sizeof key, "r%020" PRId64, mk->evseq);
			if ((r = json_object_get(recov, key)) != NULL)
				mk->recovery = json_integer_value(r);
			else if (hj->newest_ms > mk->t)
				mk->recovery = -2;
		}
	}
	json_decref(evs);
}

/*
 * smp's steps/s.  Workers publish their step about once a second, so
 * the samples between two reports repeat a step: the rate is taken from
 * the time each step was first seen, from the oldest sample within the
 * last HIST_RATE_WINDOW_MS (or two intervals, if longer) to the first
 * sample showing smp's step, over samples with reports and no step
 * going back (a restart).  0 when the step did not move in the window.
 */
static double
hist_rate(struct hist_job *hj, const struct hist_sample *smp)
{
	struct hist_sample	*o = NULL, *p;
	int64_t			 w = HIST_RATE_WINDOW_MS, step = smp->step;
	int64_t			 tfirst = smp->t;
	size_t			 i;

	if (w < 2 * hist_interval_ms)
		w = 2 * hist_interval_ms;
	for (i = hj->n; i-- > 0; ) {
		p = hist_at(hj, i);
		if (p->ranks == 0 || p->step > step || p->t < smp->t - w)
			break;
		if (p->step == smp->step)
			tfirst = p->t;
		o = p;
		step = p->step;
	}
	if (o == NULL || o->step == smp->step || o->t >= tfirst)
		return 0;
	return (double)(smp->step - o->step) * 1000.0 /
	    (double)(tfirst - o->t);
}

/* bsearch's order of a sample's reports: by rank. */
static int
hist_rank_cmp(const void *key, const void *elt)
{
	int64_t	rank = *(const int64_t *)key;
	int64_t	r = ((const struct progwatch_rank *)elt)->rank;

	return rank < r ? -1 : rank > r;
}

/*
 * Samples one open job: the reports in pr (progwatch.c's, NULL when the
 * job is not running) of its running round's ranks, each member's
 * rank_base .. + local_world_size in doc (its rz_job_doc).
 */
static void
hist_sample_job(struct hist_job *hj, const struct progwatch_sample *pr,
    json_t *doc, int64_t wall)
{
	const struct progwatch_rank *rp;
	struct hist_sample	 smp, *prev;
	struct hist_mark	*mk;
	json_t			*m, *base;
	int64_t			 r, rank, lws, step, ms, lo = 0, n = 0, first;
	size_t			 i, k, pending = 0;

	memset(&smp, 0, sizeof smp);
	smp.t = wall;
	for (k = 0; k < hj->nm; k++)
		if (hist_mark_at(hj, k)->recovery == -1)
			pending++;
	if (pr != NULL && doc != NULL) {
		json_array_foreach(json_object_get(doc, "members"), i, m) {
			base = json_object_get(m, "rank_base");
			if (!json_is_integer(base))
				continue;
			lws = json_integer_value(json_object_get(m,
			    "local_world_size"));
			for (r = 0; r < lws; r++) {
				rank = json_integer_value(base) + r;
				if (pr->n == 0 || (rp = bsearch(&rank,
				    pr->r, pr->n, sizeof *pr->r,
				    hist_rank_cmp)) == NULL)
					continue;
				step = rp->step;
				ms = rp->ms;
				if (n == 0 || step < lo)
					lo = step;
				if (ms > hj->newest_ms)
					hj->newest_ms = ms;
				n++;
				/* Recovery: the earliest report after a mark. */
				for (k = 0; pending > 0 && k < hj->nm; k++) {
					mk = hist_mark_at(hj, k);
					if (mk->recovery == -1 && ms > mk->t)
						mk->recovery = -3 - (ms - mk->t);
					else if (mk->recovery < -2 && ms > mk->t &&
					    ms - mk->t < -3 - mk->recovery)
						mk->recovery = -3 - (ms - mk->t);
				}
			}
		}
	}
	/* Candidates (< -2) become recoveries once the whole sample saw
	 * every rank: the earliest of them. */
	for (k = 0; k < hj->nm; k++) {
		mk = hist_mark_at(hj, k);
		if (mk->recovery < -2) {
			mk->recovery = -3 - mk->recovery;
			hist_put_row(hj->id, 'r', mk->evseq, json_pack("{s:I}",
			    "ms", (json_int_t)mk->recovery));
		}
	}
	prev = hj->n > 0 ? hist_at(hj, hj->n - 1) : NULL;
	smp.ranks = n;
	smp.step = n > 0 ? lo : (prev != NULL ? prev->step : 0);
	smp.rate = n > 0 ? hist_rate(hj, &smp) : 0;
	if (hist_push(hj, &smp) != 0)
		return;
	first = hj->next_seq - HIST_SAMPLES_MAX;
	if (first >= 0)
		hist_del_row(hj->id, 's', first);
	hist_put_row(hj->id, 's', hj->next_seq++, json_pack(
	    "{s:I, s:I, s:I, s:f, s:I}", "t", (json_int_t)smp.t, "step",
	    (json_int_t)smp.step, "ranks", (json_int_t)smp.ranks, "rate",
	    smp.rate, "newest", (json_int_t)hj->newest_ms));
}

void
history_update(struct hist_job *hj, json_t *row,
    const struct progwatch_sample *pr, json_t *doc, int64_t wall)
{
	const char	*state;

	state = json_string_value(json_object_get(row, "state"));
	hj->world = json_integer_value(json_object_get(row, "world_size"));
	hist_read_events(hj, NULL);
	hj->open = state != NULL && (strcmp(state, "running") == 0 ||
	    strcmp(state, "forming") == 0);
	if (hj->open)
		hist_sample_job(hj, pr, doc, wall);
}

void
history_drop(const char *job)
{
	char		 nsbuf[HIST_NS_PREFIX_LEN + RZ_ID_MAX + 1];
	struct slice	 ns;

	hist_ns(job, nsbuf, sizeof nsbuf, &ns);
	kv_ns_drop(server.kv, ns);
}

struct hist_load {
	struct hist_job	*hj;
	json_t		*recov;		/* "r..." key -> ms */
	struct slice	 ns;
};

static int
hist_sample_cmp(const void *a, const void *b)
{
	const struct hist_sample	*x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

static void
hist_load_row_cb(void *arg, struct slice key)
{
	struct hist_load	*hl = arg;
	struct hist_sample	 smp;
	struct slice		 v;
	json_t			*row;
	char			 kbuf[32];
	int64_t			 seq, ms;

	if (key.len != 21 || kv_get(server.kv, hl->ns, key, &v) != 0 ||
	    (row = json_loadb((const char *)v.p, v.len, 0, NULL)) == NULL)
		return;
	memcpy(kbuf, key.p, key.len);
	kbuf[key.len] = '\0';
	seq = strtoll(kbuf + 1, NULL, 10);
	if (kbuf[0] == 's' && hl->hj->n < HIST_SAMPLES_MAX) {
		smp.t = json_integer_value(json_object_get(row, "t"));
		smp.step = json_integer_value(json_object_get(row, "step"));
		smp.ranks = json_integer_value(json_object_get(row, "ranks"));
		smp.rate = json_number_value(json_object_get(row, "rate"));
		ms = json_integer_value(json_object_get(row, "newest"));
		if (ms > hl->hj->newest_ms)
			hl->hj->newest_ms = ms;
		if (hist_push(hl->hj, &smp) == 0 && seq >= hl->hj->next_seq)
			hl->hj->next_seq = seq + 1;
	} else if (kbuf[0] == 'r')
		json_object_set(hl->recov, kbuf, json_object_get(row, "ms"));
	json_decref(row);
}

static void
hist_load_ns_cb(void *arg, struct slice ns)
{
	struct hist_load	 hl;
	char			 id[RZ_ID_MAX + 1];
	size_t			 n = ns.len - HIST_NS_PREFIX_LEN;
	struct slice		*dead = arg;
	json_t			*doc;

	if (n > RZ_ID_MAX || dead->len > 0)
		return;
	memcpy(id, ns.p + HIST_NS_PREFIX_LEN, n);
	id[n] = '\0';
	if ((doc = rz_job_doc(server.rz, slice_str(id), mono_ms())) == NULL) {
		/* Its job is gone: dropped after the listing. */
		*dead = ns;
		return;
	}
	json_decref(doc);
	if ((hl.hj = hist_adopt(id)) == NULL || hl.hj->loaded)
		return;		/* loaded by an earlier listing */
	if ((hl.recov = json_object()) == NULL)
		return;
	hl.hj->loaded = 1;
	hl.ns = ns;
	kv_list(server.kv, ns, hist_load_row_cb, &hl);
	/* kv_list's order is unspecified: the ring is filled, then sorted
	 * (hist_push left head at 0 as it never wrapped). */
	if (hl.hj->n > 0)
		qsort(hl.hj->s, hl.hj->n, sizeof *hl.hj->s, hist_sample_cmp);
	hist_read_events(hl.hj, hl.recov);
	json_decref(hl.recov);
}

int
history_init(struct hist_job *(*adopt)(const char *))
{
	struct slice	 dead;
	char		 buf[HIST_NS_PREFIX_LEN + RZ_ID_MAX + 1];
	int64_t		 n;

	hist_interval_ms = server.cfg->history_interval_ms;
	if (hist_interval_ms <= 0)
		hist_interval_ms = 10000;
	hist_adopt = adopt;
	/* Rows of jobs that are gone are dropped one per listing, as the
	 * callback must not mutate. */
	do {
		dead.len = 0;
		n = kv_ns_list(server.kv, (struct slice){ (const uint8_t *)
		    HIST_NS_PREFIX, HIST_NS_PREFIX_LEN }, hist_load_ns_cb, &dead);
		if (dead.len > 0 && dead.len <= sizeof buf) {
			memcpy(buf, dead.p, dead.len);
			dead.p = (const uint8_t *)buf;
			kv_ns_drop(server.kv, dead);
		}
	} while (dead.len > 0 && n > 0);
	hist_adopt = NULL;
	return 0;
}

int64_t
history_interval_ms(void)
{
	return hist_interval_ms;
}

json_t *
history_doc(struct hist_job *hj, struct slice job)
{
	struct hist_sample	*s;
	struct hist_mark	*mk;
	json_t			*doc, *samples, *marks, *counts;
	char			 id[RZ_ID_MAX + 1];
	size_t			 i;
	int			 k;

	if (job.len > RZ_ID_MAX)
		return NULL;
	memcpy(id, job.p, job.len);
	id[job.len] = '\0';
	if (hj == NULL) {
		/* Known to the rendezvous, not sampled yet: empty. */
		if ((doc = rz_job_doc(server.rz, job, mono_ms())) == NULL)
			return NULL;
		json_decref(doc);
	}
	samples = json_array();
	marks = json_array();
	counts = json_object();
	for (i = 0; hj != NULL && i < hj->n; i++) {
		s = hist_at(hj, i);
		json_array_append_new(samples, json_pack("{s:I, s:I, s:I, s:f}",
		    "time_ms", (json_int_t)s->t, "step", (json_int_t)s->step,
		    "ranks", (json_int_t)s->ranks, "steps_per_s", s->rate));
	}
	for (i = 0; hj != NULL && i < hj->nm; i++) {
		mk = hist_mark_at(hj, i);
		json_array_append_new(marks, json_pack("{s:I, s:s, s:s, s:o}",
		    "time_ms", (json_int_t)mk->t, "kind",
		    hist_kind_names[mk->kind], "text", mk->text, "recovery_ms",
		    mk->recovery >= 0 ? json_integer(mk->recovery) :
		    json_null()));
	}
	for (k = 0; k < HK_COUNT; k++)
		json_object_set_new(counts, hist_kind_names[k], json_integer(
		    hj != NULL ? hj->counts[k] : 0));
	return json_pack("{s:s, s:I, s:I, s:o, s:o, s:o}", "job", id,
	    "interval_ms", (json_int_t)hist_interval_ms, "samples_max",
	    (json_int_t)HIST_SAMPLES_MAX, "samples", samples, "marks", marks,
	    "counts", counts);
}

void
history_label(struct evbuffer *out, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '\\' || *s == '"')
			evbuffer_add_printf(out, "\\%c", *s);
		else if (*s == '\n')
			evbuffer_add(out, "\\n", 2);
		else
			evbuffer_add(out, s, 1);
	}
}

void
history_metrics(struct evbuffer *out, struct hist_job *const *v, size_t n)
{
	static const struct {
		const char	*name, *type, *help;
	} series[] = {
		{ "rdzvd_job_steps_per_second", "gauge",
		  "Training steps per second of the job's slowest rank over "
		  "the last 5 s (0 once closed)." },
		{ "rdzvd_job_last_progress_age_seconds", "gauge",
		  "Seconds since the job's newest progress report (-1: none)." },
		{ "rdzvd_job_world_size", "gauge",
		  "Ranks in the job's current round." },
		{ "rdzvd_job_failures_total", "counter",
		  "Failures and lapsed leases in the job's events." },
		{ "rdzvd_job_repairs_total", "counter",
		  "Repair rounds in the job's events." },
		{ "rdzvd_job_restarts_total", "counter",
		  "Restarts in the job's events." },
	};
	struct hist_job	*hj;
	double		 x;
	int64_t		 wall = round_wall_ms();
	size_t		 i, j;

	for (i = 0; i < sizeof series / sizeof series[0]; i++) {
		evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n",
		    series[i].name, series[i].help, series[i].name,
		    series[i].type);
		for (j = 0; j < n; j++) {
			hj = v[j];
			switch (i) {
			case 0:
				x = hj->open && hj->n > 0 ?
				    hist_at(hj, hj->n - 1)->rate : 0;
				break;
			case 1:
				x = hj->newest_ms == 0 ? -1 :
				    (double)(wall > hj->newest_ms ?
				    wall - hj->newest_ms : 0) / 1000.0;
				break;
			case 2:
				x = (double)hj->world;
				break;
			case 3:
				x = (double)hj->counts[HK_FAILURE];
				break;
			case 4:
				x = (double)hj->counts[HK_REPAIR];
				break;
			default:
				x = (double)hj->counts[HK_RESTART];
				break;
			}
			evbuffer_add_printf(out, "%s{job=\"", series[i].name);
			history_label(out, hj->id);
			evbuffer_add_printf(out, "\"} %.6g\n", x);
		}
	}
}
