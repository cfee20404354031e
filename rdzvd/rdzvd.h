/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rdzvd.h: the daemon's index header, one section per .c file.
 *
 * rdzvd serves one kv core (kv/kv.c) to three protocol adapters chosen
 * per connection from its first bytes: the native rdzv protocol
 * (proto_native.c) and PyTorch's TCPStore dialects 1.13 and 2.x
 * (proto_tcpstore.c, on kv/tcps_sess.c's op mapping).  server.c owns
 * listening sockets and connections, store.c the journal and the writer
 * thread in front of the store backend (sqlite: store_sqlite.c; etcd:
 * store_etcd.c), http.c the health/metrics listener.  server_tls.c is
 * the TLS layer under server.c's connections.
 */
#ifndef RDZVD_H
#define RDZVD_H

#include <sys/types.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <stddef.h>
#include <stdint.h>

#include "kv.h"
#include "mono.h"
#include "rz.h"
#include "store.h"
#include "tcps_sess.h"
#include "wire.h"

struct evbuffer;
struct event;
struct event_base;
struct evconnlistener;
struct ssl_st;			/* OpenSSL's SSL, SSL_CTX, BIO */
struct ssl_ctx_st;
struct bio_st;

/* ---- config.c: command line and configuration file ---- */

/* --tls: what a plaintext native client gets once a certificate is set. */
enum rdzvd_tls_mode {
	RDZVD_TLS_UNSET = 0,	/* not given: required with a certificate */
	RDZVD_TLS_REQUIRED,	/* refused with the NAT_PRE_TLS preamble */
	RDZVD_TLS_OPTIONAL,	/* served in plaintext too */
};

struct rdzvd_config {
	char			*listen;	/* HOST:PORT */
	char			*port_file;
	int			 round_ports[2]; /* LO, HI; 0, 0: any free */
	char			*http;		/* HOST:PORT, or NULL for off */
	char			*http_port_file;
	char			*db;
	enum store_durability	 durability;
	unsigned		 relaxed_window_ms;
	char			*log_file;
	int			 log_level;	/* enum log_level */
	int			 foreground;
	struct wire_limits	 limits;
	unsigned		 max_connections;
	size_t			 output_max;
	size_t			 memory_budget;
	unsigned		 request_timeout_ms;
	unsigned		 last_call_ms;	/* rendezvous defaults */
	unsigned		 lease_ms;
	int64_t			 job_retention_ms; /* closed jobs; 0: kept */
	unsigned		 history_interval_ms; /* progress samples */
	char			*token_file;	/* native protocol secret */
	char			*tcpstore_allow; /* CIDRs, with a token */
	char			*tls_cert;	/* PEM chain; NULL: no TLS */
	char			*tls_key;	/* its PEM private key */
	enum rdzvd_tls_mode	 tls_mode;
	char			*http_token_file; /* the page's viewer secret */
	char			*http_tls;	/* "on": TLS on the HTTP port */
	char			*store;		/* etcd://...; NULL: sqlite at db */
	char			*etcd_prefix;
	unsigned		 leader_ttl_ms;
	int64_t			 etcd_compact_ms; /* 0: etcd's own, if any */
	char			*etcd_cacert;
	char			*etcd_cert;
	char			*etcd_key;
	char			*etcd_user;
	char			*etcd_password_file;
};

/*
 * Fills cfg from defaults, then the --config file (if named), then the
 * other options, so the command line wins.  Prints usage and exits 0 for
 * --help and --version; prints the cause and returns -1 on a bad option
 * or a bad combination (a TLS certificate without its key, and so on).
 */
int	config_parse(struct rdzvd_config *cfg, int argc, char **argv);
/* Fills cfg with the defaults alone. */
void	config_defaults(struct rdzvd_config *cfg);
void	config_free(struct rdzvd_config *);

/* ---- metrics.c: counters shown on /metrics ---- */

/* Operations counted per type, whatever protocol carried them. */
enum op_kind {
	OPK_SET, OPK_GET, OPK_ADD, OPK_COMPARE_SET, OPK_WAIT, OPK_CHECK,
	OPK_DELETE, OPK_NUM_KEYS, OPK_APPEND, OPK_MULTI_GET, OPK_MULTI_SET,
	OPK_QUEUE_PUSH, OPK_QUEUE_POP, OPK_QUEUE_LEN, OPK_LIST_KEYS,
	OPK_BARRIER, OPK_CANCEL, OPK_PING, OPK_WATCH, OPK_VALIDATE,
	OPK_JOIN, OPK_HEARTBEAT, OPK_LEAVE, OPK_FAILURE, OPK_SUCCEEDED,
	OPK_JOB_STATUS, OPK_ADMIN, OPK_READY,
	OPK_COUNT
};

/* Why a connection was refused or closed by rdzvd. */
enum err_kind {
	ERRK_MALFORMED, ERRK_TOO_BIG, ERRK_REQUEST_TIMEOUT,
	ERRK_MEMORY_BUDGET, ERRK_OUTPUT_LIMIT, ERRK_ACCEPT, ERRK_STORE,
	ERRK_AUTH, ERRK_TCPSTORE_DENIED,
	ERRK_TLS_HANDSHAKE,	/* failed, stalled or garbled TLS handshake */
	ERRK_TLS_REQUIRED,	/* plaintext native client, --tls required */
	ERRK_TLS_NOT_CONFIGURED, /* a TLS client, but no --tls-cert */
	ERRK_FORBIDDEN,		/* a job credential's request out of scope,
				 * or HTTP without the viewer credential */
	ERRK_COUNT
};

enum conn_dialect {
	DIALECT_UNKNOWN = 0, DIALECT_NATIVE, DIALECT_TCPS113, DIALECT_TCPS2,
	DIALECT_COUNT
};

struct metrics {
	uint64_t	ops[OPK_COUNT];
	uint64_t	errors[ERRK_COUNT];
	uint64_t	conns[DIALECT_COUNT];	/* open now */
	uint64_t	accepted;
	uint64_t	rejected;
	uint64_t	tls_handshakes;		/* completed since start */
	uint64_t	tls_open;		/* TLS connections open now */
};

extern struct metrics	metrics;

const char	*metrics_op_name(enum op_kind);
const char	*metrics_err_name(enum err_kind);
/* Appends the Prometheus text of every figure to out. */
void		 metrics_write(struct evbuffer *out);

/* ---- server.c: listeners and connections ---- */

/*
 * A connection's life:
 *
 *   SNIFF --first bytes--> NATIVE_HELLO --preamble--> SERVING
 *     |  ^                                               ^
 *     |  +-- 0x16: TLS handshake, then SNIFF again on     |
 *     |      the decrypted bytes (native only)            |
 *     +--- TCPStore bytes (dialect 1.13 or 2.x) ---------+
 *   any state --bad input, EOF, limit, shutdown--> closed (conn_close)
 *
 * Only conn_set_state() changes the state.  TLS is a layer under the
 * states, not one of them: c->ssl is set at the first byte 0x16 and from
 * then on the socket carries ciphertext that server_tls.c moves between
 * the socket and OpenSSL (through the BIO pair c->tls_net), while c->in
 * and c->out hold plaintext exactly as on a plain connection.
 */
enum conn_state {
	CONN_SNIFF,		/* no dialect yet: waiting for first bytes */
	CONN_NATIVE_HELLO,	/* "RDZV" seen, waiting for the preamble */
	CONN_SERVING,		/* decoding requests of conn->dialect */
};

struct pending;			/* a native request waiting (proto_native.c) */

/* A namespace shared by a round's listener and its connections. */
struct ns_ref {
	int		refs;
	size_t		len;
	uint8_t		p[];
};
struct ns_ref	*ns_ref_new(struct slice);
void		 ns_ref_put(struct ns_ref *);

struct conn {
	int			 fd;
	struct event		*rev;		/* EV_READ|EV_PERSIST, always */
	struct event		*wev;		/* added only while out is stuck */
	struct evbuffer		*in;
	struct evbuffer		*out;
	int			 dirty;		/* on server.dirty: out to flush */
	TAILQ_ENTRY(conn)	 dirty_entry;
	enum conn_state		 state;
	enum conn_dialect	 dialect;
	char			 peer[64];	/* "addr:port", for logs */
	struct ns_ref		*ns;		/* TCPStore namespace; NULL: root */
	size_t			 need;		/* bytes to buffer before decoding */
	size_t			 budget;	/* bytes held against memory_budget */
	struct event		*req_timer;	/* partial request deadline */
	int			 read_paused;	/* output over output_max */
	int			 closing;	/* closes once output is sent */
	int			 authed;	/* native: token proven, or none */
	char			*scope;		/* native: the job a job
						 * credential speaks for;
						 * NULL: the operator */
	uint8_t			 nonce[NAT_NONCE_LEN]; /* our challenge */
	struct sockaddr_storage	 sa;		/* the peer */

	/* strict durability: replies held until store commits hold_seq */
	struct evbuffer		*held;
	uint64_t		 hold_seq;
	TAILQ_ENTRY(conn)	 held_entry;
	int			 on_held_list;

	/* TCPStore: its wait and watches (kv/tcps_sess.h), once serving */
	struct tcps_sess	 tcps;
	int			 tcps_group;	/* tcps_group.c's GRP_* */

	/* native: waits in flight, by request id */
	LIST_HEAD(, pending)	 pending;

	/* TLS: NULL ssl on a plaintext connection */
	struct ssl_st		*ssl;
	struct bio_st		*tls_net;	/* our end of OpenSSL's BIO pair */
	int			 tls_handshaking; /* until the handshake ends */
	int			 tls_want_write; /* OpenSSL stopped to write */
	int			 tls_rstall;	/* rev off until that is sent */
	int			 tls_shutdown;	/* close_notify queued */

	TAILQ_ENTRY(conn)	 entry;
};

struct server {
	struct event_base	*base;
	struct rdzvd_config	*cfg;
	struct kv		*kv;
	struct rz		*rz;		/* the rendezvous */
	struct store		*store;		/* NULL in memory mode */
	const struct rdzvd_stores *stores;	/* NULL: memory alone */
	struct evconnlistener	*listener;
	struct event		*accept_timer;	/* EMFILE back-off */
	TAILQ_HEAD(, conn)	 conns;
	TAILQ_HEAD(, conn)	 held;		/* conns with held output */
	TAILQ_HEAD(, conn)	 dirty;		/* conns with output to send */
	struct event		*flush_ev;	/* sends it, once per loop pass */
	size_t			 nconns;
	size_t			 budget_used;
	int			 draining;
	int			 standby;	/* --store etcd: not leading */
	int			 failed;	/* could not lead: exit 1 */
	uint8_t			*token;		/* NULL: no authentication */
	size_t			 tokenlen;
	struct acl		*tcps_allow;	/* with a token: TCPStore peers */
	struct ssl_ctx_st	*tls_ctx;	/* NULL: no TLS */
	int			 tls_required;	/* plaintext native refused */
	int64_t			 started_ms;	/* mono_ms() at the start */
};

extern struct server	server;

/*
 * Opens a listening socket on "HOST:PORT" or "[V6]:PORT" ("*" or an empty
 * host: every address, dual-stack); what names it in errors.  Sets *port
 * to the bound port; returns the fd or -1 after logging the cause.
 */
int	listen_socket(const char *spec, const char *what, int *port);
/*
 * Opens a listening socket on spec's host at a port of lo..hi, trying
 * from *next on and wrapping around (so that a port just closed is taken
 * last); ports another socket holds are skipped without a word.  Sets
 * *port, and *next past it.  Returns the fd, or -1 with errno EADDRINUSE
 * when every port is held, or another cause (logged).
 */
int	listen_socket_range(const char *spec, const char *what, int lo,
	    int hi, int *next, int *port);
/*
 * Loads --token-file and parses --tcpstore-allow into server; returns 0
 * or -1 after logging the cause.  acl_allows() tells whether a peer is
 * in the list (IPv4-mapped IPv6 addresses match IPv4 entries).
 */
int	server_auth_init(void);
struct acl;
int	acl_allows(const struct acl *, const struct sockaddr *);
/* Binds cfg->listen and starts accepting; sets *port. */
int	server_listen(int *port);
/* Accepts on fd (a listening socket) into namespace ns (a reference is
 * taken per connection; NULL: the root).  NULL on failure (fd closed). */
struct evconnlistener *server_listen_fd(int fd, struct ns_ref *ns);
/* Called on the loop thread after the store commits through seq. */
void	server_commit_cb(void *arg, uint64_t seq);
/* Stops accepting and closes every connection (shutdown). */
void	server_shutdown(void);

/*
 * The buffer a reply must be written to: the connection's output, or,
 * in strict mode while the store has uncommitted writes, the held buffer
 * released by server_commit_cb.  Call conn_reply_done() after writing.
 */
struct evbuffer	*conn_reply_buf(struct conn *);
/* The same; durable = 1 holds the reply until everything written so far
 * is committed in any mode with a database (membership changes). */
struct evbuffer	*conn_reply_buf_durable(struct conn *, int durable);
void		 conn_reply_done(struct conn *);
/* Queues c for the flush at the end of this loop pass. */
void		 conn_mark_dirty(struct conn *);
/* Logs "closing <peer>: <why>", counts ek (unless ERRK_COUNT), frees c. */
void		 conn_close(struct conn *, enum err_kind ek, const char *why);
/* The same, but sends what is queued first (at most 1 s). */
void		 conn_close_after_flush(struct conn *, enum err_kind ek,
		    const char *why);
/* 1 when c's unsent replies exceed output_max: adapters stop serving
 * its requests until the peer reads (back-pressure). */
int		 conn_output_full(struct conn *);
void		 conn_set_state(struct conn *, enum conn_state);

/* ---- server_tls.c: TLS on the store port ---- */

/*
 * Loads --tls-cert and --tls-key into server.tls_ctx (nothing when no
 * certificate is configured); returns 0 or -1 after logging the cause,
 * which names the file and the option to fix.
 */
int	server_tls_init(void);
/*
 * SIGHUP: loads the certificate and key again for new connections
 * (rotation); on failure logs why and keeps the current ones.  Open
 * connections keep the context they started with.  Returns 0 or -1.
 */
int	server_tls_reload(void);
/* Frees server.tls_ctx. */
void	server_tls_fini(void);

/* ---- proto_tcpstore.c / proto_native.c: the adapters ---- */

/*
 * Each decodes and serves as many whole requests as buf holds.  Returns
 * the bytes consumed (the caller drains them) and sets c->need when a
 * request is incomplete; or a negative RDZV_E* after closing nothing:
 * the caller closes the connection.  *why is set to a reason for the log.
 */
ssize_t	tcps_serve(struct conn *, const uint8_t *buf, size_t len,
	    const char **why);
void	tcps_conn_free(struct conn *);
ssize_t	native_serve(struct conn *, const uint8_t *buf, size_t len,
	    const char **why);
void	native_conn_free(struct conn *);

/* ---- tcps_group.c: torch process-group keys on the main port ---- */

int	tcps_group_key(struct slice);
void	tcps_group_use(struct conn *, const struct tcps_req *);
void	tcps_group_release(struct conn *);

/* ---- round.c: the rendezvous wired to the loop ---- */

/* Creates server.rz, loads saved jobs, arms the timer. */
int	round_init(int64_t last_call_ms, int64_t lease_ms);
/* A rendezvous request (JOIN .. SUCCEEDED, ADMIN_CLOSE, ADMIN_EVICT),
 * decoded: op and id from its frame, the fields its op has. */
struct round_req {
	uint16_t		 op;
	uint32_t		 id;
	struct slice		 job;
	int64_t			 node_id, round;
	int64_t			 repairable;	/* HEARTBEAT: -1 not said */
	int64_t			 now;		/* ADMIN_EVICT: 1 drop now */
	int64_t			 unjoined;	/* SUCCEEDED, HEARTBEAT:
						 * 0 not said */
	int64_t			 stepped;	/* HEARTBEAT: -1 not said */
	struct slice		 reason;	/* ADMIN_CLOSE */
	struct nat_ready	 ready;		/* READY */
	struct nat_join		 join;		/* JOIN */
	struct nat_failure	 failure;	/* FAILURE */
};
/* Serve r (its op's fields) from c through the state machine: the
 * reply, then the ROUND pushes, ports and timers the event brings.  One
 * an op, called from its row of proto_native.c's table. */
void	round_join(struct conn *c, const struct round_req *r);
void	round_heartbeat(struct conn *c, const struct round_req *r);
void	round_leave(struct conn *c, const struct round_req *r);
void	round_failure(struct conn *c, const struct round_req *r);
void	round_ready(struct conn *c, const struct round_req *r);
void	round_succeeded(struct conn *c, const struct round_req *r);
void	round_admin_close(struct conn *c, const struct round_req *r);
void	round_admin_forget(struct conn *c, const struct round_req *r);
void	round_admin_evict(struct conn *c, const struct round_req *r);
/* c is closing: its nodes get no more pushes. */
void	round_conn_gone(struct conn *c);
/* Acts on a straggler (rz_straggler_replace) and carries it out. */
int	round_straggler_replace(struct slice job, int64_t round, int64_t rank);
/* The reply to a rendezvous op with no payload, or its error (rc < 0). */
void	round_reply_rc(struct conn *c, uint16_t op, uint32_t id, int rc);
/* Pauses (0) or resumes (1) accepting on every round's port. */
void	round_set_accepting(int on);
/* The wall clock in ms (retention; progress reports' ages). */
int64_t	round_wall_ms(void);
void	round_fini(void);

/*
 * ---- docs.c: the operators' JSON documents (PROTOCOL.md "Operators"),
 * served alike by ADMIN_* and /api/.  Each is malloc'ed compact ASCII
 * JSON text, or NULL for an unknown job or no memory.
 */

/* ADMIN_STATUS, /api/status: rdzvd's own status. */
char	*docs_status(void);
/* ADMIN_JOBS, /api/jobs: every job, sorted by id. */
char	*docs_jobs(void);
/*
 * ADMIN_JOB, /api/jobs/JOB: rz_job_doc's document with, on every node,
 * "progress": {"ranks_reporting", "min_step", "max_step",
 * "oldest_report_ms_ago"} from its ranks' "progress/<rank>" keys in the
 * running round's namespace (null: not in the running round, or no rank
 * reported), and "rank_base" on the running round's members.
 */
char	*docs_job(struct slice job);
/* ADMIN_EVENTS, /api/jobs/JOB/events: the events after seq `after`. */
char	*docs_events(struct slice job, int64_t after);
/*
 * /api/jobs/JOB/history: history_doc's samples and marks, and "ranks":
 * [{"rank", "step", "age_ms"}] for each rank of the running round that
 * reported, with "slowest": the rank with the lowest step (the oldest
 * report among equals), or null.
 */
char	*docs_history(struct slice job);

/* ---- progwatch.c: workers' progress reports, one reader, one timer ---- */

struct hist_job;		/* history.c's state of a job */

/* One rank's report as read at a tick. */
struct progwatch_rank {
	int64_t		rank, step, ms, wait;
};
/* A running round's reports, read once at a tick from ranks 0 ..
 * nread - 1: the n found, in rank order. */
struct progwatch_sample {
	const char		*ns;
	int64_t			 round, nread;
	struct progwatch_rank	*r;
	size_t			 n;
};

/* Rank rank's report in namespace ns ("progress/<rank>", or a torch
 * TCPStore client's "/progress/<rank>", = "<step> <unix_ms>
 * [<wait_ms>]"): 0, or -1 when absent or malformed.  *wait is the
 * rank's total wait on its peers in ms (-1 when the report has none). */
int	progwatch_read(struct slice ns, int64_t rank, int64_t *step,
	    int64_t *ms, int64_t *wait);
/* Loads the history (history_init, after round_init) and starts the
 * timer: history's turn every cfg->history_interval_ms, the straggler
 * detector's about once a second. */
int	progwatch_init(void);
void	progwatch_fini(void);
/* Forgets job's history and its rows (the job was purged). */
void	progwatch_drop(const char *job);
/* job's history (NULL: not sampled yet), for history_doc. */
struct hist_job	*progwatch_history(struct slice job);
/* Whether rank of job's round is named a straggler now. */
int	progwatch_named(const char *job, int64_t round, int64_t rank);
/* Its steps/s of work (-1: none yet). */
double	progwatch_speed(const char *job, int64_t round, int64_t rank);
/* The per-job series of /metrics: history's, then the detector's
 * (rdzvd_job_stragglers and the totals). */
void	progwatch_metrics(struct evbuffer *out);

/* ---- history.c: each job's progress over time ---- */

/*
 * Sets the interval and loads the persisted samples: adopt(job) gives
 * the state a job's rows are loaded into (progwatch.c's table holds it),
 * NULL when out of memory.  Returns 0.
 */
int	history_init(struct hist_job *(*adopt)(const char *job));
/* The sampling interval in ms (--history-interval-ms). */
int64_t	history_interval_ms(void);
/* A job's empty state, NULL when out of memory; history_free frees it
 * (NULL: nothing). */
struct hist_job	*history_new(const char *job);
void	history_free(struct hist_job *);
/*
 * History's turn for one job: row is its entry in rz_jobs_doc; pr the
 * reports progwatch.c read (NULL: the job is not running) and doc its
 * rz_job_doc (the members' ranks), wall the wall clock in ms.  Reads the
 * job's new events into marks and, if it is open, takes a sample.
 */
void	history_update(struct hist_job *, struct json_t *row,
	    const struct progwatch_sample *pr, struct json_t *doc,
	    int64_t wall);
/* Drops job's rows (the job was purged). */
void	history_drop(const char *job);
/* {"job", "interval_ms", "samples_max", "samples": [{"time_ms", "step",
 * "ranks", "steps_per_s"}], "marks": [{"time_ms", "kind", "text",
 * "recovery_ms"}], "counts": {kind: n}} of job, whose state is hj
 * (NULL: not sampled yet), or NULL for an unknown job. */
struct json_t	*history_doc(struct hist_job *hj, struct slice job);
/* The per-job series of /metrics of the n jobs v, one label job="..."
 * each. */
void	history_metrics(struct evbuffer *out, struct hist_job *const *v,
	    size_t n);
/* Writes s as a Prometheus label value: '\\', '"' and newline escaped. */
void	history_label(struct evbuffer *out, const char *s);

/* ---- http.c: /healthz, /readyz and /metrics ---- */

/* Starts the HTTP listener on cfg->http (if set); sets *port (0 if off). */
int	http_start(int *port);
void	http_stop(void);

/* ---- serve.c: the daemon on an event base (main and embed.h) ---- */

/*
 * The stores that keep the state beyond memory: sqlite at --db and etcd
 * with --store (store.h).  rdzvd's main() hands serve.c these; the
 * embedded rdzvd of rdzv-agent hands none and keeps its state in memory,
 * so that only rdzvd links sqlite and libcurl.
 */
struct rdzvd_stores {
	struct store	*(*open)(const char *path, enum store_durability,
			    unsigned window_ms, struct event_base *,
			    struct kv *, void (*)(void *, uint64_t), void *);
	int		 (*etcd_stand_by)(const struct store_etcd_conf *,
			    enum store_durability, struct event_base *,
			    void (*)(struct store_etcd *, void *), void *);
	void		 (*etcd_stand_by_stop)(void);
	struct store	*(*etcd_serve)(struct store_etcd *,
			    enum store_durability, unsigned window_ms,
			    struct event_base *, struct kv *,
			    void (*)(void *, uint64_t), void *);
	void		 (*etcd_status)(struct store_etcd_status *);
};

/*
 * Starts kv, store, rendezvous and listeners on base; sets the ports.
 * With --store etcd only HTTP starts (*port is 0): the rdzvd stands by
 * until it leads, then opens the rest and calls leading(port) on the
 * loop; if it cannot, server.failed is set and the loop exits.  stores
 * NULL: memory alone (anything else is refused, naming rdzvd).
 */
int	rdzvd_serve_start(struct event_base *, struct rdzvd_config *,
	    const struct rdzvd_stores *stores, int *port, int *http_port,
	    void (*leading)(int port));
/* Closes connections, commits the store and frees everything. */
void	rdzvd_serve_stop(void);
/* Store figures for /metrics (zeros in memory mode). */
void	rdzvd_store_stats(struct store_stats *);
/* The etcd leadership for /metrics and the status page (zeros without). */
void	rdzvd_etcd_status(struct store_etcd_status *);

/* Writes "PORT\n" to path atomically (temp file + rename). */
int	write_port_file(const char *path, int port);

#endif /* RDZVD_H */
