/*
 * store.h: sqlite persistence of the kv core (the only file that includes
 * sqlite3.h is store.c).
 *
 * The event loop hands mutations to store_journal() (the kv journal
 * callback), which copies them onto an in-memory pending list and returns
 * at once.  A writer thread takes the whole list, applies it in one
 * transaction (group commit) and reports the highest committed sequence
 * number back to the loop through `done_cb`, called on the loop's thread.
 * The loop never waits on fsync.
 *
 * Durability modes:
 *   memory   no database, store_open() is not called at all;
 *   relaxed  write-behind: the thread commits at least every window_ms
 *            (default 50 ms) or when pending bytes pass a bound, so a
 *            crash loses at most window_ms of acknowledged writes;
 *            synchronous=NORMAL (durable against a process crash);
 *   strict   the thread commits as soon as anything is pending; callers
 *            hold each reply until store_committed() >= the mutation's
 *            sequence; synchronous=FULL.
 *
 * Schema (WAL mode):
 *   kv(ns BLOB, key BLOB, value BLOB, PRIMARY KEY(ns, key)) WITHOUT ROWID
 *   queue(ns BLOB, key BLOB, seq INTEGER, value BLOB, PRIMARY KEY(ns, key, seq))
 *   meta(name TEXT PRIMARY KEY, value) -- schema version
 */
#ifndef RDZV_STORE_H
#define RDZV_STORE_H

#include <stdint.h>

#include "kv.h"

struct event_base;
struct store;

enum store_durability {
	STORE_MEMORY = 0,
	STORE_RELAXED = 1,
	STORE_STRICT = 2,
};

/* Parses "memory", "relaxed" or "strict"; -1 if none. */
int		 store_durability_parse(const char *);
const char	*store_durability_name(enum store_durability);

struct store_stats {
	uint64_t	commits;		/* transactions committed */
	uint64_t	rows;			/* mutations applied */
	uint64_t	errors;			/* failed transactions */
	uint64_t	pending_bytes;		/* queued, not yet committed */
	uint64_t	commit_usec_sum;	/* time spent in commits */
	uint64_t	commit_usec_max;
	/* Prometheus histogram buckets of commit latency: <=100us, 1ms,
	 * 10ms, 100ms, 1s, +Inf.  Each commit counts in one bucket only
	 * (not cumulative); they sum to commits. */
	uint64_t	commit_hist[6];
};

/*
 * Opens (creating if needed) the database at path (":memory:" allowed),
 * loads every stored key and queue item into kv (journal off while
 * loading), then starts the writer thread.  done_cb(arg, seq) runs on
 * base's thread after each commit.  Returns NULL and logs the cause on
 * failure.
 */
struct store	*store_open(const char *path, enum store_durability,
		    unsigned window_ms, struct event_base *base, struct kv *kv,
		    void (*done_cb)(void *arg, uint64_t seq), void *arg);

/* The kv journal callback: queues one mutation.  arg is the store. */
void		 store_journal(void *arg, enum kv_jop, struct slice ns,
		    struct slice key, struct slice value);

/* Sequence number of the last mutation queued (0 before any). */
uint64_t	 store_last_seq(const struct store *);
/* Bytes journaled but not yet committed (cheap: no lock taken). */
uint64_t	 store_backlog(const struct store *);
/* Highest sequence number known committed. */
uint64_t	 store_committed(const struct store *);
/* Asks the thread to commit now (strict mode calls it per batch). */
void		 store_kick(struct store *);
void		 store_get_stats(struct store *, struct store_stats *);

/* Commits everything pending, stops the thread, closes the database. */
void		 store_close(struct store *);

#endif /* RDZV_STORE_H */
