/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rz_topo.c: replica groups (sharded training, HSDP).  A job that says
 * replicas=R (JOIN) has world W = R x S ranks: rank h (its home: its
 * node's group rank x the node's workers + its local rank, fixed while
 * the membership holds) is replica h / S, shard h % S.  A rank's shards
 * exist only on the ranks of the same shard index in the other replicas:
 * the donor of a lost rank's shard is that rank in the lowest replica
 * with no dead rank.  With one replica there is no such rank: the job
 * restarts instead of repairing.  Pure: no I/O.
 */
#include "config.h"

#include <sys/queue.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_err.h"
#include "rz.h"
#include "rz_impl.h"

int
rz_topo_check(int64_t world, int64_t replicas, char *why, size_t whysz)
{
	if (replicas < 1 || world < 1) {
		snprintf(why, whysz, "replicas=%" PRId64 " in a world of %"
		    PRId64 " ranks: give replicas=R with R >= 1", replicas,
		    world);
		return RDZV_EINVAL;
	}
	if (world % replicas != 0) {
		snprintf(why, whysz, "replicas=%" PRId64 " does not divide "
		    "the world of %" PRId64 " ranks into groups of equal size: "
		    "give a replicas that divides nodes x nproc_per_node",
		    replicas, world);
		return RDZV_EINVAL;
	}
	return 0;
}

void
rz_topo_rank(int64_t world, int64_t replicas, int64_t home,
    struct rz_topo *t)
{
	t->replicas = replicas;
	t->shards = world / replicas;
	t->replica = home / t->shards;
	t->shard = home % t->shards;
}

int64_t
rz_topo_donor(int64_t world, int64_t replicas, int64_t home,
    const uint64_t *dead)
{
	struct rz_topo	t;
	int64_t		g, s, h;

	rz_topo_rank(world, replicas, home, &t);
	for (g = 0; g < replicas; g++) {
		if (g == t.replica)
			continue;
		for (s = 0; s < t.shards; s++) {
			h = g * t.shards + s;
			if (dead[h / 64] & (1ULL << (h % 64)))
				break;
		}
		if (s == t.shards)
			return g * t.shards + t.shard;
	}
	return -1;
}

/*
 * A round of members nodes (order[0..members-1]) is about to form: in a
 * job of replica groups, their workers must make replicas groups of
 * equal size on nodes of equal size (a rank's home is its node's group
 * rank x the node's workers + its local rank); else the job fails, its
 * failure saying why and what to change.  Returns 0 when the round may
 * form.
 */
int
rz_topo_form(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node **order, int64_t members, int64_t now)
{
	int64_t	i, world = 0;

	if (j->replicas < 1)
		return 0;
	for (i = 0; i < members; i++) {
		if (order[i]->lws != order[0]->lws) {
			snprintf(j->failure, sizeof j->failure, "replicas=%"
			    PRId64 ": node %" PRId64 " (host %s) has %" PRId64
			    " workers and node %" PRId64 " (host %s) %" PRId64
			    ": replica groups need the same --nproc_per_node "
			    "on every node", j->replicas, order[0]->id,
			    order[0]->host, order[0]->lws, order[i]->id,
			    order[i]->host, order[i]->lws);
			rz_close_job(rz, ob, j, RZJ_FAILED, now);
			return -1;
		}
		world += order[i]->lws;
	}
	if (rz_topo_check(world, j->replicas, j->failure,
	    sizeof j->failure) != 0) {
		rz_close_job(rz, ob, j, RZJ_FAILED, now);
		return -1;
	}
	return 0;
}

/*
 * Why a job of replica groups cannot repair (one replica: no peer holds
 * a lost shard), or NULL.
 */
const char *
rz_topo_refused(const struct rz_job *j)
{
	if (j->replicas == 1)
		return "one replica (plain FSDP2): no peer holds the lost "
		    "shard, so the job restarts from its checkpoint";
	return NULL;
}

/*
 * The dead ranks of j's members by home, with local rank l of nd (all of
 * its workers when l < 0) dead too; nd may be a node no longer among the
 * members (lost), whose place still counts.  A home no member holds is
 * dead.  Returns a bitmap of *world bits (the caller frees it), or NULL
 * when the members have no such numbering (nodes of unequal size, a
 * world replicas does not divide) or on no memory.
 */
static uint64_t *
rz_topo_dead(const struct rz_job *j, const struct rz_node *nd, int64_t l,
    int64_t *world)
{
	const struct rz_node	*m;
	uint64_t		*dead;
	int64_t			 lws = nd->lws, slots = nd->group_rank + 1;
	int64_t			 k, home;

	TAILQ_FOREACH(m, &j->nodes, entry) {
		if (m->state != RZN_MEMBER)
			continue;
		if (m->lws != lws || m->group_rank < 0)
			return NULL;
		if (m->group_rank + 1 > slots)
			slots = m->group_rank + 1;
	}
	*world = slots * lws;
	if (lws < 1 || lws > RZ_REPAIR_LWS_MAX || *world % j->replicas != 0 ||
	    (dead = calloc((size_t)(*world + 63) / 64, sizeof *dead)) == NULL)
		return NULL;
	for (home = 0; home < *world; home++)
		dead[home / 64] |= 1ULL << (home % 64);
	TAILQ_FOREACH(m, &j->nodes, entry) {
		if (m->state != RZN_MEMBER)
			continue;
		for (k = 0; k < lws; k++) {
			if ((m->dead_local & (1LL << k)) ||
			    (m == nd && (l < 0 || k == l)))
				continue;
			home = m->group_rank * lws + k;
			dead[home / 64] &= ~(1ULL << (home % 64));
		}
	}
	return dead;
}

/*
 * Why a death (local rank l of nd; all of its workers when l < 0, nd
 * lost) cannot be repaired in a job of replica groups, or NULL: after it
 * some replica group must have no dead rank, to hold every shard (the
 * donors).  Jobs without replica groups, and members with no such
 * numbering, are not refused here.
 */
const char *
rz_topo_unwhole(const struct rz_job *j, const struct rz_node *nd, int64_t l)
{
	uint64_t	*dead;
	int64_t		 world, shards, g, h;
	int		 whole = 0;

	if (j->replicas < 2 || (dead = rz_topo_dead(j, nd, l, &world)) == NULL)
		return NULL;
	shards = world / j->replicas;
	for (g = 0; g < j->replicas && !whole; g++) {
		for (h = g * shards; h < (g + 1) * shards; h++)
			if (dead[h / 64] & (1ULL << (h % 64)))
				break;
		whole = h == (g + 1) * shards;
	}
	free(dead);
	return whole ? NULL : "every replica group would have lost a rank: "
	    "no peer holds every shard, so the job restarts from its "
	    "checkpoint";
}

/*
 * Why a job of replica groups cannot change its membership in place (a
 * node joining, leaving, or lost with no standby to take its place), or
 * NULL: a rank's home, its replica and its shard, holds for the whole
 * job.
 */
const char *
rz_topo_fixed(const struct rz_job *j)
{
	if (j->replicas > 0)
		return "replica groups keep every rank's place: a node "
		    "joins, leaves or is lost with no standby node by a "
		    "restart";
	return NULL;
}

/*
 * Local rank l of nd died in a job of replica groups (nd's dead_local
 * says so already): the event names its replica group, its shard and
 * the donor of that shard (the same shard index in the lowest replica
 * with no dead rank), by home rank.  Members with no such numbering:
 * nothing is said.
 */
void
rz_topo_lost(struct rz *rz, struct rz_job *j, const struct rz_node *nd,
    int64_t l, int64_t now)
{
	struct rz_topo	 t;
	uint64_t	*dead;
	int64_t		 world, home, donor;

	if (j->replicas < 2 || (dead = rz_topo_dead(j, nd, l, &world)) == NULL)
		return;
	home = nd->group_rank * nd->lws + l;
	rz_topo_rank(world, j->replicas, home, &t);
	donor = rz_topo_donor(world, j->replicas, home, dead);
	free(dead);
	if (donor >= 0)
		rz_event(rz, j, now, "replica group %" PRId64 " lost rank %"
		    PRId64 " (shard %" PRId64 " of %" PRId64 "): it waits for "
		    "its replacement, the other replicas step on; donor of "
		    "shard %" PRId64 ": rank %" PRId64, t.replica, home,
		    t.shard, t.shards, t.shard, donor);
	else
		rz_event(rz, j, now, "replica group %" PRId64 " lost rank %"
		    PRId64 " (shard %" PRId64 " of %" PRId64 "): no whole "
		    "replica holds that shard", t.replica, home, t.shard,
		    t.shards);
}
