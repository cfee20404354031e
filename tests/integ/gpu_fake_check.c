/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_fake_check.c: librdzvworker's GPU path on one rank, for
 * gpu_fake.py (against tests/integ/fakegpu.c, no GPU needed) and
 * scripts/gpu-check.sh (against a real GPU).  It uses only the public
 * API; device memory comes from the CUDA runtime the library loads,
 * found the same way (RDZV_CUDART_LIBRARY or the soname).
 *
 *   gpu_fake_check backend           prints "backend NAME device D"
 *   gpu_fake_check coll              every collective on host and device
 *                                    buffers, checked: "coll ok"
 *   gpu_fake_check hang MODE MS      a collective whose kernel never ends
 *                                    (the fake's FAKE_NCCL_HANG): prints
 *                                    what each call returned, then
 *                                    "finalized".  MODE: host (allreduce,
 *                                    host buffers, deadline MS), ihost
 *                                    (iallreduce), grow (a hung device
 *                                    iallreduce, then a host allreduce
 *                                    that needs more staging), abort
 *                                    (rdzv_abort from another thread
 *                                    after MS)
 *   gpu_fake_check reinit N          N times: a communicator, a checked
 *                                    allreduce, rdzv_abort from another
 *                                    thread (a repair's watcher), the
 *                                    next call failing, finalize; then
 *                                    a last one works: "reinit ok N"
 *   gpu_fake_check order             a device buffer the caller's default
 *                                    stream fills late (fakegpu's hook):
 *                                    the allreduce must see the fill
 *
 * Exit 0 when every check held, 1 on a wrong result, 2 when rdzv_init
 * failed (its message on stderr).
 */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdzv_worker.h"

#define N	1000

typedef int	(*malloc_fn)(void **, size_t);
typedef int	(*memcpy_fn)(void *, const void *, size_t, int);
typedef void	(*fill_fn)(void *, int, int);

static malloc_fn	dmalloc;
static memcpy_fn	dmemcpy;	/* cudaMemcpy, cudaMemcpyDefault */
static fill_fn		dfill;
static int		failed;

static const char	*bnames[] = { "auto", "cpu", "nccl" };

static void
log_cb(void *arg, enum rdzv_log_level l, const char *msg)
{
	(void)arg;
	fprintf(stderr, "rdzv[%d]: %s\n", (int)l, msg);
}

/* The CUDA runtime the library would load; 0 when there is none. */
static int
load_cudart(void)
{
	const char	*p = getenv("RDZV_CUDART_LIBRARY");
	void		*h;

	h = dlopen(p != NULL && *p ? p : "libcudart.so.13", RTLD_NOW);
	if (h == NULL)
		return (0);
	dmalloc = (malloc_fn)dlsym(h, "cudaMalloc");
	dmemcpy = (memcpy_fn)dlsym(h, "cudaMemcpy");
	dfill = (fill_fn)dlsym(h, "fake_gpu_fill");
	return (dmalloc != NULL && dmemcpy != NULL);
}

static struct rdzv_comm *
start(void)
{
	struct rdzv_options	 o;
	struct rdzv_comm	*c;
	char			 err[512];

	rdzv_options_init(&o);
	o.log = log_cb;
	o.log_level = RDZV_LOG_INFO;
	if (rdzv_init(&c, &o, err, sizeof err) != 0) {
		fprintf(stderr, "init failed: %s\n", err);
		exit(2);
	}
	return (c);
}

static void
check(int ok, const char *what)
{
	if (!ok) {
		printf("FAIL %s\n", what);
		failed = 1;
	}
}

static void *
dev_copy_of(const void *h, size_t len)
{
	void	*d;

	if (dmalloc(&d, len) != 0)
		abort();
	dmemcpy(d, h, len, 4 /* cudaMemcpyDefault */);
	return (d);
}

/* One rank: every collective returns its input where it lands. */
static void
coll_on(struct rdzv_comm *c, int dev)
{
	int32_t		 h[N], out[N], back[N];
	struct rdzv_request *rq;
	void		*s, *r;
	const char	*k = dev ? "device" : "host";
	char		 what[64];
	int		 i, rc;

	for (i = 0; i < N; i++)
		h[i] = i * 3 - 7;
	memset(out, 0, sizeof out);
	s = dev ? dev_copy_of(h, sizeof h) : h;
	r = dev ? dev_copy_of(out, sizeof out) : out;
#define FETCH()	do {							\
	if (dev)							\
		dmemcpy(back, r, sizeof back, 4);			\
	else								\
		memcpy(back, r, sizeof back);				\
} while (0)
#define EXPECT(name, call) do {						\
	memset(back, 0, sizeof back);					\
	rc = (call);							\
	FETCH();							\
	snprintf(what, sizeof what, "%s %s rc=%d", name, k, rc);	\
	check(rc == 0 && memcmp(back, h, sizeof h) == 0, what);		\
} while (0)
	EXPECT("allreduce", rdzv_allreduce(c, s, r, N, RDZV_I32, RDZV_SUM,
	    5000));
	EXPECT("allreduce-avg", rdzv_allreduce(c, s, r, N, RDZV_I32,
	    RDZV_AVG, 5000));
	EXPECT("reduce", rdzv_reduce(c, s, r, N, RDZV_I32, RDZV_MAX, 0,
	    5000));
	EXPECT("allgather", rdzv_allgather(c, s, r, N, RDZV_I32, 5000));
	EXPECT("reduce_scatter", rdzv_reduce_scatter(c, s, r, N, RDZV_I32,
	    RDZV_SUM, 5000));
	EXPECT("gather", rdzv_gather(c, s, r, N, RDZV_I32, 0, 5000));
	EXPECT("scatter", rdzv_scatter(c, s, r, N, RDZV_I32, 0, 5000));
	EXPECT("alltoall", rdzv_alltoall(c, s, r, N, RDZV_I32, 5000));
	EXPECT("iallreduce", (rc = rdzv_iallreduce(c, s, r, N, RDZV_I32,
	    RDZV_SUM, 5000, &rq)) != 0 ? rc : rdzv_wait(rq));
	EXPECT("sendrecv-self", (rc = rdzv_isend(c, s, N, RDZV_I32, 0, 5000,
	    &rq)) != 0 ? rc : (rc = rdzv_recv(c, r, N, RDZV_I32, 0, 5000)) !=
	    0 ? rc : rdzv_wait(rq));
	/* In place: the buffer keeps its value. */
	if (dev)
		dmemcpy(r, h, sizeof h, 4);
	else
		memcpy(r, h, sizeof h);
	EXPECT("broadcast", rdzv_broadcast(c, r, N, RDZV_I32, 0, 5000));
	EXPECT("allreduce-inplace", rdzv_allreduce(c, r, r, N, RDZV_I32,
	    RDZV_SUM, 5000));
	rc = rdzv_barrier(c, 5000);
	snprintf(what, sizeof what, "barrier rc=%d", rc);
	check(rc == 0, what);
#undef EXPECT
#undef FETCH
}

struct aborter {
	struct rdzv_comm	*c;
	int			 ms;
};

static double
now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (ts.tv_sec * 1e3 + ts.tv_nsec / 1e6);
}

static void *
abort_cb(void *arg)
{
	struct aborter	*a = arg;
	double		 t0;

	usleep((useconds_t)a->ms * 1000);
	printf("aborting\n");
	fflush(stdout);
	t0 = now_ms();
	rdzv_abort(a->c);
	printf("aborted in %.1f ms\n", now_ms() - t0);
	fflush(stdout);
	return (NULL);
}

static int
hang(const char *mode, int ms)
{
	struct rdzv_comm	*c = start();
	struct rdzv_request	*rq;
	struct aborter		 a;
	pthread_t		 t;
	static int32_t		 big[1 << 20];
	int32_t			 h[N] = { 1 };
	void			*d;
	int			 rc;

	if (strcmp(mode, "host") == 0) {
		rc = rdzv_allreduce(c, h, h, N, RDZV_I32, RDZV_SUM, ms);
		printf("allreduce returned %d\n", rc);
	} else if (strcmp(mode, "ihost") == 0) {
		rc = rdzv_iallreduce(c, h, h, N, RDZV_I32, RDZV_SUM, ms, &rq);
		printf("iallreduce returned %d\n", rc);
		fflush(stdout);
		if (rc == 0)
			printf("wait returned %d\n", rdzv_wait(rq));
	} else if (strcmp(mode, "grow") == 0) {
		/* The FAKE_NCCL_HANG=2'th collective is the device one. */
		rc = rdzv_allreduce(c, h, h, N, RDZV_I32, RDZV_SUM, ms);
		printf("small allreduce returned %d\n", rc);
		d = dev_copy_of(h, sizeof h);
		rc = rdzv_iallreduce(c, d, d, N, RDZV_I32, RDZV_SUM, 600000,
		    &rq);
		printf("device iallreduce returned %d\n", rc);
		fflush(stdout);
		rc = rdzv_allreduce(c, big, big, 1 << 20, RDZV_I32, RDZV_SUM,
		    ms);
		printf("big allreduce returned %d\n", rc);
		fflush(stdout);
		printf("wait returned %d\n", rdzv_wait(rq));
	} else if (strcmp(mode, "abort") == 0) {
		a.c = c;
		a.ms = ms;
		pthread_create(&t, NULL, abort_cb, &a);
		rc = rdzv_allreduce(c, h, h, N, RDZV_I32, RDZV_SUM, 600000);
		printf("allreduce returned %d\n", rc);
		pthread_join(t, NULL);
	} else {
		fprintf(stderr, "unknown hang mode %s\n", mode);
		return (1);
	}
	fflush(stdout);
	rdzv_finalize(c);
	printf("finalized\n");
	return (0);
}

static int
reinit(int times)
{
	struct rdzv_comm	*c;
	struct aborter		 a;
	pthread_t		 t;
	int32_t			 h[N], r[N];
	int			 i, k, rc;

	for (i = 0; i < N; i++)
		h[i] = i;
	for (k = 0; k <= times; k++) {
		c = start();
		memset(r, 0, sizeof r);
		rc = rdzv_allreduce(c, h, r, N, RDZV_I32, RDZV_SUM, 30000);
		if (rc != 0 || memcmp(h, r, sizeof h) != 0) {
			printf("reinit: allreduce %d returned %d\n", k, rc);
			return (1);
		}
		if (k < times) {
			a.c = c;
			a.ms = 0;
			pthread_create(&t, NULL, abort_cb, &a);
			pthread_join(t, NULL);
			rc = rdzv_allreduce(c, h, r, N, RDZV_I32, RDZV_SUM,
			    30000);
			if (rc == 0) {
				printf("reinit: a call after the abort "
				    "succeeded\n");
				return (1);
			}
		}
		rdzv_finalize(c);
	}
	printf("reinit ok %d\n", times);
	return (0);
}

static int
order(void)
{
	struct rdzv_comm	*c = start();
	int32_t			 z[N], back[N];
	void			*s, *r;
	int			 i, rc;

	if (dfill == NULL) {
		printf("order: not the fake CUDA runtime\n");
		return (1);
	}
	memset(z, 0, sizeof z);
	s = dev_copy_of(z, sizeof z);
	r = dev_copy_of(z, sizeof z);
	/* The caller's kernel on the default stream writes s late. */
	dfill(s, 7, 1500);
	rc = rdzv_allreduce(c, s, r, N, RDZV_I32, RDZV_SUM, 10000);
	dmemcpy(back, r, sizeof back, 4);
	for (i = 0; i < N && back[i] == 0x07070707; i++)
		;
	printf("allreduce returned %d, result %s\n", rc, i == N ?
	    "has the fill" : "stale (read before the caller's kernel ran)");
	rdzv_finalize(c);
	return (rc == 0 && i == N ? 0 : 1);
}

int
main(int argc, char **argv)
{
	struct rdzv_comm	*c;
	enum rdzv_backend	 b;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: gpu_fake_check backend|coll|"
		    "hang MODE MS|reinit N|order\n");
		return (1);
	}
	if (strcmp(argv[1], "backend") == 0) {
		c = start();
		b = rdzv_backend(c);
		printf("backend %s device %d\n", bnames[b], rdzv_device(c));
		rdzv_finalize(c);
		return (0);
	}
	if (!load_cudart()) {
		fprintf(stderr, "no CUDA runtime to allocate device memory\n");
		return (1);
	}
	if (strcmp(argv[1], "coll") == 0) {
		c = start();
		coll_on(c, 0);
		coll_on(c, 1);
		printf("%s backend %s\n", failed ? "coll FAILED" : "coll ok",
		    bnames[rdzv_backend(c)]);
		rdzv_finalize(c);
		return (failed);
	}
	if (strcmp(argv[1], "hang") == 0 && argc == 4)
		return (hang(argv[2], atoi(argv[3])));
	if (strcmp(argv[1], "order") == 0)
		return (order());
	if (strcmp(argv[1], "reinit") == 0 && argc == 3)
		return (reinit(atoi(argv[2])));
	fprintf(stderr, "unknown command %s\n", argv[1]);
	return (1);
}
