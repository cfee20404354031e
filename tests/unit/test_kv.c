/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_kv.c: unit tests of the kv core (kv/kv.c): every operation and
 * its edge cases, the four waiter kinds, cancellation (also from inside a
 * callback), queues, watches and the journal.  Leaks are caught by running
 * this under the --enable-asan build.
 *
 * Why about 1,400 lines: one test per operation and edge of the kv core,
 * over one fixture.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "rdzv_err.h"
#include "kv.h"

/* wire.c's slice_str() belongs to another file; tests keep their own. */
static struct slice
S(const char *s)
{
	struct slice	r;

	r.p = (const uint8_t *)s;
	r.len = strlen(s);
	return (r);
}

static struct slice
B(const void *p, size_t len)
{
	struct slice	r;

	r.p = p;
	r.len = len;
	return (r);
}

static const struct slice NONE = { NULL, 0 };

static int
eq(struct slice a, const char *s)
{
	return (a.len == strlen(s) && memcmp(a.p, s, a.len) == 0);
}

#define assert_slice(a, s)	assert_true(eq((a), (s)))

static int
setup(void **state)
{
	struct kv	*kv;

	if ((kv = kv_new()) == NULL)
		return (-1);
	*state = kv;
	return (0);
}

static int
teardown(void **state)
{
	kv_free(*state);
	return (0);
}

/* ---- simple operations ---- */

static void
test_set_get(void **state)
{
	struct kv	*kv = *state;
	struct slice	 v;
	char		 big[5000];

	assert_int_equal(kv_get(kv, NONE, S("a"), &v), RDZV_ENOTFOUND);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("one")), 0);
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_slice(v, "one");
	/* Overwrite with a shorter, then a longer value than fits inline. */
	assert_int_equal(kv_set(kv, NONE, S("a"), S("1")), 0);
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_slice(v, "1");
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(kv_set(kv, NONE, S("a"), S(big)), 0);
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_slice(v, big);
	/* Shrinking a big value keeps the content right. */
	assert_int_equal(kv_set(kv, NONE, S("a"), S("tiny")), 0);
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_slice(v, "tiny");
	/* Setting a key to its own value (aliasing the store). */
	assert_int_equal(kv_set(kv, NONE, S("a"), v), 0);
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_slice(v, "tiny");
	assert_int_equal(kv_num_keys(kv, NONE), 1);
	assert_int_equal(kv_total_keys(kv), 1);
}

static void
test_empty_value(void **state)
{
	struct kv	*kv = *state;
	struct slice	 v;
	struct slice	 k = S("e");

	assert_int_equal(kv_set(kv, NONE, k, NONE), 0);
	v = S("junk");
	assert_int_equal(kv_get(kv, NONE, k, &v), 0);
	assert_int_equal(v.len, 0);
	assert_non_null(v.p);
	assert_int_equal(kv_check(kv, NONE, &k, 1), 1);
	assert_int_equal(kv_num_keys(kv, NONE), 1);
	/* An empty key is a key too. */
	assert_int_equal(kv_set(kv, NONE, S(""), S("x")), 0);
	assert_int_equal(kv_get(kv, NONE, NONE, &v), 0);
	assert_slice(v, "x");
	assert_int_equal(kv_num_keys(kv, NONE), 2);
	assert_int_equal(kv_delete(kv, NONE, k), 1);
	assert_int_equal(kv_get(kv, NONE, k, &v), RDZV_ENOTFOUND);
	assert_int_equal(kv_check(kv, NONE, &k, 1), 0);
}

static void
test_binary_keys(void **state)
{
	struct kv	*kv = *state;
	struct slice	 v;
	const uint8_t	 k1[] = { 'a', 0, 'b' }, k2[] = { 'a', 0, 'c' };
	const uint8_t	 val[] = { 0, 1, 0, 255 };

	assert_int_equal(kv_set(kv, NONE, B(k1, 3), B(val, 4)), 0);
	assert_int_equal(kv_set(kv, NONE, B(k2, 3), S("c")), 0);
	assert_int_equal(kv_set(kv, NONE, B(k1, 1), S("short")), 0);
	assert_int_equal(kv_num_keys(kv, NONE), 3);
	assert_int_equal(kv_get(kv, NONE, B(k1, 3), &v), 0);
	assert_int_equal(v.len, 4);
	assert_memory_equal(v.p, val, 4);
	assert_int_equal(kv_get(kv, NONE, B(k2, 3), &v), 0);
	assert_slice(v, "c");
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_slice(v, "short");
	assert_int_equal(kv_get(kv, NONE, B(k1, 2), &v), RDZV_ENOTFOUND);
}

static void
test_namespaces(void **state)
{
	struct kv	*kv = *state;
	struct slice	 v;
	const uint8_t	 nsb[] = { 'j', 0, '1' };

	assert_int_equal(kv_set(kv, S("job1"), S("k"), S("1")), 0);
	assert_int_equal(kv_set(kv, S("job2"), S("k"), S("2")), 0);
	assert_int_equal(kv_set(kv, B(nsb, 3), S("k"), S("3")), 0);
	assert_int_equal(kv_set(kv, S("job1"), S("other"), S("x")), 0);
	assert_int_equal(kv_get(kv, NONE, S("k"), &v), RDZV_ENOTFOUND);
	assert_int_equal(kv_get(kv, S("job1"), S("k"), &v), 0);
	assert_slice(v, "1");
	assert_int_equal(kv_get(kv, S("job2"), S("k"), &v), 0);
	assert_slice(v, "2");
	assert_int_equal(kv_get(kv, B(nsb, 3), S("k"), &v), 0);
	assert_slice(v, "3");
	assert_int_equal(kv_num_keys(kv, S("job1")), 2);
	assert_int_equal(kv_num_keys(kv, S("job2")), 1);
	assert_int_equal(kv_num_keys(kv, S("nope")), 0);
	assert_int_equal(kv_total_keys(kv), 4);
	assert_int_equal(kv_delete(kv, S("job2"), S("k")), 1);
	assert_int_equal(kv_get(kv, S("job1"), S("k"), &v), 0);
	assert_int_equal(kv_total_keys(kv), 3);
}

/* Not counters for std::stoll either: no digit, or outside int64. */
static const char *const not_ints[] = { "", "-", "+", "abc", "--1", "+-1",
    "- 1", "x1", ".5", "\xa0" "1", "9223372036854775808",
    "-9223372036854775809", "99999999999999999999" };

/* What the reference server's std::stoll reads as a counter (confirmed
 * against torch 2.13's servers, libuv and not). */
static const struct {
	const char	*s;
	int64_t		 v;
} lax_ints[] = {
	{ "+5", 5 }, { " 5", 5 }, { "5 ", 5 }, { "\t\n\v\f\r -5x", -5 },
	{ "12abc", 12 }, { "1.9", 1 }, { "0x10", 0 }, { "007", 7 },
	{ "+0", 0 }, { "  +9223372036854775807", INT64_MAX },
	{ "-9223372036854775808!", INT64_MIN },
};

static void
test_add(void **state)
{
	struct kv	*kv = *state;
	struct slice	 v;
	int64_t		 n = 42;
	size_t		 i;

	assert_int_equal(kv_add(kv, NONE, S("c"), 5, &n), 0);
	assert_int_equal(n, 5);
	assert_int_equal(kv_get(kv, NONE, S("c"), &v), 0);
	assert_slice(v, "5");
	assert_int_equal(kv_add(kv, NONE, S("c"), -12, &n), 0);
	assert_int_equal(n, -7);
	assert_int_equal(kv_get(kv, NONE, S("c"), &v), 0);
	assert_slice(v, "-7");
	assert_int_equal(kv_add(kv, NONE, S("c"), 0, &n), 0);
	assert_int_equal(n, -7);

	/* Leading zeros and a negative zero are plain decimal. */
	assert_int_equal(kv_set(kv, NONE, S("d"), S("-0012")), 0);
	assert_int_equal(kv_add(kv, NONE, S("d"), 2, &n), 0);
	assert_int_equal(n, -10);
	assert_int_equal(kv_set(kv, NONE, S("d"), S("-0")), 0);
	assert_int_equal(kv_add(kv, NONE, S("d"), 1, &n), 0);
	assert_int_equal(n, 1);

	for (i = 0; i < sizeof(not_ints) / sizeof(not_ints[0]); i++) {
		assert_int_equal(kv_set(kv, NONE, S("bad"), S(not_ints[i])), 0);
		assert_int_equal(kv_add(kv, NONE, S("bad"), 1, &n),
		    RDZV_ENOTINT);
		/* A failed ADD leaves the value alone. */
		assert_int_equal(kv_get(kv, NONE, S("bad"), &v), 0);
		assert_slice(v, not_ints[i]);
	}
	/* A NUL before the digits ends the string stoll sees; after them it
	 * is trailing garbage like any other. */
	assert_int_equal(kv_set(kv, NONE, S("bad"), B("\0" "1", 2)), 0);
	assert_int_equal(kv_add(kv, NONE, S("bad"), 1, &n), RDZV_ENOTINT);
	assert_int_equal(kv_set(kv, NONE, S("bad"), B("1\0" "2", 3)), 0);
	assert_int_equal(kv_add(kv, NONE, S("bad"), 1, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(kv_get(kv, NONE, S("bad"), &v), 0);
	assert_slice(v, "2");

	/* Lax forms are read as stoll reads them; the sum is stored in
	 * canonical decimal. */
	for (i = 0; i < sizeof(lax_ints) / sizeof(lax_ints[0]); i++) {
		assert_int_equal(kv_set(kv, NONE, S("lax"), S(lax_ints[i].s)),
		    0);
		assert_int_equal(kv_add(kv, NONE, S("lax"), 0, &n), 0);
		assert_true(n == lax_ints[i].v);
	}
	assert_int_equal(kv_set(kv, NONE, S("lax"), S(" +41 ")), 0);
	assert_int_equal(kv_add(kv, NONE, S("lax"), 1, &n), 0);
	assert_int_equal(n, 42);
	assert_int_equal(kv_get(kv, NONE, S("lax"), &v), 0);
	assert_slice(v, "42");

	/* The int64 edges. */
	assert_int_equal(kv_set(kv, NONE, S("m"), S("9223372036854775807")), 0);
	assert_int_equal(kv_add(kv, NONE, S("m"), 1, &n), RDZV_EINVAL);
	assert_int_equal(kv_get(kv, NONE, S("m"), &v), 0);
	assert_slice(v, "9223372036854775807");
	assert_int_equal(kv_add(kv, NONE, S("m"), -1, &n), 0);
	assert_int_equal(n, INT64_MAX - 1);
	assert_int_equal(kv_set(kv, NONE, S("m"), S("-9223372036854775807")), 0);
	assert_int_equal(kv_add(kv, NONE, S("m"), -1, &n), 0);
	assert_true(n == INT64_MIN);
	assert_int_equal(kv_get(kv, NONE, S("m"), &v), 0);
	assert_slice(v, "-9223372036854775808");
	assert_int_equal(kv_add(kv, NONE, S("m"), -1, &n), RDZV_EINVAL);
	assert_int_equal(kv_add(kv, NONE, S("m"), INT64_MAX, &n), 0);
	assert_int_equal(n, -1);
	assert_int_equal(kv_add(kv, NONE, S("fresh"), INT64_MIN, &n), 0);
	assert_true(n == INT64_MIN);
}

static void
test_cas(void **state)
{
	struct kv	*kv = *state;
	struct slice	 out, v;

	/* Missing, expected non-empty: nothing stored, expected returned. */
	assert_int_equal(kv_cas(kv, NONE, S("k"), S("old"), S("new"), &out), 0);
	assert_slice(out, "old");
	assert_int_equal(kv_get(kv, NONE, S("k"), &v), RDZV_ENOTFOUND);
	assert_int_equal(kv_num_keys(kv, NONE), 0);
	/* Missing, expected empty: desired stored and returned. */
	assert_int_equal(kv_cas(kv, NONE, S("k"), NONE, S("Y2FuaW1hZGFt"), &out),
	    0);
	assert_slice(out, "Y2FuaW1hZGFt");
	assert_int_equal(kv_get(kv, NONE, S("k"), &v), 0);
	assert_slice(v, "Y2FuaW1hZGFt");
	/* Present, mismatch: unchanged, current returned. */
	assert_int_equal(kv_cas(kv, NONE, S("k"), S("zzz"), S("new"), &out), 0);
	assert_slice(out, "Y2FuaW1hZGFt");
	assert_int_equal(kv_cas(kv, NONE, S("k"), NONE, S("new"), &out), 0);
	assert_slice(out, "Y2FuaW1hZGFt");
	/* Present, match: replaced, new value returned. */
	assert_int_equal(kv_cas(kv, NONE, S("k"), S("Y2FuaW1hZGFt"), S("state2"),
	    &out), 0);
	assert_slice(out, "state2");
	assert_int_equal(kv_get(kv, NONE, S("k"), &v), 0);
	assert_slice(v, "state2");
	/* Present with an empty value: empty expected matches it. */
	assert_int_equal(kv_set(kv, NONE, S("e"), NONE), 0);
	assert_int_equal(kv_cas(kv, NONE, S("e"), NONE, S("filled"), &out), 0);
	assert_slice(out, "filled");
	/* Prefix of the value is not equal. */
	assert_int_equal(kv_cas(kv, NONE, S("e"), S("fill"), S("no"), &out), 0);
	assert_slice(out, "filled");
}

static void
test_append(void **state)
{
	struct kv	*kv = *state;
	struct slice	 v;
	char		 want[3001];
	int		 i;

	assert_int_equal(kv_append(kv, NONE, S("a"), S("ab")), 0);
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_slice(v, "ab");
	assert_int_equal(kv_append(kv, NONE, S("a"), NONE), 0);
	assert_int_equal(kv_append(kv, NONE, S("a"), S("cd")), 0);
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_slice(v, "abcd");
	/* Appending the value to itself. */
	assert_int_equal(kv_append(kv, NONE, S("a"), v), 0);
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_slice(v, "abcdabcd");
	/* Growth well past the inline space. */
	for (i = 0; i < 1000; i++) {
		assert_int_equal(kv_append(kv, NONE, S("g"), S("xyz")), 0);
		memcpy(want + 3 * i, "xyz", 3);
	}
	want[3000] = '\0';
	assert_int_equal(kv_get(kv, NONE, S("g"), &v), 0);
	assert_slice(v, want);
	assert_int_equal(kv_get(kv, NONE, S("a"), &v), 0);
	assert_int_equal(kv_append(kv, NONE, S("g"), v), 0);
	assert_int_equal(kv_get(kv, NONE, S("g"), &v), 0);
	assert_int_equal(v.len, 3008);
	assert_memory_equal(v.p + 3000, "abcdabcd", 8);
}

static void
test_delete(void **state)
{
	struct kv	*kv = *state;
	struct slice	 v;

	assert_int_equal(kv_delete(kv, NONE, S("x")), 0);
	assert_int_equal(kv_delete(kv, S("nons"), S("x")), 0);
	assert_int_equal(kv_set(kv, NONE, S("x"), S("1")), 0);
	assert_int_equal(kv_delete(kv, NONE, S("x")), 1);
	assert_int_equal(kv_delete(kv, NONE, S("x")), 0);
	assert_int_equal(kv_get(kv, NONE, S("x"), &v), RDZV_ENOTFOUND);
	assert_int_equal(kv_num_keys(kv, NONE), 0);
	assert_int_equal(kv_total_keys(kv), 0);
	/* Re-creating after deletion works. */
	assert_int_equal(kv_set(kv, NONE, S("x"), S("2")), 0);
	assert_int_equal(kv_get(kv, NONE, S("x"), &v), 0);
	assert_slice(v, "2");
}

struct listed {
	int	n;
	int	seen[4];
};

static void
list_cb(void *arg, struct slice key)
{
	struct listed	*l = arg;
	static const char *const names[] = { "a", "b", "c", "" };

	l->n++;
	for (int i = 0; i < 4; i++)
		if (eq(key, names[i]))
			l->seen[i]++;
}

static void
test_list(void **state)
{
	struct kv	*kv = *state;
	struct listed	 l;

	memset(&l, 0, sizeof(l));
	assert_int_equal(kv_list(kv, NONE, list_cb, &l), 0);
	assert_int_equal(l.n, 0);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("1")), 0);
	assert_int_equal(kv_set(kv, NONE, S("b"), S("1")), 0);
	assert_int_equal(kv_set(kv, NONE, S("c"), S("1")), 0);
	assert_int_equal(kv_set(kv, NONE, S(""), S("1")), 0);
	assert_int_equal(kv_set(kv, S("other"), S("z"), S("1")), 0);
	assert_int_equal(kv_qpush(kv, NONE, S("q"), S("1")), 0);
	assert_int_equal(kv_delete(kv, NONE, S("b")), 1);
	assert_int_equal(kv_list(kv, NONE, list_cb, &l), 3);
	assert_int_equal(l.n, 3);
	assert_int_equal(l.seen[0], 1);
	assert_int_equal(l.seen[1], 0);
	assert_int_equal(l.seen[2], 1);
	assert_int_equal(l.seen[3], 1);
	/* Queues are not keys. */
	assert_int_equal(kv_num_keys(kv, NONE), 3);
}

static void
test_check(void **state)
{
	struct kv	*kv = *state;
	struct slice	 keys[3] = { S("a"), S("b"), S("q") };
	uint8_t		*item;
	size_t		 len;

	assert_int_equal(kv_check(kv, NONE, keys, 0), 1);
	assert_int_equal(kv_check(kv, NONE, keys, 1), 0);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("1")), 0);
	assert_int_equal(kv_check(kv, NONE, keys, 1), 1);
	assert_int_equal(kv_check(kv, NONE, keys, 2), 0);
	assert_int_equal(kv_set(kv, NONE, S("b"), NONE), 0);
	assert_int_equal(kv_check(kv, NONE, keys, 2), 1);
	/* A non-empty queue makes its name exist; an emptied one does not. */
	assert_int_equal(kv_check(kv, NONE, keys, 3), 0);
	assert_int_equal(kv_qpush(kv, NONE, S("q"), S("i")), 0);
	assert_int_equal(kv_check(kv, NONE, keys, 3), 1);
	assert_int_equal(kv_check(kv, S("ns"), keys, 3), 0);
	assert_int_equal(kv_qpop(kv, NONE, S("q"), &item, &len), 0);
	free(item);
	assert_int_equal(kv_check(kv, NONE, keys, 3), 0);
}

struct ns_seen {
	char	names[8][16];
	int	n;
};

static void
ns_seen_cb(void *arg, struct slice ns)
{
	struct ns_seen	*s = arg;

	assert_true(s->n < 8 && ns.len < sizeof s->names[0]);
	memcpy(s->names[s->n], ns.p, ns.len);
	s->names[s->n++][ns.len] = '\0';
}

static int
ns_seen_has(const struct ns_seen *s, const char *name)
{
	int	i;

	for (i = 0; i < s->n; i++)
		if (strcmp(s->names[i], name) == 0)
			return (1);
	return (0);
}

static void
wake_never(struct kv_waiter *w, void *arg)
{
	fail();
}

static void
test_ns_list(void **state)
{
	struct kv		*kv = *state;
	struct ns_seen		 s;
	struct kv_waiter	*w;
	struct slice		 k = S("k");
	uint8_t			*item;
	size_t			 len;

	assert_int_equal(kv_set(kv, S("job/a/round/1"), S("k"), S("1")), 0);
	assert_int_equal(kv_qpush(kv, S("job/a/q"), S("q"), S("1")), 0);
	assert_int_equal(kv_set(kv, S("job/b"), S("k"), S("1")), 0);
	assert_int_equal(kv_set(kv, S("other"), S("k"), S("1")), 0);
	assert_int_equal(kv_set(kv, NONE, S("k"), S("1")), 0);
	/* Only waiters, or emptied: nothing to list. */
	assert_int_equal(kv_wait(kv, S("job/w"), &k, 1, wake_never, NULL, &w),
	    0);
	assert_int_equal(kv_set(kv, S("job/gone"), S("k"), S("1")), 0);
	assert_int_equal(kv_delete(kv, S("job/gone"), S("k")), 1);
	assert_int_equal(kv_qpush(kv, S("job/qgone"), S("q"), S("1")), 0);
	assert_int_equal(kv_qpop(kv, S("job/qgone"), S("q"), &item, &len), 0);
	free(item);

	memset(&s, 0, sizeof s);
	assert_int_equal(kv_ns_list(kv, S("job/"), ns_seen_cb, &s), 3);
	assert_int_equal(s.n, 3);
	assert_true(ns_seen_has(&s, "job/a/round/1"));
	assert_true(ns_seen_has(&s, "job/a/q"));
	assert_true(ns_seen_has(&s, "job/b"));
	memset(&s, 0, sizeof s);
	assert_int_equal(kv_ns_list(kv, S("job/a/"), ns_seen_cb, &s), 2);
	memset(&s, 0, sizeof s);
	assert_int_equal(kv_ns_list(kv, S("job/a/round/1/"), ns_seen_cb, &s),
	    0);
	memset(&s, 0, sizeof s);
	assert_int_equal(kv_ns_list(kv, NONE, ns_seen_cb, &s), 5);
	assert_true(ns_seen_has(&s, "") && ns_seen_has(&s, "other"));
	kv_waiter_cancel(kv, w);
}

static void
test_ns_drop(void **state)
{
	struct kv	*kv = *state;
	struct slice	 v;

	assert_int_equal(kv_set(kv, S("j"), S("a"), S("1")), 0);
	assert_int_equal(kv_set(kv, S("j"), S("b"), S("1")), 0);
	assert_int_equal(kv_qpush(kv, S("j"), S("q"), S("1")), 0);
	assert_int_equal(kv_set(kv, S("k"), S("a"), S("1")), 0);
	assert_int_equal(kv_ns_drop(kv, S("j")), 0);
	assert_int_equal(kv_num_keys(kv, S("j")), 0);
	assert_int_equal(kv_qlen(kv, S("j"), S("q")), 0);
	assert_int_equal(kv_get(kv, S("j"), S("a"), &v), RDZV_ENOTFOUND);
	assert_int_equal(kv_get(kv, S("k"), S("a"), &v), 0);
	assert_int_equal(kv_total_keys(kv), 1);
	assert_int_equal(kv_ns_drop(kv, S("missing")), 0);
	/* The namespace can be used again. */
	assert_int_equal(kv_set(kv, S("j"), S("a"), S("2")), 0);
	assert_int_equal(kv_get(kv, S("j"), S("a"), &v), 0);
	assert_slice(v, "2");
}

/* ---- waiters ---- */

struct fired {
	int			 n;
	int			 order;		/* global order of firing */
	struct kv		*kv;
	struct kv_waiter	*victim;	/* cancelled from the callback */
};

static int	fire_seq;

static void
wake_cb(struct kv_waiter *w, void *arg)
{
	struct fired	*f = arg;

	f->n++;
	f->order = ++fire_seq;
	if (f->victim != NULL) {
		kv_waiter_cancel(f->kv, f->victim);
		f->victim = NULL;
	}
}

static void
test_wait_already(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w = (struct kv_waiter *)&w;
	struct fired		 f = { 0 };
	struct slice		 keys[2] = { S("a"), S("b") };

	assert_int_equal(kv_set(kv, NONE, S("a"), S("1")), 0);
	assert_int_equal(kv_set(kv, NONE, S("b"), NONE), 0);
	assert_int_equal(kv_wait(kv, NONE, keys, 2, wake_cb, &f, &w), 1);
	assert_null(w);
	assert_int_equal(kv_total_waiters(kv), 0);
	assert_int_equal(kv_wait(kv, NONE, keys, 0, wake_cb, &f, &w), 1);
	assert_null(w);
	assert_int_equal(f.n, 0);
}

static void
test_wait_fires_once(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct fired		 f = { 0 };
	struct slice		 keys[3] = { S("a"), S("b"), S("c") };

	assert_int_equal(kv_set(kv, NONE, S("b"), S("1")), 0);
	assert_int_equal(kv_wait(kv, NONE, keys, 3, wake_cb, &f, &w), 0);
	assert_non_null(w);
	assert_int_equal(kv_total_waiters(kv), 1);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("1")), 0);
	assert_int_equal(f.n, 0);
	/* Other keys and other namespaces do not count. */
	assert_int_equal(kv_set(kv, NONE, S("d"), S("1")), 0);
	assert_int_equal(kv_set(kv, S("x"), S("c"), S("1")), 0);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("2")), 0);
	assert_int_equal(f.n, 0);
	/* ADD creates too. */
	assert_int_equal(kv_add(kv, NONE, S("c"), 1, NULL), 0);
	assert_int_equal(f.n, 1);
	assert_int_equal(kv_total_waiters(kv), 0);
	assert_int_equal(kv_set(kv, NONE, S("c"), S("2")), 0);
	assert_int_equal(kv_delete(kv, NONE, S("c")), 1);
	assert_int_equal(kv_set(kv, NONE, S("c"), S("2")), 0);
	assert_int_equal(f.n, 1);
}

static void
test_wait_each_creator(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct fired		 f = { 0 };
	struct slice		 k = S("k"), out;

	/* APPEND, CAS and queue pushes create a name as well. */
	assert_int_equal(kv_wait(kv, NONE, &k, 1, wake_cb, &f, &w), 0);
	assert_int_equal(kv_append(kv, NONE, k, S("x")), 0);
	assert_int_equal(f.n, 1);
	assert_int_equal(kv_delete(kv, NONE, k), 1);
	assert_int_equal(kv_wait(kv, NONE, &k, 1, wake_cb, &f, &w), 0);
	assert_int_equal(kv_cas(kv, NONE, k, S("nope"), S("x"), &out), 0);
	assert_int_equal(f.n, 1);
	assert_int_equal(kv_cas(kv, NONE, k, NONE, S("x"), &out), 0);
	assert_int_equal(f.n, 2);
	assert_int_equal(kv_delete(kv, NONE, k), 1);
	assert_int_equal(kv_wait(kv, NONE, &k, 1, wake_cb, &f, &w), 0);
	assert_int_equal(kv_qpush(kv, NONE, k, S("item")), 0);
	assert_int_equal(f.n, 3);
	assert_int_equal(kv_total_waiters(kv), 0);
}

static void
test_wait_duplicate_keys(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct fired		 f = { 0 };
	struct slice		 keys[3] = { S("a"), S("b"), S("a") };

	assert_int_equal(kv_wait(kv, NONE, keys, 3, wake_cb, &f, &w), 0);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("1")), 0);
	assert_int_equal(f.n, 0);
	assert_int_equal(kv_set(kv, NONE, S("b"), S("1")), 0);
	assert_int_equal(f.n, 1);
}

static void
test_wait_delete_rearms(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct fired		 f = { 0 };
	struct slice		 keys[2] = { S("a"), S("b") };
	uint8_t			*item;
	size_t			 len;

	assert_int_equal(kv_wait(kv, NONE, keys, 2, wake_cb, &f, &w), 0);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("1")), 0);
	assert_int_equal(kv_delete(kv, NONE, S("a")), 1);
	/* a is gone again: b alone must not release the waiter. */
	assert_int_equal(kv_set(kv, NONE, S("b"), S("1")), 0);
	assert_int_equal(f.n, 0);
	assert_int_equal(kv_total_waiters(kv), 1);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("1")), 0);
	assert_int_equal(f.n, 1);

	/* Same through a dropped namespace and an emptied queue. */
	assert_int_equal(kv_wait(kv, S("n"), keys, 2, wake_cb, &f, &w), 0);
	assert_int_equal(kv_set(kv, S("n"), S("a"), S("1")), 0);
	assert_int_equal(kv_ns_drop(kv, S("n")), 0);
	assert_int_equal(kv_qpush(kv, S("n"), S("b"), S("i")), 0);
	assert_int_equal(f.n, 1);
	assert_int_equal(kv_qpop(kv, S("n"), S("b"), &item, &len), 0);
	free(item);
	assert_int_equal(kv_set(kv, S("n"), S("a"), S("1")), 0);
	assert_int_equal(f.n, 1);
	assert_int_equal(kv_set(kv, S("n"), S("b"), S("1")), 0);
	assert_int_equal(f.n, 2);
	assert_int_equal(kv_total_waiters(kv), 0);
}

static void
test_wait_cancel(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w1, *w2;
	struct fired		 f1 = { 0 }, f2 = { 0 };
	struct slice		 k = S("k"), keys[2] = { S("k"), S("j") };

	assert_int_equal(kv_wait(kv, NONE, &k, 1, wake_cb, &f1, &w1), 0);
	assert_int_equal(kv_wait(kv, NONE, keys, 2, wake_cb, &f2, &w2), 0);
	assert_int_equal(kv_total_waiters(kv), 2);
	kv_waiter_cancel(kv, w1);
	assert_int_equal(kv_total_waiters(kv), 1);
	assert_int_equal(kv_set(kv, NONE, S("k"), S("1")), 0);
	assert_int_equal(f1.n, 0);
	/* Cancel a partly satisfied waiter. */
	kv_waiter_cancel(kv, w2);
	assert_int_equal(kv_set(kv, NONE, S("j"), S("1")), 0);
	assert_int_equal(f2.n, 0);
	assert_int_equal(kv_total_waiters(kv), 0);
	kv_waiter_cancel(kv, NULL);
}

static void
test_wait_cancel_in_callback(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w1, *w2, *w3;
	struct fired		 f1 = { 0 }, f2 = { 0 }, f3 = { 0 };
	struct slice		 k = S("k"), keys[2] = { S("k"), S("other") };

	/* w1 fires first and cancels w2, which the same set also released. */
	assert_int_equal(kv_wait(kv, NONE, &k, 1, wake_cb, &f1, &w1), 0);
	assert_int_equal(kv_wait(kv, NONE, &k, 1, wake_cb, &f2, &w2), 0);
	/* w3 is not released by it and is cancelled too. */
	assert_int_equal(kv_wait(kv, NONE, keys, 2, wake_cb, &f3, &w3), 0);
	f1.kv = kv;
	f1.victim = w2;
	assert_int_equal(kv_set(kv, NONE, k, S("1")), 0);
	assert_int_equal(f1.n, 1);
	assert_int_equal(f2.n, 0);
	assert_int_equal(kv_total_waiters(kv), 1);
	assert_int_equal(kv_delete(kv, NONE, k), 1);

	/* Now w2' cancels w3 while it is armed on another key. */
	assert_int_equal(kv_wait(kv, NONE, &k, 1, wake_cb, &f2, &w2), 0);
	f2.kv = kv;
	f2.victim = w3;
	assert_int_equal(kv_set(kv, NONE, k, S("1")), 0);
	assert_int_equal(f2.n, 1);
	assert_int_equal(kv_set(kv, NONE, S("other"), S("1")), 0);
	assert_int_equal(f3.n, 0);
	assert_int_equal(kv_total_waiters(kv), 0);
}

static void
test_wait_many(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct fired		*f;
	struct slice		 k = S("k");
	int			 i, n = 1000;

	f = calloc(n, sizeof(*f));
	assert_non_null(f);
	for (i = 0; i < n; i++)
		assert_int_equal(kv_wait(kv, NONE, &k, 1, wake_cb, &f[i], &w),
		    0);
	assert_int_equal(kv_total_waiters(kv), n);
	fire_seq = 0;
	assert_int_equal(kv_set(kv, NONE, k, S("go")), 0);
	for (i = 0; i < n; i++) {
		assert_int_equal(f[i].n, 1);
		/* Registration order. */
		assert_int_equal(f[i].order, i + 1);
	}
	assert_int_equal(kv_total_waiters(kv), 0);
	free(f);
}

static void
test_wait_big_list(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct fired		 f = { 0 };
	struct slice		*keys;
	char			(*names)[16];
	int			 i, n = 5000;

	keys = calloc(n, sizeof(*keys));
	names = calloc(n, sizeof(*names));
	assert_non_null(keys);
	assert_non_null(names);
	for (i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "rank%d", i);
		keys[i] = S(names[i]);
	}
	assert_int_equal(kv_wait(kv, NONE, keys, n, wake_cb, &f, &w), 0);
	for (i = n - 1; i >= 0; i--) {
		assert_int_equal(f.n, 0);
		assert_int_equal(kv_set(kv, NONE, keys[i], S("x")), 0);
	}
	assert_int_equal(f.n, 1);
	free(keys);
	free(names);
}

static void
test_barrier(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct fired		 f[8];
	struct slice		 v;
	int			 i, n = 8;

	memset(f, 0, sizeof(f));
	for (i = 0; i < n - 1; i++) {
		assert_int_equal(kv_barrier(kv, NONE, S("bar"), n, wake_cb,
		    &f[i], &w), 0);
		assert_non_null(w);
	}
	for (i = 0; i < n; i++)
		assert_int_equal(f[i].n, 0);
	assert_int_equal(kv_total_waiters(kv), n - 1);
	/* The last participant returns at once and releases all others. */
	assert_int_equal(kv_barrier(kv, NONE, S("bar"), n, wake_cb, &f[n - 1],
	    &w), 1);
	assert_null(w);
	for (i = 0; i < n - 1; i++)
		assert_int_equal(f[i].n, 1);
	assert_int_equal(f[n - 1].n, 0);
	assert_int_equal(kv_total_waiters(kv), 0);
	assert_int_equal(kv_get(kv, NONE, S("bar"), &v), 0);
	assert_slice(v, "8");

	/* A world of 1 never waits. */
	assert_int_equal(kv_barrier(kv, NONE, S("one"), 1, wake_cb, &f[0], &w),
	    1);
	/* Not a counter. */
	assert_int_equal(kv_set(kv, NONE, S("s"), S("text")), 0);
	assert_int_equal(kv_barrier(kv, NONE, S("s"), 2, wake_cb, &f[0], &w),
	    RDZV_ENOTINT);
	assert_null(w);
	assert_int_equal(kv_total_waiters(kv), 0);

	/* Mixed worlds on one counter; a SET of the counter counts too. */
	memset(f, 0, sizeof(f));
	assert_int_equal(kv_barrier(kv, NONE, S("m"), 5, wake_cb, &f[0], &w),
	    0);
	assert_int_equal(kv_barrier(kv, NONE, S("m"), 3, wake_cb, &f[1], &w),
	    0);
	assert_int_equal(kv_add(kv, NONE, S("m"), 1, NULL), 0);
	assert_int_equal(f[0].n + f[1].n, 1);
	assert_int_equal(f[1].n, 1);
	assert_int_equal(kv_set(kv, NONE, S("m"), S("junk")), 0);
	assert_int_equal(f[0].n, 0);
	assert_int_equal(kv_set(kv, NONE, S("m"), S("7")), 0);
	assert_int_equal(f[0].n, 1);
	assert_int_equal(kv_total_waiters(kv), 0);
}

/* ---- queues ---- */

static void
test_queue_fifo(void **state)
{
	struct kv	*kv = *state;
	uint8_t		*item;
	size_t		 len;
	char		 buf[16];
	int		 i;

	assert_int_equal(kv_qlen(kv, NONE, S("q")), 0);
	assert_int_equal(kv_qpop(kv, NONE, S("q"), &item, &len),
	    RDZV_ENOTFOUND);
	for (i = 0; i < 100; i++) {
		snprintf(buf, sizeof(buf), "item%d", i);
		assert_int_equal(kv_qpush(kv, NONE, S("q"), S(buf)), 0);
	}
	assert_int_equal(kv_qpush(kv, NONE, S("q"), NONE), 0);
	assert_int_equal(kv_qlen(kv, NONE, S("q")), 101);
	assert_int_equal(kv_qlen(kv, S("x"), S("q")), 0);
	/* A key of the same name is separate. */
	assert_int_equal(kv_set(kv, NONE, S("q"), S("key")), 0);
	for (i = 0; i < 100; i++) {
		snprintf(buf, sizeof(buf), "item%d", i);
		assert_int_equal(kv_qpop(kv, NONE, S("q"), &item, &len), 0);
		assert_int_equal(len, strlen(buf));
		assert_memory_equal(item, buf, len);
		free(item);
	}
	assert_int_equal(kv_qpop(kv, NONE, S("q"), &item, &len), 0);
	assert_int_equal(len, 0);
	assert_non_null(item);
	free(item);
	assert_int_equal(kv_qlen(kv, NONE, S("q")), 0);
	assert_int_equal(kv_qpop(kv, NONE, S("q"), &item, &len),
	    RDZV_ENOTFOUND);
	assert_int_equal(kv_num_keys(kv, NONE), 1);
}

struct popped {
	int			 n;
	int			 order;
	char			 got[32];
	struct kv		*kv;
	struct kv_waiter	*victim;
};

static void
pop_cb(struct kv_waiter *w, void *arg, uint8_t *item, size_t len)
{
	struct popped	*p = arg;

	p->n++;
	p->order = ++fire_seq;
	assert_true(len < sizeof(p->got));
	memcpy(p->got, item, len);
	p->got[len] = '\0';
	free(item);
	if (p->victim != NULL) {
		kv_waiter_cancel(p->kv, p->victim);
		p->victim = NULL;
	}
}

static void
test_queue_pop_wait(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w[4];
	struct popped		 p[4];
	uint8_t			*item = NULL;
	size_t			 len;
	int			 i;

	memset(p, 0, sizeof(p));
	/* An item there now is returned at once. */
	assert_int_equal(kv_qpush(kv, NONE, S("q"), S("now")), 0);
	assert_int_equal(kv_qpop_wait(kv, NONE, S("q"), &item, &len, pop_cb,
	    &p[0], &w[0]), 1);
	assert_null(w[0]);
	assert_int_equal(len, 3);
	assert_memory_equal(item, "now", 3);
	free(item);

	for (i = 0; i < 4; i++) {
		assert_int_equal(kv_qpop_wait(kv, NONE, S("q"), &item, &len,
		    pop_cb, &p[i], &w[i]), 0);
		assert_non_null(w[i]);
	}
	assert_int_equal(kv_total_waiters(kv), 4);
	/* Waiter 1 gives up; the others are served in order. */
	kv_waiter_cancel(kv, w[1]);
	fire_seq = 0;
	assert_int_equal(kv_qpush(kv, NONE, S("q"), S("A")), 0);
	assert_int_equal(kv_qlen(kv, NONE, S("q")), 0);
	assert_int_equal(p[0].n, 1);
	assert_string_equal(p[0].got, "A");
	assert_int_equal(p[2].n, 0);
	/* Waiter 2, served next, cancels waiter 3 from its callback. */
	p[2].kv = kv;
	p[2].victim = w[3];
	assert_int_equal(kv_qpush(kv, NONE, S("q"), NONE), 0);
	assert_int_equal(p[2].n, 1);
	assert_string_equal(p[2].got, "");
	assert_int_equal(kv_total_waiters(kv), 0);
	/* With no waiter left, the item is stored. */
	assert_int_equal(kv_qpush(kv, NONE, S("q"), S("C")), 0);
	assert_int_equal(p[1].n + p[3].n, 0);
	assert_int_equal(kv_qlen(kv, NONE, S("q")), 1);
	assert_int_equal(kv_qpop(kv, NONE, S("q"), &item, &len), 0);
	assert_memory_equal(item, "C", 1);
	free(item);
}

/*
 * A blocking pop of torch 2.x is WAIT(queue) then QUEUE_POP: a push must
 * wake one waiter, the oldest it completes, not every consumer.
 */
static void
test_queue_wakes_one(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w[4];
	struct fired		 f[4];
	struct slice		 q = S("q"), x = S("x"), two[2];
	uint8_t			*item = NULL;
	size_t			 len;
	int			 i;

	memset(f, 0, sizeof(f));
	two[0] = q;
	two[1] = S("k");
	/* Waiter 0 also needs "k"; 1..3 only the queue. */
	assert_int_equal(kv_wait(kv, NONE, two, 2, wake_cb, &f[0], &w[0]), 0);
	for (i = 1; i < 4; i++)
		assert_int_equal(kv_wait(kv, NONE, &q, 1, wake_cb, &f[i],
		    &w[i]), 0);
	/* The push completes waiter 1 only; 0 is passed over (still lacks
	 * "k"), 2 and 3 sleep on. */
	assert_int_equal(kv_qpush(kv, NONE, q, S("A")), 0);
	assert_int_equal(f[0].n + f[1].n * 10 + f[2].n * 100 + f[3].n * 1000,
	    10);
	assert_int_equal(kv_total_waiters(kv), 3);
	/* Waiter 1 pops; the queue is empty again, nobody else wakes. */
	assert_int_equal(kv_qpop(kv, NONE, q, &item, &len), 0);
	free(item);
	assert_int_equal(kv_check(kv, NONE, &q, 1), 0);
	/* Two pushes, two more wakes, oldest first. */
	assert_int_equal(kv_qpush(kv, NONE, q, S("B")), 0);
	assert_int_equal(f[2].n + f[3].n, 1);
	assert_int_equal(f[2].n, 1);
	assert_int_equal(kv_qpush(kv, NONE, q, S("C")), 0);
	assert_int_equal(f[3].n, 1);
	assert_int_equal(kv_qlen(kv, NONE, q), 2);
	/* Waiter 0 fires once "k" exists (the queue is non-empty). */
	assert_int_equal(f[0].n, 0);
	assert_int_equal(kv_set(kv, NONE, S("k"), S("v")), 0);
	assert_int_equal(f[0].n, 1);
	assert_int_equal(kv_total_waiters(kv), 0);
	/* A SET (of a key, not a queue) still wakes every waiter on it. */
	assert_int_equal(kv_wait(kv, NONE, &x, 1, wake_cb, &f[1], &w[1]), 0);
	assert_int_equal(kv_wait(kv, NONE, &x, 1, wake_cb, &f[2], &w[2]), 0);
	assert_int_equal(kv_set(kv, NONE, x, S("1")), 0);
	assert_int_equal(f[1].n, 2);
	assert_int_equal(f[2].n, 2);
}

/* ---- watches ---- */

struct watched {
	int			 n;
	int			 kind[16];
	char			 key[16][16];
	char			 oldv[16][16];
	char			 newv[16][16];
	struct kv		*kv;
	struct kv_waiter	*victim;
	struct kv_waiter	*self;
};

static void
copy(char *dst, struct slice s)
{
	assert_true(s.len < 16);
	assert_non_null(s.p);
	memcpy(dst, s.p, s.len);
	dst[s.len] = '\0';
}

static void
watch_cb(struct kv_waiter *w, void *arg, int kind, struct slice key,
    struct slice oldv, struct slice newv)
{
	struct watched	*x = arg;

	assert_true(x->n < 16);
	x->kind[x->n] = kind;
	copy(x->key[x->n], key);
	copy(x->oldv[x->n], oldv);
	copy(x->newv[x->n], newv);
	x->n++;
	if (x->victim != NULL) {
		kv_waiter_cancel(x->kv, x->victim);
		x->victim = NULL;
	}
	if (x->self == w)
		kv_waiter_cancel(x->kv, w);
}

#define assert_event(x, i, k, kk, o, nv) do {				\
	assert_int_equal((x).kind[i], (k));				\
	assert_string_equal((x).key[i], (kk));				\
	assert_string_equal((x).oldv[i], (o));				\
	assert_string_equal((x).newv[i], (nv));				\
} while (0)

static void
test_watch(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct watched		 x;
	struct slice		 out;

	memset(&x, 0, sizeof(x));
	assert_int_equal(kv_watch(kv, NONE, S("k"), watch_cb, &x, &w), 0);
	assert_non_null(w);
	assert_int_equal(kv_set(kv, NONE, S("k"), S("v1")), 0);
	assert_int_equal(kv_set(kv, NONE, S("k"), S("v2")), 0);
	assert_int_equal(kv_set(kv, NONE, S("other"), S("v2")), 0);
	assert_int_equal(kv_add(kv, NONE, S("n"), 1, NULL), 0);
	assert_int_equal(kv_cas(kv, NONE, S("k"), S("bad"), S("v3"), &out), 0);
	assert_int_equal(kv_cas(kv, NONE, S("k"), S("v2"), S("v3"), &out), 0);
	assert_int_equal(kv_append(kv, NONE, S("k"), S("+")), 0);
	assert_int_equal(kv_delete(kv, NONE, S("k")), 1);
	assert_int_equal(kv_delete(kv, NONE, S("k")), 0);
	assert_int_equal(kv_add(kv, NONE, S("k"), 7, NULL), 0);
	assert_int_equal(kv_set(kv, S("ns2"), S("k"), S("elsewhere")), 0);
	assert_int_equal(kv_set(kv, NONE, S("k"), NONE), 0);
	assert_int_equal(kv_set(kv, NONE, S("k"), S("full")), 0);
	assert_int_equal(x.n, 8);
	assert_event(x, 0, TCPS_WATCH_CREATED, "k", "", "v1");
	assert_event(x, 1, TCPS_WATCH_UPDATED, "k", "v1", "v2");
	assert_event(x, 2, TCPS_WATCH_UPDATED, "k", "v2", "v3");
	assert_event(x, 3, TCPS_WATCH_UPDATED, "k", "v3", "v3+");
	assert_event(x, 4, TCPS_WATCH_DELETED, "k", "v3+", "");
	assert_event(x, 5, TCPS_WATCH_CREATED, "k", "", "7");
	assert_event(x, 6, TCPS_WATCH_UPDATED, "k", "7", "");
	assert_event(x, 7, TCPS_WATCH_UPDATED, "k", "", "full");
	/* Still registered until cancelled. */
	assert_int_equal(kv_total_waiters(kv), 1);
	kv_waiter_cancel(kv, w);
	assert_int_equal(kv_set(kv, NONE, S("k"), S("v9")), 0);
	assert_int_equal(x.n, 8);
	assert_int_equal(kv_total_waiters(kv), 0);
}

/* Empty old and new values still come with valid pointers. */
static void
test_watch_empty(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct watched		 x;

	memset(&x, 0, sizeof(x));
	assert_int_equal(kv_watch(kv, NONE, S("k"), watch_cb, &x, &w), 0);
	assert_int_equal(kv_set(kv, NONE, S("k"), NONE), 0);
	assert_int_equal(kv_set(kv, NONE, S("k"), S("v")), 0);
	assert_int_equal(kv_delete(kv, NONE, S("k")), 1);
	assert_int_equal(x.n, 3);
	assert_event(x, 0, TCPS_WATCH_CREATED, "k", "", "");
	assert_event(x, 1, TCPS_WATCH_UPDATED, "k", "", "v");
	assert_event(x, 2, TCPS_WATCH_DELETED, "k", "v", "");
	kv_waiter_cancel(kv, w);
}

static void
test_watch_cancel_in_callback(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w1, *w2, *w3;
	struct watched		 x1, x2, x3;

	memset(&x1, 0, sizeof(x1));
	memset(&x2, 0, sizeof(x2));
	memset(&x3, 0, sizeof(x3));
	assert_int_equal(kv_watch(kv, NONE, S("k"), watch_cb, &x1, &w1), 0);
	assert_int_equal(kv_watch(kv, NONE, S("k"), watch_cb, &x2, &w2), 0);
	assert_int_equal(kv_watch(kv, NONE, S("k"), watch_cb, &x3, &w3), 0);
	/* w1 cancels w2 before it hears the event, and w3 cancels itself. */
	x1.kv = kv;
	x1.victim = w2;
	x3.kv = kv;
	x3.self = w3;
	assert_int_equal(kv_set(kv, NONE, S("k"), S("a")), 0);
	assert_int_equal(x1.n, 1);
	assert_int_equal(x2.n, 0);
	assert_int_equal(x3.n, 1);
	assert_int_equal(kv_total_waiters(kv), 1);
	assert_int_equal(kv_set(kv, NONE, S("k"), S("b")), 0);
	assert_int_equal(x1.n, 2);
	assert_int_equal(x3.n, 1);
	assert_event(x1, 1, TCPS_WATCH_UPDATED, "k", "a", "b");
	/* A watch survives its namespace being dropped and hears it. */
	assert_int_equal(kv_ns_drop(kv, NONE), 0);
	assert_int_equal(x1.n, 3);
	assert_event(x1, 2, TCPS_WATCH_DELETED, "k", "b", "");
	assert_int_equal(kv_set(kv, NONE, S("k"), S("c")), 0);
	assert_int_equal(x1.n, 4);
	assert_event(x1, 3, TCPS_WATCH_CREATED, "k", "", "c");
	/* Left registered: kv_free must free it (ASan checks). */
}

static void
test_watch_and_wait_together(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*ww, *wt;
	struct watched		 x;
	struct fired		 f = { 0 };
	struct slice		 k = S("k");

	memset(&x, 0, sizeof(x));
	assert_int_equal(kv_watch(kv, NONE, k, watch_cb, &x, &wt), 0);
	assert_int_equal(kv_wait(kv, NONE, &k, 1, wake_cb, &f, &ww), 0);
	/* The waiter cancels the watch before the watch runs. */
	f.kv = kv;
	f.victim = wt;
	assert_int_equal(kv_set(kv, NONE, k, S("1")), 0);
	assert_int_equal(f.n, 1);
	assert_int_equal(x.n, 0);
	assert_int_equal(kv_total_waiters(kv), 0);
}

/* ---- journal ---- */

struct jrec {
	enum kv_jop	op;
	char		ns[16];
	char		key[16];
	char		val[32];
};

struct journal {
	int		n;
	struct jrec	rec[64];
};

static void
jcopy(char *dst, size_t sz, struct slice s)
{
	assert_true(s.len < sz);
	assert_non_null(s.p);
	memcpy(dst, s.p, s.len);
	dst[s.len] = '\0';
}

static void
journal_cb(void *arg, enum kv_jop op, struct slice ns, struct slice key,
    struct slice value)
{
	struct journal	*j = arg;
	struct jrec	*r;

	assert_true(j->n < 64);
	r = &j->rec[j->n++];
	r->op = op;
	jcopy(r->ns, sizeof(r->ns), ns);
	jcopy(r->key, sizeof(r->key), key);
	jcopy(r->val, sizeof(r->val), value);
}

#define assert_jrec(j, i, o, n, k, v) do {				\
	assert_int_equal((j).rec[i].op, (o));				\
	assert_string_equal((j).rec[i].ns, (n));			\
	assert_string_equal((j).rec[i].key, (k));			\
	assert_string_equal((j).rec[i].val, (v));			\
} while (0)

static void
test_journal(void **state)
{
	struct kv		*kv = *state;
	struct journal		 j;
	struct kv_waiter	*w;
	struct popped		 p;
	struct slice		 out;
	uint8_t			*item;
	size_t			 len;
	int64_t			 n;
	int			 i = 0;

	memset(&j, 0, sizeof(j));
	memset(&p, 0, sizeof(p));
	kv_set_journal(kv, journal_cb, &j);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("1")), 0);
	assert_int_equal(kv_add(kv, S("n"), S("c"), 41, &n), 0);
	assert_int_equal(kv_add(kv, S("n"), S("a"), 1, NULL), 0);
	assert_int_equal(kv_add(kv, NONE, S("a"), 1, NULL), 0);
	assert_int_equal(kv_set(kv, NONE, S("s"), S("str")), 0);
	assert_int_equal(kv_add(kv, NONE, S("s"), 1, NULL), RDZV_ENOTINT);
	assert_int_equal(kv_cas(kv, NONE, S("x"), S("e"), S("d"), &out), 0);
	assert_int_equal(kv_cas(kv, NONE, S("x"), NONE, S("d"), &out), 0);
	assert_int_equal(kv_cas(kv, NONE, S("x"), S("no"), S("z"), &out), 0);
	assert_int_equal(kv_append(kv, NONE, S("x"), S("e")), 0);
	assert_int_equal(kv_delete(kv, NONE, S("x")), 1);
	assert_int_equal(kv_delete(kv, NONE, S("x")), 0);
	assert_int_equal(kv_qpush(kv, NONE, S("q"), S("i1")), 0);
	assert_int_equal(kv_qpop(kv, NONE, S("q"), &item, &len), 0);
	free(item);
	assert_int_equal(kv_qpop(kv, NONE, S("q"), &item, &len),
	    RDZV_ENOTFOUND);
	assert_int_equal(kv_qpop_wait(kv, NONE, S("q"), &item, &len, pop_cb,
	    &p, &w), 0);
	assert_int_equal(kv_qpush(kv, NONE, S("q"), S("i2")), 0);
	assert_int_equal(p.n, 1);
	assert_int_equal(kv_ns_drop(kv, S("n")), 0);
	/* Reads and no-ops are not journalled. */
	assert_int_equal(kv_get(kv, NONE, S("a"), &out), 0);
	assert_int_equal(kv_qlen(kv, NONE, S("q")), 0);

	assert_int_equal(j.n, 13);
	assert_jrec(j, i, KV_J_PUT, "", "a", "1"); i++;
	assert_jrec(j, i, KV_J_PUT, "n", "c", "41"); i++;
	assert_jrec(j, i, KV_J_PUT, "n", "a", "1"); i++;
	assert_jrec(j, i, KV_J_PUT, "", "a", "2"); i++;
	assert_jrec(j, i, KV_J_PUT, "", "s", "str"); i++;
	assert_jrec(j, i, KV_J_PUT, "", "x", "d"); i++;
	assert_jrec(j, i, KV_J_PUT, "", "x", "de"); i++;
	assert_jrec(j, i, KV_J_DEL, "", "x", ""); i++;
	assert_jrec(j, i, KV_J_QPUSH, "", "q", "i1"); i++;
	assert_jrec(j, i, KV_J_QPOP, "", "q", ""); i++;
	/* Handed straight to the waiter, still journalled as push + pop. */
	assert_jrec(j, i, KV_J_QPUSH, "", "q", "i2"); i++;
	assert_jrec(j, i, KV_J_QPOP, "", "q", ""); i++;
	assert_jrec(j, i, KV_J_NSDROP, "n", "", ""); i++;

	/* Turned off, nothing more is recorded. */
	kv_set_journal(kv, NULL, NULL);
	assert_int_equal(kv_set(kv, NONE, S("a"), S("9")), 0);
	assert_int_equal(j.n, 13);
}

/* Registered waiters of every kind are freed with the store. */
static void
test_free_with_waiters(void **state)
{
	struct kv		*kv = *state;
	struct kv_waiter	*w;
	struct fired		 f = { 0 };
	struct popped		 p;
	struct watched		 x;
	struct slice		 keys[2] = { S("a"), S("b") };
	uint8_t			*item = NULL;
	size_t			 len = 0;

	memset(&p, 0, sizeof(p));
	memset(&x, 0, sizeof(x));
	assert_int_equal(kv_set(kv, S("n"), S("a"), S("1")), 0);
	assert_int_equal(kv_wait(kv, S("n"), keys, 2, wake_cb, &f, &w), 0);
	assert_int_equal(kv_barrier(kv, S("n"), S("bar"), 3, wake_cb, &f, &w),
	    0);
	assert_int_equal(kv_qpop_wait(kv, S("m"), S("q"), &item, &len, pop_cb,
	    &p, &w), 0);
	assert_int_equal(kv_watch(kv, S("w"), S("k"), watch_cb, &x, &w), 0);
	assert_int_equal(kv_qpush(kv, S("z"), S("q"), S("left")), 0);
	assert_int_equal(kv_total_waiters(kv), 4);
	/* Cancelling the only waiter of a namespace frees it (no leak). */
	kv_waiter_cancel(kv, w);
	assert_int_equal(kv_total_waiters(kv), 3);
	assert_int_equal(f.n + p.n + x.n, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_set_get, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_value, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_binary_keys, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_namespaces, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_add, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cas, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_check, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ns_drop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ns_list, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_already, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_wait_fires_once, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_wait_each_creator, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_wait_duplicate_keys, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_wait_delete_rearms, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_wait_cancel, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_wait_cancel_in_callback,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_many, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_big_list, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_barrier, setup, teardown),
		cmocka_unit_test_setup_teardown(test_queue_fifo, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_queue_pop_wait, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_queue_wakes_one, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_watch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watch_empty, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_watch_cancel_in_callback,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_watch_and_wait_together,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_journal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_with_waiters, setup,
		    teardown),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
