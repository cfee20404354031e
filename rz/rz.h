/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rz.h: the server-side rendezvous (jobs, rounds, members, leases,
 * restarts), a pure state machine: no I/O, no libevent, no monotonic
 * clock (the caller passes the time in; a hook reads the wall clock for
 * the event log and retention).
 *
 * rz/ is librz, this machine's own library (rz_impl.h lists its files)
 * with the straggler detector (straggler.h): it links kv/ and common/
 * alone, nothing of rdzvd/, sqlite or libcurl, so that rdzvd, the
 * agent's embedded rdzvd and the unit tests all drive the same code.
 *
 * Every event (a request, a tick, a connection gone, a purge, the load)
 * is one call that changes the state and fills a struct rz_outbox with
 * what must happen now: the reply's fields, ROUND pushes to connections,
 * round ports to open and close, closed jobs purged (to log), and when
 * to call rz_tick and rz_purge next.  Nothing calls back into the caller
 * mid-transition.  The caller (rdzvd/round.c) applies an outbox in this
 * order:
 *   1. closes and opens the ports asked (rz_out_port: sets .port);
 *   2. calls rz_settle(), which records the port numbers, puts them in
 *      the RUNNING pushes, writes the job rows the event changed and
 *      sets .deadline and .purge_at;
 *   3. writes the reply to the request, then the pushes in order (so a
 *      JOIN's reply precedes the ROUND push on the same connection);
 *   4. arms its timers for .deadline and .purge_at; rz_outbox_reset().
 * Repair rounds (PROTOCOL.md "Repair rounds") are rounds of a RUNNING
 * job like any other, in the same outbox: a FAILURE with repair=1 in a
 * job whose every member node said repairable (HEARTBEAT) opens a round
 * of kind SHRINK at once (the dead local rank left out, ranks renumbered
 * over the live workers, a fresh namespace and port, a donor named); the
 * READY of its replacement opens one of kind GROW; a second failure
 * while a replacement is pending shrinks again, and the grow then
 * waits for every replacement on its way.  A node that joins a
 * running job below its maximum whose members can all repair is taken
 * in place (rz_elastic.c): a member at once with none of its workers
 * in, grown in with the other joiners once all are ready and the last
 * call has passed.  A READY not in by the job's repair
 * timeout (an rz_tick deadline), a node that cannot repair or the job's
 * max_repairs used escalate to a restart as a plain FAILURE does.
 * Repairs count against max_repairs, never against max_restarts.
 *
 * Rows: the machine writes its own durable rows through kv (the pure
 * core that journals to sqlite): node and event rows as the transition
 * makes them, job rows once per event in rz_settle() (a job row carries
 * its round's port, known only then).  kv is not the adapter: it does no
 * I/O, and a reply the adapter writes after the rows is held until they
 * commit (conn_reply_buf_durable).
 *
 * Durable state is written as kv rows in reserved namespaces (NUL-led,
 * refused to clients), so it reaches sqlite through the kv journal and
 * is back after a restart through rz_load():
 *   "\0rdzv/job"          job id       -> job row
 *   "\0rdzv/node/<job>"   node id      -> node row
 *   "\0rdzv/ev/<job>"     %020 seq     -> {"time_ms": wall ms, "text"}
 *                                          (newest RZ_EVENTS_KEPT kept)
 * Rows are JSON objects (jansson), a job's and a node's with one member
 * per field of struct rz_job and rz_node that outlives a restart.  Rows
 * of the k=v text an older rdzvd wrote (one "name=value" line each; an
 * event "<wall ms> <text>"; '\\' and newline escaped in the failure and
 * in event text) still load, and are JSON once written again.
 *
 * Job states (one job per rdzv_id):
 *
 *   FORMING --max live nodes, or >= min and last call over--> RUNNING
 *   RUNNING --FAILURE repair=1, repairable--> RUNNING (round SHRINK)
 *   RUNNING --READY of the pending replacement--> RUNNING (round GROW)
 *   RUNNING --new node below max, repairable--> RUNNING (the joiner
 *             alone told; round GROW once every joiner is ready and the
 *             last call is over: rz_elastic.c)
 *   RUNNING --FAILURE (restarts left) / lease lapse / LEAVE /
 *             new node below max--> FORMING   (members get STOP)
 *   RUNNING --FAILURE, no restarts left--> FAILED   (all get FAILED)
 *   RUNNING --every member SUCCEEDED--> DONE        (all get DONE)
 *             (a SUCCEEDED of a round since the membership formed
 *             counts, and ends the wait for a pending replacement)
 *   DONE, FAILED: closed, JOIN answers RDZV_ECLOSED.
 *   DONE, FAILED --retention passed since the close--> purged: forgotten
 *             (job, node and event rows, every kv namespace under
 *             job/<id>/), so a JOIN with that id starts a new job.
 * rz_round_end() and rz_round_form() make the transitions; rz_purge()
 * forgets closed jobs.
 * *
 * Round namespaces "job/<id>/round/<n>": only the running round's is
 * live.  A round that ends (STOP, the job's close) drops its namespace,
 * and the one before it that a repair round kept.  A repair round
 * (shrink, grow) keeps the namespace of the round it replaces until the
 * next repair round, since a worker still coming to the repair round
 * reads there whether its peers came (rz_repair.c).  rz_sweep() drops
 * any other round's namespace a late writer (a worker still reporting
 * progress over the main port after its round stopped) has brought back,
 * so the store does not grow with a job's restarts and a job that reuses
 * a purged id never meets the old job's keys.  A namespace "job/A/..."
 * belongs to the job with the longest id A that exists, so job "a" never
 * touches job "a/b"'s rounds.
 */
#ifndef RDZV_RZ_H
#define RDZV_RZ_H

#include <stdint.h>

#include "kv.h"
#include "wire.h"

struct rz;
struct rz_job;

#define RZ_ID_MAX	256	/* bytes in a job id, instance, host, addr */
#define RZ_MSG_MAX	4096	/* bytes of a failure message kept */
#define RZ_EVENTS_KEPT	10000	/* events kept per job */
#define RZ_MAX_REPAIRS	1000	/* a job's repairs, unless JOIN says */
#define RZ_REPAIR_TIMEOUT_MS 60000	/* for a replacement's READY */
#define RZ_REPAIR_LWS_MAX 63	/* local ranks a live_local mask holds */
#define RZ_REPL_FAILS_MAX 3	/* a local rank's replacements dead before
				   they joined, between two grows, before a
				   restart */
#define RZ_STRAG_RATIO_PM 500	/* a straggler's speed, of the median */
#define RZ_STRAG_WINDOW_MS 30000	/* ... for this long */

struct rz_hooks {
	/* Wall-clock ms since the epoch, for the event log and retention. */
	int64_t	(*wall_ms)(void *arg);
	void	*arg;
};

/* A ROUND push for the connection conn (never NULL).  Its strings point
 * into the machine's state or are constant: valid until the next call. */
struct rz_out_push {
	void			*conn;
	struct nat_round	 round;
	struct rz_job		*job;
	int			 port_pending;	/* rz_settle sets store_port */
	/* A STRAGGLER push instead (round's job, round and node_id):
	 * the agent kills local rank straggler_local.  A DRAIN push
	 * (drain, straggler_local -1): the node leaves on purpose. */
	int			 straggler, drain;
	int64_t			 straggler_local;
};

/* A round's TCPStore port to open (serve ns for job; want: the port to
 * reuse after a restart, 0 any) or close.  For an open, the caller sets
 * port to the port it got, or -1. */
struct rz_out_port {
	int		 open;
	char		 job[RZ_ID_MAX + 1];
	char		 ns[RZ_ID_MAX + 64];
	int		 want;
	int		 port;
	struct rz_job	*jp;		/* open: for rz_settle */
};

/* A closed job that was purged: its final state, close time (wall ms)
 * and the keys dropped with it. */
struct rz_out_purged {
	char		 job[RZ_ID_MAX + 1];
	const char	*state;
	int64_t		 closed_ms, keys;
	int		 by_operator;	/* rz_admin_forget, not retention */
};

struct rz_outbox {
	/* The reply's fields (JOIN: node_id, restart_count, lease_ms;
	 * HEARTBEAT: round); the op's return code says whether it holds. */
	int64_t			 node_id, restart_count, lease_ms, round;
	struct rz_out_push	*push;
	size_t			 npush, cappush;
	struct rz_out_port	*port;
	size_t			 nport, capport;
	struct rz_out_purged	*purged;
	size_t			 npurged, cappurged;
	int64_t			 deadline;	/* rz_tick's (monotonic), -1 */
	int64_t			 purge_at;	/* wall ms for rz_purge, -1 */
	int			 lost;		/* items dropped: no memory */
};

void	rz_outbox_init(struct rz_outbox *);
/* Empties ob for the next call (keeps its memory). */
void	rz_outbox_reset(struct rz_outbox *);
void	rz_outbox_free(struct rz_outbox *);
/* Step 2 of applying ob (see above): after the ports, before sending.
 * Every event's outbox must be settled before the next event. */
void	rz_settle(struct rz *, struct rz_outbox *);

/* Creates the rendezvous over kv; defaults apply when a JOIN says -1. */
struct rz	*rz_new(struct kv *, const struct rz_hooks *,
		    int64_t last_call_ms, int64_t lease_ms);
void		 rz_free(struct rz *);
/* How long closed jobs are kept, ms from their close; 0 keeps them
 * forever (the default). */
void		 rz_set_retention(struct rz *, int64_t retention_ms);

/* Rebuilds jobs and nodes from kv's reserved rows (after store_open).
 * Leases restart at now so agents have a lease to reconnect in; running
 * rounds reopen their TCPStore ports on the same numbers (ob). */
int		 rz_load(struct rz *, int64_t now_ms, struct rz_outbox *);

/* The ops of PROTOCOL.md "Rendezvous".  Each returns 0 or RDZV_E*:
 * EINVAL (bad field, parameters disagree with the job), ECLOSED (job
 * over), ENOTFOUND (unknown job or node), and fills ob.  conn is the
 * caller's connection, remembered for pushes. */
int	rz_join(struct rz *, const struct nat_join *, void *conn,
	    int64_t now_ms, struct rz_outbox *);
/* repairable: 1 or 0 as the agent said it, -1 not said (kept). */
int	rz_heartbeat(struct rz *, struct slice job, int64_t node_id,
	    int64_t repairable, void *conn, int64_t now_ms, struct rz_outbox *);
/*
 * HEARTBEAT's unjoined (bit l: local rank l's worker is a replacement
 * that never stepped, up or on its way): kept for the node (not in
 * rows); once training ended, a member all of whose workers are such
 * has nothing to report, and the job may close (see rz_succeeded).
 */
int	rz_unjoined(struct rz *, struct slice job, int64_t node_id,
	    int64_t unjoined, int64_t now_ms, struct rz_outbox *);
/*
 * HEARTBEAT's stepped: the latest round a worker of the node committed a
 * step in (0: none yet), kept for the node (not in rows).  A grow waits
 * for a step in the shrink round before it (rz_repair.c, rz_grow_held):
 * this is the news that opens it.
 */
int	rz_stepped(struct rz *, struct slice job, int64_t node_id,
	    int64_t stepped, int64_t now_ms, struct rz_outbox *);
int	rz_leave(struct rz *, struct slice job, int64_t node_id, int64_t now_ms,
	    struct rz_outbox *);
int	rz_failure(struct rz *, const struct nat_failure *, int64_t now_ms,
	    struct rz_outbox *);
int	rz_ready(struct rz *, const struct nat_ready *, int64_t now_ms,
	    struct rz_outbox *);
/*
 * Every worker of the node that trained exited 0; unjoined (bit l:
 * local rank l) names its replacements that are up or on their way and
 * never stepped (0: none).  During a repair it ends the repair: see
 * rz_repair_ended.
 */
int	rz_succeeded(struct rz *, struct slice job, int64_t node_id,
	    int64_t round, int64_t unjoined, int64_t now_ms, struct rz_outbox *);

/* A connection closed: its nodes keep their leases but get no pushes. */
void	rz_conn_gone(struct rz *, void *conn, struct rz_outbox *);
/* Expires leases and completes rounds whose last call is over. */
void	rz_tick(struct rz *, int64_t now_ms, struct rz_outbox *);
/* Earliest time rz_tick has work, or -1. */
int64_t	rz_next_deadline(struct rz *);

/*
 * Forgets closed jobs whose retention has passed at wall-clock time
 * wall_ms, oldest close first: at most max_jobs jobs, and no more once
 * about max_keys keys have been dropped (one job at least), so a long
 * backlog is spread over several calls.  Returns the jobs purged.
 */
int	rz_purge(struct rz *, int64_t wall_ms, int max_jobs, int64_t max_keys,
	    struct rz_outbox *);
/* Wall-clock ms when rz_purge next has work (<= now: at once), or -1. */
int64_t	rz_next_purge(struct rz *);
/* Drops every round namespace that is not a running round's (see
 * above); returns the keys dropped. */
int64_t	rz_sweep(struct rz *);
/*
 * Forgets the closed job at once, as rz_purge does when its retention has
 * passed (its rows, events and namespaces; one ob->purged entry, marked
 * by_operator), so that its id starts a new job.  Returns 0,
 * RDZV_ENOTFOUND, or RDZV_EBUSY for a job not closed.
 */
int	rz_admin_forget(struct rz *, struct slice job, struct rz_outbox *);
/* For a JOIN refused with ECLOSED: ms until job is purged at wall_ms,
 * or -1 when it is kept forever (or unknown). */
int64_t	rz_retention_left(struct rz *, struct slice job, int64_t wall_ms);

/* A malloc'ed text description of job (NULL: unknown or no memory). */
char	*rz_status(struct rz *, struct slice job, int64_t now_ms);

/* Operators (PROTOCOL.md "Operators"; rdzvd/docs.c writes them out):
 * jansson documents, the caller's reference, or NULL (unknown job, or
 * no memory).  The job list, sorted by id: */
struct json_t;
struct json_t	*rz_jobs_doc(struct rz *);
/* One job's detail (the caller may add to it before dumping): */
struct json_t	*rz_job_doc(struct rz *, struct slice job, int64_t now_ms);
/* Events after seq `after` (all when < 0), oldest first, at most 1000: */
struct json_t	*rz_events_doc(struct rz *, struct slice job, int64_t after);
/* The kv row (namespace, key) the event after `after` will be written
 * to, for waiting on it: fills nsbuf/keybuf.  ENOTFOUND: unknown job. */
int	rz_event_row(struct rz *, struct slice job, int64_t after,
	    char *nsbuf, size_t nssz, struct slice *ns, char *keybuf,
	    size_t keysz, struct slice *key);
/* Closes a job as failed with reason. */
int	rz_admin_close(struct rz *, struct slice job, struct slice reason,
	    int64_t now_ms, struct rz_outbox *);
/*
 * The adapter could not open the round port ob asked for job (no port
 * left to give): the job fails with why, and the RUNNING pushes ob holds
 * for it give way to FAILED ones, so that its agents hear why instead of
 * waiting on a port.  Call before rz_settle.  Returns 0, RDZV_ENOTFOUND
 * or RDZV_ECLOSED.
 */
int	rz_port_refused(struct rz *, struct slice job, const char *why,
	    int64_t now_ms, struct rz_outbox *);
/*
 * Evicts a node.  A member of a running job that repairs in place is
 * asked to leave at its workers' next step boundary (a DRAIN push; its
 * LEAVE shrinks the round, nothing dropped), and dropped at once if it
 * is still there RZ_DRAIN_MS later; with now, or when it cannot leave
 * that way, it is dropped at once (the job repairs around it or a new
 * round forms).  Returns 1 (asked to leave), 0 (dropped) or an error.
 */
#define RZ_DRAIN_MS	120000
int	rz_admin_evict(struct rz *, struct slice job, int64_t node_id,
	    int now, int64_t now_ms, struct rz_outbox *);

/*
 * Stragglers (rz_strag.c; the detector is rz/straggler.c, fed by
 * rdzvd/progwatch.c).  rz_strag_each calls cb with every running job
 * whose detection is on (its JOIN's straggler_ratio > 0) and that waits
 * for no replacement (a job left out is forgotten by the detector).
 */
struct rz_strag_view {
	const char	*job, *ns;	/* valid during the call */
	int64_t		 round, world_size, window_ms;
	double		 ratio;
	int		 replace;	/* straggler_action=replace */
};
void	rz_strag_each(struct rz *, void (*cb)(void *,
	    const struct rz_strag_view *), void *arg);
/* An event: rank of round named a straggler (named 1) or cleared (0).
 * EINVAL: the round is over. */
int	rz_straggler_news(struct rz *, struct slice job, int64_t round,
	    int64_t rank, int named, double speed, double median, int64_t now);
/* Acts on straggling rank of round (straggler_action=replace): evicts
 * its node for a standby, or asks its agent to kill it (the job then
 * repairs).  0 when done; EBUSY when the job cannot repair now (the
 * event says why); EINVAL: round over, action off, no such rank. */
int	rz_straggler_replace(struct rz *, struct slice job, int64_t round,
	    int64_t rank, int64_t now, struct rz_outbox *);

/*
 * Replica groups (rz_topo.c): a world of replicas x shards ranks, rank
 * h (its home) in replica h / shards at shard h % shards.  Pure; the
 * agent uses them for its workers' RDZV_REPLICA and RDZV_SHARD.
 */
struct rz_topo {
	int64_t	replicas, shards, replica, shard;
};
/* 0, or RDZV_EINVAL with why filled (replicas does not divide world). */
int	rz_topo_check(int64_t world, int64_t replicas, char *why,
	    size_t whysz);
/* Where home sits (world and replicas passed rz_topo_check). */
void	rz_topo_rank(int64_t world, int64_t replicas, int64_t home,
	    struct rz_topo *);
/* The home rank holding home's shard in the lowest other replica none of
 * whose ranks is dead (dead: a bitmap of homes, bit h of word h / 64),
 * or -1. */
int64_t	rz_topo_donor(int64_t world, int64_t replicas, int64_t home,
	    const uint64_t *dead);

/* Figures for /metrics. */
struct rz_stats {
	int64_t	jobs_running, jobs_forming, jobs_closed;
	int64_t	nodes, rounds_total, restarts_total, lease_expiries_total;
	int64_t	jobs_purged_total;	/* closed jobs forgotten */
	int64_t	repairs_total;		/* repair rounds, shrink and grow */
};
void	rz_get_stats(struct rz *, struct rz_stats *);


#endif /* RDZV_RZ_H */
