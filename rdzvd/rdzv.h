/*
 * rdzv.h: the server-side rendezvous (jobs, rounds, members, leases,
 * restarts), a pure state machine: no I/O, no clock, no libevent.  The
 * caller passes the time in, and the machine acts through hooks (push a
 * ROUND frame to a connection, open or close a round's TCPStore port).
 *
 * Durable state is written as kv rows in reserved namespaces (NUL-led,
 * refused to clients), so it reaches sqlite through the kv journal and
 * is back after a restart through rz_load():
 *   "\0rdzv/job"          job id       -> job row
 *   "\0rdzv/node/<job>"   node id      -> node row
 *   "\0rdzv/ev/<job>"     %020 seq     -> "<wall ms> <text>" (newest
 *                                          RZ_EVENTS_KEPT kept)
 *
 * Job states (one job per rdzv_id):
 *
 *   FORMING --max live nodes, or >= min and last call over--> RUNNING
 *   RUNNING --FAILURE (restarts left) / lease lapse / LEAVE /
 *             new node below max--> FORMING   (members get STOP)
 *   RUNNING --FAILURE, no restarts left--> FAILED   (all get FAILED)
 *   RUNNING --every member SUCCEEDED--> DONE        (all get DONE)
 *   DONE, FAILED: closed, JOIN answers RDZV_ECLOSED.
 *   DONE, FAILED --retention passed since the close--> purged: forgotten
 *             (job, node and event rows, every kv namespace under
 *             job/<id>/), so a JOIN with that id starts a new job.
 * rz_round_end() and rz_round_form() make the transitions; rz_purge()
 * forgets closed jobs.
 *
 * Round namespaces "job/<id>/round/<n>": only the running round's is
 * live.  A round's namespace is dropped when it ends, and once more by
 * rz_sweep() when a late writer (a worker still reporting progress over
 * the main port after its round stopped) has brought it back, so the
 * store does not grow with a job's restarts and a job that reuses a
 * purged id never meets the old job's keys.  A namespace "job/A/..."
 * belongs to the job with the longest id A that exists, so job "a" never
 * touches job "a/b"'s rounds.
 */
#ifndef RDZVD_RDZV_H
#define RDZVD_RDZV_H

#include <stdint.h>

#include "kv.h"

struct rz;
struct rz_job;

#define RZ_ID_MAX	256	/* bytes in a job id, instance, host, addr */
#define RZ_MSG_MAX	4096	/* bytes of a failure message kept */
#define RZ_EVENTS_KEPT	10000	/* events kept per job */

/* What a ROUND push tells one node. */
struct rz_push {
	const char	*job;
	int64_t		 round;
	int64_t		 state;		/* enum rdzv_round_state */
	int64_t		 node_id;
	int64_t		 group_rank;
	int64_t		 group_world_size;
	int64_t		 world_size;
	int64_t		 rank_base;
	int64_t		 restart_count;
	int64_t		 max_restarts;
	const char	*store_ns;
	int64_t		 store_port;
	const char	*message;
};

struct rz_hooks {
	/* Sends p to the connection conn (never NULL here). */
	void	(*push)(void *arg, void *conn, const struct rz_push *p);
	/* Serves namespace ns on a TCPStore port for job; want is the port
	 * to reuse after a restart (0: any).  Returns the port or -1. */
	int	(*open_port)(void *arg, struct rz_job *job, const char *ns,
		    int want);
	void	(*close_port)(void *arg, struct rz_job *job);
	/* Wall-clock ms since the epoch, for the event log and retention. */
	int64_t	(*wall_ms)(void *arg);
	void	*arg;
	/* A closed job was purged (may be NULL): its id, final state name,
	 * close time (wall ms) and the keys dropped with it. */
	void	(*purged)(void *arg, const char *job, const char *state,
		    int64_t closed_wall_ms, int64_t keys);
};

struct rz_join_req {
	struct slice	job, instance, host, addr;
	int64_t		pid, local_world_size;
	int64_t		min_nodes, max_nodes, max_restarts;
	int64_t		last_call_ms, lease_ms;	/* < 0: defaults */
	int64_t		rank;	/* the group rank wanted (static), or -1 */
};

struct rz_failure_req {
	struct slice	job;
	int64_t		node_id, round, local_rank, rank, exit_code, signo;
	struct slice	message;
};

/* Creates the rendezvous over kv; defaults apply when a JOIN says -1. */
struct rz	*rz_new(struct kv *, const struct rz_hooks *,
		    int64_t last_call_ms, int64_t lease_ms);
void		 rz_free(struct rz *);
/* How long closed jobs are kept, ms from their close; 0 keeps them
 * forever (the default). */
void		 rz_set_retention(struct rz *, int64_t retention_ms);

/* Rebuilds jobs and nodes from kv's reserved rows (after store_open).
 * Leases restart at now so agents have a lease to reconnect in; running
 * rounds reopen their TCPStore ports on the same numbers. */
int		 rz_load(struct rz *, int64_t now_ms);

/* The ops of PROTOCOL.md "Rendezvous".  Each returns 0 or RDZV_E*:
 * EINVAL (bad field, parameters disagree with the job), ECLOSED (job
 * over), ENOTFOUND (unknown job or node).  conn is the caller's
 * connection, remembered for pushes. */
int	rz_join(struct rz *, const struct rz_join_req *, void *conn,
	    int64_t now_ms, int64_t *node_id, int64_t *restart_count,
	    int64_t *lease_ms);
int	rz_heartbeat(struct rz *, struct slice job, int64_t node_id, void *conn,
	    int64_t now_ms, int64_t *round);
int	rz_leave(struct rz *, struct slice job, int64_t node_id, int64_t now_ms);
int	rz_failure(struct rz *, const struct rz_failure_req *, int64_t now_ms);
int	rz_succeeded(struct rz *, struct slice job, int64_t node_id,
	    int64_t round, int64_t now_ms);

/* A connection closed: its nodes keep their leases but get no pushes. */
void	rz_conn_gone(struct rz *, void *conn);
/* Expires leases and completes rounds whose last call is over. */
void	rz_tick(struct rz *, int64_t now_ms);
/* Earliest time rz_tick has work, or -1. */
int64_t	rz_next_deadline(struct rz *);

/*
 * Forgets closed jobs whose retention has passed at wall-clock time
 * wall_ms, oldest close first: at most max_jobs jobs, and no more once
 * about max_keys keys have been dropped (one job at least), so a long
 * backlog is spread over several calls.  Returns the jobs purged.
 */
int	rz_purge(struct rz *, int64_t wall_ms, int max_jobs, int64_t max_keys);
/* Wall-clock ms when rz_purge next has work (<= now: at once), or -1. */
int64_t	rz_next_purge(struct rz *);
/* Drops every round namespace that is not a running round's (see
 * above); returns the keys dropped. */
int64_t	rz_sweep(struct rz *);
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
/* Closes a job as failed with reason; evicts a node (new round). */
int	rz_admin_close(struct rz *, struct slice job, struct slice reason,
	    int64_t now_ms);
int	rz_admin_evict(struct rz *, struct slice job, int64_t node_id,
	    int64_t now_ms);

/* Figures for /metrics. */
struct rz_stats {
	int64_t	jobs_running, jobs_forming, jobs_closed;
	int64_t	nodes, rounds_total, restarts_total, lease_expiries_total;
	int64_t	jobs_purged_total;	/* closed jobs forgotten */
};
void	rz_get_stats(struct rz *, struct rz_stats *);

/* The job's id (for hooks). */
const char	*rz_job_id(const struct rz_job *);

#endif /* RDZVD_RDZV_H */
