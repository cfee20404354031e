/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker.h: librdzvworker's internal index, one section per file.
 *
 *   comm.c	the public API: options, the communicator, argument checks,
 *		dispatch to a backend, requests and the background queue
 *   env.c	where this process stands: rank, size, local rank and how to
 *		reach the store, from agent, torchrun, MPI or Slurm variables
 *   net.c	TCP plumbing: connect under a deadline, listen, exact reads
 *		and writes
 *   store.c	the bootstrap store client: rdzvd's native protocol or a
 *		TCPStore (1.13 dialect)
 *   tstore_srv.c  a minimal TCPStore server (kv/: the kv core and its
 *		TCPStore mapping, rdzvd's too), hosted by rank 0 when
 *		torchrun or env:// expects it
 *   reduce.c	element-wise reductions for every dtype and op
 *   cpu.c	the cpu backend's transport: TCP mesh, shared-memory rings,
 *		non-blocking progress with deadlines
 *   cpu_coll.c	the cpu backend's collective algorithms
 *   shm.c	shared-memory segments and the same-host collective arena
 *   nccl.c	the nccl backend (HAVE_NCCL): its communicator, staging,
 *		polling, set-up and tear-down (nccl_be.h what its files share)
 *   nccl_coll.c, nccl_p2p.c  its collectives, its sends and receives
 *   gpulib.c	libcudart and libnccl, loaded when run (HAVE_CUDA)
 *   repair.c	in-place repair: hello and ready, the watcher thread,
 *		waiting for a round, rdzv_comm_repair
 *   dp.c, sampler.c, ckpt.c  the data-parallel helpers
 * The agent channel's messages are common/chan.c's.
 */
#ifndef RDZV_WORKER_INTERNAL_H
#define RDZV_WORKER_INTERNAL_H

#include <sys/queue.h>

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "chan.h"
#include "hostport.h"
#include "mono.h"
#include "rdzv_worker.h"

#define RDZV_TIMEOUT_DEFAULT_MS		300000
#define RDZV_INIT_TIMEOUT_DEFAULT_MS	600000
#define RDZV_ERRMSG_MAX			512
#define RDZV_NS_MAX			1024

/* ---- env.c ---- */

enum wenv_store {
	WENV_STORE_NONE = 0,	/* world of one: no store needed */
	WENV_STORE_NATIVE,	/* rdzvd at endpoint, keys in namespace ns */
	WENV_STORE_TCPSTORE,	/* TCPStore at master_addr:master_port */
};

/* What the environment says about this process. */
struct wenv {
	int		rank;
	int		size;
	int		local_rank;	/* -1 when unknown (worked out from peers) */
	int		local_size;	/* -1 when unknown */
	/* LOCAL_RANK when the launcher gave each worker its own devices
	 * (RDZV_LOCAL_RANK set), else -1. */
	int		dev_index;
	int		restart_count;
	const char	*source;	/* "rdzv-agent", "torchrun", "openmpi", ... */
	enum wenv_store	store;
	char		endpoint[RDZV_HOST_MAX];	/* native: host:port */
	char		ns[RDZV_NS_MAX];		/* native: key scope */
	char		master_addr[RDZV_HOST_MAX];	/* TCPStore host */
	int		master_port;
	int		host_store;	/* TCPStore: this rank serves it */
	char		prefix[64];	/* TCPStore key prefix, "" for none */
	enum rdzv_backend backend;	/* RDZV_BACKEND, AUTO if unset */
	int		timeout_ms;	/* RDZV_TIMEOUT_MS, -1 if unset */
	int		init_timeout_ms; /* RDZV_INIT_TIMEOUT_MS, -1 if unset */
};

/*
 * The CUDA device, of ndev visible, for a rank that is local_rank of
 * local_size (-1: unknown) on its host; *shared is set when another rank
 * of the host maps to the same device.  Pure.
 */
int	wenv_device(const struct wenv *e, int local_rank, int local_size,
	    int ndev, int *shared);

/* Looks a variable up; returns NULL when unset. */
typedef const char	*(*wenv_get_fn)(const char *name, void *arg);

/*
 * Fills e from the variables get returns (getenv when get is NULL).
 * Returns 0, or RDZV_EINVAL with a message in err naming the variables
 * that are missing or malformed.
 */
int	wenv_detect(struct wenv *e, wenv_get_fn get, void *arg, char *err,
	    size_t errlen);
/* Formats a message into err (errlen bytes), the caller's error buffer;
 * err NULL or errlen 0: nothing. */
void	wenv_seterr(char *err, size_t errlen, const char *fmt, ...)
	    __attribute__((format(printf, 3, 4)));

/* ---- net.c ---- */

/* Sets O_NONBLOCK; 0 or RDZV_EIO. */
int	net_nonblock(int fd);
/* TCP_NODELAY, and large buffers when bulk. */
void	net_tune(int fd, int bulk);
/* poll() one fd until deadline: 1 ready, 0 timed out, < 0 error. */
int	net_poll1(int fd, short events, int64_t deadline);
/* Connects to host:port (every resolved address), retrying refusals until
 * deadline; tuned by net_tune(bulk) before the handshake.  *fdp is
 * non-blocking.  0, RDZV_ECONN, RDZV_ETIMEDOUT or RDZV_EINVAL (name never
 * resolved). */
int	net_connect(const char *host, int port, int bulk, int64_t deadline,
	    int *fdp);
/* Listens on addr (numeric, "0.0.0.0" or "::" for any) and port (0: any
 * free), tuned by net_tune(bulk) for the sockets it accepts; *portp (may
 * be NULL) gets the port.  0 or RDZV_ECONN. */
int	net_listen(const char *addr, int port, int bulk, int *fdp, int *portp);
int	net_local_port(int fd);
/* The local address of a connected socket, numeric. */
int	net_local_addr(int fd, char *buf, size_t len);
/* Exact transfers under a deadline: 0, RDZV_ETIMEDOUT or RDZV_ECONN. */
int	net_write_all(int fd, const void *buf, size_t len, int64_t deadline);
int	net_read_all(int fd, void *buf, size_t len, int64_t deadline);

/* ---- progress.c ---- */

struct wstore;

/* Where a reporter's steps went last. */
struct wprogress {
	int		 fd;		/* the agent's socket, or -1 */
	uint64_t	 step;		/* the last reported */
	int64_t		 sent_ms;	/* last sent on fd (mono_ms) */
	int64_t		 store_ms;	/* last published to the store */
};

/* The socket rdzv-agent passes as RDZV_PROGRESS_FD when it really is a
 * local SOCK_SEQPACKET socket (a wrapper may have reused the number),
 * else -1. */
int	wprogress_fd(void);
/*
 * Reports step: to p->fd at most every 100 ms (never blocking), and as
 * "progress/<rank>" = "<step> <unix_ms> <wait_ms>" into store (none:
 * NULL) at most every second.  Returns 0 or the store's error.
 */
int	wprogress_report(struct wprogress *p, struct wstore *store, int rank,
	    uint64_t step, int64_t wait_ms);

/* ---- store.c ---- */

struct wstore;

/*
 * Connects to the store e names (serving it first when e->host_store),
 * retrying refused connections until timeout_ms.  Returns 0 or a code
 * with a message in err.
 */
int	wstore_open(struct wstore **sp, const struct wenv *e, int timeout_ms,
	    char *err, size_t errlen);
void	wstore_close(struct wstore *);
int	wstore_set(struct wstore *, const char *key, const void *val,
	    size_t len, int timeout_ms);
/* Waits up to timeout_ms for key to exist, then reads it (malloc'ed,
 * NUL-terminated). */
int	wstore_get(struct wstore *, const char *key, void **val, size_t *len,
	    int timeout_ms);
int	wstore_add(struct wstore *, const char *key, int64_t delta,
	    int64_t *out, int timeout_ms);
/* The address of this end of the store connection ("" if unknown): the
 * interface the other ranks can reach us on. */
const char	*wstore_local_addr(const struct wstore *);
/* Shuts the store's connection down (any thread), so that a call
 * waiting on it in another thread returns at once with an error. */
void		 wstore_cut(struct wstore *);
/* Blocks in the store until every rank has called it with the same key. */
int	wstore_barrier(struct wstore *, const char *key, int world,
	    int timeout_ms);

/* ---- tstore_srv.c ---- */

struct tstore_srv;

/*
 * Serves the TCPStore 1.13 protocol (and 2.x) on addr:port from a
 * background thread, on a private kv core.  port 0 picks a free one;
 * *portp gets the port bound.  Returns 0 or RDZV_ECONN (cannot bind),
 * RDZV_ENOMEM.
 */
int	tstore_srv_start(struct tstore_srv **, const char *addr, int port,
	    int *portp);
/* Stops the thread, closes every connection, frees the server. */
void	tstore_srv_stop(struct tstore_srv *);

/* ---- reduce.c ---- */

/* dst[i] = a[i] op b[i] (AVG as SUM); dst is a itself or overlaps
 * neither a nor b. */
typedef void	(*reduce3_fn)(void *dst, const void *a, const void *b,
		    size_t n);
reduce3_fn	reduce3_get(enum rdzv_dtype, enum rdzv_op);
/* Divides n elements by size in place (the last step of AVG). */
void	reduce_avg_finish(void *buf, size_t n, enum rdzv_dtype, int size);
float		half_to_float(uint16_t);
uint16_t	float_to_half(float);
float		bf16_to_float(uint16_t);
uint16_t	float_to_bf16(float);

/* ---- repair.c ---- */

#define RDZV_REPAIR_TIMEOUT_DEFAULT_MS	60000

/*
 * Called by rdzv_init once the environment is read: decides whether
 * repair is on, says hello to the agent and starts the watcher; a
 * replacement then says ready and waits for its round, which is applied
 * to c->env (rank, size, store scope).  Returns 0 or a code with a
 * message in c->errmsg.
 */
int	repair_start(struct rdzv_comm *);
/* Called by rdzv_init on success: rounds from now on break the
 * communicator. */
void	repair_live(struct rdzv_comm *);
/* Stops the watcher (finalize). */
void	repair_stop(struct rdzv_comm *);
/*
 * The result a public call returns for rc: with repair on and the
 * communicator broken, waits (bounded) for the agent's round and turns
 * rc into RDZV_EREPAIR; otherwise rc itself.
 */
int	repair_result(struct rdzv_comm *, int rc);
/* Whether a newer round than c's is announced and not yet taken. */
int	repair_superseded(struct rdzv_comm *);

/* ---- comm.c ---- */

struct rdzv_comm;

/*
 * A backend: every collective gets a valid, checked argument set and an
 * absolute deadline (mono_ms() clock); it returns 0 or a code, and calls
 * comm_fail() for anything that leaves the peers out of step.  Optional
 * entries may be NULL (comm.c then emulates them or answers RDZV_EINVAL).
 * Non-blocking forms (iallreduce, isend, irecv) may be left NULL: comm.c
 * then runs the blocking form on its background thread, in issue order.
 */
struct rdzv_request;
struct backend_ops {
	const char	*name;
	enum rdzv_backend kind;
	/* Called with comm's identity, store and options set. */
	int	(*init)(struct rdzv_comm *);
	void	(*fini)(struct rdzv_comm *);
	/* Any thread: make every pending and later call fail fast. */
	void	(*abort)(struct rdzv_comm *);
	int	(*allreduce)(struct rdzv_comm *, const void *, void *, size_t,
		    enum rdzv_dtype, enum rdzv_op, int64_t deadline);
	int	(*broadcast)(struct rdzv_comm *, void *, size_t,
		    enum rdzv_dtype, int root, int64_t deadline);
	int	(*reduce)(struct rdzv_comm *, const void *, void *, size_t,
		    enum rdzv_dtype, enum rdzv_op, int root, int64_t deadline);
	int	(*allgather)(struct rdzv_comm *, const void *, void *, size_t,
		    enum rdzv_dtype, int64_t deadline);
	int	(*reduce_scatter)(struct rdzv_comm *, const void *, void *,
		    size_t, enum rdzv_dtype, enum rdzv_op, int64_t deadline);
	int	(*gather)(struct rdzv_comm *, const void *, void *, size_t,
		    enum rdzv_dtype, int root, int64_t deadline);
	int	(*scatter)(struct rdzv_comm *, const void *, void *, size_t,
		    enum rdzv_dtype, int root, int64_t deadline);
	int	(*alltoall)(struct rdzv_comm *, const void *, void *, size_t,
		    enum rdzv_dtype, int64_t deadline);
	int	(*barrier)(struct rdzv_comm *, int64_t deadline);
	/*
	 * Point to point: runs the queued send/recv request first (taken
	 * off the queue by comm.c) concurrently with any further ones it
	 * takes with comm_take_p2p() while it runs (poll comm_wake_fd() to
	 * hear of them), completing each with comm_complete() as it ends;
	 * returns when none is left.  Sends to one peer go in order, and
	 * so do receives from one peer.  Each request's deadline starts
	 * when it is taken.
	 */
	int	(*p2p)(struct rdzv_comm *, struct rdzv_request *first);
	/* Optional native asynchronous forms: fill *reqp with a request
	 * whose wait/test/free hooks the backend sets. */
	int	(*iallreduce)(struct rdzv_comm *, const void *, void *, size_t,
		    enum rdzv_dtype, enum rdzv_op, int64_t timeout_ms,
		    struct rdzv_request **reqp);
	/*
	 * Optional, for a repair round that only drops ranks: called with
	 * the round's rank, size and store already in place and the old
	 * rank and size given; moves the backend onto the survivors in
	 * place (nccl: ncclCommShrink).  0, or a code after which comm.c
	 * finalizes the backend and initializes it afresh.
	 */
	int	(*shrink)(struct rdzv_comm *, int old_rank, int old_size);
};

extern const struct backend_ops	cpu_backend_ops;
#ifdef HAVE_NCCL
extern const struct backend_ops	nccl_backend_ops;
#endif

/*
 * A request.  Backends with native asynchrony allocate their own (with
 * request_new) and set the hooks; requests comm.c queues for its
 * background thread leave them NULL.
 */
enum req_kind { REQ_ALLREDUCE = 1, REQ_SEND, REQ_RECV, REQ_BACKEND };
struct rdzv_request {
	struct rdzv_comm	*comm;
	enum req_kind		 kind;
	/* Backend hooks (REQ_BACKEND): wait returns the result without
	 * freeing; test returns 0 pending, 1 done, < 0 error; free frees
	 * the backend's part. */
	int	(*wait)(struct rdzv_request *);
	int	(*test)(struct rdzv_request *);
	void	(*free)(struct rdzv_request *);
	void	*be;

	/* Queued operation (comm.c). */
	const void		*sbuf;
	void			*rbuf;
	size_t			 count;
	enum rdzv_dtype		 dtype;
	enum rdzv_op		 op;
	int			 peer;
	int			 timeout_ms;
	int64_t			 deadline;	/* set when started */
	size_t			 off;		/* bytes moved (p2p) */
	uint8_t			 hdr[8];	/* p2p length header */
	int			 done;	/* guarded by comm->qlock */
	int			 result;
	TAILQ_ENTRY(rdzv_request) qentry;	/* the run queue */
	TAILQ_ENTRY(rdzv_request) lentry;	/* every live request */
};
TAILQ_HEAD(req_list, rdzv_request);
/* Allocates a zeroed request of comm for a backend; NULL on ENOMEM. */
struct rdzv_request	*request_new(struct rdzv_comm *);
/* Takes the next queued request off the queue if it is a send or recv
 * (for a backend's p2p runner), else NULL. */
struct rdzv_request	*comm_take_p2p(struct rdzv_comm *);
/* Marks a request the background thread runs as done with result. */
void	comm_complete(struct rdzv_request *, int result);
/* Readable when comm_take_p2p() may have something new. */
int	comm_wake_fd(const struct rdzv_comm *);

struct rdzv_comm {
	int		 rank;
	int		 size;
	int		 local_rank;
	int		 local_size;
	int		 restart_count;
	int		 device;
	int		 timeout_ms;
	int		 init_timeout_ms;
	struct rdzv_options opts;
	struct wenv	 env;
	struct wstore	*store;		/* NULL in a world of one */
	char		 keypfx[64];	/* this communicator's store keys */
	const struct backend_ops *ops;
	void		*be;		/* the backend's state */

	/* Broken state: set once by comm_fail(), read by every call. */
	int		 err;		/* atomic */
	char		 errmsg[RDZV_ERRMSG_MAX];
	pthread_mutex_t	 errlock;

	/* Background queue of asynchronous operations, run in issue order
	 * by one thread; blocking calls wait for it to drain. */
	pthread_mutex_t	 qlock;
	pthread_cond_t	 qcond;		/* queue changed or request done */
	struct req_list	 queue;		/* waiting to run */
	struct req_list	 live;		/* allocated, not yet freed */
	int		 qwake[2];	/* pipe: a p2p request was queued */
	int		 qbusy;		/* the thread is running one */
	int		 qstop;
	int		 qthread_on;
	pthread_t	 qthread;

	/* Progress reporting (rdzv-agent; progress.c). */
	struct wprogress progress;

	/* In-place repair (repair.c). */
	int		 repair;	/* on: hello sent, watcher running */
	int		 repair_timeout_ms;
	struct rdzv_round round;	/* the round the communicator is in */
	pthread_mutex_t	 rlock;		/* guards what follows */
	pthread_cond_t	 rcond;		/* a round or a stop arrived */
	struct chan_msg	 pend;		/* the latest round announced */
	int		 pend_set;
	int		 rstopped;	/* "stop", or the agent went away */
	int		 rgaveup;	/* a wait timed out: do not wait again */
	int		 rlive;		/* initialized: rounds break it */
	int		 rleave;	/* "leave": go at a step boundary */
	int		 rbuilding;	/* a bootstrap (rdzv_init's or a
					 * rebuild's) on the store: a newer
					 * round breaks it and cuts the store */
	int		 wwake[2];	/* pipe: stop the watcher */
	int		 wthread_on;
	pthread_t	 wthread;
	int64_t		 wait_since;	/* mono_ms() a call began waiting
					 * on peers, 0: none (atomic) */
	int64_t		 wait_total;	/* ms waited on peers, all told
					 * (atomic; in progress reports) */
};

/* Logs msg at level through the user's callback, if any and enabled. */
void	comm_log(struct rdzv_comm *, enum rdzv_log_level, const char *, ...)
	    __attribute__((format(printf, 3, 4)));
/*
 * Breaks the communicator with code (first cause wins), records the
 * message, logs it, and lets the backend abort so peers notice at once.
 * Returns code, so `return comm_fail(...)` reads naturally.  Any thread.
 */
int	comm_fail(struct rdzv_comm *, int code, const char *, ...)
	    __attribute__((format(printf, 3, 4)));
/* Records a message for rdzv_comm_errmsg() without breaking anything
 * (bad arguments, init failures); returns code. */
int	comm_note(struct rdzv_comm *, int code, const char *, ...)
	    __attribute__((format(printf, 3, 4)));
/* 0 while usable, else the breaking code. */
int	comm_broken(const struct rdzv_comm *);
/*
 * Marks c as blocked waiting on its peers (on) or not: the repair
 * watcher then says "wait" to the agent about once a second, so its
 * --progress_timeout watchdog tells this rank from the one it waits on.
 */
void	comm_waiting(struct rdzv_comm *, int on);
/*
 * Rebuilds the communicator on round m (rdzv_comm_repair): stops the
 * queue, tears the backend and the store down, takes m's rank, size and
 * store scope and bootstraps again.  Returns 0 or the bootstrap's code
 * (the communicator is then broken).
 */
int	comm_rebuild(struct rdzv_comm *, const struct chan_msg *m);
/* Sets c's identity and store from round m (no I/O). */
void	comm_take_round(struct rdzv_comm *, const struct chan_msg *m);
/* Absolute deadline for a call's timeout_ms (negative: the default). */
int64_t	comm_deadline(const struct rdzv_comm *, int timeout_ms);
/* Milliseconds left until deadline, at least 0, at most INT_MAX. */
int	deadline_left(int64_t deadline);

/* ---- cpu.c (shared with cpu_coll.c) ---- */

struct cpu;
/* The cuda staging helpers of cpu.c: 1 when p is device memory. */
int	cpu_is_device_ptr(const void *p);

#endif /* RDZV_WORKER_INTERNAL_H */
