/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rz_impl.h: what the files of the rendezvous state machine share, and
 * nothing else sees (the rest of rdzvd uses rz.h).  One machine, one
 * outbox, split by responsibility:
 *
 *	rz.c		the outbox, lookups, pushes, forming and ending
 *			rounds, the ops (JOIN, HEARTBEAT, LEAVE, SUCCEEDED),
 *			the tick, status documents, operators
 *	rz_repair.c	repair rounds: a failure shrinks the round around the
 *			dead, a READY grows it back, or the job restarts
 *	rz_elastic.c	joining in place: a node that joins a running,
 *			repairable job below its maximum is taken in by a
 *			grow round instead of a restart; leaving on purpose
 *	rz_rows.c	the rows kept in kv (jobs, nodes, events) and loading
 *			them after a restart
 *	rz_retain.c	retention: purging closed jobs, sweeping dead rounds'
 *			namespaces
 *	rz_topo.c	replica groups: which rank holds which shard, the
 *			donor of a lost rank's shard
 */
#ifndef RDZV_RZ_IMPL_H
#define RDZV_RZ_IMPL_H

#include <sys/queue.h>

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uthash.h>

#include "rz.h"

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
	int64_t			 ready_local;	/* bit l: its replacement
						 * said READY, no grow took
						 * it in yet */
	int			 joining;	/* taken in place, its workers
						 * not in a round yet */
	int64_t			 fresh;		/* bit l: local rank l's
						 * replacement is ready, not in
						 * a round yet (never a donor) */
	int64_t			 unjoined;	/* bit l: a replacement
						 * that never stepped, as its
						 * agent's HEARTBEAT said
						 * (not in rows) */
	int			 says_stepped;	/* its HEARTBEAT has stepped */
	int64_t			 stepped;	/* the latest round a worker
						 * of it committed a step in,
						 * as it said (not in rows) */
	unsigned char		 repl_fails[RZ_REPAIR_LWS_MAX];
						/* [l]: local rank l's
						 * replacements dead before
						 * they joined since the last
						 * grow or restart (rz_failure;
						 * not in rows) */
	int64_t			 drain_by;	/* asked to leave (evict):
						 * dropped if here then; 0
						 * none.  Not kept in rows. */
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
						 * and drain_by (exact after a
						 * tick) */
	int64_t			 closed_ms;	/* wall clock, once closed */
	TAILQ_ENTRY(rz_job)	 closed_entry;	/* on rz->closed, once closed */
	int			 purging;	/* in this rz_purge's batch */
	int64_t			 purged_keys;
	/* Repair (rz.h): this round's kind and donor, repairs made, and
	 * the replacement awaited (pend_node 0: none) with its deadline. */
	int64_t			 max_repairs, repair_timeout_ms, repairs;
	int64_t			 kind, donor;
	int64_t			 donor_node, donor_local; /* who the donor
						 * is (rz_rank_bases) */
	int64_t			 pend_node, pend_local, pend_deadline;
	/* Stragglers (rz_strag.c): JOIN's settings. */
	int64_t			 strag_ratio_pm, strag_window_ms, strag_action;
	/* Joining in place (rz_elastic.c): when the grow for the nodes
	 * taken in may open (the last call after the latest), and when
	 * their workers must be ready by; -1: none.  Not kept in rows. */
	int64_t			 join_at, join_deadline;
	int64_t			 replicas;	/* replica groups (JOIN), 0:
						 * not a sharded job */
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

/* The reserved namespace of job rows. */
extern const struct slice rz_ns_jobs;

/* ---- rz.c ---- */
void *rz_outbox_grow(struct rz_outbox *ob, void **v, size_t *n, size_t *cap,
    size_t sz);
struct rz_out_push *rz_out_push(struct rz_outbox *ob);
int rz_push_order(struct rz_outbox *ob, struct rz_job *j, struct rz_node *nd,
    int64_t local, const char *message);
void rz_out_port_close(struct rz_outbox *ob, struct rz_job *j);
void rz_out_port_open(struct rz_outbox *ob, struct rz_job *j, int want);
void rz_mark(struct rz *rz, struct rz_job *j);
struct rz_job *rz_find_job(struct rz *rz, struct slice id);
struct rz_node *rz_find_node(struct rz_job *j, int64_t id);
int rz_closed(const struct rz_job *j);
int rz_rank_bases(struct rz *rz, struct rz_job *j);
void rz_push_node(struct rz_outbox *ob, struct rz_job *j, struct rz_node *nd,
    int state, const char *message);
void rz_close_job(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    enum rz_job_state state, int64_t now);
void rz_round_end(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now, const char *why);
int rz_round_form(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now);
void rz_node_add(struct rz_job *j, struct rz_node *nd);
void rz_evict(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t now, const char *why);
int64_t rz_live(const struct rz_node *nd);
int rz_holds_state(const struct rz_node *nd, int64_t l);
void rz_nodes_free(struct rz_job *j);

/* ---- rz_repair.c ---- */
int rz_repair_lost(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    const struct rz_node *lost, const char *how, int64_t now);
void rz_repair_timeout(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now);
void rz_done_if_ended(struct rz *, struct rz_outbox *, struct rz_job *,
    int64_t now);
int rz_state_left(const struct rz_job *, const struct rz_node *, int64_t);
int rz_training_ended(const struct rz_job *);
void rz_repair_ended(struct rz *rz, struct rz_job *j, const struct rz_node *nd,
    int64_t unjoined, int64_t now);
const char *rz_repair_refused_job(struct rz_job *j, char *buf, size_t bufsz);
const char *rz_repair_cannot(struct rz_job *j, char *buf, size_t bufsz);
int rz_repair_round(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t kind, int64_t now);
void rz_grow_if_due(struct rz *, struct rz_outbox *, struct rz_job *,
    int64_t now);
void rz_restart(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now, const char *cause, const char *why);

/* ---- rz_strag.c ---- */
void rz_strag_conf(struct rz_job *j, const struct nat_join *r);
json_t *rz_strag_row(const struct rz_job *j);
void rz_strag_load(struct rz_job *j, const json_t *row);
json_t *rz_strag_doc(const struct rz_job *j);

/* ---- rz_elastic.c ---- */
int rz_elastic_join(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t now);
int rz_elastic_ready(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t local_rank, int64_t now);
void rz_elastic_opened(struct rz *rz, struct rz_job *j);
void rz_elastic_tick(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    int64_t now);
int64_t rz_elastic_deadline(const struct rz_job *j);
int rz_elastic_drain(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node *nd, int64_t now);
void rz_elastic_drain_tick(struct rz *rz, struct rz_outbox *ob,
    struct rz_job *j, int64_t now);
void rz_elastic_reset(struct rz_job *j);

/* ---- rz_topo.c ---- */
int rz_topo_form(struct rz *rz, struct rz_outbox *ob, struct rz_job *j,
    struct rz_node **order, int64_t members, int64_t now);
const char *rz_topo_refused(const struct rz_job *j);
const char *rz_topo_unwhole(const struct rz_job *j, const struct rz_node *nd,
    int64_t l);
const char *rz_topo_fixed(const struct rz_job *j);
void rz_topo_lost(struct rz *rz, struct rz_job *j, const struct rz_node *nd,
    int64_t l, int64_t now);

/* ---- rz_rows.c ---- */
void rz_ns_name(char *out, size_t outsz, const char *kind,
    const struct rz_job *j, struct slice *ns);
int rz_round_ns(char *out, size_t outsz, const struct rz_job *j,
    int64_t round);
void rz_drop_round(struct rz *rz, const struct rz_job *j, int64_t round);
json_t *rz_json_text(const char *text);
void rz_save_job(struct rz *rz, struct rz_job *j);
void rz_save_node(struct rz *rz, struct rz_job *j, struct rz_node *nd);
void rz_drop_node_row(struct rz *rz, struct rz_job *j, struct rz_node *nd);
void rz_event(struct rz *rz, struct rz_job *j, int64_t now, const char *fmt,
    ...) __attribute__((format(printf, 4, 5)));
int rz_event_parse(struct slice v, int64_t *ms, char **text);

/* ---- rz_retain.c ---- */
int64_t rz_sweep_job(struct rz *rz, struct rz_job *j);

#endif /* RDZV_RZ_IMPL_H */
