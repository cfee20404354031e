/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto_tcpstore.c: the PyTorch TCPStore adapter (dialects 1.13 and 2.x,
 * see shared/reference/tcpstore-wire.md).  Decodes requests with
 * common/wire_tcpstore.c and hands each to kv/tcps_sess.c, which maps
 * it onto the kv core (the same mapping librdzvworker's hosted store
 * uses); this file adds only what is rdzvd's: the namespace a connection
 * sees (its port's), metrics, torch process-group keys (tcps_group.c),
 * replies held for the store's commit and back-pressure.
 */
#include "config.h"

#include "rdzv_err.h"
#include "rdzvd.h"

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

void
tcps_conn_free(struct conn *c)
{
	tcps_sess_end(&c->tcps);
	tcps_group_release(c);
}

static struct evbuffer *
tcps_reply_buf_cb(void *arg)
{
	return conn_reply_buf(arg);
}

static void
tcps_reply_done_cb(void *arg)
{
	conn_reply_done(arg);
}

static const struct tcps_sess_io tcps_io = {
	tcps_reply_buf_cb, tcps_reply_done_cb
};

ssize_t
tcps_serve(struct conn *c, const uint8_t *buf, size_t len, const char **why)
{
	struct tcps_req		 req;
	enum tcps_dialect	 d;
	size_t			 off = 0, need = 0;
	int			 r;

	c->need = 0;

	d = c->dialect == DIALECT_TCPS2 ? TCPS_V2 : TCPS_V113;
	if (c->tcps.io == NULL) {
		/* A round's port serves that round's namespace; the main
		 * port the root. */
		tcps_sess_init(&c->tcps, server.kv, c->ns != NULL ?
		    (struct slice){ c->ns->p, c->ns->len } : root_ns, d,
		    &tcps_io, c);
	}
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
		off += (size_t)r;
		metrics.ops[tcps_op_kind(req.op)]++;
		tcps_group_use(c, &req);
		if ((r = tcps_sess_serve(&c->tcps, &req, why)) < 0)
			return r;
		/* Unread replies pile up: serve the rest once the peer reads. */
		if (conn_output_full(c))
			break;
	}
	return (ssize_t)off;
}
