/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rz_repair.c: repair rounds (rz.h).  A worker's death in a
 * repairable job shrinks the running round around it (the survivors go on
 * without it); its replacement's READY grows the round back; a failure
 * that cannot be repaired, or a replacement not ready in time, restarts
 * the job as before.
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
#include "wire.h"

static const char *rz_repair_refused(struct rz_job *, struct rz_node *,
		    int64_t, char *, size_t);
static void	rz_repair_next(struct rz_job *, int64_t);
static int	rz_grow_held(const struct rz_job *);
static void	rz_repair_shrink(struct rz *, struct rz_outbox *,
		    struct rz_job *, struct rz_node *, int64_t, const char *,
		    int64_t);

int
rz_failure(struct rz *rz, const struct nat_failure *r, int64_t now,
    struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd;
	char		 msg[RZ_MSG_MAX / 2], what[64];
	char		 cause[RZ_MSG_MAX - 64], cutbuf[RZ_ID_MAX + 64];
	const char	*why;
	size_t		 mlen;
	int		 n;

	if ((j = rz_find_job(rz, r->job)) == NULL ||
	    (nd = rz_find_node(j, r->node_id)) == NULL)
		return RDZV_ENOTFOUND;
	mlen = r->message.len < sizeof msg - 1 ? r->message.len :
	    sizeof msg - 1;
	memcpy(msg, r->message.p, mlen);
	msg[mlen] = '\0';
	if (r->signo > 0)
		snprintf(what, sizeof what, "signal %" PRId64, r->signo);
	else
		snprintf(what, sizeof what, "exit code %" PRId64, r->exit_code);
	rz_event(rz, j, now, "failure round %" PRId64 " node %" PRId64
	    " host %s rank %" PRId64 " local rank %" PRId64 " %s: %s",
	    r->round, nd->id, nd->host, r->rank, r->local_rank, what, msg);
	/*
	 * Only the first report of a round counts: the others are the
	 * same failure seen from the survivors.  A repair round keeps the
	 * membership, so a report of a round since it formed is news (its
	 * agent had not heard of the repair round yet): a second failure
	 * during a repair, or one to repair; but the death rdzvd already
	 * counts (a report sent again after a reconnect) is not.
	 */
	if (j->state != RZJ_RUNNING || r->round < j->base_round ||
	    r->round > j->round || nd->state != RZN_MEMBER)
		return 0;
	if (r->round != j->round && r->local_rank >= 0 &&
	    r->local_rank < RZ_REPAIR_LWS_MAX &&
	    (nd->dead_local & (1LL << r->local_rank)))
		return 0;
	snprintf(cause, sizeof cause, "rank %" PRId64 " (local rank %" PRId64
	    ") on %s: %s%s%s", r->rank, r->local_rank, nd->host, what,
	    msg[0] ? ": " : "", msg);
	/*
	 * A dead local rank failing again is its replacement, dead before
	 * it joined (killed while it loaded or while it waited, READY, for
	 * the grow; crashed at its start): no round holds it, so nothing
	 * shrinks; its agent has started another and the grow waits for
	 * that one within the same deadline.  Past RZ_REPL_FAILS_MAX of one
	 * local rank's between two grows the job restarts: a replacement
	 * that cannot start is no repair.  Counted per local rank: the
	 * replacements of different ranks dying (several failures at
	 * once, kills from outside) tell nothing of one that cannot start.
	 */
	/* Training ended: a replacement that never stepped (its agent's
	 * HEARTBEAT says so, or none took it in) has nothing to do and no
	 * grow comes for the next one: nothing to count. */
	if (r->repair && r->local_rank >= 0 &&
	    r->local_rank < RZ_REPAIR_LWS_MAX && rz_training_ended(j) &&
	    ((nd->dead_local | nd->ready_local | nd->unjoined) &
	    (1LL << r->local_rank))) {
		nd->ready_local &= ~(1LL << r->local_rank);
		nd->dead_local |= 1LL << r->local_rank;
		rz_save_node(rz, j, nd);
		rz_event(rz, j, now, "repair: node %" PRId64 " local rank %"
		    PRId64 "'s replacement died (%s) after training ended: "
		    "nothing to replace", nd->id, r->local_rank, what);
		rz_done_if_ended(rz, ob, j, now);
		return 0;
	}
	if (r->repair && r->local_rank >= 0 &&
	    r->local_rank < RZ_REPAIR_LWS_MAX &&
	    ((nd->dead_local | nd->ready_local) & (1LL << r->local_rank))) {
		nd->ready_local &= ~(1LL << r->local_rank);
		nd->dead_local |= 1LL << r->local_rank;
		rz_save_node(rz, j, nd);
		n = ++nd->repl_fails[r->local_rank];
		if (n <= RZ_REPL_FAILS_MAX) {
			rz_event(rz, j, now, "repair: node %" PRId64 " local "
			    "rank %" PRId64 "'s replacement died before it "
			    "joined (%s): another is on its way (%d of %d "
			    "such deaths of the rank before a restart)",
			    nd->id, r->local_rank, what, n,
			    RZ_REPL_FAILS_MAX);
			return 0;
		}
		rz_event(rz, j, now, "repair escalated to restart: node %"
		    PRId64 " local rank %" PRId64 "'s replacements died "
		    "before they joined %d times", nd->id, r->local_rank, n);
		rz_restart(rz, ob, j, now, cause, "replacements died before "
		    "they joined");
		return 0;
	}
	if (r->repair) {
		if ((why = rz_repair_refused(j, nd, r->local_rank, cutbuf,
		    sizeof cutbuf)) == NULL) {
			rz_repair_shrink(rz, ob, j, nd, r->local_rank, what,
			    now);
			return 0;
		}
		rz_event(rz, j, now, "repair escalated to restart: %s", why);
	} else if (j->pend_node != 0)
		rz_event(rz, j, now, "repair escalated to restart: a failure "
		    "the agent does not repair");
	else if ((why = rz_topo_refused(j)) != NULL)
		rz_event(rz, j, now, "no repair: %s", why);
	rz_restart(rz, ob, j, now, cause, "a worker failed");
	return 0;
}

/*
 * Why a failure of local rank l on nd cannot be repaired, or NULL when
 * it can (buf holds the text of some answers).
 */
static const char *
rz_repair_refused(struct rz_job *j, struct rz_node *nd, int64_t l,
    char *buf, size_t bufsz)
{
	const char	*why;

	if ((why = rz_repair_refused_job(j, buf, bufsz)) != NULL)
		return why;
	if (l < 0 || l >= nd->lws || l >= RZ_REPAIR_LWS_MAX ||
	    (nd->dead_local & (1LL << l)))
		return "the failed local rank is not a live one";
	if (j->world_size <= 1)
		return "no worker would be left";
	if (!rz_state_left(j, nd, l))
		return "no worker that holds the job's state would be left "
		    "(each other one is a replacement that never stepped)";
	return rz_topo_unwhole(j, nd, l);
}

/*
 * Whether a worker other than nd's local rank l holds the job's state
 * (rz_holds_state).  Without one, a repair would start the job again
 * from nothing and call it a repair.
 */
int
rz_state_left(const struct rz_job *j, const struct rz_node *nd, int64_t l)
{
	const struct rz_node	*m;
	int64_t			 k;

	TAILQ_FOREACH(m, &j->nodes, entry)
		for (k = 0; k < m->lws; k++)
			if (rz_holds_state(m, k) && !(m == nd && k == l))
				return 1;
	return 0;
}

/*
 * Why the job cannot repair now, whatever failed, or NULL.  A failure
 * while a replacement is on its way repairs too: the round shrinks
 * again, and one grow takes every replacement in once all are ready.
 */
const char *
rz_repair_refused_job(struct rz_job *j, char *buf, size_t bufsz)
{
	return rz_repair_cannot(j, buf, bufsz);
}

/*
 * Why the job cannot open a repair round at all (repair off or used, a
 * member that cannot repair), or NULL.  A member none of whose workers
 * is in yet (a standby in a lost node's place, a node joining in place)
 * is not asked: its workers say so before they are ready.
 */
const char *
rz_repair_cannot(struct rz_job *j, char *buf, size_t bufsz)
{
	struct rz_node	*m;
	const char	*why;

	if ((why = rz_topo_refused(j)) != NULL)
		return why;
	if (j->max_repairs == 0)
		return "repair is off (max_repairs 0)";
	if (j->repairs >= j->max_repairs) {
		snprintf(buf, bufsz, "max_repairs %" PRId64 " used",
		    j->max_repairs);
		return buf;
	}
	TAILQ_FOREACH(m, &j->nodes, entry) {
		if (m->state != RZN_MEMBER || rz_live(m) == 0)
			continue;
		if (!m->repairable || m->lws > RZ_REPAIR_LWS_MAX) {
			snprintf(buf, bufsz, "node %" PRId64 " (host %s) "
			    "cannot repair", m->id, m->host);
			return buf;
		}
	}
	return NULL;
}

/*
 * Member lost (lease lapse, LEAVE; its node already removed, how says
 * which) in a job that can repair: a STANDBY node takes its group rank
 * in a shrink round (none of its workers live yet: its agent starts
 * them all as replacements, and their READYs grow the round), or, with
 * no standby and min_nodes still met, the members close ranks in a
 * shrink round.  Returns 0 when a repair round opened, -1 when the
 * round must end as before (the event says why).
 */
int
rz_repair_lost(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    const struct rz_node *lost, const char *how, int64_t now)
{
	struct rz_node	*m, *sb = NULL;
	char		 buf[RZ_ID_MAX + 64];
	const char	*why;
	int64_t		 left = 0;

	TAILQ_FOREACH(m, &j->nodes, entry) {
		if (m->state == RZN_MEMBER)
			left++;
		else if (m->state == RZN_STANDBY && sb == NULL &&
		    m->conn != NULL && m->lws <= RZ_REPAIR_LWS_MAX)
			sb = m;		/* the first to have come */
	}
	if ((why = rz_repair_refused_job(j, buf, sizeof buf)) == NULL &&
	    sb == NULL)
		why = rz_topo_fixed(j);
	if (why == NULL && sb != NULL)
		why = rz_topo_unwhole(j, lost, -1);
	if (why == NULL && sb == NULL && left < j->min)
		why = "no standby, and fewer than min_nodes would be left";
	if (why == NULL && sb == NULL && left == 0)
		why = "no node would be left";
	if (why == NULL && !rz_state_left(j, NULL, -1))
		why = "no worker that holds the job's state would be left "
		    "(each one is a replacement that never stepped)";
	if (why != NULL) {
		rz_event(rz, j, now, "repair escalated to restart: node %"
		    PRId64 " (host %s) lost (%s): %s", lost->id, lost->host,
		    how, why);
		return -1;
	}
	/* The awaited replacement's node is the one lost: the next. */
	if (j->pend_node == lost->id)
		rz_repair_next(j, now);
	if (sb != NULL) {
		sb->state = RZN_MEMBER;
		sb->group_rank = lost->group_rank;
		sb->succeeded = 0;
		sb->repairable = 0;	/* its workers say so when up */
		sb->dead_local = (int64_t)((1ULL << sb->lws) - 1);
		rz_save_node(rz, j, sb);
		if (j->pend_node == 0) {
			j->pend_node = sb->id;
			j->pend_local = -1;	/* all of its workers */
			j->pend_deadline = now + j->repair_timeout_ms;
		}
	}
	if (rz_repair_round(rz, ob, j, NAT_KIND_SHRINK, now) != 0)
		return 0;	/* restarted */
	if (sb != NULL)
		rz_event(rz, j, now, "repair: node %" PRId64 " (host %s) "
		    "lost (%s): standby node %" PRId64 " (host %s) takes its "
		    "place; shrink to %" PRId64 " until its workers are ready, "
		    "round %" PRId64 ", donor %" PRId64, lost->id, lost->host,
		    how, sb->id, sb->host, j->world_size, j->round, j->donor);
	else
		rz_event(rz, j, now, "repair: shrink to %" PRId64 " after node "
		    "%" PRId64 " (host %s) was lost (%s): %" PRId64 " nodes "
		    "left, round %" PRId64 ", donor %" PRId64, j->world_size,
		    lost->id, lost->host, how, left, j->round, j->donor);
	return 0;
}

/*
 * Opens a repair round of kind (SHRINK or GROW) for the members as they
 * stand (dead_local, the pending replacement): the old round's namespace
 * and port go, a fresh namespace and port come, rank bases and the donor
 * are set over the live workers, every member is pushed.  Returns 0, or
 * -1 when no live worker holds the job's state (no donor): no round
 * with nothing to repair from is sent, the job restarts instead
 * (rz_restart, the event says why).
 */
int
rz_repair_round(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t kind, int64_t now)
{
	struct rz_node	*nd;
	char		 cause[160];

	/* On no memory the bases stay, the round is sent anyway: the
	 * workers' numbering is then wrong and the next failure restarts. */
	rz_rank_bases(rz, j);
	if (j->donor < 0) {
		snprintf(cause, sizeof cause, "no live worker holds the job's "
		    "state for a %s round after round %" PRId64 " (each is a "
		    "replacement that never received it)",
		    kind == NAT_KIND_GROW ? "grow" : "shrink", j->round);
		rz_event(rz, j, now, "repair escalated to restart: %s", cause);
		rz_restart(rz, ob, j, now, cause, "no worker holds the job's "
		    "state");
		return -1;
	}
	if (j->port > 0)
		rz_out_port_close(ob, j);
	/* The ending round's keys stay until the next repair round: a
	 * worker still coming to it reads there whether its peers came
	 * (the PyTorch helper's group.arrive), not an empty namespace that
	 * cannot tell it.  The round before it goes. */
	rz_drop_round(rz, j, j->round - 1);
	j->round++;
	rz_round_ns(j->ns, sizeof j->ns, j, j->round);
	j->kind = kind;
	rz_out_port_open(ob, j, 0);
	j->repairs++;
	rz->stats.repairs_total++;
	rz->stats.rounds_total++;
	rz_mark(rz, j);
	TAILQ_FOREACH(nd, &j->nodes, entry) {
		/* The rows keep fresh and ready_local: an rdzvd restarted
		 * later must not take a worker of this round for a
		 * replacement that never joined. */
		int	save = nd->fresh != 0 || nd->ready_local != 0 ||
		    kind == NAT_KIND_GROW;

		if (nd->state == RZN_MEMBER)
			rz_push_node(ob, j, nd, RDZV_ROUND_RUNNING, NULL);
		nd->fresh = 0;	/* in the round now: donors from here on */
		/* A READY replacement is live in any repair round, a shrink
		 * too (a second death while it waited for its grow): it
		 * joins it, and its death from now on is a member's. */
		nd->ready_local = 0;
		if (kind == NAT_KIND_GROW)	/* every replacement is in */
			memset(nd->repl_fails, 0, sizeof nd->repl_fails);
		if (save && nd->state == RZN_MEMBER)
			rz_save_node(rz, j, nd);
	}
	rz_elastic_opened(rz, j);
	return 0;
}

/* Local rank l of nd died and its agent respawns it: the survivors go
 * on at once in a round without it. */
static void
rz_repair_shrink(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t l, const char *what, int64_t now)
{
	int	again = j->pend_node != 0;

	nd->dead_local |= 1LL << l;
	nd->fresh &= ~(1LL << l);
	rz_save_node(rz, j, nd);
	/* A second failure during a repair: the first replacement stays
	 * the one named; the grow waits for both, the whole timeout from
	 * the latest death. */
	if (!again) {
		j->pend_node = nd->id;
		j->pend_local = l;
	}
	j->pend_deadline = now + j->repair_timeout_ms;
	if (rz_repair_round(rz, ob, j, NAT_KIND_SHRINK, now) != 0)
		return;		/* restarted */
	rz_topo_lost(rz, j, nd, l, now);
	rz_event(rz, j, now, "repair: shrink to %" PRId64 " after node %"
	    PRId64 " local rank %" PRId64 " died (%s), round %" PRId64
	    ", donor %" PRId64 "%s", j->world_size, nd->id, l, what, j->round,
	    j->donor, again ? " (during a repair: another replacement on "
	    "its way)" : "");
}

/*
 * A restart as a plain failure makes one: the job fails when its
 * restarts are used (failure text: cause), else every member stops and
 * a new round forms.
 */
void
rz_restart(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now, const char *cause, const char *why)
{
	if (j->restart_count >= j->max_restarts) {
		snprintf(j->failure, sizeof j->failure, "%s; %" PRId64
		    " restarts used of %" PRId64, cause, j->restart_count,
		    j->max_restarts);
		rz_close_job(rz, ob, j, RZJ_FAILED, now);
		return;
	}
	j->restart_count++;
	rz->stats.restarts_total++;
	rz_event(rz, j, now, "restart %" PRId64 " of %" PRId64,
	    j->restart_count, j->max_restarts);
	rz_round_end(rz, ob, j, now, why);
	rz_round_form(rz, ob, j, now);
}

int
rz_ready(struct rz *rz, const struct nat_ready *r, int64_t now,
    struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd;

	if ((j = rz_find_job(rz, r->job)) == NULL ||
	    (nd = rz_find_node(j, r->node_id)) == NULL)
		return RDZV_ENOTFOUND;
	/* A READY of a replacement no longer awaited (the job restarted
	 * meanwhile, a repeat) is late news: nothing to do. */
	if (j->state != RZJ_RUNNING || nd->state != RZN_MEMBER ||
	    r->local_rank < 0 || r->local_rank >= RZ_REPAIR_LWS_MAX ||
	    !(nd->dead_local & (1LL << r->local_rank)))
		return 0;
	if (nd->joining)
		return rz_elastic_ready(rz, ob, j, nd, r->local_rank, now);
	/* Training ended in the smaller group: no grow any more. */
	if (rz_training_ended(j))
		return 0;
	nd->dead_local &= ~(1LL << r->local_rank);
	nd->ready_local |= 1LL << r->local_rank;
	nd->fresh |= 1LL << r->local_rank;	/* never the donor */
	rz_save_node(rz, j, nd);
	rz_grow_if_due(rz, ob, j, now);
	if (j->kind == NAT_KIND_SHRINK && rz_grow_held(j) &&
	    (nd->ready_local & (1LL << r->local_rank)))
		rz_event(rz, j, now, "repair: node %" PRId64 " local rank %"
		    PRId64 "'s replacement is ready; its grow waits for a step "
		    "in shrink round %" PRId64, nd->id, r->local_rank,
		    j->round);
	return 0;
}

/*
 * Whether the grow must wait for a step in the shrink round j->round:
 * every member's agent says in its HEARTBEAT the latest round a worker
 * of it committed a step in, and none says j->round yet.  A grow taken
 * while the survivors are still building the shrink's group would catch
 * them between two groups; once one of them committed a step there, the
 * group of every rank that steps in it was whole (a step is a
 * collective over all of them), so the grow may open.  A repair that
 * went on (not a restart) always has ranks that step in the shrink: all
 * survivors of a DDP job, a replica with no dead rank of a sharded one
 * (rz_topo.c).  An agent that does not say (an older one, or none since
 * rdzvd restarted) holds nothing back.
 */
static int
rz_grow_held(const struct rz_job *j)
{
	const struct rz_node	*m;

	if (j->kind != NAT_KIND_SHRINK)
		return 0;
	TAILQ_FOREACH(m, &j->nodes, entry) {
		if (m->state != RZN_MEMBER || m->joining)
			continue;
		if (!m->says_stepped || m->stepped >= j->round)
			return 0;
	}
	return 1;
}

/*
 * Opens the grow round once it is due: every replacement on its way is
 * READY (a standby's workers too), at least one is, training goes on,
 * and no step in the shrink is awaited (rz_grow_held).  Every
 * replacement comes in with one grow round: two grows back to back
 * would catch the first one's replacement still bootstrapping in a
 * round the others have already left for the second.
 */
void
rz_grow_if_due(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now)
{
	struct rz_node	*m, *one = NULL, *standby = NULL;
	int64_t		 n = 0;
	int		 l;

	if (j->state != RZJ_RUNNING || rz_training_ended(j))
		return;
	TAILQ_FOREACH(m, &j->nodes, entry) {
		if (m->state != RZN_MEMBER || m->joining)
			continue;
		if (m->dead_local != 0)
			return;
		if (m->ready_local != 0 && one == NULL)
			one = m;
		n += __builtin_popcountll((unsigned long long)m->ready_local);
		if (m->id == j->pend_node && j->pend_local < 0)
			standby = m;
	}
	if (n == 0 || rz_grow_held(j))
		return;
	l = __builtin_ctzll((unsigned long long)one->ready_local);
	if (rz_repair_round(rz, ob, j, NAT_KIND_GROW, now) != 0)
		return;		/* restarted */
	if (standby != NULL)
		rz_event(rz, j, now, "repair: grow to %" PRId64 ", node %"
		    PRId64 " (host %s) in with %" PRId64 " workers, round %"
		    PRId64 ", donor %" PRId64, j->world_size, standby->id,
		    standby->host, standby->lws, j->round, j->donor);
	else if (n == 1)
		rz_event(rz, j, now, "repair: grow to %" PRId64 ", node %"
		    PRId64 " local rank %d back, round %" PRId64 ", donor %"
		    PRId64, j->world_size, one->id, l, j->round, j->donor);
	else
		rz_event(rz, j, now, "repair: grow to %" PRId64 ", %" PRId64
		    " replacements back in one round (failures during a "
		    "repair), round %" PRId64 ", donor %" PRId64,
		    j->world_size, n, j->round, j->donor);
	j->pend_node = 0;
	j->pend_local = j->pend_deadline = -1;
}

/*
 * The replacement awaited next: the one awaited if it still is (its node
 * a member with dead workers), else the first member's dead workers
 * (nodes joining in place aside), with the whole repair timeout from
 * now; none: pend_node 0.
 */
static void
rz_repair_next(struct rz_job *j, int64_t now)
{
	struct rz_node	*m, *p = NULL;
	int64_t		 full;

	TAILQ_FOREACH(m, &j->nodes, entry) {
		if (m->state != RZN_MEMBER || m->joining || m->dead_local == 0)
			continue;
		if (m->id == j->pend_node) {
			p = m;
			break;
		}
		if (p == NULL)
			p = m;
	}
	if (p == NULL) {
		j->pend_node = 0;
		j->pend_local = j->pend_deadline = -1;
		return;
	}
	if (p->id == j->pend_node && j->pend_local < 0)
		return;		/* a standby's workers: still the same wait */
	full = p->lws >= RZ_REPAIR_LWS_MAX ? INT64_MAX :
	    (int64_t)((1ULL << p->lws) - 1);
	if (p->id != j->pend_node || !(p->dead_local & (1LL << j->pend_local)))
		j->pend_deadline = now + j->repair_timeout_ms;
	j->pend_node = p->id;
	j->pend_local = p->dead_local == full ? -1 :
	    __builtin_ctzll((unsigned long long)p->dead_local);
}

/*
 * The end of training during a repair.  nd reported SUCCEEDED: its
 * workers that trained exited 0; unjoined (bit l: local rank l) are its
 * replacements that never stepped (up, or on their way).  A synchronous
 * group never finishes without its members, so training ended for the
 * whole job: a replacement still awaited, or one a grow round took in
 * that never stepped, has no step to do.  The grow is called off: no
 * replacement is awaited any more (no repair timeout, so no restart),
 * none opens for a READY after it (rz_ready), and the job closes DONE
 * once every member with live workers succeeded (rz_succeeded); each
 * agent stops its replacements then.  Nothing to do when no repair was
 * in flight.
 */
void
rz_repair_ended(struct rz *rz, struct rz_job *j, const struct rz_node *nd,
    int64_t unjoined, int64_t now)
{
	char	ranks[RZ_REPAIR_LWS_MAX * 3 + 1];
	size_t	len = 0;
	int	l, n = 0;

	if (j->pend_node != 0) {
		if (rz_grow_held(j))
			rz_event(rz, j, now, "repair: no grow: node %" PRId64
			    " finished before rdzvd heard of a step in shrink "
			    "round %" PRId64 " (the grow waits for one, its "
			    "replacements ready): training ended, the grow is "
			    "called off",
			    nd->id, j->round);
		else if (j->pend_local >= 0)
			rz_event(rz, j, now, "repair: no grow: node %" PRId64
			    " finished before the replacement of node %"
			    PRId64 " local rank %" PRId64 " was ready: "
			    "training ended, the grow is called off", nd->id,
			    j->pend_node, j->pend_local);
		else
			rz_event(rz, j, now, "repair: no grow: node %" PRId64
			    " finished before the workers of node %" PRId64
			    " were ready: training ended, the grow is called "
			    "off", nd->id, j->pend_node);
		j->pend_node = 0;
		j->pend_local = j->pend_deadline = -1;
		rz_mark(rz, j);
		return;
	}
	if (unjoined == 0)
		return;
	ranks[0] = '\0';
	for (l = 0; l < RZ_REPAIR_LWS_MAX && len < sizeof ranks; l++)
		if (unjoined & (1LL << l)) {
			len += (size_t)snprintf(ranks + len, sizeof ranks - len,
			    "%s%d", n++ ? "," : "", l);
		}
	rz_event(rz, j, now, "repair: no grow: node %" PRId64 " finished "
	    "before its replacement%s of local rank%s %s joined %s round %"
	    PRId64 ": training ended, the grow is called off", nd->id,
	    n == 1 ? "" : "s", n == 1 ? "" : "s", ranks,
	    j->kind == NAT_KIND_GROW ? "grow" : "repair", j->round);
}

/* Whether training ended: a member succeeded (a synchronous group never
 * finishes without its members). */
int
rz_training_ended(const struct rz_job *j)
{
	const struct rz_node	*m;

	TAILQ_FOREACH(m, &j->nodes, entry)
		if (m->state == RZN_MEMBER && m->succeeded)
			return 1;
	return 0;
}

/* The pending replacement did not say READY in time: a restart. */
void
rz_repair_timeout(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now)
{
	char	cause[160];

	rz_repair_next(j, now);		/* one still awaited, for its name */
	if (j->pend_node == 0)		/* every one READY: rz_grow_held */
		snprintf(cause, sizeof cause, "no rank stepped in shrink "
		    "round %" PRId64 " within %" PRId64 " ms (the grow of the "
		    "ready replacements waits for one)", j->round,
		    j->repair_timeout_ms);
	else if (j->pend_local >= 0)
		snprintf(cause, sizeof cause, "node %" PRId64 " local rank %"
		    PRId64 ": its replacement was not ready within %" PRId64
		    " ms", j->pend_node, j->pend_local, j->repair_timeout_ms);
	else
		snprintf(cause, sizeof cause, "node %" PRId64 " (a standby in "
		    "a lost node's place): its workers were not ready within %"
		    PRId64 " ms", j->pend_node, j->repair_timeout_ms);
	rz_event(rz, j, now, "repair escalated to restart: %s", cause);
	rz_restart(rz, ob, j, now, cause, j->pend_node == 0 ?
	    "no step in the shrink round" : "a replacement was not ready");
}
