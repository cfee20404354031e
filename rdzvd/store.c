/*
 * store.c: sqlite persistence of the kv core, the only file that includes
 * sqlite3.h (contract in store.h).
 *
 * Two threads touch a store.  The event-loop thread calls store_journal(),
 * which copies each mutation into a record, numbers it and appends it to
 * the pending list under st->mtx.  The writer thread takes the whole list
 * at once, applies it in one transaction without holding the mutex, then
 * publishes the last committed sequence and wakes the loop through a
 * libevent user event whose callback calls done_cb on the loop's thread.
 *
 * Writer thread states (all changes to the flags happen under st->mtx):
 *
 *   IDLE --journal (pending was empty)--> GATHER   (relaxed)
 *   IDLE --journal / kick / close-------> COMMIT   (strict, or any kick)
 *   GATHER --window_ms elapsed, pending_bytes > STORE_PENDING_MAX,
 *            kick or close--------------> COMMIT
 *   COMMIT --ok--> IDLE (or COMMIT again if more is pending)
 *   COMMIT --sqlite error--> records put back at the head of the list,
 *            sleep with backoff, COMMIT again; after STORE_CLOSE_TRIES
 *            failures while closing they are dropped with a warning.
 *   any --close and nothing pending--> exit
 *
 * The database handle belongs to the opening thread until the writer is
 * created and to the writer alone afterwards, so it is opened NOMUTEX.
 */
#include "config.h"

#include <sys/queue.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <sqlite3.h>

#include "log.h"
#include "mono.h"
#include "rdzv_err.h"
#include "store.h"

#define STORE_SCHEMA_VERSION	1
/* Pending bytes that make a relaxed store commit before its window ends. */
#define STORE_PENDING_MAX	(4U << 20)
#define STORE_WINDOW_DEFAULT	50	/* ms, when window_ms is 0 */
#define STORE_BUSY_OPEN_MS	5000	/* waiting on another process at open */
#define STORE_BUSY_MS		1000	/* per commit try; retries follow */
#define STORE_RETRY_MIN_MS	50
#define STORE_RETRY_MAX_MS	1000
#define STORE_CLOSE_TRIES	5
/* Fixed per-record overhead counted in pending_bytes. */
#define STORE_REC_OVERHEAD	32

/* One journalled mutation; the three byte strings follow the header. */
struct store_rec {
	STAILQ_ENTRY(store_rec)	 entry;
	uint64_t		 seq;
	enum kv_jop		 op;
	size_t			 nslen;
	size_t			 keylen;
	size_t			 vallen;
	uint8_t			 data[];
};
STAILQ_HEAD(store_recs, store_rec);

enum store_stmt {
	ST_BEGIN,
	ST_COMMIT,
	ST_ROLLBACK,
	ST_PUT,
	ST_DEL,
	ST_QPUSH,
	ST_QPOP,
	ST_NSDROP_KV,
	ST_NSDROP_QUEUE,
	ST_COUNT
};

static const char *store_sql[ST_COUNT] = {
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_PUT] = "INSERT OR REPLACE INTO kv(ns, key, value) VALUES (?1, ?2, ?3)",
	[ST_DEL] = "DELETE FROM kv WHERE ns = ?1 AND key = ?2",
	/* Per-queue sequence: the primary key index makes MAX() a lookup. */
	[ST_QPUSH] = "INSERT INTO queue(ns, key, seq, value) VALUES (?1, ?2, "
	    "COALESCE((SELECT MAX(seq) FROM queue WHERE ns = ?1 AND key = ?2), "
	    "0) + 1, ?3)",
	[ST_QPOP] = "DELETE FROM queue WHERE ns = ?1 AND key = ?2 AND seq = "
	    "(SELECT MIN(seq) FROM queue WHERE ns = ?1 AND key = ?2)",
	[ST_NSDROP_KV] = "DELETE FROM kv WHERE ns = ?1",
	[ST_NSDROP_QUEUE] = "DELETE FROM queue WHERE ns = ?1",
};

struct store {
	char			*path;
	enum store_durability	 mode;
	unsigned		 window_ms;
	sqlite3			*db;
	sqlite3_stmt		*stmt[ST_COUNT];

	struct event		*done_ev;
	void			(*done_cb)(void *, uint64_t);
	void			*done_arg;

	pthread_t		 thread;
	int			 thread_started;

	/* Everything below up to committed is guarded by mtx. */
	pthread_mutex_t		 mtx;
	pthread_cond_t		 cond;
	struct store_recs	 pending;
	int			 idle;		/* writer waits with nothing */
	int			 kick;
	int			 stop;
	struct timespec		 first_pending;	/* when pending became non-empty */
	struct store_stats	 stats;

	uint64_t		 last_seq;	/* loop thread only */
	_Atomic uint64_t	 committed;
	_Atomic uint64_t	 backlog;	/* pending_bytes, readable without mtx */
};

static const uint8_t	store_empty[1];

static void
store_sleep_ms(unsigned ms)
{
	struct timespec	ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

int
store_durability_parse(const char *s)
{
	if (strcmp(s, "memory") == 0)
		return STORE_MEMORY;
	if (strcmp(s, "relaxed") == 0)
		return STORE_RELAXED;
	if (strcmp(s, "strict") == 0)
		return STORE_STRICT;
	return -1;
}

const char *
store_durability_name(enum store_durability d)
{
	switch (d) {
	case STORE_MEMORY:
		return "memory";
	case STORE_RELAXED:
		return "relaxed";
	case STORE_STRICT:
		return "strict";
	}
	return "unknown";
}

/* Runs one statement that returns no rows worth keeping. */
static int
store_exec(struct store *st, const char *sql)
{
	char	*err = NULL;

	if (sqlite3_exec(st->db, sql, NULL, NULL, &err) != SQLITE_OK) {
		log_warnx("store: %s: %s: %s", st->path, sql,
		    err != NULL ? err : sqlite3_errmsg(st->db));
		sqlite3_free(err);
		return RDZV_EIO;
	}
	return 0;
}

/* Runs a one-row query and copies its first column as text into buf. */
static int
store_query_text(struct store *st, const char *sql, char *buf, size_t bufsz)
{
	sqlite3_stmt		*s;
	const unsigned char	*t;
	int			 rc;

	if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK) {
		log_warnx("store: %s: %s: %s", st->path, sql,
		    sqlite3_errmsg(st->db));
		return RDZV_EIO;
	}
	buf[0] = '\0';
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		if ((t = sqlite3_column_text(s, 0)) != NULL)
			strlcpy(buf, (const char *)t, bufsz);
		rc = 1;
	} else if (rc == SQLITE_DONE)
		rc = 0;
	else {
		log_warnx("store: %s: %s: %s", st->path, sql,
		    sqlite3_errmsg(st->db));
		rc = RDZV_EIO;
	}
	sqlite3_finalize(s);
	return rc;
}

/*
 * Creates the schema in an empty database or checks the version of an
 * existing one.  A database with tables but no meta row is not ours.
 */
static int
store_schema(struct store *st)
{
	char		buf[64];
	const char	*errstr;
	long long	version;
	int		rc;

	if (store_exec(st, "BEGIN IMMEDIATE") != 0)
		return RDZV_EIO;
	rc = store_query_text(st, "SELECT COUNT(*) FROM sqlite_master WHERE "
	    "type = 'table' AND name = 'meta'", buf, sizeof buf);
	if (rc < 0)
		goto fail;
	if (strcmp(buf, "0") == 0) {
		rc = store_query_text(st, "SELECT COUNT(*) FROM sqlite_master",
		    buf, sizeof buf);
		if (rc < 0)
			goto fail;
		if (strcmp(buf, "0") != 0) {
			log_warnx("store: %s: not an rdzv database (tables "
			    "but no meta table)", st->path);
			rc = RDZV_EVERSION;
			goto fail;
		}
		if (store_exec(st,
		    "CREATE TABLE meta(name TEXT PRIMARY KEY, value);"
		    "CREATE TABLE kv(ns BLOB, key BLOB, value BLOB, "
		    "PRIMARY KEY(ns, key)) WITHOUT ROWID;"
		    "CREATE TABLE queue(ns BLOB, key BLOB, seq INTEGER, "
		    "value BLOB, PRIMARY KEY(ns, key, seq)) WITHOUT ROWID;"
		    "INSERT INTO meta(name, value) VALUES "
		    "('schema_version', 1)") != 0) {
			rc = RDZV_EIO;
			goto fail;
		}
		log_info("store: %s: created schema version %d", st->path,
		    STORE_SCHEMA_VERSION);
	} else {
		rc = store_query_text(st, "SELECT value FROM meta WHERE "
		    "name = 'schema_version'", buf, sizeof buf);
		if (rc < 0)
			goto fail;
		if (rc == 0) {
			log_warnx("store: %s: no schema version in meta table",
			    st->path);
			rc = RDZV_EVERSION;
			goto fail;
		}
		version = strtonum(buf, 0, INT32_MAX, &errstr);
		if (errstr != NULL || version != STORE_SCHEMA_VERSION) {
			log_warnx("store: %s: unsupported schema version "
			    "\"%s\" (this rdzvd knows %d)", st->path, buf,
			    STORE_SCHEMA_VERSION);
			rc = RDZV_EVERSION;
			goto fail;
		}
	}
	if (store_exec(st, "COMMIT") != 0)
		return RDZV_EIO;
	return 0;

fail:
	sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

/* sqlite returns NULL for an empty blob; the kv wants a valid pointer. */
static struct slice
store_column(sqlite3_stmt *s, int i)
{
	struct slice	sl;

	sl.len = (size_t)sqlite3_column_bytes(s, i);
	sl.p = sqlite3_column_blob(s, i);
	if (sl.p == NULL) {
		sl.p = store_empty;
		sl.len = 0;
	}
	return sl;
}

/* Loads every key, then every queue item in order, into kv. */
static int
store_load(struct store *st, struct kv *kv)
{
	sqlite3_stmt	*s = NULL;
	uint64_t	 nkeys = 0, nitems = 0;
	int		 rc;

	kv_set_journal(kv, NULL, NULL);
	if (store_exec(st, "BEGIN") != 0)
		return RDZV_EIO;

	if (sqlite3_prepare_v2(st->db, "SELECT ns, key, value FROM kv", -1,
	    &s, NULL) != SQLITE_OK)
		goto dberr;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((rc = kv_set(kv, store_column(s, 0), store_column(s, 1),
		    store_column(s, 2))) < 0)
			goto kverr;
		nkeys++;
	}
	if (rc != SQLITE_DONE)
		goto dberr;
	sqlite3_finalize(s);

	if (sqlite3_prepare_v2(st->db, "SELECT ns, key, value FROM queue "
	    "ORDER BY ns, key, seq", -1, &s, NULL) != SQLITE_OK)
		goto dberr;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((rc = kv_qpush(kv, store_column(s, 0), store_column(s, 1),
		    store_column(s, 2))) < 0)
			goto kverr;
		nitems++;
	}
	if (rc != SQLITE_DONE)
		goto dberr;
	sqlite3_finalize(s);

	/* A read transaction: if it cannot end with COMMIT, ROLLBACK loses
	 * nothing, and one left open would make every later BEGIN fail. */
	if (sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	log_info("store: %s: loaded %llu keys and %llu queue items", st->path,
	    (unsigned long long)nkeys, (unsigned long long)nitems);
	return 0;

dberr:
	log_warnx("store: %s: loading: %s", st->path, sqlite3_errmsg(st->db));
	rc = RDZV_EIO;
	goto fail;
kverr:
	log_warnx("store: %s: loading into kv: %s", st->path,
	    rdzv_strerror(rc));
fail:
	sqlite3_finalize(s);
	sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

static int
store_bind(sqlite3_stmt *s, int i, const uint8_t *p, size_t len)
{
	/* A NULL pointer would bind SQL NULL, not an empty blob. */
	if (len == 0)
		p = store_empty;
	return sqlite3_bind_blob64(s, i, p, len, SQLITE_STATIC);
}

/* Runs a prepared statement to completion and resets it. */
static int
store_step(struct store *st, enum store_stmt which)
{
	sqlite3_stmt	*s = st->stmt[which];
	int		 rc;

	rc = sqlite3_step(s);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
		log_warnx("store: %s: %s: %s", st->path, store_sql[which],
		    sqlite3_errmsg(st->db));
		return RDZV_EIO;
	}
	return 0;
}

static int
store_apply_one(struct store *st, const struct store_rec *r)
{
	const uint8_t	*ns = r->data, *key = ns + r->nslen;
	const uint8_t	*val = key + r->keylen;
	enum store_stmt	 which;
	sqlite3_stmt	*s;

	switch (r->op) {
	case KV_J_PUT:
		which = ST_PUT;
		break;
	case KV_J_DEL:
		which = ST_DEL;
		break;
	case KV_J_QPUSH:
		which = ST_QPUSH;
		break;
	case KV_J_QPOP:
		which = ST_QPOP;
		break;
	case KV_J_NSDROP:
		s = st->stmt[ST_NSDROP_KV];
		if (store_bind(s, 1, ns, r->nslen) != SQLITE_OK ||
		    store_step(st, ST_NSDROP_KV) != 0)
			return RDZV_EIO;
		s = st->stmt[ST_NSDROP_QUEUE];
		if (store_bind(s, 1, ns, r->nslen) != SQLITE_OK ||
		    store_step(st, ST_NSDROP_QUEUE) != 0)
			return RDZV_EIO;
		return 0;
	default:
		fatalx("store: bad journal op %d", (int)r->op);
	}
	s = st->stmt[which];
	if (store_bind(s, 1, ns, r->nslen) != SQLITE_OK ||
	    store_bind(s, 2, key, r->keylen) != SQLITE_OK)
		goto fail;
	if ((which == ST_PUT || which == ST_QPUSH) &&
	    store_bind(s, 3, val, r->vallen) != SQLITE_OK)
		goto fail;
	return store_step(st, which);

fail:
	log_warnx("store: %s: bind: %s", st->path, sqlite3_errmsg(st->db));
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return RDZV_EIO;
}

/* Applies a batch in one transaction; on failure nothing is applied. */
static int
store_apply(struct store *st, struct store_recs *batch)
{
	struct store_rec	*r;

	/* A transaction an earlier failure left open (its ROLLBACK failed
	 * too) would make BEGIN fail forever: end it first. */
	if (!sqlite3_get_autocommit(st->db))
		store_step(st, ST_ROLLBACK);
	if (store_step(st, ST_BEGIN) != 0)
		return RDZV_EIO;
	STAILQ_FOREACH(r, batch, entry) {
		if (store_apply_one(st, r) != 0)
			goto fail;
	}
	if (store_step(st, ST_COMMIT) != 0)
		goto fail;
	return 0;

fail:
	if (!sqlite3_get_autocommit(st->db))
		store_step(st, ST_ROLLBACK);
	return RDZV_EIO;
}

static void
store_account(struct store_stats *ss, uint64_t usec, uint64_t rows)
{
	static const uint64_t	 bound[] = { 100, 1000, 10000, 100000,
				     1000000 };
	size_t			 i;

	ss->commits++;
	ss->rows += rows;
	ss->commit_usec_sum += usec;
	if (usec > ss->commit_usec_max)
		ss->commit_usec_max = usec;
	/* One bucket per commit; metrics.c makes them cumulative. */
	for (i = 0; i < sizeof bound / sizeof bound[0]; i++) {
		if (usec <= bound[i])
			break;
	}
	ss->commit_hist[i]++;
}

/* Waits until there is a batch to write; returns 0 when told to exit. */
static int
store_wait(struct store *st)
{
	struct timespec	deadline;

	for (;;) {
		if (STAILQ_EMPTY(&st->pending)) {
			st->kick = 0;
			if (st->stop)
				return 0;
			st->idle = 1;
			pthread_cond_wait(&st->cond, &st->mtx);
			st->idle = 0;
			continue;
		}
		if (st->mode == STORE_STRICT || st->kick || st->stop ||
		    st->stats.pending_bytes >= STORE_PENDING_MAX)
			return 1;
		/* Relaxed: hold the batch until the window since its first
		 * mutation has passed. */
		deadline = st->first_pending;
		deadline.tv_sec += st->window_ms / 1000;
		deadline.tv_nsec += (long)(st->window_ms % 1000) * 1000000;
		if (deadline.tv_nsec >= 1000000000) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000;
		}
		if (pthread_cond_timedwait(&st->cond, &st->mtx, &deadline) ==
		    ETIMEDOUT)
			return 1;
	}
}

static void *
store_thread(void *arg)
{
	struct store		*st = arg;
	struct store_recs	 batch;
	struct store_rec	*r, *r1;
	int64_t			 t0;
	uint64_t		 usec, rows, bytes, last;
	unsigned		 backoff = 0, failures = 0;

	pthread_mutex_lock(&st->mtx);
	while (store_wait(st)) {
		STAILQ_INIT(&batch);
		STAILQ_CONCAT(&batch, &st->pending);
		st->kick = 0;
		pthread_mutex_unlock(&st->mtx);

		rows = bytes = last = 0;
		STAILQ_FOREACH(r, &batch, entry) {
			rows++;
			bytes += STORE_REC_OVERHEAD + r->nslen + r->keylen +
			    r->vallen;
			last = r->seq;
		}
		t0 = mono_us();
		if (store_apply(st, &batch) != 0) {
			failures++;
			pthread_mutex_lock(&st->mtx);
			st->stats.errors++;
			if (st->stop && failures >= STORE_CLOSE_TRIES) {
				log_warnx("store: %s: closing after %u failed "
				    "commits: %llu mutations up to seq %llu "
				    "are lost", st->path, failures,
				    (unsigned long long)rows,
				    (unsigned long long)last);
				st->stats.pending_bytes -= bytes;
				atomic_store(&st->backlog, st->stats.pending_bytes);
				pthread_mutex_unlock(&st->mtx);
				STAILQ_FOREACH_SAFE(r, &batch, entry, r1)
					free(r);
				pthread_mutex_lock(&st->mtx);
				continue;
			}
			/* Keep order: the failed batch goes back in front of
			 * whatever arrived meanwhile. */
			STAILQ_CONCAT(&batch, &st->pending);
			STAILQ_INIT(&st->pending);
			STAILQ_CONCAT(&st->pending, &batch);
			pthread_mutex_unlock(&st->mtx);
			backoff = backoff == 0 ? STORE_RETRY_MIN_MS :
			    backoff * 2;
			if (backoff > STORE_RETRY_MAX_MS)
				backoff = STORE_RETRY_MAX_MS;
			log_warnx("store: %s: commit of %llu mutations failed, "
			    "retrying in %u ms", st->path,
			    (unsigned long long)rows, backoff);
			store_sleep_ms(backoff);
			pthread_mutex_lock(&st->mtx);
			continue;
		}
		usec = (uint64_t)(mono_us() - t0);
		backoff = failures = 0;

		pthread_mutex_lock(&st->mtx);
		store_account(&st->stats, usec, rows);
		st->stats.pending_bytes -= bytes;
		atomic_store(&st->backlog, st->stats.pending_bytes);
		atomic_store(&st->committed, last);
		pthread_mutex_unlock(&st->mtx);

		event_active(st->done_ev, EV_TIMEOUT, 0);
		STAILQ_FOREACH_SAFE(r, &batch, entry, r1)
			free(r);
		pthread_mutex_lock(&st->mtx);
	}
	pthread_mutex_unlock(&st->mtx);
	return NULL;
}

/* Runs on the loop's thread after the writer activates done_ev. */
static void
store_done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct store	*st = arg;

	if (st->done_cb != NULL)
		st->done_cb(st->done_arg, atomic_load(&st->committed));
}

static void
store_free(struct store *st)
{
	size_t	i;

	for (i = 0; i < ST_COUNT; i++)
		sqlite3_finalize(st->stmt[i]);
	if (st->db != NULL)
		sqlite3_close(st->db);
	if (st->done_ev != NULL)
		event_free(st->done_ev);
	pthread_cond_destroy(&st->cond);
	pthread_mutex_destroy(&st->mtx);
	free(st->path);
	free(st);
}

struct store *
store_open(const char *path, enum store_durability mode, unsigned window_ms,
    struct event_base *base, struct kv *kv,
    void (*done_cb)(void *, uint64_t), void *arg)
{
	struct store		*st;
	pthread_condattr_t	 ca;
	sigset_t		 all, old;
	char			 buf[32];
	size_t			 i;
	int			 rc;

	if (mode != STORE_RELAXED && mode != STORE_STRICT) {
		log_warnx("store: %s: durability %s has no database", path,
		    store_durability_name(mode));
		return NULL;
	}
	if ((st = calloc(1, sizeof *st)) == NULL ||
	    (st->path = strdup(path)) == NULL) {
		log_warn("store: %s", path);
		free(st);
		return NULL;
	}
	st->mode = mode;
	st->window_ms = window_ms != 0 ? window_ms : STORE_WINDOW_DEFAULT;
	st->done_cb = done_cb;
	st->done_arg = arg;
	STAILQ_INIT(&st->pending);
	atomic_init(&st->committed, 0);
	atomic_init(&st->backlog, 0);
	pthread_mutex_init(&st->mtx, NULL);
	/* Relaxed deadlines are computed on the monotonic clock. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st->cond, &ca);
	pthread_condattr_destroy(&ca);

	if ((st->done_ev = event_new(base, -1, 0, store_done_cb, st)) ==
	    NULL) {
		log_warnx("store: %s: event_new failed", path);
		goto fail;
	}

	rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		log_warnx("store: %s: cannot open: %s", path, st->db != NULL ?
		    sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
		goto fail;
	}
	sqlite3_extended_result_codes(st->db, 0);
	sqlite3_busy_timeout(st->db, STORE_BUSY_OPEN_MS);

	/* The schema is checked before anything is written, so a file that
	 * is not a database ("file is not a database" on the first read) or
	 * not ours is refused untouched. */
	if (store_schema(st) != 0)
		goto fail;
	if (store_query_text(st, "PRAGMA journal_mode=WAL", buf,
	    sizeof buf) < 0)
		goto fail;
	if (strcmp(buf, "wal") != 0 && strcmp(path, ":memory:") != 0)
		log_warnx("store: %s: journal_mode is %s, not wal", path, buf);
	if (store_exec(st, mode == STORE_STRICT ? "PRAGMA synchronous=FULL" :
	    "PRAGMA synchronous=NORMAL") != 0)
		goto fail;
	/* Big relaxed batches touch many pages of the kv index; the default
	 * 2 MiB cache made them about a quarter slower. */
	if (store_exec(st, "PRAGMA cache_size=-8192") != 0)
		goto fail;
	if (store_load(st, kv) != 0)
		goto fail;
	for (i = 0; i < ST_COUNT; i++) {
		if (sqlite3_prepare_v3(st->db, store_sql[i], -1,
		    SQLITE_PREPARE_PERSISTENT, &st->stmt[i], NULL) !=
		    SQLITE_OK) {
			log_warnx("store: %s: %s: %s", path, store_sql[i],
			    sqlite3_errmsg(st->db));
			goto fail;
		}
	}
	sqlite3_busy_timeout(st->db, STORE_BUSY_MS);

	/* Signals stay with the loop's thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&st->thread, NULL, store_thread, st);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		errno = rc;
		log_warn("store: %s: pthread_create", path);
		goto fail;
	}
	st->thread_started = 1;
	log_info("store: %s: open, durability %s, window %u ms", path,
	    store_durability_name(mode), st->window_ms);
	return st;

fail:
	store_free(st);
	return NULL;
}

void
store_journal(void *arg, enum kv_jop op, struct slice ns, struct slice key,
    struct slice value)
{
	struct store		*st = arg;
	struct store_rec	*r;
	size_t			 size;
	int			 was_empty;

	if (op != KV_J_PUT && op != KV_J_QPUSH)
		value.len = 0;
	if (op == KV_J_NSDROP)
		key.len = 0;
	/* Slices come from memory the kv holds, so the sum cannot wrap. */
	size = sizeof *r + ns.len + key.len + value.len;
	if ((r = malloc(size)) == NULL)
		fatal("store: journal record of %zu bytes", size);
	r->op = op;
	r->nslen = ns.len;
	r->keylen = key.len;
	r->vallen = value.len;
	if (ns.len != 0)
		memcpy(r->data, ns.p, ns.len);
	if (key.len != 0)
		memcpy(r->data + ns.len, key.p, key.len);
	if (value.len != 0)
		memcpy(r->data + ns.len + key.len, value.p, value.len);

	pthread_mutex_lock(&st->mtx);
	r->seq = ++st->last_seq;
	was_empty = STAILQ_EMPTY(&st->pending);
	if (was_empty)
		clock_gettime(CLOCK_MONOTONIC, &st->first_pending);
	STAILQ_INSERT_TAIL(&st->pending, r, entry);
	st->stats.pending_bytes += STORE_REC_OVERHEAD + ns.len + key.len +
	    value.len;
	atomic_store(&st->backlog, st->stats.pending_bytes);
	/* Strict needs a signal only while the writer sleeps: a busy one
	 * looks at the list again before it waits.  Relaxed also wakes an
	 * idle writer (to start its window) and a gathering one when the
	 * batch is big enough. */
	if (st->idle || (st->mode == STORE_RELAXED &&
	    st->stats.pending_bytes >= STORE_PENDING_MAX))
		pthread_cond_signal(&st->cond);
	pthread_mutex_unlock(&st->mtx);
}

uint64_t
store_last_seq(const struct store *st)
{
	return st->last_seq;
}

uint64_t
store_backlog(const struct store *st)
{
	return atomic_load(&st->backlog);
}

uint64_t
store_committed(const struct store *st)
{
	return atomic_load(&st->committed);
}

void
store_kick(struct store *st)
{
	pthread_mutex_lock(&st->mtx);
	st->kick = 1;
	pthread_cond_signal(&st->cond);
	pthread_mutex_unlock(&st->mtx);
}

void
store_get_stats(struct store *st, struct store_stats *out)
{
	pthread_mutex_lock(&st->mtx);
	*out = st->stats;
	pthread_mutex_unlock(&st->mtx);
}

void
store_close(struct store *st)
{
	if (st == NULL)
		return;
	if (st->thread_started) {
		pthread_mutex_lock(&st->mtx);
		st->stop = 1;
		pthread_cond_signal(&st->cond);
		pthread_mutex_unlock(&st->mtx);
		pthread_join(st->thread, NULL);
	}
	/* The writer is gone, so done_ev cannot be activated again; freeing
	 * it also drops an activation the loop has not run yet. */
	log_info("store: %s: closed at seq %llu", st->path,
	    (unsigned long long)atomic_load(&st->committed));
	store_free(st);
}
