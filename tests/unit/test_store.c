/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store.c: store.c against real sqlite files in a temporary
 * directory: round trips through close and reopen, strict and relaxed
 * commits reported through the event loop, a child killed without
 * closing, files that must be refused, and commits retried while another
 * connection holds the write lock.  sqlite3.h is used here only to build
 * and hold on to fixtures that store.c must cope with, and to inject
 * faults: the Nth sqlite call or allocation fails (sqlite's faultsim
 * habit), see "Fault injection" below.
 *
 * Why about 1,300 lines: one test per way a sqlite file can be or fail,
 * over one fixture and the fault injection below.
 */
#include "config.h"

#include <sys/wait.h>

#include <fcntl.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <sqlite3.h>

#include "kv.h"
#include "log.h"
#include "mono.h"
#include "rdzv_err.h"
#include "store.h"

static char	tmpdir[] = "/tmp/test_store.XXXXXX";

/* What done_cb has seen. */
struct done {
	uint64_t	seq;
	unsigned	calls;
};

static void
done_cb(void *arg, uint64_t seq)
{
	struct done	*d = arg;

	/* Commits are reported in order and never go backwards. */
	assert_true(seq >= d->seq);
	d->seq = seq;
	d->calls++;
}

static void
dbpath(char *buf, size_t sz, const char *name)
{
	snprintf(buf, sz, "%s/%s", tmpdir, name);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
}

/*
 * Runs base until d->seq >= target or timeout_ms passes.  Returns 1 when
 * the target was reached.
 */
static int
run_until(struct event_base *base, struct done *d, uint64_t target,
    unsigned timeout_ms)
{
	struct event	*tick;
	struct timeval	 tv = { 0, 10000 };
	int64_t		 deadline = mono_ms() + timeout_ms;

	tick = evtimer_new(base, tick_cb, NULL);
	assert_non_null(tick);
	while (d->seq < target && mono_ms() < deadline) {
		evtimer_add(tick, &tv);
		event_base_loop(base, EVLOOP_ONCE);
	}
	event_free(tick);
	return d->seq >= target;
}

/* Runs base for ms milliseconds whatever happens. */
static void
run_for(struct event_base *base, unsigned ms)
{
	struct done	d = { 0, 0 };

	run_until(base, &d, 1, ms);
}

static struct slice
S(const char *s)
{
	return slice_str(s);
}

static struct slice
B(const void *p, size_t len)
{
	struct slice	sl = { p, len };

	return sl;
}

static void
assert_value(struct kv *kv, struct slice ns, struct slice key,
    struct slice want)
{
	struct slice	got;

	assert_int_equal(kv_get(kv, ns, key, &got), 0);
	assert_int_equal(got.len, want.len);
	assert_true(slice_eq(got, want));
}

static void
assert_missing(struct kv *kv, struct slice ns, struct slice key)
{
	struct slice	got;

	assert_int_equal(kv_get(kv, ns, key, &got), RDZV_ENOTFOUND);
}

static void
assert_pop(struct kv *kv, struct slice ns, struct slice key, const char *want)
{
	uint8_t	*item;
	size_t	 len;

	assert_int_equal(kv_qpop(kv, ns, key, &item, &len), 0);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(item, want, len);
	free(item);
}

/* Opens path into a fresh kv with the journal wired as rdzvd does. */
static struct store *
open_store(const char *path, enum store_durability mode, unsigned window_ms,
    struct event_base *base, struct kv **kvp, struct done *d)
{
	struct store	*st;

	*kvp = kv_new();
	assert_non_null(*kvp);
	st = store_open(path, mode, window_ms, base, *kvp, done_cb, d);
	if (st != NULL)
		kv_set_journal(*kvp, store_journal, st);
	return st;
}

/* Latency buckets are per bucket: together they count every commit. */
static uint64_t
hist_sum(const struct store_stats *ss)
{
	uint64_t	n = 0;
	size_t		i;

	for (i = 0; i < 6; i++)
		n += ss->commit_hist[i];
	return n;
}

static const uint8_t	bin_ns[] = { 'n', 0, 's' };
static const uint8_t	bin_key[] = { 0, 1, 0, 0xff, 0 };
static const uint8_t	bin_val[] = { 0xff, 0, 0, 7 };

static void
test_roundtrip(void **state)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct store_stats	 ss;
	struct done		 d = { 0, 0 };
	char			 path[256];

	dbpath(path, sizeof path, "roundtrip.db");
	base = event_base_new();
	assert_non_null(base);

	st = open_store(path, STORE_RELAXED, 10, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(store_last_seq(st), 0);
	assert_int_equal(store_committed(st), 0);
	assert_int_equal(kv_set(kv, S("a"), S("k1"), S("v1")), 0);
	assert_int_equal(kv_set(kv, S("a"), S("k2"), S("v2")), 0);
	assert_int_equal(kv_set(kv, S("b"), S("k1"), S("b1")), 0);
	assert_int_equal(kv_set(kv, S("a"), S("k1"), S("v1-new")), 0);
	assert_int_equal(kv_delete(kv, S("a"), S("k2")), 1);
	assert_int_equal(kv_set(kv, S("a"), S("empty"), S("")), 0);
	assert_int_equal(kv_set(kv, B(bin_ns, sizeof bin_ns),
	    B(bin_key, sizeof bin_key), B(bin_val, sizeof bin_val)), 0);
	assert_int_equal(kv_qpush(kv, S("a"), S("q"), S("x")), 0);
	assert_int_equal(kv_qpush(kv, S("a"), S("q"), S("y")), 0);
	assert_int_equal(kv_qpush(kv, S("a"), S("q"), S("")), 0);
	assert_int_equal(kv_qpush(kv, S("a"), S("q"), S("z")), 0);
	assert_pop(kv, S("a"), S("q"), "x");
	assert_int_equal(kv_qpush(kv, S("b"), S("q"), S("b-item")), 0);
	assert_int_equal(kv_set(kv, S("c"), S("gone"), S("1")), 0);
	assert_int_equal(kv_qpush(kv, S("c"), S("q"), S("gone")), 0);
	assert_int_equal(kv_ns_drop(kv, S("c")), 0);
	assert_true(store_last_seq(st) >= 14);
	assert_true(run_until(base, &d, store_last_seq(st), 5000));
	assert_true(d.calls >= 1);
	assert_int_equal(store_committed(st), store_last_seq(st));
	store_get_stats(st, &ss);
	assert_int_equal(ss.rows, store_last_seq(st));
	assert_int_equal(ss.pending_bytes, 0);
	assert_int_equal(ss.errors, 0);
	assert_true(ss.commits >= 1);
	assert_int_equal(hist_sum(&ss), ss.commits);
	assert_true(ss.commit_usec_max <= ss.commit_usec_sum);
	store_close(st);
	kv_free(kv);

	/* Second life: everything is back, and the journal is left unset. */
	st = open_store(path, STORE_RELAXED, 10, base, &kv, &d);
	assert_non_null(st);
	kv_set_journal(kv, NULL, NULL);
	assert_int_equal(kv_set(kv, S("a"), S("unjournalled"), S("1")), 0);
	assert_int_equal(store_last_seq(st), 0);
	assert_int_equal(kv_delete(kv, S("a"), S("unjournalled")), 1);
	kv_set_journal(kv, store_journal, st);

	assert_value(kv, S("a"), S("k1"), S("v1-new"));
	assert_missing(kv, S("a"), S("k2"));
	assert_value(kv, S("b"), S("k1"), S("b1"));
	assert_value(kv, S("a"), S("empty"), S(""));
	assert_value(kv, B(bin_ns, sizeof bin_ns), B(bin_key, sizeof bin_key),
	    B(bin_val, sizeof bin_val));
	/* The same key bytes without the NULs are another key. */
	assert_missing(kv, S("n"), B(bin_key, sizeof bin_key));
	assert_int_equal(kv_num_keys(kv, S("a")), 2);
	assert_int_equal(kv_num_keys(kv, S("c")), 0);
	assert_int_equal(kv_qlen(kv, S("c"), S("q")), 0);
	assert_int_equal(kv_qlen(kv, S("a"), S("q")), 3);
	assert_int_equal(kv_qlen(kv, S("b"), S("q")), 1);
	/* Pushes after a reload go behind the loaded items. */
	assert_int_equal(kv_qpush(kv, S("a"), S("q"), S("w")), 0);
	assert_pop(kv, S("a"), S("q"), "y");
	store_close(st);
	kv_free(kv);

	/* Third life: the queue kept its order across both sessions. */
	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_qlen(kv, S("a"), S("q")), 3);
	assert_pop(kv, S("a"), S("q"), "");
	assert_pop(kv, S("a"), S("q"), "z");
	assert_pop(kv, S("a"), S("q"), "w");
	assert_pop(kv, S("b"), S("q"), "b-item");
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

/*
 * One batch in which keys are written many times: only the last PUT or
 * DEL of each key reaches sqlite, and what comes back is what the kv
 * held (a drop between two writes of a key, keys that differ only in
 * where ns ends).
 */
static void
test_coalesce(void **state)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };
	char			 path[256], v[16];
	int			 i;

	dbpath(path, sizeof path, "coalesce.db");
	base = event_base_new();
	assert_non_null(base);
	st = open_store(path, STORE_RELAXED, 1000, base, &kv, &d);
	assert_non_null(st);
	for (i = 0; i < 300; i++) {
		snprintf(v, sizeof v, "v%d", i);
		assert_int_equal(kv_set(kv, S(""), S("ctr"), S(v)), 0);
		assert_int_equal(kv_set(kv, S("n"), S(v), S("each")), 0);
	}
	assert_int_equal(kv_set(kv, S("a"), S("x"), S("1")), 0);
	assert_int_equal(kv_delete(kv, S("a"), S("x")), 1);
	assert_int_equal(kv_set(kv, S("a"), S("x"), S("again")), 0);
	assert_int_equal(kv_set(kv, S("a"), S("y"), S("1")), 0);
	assert_int_equal(kv_delete(kv, S("a"), S("y")), 1);
	assert_int_equal(kv_set(kv, S("d"), S("z"), S("before")), 0);
	assert_int_equal(kv_set(kv, S("d"), S("w"), S("before")), 0);
	assert_int_equal(kv_ns_drop(kv, S("d")), 0);
	assert_int_equal(kv_set(kv, S("d"), S("z"), S("after")), 0);
	assert_int_equal(kv_set(kv, S("ab"), S("c"), S("ab/c")), 0);
	assert_int_equal(kv_set(kv, S("a"), S("bc"), S("a/bc")), 0);
	assert_int_equal(kv_set(kv, S("ab"), S("c"), S("ab/c2")), 0);
	store_close(st);
	kv_free(kv);

	st = open_store(path, STORE_RELAXED, 10, base, &kv, &d);
	assert_non_null(st);
	assert_value(kv, S(""), S("ctr"), S("v299"));
	assert_int_equal(kv_num_keys(kv, S("n")), 300);
	assert_value(kv, S("n"), S("v123"), S("each"));
	assert_value(kv, S("a"), S("x"), S("again"));
	assert_missing(kv, S("a"), S("y"));
	assert_value(kv, S("d"), S("z"), S("after"));
	assert_missing(kv, S("d"), S("w"));
	assert_value(kv, S("ab"), S("c"), S("ab/c2"));
	assert_value(kv, S("a"), S("bc"), S("a/bc"));
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

static void
test_strict_done(void **state)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct store_stats	 ss;
	struct done		 d = { 0, 0 };
	char			 path[256], key[32];
	int			 i;

	dbpath(path, sizeof path, "strict.db");
	base = event_base_new();
	assert_non_null(base);
	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	for (i = 0; i < 100; i++) {
		snprintf(key, sizeof key, "key%d", i);
		assert_int_equal(kv_set(kv, S(""), S(key), S(key)), 0);
		if (i % 10 == 9)
			assert_true(run_until(base, &d, store_last_seq(st),
			    5000));
	}
	assert_int_equal(store_last_seq(st), 100);
	assert_int_equal(d.seq, 100);
	assert_true(d.calls >= 10);
	assert_true(store_committed(st) >= store_last_seq(st));
	store_get_stats(st, &ss);
	assert_int_equal(ss.rows, 100);
	assert_true(ss.commits >= 10);
	assert_int_equal(hist_sum(&ss), ss.commits);
	assert_int_equal(ss.pending_bytes, 0);
	store_close(st);
	kv_free(kv);

	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_num_keys(kv, S("")), 100);
	assert_value(kv, S(""), S("key42"), S("key42"));
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

static void
test_relaxed_close(void **state)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct store_stats	 ss;
	struct done		 d = { 0, 0 };
	char			 path[256], key[32];
	int			 i;

	dbpath(path, sizeof path, "relaxed.db");
	base = event_base_new();
	assert_non_null(base);
	/* A window far longer than the test: only close can commit. */
	st = open_store(path, STORE_RELAXED, 600000, base, &kv, &d);
	assert_non_null(st);
	for (i = 0; i < 1000; i++) {
		snprintf(key, sizeof key, "k%d", i);
		assert_int_equal(kv_set(kv, S("r"), S(key), S("v")), 0);
	}
	run_for(base, 100);
	assert_int_equal(store_committed(st), 0);
	assert_int_equal(d.calls, 0);
	store_get_stats(st, &ss);
	assert_int_equal(ss.commits, 0);
	assert_true(ss.pending_bytes >= 1000 * 3);
	store_close(st);
	/* Nothing may call back into a closed store. */
	run_for(base, 50);
	assert_int_equal(d.calls, 0);
	kv_free(kv);

	st = open_store(path, STORE_RELAXED, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_num_keys(kv, S("r")), 1000);
	assert_value(kv, S("r"), S("k999"), S("v"));
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

static void
test_relaxed_triggers(void **state)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };
	char			 path[256];
	uint8_t			*big;
	size_t			 bigsz = 1 << 20;
	int			 i;

	dbpath(path, sizeof path, "triggers.db");
	base = event_base_new();
	assert_non_null(base);

	/* The window alone commits. */
	st = open_store(path, STORE_RELAXED, 20, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_set(kv, S(""), S("w"), S("1")), 0);
	assert_true(run_until(base, &d, store_last_seq(st), 5000));
	store_close(st);
	kv_free(kv);

	/* With a long window, a kick commits. */
	d.seq = 0;
	st = open_store(path, STORE_RELAXED, 600000, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_set(kv, S(""), S("k"), S("1")), 0);
	store_kick(st);
	assert_true(run_until(base, &d, store_last_seq(st), 5000));
	store_close(st);
	kv_free(kv);

	/* With a long window, enough pending bytes commit: at least the
	 * first four items, the fifth may wait for close. */
	d.seq = 0;
	big = malloc(bigsz);
	assert_non_null(big);
	memset(big, 'b', bigsz);
	st = open_store(path, STORE_RELAXED, 600000, base, &kv, &d);
	assert_non_null(st);
	for (i = 0; i < 5; i++)
		assert_int_equal(kv_qpush(kv, S(""), S("big"),
		    B(big, bigsz)), 0);
	assert_true(run_until(base, &d, 4, 10000));
	store_close(st);
	kv_free(kv);

	st = open_store(path, STORE_RELAXED, 0, base, &kv, &d);
	assert_non_null(st);
	assert_value(kv, S(""), S("w"), S("1"));
	assert_value(kv, S(""), S("k"), S("1"));
	assert_int_equal(kv_qlen(kv, S(""), S("big")), 5);
	store_close(st);
	kv_free(kv);
	free(big);
	event_base_free(base);
}

/* The child journals n puts, waits for their commit, and dies. */
static void
crash_child(const char *path, enum store_durability mode, int n)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };
	char			 key[32];
	int			 i;

	if ((base = event_base_new()) == NULL || (kv = kv_new()) == NULL)
		_exit(2);
	st = store_open(path, mode, 20, base, kv, done_cb, &d);
	if (st == NULL)
		_exit(3);
	kv_set_journal(kv, store_journal, st);
	for (i = 0; i < n; i++) {
		snprintf(key, sizeof key, "crash%d", i);
		if (kv_set(kv, S("x"), S(key), S(key)) != 0)
			_exit(4);
	}
	if (!run_until(base, &d, store_last_seq(st), 10000))
		_exit(5);
	/* Then more that nobody waited for: they may or may not be there. */
	for (i = 0; i < 100; i++)
		kv_set(kv, S("y"), S("unacked"), S("1"));
	_exit(0);
}

static void
crash_and_check(const char *name, enum store_durability mode)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };
	char			 path[256], key[32];
	pid_t			 pid;
	int			 i, status, n = 500;

	dbpath(path, sizeof path, name);
	fflush(NULL);
	pid = fork();
	assert_true(pid != -1);
	if (pid == 0)
		crash_child(path, mode, n);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);

	base = event_base_new();
	assert_non_null(base);
	st = open_store(path, mode, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_num_keys(kv, S("x")), n);
	for (i = 0; i < n; i++) {
		snprintf(key, sizeof key, "crash%d", i);
		assert_value(kv, S("x"), S(key), S(key));
	}
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

static void
test_crash_strict(void **state)
{
	crash_and_check("crash-strict.db", STORE_STRICT);
}

static void
test_crash_relaxed(void **state)
{
	crash_and_check("crash-relaxed.db", STORE_RELAXED);
}

/* Reads path (at most 1 MiB) into a malloc'ed, NUL-terminated buffer. */
static char *
slurp(const char *path, size_t *lenp)
{
	FILE	*f;
	char	*buf;
	size_t	 n, max = 1 << 20;

	f = fopen(path, "r");
	assert_non_null(f);
	buf = calloc(1, max + 1);
	assert_non_null(buf);
	n = fread(buf, 1, max, f);
	assert_true(n < max);
	fclose(f);
	if (lenp != NULL)
		*lenp = n;
	return buf;
}

/*
 * store_open(path) must fail, leave the file as it was, and log a line
 * that names the file and contains `cause`.
 */
static void
assert_refused(const char *path, const char *cause)
{
	struct event_base	*base;
	struct kv		*kv;
	struct done		 d = { 0, 0 };
	struct store		*st;
	char			 logpath[256], *before, *after, *log;
	size_t			 len0, len1;
	int			 fd, saved;

	dbpath(logpath, sizeof logpath, "refused.log");
	unlink(logpath);
	before = slurp(path, &len0);
	base = event_base_new();
	assert_non_null(base);
	kv = kv_new();
	assert_non_null(kv);
	/* Catch the log on stderr itself: log_init() with a path would
	 * leave its file in use after switching back. */
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	assert_true(saved != -1);
	fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd != -1);
	assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	close(fd);
	st = store_open(path, STORE_STRICT, 0, base, kv, done_cb, &d);
	fflush(stderr);
	assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	assert_null(st);
	log = slurp(logpath, NULL);
	assert_non_null(strstr(log, path));
	assert_non_null(strstr(log, cause));
	after = slurp(path, &len1);
	assert_int_equal(len0, len1);
	assert_memory_equal(before, after, len0);
	assert_int_equal(kv_total_keys(kv), 0);
	free(before);
	free(after);
	free(log);
	kv_free(kv);
	event_base_free(base);
}

static void
test_not_sqlite(void **state)
{
	char	path[256];
	int	fd, i;

	dbpath(path, sizeof path, "garbage.db");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd != -1);
	for (i = 0; i < 200; i++)
		assert_int_equal(write(fd, "this is not a database\n", 23),
		    23);
	close(fd);
	assert_refused(path, "not a database");
}

/* Runs sql on the database at path with a connection of our own. */
static void
sql_on(const char *path, const char *sql)
{
	sqlite3	*db;
	char	*err = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("%s: %s", sql, err);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void
make_store(const char *path)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };

	base = event_base_new();
	assert_non_null(base);
	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_set(kv, S(""), S("k"), S("v")), 0);
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

static void
test_bad_schema(void **state)
{
	char	path[256];

	dbpath(path, sizeof path, "version2.db");
	make_store(path);
	sql_on(path, "UPDATE meta SET value = 2 WHERE name = 'schema_version'");
	assert_refused(path, "schema version");

	dbpath(path, sizeof path, "noversion.db");
	make_store(path);
	sql_on(path, "DELETE FROM meta");
	assert_refused(path, "schema version");

	dbpath(path, sizeof path, "foreign.db");
	sql_on(path, "CREATE TABLE kv(a, b); INSERT INTO kv VALUES (1, 2)");
	assert_refused(path, "not an rdzv database");
}

/* A commit that cannot take the write lock is retried, not dropped. */
static void
test_busy_retry(void **state)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct store_stats	 ss;
	struct done		 d = { 0, 0 };
	sqlite3			*db;
	char			 path[256];

	dbpath(path, sizeof path, "busy.db");
	base = event_base_new();
	assert_non_null(base);
	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL),
	    SQLITE_OK);
	assert_int_equal(kv_set(kv, S(""), S("held"), S("1")), 0);
	assert_int_equal(kv_qpush(kv, S(""), S("q"), S("1")), 0);
	/* Past the writer's busy timeout and its first retry. */
	assert_false(run_until(base, &d, store_last_seq(st), 3000));
	store_get_stats(st, &ss);
	assert_true(ss.errors >= 1);
	assert_int_equal(ss.commits, 0);
	assert_true(ss.pending_bytes > 0);
	assert_int_equal(store_committed(st), 0);
	assert_int_equal(kv_set(kv, S(""), S("later"), S("2")), 0);

	assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL),
	    SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	assert_true(run_until(base, &d, store_last_seq(st), 10000));
	store_get_stats(st, &ss);
	assert_int_equal(ss.rows, 3);
	assert_int_equal(ss.pending_bytes, 0);
	store_close(st);
	kv_free(kv);

	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	assert_value(kv, S(""), S("held"), S("1"));
	assert_value(kv, S(""), S("later"), S("2"));
	assert_pop(kv, S(""), S("q"), "1");
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

/* Close commits what is pending and never calls back afterwards. */
static void
test_close_pending(void **state)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };
	char			 path[256], key[32];
	unsigned		 calls;
	int			 i;

	dbpath(path, sizeof path, "closepending.db");
	base = event_base_new();
	assert_non_null(base);
	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_set(kv, S(""), S("first"), S("1")), 0);
	assert_true(run_until(base, &d, store_last_seq(st), 5000));
	calls = d.calls;
	for (i = 0; i < 2000; i++) {
		snprintf(key, sizeof key, "k%d", i);
		assert_int_equal(kv_set(kv, S(""), S(key), S(key)), 0);
	}
	store_close(st);
	run_for(base, 50);
	assert_int_equal(d.calls, calls);
	kv_free(kv);

	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_num_keys(kv, S("")), 2001);
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

static void
test_memory_db(void **state)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };

	base = event_base_new();
	assert_non_null(base);
	st = open_store(":memory:", STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_set(kv, S(""), S("k"), S("v")), 0);
	assert_int_equal(kv_qpush(kv, S(""), S("q"), S("v")), 0);
	assert_true(run_until(base, &d, store_last_seq(st), 5000));
	store_close(st);
	kv_free(kv);

	/* A new :memory: database starts empty. */
	st = open_store(":memory:", STORE_RELAXED, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_total_keys(kv), 0);
	store_close(st);
	kv_free(kv);

	/* Memory durability has no database at all. */
	kv = kv_new();
	assert_non_null(kv);
	assert_null(store_open(":memory:", STORE_MEMORY, 0, base, kv, done_cb,
	    &d));
	kv_free(kv);
	event_base_free(base);
}

/*
 * Fault injection.  This program links with -Wl,--wrap for each sqlite
 * call store.c makes that can fail at run time (open, prepare, step,
 * exec), and main() puts an allocator in front of sqlite's.  Both pass
 * through until fault_arm(): from then on the Nth wrapped call (or the
 * Nth sqlite allocation) fails, once or, when persist is set, from then
 * on, as an I/O error (SQLITE_IOERR) or out of memory (NULL).
 */
enum fault_kind { FAULT_CALL, FAULT_ALLOC };

static atomic_int	fault_on;	/* armed */
static int		fault_kind;
static long		fault_at;	/* the call or allocation that fails */
static int		fault_persist;
static atomic_long	fault_calls;	/* counted since fault_arm() */
static atomic_long	fault_hits;	/* faults injected since fault_arm() */
static sqlite3_mem_methods real_mem;

static void
fault_arm(enum fault_kind kind, long at, int persist)
{
	fault_kind = kind;
	fault_at = at;
	fault_persist = persist;
	atomic_store(&fault_calls, 0);
	atomic_store(&fault_hits, 0);
	atomic_store(&fault_on, 1);
}

static void
fault_disarm(void)
{
	atomic_store(&fault_on, 0);
}

/* Whether this call (of the kind) is the one that fails. */
static int
fault_now(enum fault_kind kind)
{
	long	n;

	if (!atomic_load(&fault_on) || fault_kind != (int)kind)
		return 0;
	n = atomic_fetch_add(&fault_calls, 1) + 1;
	if (n != fault_at && !(fault_persist && n > fault_at))
		return 0;
	atomic_fetch_add(&fault_hits, 1);
	return 1;
}

int	__real_sqlite3_open_v2(const char *, sqlite3 **, int, const char *);
int	__wrap_sqlite3_open_v2(const char *, sqlite3 **, int, const char *);
int	__real_sqlite3_prepare_v2(sqlite3 *, const char *, int,
	    sqlite3_stmt **, const char **);
int	__wrap_sqlite3_prepare_v2(sqlite3 *, const char *, int,
	    sqlite3_stmt **, const char **);
int	__real_sqlite3_prepare_v3(sqlite3 *, const char *, int, unsigned,
	    sqlite3_stmt **, const char **);
int	__wrap_sqlite3_prepare_v3(sqlite3 *, const char *, int, unsigned,
	    sqlite3_stmt **, const char **);
int	__real_sqlite3_step(sqlite3_stmt *);
int	__wrap_sqlite3_step(sqlite3_stmt *);
int	__real_sqlite3_exec(sqlite3 *, const char *,
	    int (*)(void *, int, char **, char **), void *, char **);
int	__wrap_sqlite3_exec(sqlite3 *, const char *,
	    int (*)(void *, int, char **, char **), void *, char **);

int
__wrap_sqlite3_open_v2(const char *path, sqlite3 **db, int flags,
    const char *vfs)
{
	if (fault_now(FAULT_CALL)) {
		*db = NULL;
		return SQLITE_CANTOPEN;
	}
	return __real_sqlite3_open_v2(path, db, flags, vfs);
}

int
__wrap_sqlite3_prepare_v2(sqlite3 *db, const char *sql, int n,
    sqlite3_stmt **s, const char **tail)
{
	if (fault_now(FAULT_CALL)) {
		*s = NULL;
		return SQLITE_IOERR;
	}
	return __real_sqlite3_prepare_v2(db, sql, n, s, tail);
}

int
__wrap_sqlite3_prepare_v3(sqlite3 *db, const char *sql, int n,
    unsigned flags, sqlite3_stmt **s, const char **tail)
{
	if (fault_now(FAULT_CALL)) {
		*s = NULL;
		return SQLITE_IOERR;
	}
	return __real_sqlite3_prepare_v3(db, sql, n, flags, s, tail);
}

int
__wrap_sqlite3_step(sqlite3_stmt *s)
{
	return fault_now(FAULT_CALL) ? SQLITE_IOERR : __real_sqlite3_step(s);
}

int
__wrap_sqlite3_exec(sqlite3 *db, const char *sql,
    int (*cb)(void *, int, char **, char **), void *arg, char **err)
{
	if (fault_now(FAULT_CALL)) {
		if (err != NULL)
			*err = sqlite3_mprintf("injected fault");
		return SQLITE_IOERR;
	}
	return __real_sqlite3_exec(db, sql, cb, arg, err);
}

static void *
fault_malloc(int n)
{
	return fault_now(FAULT_ALLOC) ? NULL : real_mem.xMalloc(n);
}

static void *
fault_realloc(void *p, int n)
{
	return fault_now(FAULT_ALLOC) ? NULL : real_mem.xRealloc(p, n);
}

/* Installs the allocator; must run before sqlite initialises. */
static int
fault_install(void)
{
	static sqlite3_mem_methods	mem;

	if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &real_mem) != SQLITE_OK)
		return -1;
	mem = real_mem;
	mem.xMalloc = fault_malloc;
	mem.xRealloc = fault_realloc;
	return sqlite3_config(SQLITE_CONFIG_MALLOC, &mem) == SQLITE_OK ? 0 :
	    -1;
}

#define FAULT_SETS	6

/* The sequence numbers of one case's writes, in the order made. */
struct fault_writes {
	uint64_t	set[FAULT_SETS];
	uint64_t	del;
	uint64_t	push;
};

/* A database holding the keys "keep" and "base" in the default space. */
static void
fault_baseline(const char *path)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };

	unlink(path);
	base = event_base_new();
	assert_non_null(base);
	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	assert_int_equal(kv_set(kv, S(""), S("keep"), S("1")), 0);
	assert_int_equal(kv_set(kv, S(""), S("base"), S("2")), 0);
	assert_true(run_until(base, &d, store_last_seq(st), 10000));
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

/* The case's writes through an open store: six puts, a delete of the
 * baseline's "base", a queue push. */
static void
fault_write(struct kv *kv, struct store *st, struct fault_writes *w)
{
	char	key[16], val[16];
	int	i;

	for (i = 0; i < FAULT_SETS; i++) {
		snprintf(key, sizeof key, "k%d", i);
		snprintf(val, sizeof val, "v%d", i);
		assert_int_equal(kv_set(kv, S("f"), S(key), S(val)), 0);
		w->set[i] = store_last_seq(st);
	}
	kv_delete(kv, S(""), S("base"));
	w->del = store_last_seq(st);
	assert_int_equal(kv_qpush(kv, S("f"), S("q"), S("item")), 0);
	w->push = store_last_seq(st);
}

/*
 * Reopens path with no fault armed: it must open, hold the baseline (when
 * it had one), and every write with a sequence number up to acked (the
 * last one done_cb reported) with its value; a write not acknowledged is
 * there with its value or not at all.  w NULL: the case wrote nothing.
 */
static void
fault_check(const char *path, int baseline, const struct fault_writes *w,
    uint64_t acked)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };
	struct slice		 got;
	char			 key[16], val[16];
	int			 i, rc;

	base = event_base_new();
	assert_non_null(base);
	st = open_store(path, STORE_STRICT, 0, base, &kv, &d);
	assert_non_null(st);
	if (baseline)
		assert_value(kv, S(""), S("keep"), S("1"));
	if (baseline && (w == NULL || w->del > acked)) {
		rc = kv_get(kv, S(""), S("base"), &got);
		if (w == NULL || rc == 0)
			assert_value(kv, S(""), S("base"), S("2"));
	} else
		assert_missing(kv, S(""), S("base"));
	assert_true(kv_num_keys(kv, S("f")) <= FAULT_SETS);
	for (i = 0; i < FAULT_SETS; i++) {
		snprintf(key, sizeof key, "k%d", i);
		snprintf(val, sizeof val, "v%d", i);
		if (w != NULL && w->set[i] <= acked) {
			assert_value(kv, S("f"), S(key), S(val));
			continue;
		}
		rc = kv_get(kv, S("f"), S(key), &got);
		if (w == NULL)
			assert_int_equal(rc, RDZV_ENOTFOUND);
		else if (rc == 0)
			assert_value(kv, S("f"), S(key), S(val));
	}
	if (w != NULL && w->push <= acked)
		assert_pop(kv, S("f"), S("q"), "item");
	else if (kv_qlen(kv, S("f"), S("q")) != 0)
		assert_pop(kv, S("f"), S("q"), "item");
	assert_int_equal(kv_qlen(kv, S("f"), S("q")), 0);
	store_close(st);
	kv_free(kv);
	event_base_free(base);
}

/*
 * One case in this process: the fault fires once, at call (allocation)
 * at.  A store that fails to open must fail cleanly; one that opens must
 * get every write committed in the end (a failed commit is retried) and
 * report it through done_cb.  Returns whether the fault fired.
 */
static int
fault_once(const char *path, int baseline, enum store_durability mode,
    enum fault_kind kind, long at)
{
	struct event_base	*base;
	struct kv		*kv;
	struct store		*st;
	struct done		 d = { 0, 0 };
	struct fault_writes	 w;
	long			 hits;

	if (baseline)
		fault_baseline(path);
	else
		unlink(path);
	base = event_base_new();
	assert_non_null(base);
	fault_arm(kind, at, 0);
	st = open_store(path, mode, 1, base, &kv, &d);
	if (st == NULL) {
		fault_disarm();
		assert_int_equal(atomic_load(&fault_hits), 1);
		kv_free(kv);
		event_base_free(base);
		fault_check(path, baseline, NULL, 0);
		return 1;
	}
	fault_write(kv, st, &w);
	if (!run_until(base, &d, w.push, 10000))
		fail_msg("fault at %s %ld: writes never committed",
		    kind == FAULT_CALL ? "call" : "allocation", at);
	fault_disarm();
	hits = atomic_load(&fault_hits);
	store_close(st);
	kv_free(kv);
	event_base_free(base);
	fault_check(path, baseline, &w, w.push);
	return hits != 0;
}

/*
 * One case in a child that dies: from call (allocation) at on, every one
 * fails.  The child writes, waits until all is acknowledged or the store
 * has failed a commit, sends the last acknowledged sequence number and
 * exits without closing: a crash after a lasting I/O error or memory
 * shortage.  Returns whether the fault fired.
 */
static int
fault_crash(const char *path, enum store_durability mode,
    enum fault_kind kind, long at)
{
	struct fault_writes	 w;
	struct {
		uint64_t		acked;
		long			hits;
		int			opened;
		struct fault_writes	w;
	}			 msg;
	int			 p[2], status;
	pid_t			 pid;

	fault_baseline(path);
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid != -1);
	if (pid == 0) {
		struct event_base	*base;
		struct kv		*kv;
		struct store		*st;
		struct store_stats	 ss;
		struct done		 d = { 0, 0 };
		int64_t			 until;

		memset(&msg, 0, sizeof msg);
		if ((base = event_base_new()) == NULL)
			_exit(2);
		fault_arm(kind, at, 1);
		st = open_store(path, mode, 1, base, &kv, &d);
		if (st != NULL) {
			msg.opened = 1;
			fault_write(kv, st, &msg.w);
			until = mono_ms() + 10000;
			do {
				run_until(base, &d, msg.w.push, 20);
				store_get_stats(st, &ss);
			} while (d.seq < msg.w.push && ss.errors == 0 &&
			    mono_ms() < until);
		}
		msg.acked = d.seq;
		msg.hits = atomic_load(&fault_hits);
		if (write(p[1], &msg, sizeof msg) != sizeof msg)
			_exit(3);
		_exit(0);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &msg, sizeof msg), (ssize_t)sizeof msg);
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	w = msg.w;
	fault_check(path, 1, msg.opened ? &w : NULL, msg.acked);
	return msg.hits != 0;
}

/* Runs cases at 1, 2, ... until one runs with no fault left to fire. */
static void
fault_sweep(const char *name, int (*one)(const char *, int,
    enum store_durability, enum fault_kind, long), int baseline,
    enum store_durability mode, enum fault_kind kind)
{
	char	path[256];
	long	at;

	dbpath(path, sizeof path, name);
	for (at = 1; at < 20000; at++)
		if (!one(path, baseline, mode, kind, at))
			break;
	assert_true(at > 1 && at < 20000);
	print_message("%s: %ld fault points\n", name, at - 1);
}

static int
fault_crash_case(const char *path, int baseline, enum store_durability mode,
    enum fault_kind kind, long at)
{
	return fault_crash(path, mode, kind, at);
}

/* Every sqlite call store.c makes fails once in turn: open fails cleanly
 * or every write is committed after a retry, on a new and on an existing
 * database, strict and relaxed. */
static void
test_fault_call_once(void **state)
{
	fault_sweep("fault-call-new.db", fault_once, 0, STORE_STRICT,
	    FAULT_CALL);
	fault_sweep("fault-call-strict.db", fault_once, 1, STORE_STRICT,
	    FAULT_CALL);
	fault_sweep("fault-call-relaxed.db", fault_once, 1, STORE_RELAXED,
	    FAULT_CALL);
}

/* The same for every allocation sqlite makes. */
static void
test_fault_alloc_once(void **state)
{
	fault_sweep("fault-alloc-new.db", fault_once, 0, STORE_RELAXED,
	    FAULT_ALLOC);
	fault_sweep("fault-alloc.db", fault_once, 1, STORE_STRICT,
	    FAULT_ALLOC);
}

/* From the Nth call (allocation) on, everything fails, and the process
 * dies: what was acknowledged is on disk, nothing else is half there. */
static void
test_fault_crash(void **state)
{
	fault_sweep("fault-crash-call.db", fault_crash_case, 1, STORE_STRICT,
	    FAULT_CALL);
	fault_sweep("fault-crash-relaxed.db", fault_crash_case, 1,
	    STORE_RELAXED, FAULT_CALL);
	fault_sweep("fault-crash-alloc.db", fault_crash_case, 1, STORE_STRICT,
	    FAULT_ALLOC);
}

static void
test_durability_names(void **state)
{
	int	d;

	for (d = STORE_MEMORY; d <= STORE_STRICT; d++)
		assert_int_equal(store_durability_parse(
		    store_durability_name(d)), d);
	assert_int_equal(store_durability_parse("relaxed"), STORE_RELAXED);
	assert_int_equal(store_durability_parse("Strict"), -1);
	assert_int_equal(store_durability_parse(""), -1);
}

static int
group_setup(void **state)
{
	if (evthread_use_pthreads() != 0 || mkdtemp(tmpdir) == NULL)
		return -1;
	log_init("test_store", 1, NULL);
	log_setlevel(LOG_LVL_WARN);
	return 0;
}

static int
group_teardown(void **state)
{
	char	cmd[512];

	if (getenv("TEST_STORE_KEEP") != NULL)
		return 0;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_durability_names),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_coalesce),
		cmocka_unit_test(test_strict_done),
		cmocka_unit_test(test_relaxed_close),
		cmocka_unit_test(test_relaxed_triggers),
		cmocka_unit_test(test_crash_strict),
		cmocka_unit_test(test_crash_relaxed),
		cmocka_unit_test(test_not_sqlite),
		cmocka_unit_test(test_bad_schema),
		cmocka_unit_test(test_busy_retry),
		cmocka_unit_test(test_close_pending),
		cmocka_unit_test(test_memory_db),
		cmocka_unit_test(test_fault_call_once),
		cmocka_unit_test(test_fault_alloc_once),
		cmocka_unit_test(test_fault_crash),
	};

	if (fault_install() != 0) {
		fprintf(stderr, "test_store: cannot install the fault "
		    "allocator\n");
		return 1;
	}

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
