/*
 * round.c: the rendezvous state machine (rdzv.c) wired to the daemon:
 * its timers (leases and last calls; retention), ROUND pushes encoded
 * onto agents' connections, and the per-round TCPStore listeners through
 * which unmodified PyTorch workers reach exactly their round's namespace.
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

/* A round's TCPStore listener, found by its job. */
struct round_port {
	UT_hash_handle		 hh;
	const struct rz_job	*job;		/* hash key: the pointer */
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
static struct event		*rz_timer;
static struct event		*purge_timer;
static int64_t			 purge_at = -1;	/* wall ms it is armed for */
static int64_t			 swept_at;	/* monotonic ms */
static int64_t			 sweep_ms = ROUND_SWEEP_MS;

static void	purge_arm(int64_t at);

/* A JOIN being served: its reply must precede any push to its node. */
static struct {
	struct conn	*c;
	uint32_t	 id;
	int64_t		 lease_ms;	/* the job's, once rz_join knows it */
} join_pending;

static void
join_reply(struct conn *c, uint32_t id, int64_t node_id, int64_t restarts,
    int64_t lease_ms)
{
	struct nat_wr	wr;

	nat_frame_begin(&wr, conn_reply_buf_durable(c, 1), NAT_OP_JOIN,
	    NAT_F_REPLY, id);
	nat_put_i64(&wr, node_id);
	nat_put_i64(&wr, restarts);
	nat_put_i64(&wr, lease_ms);
	nat_frame_end(&wr);
	conn_reply_done(c);
}

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
	char	msg[256], a[32], b[32];
	int64_t	left;

	left = rz_retention_left(server.rz, job, round_wall_ms());
	if (left < 0)
		snprintf(msg, sizeof msg, "job is closed (it succeeded or "
		    "failed) and rdzvd keeps closed jobs (--job-retention "
		    "0): use a new rdzv_id");
	else
		snprintf(msg, sizeof msg, "job is closed (it succeeded or "
		    "failed): its rdzv_id is refused for another %s s, "
		    "until --job-retention (%s s) has passed since it "
		    "closed; or use a new rdzv_id",
		    round_secs(a, sizeof a, left),
		    round_secs(b, sizeof b, server.cfg->job_retention_ms));
	nat_put_error(conn_reply_buf(c), NAT_OP_JOIN, id, RDZV_ECLOSED, msg);
}

void
round_join(struct conn *c, uint32_t id, const struct rz_join_req *req)
{
	int64_t	node_id = 0, restarts = 0, lease = 0;
	int	rc;

	join_pending.c = c;
	join_pending.id = id;
	join_pending.lease_ms = 0;
	rc = rz_join(server.rz, req, c, mono_ms(), &node_id, &restarts,
	    &join_pending.lease_ms);
	lease = join_pending.lease_ms;
	if (join_pending.c != NULL) {
		join_pending.c = NULL;
		if (rc == RDZV_ECLOSED)
			join_closed_reply(c, id, req->job);
		else if (rc == RDZV_EEXIST)
			nat_put_error(conn_reply_buf(c), NAT_OP_JOIN, id, rc,
			    "another live node of the job has this node rank");
		else if (rc < 0)
			nat_put_error(conn_reply_buf(c), NAT_OP_JOIN, id, rc,
			    rc == RDZV_EINVAL ? "bad JOIN, or nnodes/"
			    "max_restarts differ from the job's first JOIN" :
			    rdzv_strerror(rc));
		else
			join_reply(c, id, node_id, restarts, lease);
		conn_reply_done(c);
	}
	round_rearm();
}

static void
round_push_cb(void *arg, void *connp, const struct rz_push *p)
{
	struct conn	*c = connp;
	struct nat_wr	 wr;

	if (join_pending.c == c) {
		join_pending.c = NULL;
		join_reply(c, join_pending.id, p->node_id, p->restart_count,
		    join_pending.lease_ms);
	}
	nat_frame_begin(&wr, conn_reply_buf_durable(c, 1), NAT_OP_ROUND,
	    NAT_F_PUSH, 0);
	nat_put_bytes(&wr, p->job, strlen(p->job));
	nat_put_i64(&wr, p->round);
	nat_put_i64(&wr, p->state);
	nat_put_i64(&wr, p->node_id);
	nat_put_i64(&wr, p->group_rank);
	nat_put_i64(&wr, p->group_world_size);
	nat_put_i64(&wr, p->world_size);
	nat_put_i64(&wr, p->rank_base);
	nat_put_i64(&wr, p->restart_count);
	nat_put_i64(&wr, p->max_restarts);
	nat_put_bytes(&wr, p->store_ns, strlen(p->store_ns));
	nat_put_i64(&wr, p->store_port);
	nat_put_bytes(&wr, p->message, strlen(p->message));
	nat_frame_end(&wr);
	conn_reply_done(c);
}

static int
round_open_port_cb(void *arg, struct rz_job *job, const char *ns, int want)
{
	struct round_port	*rp;
	char			 host[RDZV_HOST_MAX], spec[RDZV_HOSTPORT_MAX];
	int			 fd, port = 0;

	/* The round's port listens where the main listener does. */
	if (hostport_split(server.cfg->listen, HOSTPORT_PORT_ZERO |
	    HOSTPORT_HOST_EMPTY, host, sizeof host, &port, NULL, 0) != 0 ||
	    hostport_join(spec, sizeof spec, host, want > 0 ? want : 0) != 0)
		return -1;
	fd = listen_socket(spec, "round store", &port);
	if (fd == -1 && want > 0) {
		log_warnx("job %s: cannot serve its round on port %d again; "
		    "workers must reconnect to a new port", rz_job_id(job), want);
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
	rp->job = job;
	rp->port = port;
	HASH_ADD_PTR(ports, job, rp);
	log_info("job %s: round store %s on port %d", rz_job_id(job), ns, port);
	return port;
}

static void
round_close_port_cb(void *arg, struct rz_job *job)
{
	struct round_port	*rp;

	HASH_FIND_PTR(ports, &job, rp);
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
	rz_tick(server.rz, mono_ms());
	round_rearm();
}

void
round_rearm(void)
{
	int64_t		next, now;
	struct timeval	tv;

	if (server.rz == NULL || rz_timer == NULL)
		return;
	/* A job just closed may be due before the purge timer's time
	 * (a retention shorter than the sweep interval). */
	next = rz_next_purge(server.rz);
	if (purge_timer != NULL && next >= 0 && (purge_at < 0 ||
	    next < purge_at))
		purge_arm(next);
	next = rz_next_deadline(server.rz);
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

static void
round_purged_cb(void *arg, const char *job, const char *state,
    int64_t closed_ms, int64_t keys)
{
	char	a[32], b[32];

	log_info("job %s purged: it %s %s s ago, --job-retention is %s s; "
	    "%lld keys dropped", job, state, round_secs(a, sizeof a,
	    round_wall_ms() - closed_ms), round_secs(b, sizeof b,
	    server.cfg->job_retention_ms), (long long)keys);
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
	    ROUND_PURGE_KEYS);
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
	static const struct rz_hooks hooks = {
		round_push_cb, round_open_port_cb, round_close_port_cb,
		round_wall_ms_cb, NULL, round_purged_cb
	};

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
	if (rz_load(server.rz, mono_ms()) != 0)
		log_warnx("rendezvous: could not load every job");
	/* Jobs whose retention ran out while rdzvd was down go on the
	 * first tick, in batches like any others; the first sweep too. */
	swept_at = mono_ms() - sweep_ms;
	purge_arm(round_wall_ms());
	round_rearm();
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
}
