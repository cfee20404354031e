/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tlsload.c: a load generator on the blocking native client
 * (common/client.h), to compare rdzvd's plaintext and TLS paths with the
 * same client code on both.
 *
 *   load     P processes (fork), one connection each, each doing SET then
 *            GET round trips on a key of its own for D seconds after a
 *            warmup; prints ops/s (one op = one round trip), MB/s of
 *            values moved and latency percentiles on one line.
 *   connect  one process opening and closing N connections in turn;
 *            prints the time of rdzv_client_connect_opts (TCP connect and
 *            the native preamble, plus with --tls-ca loading the CA
 *            bundle and the TLS handshake) and, with --tls-ca, the time
 *            of loading the CA bundle alone; also the CPU time the
 *            connect took in this process.
 * With --tls-ca FILE every connection runs over TLS, verified against
 * FILE; without, plaintext.  Children share their results with the parent
 * through one anonymous shared mapping; a pipe releases them all at once
 * after every one has connected, so connection set-up is never timed in
 * load mode.
 */
#include "config.h"

#include <sys/mman.h>
#include <sys/wait.h>

#include <err.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "mono.h"
#include "rdzv_err.h"
#include "tls.h"

/* Latency histogram: 32 buckets per power of two of nanoseconds (~3 %). */
#define TL_SUB_BITS	5
#define TL_SUB		(1 << TL_SUB_BITS)
#define TL_BUCKETS	(TL_SUB * 64)

#define TL_TIMEOUT_MS	30000	/* per call; a stuck rdzvd fails it */
#define TL_PROCS_MAX	4096

/* What one child reports; one per child in the shared mapping. */
struct tl_res {
	uint64_t	ops;		/* round trips done in the window */
	uint64_t	bytes;		/* value bytes moved then */
	uint64_t	max_ns;
	uint64_t	all_ops;	/* warmup included (for CPU per op) */
	int		failed;		/* the child did not finish */
	char		why[256];
	uint64_t	hist[TL_BUCKETS];
};

/* Shared with the children through fork; written before the release. */
struct tl_shared {
	uint64_t	t_start_ns;	/* the warmup starts here */
	struct tl_res	res[];
};

struct tl_opts {
	const char	*endpoint;
	const char	*tls_ca;
	size_t		 procs;
	double		 duration;
	double		 warmup;
	size_t		 value_size;
	size_t		 connects;
};

/* CPU time this process used so far, user and system. */
static uint64_t
cpu_ns(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec);
}

static size_t
hist_index(uint64_t v)
{
	int	msb, shift;

	if (v < 2 * TL_SUB)
		return ((size_t)v);
	msb = 63 - __builtin_clzll(v);
	shift = msb - TL_SUB_BITS;	/* v >> shift is in [SUB, 2 SUB) */
	return ((size_t)(2 * TL_SUB + (shift - 1) * TL_SUB +
	    (int)((v >> shift) - TL_SUB)));
}

/* The middle of bucket i, in nanoseconds. */
static double
hist_value(size_t i)
{
	size_t	shift;
	double	lo;

	if (i < 2 * TL_SUB)
		return ((double)i);
	shift = (i - 2 * TL_SUB) / TL_SUB + 1;
	lo = (double)((i - 2 * TL_SUB) % TL_SUB + TL_SUB) *
	    (double)((uint64_t)1 << shift);
	return (lo + (double)((uint64_t)1 << shift) / 2);
}

/* The latency at quantile q of hist (n samples), in microseconds. */
static double
hist_quantile(const uint64_t *hist, uint64_t n, double q)
{
	uint64_t	rank, seen = 0;
	size_t		i;

	if (n == 0)
		return (0);
	rank = (uint64_t)(q * (double)n);
	if (rank < 1)
		rank = 1;
	for (i = 0; i < TL_BUCKETS; i++) {
		seen += hist[i];
		if (seen >= rank)
			return (hist_value(i) / 1000.0);
	}
	return (0);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t	x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y ? -1 : x > y);
}

static struct rdzv_client *
tl_connect(const struct tl_opts *o, char *why, size_t whysz)
{
	struct rdzv_client_opts	 co;
	struct rdzv_client	*c;
	int			 rv;

	memset(&co, 0, sizeof co);
	co.tls_ca = o->tls_ca;
	co.why = why;
	co.whysz = whysz;
	c = rdzv_client_connect_opts(o->endpoint, TL_TIMEOUT_MS, &co, &rv);
	if (c == NULL && why[0] == '\0')
		snprintf(why, whysz, "%s", rdzv_strerror(rv));
	return (c);
}

static void
tl_fail(struct tl_res *r, const char *what, int rv, struct rdzv_client *c)
{
	r->failed = 1;
	snprintf(r->why, sizeof r->why, "%s: %s %s", what, rdzv_strerror(rv),
	    c != NULL ? rdzv_client_errmsg(c) : "");
}

/*
 * One child: connects, says it is ready, waits for the release, then
 * SETs and GETs its own key until the window closes.  Every GET must
 * return what the SET before it stored.
 */
static void
tl_child(const struct tl_opts *o, struct tl_shared *sh, size_t idx,
    int ready_fd, int go_fd)
{
	struct tl_res		*r = &sh->res[idx];
	struct rdzv_client	*c;
	char			 key[64], why[256], b;
	unsigned char		*val;
	void			*got;
	size_t			 len, i;
	uint64_t		 t_warm, t_end, t0, t1;
	int			 rv, set = 1;

	why[0] = '\0';
	snprintf(key, sizeof key, "tlsload/%ld", (long)getpid());
	if ((val = malloc(o->value_size + 1)) == NULL) {
		r->failed = 1;
		snprintf(r->why, sizeof r->why, "out of memory");
	} else {
		for (i = 0; i < o->value_size; i++)
			val[i] = (unsigned char)(i * 131 + idx);
	}
	c = NULL;
	if (!r->failed && (c = tl_connect(o, why, sizeof why)) == NULL) {
		r->failed = 1;
		snprintf(r->why, sizeof r->why, "connect: %s", why);
	}
	/* Ready even on failure, so the parent never waits for us in vain. */
	(void)write(ready_fd, "r", 1);
	close(ready_fd);
	while (read(go_fd, &b, 1) == -1 && errno == EINTR)
		;
	close(go_fd);
	if (r->failed)
		_exit(1);

	t_warm = sh->t_start_ns + (uint64_t)(o->warmup * 1e9);
	t_end = t_warm + (uint64_t)(o->duration * 1e9);
	for (;;) {
		t0 = mono_ns();
		if (t0 >= t_end)
			break;
		got = NULL;
		if (set)
			rv = rdzv_client_set(c, key, val, o->value_size,
			    TL_TIMEOUT_MS);
		else
			rv = rdzv_client_get(c, key, &got, &len,
			    TL_TIMEOUT_MS);
		t1 = mono_ns();
		if (rv != 0) {
			tl_fail(r, set ? "set" : "get", rv, c);
			break;
		}
		if (!set && (len != o->value_size ||
		    memcmp(got, val, len) != 0)) {
			r->failed = 1;
			snprintf(r->why, sizeof r->why, "get %s: %zu bytes, "
			    "not the %zu set", key, len, o->value_size);
			free(got);
			break;
		}
		free(got);
		set = !set;
		r->all_ops++;
		if (t1 >= t_warm && t1 < t_end) {
			r->ops++;
			r->bytes += o->value_size;
			r->hist[hist_index(t1 - t0)]++;
			if (t1 - t0 > r->max_ns)
				r->max_ns = t1 - t0;
		}
	}
	rdzv_client_close(c);
	free(val);
	_exit(r->failed ? 1 : 0);
}

static int
tl_load(const struct tl_opts *o)
{
	struct tl_shared	*sh;
	struct tl_res		*r;
	uint64_t		*hist, ops = 0, all_ops = 0, bytes = 0;
	uint64_t		 max_ns = 0;
	size_t			 shsz, i, j, nready;
	pid_t			*pids;
	int			 ready[2], go[2], status, bad = 0;
	char			 b;

	shsz = sizeof *sh + o->procs * sizeof sh->res[0];
	sh = mmap(NULL, shsz, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		err(1, "mmap");
	if ((pids = calloc(o->procs, sizeof *pids)) == NULL ||
	    (hist = calloc(TL_BUCKETS, sizeof *hist)) == NULL)
		err(1, "calloc");
	if (pipe(ready) == -1 || pipe(go) == -1)
		err(1, "pipe");
	for (i = 0; i < o->procs; i++) {
		if ((pids[i] = fork()) == -1)
			err(1, "fork");
		if (pids[i] == 0) {
			close(ready[0]);
			close(go[1]);
			tl_child(o, sh, i, ready[1], go[0]);
		}
	}
	close(ready[1]);
	close(go[0]);
	for (nready = 0; nready < o->procs; ) {
		ssize_t	n = read(ready[0], &b, 1);

		if (n == 1)
			nready++;
		else if (n == 0 || errno != EINTR)
			break;	/* a child died before it was ready */
	}
	close(ready[0]);
	sh->t_start_ns = mono_ns();
	close(go[1]);	/* every child's read returns 0 now */
	for (i = 0; i < o->procs; i++) {
		while (waitpid(pids[i], &status, 0) == -1 && errno == EINTR)
			;
		r = &sh->res[i];
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
		    r->failed) {
			warnx("process %zu: %s", i, r->why[0] != '\0' ?
			    r->why : "died");
			bad = 1;
		}
		ops += r->ops;
		all_ops += r->all_ops;
		bytes += r->bytes;
		if (r->max_ns > max_ns)
			max_ns = r->max_ns;
		for (j = 0; j < TL_BUCKETS; j++)
			hist[j] += r->hist[j];
	}
	printf("tlsload mode=load tls=%d procs=%zu value_size=%zu "
	    "duration_s=%.3f ops=%" PRIu64 " ops_per_s=%.0f mb_per_s=%.1f "
	    "p50_us=%.1f p99_us=%.1f max_us=%.1f total_ops=%" PRIu64 "%s\n",
	    o->tls_ca != NULL, o->procs, o->value_size, o->duration, ops,
	    (double)ops / o->duration, (double)bytes / o->duration / 1e6,
	    hist_quantile(hist, ops, 0.50), hist_quantile(hist, ops, 0.99),
	    (double)max_ns / 1000.0, all_ops, bad ? " failed=1" : "");
	free(hist);
	free(pids);
	munmap(sh, shsz);
	return (bad);
}

/* Prints a sorted sample's median, 90th percentile, min and mean. */
static void
print_sample(const char *name, uint64_t *v, size_t n)
{
	double	sum = 0;
	size_t	i;

	qsort(v, n, sizeof *v, cmp_u64);
	for (i = 0; i < n; i++)
		sum += (double)v[i];
	printf(" %s_p50_us=%.1f %s_p90_us=%.1f %s_min_us=%.1f "
	    "%s_mean_us=%.1f", name, (n % 2 ? (double)v[n / 2] :
	    ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2) / 1000.0,
	    name, (double)v[n * 9 / 10] / 1000.0, name, (double)v[0] / 1000.0,
	    name, sum / (double)n / 1000.0);
}

static int
tl_connects(const struct tl_opts *o)
{
	struct rdzv_client	*c;
	SSL_CTX			*ctx;
	uint64_t		*conn, *cpu, *load, t0, c0;
	size_t			 i;
	char			 why[256];

	if ((conn = calloc(o->connects, sizeof *conn)) == NULL ||
	    (cpu = calloc(o->connects, sizeof *cpu)) == NULL ||
	    (load = calloc(o->connects, sizeof *load)) == NULL)
		err(1, "calloc");
	for (i = 0; i < o->connects; i++) {
		why[0] = '\0';
		c0 = cpu_ns();
		t0 = mono_ns();
		if ((c = tl_connect(o, why, sizeof why)) == NULL)
			errx(1, "connect %s: %s", o->endpoint, why);
		conn[i] = mono_ns() - t0;
		cpu[i] = cpu_ns() - c0;
		/* Not timed: a round trip shows the connection works. */
		if (rdzv_client_ping(c, TL_TIMEOUT_MS) != 0)
			errx(1, "ping %s failed", o->endpoint);
		rdzv_client_close(c);
		if (o->tls_ca == NULL)
			continue;
		/* The part of a TLS connect that is not on the wire. */
		t0 = mono_ns();
		if ((ctx = rdzv_tls_client_ctx(o->tls_ca, why,
		    sizeof why)) == NULL)
			errx(1, "%s", why);
		load[i] = mono_ns() - t0;
		SSL_CTX_free(ctx);
	}
	printf("tlsload mode=connect tls=%d n=%zu", o->tls_ca != NULL,
	    o->connects);
	print_sample("connect", conn, o->connects);
	print_sample("connect_cpu", cpu, o->connects);
	if (o->tls_ca != NULL)
		print_sample("ca_load", load, o->connects);
	printf("\n");
	free(conn);
	free(cpu);
	free(load);
	return (0);
}

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr,
"usage: tlsload --endpoint HOST:PORT [--tls-ca FILE] [--procs P]\n"
"               [--duration S] [--warmup S] [--value-size N]\n"
"       tlsload --endpoint HOST:PORT [--tls-ca FILE] --connects N\n");
	exit(2);
}

static double
arg_seconds(const char *name, const char *s)
{
	char	*end;
	double	 v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || v < 0 || v > 86400)
		errx(2, "%s: \"%s\" is not a number of seconds", name, s);
	return (v);
}

static size_t
arg_count(const char *name, const char *s, long long lo, long long hi)
{
	const char	*errstr;
	long long	 v;

	v = strtonum(s, lo, hi, &errstr);
	if (errstr != NULL)
		errx(2, "%s: \"%s\" is %s", name, s, errstr);
	return ((size_t)v);
}

int
main(int argc, char **argv)
{
	static const struct option	longopts[] = {
		{ "endpoint",	required_argument, NULL, 'e' },
		{ "tls-ca",	required_argument, NULL, 'c' },
		{ "procs",	required_argument, NULL, 'p' },
		{ "duration",	required_argument, NULL, 'd' },
		{ "warmup",	required_argument, NULL, 'w' },
		{ "value-size",	required_argument, NULL, 'v' },
		{ "connects",	required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 }
	};
	struct tl_opts	o;
	int		ch;

	memset(&o, 0, sizeof o);
	o.procs = 1;
	o.duration = 3;
	o.warmup = 1;
	o.value_size = 64;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'e':
			o.endpoint = optarg;
			break;
		case 'c':
			o.tls_ca = optarg;
			break;
		case 'p':
			o.procs = arg_count("--procs", optarg, 1, TL_PROCS_MAX);
			break;
		case 'd':
			o.duration = arg_seconds("--duration", optarg);
			break;
		case 'w':
			o.warmup = arg_seconds("--warmup", optarg);
			break;
		case 'v':
			/* rdzvd's default --value-max is 8 MiB. */
			o.value_size = arg_count("--value-size", optarg, 0,
			    (long long)1 << 30);
			break;
		case 'n':
			o.connects = arg_count("--connects", optarg, 1,
			    1000000);
			break;
		default:
			usage();
		}
	}
	if (optind != argc || o.endpoint == NULL)
		usage();
	if (o.duration <= 0)
		errx(2, "--duration must be > 0");
	/* A dead rdzvd must fail a call, not kill the process. */
	signal(SIGPIPE, SIG_IGN);
	if (o.connects > 0)
		return (tl_connects(&o));
	return (tl_load(&o));
}
