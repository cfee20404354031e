/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rz.c: the server-side rendezvous state machine (see rz.h for the
 * states, the rows it keeps in kv and the outbox it fills; rz_impl.h
 * for how it is split into files).  Deterministic: the same events at
 * the same times give the same rounds, ranks and pushes.
 *
 * Why about 1,250 lines: the machine's core (JOIN, a round forming,
 * leases, the tick, the outbox); repair, joining in place, stragglers,
 * replica groups, retention and the rows are files of their own
 * (rz_impl.h).
 */
#include "config.h"

#include <sys/queue.h>

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uthash.h>

#include "rdzv_err.h"
#include "rz.h"
#include "rz_impl.h"
#include "wire.h"

/* ---- the outbox ---- */

void
rz_outbox_init(struct rz_outbox *ob)
{
	memset(ob, 0, sizeof *ob);
	ob->deadline = ob->purge_at = -1;
}

void
rz_outbox_reset(struct rz_outbox *ob)
{
	ob->node_id = ob->restart_count = ob->lease_ms = ob->round = 0;
	ob->npush = ob->nport = ob->npurged = 0;
	ob->deadline = ob->purge_at = -1;
	ob->lost = 0;
}

void
rz_outbox_free(struct rz_outbox *ob)
{
	free(ob->push);
	free(ob->port);
	free(ob->purged);
	rz_outbox_init(ob);
}

/* Room for one more item in *v (n used of *cap, each sz bytes): returns
 * it zeroed, or NULL (counted in ob->lost). */
void *
rz_outbox_grow(struct rz_outbox *ob, void **v, size_t *n, size_t *cap,
    size_t sz)
{
	void	*nv;
	size_t	 nc;

	if (*n == *cap) {
		nc = *cap ? *cap * 2 : 16;
		if ((nv = reallocarray(*v, nc, sz)) == NULL) {
			ob->lost++;
			return NULL;
		}
		*v = nv;
		*cap = nc;
	}
	nv = (char *)*v + (*n)++ * sz;
	memset(nv, 0, sz);
	return nv;
}

/* A push to fill in (zeroed), or NULL (no memory: ob->lost counts it). */
struct rz_out_push *
rz_out_push(struct rz_outbox *ob)
{
	return rz_outbox_grow(ob, (void **)&ob->push, &ob->npush, &ob->cappush,
	    sizeof *ob->push);
}

/* Asks the caller to close j's round port. */
void
rz_out_port_close(struct rz_outbox *ob, struct rz_job *j)
{
	struct rz_out_port	*op;

	j->port = 0;
	if ((op = rz_outbox_grow(ob, (void **)&ob->port, &ob->nport,
	    &ob->capport, sizeof *ob->port)) == NULL)
		return;
	memcpy(op->job, j->id, sizeof op->job);
}

/* Asks the caller to serve j's round namespace on a port (want: the one
 * to reuse, or 0); j->port is set by rz_settle. */
void
rz_out_port_open(struct rz_outbox *ob, struct rz_job *j, int want)
{
	struct rz_out_port	*op;

	j->port = 0;
	if ((op = rz_outbox_grow(ob, (void **)&ob->port, &ob->nport,
	    &ob->capport, sizeof *ob->port)) == NULL)
		return;
	op->open = 1;
	memcpy(op->job, j->id, sizeof op->job);
	memcpy(op->ns, j->ns, sizeof op->ns);
	op->want = want;
	op->port = -1;
	op->jp = j;
	j->port_pending = 1;
}

/* The job row must be written (by rz_settle, before the reply). */
void
rz_mark(struct rz *rz, struct rz_job *j)
{
	if (j->dirty)
		return;
	j->dirty = 1;
	TAILQ_INSERT_TAIL(&rz->dirty, j, dirty_entry);
}

/* Writes the job rows marked. */
static void
rz_write_rows(struct rz *rz)
{
	struct rz_job	*j;

	while ((j = TAILQ_FIRST(&rz->dirty)) != NULL) {
		TAILQ_REMOVE(&rz->dirty, j, dirty_entry);
		j->dirty = 0;
		rz_save_job(rz, j);
	}
}

void
rz_settle(struct rz *rz, struct rz_outbox *ob)
{
	struct rz_out_port	*op;
	struct rz_job		*j;
	size_t			 i;

	for (i = 0; i < ob->nport; i++) {
		op = &ob->port[i];
		if (!op->open || (j = op->jp) == NULL)
			continue;
		j->port = op->port > 0 ? op->port : 0;
		j->port_pending = 0;
		/* Workers were told the old port: a new one is news. */
		if (j->port != op->want)
			rz_mark(rz, j);
	}
	for (i = 0; i < ob->npush; i++)
		if (ob->push[i].port_pending) {
			ob->push[i].round.store_port = ob->push[i].job->port;
			ob->push[i].port_pending = 0;
		}
	rz_write_rows(rz);
	ob->deadline = rz_next_deadline(rz);
	ob->purge_at = rz_next_purge(rz);
}

/* Copies a peer-supplied identifier, refusing empty, long or odd ones. */
static int
rz_copy_id(char *dst, struct slice s, int allow_empty)
{
	size_t	i;

	if (s.len > RZ_ID_MAX || (s.len == 0 && !allow_empty))
		return RDZV_EINVAL;
	for (i = 0; i < s.len; i++)
		if (!isgraph(s.p[i]))
			return RDZV_EINVAL;
	memcpy(dst, s.p, s.len);
	dst[s.len] = '\0';
	return 0;
}

/* ---- lookups ---- */

struct rz_job *
rz_find_job(struct rz *rz, struct slice id)
{
	struct rz_job	*j;
	char		 buf[RZ_ID_MAX + 1];

	if (rz_copy_id(buf, id, 0) != 0)
		return NULL;
	HASH_FIND_STR(rz->jobs, buf, j);
	return j;
}

struct rz_node *
rz_find_node(struct rz_job *j, int64_t id)
{
	struct rz_node	*nd;

	TAILQ_FOREACH(nd, &j->nodes, entry)
		if (nd->id == id)
			return nd;
	return NULL;
}

/* Node node_id of job `job`, its job in *jp; NULL when either is unknown. */
static struct rz_node *
rz_find_job_node(struct rz *rz, struct slice job, int64_t node_id,
    struct rz_job **jp)
{
	if ((*jp = rz_find_job(rz, job)) == NULL)
		return NULL;
	return rz_find_node(*jp, node_id);
}

int
rz_closed(const struct rz_job *j)
{
	return j->state == RZJ_DONE || j->state == RZJ_FAILED;
}

/* ---- pushes ---- */

static int
rz_group_rank_cmp(const void *a, const void *b)
{
	const struct rz_node	*x = *(struct rz_node * const *)a;
	const struct rz_node	*y = *(struct rz_node * const *)b;

	return x->group_rank < y->group_rank ? -1 :
	    x->group_rank > y->group_rank;
}

/* The workers of nd that are live (not dead awaiting a replacement). */
int64_t
rz_live(const struct rz_node *nd)
{
	return nd->lws - __builtin_popcountll((unsigned long long)
	    nd->dead_local);
}

/*
 * Whether local rank l of member nd holds the job's state: live, and
 * none of a replacement on its way or READY (fresh, ready_local), one
 * its agent says never stepped (unjoined: taken in by a round whose
 * group never formed, it received nothing), a worker of a node joining
 * in place.  A replacement holds it from the repair round that took it
 * in (rz_repair_round clears fresh), the one that named it pending
 * included.  The one rule for the donor (rz_rank_bases) and for whether
 * a repair has anything to go on from (rz_state_left).
 */
int
rz_holds_state(const struct rz_node *nd, int64_t l)
{
	if (nd->state != RZN_MEMBER || nd->joining || l < 0 || l >= nd->lws ||
	    l >= RZ_REPAIR_LWS_MAX)
		return 0;
	return !((nd->dead_local | nd->ready_local | nd->fresh |
	    nd->unjoined) & (1LL << l));
}

/*
 * Sets each member's rank base (the global rank of its first live
 * worker: the live workers of the members ranked before it),
 * j->members, j->world_size and j->donor, in one pass over the members
 * in group rank order (a job loaded from its rows, a repair round); the
 * group ranks are closed up to 0..members-1 (a lost node's gone).  The
 * donor is the worker that was the donor before (donor_node,
 * donor_local) while it holds the state: a replacement that came in by
 * a grow may not have its state yet when the next round opens (two
 * grows back to back), so the lowest rank that holds it
 * (rz_holds_state) is taken only when the donor died; -1 when none
 * does.  Returns 0 or RDZV_ENOMEM.
 */
int
rz_rank_bases(struct rz *rz, struct rz_job *j)
{
	struct rz_node	**v, *nd;
	int64_t		  n = 0, i, l, k, base = 0, kept = -1;
	int64_t		  low = -1, low_node = 0, low_local = -1;

	if ((v = reallocarray(NULL, (size_t)j->nnodes + 1, sizeof *v)) == NULL)
		return RDZV_ENOMEM;
	TAILQ_FOREACH(nd, &j->nodes, entry)
		if (nd->state == RZN_MEMBER)
			v[n++] = nd;
	qsort(v, (size_t)n, sizeof *v, rz_group_rank_cmp);
	for (i = 0; i < n; i++) {
		nd = v[i];
		/* A lost node's rank is closed up: the ranks stay 0..n-1. */
		if (nd->group_rank != i) {
			nd->group_rank = i;
			rz_save_node(rz, j, nd);
		}
		nd->rank_base = base;
		for (l = k = 0; l < nd->lws; l++) {
			if (nd->dead_local & (1LL << l))
				continue;
			if (rz_holds_state(nd, l)) {
				if (nd->id == j->donor_node &&
				    l == j->donor_local)
					kept = base + k;
				if (low < 0) {
					low = base + k;
					low_node = nd->id;
					low_local = l;
				}
			}
			k++;
		}
		base += rz_live(nd);
	}
	if (kept >= 0)
		j->donor = kept;
	else {
		j->donor = low;
		j->donor_node = low_node;
		j->donor_local = low_local;
	}
	j->members = n;
	j->world_size = base;
	free(v);
	return 0;
}

/* Pushes state to nd; message NULL means the job's failure for FAILED. */
void
rz_push_node(struct rz_outbox *ob, struct rz_job *j, struct rz_node *nd,
    int state, const char *message)
{
	struct rz_out_push	*op;
	struct nat_round	*p;

	if (nd->conn == NULL || (op = rz_out_push(ob)) == NULL)
		return;
	op->conn = nd->conn;
	op->job = j;
	p = &op->round;
	p->job = slice_str(j->id);
	p->round = j->round;
	p->state = state;
	p->node_id = nd->id;
	p->group_rank = -1;
	p->restart_count = j->restart_count;
	p->max_restarts = j->max_restarts;
	p->store_ns = slice_str("");
	if (message != NULL)
		p->message = slice_str(message);
	else
		p->message = slice_str(state == RDZV_ROUND_FAILED ?
		    j->failure : "");
	if (state == RDZV_ROUND_RUNNING) {
		p->group_rank = nd->group_rank;
		p->group_world_size = j->members;
		p->world_size = j->world_size;
		p->rank_base = nd->rank_base;
		p->store_ns = slice_str(j->ns);
		p->store_port = j->port;
		op->port_pending = j->port_pending;
		if (j->kind != NAT_KIND_NORMAL) {
			p->kind = j->kind;
			p->donor = j->donor;
			p->live_local = ~nd->dead_local &
			    (nd->lws >= 64 ? -1 : (int64_t)((1ULL << nd->lws) - 1));
		}
	}
}

/*
 * An order to member nd's agent in j's round: kill local rank local (a
 * STRAGGLER push), or with local -1 leave on purpose (DRAIN).  Returns
 * 0, or -1 (not connected, or no memory).
 */
int
rz_push_order(struct rz_outbox *ob, struct rz_job *j, struct rz_node *nd,
    int64_t local, const char *message)
{
	struct rz_out_push	*op;

	if (nd->conn == NULL || (op = rz_out_push(ob)) == NULL)
		return -1;
	op->conn = nd->conn;
	op->job = j;
	op->straggler = local >= 0;
	op->drain = local < 0;
	op->round.job = slice_str(j->id);
	op->round.round = j->round;
	op->round.node_id = nd->id;
	op->straggler_local = local;
	op->round.message = slice_str(message);
	return 0;
}

/* Tells a node where it stands now (after a join or a reconnect). */
static void
rz_push_current(struct rz_outbox *ob, struct rz_job *j, struct rz_node *nd)
{
	if (j->state == RZJ_DONE)
		rz_push_node(ob, j, nd, RDZV_ROUND_DONE, NULL);
	else if (j->state == RZJ_FAILED)
		rz_push_node(ob, j, nd, RDZV_ROUND_FAILED, NULL);
	else if (nd->state == RZN_MEMBER && j->state == RZJ_RUNNING)
		rz_push_node(ob, j, nd, RDZV_ROUND_RUNNING, NULL);
	else if (nd->state == RZN_STANDBY)
		rz_push_node(ob, j, nd, RDZV_ROUND_STANDBY, NULL);
}

/* ---- transitions ---- */

void
rz_close_job(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    enum rz_job_state state, int64_t now)
{
	struct rz_node	*nd;

	j->state = state;
	/* Retention counts from here, in wall time: it must hold across
	 * restarts of rdzvd, which the monotonic clock does not. */
	j->closed_ms = rz->hooks.wall_ms(rz->hooks.arg);
	TAILQ_INSERT_TAIL(&rz->closed, j, closed_entry);
	if (j->port > 0)
		rz_out_port_close(ob, j);
	if (j->ns[0] != '\0')
		kv_ns_drop(rz->kv, slice_str(j->ns));
	rz_drop_round(rz, j, j->round - 1);	/* kept by a repair round */
	rz_event(rz, j, now, state == RZJ_DONE ? "close succeeded" :
	    "close failed: %s", j->failure);
	rz_mark(rz, j);
	/* The last word to each node: a closed job pushes nothing more,
	 * so it holds no connection (rz_conn_gone can skip it). */
	TAILQ_FOREACH(nd, &j->nodes, entry) {
		rz_push_node(ob, j, nd, state == RZJ_DONE ? RDZV_ROUND_DONE :
		    RDZV_ROUND_FAILED, NULL);
		nd->conn = NULL;
	}
}

/* Ends the running round: members stop, everyone waits for the next. */
void
rz_round_end(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now, const char *why)
{
	struct rz_node	*nd;

	if (j->state == RZJ_RUNNING) {
		TAILQ_FOREACH(nd, &j->nodes, entry) {
			if (nd->state == RZN_MEMBER)
				rz_push_node(ob, j, nd, RDZV_ROUND_STOP, NULL);
		}
		if (j->port > 0)
			rz_out_port_close(ob, j);
		/* The old round's keys can never be read again, nor those
		 * of the one before it that a repair round kept. */
		if (j->ns[0] != '\0')
			kv_ns_drop(rz->kv, slice_str(j->ns));
		rz_drop_round(rz, j, j->round - 1);
		rz_event(rz, j, now, "round %" PRId64 " ended: %s", j->round,
		    why);
	}
	j->kind = NAT_KIND_NORMAL;
	j->donor = -1;
	j->donor_node = 0;	/* a new membership: every worker restarts */
	j->donor_local = -1;
	rz_elastic_reset(j);
	j->pend_node = 0;
	j->pend_local = j->pend_deadline = -1;
	TAILQ_FOREACH(nd, &j->nodes, entry) {
		memset(nd->repl_fails, 0, sizeof nd->repl_fails);
		if (nd->state == RZN_MEMBER)
			nd->prev_rank = nd->group_rank;
		/* Every worker starts again: none dead, none said hello. */
		nd->dead_local = nd->ready_local = nd->fresh = 0;
		nd->repairable = 0;
		nd->state = RZN_WAITING;
		nd->group_rank = -1;
		nd->succeeded = 0;
		rz_save_node(rz, j, nd);
	}
	j->state = RZJ_FORMING;
	j->last_join = now;
	j->world_size = 0;		/* until the next round forms */
	rz_mark(rz, j);
}

static int
rz_rank_cmp(const void *a, const void *b)
{
	const struct rz_node	*x = *(struct rz_node * const *)a;
	const struct rz_node	*y = *(struct rz_node * const *)b;

	/*
	 * Nodes that named their rank (a static rendezvous: group rank =
	 * node rank) take it; then survivors, in their old order; then by
	 * joining.
	 */
	if ((x->want_rank >= 0) != (y->want_rank >= 0))
		return x->want_rank >= 0 ? -1 : 1;
	if (x->want_rank != y->want_rank)
		return x->want_rank < y->want_rank ? -1 : 1;
	if ((x->prev_rank >= 0) != (y->prev_rank >= 0))
		return x->prev_rank >= 0 ? -1 : 1;
	if (x->prev_rank != y->prev_rank)
		return x->prev_rank < y->prev_rank ? -1 : 1;
	return x->join_seq < y->join_seq ? -1 : x->join_seq > y->join_seq;
}

/* Completes a round if it can (FORMING only); returns 1 if it did. */
int
rz_round_form(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now)
{
	struct rz_node	**order, *nd;
	int64_t		  i, n = 0, members;

	if (j->state != RZJ_FORMING || j->nnodes < j->min)
		return 0;
	if (j->nnodes < j->max && now < j->last_join + j->last_call_ms)
		return 0;
	if ((order = reallocarray(NULL, (size_t)j->nnodes, sizeof *order)) ==
	    NULL)
		return 0;	/* tried again at the next event */
	TAILQ_FOREACH(nd, &j->nodes, entry)
		order[n++] = nd;
	qsort(order, (size_t)n, sizeof *order, rz_rank_cmp);
	members = n < j->max ? n : j->max;
	if (rz_topo_form(rz, ob, j, order, members, now) != 0) {
		free(order);
		return 0;	/* the job failed: replicas do not fit */
	}

	j->round++;
	j->base_round = j->round;
	j->world_size = 0;
	rz_round_ns(j->ns, sizeof j->ns, j, j->round);
	for (i = 0; i < n; i++) {
		nd = order[i];
		if (i < members) {
			nd->state = RZN_MEMBER;
			nd->group_rank = i;
			nd->rank_base = j->world_size;	/* workers before it */
			j->world_size += nd->lws;
		} else {
			nd->state = RZN_STANDBY;
			nd->group_rank = -1;
		}
		nd->succeeded = 0;
		rz_save_node(rz, j, nd);
	}
	j->members = members;
	rz_out_port_open(ob, j, 0);
	j->state = RZJ_RUNNING;
	/* Earlier rounds brought back by late writers go now. */
	rz_sweep_job(rz, j);
	rz->stats.rounds_total++;
	rz_event(rz, j, now, "round %" PRId64 " running: %" PRId64 " nodes, "
	    "world size %" PRId64 ", %" PRId64 " standby, restart %" PRId64,
	    j->round, members, j->world_size, n - members, j->restart_count);
	rz_mark(rz, j);
	for (i = 0; i < n; i++)
		rz_push_node(ob, j, order[i], i < members ? RDZV_ROUND_RUNNING :
		    RDZV_ROUND_STANDBY, NULL);
	free(order);
	return 1;
}

/* Puts nd (lease set) on j's lists. */
void
rz_node_add(struct rz_job *j, struct rz_node *nd)
{
	TAILQ_INSERT_TAIL(&j->nodes, nd, entry);
	HASH_ADD_STR(j->by_instance, instance, nd);
	if (j->nnodes == 0 || nd->lease_end < j->lease_low)
		j->lease_low = nd->lease_end;
	j->nnodes++;
}

/* Frees every node of j. */
void
rz_nodes_free(struct rz_job *j)
{
	struct rz_node	*nd;

	HASH_CLEAR(hh, j->by_instance);
	while ((nd = TAILQ_FIRST(&j->nodes)) != NULL) {
		TAILQ_REMOVE(&j->nodes, nd, entry);
		free(nd);
	}
	j->nnodes = 0;
}

static void
rz_node_remove(struct rz *rz, struct rz_job *j, struct rz_node *nd)
{
	TAILQ_REMOVE(&j->nodes, nd, entry);
	HASH_DEL(j->by_instance, nd);
	j->nnodes--;
	rz_drop_node_row(rz, j, nd);
	free(nd);
}

/* ---- the ops ---- */

struct rz *
rz_new(struct kv *kv, const struct rz_hooks *hooks, int64_t last_call_ms,
    int64_t lease_ms)
{
	struct rz	*rz;

	if ((rz = calloc(1, sizeof *rz)) == NULL)
		return NULL;
	rz->kv = kv;
	rz->hooks = *hooks;
	rz->def_last_call = last_call_ms;
	rz->def_lease = lease_ms;
	TAILQ_INIT(&rz->closed);
	TAILQ_INIT(&rz->dirty);
	return rz;
}

void
rz_set_retention(struct rz *rz, int64_t retention_ms)
{
	rz->retention_ms = retention_ms > 0 ? retention_ms : 0;
}

void
rz_free(struct rz *rz)
{
	struct rz_job	*j, *tmp;

	if (rz == NULL)
		return;
	HASH_ITER(hh, rz->jobs, j, tmp) {
		HASH_DEL(rz->jobs, j);
		rz_nodes_free(j);
		free(j);
	}
	free(rz);
}

int
rz_join(struct rz *rz, const struct nat_join *r, void *conn, int64_t now,
    struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd;
	char		 id[RZ_ID_MAX + 1], inst[RZ_ID_MAX + 1];
	int64_t		 last_call, lease;

	if (rz_copy_id(id, r->job, 0) != 0 ||
	    rz_copy_id(inst, r->instance, 0) != 0)
		return RDZV_EINVAL;
	if (r->local_world_size < 1 || r->local_world_size > 1 << 20 ||
	    r->min_nodes < 1 || r->max_nodes < r->min_nodes ||
	    r->max_nodes > 1 << 20 || r->max_restarts < 0 ||
	    r->rank >= r->max_nodes || r->replicas > 1 << 20)
		return RDZV_EINVAL;
	last_call = r->last_call_ms >= 0 ? r->last_call_ms : rz->def_last_call;
	lease = r->lease_ms > 0 ? r->lease_ms : rz->def_lease;

	HASH_FIND_STR(rz->jobs, id, j);
	if (j == NULL) {
		if ((j = calloc(1, sizeof *j)) == NULL)
			return RDZV_ENOMEM;
		memcpy(j->id, id, sizeof j->id);
		j->min = r->min_nodes;
		j->max = r->max_nodes;
		j->max_restarts = r->max_restarts;
		j->last_call_ms = last_call;
		j->lease_ms = lease;
		j->max_repairs = r->max_repairs >= 0 ? r->max_repairs :
		    RZ_MAX_REPAIRS;
		j->repair_timeout_ms = r->repair_timeout_ms > 0 ?
		    r->repair_timeout_ms : RZ_REPAIR_TIMEOUT_MS;
		rz_strag_conf(j, r);
		j->donor = j->pend_local = j->pend_deadline = -1;
		j->donor_node = 0;
		j->donor_local = -1;
		j->join_at = j->join_deadline = -1;
		j->replicas = r->replicas > 0 ? r->replicas : 0;
		j->state = RZJ_FORMING;
		j->next_node_id = 1;
		TAILQ_INIT(&j->nodes);
		HASH_ADD_STR(rz->jobs, id, j);
		/* Late writes of a purged job with this id must not show up
		 * in the new job's rounds. */
		rz_sweep_job(rz, j);
		rz_event(rz, j, now, "job created: nodes %" PRId64 ":%" PRId64
		    ", max restarts %" PRId64, j->min, j->max, j->max_restarts);
	} else if (rz_closed(j))
		return RDZV_ECLOSED;
	else if (j->min != r->min_nodes || j->max != r->max_nodes ||
	    j->max_restarts != r->max_restarts ||
	    j->replicas != (r->replicas > 0 ? r->replicas : 0))
		return RDZV_EINVAL;

	HASH_FIND_STR(j->by_instance, inst, nd);
	if (nd != NULL) {
		/* The same agent again (reconnect, or rdzvd restarted). */
		nd->conn = conn;
		nd->lease_end = now + j->lease_ms;
		ob->node_id = nd->id;
		ob->restart_count = j->restart_count;
		ob->lease_ms = j->lease_ms;
		rz_mark(rz, j);
		rz_push_current(ob, j, nd);
		return 0;
	}

	/* Two live nodes cannot both be node rank N. */
	if (r->rank >= 0)
		TAILQ_FOREACH(nd, &j->nodes, entry)
			if (nd->want_rank == r->rank)
				return RDZV_EEXIST;
	if ((nd = calloc(1, sizeof *nd)) == NULL)
		return RDZV_ENOMEM;
	memcpy(nd->instance, inst, sizeof nd->instance);
	if (rz_copy_id(nd->host, r->host, 1) != 0 ||
	    rz_copy_id(nd->addr, r->addr, 1) != 0) {
		free(nd);
		return RDZV_EINVAL;
	}
	nd->id = j->next_node_id++;
	nd->pid = r->pid;
	nd->lws = r->local_world_size;
	nd->state = RZN_WAITING;
	nd->group_rank = nd->prev_rank = -1;
	nd->join_seq = j->next_join_seq++;
	nd->want_rank = r->rank >= 0 ? r->rank : -1;
	nd->lease_end = now + j->lease_ms;
	nd->conn = conn;
	rz_node_add(j, nd);
	j->last_join = now;
	rz_event(rz, j, now, "join node %" PRId64 " host %s pid %" PRId64
	    " local world size %" PRId64, nd->id, nd->host, nd->pid, nd->lws);
	ob->node_id = nd->id;
	ob->restart_count = j->restart_count;
	ob->lease_ms = j->lease_ms;
	rz_mark(rz, j);

	if (j->state == RZJ_RUNNING) {
		/* A repairable job grows in place instead. */
		if (j->members < j->max &&
		    rz_elastic_join(rz, ob, j, nd, now) == 0)
			return 0;
		if (j->members < j->max) {
			rz_event(rz, j, now, "rescale: node %" PRId64
			    " waits below max nodes", nd->id);
			rz_round_end(rz, ob, j, now, "a node joined below max");
		} else {
			nd->state = RZN_STANDBY;
			rz_save_node(rz, j, nd);
			rz_push_node(ob, j, nd, RDZV_ROUND_STANDBY, NULL);
			return 0;
		}
	}
	/* A round that forms writes every node's row, this one's too. */
	if (!rz_round_form(rz, ob, j, now))
		rz_save_node(rz, j, nd);
	return 0;
}

int
rz_heartbeat(struct rz *rz, struct slice job, int64_t node_id,
    int64_t repairable, void *conn, int64_t now, struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd;

	if ((nd = rz_find_job_node(rz, job, node_id, &j)) == NULL)
		return RDZV_ENOTFOUND;
	nd->lease_end = now + j->lease_ms;
	if (repairable >= 0 && nd->repairable != (repairable == 1)) {
		nd->repairable = repairable == 1;
		rz_save_node(rz, j, nd);
	}
	/* A closed job holds no connections (see rz_close_job). */
	if (conn != NULL && !rz_closed(j))
		nd->conn = conn;
	ob->round = j->round;
	return 0;
}

int
rz_leave(struct rz *rz, struct slice job, int64_t node_id, int64_t now,
    struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd, gone;
	int		 was_member;

	if ((nd = rz_find_job_node(rz, job, node_id, &j)) == NULL)
		return RDZV_ENOTFOUND;
	was_member = nd->state == RZN_MEMBER;
	rz_event(rz, j, now, "leave node %" PRId64 " host %s", nd->id, nd->host);
	nd->conn = NULL;	/* it asked to go: no STOP for it */
	gone = *nd;
	rz_node_remove(rz, j, nd);
	rz_mark(rz, j);
	if (rz_closed(j))
		return 0;
	if (was_member && j->state == RZJ_RUNNING &&
	    rz_repair_lost(rz, ob, j, &gone, "it left", now) != 0) {
		rz_round_end(rz, ob, j, now, "a member left");
		if (j->nnodes < j->min)
			rz_event(rz, j, now, "below min_nodes: %" PRId64 " of %"
			    PRId64 " nodes left, the job waits for nodes to "
			    "join", j->nnodes, j->min);
	}
	rz_round_form(rz, ob, j, now);
	return 0;
}

int
rz_succeeded(struct rz *rz, struct slice job, int64_t node_id, int64_t round,
    int64_t unjoined, int64_t now, struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd;

	if ((nd = rz_find_job_node(rz, job, node_id, &j)) == NULL)
		return RDZV_ENOTFOUND;
	/* A node whose workers finished before it heard of a repair
	 * round reports the round before it: same members, so it counts. */
	if (j->state != RZJ_RUNNING || round < j->base_round ||
	    round > j->round || nd->state != RZN_MEMBER || nd->succeeded)
		return 0;
	nd->succeeded = 1;
	rz_save_node(rz, j, nd);
	rz_event(rz, j, now, "node %" PRId64 " succeeded round %" PRId64,
	    nd->id, round);
	rz_repair_ended(rz, j, nd, unjoined, now);
	rz_done_if_ended(rz, ob, j, now);
	return 0;
}

/*
 * Training ended (a member succeeded: a synchronous group never finishes
 * without its members): the job is DONE once every other member
 * succeeded too, or has no worker that trained to wait for (each dead,
 * READY, or a replacement its agent says never stepped: a standby that
 * took a lost node's place, a node whose every worker was replaced).
 */
void
rz_done_if_ended(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now)
{
	struct rz_node	*nd;

	if (j->state != RZJ_RUNNING || !rz_training_ended(j))
		return;
	TAILQ_FOREACH(nd, &j->nodes, entry)
		if (nd->state == RZN_MEMBER && !nd->succeeded &&
		    nd->lws > __builtin_popcountll((unsigned long long)
		    (nd->dead_local | nd->ready_local | nd->unjoined)))
			return;
	rz_close_job(rz, ob, j, RZJ_DONE, now);
}

int
rz_unjoined(struct rz *rz, struct slice job, int64_t node_id,
    int64_t unjoined, int64_t now, struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd;

	if ((nd = rz_find_job_node(rz, job, node_id, &j)) == NULL)
		return RDZV_ENOTFOUND;
	if (nd->unjoined == unjoined)
		return 0;
	nd->unjoined = unjoined;
	rz_done_if_ended(rz, ob, j, now);
	return 0;
}

int
rz_stepped(struct rz *rz, struct slice job, int64_t node_id,
    int64_t stepped, int64_t now, struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd;

	if ((nd = rz_find_job_node(rz, job, node_id, &j)) == NULL)
		return RDZV_ENOTFOUND;
	if (nd->says_stepped && nd->stepped == stepped)
		return 0;
	nd->says_stepped = 1;
	nd->stepped = stepped;
	rz_grow_if_due(rz, ob, j, now);
	return 0;
}

void
rz_conn_gone(struct rz *rz, void *conn, struct rz_outbox *ob)
{
	struct rz_job	*j, *tmp;
	struct rz_node	*nd;

	HASH_ITER(hh, rz->jobs, j, tmp) {
		if (rz_closed(j))
			continue;	/* rz_close_job let go of them */
		TAILQ_FOREACH(nd, &j->nodes, entry)
			if (nd->conn == conn)
				nd->conn = NULL;
	}
}

void
rz_tick(struct rz *rz, int64_t now, struct rz_outbox *ob)
{
	struct rz_job	*j, *tmp;
	struct rz_node	*nd, *next, gone;
	int		 lost_member, was_member;

	HASH_ITER(hh, rz->jobs, j, tmp) {
		if (rz_closed(j))
			continue;
		lost_member = 0;
		j->lease_low = -1;
		for (nd = TAILQ_FIRST(&j->nodes); nd != NULL; nd = next) {
			next = TAILQ_NEXT(nd, entry);
			if (nd->drain_by > 0 && (j->lease_low < 0 ||
			    nd->drain_by < j->lease_low))
				j->lease_low = nd->drain_by;
			if (nd->lease_end > now) {
				if (j->lease_low < 0 ||
				    nd->lease_end < j->lease_low)
					j->lease_low = nd->lease_end;
				continue;
			}
			rz->stats.lease_expiries_total++;
			rz_event(rz, j, now, "lease expired node %" PRId64
			    " host %s", nd->id, nd->host);
			was_member = nd->state == RZN_MEMBER;
			gone = *nd;
			rz_node_remove(rz, j, nd);
			/* A lost member is repaired, or ends the round. */
			if (was_member && (lost_member ||
			    j->state != RZJ_RUNNING || rz_repair_lost(rz, ob, j,
			    &gone, "lease expired", now) != 0))
				lost_member = 1;
		}
		if (lost_member && j->state == RZJ_RUNNING)
			rz_round_end(rz, ob, j, now, "a member's lease expired");
		else if (j->state == RZJ_RUNNING && j->pend_node != 0 &&
		    now >= j->pend_deadline)
			rz_repair_timeout(rz, ob, j, now);
		rz_elastic_drain_tick(rz, ob, j, now);
		if (j->state == RZJ_RUNNING)
			rz_elastic_tick(rz, ob, j, now);
		rz_round_form(rz, ob, j, now);
	}
}

/*
 * A job's lease deadline is a lower bound kept as nodes come (a
 * heartbeat only moves a lease later) and made exact by each tick, so
 * this costs a step per job, not per node: a bound gone stale (the node
 * beat since, or left) costs one tick that expires nothing.
 */
int64_t
rz_next_deadline(struct rz *rz)
{
	struct rz_job	*j, *tmp;
	int64_t		 best = -1, t;

	HASH_ITER(hh, rz->jobs, j, tmp) {
		if (rz_closed(j))
			continue;
		if (j->nnodes > 0 && (best < 0 || j->lease_low < best))
			best = j->lease_low;
		if (j->state == RZJ_RUNNING && j->pend_node != 0 &&
		    (best < 0 || j->pend_deadline < best))
			best = j->pend_deadline;
		if (j->state == RZJ_RUNNING &&
		    (t = rz_elastic_deadline(j)) >= 0 && (best < 0 || t < best))
			best = t;
		if (j->state == RZJ_FORMING && j->nnodes >= j->min) {
			t = j->last_join + j->last_call_ms;
			if (best < 0 || t < best)
				best = t;
		}
	}
	return best;
}

/* ---- status ---- */

static const char *
rz_state_name(int s)
{
	switch (s) {
	case RZJ_FORMING:	return "forming";
	case RZJ_RUNNING:	return "running";
	case RZJ_DONE:		return "succeeded";
	case RZJ_FAILED:	return "failed";
	}
	return "unknown";
}

static const char *
rz_node_state_name(int s)
{
	switch (s) {
	case RZN_WAITING:	return "waiting";
	case RZN_MEMBER:	return "member";
	case RZN_STANDBY:	return "standby";
	}
	return "unknown";
}

char *
rz_status(struct rz *rz, struct slice job, int64_t now)
{
	struct rz_job	*j;
	struct rz_node	*nd;
	char		*buf = NULL;
	size_t		 len = 0;
	FILE		*f;

	if ((j = rz_find_job(rz, job)) == NULL)
		return NULL;
	if ((f = open_memstream(&buf, &len)) == NULL)
		return NULL;
	fprintf(f, "job %s state %s round %" PRId64 " restarts %" PRId64 "/%"
	    PRId64 " nodes %" PRId64 ":%" PRId64 " world %" PRId64 " port %d\n",
	    j->id, rz_state_name(j->state), j->round, j->restart_count,
	    j->max_restarts, j->min, j->max, j->world_size, j->port);
	TAILQ_FOREACH(nd, &j->nodes, entry)
		fprintf(f, "node %" PRId64 " %s rank %" PRId64 " host %s pid %"
		    PRId64 " lws %" PRId64 " lease_ms %" PRId64 " %s\n", nd->id,
		    rz_node_state_name(nd->state), nd->group_rank, nd->host,
		    nd->pid, nd->lws, nd->lease_end - now,
		    nd->conn ? "connected" : "disconnected");
	if (j->failure[0] != '\0')
		fprintf(f, "failure %s\n", j->failure);
	fclose(f);
	return buf;
}

void
rz_get_stats(struct rz *rz, struct rz_stats *st)
{
	struct rz_job	*j, *tmp;

	*st = rz->stats;
	st->jobs_running = st->jobs_forming = st->jobs_closed = st->nodes = 0;
	HASH_ITER(hh, rz->jobs, j, tmp) {
		if (j->state == RZJ_RUNNING)
			st->jobs_running++;
		else if (j->state == RZJ_FORMING)
			st->jobs_forming++;
		else
			st->jobs_closed++;
		st->nodes += j->nnodes;
	}
}

/* ---- operators ---- */

static json_t *
rz_job_json(const struct rz_job *j)
{
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
	    "job", j->id, "state", rz_state_name(j->state),
	    "round", (json_int_t)j->round,
	    "restarts", (json_int_t)j->restart_count,
	    "max_restarts", (json_int_t)j->max_restarts,
	    "min_nodes", (json_int_t)j->min, "max_nodes", (json_int_t)j->max,
	    "nodes", (json_int_t)j->nnodes,
	    "world_size", (json_int_t)j->world_size);
}

static int
rz_job_cmp(const struct rz_job *a, const struct rz_job *b)
{
	return strcmp(a->id, b->id);
}

json_t *
rz_jobs_doc(struct rz *rz)
{
	struct rz_job	*j, *tmp;
	json_t		*arr;

	if ((arr = json_array()) == NULL)
		return NULL;
	HASH_SORT(rz->jobs, rz_job_cmp);
	HASH_ITER(hh, rz->jobs, j, tmp)
		json_array_append_new(arr, rz_job_json(j));
	return arr;
}

json_t *
rz_job_doc(struct rz *rz, struct slice job, int64_t now)
{
	struct rz_job	*j;
	struct rz_node	*nd;
	json_t		*doc, *members, *m;

	if ((j = rz_find_job(rz, job)) == NULL)
		return NULL;
	if ((doc = rz_job_json(j)) == NULL || (members = json_array()) == NULL) {
		json_decref(doc);
		return NULL;
	}
	TAILQ_FOREACH(nd, &j->nodes, entry) {
		m = json_pack("{s:I, s:s, s:I, s:s, s:s, s:I, s:I, s:I, s:b}",
		    "node_id", (json_int_t)nd->id,
		    "state", rz_node_state_name(nd->state),
		    "group_rank", (json_int_t)nd->group_rank,
		    "host", nd->host, "addr", nd->addr,
		    "pid", (json_int_t)nd->pid,
		    "local_world_size", (json_int_t)nd->lws,
		    "lease_left_ms", (json_int_t)(nd->lease_end - now),
		    "connected", nd->conn != NULL);
		/* Its workers' ranks, as its ROUND push gave them. */
		if (m != NULL && j->state == RZJ_RUNNING &&
		    nd->state == RZN_MEMBER)
			json_object_set_new(m, "rank_base",
			    json_integer(nd->rank_base));
		/* Asked to leave (evict): the ms left before it is dropped. */
		if (m != NULL && nd->drain_by > 0)
			json_object_set_new(m, "leaving_ms", json_integer(
			    nd->drain_by > now ? nd->drain_by - now : 0));
		json_array_append_new(members, m);
	}
	json_object_set_new(doc, "members", members);
	json_object_set_new(doc, "store_port", json_integer(j->port));
	json_object_set_new(doc, "store_ns", json_string(j->ns));
	json_object_set_new(doc, "failure", json_string(j->failure));
	json_object_set_new(doc, "straggler", rz_strag_doc(j));
	return doc;
}

json_t *
rz_events_doc(struct rz *rz, struct slice job, int64_t after)
{
	struct rz_job	*j;
	struct slice	 ns, v;
	char		 nsbuf[RZ_ID_MAX + 32], key[32], *text;
	int64_t		 seq, first, ms;
	json_t		*arr;
	int		 k;

	if ((j = rz_find_job(rz, job)) == NULL)
		return NULL;
	if ((arr = json_array()) == NULL)
		return NULL;
	rz_ns_name(nsbuf, sizeof nsbuf, "ev", j, &ns);
	first = after + 1;
	if (first < j->next_event - RZ_EVENTS_KEPT)
		first = j->next_event - RZ_EVENTS_KEPT;
	if (first < 0)
		first = 0;
	if (j->next_event - first > 1000)
		first = j->next_event - 1000;
	for (seq = first; seq < j->next_event; seq++) {
		k = snprintf(key, sizeof key, "%020" PRId64, seq);
		if (kv_get(rz->kv, ns, (struct slice){ (const uint8_t *)key,
		    (size_t)k }, &v) != 0 || rz_event_parse(v, &ms, &text) != 0)
			continue;
		json_array_append_new(arr, json_pack("{s:I, s:I, s:o}",
		    "seq", (json_int_t)seq, "time_ms", (json_int_t)ms,
		    "text", rz_json_text(text)));
		free(text);
	}
	return arr;
}

int
rz_event_row(struct rz *rz, struct slice job, int64_t after, char *nsbuf,
    size_t nssz, struct slice *ns, char *keybuf, size_t keysz,
    struct slice *key)
{
	struct rz_job	*j;
	int		 k;

	if ((j = rz_find_job(rz, job)) == NULL)
		return RDZV_ENOTFOUND;
	/* Behind the oldest event kept: the first one kept is next.  An
	 * event past `after` that exists makes the wait answer at once. */
	if (after < j->next_event - RZ_EVENTS_KEPT - 1)
		after = j->next_event - RZ_EVENTS_KEPT - 1;
	rz_ns_name(nsbuf, nssz, "ev", j, ns);
	k = snprintf(keybuf, keysz, "%020" PRId64, after + 1);
	key->p = (const uint8_t *)keybuf;
	key->len = (size_t)k;
	return 0;
}

int
rz_admin_close(struct rz *rz, struct slice job, struct slice reason,
    int64_t now, struct rz_outbox *ob)
{
	struct rz_job	*j;
	size_t		 n;

	if ((j = rz_find_job(rz, job)) == NULL)
		return RDZV_ENOTFOUND;
	if (rz_closed(j))
		return RDZV_ECLOSED;
	n = reason.len < sizeof j->failure - 32 ? reason.len :
	    sizeof j->failure - 32;
	snprintf(j->failure, sizeof j->failure, "closed by an operator: %.*s",
	    (int)n, (const char *)reason.p);
	rz_close_job(rz, ob, j, RZJ_FAILED, now);
	return 0;
}

int
rz_port_refused(struct rz *rz, struct slice job, const char *why,
    int64_t now, struct rz_outbox *ob)
{
	struct rz_job	*j;
	size_t		 i, n = 0;

	if ((j = rz_find_job(rz, job)) == NULL)
		return RDZV_ENOTFOUND;
	if (rz_closed(j))
		return RDZV_ECLOSED;
	/* Its nodes were to hear RUNNING with no port: FAILED instead. */
	for (i = 0; i < ob->npush; i++)
		if (ob->push[i].job != j)
			ob->push[n++] = ob->push[i];
	ob->npush = n;
	strlcpy(j->failure, why, sizeof j->failure);
	rz_close_job(rz, ob, j, RZJ_FAILED, now);
	return 0;
}

int
rz_admin_evict(struct rz *rz, struct slice job, int64_t node_id, int hard,
    int64_t now, struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd;

	if ((nd = rz_find_job_node(rz, job, node_id, &j)) == NULL)
		return RDZV_ENOTFOUND;
	/* A closed job keeps its members for the record; none can go. */
	if (rz_closed(j))
		return RDZV_ECLOSED;
	if (!hard && (nd->drain_by > 0 || rz_elastic_drain(rz, ob, j, nd,
	    now) == 1))
		return 1;
	rz_event(rz, j, now, "evicted node %" PRId64 " host %s by an operator",
	    nd->id, nd->host);
	rz_evict(rz, ob, j, nd, now, "evicted by an operator");
	return 0;
}

/* Drops nd from open job j (why: what its agent and the events are
 * told): the job repairs around it or a new round forms. */
void
rz_evict(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t now, const char *why)
{
	struct rz_node	gone;
	int		was_member;

	rz_push_node(ob, j, nd, RDZV_ROUND_FAILED, why);
	was_member = nd->state == RZN_MEMBER;
	gone = *nd;
	rz_node_remove(rz, j, nd);
	rz_mark(rz, j);
	if (was_member && j->state == RZJ_RUNNING &&
	    rz_repair_lost(rz, ob, j, &gone, why, now) != 0)
		rz_round_end(rz, ob, j, now, "a node was evicted");
	rz_round_form(rz, ob, j, now);
}
