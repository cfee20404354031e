/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rdzv.c: unit tests of the rendezvous state machine (rz/rz*.c)
 * over a real kv core, with a fake wall clock: retention (closed jobs
 * purged after it, in batches, in close order, never a running one; 0
 * keeps them), what a purge drops and what it leaves (another job's
 * namespaces, even one whose id extends the purged one's), reuse of a
 * purged id, retention carried across a reload, the sweep of dead
 * rounds' namespaces, group rank = node rank for a static JOIN, and
 * the outbox each event fills (a JOIN that forms a round, a FAILURE, a
 * lease expiry), drained here as rdzvd's round.c drains it; repair
 * rounds (shrink on a repairable FAILURE, grow on READY, the donor, each
 * escalation to a restart, a reload mid-repair).
 *
 * Why about 2,600 lines: one test per rule of the machine over one
 * fixture (a kv core, a fake clock, the outbox drained as round.c does);
 * split by the rz file under test, each part would carry the fixture
 * again.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "rdzv_err.h"
#include "kv.h"
#include "rz.h"

static int64_t	 wall;			/* the fake wall clock, ms */
static int	 next_port = 40000;
static char	 purged[64][RZ_ID_MAX + 16];	/* ids, in purge order */
static int	 npurged;
static int64_t	 purged_keys;
static char	 conn_a, conn_b, conn_c;	/* stand-in connections */
static int64_t	 pushed_rank[16];	/* by node id: last group rank */
static struct rz_outbox	ob;		/* the event's, drained by run() */
static int64_t	 last_node;		/* the last JOIN's reply */

static int64_t
wall_cb(void *arg)
{
	return wall;
}

static const struct rz_hooks hooks = { wall_cb, NULL };

/*
 * Applies ob as rdzvd's round.c does: ports (a fake numbering; a port
 * asked again is given again), rz_settle, then what it says is noted:
 * the pushes' group ranks, the purged jobs.  Returns rc, the event's.
 */
static void
drain(struct rz *rz)
{
	size_t	i;

	for (i = 0; i < ob.nport; i++)
		if (ob.port[i].open)
			ob.port[i].port = ob.port[i].want > 0 ?
			    ob.port[i].want : next_port++;
	rz_settle(rz, &ob);
	last_node = ob.node_id;
	for (i = 0; i < ob.npush; i++)
		if (ob.push[i].round.node_id >= 0 &&
		    ob.push[i].round.node_id < 16)
			pushed_rank[ob.push[i].round.node_id] =
			    ob.push[i].round.group_rank;
	for (i = 0; i < ob.npurged; i++) {
		assert_true(npurged < 64);
		snprintf(purged[npurged++], sizeof purged[0], "%s %s",
		    ob.purged[i].job, ob.purged[i].state);
		purged_keys += ob.purged[i].keys;
	}
	assert_int_equal(ob.lost, 0);
	rz_outbox_reset(&ob);
}

struct fx {
	struct kv	*kv;
	struct rz	*rz;
};

static int
run(struct fx *f, int rc)
{
	drain(f->rz);
	return rc;
}

static int
setup(void **state)
{
	struct fx	*f;

	if ((f = calloc(1, sizeof *f)) == NULL ||
	    (f->kv = kv_new()) == NULL ||
	    (f->rz = rz_new(f->kv, &hooks, 0, 60000)) == NULL)
		return -1;
	rz_set_retention(f->rz, 1000);
	rz_outbox_init(&ob);
	wall = 1000000;
	npurged = 0;
	purged_keys = 0;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx	*f = *state;

	rz_free(f->rz);
	kv_free(f->kv);
	rz_outbox_free(&ob);
	free(f);
	return 0;
}

/* The ops the retention tests repeat, each drained. */
static int
purge(struct fx *f, int64_t at, int jobs, int64_t keys)
{
	return run(f, rz_purge(f->rz, at, jobs, keys, &ob));
}

static int
succeeded(struct fx *f, const char *job, int64_t node, int64_t round)
{
	return run(f, rz_succeeded(f->rz, slice_str(job), node, round, 0, 0,
	    &ob));
}

static int
evict(struct fx *f, const char *job, int64_t node, int64_t now)
{
	return run(f, rz_admin_evict(f->rz, slice_str(job), node, 1, now,
	    &ob));
}

/* A JOIN of instance inst to job (nodes lo:hi, one worker each). */
static void
join_req(struct nat_join *r, const char *job, const char *inst, int64_t lo,
    int64_t hi)
{
	memset(r, 0, sizeof *r);
	r->job = slice_str(job);
	r->instance = slice_str(inst);
	r->host = slice_str("h");
	r->addr = slice_str("127.0.0.1");
	r->pid = 1;
	r->local_world_size = 1;
	r->min_nodes = lo;
	r->max_nodes = hi;
	r->max_restarts = 3;
	r->last_call_ms = 0;
	r->lease_ms = 60000;
	r->rank = -1;
	r->max_repairs = r->repair_timeout_ms = -1;
}

/* JOIN of instance inst to job (nodes lo:hi); returns rz_join's code and
 * sets *node (may be NULL) to the node id. */
static int
join(struct fx *f, const char *job, const char *inst, int64_t lo, int64_t hi,
    int64_t *node)
{
	struct nat_join	r;
	int		rc;

	join_req(&r, job, inst, lo, hi);
	rc = run(f, rz_join(f->rz, &r, &conn_a, 0, &ob));
	if (node != NULL)
		*node = last_node;
	return rc;
}

/* JOIN of instance inst asking for group rank want (static). */
static int
join_rank(struct fx *f, const char *inst, int64_t want, int64_t *node)
{
	struct nat_join	r;
	int		rc;

	join_req(&r, "static", inst, 3, 3);
	r.local_world_size = 2;
	r.max_restarts = 0;
	r.rank = want;
	rc = run(f, rz_join(f->rz, &r, &conn_a, 0, &ob));
	*node = last_node;
	return rc;
}

/*
 * A static rendezvous: nodes that name their node rank get it as their
 * group rank whatever the order they join in; a rank taken by a live
 * node, or beyond the job's nodes, is refused.
 */
static void
test_static_rank(void **state)
{
	struct fx	*f = *state;
	int64_t		 a, b, c, x;

	assert_int_equal(join_rank(f, "i2", 2, &a), 0);
	assert_int_equal(join_rank(f, "i0", 0, &b), 0);
	assert_int_equal(join_rank(f, "dup", 0, &x), RDZV_EEXIST);
	assert_int_equal(join_rank(f, "big", 3, &x), RDZV_EINVAL);
	memset(pushed_rank, 0xff, sizeof pushed_rank);
	assert_int_equal(join_rank(f, "i1", 1, &c), 0);
	rz_tick(f->rz, 1, &ob);
	drain(f->rz);
	assert_int_equal(pushed_rank[a], 2);
	assert_int_equal(pushed_rank[b], 0);
	assert_int_equal(pushed_rank[c], 1);
}

/* A one-node job run to DONE now (wall). */
static void
done(struct fx *f, const char *job)
{
	int64_t	node;

	assert_int_equal(join(f, job, "i", 1, 1, &node), 0);
	assert_int_equal(succeeded(f, job, node, 1), 0);
}

static void
put(struct fx *f, const char *ns, const char *key)
{
	assert_int_equal(kv_set(f->kv, slice_str(ns), slice_str(key),
	    slice_str("v")), 0);
}

static int64_t
nkeys(struct fx *f, const char *ns, size_t nslen)
{
	struct slice	s = { (const uint8_t *)ns, nslen };

	return kv_num_keys(f->kv, s);
}
#define NK(f, lit)	nkeys((f), (lit), sizeof(lit) - 1)

static int
has_job(struct fx *f, const char *job)
{
	json_t	*d = rz_job_doc(f->rz, slice_str(job), 0);

	json_decref(d);
	return d != NULL;
}

/*
 * rz_admin_forget: a closed job goes at once with its namespaces (not a
 * job's whose id extends its own), its id starts a new job; a job not
 * closed is EBUSY, an unknown one ENOTFOUND.
 */
static void
test_admin_forget(void **state)
{
	struct fx	*f = *state;

	done(f, "a");
	put(f, "job/a/round/1", "late");
	put(f, "job/a/mine", "k");
	assert_int_equal(join(f, "a/b", "i", 1, 1, NULL), 0);
	put(f, "job/a/b/round/1", "live");
	assert_int_equal(join(f, "run", "i", 1, 1, NULL), 0);
	assert_int_equal(run(f, rz_admin_forget(f->rz, slice_str("run"),
	    &ob)), RDZV_EBUSY);
	assert_int_equal(run(f, rz_admin_forget(f->rz, slice_str("none"),
	    &ob)), RDZV_ENOTFOUND);
	assert_int_equal(npurged, 0);
	assert_int_equal(run(f, rz_admin_forget(f->rz, slice_str("a"), &ob)),
	    0);
	assert_int_equal(npurged, 1);
	assert_string_equal(purged[0], "a succeeded");
	assert_false(has_job(f, "a"));
	assert_int_equal(NK(f, "job/a/round/1"), 0);
	assert_int_equal(NK(f, "job/a/mine"), 0);
	assert_int_equal(NK(f, "\0rdzv/ev/a"), 0);
	assert_int_equal(NK(f, "\0rdzv/node/a"), 0);
	assert_int_equal(NK(f, "job/a/b/round/1"), 1);
	assert_true(has_job(f, "a/b") && has_job(f, "run"));
	/* Its id is free: a JOIN starts a new job. */
	assert_int_equal(join(f, "a", "i2", 1, 1, NULL), 0);
	assert_true(has_job(f, "a"));
}

/*
 * rz_port_refused: the round formed but no port could be opened for it:
 * the RUNNING pushes give way to FAILED ones carrying why, and the job
 * is closed as failed (a JOIN again is ECLOSED).
 */
static void
test_port_refused(void **state)
{
	struct fx	*f = *state;
	struct nat_join	 r;
	json_t		*d;
	size_t		 i, n = 0;

	join_req(&r, "p", "i", 1, 1);
	assert_int_equal(rz_join(f->rz, &r, &conn_a, 0, &ob), 0);
	assert_true(ob.nport == 1 && ob.port[0].open);
	ob.port[0].port = -1;
	assert_int_equal(rz_port_refused(f->rz, slice_str("p"), "no port",
	    0, &ob), 0);
	for (i = 0; i < ob.npush; i++) {
		if (!slice_eq(ob.push[i].round.job, slice_str("p")))
			continue;
		assert_int_equal(ob.push[i].round.state, RDZV_ROUND_FAILED);
		assert_true(slice_eq(ob.push[i].round.message,
		    slice_str("no port")));
		n++;
	}
	assert_int_equal(n, 1);
	assert_int_equal(rz_port_refused(f->rz, slice_str("p"), "again",
	    0, &ob), RDZV_ECLOSED);
	drain(f->rz);
	d = rz_job_doc(f->rz, slice_str("p"), 0);
	assert_non_null(d);
	assert_string_equal(json_string_value(json_object_get(d, "state")),
	    "failed");
	assert_string_equal(json_string_value(json_object_get(d, "failure")),
	    "no port");
	json_decref(d);
	assert_int_equal(join(f, "p", "i2", 1, 1, NULL), RDZV_ECLOSED);
}

/* An operator can evict from a running job, not from a closed one. */
static void
test_evict_closed(void **state)
{
	struct fx	*f = *state;
	int64_t		 a, b;

	assert_int_equal(join(f, "ev", "i1", 2, 2, &a), 0);
	assert_int_equal(join(f, "ev", "i2", 2, 2, &b), 0);
	rz_tick(f->rz, 1, &ob);
	drain(f->rz);
	assert_int_equal(evict(f, "ev", 99, 2),
	    RDZV_ENOTFOUND);
	assert_int_equal(evict(f, "ev", a, 2), 0);
	assert_int_equal(run(f, rz_admin_close(f->rz, slice_str("ev"),
	    slice_str("done"), 3, &ob)), 0);
	assert_int_equal(evict(f, "ev", b, 4),
	    RDZV_ECLOSED);
	assert_true(has_job(f, "ev"));
}

static void
test_purge_after_retention(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	 st;
	int64_t		 node;

	done(f, "a");
	/* Late writes under a's name, a live job whose id extends a's, and
	 * a namespace no job owns. */
	put(f, "job/a/round/1", "progress/0");
	assert_int_equal(kv_qpush(f->kv, slice_str("job/a/round/1"),
	    slice_str("q"), slice_str("x")), 0);
	put(f, "job/a/mine", "k");
	put(f, "job/a", "k");
	assert_int_equal(join(f, "a/b", "i", 1, 1, NULL), 0);
	put(f, "job/a/b/round/1", "live");
	put(f, "job/ab/round/1", "k");
	assert_true(NK(f, "\0rdzv/ev/a") > 0);
	assert_int_equal(NK(f, "\0rdzv/node/a"), 1);

	assert_int_equal(rz_next_purge(f->rz), 1000000 + 1000);
	assert_int_equal(rz_retention_left(f->rz, slice_str("a"), wall + 400),
	    600);
	assert_int_equal(rz_retention_left(f->rz, slice_str("a/b"), wall), -1);
	assert_int_equal(purge(f, wall + 999, 10, 1000), 0);
	assert_int_equal(join(f, "a", "j", 1, 1, NULL), RDZV_ECLOSED);
	assert_true(has_job(f, "a"));

	assert_int_equal(purge(f, wall + 1000, 10, 1000), 1);
	assert_int_equal(npurged, 1);
	assert_string_equal(purged[0], "a succeeded");
	assert_false(has_job(f, "a"));
	assert_null(rz_status(f->rz, slice_str("a"), 0));
	assert_int_equal(NK(f, "job/a/round/1"), 0);
	assert_int_equal(kv_qlen(f->kv, slice_str("job/a/round/1"),
	    slice_str("q")), 0);
	assert_int_equal(NK(f, "job/a/mine"), 0);
	assert_int_equal(NK(f, "job/a"), 0);
	assert_int_equal(NK(f, "\0rdzv/ev/a"), 0);
	assert_int_equal(NK(f, "\0rdzv/node/a"), 0);
	assert_int_equal(kv_num_keys(f->kv, (struct slice){
	    (const uint8_t *)"\0rdzv/job", 9 }), 1);	/* a/b's row */
	assert_int_equal(NK(f, "job/a/b/round/1"), 1);
	assert_int_equal(NK(f, "job/ab/round/1"), 1);
	assert_true(has_job(f, "a/b"));
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.jobs_purged_total, 1);
	assert_int_equal(st.jobs_closed, 0);
	assert_true(purged_keys >= 8);
	assert_int_equal(rz_next_purge(f->rz), -1);

	/* The id starts a new job, from round 1. */
	assert_int_equal(join(f, "a", "j", 1, 1, &node), 0);
	assert_int_equal(node, 1);
	assert_int_equal(succeeded(f, "a", node, 1), 0);
}

static void
test_purge_in_batches_oldest_first(void **state)
{
	struct fx	*f = *state;
	char		 id[16];
	int		 i;

	for (i = 0; i < 10; i++) {
		snprintf(id, sizeof id, "j%d", 9 - i);	/* not id order */
		done(f, id);
		wall += 10;
	}
	assert_int_equal(purge(f, wall + 5000, 3, 100000), 3);
	assert_int_equal(purge(f, wall + 5000, 3, 100000), 3);
	assert_int_equal(purge(f, wall + 5000, 3, 100000), 3);
	/* A key budget smaller than one job still purges one. */
	assert_int_equal(purge(f, wall + 5000, 3, 1), 1);
	assert_int_equal(purge(f, wall + 5000, 3, 100000), 0);
	assert_int_equal(npurged, 10);
	for (i = 0; i < 10; i++) {
		snprintf(id, sizeof id, "j%d succeeded", 9 - i);
		assert_string_equal(purged[i], id);
	}
	assert_int_equal(kv_total_keys(f->kv), 0);
}

static void
test_only_due_jobs_purged(void **state)
{
	struct fx	*f = *state;

	done(f, "old");
	wall += 600;
	done(f, "new");
	assert_int_equal(purge(f, wall + 500, 10, 100000), 1);
	assert_string_equal(purged[0], "old succeeded");
	assert_true(has_job(f, "new"));
	assert_int_equal(rz_next_purge(f->rz), wall + 1000);
}

static void
test_running_and_forming_never_purged(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	 st;

	assert_int_equal(join(f, "run", "i", 1, 1, NULL), 0);
	assert_int_equal(join(f, "form", "i", 2, 2, NULL), 0);
	assert_int_equal(rz_next_purge(f->rz), -1);
	assert_int_equal(purge(f, wall + 100000000, 100, 100000), 0);
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.jobs_running, 1);
	assert_int_equal(st.jobs_forming, 1);
	/* Failed jobs (operator close) go like succeeded ones. */
	assert_int_equal(run(f, rz_admin_close(f->rz, slice_str("run"),
	    slice_str("why"), 0, &ob)), 0);
	assert_int_equal(purge(f, wall + 1000, 100, 100000), 1);
	assert_string_equal(purged[0], "run failed");
	assert_true(has_job(f, "form"));
}

static void
test_retention_zero_keeps(void **state)
{
	struct fx	*f = *state;

	rz_set_retention(f->rz, 0);
	done(f, "k");
	assert_int_equal(rz_next_purge(f->rz), -1);
	assert_int_equal(rz_retention_left(f->rz, slice_str("k"), wall), -1);
	assert_int_equal(purge(f, wall + 100000000, 100, 100000), 0);
	assert_true(has_job(f, "k"));
	assert_int_equal(join(f, "k", "j", 1, 1, NULL), RDZV_ECLOSED);
	/* Turned on later, it counts from the close. */
	rz_set_retention(f->rz, 1000);
	assert_int_equal(rz_next_purge(f->rz), wall + 1000);
}

static void
test_reload_keeps_close_time(void **state)
{
	struct fx	*f = *state;
	struct slice	 v;
	json_t		*row;
	char		*text;

	done(f, "r1");
	wall += 200;
	done(f, "r2");
	/* Drop r2's closed_ms: a row from before retention existed falls
	 * back to its close event's time. */
	assert_int_equal(kv_get(f->kv, (struct slice){
	    (const uint8_t *)"\0rdzv/job", 9 }, slice_str("r2"), &v), 0);
	assert_non_null(row = json_loadb((const char *)v.p, v.len, 0, NULL));
	assert_int_equal(json_object_del(row, "closed_ms"), 0);
	assert_non_null(text = json_dumps(row, JSON_COMPACT));
	json_decref(row);
	assert_int_equal(kv_set(f->kv, (struct slice){
	    (const uint8_t *)"\0rdzv/job", 9 }, slice_str("r2"),
	    slice_str(text)), 0);
	free(text);

	/* "Restart" much later: a new machine over the same rows. */
	rz_free(f->rz);
	assert_non_null(f->rz = rz_new(f->kv, &hooks, 0, 60000));
	rz_set_retention(f->rz, 1000);
	wall += 50000;
	assert_int_equal(run(f, rz_load(f->rz, 0, &ob)), 0);
	assert_int_equal(rz_next_purge(f->rz), 1000000 + 1000);
	assert_int_equal(purge(f, 1000000 + 1100, 10, 100000), 1);
	assert_string_equal(purged[0], "r1 succeeded");
	assert_int_equal(rz_next_purge(f->rz), 1000000 + 200 + 1000);
	assert_int_equal(purge(f, wall, 10, 100000), 1);
	assert_int_equal(kv_total_keys(f->kv), 0);

	/* Closed by a clock that has since been set back a day: counted
	 * from the reload, not kept a day longer. */
	done(f, "r3");
	rz_free(f->rz);
	assert_non_null(f->rz = rz_new(f->kv, &hooks, 0, 60000));
	rz_set_retention(f->rz, 1000);
	wall -= 86400000;
	assert_int_equal(run(f, rz_load(f->rz, 0, &ob)), 0);
	assert_int_equal(rz_next_purge(f->rz), wall + 1000);
}

static void
test_sweep_dead_rounds(void **state)
{
	struct fx	*f = *state;
	struct nat_failure	 fr;
	int64_t			 n1, n2;

	/* Leftovers under a new job's name are gone when it is created;
	 * namespaces that are not rounds stay. */
	put(f, "job/s/round/1", "stale");
	put(f, "job/s/round/7", "stale");
	put(f, "job/s/cfg", "keep");
	assert_int_equal(join(f, "s", "i1", 2, 2, &n1), 0);
	assert_int_equal(NK(f, "job/s/round/1"), 0);
	assert_int_equal(NK(f, "job/s/round/7"), 0);
	assert_int_equal(NK(f, "job/s/cfg"), 1);
	assert_int_equal(join(f, "s", "i2", 2, 2, &n2), 0);	/* round 1 */
	put(f, "job/s/round/1", "r1");
	put(f, "job/s/round/1x", "odd");

	memset(&fr, 0, sizeof fr);
	fr.job = slice_str("s");
	fr.node_id = n1;
	fr.round = 1;
	fr.exit_code = 1;
	fr.message = slice_str("boom");
	/* round 2 */
	assert_int_equal(run(f, rz_failure(f->rz, &fr, 0, &ob)), 0);
	assert_int_equal(NK(f, "job/s/round/1"), 0);
	put(f, "job/s/round/1", "late");
	put(f, "job/s/round/2", "live");
	assert_int_equal(rz_sweep(f->rz), 1);
	assert_int_equal(NK(f, "job/s/round/1"), 0);
	assert_int_equal(NK(f, "job/s/round/2"), 1);
	assert_int_equal(NK(f, "job/s/round/1x"), 1);
	assert_int_equal(NK(f, "job/s/cfg"), 1);
	assert_int_equal(rz_sweep(f->rz), 0);

	/* Closed: its last round is dead too. */
	assert_int_equal(succeeded(f, "s", n1, 2), 0);
	assert_int_equal(succeeded(f, "s", n2, 2), 0);
	assert_int_equal(NK(f, "job/s/round/2"), 0);
	put(f, "job/s/round/2", "late");
	assert_int_equal(rz_sweep(f->rz), 1);
	assert_int_equal(NK(f, "job/s/cfg"), 1);
}

/* JOIN of inst to a two-node job "ob" (lws workers) from conn, without
 * draining: the outbox stays to be looked at. */
static int
join_keep(struct fx *f, const char *inst, int64_t lws, void *conn)
{
	struct nat_join	r;

	join_req(&r, "ob", inst, 2, 2);
	r.local_world_size = lws;
	r.lease_ms = 1000;
	return rz_join(f->rz, &r, conn, 0, &ob);
}

/*
 * The JOIN that forms a round: its outbox holds the reply's fields, one
 * port to open, and a RUNNING push per node in rank order whose port is
 * filled by rz_settle from the port the adapter opened; the round's
 * ranks, bases and sizes are in the pushes.  A JOIN that does not form
 * one asks for nothing but its reply and the lease timer.
 */
static void
test_outbox_join_forms_round(void **state)
{
	struct fx		*f = *state;
	struct nat_round	*p;

	assert_int_equal(join_keep(f, "i1", 2, &conn_a), 0);
	assert_int_equal(ob.node_id, 1);
	assert_int_equal(ob.lease_ms, 1000);
	assert_int_equal(ob.npush, 0);
	assert_int_equal(ob.nport, 0);
	rz_settle(f->rz, &ob);
	assert_int_equal(ob.deadline, 1000);		/* its lease */
	drain(f->rz);

	assert_int_equal(join_keep(f, "i2", 3, &conn_b), 0);
	assert_int_equal(ob.node_id, 2);
	assert_int_equal(ob.restart_count, 0);
	assert_int_equal(ob.nport, 1);
	assert_true(ob.port[0].open);
	assert_string_equal(ob.port[0].job, "ob");
	assert_string_equal(ob.port[0].ns, "job/ob/round/1");
	assert_int_equal(ob.port[0].want, 0);
	assert_int_equal(ob.npush, 2);
	assert_ptr_equal(ob.push[0].conn, &conn_a);
	assert_ptr_equal(ob.push[1].conn, &conn_b);
	assert_true(ob.push[0].port_pending && ob.push[1].port_pending);
	ob.port[0].port = 5555;		/* what the adapter got */
	rz_settle(f->rz, &ob);
	p = &ob.push[0].round;
	assert_int_equal(p->state, RDZV_ROUND_RUNNING);
	assert_int_equal(p->node_id, 1);
	assert_int_equal(p->round, 1);
	assert_int_equal(p->group_rank, 0);
	assert_int_equal(p->rank_base, 0);
	assert_int_equal(p->group_world_size, 2);
	assert_int_equal(p->world_size, 5);
	assert_int_equal(p->store_port, 5555);
	assert_memory_equal(p->store_ns.p, "job/ob/round/1", 14);
	p = &ob.push[1].round;
	assert_int_equal(p->node_id, 2);
	assert_int_equal(p->group_rank, 1);
	assert_int_equal(p->rank_base, 2);
	assert_int_equal(p->store_port, 5555);
	rz_outbox_reset(&ob);
	/* The job row went out with the port. */
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, -1,
	    &conn_a, 10, &ob)), 0);
	{
		char	*st = rz_status(f->rz, slice_str("ob"), 0);

		assert_non_null(strstr(st, "port 5555"));
		free(st);
	}
}

/*
 * A FAILURE with restarts left: STOP to each member, the old round's
 * port closed, the next round's opened, RUNNING pushes naming restart 1.
 * One with none left closes the job: FAILED to each, naming the failure.
 */
static void
test_outbox_failure(void **state)
{
	struct fx		*f = *state;
	struct nat_failure	 fr;

	assert_int_equal(run(f, join_keep(f, "i1", 1, &conn_a)), 0);
	assert_int_equal(run(f, join_keep(f, "i2", 1, &conn_b)), 0);
	memset(&fr, 0, sizeof fr);
	fr.job = slice_str("ob");
	fr.node_id = 2;
	fr.round = 1;
	fr.rank = 1;
	fr.exit_code = 7;
	fr.message = slice_str("boom");
	assert_int_equal(rz_failure(f->rz, &fr, 5, &ob), 0);
	assert_int_equal(ob.npush, 4);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STOP);
	assert_int_equal(ob.push[1].round.state, RDZV_ROUND_STOP);
	assert_int_equal(ob.push[0].round.round, 1);
	assert_int_equal(ob.push[2].round.state, RDZV_ROUND_RUNNING);
	assert_int_equal(ob.push[3].round.state, RDZV_ROUND_RUNNING);
	assert_int_equal(ob.push[2].round.round, 2);
	assert_int_equal(ob.push[2].round.restart_count, 1);
	assert_int_equal(ob.nport, 2);
	assert_false(ob.port[0].open);
	assert_true(ob.port[1].open);
	assert_string_equal(ob.port[1].ns, "job/ob/round/2");
	drain(f->rz);
	/* The survivors' echo of the same failure changes nothing. */
	fr.node_id = 1;
	assert_int_equal(rz_failure(f->rz, &fr, 6, &ob), 0);
	assert_int_equal(ob.npush, 0);
	assert_int_equal(ob.nport, 0);
	drain(f->rz);
}

static void
test_outbox_failure_closes(void **state)
{
	struct fx		*f = *state;
	struct nat_join		 r;
	struct nat_failure	 fr;

	join_req(&r, "fc", "i1", 1, 1);
	r.max_restarts = 0;
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_a, 0, &ob)), 0);
	memset(&fr, 0, sizeof fr);
	fr.job = slice_str("fc");
	fr.node_id = 1;
	fr.round = 1;
	fr.signo = 9;
	fr.message = slice_str("");
	assert_int_equal(rz_failure(f->rz, &fr, 5, &ob), 0);
	assert_int_equal(ob.npush, 1);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_FAILED);
	assert_non_null(memmem(ob.push[0].round.message.p,
	    ob.push[0].round.message.len, "signal 9", 8));
	assert_int_equal(ob.nport, 1);
	assert_false(ob.port[0].open);
	rz_settle(f->rz, &ob);
	assert_int_equal(ob.purge_at, wall + 1000);	/* retention */
	drain(f->rz);
}

/*
 * A member's lease runs out: the tick stops the survivor, closes the
 * round's port and waits for a second node (no round, no port); the next
 * deadline is the survivor's lease.
 */
static void
test_outbox_lease_expiry(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(run(f, join_keep(f, "i1", 1, &conn_a)), 0);
	assert_int_equal(run(f, join_keep(f, "i2", 1, &conn_b)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, -1,
	    &conn_a, 600, &ob)), 0);
	rz_tick(f->rz, 999, &ob);
	assert_int_equal(ob.npush, 0);
	rz_settle(f->rz, &ob);
	assert_int_equal(ob.deadline, 1000);
	drain(f->rz);
	rz_tick(f->rz, 1000, &ob);
	assert_int_equal(ob.npush, 1);
	assert_ptr_equal(ob.push[0].conn, &conn_a);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STOP);
	assert_int_equal(ob.nport, 1);
	assert_false(ob.port[0].open);
	assert_string_equal(ob.port[0].job, "ob");
	rz_settle(f->rz, &ob);
	assert_int_equal(ob.deadline, 1600);
	drain(f->rz);
	/* A heartbeat from the lost node: it must JOIN again. */
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, -1,
	    &conn_b, 1001, &ob)), RDZV_ENOTFOUND);
}

static void
kv_put_ns(struct fx *f, const char *ns, size_t nslen, const char *key,
    const char *val)
{
	assert_int_equal(kv_set(f->kv, (struct slice){ (const uint8_t *)ns,
	    nslen }, slice_str(key), slice_str(val)), 0);
}
#define PUT(f, lit, key, val)	kv_put_ns((f), (lit), sizeof(lit) - 1, \
				    (key), (val))

/*
 * Rows an older rdzvd wrote as k=v text load: a running job (its nodes,
 * ranks, port asked again), a closed one whose failure and events were
 * escaped and whose row has no closed_ms (its close event's time counts).
 */
static void
test_legacy_rows_load(void **state)
{
	struct fx	*f = *state;
	json_t		*doc, *m;
	char		*text;

	PUT(f, "\0rdzv/job", "L", "min=2\nmax=2\nmax_restarts=3\n"
	    "last_call_ms=0\nlease_ms=60000\nstate=2\nround=2\nrestarts=1\n"
	    "next_node=3\nnext_join=2\nnext_event=1\nport=7777\nworld=5\n"
	    "closed_ms=-1\nfailure=\n");
	PUT(f, "\0rdzv/node/L", "1", "instance=ia\nhost=ha\naddr=1.2.3.4\n"
	    "pid=10\nlws=3\nstate=2\ngroup_rank=1\nprev_rank=1\n"
	    "join_seq=0\nsucceeded=0\nwant_rank=-1\n");
	PUT(f, "\0rdzv/node/L", "2", "instance=ib\nhost=hb\naddr=\n"
	    "pid=11\nlws=2\nstate=2\ngroup_rank=0\nprev_rank=0\n"
	    "join_seq=1\nsucceeded=0\nwant_rank=-1\n");
	PUT(f, "\0rdzv/ev/L", "00000000000000000000", "999000 join node 1");
	PUT(f, "\0rdzv/job", "C", "min=1\nmax=1\nmax_restarts=0\n"
	    "last_call_ms=0\nlease_ms=60000\nstate=4\nround=1\nrestarts=0\n"
	    "next_node=2\nnext_join=1\nnext_event=2\nport=0\nworld=0\n"
	    "failure=rank 0: a=b\\nline two \\\\ end\n");
	PUT(f, "\0rdzv/ev/C", "00000000000000000000", "999100 job created");
	PUT(f, "\0rdzv/ev/C", "00000000000000000001",
	    "999500 close failed: x\\ny");

	assert_int_equal(run(f, rz_load(f->rz, 0, &ob)), 0);
	assert_non_null(doc = rz_job_doc(f->rz, slice_str("L"), 0));
	assert_string_equal(json_string_value(json_object_get(doc, "state")),
	    "running");
	assert_int_equal(json_integer_value(json_object_get(doc, "round")), 2);
	assert_int_equal(json_integer_value(json_object_get(doc,
	    "store_port")), 7777);
	m = json_array_get(json_object_get(doc, "members"), 0);
	assert_string_equal(json_string_value(json_object_get(m, "host")),
	    "ha");
	assert_int_equal(json_integer_value(json_object_get(m, "rank_base")),
	    2);
	m = json_array_get(json_object_get(doc, "members"), 1);
	assert_int_equal(json_integer_value(json_object_get(m, "node_id")), 2);
	assert_int_equal(json_integer_value(json_object_get(m, "rank_base")),
	    0);
	json_decref(doc);

	assert_non_null(doc = rz_job_doc(f->rz, slice_str("C"), 0));
	assert_string_equal(json_string_value(json_object_get(doc, "failure")),
	    "rank 0: a=b\nline two \\ end");
	json_decref(doc);
	assert_non_null(doc = rz_events_doc(f->rz, slice_str("C"), -1));
	assert_non_null(text = json_dumps(doc, JSON_COMPACT));
	json_decref(doc);
	assert_non_null(strstr(text, "\"time_ms\":999500,"
	    "\"text\":\"close failed: x\\ny\""));
	free(text);
	assert_int_equal(rz_next_purge(f->rz), 999500 + 1000);

	/* The agent of node 1 comes back: the same node, rank 1, base 2. */
	{
		struct nat_join	r;

		join_req(&r, "L", "ia", 2, 2);
		r.local_world_size = 3;
		assert_int_equal(rz_join(f->rz, &r, &conn_a, 1, &ob), 0);
		assert_int_equal(ob.node_id, 1);
		assert_int_equal(ob.restart_count, 1);
		assert_int_equal(ob.npush, 1);
		assert_int_equal(ob.push[0].round.group_rank, 1);
		assert_int_equal(ob.push[0].round.rank_base, 2);
		assert_int_equal(ob.push[0].round.world_size, 5);
		drain(f->rz);
	}
}

/* ---- repair rounds ---- */

/* Two nodes of two workers in job "ob", both repairable when rep (the
 * second only when rep2), the round formed and drained. */
static void
repair_job(struct fx *f, int rep1, int rep2)
{
	assert_int_equal(run(f, join_keep(f, "i1", 2, &conn_a)), 0);
	assert_int_equal(run(f, join_keep(f, "i2", 2, &conn_b)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, rep1,
	    &conn_a, 10, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, rep2,
	    &conn_b, 10, &ob)), 0);
}

/* A FAILURE of local rank l on node (round), with repair asked. */
static int
fail_repair(struct fx *f, int64_t node, int64_t round, int64_t l,
    int64_t now)
{
	struct nat_failure	fr;

	memset(&fr, 0, sizeof fr);
	fr.job = slice_str("ob");
	fr.node_id = node;
	fr.round = round;
	fr.local_rank = l;
	fr.rank = (node - 1) * 2 + l;
	fr.signo = 9;
	fr.message = slice_str("");
	fr.repair = 1;
	return rz_failure(f->rz, &fr, now, &ob);
}

static int
ready(struct fx *f, int64_t node, int64_t round, int64_t l, int64_t now)
{
	struct nat_ready	r;

	memset(&r, 0, sizeof r);
	r.job = slice_str("ob");
	r.node_id = node;
	r.round = round;
	r.local_rank = l;
	return rz_ready(f->rz, &r, now, &ob);
}

/* The job's events hold text. */
static int
event_has(struct fx *f, const char *text)
{
	json_t	*ev = rz_events_doc(f->rz, slice_str("ob"), -1);
	char	*s = json_dumps(ev, 0);
	int	 found = s != NULL && strstr(s, text) != NULL;

	free(s);
	json_decref(ev);
	return found;
}

/* Asserts push i is a RUNNING repair round push of kind for node. */
static void
assert_repair_push(size_t i, int64_t kind, int64_t round, int64_t node,
    int64_t world, int64_t base, int64_t donor, int64_t live)
{
	struct nat_round	*p = &ob.push[i].round;

	assert_int_equal(p->state, RDZV_ROUND_RUNNING);
	assert_int_equal(p->kind, kind);
	assert_int_equal(p->round, round);
	assert_int_equal(p->node_id, node);
	assert_int_equal(p->world_size, world);
	assert_int_equal(p->rank_base, base);
	assert_int_equal(p->donor, donor);
	assert_int_equal(p->live_local, live);
	assert_int_equal(p->restart_count, 0);
}

/*
 * A repairable job: a worker's FAILURE with repair=1 opens a SHRINK
 * round at once (no STOP, no restart counted, the old port closed and a
 * fresh one with a fresh namespace, ranks over the live workers, the
 * dead rank out of live_local, the lowest survivor donor), with the
 * replacement's deadline armed; its READY opens a GROW round with every
 * worker back.  The death told again and stale READYs change nothing.
 */
static void
test_repair_shrink_grow(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	 st;

	repair_job(f, 1, 1);
	put(f, "job/ob/round/1", "came");
	assert_int_equal(fail_repair(f, 2, 1, 1, 100), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_SHRINK, 2, 1, 3, 0, 0, 3);
	assert_repair_push(1, NAT_KIND_SHRINK, 2, 2, 3, 2, 0, 1);
	assert_int_equal(ob.nport, 2);
	assert_false(ob.port[0].open);
	assert_true(ob.port[1].open);
	assert_string_equal(ob.port[1].ns, "job/ob/round/2");
	assert_int_equal(ob.port[1].want, 0);
	assert_true(ob.push[0].port_pending && ob.push[1].port_pending);
	ob.port[1].port = 6000;		/* what the adapter got */
	rz_settle(f->rz, &ob);
	assert_int_equal(ob.push[0].round.store_port, 6000);
	assert_int_equal(ob.push[1].round.store_port, 6000);
	assert_int_equal(ob.deadline, 1000);	/* a lease is sooner */
	drain(f->rz);
	assert_true(event_has(f, "repair: shrink to 3 after node 2 local "
	    "rank 1 died (signal 9), round 2, donor 0"));
	/* The same death told again: nothing. */
	assert_int_equal(fail_repair(f, 2, 1, 1, 101), 0);
	assert_int_equal(ob.npush + ob.nport, 0);
	drain(f->rz);
	/* A READY for another local rank: nothing. */
	assert_int_equal(ready(f, 2, 2, 0, 150), 0);
	assert_int_equal(ob.npush + ob.nport, 0);
	drain(f->rz);

	/* The round a repair round ended keeps its keys (a late worker
	 * reads there whether its peers came), the sweep too; the next
	 * repair round drops it. */
	assert_int_equal(NK(f, "job/ob/round/1"), 1);
	assert_int_equal(rz_sweep(f->rz), 0);
	assert_int_equal(NK(f, "job/ob/round/1"), 1);
	put(f, "job/ob/round/2", "came");

	assert_int_equal(ready(f, 2, 2, 1, 200), 0);
	assert_int_equal(NK(f, "job/ob/round/1"), 0);
	assert_int_equal(NK(f, "job/ob/round/2"), 1);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_GROW, 3, 1, 4, 0, 0, 3);
	assert_repair_push(1, NAT_KIND_GROW, 3, 2, 4, 2, 0, 3);
	assert_int_equal(ob.nport, 2);
	assert_string_equal(ob.port[1].ns, "job/ob/round/3");
	rz_settle(f->rz, &ob);
	assert_int_equal(ob.deadline, 1000);	/* the leases again */
	drain(f->rz);
	assert_true(event_has(f, "repair: grow to 4, node 2 local rank 1 "
	    "back, round 3, donor 0"));
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.repairs_total, 2);
	assert_int_equal(st.restarts_total, 0);
	/* A second READY is late news. */
	assert_int_equal(ready(f, 2, 3, 1, 210), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
}

/*
 * The donor is the lowest surviving old rank: with global rank 0 dead
 * it is the next live worker, new rank 0 in the shrink round; in the
 * grow round rank 0 is the replacement, so the donor is rank 1.
 */
static void
test_repair_donor(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(fail_repair(f, 1, 1, 0, 100), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_SHRINK, 2, 1, 3, 0, 0, 2);
	assert_repair_push(1, NAT_KIND_SHRINK, 2, 2, 3, 1, 0, 3);
	drain(f->rz);
	assert_int_equal(ready(f, 1, 2, 0, 200), 0);
	assert_repair_push(0, NAT_KIND_GROW, 3, 1, 4, 0, 1, 3);
	assert_repair_push(1, NAT_KIND_GROW, 3, 2, 4, 2, 1, 3);
	drain(f->rz);
}

/* Asserts ob holds a restart: STOP to both members, then round 2
 * formed anew (kind NORMAL), restart 1; and the escalation's event. */
static void
assert_restart(struct fx *f, int64_t round, const char *why)
{
	assert_int_equal(ob.npush, 4);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STOP);
	assert_int_equal(ob.push[1].round.state, RDZV_ROUND_STOP);
	assert_int_equal(ob.push[2].round.state, RDZV_ROUND_RUNNING);
	assert_int_equal(ob.push[2].round.kind, NAT_KIND_NORMAL);
	assert_int_equal(ob.push[2].round.round, round);
	assert_int_equal(ob.push[2].round.world_size, 4);
	assert_int_equal(ob.push[2].round.restart_count, 1);
	drain(f->rz);
	if (why != NULL)
		assert_true(event_has(f, why));
}

/* A node that never said repairable: the FAILURE restarts. */
static void
test_repair_not_repairable(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, -1);
	assert_int_equal(fail_repair(f, 1, 1, 0, 100), 0);
	assert_restart(f, 2, "repair escalated to restart: node 2 (host h) "
	    "cannot repair");
	/* Repairable is said again for the new round's workers. */
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 110, &ob)), 0);
	assert_int_equal(fail_repair(f, 1, 2, 0, 120), 0);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STOP);
	drain(f->rz);
}

/*
 * Replica groups, pure: rank h of replicas x shards is replica h /
 * shards, shard h % shards; a lost rank's donor is its shard in the
 * lowest other replica with no dead rank; replicas must divide the world.
 */
static void
test_topo_pure(void **state)
{
	struct rz_topo	t;
	uint64_t	dead[2] = { 0, 0 };
	char		why[256];

	(void)state;
	assert_int_equal(rz_topo_check(8, 2, why, sizeof why), 0);
	assert_int_equal(rz_topo_check(6, 4, why, sizeof why), RDZV_EINVAL);
	assert_non_null(strstr(why, "replicas=4 does not divide the world "
	    "of 6 ranks"));
	assert_int_equal(rz_topo_check(6, 0, why, sizeof why), RDZV_EINVAL);
	rz_topo_rank(8, 2, 5, &t);
	assert_int_equal(t.replicas, 2);
	assert_int_equal(t.shards, 4);
	assert_int_equal(t.replica, 1);
	assert_int_equal(t.shard, 1);
	/* 3 x 2: rank 1 (replica 0, shard 1) died. */
	dead[0] = 1ULL << 1;
	assert_int_equal(rz_topo_donor(6, 3, 1, dead), 3);
	/* ... and rank 2 of replica 1 too: replica 2 holds shard 1. */
	dead[0] |= 1ULL << 2;
	assert_int_equal(rz_topo_donor(6, 3, 1, dead), 5);
	/* Every other replica has a dead rank: none. */
	dead[0] |= 1ULL << 4;
	assert_int_equal(rz_topo_donor(6, 3, 1, dead), -1);
	/* Homes past 64 use the next word. */
	memset(dead, 0, sizeof dead);
	dead[1] = 1ULL << (70 - 64);
	assert_int_equal(rz_topo_donor(128, 2, 6, dead), -1);
	assert_int_equal(rz_topo_donor(128, 2, 70, dead), 6);
	/* One replica: no donor ever. */
	memset(dead, 0, sizeof dead);
	assert_int_equal(rz_topo_donor(4, 1, 2, dead), -1);
}

/* JOIN of inst to job "ob" (two nodes of lws workers, replicas). */
static int
join_replicas(struct fx *f, const char *inst, int64_t lws, int64_t replicas,
    void *conn)
{
	struct nat_join	r;

	join_req(&r, "ob", inst, 2, 2);
	r.local_world_size = lws;
	r.lease_ms = 1000;
	r.replicas = replicas;
	return rz_join(f->rz, &r, conn, 0, &ob);
}

/*
 * A job of replica groups: a JOIN that disagrees on replicas is refused;
 * replicas that do not divide the world fail the job as the round would
 * form, saying why.
 */
static void
test_topo_form_refused(void **state)
{
	struct fx	*f = *state;
	json_t		*doc;
	char		*s;

	assert_int_equal(run(f, join_replicas(f, "i1", 2, 3, &conn_a)), 0);
	assert_int_equal(run(f, join_replicas(f, "i2", 2, 2, &conn_b)),
	    RDZV_EINVAL);
	assert_int_equal(run(f, join_replicas(f, "i2", 2, 3, &conn_b)), 0);
	assert_non_null(doc = rz_job_doc(f->rz, slice_str("ob"), 0));
	assert_non_null(s = json_dumps(doc, 0));
	assert_non_null(strstr(s, "\"state\": \"failed\""));
	free(s);
	json_decref(doc);
	assert_true(event_has(f, "close failed: replicas=3 does not divide "
	    "the world of 4 ranks"));
}

/* Two nodes of two workers in replicas replica groups, running round 1,
 * both able to repair. */
static void
topo_job(struct fx *f, int64_t replicas)
{
	assert_int_equal(run(f, join_replicas(f, "i1", 2, replicas, &conn_a)),
	    0);
	assert_int_equal(run(f, join_replicas(f, "i2", 2, replicas, &conn_b)),
	    0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 10, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 1,
	    &conn_b, 10, &ob)), 0);
}

/*
 * 2 replicas x 2 shards over two nodes of two workers: a death shrinks
 * as in any repairable job, and the event names the replica group, the
 * shard and the donor of that shard (the same shard of the other
 * replica).  One replica (plain FSDP2): no peer holds the shard, the
 * failure restarts the job, and the event says so.
 */
static void
test_topo_repair(void **state)
{
	struct fx	*f = *state;

	topo_job(f, 2);
	assert_int_equal(fail_repair(f, 1, 1, 1, 100), 0);
	assert_repair_push(0, NAT_KIND_SHRINK, 2, 1, 3, 0, 0, 1);
	drain(f->rz);
	assert_true(event_has(f, "replica group 0 lost rank 1 (shard 1 of "
	    "2): it waits for its replacement, the other replicas step on; "
	    "donor of shard 1: rank 3"));
	assert_true(event_has(f, "repair: shrink to 3"));
}

/*
 * A second death in the replica group that waits (its survivor, rank 0)
 * shrinks again, with the donor of its shard named; the first
 * replacement's READY opens nothing, the second's one grow for both.
 */
static void
test_topo_second_death(void **state)
{
	struct fx	*f = *state;

	topo_job(f, 2);
	assert_int_equal(run(f, fail_repair(f, 1, 1, 1, 100)), 0);
	assert_int_equal(fail_repair(f, 1, 2, 0, 110), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_SHRINK, 3, 1, 2, 0, 0, 0);
	assert_repair_push(1, NAT_KIND_SHRINK, 3, 2, 2, 0, 0, 3);
	drain(f->rz);
	assert_true(event_has(f, "replica group 0 lost rank 0 (shard 0 of "
	    "2): it waits for its replacement, the other replicas step on; "
	    "donor of shard 0: rank 2"));
	assert_true(event_has(f, "(during a repair: another replacement on "
	    "its way)"));
	assert_int_equal(ready(f, 1, 3, 1, 200), 0);
	assert_int_equal(ob.npush + ob.nport, 0);
	drain(f->rz);
	assert_int_equal(ready(f, 1, 3, 0, 300), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_GROW, 4, 1, 4, 0, 2, 3);
	assert_repair_push(1, NAT_KIND_GROW, 4, 2, 4, 2, 2, 3);
	drain(f->rz);
	assert_false(event_has(f, "escalated"));
}

/* A death in the other replica while the first waits leaves no replica
 * whole: nobody holds every shard, the job restarts, saying why. */
static void
test_topo_no_whole_replica_restarts(void **state)
{
	struct fx	*f = *state;

	topo_job(f, 2);
	assert_int_equal(run(f, fail_repair(f, 1, 1, 1, 100)), 0);
	assert_int_equal(fail_repair(f, 2, 2, 0, 110), 0);
	assert_restart(f, 3, "repair escalated to restart: every replica "
	    "group would have lost a rank: no peer holds every shard, so the "
	    "job restarts from its checkpoint");
}

/* A lost node with no standby: the ranks would be renumbered, which
 * replica groups cannot be; the job restarts and says so. */
static void
test_topo_lost_node_restarts(void **state)
{
	struct fx	*f = *state;

	topo_job(f, 2);
	assert_int_equal(rz_leave(f->rz, slice_str("ob"), 2, 100, &ob), 0);
	assert_int_equal(ob.npush, 1);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STOP);
	drain(f->rz);
	assert_true(event_has(f, "repair escalated to restart: node 2 (host "
	    "h) lost (it left): replica groups keep every rank's place: a "
	    "node joins, leaves or is lost with no standby node by a "
	    "restart"));
}

static void
test_topo_one_replica_restarts(void **state)
{
	struct fx	*f = *state;

	topo_job(f, 1);
	assert_int_equal(fail_repair(f, 1, 1, 1, 100), 0);
	assert_restart(f, 2, "repair escalated to restart: one replica "
	    "(plain FSDP2): no peer holds the lost shard, so the job "
	    "restarts from its checkpoint");
}

/*
 * The donor stays who it was while it lives: after two deaths the donor
 * is node 1's local rank 1; one grow takes both replacements in (donor
 * rank 1, never a replacement).  A third death right after that grow
 * (node 2's local rank 0) shrinks with the same donor, rank 1, and not
 * rank 0, node 1's replacement, which may not have its state yet.
 */
static void
test_repair_two_grows_keep_donor(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	assert_int_equal(run(f, fail_repair(f, 1, 2, 0, 110)), 0);
	assert_int_equal(run(f, ready(f, 1, 3, 0, 200)), 0);
	assert_int_equal(ready(f, 2, 3, 1, 201), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_GROW, 4, 1, 4, 0, 1, 3);
	assert_repair_push(1, NAT_KIND_GROW, 4, 2, 4, 2, 1, 3);
	drain(f->rz);
	assert_int_equal(fail_repair(f, 2, 4, 0, 210), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_SHRINK, 5, 1, 3, 0, 1, 3);
	assert_repair_push(1, NAT_KIND_SHRINK, 5, 2, 3, 2, 1, 2);
	drain(f->rz);
	assert_true(event_has(f, "repair: shrink to 3 after node 2 local rank "
	    "0 died (signal 9), round 5, donor 1"));
}

/*
 * A second failure while the first replacement is on its way shrinks
 * again (world 2, no restart); the first replacement's READY opens no
 * round (a grow now would catch the second bootstrapping in a round the
 * others leave), the second's opens one grow to 4 for both, whose donor
 * is neither of them.
 */
static void
test_repair_second_failure(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	 st;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	assert_int_equal(fail_repair(f, 1, 2, 0, 110), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_SHRINK, 3, 1, 2, 0, 0, 2);
	assert_repair_push(1, NAT_KIND_SHRINK, 3, 2, 2, 1, 0, 1);
	drain(f->rz);
	assert_true(event_has(f, "repair: shrink to 2 after node 1 local rank "
	    "0 died (signal 9), round 3, donor 0 (during a repair: another "
	    "replacement on its way)"));
	/* The first replacement (node 2's local rank 1) is ready: wait. */
	assert_int_equal(ready(f, 2, 3, 1, 200), 0);
	assert_int_equal(ob.npush + ob.nport, 0);
	drain(f->rz);
	assert_int_equal(ready(f, 2, 3, 1, 210), 0);	/* a repeat */
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	/* The second: one grow for both; donor rank 1 (node 1's local
	 * rank 1), the first old rank that is no replacement. */
	assert_int_equal(ready(f, 1, 3, 0, 300), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_GROW, 4, 1, 4, 0, 1, 3);
	assert_repair_push(1, NAT_KIND_GROW, 4, 2, 4, 2, 1, 3);
	drain(f->rz);
	assert_true(event_has(f, "repair: grow to 4, 2 replacements back in "
	    "one round (failures during a repair), round 4, donor 1"));
	assert_false(event_has(f, "escalated"));
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 0);
	assert_int_equal(st.repairs_total, 3);
}

/*
 * A READY replacement is live in the next repair round even when it is
 * a shrink (a third death while it waited for its grow): it joins that
 * round, so its death after it is a member's (a shrink round), not a
 * replacement's dead before it joined (nothing shrinks: the survivors
 * would wait on it until the repair timeout).
 */
static void
test_repair_ready_in_shrink_dies(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	assert_int_equal(run(f, fail_repair(f, 1, 2, 0, 110)), 0);
	assert_int_equal(run(f, ready(f, 2, 3, 1, 200)), 0);
	/* Node 1's last worker dies: node 2's two (one the READY
	 * replacement) are the shrink round. */
	assert_int_equal(fail_repair(f, 1, 3, 1, 300), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_SHRINK, 4, 1, 2, 0, 0, 0);
	assert_repair_push(1, NAT_KIND_SHRINK, 4, 2, 2, 0, 0, 3);
	drain(f->rz);
	/* The one that came in by the shrink dies: a shrink again. */
	assert_int_equal(fail_repair(f, 2, 4, 1, 400), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(1, NAT_KIND_SHRINK, 5, 2, 1, 0, 0, 1);
	drain(f->rz);
	assert_true(event_has(f, "repair: shrink to 1 after node 2 local rank "
	    "1 died (signal 9), round 5"));
	assert_false(event_has(f, "died before it joined"));
	assert_false(event_has(f, "escalated"));
}

/*
 * The replacement named pending (the first death's) holds the state
 * once a round took it in, a shrink too: when the last first worker
 * dies it is the donor.  The pending name kept from that first death
 * used to keep it out of the donors while the repair went on, and the
 * shrink round went out with donor -1 (its agent refused to send it;
 * the job then ran on from nothing).
 */
static void
pending_joined_alone(struct fx *f)
{
	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	assert_int_equal(run(f, fail_repair(f, 1, 2, 0, 110)), 0);
	assert_int_equal(run(f, ready(f, 2, 3, 1, 200)), 0);
	/* Node 1's last worker dies: node 2's READY replacement is in. */
	assert_int_equal(fail_repair(f, 1, 3, 1, 300), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(1, NAT_KIND_SHRINK, 4, 2, 2, 0, 0, 3);
	drain(f->rz);
	/* The last first worker dies: the replacement is all that holds
	 * the state, and the donor. */
	assert_int_equal(fail_repair(f, 2, 4, 0, 400), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_SHRINK, 5, 1, 1, 0, 0, 0);
	assert_repair_push(1, NAT_KIND_SHRINK, 5, 2, 1, 0, 0, 2);
	drain(f->rz);
	assert_true(event_has(f, "repair: shrink to 1 after node 2 local rank "
	    "0 died (signal 9), round 5, donor 0"));
	assert_false(event_has(f, "escalated"));
}

static void
test_repair_pending_joined_is_donor(void **state)
{
	pending_joined_alone(*state);
}

/*
 * No repair round goes out without a worker that holds the state: the
 * one left says it never stepped (its agent's HEARTBEAT), every other
 * is a READY replacement, so the grow due has no donor and the job
 * restarts, saying why, instead of training on from nothing.
 */
static void
test_repair_no_donor_restarts(void **state)
{
	struct fx	*f = *state;

	pending_joined_alone(f);
	/* The replacement left never stepped in round 4 or 5. */
	assert_int_equal(run(f, rz_unjoined(f->rz, slice_str("ob"), 2, 2, 410,
	    &ob)), 0);
	assert_int_equal(run(f, ready(f, 1, 5, 0, 500)), 0);
	assert_int_equal(run(f, ready(f, 1, 5, 1, 510)), 0);
	assert_int_equal(ready(f, 2, 5, 0, 520), 0);
	assert_restart(f, 6, "repair escalated to restart: no live worker "
	    "holds the job's state for a grow round after round 5");
}

/* Two failures pending, the second replacement never ready: the
 * repair timeout from the second death restarts the job, naming it. */
static void
test_repair_second_failure_timeout(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	assert_int_equal(run(f, fail_repair(f, 1, 2, 0, 110)), 0);
	assert_int_equal(run(f, ready(f, 2, 3, 1, 200)), 0);
	/* Both nodes alive all along (leases of 1 s). */
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 59900, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 1,
	    &conn_b, 59900, &ob)), 0);
	rz_tick(f->rz, 110 + 59999, &ob);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	rz_tick(f->rz, 110 + 60000, &ob);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STOP);
	drain(f->rz);
	assert_true(event_has(f, "repair escalated to restart: node 1 local "
	    "rank 0: its replacement was not ready within 60000 ms"));
}

/*
 * A failure reported for the round before the repair (its agent had not
 * heard of the shrink yet) on the other node is a second failure during
 * the repair: it shrinks again.  The first death reported again is
 * nothing.
 */
static void
test_repair_second_failure_old_round(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	assert_int_equal(fail_repair(f, 2, 1, 1, 105), 0);	/* again */
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_int_equal(fail_repair(f, 1, 1, 0, 110), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_SHRINK, 3, 1, 2, 0, 0, 2);
	drain(f->rz);
	/* The second death reported again: nothing. */
	assert_int_equal(fail_repair(f, 1, 2, 0, 120), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
}

/* The replacement not READY in time: rz_tick restarts the job. */
static void
test_repair_ready_timeout(void **state)
{
	struct fx	*f = *state;
	struct nat_join	 r;

	join_req(&r, "ob", "i1", 2, 2);
	r.local_world_size = 2;
	r.lease_ms = 1000000;
	r.repair_timeout_ms = 500;
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_a, 0, &ob)), 0);
	r.instance = slice_str("i2");
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_b, 0, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 10, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 1,
	    &conn_b, 10, &ob)), 0);
	assert_int_equal(fail_repair(f, 2, 1, 1, 100), 0);
	rz_settle(f->rz, &ob);
	assert_int_equal(ob.deadline, 600);
	drain(f->rz);
	rz_tick(f->rz, 599, &ob);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	rz_tick(f->rz, 600, &ob);
	assert_restart(f, 3, "repair escalated to restart: node 2 local rank "
	    "1: its replacement was not ready within 500 ms");
	/* Its READY now is late news. */
	assert_int_equal(ready(f, 2, 2, 1, 700), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
}

/* node's HEARTBEAT says its workers last stepped in round stepped. */
static int
stepped(struct fx *f, int64_t node, int64_t round, int64_t now)
{
	return rz_stepped(f->rz, slice_str("ob"), node, round, now, &ob);
}

/*
 * After a shrink the grow waits for a step in it when every agent says
 * where its workers stepped: a warm spare READY some 20 ms after the
 * death must not take the survivors out of the shrink's group before
 * it is whole.  A step in an older round opens nothing; the first step
 * in the shrink round, from any member, opens the grow.  An agent that
 * does not say (older) holds nothing back (test_repair_shrink_grow).
 */
static void
test_repair_grow_waits_step(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(stepped(f, 1, 1, 20), 0);
	assert_int_equal(stepped(f, 2, 1, 20), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_int_equal(fail_repair(f, 2, 1, 1, 100), 0);
	assert_int_equal(ob.npush, 2);		/* shrink round 2 */
	drain(f->rz);
	assert_int_equal(ready(f, 2, 2, 1, 120), 0);
	assert_int_equal(ob.npush + ob.nport, 0);	/* held */
	drain(f->rz);
	assert_true(event_has(f, "repair: node 2 local rank 1's replacement "
	    "is ready; its grow waits for a step in shrink round 2"));
	assert_int_equal(stepped(f, 2, 1, 130), 0);	/* no news */
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_int_equal(stepped(f, 2, 2, 140), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_GROW, 3, 1, 4, 0, 0, 3);
	assert_repair_push(1, NAT_KIND_GROW, 3, 2, 4, 2, 0, 3);
	drain(f->rz);
	assert_true(event_has(f, "repair: grow to 4, node 2 local rank 1 "
	    "back, round 3, donor 0"));
	/* A later step news opens no second grow. */
	assert_int_equal(stepped(f, 1, 3, 150), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
}

/* A repairable job of two nodes whose agents say where they stepped
 * (round 1), with leases that outlive the test and a 500 ms repair
 * timeout. */
static void
held_job(struct fx *f)
{
	struct nat_join	 r;
	int64_t		 n;

	join_req(&r, "ob", "i1", 2, 2);
	r.local_world_size = 2;
	r.lease_ms = 1000000;
	r.repair_timeout_ms = 500;
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_a, 0, &ob)), 0);
	r.instance = slice_str("i2");
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_b, 0, &ob)), 0);
	for (n = 1; n <= 2; n++) {
		assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"),
		    n, 1, n == 1 ? &conn_a : &conn_b, 10, &ob)), 0);
		assert_int_equal(run(f, stepped(f, n, 1, 20)), 0);
	}
}

/*
 * A grow held for a step in the shrink: no step within the repair
 * timeout from the death restarts the job, saying why; training that
 * ends first calls the grow off, never a restart.
 */
static void
test_repair_grow_held_ends(void **state)
{
	struct fx	*f = *state;

	held_job(f);
	assert_int_equal(fail_repair(f, 2, 1, 1, 100), 0);
	drain(f->rz);
	assert_int_equal(ready(f, 2, 2, 1, 120), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	rz_tick(f->rz, 599, &ob);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	rz_tick(f->rz, 600, &ob);
	assert_restart(f, 3, "repair escalated to restart: no rank stepped "
	    "in shrink round 2 within 500 ms (the grow of the ready "
	    "replacements waits for one)");
}

static void
test_repair_grow_held_training_ends(void **state)
{
	struct fx	*f = *state;

	held_job(f);
	assert_int_equal(fail_repair(f, 2, 1, 1, 100), 0);
	drain(f->rz);
	assert_int_equal(ready(f, 2, 2, 1, 120), 0);
	drain(f->rz);
	assert_int_equal(rz_succeeded(f->rz, slice_str("ob"), 1, 2, 0, 150,
	    &ob), 0);
	drain(f->rz);
	assert_true(event_has(f, "repair: no grow: node 1 finished before "
	    "rdzvd heard of a step in shrink round 2 (the grow waits for "
	    "one, its replacements ready): training ended, the grow is "
	    "called off"));
	/* The step news after it opens nothing. */
	assert_int_equal(stepped(f, 1, 2, 160), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	rz_tick(f->rz, 600, &ob);
	drain(f->rz);
	assert_false(event_has(f, "escalated"));
}

/*
 * Training ends during a repair: a node whose workers finished in the
 * shrink round reports SUCCEEDED, which ends the wait for the
 * replacement (no grow for a READY after it, no timeout); a SUCCEEDED of
 * the round before the repair (sent before its agent heard of the
 * shrink) counts too; the job is DONE when both did.
 */
static void
test_repair_ends_in_shrink(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	/* Round 1 formed this membership: its SUCCEEDED counts. */
	assert_int_equal(rz_succeeded(f->rz, slice_str("ob"), 1, 1, 0, 150,
	    &ob), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_true(event_has(f, "node 1 succeeded round 1"));
	assert_true(event_has(f, "repair: no grow: node 1 finished before "
	    "the replacement of node 2 local rank 1 was ready: training "
	    "ended, the grow is called off"));
	/* The replacement's READY after it: no grow round. */
	assert_int_equal(ready(f, 2, 2, 1, 200), 0);
	assert_int_equal(ob.npush + ob.nport, 0);
	drain(f->rz);
	/* A round after the current one is no report of it. */
	assert_int_equal(rz_succeeded(f->rz, slice_str("ob"), 2, 3, 0, 210,
	    &ob), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_int_equal(rz_succeeded(f->rz, slice_str("ob"), 2, 2, 0, 220,
	    &ob), 0);
	assert_int_equal(ob.npush, 2);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_DONE);
	drain(f->rz);
	assert_false(event_has(f, "escalated"));
}

/*
 * Training ends while a grow round is open: the replacement was ready
 * and its grow round pushed, but the survivors finished in the shrink
 * round before they took it.  The replacement's node reports SUCCEEDED
 * with it as unjoined (up, never stepped): the grow is called off with
 * an event, and the job is DONE once every member succeeded, never a
 * wait for the repair timeout, never a restart.  A repeat of the READY
 * changes nothing.
 */
static void
test_repair_ends_in_grow(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	st;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	assert_int_equal(ready(f, 2, 2, 1, 150), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_GROW, 3, 1, 4, 0, 0, 3);
	drain(f->rz);
	/* Node 1's survivors finished in the shrink round. */
	assert_int_equal(rz_succeeded(f->rz, slice_str("ob"), 1, 2, 0, 200,
	    &ob), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	/* Node 2's survivor too; its replacement waits in round 3. */
	assert_int_equal(rz_succeeded(f->rz, slice_str("ob"), 2, 3, 2, 210,
	    &ob), 0);
	assert_int_equal(ob.npush, 2);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_DONE);
	assert_int_equal(ob.push[1].round.state, RDZV_ROUND_DONE);
	drain(f->rz);
	assert_true(event_has(f, "repair: no grow: node 2 finished before its "
	    "replacement of local rank 1 joined grow round 3: training ended, "
	    "the grow is called off"));
	assert_int_equal(ready(f, 2, 3, 1, 220), 0);
	assert_int_equal(ob.npush + ob.nport, 0);
	drain(f->rz);
	/* Long after: nothing is awaited, nothing times out. */
	rz_tick(f->rz, 100 + 600000, &ob);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_false(event_has(f, "escalated"));
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 0);
}

/*
 * A replacement dies before it joined (killed while it loaded): its
 * local rank is a dead one already, so nothing shrinks and nothing
 * restarts; its agent's next one is awaited within the same deadline,
 * and its READY grows the job.  Past RZ_REPL_FAILS_MAX such deaths of
 * one local rank between two grows the job restarts.
 */
static void
test_repair_replacement_dies_loading(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	st;
	int		 i;

	repair_job(f, 1, 1);
	assert_int_equal(fail_repair(f, 2, 1, 1, 100), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_SHRINK, 2, 1, 3, 0, 0, 3);
	drain(f->rz);
	/* Its replacement dies: no push, an event, no restart. */
	assert_int_equal(fail_repair(f, 2, 2, 1, 150), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_true(event_has(f, "repair: node 2 local rank 1's replacement "
	    "died before it joined (signal 9): another is on its way (1 of 3"));
	/* The next one is ready: one grow takes it in. */
	assert_int_equal(ready(f, 2, 2, 1, 200), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_GROW, 3, 1, 4, 0, 0, 3);
	drain(f->rz);
	/* Another death, then four of its replacements die loading: the
	 * fourth restarts the job (the count began again at the grow). */
	assert_int_equal(run(f, fail_repair(f, 2, 3, 1, 300)), 0);
	for (i = 0; i < RZ_REPL_FAILS_MAX; i++) {
		assert_int_equal(fail_repair(f, 2, 4, 1, 310 + i), 0);
		assert_int_equal(ob.npush, 0);
		drain(f->rz);
	}
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 0);
	assert_int_equal(fail_repair(f, 2, 4, 1, 400), 0);
	assert_true(ob.npush > 0);
	drain(f->rz);
	assert_true(event_has(f, "repair escalated to restart: node 2 local "
	    "rank 1's replacements died before they joined 4 times"));
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 1);
}

/*
 * The count is per local rank: two ranks dead at once, each of their
 * replacements dying RZ_REPL_FAILS_MAX times (kills from outside, twice
 * the limit in all) restart nothing; the next death of one of them is
 * its rank's fourth, and restarts the job.
 */
static void
test_repair_replacement_fails_per_rank(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	st;
	int		 i;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	assert_int_equal(run(f, fail_repair(f, 1, 2, 0, 110)), 0);
	for (i = 0; i < RZ_REPL_FAILS_MAX; i++) {
		assert_int_equal(fail_repair(f, 2, 3, 1, 200 + i), 0);
		assert_int_equal(fail_repair(f, 1, 3, 0, 250 + i), 0);
		assert_int_equal(ob.npush, 0);
		drain(f->rz);
	}
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 0);
	assert_true(event_has(f, "repair: node 1 local rank 0's replacement "
	    "died before it joined (signal 9): another is on its way (3 of 3 "
	    "such deaths of the rank before a restart)"));
	assert_int_equal(fail_repair(f, 1, 3, 0, 300), 0);
	assert_true(ob.npush > 0);
	drain(f->rz);
	assert_true(event_has(f, "repair escalated to restart: node 1 local "
	    "rank 0's replacements died before they joined 4 times"));
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 1);
}

/*
 * Training ends while every worker of node 1 is a replacement that a
 * grow took in but that never stepped (the survivor on node 2 finished
 * before it joined): node 1 has no worker that exits 0, so it never
 * reports SUCCEEDED; its agent's HEARTBEAT names them (unjoined), and
 * the job is DONE then.  A replacement's death after training ended is
 * nothing to replace: no count, no restart.
 */
static void
test_repair_ends_with_node_unjoined(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	st;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 1, 1, 0, 100)), 0);
	assert_int_equal(run(f, fail_repair(f, 1, 2, 1, 110)), 0);
	assert_int_equal(run(f, ready(f, 1, 3, 0, 200)), 0);
	assert_int_equal(ready(f, 1, 3, 1, 210), 0);
	assert_int_equal(ob.npush, 2);
	assert_int_equal(ob.push[0].round.kind, NAT_KIND_GROW);
	assert_int_equal(ob.push[0].round.round, 4);
	drain(f->rz);
	assert_int_equal(rz_succeeded(f->rz, slice_str("ob"), 2, 4, 0, 300,
	    &ob), 0);
	assert_int_equal(ob.npush, 0);		/* node 1 not heard of */
	drain(f->rz);
	/* Its replacement of local rank 0 dies and comes back, unjoined. */
	assert_int_equal(rz_unjoined(f->rz, slice_str("ob"), 1, 1, 310, &ob),
	    0);
	assert_int_equal(ob.npush, 0);		/* local rank 1 trained? */
	drain(f->rz);
	assert_int_equal(fail_repair(f, 1, 4, 0, 320), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_true(event_has(f, "repair: node 1 local rank 0's replacement "
	    "died (signal 9) after training ended: nothing to replace"));
	assert_int_equal(rz_unjoined(f->rz, slice_str("ob"), 1, 3, 330, &ob),
	    0);
	assert_int_equal(ob.npush, 2);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_DONE);
	drain(f->rz);
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 0);
	assert_false(event_has(f, "escalated"));
}

/*
 * A replacement a grow took in is in the round though it never stepped
 * (its agent's HEARTBEAT names it unjoined): while training goes on, its
 * death shrinks the round as any worker's does, its peers being in a
 * group with it.
 */
static void
test_repair_unjoined_in_round_shrinks(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 1, 1, 0, 100)), 0);
	assert_int_equal(run(f, ready(f, 1, 2, 0, 200)), 0);
	assert_int_equal(rz_unjoined(f->rz, slice_str("ob"), 1, 1, 210, &ob),
	    0);
	assert_int_equal(ob.npush, 0);
	assert_int_equal(fail_repair(f, 1, 3, 0, 220), 0);
	assert_int_equal(ob.npush, 2);
	assert_int_equal(ob.push[0].round.kind, NAT_KIND_SHRINK);
	drain(f->rz);
}

/*
 * The job's state holders are the workers that stepped: node 2's two
 * workers died and their replacements came in by a grow whose group
 * never formed (their agent's HEARTBEAT says they never stepped).  Node
 * 1's local rank 1 died meanwhile; when its local rank 0, the last to
 * hold the state, dies too, a repair would start the job from nothing:
 * the job restarts, saying why.  Until then none of the unjoined ones
 * is the donor.
 */
static void
test_repair_no_state_left_restarts(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	st;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 0, 100)), 0);
	assert_int_equal(run(f, fail_repair(f, 2, 2, 1, 110)), 0);
	assert_int_equal(run(f, ready(f, 2, 3, 0, 200)), 0);
	assert_int_equal(ready(f, 2, 3, 1, 210), 0);
	assert_int_equal(ob.push[0].round.kind, NAT_KIND_GROW);
	drain(f->rz);
	assert_int_equal(rz_unjoined(f->rz, slice_str("ob"), 2, 3, 220, &ob),
	    0);
	drain(f->rz);
	assert_int_equal(fail_repair(f, 1, 4, 1, 300), 0);
	assert_int_equal(ob.npush, 2);
	assert_int_equal(ob.push[0].round.kind, NAT_KIND_SHRINK);
	assert_int_equal(ob.push[0].round.donor, 0);	/* node 1 local 0 */
	drain(f->rz);
	assert_int_equal(fail_repair(f, 1, 5, 0, 400), 0);
	drain(f->rz);
	assert_true(event_has(f, "repair escalated to restart: no worker "
	    "that holds the job's state would be left"));
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 1);
}

/*
 * Two replacements on their way; the first is READY and waits for the
 * second (one grow takes both) when it dies: it had joined nothing, so
 * nothing shrinks (the survivors' world stays 2) and nothing restarts;
 * the grow opens once both local ranks' replacements are READY again.
 */
static void
test_repair_ready_replacement_dies(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	st;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	assert_int_equal(run(f, fail_repair(f, 1, 2, 0, 110)), 0);
	assert_int_equal(run(f, ready(f, 2, 3, 1, 200)), 0);
	/* Node 2's READY replacement dies waiting for the grow. */
	assert_int_equal(fail_repair(f, 2, 3, 1, 210), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_true(event_has(f, "repair: node 2 local rank 1's replacement "
	    "died before it joined"));
	/* Node 1's is READY: still no grow, node 2's next one is awaited. */
	assert_int_equal(ready(f, 1, 3, 0, 220), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_int_equal(ready(f, 2, 3, 1, 230), 0);
	assert_int_equal(ob.npush, 2);
	assert_int_equal(ob.push[0].round.kind, NAT_KIND_GROW);
	assert_int_equal(ob.push[0].round.world_size, 4);
	drain(f->rz);
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 0);
	assert_false(event_has(f, "escalated"));
}

/* Job "ob" of nodes lo:hi, two workers each, lease 1000 ms: nodes 1, 2
 * (conn_a, conn_b) form the round, node 3 (conn_c) is a standby when
 * standby; the members said repairable at 10. */
static void
lost_job(struct fx *f, int64_t lo, int64_t hi, int standby)
{
	struct nat_join	r;

	join_req(&r, "ob", "i1", lo, hi);
	r.local_world_size = 2;
	r.lease_ms = 1000;
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_a, 0, &ob)), 0);
	r.instance = slice_str("i2");
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_b, 0, &ob)), 0);
	if (standby) {
		r.instance = slice_str("i3");
		assert_int_equal(rz_join(f->rz, &r, &conn_c, 0, &ob), 0);
		assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STANDBY);
		drain(f->rz);
	}
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 10, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 1,
	    &conn_b, 10, &ob)), 0);
}

/*
 * A member's lease lapses with a standby waiting: no STOP, no restart;
 * the standby takes its group rank in a shrink round with none of its
 * workers live (its agent starts them as replacements), the survivors
 * go on at world 2; each READY of the standby's workers clears one, the
 * last opens the grow round of world 4 (the donor a survivor).
 */
static void
test_repair_lost_standby(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	 st;

	lost_job(f, 2, 2, 1);
	/* Node 1 and the standby beat; node 2 goes silent. */
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 900, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 3, 0,
	    &conn_c, 900, &ob)), 0);
	rz_tick(f->rz, 1010, &ob);
	assert_int_equal(ob.npush, 2);
	assert_ptr_equal(ob.push[0].conn, &conn_a);
	assert_repair_push(0, NAT_KIND_SHRINK, 2, 1, 2, 0, 0, 3);
	assert_ptr_equal(ob.push[1].conn, &conn_c);
	assert_repair_push(1, NAT_KIND_SHRINK, 2, 3, 2, 2, 0, 0);
	assert_int_equal(ob.push[1].round.group_rank, 1);
	drain(f->rz);
	assert_true(event_has(f, "repair: node 2 (host h) lost (lease "
	    "expired): standby node 3 (host h) takes its place; shrink to 2 "
	    "until its workers are ready, round 2, donor 0"));
	assert_int_equal(ready(f, 3, 2, 0, 1100), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_int_equal(ready(f, 3, 2, 0, 1110), 0);	/* a repeat */
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_int_equal(ready(f, 3, 2, 1, 1120), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(0, NAT_KIND_GROW, 3, 1, 4, 0, 0, 3);
	assert_repair_push(1, NAT_KIND_GROW, 3, 3, 4, 2, 0, 3);
	drain(f->rz);
	assert_true(event_has(f, "repair: grow to 4, node 3 (host h) in with "
	    "2 workers, round 3, donor 0"));
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.repairs_total, 2);
	assert_int_equal(st.restarts_total, 0);
}

/*
 * Stragglers: a two-node job of two workers each (and a standby when
 * asked) whose JOINs say straggler_ratio 0.4, window 5 s, replace.
 */
static void
strag_job(struct fx *f, int standby)
{
	struct nat_join	r;

	join_req(&r, "ob", "i1", 2, 2);
	r.local_world_size = 2;
	r.straggler_ratio_pm = 400;
	r.straggler_window_ms = 5000;
	r.straggler_action = NAT_STRAGGLER_REPLACE;
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_a, 0, &ob)), 0);
	r.instance = slice_str("i2");
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_b, 0, &ob)), 0);
	if (standby) {
		r.instance = slice_str("i3");
		assert_int_equal(run(f, rz_join(f->rz, &r, &conn_c, 0, &ob)),
		    0);
	}
}

static void
strag_view_cb(void *arg, const struct rz_strag_view *v)
{
	struct rz_strag_view	*out = arg;

	*out = *v;
}

/*
 * The job's settings (its document, what the detector is given); the
 * event naming a straggler; replace refused (the event says why) while a
 * node cannot repair, then a STRAGGLER push to the straggler's agent for
 * its local rank (node 2's local rank 1 is rank 3), nothing else; a
 * verdict of an older round or on a rank that is none refused.  No job
 * is judged while its replacement is on its way.
 */
static void
test_straggler_replace(void **state)
{
	struct fx		*f = *state;
	struct rz_strag_view	 v;
	json_t			*doc, *sc;

	strag_job(f, 0);
	doc = rz_job_doc(f->rz, slice_str("ob"), 0);
	sc = json_object_get(doc, "straggler");
	assert_true(json_real_value(json_object_get(sc, "ratio")) > 0.39 &&
	    json_real_value(json_object_get(sc, "ratio")) < 0.41);
	assert_int_equal(json_integer_value(json_object_get(sc, "window_ms")),
	    5000);
	assert_string_equal(json_string_value(json_object_get(sc, "action")),
	    "replace");
	json_decref(doc);
	memset(&v, 0, sizeof v);
	rz_strag_each(f->rz, strag_view_cb, &v);
	assert_string_equal(v.job, "ob");
	assert_int_equal(v.round, 1);
	assert_int_equal(v.world_size, 4);
	assert_int_equal(v.window_ms, 5000);
	assert_true(v.replace);

	assert_int_equal(rz_straggler_news(f->rz, slice_str("ob"), 1, 3, 1,
	    10.0, 40.0, 100), 0);
	assert_true(event_has(f, "straggler: rank 3 (node 2 host h local rank "
	    "1) steps at 25% of the others' median (10.0 vs 40.0 steps/s of "
	    "work) for 5 s, round 1"));
	assert_int_equal(rz_straggler_news(f->rz, slice_str("ob"), 0, 3, 1,
	    10.0, 40.0, 100), RDZV_EINVAL);

	/* Nobody said repairable yet. */
	assert_int_equal(run(f, rz_straggler_replace(f->rz, slice_str("ob"),
	    1, 3, 200, &ob)), RDZV_EBUSY);
	assert_true(event_has(f, "straggler: rank 3 not replaced: node 1 "
	    "(host h) cannot repair"));
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 10, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 1,
	    &conn_b, 10, &ob)), 0);
	assert_int_equal(run(f, rz_straggler_replace(f->rz, slice_str("ob"),
	    0, 3, 300, &ob)), RDZV_EINVAL);
	assert_int_equal(run(f, rz_straggler_replace(f->rz, slice_str("ob"),
	    1, 4, 300, &ob)), RDZV_EINVAL);
	assert_int_equal(rz_straggler_replace(f->rz, slice_str("ob"), 1, 3,
	    300, &ob), 0);
	assert_int_equal(ob.npush, 1);
	assert_true(ob.push[0].straggler);
	assert_ptr_equal(ob.push[0].conn, &conn_b);
	assert_int_equal(ob.push[0].straggler_local, 1);
	assert_int_equal(ob.push[0].round.node_id, 2);
	assert_int_equal(ob.push[0].round.round, 1);
	assert_int_equal(ob.nport, 0);
	drain(f->rz);
	assert_true(event_has(f, "straggler: rank 3 (node 2 host h local rank "
	    "1): its agent kills it to be replaced"));
	/* Its death then repairs as any: a shrink round. */
	assert_int_equal(fail_repair(f, 2, 1, 1, 400), 0);
	assert_int_equal(ob.npush, 2);
	assert_repair_push(1, NAT_KIND_SHRINK, 2, 2, 3, 2, 0, 1);
	drain(f->rz);
	/* While its replacement is on its way nobody is judged; the grow's
	 * round is. */
	memset(&v, 0, sizeof v);
	rz_strag_each(f->rz, strag_view_cb, &v);
	assert_null(v.job);
	assert_int_equal(run(f, ready(f, 2, 2, 1, 500)), 0);
	rz_strag_each(f->rz, strag_view_cb, &v);
	assert_string_equal(v.job, "ob");
	assert_int_equal(v.round, 3);
	assert_int_equal(v.world_size, 4);
}

/*
 * With a standby waiting, the straggler's node is evicted (FAILED) and
 * the standby takes its place in a shrink round, as after a lost node:
 * no restart.
 */
static void
test_straggler_standby(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	 st;

	strag_job(f, 1);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 10, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 1,
	    &conn_b, 10, &ob)), 0);
	assert_int_equal(rz_straggler_replace(f->rz, slice_str("ob"), 1, 2,
	    300, &ob), 0);
	assert_int_equal(ob.npush, 3);
	assert_ptr_equal(ob.push[0].conn, &conn_b);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_FAILED);
	assert_false(ob.push[0].straggler);
	assert_ptr_equal(ob.push[2].conn, &conn_c);
	assert_repair_push(2, NAT_KIND_SHRINK, 2, 3, 2, 2, 0, 0);
	drain(f->rz);
	assert_true(event_has(f, "straggler: rank 2 (node 2 host h): its node "
	    "is evicted for standby node 3 (host h)"));
	assert_true(event_has(f, "standby node 3 (host h) takes its place"));
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 0);
}

/*
 * No standby, min_nodes 1 (round 1 formed with node 1 alone, round 2
 * with both): node 1 (group rank 0) leaves, node 2 closes
 * up to group rank 0, ranks from 0, world 2, in a shrink round; a
 * failure now repairs again.  With min_nodes 2 the same LEAVE ends the
 * round as before, and the event says why.
 */
static void
test_repair_lost_shrink(void **state)
{
	struct fx	*f = *state;

	lost_job(f, 1, 2, 0);
	assert_int_equal(rz_leave(f->rz, slice_str("ob"), 1, 100, &ob), 0);
	assert_int_equal(ob.npush, 1);
	assert_ptr_equal(ob.push[0].conn, &conn_b);
	assert_repair_push(0, NAT_KIND_SHRINK, 3, 2, 2, 0, 0, 3);
	assert_int_equal(ob.push[0].round.group_rank, 0);
	assert_int_equal(ob.push[0].round.group_world_size, 1);
	drain(f->rz);
	assert_true(event_has(f, "repair: shrink to 2 after node 1 (host h) "
	    "was lost (it left): 1 nodes left, round 3, donor 0"));
	assert_int_equal(fail_repair(f, 2, 3, 1, 200), 0);
	assert_int_equal(ob.npush, 1);
	assert_repair_push(0, NAT_KIND_SHRINK, 4, 2, 1, 0, 0, 1);
	drain(f->rz);
}

/*
 * rdzvctl evict without --now: node 2 of a job that repairs is asked to
 * leave at its next step boundary (one DRAIN push to its agent, nothing
 * to anyone else, no round); asked again, nothing more; its document
 * says it is leaving and rdzvd's next deadline is its time.  Its LEAVE
 * then shrinks the round around it.  --now drops at once (FAILED to
 * it, the shrink to the others).
 */
static void
test_evict_leave(void **state)
{
	struct fx	*f = *state;
	json_t		*doc, *m;

	lost_job(f, 1, 2, 0);
	assert_int_equal(rz_admin_evict(f->rz, slice_str("ob"), 2, 0, 100,
	    &ob), 1);
	assert_int_equal(ob.npush, 1);
	assert_true(ob.push[0].drain);
	assert_false(ob.push[0].straggler);
	assert_ptr_equal(ob.push[0].conn, &conn_b);
	assert_int_equal(ob.push[0].round.node_id, 2);
	assert_int_equal(ob.push[0].round.round, 2);
	assert_int_equal(ob.push[0].straggler_local, -1);
	assert_int_equal(ob.nport, 0);
	drain(f->rz);
	assert_true(event_has(f, "evict: node 2 host h asked to leave at its "
	    "workers' next step boundary (dropped if still here in 120 s)"));
	assert_int_equal(run(f, rz_admin_evict(f->rz, slice_str("ob"), 2, 0,
	    150, &ob)), 1);
	doc = rz_job_doc(f->rz, slice_str("ob"), 200);
	m = json_array_get(json_object_get(doc, "members"), 1);
	assert_int_equal(json_integer_value(json_object_get(m, "leaving_ms")),
	    RZ_DRAIN_MS - 100);
	json_decref(doc);
	rz_tick(f->rz, 200, &ob);
	assert_true(rz_next_deadline(f->rz) <= 100 + RZ_DRAIN_MS);
	drain(f->rz);
	assert_int_equal(rz_leave(f->rz, slice_str("ob"), 2, 300, &ob), 0);
	assert_int_equal(ob.npush, 1);
	assert_repair_push(0, NAT_KIND_SHRINK, 3, 1, 2, 0, 0, 3);
	drain(f->rz);
	assert_true(event_has(f, "was lost (it left)"));
	assert_false(event_has(f, "did not leave"));
}

/* An evicted node that does not leave in RZ_DRAIN_MS is dropped then;
 * with --now at once. */
static void
test_evict_leave_late(void **state)
{
	struct fx	*f = *state;
	int64_t		 t = 100 + RZ_DRAIN_MS;

	lost_job(f, 1, 2, 0);
	assert_int_equal(run(f, rz_admin_evict(f->rz, slice_str("ob"), 2, 0,
	    100, &ob)), 1);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, t - 10, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 1,
	    &conn_b, t - 10, &ob)), 0);
	rz_tick(f->rz, t - 1, &ob);
	assert_int_equal(ob.npush, 0);
	rz_tick(f->rz, t, &ob);
	assert_int_equal(ob.npush, 2);
	assert_ptr_equal(ob.push[0].conn, &conn_b);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_FAILED);
	assert_repair_push(1, NAT_KIND_SHRINK, 3, 1, 2, 0, 0, 3);
	drain(f->rz);
	assert_true(event_has(f, "evict: node 2 host h did not leave within "
	    "120 s: dropped"));

	/* --now: node 1 of the job left of one node cannot shrink. */
	assert_int_equal(run(f, rz_admin_evict(f->rz, slice_str("ob"), 1, 1,
	    t + 10, &ob)), 0);
	assert_true(event_has(f, "evicted node 1 host h by an operator"));
}

static void
test_repair_lost_below_min(void **state)
{
	struct fx	*f = *state;

	lost_job(f, 2, 2, 0);
	assert_int_equal(rz_leave(f->rz, slice_str("ob"), 1, 100, &ob), 0);
	assert_int_equal(ob.npush, 1);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STOP);
	drain(f->rz);
	assert_true(event_has(f, "repair escalated to restart: node 1 (host "
	    "h) lost (it left): no standby, and fewer than min_nodes would be "
	    "left"));
	assert_true(event_has(f, "below min_nodes: 1 of 2 nodes left, the "
	    "job waits for nodes to join"));
}

/* max_repairs 0 (JOIN): never a repair. */
static void
test_repair_max_repairs(void **state)
{
	struct fx	*f = *state;
	struct nat_join	 r;

	join_req(&r, "ob", "i1", 2, 2);
	r.local_world_size = 2;
	r.lease_ms = 1000;
	r.max_repairs = 0;
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_a, 0, &ob)), 0);
	r.instance = slice_str("i2");
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_b, 0, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 10, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 1,
	    &conn_b, 10, &ob)), 0);
	assert_int_equal(fail_repair(f, 2, 1, 1, 100), 0);
	assert_restart(f, 2, "repair escalated to restart: repair is off "
	    "(max_repairs 0)");
}

/*
 * rdzvd restarted mid-repair: the reloaded job re-pushes the shrink
 * round to a node that joins again (same instance), its deadline is
 * armed again from the load, and the replacement's READY grows it.
 */
static void
test_repair_reload(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 2, 1, 1, 100)), 0);
	rz_free(f->rz);
	assert_non_null(f->rz = rz_new(f->kv, &hooks, 0, 60000));
	assert_int_equal(rz_load(f->rz, 5000, &ob), 0);
	assert_int_equal(ob.nport, 1);
	assert_string_equal(ob.port[0].ns, "job/ob/round/2");
	rz_settle(f->rz, &ob);
	assert_int_equal(ob.deadline, 5000 + 1000);	/* a lease */
	drain(f->rz);
	assert_int_equal(join_keep(f, "i2", 2, &conn_b), 0);
	assert_int_equal(ob.npush, 1);
	assert_repair_push(0, NAT_KIND_SHRINK, 2, 2, 3, 2, 0, 1);
	drain(f->rz);
	assert_int_equal(ready(f, 2, 2, 1, 5100), 0);
	assert_int_equal(ob.npush, 1);		/* node 1 not back yet */
	assert_repair_push(0, NAT_KIND_GROW, 3, 2, 4, 2, 0, 3);
	drain(f->rz);
}

/*
 * rdzvd restarted while a replacement was READY, waiting for the other
 * one to come (node 1's two workers died): the rows keep it READY, so
 * its death after the restart is a replacement's (nothing shrinks), and
 * when node 2's survivors finish, the job is DONE at once: node 1 has
 * no worker that trained to wait for.
 */
static void
test_repair_reload_ready(void **state)
{
	struct fx	*f = *state;

	repair_job(f, 1, 1);
	assert_int_equal(run(f, fail_repair(f, 1, 1, 0, 100)), 0);
	assert_int_equal(run(f, fail_repair(f, 1, 2, 1, 110)), 0);
	assert_int_equal(ready(f, 1, 3, 0, 200), 0);
	assert_int_equal(ob.npush, 0);		/* local rank 1 still dead */
	drain(f->rz);
	rz_free(f->rz);
	assert_non_null(f->rz = rz_new(f->kv, &hooks, 0, 60000));
	assert_int_equal(rz_load(f->rz, 5000, &ob), 0);
	rz_settle(f->rz, &ob);
	drain(f->rz);
	assert_int_equal(join_keep(f, "i1", 2, &conn_a), 0);
	assert_int_equal(join_keep(f, "i2", 2, &conn_b), 0);
	drain(f->rz);
	assert_int_equal(fail_repair(f, 1, 3, 0, 5100), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_true(event_has(f, "repair: node 1 local rank 0's replacement "
	    "died before it joined"));
	assert_int_equal(rz_succeeded(f->rz, slice_str("ob"), 2, 3, 0, 5200,
	    &ob), 0);
	assert_int_equal(ob.npush, 2);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_DONE);
	drain(f->rz);
	assert_false(event_has(f, "escalated"));
}

/*
 * Joining in place: job "ob" of nodes 2:4 (two workers each), nodes 1
 * and 2 running and repairable at 10, a last call of last_call ms and a
 * repair timeout of 500 ms.
 */
static void
elastic_job(struct fx *f, int64_t last_call)
{
	struct nat_join	r;

	join_req(&r, "ob", "i1", 2, 4);
	r.local_world_size = 2;
	r.lease_ms = 100000;
	r.last_call_ms = last_call;
	r.repair_timeout_ms = 500;
	assert_int_equal(run(f, rz_join(f->rz, &r, &conn_a, 0, &ob)), 0);
	r.instance = slice_str("i2");
	assert_int_equal(rz_join(f->rz, &r, &conn_b, 0, &ob), 0);
	drain(f->rz);
	if (last_call > 0) {
		rz_tick(f->rz, last_call, &ob);
		drain(f->rz);
	}
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 1, 1,
	    &conn_a, 10, &ob)), 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 1,
	    &conn_b, 10, &ob)), 0);
}

/* A third node of two workers joins "ob" at now (not drained). */
static int
elastic_join(struct fx *f, const char *inst, void *conn, int64_t now)
{
	struct nat_join	r;

	join_req(&r, "ob", inst, 2, 4);
	r.local_world_size = 2;
	r.lease_ms = 100000;
	r.repair_timeout_ms = 500;
	return rz_join(f->rz, &r, conn, now, &ob);
}

/*
 * A node joins a running, repairable job below its maximum: no STOP, no
 * new round for the members; the joiner alone is told, in a repair
 * round with none of its workers live (the running round's number and
 * namespace); its first READY changes nothing, its last opens one grow
 * round of world 6 to every member (the donor a survivor); no restart.
 */
static void
test_join_in_place(void **state)
{
	struct fx	*f = *state;
	struct rz_stats	 st;

	elastic_job(f, 0);
	assert_int_equal(elastic_join(f, "i3", &conn_c, 100), 0);
	assert_int_equal(ob.npush, 1);
	assert_int_equal(ob.nport, 0);
	assert_ptr_equal(ob.push[0].conn, &conn_c);
	assert_repair_push(0, NAT_KIND_SHRINK, 1, 3, 4, 4, 0, 0);
	assert_int_equal(ob.push[0].round.group_rank, 2);
	assert_int_equal(ob.push[0].round.group_world_size, 3);
	assert_string_equal(ob.push[0].round.store_ns.p, "job/ob/round/1");
	drain(f->rz);
	assert_true(event_has(f, "join: node 3 (host h) taken in place as "
	    "group rank 2: its 2 workers start, round 1 goes on"));
	assert_int_equal(run(f, ready(f, 3, 1, 0, 200)), 0);
	assert_int_equal(ready(f, 3, 1, 1, 210), 0);
	assert_int_equal(ob.npush, 3);
	assert_repair_push(0, NAT_KIND_GROW, 2, 1, 6, 0, 0, 3);
	assert_repair_push(1, NAT_KIND_GROW, 2, 2, 6, 2, 0, 3);
	assert_repair_push(2, NAT_KIND_GROW, 2, 3, 6, 4, 0, 3);
	assert_int_equal(ob.nport, 2);
	assert_string_equal(ob.port[1].ns, "job/ob/round/2");
	drain(f->rz);
	assert_true(event_has(f, "join: grow to 6, 1 node in place (3) with "
	    "2 workers, round 2, donor 0"));
	/* A repeat is late news; a failure now repairs as ever. */
	assert_int_equal(ready(f, 3, 2, 1, 220), 0);
	assert_int_equal(ob.npush, 0);
	drain(f->rz);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 3, 1,
	    &conn_c, 230, &ob)), 0);
	assert_int_equal(fail_repair(f, 3, 2, 0, 240), 0);
	assert_int_equal(ob.npush, 3);
	assert_repair_push(2, NAT_KIND_SHRINK, 3, 3, 5, 4, 0, 2);
	drain(f->rz);
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.restarts_total, 0);
	assert_false(event_has(f, "ended"));
}

/*
 * Two nodes join 10 ms apart with a last call of 100 ms: both ready at
 * 50, the grow waits for the last call after the second (rz_tick's
 * deadline 120), then one grow round takes both in; a fifth node finds
 * the job at its maximum and stands by.
 */
static void
test_join_two_one_grow(void **state)
{
	struct fx	*f = *state;
	static char	 conn_d, conn_e;
	int64_t		 l;

	elastic_job(f, 100);
	assert_int_equal(run(f, elastic_join(f, "i3", &conn_c, 1000)), 0);
	assert_int_equal(run(f, elastic_join(f, "i4", &conn_d, 1010)), 0);
	for (l = 0; l < 2; l++) {
		assert_int_equal(run(f, ready(f, 3, 1, l, 1050)), 0);
		assert_int_equal(ready(f, 4, 1, l, 1050), 0);
		assert_int_equal(ob.npush, 0);
		drain(f->rz);
	}
	assert_int_equal(rz_next_deadline(f->rz), 1110);
	rz_tick(f->rz, 1110, &ob);
	assert_int_equal(ob.npush, 4);
	assert_repair_push(2, NAT_KIND_GROW, 2, 3, 8, 4, 0, 3);
	assert_repair_push(3, NAT_KIND_GROW, 2, 4, 8, 6, 0, 3);
	drain(f->rz);
	assert_true(event_has(f, "join: grow to 8, 2 nodes in place (3, 4) "
	    "with 4 workers, round 2, donor 0"));
	assert_int_equal(elastic_join(f, "i5", &conn_e, 1200), 0);
	assert_int_equal(ob.npush, 1);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STANDBY);
	drain(f->rz);
}

/* A member that cannot repair: the joiner rescales by restart. */
static void
test_join_not_repairable(void **state)
{
	struct fx	*f = *state;

	elastic_job(f, 0);
	assert_int_equal(run(f, rz_heartbeat(f->rz, slice_str("ob"), 2, 0,
	    &conn_b, 20, &ob)), 0);
	assert_int_equal(elastic_join(f, "i3", &conn_c, 100), 0);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STOP);
	drain(f->rz);
	assert_true(event_has(f, "join: node 3 cannot be taken in place (node "
	    "2 (host h) cannot repair): rescale by restart"));
	assert_true(event_has(f, "round 1 ended: a node joined below max"));
}

/* A joiner not ready within the repair timeout: a restart. */
static void
test_join_timeout(void **state)
{
	struct fx	*f = *state;

	elastic_job(f, 0);
	assert_int_equal(run(f, elastic_join(f, "i3", &conn_c, 100)), 0);
	assert_int_equal(run(f, ready(f, 3, 1, 0, 200)), 0);
	assert_int_equal(rz_next_deadline(f->rz), 600);
	rz_tick(f->rz, 600, &ob);
	assert_int_equal(ob.push[0].round.state, RDZV_ROUND_STOP);
	drain(f->rz);
	assert_true(event_has(f, "join escalated to restart: node 3 (host h), "
	    "joining in place: its workers were not ready within 500 ms"));
	assert_true(event_has(f, "restart 1 of 3"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_purge_after_retention,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_purge_in_batches_oldest_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_only_due_jobs_purged,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_running_and_forming_never_purged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retention_zero_keeps,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_reload_keeps_close_time,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_sweep_dead_rounds, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_static_rank, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_evict_closed, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_admin_forget, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_port_refused, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_evict_leave, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_evict_leave_late, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_outbox_join_forms_round,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_outbox_failure, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_outbox_failure_closes,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_outbox_lease_expiry, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_repair_shrink_grow, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_repair_ready_in_shrink_dies, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_repair_pending_joined_is_donor,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_no_donor_restarts,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_grow_waits_step, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_repair_grow_held_ends, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_repair_grow_held_training_ends, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_repair_donor, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_repair_not_repairable,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_repair_second_failure_old_round, setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_second_failure,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_repair_second_failure_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_two_grows_keep_donor,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_ready_timeout,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_in_place, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_join_two_one_grow, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_join_not_repairable, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_join_timeout, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_repair_ends_in_shrink,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_ends_in_grow,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_repair_replacement_dies_loading, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_repair_replacement_fails_per_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_repair_ends_with_node_unjoined, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_repair_unjoined_in_round_shrinks, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_repair_no_state_left_restarts, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_repair_ready_replacement_dies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_lost_standby,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_lost_shrink,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_straggler_replace,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_straggler_standby,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_lost_below_min,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_max_repairs, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_repair_reload_ready,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_repair_reload, setup,
		    teardown),
		cmocka_unit_test(test_topo_pure),
		cmocka_unit_test_setup_teardown(test_topo_form_refused, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_topo_repair, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_topo_one_replica_restarts,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_topo_second_death, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_topo_no_whole_replica_restarts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_topo_lost_node_restarts,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_legacy_rows_load, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
