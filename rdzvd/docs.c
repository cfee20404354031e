/* SPDX-License-Identifier: Apache-2.0 */
/*
 * docs.c: the JSON documents of common/PROTOCOL.md "Operators", one
 * builder each, which the native ADMIN_* ops (proto_native.c) and HTTP's
 * /api/ (http.c) both serve: rdzvd's status, the job list, one job's
 * detail, a job's events, a job's history.  The rendezvous (rz/rz.c) gives what only it
 * sees as jansson documents; this file adds what the daemon knows and
 * writes them out, all in one form.
 *
 * Job detail: rz.c's document plus, per member of the running round,
 * how far its ranks got, read from the "progress/<rank>" keys workers
 * write into the round's namespace, through progwatch.c's one reader
 * (progwatch_read).  It is done here, at output time, because it needs
 * the kv store and the wall clock, which the pure state machine must
 * not read.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "rdzv_err.h"
#include "rdzvd.h"

/* doc as compact ASCII JSON text (malloc'ed), and doc released; NULL
 * when doc is NULL or out of memory. */
static char *
docs_text(json_t *doc)
{
	char	*text;

	if (doc == NULL)
		return NULL;
	text = json_dumps(doc, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(doc);
	return text;
}

char *
docs_status(void)
{
	struct rz_stats			 rz;
	struct store_etcd_status	 es;
	json_t				*doc, *info;
	uint64_t			 conns = 0;
	int				 i;

	memset(&rz, 0, sizeof rz);
	if (server.rz != NULL)
		rz_get_stats(server.rz, &rz);
	for (i = 0; i < DIALECT_COUNT; i++)
		conns += metrics.conns[i];
	rdzvd_etcd_status(&es);
	doc = json_pack("{s:s, s:I, s:s, s:s?, s:I, s:I, s:I, "
	    "s:{s:I, s:I, s:I}, s:I, s:I}",
	    "version", PACKAGE_VERSION,
	    "uptime_s", (json_int_t)((mono_ms() - server.started_ms) / 1000),
	    "durability", store_durability_name(server.cfg->durability),
	    "db", server.store != NULL && server.cfg->store == NULL ?
	    server.cfg->db : NULL,
	    "keys", (json_int_t)kv_total_keys(server.kv),
	    "waiters", (json_int_t)kv_total_waiters(server.kv),
	    "connections", (json_int_t)conns,
	    "jobs", "forming", (json_int_t)rz.jobs_forming,
	    "running", (json_int_t)rz.jobs_running,
	    "closed", (json_int_t)rz.jobs_closed,
	    "rounds_total", (json_int_t)rz.rounds_total,
	    "restarts_total", (json_int_t)rz.restarts_total);
	if (doc != NULL && es.enabled) {
		/* Where the leader is: its host, its client and HTTP
		 * addresses, from what it wrote in the leader key. */
		info = json_loads(es.leader_info, 0, NULL);
		json_object_set_new(doc, "leader", json_pack("{s:s, s:b, s:I, "
		    "s:I, s:I, s:s, s:O?, s:O?, s:O?}", "store",
		    server.cfg->store, "leading", es.leader,
		    "term", (json_int_t)es.term,
		    "since_s", (json_int_t)((mono_ms() - es.since_ms) / 1000),
		    "failovers", (json_int_t)es.failovers,
		    "info", es.leader_info,
		    "host", json_object_get(info, "host"),
		    "listen", json_object_get(info, "listen"),
		    "http", json_object_get(info, "http")));
		json_decref(info);
	}
	return docs_text(doc);
}

char *
docs_jobs(void)
{
	return docs_text(rz_jobs_doc(server.rz));
}

/*
 * The "progress" of the member whose ranks are base .. base + lws - 1 in
 * namespace ns (round round of job) at wall-clock time wall: one lookup
 * per rank, no more; "stragglers": those of its ranks named now.
 * json_null() when none of them reported; NULL when out of memory.
 */
static json_t *
docs_member_progress(const char *job, int64_t round, struct slice ns,
    int64_t base, int64_t lws, int64_t wall)
{
	int64_t		 r, step, ms, wait, age, n = 0, lo = 0, hi = 0;
	int64_t		 oldest = 0;
	json_t		*strag;

	if ((strag = json_array()) == NULL)
		return NULL;
	for (r = 0; r < lws; r++) {
		if (progwatch_read(ns, base + r, &step, &ms, &wait) != 0)
			continue;
		if (n == 0 || step < lo)
			lo = step;
		if (n == 0 || step > hi)
			hi = step;
		/* A worker's clock may run ahead of ours: no negative age. */
		age = wall > ms ? wall - ms : 0;
		if (age > oldest)
			oldest = age;
		if (progwatch_named(job, round, base + r))
			json_array_append_new(strag, json_integer(base + r));
		n++;
	}
	if (n == 0) {
		json_decref(strag);
		return json_null();
	}
	return json_pack("{s:I, s:I, s:I, s:I, s:o}", "ranks_reporting",
	    (json_int_t)n, "min_step", (json_int_t)lo, "max_step",
	    (json_int_t)hi, "oldest_report_ms_ago", (json_int_t)oldest,
	    "stragglers", strag);
}

/*
 * Gives every node in doc (rz_job_doc's document) a "progress": null
 * but for members of the running round (those rz_job_doc gave a
 * "rank_base") whose ranks have reported.  Returns 0 or RDZV_ENOMEM.
 */
static int
docs_add_progress(json_t *doc, int64_t wall)
{
	json_t		*members, *m, *p, *base;
	const char	*ns, *job;
	int64_t		 round;
	size_t		 i;

	if (!json_is_array(members = json_object_get(doc, "members")))
		return 0;
	ns = json_string_value(json_object_get(doc, "store_ns"));
	job = json_string_value(json_object_get(doc, "job"));
	round = json_integer_value(json_object_get(doc, "round"));
	json_array_foreach(members, i, m) {
		base = json_object_get(m, "rank_base");
		if (ns == NULL || *ns == '\0' || job == NULL ||
		    !json_is_integer(base))
			p = json_null();
		else
			p = docs_member_progress(job, round, slice_str(ns),
			    json_integer_value(base), json_integer_value(
			    json_object_get(m, "local_world_size")), wall);
		if (p == NULL || json_object_set_new(m, "progress", p) != 0)
			return RDZV_ENOMEM;
	}
	return 0;
}

char *
docs_job(struct slice job)
{
	json_t	*doc;

	if ((doc = rz_job_doc(server.rz, job, mono_ms())) == NULL)
		return NULL;
	if (docs_add_progress(doc, round_wall_ms()) != 0) {
		json_decref(doc);
		return NULL;
	}
	return docs_text(doc);
}

char *
docs_events(struct slice job, int64_t after)
{
	return docs_text(rz_events_doc(server.rz, job, after));
}

/* Appends to ranks one {"rank", "step", "age_ms", "straggler",
 * "work_steps_per_s"} per reporting rank of the running round in job doc
 * jd, and to strag the stragglers' ranks; returns the slowest one's rank
 * (the lowest step) or -1. */
static int64_t
docs_add_ranks(json_t *ranks, json_t *strag, json_t *jd, int64_t wall)
{
	json_t		*members, *m, *base;
	const char	*ns, *job;
	int64_t		 round;
	double		 speed;
	int		 named;
	int64_t		 r, lws, step, ms, wait, slow = -1, slow_step = 0;
	int64_t		 slow_ms = 0;
	size_t		 i;

	ns = json_string_value(json_object_get(jd, "store_ns"));
	job = json_string_value(json_object_get(jd, "job"));
	round = json_integer_value(json_object_get(jd, "round"));
	if (ns == NULL || *ns == '\0' || job == NULL ||
	    !json_is_array(members = json_object_get(jd, "members")))
		return -1;
	json_array_foreach(members, i, m) {
		if (!json_is_integer(base = json_object_get(m, "rank_base")))
			continue;
		lws = json_integer_value(json_object_get(m,
		    "local_world_size"));
		for (r = json_integer_value(base); lws-- > 0; r++) {
			if (progwatch_read(slice_str(ns), r, &step, &ms,
			    &wait) != 0)
				continue;
			named = progwatch_named(job, round, r);
			speed = progwatch_speed(job, round, r);
			json_array_append_new(ranks, json_pack("{s:I, s:I, "
			    "s:I, s:b, s:o}", "rank", (json_int_t)r, "step",
			    (json_int_t)step, "age_ms", (json_int_t)(wall > ms ?
			    wall - ms : 0), "straggler", named,
			    "work_steps_per_s", speed >= 0 && speed < 1e300 ?
			    json_real(speed) : json_null()));
			if (named)
				json_array_append_new(strag, json_integer(r));
			if (slow < 0 || step < slow_step ||
			    (step == slow_step && ms < slow_ms)) {
				slow = r;
				slow_step = step;
				slow_ms = ms;
			}
		}
	}
	return slow;
}

char *
docs_history(struct slice job)
{
	json_t	*doc, *jd, *ranks, *strag;
	int64_t	 slow = -1;

	if ((doc = history_doc(progwatch_history(job), job)) == NULL)
		return NULL;
	ranks = json_array();
	strag = json_array();
	if (ranks == NULL || strag == NULL) {
		json_decref(ranks);
		json_decref(strag);
		json_decref(doc);
		return NULL;
	}
	if ((jd = rz_job_doc(server.rz, job, mono_ms())) != NULL) {
		slow = docs_add_ranks(ranks, strag, jd, round_wall_ms());
		json_decref(jd);
	}
	json_object_set_new(doc, "ranks", ranks);
	json_object_set_new(doc, "stragglers", strag);
	json_object_set_new(doc, "slowest", slow >= 0 ? json_integer(slow) :
	    json_null());
	return docs_text(doc);
}
