/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcps_fuzz.h: the body shared by the two TCPStore fuzz targets.  Decodes
 * requests back to back through the input as a server would (consume,
 * continue) and checks every decoded request: slices inside the bytes it
 * used, limits kept, the list walks to exactly nkeys entries, the request
 * re-encodes to the very bytes it came from, and cutting its last byte
 * asks for exactly its length.  Each request is then served by the one
 * TCPStore mapping (kv/tcps_sess.c) on a fresh kv core, alternately on
 * two sessions so that wakes and watch pushes cross between them: a
 * refusal must be one of the codes the mapping documents, with a reason;
 * no reply may come to a closed session, and nothing may leak.  Any
 * broken invariant aborts.
 */
#ifndef RDZV_TCPS_FUZZ_H
#define RDZV_TCPS_FUZZ_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "kv.h"
#include "rdzv_err.h"
#include "tcps_sess.h"
#include "wire.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Small limits, so that the fuzzer reaches them and whole messages. */
static const struct wire_limits fuzz_lim = { 64, 256, 8, 16 };

/* Wire byte of each op, per dialect; -1 where the dialect has none. */
static int
fuzz_code(enum tcps_dialect d, enum tcps_op op)
{
	static const int v113[] = {
		[TCPS_SET] = 0, [TCPS_COMPARE_SET] = 1, [TCPS_GET] = 2,
		[TCPS_ADD] = 3, [TCPS_CHECK] = 4, [TCPS_WAIT] = 5,
		[TCPS_GETNUMKEYS] = 6, [TCPS_WATCH_KEY] = 7,
		[TCPS_DELETE_KEY] = 8,
	};
	static const int v2[] = {
		[TCPS_VALIDATE] = 0, [TCPS_SET] = 1, [TCPS_COMPARE_SET] = 2,
		[TCPS_GET] = 3, [TCPS_ADD] = 4, [TCPS_CHECK] = 5,
		[TCPS_WAIT] = 6, [TCPS_GETNUMKEYS] = 7, [TCPS_DELETE_KEY] = 8,
		[TCPS_APPEND] = 9, [TCPS_MULTI_GET] = 10,
		[TCPS_MULTI_SET] = 11, [TCPS_CANCEL_WAIT] = 12,
		[TCPS_PING] = 13, [TCPS_QUEUE_PUSH] = 14,
		[TCPS_QUEUE_POP] = 15, [TCPS_QUEUE_LEN] = 16,
		[TCPS_LIST_KEYS] = 17, [TCPS_BARRIER] = 18,
	};

	if ((int)op < 0 || op > TCPS_BARRIER)
		abort();
	if (d == TCPS_V113) {
		if (op == TCPS_SET)
			return (0);
		return (op < sizeof(v113) / sizeof(v113[0]) && v113[op] != 0 ?
		    v113[op] : -1);
	}
	if (op == TCPS_VALIDATE)
		return (0);
	return (v2[op] != 0 ? v2[op] : -1);
}

/* An encoder of our own, to check the decoder lost nothing. */
static uint8_t	fuzz_encbuf[4096];

struct fuzz_enc {
	uint8_t	*p;
	size_t	 len;
	size_t	 cap;
};

static void
fuzz_add(struct fuzz_enc *e, const void *p, size_t n)
{
	if (e->cap - e->len < n)
		abort();	/* longer than the original: a decoder bug */
	if (n != 0)
		memcpy(e->p + e->len, p, n);
	e->len += n;
}

static void
fuzz_add_str(struct fuzz_enc *e, struct slice s)
{
	uint64_t	n = s.len;

	fuzz_add(e, &n, 8);
	fuzz_add(e, s.p, s.len);
}

/* s lies inside [m, m + len). */
static void
fuzz_inside(struct slice s, const uint8_t *m, size_t len)
{
	if (s.len == 0)
		return;
	if (s.p < m || s.p > m + len || (size_t)(m + len - s.p) < s.len)
		abort();
}

static void
fuzz_check_req(enum tcps_dialect d, const struct tcps_req *r,
    const uint8_t *m, size_t len)
{
	struct tcps_iter	it;
	struct fuzz_enc		e;
	struct slice		k, v;
	uint64_t		n;
	size_t			cnt;
	int			code;

	if ((code = fuzz_code(d, r->op)) < 0 || code != m[0])
		abort();
	fuzz_inside(r->key, m, len);
	fuzz_inside(r->v1, m, len);
	fuzz_inside(r->v2, m, len);
	fuzz_inside(r->list, m, len);
	if (r->key.len > fuzz_lim.key_max || r->v1.len > fuzz_lim.value_max ||
	    r->v2.len > fuzz_lim.value_max || r->nkeys > fuzz_lim.keys_max)
		abort();
	if (r->op == TCPS_VALIDATE && r->u32 != TCPS_V2_MAGIC)
		abort();

	/*
	 * The largest request the limits allow is a MULTI_SET of 8 pairs,
	 * 2697 bytes; a static buffer keeps the fuzzer fast and lean.
	 */
	if (len > sizeof(fuzz_encbuf))
		abort();
	e.p = fuzz_encbuf;
	e.cap = len;
	e.len = 0;
	fuzz_add(&e, m, 1);
	switch (r->op) {
	case TCPS_VALIDATE:
	case TCPS_PING:
		fuzz_add(&e, &r->u32, 4);
		break;
	case TCPS_SET:
	case TCPS_APPEND:
	case TCPS_QUEUE_PUSH:
		fuzz_add_str(&e, r->key);
		fuzz_add_str(&e, r->v1);
		break;
	case TCPS_COMPARE_SET:
		fuzz_add_str(&e, r->key);
		fuzz_add_str(&e, r->v1);
		fuzz_add_str(&e, r->v2);
		break;
	case TCPS_GET:
	case TCPS_WATCH_KEY:
	case TCPS_DELETE_KEY:
	case TCPS_QUEUE_POP:
	case TCPS_QUEUE_LEN:
		fuzz_add_str(&e, r->key);
		break;
	case TCPS_ADD:
	case TCPS_BARRIER:
		fuzz_add_str(&e, r->key);
		fuzz_add(&e, &r->num, 8);
		break;
	case TCPS_CHECK:
	case TCPS_WAIT:
	case TCPS_MULTI_GET:
	case TCPS_MULTI_SET:
		n = r->nkeys;
		fuzz_add(&e, &n, 8);
		tcps_iter_init(&it, r);
		cnt = 0;
		while (tcps_list_next(&it, &k, &v)) {
			fuzz_inside(k, r->list.p, r->list.len);
			fuzz_inside(v, r->list.p, r->list.len);
			if (k.len > fuzz_lim.key_max ||
			    v.len > fuzz_lim.value_max)
				abort();
			if (r->op != TCPS_MULTI_SET && v.len != 0)
				abort();
			fuzz_add_str(&e, k);
			if (r->op == TCPS_MULTI_SET)
				fuzz_add_str(&e, v);
			cnt++;
		}
		if (cnt != r->nkeys || it.left != 0)
			abort();
		/* Keys alone, without a value slice, walk the same. */
		if (r->op != TCPS_MULTI_SET) {
			tcps_iter_init(&it, r);
			cnt = 0;
			while (tcps_list_next(&it, &k, NULL))
				cnt++;
			if (cnt != r->nkeys)
				abort();
		}
		break;
	case TCPS_GETNUMKEYS:
	case TCPS_CANCEL_WAIT:
	case TCPS_LIST_KEYS:
		break;
	default:
		abort();
	}
	if (e.len != len || memcmp(e.p, m, len) != 0)
		abort();
}

/* A connection of the mapping's: its session and reply buffer. */
struct fuzz_conn {
	struct tcps_sess	 s;
	struct evbuffer		*out;
	int			 open;
};

static struct evbuffer *
fuzz_reply_buf(void *arg)
{
	struct fuzz_conn	*c = arg;

	return (c->out);
}

/* A reply (or wake, or push) is whole: drop it.  None may come to a
 * closed session (its wait and watches are gone). */
static void
fuzz_reply_done(void *arg)
{
	struct fuzz_conn	*c = arg;

	if (!c->open)
		abort();
	evbuffer_drain(c->out, evbuffer_get_length(c->out));
}

static const struct tcps_sess_io fuzz_io = { fuzz_reply_buf, fuzz_reply_done };

/* Serves req on c as a server would; a refusal closes c. */
static void
fuzz_serve(struct kv *kv, struct fuzz_conn *c, enum tcps_dialect d,
    const struct tcps_req *req)
{
	const char	*why = NULL;
	int		 rc;

	if (!c->open) {
		tcps_sess_init(&c->s, kv, slice_str(""), d, &fuzz_io, c);
		c->open = 1;
	}
	if ((rc = tcps_sess_serve(&c->s, req, &why)) == 0)
		return;
	if (why == NULL || (rc != RDZV_EPROTO && rc != RDZV_ENOTFOUND &&
	    rc != RDZV_ENOTINT && rc != RDZV_EINVAL && rc != RDZV_ETOOBIG &&
	    rc != RDZV_ENOMEM))
		abort();
	tcps_sess_end(&c->s);
	c->open = 0;
}

static void
fuzz_tcps_decode(enum tcps_dialect d, const uint8_t *data, size_t size,
    struct kv *kv, struct fuzz_conn *conns)
{
	struct tcps_req	req, r2;
	size_t		pos, left, need, k, nreq = 0;
	int		rc, nat;
	enum tcps_dialect sd;

	sd = tcps_sniff(data, size, &nat);
	if (nat && (size < 4 || memcmp(data, NAT_MAGIC, 4) != 0))
		abort();
	if (sd == TCPS_V2 && (size < 5 || data[0] != 0))
		abort();
	if (sd == TCPS_UNKNOWN && !nat && size >= 5)
		abort();
	if (size >= 4 && memcmp(data, NAT_MAGIC, 4) == 0 && !nat)
		abort();

	for (pos = 0; pos < size; pos += rc) {
		left = size - pos;
		need = 0;
		rc = tcps_decode(d, data + pos, left, &fuzz_lim, &req, &need);
		if (rc < 0) {
			if (rc != RDZV_EPROTO && rc != RDZV_ETOOBIG)
				abort();
			return;
		}
		if (rc == 0) {
			if (need <= left)
				abort();
			return;
		}
		if ((size_t)rc > left)
			abort();
		fuzz_check_req(d, &req, data + pos, rc);

		/* One byte short: wait for exactly this length. */
		need = 0;
		if (tcps_decode(d, data + pos, rc - 1, &fuzz_lim, &r2,
		    &need) != 0 || need != (size_t)rc)
			abort();
		/* A shorter cut: some need in (k, rc]. */
		k = (size_t)rc / 2;
		need = 0;
		if (tcps_decode(d, data + pos, k, &fuzz_lim, &r2, &need) != 0 ||
		    need <= k || need > (size_t)rc)
			abort();
		fuzz_serve(kv, &conns[nreq++ & 1], d, &req);
	}
}

static void
fuzz_tcps(enum tcps_dialect d, const uint8_t *data, size_t size)
{
	struct fuzz_conn	 conns[2];
	struct kv		*kv;
	int			 i;

	memset(conns, 0, sizeof conns);
	if ((kv = kv_new()) == NULL ||
	    (conns[0].out = evbuffer_new()) == NULL ||
	    (conns[1].out = evbuffer_new()) == NULL)
		abort();
	fuzz_tcps_decode(d, data, size, kv, conns);
	for (i = 0; i < 2; i++) {
		if (conns[i].open)
			tcps_sess_end(&conns[i].s);
		evbuffer_free(conns[i].out);
	}
	kv_free(kv);
}

#endif /* RDZV_TCPS_FUZZ_H */
