/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire_tcpstore.c: the PyTorch TCPStore codec.  Decodes the requests of
 * the 1.13 and 2.x dialects (shared/reference/tcpstore-wire.md) into one
 * struct tcps_req, tells the dialects apart from a connection's first
 * bytes, walks validated key lists and encodes replies.
 *
 * Decoding is stateless: each call starts at the opcode and walks the
 * request again.  To keep re-decoding of a message that arrives in pieces
 * cheap, *need is the smallest total the bytes seen so far allow (every
 * length field not yet seen counted as an empty string), so a caller that
 * waits for *need bytes decodes once per newly readable length field at
 * most, and exactly once when the sender's segments hold whole fields.
 * Integers travel in host order, as the reference client writes them.
 */
#include "config.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include <event2/buffer.h>

#include "rdzv_err.h"
#include "wire.h"

/* Dialect 1.13 opcodes, indexed by the wire byte. */
static const enum tcps_op tcps_ops_v113[] = {
	TCPS_SET,		/* 0 */
	TCPS_COMPARE_SET,	/* 1 */
	TCPS_GET,		/* 2 */
	TCPS_ADD,		/* 3 */
	TCPS_CHECK,		/* 4 */
	TCPS_WAIT,		/* 5 */
	TCPS_GETNUMKEYS,	/* 6 */
	TCPS_WATCH_KEY,		/* 7 */
	TCPS_DELETE_KEY,	/* 8 */
};

/* Dialect 2.x opcodes, indexed by the wire byte. */
static const enum tcps_op tcps_ops_v2[] = {
	TCPS_VALIDATE,		/* 0 */
	TCPS_SET,		/* 1 */
	TCPS_COMPARE_SET,	/* 2 */
	TCPS_GET,		/* 3 */
	TCPS_ADD,		/* 4 */
	TCPS_CHECK,		/* 5 */
	TCPS_WAIT,		/* 6 */
	TCPS_GETNUMKEYS,	/* 7 */
	TCPS_DELETE_KEY,	/* 8 */
	TCPS_APPEND,		/* 9 */
	TCPS_MULTI_GET,		/* 10 */
	TCPS_MULTI_SET,		/* 11 */
	TCPS_CANCEL_WAIT,	/* 12 */
	TCPS_PING,		/* 13 */
	TCPS_QUEUE_PUSH,	/* 14 */
	TCPS_QUEUE_POP,		/* 15 */
	TCPS_QUEUE_LEN,		/* 16 */
	TCPS_LIST_KEYS,		/* 17 */
	TCPS_BARRIER,		/* 18 */
};

#define nitems(a)	(sizeof(a) / sizeof((a)[0]))

/* The first five bytes of every 2.x connection: VALIDATE + magic. */
static const uint8_t tcps_v2_start[5] = { 0x00, 0xce, 0xf7, 0x85, 0x3c };

/*
 * A validated MULTI_SET list is walked in pairs; the iterator records that
 * in the top bit of its count, which a real count can never reach (every
 * entry takes at least 8 bytes of memory).
 */
#define TCPS_ITER_PAIRS	(~(SIZE_MAX >> 1))

/* A read position in one request; need is set when a read comes up short. */
struct tcps_cur {
	const uint8_t	*buf;
	size_t		 len;
	size_t		 pos;	/* never above INT_MAX */
	size_t		 need;
};

#define TCPS_SHORT	1	/* internal: more bytes needed */

static size_t
tcps_sat_add(size_t a, size_t b)
{
	return (a > SIZE_MAX - b ? SIZE_MAX : a + b);
}

static size_t
tcps_sat_mul(size_t a, size_t b)
{
	return (b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b);
}

/*
 * Takes n bytes at the cursor.  after is the least number of bytes the
 * rest of the request needs, used for *need when the n bytes are not all
 * there.  A request that cannot fit in an int (the decoder's return) is
 * over every limit.
 */
static int
tcps_take(struct tcps_cur *c, size_t n, size_t after, const uint8_t **p)
{
	size_t	end;

	if (n > (size_t)INT_MAX - c->pos)
		return (RDZV_ETOOBIG);
	end = c->pos + n;
	if (c->len < end) {
		c->need = tcps_sat_add(end, after);
		if (c->need > INT_MAX)
			return (RDZV_ETOOBIG);
		return (TCPS_SHORT);
	}
	*p = c->buf + c->pos;
	c->pos = end;
	return (0);
}

/* Takes a number of n bytes (4 or 8), host order as TCPStore sends it. */
static int
tcps_get_num(struct tcps_cur *c, size_t after, void *v, size_t n)
{
	const uint8_t	*p;
	int		 r;

	if ((r = tcps_take(c, n, after, &p)) != 0)
		return (r);
	memcpy(v, p, n);
	return (0);
}

/*
 * Reads a string (u64 length + bytes) of at most max bytes.  The length is
 * checked against max as soon as it is read, before its bytes arrive.
 */
static int
tcps_get_str(struct tcps_cur *c, size_t max, size_t after, struct slice *s)
{
	uint64_t	 n;
	const uint8_t	*p;
	int		 r;

	if ((r = tcps_get_num(c, after, &n, sizeof n)) != 0)
		return (r);
	if (n > max)
		return (RDZV_ETOOBIG);
	if ((r = tcps_take(c, n, after, &p)) != 0)
		return (r);
	s->p = p;
	s->len = n;
	return (0);
}

/*
 * Validates a key list (count + count keys, or count + count key/value
 * pairs when pairs is set) in place.  MULTI_SET's count is an int64 on
 * the wire, so negative values are malformed rather than huge.
 */
static int
tcps_get_list(struct tcps_cur *c, const struct wire_limits *lim, int pairs,
    struct tcps_req *req)
{
	uint64_t	 n, i;
	size_t		 start, per, left;
	struct slice	 s;
	int		 r;

	if ((r = tcps_get_num(c, 0, &n, sizeof n)) != 0)
		return (r);
	if (pairs && (int64_t)n < 0)
		return (RDZV_EPROTO);
	if (n > lim->keys_max)
		return (RDZV_ETOOBIG);
	per = pairs ? 16 : 8;
	start = c->pos;
	for (i = 0; i < n; i++) {
		left = tcps_sat_mul((size_t)(n - i - 1), per);
		if ((r = tcps_get_str(c, lim->key_max,
		    tcps_sat_add(left, pairs ? 8 : 0), &s)) != 0)
			return (r);
		if (pairs &&
		    (r = tcps_get_str(c, lim->value_max, left, &s)) != 0)
			return (r);
	}
	req->nkeys = n;
	req->list.p = c->buf + start;
	req->list.len = c->pos - start;
	return (0);
}

/*
 * Decodes one request of dialect d from buf (contract in wire.h).  A 2.x
 * VALIDATE whose magic is wrong is malformed (RDZV_EPROTO).  An unknown
 * dialect is the caller's mistake: RDZV_EINVAL.
 */
int
tcps_decode(enum tcps_dialect d, const uint8_t *buf, size_t len,
    const struct wire_limits *lim, struct tcps_req *req, size_t *need)
{
	struct tcps_cur		 c;
	const enum tcps_op	*ops;
	size_t			 nops;
	int64_t			 num;
	int			 r;

	memset(req, 0, sizeof(*req));
	switch (d) {
	case TCPS_V113:
		ops = tcps_ops_v113;
		nops = nitems(tcps_ops_v113);
		break;
	case TCPS_V2:
		ops = tcps_ops_v2;
		nops = nitems(tcps_ops_v2);
		break;
	default:
		return (RDZV_EINVAL);
	}
	if (len < 1) {
		*need = 1;
		return (0);
	}
	if (buf[0] >= nops)
		return (RDZV_EPROTO);
	req->op = ops[buf[0]];
	c.buf = buf;
	c.len = len;
	c.pos = 1;
	c.need = 0;

	switch (req->op) {
	case TCPS_VALIDATE:
		if ((r = tcps_get_num(&c, 0, &req->u32,
		    sizeof req->u32)) != 0)
			break;
		if (req->u32 != TCPS_V2_MAGIC)
			r = RDZV_EPROTO;
		break;
	case TCPS_PING:
		r = tcps_get_num(&c, 0, &req->u32, sizeof req->u32);
		break;
	case TCPS_SET:
	case TCPS_APPEND:
	case TCPS_QUEUE_PUSH:
		if ((r = tcps_get_str(&c, lim->key_max, 8, &req->key)) != 0)
			break;
		r = tcps_get_str(&c, lim->value_max, 0, &req->v1);
		break;
	case TCPS_COMPARE_SET:
		if ((r = tcps_get_str(&c, lim->key_max, 16, &req->key)) != 0)
			break;
		if ((r = tcps_get_str(&c, lim->value_max, 8, &req->v1)) != 0)
			break;
		r = tcps_get_str(&c, lim->value_max, 0, &req->v2);
		break;
	case TCPS_GET:
	case TCPS_WATCH_KEY:
	case TCPS_DELETE_KEY:
	case TCPS_QUEUE_POP:
	case TCPS_QUEUE_LEN:
		r = tcps_get_str(&c, lim->key_max, 0, &req->key);
		break;
	case TCPS_ADD:
	case TCPS_BARRIER:
		if ((r = tcps_get_str(&c, lim->key_max, 8, &req->key)) != 0)
			break;
		if ((r = tcps_get_num(&c, 0, &num, sizeof num)) != 0)
			break;
		req->num = num;
		break;
	case TCPS_CHECK:
	case TCPS_WAIT:
	case TCPS_MULTI_GET:
		r = tcps_get_list(&c, lim, 0, req);
		break;
	case TCPS_MULTI_SET:
		r = tcps_get_list(&c, lim, 1, req);
		break;
	case TCPS_GETNUMKEYS:
	case TCPS_CANCEL_WAIT:
	case TCPS_LIST_KEYS:
		r = 0;
		break;
	default:
		/* Every table entry is handled above. */
		r = RDZV_EPROTO;
		break;
	}
	if (r == TCPS_SHORT) {
		*need = c.need;
		return (0);
	}
	if (r < 0)
		return (r);
	return ((int)c.pos);
}

/*
 * Names the dialect of a connection from its first len bytes (contract in
 * wire.h).  native may be NULL.
 */
enum tcps_dialect
tcps_sniff(const uint8_t *buf, size_t len, int *native)
{
	size_t	n;

	if (native != NULL)
		*native = 0;
	if (len == 0)
		return (TCPS_UNKNOWN);
	n = len < 4 ? len : 4;
	if (memcmp(buf, NAT_MAGIC, n) == 0) {
		if (len >= 4 && native != NULL)
			*native = 1;
		return (TCPS_UNKNOWN);
	}
	n = len < sizeof(tcps_v2_start) ? len : sizeof(tcps_v2_start);
	if (memcmp(buf, tcps_v2_start, n) == 0)
		return (n == sizeof(tcps_v2_start) ? TCPS_V2 : TCPS_UNKNOWN);
	return (TCPS_V113);
}

/* Starts a walk over the list of a request tcps_decode() returned. */
void
tcps_iter_init(struct tcps_iter *it, const struct tcps_req *req)
{
	it->p = req->list.p;
	it->left = req->list.len;
	it->n = req->nkeys;
	if (req->op == TCPS_MULTI_SET && it->n != 0)
		it->n |= TCPS_ITER_PAIRS;
}

/* Reads one string from a validated list; 0 when it is not there. */
static int
tcps_iter_str(struct tcps_iter *it, struct slice *s)
{
	uint64_t	n;

	if (it->left < 8)
		return (0);
	memcpy(&n, it->p, 8);
	if (it->left - 8 < n)
		return (0);
	s->p = it->p + 8;
	s->len = n;
	it->p += 8 + n;
	it->left -= 8 + n;
	return (1);
}

/*
 * Sets *key (and *val for MULTI_SET; otherwise *val, when val is given,
 * is the empty slice) to the next entry.  Returns 1 while entries remain,
 * 0 at the end.  The list was validated by tcps_decode(); the bounds are
 * checked again anyway so that a misused iterator stops instead of
 * reading past the list.
 */
int
tcps_list_next(struct tcps_iter *it, struct slice *key, struct slice *val)
{
	struct slice	 v, *vp;
	int		 pairs;

	pairs = (it->n & TCPS_ITER_PAIRS) != 0;
	if ((it->n & ~TCPS_ITER_PAIRS) == 0)
		return (0);
	if (!tcps_iter_str(it, key))
		goto end;
	vp = val != NULL ? val : &v;
	if (pairs) {
		if (!tcps_iter_str(it, vp))
			goto end;
	} else {
		vp->p = NULL;
		vp->len = 0;
	}
	it->n--;
	if ((it->n & ~TCPS_ITER_PAIRS) == 0)
		it->n = 0;
	return (1);
end:
	it->n = 0;
	it->left = 0;
	return (0);
}

/* Reply encoders (contract in wire.h): host order, as the client reads. */

int
tcps_put_u8(struct evbuffer *out, uint8_t v)
{
	return (evbuffer_add(out, &v, sizeof(v)) == 0 ? 0 : -1);
}

int
tcps_put_i64(struct evbuffer *out, int64_t v)
{
	return (evbuffer_add(out, &v, sizeof(v)) == 0 ? 0 : -1);
}

int
tcps_put_u32(struct evbuffer *out, uint32_t v)
{
	return (evbuffer_add(out, &v, sizeof(v)) == 0 ? 0 : -1);
}

int
tcps_put_bytes(struct evbuffer *out, const void *p, size_t n)
{
	uint64_t	len = n;

	if (evbuffer_add(out, &len, sizeof(len)) != 0)
		return (-1);
	if (n != 0 && evbuffer_add(out, p, n) != 0)
		return (-1);
	return (0);
}

int
tcps_put_watch(struct evbuffer *out, uint8_t kind, struct slice key,
    struct slice oldv, struct slice newv)
{
	if (tcps_put_u8(out, kind) != 0 ||
	    tcps_put_bytes(out, key.p, key.len) != 0 ||
	    tcps_put_bytes(out, oldv.p, oldv.len) != 0 ||
	    tcps_put_bytes(out, newv.p, newv.len) != 0)
		return (-1);
	return (0);
}
