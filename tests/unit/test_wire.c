/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_wire.c: unit tests of the wire codecs (common/wire*.c): every
 * TCPStore op of both dialects from hand-built bytes, every truncation,
 * the limits, sniffing, list iteration, the reply encoders, and the
 * native preamble, frame decoder, payload reader and writer.
 *
 * Why about 2,000 lines: one test per op of two dialects and per
 * truncation of each, over shared byte builders.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "rdzv_err.h"
#include "wire.h"

/* ---- helpers ---- */

/* A growing byte string to build messages in. */
struct mb {
	uint8_t	*p;
	size_t	 len;
	size_t	 cap;
};

static void
mb_add(struct mb *m, const void *p, size_t n)
{
	if (m->len + n > m->cap) {
		m->cap = (m->len + n) * 2 + 64;
		m->p = realloc(m->p, m->cap);
		assert_non_null(m->p);
	}
	if (n != 0)
		memcpy(m->p + m->len, p, n);
	m->len += n;
}

static void
mb_u8(struct mb *m, uint8_t v)
{
	mb_add(m, &v, 1);
}

static void
mb_u32(struct mb *m, uint32_t v)
{
	mb_add(m, &v, 4);	/* TCPStore: host order */
}

static void
mb_u64(struct mb *m, uint64_t v)
{
	mb_add(m, &v, 8);
}

static void
mb_str(struct mb *m, const char *s)
{
	mb_u64(m, strlen(s));
	mb_add(m, s, strlen(s));
}

static void
mb_free(struct mb *m)
{
	free(m->p);
	memset(m, 0, sizeof(*m));
}

static int
slice_is(struct slice s, const char *want)
{
	return (slice_eq(s, slice_str(want)));
}

static struct wire_limits	deflim;

/* Small limits so that over-limit messages stay small. */
static const struct wire_limits	smallim = { 16, 64, 4, 8 };

/*
 * Checks a complete message of len bytes: decodes whole with trailing
 * bytes behind it, and every truncation returns 0 with a need above the
 * bytes given, never above the true total, and exactly the total once
 * only the last byte is missing.
 */
static void
check_tcps(enum tcps_dialect d, const struct mb *m, const struct wire_limits *lim,
    enum tcps_op op, struct tcps_req *req)
{
	struct tcps_req	 r2;
	uint8_t		*dup;
	size_t		 k, need;
	int		 rc;

	assert_int_equal(tcps_decode(d, m->p, m->len, lim, req, &need),
	    (int)m->len);
	assert_int_equal(req->op, op);
	for (k = 0; k < m->len; k++) {
		need = 0;
		rc = tcps_decode(d, m->p, k, lim, &r2, &need);
		assert_int_equal(rc, 0);
		assert_true(need > k);
		assert_true(need <= m->len);
	}
	need = 0;
	assert_int_equal(tcps_decode(d, m->p, m->len - 1, lim, &r2, &need), 0);
	assert_int_equal(need, m->len);

	/* Two back to back: the first decodes alone. */
	dup = malloc(m->len * 2);
	assert_non_null(dup);
	memcpy(dup, m->p, m->len);
	memcpy(dup + m->len, m->p, m->len);
	assert_int_equal(tcps_decode(d, dup, m->len * 2, lim, &r2, &need),
	    (int)m->len);
	assert_int_equal(r2.op, op);
	free(dup);
}

/* ---- slices and limits ---- */

static void
test_slice(void **state)
{
	struct slice	a, b, e;
	uint8_t		bin[3] = { 'a', 0, 'b' };

	a = slice_str("abc");
	assert_int_equal(a.len, 3);
	assert_memory_equal(a.p, "abc", 3);
	b = slice_str("abc");
	assert_true(slice_eq(a, b));
	assert_false(slice_eq(a, slice_str("abd")));
	assert_false(slice_eq(a, slice_str("ab")));
	e = slice_str("");
	assert_int_equal(e.len, 0);
	assert_true(slice_eq(e, slice_str(NULL)));
	e.p = NULL;
	assert_true(slice_eq(e, slice_str("")));
	a.p = bin;
	a.len = 3;
	b.p = (const uint8_t *)"a\0b";
	b.len = 3;
	assert_true(slice_eq(a, b));
	b.p = (const uint8_t *)"a\0c";
	assert_false(slice_eq(a, b));
}

static void
test_limits_default(void **state)
{
	struct wire_limits	lim;

	memset(&lim, 0xff, sizeof(lim));
	wire_limits_default(&lim);
	assert_int_equal(lim.key_max, 8192);
	assert_int_equal(lim.value_max, 8 * 1024 * 1024);
	assert_int_equal(lim.keys_max, 131072);
	assert_int_equal(lim.ns_max, 1024);
}

/* ---- TCPStore 1.13 ---- */

static void
test_v113_ops(void **state)
{
	struct mb	m = { 0 };
	struct tcps_req	r;

	mb_u8(&m, 0); mb_str(&m, "/key"); mb_str(&m, "value");
	check_tcps(TCPS_V113, &m, &deflim, TCPS_SET, &r);
	assert_true(slice_is(r.key, "/key"));
	assert_true(slice_is(r.v1, "value"));
	mb_free(&m);

	mb_u8(&m, 1); mb_str(&m, "/k"); mb_str(&m, ""); mb_str(&m, "Y2FuaW1hZGFt");
	check_tcps(TCPS_V113, &m, &deflim, TCPS_COMPARE_SET, &r);
	assert_true(slice_is(r.key, "/k"));
	assert_int_equal(r.v1.len, 0);
	assert_true(slice_is(r.v2, "Y2FuaW1hZGFt"));
	mb_free(&m);

	mb_u8(&m, 2); mb_str(&m, "/get");
	check_tcps(TCPS_V113, &m, &deflim, TCPS_GET, &r);
	assert_true(slice_is(r.key, "/get"));
	mb_free(&m);

	mb_u8(&m, 3); mb_str(&m, "init/"); mb_u64(&m, (uint64_t)-5);
	check_tcps(TCPS_V113, &m, &deflim, TCPS_ADD, &r);
	assert_true(slice_is(r.key, "init/"));
	assert_int_equal(r.num, -5);
	mb_free(&m);

	mb_u8(&m, 4); mb_u64(&m, 2); mb_str(&m, "/a"); mb_str(&m, "/bb");
	check_tcps(TCPS_V113, &m, &deflim, TCPS_CHECK, &r);
	assert_int_equal(r.nkeys, 2);
	assert_int_equal(r.list.len, 8 + 2 + 8 + 3);
	assert_ptr_equal(r.list.p, m.p + 9);
	mb_free(&m);

	mb_u8(&m, 5); mb_u64(&m, 1); mb_str(&m, "/w");
	check_tcps(TCPS_V113, &m, &deflim, TCPS_WAIT, &r);
	assert_int_equal(r.nkeys, 1);
	mb_free(&m);

	mb_u8(&m, 6);
	check_tcps(TCPS_V113, &m, &deflim, TCPS_GETNUMKEYS, &r);
	mb_free(&m);

	mb_u8(&m, 7); mb_str(&m, "/watched");
	check_tcps(TCPS_V113, &m, &deflim, TCPS_WATCH_KEY, &r);
	assert_true(slice_is(r.key, "/watched"));
	mb_free(&m);

	mb_u8(&m, 8); mb_str(&m, "/gone");
	check_tcps(TCPS_V113, &m, &deflim, TCPS_DELETE_KEY, &r);
	assert_true(slice_is(r.key, "/gone"));
	mb_free(&m);

	/* Empty key and value, and a WAIT on no keys. */
	mb_u8(&m, 0); mb_str(&m, ""); mb_str(&m, "");
	check_tcps(TCPS_V113, &m, &deflim, TCPS_SET, &r);
	assert_int_equal(r.key.len, 0);
	assert_int_equal(r.v1.len, 0);
	mb_free(&m);
	mb_u8(&m, 5); mb_u64(&m, 0);
	check_tcps(TCPS_V113, &m, &deflim, TCPS_WAIT, &r);
	assert_int_equal(r.nkeys, 0);
	assert_int_equal(r.list.len, 0);
	mb_free(&m);
}

static void
test_v113_binary_value(void **state)
{
	struct mb	m = { 0 };
	struct tcps_req	r;
	uint8_t		v[300];
	size_t		i, need;

	for (i = 0; i < sizeof(v); i++)
		v[i] = (uint8_t)i;
	mb_u8(&m, 0); mb_str(&m, "/bin"); mb_u64(&m, sizeof(v));
	mb_add(&m, v, sizeof(v));
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r, &need),
	    (int)m.len);
	assert_int_equal(r.v1.len, sizeof(v));
	assert_memory_equal(r.v1.p, v, sizeof(v));
	mb_free(&m);
}

static void
test_v113_unknown(void **state)
{
	struct tcps_req	r;
	uint8_t		b[64];
	size_t		need;
	int		op;

	memset(b, 0, sizeof(b));
	for (op = 9; op < 256; op++) {
		b[0] = op;
		assert_int_equal(tcps_decode(TCPS_V113, b, 1, &deflim, &r,
		    &need), RDZV_EPROTO);
		assert_int_equal(tcps_decode(TCPS_V113, b, sizeof(b), &deflim,
		    &r, &need), RDZV_EPROTO);
	}
	/* Nothing yet: wait for the opcode. */
	need = 0;
	assert_int_equal(tcps_decode(TCPS_V113, b, 0, &deflim, &r, &need), 0);
	assert_int_equal(need, 1);
	/* Not a dialect. */
	assert_int_equal(tcps_decode(TCPS_UNKNOWN, b, sizeof(b), &deflim, &r,
	    &need), RDZV_EINVAL);
}

/* ---- TCPStore 2.x ---- */

static void
test_v2_ops(void **state)
{
	struct mb	m = { 0 };
	struct tcps_req	r;

	mb_u8(&m, 0); mb_u32(&m, TCPS_V2_MAGIC);
	check_tcps(TCPS_V2, &m, &deflim, TCPS_VALIDATE, &r);
	assert_int_equal(r.u32, TCPS_V2_MAGIC);
	assert_memory_equal(m.p, "\x00\xce\xf7\x85\x3c", 5);
	mb_free(&m);

	mb_u8(&m, 1); mb_str(&m, "/s"); mb_str(&m, "v");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_SET, &r);
	assert_true(slice_is(r.key, "/s"));
	assert_true(slice_is(r.v1, "v"));
	mb_free(&m);

	mb_u8(&m, 2); mb_str(&m, "/c"); mb_str(&m, "old"); mb_str(&m, "new");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_COMPARE_SET, &r);
	assert_true(slice_is(r.key, "/c"));
	assert_true(slice_is(r.v1, "old"));
	assert_true(slice_is(r.v2, "new"));
	mb_free(&m);

	mb_u8(&m, 3); mb_str(&m, "/g");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_GET, &r);
	assert_true(slice_is(r.key, "/g"));
	mb_free(&m);

	mb_u8(&m, 4); mb_str(&m, "/n"); mb_u64(&m, 1);
	check_tcps(TCPS_V2, &m, &deflim, TCPS_ADD, &r);
	assert_int_equal(r.num, 1);
	mb_free(&m);

	mb_u8(&m, 5); mb_u64(&m, 3); mb_str(&m, "/a"); mb_str(&m, "");
	mb_str(&m, "/c");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_CHECK, &r);
	assert_int_equal(r.nkeys, 3);
	mb_free(&m);

	mb_u8(&m, 6); mb_u64(&m, 1); mb_str(&m, "/w");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_WAIT, &r);
	assert_int_equal(r.nkeys, 1);
	mb_free(&m);

	mb_u8(&m, 7);
	check_tcps(TCPS_V2, &m, &deflim, TCPS_GETNUMKEYS, &r);
	mb_free(&m);

	mb_u8(&m, 8); mb_str(&m, "/d");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_DELETE_KEY, &r);
	assert_true(slice_is(r.key, "/d"));
	mb_free(&m);

	mb_u8(&m, 9); mb_str(&m, "/ap"); mb_str(&m, "tail");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_APPEND, &r);
	assert_true(slice_is(r.key, "/ap"));
	assert_true(slice_is(r.v1, "tail"));
	mb_free(&m);

	mb_u8(&m, 10); mb_u64(&m, 2); mb_str(&m, "/x"); mb_str(&m, "/y");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_MULTI_GET, &r);
	assert_int_equal(r.nkeys, 2);
	mb_free(&m);

	mb_u8(&m, 11); mb_u64(&m, 2); mb_str(&m, "/x"); mb_str(&m, "1");
	mb_str(&m, "/y"); mb_str(&m, "22");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_MULTI_SET, &r);
	assert_int_equal(r.nkeys, 2);
	assert_int_equal(r.list.len, m.len - 9);
	mb_free(&m);

	mb_u8(&m, 12);
	check_tcps(TCPS_V2, &m, &deflim, TCPS_CANCEL_WAIT, &r);
	mb_free(&m);

	mb_u8(&m, 13); mb_u32(&m, 0xdeadbeef);
	check_tcps(TCPS_V2, &m, &deflim, TCPS_PING, &r);
	assert_int_equal(r.u32, 0xdeadbeef);
	mb_free(&m);

	mb_u8(&m, 14); mb_str(&m, "/q"); mb_str(&m, "item");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_QUEUE_PUSH, &r);
	assert_true(slice_is(r.key, "/q"));
	assert_true(slice_is(r.v1, "item"));
	mb_free(&m);

	mb_u8(&m, 15); mb_str(&m, "/q");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_QUEUE_POP, &r);
	assert_true(slice_is(r.key, "/q"));
	mb_free(&m);

	mb_u8(&m, 16); mb_str(&m, "/q");
	check_tcps(TCPS_V2, &m, &deflim, TCPS_QUEUE_LEN, &r);
	assert_true(slice_is(r.key, "/q"));
	mb_free(&m);

	mb_u8(&m, 17);
	check_tcps(TCPS_V2, &m, &deflim, TCPS_LIST_KEYS, &r);
	mb_free(&m);

	mb_u8(&m, 18); mb_str(&m, "/barrier"); mb_u64(&m, 8);
	check_tcps(TCPS_V2, &m, &deflim, TCPS_BARRIER, &r);
	assert_true(slice_is(r.key, "/barrier"));
	assert_int_equal(r.num, 8);
	mb_free(&m);
}

static void
test_v2_unknown(void **state)
{
	struct mb	m = { 0 };
	struct tcps_req	r;
	uint8_t		b[64];
	size_t		need;
	int		op;

	memset(b, 0, sizeof(b));
	for (op = 19; op < 256; op++) {
		b[0] = op;
		assert_int_equal(tcps_decode(TCPS_V2, b, 1, &deflim, &r,
		    &need), RDZV_EPROTO);
	}
	/* A VALIDATE with the wrong magic. */
	mb_u8(&m, 0); mb_u32(&m, TCPS_V2_MAGIC ^ 1);
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    RDZV_EPROTO);
	mb_free(&m);
}

/* The same byte means different ops in the two dialects. */
static void
test_dialect_tables(void **state)
{
	struct mb	m = { 0 };
	struct tcps_req	r;
	size_t		need;

	mb_u8(&m, 7); mb_str(&m, "/k");
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), (int)m.len);
	assert_int_equal(r.op, TCPS_WATCH_KEY);
	/* 2.x: 7 is GETNUMKEYS, one byte. */
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    1);
	assert_int_equal(r.op, TCPS_GETNUMKEYS);
	mb_free(&m);

	mb_u8(&m, 8); mb_str(&m, "/k");
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), (int)m.len);
	assert_int_equal(r.op, TCPS_DELETE_KEY);
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    (int)m.len);
	assert_int_equal(r.op, TCPS_DELETE_KEY);
	mb_free(&m);

	/* 0 is SET in 1.13 (no VALIDATE there). */
	mb_u8(&m, 0); mb_str(&m, "/k"); mb_str(&m, "v");
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), (int)m.len);
	assert_int_equal(r.op, TCPS_SET);
	mb_free(&m);
}

/* ---- limits ---- */

/* Decoding the first len bytes of m must give ETOOBIG. */
static int
decode_small(enum tcps_dialect d, const struct mb *m, size_t len)
{
	struct tcps_req	r;
	size_t		need = 0;

	return (tcps_decode(d, m->p, len, &smallim, &r, &need));
}
#define expect_toobig(d, m, len) \
	assert_int_equal(decode_small((d), (m), (len)), RDZV_ETOOBIG)

static void
test_tcps_limits(void **state)
{
	struct mb	m = { 0 };
	struct tcps_req	r;
	char		k16[17], v64[65];
	size_t		need, cut;

	memset(k16, 'k', 16); k16[16] = '\0';
	memset(v64, 'v', 64); v64[64] = '\0';

	/* Exactly at the limits is fine. */
	mb_u8(&m, 0); mb_str(&m, k16); mb_str(&m, v64);
	check_tcps(TCPS_V113, &m, &smallim, TCPS_SET, &r);
	mb_free(&m);

	/* Key over: refused from the length field alone. */
	mb_u8(&m, 0); mb_u64(&m, 17);
	expect_toobig(TCPS_V113, &m, m.len);
	m.p[0] = 1;	/* SET in 2.x */
	expect_toobig(TCPS_V2, &m, m.len);
	mb_free(&m);
	/* A length that would wrap any sum. */
	mb_u8(&m, 2); mb_u64(&m, UINT64_MAX);
	expect_toobig(TCPS_V113, &m, m.len);
	mb_free(&m);
	mb_u8(&m, 2); mb_u64(&m, (uint64_t)1 << 63);
	expect_toobig(TCPS_V2, &m, m.len);
	mb_free(&m);

	/* Value over, after a good key. */
	mb_u8(&m, 0); mb_str(&m, "/k"); mb_u64(&m, 65);
	expect_toobig(TCPS_V113, &m, m.len);
	mb_free(&m);
	/* COMPARE_SET: expected, then desired over. */
	mb_u8(&m, 1); mb_str(&m, "/k"); mb_u64(&m, 65);
	expect_toobig(TCPS_V113, &m, m.len);
	mb_free(&m);
	mb_u8(&m, 2); mb_str(&m, "/k"); mb_str(&m, "e"); mb_u64(&m, 65);
	expect_toobig(TCPS_V2, &m, m.len);
	mb_free(&m);
	/* APPEND, QUEUE_PUSH values; BARRIER, QUEUE_POP keys. */
	mb_u8(&m, 9); mb_str(&m, "/k"); mb_u64(&m, 65);
	expect_toobig(TCPS_V2, &m, m.len);
	m.p[0] = 14;
	expect_toobig(TCPS_V2, &m, m.len);
	mb_free(&m);
	mb_u8(&m, 18); mb_u64(&m, 17);
	expect_toobig(TCPS_V2, &m, m.len);
	m.p[0] = 15;
	expect_toobig(TCPS_V2, &m, m.len);
	mb_free(&m);

	/* Counts over keys_max, at the count. */
	mb_u8(&m, 4); mb_u64(&m, 5);
	expect_toobig(TCPS_V113, &m, m.len);
	m.p[0] = 5;
	expect_toobig(TCPS_V113, &m, m.len);
	m.p[0] = 10;
	expect_toobig(TCPS_V2, &m, m.len);
	m.p[0] = 11;
	expect_toobig(TCPS_V2, &m, m.len);
	mb_free(&m);
	mb_u8(&m, 4); mb_u64(&m, UINT64_MAX);
	expect_toobig(TCPS_V113, &m, m.len);
	mb_free(&m);

	/* Exactly keys_max keys is fine. */
	mb_u8(&m, 6); mb_u64(&m, 4);
	mb_str(&m, "a"); mb_str(&m, "b"); mb_str(&m, "c"); mb_str(&m, "d");
	check_tcps(TCPS_V2, &m, &smallim, TCPS_WAIT, &r);
	assert_int_equal(r.nkeys, 4);
	mb_free(&m);

	/* A key in the middle of a list over the limit. */
	mb_u8(&m, 4); mb_u64(&m, 3); mb_str(&m, "a"); mb_u64(&m, 17);
	expect_toobig(TCPS_V113, &m, m.len);
	mb_free(&m);
	/* MULTI_SET key, then value over. */
	mb_u8(&m, 11); mb_u64(&m, 2); mb_str(&m, "a"); mb_str(&m, "1");
	cut = m.len;
	mb_u64(&m, 17);
	expect_toobig(TCPS_V2, &m, m.len);
	m.len = cut;
	mb_str(&m, "b"); mb_u64(&m, 65);
	expect_toobig(TCPS_V2, &m, m.len);
	mb_free(&m);

	/* MULTI_SET's count is an int64: negative is malformed. */
	mb_u8(&m, 11); mb_u64(&m, (uint64_t)-1);
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &smallim, &r, &need),
	    RDZV_EPROTO);
	mb_free(&m);
	mb_u8(&m, 11); mb_u64(&m, (uint64_t)INT64_MIN);
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    RDZV_EPROTO);
	mb_free(&m);
	/* In the other lists a count is unsigned: huge, not negative. */
	mb_u8(&m, 10); mb_u64(&m, (uint64_t)-1);
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    RDZV_ETOOBIG);
	mb_free(&m);
}

/* Default limits: an 8 KiB key passes, 8 KiB + 1 does not. */
static void
test_tcps_default_limits(void **state)
{
	struct mb	 m = { 0 };
	struct tcps_req	 r;
	char		*k;
	size_t		 need;

	k = malloc(8193);
	assert_non_null(k);
	memset(k, 'k', 8192);
	k[8192] = '\0';
	mb_u8(&m, 2); mb_str(&m, k);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), (int)m.len);
	assert_int_equal(r.key.len, 8192);
	mb_free(&m);
	mb_u8(&m, 2); mb_u64(&m, 8193);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), RDZV_ETOOBIG);
	mb_free(&m);
	/* 8 MiB value: still waiting for bytes, need is the exact total. */
	mb_u8(&m, 0); mb_str(&m, "/k"); mb_u64(&m, 8 * 1024 * 1024);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), 0);
	assert_int_equal(need, m.len + 8 * 1024 * 1024);
	mb_free(&m);
	mb_u8(&m, 0); mb_str(&m, "/k"); mb_u64(&m, 8 * 1024 * 1024 + 1);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), RDZV_ETOOBIG);
	mb_free(&m);
	/* 131072 keys allowed, 131073 not. */
	mb_u8(&m, 4); mb_u64(&m, 131072);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), 0);
	/* Each missing key needs at least its length field. */
	assert_int_equal(need, m.len + 131072 * 8);
	mb_free(&m);
	mb_u8(&m, 4); mb_u64(&m, 131073);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), RDZV_ETOOBIG);
	mb_free(&m);
	free(k);
}

/* need is the least total the known length fields allow. */
static void
test_tcps_need(void **state)
{
	struct mb	m = { 0 };
	struct tcps_req	r;
	size_t		need;

	/* SET: opcode only -> key length + value length. */
	mb_u8(&m, 0);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), 0);
	assert_int_equal(need, 1 + 8 + 8);
	/* Key length 5 known -> + 5 bytes + the value's length field. */
	mb_u64(&m, 5);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), 0);
	assert_int_equal(need, 1 + 8 + 5 + 8);
	mb_add(&m, "/abcd", 5);
	mb_u64(&m, 100);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), 0);
	assert_int_equal(need, 1 + 8 + 5 + 8 + 100);
	mb_free(&m);

	/* COMPARE_SET counts three length fields. */
	mb_u8(&m, 1);
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), 0);
	assert_int_equal(need, 1 + 24);
	mb_free(&m);

	/* MULTI_SET 3 pairs, first key length known. */
	mb_u8(&m, 11); mb_u64(&m, 3); mb_u64(&m, 4);
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    0);
	assert_int_equal(need, 1 + 8 + 8 + 4 + 8 + 2 * 16);
	mb_free(&m);

	/* Fixed-size ops. */
	mb_u8(&m, 13);
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    0);
	assert_int_equal(need, 5);
	mb_free(&m);
}

/*
 * A server's loop over a byte stream arriving in chunks: appends each
 * chunk, decodes only once need bytes are buffered, drains what was
 * used.  Returns the ops decoded in order; counts decode calls.
 */
struct feed {
	uint8_t		buf[4096];
	size_t		len;
	size_t		need;
	int		ops[64];
	int		nops;
	int		calls;
};

static void
feed_tcps(struct feed *f, enum tcps_dialect d, const uint8_t *p, size_t n)
{
	struct tcps_req	r;
	int		rc;

	assert_true(f->len + n <= sizeof(f->buf));
	memcpy(f->buf + f->len, p, n);
	f->len += n;
	while (f->len >= f->need) {
		f->calls++;
		rc = tcps_decode(d, f->buf, f->len, &deflim, &r, &f->need);
		assert_true(rc >= 0);
		if (rc == 0) {
			assert_true(f->need > f->len);
			break;
		}
		assert_true(f->nops < 64);
		f->ops[f->nops++] = r.op;
		memmove(f->buf, f->buf + rc, f->len - rc);
		f->len -= rc;
		f->need = 1;
	}
}

static void
test_tcps_split(void **state)
{
	struct mb	 m = { 0 };
	struct feed	*f;
	const int	 want[] = { TCPS_VALIDATE, TCPS_PING, TCPS_ADD,
			    TCPS_MULTI_SET, TCPS_WAIT, TCPS_COMPARE_SET,
			    TCPS_GETNUMKEYS, TCPS_GET };
	size_t		 k, i;
	int		 bytewise_calls;

	mb_u8(&m, 0); mb_u32(&m, TCPS_V2_MAGIC);
	mb_u8(&m, 13); mb_u32(&m, 42);
	mb_u8(&m, 4); mb_str(&m, "init/"); mb_u64(&m, 1);
	mb_u8(&m, 11); mb_u64(&m, 2); mb_str(&m, "/a"); mb_str(&m, "1");
	mb_str(&m, "/b"); mb_str(&m, "2");
	mb_u8(&m, 6); mb_u64(&m, 2); mb_str(&m, "/a"); mb_str(&m, "/b");
	mb_u8(&m, 2); mb_str(&m, "/c"); mb_str(&m, "x"); mb_str(&m, "y");
	mb_u8(&m, 7);
	mb_u8(&m, 3); mb_str(&m, "/a");

	f = calloc(1, sizeof(*f));
	assert_non_null(f);
	/* Split in two at every byte. */
	for (k = 0; k <= m.len; k++) {
		memset(f, 0, sizeof(*f));
		f->need = 1;
		feed_tcps(f, TCPS_V2, m.p, k);
		feed_tcps(f, TCPS_V2, m.p + k, m.len - k);
		assert_int_equal(f->nops, 8);
		for (i = 0; i < 8; i++)
			assert_int_equal(f->ops[i], want[i]);
		assert_int_equal(f->len, 0);
	}
	/* One byte at a time: need keeps re-decoding to a few per message. */
	memset(f, 0, sizeof(*f));
	f->need = 1;
	for (k = 0; k < m.len; k++)
		feed_tcps(f, TCPS_V2, m.p + k, 1);
	assert_int_equal(f->nops, 8);
	for (i = 0; i < 8; i++)
		assert_int_equal(f->ops[i], want[i]);
	bytewise_calls = f->calls;
	/*
	 * Each call either completes a message or learns at least one new
	 * length field: twice per message (opcode, completion) plus the 13
	 * length and count fields in the stream.
	 */
	assert_true(bytewise_calls <= 8 * 2 + 13);
	free(f);
	mb_free(&m);
}

/* ---- sniffing ---- */

static void
test_sniff(void **state)
{
	const uint8_t	v2[] = { 0x00, 0xce, 0xf7, 0x85, 0x3c, 0x0d };
	const uint8_t	set113[] = { 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0 };
	const uint8_t	native[] = { 'R', 'D', 'Z', 'V', 1, 0, 0, 0 };
	const uint8_t	get113[] = { 0x02, 0x03 };
	int		nat;
	size_t		k;

	nat = -1;
	assert_int_equal(tcps_sniff(v2, 0, &nat), TCPS_UNKNOWN);
	assert_int_equal(nat, 0);
	for (k = 1; k < 5; k++) {
		nat = -1;
		assert_int_equal(tcps_sniff(v2, k, &nat), TCPS_UNKNOWN);
		assert_int_equal(nat, 0);
	}
	assert_int_equal(tcps_sniff(v2, 5, &nat), TCPS_V2);
	assert_int_equal(nat, 0);
	assert_int_equal(tcps_sniff(v2, sizeof(v2), &nat), TCPS_V2);

	/* 1.13 SET: 00 then a key length, not the magic. */
	assert_int_equal(tcps_sniff(set113, 1, &nat), TCPS_UNKNOWN);
	assert_int_equal(tcps_sniff(set113, 2, &nat), TCPS_V113);
	assert_int_equal(tcps_sniff(set113, sizeof(set113), &nat), TCPS_V113);
	assert_int_equal(nat, 0);
	/* Magic only partly matching. */
	{
		const uint8_t	part[] = { 0x00, 0xce, 0xf7, 0x00, 0x3c };

		assert_int_equal(tcps_sniff(part, 3, &nat), TCPS_UNKNOWN);
		assert_int_equal(tcps_sniff(part, 4, &nat), TCPS_V113);
		assert_int_equal(tcps_sniff(part, 5, &nat), TCPS_V113);
	}
	assert_int_equal(tcps_sniff(get113, 1, &nat), TCPS_V113);
	assert_int_equal(tcps_sniff(get113, 2, &nat), TCPS_V113);

	/* Native: prefixes wait, four bytes tell. */
	for (k = 1; k < 4; k++) {
		nat = -1;
		assert_int_equal(tcps_sniff(native, k, &nat), TCPS_UNKNOWN);
		assert_int_equal(nat, 0);
	}
	for (k = 4; k <= sizeof(native); k++) {
		nat = 0;
		assert_int_equal(tcps_sniff(native, k, &nat), TCPS_UNKNOWN);
		assert_int_equal(nat, 1);
	}
	{
		const uint8_t	rdzx[] = { 'R', 'D', 'Z', 'X' };

		assert_int_equal(tcps_sniff(rdzx, 4, &nat), TCPS_V113);
		assert_int_equal(nat, 0);
	}
	/* native may be NULL. */
	assert_int_equal(tcps_sniff(native, 8, NULL), TCPS_UNKNOWN);
	assert_int_equal(tcps_sniff(v2, 5, NULL), TCPS_V2);
}

/* ---- lists ---- */

static void
test_list_iter(void **state)
{
	struct mb	 m = { 0 };
	struct tcps_req	 r;
	struct tcps_iter it;
	struct slice	 k, v;
	size_t		 need;

	mb_u8(&m, 4); mb_u64(&m, 3); mb_str(&m, "/a"); mb_str(&m, "");
	mb_str(&m, "/ccc");
	mb_u8(&m, 6);	/* the next request, which the list must not reach */
	assert_int_equal(tcps_decode(TCPS_V113, m.p, m.len, &deflim, &r,
	    &need), (int)m.len - 1);
	tcps_iter_init(&it, &r);
	assert_int_equal(tcps_list_next(&it, &k, NULL), 1);
	assert_true(slice_is(k, "/a"));
	v.len = 99;
	assert_int_equal(tcps_list_next(&it, &k, &v), 1);
	assert_int_equal(k.len, 0);
	assert_int_equal(v.len, 0);
	assert_int_equal(tcps_list_next(&it, &k, NULL), 1);
	assert_true(slice_is(k, "/ccc"));
	assert_int_equal(tcps_list_next(&it, &k, NULL), 0);
	assert_int_equal(tcps_list_next(&it, &k, NULL), 0);
	mb_free(&m);

	mb_u8(&m, 11); mb_u64(&m, 2); mb_str(&m, "/x"); mb_str(&m, "1");
	mb_str(&m, "/y"); mb_str(&m, "");
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    (int)m.len);
	tcps_iter_init(&it, &r);
	assert_int_equal(tcps_list_next(&it, &k, &v), 1);
	assert_true(slice_is(k, "/x"));
	assert_true(slice_is(v, "1"));
	assert_int_equal(tcps_list_next(&it, &k, &v), 1);
	assert_true(slice_is(k, "/y"));
	assert_int_equal(v.len, 0);
	assert_int_equal(tcps_list_next(&it, &k, &v), 0);
	mb_free(&m);

	/* Empty list, and a request with no list at all. */
	mb_u8(&m, 10); mb_u64(&m, 0);
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    (int)m.len);
	tcps_iter_init(&it, &r);
	assert_int_equal(tcps_list_next(&it, &k, &v), 0);
	mb_free(&m);
	mb_u8(&m, 3); mb_str(&m, "/g");
	assert_int_equal(tcps_decode(TCPS_V2, m.p, m.len, &deflim, &r, &need),
	    (int)m.len);
	tcps_iter_init(&it, &r);
	assert_int_equal(tcps_list_next(&it, &k, &v), 0);
	mb_free(&m);
}

/* ---- TCPStore reply encoders ---- */

static void
test_tcps_put(void **state)
{
	struct evbuffer	*out;
	struct mb	 want = { 0 };
	uint8_t		*p;

	out = evbuffer_new();
	assert_non_null(out);
	assert_int_equal(tcps_put_u8(out, TCPS_READY), 0);
	assert_int_equal(tcps_put_i64(out, -2), 0);
	assert_int_equal(tcps_put_u32(out, 0x01020304), 0);
	assert_int_equal(tcps_put_bytes(out, "abc", 3), 0);
	assert_int_equal(tcps_put_bytes(out, NULL, 0), 0);
	assert_int_equal(tcps_put_watch(out, TCPS_WATCH_UPDATED,
	    slice_str("/k"), slice_str("o"), slice_str("new")), 0);

	mb_u8(&want, 0);
	mb_u64(&want, (uint64_t)-2);
	mb_u32(&want, 0x01020304);
	mb_str(&want, "abc");
	mb_u64(&want, 0);
	mb_u8(&want, 0); mb_str(&want, "/k"); mb_str(&want, "o");
	mb_str(&want, "new");
	assert_int_equal(evbuffer_get_length(out), want.len);
	p = evbuffer_pullup(out, -1);
	assert_memory_equal(p, want.p, want.len);
	evbuffer_free(out);
	mb_free(&want);
}

/* ---- native: preamble ---- */

static void
test_nat_preamble(void **state)
{
	struct evbuffer	*out;
	uint8_t		 p[NAT_PREAMBLE_LEN], *q, ver;
	size_t		 k, need;

	out = evbuffer_new();
	assert_non_null(out);
	assert_int_equal(nat_preamble_put(out, NAT_VERSION), 0);
	assert_int_equal(evbuffer_get_length(out), NAT_PREAMBLE_LEN);
	q = evbuffer_pullup(out, -1);
	assert_memory_equal(q, "RDZV\x01\x00\x00\x00", 8);
	memcpy(p, q, sizeof(p));
	evbuffer_free(out);

	ver = 0;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need),
	    NAT_PREAMBLE_LEN);
	assert_int_equal(ver, 1);
	/* Extra bytes behind it are the first frame: not consumed. */
	{
		uint8_t	more[12];

		memcpy(more, p, 8);
		memset(more + 8, 0xff, 4);
		assert_int_equal(nat_preamble_decode(more, 12, &ver, &need),
		    NAT_PREAMBLE_LEN);
	}
	for (k = 0; k < 8; k++) {
		need = 0;
		assert_int_equal(nat_preamble_decode(p, k, &ver, &need), 0);
		assert_int_equal(need, 8);
	}
	/* Wrong magic: refused from the first wrong byte. */
	p[0] = 'X';
	assert_int_equal(nat_preamble_decode(p, 1, &ver, &need), RDZV_EPROTO);
	p[0] = 'R';
	p[3] = 'W';
	assert_int_equal(nat_preamble_decode(p, 3, &ver, &need), 0);
	assert_int_equal(nat_preamble_decode(p, 4, &ver, &need), RDZV_EPROTO);
	p[3] = 'V';
	/* Reserved bytes must be zero. */
	p[6] = 1;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need), RDZV_EPROTO);
	p[6] = 0;
	/* Versions: 0 is a refusal, 2 is from the future. */
	p[4] = 0;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need),
	    RDZV_EVERSION);
	assert_int_equal(ver, 0);
	p[4] = 2;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need),
	    RDZV_EVERSION);
	assert_int_equal(ver, 2);
	/* Byte 5: a server's NAT_PRE_* flags; unknown flags are malformed. */
	p[5] = NAT_PRE_AUTH;
	p[4] = 1;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need),
	    NAT_PREAMBLE_LEN);
	p[5] = NAT_PRE_TLS;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need),
	    NAT_PREAMBLE_LEN);
	/* The refusal rdzvd sends a plaintext client when TLS is required. */
	p[4] = 0;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need),
	    RDZV_EVERSION);
	assert_int_equal(ver, 0);
	p[4] = 1;
	p[5] = 0x04;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need), RDZV_EPROTO);
	p[5] = 0x80 | NAT_PRE_AUTH;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need), RDZV_EPROTO);
	p[5] = 0;
	p[7] = 1;
	assert_int_equal(nat_preamble_decode(p, 8, &ver, &need), RDZV_EPROTO);
	p[7] = 0;
	out = evbuffer_new();
	assert_non_null(out);
	assert_int_equal(nat_preamble_put_flags(out, NAT_VERSION,
	    NAT_PRE_AUTH), 0);
	assert_int_equal(evbuffer_get_length(out), NAT_PREAMBLE_LEN);
	q = evbuffer_pullup(out, -1);
	assert_memory_equal(q, "RDZV\x01\x01\x00\x00", 8);
	ver = 0;
	assert_int_equal(nat_preamble_decode(q, 8, &ver, &need),
	    NAT_PREAMBLE_LEN);
	assert_int_equal(ver, 1);
	evbuffer_free(out);

	/* A TCPStore client is not native. */
	assert_int_equal(nat_preamble_decode((const uint8_t *)"\x00\xce", 2,
	    &ver, &need), RDZV_EPROTO);
}

/* ---- native: frames ---- */

/* Builds a frame by hand, little-endian. */
static void
mb_le(struct mb *m, uint64_t v, int n)
{
	uint8_t	b[8];
	int	i;

	for (i = 0; i < n; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	mb_add(m, b, n);
}

static void
mb_hdr(struct mb *m, uint32_t len, uint16_t op, uint16_t flags, uint32_t id)
{
	mb_le(m, len, 4);
	mb_le(m, op, 2);
	mb_le(m, flags, 2);
	mb_le(m, id, 4);
}

static void
mb_fi(struct mb *m, int64_t v)
{
	mb_u8(m, 'i');
	mb_le(m, (uint64_t)v, 8);
}

static void
mb_fb(struct mb *m, const char *s)
{
	mb_u8(m, 'b');
	mb_le(m, strlen(s), 4);
	mb_add(m, s, strlen(s));
}

static void
test_nat_decode(void **state)
{
	struct mb	m = { 0 };
	struct nat_msg	msg;
	struct nat_rd	rd;
	struct slice	s;
	int64_t		v;
	size_t		k, need;

	/* A SET by hand. */
	mb_hdr(&m, 8 + 5 + 2 + 5 + 1 + 5 + 3, NAT_OP_SET, 0, 77);
	mb_fb(&m, "ns"); mb_fb(&m, "k"); mb_fb(&m, "val");
	assert_int_equal(nat_decode(m.p, m.len, &deflim, &msg, &need),
	    (int)m.len);
	assert_int_equal(msg.op, NAT_OP_SET);
	assert_int_equal(msg.flags, 0);
	assert_int_equal(msg.id, 77);
	assert_ptr_equal(msg.payload.p, m.p + 12);
	assert_int_equal(msg.payload.len, m.len - 12);
	nat_rd_init(&rd, msg.payload);
	assert_int_equal(nat_get_bytes(&rd, &s), 0);
	assert_true(slice_is(s, "ns"));
	assert_int_equal(nat_get_bytes(&rd, &s), 0);
	assert_true(slice_is(s, "k"));
	assert_int_equal(nat_rd_end(&rd), RDZV_EPROTO);
	/* Wrong tag: the reader stays put. */
	assert_int_equal(nat_get_i64(&rd, &v), RDZV_EPROTO);
	assert_int_equal(nat_get_bytes(&rd, &s), 0);
	assert_true(slice_is(s, "val"));
	assert_int_equal(nat_rd_end(&rd), 0);
	assert_int_equal(nat_get_bytes(&rd, &s), RDZV_EPROTO);
	assert_int_equal(nat_get_i64(&rd, &v), RDZV_EPROTO);

	/* Every truncation: 0, need past it; the whole header known: exact. */
	for (k = 0; k < m.len; k++) {
		need = 0;
		assert_int_equal(nat_decode(m.p, k, &deflim, &msg, &need), 0);
		assert_true(need > k);
		assert_true(need <= m.len);
		if (k >= 4)
			assert_int_equal(need, m.len);
	}
	mb_free(&m);

	/* Empty payload: the smallest frame. */
	mb_hdr(&m, 8, NAT_OP_NUM_KEYS, NAT_F_REPLY, 1);
	assert_int_equal(nat_decode(m.p, m.len, &deflim, &msg, &need), 12);
	assert_int_equal(msg.payload.len, 0);
	assert_int_equal(msg.flags, NAT_F_REPLY);
	mb_free(&m);
}

static void
test_nat_header_checks(void **state)
{
	struct mb	m = { 0 };
	struct nat_msg	msg;
	size_t		need, fmax;
	int		op;

	fmax = nat_frame_max(&deflim);
	/* Documented figure: 8 + 4*5 + 9 + ns + key + 2 * value. */
	assert_int_equal(fmax, 37 + 1024 + 8192 + 2 * 8 * 1024 * 1024);
	assert_int_equal(nat_frame_max(&smallim), 37 + 8 + 16 + 2 * 64);
	{
		struct wire_limits	huge = { SIZE_MAX, SIZE_MAX, SIZE_MAX,
					    SIZE_MAX };

		/* Capped so a frame fits the decoder's int return. */
		assert_true(nat_frame_max(&huge) <= (size_t)INT32_MAX - 4);
	}

	/* Length under the header: malformed, from 4 bytes. */
	mb_le(&m, 7, 4);
	assert_int_equal(nat_decode(m.p, 4, &deflim, &msg, &need),
	    RDZV_EPROTO);
	mb_free(&m);
	mb_le(&m, 0, 4);
	assert_int_equal(nat_decode(m.p, 4, &deflim, &msg, &need),
	    RDZV_EPROTO);
	mb_free(&m);
	/* Over frame_max: too big, from 4 bytes; at it, wait for it. */
	mb_le(&m, fmax + 1, 4);
	assert_int_equal(nat_decode(m.p, 4, &deflim, &msg, &need),
	    RDZV_ETOOBIG);
	mb_free(&m);
	mb_le(&m, UINT32_MAX, 4);
	assert_int_equal(nat_decode(m.p, 4, &deflim, &msg, &need),
	    RDZV_ETOOBIG);
	mb_free(&m);
	mb_hdr(&m, fmax, NAT_OP_SET, 0, 1);
	assert_int_equal(nat_decode(m.p, m.len, &deflim, &msg, &need), 0);
	assert_int_equal(need, fmax + 4);
	mb_free(&m);

	/* Ops: 0 and above NAT_OP_MAX refused from 6 bytes. */
	for (op = 0; op < 65536; op++) {
		mb_hdr(&m, 8, op, 0, 0);
		if (op >= 1 && op <= NAT_OP_MAX) {
			assert_int_equal(nat_decode(m.p, m.len, &deflim, &msg,
			    &need), 12);
			assert_int_equal(msg.op, op);
		} else {
			assert_int_equal(nat_decode(m.p, 6, &deflim, &msg,
			    &need), RDZV_EPROTO);
			assert_int_equal(nat_decode(m.p, 5, &deflim, &msg,
			    &need), 0);
		}
		mb_free(&m);
	}

	/* Flags. */
	{
		const struct { uint16_t f; int ok; } fl[] = {
			{ 0, 1 },
			{ NAT_F_REPLY, 1 },
			{ NAT_F_REPLY | NAT_F_ERROR, 1 },
			{ NAT_F_PUSH, 1 },
			{ NAT_F_ERROR, 0 },
			{ NAT_F_REPLY | NAT_F_PUSH, 0 },
			{ NAT_F_PUSH | NAT_F_ERROR, 0 },
			{ 0x0008, 0 },
			{ 0x8000 | NAT_F_REPLY, 0 },
		};
		size_t	i;

		for (i = 0; i < sizeof(fl) / sizeof(fl[0]); i++) {
			mb_hdr(&m, 8, NAT_OP_PING, fl[i].f, 0);
			if (fl[i].ok)
				assert_int_equal(nat_decode(m.p, m.len,
				    &deflim, &msg, &need), 12);
			else
				assert_int_equal(nat_decode(m.p, 8, &deflim,
				    &msg, &need), RDZV_EPROTO);
			mb_free(&m);
		}
	}
}

/* The reader checks field lengths against the payload. */
static void
test_nat_reader(void **state)
{
	struct mb	m = { 0 };
	struct nat_rd	rd;
	struct slice	pl, s;
	int64_t		v;

	mb_fi(&m, INT64_MIN); mb_fi(&m, -1); mb_fb(&m, "");
	mb_u8(&m, 'b'); mb_le(&m, 10, 4); mb_add(&m, "short", 5);
	pl.p = m.p;
	pl.len = m.len;
	nat_rd_init(&rd, pl);
	assert_int_equal(nat_get_i64(&rd, &v), 0);
	assert_true(v == INT64_MIN);
	assert_int_equal(nat_get_i64(&rd, &v), 0);
	assert_int_equal(v, -1);
	assert_int_equal(nat_get_bytes(&rd, &s), 0);
	assert_int_equal(s.len, 0);
	/* Declared 10, 5 present. */
	assert_int_equal(nat_get_bytes(&rd, &s), RDZV_EPROTO);
	assert_int_equal(rd.left, 10);
	assert_int_equal(nat_rd_end(&rd), RDZV_EPROTO);
	mb_free(&m);

	/* Length 0xffffffff cannot wrap. */
	mb_u8(&m, 'b'); mb_le(&m, UINT32_MAX, 4);
	pl.p = m.p;
	pl.len = m.len;
	nat_rd_init(&rd, pl);
	assert_int_equal(nat_get_bytes(&rd, &s), RDZV_EPROTO);
	mb_free(&m);

	/* Truncated integer, unknown tag, empty payload. */
	mb_u8(&m, 'i'); mb_le(&m, 1, 7);
	pl.p = m.p;
	pl.len = m.len;
	nat_rd_init(&rd, pl);
	assert_int_equal(nat_get_i64(&rd, &v), RDZV_EPROTO);
	m.p[0] = 'x';
	assert_int_equal(nat_get_bytes(&rd, &s), RDZV_EPROTO);
	mb_free(&m);
	pl.p = NULL;
	pl.len = 0;
	nat_rd_init(&rd, pl);
	assert_int_equal(nat_get_i64(&rd, &v), RDZV_EPROTO);
	assert_int_equal(nat_get_bytes(&rd, &s), RDZV_EPROTO);
	assert_int_equal(nat_rd_end(&rd), 0);
}

/* Writer -> decoder -> reader for every op's field list. */
static const char *nat_fields[NAT_OP_MAX + 1] = {
	[NAT_OP_PING] = "b",
	[NAT_OP_SET] = "bbb",
	[NAT_OP_GET] = "bb",
	[NAT_OP_ADD] = "bbi",
	[NAT_OP_CAS] = "bbbb",
	[NAT_OP_WAIT] = "bin",		/* ns, timeout, n keys */
	[NAT_OP_CHECK] = "bn",
	[NAT_OP_DELETE] = "bb",
	[NAT_OP_NUM_KEYS] = "b",
	[NAT_OP_APPEND] = "bbb",
	[NAT_OP_MULTI_GET] = "bn",
	[NAT_OP_MULTI_SET] = "bN",	/* n pairs */
	[NAT_OP_QUEUE_PUSH] = "bbb",
	[NAT_OP_QUEUE_POP] = "bbi",
	[NAT_OP_QUEUE_LEN] = "bb",
	[NAT_OP_LIST_KEYS] = "b",
	[NAT_OP_BARRIER] = "bbii",
	[NAT_OP_CANCEL] = "i",
	[NAT_OP_WATCH] = "bb",
	[NAT_OP_WATCH_EVENT] = "bbibb",
	[NAT_OP_JOIN] = "bbbbiiiiiii",
	[NAT_OP_HEARTBEAT] = "bi",
	[NAT_OP_LEAVE] = "bi",
	[NAT_OP_FAILURE] = "biiiiiib",
	[NAT_OP_SUCCEEDED] = "bii",
	[NAT_OP_ROUND] = "biiiiiiiiibib",
	[NAT_OP_JOB_STATUS] = "b",
	[NAT_OP_ADMIN_STATUS] = "",
	[NAT_OP_ADMIN_JOBS] = "",
	[NAT_OP_ADMIN_JOB] = "b",
	[NAT_OP_ADMIN_EVENTS] = "bii",
	[NAT_OP_ADMIN_CLOSE] = "bb",
	[NAT_OP_ADMIN_EVICT] = "bi",
	[NAT_OP_AUTH_CHALLENGE] = "b",
	[NAT_OP_AUTH] = "bb",
	[NAT_OP_READY] = "biii",
	[NAT_OP_STRAGGLER] = "biiib",
	[NAT_OP_DRAIN] = "biiib",
	[NAT_OP_ADMIN_FORGET] = "b",
};

static void
test_nat_roundtrip(void **state)
{
	struct evbuffer	*out;
	struct nat_wr	 w;
	struct nat_msg	 msg;
	struct nat_rd	 rd;
	struct slice	 s;
	const char	*f;
	uint8_t		*p;
	char		 val[32];
	size_t		 need, total;
	int64_t		 v, n, i;
	int		 op, rc, cnt;

	out = evbuffer_new();
	assert_non_null(out);
	for (op = 1; op <= NAT_OP_MAX; op++) {
		/* A new op needs its field list here. */
		assert_non_null(nat_fields[op]);
		assert_int_equal(nat_frame_begin(&w, out, op, 0, 1000 + op), 0);
		cnt = 0;
		for (f = nat_fields[op]; *f != '\0'; f++) {
			switch (*f) {
			case 'b':
				snprintf(val, sizeof(val), "f%d.%d", op, cnt++);
				assert_int_equal(nat_put_bytes(&w, val,
				    strlen(val)), 0);
				break;
			case 'i':
				assert_int_equal(nat_put_i64(&w,
				    -(int64_t)op * 1000000007LL), 0);
				break;
			case 'n':
			case 'N':
				assert_int_equal(nat_put_i64(&w, 3), 0);
				for (i = 0; i < (*f == 'N' ? 6 : 3); i++)
					assert_int_equal(nat_put_bytes(&w,
					    "key", 3), 0);
				break;
			}
		}
		assert_int_equal(nat_frame_end(&w), 0);
	}
	assert_int_equal(nat_put_error(out, NAT_OP_GET, 9, RDZV_ENOTFOUND,
	    "no such key"), 0);
	assert_int_equal(nat_put_error(out, NAT_OP_WAIT, 10, RDZV_ECANCELED,
	    NULL), 0);

	total = evbuffer_get_length(out);
	p = evbuffer_pullup(out, -1);
	for (op = 1; op <= NAT_OP_MAX; op++) {
		rc = nat_decode(p, total, &deflim, &msg, &need);
		assert_true(rc > 0);
		assert_int_equal(msg.op, op);
		assert_int_equal(msg.flags, 0);
		assert_int_equal(msg.id, 1000 + op);
		nat_rd_init(&rd, msg.payload);
		cnt = 0;
		for (f = nat_fields[op]; *f != '\0'; f++) {
			switch (*f) {
			case 'b':
				snprintf(val, sizeof(val), "f%d.%d", op, cnt++);
				assert_int_equal(nat_get_bytes(&rd, &s), 0);
				assert_true(slice_is(s, val));
				break;
			case 'i':
				assert_int_equal(nat_get_i64(&rd, &v), 0);
				assert_true(v == -(int64_t)op * 1000000007LL);
				break;
			case 'n':
			case 'N':
				assert_int_equal(nat_get_i64(&rd, &n), 0);
				assert_int_equal(n, 3);
				for (i = 0; i < (*f == 'N' ? 6 : 3); i++) {
					assert_int_equal(nat_get_bytes(&rd,
					    &s), 0);
					assert_true(slice_is(s, "key"));
				}
				break;
			}
		}
		assert_int_equal(nat_rd_end(&rd), 0);
		p += rc;
		total -= rc;
	}
	/* The two error replies. */
	rc = nat_decode(p, total, &deflim, &msg, &need);
	assert_true(rc > 0);
	assert_int_equal(msg.op, NAT_OP_GET);
	assert_int_equal(msg.flags, NAT_F_REPLY | NAT_F_ERROR);
	assert_int_equal(msg.id, 9);
	nat_rd_init(&rd, msg.payload);
	assert_int_equal(nat_get_i64(&rd, &v), 0);
	assert_int_equal(v, RDZV_ENOTFOUND);
	assert_int_equal(nat_get_bytes(&rd, &s), 0);
	assert_true(slice_is(s, "no such key"));
	assert_int_equal(nat_rd_end(&rd), 0);
	p += rc;
	total -= rc;
	rc = nat_decode(p, total, &deflim, &msg, &need);
	assert_int_equal(rc, (int)total);
	assert_int_equal(msg.id, 10);
	nat_rd_init(&rd, msg.payload);
	assert_int_equal(nat_get_i64(&rd, &v), 0);
	assert_int_equal(v, RDZV_ECANCELED);
	assert_int_equal(nat_get_bytes(&rd, &s), 0);
	assert_true(slice_is(s, rdzv_strerror(RDZV_ECANCELED)));
	assert_int_equal(nat_rd_end(&rd), 0);
	evbuffer_free(out);
}

/* Exact bytes of a small frame: little-endian whatever the host. */
static void
test_nat_writer_bytes(void **state)
{
	struct evbuffer	*out;
	struct nat_wr	 w;
	struct mb	 want = { 0 };
	uint8_t		 big[1000];

	out = evbuffer_new();
	assert_non_null(out);
	memset(big, 0xab, sizeof(big));
	assert_int_equal(nat_frame_begin(&w, out, NAT_OP_ADD, NAT_F_REPLY,
	    0x01020304), 0);
	assert_int_equal(nat_put_i64(&w, 0x1122334455667788LL), 0);
	assert_int_equal(nat_put_bytes(&w, "xy", 2), 0);
	assert_int_equal(nat_put_bytes(&w, big, sizeof(big)), 0);
	assert_int_equal(nat_frame_end(&w), 0);

	mb_hdr(&want, 8 + 9 + 7 + 5 + sizeof(big), NAT_OP_ADD, NAT_F_REPLY,
	    0x01020304);
	mb_add(&want, "i\x88\x77\x66\x55\x44\x33\x22\x11", 9);
	mb_add(&want, "b\x02\x00\x00\x00xy", 7);
	mb_add(&want, "b\xe8\x03\x00\x00", 5);
	mb_add(&want, big, sizeof(big));
	assert_int_equal(evbuffer_get_length(out), want.len);
	assert_memory_equal(evbuffer_pullup(out, -1), want.p, want.len);
	assert_memory_equal(want.p, "\x05\x04\x00\x00\x04\x00\x01\x00"
	    "\x04\x03\x02\x01", 12);

	/* The same fields relayed already encoded make the same frame. */
	evbuffer_drain(out, evbuffer_get_length(out));
	assert_int_equal(nat_frame_begin(&w, out, NAT_OP_ADD, NAT_F_REPLY,
	    0x01020304), 0);
	assert_int_equal(nat_put_raw(&w, want.p + 12, want.len - 12), 0);
	assert_int_equal(nat_frame_end(&w), 0);
	assert_int_equal(evbuffer_get_length(out), want.len);
	assert_memory_equal(evbuffer_pullup(out, -1), want.p, want.len);
	evbuffer_free(out);
	mb_free(&want);
}

/*
 * Frames of every size around the stage (NAT_WR_STAGE), written behind
 * queued data of many sizes, so that the three ways a frame is built (in
 * the stage, straight onto out behind at most 64 KiB, in its own buffer
 * behind more) meet every chain layout; each must decode to what was put.
 */
static void
test_nat_writer_sizes(void **state)
{
	struct evbuffer	*out;
	struct nat_wr	 w;
	struct nat_msg	 msg;
	struct nat_rd	 rd;
	struct slice	 s;
	int64_t		 v;
	uint8_t		*p, *fill;
	size_t		 pre, vlen, need, flen, i, fillsz, before;
	const size_t	 pres[] = { 0, 1, 3, 100, 1000, 4093, 4094, 4095,
			    4096, 4097, 5000, 8191, 8192, 8999, 65536, 65537,
			    70001, 1 << 20 };
	int		 staged = 0, direct = 0, own = 0;

	fillsz = (1 << 20) + 4096;
	fill = malloc(fillsz);
	assert_non_null(fill);
	for (i = 0; i < fillsz; i++)
		fill[i] = (uint8_t)(i * 7);
	for (i = 0; i < sizeof(pres) / sizeof(pres[0]); i++) {
		pre = pres[i];
		for (vlen = 0; vlen < 1100;
		    vlen += vlen < 470 ? 47 : pre > 9000 ? 5 : 1) {
			out = evbuffer_new();
			assert_non_null(out);
			if (pre != 0)
				assert_int_equal(evbuffer_add(out, fill, pre),
				    0);
			assert_int_equal(nat_frame_begin(&w, out, NAT_OP_GET,
			    NAT_F_REPLY, (uint32_t)vlen), 0);
			assert_int_equal(nat_put_i64(&w, -(int64_t)vlen), 0);
			assert_int_equal(nat_put_bytes(&w, fill, vlen), 0);
			assert_int_equal(nat_put_bytes(&w, fill + 1, 3), 0);
			flen = NAT_HDR_LEN + 9 + 5 + vlen + 5 + 3;
			before = evbuffer_get_length(out);
			if (flen <= NAT_WR_STAGE) {
				/* Staged: nothing on out yet. */
				assert_int_equal(before, pre);
				assert_null(w.body);
				staged++;
			} else if (pre <= 65536) {
				/* Straight onto out, patched at the end. */
				assert_int_equal(before, pre + flen);
				assert_null(w.body);
				direct++;
			} else {
				/* In its own buffer. */
				assert_int_equal(before, pre);
				assert_non_null(w.body);
				own++;
			}
			assert_int_equal(nat_frame_end(&w), 0);
			assert_int_equal(evbuffer_get_length(out), pre + flen);
			assert_int_equal(w.start, pre);

			p = evbuffer_pullup(out, -1);
			assert_memory_equal(p, fill, pre);
			assert_int_equal(nat_decode(p + pre, flen, &deflim,
			    &msg, &need), (int)flen);
			assert_int_equal(msg.op, NAT_OP_GET);
			assert_int_equal(msg.flags, NAT_F_REPLY);
			assert_int_equal(msg.id, vlen);
			nat_rd_init(&rd, msg.payload);
			assert_int_equal(nat_get_i64(&rd, &v), 0);
			assert_true(v == -(int64_t)vlen);
			assert_int_equal(nat_get_bytes(&rd, &s), 0);
			assert_int_equal(s.len, vlen);
			if (vlen != 0)
				assert_memory_equal(s.p, fill, vlen);
			assert_int_equal(nat_get_bytes(&rd, &s), 0);
			assert_memory_equal(s.p, fill + 1, 3);
			assert_int_equal(nat_rd_end(&rd), 0);
			evbuffer_free(out);
		}
	}
	assert_true(staged > 0 && direct > 0 && own > 0);
	free(fill);
}

/* A large value (1 MiB) and many fields, then a small frame behind it. */
static void
test_nat_writer_large(void **state)
{
	struct evbuffer	*out;
	struct nat_wr	 w;
	struct nat_msg	 msg;
	struct nat_rd	 rd;
	struct slice	 s;
	int64_t		 v;
	uint8_t		*big, *p;
	size_t		 need, n, i;
	int		 rc;

	n = 1 << 20;
	big = malloc(n);
	assert_non_null(big);
	for (i = 0; i < n; i++)
		big[i] = (uint8_t)(i >> 3);
	out = evbuffer_new();
	assert_non_null(out);
	assert_int_equal(nat_frame_begin(&w, out, NAT_OP_MULTI_SET, 0, 5), 0);
	assert_int_equal(nat_put_bytes(&w, "ns", 2), 0);
	assert_int_equal(nat_put_i64(&w, 1000), 0);
	for (i = 0; i < 1000; i++) {
		assert_int_equal(nat_put_bytes(&w, "key", 3), 0);
		assert_int_equal(nat_put_bytes(&w, big, i == 500 ? n : 1), 0);
	}
	assert_int_equal(nat_frame_end(&w), 0);
	assert_int_equal(nat_put_error(out, NAT_OP_GET, 6, RDZV_ENOTFOUND,
	    "x"), 0);
	p = evbuffer_pullup(out, -1);
	rc = nat_decode(p, evbuffer_get_length(out), &deflim, &msg, &need);
	assert_int_equal(rc, NAT_HDR_LEN + 7 + 9 + 1000 * 8 + 999 * 6 + 5 + n);
	nat_rd_init(&rd, msg.payload);
	assert_int_equal(nat_get_bytes(&rd, &s), 0);
	assert_int_equal(nat_get_i64(&rd, &v), 0);
	assert_int_equal(v, 1000);
	for (i = 0; i < 1000; i++) {
		assert_int_equal(nat_get_bytes(&rd, &s), 0);
		assert_true(slice_is(s, "key"));
		assert_int_equal(nat_get_bytes(&rd, &s), 0);
		assert_int_equal(s.len, i == 500 ? n : 1);
		assert_memory_equal(s.p, big, s.len);
	}
	assert_int_equal(nat_rd_end(&rd), 0);
	assert_int_equal(nat_decode(p + rc, evbuffer_get_length(out) - rc,
	    &deflim, &msg, &need), (int)evbuffer_get_length(out) - rc);
	assert_int_equal(msg.id, 6);
	evbuffer_free(out);
	free(big);
}

/*
 * A failed put drops the frame: nothing of it reaches out when it was in
 * the stage or its own buffer (which is freed: ASan would tell).
 */
static void
test_nat_writer_failure(void **state)
{
	struct evbuffer	*out;
	struct nat_wr	 w;
	uint8_t		*b;
	size_t		 bsz = 70000, len;

	b = calloc(1, bsz);
	assert_non_null(b);
	out = evbuffer_new();
	assert_non_null(out);
	assert_int_equal(evbuffer_add(out, "abc", 3), 0);

	/* In the stage. */
	assert_int_equal(nat_frame_begin(&w, out, NAT_OP_SET, 0, 1), 0);
	assert_int_equal(nat_put_bytes(&w, "k", 1), 0);
	assert_int_equal(nat_put_bytes(&w, b, (size_t)UINT32_MAX + 1), -1);
	assert_int_equal(nat_put_i64(&w, 1), -1);
	assert_int_equal(nat_frame_end(&w), -1);
	assert_int_equal(evbuffer_get_length(out), 3);

	/* Ending twice adds the frame once. */
	assert_int_equal(nat_frame_begin(&w, out, NAT_OP_PING, 0, 3), 0);
	assert_int_equal(nat_frame_end(&w), 0);
	assert_int_equal(nat_frame_end(&w), -1);
	assert_int_equal(evbuffer_get_length(out), 3 + 12);
	assert_int_equal(nat_frame_begin(&w, out, NAT_OP_PING, 0, 4), 0);
	assert_int_equal(nat_put_bytes(&w, b, 600), 0);
	assert_int_equal(nat_frame_end(&w), 0);
	assert_int_equal(nat_frame_end(&w), -1);
	len = 3 + 12 + 12 + 5 + 600;
	assert_int_equal(evbuffer_get_length(out), len);

	/* Straight onto out: the frame's start stays there (close it). */
	assert_int_equal(nat_frame_begin(&w, out, NAT_OP_SET, 0, 5), 0);
	assert_int_equal(nat_put_bytes(&w, b, 600), 0);
	assert_null(w.body);
	assert_true(evbuffer_get_length(out) > len);
	assert_int_equal(nat_put_bytes(&w, b, (size_t)UINT32_MAX + 1), -1);
	assert_int_equal(nat_frame_end(&w), -1);
	evbuffer_free(out);

	/* Behind more than 64 KiB: in its own buffer, freed on failure. */
	out = evbuffer_new();
	assert_non_null(out);
	assert_int_equal(evbuffer_add(out, b, bsz), 0);
	assert_int_equal(nat_frame_begin(&w, out, NAT_OP_SET, 0, 2), 0);
	assert_int_equal(nat_put_bytes(&w, b, 600), 0);
	assert_non_null(w.body);
	assert_int_equal(nat_put_bytes(&w, b, (size_t)UINT32_MAX + 1), -1);
	assert_null(w.body);
	assert_int_equal(nat_put_bytes(&w, "v", 1), -1);
	assert_int_equal(nat_frame_end(&w), -1);
	assert_int_equal(evbuffer_get_length(out), bsz);
	/* Abandoning a writer in its own buffer would leak: end frees it. */
	assert_int_equal(nat_frame_begin(&w, out, NAT_OP_SET, 0, 2), 0);
	assert_int_equal(nat_put_bytes(&w, b, 600), 0);
	assert_non_null(w.body);
	assert_int_equal(nat_frame_end(&w), 0);
	assert_null(w.body);
	assert_int_equal(evbuffer_get_length(out), bsz + 12 + 5 + 600);
	evbuffer_free(out);
	free(b);
}

/* A native byte stream split in two at every byte, as a server reads it. */
static void
test_nat_split(void **state)
{
	struct evbuffer	*out;
	struct nat_wr	 w;
	struct nat_msg	 msg;
	uint8_t		*stream, buf[512], zero[64], ver;
	size_t		 slen, k, have, need, pos;
	int		 rc, nframes, got_pre, i;

	memset(zero, 0, sizeof(zero));
	out = evbuffer_new();
	assert_non_null(out);
	assert_int_equal(nat_preamble_put(out, NAT_VERSION), 0);
	for (i = 1; i <= 5; i++) {
		assert_int_equal(nat_frame_begin(&w, out, NAT_OP_SET, 0, i), 0);
		assert_int_equal(nat_put_bytes(&w, "", 0), 0);
		assert_int_equal(nat_put_bytes(&w, "key", 3), 0);
		assert_int_equal(nat_put_bytes(&w, zero, i * 10), 0);
		assert_int_equal(nat_frame_end(&w), 0);
	}
	slen = evbuffer_get_length(out);
	assert_true(slen <= sizeof(buf));
	stream = evbuffer_pullup(out, -1);

	for (k = 0; k <= slen; k++) {
		/* Chunk 1 = stream[0, k), chunk 2 = the rest. */
		have = 0;
		pos = 0;
		need = NAT_PREAMBLE_LEN;
		got_pre = 0;
		nframes = 0;
		for (i = 0; i < 2; i++) {
			size_t	add = i == 0 ? k : slen - k;

			memcpy(buf + have, stream + (i == 0 ? 0 : k), add);
			have += add;
			while (have - pos >= need) {
				if (!got_pre) {
					rc = nat_preamble_decode(buf + pos,
					    have - pos, &ver, &need);
					assert_true(rc >= 0);
					if (rc == 0)
						break;
					got_pre = 1;
				} else {
					rc = nat_decode(buf + pos, have - pos,
					    &deflim, &msg, &need);
					assert_true(rc >= 0);
					if (rc == 0)
						break;
					nframes++;
					assert_int_equal(msg.id, nframes);
					assert_int_equal(msg.payload.len,
					    5 + 8 + 5 + 10 * nframes);
				}
				pos += rc;
				need = 1;
			}
		}
		assert_true(got_pre);
		assert_int_equal(nframes, 5);
		assert_int_equal(pos, slen);
	}
	evbuffer_free(out);
}

static int
setup(void **state)
{
	wire_limits_default(&deflim);
	return (0);
}

/* Decodes the one frame out holds (it must be whole); drains it. */
static void
nat_one_frame(struct evbuffer *out, uint16_t op, uint16_t flags,
    uint32_t id, struct nat_msg *msg, uint8_t **copy)
{
	struct wire_limits	lim;
	size_t			len = evbuffer_get_length(out), need;

	wire_limits_default(&lim);
	assert_non_null(*copy = malloc(len));
	assert_int_equal(evbuffer_remove(out, *copy, len), (int)len);
	assert_int_equal(nat_decode(*copy, len, &lim, msg, &need), (int)len);
	assert_int_equal(msg->op, op);
	assert_int_equal(msg->flags, flags);
	assert_int_equal(msg->id, id);
}

/*
 * JOIN (with and without its optional node rank), its reply, FAILURE and
 * the ROUND push go through their encoder and decoder field for field;
 * each decoder refuses a payload cut short or with a byte left over.
 */
static void
test_nat_rendezvous_messages(void **state)
{
	struct evbuffer		*out;
	struct nat_join		 j, j2;
	struct nat_joined	 jd, jd2;
	struct nat_failure	 f, f2;
	struct nat_round	 r, r2;
	struct nat_msg		 msg;
	struct slice		 cut;
	uint8_t			*b;
	int			 rank;

	assert_non_null(out = evbuffer_new());
	for (rank = -1; rank <= 3; rank += 4) {
		memset(&j, 0, sizeof(j));
		j.job = slice_str("job/x");
		j.instance = slice_str("inst");
		j.host = slice_str("h");
		j.addr = slice_str("");
		j.pid = 4242;
		j.local_world_size = 8;
		j.min_nodes = 2;
		j.max_nodes = 4;
		j.max_restarts = 3;
		j.last_call_ms = -1;
		j.lease_ms = INT64_MAX;
		j.rank = rank;
		j.max_repairs = j.repair_timeout_ms = -1;
		assert_int_equal(nat_join_put(out, 77, &j), 0);
		nat_one_frame(out, NAT_OP_JOIN, 0, 77, &msg, &b);
		assert_int_equal(nat_join_decode(msg.payload, &j2), 0);
		assert_true(slice_is(j2.job, "job/x") &&
		    slice_is(j2.instance, "inst") && slice_is(j2.host, "h") &&
		    slice_is(j2.addr, ""));
		assert_int_equal(j2.pid, 4242);
		assert_int_equal(j2.local_world_size, 8);
		assert_int_equal(j2.min_nodes, 2);
		assert_int_equal(j2.max_nodes, 4);
		assert_int_equal(j2.max_restarts, 3);
		assert_int_equal(j2.last_call_ms, -1);
		assert_true(j2.lease_ms == INT64_MAX);
		assert_int_equal(j2.rank, rank);
		cut = msg.payload;
		cut.len--;
		assert_int_equal(nat_join_decode(cut, &j2), RDZV_EPROTO);
		assert_int_equal(j2.replicas, 0);
		free(b);
	}
	/* Replica groups: written after the repair fields (-1 here), and
	 * only when >= 1. */
	j.rank = -1;
	j.replicas = 4;
	assert_int_equal(nat_join_put(out, 78, &j), 0);
	nat_one_frame(out, NAT_OP_JOIN, 0, 78, &msg, &b);
	assert_int_equal(nat_join_decode(msg.payload, &j2), 0);
	assert_int_equal(j2.replicas, 4);
	assert_int_equal(j2.rank, -1);
	assert_int_equal(j2.max_repairs, -1);
	assert_int_equal(j2.repair_timeout_ms, -1);
	/* A replicas of 0 written anyway decodes no way: refused. */
	((uint8_t *)msg.payload.p)[msg.payload.len - 8] = 0;	/* its low byte */
	assert_int_equal(nat_join_decode(msg.payload, &j2), RDZV_EPROTO);
	free(b);
	j.replicas = 0;

	jd.node_id = 5;
	jd.restart_count = 2;
	jd.lease_ms = 1500;
	assert_int_equal(nat_joined_put(out, 9, &jd), 0);
	nat_one_frame(out, NAT_OP_JOIN, NAT_F_REPLY, 9, &msg, &b);
	assert_int_equal(nat_joined_decode(msg.payload, &jd2), 0);
	assert_memory_equal(&jd, &jd2, sizeof(jd));
	cut = msg.payload;
	cut.len -= 9;
	assert_int_equal(nat_joined_decode(cut, &jd2), RDZV_EPROTO);
	free(b);

	memset(&f, 0, sizeof(f));
	f.job = slice_str("j");
	f.node_id = 1;
	f.round = 2;
	f.local_rank = 3;
	f.rank = 11;
	f.exit_code = -1;
	f.signo = 9;
	f.message = slice_str("Killed\nby the OOM killer");
	assert_int_equal(nat_failure_put(out, 3, &f), 0);
	nat_one_frame(out, NAT_OP_FAILURE, 0, 3, &msg, &b);
	assert_int_equal(nat_failure_decode(msg.payload, &f2), 0);
	assert_true(slice_is(f2.job, "j") &&
	    slice_is(f2.message, "Killed\nby the OOM killer"));
	assert_int_equal(f2.node_id, 1);
	assert_int_equal(f2.round, 2);
	assert_int_equal(f2.local_rank, 3);
	assert_int_equal(f2.rank, 11);
	assert_int_equal(f2.exit_code, -1);
	assert_int_equal(f2.signo, 9);
	cut = msg.payload;
	cut.len--;
	assert_int_equal(nat_failure_decode(cut, &f2), RDZV_EPROTO);
	free(b);

	memset(&r, 0, sizeof(r));
	r.job = slice_str("j");
	r.round = 4;
	r.state = RDZV_ROUND_RUNNING;
	r.node_id = 2;
	r.group_rank = 1;
	r.group_world_size = 3;
	r.world_size = 24;
	r.rank_base = 8;
	r.restart_count = 1;
	r.max_restarts = 3;
	r.store_ns = slice_str("job/j/round/4");
	r.store_port = 29500;
	r.message = slice_str("");
	assert_int_equal(nat_round_put(out, &r), 0);
	nat_one_frame(out, NAT_OP_ROUND, NAT_F_PUSH, 0, &msg, &b);
	assert_int_equal(nat_round_decode(msg.payload, &r2), 0);
	assert_true(slice_is(r2.job, "j") &&
	    slice_is(r2.store_ns, "job/j/round/4") &&
	    slice_is(r2.message, ""));
	assert_int_equal(r2.round, 4);
	assert_int_equal(r2.state, RDZV_ROUND_RUNNING);
	assert_int_equal(r2.node_id, 2);
	assert_int_equal(r2.group_rank, 1);
	assert_int_equal(r2.group_world_size, 3);
	assert_int_equal(r2.world_size, 24);
	assert_int_equal(r2.rank_base, 8);
	assert_int_equal(r2.restart_count, 1);
	assert_int_equal(r2.max_restarts, 3);
	assert_int_equal(r2.store_port, 29500);
	cut = msg.payload;
	cut.len--;
	assert_int_equal(nat_round_decode(cut, &r2), RDZV_EPROTO);
	free(b);

	/* A repair round's trailing fields; a repair FAILURE; READY; a JOIN
	 * with max_repairs (its rank written as -1). */
	r.kind = NAT_KIND_SHRINK;
	r.donor = 3;
	r.live_local = 5;
	assert_int_equal(nat_round_put(out, &r), 0);
	nat_one_frame(out, NAT_OP_ROUND, NAT_F_PUSH, 0, &msg, &b);
	assert_int_equal(nat_round_decode(msg.payload, &r2), 0);
	assert_int_equal(r2.kind, NAT_KIND_SHRINK);
	assert_int_equal(r2.donor, 3);
	assert_int_equal(r2.live_local, 5);
	assert_int_equal(r2.store_port, 29500);
	cut = msg.payload;
	cut.len -= 9;		/* kind and donor without live_local */
	assert_int_equal(nat_round_decode(cut, &r2), RDZV_EPROTO);
	cut.len -= 18;		/* a push from before repair rounds */
	assert_int_equal(nat_round_decode(cut, &r2), 0);
	assert_int_equal(r2.kind, NAT_KIND_NORMAL);
	assert_int_equal(r2.donor, -1);
	free(b);
	r.kind = 7;		/* not a kind: refused */
	assert_int_equal(nat_round_put(out, &r), 0);
	nat_one_frame(out, NAT_OP_ROUND, NAT_F_PUSH, 0, &msg, &b);
	assert_int_equal(nat_round_decode(msg.payload, &r2), RDZV_EPROTO);
	free(b);

	f.repair = 1;
	assert_int_equal(nat_failure_put(out, 3, &f), 0);
	nat_one_frame(out, NAT_OP_FAILURE, 0, 3, &msg, &b);
	assert_int_equal(nat_failure_decode(msg.payload, &f2), 0);
	assert_int_equal(f2.repair, 1);
	cut = msg.payload;
	cut.len -= 9;
	assert_int_equal(nat_failure_decode(cut, &f2), 0);
	assert_int_equal(f2.repair, 0);
	free(b);

	{
		struct nat_ready	rd, rd2;

		rd.job = slice_str("job/r");
		rd.node_id = 4;
		rd.round = 9;
		rd.local_rank = 1;
		assert_int_equal(nat_ready_put(out, 12, &rd), 0);
		nat_one_frame(out, NAT_OP_READY, 0, 12, &msg, &b);
		assert_int_equal(nat_ready_decode(msg.payload, &rd2), 0);
		assert_true(slice_is(rd2.job, "job/r"));
		assert_int_equal(rd2.node_id, 4);
		assert_int_equal(rd2.round, 9);
		assert_int_equal(rd2.local_rank, 1);
		cut = msg.payload;
		cut.len--;
		assert_int_equal(nat_ready_decode(cut, &rd2), RDZV_EPROTO);
		free(b);
	}

	j.rank = -1;
	j.max_repairs = 0;
	j.repair_timeout_ms = 2500;
	assert_int_equal(nat_join_put(out, 78, &j), 0);
	nat_one_frame(out, NAT_OP_JOIN, 0, 78, &msg, &b);
	assert_int_equal(nat_join_decode(msg.payload, &j2), 0);
	assert_int_equal(j2.rank, -1);
	assert_int_equal(j2.max_repairs, 0);
	assert_int_equal(j2.repair_timeout_ms, 2500);
	cut = msg.payload;
	cut.len -= 9;		/* max_repairs without the timeout */
	assert_int_equal(nat_join_decode(cut, &j2), RDZV_EPROTO);
	free(b);

	/* A field of the wrong type. */
	assert_int_equal(nat_joined_put(out, 1, &jd), 0);
	nat_one_frame(out, NAT_OP_JOIN, NAT_F_REPLY, 1, &msg, &b);
	assert_int_equal(nat_round_decode(msg.payload, &r2), RDZV_EPROTO);
	assert_int_equal(nat_failure_decode(msg.payload, &f2), RDZV_EPROTO);
	free(b);
	evbuffer_free(out);
}

int
main(void)
{
	const struct CMUnitTest	tests[] = {
		cmocka_unit_test(test_slice),
		cmocka_unit_test(test_limits_default),
		cmocka_unit_test(test_v113_ops),
		cmocka_unit_test(test_v113_binary_value),
		cmocka_unit_test(test_v113_unknown),
		cmocka_unit_test(test_v2_ops),
		cmocka_unit_test(test_v2_unknown),
		cmocka_unit_test(test_dialect_tables),
		cmocka_unit_test(test_tcps_limits),
		cmocka_unit_test(test_tcps_default_limits),
		cmocka_unit_test(test_tcps_need),
		cmocka_unit_test(test_tcps_split),
		cmocka_unit_test(test_sniff),
		cmocka_unit_test(test_list_iter),
		cmocka_unit_test(test_tcps_put),
		cmocka_unit_test(test_nat_preamble),
		cmocka_unit_test(test_nat_decode),
		cmocka_unit_test(test_nat_header_checks),
		cmocka_unit_test(test_nat_reader),
		cmocka_unit_test(test_nat_roundtrip),
		cmocka_unit_test(test_nat_writer_bytes),
		cmocka_unit_test(test_nat_writer_sizes),
		cmocka_unit_test(test_nat_writer_large),
		cmocka_unit_test(test_nat_writer_failure),
		cmocka_unit_test(test_nat_split),
		cmocka_unit_test(test_nat_rendezvous_messages),
	};

	return (cmocka_run_group_tests(tests, setup, NULL));
}
