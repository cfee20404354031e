/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rz_elastic.c: joining in place (rz.h).  A node that joins a
 * running job below its maximum used to end the round: every worker of
 * the job stopped and the job restarted from its checkpoint to take in
 * capacity that only adds.  In a job that can repair, the node is taken
 * in the way a standby takes a lost node's place: it becomes a member at
 * once with none of its workers in (the survivors are not told: their
 * round goes on), its agent starts every worker as a replacement, and
 * when every node taken in has all its workers ready, and the job's last
 * call has passed since the latest joined, one grow round takes them
 * all in (a fresh namespace and port, a donor named, the sampler
 * reshards).  Several nodes joining close together thus cost the
 * survivors one grow round.  A joiner is marked in its node row, so a
 * restarted rdzvd still grows for it (its deadline starts again).  A joiner whose workers are not ready within
 * the job's repair timeout restarts the job, as a late replacement does.
 *
 *	join below max, repairable --> member, no worker in (push to it
 *		alone: a repair round with none of its workers live)
 *	READY of each of its workers --> ready; all joiners ready and the
 *		last call over --> GROW round (rz_repair_round)
 *	repair timeout with a joiner not ready --> restart (rz_restart)
 *	any repair round (a shrink meanwhile) takes in the ready ones
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

static void	rz_elastic_grow(struct rz *, struct rz_outbox *,
		    struct rz_job *, int64_t);

/*
 * nd has just joined running job j below its maximum (its row not yet
 * written).  Takes it in place when the job can repair: returns 0 with
 * nd a member and its agent told; -1 when the job must rescale by
 * restart as before (an event says why).
 */
int
rz_elastic_join(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t now)
{
	char		 buf[RZ_ID_MAX + 64];
	const char	*why;
	size_t		 n;

	if (j->state != RZJ_RUNNING || j->members >= j->max)
		return -1;
	if ((why = rz_repair_cannot(j, buf, sizeof buf)) == NULL)
		why = rz_topo_fixed(j);
	if (why == NULL && nd->lws > RZ_REPAIR_LWS_MAX)
		why = "its local world size is over 63";
	if (why == NULL && j->world_size < 1)
		why = "no worker of the job is running";
	if (why != NULL) {
		rz_event(rz, j, now, "join: node %" PRId64 " cannot be taken "
		    "in place (%s): rescale by restart", nd->id, why);
		return -1;
	}
	nd->state = RZN_MEMBER;
	/* After every member (ranks 0..members-1): theirs stay. */
	nd->group_rank = j->members;
	nd->succeeded = 0;
	nd->repairable = 0;	/* its workers say so when up */
	nd->dead_local = nd->lws >= RZ_REPAIR_LWS_MAX ? INT64_MAX :
	    (int64_t)((1ULL << nd->lws) - 1);
	nd->joining = 1;
	/* Closes the group ranks up and counts it among the members; the
	 * world and every other rank base stay as they are. */
	rz_rank_bases(rz, j);
	rz_save_node(rz, j, nd);
	if (j->join_deadline < 0)
		j->join_deadline = now + j->repair_timeout_ms;
	j->join_at = -1;
	rz_mark(rz, j);
	/* Only the joiner hears of it: a repair round with none of its
	 * workers live tells its agent to start them all as replacements
	 * (the standby's path); the round and its namespace are the
	 * running one's. */
	n = ob->npush;
	rz_push_node(ob, j, nd, RDZV_ROUND_RUNNING, NULL);
	if (ob->npush > n) {
		ob->push[n].round.kind = NAT_KIND_SHRINK;
		ob->push[n].round.donor = j->donor;
		ob->push[n].round.live_local = 0;
	}
	rz_event(rz, j, now, "join: node %" PRId64 " (host %s) taken in place "
	    "as group rank %" PRId64 ": its %" PRId64 " workers start, round %"
	    PRId64 " goes on until they are ready", nd->id, nd->host,
	    nd->group_rank, nd->lws, j->round);
	return 0;
}

/*
 * READY of local rank l of member nd, which is not the pending
 * replacement: a worker of a node joining in place, or late news (the
 * wait for a replacement ended: no grow for it).  Always 0.
 */
int
rz_elastic_ready(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t l, int64_t now)
{
	if (!nd->joining || nd->state != RZN_MEMBER || l < 0 ||
	    l >= RZ_REPAIR_LWS_MAX || !(nd->dead_local & (1LL << l)))
		return 0;	/* late news, a repeat */
	nd->dead_local &= ~(1LL << l);
	rz_save_node(rz, j, nd);
	rz_elastic_tick(rz, ob, j, now);
	return 0;
}

/*
 * The grow for the nodes joining in place, when it is due: every one of
 * them ready and the last call over since the latest joined; or the
 * restart when one is not ready by the repair timeout.
 */
void
rz_elastic_tick(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now)
{
	struct rz_node	*nd, *late = NULL;
	int		 any = 0;
	char		 cause[RZ_ID_MAX + 160];

	if (j->state != RZJ_RUNNING)
		return;
	TAILQ_FOREACH(nd, &j->nodes, entry) {
		if (nd->state != RZN_MEMBER || !nd->joining)
			continue;
		any = 1;
		if (nd->dead_local != 0 && late == NULL)
			late = nd;
	}
	if (!any) {
		j->join_at = j->join_deadline = -1;
		return;
	}
	if (late != NULL) {
		j->join_at = -1;
		if (j->join_deadline < 0)	/* loaded after a restart */
			j->join_deadline = now + j->repair_timeout_ms;
		if (now < j->join_deadline)
			return;
		snprintf(cause, sizeof cause, "node %" PRId64 " (host %s), "
		    "joining in place: its workers were not ready within %"
		    PRId64 " ms", late->id, late->host, j->repair_timeout_ms);
		rz_event(rz, j, now, "join escalated to restart: %s", cause);
		rz_restart(rz, ob, j, now, cause, "a joining node was not "
		    "ready");
		return;
	}
	if (now < j->last_join + j->last_call_ms) {
		j->join_at = j->last_join + j->last_call_ms;
		return;
	}
	rz_elastic_grow(rz, ob, j, now);
}

/* Every node joining in place is ready: one grow round takes them in. */
static void
rz_elastic_grow(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now)
{
	struct rz_node	*nd;
	char		 ids[256];
	size_t		 o = 0;
	int64_t		 k = 0, w = 0;
	int		 r;

	ids[0] = '\0';
	TAILQ_FOREACH(nd, &j->nodes, entry) {
		if (nd->state != RZN_MEMBER || !nd->joining)
			continue;
		k++;
		w += nd->lws;
		if (o < sizeof ids && (r = snprintf(ids + o, sizeof ids - o,
		    "%s%" PRId64, o ? ", " : "", nd->id)) > 0)
			o += (size_t)r;
	}
	if (rz_repair_round(rz, ob, j, NAT_KIND_GROW, now) != 0)
		return;		/* restarted: no donor */
	rz_event(rz, j, now, "join: grow to %" PRId64 ", %" PRId64 " node%s "
	    "in place (%s) with %" PRId64 " workers, round %" PRId64 ", donor %"
	    PRId64, j->world_size, k, k == 1 ? "" : "s", ids, w, j->round,
	    j->donor);
}

/*
 * A repair round opened (rz_repair_round): the nodes joining in place
 * whose workers are all ready are in it.
 */
void
rz_elastic_opened(struct rz *rz, struct rz_job *j)
{
	struct rz_node	*nd;
	int		 left = 0;

	TAILQ_FOREACH(nd, &j->nodes, entry) {
		if (!nd->joining)
			continue;
		if (nd->state == RZN_MEMBER && nd->dead_local == 0) {
			nd->joining = 0;
			rz_save_node(rz, j, nd);
		} else
			left = 1;
	}
	j->join_at = -1;
	if (!left)
		j->join_deadline = -1;
}

/* When rz_elastic_tick has work for running job j, or -1. */
int64_t
rz_elastic_deadline(const struct rz_job *j)
{
	if (j->join_at >= 0)
		return j->join_at;
	return j->join_deadline;
}

/* The round ended (a restart): nobody joins in place any more. */
void
rz_elastic_reset(struct rz_job *j)
{
	struct rz_node	*nd;

	TAILQ_FOREACH(nd, &j->nodes, entry)
		nd->joining = 0;
	j->join_at = j->join_deadline = -1;
}

/*
 * Leaving on purpose (rdzvctl evict): member nd of running job j is
 * asked to leave at its workers' next step boundary, as SIGTERM to its
 * agent does.  Its agent tells each worker "leave", sends LEAVE once
 * they are gone, and rz_leave shrinks the round around it with no step
 * dropped.  Returns 1 when asked; 0 when it cannot leave that way (the
 * caller drops it at once): not a member of a running round, its agent
 * not connected or not able to repair, or the job unable to.
 */
int
rz_elastic_drain(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t now)
{
	char	buf[RZ_ID_MAX + 64];

	if (j->state != RZJ_RUNNING || nd->state != RZN_MEMBER ||
	    nd->conn == NULL || !nd->repairable || nd->joining ||
	    nd->dead_local != 0 || j->members < 2 ||
	    rz_repair_refused_job(j, buf, sizeof buf) != NULL ||
	    rz_topo_fixed(j) != NULL)
		return 0;
	if (rz_push_order(ob, j, nd, -1, "evicted by an operator") != 0)
		return 0;
	nd->drain_by = now + RZ_DRAIN_MS;
	if (j->lease_low < 0 || nd->drain_by < j->lease_low)
		j->lease_low = nd->drain_by;
	rz_mark(rz, j);		/* its event: the row, once settled */
	rz_event(rz, j, now, "evict: node %" PRId64 " host %s asked to leave "
	    "at its workers' next step boundary (dropped if still here in %d "
	    "s)", nd->id, nd->host, RZ_DRAIN_MS / 1000);
	return 1;
}

/* Drops the nodes asked to leave that are still here at their time. */
void
rz_elastic_drain_tick(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now)
{
	struct rz_node	*nd;

	/* rz_evict may change the list: look again after each. */
	for (;;) {
		TAILQ_FOREACH(nd, &j->nodes, entry)
			if (nd->drain_by > 0 && nd->drain_by <= now)
				break;
		if (nd == NULL || rz_closed(j))
			return;
		rz_event(rz, j, now, "evict: node %" PRId64 " host %s did not "
		    "leave within %d s: dropped", nd->id, nd->host,
		    RZ_DRAIN_MS / 1000);
		nd->drain_by = 0;
		rz_evict(rz, ob, j, nd, now, "evicted by an operator (it did "
		    "not leave in time)");
	}
}
