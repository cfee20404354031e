/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rdzv.c: the agent's asynchronous native connection to rdzvd.
 *
 * Owns one bufferevent to rdzvd, the JOIN of this agent's node, the
 * heartbeat timer, decoding ROUND pushes, the FAILURE / SUCCEEDED reports
 * (kept until acknowledged, sent again after a reconnect) and LEAVE.
 * When the connection drops it reconnects with a capped backoff and
 * JOINs again with the same instance id, which rdzvd takes as the same
 * node: a running round goes on untouched.
 *
 * With a CA (--tls_ca, RDZV_TLS_CA) the connection is TLS: the TCP
 * connect is made by a socket bufferevent as without TLS, then its
 * socket moves to an OpenSSL bufferevent with a fresh SSL for the
 * handshake (rdzv_tls_start), and the native protocol runs inside
 * (common/tls.h says why libevent's way here and others elsewhere).  A
 * certificate rdzvd's CA did not sign, or a peer that does not speak
 * TLS, is a configuration error and fatal (a plaintext rdzvd answers a
 * ClientHello with a refusal preamble, which OpenSSL reports as a
 * protocol error); a connection lost during the handshake is retried like
 * any other drop: rdzvd restarting, draining or at --max-connections
 * closes connections it cannot serve, and an agent must outlive that.
 *
 * The native handshake (preamble, token challenge) is common/handshake.c's
 * machine: HELLO feeds it what rdzvd sends and sends what it answers.
 *
 *   IDLE --rdzv_connect--> CONNECTING --connected--> HELLO
 *     ^                       | connected, TLS         ^ | handshake done:
 *     |                       v                        | v send JOIN
 *     |                      TLS --TLS handshake done--+ JOINING <--+
 *     |                                             JOIN | reply     | node
 *     |                                                  v           | unknown
 *     +--rdzv_drop (EOF, error, silence)-------------- JOINED -------+
 *   rdzv_shutdown: any state -> CLOSED; rdzv_fatal: shutdown, then tell
 * Every transition is made by rdzv_set_state(), which checks it against
 * rc_next[] and logs it at debug.
 *
 * Why about 1,450 lines: it is one connection's life (connect, TLS, the
 * handshake, JOIN, beats, the reports kept until acknowledged,
 * reconnects, the pushes decoded), and its state (rc_*) and timers are
 * shared by all of it; cut by topic, each part would reach into the
 * others' state.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "agent.h"
#include "auth.h"
#include "handshake.h"
#include "hostport.h"
#include "log.h"
#include "mono.h"
#include "rdzv_err.h"
#include "tls.h"
#include "wire.h"

#define RDZV_CONNECT_MS		5000	/* one connect + preamble attempt */
#define RDZV_BACKOFF_MIN_MS	20
#define RDZV_NEXT_EP_MS		5	/* to the next rdzvd of a list */
#define RDZV_BACKOFF_MAX_MS	1000
#define RDZV_DEFAULT_LEASE_MS	5000	/* when rdzvd chooses the lease */

enum rdzv_state {
	RC_IDLE,	/* not connected; the reconnect timer may be armed */
	RC_CONNECTING,	/* TCP connect in progress */
	RC_TLS,		/* TLS handshake in progress */
	RC_HELLO,	/* native handshake in progress (rc_hs) */
	RC_JOINING,	/* JOIN sent */
	RC_JOINED,	/* node attached: heartbeats, pushes, reports */
	RC_CLOSED,	/* shut down */
	RC_NSTATES
};

static const char *const rc_names[RC_NSTATES] = {
	"idle", "connecting", "tls", "hello", "joining", "joined", "closed"
};

#define RC_BIT(s)	(1u << (s))
/* The states each state may move to (the diagram above). */
static const unsigned rc_next[RC_NSTATES] = {
	[RC_IDLE] = RC_BIT(RC_IDLE) | RC_BIT(RC_CONNECTING) | RC_BIT(RC_CLOSED),
	[RC_CONNECTING] = RC_BIT(RC_TLS) | RC_BIT(RC_HELLO) | RC_BIT(RC_IDLE) |
	    RC_BIT(RC_CLOSED),
	[RC_TLS] = RC_BIT(RC_HELLO) | RC_BIT(RC_IDLE) | RC_BIT(RC_CLOSED),
	[RC_HELLO] = RC_BIT(RC_JOINING) | RC_BIT(RC_IDLE) | RC_BIT(RC_CLOSED),
	[RC_JOINING] = RC_BIT(RC_JOINED) | RC_BIT(RC_IDLE) | RC_BIT(RC_CLOSED),
	[RC_JOINED] = RC_BIT(RC_JOINING) | RC_BIT(RC_IDLE) | RC_BIT(RC_CLOSED),
	[RC_CLOSED] = 0,
};

/*
 * A report that must reach rdzvd even across a reconnect: the fields of
 * its op's message but the job and node id, which are set when it is
 * sent (a reconnect may bring a new node id).
 */
struct rdzv_report {
	uint16_t		 op;		/* FAILURE, SUCCEEDED or READY */
	uint32_t		 id;		/* request id when sent, else 0 */
	int64_t			 round;
	int64_t			 unjoined;	/* SUCCEEDED: its last field */
	struct nat_failure	 failure;	/* FAILURE */
	struct nat_ready	 ready;		/* READY */
	char			*message;	/* failure.message's bytes */
	TAILQ_ENTRY(rdzv_report) entry;
};
TAILQ_HEAD(rdzv_reports, rdzv_report);

static struct event_base		*rc_base;
static const struct agent_config	*rc_cfg;
static const struct rdzv_cbs		*rc_cbs;
static void				*rc_arg;
static enum rdzv_state			 rc_state = RC_IDLE;
static struct bufferevent		*rc_bev;
/* --rdzv_endpoint A,B,C: rdzvds of which one leads; tried in turn. */
#define RDZV_EP_MAX	16
static struct rdzv_ep {
	char		 host[256];
	char		 port[16];
	struct addrinfo	*addrs;		/* resolved on first use */
} rc_eps[RDZV_EP_MAX];
static size_t				 rc_nep;
static size_t				 rc_ep;		/* being tried */
static size_t				 rc_joined_ep;	/* last joined */
static size_t				 rc_pass;	/* quick tries left */
static int				 rc_addr_next;
static char				 rc_instance[33];
static char				 rc_hostname[256];
static int64_t				 rc_node_id = -1;
static uint32_t				 rc_next_id;
static uint32_t				 rc_join_id, rc_hb_id, rc_leave_id;
static int				 rc_ever_joined;
static int				 rc_leaving;	/* LEAVE asked for */
static int				 rc_backoff_ms;
static int				 rc_repairable;	/* HEARTBEAT says */
static int				 rc_hb_repairable; /* the one in flight */
static int64_t				 rc_hb_unjoined;	/* the mask it carried */
static int64_t				 rc_hb_stepped = -1; /* its stepped,
							   * -1 none */
static int				 rc_no_unjoined;	/* rdzvd is older */
static int				 rc_no_stepped;	/* rdzvd is older */
static int64_t				 rc_down_since;	/* first failure */
static int64_t				 rc_last_rx;	/* mono_ms() */
static struct event			*rc_retry_ev, *rc_hb_ev, *rc_leave_ev,
					*rc_conn_ev;
static struct rdzv_reports		 rc_reports =
    TAILQ_HEAD_INITIALIZER(rc_reports);
static struct wire_limits		 rc_lim;
static unsigned				 rc_gen;	/* bumps on drop */
static uint8_t				*rc_token;	/* NULL: none */
static size_t				 rc_tokenlen;
static char				 rc_wtoken[PATH_MAX]; /* workers' */
static int				 rc_wtoken_ours; /* unlink at end */
static struct hs			 rc_hs;		/* in RC_HELLO */
static int				 rc_hb_ms;	/* heartbeat period */
static int				 rc_lease_ms;	/* the job's, from JOIN */
static SSL_CTX				*rc_tls;	/* NULL: plaintext */

static void	rdzv_connect(void);
static void	rdzv_drop(const char *why);
static void	rdzv_event_cb(struct bufferevent *, short, void *);
static void	rdzv_hb_cb(evutil_socket_t, short, void *);
static int64_t	rdzv_hb_stepped(void);

/* Moves the link to state s: the only place rc_state changes. */
static void
rdzv_set_state(enum rdzv_state s)
{
	if (!(rc_next[rc_state] & RC_BIT(s)))
		fatalx("rendezvous link: no transition %s -> %s",
		    rc_names[rc_state], rc_names[s]);
	if (s != rc_state)
		log_debug("rendezvous link: %s -> %s", rc_names[rc_state],
		    rc_names[s]);
	rc_state = s;
}

static void
rdzv_timer(struct event *ev, int ms)
{
	struct timeval	tv;

	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(ev, &tv);
}

const char *
rdzv_instance(void)
{
	return (rc_instance);
}

int64_t
rdzv_node_id(void)
{
	return (rc_node_id);
}

static struct evbuffer *
rdzv_out(void)
{
	return (bufferevent_get_output(rc_bev));
}

/* The next request id, never 0 (0 means "none outstanding"). */
static uint32_t
rdzv_next_id(void)
{
	if (++rc_next_id == 0)
		rc_next_id = 1;
	return (rc_next_id);
}

/* Starts a request frame; returns its id (0 when not connected). */
static uint32_t
rdzv_begin(struct nat_wr *wr, uint16_t op)
{
	uint32_t	id;

	if (rc_bev == NULL)
		return (0);
	id = rdzv_next_id();
	if (nat_frame_begin(wr, rdzv_out(), op, 0, id) != 0)
		fatalx("out of memory");
	return (id);
}

static void
rdzv_end(struct nat_wr *wr)
{
	if (nat_frame_end(wr) != 0)
		fatalx("out of memory");
}

static void
rdzv_put_str(struct nat_wr *wr, const char *s)
{
	if (nat_put_bytes(wr, s, strlen(s)) != 0)
		fatalx("out of memory");
}

static void
rdzv_put_i64(struct nat_wr *wr, int64_t v)
{
	if (nat_put_i64(wr, v) != 0)
		fatalx("out of memory");
}

/* JOIN, encoded by nat_join_put (common/wire_native.c owns its layout). */
static void
rdzv_send_join(void)
{
	struct nat_join	 j;

	memset(&j, 0, sizeof j);
	j.job = slice_str(rc_cfg->rdzv_id);
	j.instance = slice_str(rc_instance);
	j.host = slice_str(rc_hostname);
	j.addr = slice_str(rc_cfg->local_addr != NULL ? rc_cfg->local_addr :
	    rc_hostname);
	j.pid = getpid();
	j.local_world_size = rc_cfg->nproc;
	j.min_nodes = rc_cfg->nnodes_min;
	j.max_nodes = rc_cfg->nnodes_max;
	j.max_restarts = rc_cfg->max_restarts;
	j.last_call_ms = rc_cfg->last_call_ms;
	j.lease_ms = rc_cfg->lease_ms;
	/* Static: group rank = node rank (>= 0, checked by cli.c). */
	j.rank = rc_cfg->rdzv_mode == AGENT_RDZV_STATIC ? rc_cfg->node_rank :
	    -1;
	j.max_repairs = rc_cfg->max_repairs;
	j.repair_timeout_ms = rc_cfg->repair_timeout_ms;
	j.straggler_ratio_pm = rc_cfg->strag_ratio_pm;
	j.straggler_window_ms = rc_cfg->strag_window_ms;
	j.straggler_action = rc_cfg->strag_action;
	j.replicas = rc_cfg->replicas;
	rc_join_id = rdzv_next_id();
	if (nat_join_put(rdzv_out(), rc_join_id, &j) != 0)
		fatalx("out of memory");
	rdzv_set_state(RC_JOINING);
	log_debug("JOIN %s as instance %s", rc_cfg->rdzv_id, rc_instance);
}

/* Sends r; FAILURE and READY through their encoders in wire_native.c. */
static void
rdzv_send_report(struct rdzv_report *r)
{
	struct nat_wr	wr;
	int		rc = 0;

	switch (r->op) {
	case NAT_OP_FAILURE:
		r->failure.job = slice_str(rc_cfg->rdzv_id);
		r->failure.node_id = rc_node_id;
		r->failure.round = r->round;
		r->id = rdzv_next_id();
		rc = nat_failure_put(rdzv_out(), r->id, &r->failure);
		break;
	case NAT_OP_READY:
		r->ready.job = slice_str(rc_cfg->rdzv_id);
		r->ready.node_id = rc_node_id;
		r->ready.round = r->round;
		r->id = rdzv_next_id();
		rc = nat_ready_put(rdzv_out(), r->id, &r->ready);
		break;
	default:	/* SUCCEEDED: b job, i node_id, i round[, i unjoined] */
		r->id = rdzv_begin(&wr, r->op);
		rdzv_put_str(&wr, rc_cfg->rdzv_id);
		rdzv_put_i64(&wr, rc_node_id);
		rdzv_put_i64(&wr, r->round);
		if (r->unjoined != 0)	/* an older rdzvd never sees it */
			rdzv_put_i64(&wr, r->unjoined);
		rdzv_end(&wr);
		break;
	}
	if (rc != 0)
		fatalx("out of memory");
}

static void
rdzv_send_leave(void)
{
	struct nat_wr	wr;

	rc_leave_id = rdzv_begin(&wr, NAT_OP_LEAVE);
	rdzv_put_str(&wr, rc_cfg->rdzv_id);
	rdzv_put_i64(&wr, rc_node_id);
	rdzv_end(&wr);
}

static void
rdzv_left(void)
{
	if (!rc_leaving)
		return;
	rc_leaving = 0;
	evtimer_del(rc_leave_ev);
	if (rc_cbs->left != NULL)
		rc_cbs->left(rc_arg);
}

static void
rdzv_fatal(int code, const char *msg)
{
	rdzv_shutdown();
	rdzv_left();	/* a pending LEAVE will not be answered now */
	if (rc_cbs->fatal != NULL)
		rc_cbs->fatal(code, msg, rc_arg);
}

/* Decodes a ROUND push and hands it to main. */
static void
rdzv_round_push(const struct nat_msg *m)
{
	struct rdzv_round	 r;
	struct nat_round	 p;
	struct slice		 ns, msg;
	size_t			 i;

	if (nat_round_decode(m->payload, &p) != 0) {
		rdzv_drop("malformed ROUND push");
		return;
	}
	memset(&r, 0, sizeof r);
	r.round = p.round;
	r.state = p.state;
	r.node_id = p.node_id;
	r.group_rank = p.group_rank;
	r.group_world_size = p.group_world_size;
	r.world_size = p.world_size;
	r.rank_base = p.rank_base;
	r.restart_count = p.restart_count;
	r.max_restarts = p.max_restarts;
	r.store_port = p.store_port;
	r.kind = p.kind;
	r.donor = p.donor;
	r.live_local = p.live_local;
	ns = p.store_ns;
	msg = p.message;
	if (!slice_eq(p.job, slice_str(rc_cfg->rdzv_id))) {
		log_warnx("ROUND push for another job ignored");
		return;
	}
	if (rc_node_id != -1 && r.node_id != rc_node_id) {
		log_warnx("ROUND push for node %lld (we are %lld) ignored",
		    (long long)r.node_id, (long long)rc_node_id);
		return;
	}
	if (ns.len >= sizeof r.store_ns) {
		rdzv_drop("store namespace too long in a ROUND push");
		return;
	}
	memcpy(r.store_ns, ns.p, ns.len);
	r.store_ns[ns.len] = '\0';
	i = msg.len < sizeof r.message ? msg.len : sizeof r.message - 1;
	memcpy(r.message, msg.p, i);
	r.message[i] = '\0';
	log_debug("ROUND %lld state %lld group_rank %lld/%lld rank_base %lld "
	    "world %lld restarts %lld port %lld", (long long)r.round,
	    (long long)r.state, (long long)r.group_rank,
	    (long long)r.group_world_size, (long long)r.rank_base,
	    (long long)r.world_size, (long long)r.restart_count,
	    (long long)r.store_port);
	if (rc_cbs->round != NULL)
		rc_cbs->round(&r, rc_arg);
}

/* Decodes a STRAGGLER or DRAIN push and hands it to main. */
static void
rdzv_straggler_push(const struct nat_msg *m)
{
	struct nat_straggler	p;
	const char		*name = m->op == NAT_OP_DRAIN ? "DRAIN" :
				    "STRAGGLER";
	char			 why[AGENT_MSG_MAX];
	int			 drain = m->op == NAT_OP_DRAIN;

	if (nat_straggler_decode(m->payload, &p) != 0) {
		log_warnx("malformed %s push", name);
		rdzv_drop("malformed push");
		return;
	}
	if (!slice_eq(p.job, slice_str(rc_cfg->rdzv_id)) ||
	    p.node_id != rc_node_id || (drain ? p.local_rank != -1 :
	    p.local_rank < 0 || p.local_rank >= rc_cfg->nproc)) {
		log_warnx("%s push for another job, node or local rank "
		    "ignored", name);
		return;
	}
	if (!drain) {
		if (rc_cbs->straggler != NULL)
			rc_cbs->straggler(p.round, (int)p.local_rank, rc_arg);
		return;
	}
	log_escape(why, sizeof why, p.message.p, p.message.len);
	if (rc_cbs->drain != NULL)
		rc_cbs->drain(p.round, why, rc_arg);
}

static void
rdzv_joined(const struct nat_msg *m)
{
	struct rdzv_report	*r;
	struct nat_joined	 jd;
	int64_t			 node_id, restarts, lease;

	if (nat_joined_decode(m->payload, &jd) != 0) {
		rdzv_drop("malformed JOIN reply");
		return;
	}
	node_id = jd.node_id;
	restarts = jd.restart_count;
	lease = jd.lease_ms;
	/* The job's lease rules (its first JOIN chose it): beat often
	 * enough for it, whatever this agent was told. */
	if (lease > 0 && lease < INT_MAX) {
		rc_lease_ms = (int)lease;
		if (rc_hb_ms > rc_lease_ms / 4) {
			rc_hb_ms = rc_lease_ms / 4 < 10 ? 10 : rc_lease_ms / 4;
			log_info("job %s has a %d ms lease: heartbeat every %d ms",
			    rc_cfg->rdzv_id, rc_lease_ms, rc_hb_ms);
		}
	}
	if (rc_node_id != -1 && node_id != rc_node_id)
		log_warnx("rdzvd gave a new node id %lld (was %lld)",
		    (long long)node_id, (long long)rc_node_id);
	rc_node_id = node_id;
	rdzv_set_state(RC_JOINED);
	rc_backoff_ms = 0;
	rc_joined_ep = rc_ep;
	rc_pass = rc_nep - 1;
	if (rc_ever_joined)
		log_info("rejoined job %s as node %lld", rc_cfg->rdzv_id,
		    (long long)node_id);
	else
		log_info("joined job %s as node %lld (restarts %lld)",
		    rc_cfg->rdzv_id, (long long)node_id, (long long)restarts);
	rc_ever_joined = 1;
	TAILQ_FOREACH(r, &rc_reports, entry)
		rdzv_send_report(r);
	if (rc_leaving)
		rdzv_send_leave();
	rdzv_timer(rc_hb_ev, rc_hb_ms);
	if (rc_cbs->joined != NULL)
		rc_cbs->joined(node_id, restarts, rc_arg);
}

static void
rdzv_reply(const struct nat_msg *m)
{
	struct rdzv_report	*r;
	struct nat_rd		 rd;
	struct slice		 s;
	char			 msg[512];
	int64_t			 code = 0;

	msg[0] = '\0';
	if (m->flags & NAT_F_ERROR) {
		nat_rd_init(&rd, m->payload);
		if (nat_get_i64(&rd, &code) != 0 ||
		    nat_get_bytes(&rd, &s) != 0 || nat_rd_end(&rd) != 0) {
			rdzv_drop("malformed error reply");
			return;
		}
		log_escape(msg, sizeof msg, s.p, s.len);
	}
	if (m->id == rc_join_id && rc_join_id != 0) {
		rc_join_id = 0;
		if (code == 0) {
			rdzv_joined(m);
			return;
		}
		if (code == RDZV_ECLOSED || code == RDZV_EINVAL) {
			char	buf[640];

			snprintf(buf, sizeof buf, "rdzvd refused to join job "
			    "%s: %s%s%s", rc_cfg->rdzv_id,
			    rdzv_strerror((int)code), *msg ? ": " : "", msg);
			rdzv_fatal((int)code, buf);
			return;
		}
		log_warnx("JOIN failed: %s: %s", rdzv_strerror((int)code),
		    msg);
		rdzv_drop("JOIN refused");
		return;
	}
	if (m->id == rc_hb_id && rc_hb_id != 0) {
		rc_hb_id = 0;
		if (code == RDZV_EPROTO && rc_hb_stepped >= 0) {
			/* An rdzvd older than HEARTBEAT's stepped (the
			 * last field): the beats go without it (the next
			 * one renews the lease). */
			log_info("rdzvd takes no stepped round in HEARTBEAT "
			    "(an older rdzvd): not sent again");
			rc_no_stepped = 1;
			if (rc_state == RC_JOINED)
				rdzv_hb_cb(-1, 0, NULL);
			return;
		} else if (code == RDZV_EPROTO && rc_hb_unjoined != 0 &&
		    !rc_no_unjoined) {
			/* Older still: no unjoined either. */
			log_info("rdzvd takes no replacement mask in "
			    "HEARTBEAT (an older rdzvd): not sent again");
			rc_no_unjoined = 1;
			if (rc_state == RC_JOINED)
				rdzv_hb_cb(-1, 0, NULL);
			return;
		} else if (code == RDZV_ENOTFOUND) {
			/* rdzvd dropped this node (lease): join again. */
			log_warnx("rdzvd no longer knows node %lld: rejoining",
			    (long long)rc_node_id);
			rdzv_send_join();
		} else if (code != 0)
			log_warnx("HEARTBEAT: %s: %s",
			    rdzv_strerror((int)code), msg);
		/* Whether the workers can repair changed while it was in
		 * flight: rdzvd must know before a failure comes, not at the
		 * next beat (a kill then restarted a job that could repair). */
		if (rc_state == RC_JOINED && (rc_hb_repairable != rc_repairable ||
		    (!rc_no_unjoined && rc_cbs->unjoined != NULL &&
		    rc_cbs->unjoined(rc_arg) != rc_hb_unjoined) ||
		    rdzv_hb_stepped() > rc_hb_stepped))
			rdzv_hb_cb(-1, 0, NULL);
		return;
	}
	if (m->id == rc_leave_id && rc_leave_id != 0) {
		rc_leave_id = 0;
		if (code != 0)
			log_warnx("LEAVE: %s: %s", rdzv_strerror((int)code),
			    msg);
		rdzv_left();
		return;
	}
	TAILQ_FOREACH(r, &rc_reports, entry) {
		if (r->id != m->id)
			continue;
		if (code != 0)
			log_warnx("%s for round %lld: %s: %s",
			    r->op == NAT_OP_FAILURE ? "FAILURE" :
			    r->op == NAT_OP_READY ? "READY" : "SUCCEEDED",
			    (long long)r->round, rdzv_strerror((int)code), msg);
		TAILQ_REMOVE(&rc_reports, r, entry);
		free(r->message);
		free(r);
		return;
	}
	log_debug("reply to unknown request %u ignored", m->id);
}

/* Handles one whole frame of the session; may drop the connection. */
static void
rdzv_frame(const struct nat_msg *m)
{
	if (m->flags & NAT_F_PUSH) {
		if (m->op == NAT_OP_ROUND)
			rdzv_round_push(m);
		else if (m->op == NAT_OP_STRAGGLER || m->op == NAT_OP_DRAIN)
			rdzv_straggler_push(m);
		else
			log_debug("push op %u ignored", m->op);
		return;
	}
	if (m->flags & NAT_F_REPLY)
		rdzv_reply(m);
}

/* Starts the native handshake on a connection that is up. */
static void
rdzv_hello(void)
{
	struct hs_config	cfg;

	memset(&cfg, 0, sizeof cfg);
	cfg.token = rc_token;
	cfg.tokenlen = rc_tokenlen;
	cfg.endpoint = rc_cfg->endpoint;
	cfg.token_flag = "--token_file";
	cfg.ca_flag = "--tls_ca";
	if (hs_start(&rc_hs, &cfg, rdzv_out()) != 0)
		fatalx("out of memory");
	rdzv_set_state(RC_HELLO);
}

/*
 * Feeds the handshake what rdzvd sent.  Returns 1 once it is done (JOIN
 * sent; frames may follow in in), else 0.  Bytes that are not rdzvd's
 * are a drop like any other (retried); a refusal (TLS required, version,
 * token) is a configuration error that retrying cannot mend: fatal.
 */
static int
rdzv_read_hello(struct evbuffer *in)
{
	const uint8_t	*p;
	size_t		 len, used;
	int		 rv;

	if ((len = evbuffer_get_length(in)) == 0)
		return (0);
	if ((p = evbuffer_pullup(in, -1)) == NULL)
		fatalx("out of memory");
	rv = hs_input(&rc_hs, p, len, &used, rdzv_out());
	evbuffer_drain(in, used);
	if (rv == 0)
		return (0);
	if (rv == RDZV_ENOMEM)
		fatalx("out of memory");
	if (rv == RDZV_EPROTO) {
		rdzv_drop(hs_why(&rc_hs));
		return (0);
	}
	if (rv < 0) {
		rdzv_fatal(rv, hs_why(&rc_hs));
		return (0);
	}
	evtimer_del(rc_conn_ev);
	rdzv_send_join();
	return (1);
}

static void
rdzv_read_cb(struct bufferevent *bev, void *arg)
{
	struct evbuffer	*in = bufferevent_get_input(bev);
	struct nat_msg	 m;
	const uint8_t	*p;
	size_t		 len, need, flen;
	unsigned	 gen = rc_gen;
	int		 rv;

	rc_last_rx = mono_ms();
	if (rc_state == RC_HELLO && !rdzv_read_hello(in))
		return;
	while (gen == rc_gen && rc_bev != NULL &&
	    (len = evbuffer_get_length(in)) >= 4) {
		p = evbuffer_pullup(in, 4);
		flen = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 |
		    (size_t)p[3] << 24;
		if (flen > nat_frame_max(&rc_lim)) {
			rdzv_drop("frame too big");
			return;
		}
		flen += 4;
		if (len < flen)
			return;
		p = evbuffer_pullup(in, flen);
		rv = nat_decode(p, flen, &rc_lim, &m, &need);
		if (rv <= 0) {
			rdzv_drop("malformed frame");
			return;
		}
		rdzv_frame(&m);
		if (gen != rc_gen || rc_bev == NULL)
			return;		/* dropped: the buffer is gone */
		evbuffer_drain(in, rv);
	}
}

/*
 * Why the TLS bufferevent bev failed, in why: OpenSSL's reason, which
 * libevent took off OpenSSL's queue into its own, else the socket's.
 * Returns the OpenSSL error, 0 when there was none.
 */
static unsigned long
rdzv_tls_error(struct bufferevent *bev, int sockerr, char *why,
    size_t whysz)
{
	unsigned long	 e, first;
	const char	*r;

	/*
	 * libevent hands back the most recent error first, and mixes in
	 * SSL_get_error()'s bare codes (SSL_ERROR_SYSCALL for a connection
	 * closed or reset mid-handshake), which name no OpenSSL library:
	 * only a real library error counts.
	 */
	first = 0;
	while ((e = bufferevent_get_openssl_error(bev)) != 0)
		if (first == 0 && ERR_GET_LIB(e) != 0)
			first = e;
	if (first != 0 && (r = ERR_reason_error_string(first)) != NULL)
		strlcpy(why, r, whysz);
	else if (first != 0)
		ERR_error_string_n(first, why, whysz);
	else if (sockerr != 0)
		strlcpy(why, evutil_socket_error_to_string(sockerr), whysz);
	else
		strlcpy(why, "connection closed", whysz);
	return (first);
}

/* Whether e is OpenSSL 3's word for a peer that closed without a TLS
 * close_notify: an end of file, for us. */
static int
rdzv_tls_eof(unsigned long e)
{
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
	return (ERR_GET_LIB(e) == ERR_LIB_SSL &&
	    ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING);
#else
	return (0);
#endif
}

/*
 * A handshake was cut short (closed, reset or timed out) after the TCP
 * connect worked: rdzvd going away or shedding load, an ordinary drop
 * that the reconnect timeout bounds.
 */
static void
rdzv_tls_cut(const char *reason)
{
	char	why[600];

	snprintf(why, sizeof why, "TLS handshake cut short: %s", reason);
	rdzv_drop(why);
}

/*
 * The handshake failed.  A certificate that does not verify, or an
 * answer that is not TLS, is a configuration error: retrying cannot
 * help, so the agent stops as it does for a refused token.  A connection
 * lost on the way is rdzv_tls_cut's to judge.
 */
static void
rdzv_tls_failed(struct bufferevent *bev, int sockerr)
{
	SSL		*ssl = bufferevent_openssl_get_ssl(bev);
	unsigned long	 e;
	char		 head[320], reason[256], why[600], msg[800];

	snprintf(head, sizeof head, "TLS handshake with %s failed",
	    rc_cfg->endpoint);
	e = rdzv_tls_error(bev, sockerr, reason, sizeof reason);
	if (ssl != NULL && SSL_get_verify_result(ssl) != X509_V_OK) {
		rdzv_tls_why(ssl, head, why, sizeof why);
		snprintf(msg, sizeof msg, "%s (is --tls_ca the CA that signed "
		    "rdzvd's --tls-cert?)", why);
		rdzv_fatal(RDZV_ETLS, msg);
		return;
	}
	snprintf(msg, sizeof msg, "%s: %s (is rdzvd started with "
	    "--tls-cert?)", head, reason);
	if (e != 0 && !rdzv_tls_eof(e)) {
		rdzv_fatal(RDZV_ETLS, msg);
		return;
	}
	rdzv_tls_cut(reason);
}

/* The TCP connection is up: move its socket into a TLS bufferevent. */
static void
rdzv_tls_start(void)
{
	SSL	*ssl;
	char	 why[512];
	int	 fd;

	if ((ssl = rdzv_tls_client_new(rc_tls, rc_eps[rc_ep].host, why,
	    sizeof why)) == NULL) {
		rdzv_fatal(RDZV_ETLS, why);
		return;
	}
	fd = bufferevent_getfd(rc_bev);
	/* Detached first, so that freeing the old one keeps it open. */
	bufferevent_setfd(rc_bev, -1);
	bufferevent_free(rc_bev);
	rc_bev = bufferevent_openssl_socket_new(rc_base, fd, ssl,
	    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
	if (rc_bev == NULL) {
		/* Whether libevent freed ssl on the way out varies by
		 * version: leak it rather than risk freeing it twice. */
		close(fd);
		rdzv_drop("out of memory");
		return;
	}
	/* A restarting rdzvd closes without a TLS close_notify: that is
	 * an end of file like any other, not an attack on our frames
	 * (each has its length; a short one is just a drop). */
	bufferevent_openssl_set_allow_dirty_shutdown(rc_bev, 1);
	bufferevent_setcb(rc_bev, rdzv_read_cb, NULL, rdzv_event_cb, NULL);
	bufferevent_enable(rc_bev, EV_READ | EV_WRITE);
	rdzv_set_state(RC_TLS);
}

static void
rdzv_event_cb(struct bufferevent *bev, short what, void *arg)
{
	char	why[256];
	int	fd, one = 1, idle = 5, intvl = 2, cnt = 3, err;

	/* errno means something only for an error (not for an EOF). */
	err = (what & BEV_EVENT_ERROR) ? EVUTIL_SOCKET_ERROR() : 0;
	if ((what & BEV_EVENT_CONNECTED) && rc_state == RC_CONNECTING) {
		fd = bufferevent_getfd(bev);
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
		    sizeof one);
		(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one,
		    sizeof one);
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle,
		    sizeof idle);
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl,
		    sizeof intvl);
		(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt,
		    sizeof cnt);
		if (rc_tls != NULL) {
			rdzv_tls_start();
			return;
		}
	}
	if (what & BEV_EVENT_CONNECTED) {
		rc_last_rx = mono_ms();
		rdzv_hello();
		return;
	}
	if (rc_state == RC_TLS) {
		rdzv_tls_failed(bev, err);
		return;
	}
	if (what & BEV_EVENT_ERROR) {
		if (rc_tls == NULL || rc_state == RC_CONNECTING)
			strlcpy(why, evutil_socket_error_to_string(err),
			    sizeof why);
		else if (rdzv_tls_eof(rdzv_tls_error(bev, err, why,
		    sizeof why)))
			what |= BEV_EVENT_EOF;
	}
	if (what & BEV_EVENT_EOF)
		rdzv_drop("rdzvd closed the connection");
	else if (what & BEV_EVENT_ERROR)
		rdzv_drop(why);
}

/*
 * Gives up on a rendezvous unreachable for down ms, saying whose it was:
 * one an agent hosts (static: node rank 0's; c10d maybe) ends with that
 * agent, which is what the other nodes must hear.
 */
static void
rdzv_unreachable(int64_t down, const char *why)
{
	const char	*whose, *hint = "";
	char		 buf[1024];

	switch (rc_cfg->rdzv_mode) {
	case AGENT_RDZV_STATIC:
		whose = "the static rendezvous of node rank 0's rdzv-agent";
		break;
	case AGENT_RDZV_C10D:
		whose = "the c10d rendezvous (hosted by the rdzv-agent on its "
		    "host, or rdzvd)";
		break;
	default:
		whose = "rdzvd";
		break;
	}
	if (rc_cfg->rdzv_mode != AGENT_RDZV_RDZVD)
		hint = rc_ever_joined ? ": its host is gone (node failed or "
		    "agent killed); a rendezvous hosted by an agent ends with "
		    "it, as torchrun's does: run rdzvd for one that outlives "
		    "any node" : ": has its host started?";
	snprintf(buf, sizeof buf, "%s at %s unreachable for %lld ms (%s)%s",
	    whose, rc_cfg->endpoint, (long long)down, why, hint);
	rdzv_fatal(RDZV_ECONN, buf);
}

/* Tears the connection down and schedules the next attempt. */
static void
rdzv_drop(const char *why)
{
	struct rdzv_report	*r;
	int64_t			 down, limit;
	int			 ms, jitter;

	if (rc_state == RC_CLOSED)
		return;
	if (rc_state == RC_JOINED || rc_state == RC_JOINING)
		log_warnx("connection to the %s rendezvous %s lost: %s",
		    rc_cfg->rdzv_backend, rc_cfg->endpoint, why);
	else
		log_debug("connecting to the %s rendezvous %s: %s",
		    rc_cfg->rdzv_backend, rc_cfg->endpoint, why);
	/* An outage is timed from the loss of a joined connection. */
	if (rc_state == RC_JOINED)
		rc_down_since = mono_ms();
	rc_gen++;
	if (rc_bev != NULL)
		bufferevent_free(rc_bev);
	rc_bev = NULL;
	rdzv_set_state(RC_IDLE);
	rc_join_id = rc_hb_id = rc_leave_id = 0;
	TAILQ_FOREACH(r, &rc_reports, entry)
		r->id = 0;
	evtimer_del(rc_hb_ev);
	evtimer_del(rc_conn_ev);
	if (rc_leaving) {
		/* Nobody to say goodbye to: the lease will expire. */
		rdzv_left();
	}
	down = mono_ms() - rc_down_since;
	limit = rc_ever_joined ? rc_cfg->reconnect_timeout_ms :
	    rc_cfg->join_timeout_ms;
	if (down >= limit) {
		rdzv_unreachable(down, why);
		return;
	}
	if (rc_pass > 0) {
		/* The other rdzvds of the list, at once: one of them may
		 * lead now. */
		rc_pass--;
		rdzv_timer(rc_retry_ev, RDZV_NEXT_EP_MS);
		return;
	}
	rc_pass = rc_nep - 1;
	if (rc_backoff_ms == 0)
		rc_backoff_ms = RDZV_BACKOFF_MIN_MS;
	else
		rc_backoff_ms *= 2;
	ms = rc_hb_ms < RDZV_BACKOFF_MAX_MS ? rc_hb_ms : RDZV_BACKOFF_MAX_MS;
	if (ms < 50)
		ms = 50;
	if (rc_backoff_ms > ms)
		rc_backoff_ms = ms;
	jitter = (int)arc4random_uniform(rc_backoff_ms / 4 + 1);
	rdzv_timer(rc_retry_ev, rc_backoff_ms + jitter);
}

static void
rdzv_retry_cb(evutil_socket_t fd, short ev, void *arg)
{
	rdzv_connect();
}

static void
rdzv_conn_timeout_cb(evutil_socket_t fd, short ev, void *arg)
{
	if (rc_state == RC_TLS)
		rdzv_tls_cut("timed out");
	else
		rdzv_drop("timed out connecting");
}

/* Heartbeat, and the watchdog for a silent (half-open) connection. */
static void
rdzv_hb_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct nat_wr	wr;
	int64_t		un, st;
	int		lease, dead;

	if (rc_state != RC_JOINED)
		return;
	lease = rc_lease_ms > 0 ? rc_lease_ms : rc_cfg->lease_ms > 0 ?
	    rc_cfg->lease_ms : RDZV_DEFAULT_LEASE_MS;
	dead = lease > 3 * rc_hb_ms ? lease : 3 * rc_hb_ms;
	if (rc_hb_id != 0 && mono_ms() - rc_last_rx > dead) {
		rdzv_drop("rdzvd silent");
		return;
	}
	if (rc_hb_id == 0) {
		rc_hb_id = rdzv_begin(&wr, NAT_OP_HEARTBEAT);
		rdzv_put_str(&wr, rc_cfg->rdzv_id);
		rdzv_put_i64(&wr, rc_node_id);
		rdzv_put_i64(&wr, rc_repairable);
		/* Written only when not 0: an older rdzvd never sees it
		 * while no replacement is on its way. */
		un = rc_no_unjoined || rc_cbs->unjoined == NULL ? 0 :
		    rc_cbs->unjoined(rc_arg);
		st = rdzv_hb_stepped();
		if (un != 0 || st >= 0)
			rdzv_put_i64(&wr, un);
		if (st >= 0)
			rdzv_put_i64(&wr, st);
		rdzv_end(&wr);
		rc_hb_repairable = rc_repairable;
		rc_hb_unjoined = un;
		rc_hb_stepped = st;
	}
	rdzv_timer(rc_hb_ev, rc_hb_ms);
}

static void
rdzv_leave_timeout_cb(evutil_socket_t fd, short ev, void *arg)
{
	if (rc_leaving)
		log_warnx("LEAVE not acknowledged in time");
	rdzv_left();
}

static int
rdzv_resolve(struct rdzv_ep *ep)
{
	struct addrinfo	hints;
	int		rv;

	if (ep->addrs != NULL)
		return (0);
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if ((rv = getaddrinfo(ep->host, ep->port, &hints, &ep->addrs)) != 0) {
		ep->addrs = NULL;
		log_warnx("resolving %s: %s", ep->host, gai_strerror(rv));
		return (RDZV_ECONN);
	}
	return (0);
}

const char *
rdzv_master_host(void)
{
	return (rc_eps[rc_joined_ep].host);
}

static void
rdzv_connect(void)
{
	struct addrinfo	*ai;
	int		 i, fd;

	if (rc_state == RC_CLOSED)
		return;
	/* Rotate through the endpoints' addresses, one per attempt. */
	ai = NULL;
	if (rdzv_resolve(&rc_eps[rc_ep]) == 0)
		for (ai = rc_eps[rc_ep].addrs, i = 0; ai != NULL &&
		    i < rc_addr_next; i++)
			ai = ai->ai_next;
	if (ai == NULL) {
		rc_ep = (rc_ep + 1) % rc_nep;
		rc_addr_next = 0;
		if (rdzv_resolve(&rc_eps[rc_ep]) != 0) {
			rdzv_drop("name not resolved");
			return;
		}
		ai = rc_eps[rc_ep].addrs;
	}
	rc_addr_next++;
	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, ai->ai_protocol);
	if (fd == -1) {
		rdzv_drop(strerror(errno));
		return;
	}
	rc_bev = bufferevent_socket_new(rc_base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (rc_bev == NULL) {
		close(fd);
		rdzv_drop("out of memory");
		return;
	}
	bufferevent_setcb(rc_bev, rdzv_read_cb, NULL, rdzv_event_cb, NULL);
	bufferevent_enable(rc_bev, EV_READ | EV_WRITE);
	rdzv_set_state(RC_CONNECTING);
	rdzv_timer(rc_conn_ev, RDZV_CONNECT_MS);
	if (bufferevent_socket_connect(rc_bev, ai->ai_addr,
	    ai->ai_addrlen) == -1) {
		rdzv_drop("connect failed");
		return;
	}
}

/* Splits --rdzv_endpoint (checked by cli.c) into rc_eps. */
static int
rdzv_endpoints(const struct agent_config *cfg)
{
	char	hp[RDZV_HOSTPORT_MAX], host[RDZV_HOST_MAX];
	int	port;

	rc_nep = hostport_list_count(cfg->endpoint);
	if (rc_nep == 1) {
		if (strlcpy(rc_eps[0].host, cfg->ep_host,
		    sizeof rc_eps[0].host) >= sizeof rc_eps[0].host)
			return (RDZV_EINVAL);
		snprintf(rc_eps[0].port, sizeof rc_eps[0].port, "%d",
		    cfg->ep_port);
		return (0);
	}
	if (rc_nep > RDZV_EP_MAX)
		return (RDZV_EINVAL);
	for (rc_ep = 0; rc_ep < rc_nep; rc_ep++) {
		if (hostport_list_get(cfg->endpoint, rc_ep, hp, sizeof hp) !=
		    0 || hostport_split(hp, 0, host, sizeof host, &port, NULL,
		    0) != 0)
			return (RDZV_EINVAL);
		strlcpy(rc_eps[rc_ep].host, host, sizeof rc_eps[rc_ep].host);
		snprintf(rc_eps[rc_ep].port, sizeof rc_eps[rc_ep].port, "%d",
		    port);
	}
	rc_ep = 0;
	rc_pass = rc_nep - 1;
	return (0);
}

/*
 * What the workers get as RDZV_TOKEN_FILE: never the operator's secret.
 * A job credential (rdzvctl credential) must name this job and is handed
 * on as it is; from the operator's secret the job's credential is
 * derived and written to a file of mode 0600 in $TMPDIR, removed by
 * rdzv_shutdown().  Returns 0 or RDZV_EAUTH (logged).
 */
static int
rdzv_worker_cred(const struct agent_config *cfg)
{
	struct rdzv_cred	 cred;
	const char		*tmp;
	char			 why[512], text[RDZV_CRED_FILE_MAX + 1];
	int			 kind, fd, n, rv = RDZV_EAUTH;

	kind = rdzv_cred_parse(rc_token, rc_tokenlen, &cred, why, sizeof why);
	if (kind < 0) {
		log_warnx("--token_file %s is %s", cfg->token_file, why);
		return (RDZV_EAUTH);
	}
	if (kind == 1) {
		if (strcmp(cred.job, cfg->rdzv_id) != 0) {
			log_warnx("--token_file %s is the credential of job "
			    "%s, but --rdzv_id is %s: give this job's (rdzvctl "
			    "credential %s)", cfg->token_file, cred.job,
			    cfg->rdzv_id, cfg->rdzv_id);
			goto out;
		}
		if (strlcpy(rc_wtoken, cfg->token_file, sizeof rc_wtoken) >=
		    sizeof rc_wtoken)
			goto out;
		rv = 0;
		goto out;
	}
	/* The operator's secret: the workers get the job's credential. */
	if ((tmp = getenv("TMPDIR")) == NULL || *tmp == '\0')
		tmp = "/tmp";
	if (strlcpy(cred.job, cfg->rdzv_id, sizeof cred.job) >=
	    sizeof cred.job)
		goto out;
	cred.joblen = strlen(cred.job);
	if (rdzv_cred_derive(rc_token, rc_tokenlen, cred.job, cred.joblen,
	    cred.key) != 0 ||
	    (n = rdzv_cred_format(&cred, text, sizeof text)) < 0) {
		log_warnx("cannot derive job %s's credential", cred.job);
		goto out;
	}
	if ((size_t)snprintf(rc_wtoken, sizeof rc_wtoken,
	    "%s/rdzv-cred-XXXXXX", tmp) >= sizeof rc_wtoken ||
	    (fd = mkstemp(rc_wtoken)) == -1) {
		log_warn("cannot write the workers' credential in %s", tmp);
		rc_wtoken[0] = '\0';
		goto out;
	}
	rc_wtoken_ours = 1;
	if (write(fd, text, (size_t)n) != n) {
		log_warn("cannot write %s", rc_wtoken);
		close(fd);
		goto out;
	}
	close(fd);
	log_info("workers get job %s's credential (%s), not the operator's "
	    "secret", cred.job, rc_wtoken);
	rv = 0;
out:
	explicit_bzero(text, sizeof text);
	explicit_bzero(&cred, sizeof cred);
	return (rv);
}

const char *
rdzv_worker_token_file(void)
{
	return (rc_wtoken[0] != '\0' ? rc_wtoken : NULL);
}

int
rdzv_start(struct event_base *base, const struct agent_config *cfg,
    const struct rdzv_cbs *cbs, void *arg)
{
	uint8_t		 rnd[16];
	size_t		 i;

	rc_base = base;
	rc_cfg = cfg;
	rc_hb_ms = cfg->heartbeat_ms;
	rc_cbs = cbs;
	rc_arg = arg;
	wire_limits_default(&rc_lim);
	rc_lim.value_max = (size_t)64 << 20;
	if (rdzv_endpoints(cfg) != 0)
		return (RDZV_EINVAL);
	if (gethostname(rc_hostname, sizeof rc_hostname) == -1)
		strlcpy(rc_hostname, "localhost", sizeof rc_hostname);
	rc_hostname[sizeof rc_hostname - 1] = '\0';
	/* A fresh instance per process: a restarted agent is a new node. */
	arc4random_buf(rnd, sizeof rnd);
	for (i = 0; i < sizeof rnd; i++)
		snprintf(rc_instance + 2 * i, 3, "%02x", rnd[i]);
	rc_retry_ev = evtimer_new(base, rdzv_retry_cb, NULL);
	rc_hb_ev = evtimer_new(base, rdzv_hb_cb, NULL);
	rc_leave_ev = evtimer_new(base, rdzv_leave_timeout_cb, NULL);
	rc_conn_ev = evtimer_new(base, rdzv_conn_timeout_cb, NULL);
	if (rc_retry_ev == NULL || rc_hb_ev == NULL || rc_leave_ev == NULL ||
	    rc_conn_ev == NULL)
		return (RDZV_ENOMEM);
	if (cfg->token_file != NULL) {
		char	why[512];
		int	insecure, rv;

		if ((rv = rdzv_token_load(cfg->token_file, &rc_token,
		    &rc_tokenlen, &insecure, why, sizeof why)) != 0) {
			log_warnx("%s", why);
			return (rv);
		}
		if (insecure)
			log_warnx("token file %s is readable by group or "
			    "others; chmod 600 it", cfg->token_file);
		if ((rv = rdzv_worker_cred(cfg)) != 0)
			return (rv);
	}
	if (cfg->tls_ca != NULL) {
		char	why[512];

		/* One context for every reconnect; cli.c checked the file. */
		if ((rc_tls = rdzv_tls_client_ctx(cfg->tls_ca, why,
		    sizeof why)) == NULL) {
			log_warnx("%s", why);
			return (RDZV_ETLS);
		}
	}
	rc_down_since = mono_ms();
	rdzv_connect();
	return (0);
}

static void
rdzv_queue(struct rdzv_report *r)
{
	TAILQ_INSERT_TAIL(&rc_reports, r, entry);
	if (rc_state == RC_JOINED)
		rdzv_send_report(r);
}

/*
 * HEARTBEAT's stepped: the latest round a local worker committed a step
 * in, once one did; -1 leaves the field out (none yet, an older rdzvd,
 * or one that takes no unjoined before it).
 */
static int64_t
rdzv_hb_stepped(void)
{
	int64_t	st;

	if (rc_no_stepped || rc_no_unjoined || rc_cbs->stepped == NULL)
		return (-1);
	st = rc_cbs->stepped(rc_arg);
	return (st > 0 ? st : -1);
}

void
rdzv_stepped_changed(void)
{
	/* A grow after a shrink waits for a step in it: now, not at the
	 * next beat. */
	if (rc_state == RC_JOINED && rc_hb_id == 0 && rdzv_hb_stepped() >= 0)
		rdzv_hb_cb(-1, 0, NULL);
}

void
rdzv_unjoined_changed(void)
{
	/* A replacement is never the donor: rdzvd must know it before
	 * the next failure, not at the next beat. */
	if (rc_state == RC_JOINED && rc_hb_id == 0 && !rc_no_unjoined)
		rdzv_hb_cb(-1, 0, NULL);
}

void
rdzv_set_repairable(int on)
{
	on = on != 0;
	if (on == rc_repairable)
		return;
	rc_repairable = on;
	/* rdzvd must know before a failure comes: tell it now. */
	if (rc_state == RC_JOINED && rc_hb_id == 0)
		rdzv_hb_cb(-1, 0, NULL);
}

/*
 * A new report of op for round, its message (NULL: none) a copy of at
 * most AGENT_MSG_MAX - 1 bytes of message; NULL once the link is closed for
 * good (nothing more is reported).  The caller fills the rest and queues
 * it with rdzv_queue().
 */
static struct rdzv_report *
rdzv_report_new(uint16_t op, int64_t round, const char *message)
{
	struct rdzv_report	*r;

	if (rc_state == RC_CLOSED)
		return (NULL);
	if ((r = calloc(1, sizeof *r)) == NULL || (message != NULL &&
	    (r->message = strndup(message, AGENT_MSG_MAX - 1)) == NULL))
		fatalx("out of memory");
	r->op = op;
	r->round = round;
	return (r);
}

void
rdzv_report_ready(int64_t round, int local_rank)
{
	struct rdzv_report	*r;

	if ((r = rdzv_report_new(NAT_OP_READY, round, NULL)) == NULL)
		return;
	r->ready.local_rank = local_rank;
	rdzv_queue(r);
}

void
rdzv_report_failure(int64_t round, int local_rank, int64_t rank,
    int exit_code, int signo, int repair, const char *message)
{
	struct rdzv_report	*r;

	if ((r = rdzv_report_new(NAT_OP_FAILURE, round, message)) == NULL)
		return;
	r->failure.local_rank = local_rank;
	r->failure.rank = rank;
	r->failure.exit_code = exit_code;
	r->failure.signo = signo;
	r->failure.message = slice_str(r->message);
	r->failure.repair = repair != 0;
	rdzv_queue(r);
}

void
rdzv_report_succeeded(int64_t round, int64_t unjoined)
{
	struct rdzv_report	*r;

	if ((r = rdzv_report_new(NAT_OP_SUCCEEDED, round, NULL)) == NULL)
		return;
	r->unjoined = unjoined;
	rdzv_queue(r);
}

void
rdzv_leave(int timeout_ms)
{
	rc_leaving = 1;
	rdzv_timer(rc_leave_ev, rc_state == RC_JOINED ? timeout_ms : 0);
	if (rc_state == RC_JOINED)
		rdzv_send_leave();
}

void
rdzv_shutdown(void)
{
	struct rdzv_report	*r;
	size_t			 i;

	if (rc_wtoken_ours) {
		(void)unlink(rc_wtoken);
		rc_wtoken_ours = 0;
	}
	if (rc_state == RC_CLOSED)
		return;
	rdzv_set_state(RC_CLOSED);
	rc_gen++;
	if (rc_bev != NULL)
		bufferevent_free(rc_bev);
	rc_bev = NULL;
	while ((r = TAILQ_FIRST(&rc_reports)) != NULL) {
		TAILQ_REMOVE(&rc_reports, r, entry);
		free(r->message);
		free(r);
	}
	if (rc_retry_ev != NULL)
		evtimer_del(rc_retry_ev);
	if (rc_hb_ev != NULL)
		evtimer_del(rc_hb_ev);
	if (rc_conn_ev != NULL)
		evtimer_del(rc_conn_ev);
	if (rc_leave_ev != NULL)
		evtimer_del(rc_leave_ev);
	for (i = 0; i < rc_nep; i++) {
		if (rc_eps[i].addrs != NULL)
			freeaddrinfo(rc_eps[i].addrs);
		rc_eps[i].addrs = NULL;
	}
	rc_nep = 0;
	if (rc_tls != NULL)
		SSL_CTX_free(rc_tls);
	rc_tls = NULL;
}
