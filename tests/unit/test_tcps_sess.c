/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tcps_sess.c: unit tests of the one TCPStore mapping (kv/tcps_sess.c)
 * that rdzvd and librdzvworker's hosted store both drive: requests are
 * encoded as a client writes them, decoded with common/'s codec and
 * served on sessions over one kv core, with no socket.  What the servers
 * must agree on: the answers of each dialect, which requests close the
 * connection, waits woken from another session, an abandoned wait dropped
 * silently, CANCEL_WAIT, BARRIER, queues and WATCH_KEY pushes, and a
 * session's end cancelling all it registered (leaks: the --enable-asan
 * build).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <event2/buffer.h>

#include "rdzv_err.h"
#include "kv.h"
#include "tcps_sess.h"

/* 1.13 and 2.x wire bytes of the ops used here. */
#define O113_SET	0
#define O113_GET	2
#define O113_ADD	3
#define O113_WAIT	5
#define O113_WATCH	7
#define O2_SET		1
#define O2_GET		3
#define O2_WAIT		6
#define O2_NUMKEYS	7
#define O2_CANCEL	12
#define O2_QPUSH	14
#define O2_QPOP		15
#define O2_BARRIER	18

/* A connection as a server holds it: a session and its output. */
struct tconn {
	struct tcps_sess	 s;
	struct evbuffer		*out;
	int			 done;	/* replies finished */
};

static struct evbuffer *
t_reply_buf(void *arg)
{
	return (((struct tconn *)arg)->out);
}

static void
t_reply_done(void *arg)
{
	((struct tconn *)arg)->done++;
}

static const struct tcps_sess_io t_io = { t_reply_buf, t_reply_done };

struct fix {
	struct kv	*kv;
	struct tconn	 a, b;
};

static void
conn_start(struct fix *f, struct tconn *c, enum tcps_dialect d)
{
	tcps_sess_init(&c->s, f->kv, slice_str(""), d, &t_io, c);
}

static int
setup(void **state)
{
	struct fix	*f;

	if ((f = calloc(1, sizeof *f)) == NULL || (f->kv = kv_new()) == NULL ||
	    (f->a.out = evbuffer_new()) == NULL ||
	    (f->b.out = evbuffer_new()) == NULL)
		return (-1);
	*state = f;
	return (0);
}

static int
teardown(void **state)
{
	struct fix	*f = *state;

	tcps_sess_end(&f->a.s);
	tcps_sess_end(&f->b.s);
	evbuffer_free(f->a.out);
	evbuffer_free(f->b.out);
	kv_free(f->kv);
	free(f);
	return (0);
}

/* A request's bytes, as a client writes them (host order). */
struct enc {
	uint8_t	b[512];
	size_t	n;
};

static void
e_raw(struct enc *e, const void *p, size_t n)
{
	assert_true(sizeof e->b - e->n >= n);
	memcpy(e->b + e->n, p, n);
	e->n += n;
}

static void
e_u64(struct enc *e, uint64_t v)
{
	e_raw(e, &v, sizeof v);
}

static void
e_str(struct enc *e, const char *s)
{
	e_u64(e, strlen(s));
	e_raw(e, s, strlen(s));
}

/* op, then each argument: "s" a string, "i" an int64, "l" a key list
 * (count then that many strings). */
static struct enc
req(uint8_t op, const char *fmt, ...)
{
	struct enc	 e;
	va_list		 ap;
	uint64_t	 n;

	e.n = 0;
	e_raw(&e, &op, 1);
	va_start(ap, fmt);
	for (; *fmt != '\0'; fmt++) {
		if (*fmt == 's')
			e_str(&e, va_arg(ap, const char *));
		else if (*fmt == 'i')
			e_u64(&e, (uint64_t)va_arg(ap, int64_t));
		else {
			n = va_arg(ap, unsigned);
			e_u64(&e, n);
			while (n-- > 0)
				e_str(&e, va_arg(ap, const char *));
		}
	}
	va_end(ap);
	return (e);
}

/* Decodes e whole on c's dialect and serves it; the mapping's return. */
static int
serve(struct tconn *c, struct enc e, const char **why)
{
	struct wire_limits	lim;
	struct tcps_req		r;
	size_t			need = 0;
	const char		*w;

	wire_limits_default(&lim);
	assert_int_equal(tcps_decode(c->s.dialect, e.b, e.n, &lim, &r, &need),
	    (int)e.n);
	return (tcps_sess_serve(&c->s, &r, why != NULL ? why : &w));
}

static size_t
out_len(struct tconn *c)
{
	return (evbuffer_get_length(c->out));
}

static uint8_t
out_u8(struct tconn *c)
{
	uint8_t	v;

	assert_int_equal(evbuffer_remove(c->out, &v, 1), 1);
	return (v);
}

static int64_t
out_i64(struct tconn *c)
{
	int64_t	v;

	assert_int_equal(evbuffer_remove(c->out, &v, 8), 8);
	return (v);
}

/* Reads a u64-length string and compares it with s. */
static void
out_str(struct tconn *c, const char *s)
{
	char	buf[256];
	int64_t	n = out_i64(c);

	assert_int_equal(n, (int64_t)strlen(s));
	assert_true(n < (int64_t)sizeof buf);
	assert_int_equal(evbuffer_remove(c->out, buf, (size_t)n), (int)n);
	assert_memory_equal(buf, s, (size_t)n);
}

static void
test_get_missing_by_dialect(void **state)
{
	struct fix	*f = *state;
	const char	*why = NULL;

	conn_start(f, &f->a, TCPS_V113);
	conn_start(f, &f->b, TCPS_V2);
	/* 1.13: torch's server drops the connection. */
	assert_int_equal(serve(&f->a, req(O113_GET, "s", "/k"), &why),
	    RDZV_ENOTFOUND);
	assert_non_null(why);
	assert_int_equal(out_len(&f->a), 0);
	/* 2.x: empty bytes. */
	assert_int_equal(serve(&f->b, req(O2_GET, "s", "/k"), NULL), 0);
	assert_int_equal(out_i64(&f->b), 0);
	assert_int_equal(f->b.done, 1);
	assert_int_equal(serve(&f->b, req(O2_SET, "ss", "/k", "v"), NULL), 0);
	assert_int_equal(f->b.done, 1);		/* SET answers nothing */
	assert_int_equal(serve(&f->a, req(O113_GET, "s", "/k"), NULL), 0);
	out_str(&f->a, "v");
}

static void
test_add_not_a_number_closes(void **state)
{
	struct fix	*f = *state;
	const char	*why = NULL;

	conn_start(f, &f->a, TCPS_V113);
	assert_int_equal(serve(&f->a, req(O113_ADD, "si", "/n", (int64_t)5),
	    NULL), 0);
	assert_int_equal(out_i64(&f->a), 5);
	assert_int_equal(serve(&f->a, req(O113_SET, "ss", "/x", "abc"), NULL),
	    0);
	assert_int_equal(serve(&f->a, req(O113_ADD, "si", "/x", (int64_t)1),
	    &why), RDZV_ENOTINT);
	assert_non_null(why);
	assert_int_equal(out_len(&f->a), 0);
}

static void
test_wait_woken_by_other_session(void **state)
{
	struct fix	*f = *state;

	conn_start(f, &f->a, TCPS_V113);
	conn_start(f, &f->b, TCPS_V113);
	assert_int_equal(serve(&f->a, req(O113_WAIT, "l", 2u, "/k1", "/k2"),
	    NULL), 0);
	assert_int_equal(out_len(&f->a), 0);
	assert_int_equal(serve(&f->b, req(O113_SET, "ss", "/k1", "x"), NULL), 0);
	assert_int_equal(out_len(&f->a), 0);
	assert_int_equal(serve(&f->b, req(O113_SET, "ss", "/k2", "y"), NULL), 0);
	assert_int_equal(f->a.done, 1);
	assert_int_equal(out_u8(&f->a), TCPS_STOP_WAITING);
	assert_null(f->a.s.wait);
	/* Present keys answer at once. */
	assert_int_equal(serve(&f->a, req(O113_WAIT, "l", 1u, "/k1"), NULL), 0);
	assert_int_equal(out_u8(&f->a), TCPS_STOP_WAITING);
}

static void
test_new_request_drops_wait(void **state)
{
	struct fix	*f = *state;

	/* A 1.13 client that timed out sends nothing, then a new request:
	 * its old wait must never answer into that exchange. */
	conn_start(f, &f->a, TCPS_V2);
	conn_start(f, &f->b, TCPS_V2);
	assert_int_equal(serve(&f->a, req(O2_WAIT, "l", 1u, "/k"), NULL), 0);
	assert_non_null(f->a.s.wait);
	assert_int_equal(serve(&f->a, req(O2_NUMKEYS, ""), NULL), 0);
	assert_null(f->a.s.wait);
	assert_int_equal(out_i64(&f->a), 0);
	assert_int_equal(serve(&f->b, req(O2_SET, "ss", "/k", "v"), NULL), 0);
	assert_int_equal(out_len(&f->a), 0);
	assert_int_equal(f->a.done, 1);
}

static void
test_cancel_wait(void **state)
{
	struct fix	*f = *state;

	conn_start(f, &f->a, TCPS_V2);
	conn_start(f, &f->b, TCPS_V2);
	/* Nothing pending: still answered. */
	assert_int_equal(serve(&f->a, req(O2_CANCEL, ""), NULL), 0);
	assert_int_equal(out_u8(&f->a), TCPS_WAIT_CANCELED);
	assert_int_equal(serve(&f->a, req(O2_WAIT, "l", 1u, "/k"), NULL), 0);
	assert_int_equal(serve(&f->a, req(O2_CANCEL, ""), NULL), 0);
	assert_int_equal(out_u8(&f->a), TCPS_WAIT_CANCELED);
	assert_int_equal(serve(&f->b, req(O2_SET, "ss", "/k", "v"), NULL), 0);
	assert_int_equal(out_len(&f->a), 0);
}

static void
test_barrier_releases_all(void **state)
{
	struct fix	*f = *state;

	conn_start(f, &f->a, TCPS_V2);
	conn_start(f, &f->b, TCPS_V2);
	assert_int_equal(serve(&f->a, req(O2_BARRIER, "si", "/bar",
	    (int64_t)2), NULL), 0);
	assert_int_equal(out_len(&f->a), 0);
	assert_int_equal(serve(&f->b, req(O2_BARRIER, "si", "/bar",
	    (int64_t)2), NULL), 0);
	assert_int_equal(out_u8(&f->a), TCPS_STOP_WAITING);
	assert_int_equal(out_u8(&f->b), TCPS_STOP_WAITING);
	assert_int_equal(serve(&f->a, req(O2_GET, "s", "/bar"), NULL), 0);
	out_str(&f->a, "2");
}

static void
test_queue_pop(void **state)
{
	struct fix	*f = *state;

	conn_start(f, &f->a, TCPS_V2);
	assert_int_equal(serve(&f->a, req(O2_QPOP, "s", "/q"), NULL), 0);
	assert_int_equal(out_i64(&f->a), 0);	/* empty: no item follows */
	assert_int_equal(out_len(&f->a), 0);
	assert_int_equal(serve(&f->a, req(O2_QPUSH, "ss", "/q", "a"), NULL), 0);
	assert_int_equal(serve(&f->a, req(O2_QPUSH, "ss", "/q", "b"), NULL), 0);
	assert_int_equal(serve(&f->a, req(O2_QPOP, "s", "/q"), NULL), 0);
	assert_int_equal(out_i64(&f->a), 2);	/* length before the pop */
	out_str(&f->a, "a");
}

static void
test_watch_pushes_until_end(void **state)
{
	struct fix	*f = *state;

	conn_start(f, &f->a, TCPS_V113);
	conn_start(f, &f->b, TCPS_V113);
	assert_int_equal(serve(&f->a, req(O113_WATCH, "s", "/w"), NULL), 0);
	assert_int_equal(out_u8(&f->a), TCPS_WATCH_REGISTERED);
	assert_int_equal(serve(&f->b, req(O113_SET, "ss", "/w", "1"), NULL), 0);
	assert_int_equal(out_u8(&f->a), TCPS_WATCH_CREATED);
	out_str(&f->a, "/w");
	out_str(&f->a, "");
	out_str(&f->a, "1");
	assert_int_equal(f->a.done, 2);
	/* The connection closes: nothing reaches it any more. */
	tcps_sess_end(&f->a.s);
	assert_int_equal(f->a.s.nwatch, 0);
	assert_int_equal(serve(&f->b, req(O113_SET, "ss", "/w", "2"), NULL), 0);
	assert_int_equal(f->a.done, 2);
	assert_int_equal(out_len(&f->a), 0);
	assert_int_equal(kv_total_waiters(f->kv), 0);
}

static void
test_end_cancels_wait(void **state)
{
	struct fix	*f = *state;

	conn_start(f, &f->a, TCPS_V113);
	conn_start(f, &f->b, TCPS_V113);
	assert_int_equal(serve(&f->a, req(O113_WAIT, "l", 1u, "/k"), NULL), 0);
	assert_int_equal(kv_total_waiters(f->kv), 1);
	tcps_sess_end(&f->a.s);
	assert_int_equal(kv_total_waiters(f->kv), 0);
	assert_int_equal(serve(&f->b, req(O113_SET, "ss", "/k", "v"), NULL), 0);
	assert_int_equal(f->a.done, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn)	cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_get_missing_by_dialect),
		T(test_add_not_a_number_closes),
		T(test_wait_woken_by_other_session),
		T(test_new_request_drops_wait),
		T(test_cancel_wait),
		T(test_barrier_releases_all),
		T(test_queue_pop),
		T(test_watch_pushes_until_end),
		T(test_end_cancels_wait),
#undef T
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
