/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu_coll.c: the cpu backend's collective algorithms, over the sockets
 * of cpu.c (and the shared-memory arena of shm.c when every rank is on
 * this host: allreduce, broadcast, allgather, reduce_scatter, barrier).
 *
 *   allreduce	 small: direct exchange (each rank sends its buffer to all
 *		 and reduces the n buffers in rank order: one hop), or
 *		 recursive doubling beyond 8 ranks; large: ring
 *		 reduce-scatter + allgather, pipelined in chunks
 *   reduce_scatter, allgather  the two halves of that ring
 *   broadcast	 small: from the root to all at once; large: a pipelined
 *		 chain from the root
 *   reduce	 small: all to the root; large: a pipelined chain ending at
 *		 the root
 *   gather, scatter, alltoall  every transfer at once (cpu_xfer)
 *   barrier	 dissemination, ceil(log2 n) rounds of one byte
 *
 * Results are the same bits on every rank: each element is reduced along
 * one fixed order and the result copied, never re-reduced elsewhere.
 *
 * The ring: segment j of the buffer is owned by rank j.  At step s
 * (0 <= s < 2n-2) rank r sends segment (r-s-1) mod n to r+1 and receives
 * segment (r-s-2) mod n from r-1; steps below n-1 reduce what arrives
 * into the segment (reduce-scatter: rank r ends owning the reduced
 * segment r), later ones copy it (allgather).  What a rank sends at step
 * s is what it received at step s-1, so a chunk is forwarded as soon as
 * it has been reduced: sending, receiving and reducing overlap.
 *
 * A reduce step receives at most one chunk at a time, into one chunk of
 * scratch, and reduces it before receiving more: the scratch stays in the
 * core's cache, so the kernel's copy out of the socket and the reduction
 * never go through memory, and the reduced chunk, sent next, is still in
 * cache too.  (Receiving a whole segment first, as a 64 MiB allreduce
 * did, wrote and read back 32 MiB of scratch per step.)
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu.h"


static int
mod(int a, int n)
{
	a %= n;
	return (a < 0 ? a + n : a);
}

/* ---- the pipelined ring ---- */

struct ring {
	struct cpu	*cpu;
	int		 n, r, left, right;
	size_t		 es;
	const uint8_t	*sbuf;		/* contributions (reduce steps) */
	uint8_t		*work;		/* segments built and forwarded */
	uint8_t		*last;		/* reduce_scatter: rank's own result */
	uint8_t		*rtmp;		/* one chunk: reduce-step arrivals */
	size_t		*off, *len;	/* bytes, per segment */
	reduce3_fn	 red;
	enum rdzv_dtype	 dt;
	int		 avg;
	int		 s0, s1;	/* steps run: [s0, s1) */
};

static uint8_t *
ring_dst(struct ring *g, int s, int seg)
{
	if (s == g->n - 2 && g->last != NULL)
		return (g->last);
	return (g->work + g->off[seg]);
}

/* Reduces the arrived bytes [from, to) of step s's segment, held in
 * g->rtmp from its start. */
static void
ring_reduce(struct ring *g, int s, int seg, size_t from, size_t to)
{
	uint8_t	*dst = ring_dst(g, s, seg) + from;
	size_t	 ne = (to - from) / g->es;

	g->red(dst, g->sbuf + g->off[seg] + from, g->rtmp, ne);
	if (g->avg && s == g->n - 2)
		reduce_avg_finish(dst, ne, g->dt, g->n);
}

static int
ring_run(struct ring *g, int64_t deadline, const char *what)
{
	struct cpu_pass	 ps;
	const uint8_t	*src;
	size_t		 soff = 0, roff = 0, rred = 0, avail, slen, rlen, in,
			 want;
	int		 ss = g->s0, rs = g->s0, sseg, rseg, rc;

	while (ss < g->s1 || rs < g->s1) {
		cpu_pass_begin(&ps, g->cpu);
		if (ss < g->s1) {
			sseg = mod(g->r - ss - 1, g->n);
			slen = g->len[sseg];
			/* What is ready: all of it at the first step, else
			 * what the previous step has finished. */
			avail = ss == g->s0 || rs > ss - 1 ? slen : rred;
			src = (ss == 0 ? g->sbuf : g->work) + g->off[sseg];
			if ((rc = cpu_pass_move(&ps, g->right, 1, (void *)src,
			    &soff, avail)) != 0)
				return (rc);
			if (soff == slen) {
				ss++;
				soff = 0;
				ps.progressed = 1;
			}
		}
		if (rs < g->s1) {
			rseg = mod(g->r - rs - 2, g->n);
			rlen = g->len[rseg];
			if (rs < g->n - 1) {
				/* Up to one chunk past what is reduced, into
				 * rtmp. */
				in = roff - rred;
				want = rlen - rred < g->cpu->chunk ?
				    rlen - rred : g->cpu->chunk;
				if ((rc = cpu_pass_move(&ps, g->left, 0,
				    g->rtmp, &in, want)) != 0)
					return (rc);
				roff = rred + in;
				/* Whole elements: chunk is a multiple of
				 * every element size. */
				if (in == g->cpu->chunk || roff == rlen) {
					ring_reduce(g, rs, rseg, rred, roff);
					rred = roff;
					ps.progressed = 1;
				}
			} else {
				if ((rc = cpu_pass_move(&ps, g->left, 0,
				    g->work + g->off[rseg], &roff, rlen)) != 0)
					return (rc);
				rred = roff;
			}
			if (rred == rlen) {
				rs++;
				roff = rred = 0;
				ps.progressed = 1;
			}
		}
		if ((rc = cpu_pass_wait(&ps, deadline, what)) != 0)
			return (rc);
	}
	return (0);
}

/* Splits count elements into n segments, the remainder spread first. */
static int
ring_segments(struct ring *g, size_t count, int equal)
{
	size_t	base, rem, o = 0;
	int	j;

	g->off = calloc((size_t)g->n, sizeof *g->off);
	g->len = calloc((size_t)g->n, sizeof *g->len);
	if (g->off == NULL || g->len == NULL) {
		free(g->off);
		free(g->len);
		return (RDZV_ENOMEM);
	}
	base = equal ? count : count / (size_t)g->n;
	rem = equal ? 0 : count % (size_t)g->n;
	for (j = 0; j < g->n; j++) {
		g->off[j] = o;
		g->len[j] = (base + ((size_t)j < rem)) * g->es;
		o += g->len[j];
	}
	return (0);
}

static void
ring_init(struct ring *g, struct cpu *cpu, enum rdzv_dtype dt,
    enum rdzv_op op)
{
	memset(g, 0, sizeof *g);
	g->cpu = cpu;
	g->n = cpu->n;
	g->r = cpu->rank;
	g->left = mod(cpu->rank - 1, cpu->n);
	g->right = mod(cpu->rank + 1, cpu->n);
	g->es = rdzv_dtype_size(dt);
	g->dt = dt;
	g->red = reduce3_get(dt, op);
	g->avg = op == RDZV_AVG;
}

/* ---- direct exchanges ---- */

/*
 * Every rank sends its len bytes at mine to every other and receives rank
 * j's at base + len * j.  For at most DIRECT_RANKS_MAX ranks.
 */
static int
direct_all(struct cpu *cpu, const void *mine, void *base, size_t len,
    int64_t deadline, const char *what)
{
	struct xop	x[2 * DIRECT_RANKS_MAX];
	int		j, nx = 0;

	if (cpu->n > DIRECT_RANKS_MAX)
		return (RDZV_EINVAL);
	for (j = 0; j < cpu->n; j++) {
		if (j == cpu->rank)
			continue;
		x[nx++] = (struct xop){ j, 1, (uint8_t *)mine, len, 0 };
		x[nx++] = (struct xop){ j, 0, (uint8_t *)base + len * (size_t)j,
		    len, 0 };
	}
	return (cpu_xfer(cpu, x, (size_t)nx, deadline, what));
}

/*
 * A star around root: every other rank sends (to_root) its len bytes at
 * mine to root, or receives them from it; root moves rank j's at base +
 * stride * j (stride 0: the same bytes for every rank).
 */
static int
direct_star(struct cpu *cpu, int root, int to_root, const void *mine,
    const void *base, size_t stride, size_t len, int64_t deadline,
    const char *what)
{
	struct xop	*x;
	int		 j, nx = 0, rc;

	if (cpu->rank != root) {
		struct xop	one = { root, to_root, (uint8_t *)mine, len, 0 };

		return (cpu_xfer(cpu, &one, 1, deadline, what));
	}
	if ((x = calloc((size_t)cpu->n, sizeof *x)) == NULL)
		return (RDZV_ENOMEM);
	for (j = 0; j < cpu->n; j++)
		if (j != root)
			x[nx++] = (struct xop){ j, !to_root,
			    (uint8_t *)base + stride * (size_t)j, len, 0 };
	rc = cpu_xfer(cpu, x, (size_t)nx, deadline, what);
	free(x);
	return (rc);
}

/*
 * rbuf = the n contributions of count elements reduced in rank order:
 * rank j's at slots + bytes * j, but rank me's at mine; averaged for
 * RDZV_AVG.
 */
static void
direct_reduce(struct cpu *cpu, void *rbuf, const uint8_t *slots,
    const uint8_t *mine, int me, size_t count, enum rdzv_dtype dt,
    enum rdzv_op op)
{
	reduce3_fn	 red = reduce3_get(dt, op);
	size_t		 bytes = count * rdzv_dtype_size(dt);
	int		 j;

#define SLOT(j) ((j) == me ? mine : slots + bytes * (size_t)(j))
	red(rbuf, SLOT(0), SLOT(1), count);
	for (j = 2; j < cpu->n; j++)
		red(rbuf, rbuf, SLOT(j), count);
#undef SLOT
	if (op == RDZV_AVG)
		reduce_avg_finish(rbuf, count, dt, cpu->n);
}

/* ---- allreduce ---- */

static int
allreduce_direct(struct cpu *cpu, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	size_t		 bytes = count * rdzv_dtype_size(dt);
	const uint8_t	*mine = sbuf;
	int		 rc;

	if ((rc = cpu_tmp(cpu, bytes * (size_t)cpu->n)) != 0)
		return (rc);
	if (sbuf == rbuf) {	/* rbuf is written before mine is read */
		memcpy(cpu->tmp + bytes * (size_t)cpu->rank, sbuf, bytes);
		mine = cpu->tmp + bytes * (size_t)cpu->rank;
	}
	rc = direct_all(cpu, mine, cpu->tmp, bytes, deadline, "allreduce");
	if (rc != 0)
		return (rc);
	direct_reduce(cpu, rbuf, cpu->tmp, mine, cpu->rank, count, dt, op);
	return (0);
}

/*
 * Recursive doubling, for small messages among more ranks than a direct
 * exchange suits: ceil(log2 n) + 2 steps.  With p the largest power of two
 * <= n, rank p+i first hands its buffer to rank i and gets the result
 * back at the end.  Partners combine with the lower rank's value first,
 * so both hold the same bits.
 */
static int
allreduce_rd(struct cpu *cpu, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	size_t		 bytes = count * rdzv_dtype_size(dt);
	reduce3_fn	 red = reduce3_get(dt, op);
	uint8_t		*work = rbuf, *tmp;
	int		 p = 1, me = cpu->rank, k, partner, rc;

	while (p * 2 <= cpu->n)
		p *= 2;
	if (me >= p) {
		struct xop	x[2] = {
			{ me - p, 1, (uint8_t *)sbuf, bytes, 0 },
			{ me - p, 0, rbuf, bytes, 0 },
		};

		return (cpu_xfer(cpu, x, 2, deadline, "allreduce"));
	}
	if ((rc = cpu_tmp(cpu, bytes)) != 0)
		return (rc);
	tmp = cpu->tmp;
	if (sbuf != rbuf)
		memcpy(work, sbuf, bytes);
	if (me + p < cpu->n) {
		struct xop	one = { me + p, 0, tmp, bytes, 0 };

		if ((rc = cpu_xfer(cpu, &one, 1, deadline, "allreduce")) != 0)
			return (rc);
		red(work, work, tmp, count);	/* me < me + p */
	}
	for (k = 1; k < p; k *= 2) {
		struct xop	x[2];

		partner = me ^ k;
		x[0] = (struct xop){ partner, 1, work, bytes, 0 };
		x[1] = (struct xop){ partner, 0, tmp, bytes, 0 };
		if ((rc = cpu_xfer(cpu, x, 2, deadline, "allreduce")) != 0)
			return (rc);
		if (me < partner)
			red(work, work, tmp, count);
		else {
			red(tmp, tmp, work, count);
			memcpy(work, tmp, bytes);
		}
	}
	if (op == RDZV_AVG)
		reduce_avg_finish(work, count, dt, cpu->n);
	if (me + p < cpu->n) {
		struct xop	one = { me + p, 1, work, bytes, 0 };

		return (cpu_xfer(cpu, &one, 1, deadline, "allreduce"));
	}
	return (0);
}

static int
allreduce_ring(struct cpu *cpu, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	struct ring	g;
	int		rc;

	ring_init(&g, cpu, dt, op);
	if ((rc = ring_segments(&g, count, 0)) != 0)
		return (rc);
	if ((rc = cpu_tmp(cpu, cpu->chunk)) != 0)
		goto out;
	g.sbuf = sbuf;
	g.work = rbuf;
	g.rtmp = cpu->tmp;
	g.s0 = 0;
	g.s1 = 2 * cpu->n - 2;
	rc = ring_run(&g, deadline, "allreduce");
out:
	free(g.off);
	free(g.len);
	return (rc);
}

int
cpu_allreduce(struct rdzv_comm *c, const void *sbuf, void *rbuf,
    size_t count, enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	struct cpu	*cpu = cpu_of(c);
	size_t		 bytes = count * rdzv_dtype_size(dt);

	if (cpu->n == 1 || bytes == 0) {
		if (sbuf != rbuf && bytes > 0)
			memmove(rbuf, sbuf, bytes);
		return (0);
	}
	if (cpu->shm != NULL)
		return (shm_allreduce(cpu, sbuf, rbuf, count, dt, op,
		    deadline));
	if (bytes <= cpu->direct_max && cpu->n <= cpu->direct_ranks)
		return (allreduce_direct(cpu, sbuf, rbuf, count, dt, op,
		    deadline));
	if (bytes <= cpu->direct_max)
		return (allreduce_rd(cpu, sbuf, rbuf, count, dt, op,
		    deadline));
	return (allreduce_ring(cpu, sbuf, rbuf, count, dt, op, deadline));
}

/* ---- reduce_scatter and allgather ---- */

int
cpu_reduce_scatter(struct rdzv_comm *c, const void *sbuf, void *rbuf,
    size_t count, enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	struct cpu	*cpu = cpu_of(c);
	struct ring	 g;
	size_t		 bytes = count * rdzv_dtype_size(dt);
	int		 rc;

	if (cpu->n == 1 || bytes == 0) {
		if (bytes > 0 && sbuf != rbuf)
			memmove(rbuf, sbuf, bytes);
		return (0);
	}
	if (cpu->shm != NULL)
		return (shm_reduce_scatter(cpu, sbuf, rbuf, count, dt, op,
		    deadline));
	ring_init(&g, cpu, dt, op);
	if ((rc = ring_segments(&g, count, 1)) != 0)
		return (rc);
	/* Segments in flight are built in scratch; the rank's own result
	 * lands in rbuf. */
	if ((rc = cpu_tmp(cpu, bytes * (size_t)cpu->n + cpu->chunk)) != 0)
		goto out;
	g.sbuf = sbuf;
	g.work = cpu->tmp;
	g.rtmp = cpu->tmp + bytes * (size_t)cpu->n;
	g.last = rbuf;
	g.s0 = 0;
	g.s1 = cpu->n - 1;
	rc = ring_run(&g, deadline, "reduce_scatter");
out:
	free(g.off);
	free(g.len);
	return (rc);
}

int
cpu_allgather(struct rdzv_comm *c, const void *sbuf, void *rbuf,
    size_t count, enum rdzv_dtype dt, int64_t deadline)
{
	struct cpu	*cpu = cpu_of(c);
	struct ring	 g;
	size_t		 bytes = count * rdzv_dtype_size(dt);
	uint8_t		*own = (uint8_t *)rbuf + bytes * (size_t)cpu->rank;
	int		 rc;

	if (cpu->n > 1 && bytes > 0 && cpu->shm != NULL)
		return (shm_allgather(cpu, sbuf, rbuf, bytes, deadline));
	if (bytes > 0 && own != sbuf)
		memmove(own, sbuf, bytes);
	if (cpu->n == 1 || bytes == 0)
		return (0);
	if (bytes <= cpu->direct_max && cpu->n <= DIRECT_RANKS_MAX)
		return (direct_all(cpu, own, rbuf, bytes, deadline,
		    "allgather"));
	ring_init(&g, cpu, dt, RDZV_SUM);
	if ((rc = ring_segments(&g, count, 1)) != 0)
		return (rc);
	g.sbuf = rbuf;
	g.work = rbuf;
	g.s0 = cpu->n - 1;
	g.s1 = 2 * cpu->n - 2;
	rc = ring_run(&g, deadline, "allgather");
	free(g.off);
	free(g.len);
	return (rc);
}

/* ---- broadcast and reduce: chains ---- */

int
cpu_broadcast(struct rdzv_comm *c, void *buf, size_t count,
    enum rdzv_dtype dt, int root, int64_t deadline)
{
	struct cpu	*cpu = cpu_of(c);
	struct cpu_pass	 ps;
	size_t		 bytes = count * rdzv_dtype_size(dt), got, sent;
	int		 pos, prev, next, rc;

	if (cpu->n == 1 || bytes == 0)
		return (0);
	if (cpu->shm != NULL)
		return (shm_broadcast(cpu, buf, bytes, root, deadline));
	if (bytes <= cpu->direct_max)
		return (direct_star(cpu, root, 0, buf, buf, 0, bytes, deadline,
		    "broadcast"));
	/* A chain root -> root+1 -> ...: each rank forwards what it has. */
	pos = mod(cpu->rank - root, cpu->n);
	prev = mod(cpu->rank - 1, cpu->n);
	next = mod(cpu->rank + 1, cpu->n);
	got = pos == 0 ? bytes : 0;
	sent = pos == cpu->n - 1 ? bytes : 0;
	while (got < bytes || sent < bytes) {
		cpu_pass_begin(&ps, cpu);
		if ((rc = cpu_pass_move(&ps, prev, 0, buf, &got, bytes)) != 0 ||
		    (rc = cpu_pass_move(&ps, next, 1, buf, &sent, got)) != 0 ||
		    (rc = cpu_pass_wait(&ps, deadline, "broadcast")) != 0)
			return (rc);
	}
	return (0);
}

static int
reduce_direct(struct cpu *cpu, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int root, int64_t deadline)
{
	size_t		 bytes = count * rdzv_dtype_size(dt);
	const uint8_t	*mine = sbuf;
	int		 rc;

	if (cpu->rank == root &&
	    (rc = cpu_tmp(cpu, bytes * (size_t)cpu->n)) != 0)
		return (rc);
	rc = direct_star(cpu, root, 1, sbuf, cpu->tmp, bytes, bytes, deadline,
	    "reduce");
	if (rc != 0 || cpu->rank != root)
		return (rc);
	if (sbuf == rbuf) {
		memcpy(cpu->tmp + bytes * (size_t)root, sbuf, bytes);
		mine = cpu->tmp + bytes * (size_t)root;
	}
	direct_reduce(cpu, rbuf, cpu->tmp, mine, root, count, dt, op);
	return (0);
}

int
cpu_reduce(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int root, int64_t deadline)
{
	struct cpu	*cpu = cpu_of(c);
	size_t		 es = rdzv_dtype_size(dt), bytes = count * es;
	size_t		 got, red_to, sent, to;
	reduce3_fn	 red = reduce3_get(dt, op);
	const uint8_t	*in = sbuf;
	uint8_t		*acc, *tmp;
	struct cpu_pass	 ps;
	int		 pos, prev, next, rc;

	if (cpu->n == 1 || bytes == 0) {
		if (bytes > 0 && sbuf != rbuf)
			memmove(rbuf, sbuf, bytes);
		return (0);
	}
	if (bytes <= cpu->direct_max && cpu->n <= DIRECT_RANKS_MAX)
		return (reduce_direct(cpu, sbuf, rbuf, count, dt, op, root,
		    deadline));
	/*
	 * A chain root+1 -> root+2 -> ... -> root: each rank adds its
	 * contribution to what arrives and forwards it; the root keeps it.
	 */
	pos = mod(cpu->rank - root - 1, cpu->n);
	prev = mod(cpu->rank - 1, cpu->n);
	next = mod(cpu->rank + 1, cpu->n);
	if ((rc = cpu_tmp(cpu, 2 * bytes)) != 0)
		return (rc);
	tmp = cpu->tmp;
	acc = pos == cpu->n - 1 ? rbuf : cpu->tmp + bytes;
	if (pos == 0) {		/* the chain's head sends its own */
		struct xop	one = { next, 1, (uint8_t *)sbuf, bytes, 0 };

		return (cpu_xfer(cpu, &one, 1, deadline, "reduce"));
	}
	if (in == acc) {	/* root in place: keep the input apart */
		in = cpu->tmp + bytes;
		memcpy(cpu->tmp + bytes, sbuf, bytes);
	}
	got = red_to = 0;
	sent = pos == cpu->n - 1 ? bytes : 0;
	while (red_to < bytes || sent < bytes) {
		cpu_pass_begin(&ps, cpu);
		if ((rc = cpu_pass_move(&ps, prev, 0, tmp, &got, bytes)) != 0)
			return (rc);
		if (got - red_to >= cpu->chunk || got == bytes) {
			to = got == bytes ? bytes : got - got % es;
			if (to > red_to) {
				red(acc + red_to, in + red_to, tmp + red_to,
				    (to - red_to) / es);
				if (op == RDZV_AVG && pos == cpu->n - 1)
					reduce_avg_finish(acc + red_to,
					    (to - red_to) / es, dt, cpu->n);
				red_to = to;
				ps.progressed = 1;
			}
		}
		if ((rc = cpu_pass_move(&ps, next, 1, acc, &sent, red_to)) != 0 ||
		    (rc = cpu_pass_wait(&ps, deadline, "reduce")) != 0)
			return (rc);
	}
	return (0);
}

/* ---- gather, scatter, alltoall: everything at once ---- */

int
cpu_gather(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int root, int64_t deadline)
{
	struct cpu	*cpu = cpu_of(c);
	size_t		 bytes = count * rdzv_dtype_size(dt);

	if (cpu->rank == root && bytes > 0 &&
	    (uint8_t *)rbuf + bytes * (size_t)root != sbuf)
		memmove((uint8_t *)rbuf + bytes * (size_t)root, sbuf, bytes);
	if (cpu->n == 1 || bytes == 0)
		return (0);
	return (direct_star(cpu, root, 1, sbuf, rbuf, bytes, bytes, deadline,
	    "gather"));
}

int
cpu_scatter(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int root, int64_t deadline)
{
	struct cpu	*cpu = cpu_of(c);
	size_t		 bytes = count * rdzv_dtype_size(dt);

	if (cpu->rank == root && bytes > 0 &&
	    (const uint8_t *)sbuf + bytes * (size_t)root != rbuf)
		memmove(rbuf, (const uint8_t *)sbuf + bytes * (size_t)root,
		    bytes);
	if (cpu->n == 1 || bytes == 0)
		return (0);
	return (direct_star(cpu, root, 0, rbuf, sbuf, bytes, bytes, deadline,
	    "scatter"));
}

int
cpu_alltoall(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int64_t deadline)
{
	struct cpu	*cpu = cpu_of(c);
	struct xop	*x;
	size_t		 bytes = count * rdzv_dtype_size(dt);
	int		 j, k, nx = 0, rc;

	if (bytes > 0)
		memcpy((uint8_t *)rbuf + bytes * (size_t)cpu->rank,
		    (const uint8_t *)sbuf + bytes * (size_t)cpu->rank, bytes);
	if (cpu->n == 1 || bytes == 0)
		return (0);
	if ((x = calloc(2 * (size_t)cpu->n, sizeof *x)) == NULL)
		return (RDZV_ENOMEM);
	/* Staggered (rank+k) so not every rank feeds rank 0 first. */
	for (k = 1; k < cpu->n; k++) {
		j = mod(cpu->rank + k, cpu->n);
		x[nx++] = (struct xop){ j, 1,
		    (uint8_t *)sbuf + bytes * (size_t)j, bytes, 0 };
		j = mod(cpu->rank - k, cpu->n);
		x[nx++] = (struct xop){ j, 0,
		    (uint8_t *)rbuf + bytes * (size_t)j, bytes, 0 };
	}
	rc = cpu_xfer(cpu, x, (size_t)nx, deadline, "alltoall");
	free(x);
	return (rc);
}

/* ---- barrier ---- */

int
cpu_barrier(struct rdzv_comm *c, int64_t deadline)
{
	struct cpu	*cpu = cpu_of(c);
	uint8_t		 out = 'b', in;
	int		 k, rc;

	if (cpu->shm != NULL)
		return (shm_barrier(cpu, deadline));
	for (k = 1; k < cpu->n; k *= 2) {
		struct xop	x[2] = {
			{ mod(cpu->rank + k, cpu->n), 1, &out, 1, 0 },
			{ mod(cpu->rank - k, cpu->n), 0, &in, 1, 0 },
		};

		if ((rc = cpu_xfer(cpu, x, 2, deadline, "barrier")) != 0)
			return (rc);
	}
	return (0);
}
