/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.h: persistence of the kv core, in sqlite (store_sqlite.c, the only
 * file that includes sqlite3.h) or in etcd (store_etcd.c, which also makes
 * one of several rdzvds the leader).
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
 * With etcd, "durable" means committed by etcd's quorum, and a batch is
 * one or more etcd transactions, each fenced on this rdzvd's leadership.
 */
#ifndef RDZV_STORE_H
#define RDZV_STORE_H

#include <stdint.h>

#include "etcd.h"
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

/* Where and how the etcd backend keeps the state; strings borrowed. */
struct store_etcd_conf {
	struct etcd_conf	 etcd;
	const char		*prefix;	/* every key starts with it */
	unsigned		 leader_ttl_ms;	/* leader lease */
	const char		*leader_info;	/* JSON the standbys show */
	int64_t			 compact_ms;	/* compaction period; 0 off */
};

struct store_etcd;

/*
 * Stands by on a thread of its own until this rdzvd leads the rdzvds on
 * the same etcd cluster and prefix (possibly for ever, while another
 * leads), then keeps the leadership's lease alive on another thread.
 * The loop meanwhile serves what a standby serves.  cb(se, arg) runs on
 * base's thread once this rdzvd leads, or with se NULL when it cannot
 * (cause logged).  From then on the process exits (status 75) the moment
 * its leadership is lost or can no longer be vouched for.  c is borrowed
 * until cb runs.  Returns 0, or -1 (cause logged) if nothing started.
 */
int		 store_etcd_stand_by(const struct store_etcd_conf *c,
		    enum store_durability, struct event_base *base,
		    void (*cb)(struct store_etcd *, void *), void *arg);
/*
 * Stops standing by (waits for the thread: up to one etcd request); a
 * leadership won but not yet handed to cb is given up.  Nothing after cb.
 */
void		 store_etcd_stand_by_stop(void);
/*
 * On the loop's thread: loads the state into kv and starts the writer as
 * store_open() does; the leadership is the store's from then on.  NULL
 * on failure (cause logged; the leadership given up).
 */
struct store	*store_etcd_serve(struct store_etcd *, enum store_durability,
		    unsigned window_ms, struct event_base *base, struct kv *kv,
		    void (*done_cb)(void *arg, uint64_t seq), void *arg);

/* Leadership as the etcd backend last saw it (all zero without etcd). */
struct store_etcd_status {
	int		enabled;
	int		leader;		/* 1: this rdzvd leads */
	int64_t		term;		/* the leader key's create revision */
	int64_t		since_ms;	/* mono_ms() when the leader began to lead
					 * (a standby: when it saw it first) */
	int64_t		failovers;	/* leaderships before the leader's */
	char		leader_info[256];
};
void		 store_etcd_get_status(struct store_etcd_status *);

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
