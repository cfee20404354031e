/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rz_retain.c: retention (--job-retention).  Closed jobs are purged in
 * batches once their time is up, and the namespaces of rounds that are
 * over are swept now and then.
 */
#include "config.h"

#include <sys/queue.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "rdzv_err.h"
#include "rz.h"
#include "rz_impl.h"

/* ---- retention: purging closed jobs, sweeping dead rounds ---- */

/*
 * The job a namespace "job/<id>" or "job/<id>/..." belongs to: of the
 * jobs that exist, the one with the longest such id (ids may hold '/').
 * Sets *idlen to its id's length.  NULL when no job matches.
 */
static struct rz_job *
rz_ns_owner(struct rz *rz, struct slice name, size_t *idlen)
{
	struct rz_job	*j, *best = NULL;
	const uint8_t	*rest;
	char		 buf[RZ_ID_MAX + 1];
	size_t		 n, i;

	if (name.len < 5 || memcmp(name.p, "job/", 4) != 0)
		return NULL;
	rest = name.p + 4;
	n = name.len - 4;
	for (i = 1; i <= n && i <= RZ_ID_MAX; i++) {
		if (rest[i - 1] == '\0')
			break;		/* no id holds one */
		if (i < n && rest[i] != '/')
			continue;
		memcpy(buf, rest, i);
		buf[i] = '\0';
		HASH_FIND_STR(rz->jobs, buf, j);
		if (j != NULL) {
			best = j;
			*idlen = i;
		}
	}
	return best;
}

/* Whether name, past "job/<id>" (idlen bytes of id), is "/round/<n>";
 * sets *round. */
static int
rz_ns_round(struct slice name, size_t idlen, int64_t *round)
{
	static const char	 tag[] = "/round/";
	const uint8_t		*p;
	size_t			 n, i;
	int64_t			 v = 0;

	p = name.p + 4 + idlen;
	n = name.len - 4 - idlen;
	if (n <= sizeof tag - 1 || memcmp(p, tag, sizeof tag - 1) != 0)
		return 0;
	p += sizeof tag - 1;
	n -= sizeof tag - 1;
	if (n > 18)
		return 0;
	for (i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return 0;
		v = v * 10 + (p[i] - '0');
	}
	*round = v;
	return 1;
}

/* Namespaces picked during a kv_ns_list walk, dropped after it (the walk
 * itself must not mutate). */
struct rz_pick {
	struct rz	 *rz;
	struct rz_job	 *only;		/* sweep: just this job; else all */
	int		  purge;	/* 1: everything of purging jobs */
	struct rz_job	**owner;
	char		**name;
	size_t		 *len;
	size_t		  n, cap;
};

static void
rz_pick_cb(void *arg, struct slice name)
{
	struct rz_pick	 *pk = arg;
	struct rz_job	 *j, **o;
	char		**nm;
	size_t		  idlen = 0, *ln, cap;
	int64_t		  round;

	if ((j = rz_ns_owner(pk->rz, name, &idlen)) == NULL)
		return;
	if (pk->purge) {
		if (!j->purging)
			return;
	} else {
		if (pk->only != NULL && j != pk->only)
			return;
		/* Only rounds: anything else under job/<id>/ is someone's
		 * own and stays until the job is purged. */
		if (!rz_ns_round(name, idlen, &round))
			return;
		if (j->state == RZJ_RUNNING && round == j->round)
			return;		/* the live round */
		if (j->state == RZJ_RUNNING && round == j->round - 1 &&
		    j->kind != NAT_KIND_NORMAL)
			return;		/* the one a repair round ended */
	}
	if (pk->n == pk->cap) {
		cap = pk->cap ? pk->cap * 2 : 16;
		if ((o = reallocarray(pk->owner, cap, sizeof *o)) == NULL)
			return;
		pk->owner = o;
		if ((nm = reallocarray(pk->name, cap, sizeof *nm)) == NULL)
			return;
		pk->name = nm;
		if ((ln = reallocarray(pk->len, cap, sizeof *ln)) == NULL)
			return;
		pk->len = ln;
		pk->cap = cap;
	}
	/* Skipped on no memory: the next sweep or purge finds it again. */
	if ((pk->name[pk->n] = malloc(name.len)) == NULL)
		return;
	memcpy(pk->name[pk->n], name.p, name.len);
	pk->len[pk->n] = name.len;
	pk->owner[pk->n] = j;
	pk->n++;
}

/* Drops what rz_pick_cb picked; returns the keys dropped. */
static int64_t
rz_pick_drop(struct rz_pick *pk)
{
	struct slice	ns;
	int64_t		keys = 0, k;
	size_t		i;

	for (i = 0; i < pk->n; i++) {
		ns.p = (const uint8_t *)pk->name[i];
		ns.len = pk->len[i];
		k = kv_num_keys(pk->rz->kv, ns);
		pk->owner[i]->purged_keys += k;
		keys += k;
		kv_ns_drop(pk->rz->kv, ns);
		free(pk->name[i]);
	}
	free(pk->owner);
	free(pk->name);
	free(pk->len);
	return keys;
}

static int64_t
rz_sweep_in(struct rz *rz, struct rz_job *only)
{
	struct rz_pick	pk;
	char		pre[RZ_ID_MAX + 16];
	int		n;

	memset(&pk, 0, sizeof pk);
	pk.rz = rz;
	pk.only = only;
	if (only != NULL)
		n = snprintf(pre, sizeof pre, "job/%s/round/", only->id);
	else
		n = snprintf(pre, sizeof pre, "job/");
	if (n < 0 || (size_t)n >= sizeof pre)
		return 0;
	kv_ns_list(rz->kv, (struct slice){ (const uint8_t *)pre, (size_t)n },
	    rz_pick_cb, &pk);
	return rz_pick_drop(&pk);
}

int64_t
rz_sweep_job(struct rz *rz, struct rz_job *j)
{
	return rz_sweep_in(rz, j);
}

int64_t
rz_sweep(struct rz *rz)
{
	return rz_sweep_in(rz, NULL);
}

/* Drops a reserved namespace of j (kind "node" or "ev"); counts keys. */
static void
rz_drop_reserved(struct rz *rz, struct rz_job *j, const char *kind)
{
	char		nsbuf[RZ_ID_MAX + 32];
	struct slice	ns;

	rz_ns_name(nsbuf, sizeof nsbuf, kind, j, &ns);
	j->purged_keys += kv_num_keys(rz->kv, ns);
	kv_ns_drop(rz->kv, ns);
}

/* Forgets j: rows, namespaces already dropped, memory. */
static void
rz_forget(struct rz *rz, struct rz_outbox *ob, struct rz_job *j)
{
	struct rz_out_purged	*op;

	if (j->port > 0)
		rz_out_port_close(ob, j);
	if (j->dirty) {
		TAILQ_REMOVE(&rz->dirty, j, dirty_entry);
		j->dirty = 0;
	}
	rz_drop_reserved(rz, j, "node");
	rz_drop_reserved(rz, j, "ev");
	if (kv_delete(rz->kv, rz_ns_jobs, slice_str(j->id)) == 1)
		j->purged_keys++;
	TAILQ_REMOVE(&rz->closed, j, closed_entry);
	HASH_DEL(rz->jobs, j);
	rz->stats.jobs_purged_total++;
	if ((op = rz_outbox_grow(ob, (void **)&ob->purged, &ob->npurged,
	    &ob->cappurged, sizeof *ob->purged)) != NULL) {
		memcpy(op->job, j->id, sizeof op->job);
		op->state = j->state == RZJ_DONE ? "succeeded" : "failed";
		op->closed_ms = j->closed_ms;
		op->keys = j->purged_keys;
	}
	rz_nodes_free(j);
	free(j);
}

int
rz_purge(struct rz *rz, int64_t wall, int max_jobs, int64_t max_keys,
    struct rz_outbox *ob)
{
	struct rz_job	*j, *next;
	struct rz_pick	 pk;
	char		 nsbuf[RZ_ID_MAX + 32];
	struct slice	 ns;
	int64_t		 keys = 0;
	int		 n = 0, i;

	if (rz->retention_ms <= 0)
		return 0;
	/* The batch: due jobs from the oldest close, within the budget
	 * (their rows counted ahead; stray namespaces are few). */
	TAILQ_FOREACH(j, &rz->closed, closed_entry) {
		if (n >= max_jobs || (n > 0 && keys >= max_keys) ||
		    j->closed_ms > wall - rz->retention_ms)
			break;
		j->purging = 1;
		j->purged_keys = 0;
		rz_ns_name(nsbuf, sizeof nsbuf, "ev", j, &ns);
		keys += kv_num_keys(rz->kv, ns) + j->nnodes + 1;
		n++;
	}
	if (n == 0)
		return 0;
	/* One walk over the namespaces finds every batch job's. */
	memset(&pk, 0, sizeof pk);
	pk.rz = rz;
	pk.purge = 1;
	kv_ns_list(rz->kv, slice_str("job/"), rz_pick_cb, &pk);
	rz_pick_drop(&pk);
	for (i = 0, j = TAILQ_FIRST(&rz->closed); i < n && j != NULL;
	    i++, j = next) {
		next = TAILQ_NEXT(j, closed_entry);
		rz_forget(rz, ob, j);
	}
	return n;
}

int
rz_admin_forget(struct rz *rz, struct slice job, struct rz_outbox *ob)
{
	struct rz_job	*j;
	struct rz_pick	 pk;
	char		 pre[RZ_ID_MAX + 8];
	int		 n;

	if ((j = rz_find_job(rz, job)) == NULL)
		return RDZV_ENOTFOUND;
	if (!rz_closed(j))
		return RDZV_EBUSY;
	j->purging = 1;
	j->purged_keys = 0;
	/* Its namespaces (and, skipped by rz_pick_cb, those of a job whose
	 * id merely starts with its own). */
	n = snprintf(pre, sizeof pre, "job/%s", j->id);
	if (n < 0 || (size_t)n >= sizeof pre)
		return RDZV_EINVAL;
	memset(&pk, 0, sizeof pk);
	pk.rz = rz;
	pk.purge = 1;
	kv_ns_list(rz->kv, (struct slice){ (const uint8_t *)pre, (size_t)n },
	    rz_pick_cb, &pk);
	rz_pick_drop(&pk);
	n = (int)ob->npurged;
	rz_forget(rz, ob, j);
	if (ob->npurged > (size_t)n)	/* else lost: no memory */
		ob->purged[n].by_operator = 1;
	return 0;
}

int64_t
rz_next_purge(struct rz *rz)
{
	struct rz_job	*j;

	if (rz->retention_ms <= 0 || (j = TAILQ_FIRST(&rz->closed)) == NULL)
		return -1;
	return j->closed_ms + rz->retention_ms;
}

int64_t
rz_retention_left(struct rz *rz, struct slice job, int64_t wall)
{
	struct rz_job	*j;
	int64_t		 left;

	if (rz->retention_ms <= 0 || (j = rz_find_job(rz, job)) == NULL ||
	    !rz_closed(j))
		return -1;
	left = j->closed_ms + rz->retention_ms - wall;
	return left > 0 ? left : 0;
}
