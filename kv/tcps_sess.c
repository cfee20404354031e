/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcps_sess.c: TCPStore requests applied to the kv core (see tcps_sess.h),
 * one handler per operation in one table.  Semantics follow torch's
 * reference servers (shared/reference/tcpstore-wire.md): what each
 * request does to the store, what it answers in which dialect, and which
 * requests close the connection.  Pure: no sockets, no clock, no loop.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "rdzv_err.h"
#include "tcps_sess.h"

#define SESS_KEYS_STACK	32	/* CHECK/WAIT keys handled without malloc */

typedef int	(*sess_op_fn)(struct tcps_sess *, const struct tcps_req *,
		    const char **why);

static struct evbuffer *
sess_out(struct tcps_sess *s)
{
	return (s->io->reply_buf(s->arg));
}

/* Ends a reply whose puts returned put (0, or -1 on allocation). */
static int
sess_done(struct tcps_sess *s, int put)
{
	if (put != 0)
		return (RDZV_ENOMEM);
	s->io->reply_done(s->arg);
	return (0);
}

static void
sess_drop_wait(struct tcps_sess *s)
{
	if (s->wait != NULL) {
		kv_waiter_cancel(s->kv, s->wait);
		s->wait = NULL;
	}
}

/* A WAIT or BARRIER completed: the client reads one STOP_WAITING byte. */
static void
sess_wake_cb(struct kv_waiter *w, void *arg)
{
	struct tcps_sess	*s = arg;

	s->wait = NULL;
	(void)tcps_put_u8(sess_out(s), TCPS_STOP_WAITING);
	s->io->reply_done(s->arg);
}

/* A watched key changed: a 1.13 WATCH_KEY push. */
static void
sess_watch_cb(struct kv_waiter *w, void *arg, int kind, struct slice key,
    struct slice oldv, struct slice newv)
{
	struct tcps_sess	*s = arg;

	(void)tcps_put_watch(sess_out(s), (uint8_t)kind, key, oldv, newv);
	s->io->reply_done(s->arg);
}

/* Collects a request's key list into stack, or a heap array when it holds
 * more than nstack; NULL when that allocation fails. */
static struct slice *
sess_keys(const struct tcps_req *req, struct slice *stack, size_t nstack)
{
	struct tcps_iter	 it;
	struct slice		*keys = stack;
	size_t			 i = 0;

	/* nkeys was validated against the bytes present by the decoder. */
	if (req->nkeys > nstack &&
	    (keys = reallocarray(NULL, req->nkeys, sizeof *keys)) == NULL)
		return (NULL);
	tcps_iter_init(&it, req);
	while (i < req->nkeys && tcps_list_next(&it, &keys[i], NULL))
		i++;
	return (keys);
}

/* The answer of a WAIT or BARRIER: now (rc 1), later (0), or none (< 0). */
static int
sess_wait_reply(struct tcps_sess *s, int rc)
{
	if (rc == 1)
		return (sess_done(s, tcps_put_u8(sess_out(s),
		    TCPS_STOP_WAITING)));
	return (rc < 0 ? rc : 0);
}

static int
op_validate(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	if (req->u32 != TCPS_V2_MAGIC) {
		*why = "VALIDATE with a wrong magic number";
		return (RDZV_EPROTO);
	}
	return (0);
}

static int
op_ping(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	return (sess_done(s, tcps_put_u32(sess_out(s), req->u32)));
}

static int
op_set(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	return (kv_set(s->kv, s->ns, req->key, req->v1));
}

static int
op_append(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	return (kv_append(s->kv, s->ns, req->key, req->v1));
}

static int
op_get(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	struct slice	val;
	int		rc;

	rc = kv_get(s->kv, s->ns, req->key, &val);
	if (rc == RDZV_ENOTFOUND && s->dialect == TCPS_V2) {
		/* Newer servers answer a missing key with empty bytes. */
		val.p = NULL;
		val.len = 0;
	} else if (rc == RDZV_ENOTFOUND) {
		/* The 1.13 server drops the connection; clients WAIT first,
		 * so this is a client bug worth logging. */
		*why = "GET of a missing key";
		return (rc);
	} else if (rc != 0)
		return (rc);
	return (sess_done(s, tcps_put_bytes(sess_out(s), val.p, val.len)));
}

static int
op_add(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	int64_t	n;
	int	rc;

	rc = kv_add(s->kv, s->ns, req->key, req->num, &n);
	if (rc == RDZV_ENOTINT)
		*why = "ADD to a key that does not hold a decimal integer";
	else if (rc == RDZV_EINVAL)
		*why = "ADD overflows int64";
	if (rc != 0)
		return (rc);
	return (sess_done(s, tcps_put_i64(sess_out(s), n)));
}

static int
op_compare_set(struct tcps_sess *s, const struct tcps_req *req,
    const char **why)
{
	struct slice	val;
	int		rc;

	if ((rc = kv_cas(s->kv, s->ns, req->key, req->v1, req->v2,
	    &val)) != 0)
		return (rc);
	return (sess_done(s, tcps_put_bytes(sess_out(s), val.p, val.len)));
}

static int
op_check(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	struct slice	 stack[SESS_KEYS_STACK], *keys;
	int		 ready;

	if ((keys = sess_keys(req, stack, SESS_KEYS_STACK)) == NULL)
		return (RDZV_ENOMEM);
	ready = kv_check(s->kv, s->ns, keys, req->nkeys);
	if (keys != stack)
		free(keys);
	return (sess_done(s, tcps_put_u8(sess_out(s),
	    ready ? TCPS_READY : TCPS_NOT_READY)));
}

static int
op_wait(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	struct slice	 stack[SESS_KEYS_STACK], *keys;
	int		 rc;

	if ((keys = sess_keys(req, stack, SESS_KEYS_STACK)) == NULL)
		return (RDZV_ENOMEM);
	rc = kv_wait(s->kv, s->ns, keys, req->nkeys, sess_wake_cb, s,
	    &s->wait);
	if (keys != stack)
		free(keys);
	return (sess_wait_reply(s, rc));
}

static int
op_barrier(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	int	rc;

	rc = kv_barrier(s->kv, s->ns, req->key, req->num, sess_wake_cb, s,
	    &s->wait);
	if (rc == RDZV_ENOTINT)
		*why = "BARRIER on a key that is not a counter";
	return (sess_wait_reply(s, rc));
}

static int
op_num_keys(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	return (sess_done(s, tcps_put_i64(sess_out(s),
	    kv_num_keys(s->kv, s->ns))));
}

static int
op_delete(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	int	rc;

	if ((rc = kv_delete(s->kv, s->ns, req->key)) < 0)
		return (rc);
	return (sess_done(s, tcps_put_i64(sess_out(s), rc)));
}

static int
op_watch(struct tcps_sess *s, const struct tcps_req *req, const char **why)
{
	struct kv_waiter	**nw;
	int			  rc;

	if (s->nwatch >= TCPS_SESS_WATCH_MAX) {
		*why = "too many WATCH_KEY registrations";
		return (RDZV_ETOOBIG);
	}
	if ((nw = reallocarray(s->watch, s->nwatch + 1, sizeof *nw)) == NULL)
		return (RDZV_ENOMEM);
	s->watch = nw;
	if ((rc = kv_watch(s->kv, s->ns, req->key, sess_watch_cb, s,
	    &s->watch[s->nwatch])) < 0)
		return (rc);
	s->nwatch++;
	return (sess_done(s, tcps_put_u8(sess_out(s),
	    TCPS_WATCH_REGISTERED)));
}

static int
op_multi_get(struct tcps_sess *s, const struct tcps_req *req,
    const char **why)
{
	struct tcps_iter	 it;
	struct evbuffer		*out = sess_out(s);
	struct slice		 key, val;
	int			 put = 0;

	/* The client WAITs first; a key gone since reads as empty. */
	tcps_iter_init(&it, req);
	while (put == 0 && tcps_list_next(&it, &key, NULL)) {
		if (kv_get(s->kv, s->ns, key, &val) != 0) {
			val.p = NULL;
			val.len = 0;
		}
		put = tcps_put_bytes(out, val.p, val.len);
	}
	return (sess_done(s, put));
}

static int
op_multi_set(struct tcps_sess *s, const struct tcps_req *req,
    const char **why)
{
	struct tcps_iter	it;
	struct slice		key, val;
	int			rc = 0;

	tcps_iter_init(&it, req);
	while (rc == 0 && tcps_list_next(&it, &key, &val))
		rc = kv_set(s->kv, s->ns, key, val);
	return (rc);
}

static int
op_cancel_wait(struct tcps_sess *s, const struct tcps_req *req,
    const char **why)
{
	/* The client reads WAIT_CANCELED whether or not a wait was pending
	 * (the wait may have answered just before). */
	sess_drop_wait(s);
	return (sess_done(s, tcps_put_u8(sess_out(s), TCPS_WAIT_CANCELED)));
}

static int
op_queue_push(struct tcps_sess *s, const struct tcps_req *req,
    const char **why)
{
	return (kv_qpush(s->kv, s->ns, req->key, req->v1));
}

static int
op_queue_pop(struct tcps_sess *s, const struct tcps_req *req,
    const char **why)
{
	struct evbuffer	*out = sess_out(s);
	uint8_t		*item = NULL;
	size_t		 ilen = 0;
	int64_t		 n;
	int		 put;

	/* Length before the pop, then the item if there was one; a blocking
	 * client WAITs on the queue's name first. */
	n = kv_qlen(s->kv, s->ns, req->key);
	put = tcps_put_i64(out, n);
	if (put == 0 && n > 0 &&
	    kv_qpop(s->kv, s->ns, req->key, &item, &ilen) == 0) {
		put = tcps_put_bytes(out, item, ilen);
		free(item);
	}
	return (sess_done(s, put));
}

static int
op_queue_len(struct tcps_sess *s, const struct tcps_req *req,
    const char **why)
{
	return (sess_done(s, tcps_put_i64(sess_out(s),
	    kv_qlen(s->kv, s->ns, req->key))));
}

struct sess_list {
	struct evbuffer	*buf;
	int64_t		 n;
	int		 put;
};

static void
sess_list_cb(void *arg, struct slice key)
{
	struct sess_list	*acc = arg;

	if (acc->put == 0 &&
	    (acc->put = tcps_put_bytes(acc->buf, key.p, key.len)) == 0)
		acc->n++;
}

/* LIST_KEYS: the count first, so the keys are gathered aside. */
static int
op_list_keys(struct tcps_sess *s, const struct tcps_req *req,
    const char **why)
{
	struct sess_list	 acc;
	struct evbuffer		*out;
	int			 put;

	if ((acc.buf = evbuffer_new()) == NULL)
		return (RDZV_ENOMEM);
	acc.n = 0;
	acc.put = 0;
	kv_list(s->kv, s->ns, sess_list_cb, &acc);
	out = sess_out(s);
	if ((put = acc.put) == 0 && (put = tcps_put_i64(out, acc.n)) == 0 &&
	    evbuffer_add_buffer(out, acc.buf) != 0)
		put = -1;
	evbuffer_free(acc.buf);
	return (sess_done(s, put));
}

/* Every operation's handler, by enum tcps_op. */
static const sess_op_fn sess_ops[] = {
	[TCPS_VALIDATE] = op_validate,
	[TCPS_SET] = op_set,
	[TCPS_COMPARE_SET] = op_compare_set,
	[TCPS_GET] = op_get,
	[TCPS_ADD] = op_add,
	[TCPS_CHECK] = op_check,
	[TCPS_WAIT] = op_wait,
	[TCPS_GETNUMKEYS] = op_num_keys,
	[TCPS_WATCH_KEY] = op_watch,
	[TCPS_DELETE_KEY] = op_delete,
	[TCPS_APPEND] = op_append,
	[TCPS_MULTI_GET] = op_multi_get,
	[TCPS_MULTI_SET] = op_multi_set,
	[TCPS_CANCEL_WAIT] = op_cancel_wait,
	[TCPS_PING] = op_ping,
	[TCPS_QUEUE_PUSH] = op_queue_push,
	[TCPS_QUEUE_POP] = op_queue_pop,
	[TCPS_QUEUE_LEN] = op_queue_len,
	[TCPS_LIST_KEYS] = op_list_keys,
	[TCPS_BARRIER] = op_barrier,
};

void
tcps_sess_init(struct tcps_sess *s, struct kv *kv, struct slice ns,
    enum tcps_dialect dialect, const struct tcps_sess_io *io, void *arg)
{
	memset(s, 0, sizeof *s);
	s->kv = kv;
	s->ns = ns;
	s->dialect = dialect;
	s->io = io;
	s->arg = arg;
}

int
tcps_sess_serve(struct tcps_sess *s, const struct tcps_req *req,
    const char **why)
{
	int	rc;

	*why = NULL;
	if (s->wait != NULL && req->op != TCPS_CANCEL_WAIT)
		sess_drop_wait(s);
	if ((size_t)req->op >= sizeof sess_ops / sizeof sess_ops[0] ||
	    sess_ops[req->op] == NULL) {
		/* The decoder yields no other op: an internal bug. */
		*why = "request of no known operation";
		return (RDZV_EPROTO);
	}
	if ((rc = sess_ops[req->op](s, req, why)) < 0 && *why == NULL)
		*why = rdzv_strerror(rc);
	return (rc < 0 ? rc : 0);
}

void
tcps_sess_end(struct tcps_sess *s)
{
	size_t	i;

	if (s->kv == NULL)
		return;
	sess_drop_wait(s);
	for (i = 0; i < s->nwatch; i++)
		kv_waiter_cancel(s->kv, s->watch[i]);
	free(s->watch);
	s->watch = NULL;
	s->nwatch = 0;
}
