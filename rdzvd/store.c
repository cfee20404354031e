/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c: the journal and the writer thread in front of a store backend
 * (sqlite: store_sqlite.c; etcd: store_etcd.c); contract in store.h.
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
 *   COMMIT --backend error--> records put back at the head of the list,
 *            sleep with backoff, COMMIT again; after STORE_CLOSE_TRIES
 *            failures while closing they are dropped with a warning.
 *   any --close and nothing pending--> exit
 *
 * The backend's handle belongs to the opening thread until the writer is
 * created and to the writer alone afterwards (store_impl.h).
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

#include "log.h"
#include "mono.h"
#include "rdzv_err.h"
#include "store_impl.h"

/* Pending bytes that make a relaxed store commit before its window ends. */
#define STORE_PENDING_MAX	(4U << 20)
#define STORE_WINDOW_DEFAULT	50	/* ms, when window_ms is 0 */
#define STORE_RETRY_MIN_MS	50
#define STORE_RETRY_MAX_MS	1000
#define STORE_CLOSE_TRIES	5
/* Fixed per-record overhead counted in pending_bytes. */
#define STORE_REC_OVERHEAD	32

struct store {
	char			*path;		/* names the backend in logs */
	enum store_durability	 mode;
	unsigned		 window_ms;
	const struct store_backend *be;
	void			*be_arg;

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
		store_timespec_add_ms(&deadline, st->window_ms);
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
		if (st->be->apply(st->be_arg, &batch) != 0) {
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
	if (st->be != NULL)
		st->be->close(st->be_arg);
	if (st->done_ev != NULL)
		event_free(st->done_ev);
	pthread_cond_destroy(&st->cond);
	pthread_mutex_destroy(&st->mtx);
	free(st->path);
	free(st);
}

void
store_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t	ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
}

void
store_timespec_add_ms(struct timespec *ts, unsigned ms)
{
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

int
store_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t	all, old;
	int		rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

struct store *
store_start(const struct store_backend *backend, void *be,
    const char *where, enum store_durability mode, unsigned window_ms,
    struct event_base *base, void (*done_cb)(void *, uint64_t), void *arg)
{
	struct store		*st;
	int			 rc;

	if ((st = calloc(1, sizeof *st)) == NULL ||
	    (st->path = strdup(where)) == NULL) {
		log_warn("store: %s", where);
		free(st);
		backend->close(be);
		return NULL;
	}
	st->be = backend;
	st->be_arg = be;
	st->mode = mode;
	st->window_ms = window_ms != 0 ? window_ms : STORE_WINDOW_DEFAULT;
	st->done_cb = done_cb;
	st->done_arg = arg;
	STAILQ_INIT(&st->pending);
	atomic_init(&st->committed, 0);
	atomic_init(&st->backlog, 0);
	pthread_mutex_init(&st->mtx, NULL);
	/* Relaxed deadlines are computed on the monotonic clock. */
	store_cond_init(&st->cond);

	if ((st->done_ev = event_new(base, -1, 0, store_done_cb, st)) ==
	    NULL) {
		log_warnx("store: %s: event_new failed", where);
		goto fail;
	}

	if ((rc = store_thread_start(&st->thread, store_thread, st)) != 0) {
		errno = rc;
		log_warn("store: %s: pthread_create", where);
		goto fail;
	}
	st->thread_started = 1;
	log_info("store: %s: open (%s), durability %s, window %u ms", where,
	    backend->name, store_durability_name(mode), st->window_ms);
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
