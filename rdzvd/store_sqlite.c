/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_sqlite.c: the sqlite backend of the store (contract in store.h and
 * store_impl.h), the only file that includes sqlite3.h.
 *
 * Schema (WAL mode):
 *   kv(ns BLOB, key BLOB, value BLOB, PRIMARY KEY(ns, key)) WITHOUT ROWID
 *   queue(ns BLOB, key BLOB, seq INTEGER, value BLOB, PRIMARY KEY(ns, key, seq))
 *   meta(name TEXT PRIMARY KEY, value) -- schema version
 *
 * A batch is one transaction (BEGIN IMMEDIATE ... COMMIT): on failure
 * nothing of it is applied.  The database is opened NOMUTEX: the opening
 * thread owns it until the writer thread starts, the writer alone after.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "log.h"
#include "rdzv_err.h"
#include "store_impl.h"

#define STORE_SCHEMA_VERSION	1
#define STORE_BUSY_OPEN_MS	5000	/* waiting on another process at open */
#define STORE_BUSY_MS		1000	/* per commit try; retries follow */

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

struct store_sqlite {
	char			*path;
	sqlite3			*db;
	sqlite3_stmt		*stmt[ST_COUNT];
	/* store_sqlite_coalesce()'s buffers, kept between batches. */
	const struct store_rec	**recs;		/* the batch, in order */
	uint8_t			*dead;		/* recs[i] overwritten later */
	size_t			*slots;		/* hash: index + 1, 0 empty */
	size_t			 cap, nslots;
};

static const uint8_t	store_empty[1];

/* Runs one statement that returns no rows worth keeping. */
static int
store_sqlite_exec(struct store_sqlite *st, const char *sql)
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
store_sqlite_query_text(struct store_sqlite *st, const char *sql, char *buf, size_t bufsz)
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
store_sqlite_schema(struct store_sqlite *st)
{
	char		buf[64];
	const char	*errstr;
	long long	version;
	int		rc;

	if (store_sqlite_exec(st, "BEGIN IMMEDIATE") != 0)
		return RDZV_EIO;
	rc = store_sqlite_query_text(st, "SELECT COUNT(*) FROM sqlite_master WHERE "
	    "type = 'table' AND name = 'meta'", buf, sizeof buf);
	if (rc < 0)
		goto fail;
	if (strcmp(buf, "0") == 0) {
		rc = store_sqlite_query_text(st, "SELECT COUNT(*) FROM sqlite_master",
		    buf, sizeof buf);
		if (rc < 0)
			goto fail;
		if (strcmp(buf, "0") != 0) {
			log_warnx("store: %s: not an rdzv database (tables "
			    "but no meta table)", st->path);
			rc = RDZV_EVERSION;
			goto fail;
		}
		if (store_sqlite_exec(st,
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
		rc = store_sqlite_query_text(st, "SELECT value FROM meta WHERE "
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
	if (store_sqlite_exec(st, "COMMIT") != 0)
		return RDZV_EIO;
	return 0;

fail:
	sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	return rc;
}

/* sqlite returns NULL for an empty blob; the kv wants a valid pointer. */
static struct slice
store_sqlite_column(sqlite3_stmt *s, int i)
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
store_sqlite_load(struct store_sqlite *st, struct kv *kv)
{
	sqlite3_stmt	*s = NULL;
	uint64_t	 nkeys = 0, nitems = 0;
	int		 rc;

	kv_set_journal(kv, NULL, NULL);
	if (store_sqlite_exec(st, "BEGIN") != 0)
		return RDZV_EIO;

	if (sqlite3_prepare_v2(st->db, "SELECT ns, key, value FROM kv", -1,
	    &s, NULL) != SQLITE_OK)
		goto dberr;
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		if ((rc = kv_set(kv, store_sqlite_column(s, 0), store_sqlite_column(s, 1),
		    store_sqlite_column(s, 2))) < 0)
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
		if ((rc = kv_qpush(kv, store_sqlite_column(s, 0), store_sqlite_column(s, 1),
		    store_sqlite_column(s, 2))) < 0)
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
store_sqlite_bind(sqlite3_stmt *s, int i, const uint8_t *p, size_t len)
{
	/* A NULL pointer would bind SQL NULL, not an empty blob. */
	if (len == 0)
		p = store_empty;
	return sqlite3_bind_blob64(s, i, p, len, SQLITE_STATIC);
}

/* Runs a prepared statement to completion and resets it. */
static int
store_sqlite_step(struct store_sqlite *st, enum store_stmt which)
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
store_sqlite_apply_one(struct store_sqlite *st, const struct store_rec *r)
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
		if (store_sqlite_bind(s, 1, ns, r->nslen) != SQLITE_OK ||
		    store_sqlite_step(st, ST_NSDROP_KV) != 0)
			return RDZV_EIO;
		s = st->stmt[ST_NSDROP_QUEUE];
		if (store_sqlite_bind(s, 1, ns, r->nslen) != SQLITE_OK ||
		    store_sqlite_step(st, ST_NSDROP_QUEUE) != 0)
			return RDZV_EIO;
		return 0;
	default:
		fatalx("store: bad journal op %d", (int)r->op);
	}
	s = st->stmt[which];
	if (store_sqlite_bind(s, 1, ns, r->nslen) != SQLITE_OK ||
	    store_sqlite_bind(s, 2, key, r->keylen) != SQLITE_OK)
		goto fail;
	if ((which == ST_PUT || which == ST_QPUSH) &&
	    store_sqlite_bind(s, 3, val, r->vallen) != SQLITE_OK)
		goto fail;
	return store_sqlite_step(st, which);

fail:
	log_warnx("store: %s: bind: %s", st->path, sqlite3_errmsg(st->db));
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	return RDZV_EIO;
}

static uint64_t
store_sqlite_hash(const struct store_rec *r)
{
	uint64_t	h = 14695981039346656037ULL;
	size_t		i;

	/* FNV-1a over ns, its length and key. */
	for (i = 0; i < r->nslen; i++)
		h = (h ^ r->data[i]) * 1099511628211ULL;
	h = (h ^ r->nslen) * 1099511628211ULL;
	for (i = 0; i < r->keylen; i++)
		h = (h ^ r->data[r->nslen + i]) * 1099511628211ULL;
	return h;
}

/*
 * Group commit's other half: in one transaction only the last PUT or DEL
 * of a key is visible, so the ones before it are dead (marked in
 * st->dead) and never reach sqlite.  A key SET many times per window (a
 * counter, a rank's progress) costs one upsert per batch.  Queue ops and
 * namespace drops are always applied (an earlier PUT that a drop would
 * remove stays: applying it is merely redundant).  Returns the batch's
 * length, or 0 when out of memory (then nothing is marked dead).
 */
static size_t
store_sqlite_coalesce(struct store_sqlite *st, const struct store_recs *batch)
{
	const struct store_rec	*r, *o;
	size_t			 n = 0, i, j, mask, *ns;
	void			*p;

	STAILQ_FOREACH(r, batch, entry)
		n++;
	if (n > st->cap) {
		if ((p = reallocarray(st->recs, n, sizeof *st->recs)) == NULL)
			return 0;
		st->recs = p;
		if ((p = realloc(st->dead, n)) == NULL)
			return 0;
		st->dead = p;
		st->cap = n;
	}
	if (st->nslots < 2 * n) {
		for (j = 64; j < 2 * n; j *= 2)
			;
		if ((ns = reallocarray(st->slots, j, sizeof *ns)) == NULL)
			return 0;
		st->slots = ns;
		st->nslots = j;
	}
	memset(st->slots, 0, st->nslots * sizeof *st->slots);
	memset(st->dead, 0, n);
	i = 0;
	STAILQ_FOREACH(r, batch, entry)
		st->recs[i++] = r;
	mask = st->nslots - 1;
	for (i = n; i-- > 0; ) {
		r = st->recs[i];
		if (r->op != KV_J_PUT && r->op != KV_J_DEL)
			continue;
		for (j = store_sqlite_hash(r) & mask; st->slots[j] != 0;
		    j = (j + 1) & mask) {
			o = st->recs[st->slots[j] - 1];
			if (o->nslen == r->nslen && o->keylen == r->keylen &&
			    memcmp(o->data, r->data, r->nslen + r->keylen) == 0)
				break;
		}
		if (st->slots[j] != 0)
			st->dead[i] = 1;	/* a later PUT or DEL wins */
		else
			st->slots[j] = i + 1;
	}
	return n;
}

/* Applies a batch in one transaction; on failure nothing is applied. */
static int
store_sqlite_apply(void *be, const struct store_recs *batch)
{
	struct store_sqlite	*st = be;
	struct store_rec	*r;
	size_t			 i, n;

	/* A transaction an earlier failure left open (its ROLLBACK failed
	 * too) would make BEGIN fail forever: end it first. */
	if (!sqlite3_get_autocommit(st->db))
		store_sqlite_step(st, ST_ROLLBACK);
	if (store_sqlite_step(st, ST_BEGIN) != 0)
		return RDZV_EIO;
	if ((n = store_sqlite_coalesce(st, batch)) > 0) {
		for (i = 0; i < n; i++)
			if (!st->dead[i] &&
			    store_sqlite_apply_one(st, st->recs[i]) != 0)
				goto fail;
	} else {
		STAILQ_FOREACH(r, batch, entry) {
			if (store_sqlite_apply_one(st, r) != 0)
				goto fail;
		}
	}
	if (store_sqlite_step(st, ST_COMMIT) != 0)
		goto fail;
	return 0;

fail:
	if (!sqlite3_get_autocommit(st->db))
		store_sqlite_step(st, ST_ROLLBACK);
	return RDZV_EIO;
}

static void
store_sqlite_close(void *be)
{
	struct store_sqlite	*st = be;
	size_t			 i;

	if (st == NULL)
		return;
	for (i = 0; i < ST_COUNT; i++)
		sqlite3_finalize(st->stmt[i]);
	if (st->db != NULL)
		sqlite3_close(st->db);
	free(st->recs);
	free(st->dead);
	free(st->slots);
	free(st->path);
	free(st);
}

const struct store_backend store_sqlite_backend = {
	.name = "sqlite",
	.apply = store_sqlite_apply,
	.close = store_sqlite_close,
};

/*
 * When the database cannot be opened because of its directory, why
 * (size sz) says so: the directory does not exist (make install makes
 * the default one) or this user cannot write in it; else "".
 */
static void
store_sqlite_dir_why(const char *path, char *why, size_t sz)
{
	char	 dir[PATH_MAX], *slash;

	why[0] = '\0';
	if (strcmp(path, ":memory:") == 0 ||
	    strlcpy(dir, path, sizeof dir) >= sizeof dir)
		return;
	if ((slash = strrchr(dir, '/')) == NULL)
		strlcpy(dir, ".", sizeof dir);
	else
		slash[slash == dir ? 1 : 0] = '\0';
	if (access(dir, F_OK) != 0)
		snprintf(why, sz, "; directory %s does not exist (create it, "
		    "or choose another --db)", dir);
	else if (access(dir, W_OK | X_OK) != 0)
		snprintf(why, sz, "; this user cannot write in directory %s",
		    dir);
}

void *
store_sqlite_open(const char *path, enum store_durability mode,
    struct kv *kv)
{
	struct store_sqlite	*st;
	char			 buf[32];
	char			 why[PATH_MAX + 96];
	size_t			 i;
	int			 rc;

	if ((st = calloc(1, sizeof *st)) == NULL ||
	    (st->path = strdup(path)) == NULL) {
		log_warn("store: %s", path);
		free(st);
		return NULL;
	}
	rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		store_sqlite_dir_why(path, why, sizeof why);
		log_warnx("store: %s: cannot open: %s%s", path, st->db != NULL ?
		    sqlite3_errmsg(st->db) : sqlite3_errstr(rc), why);
		goto fail;
	}
	sqlite3_extended_result_codes(st->db, 0);
	sqlite3_busy_timeout(st->db, STORE_BUSY_OPEN_MS);

	/* The schema is checked before anything is written, so a file that
	 * is not a database ("file is not a database" on the first read) or
	 * not ours is refused untouched. */
	if (store_sqlite_schema(st) != 0)
		goto fail;
	if (store_sqlite_query_text(st, "PRAGMA journal_mode=WAL", buf,
	    sizeof buf) < 0)
		goto fail;
	if (strcmp(buf, "wal") != 0 && strcmp(path, ":memory:") != 0)
		log_warnx("store: %s: journal_mode is %s, not wal", path, buf);
	if (store_sqlite_exec(st, mode == STORE_STRICT ? "PRAGMA synchronous=FULL" :
	    "PRAGMA synchronous=NORMAL") != 0)
		goto fail;
	/* Big relaxed batches touch many pages of the kv index; the default
	 * 2 MiB cache made them about a quarter slower. */
	if (store_sqlite_exec(st, "PRAGMA cache_size=-8192") != 0)
		goto fail;
	if (store_sqlite_load(st, kv) != 0)
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
	return st;

fail:
	store_sqlite_close(st);
	return NULL;
}

struct store *
store_open(const char *path, enum store_durability mode, unsigned window_ms,
    struct event_base *base, struct kv *kv,
    void (*done_cb)(void *, uint64_t), void *arg)
{
	void	*be;

	if (mode != STORE_RELAXED && mode != STORE_STRICT) {
		log_warnx("store: %s: durability %s has no database", path,
		    store_durability_name(mode));
		return NULL;
	}
	if ((be = store_sqlite_open(path, mode, kv)) == NULL)
		return NULL;
	return store_start(&store_sqlite_backend, be, path, mode, window_ms,
	    base, done_cb, arg);
}
