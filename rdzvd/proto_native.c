/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto_native.c: the native rdzv protocol adapter (common/PROTOCOL.md).
 * Frames carry a request id, so requests may be pipelined and waits
 * answer out of order; each wait in flight is a `struct pending` on its
 * connection, with its own deadline, found by id for CANCEL.  Semantic
 * failures (a missing key, a timeout) are error replies; a frame that
 * breaks the protocol or a limit closes the connection.  A connection
 * that proved a job credential (c->scope) reaches its own job only: each
 * op's row in native_handlers says what it may touch (doc/security.md).
 *
 * Why about 1,200 lines: one short decoder per op of the native protocol
 * and the table that dispatches them (native_handlers), with the access
 * each op needs in its row.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "auth.h"
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
	free(c->scope);
	c->scope = NULL;
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

	text = docs_events((struct slice){ pd->ns, pd->nslen }, pd->after);
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

/*
 * AUTH: checks the client's MAC over our nonce and answers with ours.
 * With a third field, the job it speaks for, the MACs are made with that
 * job's credential, derived here from the operator's secret, and the
 * connection is scoped to that job.
 */
static int
native_auth(struct conn *c, const struct nat_msg *m, const char **why)
{
	struct nat_rd	rd;
	struct nat_wr	wr;
	struct slice	cn, mac, job = { NULL, 0 };
	uint8_t		want[NAT_MAC_LEN], ours[NAT_MAC_LEN];
	uint8_t		jkey[RDZV_CRED_KEY_LEN];
	const void	*key = server.token;
	size_t		keylen = server.tokenlen;
	int		rc = 0;

	metrics.ops[OPK_ADMIN]++;
	nat_rd_init(&rd, m->payload);
	if (nat_get_bytes(&rd, &cn) != 0 || nat_get_bytes(&rd, &mac) != 0 ||
	    (rd.left > 0 && nat_get_bytes(&rd, &job) != 0) ||
	    nat_rd_end(&rd) != 0 || cn.len != NAT_NONCE_LEN ||
	    mac.len != NAT_MAC_LEN) {
		*why = "malformed AUTH";
		return RDZV_EPROTO;
	}
	if (server.token == NULL || c->authed) {
		reply_error(c, m->op, m->id, RDZV_EINVAL);
		return 0;
	}
	if (job.p != NULL) {
		if (rdzv_cred_derive(server.token, server.tokenlen, job.p,
		    job.len, jkey) != 0) {
			nat_put_error(c->out, m->op, m->id, RDZV_EAUTH,
			    "not a valid job id");
			*why = "AUTH for an invalid job id";
			return RDZV_EAUTH;
		}
		key = jkey;
		keylen = sizeof jkey;
	}
	if (nat_auth_mac(key, keylen, NAT_AUTH_CLIENT_TAG, c->nonce, cn.p,
	    want) != 0 || !nat_mac_equal(want, mac.p)) {
		nat_put_error(c->out, m->op, m->id, RDZV_EAUTH, job.p != NULL ?
		    "wrong job credential" : "wrong token");
		*why = job.p != NULL ? "wrong job credential" : "wrong token";
		rc = RDZV_EAUTH;
		goto out;
	}
	if (nat_auth_mac(key, keylen, NAT_AUTH_SERVER_TAG, cn.p, c->nonce,
	    ours) != 0) {
		*why = "HMAC failed";
		rc = RDZV_EAUTH;
		goto out;
	}
	if (job.p != NULL) {
		if ((c->scope = malloc(job.len + 1)) == NULL) {
			*why = "out of memory";
			rc = RDZV_ENOMEM;
			goto out;
		}
		memcpy(c->scope, job.p, job.len);
		c->scope[job.len] = '\0';
	}
	c->authed = 1;
	nat_frame_begin(&wr, conn_reply_buf(c), m->op, NAT_F_REPLY, m->id);
	nat_put_bytes(&wr, ours, sizeof ours);
	nat_frame_end(&wr);
	conn_reply_done(c);
out:
	explicit_bzero(jkey, sizeof jkey);
	return rc;
}

/*
 * One request being served: its frame, a reader over the payload past
 * the parts its op's flags name (namespace, key, job), and those parts.
 * A handler replies (or registers a wait) and returns 0, or returns a
 * negative RDZV_E* that closes the connection, with why set when the
 * default reason for that code would not say enough.
 */
struct nat_req {
	struct conn		*c;
	const struct nat_msg	*m;
	struct nat_rd		 rd;
	struct slice		 ns;	/* NF_NS */
	struct slice		 key;	/* NF_KEY */
	struct slice		 job;	/* NF_JOB */
	const char		*why;
};

/* What an op's payload starts with and how it is served. */
#define NF_NS		0x01	/* b namespace */
#define NF_KEY		0x02	/* then b key */
#define NF_WRITES	0x04	/* refused in rdzvd's own (NUL-led) spaces */
#define NF_JOB		0x08	/* b job: a rendezvous or admin op */
#define NF_PUSH		0x20	/* server to client only */

/*
 * Who may send an op: what a connection scoped to a job (a job
 * credential) must own for it.  An unscoped connection (the operator's
 * secret, or no token at all) may send every op.
 */
enum nat_access {
	NA_ANY,		/* nothing of anyone's: PING, CANCEL */
	NA_NS,		/* the namespace: a round of its job */
	NA_JOB,		/* the job (NF_JOB, or the payload's first field) */
	NA_OPERATOR,	/* never: every job's, or the daemon's */
};

struct nat_handler {
	enum op_kind	 kind;	/* the metrics counter */
	int		 flags;
	int		(*fn)(struct nat_req *);
	enum nat_access	 access;
};

static int
native_end(struct nat_req *r)
{
	return nat_rd_end(&r->rd) != 0 ? RDZV_EPROTO : 0;
}

/* A value read from the payload, within --value-max. */
static int
native_value(struct nat_req *r, struct slice *v)
{
	if (nat_get_bytes(&r->rd, v) != 0)
		return RDZV_EPROTO;
	return v->len > server.cfg->limits.value_max ? RDZV_ETOOBIG : 0;
}

static void
native_keys_free(struct slice *keys, struct slice *stack)
{
	if (keys != NULL && keys != stack)
		free(keys);
}

/* The end of a one-shot wait registered as pd: rc 1 = already done, < 0
 * = refused; 0 leaves the wait to its callback or deadline. */
static void
native_wait_started(struct nat_req *r, struct pending *pd, int rc)
{
	if (rc == 1)
		reply_ok(r->c, r->m->op, r->m->id);
	else if (rc < 0)
		reply_error(r->c, r->m->op, r->m->id, rc);
	if (rc != 0)
		pending_free(pd);
}

static int
native_ping(struct nat_req *r)
{
	struct slice	v;

	if (nat_get_bytes(&r->rd, &v) != 0 || native_end(r) != 0)
		return RDZV_EPROTO;
	reply_bytes(r->c, r->m->op, r->m->id, v.p, v.len);
	return 0;
}

/* The empty reply of a write that is done (rc >= 0), or rc's error.
 * Returns 0: the connection goes on either way. */
static int
native_reply_rc(struct nat_req *r, int rc)
{
	if (rc < 0)
		reply_error(r->c, r->m->op, r->m->id, rc);
	else
		reply_ok(r->c, r->m->op, r->m->id);
	return 0;
}

/* SET, APPEND, QUEUE_PUSH: a key and a value, an empty reply. */
static int
native_put(struct nat_req *r)
{
	struct slice	v;
	int		rc;

	if ((rc = native_value(r, &v)) != 0 || (rc = native_end(r)) != 0)
		return rc;
	if (r->m->op == NAT_OP_SET)
		rc = kv_set(server.kv, r->ns, r->key, v);
	else if (r->m->op == NAT_OP_APPEND)
		rc = kv_append(server.kv, r->ns, r->key, v);
	else
		rc = kv_qpush(server.kv, r->ns, r->key, v);
	return native_reply_rc(r, rc);
}

static int
native_get(struct nat_req *r)
{
	struct slice	out;
	int		rc;

	if (native_end(r) != 0)
		return RDZV_EPROTO;
	if ((rc = kv_get(server.kv, r->ns, r->key, &out)) < 0)
		reply_error(r->c, r->m->op, r->m->id, rc);
	else
		reply_bytes(r->c, r->m->op, r->m->id, out.p, out.len);
	return 0;
}

static int
native_add(struct nat_req *r)
{
	int64_t	delta, v;
	int	rc;

	if (nat_get_i64(&r->rd, &delta) != 0 || native_end(r) != 0)
		return RDZV_EPROTO;
	if ((rc = kv_add(server.kv, r->ns, r->key, delta, &v)) < 0)
		reply_error(r->c, r->m->op, r->m->id, rc);
	else
		reply_i64(r->c, r->m->op, r->m->id, v);
	return 0;
}

static int
native_cas(struct nat_req *r)
{
	struct slice	expected, desired, out;
	int		rc;

	if ((rc = native_value(r, &expected)) != 0 ||
	    (rc = native_value(r, &desired)) != 0 ||
	    (rc = native_end(r)) != 0)
		return rc;
	if ((rc = kv_cas(server.kv, r->ns, r->key, expected, desired,
	    &out)) < 0)
		reply_error(r->c, r->m->op, r->m->id, rc);
	else
		reply_bytes(r->c, r->m->op, r->m->id, out.p, out.len);
	return 0;
}

static int
native_delete(struct nat_req *r)
{
	int	rc;

	if (native_end(r) != 0)
		return RDZV_EPROTO;
	if ((rc = kv_delete(server.kv, r->ns, r->key)) < 0)
		reply_error(r->c, r->m->op, r->m->id, rc);
	else
		reply_i64(r->c, r->m->op, r->m->id, rc);
	return 0;
}

static int
native_num_keys(struct nat_req *r)
{
	if (native_end(r) != 0)
		return RDZV_EPROTO;
	reply_i64(r->c, r->m->op, r->m->id, kv_num_keys(server.kv, r->ns));
	return 0;
}

static int
native_queue_len(struct nat_req *r)
{
	if (native_end(r) != 0)
		return RDZV_EPROTO;
	reply_i64(r->c, r->m->op, r->m->id, kv_qlen(server.kv, r->ns, r->key));
	return 0;
}

/* CHECK and WAIT: WAIT's timeout, then the keys. */
static int
native_check_wait(struct nat_req *r)
{
	struct slice	 stack[KEYS_STACK], *keys = NULL;
	struct pending	*pd;
	int64_t		 timeout = 0;
	size_t		 n = 0;
	int		 rc;

	if (r->m->op == NAT_OP_WAIT && nat_get_i64(&r->rd, &timeout) != 0)
		return RDZV_EPROTO;
	if ((rc = read_keys(&r->rd, stack, &keys, &n)) < 0)
		return rc;
	if ((rc = native_end(r)) != 0)
		goto out;
	if (r->m->op == NAT_OP_CHECK)
		reply_i64(r->c, r->m->op, r->m->id,
		    kv_check(server.kv, r->ns, keys, n));
	else if (kv_check(server.kv, r->ns, keys, n))
		reply_ok(r->c, r->m->op, r->m->id);
	else if (timeout == 0)
		reply_error(r->c, r->m->op, r->m->id, RDZV_ETIMEDOUT);
	else if ((pd = pending_new(r->c, r->m, timeout)) == NULL)
		rc = RDZV_ENOMEM;
	else
		native_wait_started(r, pd, kv_wait(server.kv, r->ns, keys, n,
		    pending_wake_cb, pd, &pd->w));
out:
	native_keys_free(keys, stack);
	return rc;
}

static int
native_barrier(struct nat_req *r)
{
	struct pending	*pd;
	int64_t		 world, timeout;
	int		 rc;

	if (nat_get_i64(&r->rd, &world) != 0 ||
	    nat_get_i64(&r->rd, &timeout) != 0 || native_end(r) != 0)
		return RDZV_EPROTO;
	if ((pd = pending_new(r->c, r->m, timeout)) == NULL)
		return RDZV_ENOMEM;
	rc = kv_barrier(server.kv, r->ns, r->key, world, pending_wake_cb, pd,
	    &pd->w);
	if (rc == 0 && timeout == 0) {
		reply_error(r->c, r->m->op, r->m->id, RDZV_ETIMEDOUT);
		pending_free(pd);
	} else
		native_wait_started(r, pd, rc);
	return 0;
}

static int
native_queue_pop(struct nat_req *r)
{
	struct pending	*pd;
	uint8_t		*item;
	size_t		 len;
	int64_t		 timeout;
	int		 rc;

	if (nat_get_i64(&r->rd, &timeout) != 0 || native_end(r) != 0)
		return RDZV_EPROTO;
	if (timeout == 0) {
		if (kv_qpop(server.kv, r->ns, r->key, &item, &len) < 0)
			reply_error(r->c, r->m->op, r->m->id, RDZV_ETIMEDOUT);
		else {
			reply_bytes(r->c, r->m->op, r->m->id, item, len);
			free(item);
		}
		return 0;
	}
	if ((pd = pending_new(r->c, r->m, timeout)) == NULL)
		return RDZV_ENOMEM;
	rc = kv_qpop_wait(server.kv, r->ns, r->key, &item, &len,
	    pending_pop_cb, pd, &pd->w);
	if (rc == 1) {
		reply_bytes(r->c, r->m->op, r->m->id, item, len);
		free(item);
	} else if (rc < 0)
		reply_error(r->c, r->m->op, r->m->id, rc);
	if (rc != 0)
		pending_free(pd);
	return 0;
}

static int
native_multi_get(struct nat_req *r)
{
	struct slice	 stack[KEYS_STACK], *keys = NULL, out;
	struct nat_wr	 wr;
	size_t		 n = 0, i;
	int		 rc;

	if ((rc = read_keys(&r->rd, stack, &keys, &n)) < 0)
		return rc;
	if ((rc = native_end(r)) != 0)
		goto out;
	for (i = 0; i < n; i++)
		if (kv_get(server.kv, r->ns, keys[i], &out) != 0)
			break;
	if (i < n) {
		reply_error(r->c, r->m->op, r->m->id, RDZV_ENOTFOUND);
		goto out;
	}
	nat_frame_begin(&wr, conn_reply_buf(r->c), r->m->op, NAT_F_REPLY,
	    r->m->id);
	for (i = 0; i < n; i++) {
		kv_get(server.kv, r->ns, keys[i], &out);
		nat_put_bytes(&wr, out.p, out.len);
	}
	nat_frame_end(&wr);
	conn_reply_done(r->c);
out:
	native_keys_free(keys, stack);
	return rc;
}

static int
native_multi_set(struct nat_req *r)
{
	const struct wire_limits *lim = &server.cfg->limits;
	struct nat_rd	 scan;
	struct slice	 key, v;
	int64_t		 n;
	size_t		 i;
	int		 rc = 0;

	if (nat_get_i64(&r->rd, &n) != 0 || n < 0)
		return RDZV_EPROTO;
	if ((uint64_t)n > lim->keys_max)
		return RDZV_ETOOBIG;
	/* Validate every pair before changing anything. */
	scan = r->rd;
	for (i = 0; i < (size_t)n; i++) {
		if (nat_get_bytes(&scan, &key) != 0 ||
		    nat_get_bytes(&scan, &v) != 0)
			return RDZV_EPROTO;
		if (key.len > lim->key_max || v.len > lim->value_max)
			return RDZV_ETOOBIG;
	}
	if (nat_rd_end(&scan) != 0)
		return RDZV_EPROTO;
	for (i = 0; rc == 0 && i < (size_t)n; i++) {
		nat_get_bytes(&r->rd, &key);
		nat_get_bytes(&r->rd, &v);
		rc = kv_set(server.kv, r->ns, key, v);
	}
	return native_reply_rc(r, rc);
}

static int
native_list_keys(struct nat_req *r)
{
	struct nat_wr	wr;
	struct list_acc	acc;

	if (native_end(r) != 0)
		return RDZV_EPROTO;
	nat_frame_begin(&wr, conn_reply_buf(r->c), r->m->op, NAT_F_REPLY,
	    r->m->id);
	acc.wr = &wr;
	acc.n = 0;
	kv_list(server.kv, r->ns, list_count_cb, &acc);
	nat_put_i64(&wr, acc.n);
	kv_list(server.kv, r->ns, list_put_cb, &acc);
	nat_frame_end(&wr);
	conn_reply_done(r->c);
	return 0;
}

/* CANCEL: the wait with that id replies ECANCELED; CANCEL itself OK. */
static int
native_cancel(struct nat_req *r)
{
	struct pending	*pd;
	int64_t		 id;

	if (nat_get_i64(&r->rd, &id) != 0 || native_end(r) != 0)
		return RDZV_EPROTO;
	LIST_FOREACH(pd, &r->c->pending, entry)
		if (pd->id == (uint32_t)id && pd->op != NAT_OP_WATCH)
			break;
	if (pd != NULL) {
		reply_error(r->c, pd->op, pd->id, RDZV_ECANCELED);
		pending_free(pd);
	}
	reply_ok(r->c, r->m->op, r->m->id);
	return 0;
}

static int
native_watch(struct nat_req *r)
{
	struct pending	*pd;
	size_t		 n = 0;
	int		 rc;

	if (native_end(r) != 0)
		return RDZV_EPROTO;
	LIST_FOREACH(pd, &r->c->pending, entry)
		n++;
	if (n >= WATCH_MAX) {
		r->why = "too many pending waits and watches";
		return RDZV_ETOOBIG;
	}
	if ((pd = pending_new(r->c, r->m, -1)) == NULL)
		return RDZV_ENOMEM;
	if (r->ns.len > 0) {
		if ((pd->ns = malloc(r->ns.len)) == NULL) {
			pending_free(pd);
			return RDZV_ENOMEM;
		}
		memcpy(pd->ns, r->ns.p, r->ns.len);
	}
	pd->nslen = r->ns.len;
	rc = kv_watch(server.kv, r->ns, r->key, pending_watch_cb, pd, &pd->w);
	if (rc < 0) {
		reply_error(r->c, r->m->op, r->m->id, rc);
		pending_free(pd);
	} else
		reply_ok(r->c, r->m->op, r->m->id);
	return 0;
}

/* A JSON document or text as the reply, or ENOTFOUND when text is NULL
 * (an unknown job). */
static void
native_reply_text(struct nat_req *r, char *text)
{
	if (text == NULL) {
		round_reply_rc(r->c, r->m->op, r->m->id, RDZV_ENOTFOUND);
		return;
	}
	reply_bytes(r->c, r->m->op, r->m->id, text, strlen(text));
	free(text);
}

/* ADMIN_STATUS, ADMIN_JOBS: no arguments. */
static int
native_admin_doc(struct nat_req *r)
{
	char	*text;

	if (native_end(r) != 0)
		return RDZV_EPROTO;
	text = r->m->op == NAT_OP_ADMIN_STATUS ? docs_status() : docs_jobs();
	if (text == NULL)
		return RDZV_ENOMEM;
	native_reply_text(r, text);
	return 0;
}

static int
native_admin_job(struct nat_req *r)
{
	if (native_end(r) != 0)
		return RDZV_EPROTO;
	native_reply_text(r, docs_job(r->job));
	return 0;
}

static int
native_job_status(struct nat_req *r)
{
	if (native_end(r) != 0)
		return RDZV_EPROTO;
	native_reply_text(r, rz_status(server.rz, r->job, mono_ms()));
	return 0;
}

/* ADMIN_EVENTS: the job's events after a sequence number, waiting up to
 * a timeout for the first one. */
static int
native_admin_events(struct nat_req *r)
{
	struct pending	*pd;
	char		 nsbuf[RZ_ID_MAX + 32], keybuf[32];
	struct slice	 ens, ekey;
	int64_t		 after, timeout;

	if (nat_get_i64(&r->rd, &after) != 0 ||
	    nat_get_i64(&r->rd, &timeout) != 0 || native_end(r) != 0)
		return RDZV_EPROTO;
	if (rz_event_row(server.rz, r->job, after, nsbuf, sizeof nsbuf, &ens,
	    keybuf, sizeof keybuf, &ekey) != 0) {
		round_reply_rc(r->c, r->m->op, r->m->id, RDZV_ENOTFOUND);
		return 0;
	}
	if ((pd = pending_new(r->c, r->m, timeout > 0 ? timeout : 0)) == NULL)
		return RDZV_ENOMEM;
	if ((pd->ns = malloc(r->job.len)) == NULL) {
		pending_free(pd);
		return RDZV_ENOMEM;
	}
	memcpy(pd->ns, r->job.p, r->job.len);
	pd->nslen = r->job.len;
	pd->after = after;
	/* Something newer already, or no waiting asked: answer now. */
	if (timeout <= 0 || kv_wait(server.kv, ens, &ekey, 1,
	    pending_events_cb, pd, &pd->w) != 0) {
		events_reply(pd);
		pending_free(pd);
	}
	return 0;
}

/* A rendezvous request for the round wiring (round.c), its op and id
 * from r's frame. */
static void
native_round_req(struct nat_req *r, struct round_req *rq)
{
	memset(rq, 0, sizeof *rq);
	rq->op = r->m->op;
	rq->id = r->m->id;
	rq->job = r->job;
}

/* HEARTBEAT: a node id, then maybe repairable, then maybe the
 * replacements that never stepped, then maybe the round a worker last
 * stepped in (each absent from an older agent). */
static int
native_heartbeat(struct nat_req *r)
{
	struct round_req	rq;

	native_round_req(r, &rq);
	rq.repairable = rq.stepped = -1;	/* not said */
	if (nat_get_i64(&r->rd, &rq.node_id) != 0 ||
	    (r->rd.left > 0 && nat_get_i64(&r->rd, &rq.repairable) != 0) ||
	    (r->rd.left > 0 && (nat_get_i64(&r->rd, &rq.unjoined) != 0 ||
	    rq.unjoined < 0)) ||
	    (r->rd.left > 0 && (nat_get_i64(&r->rd, &rq.stepped) != 0 ||
	    rq.stepped < 0)) || native_end(r) != 0)
		return RDZV_EPROTO;
	round_heartbeat(r->c, &rq);
	return 0;
}

/* LEAVE: a node id. */
static int
native_leave(struct nat_req *r)
{
	struct round_req	rq;

	native_round_req(r, &rq);
	if (nat_get_i64(&r->rd, &rq.node_id) != 0 || native_end(r) != 0)
		return RDZV_EPROTO;
	round_leave(r->c, &rq);
	return 0;
}

/* SUCCEEDED: a node id and a round, and maybe the replacements that
 * never joined. */
static int
native_succeeded(struct nat_req *r)
{
	struct round_req	rq;

	native_round_req(r, &rq);
	if (nat_get_i64(&r->rd, &rq.node_id) != 0 ||
	    nat_get_i64(&r->rd, &rq.round) != 0 ||
	    (r->rd.left > 0 && nat_get_i64(&r->rd, &rq.unjoined) != 0) ||
	    native_end(r) != 0)
		return RDZV_EPROTO;
	round_succeeded(r->c, &rq);
	return 0;
}

/* ADMIN_CLOSE: a reason. */
static int
native_admin_close(struct nat_req *r)
{
	struct round_req	rq;

	native_round_req(r, &rq);
	if (nat_get_bytes(&r->rd, &rq.reason) != 0 || native_end(r) != 0)
		return RDZV_EPROTO;
	round_admin_close(r->c, &rq);
	return 0;
}

/* ADMIN_FORGET: the job alone. */
static int
native_admin_forget(struct nat_req *r)
{
	struct round_req	rq;

	native_round_req(r, &rq);
	if (native_end(r) != 0)
		return RDZV_EPROTO;
	round_admin_forget(r->c, &rq);
	return 0;
}

/* ADMIN_EVICT: a node id, and maybe now (1: drop it at once). */
static int
native_admin_evict(struct nat_req *r)
{
	struct round_req	rq;

	native_round_req(r, &rq);
	if (nat_get_i64(&r->rd, &rq.node_id) != 0 ||
	    (r->rd.left > 0 && nat_get_i64(&r->rd, &rq.now) != 0) ||
	    native_end(r) != 0)
		return RDZV_EPROTO;
	round_admin_evict(r->c, &rq);
	return 0;
}

/* JOIN, FAILURE and READY: the whole payload is the op's message. */
static int
native_join(struct nat_req *r)
{
	struct round_req	rq;

	native_round_req(r, &rq);
	if (nat_join_decode(r->m->payload, &rq.join) != 0)
		return RDZV_EPROTO;
	round_join(r->c, &rq);
	return 0;
}

static int
native_failure(struct nat_req *r)
{
	struct round_req	rq;

	native_round_req(r, &rq);
	if (nat_failure_decode(r->m->payload, &rq.failure) != 0)
		return RDZV_EPROTO;
	round_failure(r->c, &rq);
	return 0;
}

static int
native_ready(struct nat_req *r)
{
	struct round_req	rq;

	native_round_req(r, &rq);
	if (nat_ready_decode(r->m->payload, &rq.ready) != 0)
		return RDZV_EPROTO;
	round_ready(r->c, &rq);
	return 0;
}

/*
 * Every op, one row: its metrics counter, what its payload starts with
 * and how it is served (common/PROTOCOL.md).  AUTH is served before the
 * table (it is the one op allowed before authentication).
 */
static const struct nat_handler native_handlers[NAT_OP_MAX + 1] = {
	[NAT_OP_PING] = { OPK_PING, 0, native_ping, NA_ANY },
	[NAT_OP_SET] = { OPK_SET, NF_NS | NF_KEY | NF_WRITES, native_put,
	    NA_NS },
	[NAT_OP_GET] = { OPK_GET, NF_NS | NF_KEY, native_get, NA_NS },
	[NAT_OP_ADD] = { OPK_ADD, NF_NS | NF_KEY | NF_WRITES, native_add,
	    NA_NS },
	[NAT_OP_CAS] = { OPK_COMPARE_SET, NF_NS | NF_KEY | NF_WRITES,
	    native_cas, NA_NS },
	[NAT_OP_WAIT] = { OPK_WAIT, NF_NS, native_check_wait, NA_NS },
	[NAT_OP_CHECK] = { OPK_CHECK, NF_NS, native_check_wait, NA_NS },
	[NAT_OP_DELETE] = { OPK_DELETE, NF_NS | NF_KEY | NF_WRITES,
	    native_delete, NA_NS },
	[NAT_OP_NUM_KEYS] = { OPK_NUM_KEYS, NF_NS, native_num_keys, NA_NS },
	[NAT_OP_APPEND] = { OPK_APPEND, NF_NS | NF_KEY | NF_WRITES,
	    native_put, NA_NS },
	[NAT_OP_MULTI_GET] = { OPK_MULTI_GET, NF_NS, native_multi_get, NA_NS },
	[NAT_OP_MULTI_SET] = { OPK_MULTI_SET, NF_NS | NF_WRITES,
	    native_multi_set, NA_NS },
	[NAT_OP_QUEUE_PUSH] = { OPK_QUEUE_PUSH, NF_NS | NF_KEY | NF_WRITES,
	    native_put, NA_NS },
	[NAT_OP_QUEUE_POP] = { OPK_QUEUE_POP, NF_NS | NF_KEY | NF_WRITES,
	    native_queue_pop, NA_NS },
	[NAT_OP_QUEUE_LEN] = { OPK_QUEUE_LEN, NF_NS | NF_KEY,
	    native_queue_len, NA_NS },
	[NAT_OP_LIST_KEYS] = { OPK_LIST_KEYS, NF_NS, native_list_keys, NA_NS },
	[NAT_OP_BARRIER] = { OPK_BARRIER, NF_NS | NF_KEY | NF_WRITES,
	    native_barrier, NA_NS },
	[NAT_OP_CANCEL] = { OPK_CANCEL, 0, native_cancel, NA_ANY },
	[NAT_OP_WATCH] = { OPK_WATCH, NF_NS | NF_KEY, native_watch, NA_NS },
	[NAT_OP_WATCH_EVENT] = { OPK_WATCH, NF_PUSH, NULL },
	[NAT_OP_JOIN] = { OPK_JOIN, 0, native_join, NA_JOB },
	[NAT_OP_HEARTBEAT] = { OPK_HEARTBEAT, NF_JOB, native_heartbeat,
	    NA_JOB },
	[NAT_OP_LEAVE] = { OPK_LEAVE, NF_JOB, native_leave, NA_JOB },
	[NAT_OP_FAILURE] = { OPK_FAILURE, 0, native_failure, NA_JOB },
	[NAT_OP_SUCCEEDED] = { OPK_SUCCEEDED, NF_JOB, native_succeeded,
	    NA_JOB },
	[NAT_OP_ROUND] = { OPK_JOIN, NF_PUSH, NULL },
	[NAT_OP_JOB_STATUS] = { OPK_JOB_STATUS, NF_JOB,
	    native_job_status, NA_JOB },
	[NAT_OP_ADMIN_STATUS] = { OPK_ADMIN, 0, native_admin_doc, NA_OPERATOR },
	[NAT_OP_ADMIN_JOBS] = { OPK_ADMIN, 0, native_admin_doc, NA_OPERATOR },
	[NAT_OP_ADMIN_JOB] = { OPK_ADMIN, NF_JOB,
	    native_admin_job, NA_JOB },
	[NAT_OP_ADMIN_EVENTS] = { OPK_ADMIN, NF_JOB,
	    native_admin_events, NA_JOB },
	[NAT_OP_ADMIN_CLOSE] = { OPK_ADMIN, NF_JOB, native_admin_close,
	    NA_JOB },
	[NAT_OP_ADMIN_EVICT] = { OPK_ADMIN, NF_JOB, native_admin_evict,
	    NA_OPERATOR },
	[NAT_OP_AUTH_CHALLENGE] = { OPK_ADMIN, NF_PUSH, NULL },
	[NAT_OP_AUTH] = { OPK_ADMIN, 0, NULL },
	[NAT_OP_READY] = { OPK_READY, 0, native_ready, NA_JOB },
	[NAT_OP_STRAGGLER] = { OPK_JOIN, NF_PUSH, NULL },
	[NAT_OP_DRAIN] = { OPK_JOIN, NF_PUSH, NULL },
	[NAT_OP_ADMIN_FORGET] = { OPK_ADMIN, NF_JOB, native_admin_forget,
	    NA_OPERATOR },
};

/*
 * Reads what the op's flags say its payload starts with.  Returns 0, 1
 * for a write into rdzvd's own (NUL-led, read-only) namespaces, which is
 * refused with EINVAL before its key is read, or a negative RDZV_E*.
 */
static int
native_prefix(struct nat_req *r, int flags)
{
	const struct wire_limits *lim = &server.cfg->limits;

	if (flags & NF_JOB)
		return nat_get_bytes(&r->rd, &r->job) != 0 ? RDZV_EPROTO : 0;
	if (flags & NF_NS) {
		if (nat_get_bytes(&r->rd, &r->ns) != 0)
			return RDZV_EPROTO;
		if (r->ns.len > lim->ns_max)
			return RDZV_ETOOBIG;
		if ((flags & NF_WRITES) && r->ns.len > 0 && r->ns.p[0] == '\0')
			return 1;
	}
	if (flags & NF_KEY) {
		if (nat_get_bytes(&r->rd, &r->key) != 0)
			return RDZV_EPROTO;
		if (r->key.len > lim->key_max)
			return RDZV_ETOOBIG;
	}
	return 0;
}

/*
 * Whether ns is the namespace of one of job's rounds, "job/<job>/round/
 * <n>": what a job credential's key-value ops may reach.  Nothing else:
 * not "job/<job>/..." at large, which can be another job's ("job/a/b" of
 * job "a/b"), nor the root or rdzvd's own (NUL-led) spaces.  A name
 * ending in "/round/<digits>" names one job and round only, as no digit
 * is a '/'.
 */
static int
native_ns_in_scope(const char *job, struct slice ns)
{
	static const char	 tag[] = "/round/";
	size_t			 jl = strlen(job), i, n;
	const uint8_t		*p;

	if (ns.len < 4 + jl + sizeof tag || memcmp(ns.p, "job/", 4) != 0 ||
	    memcmp(ns.p + 4, job, jl) != 0 ||
	    memcmp(ns.p + 4 + jl, tag, sizeof tag - 1) != 0)
		return 0;
	p = ns.p + 4 + jl + sizeof tag - 1;
	n = ns.len - 4 - jl - (sizeof tag - 1);
	if (n == 0 || n > 18)
		return 0;
	for (i = 0; i < n; i++)
		if (p[i] < '0' || p[i] > '9')
			return 0;
	return 1;
}

/*
 * A job credential's request that reaches past its job: an EAUTH reply
 * saying what was refused and which credential would do, logged with
 * the peer and counted as rdzvd_errors_total{kind="forbidden"}.  The
 * connection stays open (the request changed nothing).
 */
static void
native_forbid(struct nat_req *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
native_forbid(struct nat_req *r, const char *fmt, ...)
{
	char	msg[512];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	log_info("%s: refused op %u: %s", r->c->peer, r->m->op, msg);
	metrics.errors[ERRK_FORBIDDEN]++;
	nat_put_error(conn_reply_buf(r->c), r->m->op, r->m->id, RDZV_EAUTH,
	    msg);
	conn_reply_done(r->c);
}

/* The operator's ops, named in refusals as an operator knows them. */
static const char *const native_op_names[NAT_OP_MAX + 1] = {
	[NAT_OP_ADMIN_STATUS] = "ADMIN_STATUS (rdzvctl status)",
	[NAT_OP_ADMIN_JOBS] = "ADMIN_JOBS (rdzvctl jobs)",
	[NAT_OP_ADMIN_EVICT] = "ADMIN_EVICT (rdzvctl evict)",
	[NAT_OP_ADMIN_FORGET] = "ADMIN_FORGET (rdzvctl forget)",
};

/*
 * Decides whether r's connection may send r's op (h->access): 0 yes, 1
 * refused (replied), or RDZV_EPROTO when the job field it names is not
 * there.  Runs after native_prefix() read the namespace or job.
 */
static int
native_authorize(struct nat_req *r, const struct nat_handler *h)
{
	const char	*scope = r->c->scope;
	struct nat_rd	 peek;
	struct slice	 job;
	char		 esc[128];

	if (scope == NULL)
		return 0;	/* the operator, or no token: everything */
	switch (h->access) {
	case NA_ANY:
		return 0;
	case NA_NS:
		if (native_ns_in_scope(scope, r->ns))
			return 0;
		log_escape(esc, sizeof esc, r->ns.p, r->ns.len);
		native_forbid(r, "job %s's credential reaches only its rounds' "
		    "namespaces (job/%s/round/N), not \"%s\": that needs the "
		    "operator's secret or that job's credential", scope, scope,
		    esc);
		return 1;
	case NA_JOB:
		job = r->job;
		if (!(h->flags & NF_JOB)) {
			/* JOIN, FAILURE, READY: the job is the first field. */
			peek = r->rd;
			if (nat_get_bytes(&peek, &job) != 0)
				return RDZV_EPROTO;
		}
		if (job.len == strlen(scope) &&
		    memcmp(job.p, scope, job.len) == 0)
			return 0;
		log_escape(esc, sizeof esc, job.p, job.len);
		native_forbid(r, "job %s's credential cannot reach job \"%s\": "
		    "that needs the operator's secret or that job's credential",
		    scope, esc);
		return 1;
	case NA_OPERATOR:
		break;
	}
	native_forbid(r, "%s needs the operator's secret: this connection "
	    "holds job %s's credential", native_op_names[r->m->op] != NULL ?
	    native_op_names[r->m->op] : metrics_op_name(h->kind), scope);
	return 1;
}

/*
 * Serves one frame.  Returns 0 (replied, or a wait registered) or a
 * negative RDZV_E* that closes the connection (*why set).
 */
static int
native_dispatch(struct conn *c, const struct nat_msg *m, const char **why)
{
	const struct nat_handler	*h = &native_handlers[m->op];
	struct nat_req			 r;
	int				 rc;

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
	/* A push, or an op the table has no server for. */
	if ((h->flags & NF_PUSH) || h->fn == NULL) {
		*why = "a client sent a server push";
		return RDZV_EPROTO;
	}
	metrics.ops[h->kind]++;

	memset(&r, 0, sizeof r);
	r.c = c;
	r.m = m;
	nat_rd_init(&r.rd, m->payload);
	if ((rc = native_prefix(&r, h->flags)) == 1) {
		/* A job credential hears it may not, not that it is bad. */
		if (native_authorize(&r, h) == 0)
			reply_error(c, m->op, m->id, RDZV_EINVAL);
		return 0;
	}
	if (rc == 0 && (rc = native_authorize(&r, h)) == 1)
		return 0;
	if (rc == 0)
		rc = h->fn(&r);
	if (rc == 0)
		return 0;
	if (r.why != NULL)
		*why = r.why;
	else if (rc == RDZV_ETOOBIG)
		*why = "native request over a size limit (--key-max, "
		    "--value-max, --keys-max)";
	else if (rc == RDZV_ENOMEM)
		*why = "out of memory";
	else {
		*why = m->op >= NAT_OP_JOIN ? "malformed rendezvous request" :
		    "malformed native request payload";
		rc = RDZV_EPROTO;
	}
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
