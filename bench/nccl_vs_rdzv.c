/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nccl_vs_rdzv: librdzvworker's nccl backend beside raw NCCL, in one
 * process, on a GPU (scripts/gpu-check.sh runs it; it has never run
 * where no GPU is).  Every rank runs it with torchrun's variables
 * (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and
 * RAW_ID_DIR, a directory all ranks share, through which rank 0 hands
 * the raw communicator its unique id.  Libraries: as librdzvworker finds
 * them (RDZV_CUDART_LIBRARY, RDZV_NCCL_LIBRARY, else the sonames).
 *
 *   nccl_vs_rdzv boot           "RESULT boot raw_ms R rdzv_ms D": a
 *                               communicator's bootstrap, both ways,
 *                               after an untimed first one
 *   nccl_vs_rdzv calls REPS     "RESULT call BYTES raw_us R dev_us D
 *                               host_us H": the median time of one
 *                               float sum all-reduce, raw (enqueue +
 *                               stream synchronize), rdzv on a device
 *                               buffer, rdzv on a host buffer
 *   nccl_vs_rdzv busbw MAXB     "RESULT busbw BYTES raw_gbs R rdzv_gbs D"
 *                               from 1 MiB to MAXB bytes (device buffers,
 *                               nccl-tests' bus bandwidth: 2(n-1)/n; raw
 *                               queues 10 calls and synchronizes once,
 *                               rdzv makes 10 blocking calls)
 */
#include "config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "rdzv_worker.h"

static cudaError_t	(*c_setdev)(int);
static cudaError_t	(*c_count)(int *);
static cudaError_t	(*c_malloc)(void **, size_t);
static cudaError_t	(*c_memset)(void *, int, size_t);
static cudaError_t	(*c_sync)(cudaStream_t);
static cudaError_t	(*c_screate)(cudaStream_t *);
static ncclResult_t	(*n_id)(ncclUniqueId *);
static ncclResult_t	(*n_init)(ncclComm_t *, int, ncclUniqueId, int);
static ncclResult_t	(*n_ar)(const void *, void *, size_t, ncclDataType_t,
			    ncclRedOp_t, ncclComm_t, cudaStream_t);
static ncclResult_t	(*n_destroy)(ncclComm_t);

static int	rank, size, lrank;

static double
now_us(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (ts.tv_sec * 1e6 + ts.tv_nsec / 1e3);
}

static void *
sym(void *h, const char *name)
{
	void	*f = dlsym(h, name);

	if (f == NULL) {
		fprintf(stderr, "nccl_vs_rdzv: no %s\n", name);
		exit(1);
	}
	return (f);
}

static void *
open_lib(const char *env, const char *soname)
{
	const char	*p = getenv(env);
	void		*h = dlopen(p != NULL && *p ? p : soname, RTLD_NOW);

	if (h == NULL) {
		fprintf(stderr, "nccl_vs_rdzv: %s: %s\n", soname, dlerror());
		exit(1);
	}
	return (h);
}

static int
envint(const char *n, int d)
{
	const char	*v = getenv(n);

	return (v != NULL && *v ? atoi(v) : d);
}

#define CK(x) do {							\
	if ((x) != 0) {							\
		fprintf(stderr, "nccl_vs_rdzv: %s failed\n", #x);	\
		exit(1);						\
	}								\
} while (0)

/* The raw communicator: rank 0's id through RAW_ID_DIR/id.TAG. */
static ncclComm_t
raw_comm(const char *tag)
{
	const char	*dir = getenv("RAW_ID_DIR");
	char		 path[512], tmp[600];
	ncclUniqueId	 id;
	ncclComm_t	 comm;
	FILE		*f;
	int		 i;

	snprintf(path, sizeof path, "%s/id.%s", dir ? dir : "/tmp", tag);
	if (rank == 0) {
		CK(n_id(&id));
		snprintf(tmp, sizeof tmp, "%s.tmp", path);
		if ((f = fopen(tmp, "w")) == NULL ||
		    fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 ||
		    rename(tmp, path) != 0) {
			perror(path);
			exit(1);
		}
	} else {
		for (i = 0; (f = fopen(path, "r")) == NULL; i++) {
			if (i > 60000) {
				fprintf(stderr, "no id at %s\n", path);
				exit(1);
			}
			usleep(1000);
		}
		if (fread(&id, sizeof id, 1, f) != 1)
			exit(1);
		fclose(f);
	}
	CK(n_init(&comm, size, id, rank));
	/* Every rank has read it: init is collective. */
	if (rank == 0)
		(void)unlink(path);
	return (comm);
}

static struct rdzv_comm *
rdzv_comm_new(void)
{
	struct rdzv_options	 o;
	struct rdzv_comm	*c;
	char			 err[512];

	rdzv_options_init(&o);
	o.backend = RDZV_BACKEND_NCCL;
	o.device = lrank;
	if (rdzv_init(&c, &o, err, sizeof err) != 0) {
		fprintf(stderr, "rdzv_init: %s\n", err);
		exit(1);
	}
	return (c);
}

static int
cmp_d(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return (x < y ? -1 : x > y);
}

/* One float sum all-reduce in place: raw NCCL (buf NULL) or rdzv on buf. */
struct call {
	ncclComm_t		 comm;
	cudaStream_t		 st;
	struct rdzv_comm	*c;
	void			*d;
	size_t			 n;
};

static void
one_call(const struct call *x, void *buf)
{
	if (buf == NULL) {
		CK(n_ar(x->d, x->d, x->n, ncclFloat32, ncclSum, x->comm,
		    x->st));
		CK(c_sync(x->st));
	} else
		CK(rdzv_allreduce(x->c, buf, buf, x->n, RDZV_F32, RDZV_SUM,
		    60000));
}

/* The median time of reps calls, in microseconds (ts: reps slots). */
static double
median_us(const struct call *x, void *buf, int reps, double *ts)
{
	double	t0;
	int	k;

	for (k = 0; k < reps; k++) {
		t0 = now_us();
		one_call(x, buf);
		ts[k] = now_us() - t0;
	}
	qsort(ts, (size_t)reps, sizeof *ts, cmp_d);
	return (ts[reps / 2]);
}

int
main(int argc, char **argv)
{
	void			*hc, *hn, *d, *h;
	struct rdzv_comm	*c;
	ncclComm_t		 comm;
	cudaStream_t		 st;
	struct call		 x;
	double			 t0, raw, dv, hs, *ts;
	size_t			 sizes[] = { 8, 65536, 1 << 20 };
	size_t			 bytes, n, i;
	int			 reps, ndev, k;

	if (argc < 2) {
		fprintf(stderr, "usage: nccl_vs_rdzv boot|calls REPS|busbw "
		    "MAXBYTES\n");
		return (1);
	}
	hc = open_lib("RDZV_CUDART_LIBRARY", "libcudart.so.13");
	hn = open_lib("RDZV_NCCL_LIBRARY", "libnccl.so.2");
	c_setdev = sym(hc, "cudaSetDevice");
	c_count = sym(hc, "cudaGetDeviceCount");
	c_malloc = sym(hc, "cudaMalloc");
	c_memset = sym(hc, "cudaMemset");
	c_sync = sym(hc, "cudaStreamSynchronize");
	c_screate = sym(hc, "cudaStreamCreate");
	n_id = sym(hn, "ncclGetUniqueId");
	n_init = sym(hn, "ncclCommInitRank");
	n_ar = sym(hn, "ncclAllReduce");
	n_destroy = sym(hn, "ncclCommDestroy");
	rank = envint("RANK", 0);
	size = envint("WORLD_SIZE", 1);
	lrank = envint("LOCAL_RANK", 0);
	CK(c_count(&ndev));
	lrank %= ndev;
	CK(c_setdev(lrank));
	CK(c_screate(&st));

	if (strcmp(argv[1], "boot") == 0) {
		/*
		 * A process's first communicator also loads NCCL's kernels
		 * (0.4 s of 0.43 on an H200, NCCL 2.28): made and dropped
		 * first, so that neither timed one pays it.
		 */
		n_destroy(raw_comm("warm"));
		t0 = now_us();
		comm = raw_comm("boot");
		raw = (now_us() - t0) / 1e3;
		t0 = now_us();
		c = rdzv_comm_new();
		dv = (now_us() - t0) / 1e3;
		printf("RESULT boot raw_ms %.1f rdzv_ms %.1f\n", raw, dv);
		rdzv_finalize(c);
		n_destroy(comm);
		return (0);
	}
	reps = argc > 2 ? atoi(argv[2]) : 50;
	comm = raw_comm(argv[1]);
	c = rdzv_comm_new();
	if (strcmp(argv[1], "calls") == 0) {
		if (reps < 3)
			reps = 3;
		ts = calloc((size_t)reps, sizeof *ts);
		for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			bytes = sizes[i];
			n = bytes / 4;
			CK(c_malloc(&d, bytes));
			CK(c_memset(d, 0, bytes));
			h = calloc(1, bytes);
			x = (struct call){ comm, st, c, d, n };
			raw = median_us(&x, NULL, reps, ts);
			dv = median_us(&x, d, reps, ts);
			hs = median_us(&x, h, reps, ts);
			printf("RESULT call %zu raw_us %.1f dev_us %.1f "
			    "host_us %.1f\n", bytes, raw, dv, hs);
			free(h);
		}
		free(ts);
	} else if (strcmp(argv[1], "busbw") == 0) {
		size_t	maxb = (size_t)strtoull(argv[2], NULL, 0);

		CK(c_malloc(&d, maxb));
		CK(c_memset(d, 0, maxb));
		for (bytes = 1 << 20; bytes <= maxb; bytes *= 4) {
			n = bytes / 4;
			CK(n_ar(d, d, n, ncclFloat32, ncclSum, comm, st));
			CK(c_sync(st));
			t0 = now_us();
			for (k = 0; k < 10; k++)
				CK(n_ar(d, d, n, ncclFloat32, ncclSum, comm,
				    st));
			CK(c_sync(st));
			raw = (now_us() - t0) / 10;
			CK(rdzv_allreduce(c, d, d, n, RDZV_F32, RDZV_SUM,
			    60000));
			t0 = now_us();
			for (k = 0; k < 10; k++)
				CK(rdzv_allreduce(c, d, d, n, RDZV_F32,
				    RDZV_SUM, 60000));
			dv = (now_us() - t0) / 10;
			printf("RESULT busbw %zu raw_gbs %.2f rdzv_gbs %.2f\n",
			    bytes, bytes / raw / 1e3 * 2 * (size - 1) / size,
			    bytes / dv / 1e3 * 2 * (size - 1) / size);
		}
	}
	rdzv_finalize(c);
	n_destroy(comm);
	return (0);
}
