/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcps_group.c: the keys that an unmodified torch process group leaves in
 * the root namespace of rdzvd's main port, and when they are dropped.
 *
 * A program run with MASTER_ADDR:MASTER_PORT naming rdzvd and
 * TORCHELASTIC_USE_AGENT_STORE=True forms its process group in the root
 * namespace: its ranks' addresses, NCCL ids and barrier counters go under
 * "/default_pg/" (torch 2.x, no attempt prefix) or
 * "//worker/attempt_N/default_pg/" (torch 1.13, N the restart count, 0 on
 * every plain run).  torch's own store dies with the job; rdzvd's does
 * not, so the next run of the same program would WAIT on keys that already
 * exist and read the previous run's dead addresses and spent counters.
 *
 * The rule, one group at a time on the main port:
 *   - a TCPStore connection joins the group when, having added to "init/"
 *     (what every TCPStore made with a world_size does first, so every
 *     rank of a group), it names a process-group key (any of the two
 *     prefixes above); a client that never adds to "init/" (an inspector,
 *     a script with no world_size) neither joins nor drops anything;
 *   - while some connection of the group is open, nothing is dropped;
 *   - when a connection joins and no other one is open, the previous group
 *     has ended: its process-group keys are deleted (journaled like any
 *     delete) before the request is served.
 * It is sound because torch's TCPStore client never reconnects: a rank
 * whose connection has closed can never use its group's keys again, and
 * those keys hold nothing but that group's bootstrap.  No other key (user
 * keys, "init/", torchrun's rendezvous state) and no other namespace (a
 * round's port, a native client's namespace) is ever touched.  A restart
 * of rdzvd closes every connection, so a group that was running then is
 * over too: its keys go when the next one starts.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rdzvd.h"

/* The root namespace, where the main port's TCPStore clients live. */
static const struct slice grp_ns = { (const uint8_t *)"", 0 };

/* c->tcps_group */
#define GRP_NONE	0
#define GRP_RANK	1	/* added to "init/": a rank of some group */
#define GRP_MEMBER	2	/* and used the group's keys: counted */

/* Connections of the current group still open. */
static size_t grp_open;

static int
grp_has_prefix(struct slice key, const char *pfx, size_t *off)
{
	size_t	n = strlen(pfx);

	if (key.len - *off < n || memcmp(key.p + *off, pfx, n) != 0)
		return (0);
	*off += n;
	return (1);
}

/*
 * 1 if key is one of a torch process group's keys: "/default_pg/..." or
 * "//worker/attempt_<digits>/default_pg/...", else 0.
 */
int
tcps_group_key(struct slice key)
{
	size_t	off = 0, digits;

	if (grp_has_prefix(key, "/default_pg/", &off))
		return (1);
	if (!grp_has_prefix(key, "//worker/attempt_", &off))
		return (0);
	for (digits = 0; off < key.len && key.p[off] >= '0' &&
	    key.p[off] <= '9'; off++)
		digits++;
	return (digits > 0 && grp_has_prefix(key, "/default_pg/", &off));
}

struct grp_acc {
	uint8_t	**keys;
	size_t	 *lens;
	size_t	  n, cap;
	int	  oom;
};

static void
grp_collect_cb(void *arg, struct slice key)
{
	struct grp_acc	*acc = arg;
	void		*p, *q;

	if (acc->oom || !tcps_group_key(key))
		return;
	if (acc->n == acc->cap) {
		size_t cap = acc->cap ? 2 * acc->cap : 64;

		if ((p = reallocarray(acc->keys, cap, sizeof *acc->keys)) ==
		    NULL) {
			acc->oom = 1;
			return;
		}
		acc->keys = p;
		if ((q = reallocarray(acc->lens, cap, sizeof *acc->lens)) ==
		    NULL) {
			acc->oom = 1;
			return;
		}
		acc->lens = q;
		acc->cap = cap;
	}
	if ((acc->keys[acc->n] = malloc(key.len ? key.len : 1)) == NULL) {
		acc->oom = 1;
		return;
	}
	memcpy(acc->keys[acc->n], key.p, key.len);
	acc->lens[acc->n++] = key.len;
}

/* Deletes the root namespace's process-group keys; returns how many. */
static size_t
grp_drop(const char *peer)
{
	struct grp_acc	acc;
	size_t		i, n = 0;

	memset(&acc, 0, sizeof acc);
	/* kv_list's callback must not mutate: collect, then delete. */
	kv_list(server.kv, grp_ns, grp_collect_cb, &acc);
	if (acc.oom)
		log_warnx("tcpstore: out of memory listing the keys of an "
		    "ended process group; %zu of them dropped", acc.n);
	for (i = 0; i < acc.n; i++) {
		n += kv_delete(server.kv, grp_ns,
		    (struct slice){ acc.keys[i], acc.lens[i] }) == 1;
		free(acc.keys[i]);
	}
	free(acc.keys);
	free(acc.lens);
	if (n > 0)
		log_info("tcpstore: %s starts a process group on the main port; "
		    "%zu keys of the previous one dropped", peer, n);
	return (n);
}

/*
 * Called for each request of a main-port TCPStore connection before it is
 * served: once c has added to "init/", a request naming a process-group
 * key makes it a member of the group, and the first member after every
 * other has closed drops the previous group's keys.
 */
void
tcps_group_use(struct conn *c, const struct tcps_req *req)
{
	struct tcps_iter	it;
	struct slice		key, val;
	int			named = 0;

	if (c->tcps_group == GRP_MEMBER || c->ns != NULL)
		return;
	if (req->op == TCPS_ADD && req->key.len == 5 &&
	    memcmp(req->key.p, "init/", 5) == 0) {
		c->tcps_group = GRP_RANK;
		return;
	}
	if (c->tcps_group != GRP_RANK)
		return;
	if (req->key.p != NULL && tcps_group_key(req->key))
		named = 1;
	else if (req->nkeys > 0) {
		tcps_iter_init(&it, req);
		while (!named && tcps_list_next(&it, &key, &val))
			named = tcps_group_key(key);
	}
	if (!named)
		return;
	if (grp_open == 0)
		grp_drop(c->peer);
	c->tcps_group = GRP_MEMBER;
	grp_open++;
}

/* A connection closes: it leaves the group. */
void
tcps_group_release(struct conn *c)
{
	if (c->tcps_group != GRP_MEMBER)
		return;
	c->tcps_group = GRP_NONE;
	if (grp_open == 0)
		fatalx("tcps_group_release: no open member to release");
	grp_open--;
}
