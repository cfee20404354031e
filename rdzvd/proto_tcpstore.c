/*
 * proto_tcpstore.c: the PyTorch TCPStore adapter (dialects 1.13 and 2.x,
 * see shared/reference/tcpstore-wire.md).  Decodes requests with
 * common/wire_tcpstore.c, maps them onto the kv core in the namespace the
 * connection sees, and writes replies in the dialect's format.
 *
 * A TCPStore client has at most one request in flight, so a connection
 * has at most one pending WAIT, BARRIER or blocking pop.  A new request
 * arriving while one is pending means the client gave up on it (a 1.13
 * client timed out, which sends nothing); the wait is dropped silently so
 * no stray STOP_WAITING lands in a later exchange.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "log.h"
#include "rdzv_err.h"
#include "rdzvd.h"

#define TCPS_WATCH_MAX	1024	/* WATCH_KEY registrations per connection */
#define LIST_STACK	32	/* keys handled without allocating */

/* The namespace TCPStore clients on the main port share. */
static const struct slice root_ns = { (const uint8_t *)"", 0 };

static enum op_kind
tcps_op_kind(enum tcps_op op)
{
	switch (op) {
	case TCPS_VALIDATE:	return OPK_VALIDATE;
	case TCPS_SET:		return OPK_SET;
	case TCPS_COMPARE_SET:	return OPK_COMPARE_SET;
	case TCPS_GET:		return OPK_GET;
	case TCPS_ADD:		return OPK_ADD;
	case TCPS_CHECK:	return OPK_CHECK;
	case TCPS_WAIT:		return OPK_WAIT;
	case TCPS_GETNUMKEYS:	return OPK_NUM_KEYS;
	case TCPS_WATCH_KEY:	return OPK_WATCH;
	case TCPS_DELETE_KEY:	return OPK_DELETE;
	case TCPS_APPEND:	return OPK_APPEND;
	case TCPS_MULTI_GET:	return OPK_MULTI_GET;
	case TCPS_MULTI_SET:	return OPK_MULTI_SET;
	case TCPS_CANCEL_WAIT:	return OPK_CANCEL;
	case TCPS_PING:		return OPK_PING;
	case TCPS_QUEUE_PUSH:	return OPK_QUEUE_PUSH;
	case TCPS_QUEUE_POP:	return OPK_QUEUE_POP;
	case TCPS_QUEUE_LEN:	return OPK_QUEUE_LEN;
	case TCPS_LIST_KEYS:	return OPK_LIST_KEYS;
	case TCPS_BARRIER:	return OPK_BARRIER;
	}
	return OPK_PING;
}

static void
tcps_drop_wait(struct conn *c)
{
	if (c->tcps_wait != NULL) {
		kv_waiter_cancel(server.kv, c->tcps_wait);
		c->tcps_wait = NULL;
	}
}

void
tcps_conn_free(struct conn *c)
{
	size_t	i;

	tcps_drop_wait(c);
	tcps_group_release(c);
	for (i = 0; i < c->tcps_nwatch; i++)
		kv_waiter_cancel(server.kv, c->tcps_watch[i]);
	free(c->tcps_watch);
	c->tcps_watch = NULL;
	c->tcps_nwatch = 0;
}

/* A WAIT or BARRIER completed: the client reads one STOP_WAITING byte. */
static void
tcps_wake_cb(struct kv_waiter *w, void *arg)
{
	struct conn	*c = arg;

	c->tcps_wait = NULL;
	tcps_put_u8(conn_reply_buf(c), TCPS_STOP_WAITING);
	conn_reply_done(c);
}

static void
tcps_watch_cb(struct kv_waiter *w, void *arg, int kind, struct slice key,
    struct slice oldv, struct slice newv)
{
	struct conn	*c = arg;

	tcps_put_watch(conn_reply_buf(c), (uint8_t)kind, key, oldv, newv);
	conn_reply_done(c);
}

/* Collects a request's key list into keys (stack or heap). */
static struct slice *
tcps_keys(const struct tcps_req *req, struct slice *stack, size_t nstack)
{
	struct tcps_iter	 it;
	struct slice		*keys = stack, val;
	size_t			 i = 0;

	/* nkeys was validated against the bytes present by the decoder. */
	if (req->nkeys > nstack &&
	    (keys = reallocarray(NULL, req->nkeys, sizeof *keys)) == NULL)
		return NULL;
	tcps_iter_init(&it, req);
	while (i < req->nkeys && tcps_list_next(&it, &keys[i], &val))
		i++;
	return keys;
}

struct list_acc {
	struct evbuffer	*buf;
	int64_t		 n;
};

static void
tcps_list_cb(void *arg, struct slice key)
{
	struct list_acc	*acc = arg;

	tcps_put_bytes(acc->buf, key.p, key.len);
	acc->n++;
}

/*
 * Serves one request.  Returns 0, or a negative RDZV_E* (with *why set)
 * after which the caller closes the connection.
 */
static int
tcps_dispatch(struct conn *c, const struct tcps_req *req, const char **why)
{
	struct slice		 stack[LIST_STACK], *keys, val, key;
	struct tcps_iter	 it;
	struct evbuffer		*out;
	struct list_acc		 acc;
	int64_t			 n;
	int			 rc = 0;
	size_t			 i;
	/* A round's port serves that round's namespace; the main port the root. */
	const struct slice	 ns = c->ns != NULL ?
	    (struct slice){ c->ns->p, c->ns->len } : root_ns;

	metrics.ops[tcps_op_kind(req->op)]++;
	tcps_group_use(c, req);
	switch (req->op) {
	case TCPS_VALIDATE:
		if (req->u32 != TCPS_V2_MAGIC) {
			*why = "VALIDATE with a wrong magic number";
			return RDZV_EPROTO;
		}
		return 0;
	case TCPS_SET:
		rc = kv_set(server.kv, ns, req->key, req->v1);
		break;
	case TCPS_APPEND:
		rc = kv_append(server.kv, ns, req->key, req->v1);
		break;
	case TCPS_GET:
		rc = kv_get(server.kv, ns, req->key, &val);
		if (rc == RDZV_ENOTFOUND && c->dialect == DIALECT_TCPS2) {
			/* Newer servers answer a missing key with empty bytes. */
			val.p = NULL;
			val.len = 0;
			rc = 0;
		} else if (rc == RDZV_ENOTFOUND) {
			/* The 1.13 server drops the connection; clients WAIT
			 * first, so this is a client bug worth logging. */
			*why = "GET of a missing key";
			return RDZV_ENOTFOUND;
		}
		if (rc == 0) {
			tcps_put_bytes(conn_reply_buf(c), val.p, val.len);
			conn_reply_done(c);
		}
		break;
	case TCPS_ADD:
		rc = kv_add(server.kv, ns, req->key, req->num, &n);
		if (rc == RDZV_ENOTINT || rc == RDZV_EINVAL) {
			*why = rc == RDZV_ENOTINT ? "ADD to a key that does not "
			    "hold a decimal integer" : "ADD overflows int64";
			return rc;
		}
		if (rc == 0) {
			tcps_put_i64(conn_reply_buf(c), n);
			conn_reply_done(c);
		}
		break;
	case TCPS_COMPARE_SET:
		rc = kv_cas(server.kv, ns, req->key, req->v1, req->v2, &val);
		if (rc == 0) {
			tcps_put_bytes(conn_reply_buf(c), val.p, val.len);
			conn_reply_done(c);
		}
		break;
	case TCPS_CHECK:
	case TCPS_WAIT:
		if ((keys = tcps_keys(req, stack, LIST_STACK)) == NULL) {
			rc = RDZV_ENOMEM;
			break;
		}
		if (req->op == TCPS_CHECK) {
			rc = kv_check(server.kv, ns, keys, req->nkeys);
			tcps_put_u8(conn_reply_buf(c),
			    rc ? TCPS_READY : TCPS_NOT_READY);
			conn_reply_done(c);
			rc = 0;
		} else {
			rc = kv_wait(server.kv, ns, keys, req->nkeys,
			    tcps_wake_cb, c, &c->tcps_wait);
			if (rc == 1) {
				tcps_put_u8(conn_reply_buf(c), TCPS_STOP_WAITING);
				conn_reply_done(c);
			}
			if (rc >= 0)
				rc = 0;
		}
		if (keys != stack)
			free(keys);
		break;
	case TCPS_BARRIER:
		rc = kv_barrier(server.kv, ns, req->key, req->num,
		    tcps_wake_cb, c, &c->tcps_wait);
		if (rc == RDZV_ENOTINT) {
			*why = "BARRIER on a key that is not a counter";
			return rc;
		}
		if (rc == 1) {
			tcps_put_u8(conn_reply_buf(c), TCPS_STOP_WAITING);
			conn_reply_done(c);
		}
		if (rc >= 0)
			rc = 0;
		break;
	case TCPS_GETNUMKEYS:
		tcps_put_i64(conn_reply_buf(c), kv_num_keys(server.kv, ns));
		conn_reply_done(c);
		break;
	case TCPS_DELETE_KEY:
		rc = kv_delete(server.kv, ns, req->key);
		if (rc >= 0) {
			tcps_put_i64(conn_reply_buf(c), rc);
			conn_reply_done(c);
			rc = 0;
		}
		break;
	case TCPS_WATCH_KEY: {
		struct kv_waiter	**nw;

		if (c->tcps_nwatch >= TCPS_WATCH_MAX) {
			*why = "too many WATCH_KEY registrations";
			return RDZV_ETOOBIG;
		}
		nw = reallocarray(c->tcps_watch, c->tcps_nwatch + 1,
		    sizeof *nw);
		if (nw == NULL) {
			rc = RDZV_ENOMEM;
			break;
		}
		c->tcps_watch = nw;
		rc = kv_watch(server.kv, ns, req->key, tcps_watch_cb, c,
		    &c->tcps_watch[c->tcps_nwatch]);
		if (rc >= 0) {
			c->tcps_nwatch++;
			tcps_put_u8(conn_reply_buf(c), TCPS_WATCH_REGISTERED);
			conn_reply_done(c);
			rc = 0;
		}
		break;
	}
	case TCPS_MULTI_GET:
		out = conn_reply_buf(c);
		tcps_iter_init(&it, req);
		while (tcps_list_next(&it, &key, &val)) {
			if (kv_get(server.kv, ns, key, &val) != 0) {
				val.p = NULL;
				val.len = 0;
			}
			tcps_put_bytes(out, val.p, val.len);
		}
		conn_reply_done(c);
		break;
	case TCPS_MULTI_SET:
		tcps_iter_init(&it, req);
		for (i = 0; rc == 0 && tcps_list_next(&it, &key, &val); i++)
			rc = kv_set(server.kv, ns, key, val);
		break;
	case TCPS_CANCEL_WAIT:
		/* The client reads WAIT_CANCELED whether or not a wait was
		 * pending (the wait may have answered just before). */
		tcps_drop_wait(c);
		tcps_put_u8(conn_reply_buf(c), TCPS_WAIT_CANCELED);
		conn_reply_done(c);
		break;
	case TCPS_PING:
		tcps_put_u32(conn_reply_buf(c), req->u32);
		conn_reply_done(c);
		break;
	case TCPS_QUEUE_PUSH:
		rc = kv_qpush(server.kv, ns, req->key, req->v1);
		break;
	case TCPS_QUEUE_POP: {
		uint8_t	*item = NULL;
		size_t	 ilen = 0;

		/* Length before the pop, then the item if there was one;
		 * a blocking client WAITs on the queue's name first. */
		n = kv_qlen(server.kv, ns, req->key);
		out = conn_reply_buf(c);
		tcps_put_i64(out, n);
		if (n > 0 &&
		    kv_qpop(server.kv, ns, req->key, &item, &ilen) == 0) {
			tcps_put_bytes(out, item, ilen);
			free(item);
		}
		conn_reply_done(c);
		break;
	}
	case TCPS_QUEUE_LEN:
		tcps_put_i64(conn_reply_buf(c),
		    kv_qlen(server.kv, ns, req->key));
		conn_reply_done(c);
		break;
	case TCPS_LIST_KEYS:
		if ((acc.buf = evbuffer_new()) == NULL) {
			rc = RDZV_ENOMEM;
			break;
		}
		acc.n = 0;
		kv_list(server.kv, ns, tcps_list_cb, &acc);
		out = conn_reply_buf(c);
		tcps_put_i64(out, acc.n);
		evbuffer_add_buffer(out, acc.buf);
		evbuffer_free(acc.buf);
		conn_reply_done(c);
		break;
	}
	if (rc < 0) {
		*why = rdzv_strerror(rc);
		return rc;
	}
	return 0;
}

ssize_t
tcps_serve(struct conn *c, const uint8_t *buf, size_t len, const char **why)
{
	struct tcps_req		 req;
	enum tcps_dialect	 d;
	size_t			 off = 0, need = 0;
	int			 r;

	c->need = 0;

	d = c->dialect == DIALECT_TCPS2 ? TCPS_V2 : TCPS_V113;
	while (off < len) {
		r = tcps_decode(d, buf + off, len - off, &server.cfg->limits,
		    &req, &need);
		if (r == 0) {
			c->need = need;
			break;
		}
		if (r < 0) {
			*why = r == RDZV_ETOOBIG ? "request over a size limit "
			    "(--key-max, --value-max, --keys-max)" :
			    "malformed or unknown request";
			return r;
		}
		if (c->tcps_wait != NULL && req.op != TCPS_CANCEL_WAIT)
			tcps_drop_wait(c);
		off += (size_t)r;
		if ((r = tcps_dispatch(c, &req, why)) < 0)
			return r;
		/* Unread replies pile up: serve the rest once the peer reads. */
		if (conn_output_full(c))
			break;
	}
	return (ssize_t)off;
}
