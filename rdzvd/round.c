/* SPDX-License-Identifier: Apache-2.0 */
/*
 * round.c: the rendezvous state machine (rz/rz.c) wired to the daemon.
 * Every rendezvous event goes one way: a request (round_request, from
 * proto_native.c), the lease timer, a connection gone and the purge
 * timer each call the machine, which fills an outbox, and round_apply()
 * carries it out: it opens and closes the per-round TCPStore listeners
 * (through which unmodified PyTorch workers reach exactly their round's
 * namespace), lets the machine settle the port numbers, writes the reply
 * and then the ROUND pushes (common/wire_native.c frames them), logs
 * purged jobs and arms the timers (leases and last calls; retention).
 *
 * Retention (--job-retention): a second timer purges closed jobs once
 * their time is up, a batch per tick so a backlog (thousands of jobs
 * after a restart) never holds the loop for long, and sweeps dead rounds'
 * namespaces now and then.  Due times are wall-clock, so the timer is
 * never set further ahead than a sweep interval: a clock step is noticed.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>

#include <uthash.h>

#include "hostport.h"
#include "log.h"
#include "rdzv_err.h"
#include "rdzvd.h"

/* A round's TCPStore listener, found by its job's id. */
struct round_port {
	UT_hash_handle		 hh;
	char			 job[RZ_ID_MAX + 1];	/* hash key */
	struct evconnlistener	*lis;
	struct ns_ref		*ns;
	int			 port;
};

/* A purge tick's budget, and the pause between ticks of a backlog. */
#define ROUND_PURGE_JOBS	32
#define ROUND_PURGE_KEYS	20000
#define ROUND_PURGE_PAUSE_MS	1
/* Dead rounds' namespaces are swept this often, or every retention
 * when that is shorter: nothing dead outlives closed jobs by much. */
#define ROUND_SWEEP_MS		60000

static struct round_port	*ports;
static int			 port_next;	/* --round-ports: tried first */
static struct event		*rz_timer;
static struct event		*purge_timer;
static int64_t			 purge_at = -1;	/* wall ms it is armed for */
static int64_t			 swept_at;	/* monotonic ms */
static int64_t			 sweep_ms = ROUND_SWEEP_MS;
/* What the machine asked for in the event being served (one at a time:
 * the loop is single-threaded), emptied by round_apply. */
static struct rz_outbox		 outbox;

static void	purge_arm(int64_t at);

int64_t
round_wall_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ms as seconds, with the decimals it needs ("604800", "1.5"). */
static const char *
round_secs(char *buf, size_t sz, int64_t ms)
{
	if (ms % 1000 == 0)
		snprintf(buf, sz, "%lld", (long long)(ms / 1000));
	else if (ms % 100 == 0)
		snprintf(buf, sz, "%lld.%lld", (long long)(ms / 1000),
		    (long long)(ms % 1000 / 100));
	else
		snprintf(buf, sz, "%lld.%03lld", (long long)(ms / 1000),
		    (long long)(ms % 1000));
	return buf;
}

/* Why a JOIN of a closed job is refused, naming --job-retention. */
static void
join_closed_reply(struct conn *c, uint32_t id, struct slice job)
{
	char	msg[384], a[32], b[32];
	int64_t	left;

	left = rz_retention_left(server.rz, job, round_wall_ms());
	if (left < 0)
		snprintf(msg, sizeof msg, "job is closed (it succeeded or "
		    "failed) and rdzvd keeps closed jobs (--job-retention "
		    "0): use a new rdzv_id, or have an operator forget the "
		    "job (rdzvctl forget)");
	else
		snprintf(msg, sizeof msg, "job is closed (it succeeded or "
		    "failed): its rdzv_id is refused for another %s s, "
		    "until --job-retention (%s s) has passed since it "
		    "closed; or use a new rdzv_id, or have an operator "
		    "forget the job (rdzvctl forget)",
		    round_secs(a, sizeof a, left),
		    round_secs(b, sizeof b, server.cfg->job_retention_ms));
	nat_put_error(conn_reply_buf(c), NAT_OP_JOIN, id, RDZV_ECLOSED, msg);
}

/* Replies to a rendezvous request the machine refused, or with no
 * payload: membership changes are acknowledged once committed. */
void
round_reply_rc(struct conn *c, uint16_t op, uint32_t id, int rc)
{
	struct nat_wr	wr;

	if (rc < 0)
		nat_put_error(conn_reply_buf(c), op, id, rc,
		    rc == RDZV_ENOTFOUND ? "unknown job or node: JOIN again" :
		    rdzv_strerror(rc));
	else {
		nat_frame_begin(&wr, conn_reply_buf_durable(c, 1), op,
		    NAT_F_REPLY, id);
		nat_frame_end(&wr);
	}
	conn_reply_done(c);
}

static void
round_reply_join(struct conn *c, const struct round_req *r, int rc)
{
	struct nat_joined	jd;

	if (rc == 0) {
		jd.node_id = outbox.node_id;
		jd.restart_count = outbox.restart_count;
		jd.lease_ms = outbox.lease_ms;
		nat_joined_put(conn_reply_buf_durable(c, 1), r->id, &jd);
	} else if (rc == RDZV_ECLOSED)
		join_closed_reply(c, r->id, r->join.job);
	else if (rc == RDZV_EEXIST)
		nat_put_error(conn_reply_buf(c), NAT_OP_JOIN, r->id, rc,
		    "another live node of the job has this node rank");
	else
		nat_put_error(conn_reply_buf(c), NAT_OP_JOIN, r->id, rc,
		    rc == RDZV_EINVAL ? "bad JOIN, or nnodes/max_restarts "
		    "differ from the job's first JOIN" : rdzv_strerror(rc));
	conn_reply_done(c);
}

static void
round_reply_heartbeat(struct conn *c, const struct round_req *r, int rc)
{
	struct nat_wr	wr;

	if (rc < 0) {
		round_reply_rc(c, r->op, r->id, rc);
		return;
	}
	nat_frame_begin(&wr, conn_reply_buf(c), r->op, NAT_F_REPLY, r->id);
	nat_put_i64(&wr, outbox.round);
	nat_frame_end(&wr);
	conn_reply_done(c);
}

static void
round_reply_plain(struct conn *c, const struct round_req *r, int rc)
{
	round_reply_rc(c, r->op, r->id, rc);
}

/* ADMIN_EVICT: how the node goes, "leave" (at its next step boundary)
 * or "now". */
static void
round_reply_evict(struct conn *c, const struct round_req *r, int rc)
{
	struct nat_wr	 wr;
	const char	*how = rc == 1 ? "leave" : "now";

	if (rc < 0) {
		round_reply_rc(c, r->op, r->id, rc);
		return;
	}
	nat_frame_begin(&wr, conn_reply_buf_durable(c, 1), r->op,
	    NAT_F_REPLY, r->id);
	nat_put_bytes(&wr, how, strlen(how));
	nat_frame_end(&wr);
	conn_reply_done(c);
}

/* ADMIN_FORGET refused: a job not closed is named, with what to do. */
static void
round_reply_forget(struct conn *c, const struct round_req *r, int rc)
{
	char	id[RZ_ID_MAX * 4 + 1], msg[2 * sizeof id + 200];

	if (rc != RDZV_EBUSY) {
		round_reply_rc(c, r->op, r->id, rc);
		return;
	}
	log_escape(id, sizeof id, (const char *)r->job.p, r->job.len);
	snprintf(msg, sizeof msg, "job %s is not closed (it is forming or "
	    "running): only a closed job can be forgotten; close it first "
	    "(rdzvctl close %s)", id, id);
	nat_put_error(conn_reply_buf(c), r->op, r->id, rc, msg);
	conn_reply_done(c);
}

static int	round_port_open(const char *job, const char *ns, int want,
		    int *full);
static void	round_port_close(const char *job);
static void	round_arm(int64_t deadline, int64_t purge_at);

/* A STRAGGLER push (rz_straggler_replace) or a DRAIN push (an evicted
 * node leaves on purpose) onto its connection. */
static void
round_straggler_put(const struct rz_out_push *p)
{
	struct nat_straggler	m;

	m.job = p->round.job;
	m.node_id = p->round.node_id;
	m.round = p->round.round;
	m.local_rank = p->straggler_local;
	m.message = p->round.message;
	nat_straggler_put(conn_reply_buf_durable(p->conn, 1),
	    p->drain ? NAT_OP_DRAIN : NAT_OP_STRAGGLER, &m);
}

/*
 * Carries out the outbox of the event just served, in the order rz.h
 * gives: ports, rz_settle, the reply to r (when c is not NULL), the
 * pushes, purged jobs' log lines, timers.
 */
static void
round_apply(struct conn *c, const struct round_req *r, int rc,
    void (*reply)(struct conn *, const struct round_req *, int))
{
	struct rz_outbox	*ob = &outbox;
	struct rz_out_port	*op;
	struct rz_out_purged	*pg;
	char			 a[32], b[32], why[256], job[RZ_ID_MAX + 1];
	size_t			 i;
	int			 full = 0;

	for (i = 0; i < ob->nport; i++) {
		op = &ob->port[i];
		if (op->open)
			op->port = round_port_open(op->job, op->ns, op->want,
			    &full);
		else
			round_port_close(op->job);
		if (op->open && full) {
			/* Its agents hear so, rather than wait on no port
			 * (the outbox may grow: op is fetched again). */
			snprintf(why, sizeof why, "no free port for the "
			    "round's TCPStore: all of rdzvd's --round-ports "
			    "%d-%d are held; widen the range or close other "
			    "jobs", server.cfg->round_ports[0],
			    server.cfg->round_ports[1]);
			strlcpy(job, op->job, sizeof job);
			rz_port_refused(server.rz, slice_str(job), why,
			    mono_ms(), ob);
		}
	}
	rz_settle(server.rz, ob);
	if (c != NULL)
		reply(c, r, rc);
	for (i = 0; i < ob->npush; i++) {
		if (ob->push[i].straggler || ob->push[i].drain)
			round_straggler_put(&ob->push[i]);
		else
			nat_round_put(conn_reply_buf_durable(ob->push[i].conn,
			    1), &ob->push[i].round);
		conn_reply_done(ob->push[i].conn);
	}
	for (i = 0; i < ob->npurged; i++) {
		pg = &ob->purged[i];
		if (pg->by_operator)
			log_info("job %s forgotten by an operator: it %s %s s "
			    "ago; %lld keys dropped, its id starts a new job",
			    pg->job, pg->state, round_secs(a, sizeof a,
			    round_wall_ms() - pg->closed_ms),
			    (long long)pg->keys);
		else
			log_info("job %s purged: it %s %s s ago, "
			    "--job-retention is %s s; %lld keys dropped",
			    pg->job, pg->state, round_secs(a, sizeof a,
			    round_wall_ms() - pg->closed_ms), round_secs(b,
			    sizeof b, server.cfg->job_retention_ms),
			    (long long)pg->keys);
		progwatch_drop(pg->job);
	}
	if (ob->lost > 0)
		log_warnx("rendezvous: out of memory, %d pushes or ports lost",
		    ob->lost);
	round_arm(ob->deadline, ob->purge_at);
	rz_outbox_reset(ob);
}

/* Each rendezvous op, served through the state machine (rz.h) and its
 * outbox carried out (round_apply): one function an op, called from its
 * row of proto_native.c's table. */
void
round_join(struct conn *c, const struct round_req *r)
{
	round_apply(c, r, rz_join(server.rz, &r->join, c, mono_ms(), &outbox),
	    round_reply_join);
}

void
round_heartbeat(struct conn *c, const struct round_req *r)
{
	int64_t	now = mono_ms();
	int	rc;

	rc = rz_heartbeat(server.rz, r->job, r->node_id, r->repairable, c,
	    now, &outbox);
	if (rc == 0)
		rc = rz_unjoined(server.rz, r->job, r->node_id, r->unjoined,
		    now, &outbox);
	if (rc == 0 && r->stepped >= 0)
		rc = rz_stepped(server.rz, r->job, r->node_id, r->stepped,
		    now, &outbox);
	round_apply(c, r, rc, round_reply_heartbeat);
}

void
round_leave(struct conn *c, const struct round_req *r)
{
	round_apply(c, r, rz_leave(server.rz, r->job, r->node_id, mono_ms(),
	    &outbox), round_reply_plain);
}

void
round_failure(struct conn *c, const struct round_req *r)
{
	round_apply(c, r, rz_failure(server.rz, &r->failure, mono_ms(),
	    &outbox), round_reply_plain);
}

void
round_ready(struct conn *c, const struct round_req *r)
{
	round_apply(c, r, rz_ready(server.rz, &r->ready, mono_ms(), &outbox),
	    round_reply_plain);
}

void
round_succeeded(struct conn *c, const struct round_req *r)
{
	round_apply(c, r, rz_succeeded(server.rz, r->job, r->node_id,
	    r->round, r->unjoined, mono_ms(), &outbox), round_reply_plain);
}

void
round_admin_close(struct conn *c, const struct round_req *r)
{
	round_apply(c, r, rz_admin_close(server.rz, r->job, r->reason,
	    mono_ms(), &outbox), round_reply_plain);
}

void
round_admin_forget(struct conn *c, const struct round_req *r)
{
	round_apply(c, r, rz_admin_forget(server.rz, r->job, &outbox),
	    round_reply_forget);
}

void
round_admin_evict(struct conn *c, const struct round_req *r)
{
	round_apply(c, r, rz_admin_evict(server.rz, r->job, r->node_id,
	    r->now != 0, mono_ms(), &outbox), round_reply_evict);
}

int
round_straggler_replace(struct slice job, int64_t round, int64_t rank)
{
	int	rc;

	rc = rz_straggler_replace(server.rz, job, round, rank, mono_ms(),
	    &outbox);
	round_apply(NULL, NULL, 0, NULL);
	return rc;
}

void
round_conn_gone(struct conn *c)
{
	rz_conn_gone(server.rz, c, &outbox);
	round_apply(NULL, NULL, 0, NULL);
}

/*
 * Serves ns for job on a port like the main listener's (want: that
 * port, or 0 any: one of --round-ports when given).  Returns the port or
 * -1; -1 with *full set when every port of --round-ports is held.
 */
static int
round_port_open(const char *job, const char *ns, int want, int *full)
{
	struct round_port	*rp;
	char			 host[RDZV_HOST_MAX], spec[RDZV_HOSTPORT_MAX];
	const int		*range = server.cfg->round_ports;
	int			 fd, port = 0;

	*full = 0;
	/* The round's port listens where the main listener does. */
	if (hostport_split(server.cfg->listen, HOSTPORT_PORT_ZERO |
	    HOSTPORT_HOST_EMPTY, host, sizeof host, &port, NULL, 0) != 0 ||
	    hostport_join(spec, sizeof spec, host, want > 0 ? want : 0) != 0)
		return -1;
	if (want == 0 && range[0] > 0) {
		fd = listen_socket_range(spec, "round store", range[0],
		    range[1], &port_next, &port);
		if (fd == -1 && errno == EADDRINUSE) {
			*full = 1;
			log_warnx("job %s: no free port for its round store: "
			    "all %d of --round-ports %d-%d are held (by other "
			    "jobs' rounds or other processes); the job fails. "
			    " Widen --round-ports, or close jobs that hold "
			    "theirs", job, range[1] - range[0] + 1, range[0],
			    range[1]);
			return -1;
		}
	} else
		fd = listen_socket(spec, "round store", &port);
	if (fd == -1 && want > 0) {
		log_warnx("job %s: cannot serve its round on port %d again; "
		    "workers must reconnect to a new port", job, want);
		return -1;
	}
	if (fd == -1)
		return -1;
	if ((rp = calloc(1, sizeof *rp)) == NULL ||
	    (rp->ns = ns_ref_new(slice_str(ns))) == NULL) {
		free(rp);
		close(fd);
		return -1;
	}
	rp->lis = server_listen_fd(fd, rp->ns);
	if (rp->lis == NULL) {
		ns_ref_put(rp->ns);
		free(rp);
		return -1;
	}
	strlcpy(rp->job, job, sizeof rp->job);
	rp->port = port;
	HASH_ADD_STR(ports, job, rp);
	log_info("job %s: round store %s on port %d", job, ns, port);
	return port;
}

static void
round_port_close(const char *job)
{
	struct round_port	*rp;

	HASH_FIND_STR(ports, job, rp);
	if (rp == NULL)
		return;
	HASH_DEL(ports, rp);
	evconnlistener_free(rp->lis);
	ns_ref_put(rp->ns);
	free(rp);
}

static void
round_timer_cb(evutil_socket_t fd, short ev, void *arg)
{
	rz_tick(server.rz, mono_ms(), &outbox);
	round_apply(NULL, NULL, 0, NULL);
}

/* Arms the lease timer for deadline (monotonic ms; -1: none) and the
 * purge timer for purge_at_ms (wall ms) if that is sooner than it is. */
static void
round_arm(int64_t deadline, int64_t purge_at_ms)
{
	int64_t		next = deadline, now;
	struct timeval	tv;

	if (server.rz == NULL || rz_timer == NULL)
		return;
	/* A job just closed may be due before the purge timer's time
	 * (a retention shorter than the sweep interval). */
	if (purge_timer != NULL && purge_at_ms >= 0 && (purge_at < 0 ||
	    purge_at_ms < purge_at))
		purge_arm(purge_at_ms);
	if (next < 0) {
		evtimer_del(rz_timer);
		return;
	}
	now = mono_ms();
	next = next > now ? next - now : 0;
	tv.tv_sec = next / 1000;
	tv.tv_usec = (next % 1000) * 1000 + 1000;	/* just past it */
	evtimer_add(rz_timer, &tv);
}


void
round_set_accepting(int on)
{
	struct round_port	*rp, *tmp;

	HASH_ITER(hh, ports, rp, tmp) {
		if (on)
			evconnlistener_enable(rp->lis);
		else
			evconnlistener_disable(rp->lis);
	}
}

static int64_t
round_wall_ms_cb(void *arg)
{
	return round_wall_ms();
}

/* Arms the purge timer for wall time `at` (never further than a sweep
 * interval ahead). */
static void
purge_arm(int64_t at)
{
	struct timeval	tv;
	int64_t		now = round_wall_ms(), ms;

	ms = at > now ? at - now : 0;
	if (ms > sweep_ms) {
		ms = sweep_ms;
		at = now + ms;
	}
	purge_at = at;
	if (ms > 0)
		ms++;		/* just past it, as the clocks may differ */
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(purge_timer, &tv);
}

static void
purge_timer_cb(evutil_socket_t fd, short ev, void *arg)
{
	int64_t		next, now, mono = mono_ms(), keys, t0;
	int		n;

	purge_at = -1;
	t0 = mono_us();
	n = rz_purge(server.rz, round_wall_ms(), ROUND_PURGE_JOBS,
	    ROUND_PURGE_KEYS, &outbox);
	round_apply(NULL, NULL, 0, NULL);
	if (n > 0)
		log_debug("purge tick: %d jobs in %.3f ms", n,
		    (double)(mono_us() - t0) / 1e3);
	if (mono - swept_at >= sweep_ms) {
		swept_at = mono;
		if ((keys = rz_sweep(server.rz)) > 0)
			log_debug("swept %lld keys of ended rounds",
			    (long long)keys);
	}
	now = round_wall_ms();
	next = rz_next_purge(server.rz);
	if (next >= 0 && next <= now)
		/* A backlog: the next batch after the loop has served I/O. */
		next = now + ROUND_PURGE_PAUSE_MS;
	purge_arm(next >= 0 ? next : now + sweep_ms);
}

int
round_init(int64_t last_call_ms, int64_t lease_ms)
{
	static const struct rz_hooks hooks = { round_wall_ms_cb, NULL };

	if ((server.rz = rz_new(server.kv, &hooks, last_call_ms,
	    lease_ms)) == NULL)
		return -1;
	rz_set_retention(server.rz, server.cfg->job_retention_ms);
	sweep_ms = ROUND_SWEEP_MS;
	if (server.cfg->job_retention_ms > 0 &&
	    server.cfg->job_retention_ms < sweep_ms)
		sweep_ms = server.cfg->job_retention_ms;
	if ((rz_timer = evtimer_new(server.base, round_timer_cb, NULL)) == NULL ||
	    (purge_timer = evtimer_new(server.base, purge_timer_cb,
	    NULL)) == NULL)
		return -1;
	rz_outbox_init(&outbox);
	if (rz_load(server.rz, mono_ms(), &outbox) != 0)
		log_warnx("rendezvous: could not load every job");
	/* Jobs whose retention ran out while rdzvd was down go on the
	 * first tick, in batches like any others; the first sweep too. */
	swept_at = mono_ms() - sweep_ms;
	purge_arm(round_wall_ms());
	round_apply(NULL, NULL, 0, NULL);
	return 0;
}

void
round_fini(void)
{
	struct round_port	*rp, *tmp;

	HASH_ITER(hh, ports, rp, tmp) {
		HASH_DEL(ports, rp);
		evconnlistener_free(rp->lis);
		ns_ref_put(rp->ns);
		free(rp);
	}
	if (rz_timer != NULL) {
		event_free(rz_timer);
		rz_timer = NULL;
	}
	if (purge_timer != NULL) {
		event_free(purge_timer);
		purge_timer = NULL;
	}
	purge_at = -1;
	rz_free(server.rz);
	server.rz = NULL;
	rz_outbox_free(&outbox);
}
