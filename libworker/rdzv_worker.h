/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rdzv_worker.h: librdzvworker, the library a training program links to
 * get a communicator from the rendezvous in one call, run collectives on
 * CPU or GPU buffers, and train data-parallel.  Installed; self-contained
 * (needs only the C standard headers).
 *
 *	struct rdzv_comm *comm;
 *	char err[256];
 *	if (rdzv_init(&comm, NULL, err, sizeof err) != 0)
 *		errx(1, "rdzv_init: %s", err);
 *	rdzv_allreduce(comm, grad, grad, n, RDZV_F32, RDZV_AVG, -1);
 *	rdzv_finalize(comm);
 *
 * Conventions, for every function below:
 * - Fallible calls return 0 (or a documented non-negative value) on
 *   success and a negative RDZV_E* code on failure; rdzv_strerror() names
 *   it and rdzv_comm_errmsg() says what happened.  The library never
 *   exits, never prints and never raises a signal; messages go to the
 *   optional log callback only.
 * - timeout_ms bounds the call: negative means the communicator's default
 *   (rdzv_options.timeout_ms), 0 means "only what is possible at once".
 * - A peer's death, a broken connection or a timeout inside a collective
 *   or point-to-point call breaks the communicator: that call returns the
 *   cause (RDZV_ECONN, RDZV_ETIMEDOUT, ...) and every later call on it
 *   returns RDZV_ECLOSED at once, in every surviving rank within the
 *   timeout, never a hang.  The program then finalizes and exits (under
 *   rdzv-agent the job restarts from its last checkpoint), unless it
 *   opted into in-place repair: then the call returns RDZV_EREPAIR and
 *   the communicator is rebuilt in place (see "in-place repair").
 * - Buffers may be host memory or, in builds with CUDA, device memory;
 *   each backend stages the kind it does not run on (nccl: host buffers
 *   through pinned and device memory, slower than device buffers; cpu:
 *   device buffers through host memory).  sendbuf == recvbuf is an
 *   in-place operation wherever both exist.
 * - Device buffers and streams (nccl): a call runs on the library's own
 *   stream, ordered after the work queued so far on the legacy default
 *   stream; work on any other stream that writes a send buffer or reads
 *   a receive buffer must be complete (synchronize that stream) before
 *   the call.  A blocking call returns with its result in memory; an
 *   iallreduce's is there once rdzv_wait/rdzv_test says it completed.
 * - CUDA and NCCL are loaded when first needed (RDZV_CUDART_LIBRARY and
 *   RDZV_NCCL_LIBRARY name them, else the dynamic linker's path, then the
 *   directories the build found them in): a program starts without
 *   them, and the cpu backend never needs them.
 * - Counts are in elements of the given dtype, not bytes.
 * - Collectives must be called in the same order with matching arguments
 *   by every rank.  A communicator may be used from one thread at a time;
 *   requests (isend, irecv, iallreduce) progress in the background.
 */
#ifndef RDZV_WORKER_H
#define RDZV_WORKER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDZV_WORKER_VERSION	"0.1.0"

/*
 * Error codes: the same numbers as common/rdzv_err.h inside rdzv, under the
 * same include guard, so both headers can be included together in any
 * order.
 */
#ifndef RDZV_ERR_H
#define RDZV_ERR_H
enum rdzv_err {
	RDZV_OK = 0,
	RDZV_EINVAL = -1,	/* bad argument or malformed value */
	RDZV_EPROTO = -2,	/* peer broke the protocol */
	RDZV_ETOOBIG = -3,	/* over a configured limit */
	RDZV_ENOTFOUND = -4,	/* key, file or object does not exist */
	RDZV_ETIMEDOUT = -5,	/* deadline passed */
	RDZV_ECANCELED = -6,	/* wait cancelled */
	RDZV_ENOMEM = -7,	/* allocation failed or memory budget spent */
	RDZV_EIO = -8,		/* I/O, file or device error */
	RDZV_ECONN = -9,	/* connection refused, reset or closed (peer died) */
	RDZV_EAUTH = -10,	/* authentication failed */
	RDZV_ECLOSED = -11,	/* communicator broken or finalized, store closed */
	RDZV_EEXIST = -12,	/* already exists */
	RDZV_ENOTINT = -13,	/* stored value is not a decimal integer */
	RDZV_EBUSY = -14,	/* resource busy, try again */
	RDZV_EVERSION = -15,	/* unsupported protocol version */
	RDZV_ETLS = -16,	/* TLS required, refused or failed (RDZV_TLS_CA) */
	RDZV_EREPAIR = -17,	/* cut off by a repair round: drop the step,
				   then rdzv_comm_repair() */
};
#define RDZV_ERR_MIN	RDZV_EREPAIR
/* Returns a constant, human-readable description of code (never NULL). */
const char	*rdzv_strerror(int code);
#endif /* RDZV_ERR_H */

/* ---- types ---- */

struct rdzv_comm;	/* a communicator: one per process and round */
struct rdzv_request;	/* an operation in progress (isend, irecv, iallreduce) */

enum rdzv_backend {
	RDZV_BACKEND_AUTO = 0,	/* nccl when this rank has a GPU of its own (no other
				   rank of its host maps to it) and NCCL loads,
				    else cpu */
	RDZV_BACKEND_CPU = 1,	/* TCP ring + shared memory between ranks of one host */
	RDZV_BACKEND_NCCL = 2,	/* NCCL over CUDA device buffers */
};

enum rdzv_dtype {
	RDZV_F32 = 0,
	RDZV_F64 = 1,
	RDZV_F16 = 2,		/* IEEE half; reduced through float */
	RDZV_BF16 = 3,		/* bfloat16; reduced through float */
	RDZV_I32 = 4,
	RDZV_I64 = 5,
	RDZV_U8 = 6,
};
#define RDZV_DTYPE_COUNT	7

enum rdzv_op {
	RDZV_SUM = 0,
	RDZV_PROD = 1,
	RDZV_MIN = 2,
	RDZV_MAX = 3,
	RDZV_AVG = 4,		/* sum / size; integers truncate toward zero */
};
#define RDZV_OP_COUNT	5

/* Size in bytes of one element of dtype, 0 for an unknown dtype. */
size_t	rdzv_dtype_size(enum rdzv_dtype);

enum rdzv_log_level {
	RDZV_LOG_ERROR = 0,
	RDZV_LOG_WARN = 1,
	RDZV_LOG_INFO = 2,
	RDZV_LOG_DEBUG = 3,
};
/* Receives one message (no trailing newline); may be called from the
 * library's background thread. */
typedef void	(*rdzv_log_fn)(void *arg, enum rdzv_log_level level,
		    const char *msg);

/* ---- start and stop ---- */

struct rdzv_options {
	enum rdzv_backend backend;	/* default AUTO (env RDZV_BACKEND=auto|cpu|nccl) */
	int	timeout_ms;		/* default for every call: 300000 (env RDZV_TIMEOUT_MS) */
	int	init_timeout_ms;	/* bootstrap (store, peers): 600000 (env RDZV_INIT_TIMEOUT_MS) */
	int	device;			/* CUDA device, -1 = LOCAL_RANK when the launcher gave
					   each worker its own GPUs
					    (RDZV_LOCAL_RANK set), else
					   the local rank modulo visible devices
					    */
	rdzv_log_fn	log;		/* NULL: the library stays silent */
	void	*log_arg;
	enum rdzv_log_level log_level;	/* most verbose level passed to log (WARN) */
	int	repair;			/* 1: the program handles RDZV_EREPAIR (see
					   "in-place repair"); 0: off unless
					   RDZV_REPAIR=1.  RDZV_REPAIR=0 vetoes. */
	int	reserved[7];		/* zero: room to grow without breaking the ABI */
};

/* Fills opts with the defaults above. */
void	rdzv_options_init(struct rdzv_options *opts);

/*
 * Creates this process's communicator from its environment and stores it
 * in *commp.  opts may be NULL (defaults).  Where the environment comes
 * from, first match wins:
 *   rdzv-agent / torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 *     with RDZV_ENDPOINT + RDZV_NAMESPACE (rdzvd's native protocol, keys
 *     scoped by job and round; RDZV_JOB, RDZV_ROUND informative) or else
 *     MASTER_ADDR + MASTER_PORT (TCPStore protocol; under torchrun 1.13
 *     with TORCHELASTIC_USE_AGENT_STORE=False rank 0 hosts the store in
 *     a background thread; with True keys go under
 *     /worker/attempt_<TORCHELASTIC_RESTART_COUNT>);
 *   Open MPI: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
 *   MPICH/PMI: PMI_RANK, PMI_SIZE (local rank from MPI_LOCALRANKID);
 *   Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID;
 * the last three with MASTER_ADDR + MASTER_PORT (or RDZV_ENDPOINT).  A
 * world of one needs nothing at all.  On failure returns a negative code,
 * writes a message naming what is missing or what failed into err (errlen
 * bytes, may be NULL/0) and passes it to opts->log; *commp is then NULL.
 * All ranks must call it; it returns once every rank is connected.
 */
int	rdzv_init(struct rdzv_comm **commp, const struct rdzv_options *opts,
	    char *err, size_t errlen);

/*
 * Frees the communicator: any request still pending is cancelled (its
 * buffers are no longer touched), connections are closed; a store this
 * process hosts is closed after the other ranks have left it (bounded by
 * the default timeout).  NULL is allowed.  Returns 0, or the code that
 * had broken the communicator.
 */
int	rdzv_finalize(struct rdzv_comm *comm);

/*
 * Breaks the communicator on purpose (e.g. from a signal-free watchdog
 * thread): pending and later calls return RDZV_ECLOSED and peers see the
 * connection drop (with repair on, they wait for the agent's round; this
 * process does not, unless rdzv_comm_repair is called).  Safe to call
 * from any thread.
 */
void	rdzv_abort(struct rdzv_comm *comm);

/* ---- where this process stands ---- */

int	rdzv_rank(const struct rdzv_comm *);		/* 0 .. size-1 */
int	rdzv_size(const struct rdzv_comm *);		/* world size */
int	rdzv_local_rank(const struct rdzv_comm *);	/* rank on this host */
int	rdzv_local_size(const struct rdzv_comm *);	/* ranks on this host */
/* The backend in use (never AUTO) and the CUDA device (-1 for none). */
enum rdzv_backend	rdzv_backend(const struct rdzv_comm *);
int	rdzv_device(const struct rdzv_comm *);
/* TORCHELASTIC_RESTART_COUNT (0 on a first start or outside an agent). */
int	rdzv_restart_count(const struct rdzv_comm *);
/* 0 while usable, else the code that broke the communicator. */
int	rdzv_comm_error(const struct rdzv_comm *);
/* The last error's message ("" if none); valid until the next call. */
const char	*rdzv_comm_errmsg(const struct rdzv_comm *);

/* ---- collectives (all ranks, same order, same counts) ---- */

/* recvbuf[i] = op over ranks of sendbuf[i], on every rank. */
int	rdzv_allreduce(struct rdzv_comm *, const void *sendbuf, void *recvbuf,
	    size_t count, enum rdzv_dtype, enum rdzv_op, int timeout_ms);
/* buf of root is copied to buf of every rank. */
int	rdzv_broadcast(struct rdzv_comm *, void *buf, size_t count,
	    enum rdzv_dtype, int root, int timeout_ms);
/* Like allreduce but only root's recvbuf gets the result (others: unused,
 * may be NULL). */
int	rdzv_reduce(struct rdzv_comm *, const void *sendbuf, void *recvbuf,
	    size_t count, enum rdzv_dtype, enum rdzv_op, int root,
	    int timeout_ms);
/* recvbuf (size * count elements) = every rank's sendbuf (count), in rank
 * order. */
int	rdzv_allgather(struct rdzv_comm *, const void *sendbuf, void *recvbuf,
	    size_t count, enum rdzv_dtype, int timeout_ms);
/* sendbuf holds size blocks of recvcount; rank r gets block r reduced over
 * ranks. */
int	rdzv_reduce_scatter(struct rdzv_comm *, const void *sendbuf,
	    void *recvbuf, size_t recvcount, enum rdzv_dtype, enum rdzv_op,
	    int timeout_ms);
/* root's recvbuf (size * count) = every rank's sendbuf (count) in rank
 * order; recvbuf unused elsewhere (may be NULL). */
int	rdzv_gather(struct rdzv_comm *, const void *sendbuf, void *recvbuf,
	    size_t count, enum rdzv_dtype, int root, int timeout_ms);
/* Block r of root's sendbuf (size * count) goes to rank r's recvbuf
 * (count); sendbuf unused elsewhere (may be NULL). */
int	rdzv_scatter(struct rdzv_comm *, const void *sendbuf, void *recvbuf,
	    size_t count, enum rdzv_dtype, int root, int timeout_ms);
/* Block j of rank i's sendbuf goes to block i of rank j's recvbuf; both
 * hold size * count elements; not in place. */
int	rdzv_alltoall(struct rdzv_comm *, const void *sendbuf, void *recvbuf,
	    size_t count, enum rdzv_dtype, int timeout_ms);
/* Returns once every rank has entered it. */
int	rdzv_barrier(struct rdzv_comm *, int timeout_ms);

/* ---- point to point ---- */

/*
 * Messages from one rank to another arrive in the order they were sent
 * and match receives in the order those were posted; the counts and
 * dtypes of a send and its receive must agree.  A send to oneself matches
 * a receive from oneself.  Sends and receives may be mixed with
 * collectives only in the same order on both sides.
 */
int	rdzv_send(struct rdzv_comm *, const void *buf, size_t count,
	    enum rdzv_dtype, int peer, int timeout_ms);
int	rdzv_recv(struct rdzv_comm *, void *buf, size_t count,
	    enum rdzv_dtype, int peer, int timeout_ms);

/*
 * Non-blocking forms: start the operation and return a request in *reqp.
 * The buffer must stay valid (and unchanged, for a send) until the
 * request completes.  timeout_ms bounds the operation from the moment the
 * library starts it.  Every request must be completed with rdzv_wait()
 * or rdzv_test(), which free it.
 */
int	rdzv_isend(struct rdzv_comm *, const void *buf, size_t count,
	    enum rdzv_dtype, int peer, int timeout_ms,
	    struct rdzv_request **reqp);
int	rdzv_irecv(struct rdzv_comm *, void *buf, size_t count,
	    enum rdzv_dtype, int peer, int timeout_ms,
	    struct rdzv_request **reqp);
/*
 * Asynchronous allreduce (the data-parallel gradient buckets): queued
 * behind earlier asynchronous collectives of this communicator, run in
 * the background in the order issued; every rank must issue the same
 * sequence.  A blocking collective issued meanwhile runs after them.
 */
int	rdzv_iallreduce(struct rdzv_comm *, const void *sendbuf, void *recvbuf,
	    size_t count, enum rdzv_dtype, enum rdzv_op, int timeout_ms,
	    struct rdzv_request **reqp);

/* Waits for the request to complete, frees it, and returns its result. */
int	rdzv_wait(struct rdzv_request *req);
/* Waits for n requests (each freed); returns 0 or the first error. */
int	rdzv_waitall(struct rdzv_request **reqs, size_t n);
/*
 * Returns 0 (request still pending, kept) or, once it has completed, 1
 * for success or its negative error; the request is then freed.
 */
int	rdzv_test(struct rdzv_request *req);

/* ---- progress reporting ---- */

/*
 * Tells the agent this rank reached step (e.g. the training iteration),
 * for hang detection and status.  Under rdzv-agent the step goes to the
 * agent on the socket it passed (RDZV_PROGRESS_FD) at most every 100 ms,
 * never blocking; the agent names each rank's last step in its failure
 * summary and, with --progress_timeout, stops a rank that stops
 * reporting.  It is also published in the round's store scope as key
 * "progress/<rank>" = "<step> <unix_ms> <wait_ms>", at most once per
 * second per rank; wait_ms is the time this rank's collectives have
 * spent waiting on their peers, all told (rdzvd tells a straggler from
 * the ranks waiting on it by it).  Calls in between only record the step; without an agent it is a
 * no-op.  Call it once per step: it costs a clock read, and a send every
 * 100 ms.  Returns 0 or a store error (the communicator stays usable).
 */
int	rdzv_report_progress(struct rdzv_comm *, uint64_t step);
/*
 * The same without a communicator, for a program that trains with
 * collectives of its own (MPI, a framework's) under rdzv-agent: step to
 * the agent, and "progress/<RANK>" into the round's store through a
 * connection of its own, opened at the first call (from rdzv-agent's
 * variables; a failed one is tried again after 10 s; wait_ms is 0).
 * Thread-safe; without an agent it does nothing.  Returns 0 or a store
 * error (the next call tries again).
 */
int	rdzv_progress_report(uint64_t step);

/* ---- in-place repair (under rdzv-agent) ---- */

/*
 * With repair on (rdzv_options.repair = 1, or RDZV_REPAIR=1) and under
 * an agent (RDZV_PROGRESS_FD), rdzv_init tells the agent this process can
 * repair ("hello repair=1", common/PROTOCOL.md "Worker <-> agent
 * channel") and a watcher thread listens for the agent's repair rounds.
 * A job repairs only when every worker said so; otherwise nothing changes.
 *
 * - A peer's death no longer ends the program: the call that sees it
 *   waits (at most RDZV_REPAIR_TIMEOUT_MS, default 60000) for the agent's
 *   round and then returns RDZV_EREPAIR.  A round announced while the
 *   group is healthy (a replacement is ready to join) breaks the call in
 *   flight from the watcher (cpu: the sockets are shut down and the
 *   shared-memory waiters woken; nccl: ncclCommAbort, never a blocking
 *   destroy), which returns RDZV_EREPAIR too.  Every later call returns
 *   RDZV_EREPAIR at once until rdzv_comm_repair().  With no round in
 *   time (or the agent's "stop") the call returns its own cause, as
 *   without repair.
 * - The program then drops the step (applies none of its results),
 *   completes its outstanding requests (rdzv_dp_finish does), calls
 *   rdzv_comm_repair() and rdzv_dp_sync() (or broadcasts its own state
 *   from the round's donor), reshards its sampler, and goes on.  Another
 *   RDZV_EREPAIR during any of these means: repair again.
 * - A replacement (started by the agent with RDZV_REPLACEMENT=1 for a
 *   dead local rank) tells the agent "ready" from rdzv_init, waits there
 *   for its round and bootstraps in it; rdzv_comm_round() then says
 *   joined = 1 and the program calls rdzv_dp_sync() (what the survivors
 *   call after rdzv_comm_repair) instead of loading a checkpoint, before
 *   its first step.
 */
enum rdzv_round_kind {
	RDZV_ROUND_FIRST = 0,	/* the round the job started (or restarted) in */
	RDZV_ROUND_SHRINK = 1,	/* survivors go on without the dead ranks */
	RDZV_ROUND_GROW = 2,	/* replacements join; the donor sends them the state */
};

/* Where this communicator stands (rdzv_comm_round). */
struct rdzv_round {
	int	round;		/* the agent's round number (RDZV_ROUND at start) */
	enum rdzv_round_kind kind;
	int	rank;		/* as rdzv_rank(), rdzv_size() */
	int	size;
	int	donor;		/* the rank holding the latest state (0 at start) */
	int	joined;		/* 1: this process joined the group in this round */
	int	repairs;	/* rounds this communicator was rebuilt on */
	int	reserved[8];
};

/* 1 when repair is on for this communicator (option or RDZV_REPAIR, and
 * an agent's channel), else 0. */
int	rdzv_repair_enabled(const struct rdzv_comm *);
/*
 * 1 once this worker's agent asked it to leave (the node leaves the job
 * on purpose: SIGTERM to a repairable job's agent), else 0.  The program
 * checks it after each step: the step in flight is finished, then it
 * exits 0 (rdzv_finalize first) and the others shrink around it with
 * no step lost.  Until then, nothing changes; a call that breaks
 * meanwhile (a peer of this node left first) returns its cause at once.
 */
int	rdzv_leave_requested(const struct rdzv_comm *);
/* Fills *r with the current round; 0 or RDZV_EINVAL. */
int	rdzv_comm_round(const struct rdzv_comm *, struct rdzv_round *r);
/*
 * Rebuilds the communicator in place on the latest round the agent
 * announced, waiting for one up to timeout_ms (negative:
 * RDZV_REPAIR_TIMEOUT_MS): the background thread is stopped (requests
 * still pending fail with RDZV_ECLOSED), the backend is torn down
 * without blocking on dead peers, and it is bootstrapped again in the
 * round's fresh store scope with the round's rank and size; the same
 * struct rdzv_comm stays valid and rdzv_rank()/rdzv_size() change.
 * Every member of the new round must call it (the replacement's
 * rdzv_init is its counterpart).  If a newer round arrives meanwhile it
 * goes on to that one.  Returns 0; RDZV_EINVAL when repair is off;
 * RDZV_ETIMEDOUT when no round came; RDZV_ECLOSED when the agent said
 * "stop" or went away (exit: the job restarts); or the bootstrap's error
 * (the communicator is then broken).
 */
int	rdzv_comm_repair(struct rdzv_comm *, int timeout_ms);

/* ---- the data-parallel step (what torch DDP does) ---- */

struct rdzv_dp;

/* One parameter tensor and its gradient, both count elements of dtype,
 * in the same memory space (host, or device with the nccl backend). */
struct rdzv_dp_param {
	void		*param;
	void		*grad;
	size_t		 count;
	enum rdzv_dtype	 dtype;
};

#define RDZV_DP_BUCKET_DEFAULT	(25u << 20)	/* bytes */

/*
 * Creates the data-parallel helper over n parameters.  Gradients are
 * grouped into buckets of about bucket_bytes (0: RDZV_DP_BUCKET_DEFAULT)
 * in reverse index order (the order a backward pass produces them); the
 * array and the buffers it names must outlive the helper.
 */
int	rdzv_dp_new(struct rdzv_comm *, const struct rdzv_dp_param *params,
	    size_t n, size_t bucket_bytes, struct rdzv_dp **dpp);
void	rdzv_dp_free(struct rdzv_dp *);
/* Copies every parameter from rank 0 to all ranks (call once at start). */
int	rdzv_dp_broadcast_params(struct rdzv_dp *, int timeout_ms);
struct rdzv_ckpt_part;
/*
 * Makes every rank's state the round's donor's (rdzv_comm_round().donor,
 * rank 0 on a first round): every parameter, the n parts (byte buffers
 * of the same lengths on every rank: optimizer state such as momentum,
 * the sampler position, the program's counters; parts may be NULL when
 * n is 0) and *step (may be NULL), which also becomes the step reported
 * to the agent.  Afterwards every rank holds bit-identical parameters.
 * All ranks call it: at start instead of rdzv_dp_broadcast_params, after
 * every rdzv_comm_repair(), and in a replacement after rdzv_init.
 * Returns 0 or the code of the broadcast that failed (RDZV_EREPAIR:
 * repair again, then sync again).
 */
int	rdzv_dp_sync(struct rdzv_dp *, const struct rdzv_ckpt_part *parts,
	    size_t n, uint64_t *step, int timeout_ms);
/*
 * Marks gradient index as final for this step; when it completes a
 * bucket, that bucket's allreduce starts in the background
 * (rdzv_iallreduce) so it overlaps the rest of the backward pass.
 */
int	rdzv_dp_grad_ready(struct rdzv_dp *, size_t index);
/*
 * Starts any bucket not yet started, waits for all, and leaves every
 * gradient averaged over ranks; then the next step may begin.
 */
int	rdzv_dp_finish(struct rdzv_dp *, int timeout_ms);

/* ---- distributed sampler (what torch DistributedSampler does) ---- */

struct rdzv_sampler;

#define RDZV_SAMPLER_SHUFFLE	0x1	/* permute by (seed, epoch) */
#define RDZV_SAMPLER_DROP_LAST	0x2	/* drop the tail instead of padding */

/*
 * Shards n samples over size ranks: every rank gets the same count; the
 * tail is padded by repeating samples from the start (or dropped with
 * RDZV_SAMPLER_DROP_LAST).  Shards are disjoint apart from padding and
 * cover every sample (without DROP_LAST).
 */
int	rdzv_sampler_new(uint64_t n, int rank, int size, uint64_t seed,
	    int flags, struct rdzv_sampler **sp);
void	rdzv_sampler_free(struct rdzv_sampler *);
/* Selects the epoch's permutation (same on every rank). */
int	rdzv_sampler_set_epoch(struct rdzv_sampler *, uint64_t epoch);
/*
 * Shards what is left of the current epoch, from global position start
 * (the samples the whole group has consumed: steps times the global
 * batch), over a new rank and size, e.g. after a repair round; the order
 * stays the epoch's.  The epoch's count and indices below then cover
 * positions start.. only; a later rdzv_sampler_set_epoch() to another
 * epoch starts from position 0 with the new rank and size.  Returns 0
 * or RDZV_EINVAL.
 */
int	rdzv_sampler_reshard(struct rdzv_sampler *, int rank, int size,
	    uint64_t start);
/* Number of samples of this rank per epoch (from the reshard position). */
uint64_t	rdzv_sampler_count(const struct rdzv_sampler *);
/* The i-th sample index (0 <= i < count) of this rank in this epoch. */
uint64_t	rdzv_sampler_index(const struct rdzv_sampler *, uint64_t i);

/* ---- checkpoints ---- */

/* One piece of the state to save or load (model, optimizer, ...). */
struct rdzv_ckpt_part {
	void	*data;
	size_t	 len;
};

/*
 * Rank 0 writes step and the n parts to path atomically (a temporary file
 * in the same directory, fsync, rename, fsync of the directory), with a
 * checksum; then all ranks meet at a barrier, so when it returns the file
 * is complete for every rank.  All ranks must call it.
 */
int	rdzv_ckpt_save(struct rdzv_comm *, const char *path,
	    const struct rdzv_ckpt_part *parts, size_t n, uint64_t step,
	    int timeout_ms);
/*
 * Reads the checkpoint at path into the n parts (lengths must match what
 * was saved) and sets *step.  Returns RDZV_ENOTFOUND when there is no
 * checkpoint (a fresh start), RDZV_EPROTO for a corrupt file or mismatched
 * parts.  comm may be NULL (local read); with a comm, every rank reads
 * the file and they agree on the outcome.
 */
int	rdzv_ckpt_load(struct rdzv_comm *, const char *path,
	    const struct rdzv_ckpt_part *parts, size_t n, uint64_t *step,
	    int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* RDZV_WORKER_H */
