/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rz_strag.c: the rendezvous' side of stragglers (rz.h): each job's
 * straggler settings (from its first JOIN, kept in its row), the running
 * jobs the detector (rdzvd/progwatch.c) looks at, the events naming a
 * straggler, and the action on one with straggler_action=replace: with
 * a standby waiting, the straggler's node is evicted in its favour (the
 * standby takes its place as after any lost node); else the straggler's
 * agent is told to kill that worker (a STRAGGLER push) and the job
 * repairs around it as around any failure.  Only a job that can repair
 * is acted on, so no action ever restarts the job or leaves it below
 * its minimum of nodes.
 */
#include "config.h"

#include <sys/queue.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rdzv_err.h"
#include "rz.h"
#include "rz_impl.h"
#include "wire.h"

static const char *rz_strag_actions[] = { "off", "replace" };

void
rz_strag_conf(struct rz_job *j, const struct nat_join *r)
{
	j->strag_ratio_pm = r->straggler_ratio_pm >= 0 &&
	    r->straggler_ratio_pm < 1000 ? r->straggler_ratio_pm :
	    RZ_STRAG_RATIO_PM;
	j->strag_window_ms = r->straggler_window_ms > 0 ?
	    r->straggler_window_ms : RZ_STRAG_WINDOW_MS;
	j->strag_action = r->straggler_action == NAT_STRAGGLER_REPLACE ?
	    NAT_STRAGGLER_REPLACE : NAT_STRAGGLER_OFF;
}

json_t *
rz_strag_row(const struct rz_job *j)
{
	return json_pack("{s:I, s:I, s:I}", "ratio_pm",
	    (json_int_t)j->strag_ratio_pm, "window_ms",
	    (json_int_t)j->strag_window_ms, "action",
	    (json_int_t)j->strag_action);
}

void
rz_strag_load(struct rz_job *j, const json_t *row)
{
	json_t	*v;

	j->strag_ratio_pm = RZ_STRAG_RATIO_PM;
	j->strag_window_ms = RZ_STRAG_WINDOW_MS;
	j->strag_action = NAT_STRAGGLER_OFF;
	if ((v = json_object_get(row, "ratio_pm")) != NULL &&
	    json_integer_value(v) >= 0 && json_integer_value(v) < 1000)
		j->strag_ratio_pm = json_integer_value(v);
	if ((v = json_object_get(row, "window_ms")) != NULL &&
	    json_integer_value(v) > 0)
		j->strag_window_ms = json_integer_value(v);
	if (json_integer_value(json_object_get(row, "action")) ==
	    NAT_STRAGGLER_REPLACE)
		j->strag_action = NAT_STRAGGLER_REPLACE;
}

json_t *
rz_strag_doc(const struct rz_job *j)
{
	return json_pack("{s:f, s:I, s:s}", "ratio",
	    (double)j->strag_ratio_pm / 1000.0, "window_ms",
	    (json_int_t)j->strag_window_ms, "action",
	    rz_strag_actions[j->strag_action == NAT_STRAGGLER_REPLACE]);
}

void
rz_strag_each(struct rz *rz, void (*cb)(void *, const struct rz_strag_view *),
    void *arg)
{
	struct rz_job		*j, *tmp;
	struct rz_strag_view	 v;

	HASH_ITER(hh, rz->jobs, j, tmp) {
		/* Nor while a replacement is on its way: the ranks' speeds
		 * then are the repair's (a replacement starting takes its
		 * node's CPU, the survivors' rounds change); the grow's
		 * round is judged afresh. */
		if (j->state != RZJ_RUNNING || j->strag_ratio_pm == 0 ||
		    j->ns[0] == '\0' || j->pend_node != 0)
			continue;
		v.job = j->id;
		v.ns = j->ns;
		v.round = j->round;
		v.world_size = j->world_size;
		v.ratio = (double)j->strag_ratio_pm / 1000.0;
		v.window_ms = j->strag_window_ms;
		v.replace = j->strag_action == NAT_STRAGGLER_REPLACE;
		cb(arg, &v);
	}
}

/* The member holding global rank of j's running round, and that rank's
 * local rank there (its live workers are numbered in local order). */
static struct rz_node *
rz_strag_owner(struct rz_job *j, int64_t rank, int64_t *local)
{
	struct rz_node	*nd;
	int64_t		 l, idx;

	TAILQ_FOREACH(nd, &j->nodes, entry) {
		if (nd->state != RZN_MEMBER || rank < nd->rank_base)
			continue;
		idx = rank - nd->rank_base;
		for (l = 0; l < nd->lws && l < RZ_REPAIR_LWS_MAX; l++) {
			if (nd->dead_local & (1LL << l))
				continue;
			if (idx-- == 0) {
				*local = l;
				return nd;
			}
		}
	}
	return NULL;
}

int
rz_straggler_news(struct rz *rz, struct slice job, int64_t round,
    int64_t rank, int named, double speed, double median, int64_t now)
{
	struct rz_job	*j;
	struct rz_node	*nd;
	int64_t		 l = -1;

	if ((j = rz_find_job(rz, job)) == NULL)
		return RDZV_ENOTFOUND;
	if (j->state != RZJ_RUNNING || j->round != round)
		return RDZV_EINVAL;
	nd = rz_strag_owner(j, rank, &l);
	if (named)
		rz_event(rz, j, now, "straggler: rank %" PRId64 " (node %"
		    PRId64 " host %s local rank %" PRId64 ") steps at %.0f%% "
		    "of the others' median (%.1f vs %.1f steps/s of work) for "
		    "%" PRId64 " s, round %" PRId64, rank, nd != NULL ? nd->id :
		    -1, nd != NULL ? nd->host : "?", l, median > 0 ? 100.0 *
		    speed / median : 0.0, speed, median, j->strag_window_ms /
		    1000, round);
	else
		rz_event(rz, j, now, "straggler cleared: rank %" PRId64
		    " (node %" PRId64 ") back to %.0f%% of the others' median, "
		    "round %" PRId64, rank, nd != NULL ? nd->id : -1,
		    median > 0 ? 100.0 * speed / median : 0.0, round);
	/* No outbox to settle here: the row (its next event) now. */
	rz_save_job(rz, j);
	return 0;
}

int
rz_straggler_replace(struct rz *rz, struct slice job, int64_t round,
    int64_t rank, int64_t now, struct rz_outbox *ob)
{
	struct rz_job		*j;
	struct rz_node		*nd, *m, *sb = NULL;
	char			 buf[RZ_ID_MAX + 64];
	const char		*why;
	int64_t			 l = -1;

	if ((j = rz_find_job(rz, job)) == NULL)
		return RDZV_ENOTFOUND;
	if (j->state != RZJ_RUNNING || j->round != round ||
	    j->strag_action != NAT_STRAGGLER_REPLACE ||
	    (nd = rz_strag_owner(j, rank, &l)) == NULL)
		return RDZV_EINVAL;
	rz_mark(rz, j);		/* its events: the row, once settled */
	TAILQ_FOREACH(m, &j->nodes, entry)
		if (m->state == RZN_STANDBY && m->conn != NULL && sb == NULL)
			sb = m;
	why = rz_repair_refused_job(j, buf, sizeof buf);
	if (why == NULL && sb == NULL && j->world_size <= 1)
		why = "no worker would be left";
	if (why == NULL && sb == NULL && nd->conn == NULL)
		why = "its agent is not connected";
	if (why != NULL) {
		rz_event(rz, j, now, "straggler: rank %" PRId64 " not "
		    "replaced: %s", rank, why);
		return RDZV_EBUSY;
	}
	if (sb != NULL) {
		rz_event(rz, j, now, "straggler: rank %" PRId64 " (node %"
		    PRId64 " host %s): its node is evicted for standby node %"
		    PRId64 " (host %s)", rank, nd->id, nd->host, sb->id,
		    sb->host);
		rz_evict(rz, ob, j, nd, now, "evicted as a straggler");
		return 0;
	}
	rz_event(rz, j, now, "straggler: rank %" PRId64 " (node %" PRId64
	    " host %s local rank %" PRId64 "): its agent kills it to be "
	    "replaced", rank, nd->id, nd->host, l);
	if (rz_push_order(ob, j, nd, l, "straggler: replaced") != 0)
		return RDZV_ENOMEM;
	return 0;
}
