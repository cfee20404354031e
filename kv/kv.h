/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kv.h: the one key-value core behind every protocol adapter.
 *
 * Pure: no I/O, no clock, no libevent.  Keys live in namespaces (byte
 * strings; TCPStore connections use the empty namespace or the one their
 * port maps to, native clients name one per request).  Values are binary.
 * Queues are separate from keys but share their names for WAIT/CHECK: a
 * name "exists" when it is a key or a non-empty queue.  A push releases
 * one waiter on the name (the oldest that it completes), as torch's
 * server does, since a blocking pop is a WAIT followed by a POP.
 *
 * Waiting: kv_wait(), kv_barrier(), kv_qpop_wait() and kv_watch() register
 * a waiter whose callback runs synchronously inside the mutation that
 * satisfies it.  A callback must not call any kv function except
 * kv_waiter_cancel() on a *different* waiter; one-shot waiters are freed
 * by the core right after their callback returns.
 *
 * Persistence: every mutation is reported to the journal callback (if
 * set) after it is applied, in order, so store.c can replay it into
 * sqlite.  kv_set_journal(kv, NULL, NULL) turns that off (while loading).
 */
#ifndef RDZV_KV_H
#define RDZV_KV_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"	/* struct slice */

struct kv;
struct kv_waiter;

enum kv_jop {
	KV_J_PUT = 1,		/* ns, key, value: key now holds value */
	KV_J_DEL,		/* ns, key: key removed */
	KV_J_QPUSH,		/* ns, key, value: appended to queue key */
	KV_J_QPOP,		/* ns, key: head of queue key removed */
	KV_J_NSDROP,		/* ns: whole namespace removed */
};
typedef void	(*kv_journal_cb)(void *arg, enum kv_jop, struct slice ns,
		    struct slice key, struct slice value);

/* Creates an empty store; NULL on allocation failure. */
struct kv	*kv_new(void);
/* Frees the store, its namespaces and any waiters (callbacks not run). */
void		 kv_free(struct kv *);
void		 kv_set_journal(struct kv *, kv_journal_cb, void *arg);

/* Simple operations.  All return 0 (or a count) or a negative RDZV_E*. */

/* key = value; wakes waiters and watchers. */
int	kv_set(struct kv *, struct slice ns, struct slice key, struct slice value);
/* *out points into the store, valid until the next mutation; ENOTFOUND. */
int	kv_get(struct kv *, struct slice ns, struct slice key, struct slice *out);
/* Decimal add (missing = 0), the stored value read as std::stoll does
 * (leading blanks and one sign allowed, anything after the digits
 * ignored): RDZV_ENOTINT when it holds no decimal int64, RDZV_EINVAL when
 * the sum overflows.  Stores the sum in canonical decimal; *out = it. */
int	kv_add(struct kv *, struct slice ns, struct slice key, int64_t delta,
	    int64_t *out);
/* TCPStore compare-set semantics (see tcpstore-wire.md section 2): *out is
 * the value now stored, or `expected` when the key is missing and
 * expected is non-empty.  *out valid until the next mutation. */
int	kv_cas(struct kv *, struct slice ns, struct slice key,
	    struct slice expected, struct slice desired, struct slice *out);
/* Appends to the key's value, creating it. */
int	kv_append(struct kv *, struct slice ns, struct slice key, struct slice value);
/* Returns 1 if deleted, 0 if it was missing. */
int	kv_delete(struct kv *, struct slice ns, struct slice key);
/* Keys in ns (queues not counted). */
int64_t	kv_num_keys(struct kv *, struct slice ns);
/* Keys in all namespaces, waiters registered (for metrics). */
int64_t	kv_total_keys(const struct kv *);
int64_t	kv_total_waiters(const struct kv *);
/* 1 if every key exists (key, or non-empty queue), else 0. */
int	kv_check(struct kv *, struct slice ns, const struct slice *keys, size_t n);
/* Calls fn for each key of ns (order unspecified); fn must not mutate.
 * Returns the number of keys visited. */
int64_t	kv_list(struct kv *, struct slice ns,
	    void (*fn)(void *arg, struct slice key), void *arg);
/* Removes a namespace with its keys and queues; waiters on it stay. */
int	kv_ns_drop(struct kv *, struct slice ns);
/* Calls fn for each namespace whose name begins with prefix (every one
 * when prefix is empty) and that holds keys or queues, order unspecified;
 * fn must not mutate.  Returns the number of namespaces visited. */
int64_t	kv_ns_list(struct kv *, struct slice prefix,
	    void (*fn)(void *arg, struct slice ns), void *arg);

/* Queues.  kv_qpush hands the item to the oldest kv_qpop_wait waiter,
 * else queues it and wakes one kv_wait waiter on the name. */
int	kv_qpush(struct kv *, struct slice ns, struct slice key, struct slice value);
/* Pops the head into *out, a malloc'ed copy the caller frees (*outlen
 * set); RDZV_ENOTFOUND when empty. */
int	kv_qpop(struct kv *, struct slice ns, struct slice key, uint8_t **out,
	    size_t *outlen);
int64_t	kv_qlen(struct kv *, struct slice ns, struct slice key);

/* Waiting.  `arg` is passed back untouched. */

/* All keys exist: fn(w, arg) once.  If they already exist, returns 1 and
 * registers nothing (*wp = NULL); else 0 with *wp set.  RDZV_ENOMEM. */
typedef void	(*kv_wake_cb)(struct kv_waiter *, void *arg);
int	kv_wait(struct kv *, struct slice ns, const struct slice *keys, size_t n,
	    kv_wake_cb fn, void *arg, struct kv_waiter **wp);

/* Adds 1 to the decimal counter `key`, then waits until it is >= world
 * (every participant's waiter fires when the last one arrives).  Same
 * returns as kv_wait; RDZV_ENOTINT when the key is not a counter. */
int	kv_barrier(struct kv *, struct slice ns, struct slice key, int64_t world,
	    kv_wake_cb fn, void *arg, struct kv_waiter **wp);

/* Pops from queue key, waiting for a push if it is empty.  If an item is
 * there now, returns 1 with *out and *outlen (malloc'ed) and *wp = NULL;
 * else 0 and later fn(w, arg, item, len) with an item the callback owns
 * (must free).  Waiters are served first-come, one item each. */
typedef void	(*kv_pop_cb)(struct kv_waiter *, void *arg, uint8_t *item,
		    size_t len);
int	kv_qpop_wait(struct kv *, struct slice ns, struct slice key,
	    uint8_t **out, size_t *outlen, kv_pop_cb fn, void *arg,
	    struct kv_waiter **wp);

/* Persistent watch on one key: fn on every change with its kind
 * (TCPS_WATCH_CREATED/UPDATED/DELETED) and old/new values (empty when
 * absent).  Stays registered until kv_waiter_cancel(). */
typedef void	(*kv_watch_cb)(struct kv_waiter *, void *arg, int kind,
		    struct slice key, struct slice oldv, struct slice newv);
int	kv_watch(struct kv *, struct slice ns, struct slice key, kv_watch_cb fn,
	    void *arg, struct kv_waiter **wp);

/* Unregisters and frees a waiter that has not fired (or any watch).
 * Never runs its callback. */
void	kv_waiter_cancel(struct kv *, struct kv_waiter *);

#endif /* RDZV_KV_H */
