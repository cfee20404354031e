/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_etcd.c: the etcd backend of the store (contract in store.h and
 * store_impl.h) and rdzvd's leadership over it.
 *
 * Several rdzvds point at one etcd cluster; the one holding the leader key
 * serves, the others wait in store_etcd_lead().  Every transaction the
 * leader commits is fenced on that key's create revision, so a leader
 * whose lease ran out (paused, partitioned) can never commit again: it
 * learns so from its next commit or keepalive and exits at once, without
 * sending a reply that waits on a commit.
 *
 * Leadership states (store_etcd_lead() runs the first two on the calling
 * thread, store_etcd_serve() the third on the loop's; the keepalive
 * thread and the writer run the last):
 *
 *   WATCH --leader key absent--> CAMPAIGN            (store_etcd_watch)
 *   WATCH --etcd unreachable--> WATCH (logged, polled again)
 *   CAMPAIGN --txn "create if absent" won--> LOAD    (store_etcd_campaign)
 *   CAMPAIGN --lost the race--> WATCH
 *   LOAD --state read--> LEAD                        (store_etcd_load)
 *   LEAD --keepalive refused, lease past its local deadline, or a
 *          fenced txn not succeeded--> exit 75       (store_etcd_deposed)
 *
 * Keys under the prefix P (default "/rdzv/"):
 *   P "leader"                     leader's JSON, attached to its lease
 *   P "elections"                  how many rdzvds have led, in decimal
 *   P "kv/" hex(ns) "/" key        a kv key's value
 *   P "q/" hex(ns) "/" hex(key) "/" %016x seq   a queue item
 * Queue sequence numbers are kept by the writer alone (head and tail per
 * queue), so a push and a pop are a put and a delete of known keys.
 *
 * A batch becomes as many transactions as etcd's limits need (ops per
 * txn, request bytes); a key written twice in one txn keeps its last
 * write (etcd refuses duplicates), and a namespace drop (a range delete)
 * starts a txn of its own.  When a txn fails the whole batch is offered
 * again; every op is a plain overwrite with the same sequence numbers
 * (the queue counters are rolled back), so replaying a committed prefix
 * changes nothing.
 *
 * etcd keeps every revision until compacted.  That is the operator's to
 * do (etcd's --auto-compaction-mode and -retention): a compaction spans
 * the whole keyspace, other clients' watch history too (etcd 3.4 lets
 * even a user whose role covers a prefix alone do it).  With
 * --etcd-compact-interval the keepalive thread compacts up to the
 * revision it saw one interval earlier; a refusal is logged at warning,
 * naming both ways out.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <uthash.h>

#include "etcd.h"
#include "log.h"
#include "mono.h"
#include "rdzv_err.h"
#include "store_impl.h"

/* etcd's defaults: --max-txn-ops 128, --max-request-bytes 1.5 MiB. */
#define ETCD_TXN_OPS_MAX	128
#define ETCD_TXN_BYTES_MAX	(1024U * 1024)
#define ETCD_RANGE_PAGE		128	/* values up to 1 MiB: bounded answers */
#define ETCD_UNREACHABLE_LOG_MS	5000
#define STORE_ETCD_EXIT		75	/* EX_TEMPFAIL: restart as standby */

/* One queue's counters; the hash key is hex(ns) "/" hex(key). */
struct etcd_queue {
	UT_hash_handle	 hh;
	uint64_t	 head;		/* seq of the oldest item */
	uint64_t	 tail;		/* seq of the newest; head = tail + 1: empty */
	uint64_t	 saved_head, saved_tail;
	uint64_t	 gen;		/* batch that saved them */
	char		 stem[];
};

/* The transaction being built. */
struct etcd_txn {
	json_t		*ops;
	struct etcd_txkey *keys;	/* op index by etcd key */
	char		*range;		/* a range delete's prefix, or NULL */
	size_t		 rangelen;
	size_t		 bytes;
};

struct etcd_txkey {
	UT_hash_handle	 hh;
	size_t		 idx;
	size_t		 len;
	char		 key[];
};

struct store_etcd {
	struct etcd_conf	 ec;
	char			*prefix;
	size_t			 prefixlen;
	json_t			*fence;		/* the compare of every txn */
	struct etcd		*wr;		/* the writer thread's client */
	struct etcd		*ka;		/* the keepalive thread's */
	int64_t			 lease;
	int64_t			 lease_ttl;	/* seconds, as granted */
	int64_t			 term;		/* leader key's create revision */
	unsigned		 ttl_ms;
	int64_t			 compact_ms;	/* 0: never compacts */

	struct etcd_queue	*queues;
	struct etcd_queue	**touched;	/* queues saved in this batch */
	size_t			 ntouched, touchedcap;
	uint64_t		 gen;

	pthread_t		 ka_thread;
	int			 ka_started;
	pthread_mutex_t		 ka_mtx;	/* with ka_cond: wakes it to stop */
	pthread_cond_t		 ka_cond;
	_Atomic int		 stop;
	_Atomic int64_t		 revision;	/* last committed */
	int64_t			 deadline_us;	/* lease sure until (ka thread) */
};

static struct store_etcd_status	 etcd_status;
static pthread_mutex_t		 etcd_status_mtx = PTHREAD_MUTEX_INITIALIZER;

static void
store_etcd_sleep_ms(unsigned ms)
{
	struct timespec	ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* Sleeps ms on the keepalive thread, or until close asks it to stop. */
static void
store_etcd_ka_sleep(struct store_etcd *se, unsigned ms)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	store_timespec_add_ms(&ts, ms);
	pthread_mutex_lock(&se->ka_mtx);
	while (!atomic_load(&se->stop) &&
	    pthread_cond_timedwait(&se->ka_cond, &se->ka_mtx, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&se->ka_mtx);
}

/*
 * Leadership is gone, or may be: nothing more may leave this process.
 * Exits at once (no atexit handlers, no flush of held replies).
 */
static void __attribute__((noreturn))
store_etcd_deposed(const char *why)
{
	log_warnx("etcd: no longer the leader (%s): exiting without sending "
	    "replies that wait on a commit; run rdzvd again (a supervisor "
	    "restarts it) to stand by", why);
	fflush(NULL);
	_exit(STORE_ETCD_EXIT);
}

/* A JSON base64 string of prefix + s[0..n). */
static json_t *
store_etcd_key(const struct store_etcd *se, const char *s, size_t n)
{
	char	*buf;
	json_t	*j;

	if ((buf = malloc(se->prefixlen + n + 1)) == NULL)
		return NULL;
	memcpy(buf, se->prefix, se->prefixlen);
	memcpy(buf + se->prefixlen, s, n);
	j = etcd_b64(buf, se->prefixlen + n);
	free(buf);
	return j;
}

/* The first key after every key that starts with p[0..n). */
static json_t *
store_etcd_range_end(const struct store_etcd *se, const char *p, size_t n)
{
	char	*buf;
	size_t	 len = se->prefixlen + n;
	json_t	*j;

	if ((buf = malloc(len)) == NULL)
		return NULL;
	memcpy(buf, se->prefix, se->prefixlen);
	memcpy(buf + se->prefixlen, p, n);
	/* Prefixes here end in '/', never 0xff. */
	buf[len - 1]++;
	j = etcd_b64(buf, len);
	free(buf);
	return j;
}

static void
store_etcd_hex(char *out, const uint8_t *p, size_t n)
{
	static const char	digits[] = "0123456789abcdef";
	size_t			i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

static int
store_etcd_unhex(const char *s, size_t n, uint8_t *out)
{
	size_t	i;
	int	hi, lo;

	if (n % 2 != 0)
		return -1;
	for (i = 0; i < n; i += 2) {
		hi = s[i] >= 'a' ? s[i] - 'a' + 10 : s[i] - '0';
		lo = s[i + 1] >= 'a' ? s[i + 1] - 'a' + 10 : s[i + 1] - '0';
		if (hi < 0 || hi > 15 || lo < 0 || lo > 15)
			return -1;
		out[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* Forgets the keys and range of the txn being built (not its ops). */
static void
store_etcd_txn_reset(struct etcd_txn *t)
{
	struct etcd_txkey	*k, *k1;

	HASH_ITER(hh, t->keys, k, k1) {
		HASH_DEL(t->keys, k);
		free(k);
	}
	free(t->range);
	t->range = NULL;
	t->bytes = 0;
}

/* Sends the transaction built so far, fenced; empties it. */
static int
store_etcd_txn_flush(struct store_etcd *se, struct etcd_txn *t)
{
	json_t			*req, *resp;
	int			 rc;

	store_etcd_txn_reset(t);
	if (json_array_size(t->ops) == 0)
		return 0;
	req = json_pack("{s:O, s:o}", "compare", se->fence, "success", t->ops);
	t->ops = json_array();
	if (req == NULL || t->ops == NULL)
		return RDZV_ENOMEM;
	if ((rc = etcd_call(se->wr, "/v3/kv/txn", req, &resp)) != 0) {
		log_warnx("etcd: commit failed: %s", etcd_errmsg(se->wr));
		return rc;
	}
	if (!json_is_true(json_object_get(resp, "succeeded"))) {
		json_decref(resp);
		store_etcd_deposed("a commit found another leader's key");
	}
	atomic_store(&se->revision, etcd_int(json_object_get(resp, "header"),
	    "revision", 0));
	json_decref(resp);
	return 0;
}

/*
 * Adds one op on etcd key (prefix + key[0..keylen)); a range delete when
 * range is set (key is then the range's prefix).  Flushes first when the
 * txn is full or the key clashes with a range deleted in it.
 */
static int
store_etcd_txn_add(struct store_etcd *se, struct etcd_txn *t,
    const char *key, size_t keylen, const uint8_t *val, size_t vallen,
    int put, int range)
{
	struct etcd_txkey	*k = NULL;
	json_t			*jk, *jv = NULL, *op;
	size_t			 cost = se->prefixlen + keylen + vallen + 32;
	int			 rc;

	if (!range)
		HASH_FIND(hh, t->keys, key, keylen, k);
	if (range || (k == NULL && (json_array_size(t->ops) >=
	    ETCD_TXN_OPS_MAX || t->bytes + cost > ETCD_TXN_BYTES_MAX)) ||
	    (t->range != NULL && keylen >= t->rangelen &&
	    memcmp(key, t->range, t->rangelen) == 0)) {
		if ((rc = store_etcd_txn_flush(se, t)) != 0)
			return rc;
		k = NULL;
	}
	if ((jk = store_etcd_key(se, key, keylen)) == NULL ||
	    (put && (jv = etcd_b64(val, vallen)) == NULL))
		goto nomem;
	if (put)
		op = json_pack("{s:{s:o, s:o}}", "request_put", "key", jk,
		    "value", jv);
	else if (range)
		op = json_pack("{s:{s:o, s:o}}", "request_delete_range", "key",
		    jk, "range_end", store_etcd_range_end(se, key, keylen));
	else
		op = json_pack("{s:{s:o}}", "request_delete_range", "key", jk);
	if (op == NULL)
		return RDZV_ENOMEM;
	if (k != NULL) {
		/* The txn is atomic: the last write of a key is all that
		 * anyone can see of it. */
		json_array_set_new(t->ops, k->idx, op);
		t->bytes += cost;
		return 0;
	}
	if (range) {
		if ((t->range = malloc(keylen)) == NULL) {
			json_decref(op);
			return RDZV_ENOMEM;
		}
		memcpy(t->range, key, keylen);
		t->rangelen = keylen;
	} else {
		if ((k = malloc(sizeof *k + keylen)) == NULL) {
			json_decref(op);
			return RDZV_ENOMEM;
		}
		k->idx = json_array_size(t->ops);
		k->len = keylen;
		memcpy(k->key, key, keylen);
		HASH_ADD(hh, t->keys, key, keylen, k);
	}
	json_array_append_new(t->ops, op);
	t->bytes += cost;
	return 0;

nomem:
	json_decref(jk);
	json_decref(jv);
	return RDZV_ENOMEM;
}

/* Finds (or makes) a queue and saves its counters once per batch. */
static struct etcd_queue *
store_etcd_queue(struct store_etcd *se, const char *stem, size_t stemlen)
{
	struct etcd_queue	*q, **nt;
	size_t			 cap;

	HASH_FIND(hh, se->queues, stem, stemlen, q);
	if (q == NULL) {
		if ((q = calloc(1, sizeof *q + stemlen + 1)) == NULL)
			return NULL;
		q->head = 1;
		memcpy(q->stem, stem, stemlen);
		HASH_ADD(hh, se->queues, stem[0], stemlen, q);
	}
	if (q->gen != se->gen) {
		if (se->ntouched == se->touchedcap) {
			cap = se->touchedcap == 0 ? 16 : se->touchedcap * 2;
			if ((nt = reallocarray(se->touched, cap,
			    sizeof *nt)) == NULL)
				return NULL;
			se->touched = nt;
			se->touchedcap = cap;
		}
		se->touched[se->ntouched++] = q;
		q->saved_head = q->head;
		q->saved_tail = q->tail;
		q->gen = se->gen;
	}
	return q;
}

/* Writes kind ("kv/" or "q/") hex(ns) "/" into buf; returns its length. */
static size_t
store_etcd_stem(char *buf, const char *kind, const struct store_rec *r)
{
	size_t	n = strlen(kind);

	memcpy(buf, kind, n);
	store_etcd_hex(buf + n, STORE_REC_NS(r), r->nslen);
	buf[n + 2 * r->nslen] = '/';
	return n + 2 * r->nslen + 1;
}

/* The ops of one journal record. */
static int
store_etcd_apply_one(struct store_etcd *se, struct etcd_txn *t,
    const struct store_rec *r)
{
	struct etcd_queue	*q, *q1;
	char			*buf;
	size_t			 nh = 2 * r->nslen, n;
	int			 rc;

	/* "q/" hex(ns) "/" hex(key) "/" 16 digits, the longest form. */
	if ((buf = malloc(2 + nh + 1 + 2 * r->keylen + 1 + 16 + 1 +
	    r->keylen)) == NULL)
		return RDZV_ENOMEM;
	switch (r->op) {
	case KV_J_PUT:
	case KV_J_DEL:
		n = store_etcd_stem(buf, "kv/", r);
		memcpy(buf + n, STORE_REC_KEY(r), r->keylen);
		rc = store_etcd_txn_add(se, t, buf, n + r->keylen,
		    STORE_REC_VAL(r), r->vallen, r->op == KV_J_PUT, 0);
		break;
	case KV_J_QPUSH:
	case KV_J_QPOP:
		n = store_etcd_stem(buf, "q/", r);
		store_etcd_hex(buf + n, STORE_REC_KEY(r), r->keylen);
		n += 2 * r->keylen;
		if ((q = store_etcd_queue(se, buf + 2, n - 2)) == NULL) {
			rc = RDZV_ENOMEM;
			break;
		}
		if (r->op == KV_J_QPUSH)
			q->tail++;
		n += (size_t)sprintf(buf + n, "/%016llx", (unsigned long long)
		    (r->op == KV_J_QPUSH ? q->tail : q->head));
		if (r->op == KV_J_QPOP && q->head <= q->tail)
			q->head++;
		rc = store_etcd_txn_add(se, t, buf, n, STORE_REC_VAL(r),
		    r->vallen, r->op == KV_J_QPUSH, 0);
		break;
	case KV_J_NSDROP:
		n = store_etcd_stem(buf, "kv/", r);
		if ((rc = store_etcd_txn_add(se, t, buf, n, NULL, 0, 0, 1)) !=
		    0)
			break;
		n = store_etcd_stem(buf, "q/", r);
		if ((rc = store_etcd_txn_add(se, t, buf, n, NULL, 0, 0, 1)) !=
		    0)
			break;
		/* Every queue of the namespace is empty now. */
		HASH_ITER(hh, se->queues, q, q1) {
			if (strncmp(q->stem, buf + 2, nh + 1) != 0)
				continue;
			if (store_etcd_queue(se, q->stem, strlen(q->stem)) ==
			    NULL) {
				rc = RDZV_ENOMEM;
				break;
			}
			q->head = q->tail + 1;
		}
		break;
	default:
		fatalx("store: bad journal op %d", (int)r->op);
	}
	free(buf);
	return rc;
}

static int
store_etcd_apply(void *arg, const struct store_recs *batch)
{
	struct store_etcd	*se = arg;
	struct etcd_txn		 t;
	struct store_rec	*r;
	struct etcd_queue	*q;
	size_t			 i;
	int			 rc = 0;

	memset(&t, 0, sizeof t);
	if ((t.ops = json_array()) == NULL)
		return RDZV_ENOMEM;
	se->gen++;
	se->ntouched = 0;
	STAILQ_FOREACH(r, batch, entry) {
		if ((rc = store_etcd_apply_one(se, &t, r)) != 0)
			break;
	}
	if (rc == 0)
		rc = store_etcd_txn_flush(se, &t);
	store_etcd_txn_reset(&t);
	json_decref(t.ops);
	for (i = 0; i < se->ntouched; i++) {
		q = se->touched[i];
		if (rc != 0) {
			/* Offered again: the same items get the same keys. */
			q->head = q->saved_head;
			q->tail = q->saved_tail;
		} else if (q->head > q->tail) {
			HASH_DEL(se->queues, q);
			free(q);
		}
	}
	se->ntouched = 0;
	return rc;
}

/* Records what /metrics and the status page show. */
static void
store_etcd_status_set(int leader, int64_t term, const char *who)
{
	pthread_mutex_lock(&etcd_status_mtx);
	etcd_status.enabled = 1;
	etcd_status.leader = leader;
	if (term != 0)
		etcd_status.term = term;
	if (who != NULL)
		strlcpy(etcd_status.leader_info, who,
		    sizeof etcd_status.leader_info);
	pthread_mutex_unlock(&etcd_status_mtx);
}

void
store_etcd_get_status(struct store_etcd_status *out)
{
	pthread_mutex_lock(&etcd_status_mtx);
	*out = etcd_status;
	pthread_mutex_unlock(&etcd_status_mtx);
}

/*
 * Compacts etcd's history up to rev (--etcd-compact-interval).  A
 * failure is a warning naming the fix the first time (refused 0), then
 * debug until one succeeds.  Returns whether this one failed.
 */
static int
store_etcd_compact(struct store_etcd *se, int64_t rev, int refused)
{
	json_t	*req, *resp;
	char	 secs[32];

	req = json_pack("{s:I}", "revision", (json_int_t)rev);
	if (req != NULL && etcd_call(se->ka, "/v3/kv/compaction", req,
	    &resp) == 0) {
		json_decref(resp);
		if (refused)
			log_info("etcd: compaction to revision %lld done",
			    (long long)rev);
		return 0;
	}
	snprintf(secs, sizeof secs, "%lld", (long long)(se->compact_ms / 1000));
	if (!refused)
		log_warnx("etcd: compaction to revision %lld failed: %s.  "
		    "--etcd-compact-interval %s compacts all of etcd: grant "
		    "rdzvd's etcd user a role etcd lets compact, or set "
		    "--etcd-compact-interval 0 and leave compaction to etcd's "
		    "--auto-compaction-mode and --auto-compaction-retention",
		    (long long)rev, etcd_errmsg(se->ka), secs);
	else
		log_debug("etcd: compaction to revision %lld failed: %s",
		    (long long)rev, etcd_errmsg(se->ka));
	return 1;
}

/*
 * Keeps the lease alive every third of its TTL.  The lease is sure only
 * until the last successful keepalive's send time plus the TTL: past
 * that, another rdzvd may lead, so this one leaves.
 */
static void *
store_etcd_keepalive(void *arg)
{
	struct store_etcd	*se = arg;
	json_t			*req, *resp, *res;
	int64_t			 t0, now, ttl, compact_at, seen_rev = 0, rev;
	int64_t			 left;
	unsigned		 every = (unsigned)(se->lease_ttl * 1000 / 3), nap;
	int			 rc, refused = 0;

	compact_at = mono_us() + se->compact_ms * 1000LL;
	while (!atomic_load(&se->stop)) {
		now = mono_us();
		if (now >= se->deadline_us)
			store_etcd_deposed("the leader lease ran out: etcd "
			    "unreachable, or this process was paused");
		t0 = now;
		/* A member that does not answer must not hold this thread
		 * past the deadline: the loop serves until it exits. */
		left = (se->deadline_us - now) / 1000;
		etcd_set_budget(se->ka, left < every ? (unsigned)left + 1 :
		    every);
		req = json_pack("{s:I}", "ID", (json_int_t)se->lease);
		rc = req != NULL ? etcd_call(se->ka, "/v3/lease/keepalive", req,
		    &resp) : RDZV_ENOMEM;
		if (rc == 0) {
			res = json_object_get(resp, "result");
			ttl = etcd_int(res, "TTL", 0);
			json_decref(resp);
			if (ttl <= 0)
				store_etcd_deposed("etcd says the leader lease "
				    "has expired");
			se->deadline_us = t0 + ttl * 1000000;
		} else
			log_warnx("etcd: leader lease keepalive failed (%lld "
			    "ms left): %s", (long long)(se->deadline_us -
			    mono_us()) / 1000, etcd_errmsg(se->ka));
		etcd_set_budget(se->ka, every);
		if (se->compact_ms > 0 && mono_us() >= compact_at) {
			/* What the last interval wrote stays readable for
			 * one more interval. */
			rev = atomic_load(&se->revision);
			if (seen_rev > 0)
				refused = store_etcd_compact(se, seen_rev,
				    refused);
			seen_rev = rev;
			compact_at = mono_us() + se->compact_ms * 1000LL;
		}
		/* Wake by the deadline, to leave the moment it passes. */
		nap = rc == 0 ? every : every / 4 + 1;
		left = (se->deadline_us - mono_us()) / 1000 + 1;
		store_etcd_ka_sleep(se, left < 1 ? 1 : left < nap ?
		    (unsigned)left : nap);
	}
	return NULL;
}

/* Range of every key under prefix + sub, page by page, at one revision. */
static int
store_etcd_load_range(struct store_etcd *se, const char *sub,
    int (*row)(struct store_etcd *, const uint8_t *, size_t, const uint8_t *,
    size_t, struct kv *), struct kv *kv, uint64_t *count)
{
	json_t		*req, *resp, *kvs, *it, *start, *end;
	uint8_t		*k = NULL, *v = NULL, *nk;
	size_t		 klen, vlen, i;
	int64_t		 rev = 0;
	int		 rc, more;

	if ((start = store_etcd_key(se, sub, strlen(sub))) == NULL)
		return RDZV_ENOMEM;
	do {
		end = store_etcd_range_end(se, sub, strlen(sub));
		req = json_pack("{s:o, s:o, s:i, s:I}", "key", start,
		    "range_end", end, "limit", ETCD_RANGE_PAGE, "revision",
		    (json_int_t)rev);
		if (req == NULL)
			return RDZV_ENOMEM;
		if ((rc = etcd_call(se->wr, "/v3/kv/range", req, &resp)) != 0) {
			log_warnx("etcd: loading %s%s: %s", se->prefix, sub,
			    etcd_errmsg(se->wr));
			return rc;
		}
		if (rev == 0)
			rev = etcd_int(json_object_get(resp, "header"),
			    "revision", 0);
		more = json_is_true(json_object_get(resp, "more"));
		kvs = json_object_get(resp, "kvs");
		start = NULL;
		json_array_foreach(kvs, i, it) {
			free(k);
			k = v = NULL;
			if (etcd_unb64(it, "key", &k, &klen) != 0 ||
			    etcd_unb64(it, "value", &v, &vlen) != 0 ||
			    klen < se->prefixlen + strlen(sub)) {
				rc = RDZV_EPROTO;
				break;
			}
			rc = row(se, k + se->prefixlen + strlen(sub),
			    klen - se->prefixlen - strlen(sub), v, vlen, kv);
			free(v);
			v = NULL;
			if (rc != 0)
				break;
			(*count)++;
		}
		if (rc == 0 && more && k != NULL) {
			/* The next page starts just after the last key. */
			if ((nk = malloc(klen + 1)) == NULL)
				rc = RDZV_ENOMEM;
			else {
				memcpy(nk, k, klen);
				nk[klen] = '\0';
				start = etcd_b64(nk, klen + 1);
				free(nk);
				if (start == NULL)
					rc = RDZV_ENOMEM;
			}
		}
		json_decref(resp);
		free(k);
		free(v);
		k = v = NULL;
		if (rc != 0) {
			log_warnx("etcd: loading %s%s: bad key or value: %s",
			    se->prefix, sub, rdzv_strerror(rc));
			return rc;
		}
	} while (more);
	return 0;
}

/* "hex(ns)/key" into kv. */
static int
store_etcd_load_kv(struct store_etcd *se, const uint8_t *p, size_t n,
    const uint8_t *v, size_t vlen, struct kv *kv)
{
	const uint8_t	*slash = memchr(p, '/', n);
	uint8_t		*ns;
	size_t		 nh;
	int		 rc;

	if (slash == NULL)
		return RDZV_EPROTO;
	nh = (size_t)(slash - p);
	if ((ns = malloc(nh / 2 + 1)) == NULL)
		return RDZV_ENOMEM;
	if (store_etcd_unhex((const char *)p, nh, ns) != 0)
		rc = RDZV_EPROTO;
	else
		rc = kv_set(kv, (struct slice){ ns, nh / 2 },
		    (struct slice){ slash + 1, n - nh - 1 },
		    (struct slice){ v, vlen });
	free(ns);
	return rc < 0 ? rc : 0;
}

/* "hex(ns)/hex(key)/seq" into kv, in order; the counters follow. */
static int
store_etcd_load_queue(struct store_etcd *se, const uint8_t *p, size_t n,
    const uint8_t *v, size_t vlen, struct kv *kv)
{
	const uint8_t		*s1 = memchr(p, '/', n), *s2;
	struct etcd_queue	*q;
	uint8_t			*ns = NULL, *key = NULL;
	char			 digits[17];
	uint64_t		 seq;
	size_t			 nh, kh;
	int			 rc = RDZV_EPROTO;

	if (s1 == NULL || (s2 = memchr(s1 + 1, '/', n - (size_t)(s1 + 1 - p)))
	    == NULL || n - (size_t)(s2 + 1 - p) != 16)
		return RDZV_EPROTO;
	nh = (size_t)(s1 - p);
	kh = (size_t)(s2 - s1 - 1);
	memcpy(digits, s2 + 1, 16);
	digits[16] = '\0';
	seq = strtoull(digits, NULL, 16);
	if ((ns = malloc(nh / 2 + 1)) == NULL ||
	    (key = malloc(kh / 2 + 1)) == NULL) {
		rc = RDZV_ENOMEM;
		goto out;
	}
	if (store_etcd_unhex((const char *)p, nh, ns) != 0 ||
	    store_etcd_unhex((const char *)s1 + 1, kh, key) != 0)
		goto out;
	if ((rc = kv_qpush(kv, (struct slice){ ns, nh / 2 },
	    (struct slice){ key, kh / 2 }, (struct slice){ v, vlen })) < 0)
		goto out;
	if ((q = store_etcd_queue(se, (const char *)p, (size_t)(s2 - p))) ==
	    NULL) {
		rc = RDZV_ENOMEM;
		goto out;
	}
	if (q->tail == 0)
		q->head = seq;
	q->tail = seq;
	rc = 0;
out:
	free(ns);
	free(key);
	return rc;
}

static int
store_etcd_load(struct store_etcd *se, struct kv *kv)
{
	uint64_t	nkeys = 0, nitems = 0;
	int		rc;

	kv_set_journal(kv, NULL, NULL);
	if ((rc = store_etcd_load_range(se, "kv/", store_etcd_load_kv, kv,
	    &nkeys)) != 0 || (rc = store_etcd_load_range(se, "q/",
	    store_etcd_load_queue, kv, &nitems)) != 0)
		return rc;
	se->ntouched = 0;
	log_info("etcd: loaded %llu keys and %llu queue items from %s",
	    (unsigned long long)nkeys, (unsigned long long)nitems, se->prefix);
	return 0;
}

/* Set by store_etcd_stand_by_stop(): the standby stops waiting. */
static _Atomic int	etcd_cancelled;

/* Sleeps ms, in slices, until cancelled; returns whether it was. */
static int
store_etcd_nap(unsigned ms)
{
	unsigned	step;

	while (ms > 0 && !atomic_load(&etcd_cancelled)) {
		step = ms < 50 ? ms : 50;
		store_etcd_sleep_ms(step);
		ms -= step;
	}
	return atomic_load(&etcd_cancelled);
}

/* How many leaderships P "elections" counts in resp's range (0: none). */
static int64_t
store_etcd_elections(json_t *resp)
{
	json_t		*kvs = json_object_get(resp, "kvs");
	uint8_t		*v = NULL;
	size_t		 vlen;
	const char	*errstr;
	int64_t		 n = 0;

	if (json_array_size(kvs) > 0 &&
	    etcd_unb64(json_array_get(kvs, 0), "value", &v, &vlen) == 0) {
		n = strtonum((char *)v, 0, INT64_MAX - 1, &errstr);
		if (errstr != NULL)
			n = 0;
	}
	free(v);
	return n;
}

/*
 * Waits until no rdzvd holds the leader key, reading it (and the count of
 * elections, for the standby's status) every poll_ms in one request.
 * Logs each new leader, and etcd being unreachable (not on every try).
 * Returns 0, or RDZV_ECANCELED once the standby is stopped.
 */
static int
store_etcd_watch(struct store_etcd *se, unsigned poll_ms)
{
	json_t		*req, *resp, *res, *kvs;
	uint8_t		*v;
	size_t		 vlen;
	int64_t		 seen = -1, rev, n, last_log = 0;
	int		 rc;

	for (;;) {
		if (atomic_load(&etcd_cancelled))
			return RDZV_ECANCELED;
		req = json_pack("{s:[{s:{s:o}}, {s:{s:o}}]}", "success",
		    "request_range", "key", store_etcd_key(se, "leader", 6),
		    "request_range", "key", store_etcd_key(se, "elections", 9));
		rc = req != NULL ? etcd_call(se->wr, "/v3/kv/txn", req,
		    &resp) : RDZV_ENOMEM;
		if (rc != 0) {
			if (mono_ms() - last_log >= ETCD_UNREACHABLE_LOG_MS) {
				log_warnx("etcd: cannot reach the cluster at "
				    "%s: %s; trying again", se->ec.endpoints,
				    etcd_errmsg(se->wr));
				last_log = mono_ms();
			}
			if (store_etcd_nap(poll_ms))
				return RDZV_ECANCELED;
			continue;
		}
		res = json_object_get(resp, "responses");
		kvs = json_object_get(json_object_get(json_array_get(res, 0),
		    "response_range"), "kvs");
		if (json_array_size(kvs) == 0) {
			json_decref(resp);
			return 0;
		}
		rev = etcd_int(json_array_get(kvs, 0), "create_revision", 0);
		n = store_etcd_elections(json_object_get(json_array_get(res,
		    1), "response_range"));
		if (rev != seen && etcd_unb64(json_array_get(kvs, 0), "value",
		    &v, &vlen) == 0) {
			log_info("etcd: standing by; the leader is %s "
			    "(term %lld)", (char *)v, (long long)rev);
			store_etcd_status_set(0, rev, (char *)v);
			pthread_mutex_lock(&etcd_status_mtx);
			etcd_status.since_ms = mono_ms();
			pthread_mutex_unlock(&etcd_status_mtx);
			free(v);
			seen = rev;
		}
		/* The new leader counts itself just after it wins. */
		pthread_mutex_lock(&etcd_status_mtx);
		etcd_status.failovers = n > 0 ? n - 1 : 0;
		pthread_mutex_unlock(&etcd_status_mtx);
		json_decref(resp);
		if (store_etcd_nap(poll_ms))
			return RDZV_ECANCELED;
	}
}

/*
 * Grants a lease and creates the leader key on it if absent.  Returns 1
 * when this rdzvd leads (se->term set), 0 when another won, <0 on error.
 */
static int
store_etcd_campaign(struct store_etcd *se, const char *info)
{
	json_t		*req, *resp, *lk;
	int64_t		 t0;
	int		 rc, won;

	t0 = mono_us();
	req = json_pack("{s:I}", "TTL", (json_int_t)((se->ttl_ms + 999) /
	    1000));
	if (req == NULL)
		return RDZV_ENOMEM;
	if ((rc = etcd_call(se->wr, "/v3/lease/grant", req, &resp)) != 0) {
		log_warnx("etcd: lease grant: %s", etcd_errmsg(se->wr));
		return rc;
	}
	se->lease = etcd_int(resp, "ID", 0);
	se->lease_ttl = etcd_int(resp, "TTL", 0);
	json_decref(resp);
	if (se->lease == 0 || se->lease_ttl <= 0) {
		log_warnx("etcd: lease grant gave no lease");
		return RDZV_EPROTO;
	}
	se->deadline_us = t0 + se->lease_ttl * 1000000;
	lk = store_etcd_key(se, "leader", 6);
	req = json_pack("{s:[{s:O, s:s, s:s, s:s}], s:[{s:{s:O, s:o, s:I}}]}",
	    "compare", "key", lk, "target", "CREATE", "result", "EQUAL",
	    "create_revision", "0",
	    "success", "request_put", "key", lk, "value", etcd_b64(info,
	    strlen(info)), "lease", (json_int_t)se->lease);
	json_decref(lk);
	if (req == NULL)
		return RDZV_ENOMEM;
	if ((rc = etcd_call(se->wr, "/v3/kv/txn", req, &resp)) != 0) {
		log_warnx("etcd: campaign: %s", etcd_errmsg(se->wr));
		return rc;
	}
	won = json_is_true(json_object_get(resp, "succeeded"));
	if (won)
		se->term = etcd_int(json_object_get(resp, "header"),
		    "revision", 0);
	json_decref(resp);
	if (!won) {
		/* Someone else's lease expires unused. */
		req = json_pack("{s:I}", "ID", (json_int_t)se->lease);
		if (req != NULL && etcd_call(se->wr, "/v3/lease/revoke", req,
		    &resp) == 0)
			json_decref(resp);
		return 0;
	}
	return 1;
}

/*
 * Counts this leadership in P "elections" (fenced, like every write) and
 * returns how many leaderships came before it, or -1 if etcd failed.
 */
static int64_t
store_etcd_count_election(struct store_etcd *se)
{
	json_t		*req, *resp;
	char		 buf[32];
	int64_t		 n;

	req = json_pack("{s:o}", "key", store_etcd_key(se, "elections", 9));
	if (req == NULL || etcd_call(se->wr, "/v3/kv/range", req, &resp) != 0)
		return -1;
	n = store_etcd_elections(resp);
	json_decref(resp);
	snprintf(buf, sizeof buf, "%lld", (long long)n + 1);
	req = json_pack("{s:O, s:[{s:{s:o, s:o}}]}", "compare", se->fence,
	    "success", "request_put", "key", store_etcd_key(se, "elections", 9),
	    "value", etcd_b64(buf, strlen(buf)));
	if (req == NULL || etcd_call(se->wr, "/v3/kv/txn", req, &resp) != 0)
		return -1;
	if (!json_is_true(json_object_get(resp, "succeeded"))) {
		json_decref(resp);
		store_etcd_deposed("another rdzvd leads already");
	}
	json_decref(resp);
	return n;
}

static void
store_etcd_close(void *arg)
{
	struct store_etcd	*se = arg;
	struct etcd_queue	*q, *q1;
	json_t			*req, *resp;

	if (se == NULL)
		return;
	if (se->ka_started) {
		pthread_mutex_lock(&se->ka_mtx);
		atomic_store(&se->stop, 1);
		pthread_cond_signal(&se->ka_cond);
		pthread_mutex_unlock(&se->ka_mtx);
		pthread_join(se->ka_thread, NULL);
	}
	if (se->term != 0 && se->wr != NULL) {
		/* Hand over at once instead of after the TTL. */
		req = json_pack("{s:I}", "ID", (json_int_t)se->lease);
		if (req != NULL && etcd_call(se->wr, "/v3/lease/revoke", req,
		    &resp) == 0) {
			json_decref(resp);
			log_info("etcd: leadership released");
		}
	}
	HASH_ITER(hh, se->queues, q, q1) {
		HASH_DEL(se->queues, q);
		free(q);
	}
	free(se->touched);
	etcd_free(se->wr);
	etcd_free(se->ka);
	json_decref(se->fence);
	free(se->prefix);
	pthread_cond_destroy(&se->ka_cond);
	pthread_mutex_destroy(&se->ka_mtx);
	free(se);
}

const struct store_backend store_etcd_backend = {
	.name = "etcd",
	.apply = store_etcd_apply,
	.close = store_etcd_close,
};

/*
 * Stands by until this rdzvd leads (the standby's thread), then starts
 * the keepalive thread and counts the election.  NULL on failure (cause
 * logged) or once the standby is stopped.
 */
static struct store_etcd *
store_etcd_lead(const struct store_etcd_conf *c, enum store_durability mode)
{
	struct store_etcd	*se;
	json_t			*req, *resp;
	unsigned		 poll_ms;
	int64_t			 before;
	int			 rc;

	if (mode != STORE_RELAXED && mode != STORE_STRICT) {
		log_warnx("etcd: durability %s keeps nothing in etcd",
		    store_durability_name(mode));
		return NULL;
	}
	if ((se = calloc(1, sizeof *se)) == NULL)
		return NULL;
	if ((se->prefix = strdup(c->prefix)) == NULL) {
		free(se);
		return NULL;
	}
	se->prefixlen = strlen(se->prefix);
	pthread_mutex_init(&se->ka_mtx, NULL);
	store_cond_init(&se->ka_cond);
	se->ec = c->etcd;
	se->ttl_ms = c->leader_ttl_ms;
	se->compact_ms = c->compact_ms;
	if (se->ec.timeout_ms == 0)
		se->ec.timeout_ms = se->ttl_ms < 2000 ? 2000 : se->ttl_ms;
	if ((se->wr = etcd_new(&se->ec)) == NULL ||
	    (se->ka = etcd_new(&se->ec)) == NULL)
		goto fail;
	poll_ms = se->ttl_ms / 10;
	if (poll_ms < 20)
		poll_ms = 20;
	if (poll_ms > 500)
		poll_ms = 500;

	log_info("etcd: %s, prefix %s: seeking leadership (lease %u ms)",
	    c->etcd.endpoints, se->prefix, se->ttl_ms);
	if (se->ec.user != NULL) {
		/* The keepalive client's first call authenticates (bcrypt
		 * on etcd's side, can take longer than its budget): do it
		 * now, while nothing waits on it.  A failure is retried. */
		req = json_pack("{s:o}", "key", store_etcd_key(se, "leader", 6));
		if (req != NULL && etcd_call(se->ka, "/v3/kv/range", req,
		    &resp) == 0)
			json_decref(resp);
	}
	for (;;) {
		if (store_etcd_watch(se, poll_ms) != 0)
			goto cancelled;
		if ((rc = store_etcd_campaign(se, c->leader_info)) == 1)
			break;
		if (rc < 0 && store_etcd_nap(poll_ms))
			goto cancelled;
	}
	if (se->lease_ttl * 1000 > se->ttl_ms)
		log_info("etcd: lease TTL is %lld s (etcd's least, or "
		    "--leader-ttl-ms rounded up to seconds)",
		    (long long)se->lease_ttl);
	se->fence = json_pack("[{s:o, s:s, s:s, s:I}]", "key",
	    store_etcd_key(se, "leader", 6), "target", "CREATE", "result",
	    "EQUAL", "create_revision", (json_int_t)se->term);
	if (se->fence == NULL)
		goto fail;

	if ((rc = store_thread_start(&se->ka_thread, store_etcd_keepalive,
	    se)) != 0) {
		errno = rc;
		log_warn("etcd: pthread_create");
		goto fail;
	}
	se->ka_started = 1;
	if ((before = store_etcd_count_election(se)) < 0) {
		log_warnx("etcd: counting elections: %s", etcd_errmsg(se->wr));
		goto fail;
	}
	log_info("etcd: leading, term %lld (%lld rdzvds led before)",
	    (long long)se->term, (long long)before);
	store_etcd_status_set(1, se->term, c->leader_info);
	pthread_mutex_lock(&etcd_status_mtx);
	etcd_status.since_ms = mono_ms();
	etcd_status.failovers = before;
	pthread_mutex_unlock(&etcd_status_mtx);
	return se;

fail:
	log_warnx("etcd: cannot use %s (see above)", c->etcd.endpoints);
	store_etcd_close(se);
	return NULL;
cancelled:
	store_etcd_close(se);
	return NULL;
}

/* The standby's thread, running store_etcd_lead(). */
static struct {
	pthread_t			 thread;
	int				 started;
	struct event			*ev;	/* on the loop: the wait ended */
	const struct store_etcd_conf	*conf;
	enum store_durability		 mode;
	struct store_etcd		*se;	/* its result */
	void				(*cb)(struct store_etcd *, void *);
	void				*arg;
} etcd_standby;

static void *
store_etcd_standby_main(void *arg)
{
	etcd_standby.se = store_etcd_lead(etcd_standby.conf, etcd_standby.mode);
	event_active(etcd_standby.ev, EV_TIMEOUT, 0);
	return NULL;
}

/* On the loop: the thread is done; its leadership (or NULL) goes on. */
static void
store_etcd_standby_done(evutil_socket_t fd, short what, void *arg)
{
	struct store_etcd	*se;

	pthread_join(etcd_standby.thread, NULL);
	etcd_standby.started = 0;
	se = etcd_standby.se;
	etcd_standby.se = NULL;
	event_free(etcd_standby.ev);
	etcd_standby.ev = NULL;
	etcd_standby.cb(se, etcd_standby.arg);
}

int
store_etcd_stand_by(const struct store_etcd_conf *c,
    enum store_durability mode, struct event_base *base,
    void (*cb)(struct store_etcd *, void *), void *arg)
{
	int	rc;

	etcd_standby.conf = c;
	etcd_standby.mode = mode;
	etcd_standby.cb = cb;
	etcd_standby.arg = arg;
	atomic_store(&etcd_cancelled, 0);
	if ((etcd_standby.ev = event_new(base, -1, 0, store_etcd_standby_done,
	    NULL)) == NULL) {
		log_warnx("etcd: event_new failed");
		return -1;
	}
	if ((rc = store_thread_start(&etcd_standby.thread,
	    store_etcd_standby_main, NULL)) != 0) {
		errno = rc;
		log_warn("etcd: pthread_create");
		event_free(etcd_standby.ev);
		etcd_standby.ev = NULL;
		return -1;
	}
	etcd_standby.started = 1;
	return 0;
}

void
store_etcd_stand_by_stop(void)
{
	if (!etcd_standby.started)
		return;
	atomic_store(&etcd_cancelled, 1);
	pthread_join(etcd_standby.thread, NULL);
	etcd_standby.started = 0;
	if (etcd_standby.se != NULL) {
		/* Won just now: the next standby need not wait a TTL. */
		store_etcd_close(etcd_standby.se);
		etcd_standby.se = NULL;
	}
	if (etcd_standby.ev != NULL) {
		event_free(etcd_standby.ev);
		etcd_standby.ev = NULL;
	}
}

struct store *
store_etcd_serve(struct store_etcd *se, enum store_durability mode,
    unsigned window_ms, struct event_base *base, struct kv *kv,
    void (*done_cb)(void *, uint64_t), void *arg)
{
	if (store_etcd_load(se, kv) != 0) {
		log_warnx("etcd: cannot load the state from %s (see above)",
		    se->ec.endpoints);
		store_etcd_close(se);
		return NULL;
	}
	return store_start(&store_etcd_backend, se, se->ec.endpoints, mode,
	    window_ms, base, done_cb, arg);
}
