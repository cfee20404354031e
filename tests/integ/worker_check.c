/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker_check.c: a librdzvworker program that tests/integ/worker_*.py
 * start N times as real processes (RANK, WORLD_SIZE and RDZV_* or
 * MASTER_ADDR/PORT in the environment).  Each mode checks results
 * against what every rank can compute on its own, prints one line per
 * failure and "ok MODE checks=N" at the end, and exits 0 only when all
 * passed.
 *
 *   coll [quick]  every collective x op x dtype x size (uneven ones too)
 *   p2p           send/recv ordering, isend/irecv both ways, self sends,
 *                 a mismatched length
 *   async         iallreduce queued behind each other and a blocking one
 *   loop MS       allreduces until broken or MS elapsed: a test kills a
 *                 rank; the survivors print the error and the time it took
 *                 to see it ("broken code=N after_ms=T") and exit 3
 *   init          init + finalize only; prints rank/size/local rank
 *   timeouts      rank 1 receives what rank 0 never sends: ETIMEDOUT
 *                 within its 300 ms, then ECLOSED; rank 0 then sees the
 *                 communicator broken by rank 1 (never a hang)
 */
#include <err.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdzv_worker.h"

static struct rdzv_comm	*comm;
static int		 rank, size, failures, checks;
static int		 expect_fini;	/* what finalize should return */

static const char *dt_names[] = { "f32", "f64", "f16", "bf16", "i32", "i64",
    "u8" };
static const char *op_names[] = { "sum", "prod", "min", "max", "avg" };

/* ---- host-side half precision, independent of the library's ---- */

static float
h2f(uint16_t h)
{
	int	e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float	v;

	if (e == 0)
		v = ldexpf((float)m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexpf((float)(m | 0x400), e - 25);
	return ((h & 0x8000) ? -v : v);
}

static uint16_t
f2h_exact(float f)
{
	/* Only for the small integers the tests use: exact in half. */
	uint16_t	s = f < 0 ? 0x8000 : 0;
	int		e;
	float		m;

	if (f < 0)
		f = -f;
	if (f == 0)
		return (s);
	m = frexpf(f, &e);	/* f = m * 2^e, 0.5 <= m < 1 */
	return ((uint16_t)(s | ((e + 14) << 10) |
	    ((uint16_t)(m * 2048.0f) & 0x3ff)));
}

static float
b2f(uint16_t b)
{
	uint32_t	u = (uint32_t)b << 16;
	float		f;

	memcpy(&f, &u, sizeof f);
	return (f);
}

static uint16_t
f2b_exact(float f)
{
	uint32_t	u;

	memcpy(&u, &f, sizeof u);
	return ((uint16_t)(u >> 16));
}

/* ---- values ---- */

/* Rank r's element i for op: small integers, so sums and products are
 * exact in every dtype (bf16 keeps 8 bits). */
static double
val(int r, size_t i, enum rdzv_op op, int salt)
{
	if (op == RDZV_PROD)
		return ((double)(1 + (int)((r + i + (size_t)salt) % 2)));
	return ((double)((r * 7 + (int)(i % 1000) * 13 + salt) % 8));
}

static void
put(void *buf, enum rdzv_dtype dt, size_t i, double v)
{
	switch (dt) {
	case RDZV_F32:	((float *)buf)[i] = (float)v; break;
	case RDZV_F64:	((double *)buf)[i] = v; break;
	case RDZV_F16:	((uint16_t *)buf)[i] = f2h_exact((float)v); break;
	case RDZV_BF16:	((uint16_t *)buf)[i] = f2b_exact((float)v); break;
	case RDZV_I32:	((int32_t *)buf)[i] = (int32_t)v; break;
	case RDZV_I64:	((int64_t *)buf)[i] = (int64_t)v; break;
	case RDZV_U8:	((uint8_t *)buf)[i] = (uint8_t)v; break;
	}
}

static double
get(const void *buf, enum rdzv_dtype dt, size_t i)
{
	switch (dt) {
	case RDZV_F32:	return (((const float *)buf)[i]);
	case RDZV_F64:	return (((const double *)buf)[i]);
	case RDZV_F16:	return (h2f(((const uint16_t *)buf)[i]));
	case RDZV_BF16:	return (b2f(((const uint16_t *)buf)[i]));
	case RDZV_I32:	return (((const int32_t *)buf)[i]);
	case RDZV_I64:	return ((double)((const int64_t *)buf)[i]);
	case RDZV_U8:	return (((const uint8_t *)buf)[i]);
	}
	return (NAN);
}

/* The expected reduction over ranks [0, n) of element i. */
static double
expect(enum rdzv_dtype dt, enum rdzv_op op, size_t i, int n, int salt)
{
	double	acc = val(0, i, op, salt), v;
	int	r;

	for (r = 1; r < n; r++) {
		v = val(r, i, op, salt);
		switch (op) {
		case RDZV_SUM:
		case RDZV_AVG:	acc += v; break;
		case RDZV_PROD:	acc *= v; break;
		case RDZV_MIN:	acc = v < acc ? v : acc; break;
		case RDZV_MAX:	acc = v > acc ? v : acc; break;
		}
	}
	if (op == RDZV_AVG) {
		if (dt == RDZV_I32 || dt == RDZV_I64 || dt == RDZV_U8)
			acc = (double)((int64_t)acc / n);
		else
			acc /= n;
	}
	return (acc);
}

static int
close_enough(enum rdzv_dtype dt, double got, double want)
{
	double	tol;

	switch (dt) {
	case RDZV_F16:	tol = 1e-3; break;
	case RDZV_BF16:	tol = 8e-3; break;
	case RDZV_F32:	tol = 1e-6; break;
	default:	tol = 1e-12; break;
	}
	return (fabs(got - want) <= tol * (fabs(want) > 1 ? fabs(want) : 1));
}

static void
fail(const char *what, enum rdzv_dtype dt, enum rdzv_op op, size_t count,
    size_t i, double got, double want)
{
	if (failures++ < 20)
		printf("FAIL rank %d: %s %s %s count=%zu [%zu]: got %g want "
		    "%g\n", rank, what, dt_names[dt], op_names[op], count, i,
		    got, want);
}

/*
 * Checks a gathered buffer r of size blocks: block j (count elements)
 * holds rank j's val(j, i, RDZV_SUM, 4).  Reports the first that does not.
 */
static void
check_blocks(const char *what, enum rdzv_dtype dt, const void *r,
    size_t count)
{
	size_t	i, k;
	int	j;

	for (j = 0; j < size; j++)
		for (i = 0; i < count; i++) {
			k = (size_t)j * count + i;
			if (get(r, dt, k) != val(j, i, RDZV_SUM, 4)) {
				fail(what, dt, RDZV_SUM, count, i, get(r, dt, k),
				    val(j, i, RDZV_SUM, 4));
				return;
			}
		}
}

static void
call_ok(const char *what, int rc)
{
	checks++;
	if (rc != 0) {
		printf("FAIL rank %d: %s returned %d (%s): %s\n", rank, what,
		    rc, rdzv_strerror(rc), rdzv_comm_errmsg(comm));
		exit(1);
	}
}

/* ---- collectives ---- */

static void *
xalloc(size_t n)
{
	void	*p = malloc(n > 0 ? n : 1);

	if (p == NULL)
		err(1, "malloc");
	memset(p, 0xa5, n);	/* garbage the library must overwrite */
	return (p);
}

/*
 * Checks r's count elements against the reduction over every rank of
 * elements first..first + count - 1 of val(), salt salt; says the first
 * that differs, as what.
 */
static void
check_reduced(const char *what, enum rdzv_dtype dt, enum rdzv_op op,
    size_t count, const void *r, size_t first, int salt)
{
	size_t	i;

	for (i = 0; i < count; i++)
		if (!close_enough(dt, get(r, dt, i), expect(dt, op, first + i,
		    size, salt))) {
			fail(what, dt, op, count, i, get(r, dt, i),
			    expect(dt, op, first + i, size, salt));
			break;
		}
}

static void
check_allreduce(enum rdzv_dtype dt, enum rdzv_op op, size_t count, int inplace)
{
	size_t	 es = rdzv_dtype_size(dt), i;
	void	*s = xalloc(count * es), *r;
	int	 salt = (int)count % 5;

	for (i = 0; i < count; i++)
		put(s, dt, i, val(rank, i, op, salt));
	r = inplace ? s : xalloc(count * es);
	call_ok("allreduce", rdzv_allreduce(comm, s, r, count, dt, op, -1));
	check_reduced(inplace ? "allreduce(in place)" : "allreduce", dt, op,
	    count, r, 0, salt);
	if (!inplace)
		free(r);
	free(s);
}

static void
check_reduce(enum rdzv_dtype dt, enum rdzv_op op, size_t count)
{
	size_t	 es = rdzv_dtype_size(dt), i;
	int	 root = (int)(count % (size_t)size), salt = 3;
	void	*s = xalloc(count * es), *r = xalloc(count * es);

	for (i = 0; i < count; i++)
		put(s, dt, i, val(rank, i, op, salt));
	call_ok("reduce", rdzv_reduce(comm, s, rank == root ? r : NULL, count,
	    dt, op, root, -1));
	if (rank == root)
		check_reduced("reduce", dt, op, count, r, 0, salt);
	free(s);
	free(r);
}

static void
check_reduce_scatter(enum rdzv_dtype dt, enum rdzv_op op, size_t count)
{
	size_t	 es = rdzv_dtype_size(dt), i, all = count * (size_t)size;
	void	*s = xalloc(all * es), *r = xalloc(count * es);
	int	 salt = 1;

	for (i = 0; i < all; i++)
		put(s, dt, i, val(rank, i, op, salt));
	call_ok("reduce_scatter", rdzv_reduce_scatter(comm, s, r, count, dt,
	    op, -1));
	check_reduced("reduce_scatter", dt, op, count, r,
	    (size_t)rank * count, salt);
	free(s);
	free(r);
}

static void
check_moves(enum rdzv_dtype dt, size_t count)
{
	size_t	 es = rdzv_dtype_size(dt), i, all = count * (size_t)size;
	void	*s = xalloc(all * es), *r = xalloc(all * es);
	int	 root = (int)((count + 1) % (size_t)size), j;
	double	 want;

	/* broadcast */
	for (i = 0; i < count; i++)
		put(r, dt, i, rank == root ? val(root, i, RDZV_SUM, 2) : 0);
	call_ok("broadcast", rdzv_broadcast(comm, r, count, dt, root, -1));
	for (i = 0; i < count; i++)
		if (get(r, dt, i) != val(root, i, RDZV_SUM, 2)) {
			fail("broadcast", dt, RDZV_SUM, count, i, get(r, dt, i),
			    val(root, i, RDZV_SUM, 2));
			break;
		}

	/* allgather: block j of the result is rank j's */
	for (i = 0; i < count; i++)
		put(s, dt, i, val(rank, i, RDZV_SUM, 4));
	call_ok("allgather", rdzv_allgather(comm, s, r, count, dt, -1));
	check_blocks("allgather", dt, r, count);

	/* gather to root */
	memset(r, 0, all * es);
	call_ok("gather", rdzv_gather(comm, s, rank == root ? r : NULL, count,
	    dt, root, -1));
	if (rank == root)
		check_blocks("gather", dt, r, count);

	/* scatter from root: block j goes to rank j */
	for (i = 0; i < all; i++)
		put(s, dt, i, rank == root ? val((int)(i / (count ? count : 1)),
		    i, RDZV_SUM, 5) : 0);
	call_ok("scatter", rdzv_scatter(comm, rank == root ? s : NULL, r,
	    count, dt, root, -1));
	for (i = 0; i < count; i++) {
		want = val(rank, (size_t)rank * count + i, RDZV_SUM, 5);
		if (get(r, dt, i) != want) {
			fail("scatter", dt, RDZV_SUM, count, i, get(r, dt, i),
			    want);
			break;
		}
	}

	/* alltoall: block j of rank i's input lands in block i of rank j */
	for (j = 0; j < size; j++)
		for (i = 0; i < count; i++)
			put(s, dt, (size_t)j * count + i,
			    (double)((rank * 3 + j * 5 + (int)i) % 8));
	call_ok("alltoall", rdzv_alltoall(comm, s, r, count, dt, -1));
	for (j = 0; j < size; j++)
		for (i = 0; i < count; i++) {
			want = (double)((j * 3 + rank * 5 + (int)i) % 8);
			if (get(r, dt, (size_t)j * count + i) != want) {
				fail("alltoall", dt, RDZV_SUM, count, i,
				    get(r, dt, (size_t)j * count + i), want);
				j = size;
				break;
			}
		}
	free(s);
	free(r);
}

static void
mode_coll(int quick)
{
	static const size_t	small[] = { 0, 1, 2, 3, 7, 31, 100, 1023, 4099 };
	static const size_t	big[] = { 65537, 300007, 1 << 20 };
	size_t			i;
	int			dt, op;

	for (dt = 0; dt < RDZV_DTYPE_COUNT; dt++)
		for (op = 0; op < RDZV_OP_COUNT; op++)
			for (i = 0; i < sizeof small / sizeof small[0]; i++) {
				check_allreduce(dt, op, small[i], 0);
				check_allreduce(dt, op, small[i], 1);
				check_reduce(dt, op, small[i]);
				check_reduce_scatter(dt, op, small[i]);
			}
	for (dt = 0; dt < RDZV_DTYPE_COUNT; dt++)
		for (i = 0; i < sizeof small / sizeof small[0]; i++)
			check_moves(dt, small[i]);
	/* Large messages take the pipelined ring and chains. */
	for (i = 0; i < sizeof big / sizeof big[0] && !(quick && i > 0); i++) {
		check_allreduce(RDZV_F32, RDZV_SUM, big[i], 0);
		check_allreduce(RDZV_F32, RDZV_AVG, big[i], 1);
		check_allreduce(RDZV_BF16, RDZV_MAX, big[i], 1);
		check_allreduce(RDZV_I64, RDZV_PROD, big[i], 0);
		check_reduce(RDZV_F64, RDZV_SUM, big[i]);
		check_reduce(RDZV_F16, RDZV_MIN, big[i]);
		check_reduce_scatter(RDZV_F32, RDZV_SUM, big[i] / 4 + 1);
		check_moves(RDZV_U8, big[i] / 2 + 3);
	}
	for (i = 0; i < 10; i++)
		call_ok("barrier", rdzv_barrier(comm, -1));
}

/* ---- point to point ---- */

static void
mode_p2p(void)
{
	struct rdzv_request	*rq[64];
	int32_t			 out[64], in[64];
	size_t			 big = 3 << 20, i;
	uint8_t			*bs, *br;
	int			 peer, k, n;

	/* Ring neighbours exchange 16 messages each way, posted before any
	 * wait: they must match in posting order. */
	if (size > 1) {
		int	right = (rank + 1) % size, left = (rank + size - 1) % size;

		n = 0;
		for (k = 0; k < 16; k++) {
			out[k] = rank * 1000 + k;
			call_ok("isend", rdzv_isend(comm, &out[k], 1, RDZV_I32,
			    right, -1, &rq[n++]));
			call_ok("irecv", rdzv_irecv(comm, &in[k], 1, RDZV_I32,
			    left, -1, &rq[n++]));
		}
		call_ok("waitall", rdzv_waitall(rq, (size_t)n));
		for (k = 0; k < 16; k++)
			if (in[k] != left * 1000 + k)
				fail("p2p order", RDZV_I32, RDZV_SUM, 16,
				    (size_t)k, in[k], left * 1000 + k);
	}

	/* Big messages both ways at once between pairs: would deadlock if
	 * the sends ran one after the other. */
	bs = xalloc(big);
	br = xalloc(big);
	for (i = 0; i < big; i++)
		bs[i] = (uint8_t)(i * 7 + (size_t)rank);
	peer = rank ^ 1;
	if (peer < size) {
		call_ok("isend big", rdzv_isend(comm, bs, big, RDZV_U8, peer, -1,
		    &rq[0]));
		call_ok("irecv big", rdzv_irecv(comm, br, big, RDZV_U8, peer, -1,
		    &rq[1]));
		call_ok("wait big", rdzv_waitall(rq, 2));
		for (i = 0; i < big; i++)
			if (br[i] != (uint8_t)(i * 7 + (size_t)peer)) {
				fail("p2p big", RDZV_U8, RDZV_SUM, big, i, br[i],
				    (uint8_t)(i * 7 + (size_t)peer));
				break;
			}
	}

	/* Blocking send/recv between rank 0 and every other rank, in turn. */
	for (k = 1; k < size; k++) {
		if (rank == 0) {
			int64_t	v = 100 + k, back;

			call_ok("send", rdzv_send(comm, &v, 1, RDZV_I64, k, -1));
			call_ok("recv", rdzv_recv(comm, &back, 1, RDZV_I64, k,
			    -1));
			if (back != 2 * v)
				fail("send/recv", RDZV_I64, RDZV_SUM, 1, 0,
				    (double)back, (double)(2 * v));
		} else if (rank == k) {
			int64_t	v;

			call_ok("recv", rdzv_recv(comm, &v, 1, RDZV_I64, 0, -1));
			v *= 2;
			call_ok("send", rdzv_send(comm, &v, 1, RDZV_I64, 0, -1));
		}
	}

	/* To oneself: a send matches a later receive. */
	out[0] = 4242;
	call_ok("isend self", rdzv_isend(comm, out, 1, RDZV_I32, rank, -1,
	    &rq[0]));
	call_ok("irecv self", rdzv_irecv(comm, in, 1, RDZV_I32, rank, -1,
	    &rq[1]));
	call_ok("wait self", rdzv_waitall(rq, 2));
	if (in[0] != 4242)
		fail("self", RDZV_I32, RDZV_SUM, 1, 0, in[0], 4242);

	/* Collectives still work after p2p traffic. */
	check_allreduce(RDZV_F32, RDZV_SUM, 1000, 0);
	call_ok("barrier", rdzv_barrier(comm, -1));

	/* Lengths that disagree are an error, not a misread. */
	if (size > 1 && rank < 2) {
		int	rc;

		if (rank == 0)
			rc = rdzv_send(comm, out, 2, RDZV_I32, 1, 5000);
		else
			rc = rdzv_recv(comm, in, 3, RDZV_I32, 0, 5000);
		checks++;
		if (rank == 1 && rc != RDZV_EPROTO) {
			printf("FAIL rank 1: mismatched recv returned %d\n", rc);
			failures++;
		}
		/* The receiver's stream is out of step: it is broken. */
		if (rank == 1)
			expect_fini = RDZV_EPROTO;
	}
	free(bs);
	free(br);
}

/* ---- asynchronous allreduce ---- */

static void
mode_async(void)
{
	struct rdzv_request	*rq[8];
	float			*b[8], one[4];
	size_t			 n = 100003, i;
	int			 k, rc, spins = 0;

	for (k = 0; k < 8; k++) {
		b[k] = xalloc(n * sizeof(float));
		for (i = 0; i < n; i++)
			b[k][i] = (float)(rank + k);
		call_ok("iallreduce", rdzv_iallreduce(comm, b[k], b[k], n,
		    RDZV_F32, RDZV_SUM, -1, &rq[k]));
	}
	/* A blocking collective runs after the queued ones. */
	for (i = 0; i < 4; i++)
		one[i] = 1;
	call_ok("allreduce", rdzv_allreduce(comm, one, one, 4, RDZV_F32,
	    RDZV_SUM, -1));
	if (one[0] != (float)size)
		fail("allreduce after async", RDZV_F32, RDZV_SUM, 4, 0, one[0],
		    size);
	/* test() polls one, wait() the rest */
	while ((rc = rdzv_test(rq[0])) == 0)
		spins++;
	if (rc != 1)
		call_ok("test", rc);
	call_ok("waitall", rdzv_waitall(rq + 1, 7));
	for (k = 0; k < 8; k++) {
		double	want = (double)size * k + (double)size * (size - 1) / 2;

		for (i = 0; i < n; i++)
			if (b[k][i] != (float)want) {
				fail("iallreduce", RDZV_F32, RDZV_SUM, n, i,
				    b[k][i], want);
				break;
			}
		free(b[k]);
	}
	checks++;
}

/* ---- failure ---- */

static int64_t
mono_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static int
mode_loop(int ms, size_t count)
{
	float	*b = xalloc(count * sizeof(float));
	int64_t	 start = mono_ms(), last = start;
	long	 iters = 0;
	int	 rc;

	memset(b, 0, count * sizeof(float));
	/* Tell the test we are in the loop (it kills a rank after this). */
	printf("looping rank=%d\n", rank);
	fflush(stdout);
	while (mono_ms() - start < ms) {
		last = mono_ms();
		rc = rdzv_allreduce(comm, b, b, count, RDZV_F32, RDZV_SUM, -1);
		if (rc != 0) {
			printf("broken code=%d after_ms=%lld iters=%ld msg=%s\n",
			    rc, (long long)(mono_ms() - last), iters,
			    rdzv_comm_errmsg(comm));
			/* Every later call fails at once. */
			rc = rdzv_barrier(comm, -1);
			printf("after code=%d\n", rc);
			fflush(stdout);
			free(b);
			return (3);
		}
		iters++;
	}
	free(b);
	printf("ok loop iters=%ld\n", iters);
	return (0);
}

/*
 * progress STEPS: STEPS steps of a small allreduce, each reported with
 * rdzv_report_progress, 20 ms apart.  W_FAIL="rank:step" exits 3 there,
 * W_HANG="rank:step" stops reporting there (pause) in restart 0 only.
 */
static int
mode_progress(int steps)
{
	const char	*fail = getenv("W_FAIL"), *hang = getenv("W_HANG");
	const char	*rs = getenv("TORCHELASTIC_RESTART_COUNT");
	int		 fr = -1, fs = -1, hr = -1, hs = -1, step, rc;
	float		 b[64];

	if (fail != NULL && sscanf(fail, "%d:%d", &fr, &fs) != 2)
		errx(1, "bad W_FAIL");
	if (hang != NULL && sscanf(hang, "%d:%d", &hr, &hs) != 2)
		errx(1, "bad W_HANG");
	if (rs != NULL && atoi(rs) != 0)
		hr = -1;
	memset(b, 0, sizeof b);
	for (step = 1; step <= steps; step++) {
		rc = rdzv_allreduce(comm, b, b, 64, RDZV_F32, RDZV_SUM, -1);
		if (rc != 0) {
			printf("broken rank=%d step=%d code=%d\n", rank, step,
			    rc);
			return (4);
		}
		if ((rc = rdzv_report_progress(comm, step)) != 0)
			printf("report_progress rank=%d code=%d\n", rank, rc);
		if (rank == fr && step == fs) {
			printf("failing rank=%d step=%d\n", rank, step);
			return (3);
		}
		if (rank == hr && step == hs) {
			printf("hanging rank=%d step=%d\n", rank, step);
			fflush(stdout);
			for (;;)
				pause();
		}
		usleep(20 * 1000);
	}
	printf("ok progress rank=%d steps=%d\n", rank, steps);
	return (0);
}

static void
mode_timeouts(void)
{
	int64_t	t0;
	int32_t	v = 0;
	int	rc;

	checks++;
	if (rank == 1) {
		t0 = mono_ms();
		rc = rdzv_recv(comm, &v, 1, RDZV_I32, 0, 300);
		if (rc != RDZV_ETIMEDOUT || mono_ms() - t0 < 250 ||
		    mono_ms() - t0 > 2000) {
			printf("FAIL rank 1: recv returned %d after %lld ms\n",
			    rc, (long long)(mono_ms() - t0));
			failures++;
		}
		if ((rc = rdzv_barrier(comm, -1)) != RDZV_ECLOSED) {
			printf("FAIL rank 1: barrier after timeout: %d\n", rc);
			failures++;
		}
		expect_fini = RDZV_ETIMEDOUT;
	} else if (rank == 0) {
		usleep(800 * 1000);
		rc = rdzv_barrier(comm, 5000);
		if (rc != RDZV_ECONN) {
			printf("FAIL rank 0: barrier with a broken peer: %d "
			    "(%s)\n", rc, rdzv_comm_errmsg(comm));
			failures++;
		}
		expect_fini = RDZV_ECONN;
	}
}

/*
 * solo GATE: no communicator: rdzv_progress_report of steps 20 ms apart
 * until the file GATE exists, as a program with collectives of its own
 * would report them.
 */
static int
mode_solo(const char *gate)
{
	uint64_t	step;
	int		rc;

	for (step = 1; access(gate, F_OK) != 0; step++) {
		if ((rc = rdzv_progress_report(step)) != 0)
			printf("progress_report step=%llu code=%d\n",
			    (unsigned long long)step, rc);
		usleep(20 * 1000);
	}
	printf("ok solo steps=%llu\n", (unsigned long long)step - 1);
	return (0);
}

static void
log_cb(void *arg, enum rdzv_log_level lvl, const char *msg)
{
	fprintf(stderr, "[rank %d lvl %d] %s\n", rank, (int)lvl, msg);
}

int
main(int argc, char **argv)
{
	struct rdzv_options	opts;
	char			errbuf[512];
	const char		*mode = argc > 1 ? argv[1] : "coll";
	int			rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (strcmp(mode, "solo") == 0 && argc > 2)
		return (mode_solo(argv[2]));
	rdzv_options_init(&opts);
	opts.log = log_cb;
	if (getenv("WORKER_CHECK_TIMEOUT_MS") != NULL)
		opts.timeout_ms = atoi(getenv("WORKER_CHECK_TIMEOUT_MS"));
	if ((rc = rdzv_init(&comm, &opts, errbuf, sizeof errbuf)) != 0) {
		printf("init failed code=%d: %s\n", rc, errbuf);
		return (2);
	}
	rank = rdzv_rank(comm);
	size = rdzv_size(comm);
	if (strcmp(mode, "init") == 0) {
		printf("rank=%d size=%d local_rank=%d local_size=%d "
		    "backend=%d\n", rank, size, rdzv_local_rank(comm),
		    rdzv_local_size(comm), (int)rdzv_backend(comm));
		checks++;
		call_ok("barrier", rdzv_barrier(comm, -1));
	} else if (strcmp(mode, "coll") == 0)
		mode_coll(argc > 2 && strcmp(argv[2], "quick") == 0);
	else if (strcmp(mode, "p2p") == 0)
		mode_p2p();
	else if (strcmp(mode, "async") == 0)
		mode_async();
	else if (strcmp(mode, "timeouts") == 0)
		mode_timeouts();
	else if (strcmp(mode, "loop") == 0) {
		rc = mode_loop(argc > 2 ? atoi(argv[2]) : 10000,
		    argc > 3 ? (size_t)atol(argv[3]) : 1 << 18);
		rdzv_finalize(comm);
		return (rc);
	} else if (strcmp(mode, "progress") == 0) {
		rc = mode_progress(argc > 2 ? atoi(argv[2]) : 50);
		rdzv_finalize(comm);
		return (rc);
	} else
		errx(1, "unknown mode %s", mode);
	rc = rdzv_finalize(comm);
	if (rc != expect_fini) {
		printf("FAIL rank %d: finalize returned %d\n", rank, rc);
		failures++;
	}
	if (failures > 0) {
		printf("FAILED %s rank=%d failures=%d checks=%d\n", mode, rank,
		    failures, checks);
		return (1);
	}
	printf("ok %s rank=%d checks=%d\n", mode, rank, checks);
	return (0);
}
