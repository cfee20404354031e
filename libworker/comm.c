/* SPDX-License-Identifier: Apache-2.0 */
/*
 * comm.c: the public face of librdzvworker.  Owns the communicator's
 * life (environment, store, backend choice, finalize), argument checks,
 * the broken state, logging, and requests.
 *
 * Asynchronous operations (iallreduce, isend, irecv, and the blocking
 * send/recv built on them) go through one queue run by one background
 * thread per communicator, in issue order, so every rank runs its
 * collectives in the same order.  A blocking collective waits for that
 * queue to drain and then runs on the caller's thread: no hand-off, so
 * small collectives keep their latency.  Point-to-point requests at the
 * head of the queue are handed to the backend together, so a send and a
 * receive posted back to back progress at once instead of deadlocking.
 *
 * Request life: allocated by an i* call (on the comm's live list), queued,
 * run, marked done; freed by rdzv_wait()/rdzv_test() or by finalize.
 */
#include "config.h"

#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include "gpulib.h"
#endif

#include "worker.h"

/* Bootstrap generations: each rdzv_init of a process gets its own keys. */
static atomic_int	comm_generation;

int64_t
comm_deadline(const struct rdzv_comm *c, int timeout_ms)
{
	return (mono_ms() + (timeout_ms < 0 ? c->timeout_ms : timeout_ms));
}

int
deadline_left(int64_t deadline)
{
	int64_t	left = deadline - mono_ms();

	if (left <= 0)
		return (0);
	return (left > INT_MAX ? INT_MAX : (int)left);
}

size_t
rdzv_dtype_size(enum rdzv_dtype dt)
{
	switch (dt) {
	case RDZV_F32:	return (4);
	case RDZV_F64:	return (8);
	case RDZV_F16:	return (2);
	case RDZV_BF16:	return (2);
	case RDZV_I32:	return (4);
	case RDZV_I64:	return (8);
	case RDZV_U8:	return (1);
	}
	return (0);
}

void
rdzv_options_init(struct rdzv_options *o)
{
	memset(o, 0, sizeof *o);
	o->backend = RDZV_BACKEND_AUTO;
	o->timeout_ms = RDZV_TIMEOUT_DEFAULT_MS;
	o->init_timeout_ms = RDZV_INIT_TIMEOUT_DEFAULT_MS;
	o->device = -1;
	o->log_level = RDZV_LOG_WARN;
}

static void	vlog(const struct rdzv_options *, enum rdzv_log_level,
		    const char *, va_list) __attribute__((format(printf, 3, 0)));
static void	init_err(const struct rdzv_options *, char *, size_t,
		    const char *, ...) __attribute__((format(printf, 4, 5)));

static void
vlog(const struct rdzv_options *o, enum rdzv_log_level lvl, const char *fmt,
    va_list ap)
{
	char	msg[RDZV_ERRMSG_MAX];

	if (o->log == NULL || lvl > o->log_level)
		return;
	vsnprintf(msg, sizeof msg, fmt, ap);
	o->log(o->log_arg, lvl, msg);
}

void
comm_log(struct rdzv_comm *c, enum rdzv_log_level lvl, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vlog(&c->opts, lvl, fmt, ap);
	va_end(ap);
}

int
comm_fail(struct rdzv_comm *c, int code, const char *fmt, ...)
{
	va_list	ap;
	int	expected = 0;

	if (code >= 0)
		code = RDZV_EIO;
	pthread_mutex_lock(&c->errlock);
	if (__atomic_compare_exchange_n(&c->err, &expected, code, 0,
	    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
		va_start(ap, fmt);
		vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
		va_end(ap);
		pthread_mutex_unlock(&c->errlock);
		comm_log(c, RDZV_LOG_ERROR, "rank %d: communicator broken: %s",
		    c->rank, c->errmsg);
		/* Let the peers see it now rather than at their timeout. */
		if (c->ops != NULL && c->ops->abort != NULL)
			c->ops->abort(c);
		return (code);
	}
	pthread_mutex_unlock(&c->errlock);
	return (code);
}

int
comm_broken(const struct rdzv_comm *c)
{
	return (__atomic_load_n(&c->err, __ATOMIC_ACQUIRE));
}

void
comm_waiting(struct rdzv_comm *c, int on)
{
	int64_t	zero = 0, since;

	if (!on) {
		/* The wait is over: its time is added to the total that
		 * progress reports carry (rdzvd tells a slow rank from one
		 * waiting on it by it). */
		since = __atomic_exchange_n(&c->wait_since, 0,
		    __ATOMIC_RELAXED);
		if (since != 0)
			__atomic_add_fetch(&c->wait_total, mono_ms() - since,
			    __ATOMIC_RELAXED);
	} else if (__atomic_load_n(&c->wait_since, __ATOMIC_RELAXED) == 0)
		(void)__atomic_compare_exchange_n(&c->wait_since, &zero,
		    mono_ms(), 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

int
comm_note(struct rdzv_comm *c, int code, const char *fmt, ...)
{
	va_list	ap;

	if (comm_broken(c))
		return (code);
	pthread_mutex_lock(&c->errlock);
	va_start(ap, fmt);
	vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&c->errlock);
	return (code);
}

/* ---- init and finalize ---- */

/*
 * Marks whether c bootstraps (rdzv_init's or a rebuild's): a newer round
 * then breaks it and cuts its store (repair.c).
 */
static void
comm_set_building(struct rdzv_comm *c, int on)
{
	pthread_mutex_lock(&c->rlock);
	c->rbuilding = on;
	pthread_mutex_unlock(&c->rlock);
}

static void
init_err(const struct rdzv_options *o, char *err, size_t errlen,
    const char *fmt, ...)
{
	va_list	ap;
	char	msg[RDZV_ERRMSG_MAX];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (err != NULL && errlen > 0)
		strlcpy(err, msg, errlen);
	if (o->log != NULL)
		o->log(o->log_arg, RDZV_LOG_ERROR, msg);
}

/* CUDA devices this process sees; 0 without a CUDA runtime. */
static int
gpu_count(void)
{
#ifdef HAVE_CUDA
	int	n = 0;

	if (!gpulib_cudart())
		return (0);
	if (cudart.cudaGetDeviceCount(&n) != cudaSuccess) {
		(void)cudart.cudaGetLastError();
		return (0);
	}
	return (n);
#else
	return (0);
#endif
}

/*
 * Chooses the backend: the one asked for (nccl failing here, with the
 * loader's one line, when NCCL cannot be loaded), else nccl when this
 * rank has a GPU of its own and NCCL loads, else cpu.  Ranks sharing a
 * GPU get cpu: NCCL refuses two ranks on one device.  The choice is each
 * rank's from what its host shows, so hosts must be alike.
 */
static const struct backend_ops *
choose_backend(struct rdzv_comm *c, char *why, size_t whylen)
{
	enum rdzv_backend	b = c->opts.backend;
	int			ndev, shared = 0;

	if (b == RDZV_BACKEND_AUTO)
		b = c->env.backend;
	if (b == RDZV_BACKEND_CPU)
		return (&cpu_backend_ops);
	if (b == RDZV_BACKEND_NCCL) {
#ifdef HAVE_NCCL
		if (gpulib_nccl(why, whylen) != 0)
			return (NULL);
		return (&nccl_backend_ops);
#else
		snprintf(why, whylen, "the nccl backend was asked for but "
		    "this librdzvworker was built without NCCL");
		return (NULL);
#endif
	}
	if ((ndev = gpu_count()) <= 0)
		return (&cpu_backend_ops);
	if (c->opts.device < 0)
		(void)wenv_device(&c->env, c->local_rank, c->local_size, ndev,
		    &shared);
	if (shared) {
		comm_log(c, RDZV_LOG_INFO, "backend auto: %d ranks on this "
		    "host, %d GPU%s visible to each: the cpu backend (NCCL "
		    "wants one GPU per rank; RDZV_BACKEND=nccl to try anyway)",
		    c->local_size > 0 ? c->local_size : c->local_rank + 1,
		    ndev, ndev > 1 ? "s" : "");
		return (&cpu_backend_ops);
	}
#ifdef HAVE_NCCL
	if (gpulib_nccl(why, whylen) == 0)
		return (&nccl_backend_ops);
	comm_log(c, RDZV_LOG_WARN, "backend auto: %s; using the cpu backend",
	    why);
	why[0] = '\0';
#endif
	return (&cpu_backend_ops);
}


int
rdzv_init(struct rdzv_comm **commp, const struct rdzv_options *opts,
    char *err, size_t errlen)
{
	struct rdzv_options	 dflt;
	struct rdzv_comm	*c;
	pthread_condattr_t	 ca;
	char			 msg[RDZV_ERRMSG_MAX];
	int			 rc, gen;

	if (commp == NULL)
		return (RDZV_EINVAL);
	*commp = NULL;
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (opts == NULL) {
		rdzv_options_init(&dflt);
		opts = &dflt;
	}
	if ((c = calloc(1, sizeof *c)) == NULL) {
		init_err(opts, err, errlen, "out of memory");
		return (RDZV_ENOMEM);
	}
	c->opts = *opts;
	pthread_mutex_init(&c->errlock, NULL);
	pthread_mutex_init(&c->qlock, NULL);
	pthread_cond_init(&c->qcond, NULL);
	TAILQ_INIT(&c->queue);
	TAILQ_INIT(&c->live);
	c->qwake[0] = c->qwake[1] = -1;
	c->wwake[0] = c->wwake[1] = -1;
	pthread_mutex_init(&c->rlock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->rcond, &ca);
	pthread_condattr_destroy(&ca);
	c->progress.fd = wprogress_fd();

	if ((rc = wenv_detect(&c->env, NULL, NULL, msg, sizeof msg)) != 0) {
		init_err(opts, err, errlen, "rdzv_init: %s", msg);
		goto fail;
	}
	/* A replacement takes its rank, size and scope from its round. */
	if ((rc = repair_start(c)) != 0) {
		init_err(opts, err, errlen, "rdzv_init: %s", c->errmsg);
		goto fail;
	}
	c->rank = c->env.rank;
	c->size = c->env.size;
	c->local_rank = c->env.local_rank;
	c->local_size = c->env.local_size;
	c->restart_count = c->env.restart_count;
	c->device = opts->device;
	/* The environment tunes what the program left at its default. */
	c->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms :
	    RDZV_TIMEOUT_DEFAULT_MS;
	if (opts->timeout_ms == RDZV_TIMEOUT_DEFAULT_MS &&
	    c->env.timeout_ms > 0)
		c->timeout_ms = c->env.timeout_ms;
	c->init_timeout_ms = opts->init_timeout_ms > 0 ?
	    opts->init_timeout_ms : RDZV_INIT_TIMEOUT_DEFAULT_MS;
	if (opts->init_timeout_ms == RDZV_INIT_TIMEOUT_DEFAULT_MS &&
	    c->env.init_timeout_ms > 0)
		c->init_timeout_ms = c->env.init_timeout_ms;
	gen = atomic_fetch_add(&comm_generation, 1);
	snprintf(c->keypfx, sizeof c->keypfx, "rdzvw/%d", gen);

	if (pipe2(c->qwake, O_CLOEXEC | O_NONBLOCK) == -1) {
		rc = RDZV_EIO;
		init_err(opts, err, errlen, "rdzv_init: pipe: %s",
		    strerror(errno));
		goto fail;
	}
	if (c->size > 1) {
		rc = wstore_open(&c->store, &c->env, c->init_timeout_ms, msg,
		    sizeof msg);
		if (rc != 0) {
			init_err(opts, err, errlen, "rdzv_init: rank %d of %d "
			    "(%s): %s", c->rank, c->size, c->env.source, msg);
			goto fail;
		}
	}
	if ((c->ops = choose_backend(c, msg, sizeof msg)) == NULL) {
		rc = RDZV_EINVAL;
		init_err(opts, err, errlen, "rdzv_init: %s", msg);
		goto fail;
	}
	/* From here a newer round (a peer of this one died as it formed)
	 * breaks the bootstrap, which then takes that round as a rebuild
	 * does: a replacement joins the round that formed without its dead
	 * peer instead of waiting for that peer until the init timeout. */
	comm_set_building(c, c->repair);
	rc = repair_superseded(c) ? RDZV_EREPAIR : c->ops->init(c);
	comm_set_building(c, 0);
	if (rc != 0 && repair_superseded(c))
		rc = rdzv_comm_repair(c, -1);
	if (rc != 0) {
		init_err(opts, err, errlen, "rdzv_init: rank %d of %d: %s "
		    "backend: %s", c->rank, c->size, c->ops->name,
		    c->errmsg[0] != '\0' ? c->errmsg : rdzv_strerror(rc));
		goto fail;	/* finalize lets the backend free what it made */
	}
	if (c->local_rank < 0)
		c->local_rank = 0;
	if (c->local_size < 0)
		c->local_size = 1;
	comm_log(c, RDZV_LOG_INFO, "rank %d of %d (local %d of %d, %s): %s "
	    "backend ready", c->rank, c->size, c->local_rank, c->local_size,
	    c->env.source, c->ops->name);
	c->errmsg[0] = '\0';
	c->round.rank = c->rank;
	c->round.size = c->size;
	repair_live(c);
	*commp = c;
	return (0);
fail:
	c->err = rc;
	rdzv_finalize(c);
	return (rc);
}

static void	queue_stop(struct rdzv_comm *);

int
rdzv_finalize(struct rdzv_comm *c)
{
	struct rdzv_request	*r;
	int			 rc;

	if (c == NULL)
		return (0);
	repair_stop(c);
	queue_stop(c);
	while ((r = TAILQ_FIRST(&c->live)) != NULL) {
		TAILQ_REMOVE(&c->live, r, lentry);
		if (r->free != NULL)
			r->free(r);
		free(r);
	}
	rc = comm_broken(c);
	if (c->ops != NULL && c->ops->fini != NULL)
		c->ops->fini(c);
	wstore_close(c->store);
	if (c->qwake[0] != -1) {
		close(c->qwake[0]);
		close(c->qwake[1]);
	}
	pthread_mutex_destroy(&c->errlock);
	pthread_mutex_destroy(&c->qlock);
	pthread_cond_destroy(&c->qcond);
	pthread_mutex_destroy(&c->rlock);
	pthread_cond_destroy(&c->rcond);
	free(c);
	return (rc);
}

void
comm_take_round(struct rdzv_comm *c, const struct chan_msg *m)
{
	/* chan_parse() leaves no round without ns and master_addr. */
	strlcpy(c->env.ns, m->ns, sizeof c->env.ns);
	if (c->env.store != WENV_STORE_NATIVE && c->env.endpoint[0] != '\0')
		c->env.store = WENV_STORE_NATIVE;
	if (c->env.store != WENV_STORE_NATIVE) {
		strlcpy(c->env.master_addr, m->master_addr,
		    sizeof c->env.master_addr);
		c->env.master_port = m->master_port;
		c->env.store = WENV_STORE_TCPSTORE;
	}
	/* The round's store is served by the agent, never by a worker. */
	c->env.host_store = 0;
	c->env.rank = c->rank = m->rank;
	c->env.size = c->size = m->world;
	c->env.local_rank = c->local_rank = m->local_rank;
	c->env.local_size = c->local_size = m->local_world;
	c->round.round = m->round;
	c->round.kind = m->kind == CHAN_GROW ? RDZV_ROUND_GROW :
	    RDZV_ROUND_SHRINK;
	c->round.donor = m->donor;
	c->round.rank = m->rank;
	c->round.size = m->world;
}

/* Clears the broken state (a rebuild); the caller may hold rlock. */
static void
comm_clear(struct rdzv_comm *c)
{
	pthread_mutex_lock(&c->errlock);
	__atomic_store_n(&c->err, 0, __ATOMIC_SEQ_CST);
	c->errmsg[0] = '\0';
	pthread_mutex_unlock(&c->errlock);
}

static int	comm_rebuild_on(struct rdzv_comm *, const struct chan_msg *);

int
comm_rebuild(struct rdzv_comm *c, const struct chan_msg *m)
{
	int	rc;

	rc = comm_rebuild_on(c, m);
	comm_set_building(c, 0);
	return (rc);
}

static int
comm_rebuild_on(struct rdzv_comm *c, const struct chan_msg *m)
{
	char	msg[RDZV_ERRMSG_MAX];
	int	rc, saved, old_rank = c->rank, old_size = c->size, shrink;

	/* Nothing of the old round may run or touch a buffer any more. */
	queue_stop(c);
	c->qstop = 0;
	/* A communicator that never formed (rdzv_init's bootstrap broke)
	 * has nothing to shrink: a fresh one. */
	shrink = m->kind == CHAN_SHRINK && c->ops->shrink != NULL &&
	    m->world > 1 && c->rlive;
	if (!shrink && c->ops->fini != NULL)
		c->ops->fini(c);
	comm_set_building(c, 0);
	wstore_close(c->store);
	c->store = NULL;
	/* Lock order: rlock, then errlock (repair.c breaks under rlock). */
	pthread_mutex_lock(&c->rlock);
	comm_take_round(c, m);
	c->round.joined = 0;
	c->round.repairs++;
	comm_clear(c);
	pthread_mutex_unlock(&c->rlock);
	/* The agent hears the first step of the new round at once. */
	c->progress.store_ms = 0;
	c->progress.sent_ms = 0;
	/* A dead peer must cost the repair timeout at most, not the
	 * bootstrap's ten minutes.  A world of one has nobody to meet but
	 * reports its steps there under rdzvd (members, the status page). */
	if ((c->size > 1 || c->env.store == WENV_STORE_NATIVE) &&
	    (rc = wstore_open(&c->store, &c->env,
	    c->repair_timeout_ms, msg, sizeof msg)) != 0)
		return (comm_fail(c, rc, "repair round %d: %s", m->round,
		    msg));
	/* From here a newer round cuts the store under the bootstrap (a
	 * peer of this round died in it: it would wait for the timeout). */
	comm_set_building(c, 1);
	if (repair_superseded(c))
		return (comm_fail(c, RDZV_EREPAIR, "repair round %d: "
		    "superseded before it formed", m->round));
	saved = c->init_timeout_ms;
	if (c->repair_timeout_ms < saved)
		c->init_timeout_ms = c->repair_timeout_ms;
	if (shrink && (rc = c->ops->shrink(c, old_rank, old_size)) != 0) {
		comm_log(c, RDZV_LOG_WARN, "repair round %d: shrinking in place"
		    " failed (%s): a fresh %s communicator instead", m->round,
		    rdzv_strerror(rc), c->ops->name);
		if (c->ops->fini != NULL)
			c->ops->fini(c);
		comm_clear(c);
	} else if (shrink) {
		c->init_timeout_ms = saved;
		return (0);
	}
	if ((rc = c->ops->init(c)) != 0)
		rc = comm_fail(c, rc, "repair round %d: %s backend: %s",
		    m->round, c->ops->name, c->errmsg[0] != '\0' ? c->errmsg :
		    rdzv_strerror(rc));
	c->init_timeout_ms = saved;
	return (rc);
}

void
rdzv_abort(struct rdzv_comm *c)
{
	if (c == NULL)
		return;
	/* The program's own abort is final: no call waits for a round. */
	pthread_mutex_lock(&c->rlock);
	c->rgaveup = 1;
	pthread_mutex_unlock(&c->rlock);
	comm_fail(c, RDZV_ECLOSED, "aborted by the program");
}

/* ---- queries ---- */

int
rdzv_rank(const struct rdzv_comm *c)
{
	return (c->rank);
}

int
rdzv_size(const struct rdzv_comm *c)
{
	return (c->size);
}

int
rdzv_local_rank(const struct rdzv_comm *c)
{
	return (c->local_rank);
}

int
rdzv_local_size(const struct rdzv_comm *c)
{
	return (c->local_size);
}

enum rdzv_backend
rdzv_backend(const struct rdzv_comm *c)
{
	return (c->ops->kind);
}

int
rdzv_device(const struct rdzv_comm *c)
{
	return (c->device);
}

int
rdzv_restart_count(const struct rdzv_comm *c)
{
	return (c->restart_count);
}

int
rdzv_comm_error(const struct rdzv_comm *c)
{
	return (comm_broken(c));
}

const char *
rdzv_comm_errmsg(const struct rdzv_comm *c)
{
	return (c->errmsg);
}

/* ---- the background queue ---- */

static void *
queue_main(void *arg)
{
	struct rdzv_comm	*c = arg;
	struct rdzv_request	*r;
	int			 rc;
	char			 drain[64];

	pthread_mutex_lock(&c->qlock);
	for (;;) {
		while (TAILQ_EMPTY(&c->queue) && !c->qstop)
			pthread_cond_wait(&c->qcond, &c->qlock);
		if (c->qstop)
			break;
		r = TAILQ_FIRST(&c->queue);
		TAILQ_REMOVE(&c->queue, r, qentry);
		c->qbusy = 1;
		pthread_mutex_unlock(&c->qlock);
		while (read(c->qwake[0], drain, sizeof drain) > 0)
			;
		r->deadline = comm_deadline(c, r->timeout_ms);
		if ((rc = comm_broken(c)) != 0)
			comm_complete(r, RDZV_ECLOSED);
		else if (r->kind == REQ_ALLREDUCE) {
			rc = c->ops->allreduce(c, r->sbuf, r->rbuf, r->count,
			    r->dtype, r->op, r->deadline);
			comm_complete(r, rc);
		} else
			c->ops->p2p(c, r);
		pthread_mutex_lock(&c->qlock);
		c->qbusy = 0;
		pthread_cond_broadcast(&c->qcond);
	}
	pthread_mutex_unlock(&c->qlock);
	return (NULL);
}

/* Stops the thread: a running operation is aborted first, so no user
 * buffer is touched after finalize returns. */
static void
queue_stop(struct rdzv_comm *c)
{
	struct rdzv_request	*r;

	if (!c->qthread_on)
		return;
	pthread_mutex_lock(&c->qlock);
	/* Pending means a request not yet done; the thread itself may still
	 * be on its way out of a finished one, which is no reason to break
	 * the communicator. */
	TAILQ_FOREACH(r, &c->live, lentry)
		if (r->kind != REQ_BACKEND && !r->done)
			break;
	if (r != NULL) {
		pthread_mutex_unlock(&c->qlock);
		comm_fail(c, RDZV_ECLOSED, "finalized with requests pending");
		pthread_mutex_lock(&c->qlock);
	}
	while ((r = TAILQ_FIRST(&c->queue)) != NULL) {
		TAILQ_REMOVE(&c->queue, r, qentry);
		r->done = 1;
		r->result = RDZV_ECLOSED;
	}
	c->qstop = 1;
	pthread_cond_broadcast(&c->qcond);
	pthread_mutex_unlock(&c->qlock);
	pthread_join(c->qthread, NULL);
	c->qthread_on = 0;
}

/* Waits until the queue is empty and idle: a blocking call comes next. */
static void
queue_drain(struct rdzv_comm *c)
{
	if (!c->qthread_on)
		return;
	pthread_mutex_lock(&c->qlock);
	while (c->qbusy || !TAILQ_EMPTY(&c->queue))
		pthread_cond_wait(&c->qcond, &c->qlock);
	pthread_mutex_unlock(&c->qlock);
}

struct rdzv_request *
request_new(struct rdzv_comm *c)
{
	struct rdzv_request	*r;

	if ((r = calloc(1, sizeof *r)) == NULL)
		return (NULL);
	r->comm = c;
	pthread_mutex_lock(&c->qlock);
	TAILQ_INSERT_TAIL(&c->live, r, lentry);
	pthread_mutex_unlock(&c->qlock);
	return (r);
}

static void
request_free(struct rdzv_request *r)
{
	struct rdzv_comm	*c = r->comm;

	pthread_mutex_lock(&c->qlock);
	TAILQ_REMOVE(&c->live, r, lentry);
	pthread_mutex_unlock(&c->qlock);
	if (r->free != NULL)
		r->free(r);
	free(r);
}

static int
queue_push(struct rdzv_comm *c, struct rdzv_request *r)
{
	pthread_mutex_lock(&c->qlock);
	if (!c->qthread_on) {
		if (pthread_create(&c->qthread, NULL, queue_main, c) != 0) {
			pthread_mutex_unlock(&c->qlock);
			return (RDZV_ENOMEM);
		}
		c->qthread_on = 1;
	}
	TAILQ_INSERT_TAIL(&c->queue, r, qentry);
	pthread_cond_broadcast(&c->qcond);
	pthread_mutex_unlock(&c->qlock);
	if (r->kind == REQ_SEND || r->kind == REQ_RECV)
		(void)write(c->qwake[1], "p", 1);
	return (0);
}

struct rdzv_request *
comm_take_p2p(struct rdzv_comm *c)
{
	struct rdzv_request	*r;

	pthread_mutex_lock(&c->qlock);
	r = TAILQ_FIRST(&c->queue);
	if (r != NULL && (r->kind == REQ_SEND || r->kind == REQ_RECV) &&
	    !c->qstop)
		TAILQ_REMOVE(&c->queue, r, qentry);
	else
		r = NULL;
	pthread_mutex_unlock(&c->qlock);
	if (r != NULL)
		r->deadline = comm_deadline(c, r->timeout_ms);
	return (r);
}

int
comm_wake_fd(const struct rdzv_comm *c)
{
	return (c->qwake[0]);
}

void
comm_complete(struct rdzv_request *r, int result)
{
	struct rdzv_comm	*c = r->comm;

	pthread_mutex_lock(&c->qlock);
	r->result = result;
	r->done = 1;
	pthread_cond_broadcast(&c->qcond);
	pthread_mutex_unlock(&c->qlock);
}

int
rdzv_wait(struct rdzv_request *r)
{
	struct rdzv_comm	*c;
	int			 rc;

	if (r == NULL)
		return (RDZV_EINVAL);
	c = r->comm;
	if (r->kind == REQ_BACKEND)
		rc = r->wait(r);
	else {
		pthread_mutex_lock(&c->qlock);
		while (!r->done)
			pthread_cond_wait(&c->qcond, &c->qlock);
		rc = r->result;
		pthread_mutex_unlock(&c->qlock);
	}
	request_free(r);
	return (repair_result(c, rc));
}

int
rdzv_waitall(struct rdzv_request **reqs, size_t n)
{
	size_t	i;
	int	rc, first = 0;

	for (i = 0; i < n; i++) {
		if (reqs[i] == NULL)
			continue;
		rc = rdzv_wait(reqs[i]);
		reqs[i] = NULL;
		if (rc != 0 && first == 0)
			first = rc;
	}
	return (first);
}

int
rdzv_test(struct rdzv_request *r)
{
	struct rdzv_comm	*c;
	int			 rc, done;

	if (r == NULL)
		return (RDZV_EINVAL);
	c = r->comm;
	if (r->kind == REQ_BACKEND) {
		if ((rc = r->test(r)) == 0)
			return (0);
	} else {
		pthread_mutex_lock(&c->qlock);
		done = r->done;
		rc = r->result;
		pthread_mutex_unlock(&c->qlock);
		if (!done)
			return (0);
		if (rc == 0)
			rc = 1;
	}
	request_free(r);
	return (rc < 0 ? repair_result(c, rc) : rc);
}

/* ---- argument checks ---- */

/* Common checks; sets *bytes to count elements of dt, times mult. */
static int
check(struct rdzv_comm *c, size_t count, enum rdzv_dtype dt, size_t mult,
    size_t *bytes)
{
	size_t	es;

	if (c == NULL)
		return (RDZV_EINVAL);
	if (comm_broken(c) != 0)	/* errmsg keeps the first cause */
		return (repair_result(c, RDZV_ECLOSED));
	if ((es = rdzv_dtype_size(dt)) == 0)
		return (comm_note(c, RDZV_EINVAL, "unknown dtype %d", (int)dt));
	if (mult == 0 || count > SIZE_MAX / es / mult)
		return (comm_note(c, RDZV_EINVAL, "count %zu overflows",
		    count));
	*bytes = count * es * mult;
	return (0);
}

static int
check_op(struct rdzv_comm *c, enum rdzv_op op)
{
	if ((unsigned)op >= RDZV_OP_COUNT)
		return (comm_note(c, RDZV_EINVAL, "unknown op %d", (int)op));
	return (0);
}

static int
check_rank(struct rdzv_comm *c, int r, const char *what)
{
	if (r < 0 || r >= c->size)
		return (comm_note(c, RDZV_EINVAL, "%s %d is not a rank of "
		    "0..%d", what, r, c->size - 1));
	return (0);
}

static int
check_buf(struct rdzv_comm *c, const void *p, size_t bytes, const char *what)
{
	if (p == NULL && bytes > 0)
		return (comm_note(c, RDZV_EINVAL, "%s is NULL", what));
	return (0);
}

/* ---- collectives ---- */

/* What coll_check checks beside the count and the buffers. */
#define COLL_OP		0x1	/* op is a known one */
#define COLL_ROOT	0x2	/* root is a rank */

/* What a collective's buffer holds: unchecked, count elements, or count
 * per rank. */
enum coll_size {
	COLL_SKIP,
	COLL_ONE,
	COLL_ALL
};

/*
 * The checks every collective makes, in this order: count elements of dt
 * (and count per rank when a buffer holds every rank's), op and root in
 * range when what has COLL_OP and COLL_ROOT, sbuf and rbuf not NULL for
 * the sizes they hold.  Returns 0 or the first failing check's code (its
 * message noted on c).
 */
static int
coll_check(struct rdzv_comm *c, size_t count, enum rdzv_dtype dt, int what,
    int op, int root, const void *sbuf, enum coll_size ssz, const void *rbuf,
    enum coll_size rsz)
{
	size_t	one, all = 0;
	int	rc;

	if ((rc = check(c, count, dt, 1, &one)) != 0 ||
	    ((ssz == COLL_ALL || rsz == COLL_ALL) &&
	    (rc = check(c, count, dt, (size_t)c->size, &all)) != 0) ||
	    ((what & COLL_OP) && (rc = check_op(c, op)) != 0) ||
	    ((what & COLL_ROOT) && (rc = check_rank(c, root, "root")) != 0) ||
	    (ssz != COLL_SKIP && (rc = check_buf(c, sbuf,
	    ssz == COLL_ALL ? all : one, "sendbuf")) != 0) ||
	    (rsz != COLL_SKIP && (rc = check_buf(c, rbuf,
	    rsz == COLL_ALL ? all : one, "recvbuf")) != 0))
		return (rc);
	return (0);
}

/* A buffer only the root uses. */
#define AT_ROOT(c, root, sz)	((c)->rank == (root) ? (sz) : COLL_SKIP)

int
rdzv_allreduce(struct rdzv_comm *c, const void *sbuf, void *rbuf,
    size_t count, enum rdzv_dtype dt, enum rdzv_op op, int timeout_ms)
{
	int	rc;

	if ((rc = coll_check(c, count, dt, COLL_OP, op, 0, sbuf, COLL_ONE, rbuf,
	    COLL_ONE)) != 0)
		return (rc);
	queue_drain(c);
	return (repair_result(c, c->ops->allreduce(c, sbuf, rbuf, count, dt, op,
	    comm_deadline(c, timeout_ms))));
}

int
rdzv_broadcast(struct rdzv_comm *c, void *buf, size_t count,
    enum rdzv_dtype dt, int root, int timeout_ms)
{
	int	rc;

	if ((rc = coll_check(c, count, dt, COLL_ROOT, 0, root, buf, COLL_ONE,
	    NULL, COLL_SKIP)) != 0)
		return (rc);
	queue_drain(c);
	return (repair_result(c, c->ops->broadcast(c, buf, count, dt, root,
	    comm_deadline(c, timeout_ms))));
}

int
rdzv_reduce(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int root, int timeout_ms)
{
	int	rc;

	if ((rc = coll_check(c, count, dt, COLL_OP | COLL_ROOT, op, root, sbuf,
	    COLL_ONE, rbuf, AT_ROOT(c, root, COLL_ONE))) != 0)
		return (rc);
	queue_drain(c);
	return (repair_result(c, c->ops->reduce(c, sbuf, rbuf, count, dt, op, root,
	    comm_deadline(c, timeout_ms))));
}

int
rdzv_allgather(struct rdzv_comm *c, const void *sbuf, void *rbuf,
    size_t count, enum rdzv_dtype dt, int timeout_ms)
{
	int	rc;

	if ((rc = coll_check(c, count, dt, 0, 0, 0, sbuf, COLL_ONE, rbuf,
	    COLL_ALL)) != 0)
		return (rc);
	queue_drain(c);
	return (repair_result(c, c->ops->allgather(c, sbuf, rbuf, count, dt,
	    comm_deadline(c, timeout_ms))));
}

int
rdzv_reduce_scatter(struct rdzv_comm *c, const void *sbuf, void *rbuf,
    size_t count, enum rdzv_dtype dt, enum rdzv_op op, int timeout_ms)
{
	int	rc;

	if ((rc = coll_check(c, count, dt, COLL_OP, op, 0, sbuf, COLL_ALL, rbuf,
	    COLL_ONE)) != 0)
		return (rc);
	queue_drain(c);
	return (repair_result(c, c->ops->reduce_scatter(c, sbuf, rbuf, count, dt, op,
	    comm_deadline(c, timeout_ms))));
}

int
rdzv_gather(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int root, int timeout_ms)
{
	int	rc;

	if ((rc = coll_check(c, count, dt, COLL_ROOT, 0, root, sbuf, COLL_ONE,
	    rbuf, AT_ROOT(c, root, COLL_ALL))) != 0)
		return (rc);
	queue_drain(c);
	return (repair_result(c, c->ops->gather(c, sbuf, rbuf, count, dt, root,
	    comm_deadline(c, timeout_ms))));
}

int
rdzv_scatter(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int root, int timeout_ms)
{
	int	rc;

	if ((rc = coll_check(c, count, dt, COLL_ROOT, 0, root, sbuf,
	    AT_ROOT(c, root, COLL_ALL), rbuf, COLL_ONE)) != 0)
		return (rc);
	queue_drain(c);
	return (repair_result(c, c->ops->scatter(c, sbuf, rbuf, count, dt, root,
	    comm_deadline(c, timeout_ms))));
}

int
rdzv_alltoall(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int timeout_ms)
{
	int	rc;

	if ((rc = coll_check(c, count, dt, 0, 0, 0, sbuf, COLL_ALL, rbuf,
	    COLL_ALL)) != 0)
		return (rc);
	if (count > 0 && sbuf == rbuf)
		return (comm_note(c, RDZV_EINVAL, "alltoall is not in place"));
	queue_drain(c);
	return (repair_result(c, c->ops->alltoall(c, sbuf, rbuf, count, dt,
	    comm_deadline(c, timeout_ms))));
}

int
rdzv_barrier(struct rdzv_comm *c, int timeout_ms)
{
	int	rc;

	if ((rc = coll_check(c, 0, RDZV_U8, 0, 0, 0, NULL, COLL_SKIP, NULL,
	    COLL_SKIP)) != 0)
		return (rc);
	queue_drain(c);
	return (repair_result(c, c->ops->barrier(c, comm_deadline(c, timeout_ms))));
}

/* ---- point to point and asynchronous operations ---- */

static int
p2p_start(struct rdzv_comm *c, enum req_kind kind, const void *sbuf,
    void *rbuf, size_t count, enum rdzv_dtype dt, int peer, int timeout_ms,
    struct rdzv_request **reqp)
{
	struct rdzv_request	*r;
	size_t			 bytes;
	int			 rc;

	if (reqp == NULL)
		return (RDZV_EINVAL);
	*reqp = NULL;
	if ((rc = check(c, count, dt, 1, &bytes)) != 0 ||
	    (rc = check_rank(c, peer, "peer")) != 0 ||
	    (rc = check_buf(c, kind == REQ_SEND ? sbuf : rbuf, bytes,
	    "buf")) != 0)
		return (rc);
	if ((r = request_new(c)) == NULL)
		return (RDZV_ENOMEM);
	r->kind = kind;
	r->sbuf = sbuf;
	r->rbuf = rbuf;
	r->count = bytes;	/* p2p moves bytes */
	r->dtype = dt;
	r->peer = peer;
	r->timeout_ms = timeout_ms;
	if ((rc = queue_push(c, r)) != 0) {
		request_free(r);
		return (rc);
	}
	*reqp = r;
	return (0);
}

int
rdzv_isend(struct rdzv_comm *c, const void *buf, size_t count,
    enum rdzv_dtype dt, int peer, int timeout_ms, struct rdzv_request **reqp)
{
	return (p2p_start(c, REQ_SEND, buf, NULL, count, dt, peer, timeout_ms,
	    reqp));
}

int
rdzv_irecv(struct rdzv_comm *c, void *buf, size_t count, enum rdzv_dtype dt,
    int peer, int timeout_ms, struct rdzv_request **reqp)
{
	return (p2p_start(c, REQ_RECV, NULL, buf, count, dt, peer, timeout_ms,
	    reqp));
}

int
rdzv_send(struct rdzv_comm *c, const void *buf, size_t count,
    enum rdzv_dtype dt, int peer, int timeout_ms)
{
	struct rdzv_request	*r;
	int			 rc;

	if ((rc = rdzv_isend(c, buf, count, dt, peer, timeout_ms, &r)) != 0)
		return (rc);
	return (rdzv_wait(r));
}

int
rdzv_recv(struct rdzv_comm *c, void *buf, size_t count, enum rdzv_dtype dt,
    int peer, int timeout_ms)
{
	struct rdzv_request	*r;
	int			 rc;

	if ((rc = rdzv_irecv(c, buf, count, dt, peer, timeout_ms, &r)) != 0)
		return (rc);
	return (rdzv_wait(r));
}

int
rdzv_iallreduce(struct rdzv_comm *c, const void *sbuf, void *rbuf,
    size_t count, enum rdzv_dtype dt, enum rdzv_op op, int timeout_ms,
    struct rdzv_request **reqp)
{
	struct rdzv_request	*r;
	int			 rc;

	if (reqp == NULL)
		return (RDZV_EINVAL);
	*reqp = NULL;
	if ((rc = coll_check(c, count, dt, COLL_OP, op, 0, sbuf, COLL_ONE, rbuf,
	    COLL_ONE)) != 0)
		return (rc);
	if (c->ops->iallreduce != NULL) {
		queue_drain(c);
		return (repair_result(c, c->ops->iallreduce(c, sbuf, rbuf, count, dt, op,
		    timeout_ms, reqp)));
	}
	if ((r = request_new(c)) == NULL)
		return (RDZV_ENOMEM);
	r->kind = REQ_ALLREDUCE;
	r->sbuf = sbuf;
	r->rbuf = rbuf;
	r->count = count;
	r->dtype = dt;
	r->op = op;
	r->timeout_ms = timeout_ms;
	if ((rc = queue_push(c, r)) != 0) {
		request_free(r);
		return (rc);
	}
	*reqp = r;
	return (0);
}

/* ---- progress ---- */

int
rdzv_report_progress(struct rdzv_comm *c, uint64_t step)
{
	if (c == NULL)
		return (RDZV_EINVAL);
	return (wprogress_report(&c->progress, c->env.store ==
	    WENV_STORE_NATIVE ? c->store : NULL, c->rank, step,
	    __atomic_load_n(&c->wait_total, __ATOMIC_RELAXED)));
}
