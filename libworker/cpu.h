/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu.h: what the cpu backend's transport (cpu.c), its collectives
 * (cpu_coll.c) and its shared-memory arena (shm.c) share.
 *
 * Every pair of ranks has one TCP connection (a full mesh, made at init
 * through addresses published in the store).  Ranks on one host also
 * share a memory arena (shm.c) that the large collectives use instead of
 * the sockets; the sockets stay open beside it so a peer's death still
 * shows as an EOF.
 */
#ifndef RDZV_CPU_H
#define RDZV_CPU_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "worker.h"

struct shm_arena;

#define DIRECT_RANKS_MAX	8	/* direct exchanges: at most this many */

struct link {
	int	fd;		/* -1 for oneself */
	int	same_host;
};

struct cpu {
	struct rdzv_comm	*comm;
	int			 n;
	int			 rank;
	struct link		*links;		/* n of them */
	uint8_t			*tmp;		/* scratch for collectives */
	size_t			 tmpcap;
	size_t			 chunk;		/* ring chunk, bytes, a multiple of 64 */
	size_t			 direct_max;	/* allreduce: direct exchange up to */
	int			 direct_ranks;	/* ... among at most this many */
	struct pollfd		*pfd;		/* 2n + 4 poll entries */
	uint32_t		*stamp;		/* 2n: xfer bookkeeping */
	uint32_t		 pass;
	struct shm_arena	*shm;		/* all ranks on one host, or NULL */
	int			 use_shm;	/* RDZV_SHM (default 1) */
};

static inline struct cpu *
cpu_of(struct rdzv_comm *c)
{
	return (c->be);
}

/* Moves what it can now: bytes moved (0 if it would block) or < 0 after
 * breaking the communicator. */
ssize_t	cpu_send_some(struct cpu *, int peer, const void *p, size_t len);
ssize_t	cpu_recv_some(struct cpu *, int peer, void *p, size_t len);
/*
 * Waits for any of the n poll entries in cpu->pfd (filled by the caller)
 * until deadline.  Returns 0 when something is ready, or breaks the
 * communicator and returns RDZV_ETIMEDOUT / RDZV_ECONN (what names the
 * operation for the message).
 */
int	cpu_poll(struct cpu *, int n, int64_t deadline, const char *what);
/*
 * The one progress loop every transfer engine and chain runs: each pass
 * begins (cpu_pass_begin), moves what the sockets take now of each
 * transfer (cpu_pass_move, which arms a wait for what is left), and ends
 * (cpu_pass_wait), polling only when nothing moved.  A step that makes
 * progress of its own (a reduction) sets progressed.
 */
struct cpu_pass {
	struct cpu	*cpu;
	int		 np;		/* waits armed in cpu->pfd */
	int		 progressed;
};
void	cpu_pass_begin(struct cpu_pass *, struct cpu *);
/*
 * Moves what the socket takes now of buf[*done, upto) to (send) or from
 * peer, advancing *done; nothing when *done >= upto.  Returns 0, or < 0
 * after breaking the communicator.
 */
int	cpu_pass_move(struct cpu_pass *, int peer, int send, void *buf,
	    size_t *done, size_t upto);
/* Ends a pass: 0, or cpu_poll()'s failure when it had to wait. */
int	cpu_pass_wait(struct cpu_pass *, int64_t deadline, const char *what);
/* Makes cpu->tmp at least len bytes; 0 or RDZV_ENOMEM. */
int	cpu_tmp(struct cpu *, size_t len);

/* One transfer of a set: each one moves len bytes to or from peer. */
struct xop {
	int	 peer;
	int	 send;
	uint8_t	*buf;
	size_t	 len;
	size_t	 done;
};
/*
 * Runs a set of transfers concurrently until all are done (0) or one
 * fails (the communicator is then broken).  Transfers with the same peer
 * and direction run in array order.  Peers must not be oneself.
 */
int	cpu_xfer(struct cpu *, struct xop *, size_t n, int64_t deadline,
	    const char *what);

/* ---- cpu_coll.c: the collectives, as backend_ops entries ---- */
int	cpu_allreduce(struct rdzv_comm *, const void *, void *, size_t,
	    enum rdzv_dtype, enum rdzv_op, int64_t);
int	cpu_broadcast(struct rdzv_comm *, void *, size_t, enum rdzv_dtype,
	    int, int64_t);
int	cpu_reduce(struct rdzv_comm *, const void *, void *, size_t,
	    enum rdzv_dtype, enum rdzv_op, int, int64_t);
int	cpu_allgather(struct rdzv_comm *, const void *, void *, size_t,
	    enum rdzv_dtype, int64_t);
int	cpu_reduce_scatter(struct rdzv_comm *, const void *, void *, size_t,
	    enum rdzv_dtype, enum rdzv_op, int64_t);
int	cpu_gather(struct rdzv_comm *, const void *, void *, size_t,
	    enum rdzv_dtype, int, int64_t);
int	cpu_scatter(struct rdzv_comm *, const void *, void *, size_t,
	    enum rdzv_dtype, int, int64_t);
int	cpu_alltoall(struct rdzv_comm *, const void *, void *, size_t,
	    enum rdzv_dtype, int64_t);
int	cpu_barrier(struct rdzv_comm *, int64_t);

/* ---- shm.c: the same-host arena ---- */

/*
 * Creates (local rank 0) or opens the arena shared by the n ranks of a
 * communicator that all live on one host, named from key; the sockets
 * carry the handshake.  Returns 0, or a code when shared memory cannot be
 * used (the caller then stays on TCP).
 */
int	shm_setup(struct cpu *, const char *key);
void	shm_free(struct shm_arena *);
/* Same-host collectives through the arena. */
int	shm_allreduce(struct cpu *, const void *, void *, size_t,
	    enum rdzv_dtype, enum rdzv_op, int64_t deadline);
int	shm_broadcast(struct cpu *, void *, size_t bytes, int root,
	    int64_t deadline);
int	shm_allgather(struct cpu *, const void *, void *, size_t bytes,
	    int64_t deadline);
int	shm_reduce_scatter(struct cpu *, const void *, void *, size_t,
	    enum rdzv_dtype, enum rdzv_op, int64_t deadline);
int	shm_barrier(struct cpu *, int64_t deadline);
/* Makes every waiter in the arena give up (abort). */
void	shm_abort(struct shm_arena *);

#endif /* RDZV_CPU_H */
