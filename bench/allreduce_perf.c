/* SPDX-License-Identifier: Apache-2.0 */
/*
 * allreduce_perf: librdzvworker's allreduce timed like nccl-tests'
 * all_reduce_perf.  Runs as a worker: under rdzv-agent, torchrun, or
 * started N times with RANK/WORLD_SIZE and MASTER_ADDR/PORT (or
 * RDZV_ENDPOINT/RDZV_NAMESPACE).  Rank 0 prints one row per size:
 *
 *   bytes  count  type  op  time_us  algbw_GB/s  busbw_GB/s
 *
 * time is the median over -r repeats of the mean time per allreduce in a
 * repeat; algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests'
 * convention, the bandwidth a ring moves per link).
 *
 * usage: allreduce_perf [-b minbytes] [-e maxbytes] [-f factor] [-r repeats]
 *            [-i iters] [-w warmup] [-d f32|f64|f16|bf16|i32|i64|u8]
 *            [-o sum|prod|min|max|avg] [-c]
 * Sizes take K/M/G suffixes.  -i 0 (default) picks the iterations per
 * size so a repeat moves about 256 MiB, at most 2000 and at least 5, and
 * lasts at most about 0.25 s (timed on the warmup); -c checks the result
 * once per size.
 */
#include <err.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdzv_worker.h"

#define REPEAT_S	0.25	/* seconds a repeat takes at most (about) */

static const char *dtn[] = { "f32", "f64", "f16", "bf16", "i32", "i64", "u8" };
static const char *opn[] = { "sum", "prod", "min", "max", "avg" };

static double
now_s(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
}

static size_t
parse_size(const char *s)
{
	char		*end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'k': case 'K': v <<= 10; break;
	case 'm': case 'M': v <<= 20; break;
	case 'g': case 'G': v <<= 30; break;
	case '\0': break;
	default: errx(1, "bad size %s", s);
	}
	return ((size_t)v);
}

static int
lookup(const char *s, const char **names, int n)
{
	int	i;

	for (i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return (i);
	errx(1, "unknown name %s", s);
}

static int
cmp_double(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return (x < y ? -1 : x > y);
}

int
main(int argc, char **argv)
{
	struct rdzv_comm	*comm;
	enum rdzv_dtype		 dt = RDZV_F32;
	enum rdzv_op		 op = RDZV_SUM;
	size_t			 minb = 1 << 10, maxb = 64 << 20, bytes, count;
	size_t			 es, i;
	double			 t0, *times, t, algbw;
	char			 errbuf[512];
	uint8_t			*buf;
	int			 ch, factor = 2, repeats = 5, iters = 0;
	int			 warmup = 3, check = 0, rank, n, rc, r, it, k;

	while ((ch = getopt(argc, argv, "b:e:f:r:i:w:d:o:c")) != -1) {
		switch (ch) {
		case 'b': minb = parse_size(optarg); break;
		case 'e': maxb = parse_size(optarg); break;
		case 'f': factor = atoi(optarg); break;
		case 'r': repeats = atoi(optarg); break;
		case 'i': iters = atoi(optarg); break;
		case 'w': warmup = atoi(optarg); break;
		case 'd': dt = (enum rdzv_dtype)lookup(optarg, dtn, 7); break;
		case 'o': op = (enum rdzv_op)lookup(optarg, opn, 5); break;
		case 'c': check = 1; break;
		default:
			fprintf(stderr, "usage: allreduce_perf [-b min] [-e max] "
			    "[-f factor] [-r repeats] [-i iters] [-w warmup] "
			    "[-d dtype] [-o op] [-c]\n");
			return (1);
		}
	}
	if (factor < 2 || repeats < 1)
		errx(1, "factor must be >= 2 and repeats >= 1");
	if ((rc = rdzv_init(&comm, NULL, errbuf, sizeof errbuf)) != 0)
		errx(1, "%s", errbuf);
	rank = rdzv_rank(comm);
	n = rdzv_size(comm);
	es = rdzv_dtype_size(dt);
	if ((buf = malloc(maxb)) == NULL || (times = calloc((size_t)repeats,
	    sizeof *times)) == NULL)
		err(1, "malloc");
	memset(buf, 0, maxb);
	if (rank == 0) {
		printf("# librdzvworker allreduce: %d ranks, backend %s, %s %s,"
		    " %d repeats (median)\n", n, rdzv_backend(comm) ==
		    RDZV_BACKEND_NCCL ? "nccl" : "cpu", dtn[dt], opn[op],
		    repeats);
		printf("# %12s %12s %5s %5s %10s %10s %10s\n", "bytes",
		    "count", "type", "op", "time_us", "algbw_GB/s",
		    "busbw_GB/s");
	}
	for (bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
		count = bytes / es;
		it = iters > 0 ? iters : (int)((256u << 20) / bytes);
		if (it < 5)
			it = 5;
		if (it > 2000)
			it = 2000;
		if (check) {
			for (i = 0; i < count; i++)
				if (dt == RDZV_F32)
					((float *)buf)[i] = (float)(rank + 1);
			rc = rdzv_allreduce(comm, buf, buf, count, dt, op, -1);
			if (rc != 0)
				errx(1, "allreduce: %s", rdzv_comm_errmsg(comm));
			if (dt == RDZV_F32 && op == RDZV_SUM)
				for (i = 0; i < count; i++)
					if (((float *)buf)[i] !=
					    (float)n * (n + 1) / 2)
						errx(1, "wrong result at %zu", i);
			memset(buf, 0, bytes);
		}
		t0 = now_s();
		for (k = 0; k < warmup; k++)
			if ((rc = rdzv_allreduce(comm, buf, buf, count, dt, op,
			    -1)) != 0)
				errx(1, "allreduce: %s", rdzv_comm_errmsg(comm));
		/* A repeat lasts about REPEAT_S at most: slow sizes run fewer
		 * iterations.  Rank 0 decides, so every rank agrees. */
		if (iters == 0 && warmup > 0) {
			int64_t	nit;

			t = (now_s() - t0) / warmup;
			nit = t > 0 ? (int64_t)(REPEAT_S / t) : it;
			nit = nit < it ? nit : it;
			nit = nit < 5 ? 5 : nit;
			if ((rc = rdzv_broadcast(comm, &nit, 1, RDZV_I64, 0,
			    -1)) != 0)
				errx(1, "broadcast: %s", rdzv_comm_errmsg(comm));
			it = (int)nit;
		}
		for (r = 0; r < repeats; r++) {
			if ((rc = rdzv_barrier(comm, -1)) != 0)
				errx(1, "barrier: %s", rdzv_comm_errmsg(comm));
			t0 = now_s();
			for (k = 0; k < it; k++)
				if ((rc = rdzv_allreduce(comm, buf, buf, count,
				    dt, op, -1)) != 0)
					errx(1, "allreduce: %s",
					    rdzv_comm_errmsg(comm));
			times[r] = (now_s() - t0) / it;
		}
		qsort(times, (size_t)repeats, sizeof *times, cmp_double);
		t = times[repeats / 2];
		algbw = (double)bytes / t / 1e9;
		if (rank == 0)
			printf("  %12zu %12zu %5s %5s %10.2f %10.3f %10.3f\n",
			    bytes, count, dtn[dt], opn[op], t * 1e6, algbw,
			    algbw * 2.0 * (n - 1) / n);
		fflush(stdout);
	}
	free(buf);
	free(times);
	if ((rc = rdzv_finalize(comm)) != 0)
		errx(1, "finalize: %s", rdzv_strerror(rc));
	return (0);
}
