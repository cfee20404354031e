/*
 * proto_native.c: the native rdzv protocol adapter (common/PROTOCOL.md).
 * Frames carry a request id, so requests may be pipelined and waits
 * answer out of order; each wait in flight is a `struct pending` on its
 * connection, with its own deadline, found by id for CANCEL.  Semantic
 * failures (a missing key, a timeout) are error replies; a frame that
 * breaks the protocol or a limit closes the connection.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "log.h"
#include "rdzv_err.h"
#include "rdzvd.h"

#define KEYS_STACK	32	/* keys handled without allocating */
#define WATCH_MAX	1024	/* persistent watches per connection */

struct pending {
	LIST_ENTRY(pending)	 entry;
	struct conn		*c;
	uint32_t		 id;
	uint16_t		 op;
	struct kv_waiter	*w;
	struct event		*timer;
	uint8_t			*ns;	/* WATCH: the namespace, for pushes;
					 * ADMIN_EVENTS: the job id */
	size_t			 nslen;
	int64_t			 after;	/* ADMIN_EVENTS: last seq seen */
};

static const enum op_kind nat_op_kind[NAT_OP_MAX + 1] = {
	[NAT_OP_PING] = OPK_PING, [NAT_OP_SET] = OPK_SET,
	[NAT_OP_GET] = OPK_GET, [NAT_OP_ADD] = OPK_ADD,
	[NAT_OP_CAS] = OPK_COMPARE_SET, [NAT_OP_WAIT] = OPK_WAIT,
	[NAT_OP_CHECK] = OPK_CHECK, [NAT_OP_DELETE] = OPK_DELETE,
	[NAT_OP_NUM_KEYS] = OPK_NUM_KEYS, [NAT_OP_APPEND] = OPK_APPEND,
	[NAT_OP_MULTI_GET] = OPK_MULTI_GET, [NAT_OP_MULTI_SET] = OPK_MULTI_SET,
	[NAT_OP_QUEUE_PUSH] = OPK_QUEUE_PUSH, [NAT_OP_QUEUE_POP] = OPK_QUEUE_POP,
	[NAT_OP_QUEUE_LEN] = OPK_QUEUE_LEN, [NAT_OP_LIST_KEYS] = OPK_LIST_KEYS,
	[NAT_OP_BARRIER] = OPK_BARRIER, [NAT_OP_CANCEL] = OPK_CANCEL,
	[NAT_OP_WATCH] = OPK_WATCH, [NAT_OP_WATCH_EVENT] = OPK_WATCH,
	[NAT_OP_JOIN] = OPK_JOIN, [NAT_OP_HEARTBEAT] = OPK_HEARTBEAT,
	[NAT_OP_LEAVE] = OPK_LEAVE, [NAT_OP_FAILURE] = OPK_FAILURE,
	[NAT_OP_SUCCEEDED] = OPK_SUCCEEDED, [NAT_OP_ROUND] = OPK_JOIN,
	[NAT_OP_JOB_STATUS] = OPK_JOB_STATUS,
	[NAT_OP_ADMIN_STATUS] = OPK_ADMIN, [NAT_OP_ADMIN_JOBS] = OPK_ADMIN,
	[NAT_OP_ADMIN_JOB] = OPK_ADMIN, [NAT_OP_ADMIN_EVENTS] = OPK_ADMIN,
	[NAT_OP_ADMIN_CLOSE] = OPK_ADMIN, [NAT_OP_ADMIN_EVICT] = OPK_ADMIN,
	[NAT_OP_AUTH_CHALLENGE] = OPK_ADMIN, [NAT_OP_AUTH] = OPK_ADMIN,
};

static void
pending_free(struct pending *pd)
{
	LIST_REMOVE(pd, entry);
	if (pd->w != NULL)
		kv_waiter_cancel(server.kv, pd->w);
	if (pd->timer != NULL)
		event_free(pd->timer);
	free(pd->ns);
	free(pd);
}

void
native_conn_free(struct conn *c)
{
	struct pending	*pd;

	while ((pd = LIST_FIRST(&c->pending)) != NULL)
		pending_free(pd);
}

/* An empty successful reply. */
static void
reply_ok(struct conn *c, uint16_t op, uint32_t id)
{
	struct nat_wr	wr;

	nat_frame_begin(&wr, conn_reply_buf(c), op, NAT_F_REPLY, id);
	nat_frame_end(&wr);
	conn_reply_done(c);
}

static void
reply_i64(struct conn *c, uint16_t op, uint32_t id, int64_t v)
{
	struct nat_wr	wr;

	nat_frame_begin(&wr, conn_reply_buf(c), op, NAT_F_REPLY, id);
	nat_put_i64(&wr, v);
	nat_frame_end(&wr);
	conn_reply_done(c);
}

static void
reply_bytes(struct conn *c, uint16_t op, uint32_t id, const void *p,
    size_t len)
{
	struct nat_wr	wr;

	nat_frame_begin(&wr, conn_reply_buf(c), op, NAT_F_REPLY, id);
	nat_put_bytes(&wr, p, len);
	nat_frame_end(&wr);
	conn_reply_done(c);
}

static void
reply_error(struct conn *c, uint16_t op, uint32_t id, int code)
{
	nat_put_error(conn_reply_buf(c), op, id, code, rdzv_strerror(code));
	conn_reply_done(c);
}

/* A one-shot wait (WAIT, BARRIER) completed. */
static void
pending_wake_cb(struct kv_waiter *w, void *arg)
{
	struct pending	*pd = arg;

	pd->w = NULL;		/* the core frees it after we return */
	reply_ok(pd->c, pd->op, pd->id);
	pending_free(pd);
}

static void
pending_pop_cb(struct kv_waiter *w, void *arg, uint8_t *item, size_t len)
{
	struct pending	*pd = arg;

	pd->w = NULL;
	reply_bytes(pd->c, pd->op, pd->id, item, len);
	free(item);
	pending_free(pd);
}

static void
pending_watch_cb(struct kv_waiter *w, void *arg, int kind, struct slice key,
    struct slice oldv, struct slice newv)
{
	struct pending	*pd = arg;
	struct nat_wr	 wr;

	nat_frame_begin(&wr, conn_reply_buf(pd->c), NAT_OP_WATCH_EVENT,
	    NAT_F_PUSH, 0);
	nat_put_bytes(&wr, pd->ns, pd->nslen);
	nat_put_bytes(&wr, key.p, key.len);
	nat_put_i64(&wr, kind);
	nat_put_bytes(&wr, oldv.p, oldv.len);
	nat_put_bytes(&wr, newv.p, newv.len);
	nat_frame_end(&wr);
	conn_reply_done(pd->c);
}

/* Replies to ADMIN_EVENTS with what is newer than pd->after. */
static void
events_reply(struct pending *pd)
{
	char	*text;

	text = rz_json_events(server.rz, (struct slice){ pd->ns, pd->nslen },
	    pd->after);
	if (text == NULL)
		reply_error(pd->c, pd->op, pd->id, RDZV_ENOTFOUND);
	else {
		reply_bytes(pd->c, pd->op, pd->id, text, strlen(text));
		free(text);
	}
}

static void
pending_timeout_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct pending	*pd = arg;

	if (pd->op == NAT_OP_ADMIN_EVENTS)
		events_reply(pd);	/* nothing new: an empty list */
	else
		reply_error(pd->c, pd->op, pd->id, RDZV_ETIMEDOUT);
	pending_free(pd);
}

static void
pending_events_cb(struct kv_waiter *w, void *arg)
{
	struct pending	*pd = arg;

	pd->w = NULL;
	events_reply(pd);
	pending_free(pd);
}

static struct pending *
pending_new(struct conn *c, const struct nat_msg *m, int64_t timeout_ms)
{
	struct pending	*pd;
	struct timeval	 tv;

	if ((pd = calloc(1, sizeof *pd)) == NULL)
		return NULL;
	pd->c = c;
	pd->id = m->id;
	pd->op = m->op;
	if (timeout_ms >= 0) {
		if ((pd->timer = evtimer_new(server.base, pending_timeout_cb,
		    pd)) == NULL) {
			free(pd);
			return NULL;
		}
		tv.tv_sec = timeout_ms / 1000;
		tv.tv_usec = (timeout_ms % 1000) * 1000;
		evtimer_add(pd->timer, &tv);
	}
	LIST_INSERT_HEAD(&c->pending, pd, entry);
	return pd;
}

/* Reads "i n, n*b key" into keys (stack or heap), checking n against the
 * bytes actually present before allocating anything. */
static int
read_keys(struct nat_rd *rd, struct slice *stack, struct slice **keysp,
    size_t *np)
{
	struct slice	*keys = stack;
	int64_t		 n;
	size_t		 i;

	if (nat_get_i64(rd, &n) != 0 || n < 0)
		return RDZV_EPROTO;
	if ((uint64_t)n > server.cfg->limits.keys_max)
		return RDZV_ETOOBIG;
	/* Each key takes at least 5 bytes (tag + length). */
	if ((uint64_t)n > rd->left / 5)
		return RDZV_EPROTO;
	if (n > KEYS_STACK &&
	    (keys = reallocarray(NULL, (size_t)n, sizeof *keys)) == NULL)
		return RDZV_ENOMEM;
	for (i = 0; i < (size_t)n; i++) {
		if (nat_get_bytes(rd, &keys[i]) != 0) {
			if (keys != stack)
				free(keys);
			return RDZV_EPROTO;
		}
		if (keys[i].len > server.cfg->limits.key_max) {
			if (keys != stack)
				free(keys);
			return RDZV_ETOOBIG;
		}
	}
	*keysp = keys;
	*np = (size_t)n;
	return 0;
}

struct list_acc {
	struct nat_wr	*wr;
	int64_t		 n;
};

static void
list_count_cb(void *arg, struct slice key)
{
	((struct list_acc *)arg)->n++;
}

static void
list_put_cb(void *arg, struct slice key)
{
	nat_put_bytes(((struct list_acc *)arg)->wr, key.p, key.len);
}

/* AUTH: checks the client's MAC over our nonce and answers with ours. */
static int
native_auth(struct conn *c, const struct nat_msg *m, const char **why)
{
	struct nat_rd	rd;
	struct nat_wr	wr;
	struct slice	cn, mac;
	uint8_t		want[NAT_MAC_LEN], ours[NAT_MAC_LEN];

	metrics.ops[OPK_ADMIN]++;
	nat_rd_init(&rd, m->payload);
	if (nat_get_bytes(&rd, &cn) != 0 || nat_get_bytes(&rd, &mac) != 0 ||
	    nat_rd_end(&rd) != 0 || cn.len != NAT_NONCE_LEN ||
	    mac.len != NAT_MAC_LEN) {
		*why = "malformed AUTH";
		return RDZV_EPROTO;
	}
	if (server.token == NULL || c->authed) {
		reply_error(c, m->op, m->id, RDZV_EINVAL);
		return 0;
	}
	if (nat_auth_mac(server.token, server.tokenlen, NAT_AUTH_CLIENT_TAG,
	    c->nonce, cn.p, want) != 0 || !nat_mac_equal(want, mac.p)) {
		nat_put_error(c->out, m->op, m->id, RDZV_EAUTH,
		    "wrong token");
		*why = "wrong token";
		return RDZV_EAUTH;
	}
	if (nat_auth_mac(server.token, server.tokenlen, NAT_AUTH_SERVER_TAG,
	    cn.p, c->nonce, ours) != 0) {
		*why = "HMAC failed";
		return RDZV_EAUTH;
	}
	c->authed = 1;
	nat_frame_begin(&wr, conn_reply_buf(c), m->op, NAT_F_REPLY, m->id);
	nat_put_bytes(&wr, ours, sizeof ours);
	nat_frame_end(&wr);
	conn_reply_done(c);
	return 0;
}

static int
native_op_writes(uint16_t op)
{
	switch (op) {
	case NAT_OP_SET: case NAT_OP_ADD: case NAT_OP_CAS: case NAT_OP_DELETE:
	case NAT_OP_APPEND: case NAT_OP_MULTI_SET: case NAT_OP_QUEUE_PUSH:
	case NAT_OP_QUEUE_POP: case NAT_OP_BARRIER:
		return 1;
	}
	return 0;
}

/* Replies to a rendezvous op that succeeded or failed (no payload). */
static void
reply_rz(struct conn *c, const struct nat_msg *m, int rc)
{
	struct nat_wr	wr;

	if (rc < 0) {
		nat_put_error(conn_reply_buf(c), m->op, m->id, rc,
		    rc == RDZV_ENOTFOUND ? "unknown job or node: JOIN again" :
		    rdzv_strerror(rc));
		conn_reply_done(c);
		return;
	}
	/* Membership changes are acknowledged once committed. */
	nat_frame_begin(&wr, conn_reply_buf_durable(c, 1), m->op, NAT_F_REPLY,
	    m->id);
	nat_frame_end(&wr);
	conn_reply_done(c);
}

/* JOIN .. JOB_STATUS (PROTOCOL.md "Rendezvous"). */
static int
native_rendezvous(struct conn *c, const struct nat_msg *m, struct nat_rd *rd,
    const char **why)
{
	struct rz_join_req	 jr;
	struct rz_failure_req	 fr;
	struct slice		 job;
	int64_t			 node, round, now = rdzvd_now_ms();
	char			*text;
	int			 rc;

	if (m->op == NAT_OP_ADMIN_STATUS || m->op == NAT_OP_ADMIN_JOBS) {
		if (nat_rd_end(rd) != 0)
			goto proto;
		text = m->op == NAT_OP_ADMIN_STATUS ? rdzvd_status_json() :
		    rz_json_jobs(server.rz);
		if (text == NULL)
			goto nomem;
		reply_bytes(c, m->op, m->id, text, strlen(text));
		free(text);
		return 0;
	}
	if (nat_get_bytes(rd, &job) != 0)
		goto proto;
	switch (m->op) {
	case NAT_OP_ADMIN_JOB:
		if (nat_rd_end(rd) != 0)
			goto proto;
		if ((text = round_job_json(job)) == NULL) {
			reply_rz(c, m, RDZV_ENOTFOUND);
			break;
		}
		reply_bytes(c, m->op, m->id, text, strlen(text));
		free(text);
		break;
	case NAT_OP_ADMIN_EVENTS: {
		struct pending	*pd;
		char		 nsbuf[RZ_ID_MAX + 32], keybuf[32];
		struct slice	 ens, ekey;
		int64_t		 after, timeout;

		if (nat_get_i64(rd, &after) != 0 ||
		    nat_get_i64(rd, &timeout) != 0 || nat_rd_end(rd) != 0)
			goto proto;
		if (rz_event_row(server.rz, job, after, nsbuf, sizeof nsbuf,
		    &ens, keybuf, sizeof keybuf, &ekey) != 0) {
			reply_rz(c, m, RDZV_ENOTFOUND);
			break;
		}
		if ((pd = pending_new(c, m, timeout > 0 ? timeout : 0)) == NULL ||
		    (pd->ns = malloc(job.len)) == NULL) {
			if (pd != NULL)
				pending_free(pd);
			goto nomem;
		}
		memcpy(pd->ns, job.p, job.len);
		pd->nslen = job.len;
		pd->after = after;
		/* Something newer already, or no waiting asked: answer now. */
		if (timeout <= 0 || kv_wait(server.kv, ens, &ekey, 1,
		    pending_events_cb, pd, &pd->w) != 0) {
			events_reply(pd);
			pending_free(pd);
		}
		break;
	}
	case NAT_OP_ADMIN_CLOSE: {
		struct slice	reason;

		if (nat_get_bytes(rd, &reason) != 0 || nat_rd_end(rd) != 0)
			goto proto;
		reply_rz(c, m, rz_admin_close(server.rz, job, reason, now));
		break;
	}
	case NAT_OP_ADMIN_EVICT:
		if (nat_get_i64(rd, &node) != 0 || nat_rd_end(rd) != 0)
			goto proto;
		reply_rz(c, m, rz_admin_evict(server.rz, job, node, now));
		break;
	case NAT_OP_JOIN:
		memset(&jr, 0, sizeof jr);
		jr.job = job;
		if (nat_get_bytes(rd, &jr.instance) != 0 ||
		    nat_get_bytes(rd, &jr.host) != 0 ||
		    nat_get_bytes(rd, &jr.addr) != 0 ||
		    nat_get_i64(rd, &jr.pid) != 0 ||
		    nat_get_i64(rd, &jr.local_world_size) != 0 ||
		    nat_get_i64(rd, &jr.min_nodes) != 0 ||
		    nat_get_i64(rd, &jr.max_nodes) != 0 ||
		    nat_get_i64(rd, &jr.max_restarts) != 0 ||
		    nat_get_i64(rd, &jr.last_call_ms) != 0 ||
		    nat_get_i64(rd, &jr.lease_ms) != 0)
			goto proto;
		/* An optional node rank (static rendezvous) ends the JOIN. */
		jr.rank = -1;
		if (rd->left > 0 && nat_get_i64(rd, &jr.rank) != 0)
			goto proto;
		if (nat_rd_end(rd) != 0)
			goto proto;
		round_join(c, m->id, &jr);
		return 0;
	case NAT_OP_HEARTBEAT:
		if (nat_get_i64(rd, &node) != 0 || nat_rd_end(rd) != 0)
			goto proto;
		rc = rz_heartbeat(server.rz, job, node, c, now, &round);
		if (rc < 0)
			reply_rz(c, m, rc);
		else
			reply_i64(c, m->op, m->id, round);
		break;
	case NAT_OP_LEAVE:
		if (nat_get_i64(rd, &node) != 0 || nat_rd_end(rd) != 0)
			goto proto;
		reply_rz(c, m, rz_leave(server.rz, job, node, now));
		break;
	case NAT_OP_FAILURE:
		memset(&fr, 0, sizeof fr);
		fr.job = job;
		if (nat_get_i64(rd, &fr.node_id) != 0 ||
		    nat_get_i64(rd, &fr.round) != 0 ||
		    nat_get_i64(rd, &fr.local_rank) != 0 ||
		    nat_get_i64(rd, &fr.rank) != 0 ||
		    nat_get_i64(rd, &fr.exit_code) != 0 ||
		    nat_get_i64(rd, &fr.signo) != 0 ||
		    nat_get_bytes(rd, &fr.message) != 0 || nat_rd_end(rd) != 0)
			goto proto;
		reply_rz(c, m, rz_failure(server.rz, &fr, now));
		break;
	case NAT_OP_SUCCEEDED:
		if (nat_get_i64(rd, &node) != 0 || nat_get_i64(rd, &round) != 0 ||
		    nat_rd_end(rd) != 0)
			goto proto;
		reply_rz(c, m, rz_succeeded(server.rz, job, node, round, now));
		break;
	case NAT_OP_JOB_STATUS:
		if (nat_rd_end(rd) != 0)
			goto proto;
		if ((text = rz_status(server.rz, job, now)) == NULL) {
			reply_rz(c, m, RDZV_ENOTFOUND);
			break;
		}
		reply_bytes(c, m->op, m->id, text, strlen(text));
		free(text);
		break;
	default:
		/* ROUND is a push: a client may not send it. */
		goto proto;
	}
	round_rearm();
	return 0;
proto:
	*why = "malformed rendezvous request";
	return RDZV_EPROTO;
nomem:
	*why = "out of memory";
	return RDZV_ENOMEM;
}

/*
 * Serves one frame.  Returns 0 (replied, or a wait registered) or a
 * negative RDZV_E* that closes the connection (*why set).
 */
static int
native_dispatch(struct conn *c, const struct nat_msg *m, const char **why)
{
	const struct wire_limits *lim = &server.cfg->limits;
	struct nat_rd		 rd;
	struct nat_wr		 wr;
	struct slice		 ns = { NULL, 0 }, key = { NULL, 0 }, v1, v2, out;
	struct slice		 stack[KEYS_STACK], *keys = NULL;
	struct pending		*pd;
	struct list_acc		 acc;
	int64_t			 a = 0, b = 0, r64;
	size_t			 n = 0, i;
	uint8_t			*item;
	size_t			 ilen;
	int			 rc = 0;

	if (m->flags != 0) {
		*why = "native frame with reply or push flags from a client";
		return RDZV_EPROTO;
	}
	if (m->op == NAT_OP_AUTH)
		return native_auth(c, m, why);
	if (!c->authed) {
		nat_put_error(c->out, m->op, m->id, RDZV_EAUTH,
		    "authentication required: this rdzvd has a token");
		*why = "request before authentication";
		return RDZV_EAUTH;
	}
	if (m->op == NAT_OP_WATCH_EVENT || m->op == NAT_OP_ROUND ||
	    m->op == NAT_OP_AUTH_CHALLENGE) {
		*why = "a client sent a server push";
		return RDZV_EPROTO;
	}
	metrics.ops[nat_op_kind[m->op]]++;
	nat_rd_init(&rd, m->payload);

	if (m->op >= NAT_OP_JOIN)
		return native_rendezvous(c, m, &rd, why);
	/* Every kv op but PING and CANCEL starts with a namespace. */
	if (m->op != NAT_OP_PING && m->op != NAT_OP_CANCEL) {
		if (nat_get_bytes(&rd, &ns) != 0)
			goto proto;
		if (ns.len > lim->ns_max)
			goto toobig;
		/* NUL-led namespaces hold rdzvd's own rows: read-only. */
		if (ns.len > 0 && ns.p[0] == '\0' && native_op_writes(m->op)) {
			reply_error(c, m->op, m->id, RDZV_EINVAL);
			return 0;
		}
	}
	/* Ops that name one key next. */
	switch (m->op) {
	case NAT_OP_SET: case NAT_OP_GET: case NAT_OP_ADD: case NAT_OP_CAS:
	case NAT_OP_DELETE: case NAT_OP_APPEND: case NAT_OP_QUEUE_PUSH:
	case NAT_OP_QUEUE_POP: case NAT_OP_QUEUE_LEN: case NAT_OP_BARRIER:
	case NAT_OP_WATCH:
		if (nat_get_bytes(&rd, &key) != 0)
			goto proto;
		if (key.len > lim->key_max)
			goto toobig;
		break;
	default:
		break;
	}

	switch (m->op) {
	case NAT_OP_PING:
		if (nat_get_bytes(&rd, &v1) != 0 || nat_rd_end(&rd) != 0)
			goto proto;
		reply_bytes(c, m->op, m->id, v1.p, v1.len);
		break;
	case NAT_OP_SET:
	case NAT_OP_APPEND:
	case NAT_OP_QUEUE_PUSH:
		if (nat_get_bytes(&rd, &v1) != 0 || nat_rd_end(&rd) != 0)
			goto proto;
		if (v1.len > lim->value_max)
			goto toobig;
		if (m->op == NAT_OP_SET)
			rc = kv_set(server.kv, ns, key, v1);
		else if (m->op == NAT_OP_APPEND)
			rc = kv_append(server.kv, ns, key, v1);
		else
			rc = kv_qpush(server.kv, ns, key, v1);
		if (rc < 0)
			reply_error(c, m->op, m->id, rc);
		else
			reply_ok(c, m->op, m->id);
		break;
	case NAT_OP_GET:
		if (nat_rd_end(&rd) != 0)
			goto proto;
		if ((rc = kv_get(server.kv, ns, key, &out)) < 0)
			reply_error(c, m->op, m->id, rc);
		else
			reply_bytes(c, m->op, m->id, out.p, out.len);
		break;
	case NAT_OP_ADD:
		if (nat_get_i64(&rd, &a) != 0 || nat_rd_end(&rd) != 0)
			goto proto;
		if ((rc = kv_add(server.kv, ns, key, a, &r64)) < 0)
			reply_error(c, m->op, m->id, rc);
		else
			reply_i64(c, m->op, m->id, r64);
		break;
	case NAT_OP_CAS:
		if (nat_get_bytes(&rd, &v1) != 0 || nat_get_bytes(&rd, &v2) != 0 ||
		    nat_rd_end(&rd) != 0)
			goto proto;
		if (v1.len > lim->value_max || v2.len > lim->value_max)
			goto toobig;
		if ((rc = kv_cas(server.kv, ns, key, v1, v2, &out)) < 0)
			reply_error(c, m->op, m->id, rc);
		else
			reply_bytes(c, m->op, m->id, out.p, out.len);
		break;
	case NAT_OP_DELETE:
		if (nat_rd_end(&rd) != 0)
			goto proto;
		if ((rc = kv_delete(server.kv, ns, key)) < 0)
			reply_error(c, m->op, m->id, rc);
		else
			reply_i64(c, m->op, m->id, rc);
		break;
	case NAT_OP_NUM_KEYS:
		if (nat_rd_end(&rd) != 0)
			goto proto;
		reply_i64(c, m->op, m->id, kv_num_keys(server.kv, ns));
		break;
	case NAT_OP_QUEUE_LEN:
		if (nat_rd_end(&rd) != 0)
			goto proto;
		reply_i64(c, m->op, m->id, kv_qlen(server.kv, ns, key));
		break;
	case NAT_OP_CHECK:
	case NAT_OP_WAIT:
		if (m->op == NAT_OP_WAIT && nat_get_i64(&rd, &a) != 0)
			goto proto;
		if ((rc = read_keys(&rd, stack, &keys, &n)) < 0) {
			if (rc == RDZV_ETOOBIG)
				goto toobig;
			if (rc == RDZV_ENOMEM)
				goto nomem;
			goto proto;
		}
		if (nat_rd_end(&rd) != 0)
			goto proto;
		if (m->op == NAT_OP_CHECK) {
			reply_i64(c, m->op, m->id,
			    kv_check(server.kv, ns, keys, n));
			break;
		}
		if (kv_check(server.kv, ns, keys, n)) {
			reply_ok(c, m->op, m->id);
			break;
		}
		if (a == 0) {
			reply_error(c, m->op, m->id, RDZV_ETIMEDOUT);
			break;
		}
		if ((pd = pending_new(c, m, a)) == NULL)
			goto nomem;
		rc = kv_wait(server.kv, ns, keys, n, pending_wake_cb, pd, &pd->w);
		if (rc == 1) {
			reply_ok(c, m->op, m->id);
			pending_free(pd);
		} else if (rc < 0) {
			reply_error(c, m->op, m->id, rc);
			pending_free(pd);
		}
		break;
	case NAT_OP_BARRIER:
		if (nat_get_i64(&rd, &b) != 0 || nat_get_i64(&rd, &a) != 0 ||
		    nat_rd_end(&rd) != 0)
			goto proto;
		if ((pd = pending_new(c, m, a)) == NULL)
			goto nomem;
		rc = kv_barrier(server.kv, ns, key, b, pending_wake_cb, pd, &pd->w);
		if (rc == 1) {
			reply_ok(c, m->op, m->id);
			pending_free(pd);
		} else if (rc < 0) {
			reply_error(c, m->op, m->id, rc);
			pending_free(pd);
		} else if (a == 0) {
			reply_error(c, m->op, m->id, RDZV_ETIMEDOUT);
			pending_free(pd);
		}
		break;
	case NAT_OP_QUEUE_POP:
		if (nat_get_i64(&rd, &a) != 0 || nat_rd_end(&rd) != 0)
			goto proto;
		if (a == 0) {
			rc = kv_qpop(server.kv, ns, key, &item, &ilen);
			if (rc < 0)
				reply_error(c, m->op, m->id, RDZV_ETIMEDOUT);
			else {
				reply_bytes(c, m->op, m->id, item, ilen);
				free(item);
			}
			break;
		}
		if ((pd = pending_new(c, m, a)) == NULL)
			goto nomem;
		rc = kv_qpop_wait(server.kv, ns, key, &item, &ilen, pending_pop_cb,
		    pd, &pd->w);
		if (rc == 1) {
			reply_bytes(c, m->op, m->id, item, ilen);
			free(item);
			pending_free(pd);
		} else if (rc < 0) {
			reply_error(c, m->op, m->id, rc);
			pending_free(pd);
		}
		break;
	case NAT_OP_MULTI_GET:
		if ((rc = read_keys(&rd, stack, &keys, &n)) < 0) {
			if (rc == RDZV_ETOOBIG)
				goto toobig;
			if (rc == RDZV_ENOMEM)
				goto nomem;
			goto proto;
		}
		if (nat_rd_end(&rd) != 0)
			goto proto;
		for (i = 0; i < n; i++)
			if (kv_get(server.kv, ns, keys[i], &out) != 0)
				break;
		if (i < n) {
			reply_error(c, m->op, m->id, RDZV_ENOTFOUND);
			break;
		}
		nat_frame_begin(&wr, conn_reply_buf(c), m->op, NAT_F_REPLY, m->id);
		for (i = 0; i < n; i++) {
			kv_get(server.kv, ns, keys[i], &out);
			nat_put_bytes(&wr, out.p, out.len);
		}
		nat_frame_end(&wr);
		conn_reply_done(c);
		break;
	case NAT_OP_MULTI_SET:
		if (nat_get_i64(&rd, &a) != 0 || a < 0)
			goto proto;
		if ((uint64_t)a > lim->keys_max)
			goto toobig;
		/* Validate every pair before changing anything. */
		{
			struct nat_rd	scan = rd;

			for (i = 0; i < (size_t)a; i++) {
				if (nat_get_bytes(&scan, &key) != 0 ||
				    nat_get_bytes(&scan, &v1) != 0)
					goto proto;
				if (key.len > lim->key_max ||
				    v1.len > lim->value_max)
					goto toobig;
			}
			if (nat_rd_end(&scan) != 0)
				goto proto;
		}
		for (i = 0; rc == 0 && i < (size_t)a; i++) {
			nat_get_bytes(&rd, &key);
			nat_get_bytes(&rd, &v1);
			rc = kv_set(server.kv, ns, key, v1);
		}
		if (rc < 0)
			reply_error(c, m->op, m->id, rc);
		else
			reply_ok(c, m->op, m->id);
		break;
	case NAT_OP_LIST_KEYS:
		if (nat_rd_end(&rd) != 0)
			goto proto;
		nat_frame_begin(&wr, conn_reply_buf(c), m->op, NAT_F_REPLY, m->id);
		acc.wr = &wr;
		acc.n = 0;
		kv_list(server.kv, ns, list_count_cb, &acc);
		nat_put_i64(&wr, acc.n);
		kv_list(server.kv, ns, list_put_cb, &acc);
		nat_frame_end(&wr);
		conn_reply_done(c);
		break;
	case NAT_OP_CANCEL:
		if (nat_get_i64(&rd, &a) != 0 || nat_rd_end(&rd) != 0)
			goto proto;
		LIST_FOREACH(pd, &c->pending, entry)
			if (pd->id == (uint32_t)a && pd->op != NAT_OP_WATCH)
				break;
		if (pd != NULL) {
			reply_error(c, pd->op, pd->id, RDZV_ECANCELED);
			pending_free(pd);
		}
		reply_ok(c, m->op, m->id);
		break;
	case NAT_OP_WATCH:
		if (nat_rd_end(&rd) != 0)
			goto proto;
		n = 0;
		LIST_FOREACH(pd, &c->pending, entry)
			n++;
		if (n >= WATCH_MAX) {
			*why = "too many pending waits and watches";
			rc = RDZV_ETOOBIG;
			goto out;
		}
		if ((pd = pending_new(c, m, -1)) == NULL)
			goto nomem;
		if (ns.len > 0) {
			if ((pd->ns = malloc(ns.len)) == NULL) {
				pending_free(pd);
				goto nomem;
			}
			memcpy(pd->ns, ns.p, ns.len);
		}
		pd->nslen = ns.len;
		rc = kv_watch(server.kv, ns, key, pending_watch_cb, pd, &pd->w);
		if (rc < 0) {
			reply_error(c, m->op, m->id, rc);
			pending_free(pd);
		} else
			reply_ok(c, m->op, m->id);
		break;
	default:
		goto proto;
	}
	rc = 0;
	goto out;

proto:
	*why = "malformed native request payload";
	rc = RDZV_EPROTO;
	goto out;
toobig:
	*why = "native request over a size limit (--key-max, --value-max, "
	    "--keys-max)";
	rc = RDZV_ETOOBIG;
	goto out;
nomem:
	*why = "out of memory";
	rc = RDZV_ENOMEM;
out:
	if (keys != NULL && keys != stack)
		free(keys);
	return rc;
}

ssize_t
native_serve(struct conn *c, const uint8_t *buf, size_t len, const char **why)
{
	struct nat_msg	m;
	size_t		off = 0, need = 0;
	int		r;

	c->need = 0;
	while (off < len) {
		r = nat_decode(buf + off, len - off, &server.cfg->limits, &m,
		    &need);
		if (r == 0) {
			c->need = need;
			break;
		}
		if (r < 0) {
			*why = r == RDZV_ETOOBIG ? "native frame over the size "
			    "limit" : "malformed native frame";
			return r;
		}
		off += (size_t)r;
		if ((r = native_dispatch(c, &m, why)) < 0)
			return r;
		/* Unread replies pile up: serve the rest once the peer reads. */
		if (conn_output_full(c))
			break;
	}
	return (ssize_t)off;
}
