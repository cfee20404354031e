/*
 * test_rdzv.c: unit tests of the rendezvous state machine (rdzvd/rdzv.c)
 * over a real kv core, with a fake wall clock: retention (closed jobs
 * purged after it, in batches, in close order, never a running one; 0
 * keeps them), what a purge drops and what it leaves (another job's
 * namespaces, even one whose id extends the purged one's), reuse of a
 * purged id, retention carried across a reload, the sweep of dead
 * rounds' namespaces, and group rank = node rank for a static JOIN.
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
#include "rdzv.h"

static int64_t	 wall;			/* the fake wall clock, ms */
static int	 next_port = 40000;
static char	 purged[64][64];	/* ids, in purge order */
static int	 npurged;
static int64_t	 purged_keys;
static char	 conn_a;		/* a stand-in connection */
static int64_t	 pushed_rank[16];	/* by node id: last group rank */

static void
push_cb(void *arg, void *conn, const struct rz_push *p)
{
	if (p->node_id >= 0 && p->node_id < 16)
		pushed_rank[p->node_id] = p->group_rank;
}

static int
open_port_cb(void *arg, struct rz_job *job, const char *ns, int want)
{
	return want > 0 ? want : next_port++;
}

static void
close_port_cb(void *arg, struct rz_job *job)
{
}

static int64_t
wall_cb(void *arg)
{
	return wall;
}

static void
purged_cb(void *arg, const char *job, const char *state, int64_t closed,
    int64_t keys)
{
	assert_true(npurged < 64);
	snprintf(purged[npurged++], sizeof purged[0], "%s %s", job, state);
	purged_keys += keys;
}

static const struct rz_hooks hooks = {
	push_cb, open_port_cb, close_port_cb, wall_cb, NULL, purged_cb
};

struct fx {
	struct kv	*kv;
	struct rz	*rz;
};

static int
setup(void **state)
{
	struct fx	*f;

	if ((f = calloc(1, sizeof *f)) == NULL ||
	    (f->kv = kv_new()) == NULL ||
	    (f->rz = rz_new(f->kv, &hooks, 0, 60000)) == NULL)
		return -1;
	rz_set_retention(f->rz, 1000);
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
	free(f);
	return 0;
}

/* JOIN of instance inst to job (nodes lo:hi); returns rz_join's code. */
static int
join(struct fx *f, const char *job, const char *inst, int64_t lo, int64_t hi,
    int64_t *node)
{
	struct rz_join_req	r;
	int64_t			n, rc, lease;

	memset(&r, 0, sizeof r);
	r.job = slice_str(job);
	r.instance = slice_str(inst);
	r.host = slice_str("h");
	r.addr = slice_str("127.0.0.1");
	r.pid = 1;
	r.local_world_size = 1;
	r.min_nodes = lo;
	r.max_nodes = hi;
	r.max_restarts = 3;
	r.last_call_ms = 0;
	r.lease_ms = 60000;
	r.rank = -1;
	return rz_join(f->rz, &r, &conn_a, 0, node ? node : &n, &rc, &lease);
}

/* JOIN of instance inst asking for group rank want (static). */
static int
join_rank(struct fx *f, const char *inst, int64_t want, int64_t *node)
{
	struct rz_join_req	r;
	int64_t			rc, lease;

	memset(&r, 0, sizeof r);
	r.job = slice_str("static");
	r.instance = slice_str(inst);
	r.host = slice_str("h");
	r.addr = slice_str("127.0.0.1");
	r.pid = 1;
	r.local_world_size = 2;
	r.min_nodes = r.max_nodes = 3;
	r.max_restarts = 0;
	r.last_call_ms = 0;
	r.lease_ms = 60000;
	r.rank = want;
	return rz_join(f->rz, &r, &conn_a, 0, node, &rc, &lease);
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
	rz_tick(f->rz, 1);
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
	assert_int_equal(rz_succeeded(f->rz, slice_str(job), node, 1, 0), 0);
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

/* An operator can evict from a running job, not from a closed one. */
static void
test_evict_closed(void **state)
{
	struct fx	*f = *state;
	int64_t		 a, b;

	assert_int_equal(join(f, "ev", "i1", 2, 2, &a), 0);
	assert_int_equal(join(f, "ev", "i2", 2, 2, &b), 0);
	rz_tick(f->rz, 1);
	assert_int_equal(rz_admin_evict(f->rz, slice_str("ev"), 99, 2),
	    RDZV_ENOTFOUND);
	assert_int_equal(rz_admin_evict(f->rz, slice_str("ev"), a, 2), 0);
	assert_int_equal(rz_admin_close(f->rz, slice_str("ev"),
	    slice_str("done"), 3), 0);
	assert_int_equal(rz_admin_evict(f->rz, slice_str("ev"), b, 4),
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
	assert_int_equal(rz_purge(f->rz, wall + 999, 10, 1000), 0);
	assert_int_equal(join(f, "a", "j", 1, 1, NULL), RDZV_ECLOSED);
	assert_true(has_job(f, "a"));

	assert_int_equal(rz_purge(f->rz, wall + 1000, 10, 1000), 1);
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
	assert_int_equal(rz_succeeded(f->rz, slice_str("a"), node, 1, 0), 0);
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
	assert_int_equal(rz_purge(f->rz, wall + 5000, 3, 100000), 3);
	assert_int_equal(rz_purge(f->rz, wall + 5000, 3, 100000), 3);
	assert_int_equal(rz_purge(f->rz, wall + 5000, 3, 100000), 3);
	/* A key budget smaller than one job still purges one. */
	assert_int_equal(rz_purge(f->rz, wall + 5000, 3, 1), 1);
	assert_int_equal(rz_purge(f->rz, wall + 5000, 3, 100000), 0);
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
	assert_int_equal(rz_purge(f->rz, wall + 500, 10, 100000), 1);
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
	assert_int_equal(rz_purge(f->rz, wall + 100000000, 100, 100000), 0);
	rz_get_stats(f->rz, &st);
	assert_int_equal(st.jobs_running, 1);
	assert_int_equal(st.jobs_forming, 1);
	/* Failed jobs (operator close) go like succeeded ones. */
	assert_int_equal(rz_admin_close(f->rz, slice_str("run"),
	    slice_str("why"), 0), 0);
	assert_int_equal(rz_purge(f->rz, wall + 1000, 100, 100000), 1);
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
	assert_int_equal(rz_purge(f->rz, wall + 100000000, 100, 100000), 0);
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
	char		*row, *p;
	size_t		 n;

	done(f, "r1");
	wall += 200;
	done(f, "r2");
	/* Drop r2's closed_ms line: a row from before retention existed
	 * falls back to its close event's time. */
	assert_int_equal(kv_get(f->kv, (struct slice){
	    (const uint8_t *)"\0rdzv/job", 9 }, slice_str("r2"), &v), 0);
	assert_non_null(row = malloc(v.len + 1));
	memcpy(row, v.p, v.len);
	row[v.len] = '\0';
	assert_non_null(p = strstr(row, "closed_ms="));
	n = strcspn(p, "\n") + 1;
	memmove(p, p + n, strlen(p + n) + 1);
	assert_int_equal(kv_set(f->kv, (struct slice){
	    (const uint8_t *)"\0rdzv/job", 9 }, slice_str("r2"),
	    slice_str(row)), 0);
	free(row);

	/* "Restart" much later: a new machine over the same rows. */
	rz_free(f->rz);
	assert_non_null(f->rz = rz_new(f->kv, &hooks, 0, 60000));
	rz_set_retention(f->rz, 1000);
	wall += 50000;
	assert_int_equal(rz_load(f->rz, 0), 0);
	assert_int_equal(rz_next_purge(f->rz), 1000000 + 1000);
	assert_int_equal(rz_purge(f->rz, 1000000 + 1100, 10, 100000), 1);
	assert_string_equal(purged[0], "r1 succeeded");
	assert_int_equal(rz_next_purge(f->rz), 1000000 + 200 + 1000);
	assert_int_equal(rz_purge(f->rz, wall, 10, 100000), 1);
	assert_int_equal(kv_total_keys(f->kv), 0);

	/* Closed by a clock that has since been set back a day: counted
	 * from the reload, not kept a day longer. */
	done(f, "r3");
	rz_free(f->rz);
	assert_non_null(f->rz = rz_new(f->kv, &hooks, 0, 60000));
	rz_set_retention(f->rz, 1000);
	wall -= 86400000;
	assert_int_equal(rz_load(f->rz, 0), 0);
	assert_int_equal(rz_next_purge(f->rz), wall + 1000);
}

static void
test_sweep_dead_rounds(void **state)
{
	struct fx	*f = *state;
	struct rz_failure_req	 fr;
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
	assert_int_equal(rz_failure(f->rz, &fr, 0), 0);	/* round 2 */
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
	assert_int_equal(rz_succeeded(f->rz, slice_str("s"), n1, 2, 0), 0);
	assert_int_equal(rz_succeeded(f->rz, slice_str("s"), n2, 2, 0), 0);
	assert_int_equal(NK(f, "job/s/round/2"), 0);
	put(f, "job/s/round/2", "late");
	assert_int_equal(rz_sweep(f->rz), 1);
	assert_int_equal(NK(f, "job/s/cfg"), 1);
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
