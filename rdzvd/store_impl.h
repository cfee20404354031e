/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_impl.h: what store.c (the journal and the writer thread) shares
 * with its backends, store_sqlite.c and store_etcd.c.  Not for the rest of
 * rdzvd, which sees only store.h.
 *
 * A backend is opened (and has loaded the kv) before the writer thread
 * exists, so its handle belongs to the opening thread until store_start()
 * and to the writer thread alone afterwards.
 */
#ifndef RDZV_STORE_IMPL_H
#define RDZV_STORE_IMPL_H

#include <sys/queue.h>

#include <pthread.h>
#include <stddef.h>
#include <time.h>
#include <stdint.h>

#include "kv.h"
#include "store.h"

/* One journalled mutation; ns, key and value follow the header. */
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

#define STORE_REC_NS(r)		((r)->data)
#define STORE_REC_KEY(r)	((r)->data + (r)->nslen)
#define STORE_REC_VAL(r)	((r)->data + (r)->nslen + (r)->keylen)

struct store_backend {
	const char	*name;
	/*
	 * Writes a batch, in order, on the writer thread.  Returns 0 once
	 * all of it is durable, or a negative RDZV_E* code with the cause
	 * logged; the same batch is then offered again (after a backoff),
	 * so applying a batch twice must leave the same state.
	 */
	int		(*apply)(void *be, const struct store_recs *);
	/* Releases the backend (after the writer thread has exited). */
	void		(*close)(void *be);
};

extern const struct store_backend store_sqlite_backend;
extern const struct store_backend store_etcd_backend;

/* store_sqlite.c: opens the database at path and loads it into kv. */
void	*store_sqlite_open(const char *path, enum store_durability,
	    struct kv *);

/*
 * Starts the writer thread over an opened backend.  where names the
 * backend in log messages.  On failure the backend is closed and NULL
 * returned.
 */
struct store *store_start(const struct store_backend *, void *be,
	    const char *where, enum store_durability, unsigned window_ms,
	    struct event_base *, void (*done_cb)(void *, uint64_t), void *arg);

/* A condition variable whose timed waits run on CLOCK_MONOTONIC. */
void	store_cond_init(pthread_cond_t *);
/* ts (CLOCK_MONOTONIC) moved ms later. */
void	store_timespec_add_ms(struct timespec *ts, unsigned ms);
/* pthread_create with every signal blocked in the new thread: they stay
 * with the loop's thread.  Returns pthread_create's code. */
int	store_thread_start(pthread_t *, void *(*)(void *), void *);

#endif /* RDZV_STORE_IMPL_H */
