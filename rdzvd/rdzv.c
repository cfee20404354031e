/*
 * rdzv.c: the server-side rendezvous state machine (see rdzv.h for the
 * states, the rows it keeps in kv and the outbox it fills).
 * Deterministic: the same events at the same times give the same rounds,
 * ranks and pushes.
 */
#include "config.h"

#include <sys/queue.h>

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uthash.h>

#include "rdzv.h"
#include "rdzv_err.h"
#include "wire.h"

enum rz_job_state { RZJ_FORMING = 1, RZJ_RUNNING, RZJ_DONE, RZJ_FAILED };
enum rz_node_state { RZN_WAITING = 1, RZN_MEMBER, RZN_STANDBY };

struct rz_node {
	TAILQ_ENTRY(rz_node)	 entry;
	UT_hash_handle		 hh;		/* in its job's by_instance */
	int64_t			 id;
	char			 instance[RZ_ID_MAX + 1];
	char			 host[RZ_ID_MAX + 1];
	char			 addr[RZ_ID_MAX + 1];
	int64_t			 pid;
	int64_t			 lws;		/* local world size */
	enum rz_node_state	 state;
	int64_t			 group_rank;	/* this round, or -1 */
	int64_t			 prev_rank;	/* last round it was in, or -1 */
	int64_t			 join_seq;	/* order of joining */
	int64_t			 want_rank;	/* JOIN's node rank, or -1 */
	int64_t			 rank_base;	/* member: its first rank,
						 * set as the round forms */
	int64_t			 lease_end;
	int			 succeeded;
	int			 repairable;	/* HEARTBEAT said so (this round) */
	int64_t			 dead_local;	/* bit l: local rank l died,
						 * its replacement not in */
	void			*conn;
};
TAILQ_HEAD(rz_nodes, rz_node);

struct rz_job {
	UT_hash_handle		 hh;
	char			 id[RZ_ID_MAX + 1];
	int64_t			 min, max, max_restarts, last_call_ms, lease_ms;
	enum rz_job_state	 state;
	int64_t			 round;
	int64_t			 base_round;	/* the round that formed this
						 * membership; repair rounds
						 * after it keep it */
	int64_t			 restart_count;
	int64_t			 last_join;	/* for the last call */
	int64_t			 next_node_id;
	int64_t			 next_join_seq;
	int64_t			 next_event;
	int64_t			 world_size;
	int64_t			 members;	/* of the running round */
	int			 port;		/* this round's TCPStore port */
	int			 port_pending;	/* asked for, not yet settled */
	int			 dirty;		/* job row to write */
	TAILQ_ENTRY(rz_job)	 dirty_entry;	/* on rz->dirty while dirty */
	char			 ns[RZ_ID_MAX + 64];
	char			 failure[RZ_MSG_MAX];
	struct rz_nodes		 nodes;
	struct rz_node		*by_instance;	/* the nodes by instance */
	int64_t			 nnodes;
	int64_t			 lease_low;	/* <= every node's lease_end
						 * (exact after a tick) */
	int64_t			 closed_ms;	/* wall clock, once closed */
	TAILQ_ENTRY(rz_job)	 closed_entry;	/* on rz->closed, once closed */
	int			 purging;	/* in this rz_purge's batch */
	int64_t			 purged_keys;
	/* Repair (rdzv.h): this round's kind and donor, repairs made, and
	 * the replacement awaited (pend_node 0: none) with its deadline. */
	int64_t			 max_repairs, repair_timeout_ms, repairs;
	int64_t			 kind, donor;
	int64_t			 pend_node, pend_local, pend_deadline;
};
TAILQ_HEAD(rz_jobs, rz_job);

struct rz {
	struct kv		*kv;
	struct rz_hooks		 hooks;
	int64_t			 def_last_call, def_lease;
	struct rz_job		*jobs;
	struct rz_jobs		 closed;	/* in the order they closed */
	struct rz_jobs		 dirty;		/* job rows to write */
	int64_t			 retention_ms;	/* 0: closed jobs kept */
	struct rz_stats		 stats;
};

static const struct slice ns_jobs = { (const uint8_t *)"\0rdzv/job", 9 };

static void	rz_round_end(struct rz *, struct rz_outbox *, struct rz_job *,
		    int64_t now, const char *why);
static int	rz_round_form(struct rz *, struct rz_outbox *, struct rz_job *,
		    int64_t now);
static int64_t	rz_sweep_job(struct rz *, struct rz_job *);
static const char *rz_repair_refused_job(struct rz_job *, char *, size_t);
static void	rz_repair_round(struct rz *, struct rz_outbox *,
		    struct rz_job *, int64_t kind);
static int	rz_repair_lost(struct rz *, struct rz_outbox *,
		    struct rz_job *, const struct rz_node *, const char *,
		    int64_t now);
static const char *rz_repair_refused(struct rz_job *, struct rz_node *,
		    int64_t, char *, size_t);
static void	rz_repair_shrink(struct rz *, struct rz_outbox *,
		    struct rz_job *, struct rz_node *, int64_t, const char *,
		    int64_t);
static void	rz_restart(struct rz *, struct rz_outbox *, struct rz_job *,
		    int64_t, const char *, const char *);

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
static void *
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

static struct rz_out_push *
rz_out_push(struct rz_outbox *ob)
{
	return rz_outbox_grow(ob, (void **)&ob->push, &ob->npush, &ob->cappush,
	    sizeof *ob->push);
}

/* Asks the caller to close j's round port. */
static void
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
static void
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
static void
rz_mark(struct rz *rz, struct rz_job *j)
{
	if (j->dirty)
		return;
	j->dirty = 1;
	TAILQ_INSERT_TAIL(&rz->dirty, j, dirty_entry);
}

static void	rz_save_job(struct rz *, struct rz_job *);

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

/* ---- persistence: rows in reserved kv namespaces ---- */

static void
rz_ns_name(char *out, size_t outsz, const char *kind, const struct rz_job *j,
    struct slice *ns)
{
	int	n;

	n = snprintf(out, outsz, "%crdzv/%s/%s", '\0', kind, j->id);
	ns->p = (const uint8_t *)out;
	ns->len = n < 0 ? 0 : (size_t)n < outsz ? (size_t)n : outsz - 1;
}

/*
 * A text for a JSON row: jansson takes only UTF-8, and a failure message
 * or event line may carry any bytes a worker printed, so bytes past ASCII
 * become '?' when the text is not valid UTF-8.  NULL: no memory.
 */
static json_t *
rz_json_text(const char *text)
{
	json_t	*v;
	char	*copy, *p;

	if ((v = json_string(text)) != NULL || (copy = strdup(text)) == NULL)
		return v;
	for (p = copy; *p != '\0'; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	v = json_string(copy);
	free(copy);
	return v;
}

/* Writes doc (taken) as the row ns/key; a row that cannot be made is
 * not written (the next change of the same row writes it). */
static void
rz_put_row(struct rz *rz, struct slice ns, struct slice key, json_t *doc)
{
	char	*text;

	if (doc == NULL)
		return;
	if ((text = json_dumps(doc, JSON_COMPACT)) != NULL)
		kv_set(rz->kv, ns, key, slice_str(text));
	free(text);
	json_decref(doc);
}

static void
rz_save_job(struct rz *rz, struct rz_job *j)
{
	rz_put_row(rz, ns_jobs, slice_str(j->id), json_pack(
	    "{s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:i, "
	    "s:I, s:I, s:o, s:o}",
	    "min", (json_int_t)j->min, "max", (json_int_t)j->max,
	    "max_restarts", (json_int_t)j->max_restarts,
	    "last_call_ms", (json_int_t)j->last_call_ms,
	    "lease_ms", (json_int_t)j->lease_ms, "state", (int)j->state,
	    "round", (json_int_t)j->round,
	    "restarts", (json_int_t)j->restart_count,
	    "next_node", (json_int_t)j->next_node_id,
	    "next_join", (json_int_t)j->next_join_seq,
	    "next_event", (json_int_t)j->next_event, "port", j->port,
	    "world", (json_int_t)j->world_size,
	    "closed_ms", (json_int_t)j->closed_ms,
	    "failure", rz_json_text(j->failure), "repair", json_pack(
	    "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
	    "max", (json_int_t)j->max_repairs,
	    "base", (json_int_t)j->base_round,
	    "timeout_ms", (json_int_t)j->repair_timeout_ms,
	    "count", (json_int_t)j->repairs, "kind", (json_int_t)j->kind,
	    "donor", (json_int_t)j->donor, "pend_node", (json_int_t)j->pend_node,
	    "pend_local", (json_int_t)j->pend_local)));
}

static void
rz_save_node(struct rz *rz, struct rz_job *j, struct rz_node *nd)
{
	char		nsbuf[RZ_ID_MAX + 32], key[32];
	struct slice	ns;
	int		k;

	rz_ns_name(nsbuf, sizeof nsbuf, "node", j, &ns);
	k = snprintf(key, sizeof key, "%" PRId64, nd->id);
	rz_put_row(rz, ns, (struct slice){ (const uint8_t *)key, (size_t)k },
	    json_pack("{s:s, s:s, s:s, s:I, s:I, s:i, s:I, s:I, s:I, s:i, "
	    "s:I, s:I, s:i}",
	    "instance", nd->instance, "host", nd->host, "addr", nd->addr,
	    "pid", (json_int_t)nd->pid, "lws", (json_int_t)nd->lws,
	    "state", (int)nd->state, "group_rank", (json_int_t)nd->group_rank,
	    "prev_rank", (json_int_t)nd->prev_rank,
	    "join_seq", (json_int_t)nd->join_seq, "succeeded", nd->succeeded,
	    "want_rank", (json_int_t)nd->want_rank,
	    "dead_local", (json_int_t)nd->dead_local,
	    "repairable", nd->repairable));
}

static void
rz_drop_node_row(struct rz *rz, struct rz_job *j, struct rz_node *nd)
{
	char		nsbuf[RZ_ID_MAX + 32], key[32];
	struct slice	ns;
	int		k;

	rz_ns_name(nsbuf, sizeof nsbuf, "node", j, &ns);
	k = snprintf(key, sizeof key, "%" PRId64, nd->id);
	kv_delete(rz->kv, ns, (struct slice){ (const uint8_t *)key, (size_t)k });
}

/* Appends one line to the job's event log, dropping the oldest past
 * RZ_EVENTS_KEPT.  `now` is unused: events carry wall-clock time. */
static void
rz_event(struct rz *rz, struct rz_job *j, int64_t now, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void
rz_event(struct rz *rz, struct rz_job *j, int64_t now, const char *fmt, ...)
{
	char		nsbuf[RZ_ID_MAX + 32], key[32], line[RZ_MSG_MAX + 512];
	struct slice	ns;
	va_list		ap;
	int		k;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	rz_ns_name(nsbuf, sizeof nsbuf, "ev", j, &ns);
	if (j->next_event >= RZ_EVENTS_KEPT) {
		k = snprintf(key, sizeof key, "%020" PRId64,
		    j->next_event - RZ_EVENTS_KEPT);
		kv_delete(rz->kv, ns, (struct slice){ (const uint8_t *)key,
		    (size_t)k });
	}
	k = snprintf(key, sizeof key, "%020" PRId64, j->next_event++);
	rz_put_row(rz, ns, (struct slice){ (const uint8_t *)key, (size_t)k },
	    json_pack("{s:I, s:o}", "time_ms",
	    (json_int_t)rz->hooks.wall_ms(rz->hooks.arg), "text",
	    rz_json_text(line)));
}

/* ---- lookups ---- */

static struct rz_job *
rz_find_job(struct rz *rz, struct slice id)
{
	struct rz_job	*j;
	char		 buf[RZ_ID_MAX + 1];

	if (rz_copy_id(buf, id, 0) != 0)
		return NULL;
	HASH_FIND_STR(rz->jobs, buf, j);
	return j;
}

static struct rz_node *
rz_find_node(struct rz_job *j, int64_t id)
{
	struct rz_node	*nd;

	TAILQ_FOREACH(nd, &j->nodes, entry)
		if (nd->id == id)
			return nd;
	return NULL;
}

static int
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
static int64_t
rz_live(const struct rz_node *nd)
{
	return nd->lws - __builtin_popcountll((unsigned long long)
	    nd->dead_local);
}

/*
 * Sets each member's rank base (the global rank of its first live
 * worker: the live workers of the members ranked before it),
 * j->members, j->world_size and j->donor (the new rank of the first
 * live worker in rank order that is not the pending replacement: the
 * lowest surviving old rank), in one pass over the members in group
 * rank order (a job loaded from its rows, a repair round); the group
 * ranks are closed up to 0..members-1 (a lost node's gone).  Returns 0
 * or RDZV_ENOMEM.
 */
static int
rz_rank_bases(struct rz *rz, struct rz_job *j)
{
	struct rz_node	**v, *nd;
	int64_t		  n = 0, i, l, k, base = 0;

	if ((v = reallocarray(NULL, (size_t)j->nnodes + 1, sizeof *v)) == NULL)
		return RDZV_ENOMEM;
	TAILQ_FOREACH(nd, &j->nodes, entry)
		if (nd->state == RZN_MEMBER)
			v[n++] = nd;
	qsort(v, (size_t)n, sizeof *v, rz_group_rank_cmp);
	j->donor = -1;
	for (i = 0; i < n; i++) {
		nd = v[i];
		/* A lost node's rank is closed up: the ranks stay 0..n-1. */
		if (nd->group_rank != i) {
			nd->group_rank = i;
			rz_save_node(rz, j, nd);
		}
		nd->rank_base = base;
		for (l = k = 0; j->donor < 0 && l < nd->lws; l++) {
			if (nd->dead_local & (1LL << l))
				continue;
			/* Never a replacement (pend_local -1: the whole
			 * node's workers are). */
			if (nd->id != j->pend_node || (j->pend_local >= 0 &&
			    l != j->pend_local))
				j->donor = base + k;
			k++;
		}
		base += rz_live(nd);
	}
	j->members = n;
	j->world_size = base;
	free(v);
	return 0;
}

/* Pushes state to nd; message NULL means the job's failure for FAILED. */
static void
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

static void
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
static void
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
		/* The old round's keys can never be read again. */
		if (j->ns[0] != '\0')
			kv_ns_drop(rz->kv, slice_str(j->ns));
		rz_event(rz, j, now, "round %" PRId64 " ended: %s", j->round,
		    why);
	}
	j->kind = NAT_KIND_NORMAL;
	j->donor = -1;
	j->pend_node = 0;
	j->pend_local = j->pend_deadline = -1;
	TAILQ_FOREACH(nd, &j->nodes, entry) {
		if (nd->state == RZN_MEMBER)
			nd->prev_rank = nd->group_rank;
		/* Every worker starts again: none dead, none said hello. */
		nd->dead_local = 0;
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
static int
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

	j->round++;
	j->base_round = j->round;
	j->world_size = 0;
	snprintf(j->ns, sizeof j->ns, "job/%s/round/%" PRId64, j->id, j->round);
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
static void
rz_node_add(struct rz_job *j, struct rz_node *nd)
{
	TAILQ_INSERT_TAIL(&j->nodes, nd, entry);
	HASH_ADD_STR(j->by_instance, instance, nd);
	if (j->nnodes == 0 || nd->lease_end < j->lease_low)
		j->lease_low = nd->lease_end;
	j->nnodes++;
}

/* Frees every node of j. */
static void
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
	    r->rank >= r->max_nodes)
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
		j->donor = j->pend_local = j->pend_deadline = -1;
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
	    j->max_restarts != r->max_restarts)
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

	if ((j = rz_find_job(rz, job)) == NULL ||
	    (nd = rz_find_node(j, node_id)) == NULL)
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

	if ((j = rz_find_job(rz, job)) == NULL ||
	    (nd = rz_find_node(j, node_id)) == NULL)
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
	    rz_repair_lost(rz, ob, j, &gone, "it left", now) != 0)
		rz_round_end(rz, ob, j, now, "a member left");
	rz_round_form(rz, ob, j, now);
	return 0;
}

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
	return NULL;
}

/* Why the job cannot repair now, whatever failed, or NULL. */
static const char *
rz_repair_refused_job(struct rz_job *j, char *buf, size_t bufsz)
{
	struct rz_node	*m;

	if (j->pend_node != 0)
		return "a second failure during a repair";
	if (j->max_repairs == 0)
		return "repair is off (max_repairs 0)";
	if (j->repairs >= j->max_repairs) {
		snprintf(buf, bufsz, "max_repairs %" PRId64 " used",
		    j->max_repairs);
		return buf;
	}
	TAILQ_FOREACH(m, &j->nodes, entry) {
		if (m->state != RZN_MEMBER)
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
static int
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
	    sb == NULL && left < j->min)
		why = "no standby, and fewer than min_nodes would be left";
	if (why == NULL && sb == NULL && left == 0)
		why = "no node would be left";
	if (why != NULL) {
		rz_event(rz, j, now, "repair escalated to restart: node %"
		    PRId64 " (host %s) lost (%s): %s", lost->id, lost->host,
		    how, why);
		return -1;
	}
	if (sb != NULL) {
		sb->state = RZN_MEMBER;
		sb->group_rank = lost->group_rank;
		sb->succeeded = 0;
		sb->repairable = 0;	/* its workers say so when up */
		sb->dead_local = (int64_t)((1ULL << sb->lws) - 1);
		rz_save_node(rz, j, sb);
		j->pend_node = sb->id;
		j->pend_local = -1;	/* all of its workers */
		j->pend_deadline = now + j->repair_timeout_ms;
	}
	rz_repair_round(rz, ob, j, NAT_KIND_SHRINK);
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
 * are set over the live workers, every member is pushed.
 */
static void
rz_repair_round(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t kind)
{
	struct rz_node	*nd;

	if (j->port > 0)
		rz_out_port_close(ob, j);
	if (j->ns[0] != '\0')
		kv_ns_drop(rz->kv, slice_str(j->ns));
	j->round++;
	snprintf(j->ns, sizeof j->ns, "job/%s/round/%" PRId64, j->id, j->round);
	j->kind = kind;
	/* On no memory the bases stay, the round is sent anyway: the
	 * workers' numbering is then wrong and the next failure restarts. */
	rz_rank_bases(rz, j);
	rz_out_port_open(ob, j, 0);
	j->repairs++;
	rz->stats.repairs_total++;
	rz->stats.rounds_total++;
	rz_mark(rz, j);
	TAILQ_FOREACH(nd, &j->nodes, entry)
		if (nd->state == RZN_MEMBER)
			rz_push_node(ob, j, nd, RDZV_ROUND_RUNNING, NULL);
}

/* Local rank l of nd died and its agent respawns it: the survivors go
 * on at once in a round without it. */
static void
rz_repair_shrink(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t l, const char *what, int64_t now)
{
	nd->dead_local |= 1LL << l;
	rz_save_node(rz, j, nd);
	j->pend_node = nd->id;
	j->pend_local = l;
	j->pend_deadline = now + j->repair_timeout_ms;
	rz_repair_round(rz, ob, j, NAT_KIND_SHRINK);
	rz_event(rz, j, now, "repair: shrink to %" PRId64 " after node %"
	    PRId64 " local rank %" PRId64 " died (%s), round %" PRId64
	    ", donor %" PRId64, j->world_size, nd->id, l, what, j->round,
	    j->donor);
}

/*
 * A restart as a plain failure makes one: the job fails when its
 * restarts are used (failure text: cause), else every member stops and
 * a new round forms.
 */
static void
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
	if (j->state != RZJ_RUNNING || j->pend_node != nd->id ||
	    nd->state != RZN_MEMBER || r->local_rank < 0 ||
	    r->local_rank >= RZ_REPAIR_LWS_MAX ||
	    !(nd->dead_local & (1LL << r->local_rank)))
		return 0;
	nd->dead_local &= ~(1LL << r->local_rank);
	rz_save_node(rz, j, nd);
	if (nd->dead_local != 0)
		return 0;	/* a standby's: its other workers to come */
	rz_repair_round(rz, ob, j, NAT_KIND_GROW);
	if (j->pend_local >= 0)
		rz_event(rz, j, now, "repair: grow to %" PRId64 ", node %"
		    PRId64 " local rank %" PRId64 " back, round %" PRId64
		    ", donor %" PRId64, j->world_size, nd->id, j->pend_local,
		    j->round, j->donor);
	else
		rz_event(rz, j, now, "repair: grow to %" PRId64 ", node %"
		    PRId64 " (host %s) in with %" PRId64 " workers, round %"
		    PRId64 ", donor %" PRId64, j->world_size, nd->id, nd->host,
		    nd->lws, j->round, j->donor);
	j->pend_node = 0;
	j->pend_local = j->pend_deadline = -1;
	return 0;
}

int
rz_succeeded(struct rz *rz, struct slice job, int64_t node_id, int64_t round,
    int64_t now, struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd;

	if ((j = rz_find_job(rz, job)) == NULL ||
	    (nd = rz_find_node(j, node_id)) == NULL)
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
	/* Training ended in the smaller group: no round grows for the
	 * awaited replacement (its agent stops it), and no timeout. */
	if (j->pend_node != 0) {
		if (j->pend_local >= 0)
			rz_event(rz, j, now, "repair: no grow: node %" PRId64
			    " finished before the replacement of node %"
			    PRId64 " local rank %" PRId64 " was ready", nd->id,
			    j->pend_node, j->pend_local);
		else
			rz_event(rz, j, now, "repair: no grow: node %" PRId64
			    " finished before the workers of node %" PRId64
			    " were ready", nd->id, j->pend_node);
		j->pend_node = 0;
		j->pend_local = j->pend_deadline = -1;
		rz_mark(rz, j);
	}
	/* A standby that took a lost node's place and never got its
	 * workers in has nothing to report. */
	TAILQ_FOREACH(nd, &j->nodes, entry)
		if (nd->state == RZN_MEMBER && !nd->succeeded &&
		    rz_live(nd) > 0)
			return 0;
	rz_close_job(rz, ob, j, RZJ_DONE, now);
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

/* The pending replacement did not say READY in time: a restart. */
static void
rz_repair_timeout(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now)
{
	char	cause[128];

	if (j->pend_local >= 0)
		snprintf(cause, sizeof cause, "node %" PRId64 " local rank %"
		    PRId64 ": its replacement was not ready within %" PRId64
		    " ms", j->pend_node, j->pend_local, j->repair_timeout_ms);
	else
		snprintf(cause, sizeof cause, "node %" PRId64 " (a standby in "
		    "a lost node's place): its workers were not ready within %"
		    PRId64 " ms", j->pend_node, j->repair_timeout_ms);
	rz_event(rz, j, now, "repair escalated to restart: %s", cause);
	rz_restart(rz, ob, j, now, cause, "a replacement was not ready");
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
		if (j->state == RZJ_FORMING && j->nnodes >= j->min) {
			t = j->last_join + j->last_call_ms;
			if (best < 0 || t < best)
				best = t;
		}
	}
	return best;
}

/* ---- retention: purging closed jobs, sweeping dead rounds ---- */

/*
 * The job a namespace "job/<id>" or "job/<id>/..." belongs to: of the
 * jobs that exist, the one with the longest such id (ids may hold '/').
 * Sets *idlen to its id's length.  NULL when no job matches.
 */
static struct rz_job *
rz_ns_owner(struct rz *rz, struct slice name, size_t *idlen)
{
	struct rz_job	*j, *best = NULL;
	const uint8_t	*rest;
	char		 buf[RZ_ID_MAX + 1];
	size_t		 n, i;

	if (name.len < 5 || memcmp(name.p, "job/", 4) != 0)
		return NULL;
	rest = name.p + 4;
	n = name.len - 4;
	for (i = 1; i <= n && i <= RZ_ID_MAX; i++) {
		if (rest[i - 1] == '\0')
			break;		/* no id holds one */
		if (i < n && rest[i] != '/')
			continue;
		memcpy(buf, rest, i);
		buf[i] = '\0';
		HASH_FIND_STR(rz->jobs, buf, j);
		if (j != NULL) {
			best = j;
			*idlen = i;
		}
	}
	return best;
}

/* Whether name, past "job/<id>" (idlen bytes of id), is "/round/<n>";
 * sets *round. */
static int
rz_ns_round(struct slice name, size_t idlen, int64_t *round)
{
	static const char	 tag[] = "/round/";
	const uint8_t		*p;
	size_t			 n, i;
	int64_t			 v = 0;

	p = name.p + 4 + idlen;
	n = name.len - 4 - idlen;
	if (n <= sizeof tag - 1 || memcmp(p, tag, sizeof tag - 1) != 0)
		return 0;
	p += sizeof tag - 1;
	n -= sizeof tag - 1;
	if (n > 18)
		return 0;
	for (i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return 0;
		v = v * 10 + (p[i] - '0');
	}
	*round = v;
	return 1;
}

/* Namespaces picked during a kv_ns_list walk, dropped after it (the walk
 * itself must not mutate). */
struct rz_pick {
	struct rz	 *rz;
	struct rz_job	 *only;		/* sweep: just this job; else all */
	int		  purge;	/* 1: everything of purging jobs */
	struct rz_job	**owner;
	char		**name;
	size_t		 *len;
	size_t		  n, cap;
};

static void
rz_pick_cb(void *arg, struct slice name)
{
	struct rz_pick	 *pk = arg;
	struct rz_job	 *j, **o;
	char		**nm;
	size_t		  idlen = 0, *ln, cap;
	int64_t		  round;

	if ((j = rz_ns_owner(pk->rz, name, &idlen)) == NULL)
		return;
	if (pk->purge) {
		if (!j->purging)
			return;
	} else {
		if (pk->only != NULL && j != pk->only)
			return;
		/* Only rounds: anything else under job/<id>/ is someone's
		 * own and stays until the job is purged. */
		if (!rz_ns_round(name, idlen, &round))
			return;
		if (j->state == RZJ_RUNNING && round == j->round)
			return;		/* the live round */
	}
	if (pk->n == pk->cap) {
		cap = pk->cap ? pk->cap * 2 : 16;
		if ((o = reallocarray(pk->owner, cap, sizeof *o)) == NULL)
			return;
		pk->owner = o;
		if ((nm = reallocarray(pk->name, cap, sizeof *nm)) == NULL)
			return;
		pk->name = nm;
		if ((ln = reallocarray(pk->len, cap, sizeof *ln)) == NULL)
			return;
		pk->len = ln;
		pk->cap = cap;
	}
	/* Skipped on no memory: the next sweep or purge finds it again. */
	if ((pk->name[pk->n] = malloc(name.len)) == NULL)
		return;
	memcpy(pk->name[pk->n], name.p, name.len);
	pk->len[pk->n] = name.len;
	pk->owner[pk->n] = j;
	pk->n++;
}

/* Drops what rz_pick_cb picked; returns the keys dropped. */
static int64_t
rz_pick_drop(struct rz_pick *pk)
{
	struct slice	ns;
	int64_t		keys = 0, k;
	size_t		i;

	for (i = 0; i < pk->n; i++) {
		ns.p = (const uint8_t *)pk->name[i];
		ns.len = pk->len[i];
		k = kv_num_keys(pk->rz->kv, ns);
		pk->owner[i]->purged_keys += k;
		keys += k;
		kv_ns_drop(pk->rz->kv, ns);
		free(pk->name[i]);
	}
	free(pk->owner);
	free(pk->name);
	free(pk->len);
	return keys;
}

static int64_t
rz_sweep_in(struct rz *rz, struct rz_job *only)
{
	struct rz_pick	pk;
	char		pre[RZ_ID_MAX + 16];
	int		n;

	memset(&pk, 0, sizeof pk);
	pk.rz = rz;
	pk.only = only;
	if (only != NULL)
		n = snprintf(pre, sizeof pre, "job/%s/round/", only->id);
	else
		n = snprintf(pre, sizeof pre, "job/");
	if (n < 0 || (size_t)n >= sizeof pre)
		return 0;
	kv_ns_list(rz->kv, (struct slice){ (const uint8_t *)pre, (size_t)n },
	    rz_pick_cb, &pk);
	return rz_pick_drop(&pk);
}

static int64_t
rz_sweep_job(struct rz *rz, struct rz_job *j)
{
	return rz_sweep_in(rz, j);
}

int64_t
rz_sweep(struct rz *rz)
{
	return rz_sweep_in(rz, NULL);
}

/* Drops a reserved namespace of j (kind "node" or "ev"); counts keys. */
static void
rz_drop_reserved(struct rz *rz, struct rz_job *j, const char *kind)
{
	char		nsbuf[RZ_ID_MAX + 32];
	struct slice	ns;

	rz_ns_name(nsbuf, sizeof nsbuf, kind, j, &ns);
	j->purged_keys += kv_num_keys(rz->kv, ns);
	kv_ns_drop(rz->kv, ns);
}

/* Forgets j: rows, namespaces already dropped, memory. */
static void
rz_forget(struct rz *rz, struct rz_outbox *ob, struct rz_job *j)
{
	struct rz_out_purged	*op;

	if (j->port > 0)
		rz_out_port_close(ob, j);
	if (j->dirty) {
		TAILQ_REMOVE(&rz->dirty, j, dirty_entry);
		j->dirty = 0;
	}
	rz_drop_reserved(rz, j, "node");
	rz_drop_reserved(rz, j, "ev");
	if (kv_delete(rz->kv, ns_jobs, slice_str(j->id)) == 1)
		j->purged_keys++;
	TAILQ_REMOVE(&rz->closed, j, closed_entry);
	HASH_DEL(rz->jobs, j);
	rz->stats.jobs_purged_total++;
	if ((op = rz_outbox_grow(ob, (void **)&ob->purged, &ob->npurged,
	    &ob->cappurged, sizeof *ob->purged)) != NULL) {
		memcpy(op->job, j->id, sizeof op->job);
		op->state = j->state == RZJ_DONE ? "succeeded" : "failed";
		op->closed_ms = j->closed_ms;
		op->keys = j->purged_keys;
	}
	rz_nodes_free(j);
	free(j);
}

int
rz_purge(struct rz *rz, int64_t wall, int max_jobs, int64_t max_keys,
    struct rz_outbox *ob)
{
	struct rz_job	*j, *next;
	struct rz_pick	 pk;
	char		 nsbuf[RZ_ID_MAX + 32];
	struct slice	 ns;
	int64_t		 keys = 0;
	int		 n = 0, i;

	if (rz->retention_ms <= 0)
		return 0;
	/* The batch: due jobs from the oldest close, within the budget
	 * (their rows counted ahead; stray namespaces are few). */
	TAILQ_FOREACH(j, &rz->closed, closed_entry) {
		if (n >= max_jobs || (n > 0 && keys >= max_keys) ||
		    j->closed_ms > wall - rz->retention_ms)
			break;
		j->purging = 1;
		j->purged_keys = 0;
		rz_ns_name(nsbuf, sizeof nsbuf, "ev", j, &ns);
		keys += kv_num_keys(rz->kv, ns) + j->nnodes + 1;
		n++;
	}
	if (n == 0)
		return 0;
	/* One walk over the namespaces finds every batch job's. */
	memset(&pk, 0, sizeof pk);
	pk.rz = rz;
	pk.purge = 1;
	kv_ns_list(rz->kv, slice_str("job/"), rz_pick_cb, &pk);
	rz_pick_drop(&pk);
	for (i = 0, j = TAILQ_FIRST(&rz->closed); i < n && j != NULL;
	    i++, j = next) {
		next = TAILQ_NEXT(j, closed_entry);
		rz_forget(rz, ob, j);
	}
	return n;
}

int64_t
rz_next_purge(struct rz *rz)
{
	struct rz_job	*j;

	if (rz->retention_ms <= 0 || (j = TAILQ_FIRST(&rz->closed)) == NULL)
		return -1;
	return j->closed_ms + rz->retention_ms;
}

int64_t
rz_retention_left(struct rz *rz, struct slice job, int64_t wall)
{
	struct rz_job	*j;
	int64_t		 left;

	if (rz->retention_ms <= 0 || (j = rz_find_job(rz, job)) == NULL ||
	    !rz_closed(j))
		return -1;
	left = j->closed_ms + rz->retention_ms - wall;
	return left > 0 ? left : 0;
}

/* ---- loading after a restart ---- */

/*
 * Rows of the k=v text format an older rdzvd wrote: one "name=value"
 * line each, integers in decimal; in the job's "failure" and in event
 * lines a newline was written as \\n and a backslash doubled.  Read into
 * the JSON object the row would be now, so one reader takes both.
 */
static const char *const rz_legacy_texts[] = {
	"instance", "host", "addr", "failure"
};
#define RZ_LEGACY_TEXTS	(sizeof rz_legacy_texts / sizeof rz_legacy_texts[0])

static void
rz_legacy_unescape(char *s)
{
	char	*o = s;

	for (; *s != '\0'; s++) {
		if (*s == '\\' && s[1] == 'n') {
			*o++ = '\n';
			s++;
		} else if (*s == '\\' && s[1] == '\\') {
			*o++ = '\\';
			s++;
		} else
			*o++ = *s;
	}
	*o = '\0';
}

static json_t *
rz_legacy_row(char *row)
{
	json_t	*o;
	char	*line, *eq, *next;
	size_t	 i;

	if ((o = json_object()) == NULL)
		return NULL;
	for (line = row; line != NULL && *line != '\0'; line = next) {
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		if ((eq = strchr(line, '=')) == NULL)
			continue;
		*eq++ = '\0';
		for (i = 0; i < RZ_LEGACY_TEXTS; i++)
			if (strcmp(line, rz_legacy_texts[i]) == 0)
				break;
		if (i == RZ_LEGACY_TEXTS) {
			json_object_set_new(o, line,
			    json_integer(strtoll(eq, NULL, 10)));
			continue;
		}
		if (strcmp(line, "failure") == 0)
			rz_legacy_unescape(eq);
		json_object_set_new(o, line, rz_json_text(eq));
	}
	return o;
}

/* A stored row as a JSON object: JSON, or the older k=v text.  NULL
 * when it is neither (or no memory). */
static json_t *
rz_row_parse(struct slice v)
{
	json_t	*o;
	char	*text;

	if (v.len > 0 && v.p[0] == '{') {
		o = json_loadb((const char *)v.p, v.len, 0, NULL);
		if (o != NULL && !json_is_object(o)) {
			json_decref(o);
			o = NULL;
		}
		return o;
	}
	if ((text = malloc(v.len + 1)) == NULL)
		return NULL;
	memcpy(text, v.p, v.len);
	text[v.len] = '\0';
	o = rz_legacy_row(text);
	free(text);
	return o;
}

static int64_t
row_i64(const json_t *row, const char *name, int64_t dflt)
{
	json_t	*v = json_object_get(row, name);

	return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static void
row_str(const json_t *row, const char *name, char *out, size_t outsz)
{
	const char	*s = json_string_value(json_object_get(row, name));

	strlcpy(out, s != NULL ? s : "", outsz);
}

/*
 * An event row: {"time_ms", "text"}, or the older "<wall ms> <text>"
 * with the text escaped.  Sets *ms and *text (malloc'ed); 0, or -1 when
 * it is neither or there is no memory.
 */
static int
rz_event_parse(struct slice v, int64_t *ms, char **text)
{
	json_t		*o;
	const char	*t;
	char		*line, *sp;

	if (v.len > 0 && v.p[0] == '{') {
		if ((o = rz_row_parse(v)) == NULL)
			return -1;
		*ms = row_i64(o, "time_ms", 0);
		t = json_string_value(json_object_get(o, "text"));
		*text = strdup(t != NULL ? t : "");
		json_decref(o);
		return *text != NULL ? 0 : -1;
	}
	if ((line = malloc(v.len + 1)) == NULL)
		return -1;
	memcpy(line, v.p, v.len);
	line[v.len] = '\0';
	rz_legacy_unescape(line);
	*ms = strtoll(line, NULL, 10);
	sp = strchr(line, ' ');
	*text = strdup(sp != NULL ? sp + 1 : "");
	free(line);
	return *text != NULL ? 0 : -1;
}

struct rz_load_ctx {
	struct rz	*rz;
	struct rz_job	*job;
	int64_t		 now;
	int		 err;
};

static char *
slice_cstr(struct slice s)
{
	char	*p;

	if ((p = malloc(s.len + 1)) == NULL)
		return NULL;
	memcpy(p, s.p, s.len);
	p[s.len] = '\0';
	return p;
}

static void
rz_load_node_cb(void *arg, struct slice key)
{
	struct rz_load_ctx	*ctx = arg;
	struct rz_job		*j = ctx->job;
	struct rz_node		*nd;
	struct slice		 v, ns;
	char			 nsbuf[RZ_ID_MAX + 32], *k;
	json_t			*row;

	rz_ns_name(nsbuf, sizeof nsbuf, "node", j, &ns);
	if (kv_get(ctx->rz->kv, ns, key, &v) != 0 ||
	    (row = rz_row_parse(v)) == NULL)
		return;
	if ((nd = calloc(1, sizeof *nd)) == NULL ||
	    (k = slice_cstr(key)) == NULL) {
		free(nd);
		json_decref(row);
		ctx->err = RDZV_ENOMEM;
		return;
	}
	nd->id = strtoll(k, NULL, 10);
	free(k);
	row_str(row, "instance", nd->instance, sizeof nd->instance);
	row_str(row, "host", nd->host, sizeof nd->host);
	row_str(row, "addr", nd->addr, sizeof nd->addr);
	nd->pid = row_i64(row, "pid", 0);
	nd->lws = row_i64(row, "lws", 1);
	nd->state = (enum rz_node_state)row_i64(row, "state", RZN_WAITING);
	nd->group_rank = row_i64(row, "group_rank", -1);
	nd->prev_rank = row_i64(row, "prev_rank", -1);
	nd->join_seq = row_i64(row, "join_seq", 0);
	nd->want_rank = row_i64(row, "want_rank", -1);
	nd->succeeded = (int)row_i64(row, "succeeded", 0);
	nd->dead_local = row_i64(row, "dead_local", 0);
	nd->repairable = (int)row_i64(row, "repairable", 0);
	nd->lease_end = ctx->now + j->lease_ms;
	json_decref(row);
	rz_node_add(j, nd);
}

/* A job row's "repair" object (absent in older rows: defaults); a
 * pending replacement gets the whole timeout again from now. */
static void
rz_load_repair(struct rz_load_ctx *ctx, struct rz_job *j, const json_t *rp)
{
	j->max_repairs = row_i64(rp, "max", RZ_MAX_REPAIRS);
	j->repair_timeout_ms = row_i64(rp, "timeout_ms", RZ_REPAIR_TIMEOUT_MS);
	j->repairs = row_i64(rp, "count", 0);
	j->base_round = row_i64(rp, "base", j->round);
	j->kind = row_i64(rp, "kind", NAT_KIND_NORMAL);
	j->donor = row_i64(rp, "donor", -1);
	j->pend_node = row_i64(rp, "pend_node", 0);
	j->pend_local = row_i64(rp, "pend_local", -1);
	j->pend_deadline = j->pend_node != 0 ?
	    ctx->now + j->repair_timeout_ms : -1;
}

static void
rz_load_job_cb(void *arg, struct slice key)
{
	struct rz_load_ctx	*ctx = arg;
	struct rz_job		*j;
	struct slice		 v, ns;
	char			 nsbuf[RZ_ID_MAX + 32];
	json_t			*row;

	if (key.len > RZ_ID_MAX || kv_get(ctx->rz->kv, ns_jobs, key, &v) != 0 ||
	    (row = rz_row_parse(v)) == NULL)
		return;
	if ((j = calloc(1, sizeof *j)) == NULL) {
		json_decref(row);
		ctx->err = RDZV_ENOMEM;
		return;
	}
	memcpy(j->id, key.p, key.len);
	TAILQ_INIT(&j->nodes);
	j->min = row_i64(row, "min", 1);
	j->max = row_i64(row, "max", 1);
	j->max_restarts = row_i64(row, "max_restarts", 0);
	j->last_call_ms = row_i64(row, "last_call_ms", ctx->rz->def_last_call);
	j->lease_ms = row_i64(row, "lease_ms", ctx->rz->def_lease);
	j->state = (enum rz_job_state)row_i64(row, "state", RZJ_FORMING);
	j->round = row_i64(row, "round", 0);
	j->restart_count = row_i64(row, "restarts", 0);
	j->next_node_id = row_i64(row, "next_node", 1);
	j->next_join_seq = row_i64(row, "next_join", 0);
	j->next_event = row_i64(row, "next_event", 0);
	j->world_size = row_i64(row, "world", 0);
	j->port = (int)row_i64(row, "port", 0);
	j->closed_ms = row_i64(row, "closed_ms", -1);
	row_str(row, "failure", j->failure, sizeof j->failure);
	rz_load_repair(ctx, j, json_object_get(row, "repair"));
	json_decref(row);
	if (j->round > 0)
		snprintf(j->ns, sizeof j->ns, "job/%s/round/%" PRId64, j->id,
		    j->round);
	j->last_join = ctx->now;
	HASH_ADD_STR(ctx->rz->jobs, id, j);

	ctx->job = j;
	rz_ns_name(nsbuf, sizeof nsbuf, "node", j, &ns);
	kv_list(ctx->rz->kv, ns, rz_load_node_cb, ctx);
}

/* Wall ms of the job's newest event (its close, for a closed job). */
static int64_t
rz_last_event_ms(struct rz *rz, struct rz_job *j)
{
	char		nsbuf[RZ_ID_MAX + 32], key[32], *text;
	struct slice	ns, v;
	int64_t		ms;
	int		k;

	if (j->next_event < 1)
		return -1;
	rz_ns_name(nsbuf, sizeof nsbuf, "ev", j, &ns);
	k = snprintf(key, sizeof key, "%020" PRId64, j->next_event - 1);
	if (kv_get(rz->kv, ns, (struct slice){ (const uint8_t *)key,
	    (size_t)k }, &v) != 0 || rz_event_parse(v, &ms, &text) != 0)
		return -1;
	free(text);
	return ms;
}

static int
rz_closed_cmp(const void *a, const void *b)
{
	const struct rz_job	*x = *(struct rz_job * const *)a;
	const struct rz_job	*y = *(struct rz_job * const *)b;

	if (x->closed_ms != y->closed_ms)
		return x->closed_ms < y->closed_ms ? -1 : 1;
	return strcmp(x->id, y->id);
}

/* Puts the loaded closed jobs on rz->closed, oldest close first. */
static int
rz_load_closed(struct rz *rz)
{
	struct rz_job	*j, *tmp, **v;
	size_t		 n = 0, i;
	int64_t		 now = rz->hooks.wall_ms(rz->hooks.arg);

	HASH_ITER(hh, rz->jobs, j, tmp) {
		if (!rz_closed(j))
			continue;
		/* Rows written before closed_ms existed: the close event's
		 * time, or else now, so they are kept a whole retention. */
		if (j->closed_ms < 0)
			j->closed_ms = rz_last_event_ms(rz, j);
		/* A close "in the future" was stamped by a clock since set
		 * back: count from now rather than keep it that much longer. */
		if (j->closed_ms < 0 || j->closed_ms > now)
			j->closed_ms = now;
		n++;
	}
	if (n == 0)
		return 0;
	if ((v = reallocarray(NULL, n, sizeof *v)) == NULL) {
		/* Unsorted still purges them, just not in order. */
		HASH_ITER(hh, rz->jobs, j, tmp)
			if (rz_closed(j))
				TAILQ_INSERT_TAIL(&rz->closed, j, closed_entry);
		return RDZV_ENOMEM;
	}
	n = 0;
	HASH_ITER(hh, rz->jobs, j, tmp)
		if (rz_closed(j))
			v[n++] = j;
	qsort(v, n, sizeof *v, rz_closed_cmp);
	for (i = 0; i < n; i++)
		TAILQ_INSERT_TAIL(&rz->closed, v[i], closed_entry);
	free(v);
	return 0;
}

int
rz_load(struct rz *rz, int64_t now, struct rz_outbox *ob)
{
	struct rz_load_ctx	 ctx = { rz, NULL, now, 0 };
	struct rz_job		*j, *tmp;
	int			 want;

	kv_list(rz->kv, ns_jobs, rz_load_job_cb, &ctx);
	if (rz_load_closed(rz) != 0)
		ctx.err = RDZV_ENOMEM;
	HASH_ITER(hh, rz->jobs, j, tmp) {
		if (j->state != RZJ_RUNNING)
			continue;
		if (rz_rank_bases(rz, j) != 0)
			ctx.err = RDZV_ENOMEM;
		/* Workers were told this port: serve it again if we can
		 * (rz_settle writes the row if it changes). */
		want = j->port;
		rz_out_port_open(ob, j, want);
		rz_event(rz, j, now, "rdzvd restarted: round %" PRId64
		    " resumes, %" PRId64 " nodes have %" PRId64 " ms to "
		    "reconnect", j->round, j->nnodes, j->lease_ms);
	}
	return ctx.err;
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
		json_array_append_new(members, m);
	}
	json_object_set_new(doc, "members", members);
	json_object_set_new(doc, "store_port", json_integer(j->port));
	json_object_set_new(doc, "store_ns", json_string(j->ns));
	json_object_set_new(doc, "failure", json_string(j->failure));
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
rz_admin_evict(struct rz *rz, struct slice job, int64_t node_id, int64_t now,
    struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_node	*nd, gone;
	int		 was_member;

	if ((j = rz_find_job(rz, job)) == NULL ||
	    (nd = rz_find_node(j, node_id)) == NULL)
		return RDZV_ENOTFOUND;
	/* A closed job keeps its members for the record; none can go. */
	if (rz_closed(j))
		return RDZV_ECLOSED;
	rz_event(rz, j, now, "evicted node %" PRId64 " host %s by an operator",
	    nd->id, nd->host);
	rz_push_node(ob, j, nd, RDZV_ROUND_FAILED, "evicted by an operator");
	was_member = nd->state == RZN_MEMBER;
	gone = *nd;
	rz_node_remove(rz, j, nd);
	rz_mark(rz, j);
	if (was_member && j->state == RZJ_RUNNING &&
	    rz_repair_lost(rz, ob, j, &gone, "evicted by an operator",
	    now) != 0)
		rz_round_end(rz, ob, j, now, "a node was evicted");
	rz_round_form(rz, ob, j, now);
	return 0;
}
