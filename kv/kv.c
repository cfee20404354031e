/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kv.c: the key-value core behind every protocol adapter (see kv.h).
 *
 * Owns the namespaces (a uthash by name), and in each namespace three
 * uthash tables sharing one key space: the keys (binary key -> binary
 * value), the queues (a STAILQ of items per name) and the waiter lists
 * (per name, one TAILQ of links per waiter kind).  A waiter list exists
 * while some waiter refers to its name, whether or not the name exists,
 * so every mutation of a name finds its waiters with one lookup that
 * reuses the key's hash.
 *
 * Firing is two-phase: a mutation first moves every waiter it satisfies
 * onto kv->firing (no callback runs while lists are walked), then runs the
 * callbacks in order.  A callback that cancels a waiter still on
 * kv->firing just removes it from there, so it never fires.  The namespace
 * being mutated is marked busy so a cancellation cannot free it under the
 * mutation; it is collected when the mutation ends.
 *
 * Why about 1,350 lines: one data structure: keys, queues, waiters and
 * the two-phase firing share the per-namespace tables and one walk of
 * them; apart, each part would reach into the others' tables.
 */
#include "config.h"

#include <sys/queue.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Allocation failure inside uthash clears hh.tbl instead of exiting. */
#define HASH_NONFATAL_OOM	1
#include <uthash.h>

#include "rdzv_err.h"
#include "kv.h"

/* uthash keeps key lengths in an unsigned int. */
#define KV_LEN_MAX		UINT_MAX
/* Values up to this size live in the entry's own allocation. */
#define KV_INLINE_MAX		256
/* A value buffer this much larger than its value is given back. */
#define KV_SHRINK_MIN		4096
/* The old-value copy kept for watchers is freed above this size. */
#define KV_SCRATCH_KEEP		65536

struct kv_entry {
	UT_hash_handle		 hh;
	uint8_t			*val;	/* inline space or its own buffer */
	size_t			 vlen;
	size_t			 vcap;
	size_t			 keylen;
	uint8_t			 buf[];	/* key, then the inline value space */
};

struct kv_item {
	STAILQ_ENTRY(kv_item)	 link;
	size_t			 len;
	uint8_t			 data[];
};

struct kv_queue {
	UT_hash_handle		 hh;
	STAILQ_HEAD(, kv_item)	 items;
	int64_t			 len;	/* > 0: an empty queue is freed */
	size_t			 keylen;
	uint8_t			 key[];
};

enum kv_wkind {
	KV_W_WAIT = 0,		/* all of n names exist */
	KV_W_BARRIER,		/* counter >= world */
	KV_W_POP,		/* one item from a queue */
	KV_W_WATCH,		/* every change of one key, until cancelled */
	KV_W_NKINDS
};

/* One name a waiter depends on.  Armed links are on their list's TAILQ. */
struct kv_wlink {
	TAILQ_ENTRY(kv_wlink)	 entry;
	struct kv_waiter	*w;
	struct kv_wlist		*wl;	/* holds a reference while set */
	int			 armed;
};
TAILQ_HEAD(kv_wlinks, kv_wlink);

struct kv_wlist {
	UT_hash_handle		 hh;
	struct kv_wlinks	 lists[KV_W_NKINDS];
	int64_t			 bar_min; /* <= the least world of barriers */
	size_t			 refs;	/* links pointing here, armed or not */
	size_t			 keylen;
	uint8_t			 key[];
};

#define KV_WF_FIRING		0x1	/* on kv->firing */
#define KV_WF_RUNNING		0x2	/* its callback is running */
#define KV_WF_CANCELED		0x4	/* cancelled while running */

struct kv_waiter {
	enum kv_wkind		 kind;
	int			 flags;
	struct kv_ns		*ns;
	union {
		kv_wake_cb	 wake;
		kv_pop_cb	 pop;
		kv_watch_cb	 watch;
	}			 cb;
	void			*arg;
	int64_t			 world;		/* barrier */
	size_t			 missing;	/* wait: armed links */
	size_t			 nlinks;
	TAILQ_ENTRY(kv_waiter)	 fire;
	TAILQ_ENTRY(kv_waiter)	 all;
	struct kv_wlink		 links[];
};
TAILQ_HEAD(kv_waiters, kv_waiter);

struct kv_ns {
	UT_hash_handle		 hh;
	struct kv_entry		*keys;
	struct kv_queue		*queues;
	struct kv_wlist		*wlists;
	size_t			 namelen;
	uint8_t			 name[];
};

/* The change that watchers on kv->firing are told about. */
struct kv_event {
	int			 kind;
	struct slice		 key;
	struct slice		 oldv;
	struct slice		 newv;
};

struct kv {
	struct kv_ns		*nss;
	struct kv_ns		*last;	/* one-entry lookup cache */
	struct kv_ns		*busy;	/* being mutated: not collected */
	struct kv_waiters	 firing;
	struct kv_waiters	 waiters;
	struct kv_event		 ev;
	kv_journal_cb		 jfn;
	void			*jarg;
	uint8_t			*scratch;	/* old value for watchers */
	size_t			 scratchcap;
	int64_t			 nkeys;
	int64_t			 nwaiters;
};

static const uint8_t	kv_nul[16];

static void	waiter_free(struct kv *, struct kv_waiter *);

/* Empty slices may carry a NULL pointer; memcmp and uthash must not see it. */
static inline struct slice
sl(struct slice s)
{
	if (s.p == NULL) {
		s.p = kv_nul;
		s.len = 0;
	}
	return s;
}

static inline struct slice
sl_make(const uint8_t *p, size_t len)
{
	struct slice	s;

	s.p = p;
	s.len = len;
	return s;
}

static inline unsigned
kv_hash(struct slice key)
{
	unsigned	hv;

	HASH_VALUE(key.p, key.len, hv);
	return hv;
}

static void
kv_journal(struct kv *kv, enum kv_jop op, struct slice ns, struct slice key,
    struct slice value)
{
	if (kv->jfn != NULL)
		kv->jfn(kv->jarg, op, ns, key, value);
}

/*
 * A stored value read as a counter, by the rules of the reference
 * server's std::stoll (strtoll in base 10, "C" locale): blanks (space,
 * \t \n \v \f \r) skipped, one optional '+' or '-', then at least one
 * digit; whatever follows the digits (a NUL included) is ignored, so
 * " +5", "5 " and "12abc" are counters.  No digit, or a number outside
 * int64, is -1 (the reference server throws and drops the client).
 */
static int
parse_i64(const uint8_t *p, size_t len, int64_t *out)
{
	uint64_t	v = 0, lim, d;
	size_t		i = 0, start;
	int		neg = 0;

	while (i < len && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r')))
		i++;
	if (i < len && (p[i] == '-' || p[i] == '+')) {
		neg = p[i] == '-';
		i++;
	}
	lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (start = i; i < len && p[i] >= '0' && p[i] <= '9'; i++) {
		d = p[i] - '0';
		if (v > (lim - d) / 10)
			return (-1);
		v = v * 10 + d;
	}
	if (i == start)
		return (-1);
	if (neg)
		*out = v == 0 ? 0 : -(int64_t)(v - 1) - 1;
	else
		*out = (int64_t)v;
	return (0);
}

/* Writes v in decimal into buf (at least 20 bytes); returns the length. */
static size_t
fmt_i64(uint8_t *buf, int64_t v)
{
	uint8_t		tmp[20];
	uint64_t	u;
	size_t		n = 0, i = 0;

	u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	do {
		tmp[n++] = '0' + u % 10;
		u /= 10;
	} while (u != 0);
	if (v < 0)
		buf[i++] = '-';
	while (n > 0)
		buf[i++] = tmp[--n];
	return (i);
}

/* ---- namespaces ---- */

static struct kv_ns *
ns_find(struct kv *kv, struct slice name)
{
	struct kv_ns	*ns;

	ns = kv->last;
	if (ns != NULL && ns->namelen == name.len &&
	    memcmp(ns->name, name.p, name.len) == 0)
		return (ns);
	HASH_FIND(hh, kv->nss, name.p, name.len, ns);
	if (ns != NULL)
		kv->last = ns;
	return (ns);
}

static struct kv_ns *
ns_get(struct kv *kv, struct slice name)
{
	struct kv_ns	*ns;

	if ((ns = ns_find(kv, name)) != NULL)
		return (ns);
	if ((ns = calloc(1, sizeof(*ns) + name.len)) == NULL)
		return (NULL);
	memcpy(ns->name, name.p, name.len);
	ns->namelen = name.len;
	HASH_ADD_KEYPTR(hh, kv->nss, ns->name, ns->namelen, ns);
	if (ns->hh.tbl == NULL) {
		free(ns);
		return (NULL);
	}
	kv->last = ns;
	return (ns);
}

/* Frees a namespace with nothing left in it, unless a mutation is on it. */
static void
ns_gc(struct kv *kv, struct kv_ns *ns)
{
	if (ns == kv->busy || ns->keys != NULL || ns->queues != NULL ||
	    ns->wlists != NULL)
		return;
	HASH_DELETE(hh, kv->nss, ns);
	if (kv->last == ns)
		kv->last = NULL;
	free(ns);
}

/* ---- keys ---- */

static inline uint8_t *
entry_inline(struct kv_entry *e)
{
	return (e->buf + e->keylen);
}

static struct kv_entry *
entry_find(struct kv_ns *ns, struct slice key, unsigned hv)
{
	struct kv_entry	*e = NULL;

	if (ns->keys != NULL)
		HASH_FIND_BYHASHVALUE(hh, ns->keys, key.p, key.len, hv, e);
	return (e);
}

static void
entry_free(struct kv_entry *e)
{
	if (e->val != entry_inline(e))
		free(e->val);
	free(e);
}

static struct kv_entry *
entry_new(struct kv_ns *ns, struct slice key, unsigned hv, struct slice v)
{
	struct kv_entry	*e;
	size_t		 icap = 0;

	/* Small values share the entry's allocation: one malloc per key. */
	if (v.len <= KV_INLINE_MAX)
		icap = (v.len + 16) & ~(size_t)15;
	if ((e = malloc(sizeof(*e) + key.len + icap)) == NULL)
		return (NULL);
	memcpy(e->buf, key.p, key.len);
	e->keylen = key.len;
	if (icap != 0) {
		e->val = entry_inline(e);
		e->vcap = icap;
	} else {
		if ((e->val = malloc(v.len)) == NULL) {
			free(e);
			return (NULL);
		}
		e->vcap = v.len;
	}
	memcpy(e->val, v.p, v.len);
	e->vlen = v.len;
	HASH_ADD_KEYPTR_BYHASHVALUE(hh, ns->keys, e->buf, e->keylen, hv, e);
	if (e->hh.tbl == NULL) {
		entry_free(e);
		return (NULL);
	}
	return (e);
}

/*
 * Makes e's value its first `keep` bytes followed by v, reusing the buffer
 * when it fits.  v may point into the current value.
 */
static int
entry_write(struct kv_entry *e, size_t keep, struct slice v)
{
	uint8_t	*nb;
	size_t	 len, cap;

	if (v.len > SIZE_MAX - keep)
		return (RDZV_ETOOBIG);
	len = keep + v.len;
	if (len <= e->vcap && (e->val == entry_inline(e) ||
	    e->vcap < KV_SHRINK_MIN || len >= e->vcap / 4)) {
		memmove(e->val + keep, v.p, v.len);
		e->vlen = len;
		return (0);
	}
	cap = len;
	/* Appends grow geometrically so a stream of them stays linear. */
	if (keep > 0 && len > e->vcap && e->vcap <= SIZE_MAX / 2 &&
	    cap < e->vcap * 2)
		cap = e->vcap * 2;
	if ((nb = malloc(cap == 0 ? 1 : cap)) == NULL)
		return (RDZV_ENOMEM);
	memcpy(nb, e->val, keep);
	memcpy(nb + keep, v.p, v.len);
	if (e->val != entry_inline(e))
		free(e->val);
	e->val = nb;
	e->vcap = cap;
	e->vlen = len;
	return (0);
}

/* ---- queues ---- */

static struct kv_queue *
queue_find(struct kv_ns *ns, struct slice key, unsigned hv)
{
	struct kv_queue	*q = NULL;

	if (ns->queues != NULL)
		HASH_FIND_BYHASHVALUE(hh, ns->queues, key.p, key.len, hv, q);
	return (q);
}

static struct kv_queue *
queue_get(struct kv_ns *ns, struct slice key, unsigned hv)
{
	struct kv_queue	*q;

	if ((q = queue_find(ns, key, hv)) != NULL)
		return (q);
	if ((q = calloc(1, sizeof(*q) + key.len)) == NULL)
		return (NULL);
	STAILQ_INIT(&q->items);
	memcpy(q->key, key.p, key.len);
	q->keylen = key.len;
	HASH_ADD_KEYPTR_BYHASHVALUE(hh, ns->queues, q->key, q->keylen, hv, q);
	if (q->hh.tbl == NULL) {
		free(q);
		return (NULL);
	}
	return (q);
}

static void
queue_free(struct kv_queue *q)
{
	struct kv_item	*it;

	while ((it = STAILQ_FIRST(&q->items)) != NULL) {
		STAILQ_REMOVE_HEAD(&q->items, link);
		free(it);
	}
	free(q);
}

/* A name exists when it is a key or a non-empty queue. */
static int
name_exists(struct kv_ns *ns, struct slice key, unsigned hv)
{
	return (entry_find(ns, key, hv) != NULL ||
	    queue_find(ns, key, hv) != NULL);
}

/* ---- waiter lists ---- */

static struct kv_wlist *
wl_find(struct kv_ns *ns, struct slice key, unsigned hv)
{
	struct kv_wlist	*wl = NULL;

	if (ns->wlists != NULL)
		HASH_FIND_BYHASHVALUE(hh, ns->wlists, key.p, key.len, hv, wl);
	return (wl);
}

static struct kv_wlist *
wl_get(struct kv_ns *ns, struct slice key, unsigned hv)
{
	struct kv_wlist	*wl;
	int		 k;

	if ((wl = wl_find(ns, key, hv)) != NULL)
		return (wl);
	if ((wl = calloc(1, sizeof(*wl) + key.len)) == NULL)
		return (NULL);
	for (k = 0; k < KV_W_NKINDS; k++)
		TAILQ_INIT(&wl->lists[k]);
	memcpy(wl->key, key.p, key.len);
	wl->keylen = key.len;
	HASH_ADD_KEYPTR_BYHASHVALUE(hh, ns->wlists, wl->key, wl->keylen, hv,
	    wl);
	if (wl->hh.tbl == NULL) {
		free(wl);
		return (NULL);
	}
	return (wl);
}

static void
wl_unref(struct kv_ns *ns, struct kv_wlist *wl)
{
	if (--wl->refs > 0)
		return;
	HASH_DELETE(hh, ns->wlists, wl);
	free(wl);
}

static inline struct slice
wl_key(const struct kv_wlist *wl)
{
	return (sl_make(wl->key, wl->keylen));
}

static void
link_arm(struct kv_wlink *l)
{
	TAILQ_INSERT_TAIL(&l->wl->lists[l->w->kind], l, entry);
	l->armed = 1;
}

static void
link_disarm(struct kv_wlink *l)
{
	TAILQ_REMOVE(&l->wl->lists[l->w->kind], l, entry);
	l->armed = 0;
}

/* ---- waiters ---- */

static struct kv_waiter *
waiter_alloc(struct kv *kv, struct kv_ns *ns, enum kv_wkind kind, size_t n,
    void *arg)
{
	struct kv_waiter	*w;

	if (n > (SIZE_MAX - sizeof(*w)) / sizeof(w->links[0]))
		return (NULL);
	if ((w = calloc(1, sizeof(*w) + n * sizeof(w->links[0]))) == NULL)
		return (NULL);
	w->kind = kind;
	w->ns = ns;
	w->arg = arg;
	TAILQ_INSERT_TAIL(&kv->waiters, w, all);
	kv->nwaiters++;
	return (w);
}

/* Points w's next link at key's list (taking a reference), unarmed. */
static int
waiter_add_link(struct kv_waiter *w, struct slice key, unsigned hv)
{
	struct kv_wlink	*l = &w->links[w->nlinks];

	if ((l->wl = wl_get(w->ns, key, hv)) == NULL)
		return (RDZV_ENOMEM);
	l->wl->refs++;
	l->w = w;
	w->nlinks++;
	return (0);
}

static void
waiter_free(struct kv *kv, struct kv_waiter *w)
{
	struct kv_ns	*ns = w->ns;
	struct kv_wlink	*l;
	size_t		 i;

	for (i = 0; i < w->nlinks; i++) {
		l = &w->links[i];
		if (l->armed)
			link_disarm(l);
		wl_unref(ns, l->wl);
	}
	if (w->flags & KV_WF_FIRING)
		TAILQ_REMOVE(&kv->firing, w, fire);
	TAILQ_REMOVE(&kv->waiters, w, all);
	kv->nwaiters--;
	free(w);
	ns_gc(kv, ns);
}

static void
fire_push(struct kv *kv, struct kv_waiter *w)
{
	if (w->flags & KV_WF_FIRING)
		return;
	TAILQ_INSERT_TAIL(&kv->firing, w, fire);
	w->flags |= KV_WF_FIRING;
}

/* Runs the callbacks of everything on kv->firing, freeing one-shots. */
static void
kv_fire(struct kv *kv)
{
	struct kv_waiter	*w;
	struct kv_event		*ev = &kv->ev;

	while ((w = TAILQ_FIRST(&kv->firing)) != NULL) {
		TAILQ_REMOVE(&kv->firing, w, fire);
		w->flags = (w->flags & ~KV_WF_FIRING) | KV_WF_RUNNING;
		if (w->kind == KV_W_WATCH)
			w->cb.watch(w, w->arg, ev->kind, ev->key, ev->oldv,
			    ev->newv);
		else
			w->cb.wake(w, w->arg);
		w->flags &= ~KV_WF_RUNNING;
		if (w->kind != KV_W_WATCH || (w->flags & KV_WF_CANCELED))
			waiter_free(kv, w);
	}
}

/*
 * A name of w dropped to no missing names.  One of them may have been
 * deleted since its link was satisfied, so look again and re-arm the
 * missing; fire only when none is.
 */
static void
wait_recheck(struct kv *kv, struct kv_waiter *w)
{
	struct kv_wlink	*l;
	size_t		 i;

	for (i = 0; i < w->nlinks; i++) {
		l = &w->links[i];
		if (!name_exists(w->ns, wl_key(l->wl), l->wl->hh.hashv)) {
			link_arm(l);
			w->missing++;
		}
	}
	if (w->missing == 0)
		fire_push(kv, w);
}

/* The name of wl exists now: satisfy the existence waits armed on it. */
static void
wl_exists(struct kv *kv, struct kv_wlist *wl)
{
	struct kv_wlinks	*head = &wl->lists[KV_W_WAIT];
	struct kv_wlink		*l;

	while ((l = TAILQ_FIRST(head)) != NULL) {
		link_disarm(l);
		if (--l->w->missing == 0)
			wait_recheck(kv, l->w);
	}
}

/*
 * An item was pushed onto the queue named by wl: like wl_exists, oldest
 * first, but only until one waiter fires, as the reference server wakes
 * one client per push (waking all would let every blocking pop but one
 * come back empty).  Waiters passed over still lack another name.
 */
static void
wl_exists_one(struct kv *kv, struct kv_wlist *wl)
{
	struct kv_wlinks	*head = &wl->lists[KV_W_WAIT];
	struct kv_wlink		*l;
	struct kv_waiter	*w;

	while ((l = TAILQ_FIRST(head)) != NULL) {
		w = l->w;
		link_disarm(l);
		if (--w->missing == 0) {
			wait_recheck(kv, w);
			if (w->flags & KV_WF_FIRING)
				return;
		}
	}
}

/* The key of wl now holds v: release barriers whose world it reached. */
static void
wl_barrier(struct kv *kv, struct kv_wlist *wl, struct slice v)
{
	struct kv_wlinks	*head = &wl->lists[KV_W_BARRIER];
	struct kv_wlink		*l, *tl;
	int64_t			 n, min = INT64_MAX;

	if (TAILQ_EMPTY(head) || parse_i64(v.p, v.len, &n) != 0 ||
	    n < wl->bar_min)
		return;
	TAILQ_FOREACH_SAFE(l, head, entry, tl) {
		if (l->w->world <= n) {
			link_disarm(l);
			fire_push(kv, l->w);
		} else if (l->w->world < min)
			min = l->w->world;
	}
	wl->bar_min = min;
}

static void
wl_watch(struct kv *kv, struct kv_wlist *wl, int kind, struct slice key,
    struct slice oldv, struct slice newv)
{
	struct kv_wlink	*l;

	if (TAILQ_EMPTY(&wl->lists[KV_W_WATCH]))
		return;
	kv->ev.kind = kind;
	kv->ev.key = key;
	kv->ev.oldv = oldv;
	kv->ev.newv = newv;
	TAILQ_FOREACH(l, &wl->lists[KV_W_WATCH], entry)
		fire_push(kv, l->w);
}

/* Ends a mutation of ns: runs what it fired, then collects ns if empty. */
static void
kv_leave(struct kv *kv, struct kv_ns *ns)
{
	kv_fire(kv);
	kv->busy = NULL;
	ns_gc(kv, ns);
	if (kv->scratchcap > KV_SCRATCH_KEEP) {
		free(kv->scratch);
		kv->scratch = NULL;
		kv->scratchcap = 0;
	}
}

/*
 * Stores v under key (after the current value when append); e is the
 * key's entry or NULL when missing, hv its hash.  Journals, then wakes.
 * *ep, when not NULL, is set to the entry.
 */
static int
kv_store(struct kv *kv, struct kv_ns *ns, struct slice nsname,
    struct slice key, unsigned hv, struct kv_entry *e, struct slice v,
    int append, struct kv_entry **ep)
{
	struct kv_wlist	*wl;
	struct slice	 oldv, newv;
	int		 created = (e == NULL), r;

	wl = wl_find(ns, key, hv);
	oldv = sl_make(kv_nul, 0);
	if (e == NULL) {
		if ((e = entry_new(ns, key, hv, v)) == NULL)
			return (RDZV_ENOMEM);
		kv->nkeys++;
	} else {
		/* Watchers are told the old value, which is overwritten. */
		if (wl != NULL && !TAILQ_EMPTY(&wl->lists[KV_W_WATCH])) {
			if (kv->scratchcap < e->vlen) {
				free(kv->scratch);
				kv->scratchcap = 0;
				if ((kv->scratch = malloc(e->vlen)) == NULL)
					return (RDZV_ENOMEM);
				kv->scratchcap = e->vlen;
			}
			if (e->vlen > 0) {
				memcpy(kv->scratch, e->val, e->vlen);
				oldv = sl_make(kv->scratch, e->vlen);
			}
		}
		if ((r = entry_write(e, append ? e->vlen : 0, v)) != 0)
			return (r);
	}
	if (ep != NULL)
		*ep = e;
	newv = sl_make(e->val, e->vlen);
	kv_journal(kv, KV_J_PUT, nsname, key, newv);
	if (wl == NULL)
		return (0);
	kv->busy = ns;
	wl_exists(kv, wl);
	wl_barrier(kv, wl, newv);
	wl_watch(kv, wl, created ? TCPS_WATCH_CREATED : TCPS_WATCH_UPDATED,
	    key, oldv, newv);
	kv_leave(kv, ns);
	return (0);
}

/* ---- the store ---- */

struct kv *
kv_new(void)
{
	struct kv	*kv;

	if ((kv = calloc(1, sizeof(*kv))) == NULL)
		return (NULL);
	TAILQ_INIT(&kv->firing);
	TAILQ_INIT(&kv->waiters);
	return (kv);
}

void
kv_free(struct kv *kv)
{
	struct kv_waiter	*w;
	struct kv_ns		*ns, *tns;
	struct kv_entry		*e, *te;
	struct kv_queue		*q, *tq;

	if (kv == NULL)
		return;
	/* Waiters first: freeing them frees every waiter list. */
	while ((w = TAILQ_FIRST(&kv->waiters)) != NULL)
		waiter_free(kv, w);
	HASH_ITER(hh, kv->nss, ns, tns) {
		HASH_ITER(hh, ns->keys, e, te) {
			HASH_DELETE(hh, ns->keys, e);
			entry_free(e);
		}
		HASH_ITER(hh, ns->queues, q, tq) {
			HASH_DELETE(hh, ns->queues, q);
			queue_free(q);
		}
		HASH_DELETE(hh, kv->nss, ns);
		free(ns);
	}
	free(kv->scratch);
	free(kv);
}

void
kv_set_journal(struct kv *kv, kv_journal_cb fn, void *arg)
{
	kv->jfn = fn;
	kv->jarg = arg;
}

/* kv_set (append 0) and kv_append (append 1). */
static int
kv_put(struct kv *kv, struct slice ns, struct slice key, struct slice value,
    int append)
{
	struct kv_ns	*nsp;
	unsigned	 hv;
	int		 r;

	ns = sl(ns);
	key = sl(key);
	value = sl(value);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (RDZV_ETOOBIG);
	if ((nsp = ns_get(kv, ns)) == NULL)
		return (RDZV_ENOMEM);
	hv = kv_hash(key);
	r = kv_store(kv, nsp, ns, key, hv, entry_find(nsp, key, hv), value,
	    append, NULL);
	if (r != 0)
		ns_gc(kv, nsp);
	return (r);
}

int
kv_set(struct kv *kv, struct slice ns, struct slice key, struct slice value)
{
	return (kv_put(kv, ns, key, value, 0));
}

int
kv_get(struct kv *kv, struct slice ns, struct slice key, struct slice *out)
{
	struct kv_ns	*nsp;
	struct kv_entry	*e;

	ns = sl(ns);
	key = sl(key);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (RDZV_ENOTFOUND);
	if ((nsp = ns_find(kv, ns)) == NULL ||
	    (e = entry_find(nsp, key, kv_hash(key))) == NULL)
		return (RDZV_ENOTFOUND);
	*out = sl_make(e->val, e->vlen);
	return (0);
}

int
kv_add(struct kv *kv, struct slice ns, struct slice key, int64_t delta,
    int64_t *out)
{
	struct kv_ns	*nsp;
	struct kv_entry	*e;
	uint8_t		 buf[24];
	int64_t		 cur = 0, nv = 0;
	unsigned	 hv;
	int		 r;

	ns = sl(ns);
	key = sl(key);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (RDZV_ETOOBIG);
	if ((nsp = ns_get(kv, ns)) == NULL)
		return (RDZV_ENOMEM);
	hv = kv_hash(key);
	e = entry_find(nsp, key, hv);
	r = 0;
	if (e != NULL && parse_i64(e->val, e->vlen, &cur) != 0)
		r = RDZV_ENOTINT;
	else if (__builtin_add_overflow(cur, delta, &nv))
		r = RDZV_EINVAL;
	else
		r = kv_store(kv, nsp, ns, key, hv, e,
		    sl_make(buf, fmt_i64(buf, nv)), 0, NULL);
	if (r != 0) {
		ns_gc(kv, nsp);
		return (r);
	}
	if (out != NULL)
		*out = nv;
	return (0);
}

int
kv_cas(struct kv *kv, struct slice ns, struct slice key,
    struct slice expected, struct slice desired, struct slice *out)
{
	struct kv_ns	*nsp;
	struct kv_entry	*e;
	unsigned	 hv;
	int		 r;

	ns = sl(ns);
	key = sl(key);
	expected = sl(expected);
	desired = sl(desired);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (RDZV_ETOOBIG);
	hv = kv_hash(key);
	nsp = ns_find(kv, ns);
	e = nsp != NULL ? entry_find(nsp, key, hv) : NULL;
	if (e == NULL) {
		/* Missing: only an empty expectation creates it. */
		if (expected.len != 0) {
			*out = expected;
			return (0);
		}
		if (nsp == NULL && (nsp = ns_get(kv, ns)) == NULL)
			return (RDZV_ENOMEM);
	} else if (e->vlen != expected.len ||
	    memcmp(e->val, expected.p, expected.len) != 0) {
		*out = sl_make(e->val, e->vlen);
		return (0);
	}
	r = kv_store(kv, nsp, ns, key, hv, e, desired, 0, &e);
	if (r != 0) {
		ns_gc(kv, nsp);
		return (r);
	}
	*out = sl_make(e->val, e->vlen);
	return (0);
}

int
kv_append(struct kv *kv, struct slice ns, struct slice key, struct slice value)
{
	return (kv_put(kv, ns, key, value, 1));
}

int
kv_delete(struct kv *kv, struct slice ns, struct slice key)
{
	struct kv_ns	*nsp;
	struct kv_entry	*e;
	struct kv_wlist	*wl;
	unsigned	 hv;

	ns = sl(ns);
	key = sl(key);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (0);
	hv = kv_hash(key);
	if ((nsp = ns_find(kv, ns)) == NULL ||
	    (e = entry_find(nsp, key, hv)) == NULL)
		return (0);
	HASH_DELETE(hh, nsp->keys, e);
	kv->nkeys--;
	kv_journal(kv, KV_J_DEL, ns, key, sl_make(kv_nul, 0));
	/*
	 * Existence waits satisfied by this key are not touched: they look
	 * again before firing.  Watchers see the old value, so the entry
	 * lives until they have run.
	 */
	kv->busy = nsp;
	if ((wl = wl_find(nsp, key, hv)) != NULL)
		wl_watch(kv, wl, TCPS_WATCH_DELETED, key,
		    sl_make(e->val, e->vlen), sl_make(kv_nul, 0));
	kv_leave(kv, nsp);
	entry_free(e);
	return (1);
}

int64_t
kv_num_keys(struct kv *kv, struct slice ns)
{
	struct kv_ns	*nsp;

	ns = sl(ns);
	if (ns.len > KV_LEN_MAX || (nsp = ns_find(kv, ns)) == NULL)
		return (0);
	return ((int64_t)HASH_COUNT(nsp->keys));
}

int64_t
kv_total_keys(const struct kv *kv)
{
	return (kv->nkeys);
}

int64_t
kv_total_waiters(const struct kv *kv)
{
	return (kv->nwaiters);
}

int
kv_check(struct kv *kv, struct slice ns, const struct slice *keys, size_t n)
{
	struct kv_ns	*nsp;
	struct slice	 key;
	size_t		 i;

	ns = sl(ns);
	if (n == 0)
		return (1);
	if (ns.len > KV_LEN_MAX || (nsp = ns_find(kv, ns)) == NULL)
		return (0);
	for (i = 0; i < n; i++) {
		key = sl(keys[i]);
		if (key.len > KV_LEN_MAX || !name_exists(nsp, key, kv_hash(key)))
			return (0);
	}
	return (1);
}

int64_t
kv_list(struct kv *kv, struct slice ns, void (*fn)(void *, struct slice),
    void *arg)
{
	struct kv_ns	*nsp;
	struct kv_entry	*e, *te;
	int64_t		 n = 0;

	ns = sl(ns);
	if (ns.len > KV_LEN_MAX || (nsp = ns_find(kv, ns)) == NULL)
		return (0);
	HASH_ITER(hh, nsp->keys, e, te) {
		fn(arg, sl_make(e->buf, e->keylen));
		n++;
	}
	return (n);
}

int64_t
kv_ns_list(struct kv *kv, struct slice prefix,
    void (*fn)(void *, struct slice), void *arg)
{
	struct kv_ns	*nsp, *tns;
	int64_t		 n = 0;

	prefix = sl(prefix);
	HASH_ITER(hh, kv->nss, nsp, tns) {
		/* A namespace that only has waiters holds nothing to list. */
		if (nsp->keys == NULL && nsp->queues == NULL)
			continue;
		if (nsp->namelen < prefix.len ||
		    memcmp(nsp->name, prefix.p, prefix.len) != 0)
			continue;
		fn(arg, sl_make(nsp->name, nsp->namelen));
		n++;
	}
	return (n);
}

int
kv_ns_drop(struct kv *kv, struct slice ns)
{
	struct kv_ns	*nsp;
	struct kv_entry	*keys, *e, *te;
	struct kv_queue	*q, *tq;
	struct kv_wlist	*wl;
	unsigned	 hv;

	ns = sl(ns);
	if (ns.len > KV_LEN_MAX || (nsp = ns_find(kv, ns)) == NULL)
		return (0);
	kv->busy = nsp;
	/* Detach the keys so the drop is applied before anyone is told. */
	keys = nsp->keys;
	nsp->keys = NULL;
	kv->nkeys -= (int64_t)HASH_COUNT(keys);
	HASH_ITER(hh, nsp->queues, q, tq) {
		HASH_DELETE(hh, nsp->queues, q);
		queue_free(q);
	}
	kv_journal(kv, KV_J_NSDROP, ns, sl_make(kv_nul, 0), sl_make(kv_nul, 0));
	HASH_ITER(hh, keys, e, te) {
		hv = e->hh.hashv;
		HASH_DELETE(hh, keys, e);
		wl = wl_find(nsp, sl_make(e->buf, e->keylen), hv);
		if (wl != NULL) {
			wl_watch(kv, wl, TCPS_WATCH_DELETED,
			    sl_make(e->buf, e->keylen),
			    sl_make(e->val, e->vlen), sl_make(kv_nul, 0));
			kv_fire(kv);
		}
		entry_free(e);
	}
	kv_leave(kv, nsp);
	return (0);
}

/* ---- queues ---- */

int
kv_qpush(struct kv *kv, struct slice ns, struct slice key, struct slice value)
{
	struct kv_ns		*nsp;
	struct kv_queue		*q;
	struct kv_item		*it;
	struct kv_wlist		*wl;
	struct kv_wlink		*l;
	struct kv_waiter	*w;
	uint8_t			*item;
	unsigned		 hv;

	ns = sl(ns);
	key = sl(key);
	value = sl(value);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (RDZV_ETOOBIG);
	if ((nsp = ns_get(kv, ns)) == NULL)
		return (RDZV_ENOMEM);
	hv = kv_hash(key);
	wl = wl_find(nsp, key, hv);
	if (wl != NULL && (l = TAILQ_FIRST(&wl->lists[KV_W_POP])) != NULL) {
		/*
		 * The oldest pop waiter takes the item straight away; the
		 * journal still sees it pushed and popped.
		 */
		if ((item = malloc(value.len == 0 ? 1 : value.len)) == NULL)
			return (RDZV_ENOMEM);
		memcpy(item, value.p, value.len);
		w = l->w;
		link_disarm(l);
		kv_journal(kv, KV_J_QPUSH, ns, key, value);
		kv_journal(kv, KV_J_QPOP, ns, key, sl_make(kv_nul, 0));
		kv->busy = nsp;
		w->flags |= KV_WF_RUNNING;
		w->cb.pop(w, w->arg, item, value.len);
		w->flags &= ~KV_WF_RUNNING;
		waiter_free(kv, w);
		kv_leave(kv, nsp);
		return (0);
	}
	if (value.len > SIZE_MAX - sizeof(*it) ||
	    (it = malloc(sizeof(*it) + value.len)) == NULL) {
		ns_gc(kv, nsp);
		return (RDZV_ENOMEM);
	}
	if ((q = queue_get(nsp, key, hv)) == NULL) {
		free(it);
		ns_gc(kv, nsp);
		return (RDZV_ENOMEM);
	}
	it->len = value.len;
	memcpy(it->data, value.p, value.len);
	STAILQ_INSERT_TAIL(&q->items, it, link);
	q->len++;
	kv_journal(kv, KV_J_QPUSH, ns, key, value);
	if (wl != NULL) {
		kv->busy = nsp;
		wl_exists_one(kv, wl);
		kv_leave(kv, nsp);
	}
	return (0);
}

int
kv_qpop(struct kv *kv, struct slice ns, struct slice key, uint8_t **out,
    size_t *outlen)
{
	struct kv_ns	*nsp;
	struct kv_queue	*q;
	struct kv_item	*it;
	size_t		 len;

	ns = sl(ns);
	key = sl(key);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (RDZV_ENOTFOUND);
	if ((nsp = ns_find(kv, ns)) == NULL ||
	    (q = queue_find(nsp, key, kv_hash(key))) == NULL)
		return (RDZV_ENOTFOUND);
	it = STAILQ_FIRST(&q->items);
	STAILQ_REMOVE_HEAD(&q->items, link);
	if (--q->len == 0) {
		HASH_DELETE(hh, nsp->queues, q);
		free(q);
	}
	/* The item's own allocation becomes the caller's buffer. */
	len = it->len;
	memmove(it, it->data, len);
	*out = (uint8_t *)it;
	*outlen = len;
	kv_journal(kv, KV_J_QPOP, ns, key, sl_make(kv_nul, 0));
	ns_gc(kv, nsp);
	return (0);
}

int64_t
kv_qlen(struct kv *kv, struct slice ns, struct slice key)
{
	struct kv_ns	*nsp;
	struct kv_queue	*q;

	ns = sl(ns);
	key = sl(key);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (0);
	if ((nsp = ns_find(kv, ns)) == NULL ||
	    (q = queue_find(nsp, key, kv_hash(key))) == NULL)
		return (0);
	return (q->len);
}

/* ---- waiting ---- */

int
kv_wait(struct kv *kv, struct slice ns, const struct slice *keys, size_t n,
    kv_wake_cb fn, void *arg, struct kv_waiter **wp)
{
	struct kv_ns		*nsp;
	struct kv_waiter	*w;
	struct slice		 key;
	unsigned		 hv;
	size_t			 i;

	*wp = NULL;
	ns = sl(ns);
	if (ns.len > KV_LEN_MAX)
		return (RDZV_ETOOBIG);
	for (i = 0; i < n; i++)
		if (keys[i].len > KV_LEN_MAX)
			return (RDZV_ETOOBIG);
	/* The common case registers nothing: stop at the first missing. */
	if (kv_check(kv, ns, keys, n))
		return (1);
	if ((nsp = ns_get(kv, ns)) == NULL)
		return (RDZV_ENOMEM);
	if ((w = waiter_alloc(kv, nsp, KV_W_WAIT, n, arg)) == NULL) {
		ns_gc(kv, nsp);
		return (RDZV_ENOMEM);
	}
	w->cb.wake = fn;
	for (i = 0; i < n; i++) {
		key = sl(keys[i]);
		hv = kv_hash(key);
		if (waiter_add_link(w, key, hv) != 0) {
			waiter_free(kv, w);
			return (RDZV_ENOMEM);
		}
		if (!name_exists(nsp, key, hv)) {
			link_arm(&w->links[i]);
			w->missing++;
		}
	}
	*wp = w;
	return (0);
}

/*
 * A waiter of kind on one key of ns (the namespace made if needed), not
 * yet armed.  Returns it, or NULL (RDZV_ENOMEM: nothing left behind).
 */
static struct kv_waiter *
waiter_single(struct kv *kv, struct slice ns, struct slice key,
    enum kv_wkind kind, void *arg)
{
	struct kv_ns		*nsp;
	struct kv_waiter	*w;

	if ((nsp = ns_get(kv, ns)) == NULL)
		return (NULL);
	if ((w = waiter_alloc(kv, nsp, kind, 1, arg)) == NULL) {
		ns_gc(kv, nsp);
		return (NULL);
	}
	if (waiter_add_link(w, key, kv_hash(key)) != 0) {
		waiter_free(kv, w);
		return (NULL);
	}
	return (w);
}

int
kv_barrier(struct kv *kv, struct slice ns, struct slice key, int64_t world,
    kv_wake_cb fn, void *arg, struct kv_waiter **wp)
{
	struct kv_waiter	*w;
	struct kv_wlist		*wl;
	int64_t			 v;
	int			 r;

	*wp = NULL;
	ns = sl(ns);
	key = sl(key);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (RDZV_ETOOBIG);
	/*
	 * The waiter is made before the add so that a failure cannot leave
	 * the counter bumped for a participant that is not waiting.
	 */
	if ((w = waiter_single(kv, ns, key, KV_W_BARRIER, arg)) == NULL)
		return (RDZV_ENOMEM);
	w->cb.wake = fn;
	w->world = world;
	if ((r = kv_add(kv, ns, key, 1, &v)) != 0 || v >= world) {
		waiter_free(kv, w);
		return (r != 0 ? r : 1);
	}
	wl = w->links[0].wl;
	if (TAILQ_EMPTY(&wl->lists[KV_W_BARRIER]) || world < wl->bar_min)
		wl->bar_min = world;
	link_arm(&w->links[0]);
	*wp = w;
	return (0);
}

int
kv_qpop_wait(struct kv *kv, struct slice ns, struct slice key,
    uint8_t **out, size_t *outlen, kv_pop_cb fn, void *arg,
    struct kv_waiter **wp)
{
	struct kv_waiter	*w;
	int			 r;

	*wp = NULL;
	ns = sl(ns);
	key = sl(key);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (RDZV_ETOOBIG);
	if ((r = kv_qpop(kv, ns, key, out, outlen)) == 0)
		return (1);
	if (r != RDZV_ENOTFOUND)
		return (r);
	if ((w = waiter_single(kv, ns, key, KV_W_POP, arg)) == NULL)
		return (RDZV_ENOMEM);
	w->cb.pop = fn;
	link_arm(&w->links[0]);
	*wp = w;
	return (0);
}

int
kv_watch(struct kv *kv, struct slice ns, struct slice key, kv_watch_cb fn,
    void *arg, struct kv_waiter **wp)
{
	struct kv_waiter	*w;

	*wp = NULL;
	ns = sl(ns);
	key = sl(key);
	if (ns.len > KV_LEN_MAX || key.len > KV_LEN_MAX)
		return (RDZV_ETOOBIG);
	if ((w = waiter_single(kv, ns, key, KV_W_WATCH, arg)) == NULL)
		return (RDZV_ENOMEM);
	w->cb.watch = fn;
	link_arm(&w->links[0]);
	*wp = w;
	return (0);
}

void
kv_waiter_cancel(struct kv *kv, struct kv_waiter *w)
{
	if (w == NULL)
		return;
	/* A waiter whose callback is running is freed when it returns. */
	if (w->flags & KV_WF_RUNNING) {
		w->flags |= KV_WF_CANCELED;
		if (w->kind == KV_W_WATCH && w->links[0].armed)
			link_disarm(&w->links[0]);
		return;
	}
	waiter_free(kv, w);
}
