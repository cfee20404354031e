/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpu.c: the cpu backend's transport.  Owns the bootstrap (each rank
 * listens, publishes "addr port host" in the store, connects to every
 * lower rank and accepts every higher one, each connection opened with a
 * hello naming the communicator and the rank), the non-blocking socket
 * primitives every algorithm is built from, the transfer-set engine, the
 * point-to-point engine, and the CUDA staging of device buffers.
 *
 * Failure model: any EOF, reset or deadline on a socket breaks the
 * communicator (comm_fail), whose abort hook shuts every socket down, so
 * each peer sees an EOF at once and breaks too: a dead rank takes the
 * whole communicator down within one poll, never a hang.
 */
#include "config.h"

#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include "gpulib.h"
#endif

#include "cpu.h"

#define HELLO_MAGIC	0x57435a52u	/* "RZCW" little-endian */
#define HELLO_LEN	24
#define HELLO_MS	5000	/* an accepted connection's hello */
/*
 * The bootstrap waits on its peers in slices of this long and looks
 * between them whether the communicator broke.  In a repair a newer round
 * breaks it (repair.c) when a peer of this one died as it formed: that
 * peer never connects, and the rebuild must take the newer round now, not
 * at the repair timeout.
 */
#define BOOT_SLICE_MS	200
#define CHUNK_DEFAULT	(256u << 10)
#define DIRECT_DEFAULT	(16u << 10)
/*
 * One send()/recv() moves at most this much.  The call holds the socket's
 * lock for its whole copy, and the ACKs that arrive meanwhile wait in the
 * socket's backlog: an 8 MiB send() made the peer's loss probe fire, so
 * it retransmitted what was not lost and cut its congestion window (~200
 * spurious retransmits per 2-rank 64 MiB benchmark on loopback, and its
 * time swinging between 1x and 2x; at 256 KiB none, and steady).
 */
#define SOCK_IO_MAX	(256u << 10)

/* ---- primitives ---- */

static int
cpu_lost(struct cpu *cpu, int peer, int rc, const char *what)
{
	if (rc == RDZV_ECONN)
		return (comm_fail(cpu->comm, rc, "%s: connection to rank %d "
		    "closed or reset (the peer died or broke)", what, peer));
	return (comm_fail(cpu->comm, rc, "%s: rank %d: %s", what, peer,
	    rdzv_strerror(rc)));
}

ssize_t
cpu_send_some(struct cpu *cpu, int peer, const void *p, size_t len)
{
	ssize_t	n;

	if (len > SOCK_IO_MAX)
		len = SOCK_IO_MAX;
	for (;;) {
		n = send(cpu->links[peer].fd, p, len, MSG_NOSIGNAL |
		    MSG_DONTWAIT);
		if (n >= 0)
			return (n);
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return (0);
		return (comm_broken(cpu->comm) ? RDZV_ECLOSED :
		    cpu_lost(cpu, peer, RDZV_ECONN, "send"));
	}
}

ssize_t
cpu_recv_some(struct cpu *cpu, int peer, void *p, size_t len)
{
	ssize_t	n;

	if (len > SOCK_IO_MAX)
		len = SOCK_IO_MAX;
	for (;;) {
		n = recv(cpu->links[peer].fd, p, len, MSG_DONTWAIT);
		if (n > 0)
			return (n);
		if (n == 0 && len > 0)
			return (comm_broken(cpu->comm) ? RDZV_ECLOSED :
			    cpu_lost(cpu, peer, RDZV_ECONN, "recv"));
		if (n == 0)
			return (0);
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return (0);
		return (comm_broken(cpu->comm) ? RDZV_ECLOSED :
		    cpu_lost(cpu, peer, RDZV_ECONN, "recv"));
	}
}

int
cpu_poll(struct cpu *cpu, int n, int64_t deadline, const char *what)
{
	int	rc, left;

	for (;;) {
		if ((rc = comm_broken(cpu->comm)) != 0)
			return (RDZV_ECLOSED);
		left = deadline_left(deadline);
		comm_waiting(cpu->comm, 1);
		rc = poll(cpu->pfd, (nfds_t)n, left);
		comm_waiting(cpu->comm, 0);
		if (rc > 0)
			return (0);
		if (rc == 0 && left == 0)
			return (comm_fail(cpu->comm, RDZV_ETIMEDOUT, "%s: rank "
			    "%d timed out waiting for its peers", what,
			    cpu->rank));
		if (rc == -1 && errno != EINTR)
			return (comm_fail(cpu->comm, RDZV_EIO, "%s: poll: %s",
			    what, strerror(errno)));
	}
}

int
cpu_tmp(struct cpu *cpu, size_t len)
{
	uint8_t	*p;

	if (len <= cpu->tmpcap)
		return (0);
	/* Page-aligned so the kernel's copies and the reductions stream. */
	if (posix_memalign((void **)&p, 4096, len) != 0)
		return (RDZV_ENOMEM);
	free(cpu->tmp);
	cpu->tmp = p;
	cpu->tmpcap = len;
	return (0);
}

void
cpu_pass_begin(struct cpu_pass *ps, struct cpu *cpu)
{
	ps->cpu = cpu;
	ps->np = 0;
	ps->progressed = 0;
}

int
cpu_pass_move(struct cpu_pass *ps, int peer, int send, void *buf,
    size_t *done, size_t upto)
{
	struct cpu	*cpu = ps->cpu;
	struct pollfd	*pfd;
	uint8_t		*p = (uint8_t *)buf + *done;
	ssize_t		 m;

	if (*done >= upto)
		return (0);
	m = send ? cpu_send_some(cpu, peer, p, upto - *done) :
	    cpu_recv_some(cpu, peer, p, upto - *done);
	if (m < 0)
		return ((int)m);
	*done += (size_t)m;
	if (m > 0)
		ps->progressed = 1;
	if (*done < upto) {
		pfd = &cpu->pfd[ps->np++];
		pfd->fd = cpu->links[peer].fd;
		pfd->events = send ? POLLOUT : POLLIN;
		pfd->revents = 0;
	}
	return (0);
}

int
cpu_pass_wait(struct cpu_pass *ps, int64_t deadline, const char *what)
{
	if (ps->progressed || ps->np == 0)
		return (0);
	return (cpu_poll(ps->cpu, ps->np, deadline, what));
}

int
cpu_xfer(struct cpu *cpu, struct xop *ops, size_t n, int64_t deadline,
    const char *what)
{
	struct cpu_pass	 ps;
	struct xop	*x;
	size_t		 i, left;
	uint32_t	*st;
	int		 rc;

	for (;;) {
		cpu->pass++;
		cpu_pass_begin(&ps, cpu);
		left = 0;
		for (i = 0; i < n; i++) {
			x = &ops[i];
			if (x->done == x->len)
				continue;
			st = &cpu->stamp[2 * x->peer + (x->send ? 1 : 0)];
			if (*st == cpu->pass) {	/* an earlier one is pending */
				left++;
				continue;
			}
			if ((rc = cpu_pass_move(&ps, x->peer, x->send, x->buf,
			    &x->done, x->len)) != 0)
				return (rc);
			if (x->done < x->len) {
				*st = cpu->pass;
				left++;
			}
		}
		if (left == 0)
			return (0);
		if ((rc = cpu_pass_wait(&ps, deadline, what)) != 0)
			return (rc);
	}
}

/* ---- point to point ---- */

static void
le64_put(uint8_t *p, uint64_t v)
{
	int	i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
le64_get(const uint8_t *p)
{
	uint64_t	v = 0;
	int		i;

	for (i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return (v);
}

/*
 * Device buffers in send/recv go through a host copy that lives with the
 * request (freed with it): a send's is filled when the request starts, a
 * receive's is copied to the device when it completes.
 */
struct p2p_stage {
	void	*dev;
	void	*host;
};

static void
p2p_stage_free(struct rdzv_request *r)
{
	struct p2p_stage	*st = r->be;

	if (st != NULL) {
		free(st->host);
		free(st);
		r->be = NULL;
	}
}

static int
p2p_stage_in(struct rdzv_comm *c, struct rdzv_request *r)
{
#ifdef HAVE_CUDA
	struct p2p_stage	*st;
	void			*p = r->kind == REQ_SEND ? (void *)r->sbuf :
				    r->rbuf;

	if (r->count == 0 || !cpu_is_device_ptr(p))
		return (0);
	if ((st = calloc(1, sizeof *st)) == NULL ||
	    (st->host = malloc(r->count)) == NULL) {
		free(st);
		return (RDZV_ENOMEM);
	}
	st->dev = p;
	r->be = st;
	r->free = p2p_stage_free;
	if (r->kind == REQ_SEND) {
		if (cudart.cudaMemcpy(st->host, p, r->count,
		    cudaMemcpyDeviceToHost) != cudaSuccess)
			return (RDZV_EIO);
		r->sbuf = st->host;
	} else
		r->rbuf = st->host;
#else
	(void)c;
	(void)r;
	(void)p2p_stage_free;
#endif
	return (0);
}

/* Completes a request: a staged receive goes to the device first. */
static void
p2p_done(struct rdzv_request *r, int rc)
{
#ifdef HAVE_CUDA
	struct p2p_stage	*st = r->be;

	if (rc == 0 && st != NULL && r->kind == REQ_RECV &&
	    cudart.cudaMemcpy(st->dev, st->host, r->count,
	    cudaMemcpyHostToDevice) != cudaSuccess)
		rc = RDZV_EIO;
#endif
	comm_complete(r, rc);
}

/*
 * Moves one request as far as it goes now.  Each message carries an
 * 8-byte length so a mismatched send and receive is caught, not silently
 * misread.  Returns 1 when complete, 0 when pending, < 0 on failure.
 */
static int
p2p_step(struct cpu *cpu, struct rdzv_request *r, int *progressed)
{
	size_t	 total = 8 + r->count;
	ssize_t	 m;

	if (r->off == 0 && r->kind == REQ_SEND)
		le64_put(r->hdr, r->count);
	while (r->off < total) {
		if (r->off < 8) {
			m = r->kind == REQ_SEND ?
			    cpu_send_some(cpu, r->peer, r->hdr + r->off,
			    8 - r->off) :
			    cpu_recv_some(cpu, r->peer, r->hdr + r->off,
			    8 - r->off);
		} else if (r->kind == REQ_SEND)
			m = cpu_send_some(cpu, r->peer,
			    (const uint8_t *)r->sbuf + (r->off - 8), total - r->off);
		else
			m = cpu_recv_some(cpu, r->peer,
			    (uint8_t *)r->rbuf + (r->off - 8), total - r->off);
		if (m < 0)
			return ((int)m);
		if (m == 0)
			return (0);
		*progressed = 1;
		r->off += (size_t)m;
		if (r->kind == REQ_RECV && r->off == 8 &&
		    le64_get(r->hdr) != r->count)
			return (comm_fail(cpu->comm, RDZV_EPROTO, "recv from "
			    "rank %d: %llu bytes sent, %zu expected", r->peer,
			    (unsigned long long)le64_get(r->hdr), r->count));
	}
	return (1);
}

/* Matches the oldest pending send to oneself with the oldest receive. */
static int
p2p_self(struct cpu *cpu, struct rdzv_request **act, size_t n)
{
	struct rdzv_request	*s = NULL, *r = NULL;
	size_t			 i;

	for (i = 0; i < n; i++) {
		if (act[i] == NULL || act[i]->peer != cpu->rank)
			continue;
		if (act[i]->kind == REQ_SEND && s == NULL)
			s = act[i];
		if (act[i]->kind == REQ_RECV && r == NULL)
			r = act[i];
	}
	if (s == NULL || r == NULL)
		return (0);
	if (s->count != r->count) {
		p2p_done(s, RDZV_EINVAL);
		p2p_done(r, RDZV_EINVAL);
	} else {
		memcpy(r->rbuf, s->sbuf, s->count);
		p2p_done(s, 0);
		p2p_done(r, 0);
	}
	for (i = 0; i < n; i++)
		if (act[i] == s || act[i] == r)
			act[i] = NULL;
	return (1);
}

static int
cpu_p2p(struct rdzv_comm *c, struct rdzv_request *first)
{
	struct cpu		 *cpu = cpu_of(c);
	struct rdzv_request	**act = NULL, **na, *r;
	size_t			  n = 0, cap = 0, i, j;
	int64_t			  dl;
	int			  np, progressed, rc = 0;
	uint32_t		 *st;
	char			  drain[64];

	r = first;
	for (;;) {
		while (r != NULL) {
			if (n == cap) {
				cap = cap == 0 ? 16 : cap * 2;
				if ((na = reallocarray(act, cap,
				    sizeof *act)) == NULL) {
					comm_complete(r, RDZV_ENOMEM);
					rc = RDZV_ENOMEM;
					goto out;
				}
				act = na;
			}
			if ((rc = p2p_stage_in(c, r)) != 0)
				p2p_done(r, rc);
			else
				act[n++] = r;
			rc = 0;
			r = comm_take_p2p(c);
		}
		while (p2p_self(cpu, act, n))
			;
		for (i = j = 0; i < n; i++)
			if (act[i] != NULL)
				act[j++] = act[i];
		n = j;
		if (n == 0)
			break;
		if ((rc = comm_broken(c)) != 0) {
			rc = RDZV_ECLOSED;
			goto out;
		}

		cpu->pass++;
		progressed = 0;
		np = 0;
		dl = INT64_MAX;
		for (i = 0; i < n; i++) {
			r = act[i];
			if (r->peer == cpu->rank) {	/* waits for its match */
				dl = r->deadline < dl ? r->deadline : dl;
				continue;
			}
			st = &cpu->stamp[2 * r->peer +
			    (r->kind == REQ_SEND ? 1 : 0)];
			if (*st == cpu->pass)
				continue;
			if ((rc = p2p_step(cpu, r, &progressed)) < 0)
				goto out;
			if (rc == 1) {
				p2p_done(r, 0);
				act[i] = NULL;
				continue;
			}
			*st = cpu->pass;
			dl = r->deadline < dl ? r->deadline : dl;
			cpu->pfd[np].fd = cpu->links[r->peer].fd;
			cpu->pfd[np].events = r->kind == REQ_SEND ? POLLOUT :
			    POLLIN;
			np++;
		}
		rc = 0;
		r = NULL;
		if (progressed)
			continue;
		for (i = 0; i < n; i++)
			if (act[i] != NULL && act[i]->deadline <= mono_ms()) {
				rc = comm_fail(c, RDZV_ETIMEDOUT, "%s with rank "
				    "%d timed out", act[i]->kind == REQ_SEND ?
				    "send" : "recv", act[i]->peer);
				goto out;
			}
		/* Also wake when the program queues another send/recv. */
		cpu->pfd[np].fd = comm_wake_fd(c);
		cpu->pfd[np].events = POLLIN;
		np++;
		/* dl is the earliest deadline: a timeout here is a request's
		 * own (cpu_poll has broken the communicator with it). */
		if ((rc = cpu_poll(cpu, np, dl, "send/recv")) != 0)
			goto out;
		while (read(comm_wake_fd(c), drain, sizeof drain) > 0)
			;
		r = comm_take_p2p(c);
	}
out:
	if (rc < 0) {
		/* Everything still active fails with the cause. */
		for (i = 0; i < n; i++)
			if (act[i] != NULL)
				comm_complete(act[i], rc);
		while ((r = comm_take_p2p(c)) != NULL)
			comm_complete(r, rc);
	}
	free(act);
	return (rc);
}

/* ---- bootstrap ---- */

/* FNV-1a over s, continuing from h. */
static uint64_t
fnv(uint64_t h, const char *s)
{
	for (; *s != '\0'; s++) {
		h ^= (uint8_t)*s;
		h *= 0x100000001b3ULL;
	}
	return (h);
}

/* The tuning variables every rank must agree on. */
static const char *const tuning_vars[] = {
	"RDZV_CPU_CHUNK", "RDZV_CPU_DIRECT_MAX", "RDZV_CPU_DIRECT_RANKS",
	"RDZV_SHM_SLOT", "RDZV_SHM_SMALL", "RDZV_SHM_CMA", "RDZV_SHM_CMA_MIN",
	"RDZV_SHM_CMA_MAX", "RDZV_SHM_CMA_SEG", "RDZV_SHM_NT_MIN",
};

/* A hash of their values, published with the address. */
static uint64_t
tuning_id(void)
{
	const char	*v;
	uint64_t	 h = 0xcbf29ce484222325ULL;
	size_t		 i;

	for (i = 0; i < sizeof tuning_vars / sizeof tuning_vars[0]; i++) {
		v = getenv(tuning_vars[i]);
		h = fnv(fnv(h, tuning_vars[i]), v != NULL ? v : "-");
		h = fnv(h, ";");
	}
	return (h);
}

/* Identifies this host (and boot): ranks with the same id share memory. */
static void
host_id(char *buf, size_t len)
{
	char	host[256] = "", boot[64] = "";
	int	fd;
	ssize_t	n;

	gethostname(host, sizeof host - 1);
	if ((fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY |
	    O_CLOEXEC)) != -1) {
		if ((n = read(fd, boot, sizeof boot - 1)) > 0)
			boot[n] = '\0';
		close(fd);
		boot[strcspn(boot, "\n")] = '\0';
	}
	snprintf(buf, len, "%s/%s", host, boot);
}

/* The hello that opens each connection: version, communicator, rank. */
static void
hello_put(uint8_t *h, uint64_t cid, int rank)
{
	le64_put(h, (uint64_t)HELLO_MAGIC | ((uint64_t)1 << 32));
	le64_put(h + 8, cid);
	le64_put(h + 16, (uint64_t)rank);
}

/* Returns the rank a hello names, or -1 when it is not for us. */
static int
hello_rank(const uint8_t *h, uint64_t cid, int n)
{
	uint64_t	r;

	if (le64_get(h) != ((uint64_t)HELLO_MAGIC | ((uint64_t)1 << 32)) ||
	    le64_get(h + 8) != cid)
		return (-1);
	r = le64_get(h + 16);
	return (r < (uint64_t)n ? (int)r : -1);
}

/* The end of the next bootstrap slice (BOOT_SLICE_MS), at most deadline. */
static int64_t
boot_slice(int64_t deadline)
{
	int64_t	end = mono_ms() + BOOT_SLICE_MS;

	return (end < deadline ? end : deadline);
}

static int
cpu_connect_all(struct rdzv_comm *c, struct cpu *cpu, int lfd,
    char (*hosts)[96], char (*addrs)[RDZV_HOST_MAX], int *ports,
    uint64_t cid, int64_t deadline)
{
	uint8_t	 h[HELLO_LEN];
	int64_t	 hdl;
	int	 j, fd, rc, got, peer;

	/* Lower ranks: we connect and introduce ourselves. */
	for (j = 0; j < cpu->rank; j++) {
		/* Refused or unanswered: the peer may still be starting, or
		 * a newer round broke this one. */
		while ((rc = net_connect(addrs[j], ports[j], 1,
		    boot_slice(deadline), &fd)) != 0 && (rc == RDZV_ECONN ||
		    rc == RDZV_ETIMEDOUT) && deadline_left(deadline) > 0 &&
		    comm_broken(c) == 0)
			;
		if (rc != 0)
			return (comm_broken(c) != 0 ? comm_broken(c) :
			    comm_note(c, rc, "cannot connect to rank %d at %s "
			    "port %d: %s", j, addrs[j], ports[j],
			    rdzv_strerror(rc)));
		hello_put(h, cid, cpu->rank);
		if ((rc = net_write_all(fd, h, sizeof h, deadline)) != 0) {
			close(fd);
			return (comm_note(c, rc, "hello to rank %d: %s",
			    j, rdzv_strerror(rc)));
		}
		cpu->links[j].fd = fd;
	}
	/* Higher ranks: they connect to us, in any order. */
	for (got = 0; got < cpu->n - 1 - cpu->rank; ) {
		if ((rc = comm_broken(c)) != 0)
			return (rc);
		if ((rc = net_poll1(lfd, POLLIN, boot_slice(deadline))) == 0 &&
		    deadline_left(deadline) > 0)
			continue;
		if (rc <= 0)
			return (comm_note(c, rc == 0 ? RDZV_ETIMEDOUT : rc,
			    "waiting for %d higher ranks to connect: %s",
			    cpu->n - 1 - cpu->rank - got,
			    rc == 0 ? "timed out" : rdzv_strerror(rc)));
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1)
			continue;
		/* A stray connection must not hold up the others: its hello
		 * gets a few seconds, not the whole bootstrap. */
		hdl = mono_ms() + HELLO_MS;
		if (net_read_all(fd, h, sizeof h, hdl < deadline ? hdl :
		    deadline) != 0 || (peer = hello_rank(h, cid, cpu->n)) < 0) {
			close(fd);	/* a stray connection: not ours */
			continue;
		}
		if (peer <= cpu->rank ||
		    cpu->links[peer].fd != -1) {
			close(fd);
			continue;
		}
		cpu->links[peer].fd = fd;
		got++;
	}
	for (j = 0; j < cpu->n; j++) {
		if (j == cpu->rank)
			continue;
		cpu->links[j].same_host = strcmp(hosts[j],
		    hosts[cpu->rank]) == 0;
	}
	return (0);
}

static int
cpu_init(struct rdzv_comm *c)
{
	struct cpu	 *cpu;
	char		  key[128], rec[RDZV_HOST_MAX + 160], myhost[96];
	char		(*hosts)[96] = NULL, (*addrs)[RDZV_HOST_MAX] = NULL;
	const char	 *addr, *v;
	void		 *val;
	size_t		  len;
	int		 *ports = NULL, lfd = -1, port, rc, j, same, before;
	int		  shm, shm_all = 1;
	unsigned long long tid;
	int64_t		  deadline = mono_ms() + c->init_timeout_ms;
	uint64_t	  cid;

	if ((cpu = calloc(1, sizeof *cpu)) == NULL)
		return (RDZV_ENOMEM);
	c->be = cpu;
	cpu->comm = c;
	cpu->n = c->size;
	cpu->rank = c->rank;
	cpu->chunk = CHUNK_DEFAULT;
	cpu->direct_max = DIRECT_DEFAULT;
	cpu->use_shm = 1;
	/* A multiple of 64: whole elements of every type (cpu_coll.c). */
	if ((v = getenv("RDZV_CPU_CHUNK")) != NULL && atoi(v) >= 4096)
		cpu->chunk = (size_t)atoi(v) & ~(size_t)63;
	if ((v = getenv("RDZV_CPU_DIRECT_MAX")) != NULL && atoi(v) >= 0)
		cpu->direct_max = (size_t)atoi(v);
	cpu->direct_ranks = DIRECT_RANKS_MAX;
	if ((v = getenv("RDZV_CPU_DIRECT_RANKS")) != NULL && atoi(v) >= 1 &&
	    atoi(v) <= DIRECT_RANKS_MAX)
		cpu->direct_ranks = atoi(v);
	if ((v = getenv("RDZV_SHM")) != NULL && strcmp(v, "0") == 0)
		cpu->use_shm = 0;
	cpu->links = calloc((size_t)cpu->n, sizeof *cpu->links);
	cpu->pfd = calloc((size_t)cpu->n * 2 + 4, sizeof *cpu->pfd);
	cpu->stamp = calloc((size_t)cpu->n * 2, sizeof *cpu->stamp);
	if (cpu->links == NULL || cpu->pfd == NULL || cpu->stamp == NULL)
		return (RDZV_ENOMEM);
	for (j = 0; j < cpu->n; j++)
		cpu->links[j].fd = -1;
	if (cpu->n == 1)
		return (0);

	hosts = calloc((size_t)cpu->n, sizeof *hosts);
	addrs = calloc((size_t)cpu->n, sizeof *addrs);
	ports = calloc((size_t)cpu->n, sizeof *ports);
	if (hosts == NULL || addrs == NULL || ports == NULL) {
		rc = RDZV_ENOMEM;
		goto out;
	}
	/* Where the others reach us: the interface that reaches the store,
	 * unless the operator names one. */
	addr = getenv("RDZV_WORKER_ADDR");
	if (addr == NULL || *addr == '\0')
		addr = wstore_local_addr(c->store);
	if (*addr == '\0')
		addr = "127.0.0.1";
	if ((rc = net_listen(strchr(addr, ':') != NULL ? "::" : "0.0.0.0", 0, 1,
	    &lfd, &port)) != 0) {
		comm_note(c, rc, "cannot listen: %s", rdzv_strerror(rc));
		goto out;
	}
	host_id(myhost, sizeof myhost);
	snprintf(key, sizeof key, "%s/cpu/%d", c->keypfx, c->rank);
	snprintf(rec, sizeof rec, "%s %d %s %d %016llx", addr, port, myhost,
	    cpu->use_shm, (unsigned long long)tuning_id());
	if ((rc = wstore_set(c->store, key, rec, strlen(rec),
	    deadline_left(deadline))) != 0) {
		comm_note(c, rc, "publishing the address: %s",
		    rdzv_strerror(rc));
		goto out;
	}
	for (j = 0; j < cpu->n; j++) {
		snprintf(key, sizeof key, "%s/cpu/%d", c->keypfx, j);
		if ((rc = wstore_get(c->store, key, &val, &len,
		    deadline_left(deadline))) != 0) {
			comm_note(c, rc, "waiting for rank %d's address: "
			    "%s", j, rdzv_strerror(rc));
			goto out;
		}
		if (sscanf(val, "%255s %d %95s %d %llx", addrs[j], &ports[j],
		    hosts[j], &shm, &tid) != 5) {
			free(val);
			rc = comm_note(c, RDZV_EPROTO, "rank %d published "
			    "a malformed address", j);
			goto out;
		}
		free(val);
		/* Every rank must pick the same algorithm for each call. */
		if (tid != (unsigned long long)tuning_id()) {
			rc = comm_note(c, RDZV_EINVAL, "rank %d has other "
			    "RDZV_CPU_* or RDZV_SHM_* settings than rank %d: "
			    "they must be the same on every rank", j,
			    cpu->rank);
			goto out;
		}
		/* Shared memory only if every rank is willing (RDZV_SHM). */
		shm_all &= shm != 0;
	}
	/* Local rank and size when the launcher did not say: by host. */
	same = before = 0;
	for (j = 0; j < cpu->n; j++)
		if (strcmp(hosts[j], myhost) == 0) {
			same++;
			before += j < cpu->rank;
		}
	if (c->local_rank < 0 || c->local_size < 0) {
		c->local_rank = before;
		c->local_size = same;
	}
	cid = fnv(fnv(fnv(0xcbf29ce484222325ULL, c->env.ns),
	    c->env.master_addr), c->keypfx);
	cid ^= (uint64_t)c->env.master_port << 32;
	if ((rc = cpu_connect_all(c, cpu, lfd, hosts, addrs, ports, cid,
	    deadline)) != 0)
		goto out;
	if (same == cpu->n && shm_all) {
		/* Every rank on this host: collectives go through memory.
		 * A failure here only costs speed. */
		snprintf(key, sizeof key, "%016llx", (unsigned long long)cid);
		if ((rc = shm_setup(cpu, key)) != 0) {
			comm_log(c, RDZV_LOG_WARN, "shared memory unavailable "
			    "(%s): collectives use TCP", rdzv_strerror(rc));
			if (comm_broken(c))
				goto out;
			rc = 0;
		}
	}
out:
	if (lfd != -1)
		close(lfd);
	free(hosts);
	free(addrs);
	free(ports);
	return (rc);
}

static void
cpu_fini(struct rdzv_comm *c)
{
	struct cpu	*cpu = cpu_of(c);
	int		 j;

	if (cpu == NULL)
		return;
	if (cpu->links != NULL)
		for (j = 0; j < cpu->n; j++)
			if (cpu->links[j].fd != -1)
				close(cpu->links[j].fd);
	if (cpu->shm != NULL)
		shm_free(cpu->shm);
	free(cpu->links);
	free(cpu->pfd);
	free(cpu->stamp);
	free(cpu->tmp);
	free(cpu);
	c->be = NULL;
}

static void
cpu_abort(struct rdzv_comm *c)
{
	struct cpu	*cpu = cpu_of(c);
	int		 j;

	if (cpu == NULL || cpu->links == NULL)
		return;
	/* shutdown, not close: another thread may be polling these fds. */
	for (j = 0; j < cpu->n; j++)
		if (cpu->links[j].fd != -1)
			shutdown(cpu->links[j].fd, SHUT_RDWR);
	if (cpu->shm != NULL)
		shm_abort(cpu->shm);
}

/* ---- CUDA device buffers, staged through host memory ---- */

int
cpu_is_device_ptr(const void *p)
{
#ifdef HAVE_CUDA
	return (gpulib_mem_type(p) == cudaMemoryTypeDevice);
#else
	(void)p;
	return (0);
#endif
}

#ifdef HAVE_CUDA
/* A host copy of a device buffer (or p itself for host memory). */
struct stage {
	void	*dev;
	void	*host;
	size_t	 len;
};

static int
stage_in(struct rdzv_comm *c, struct stage *s, const void *p, size_t len,
    int copy)
{
	s->dev = NULL;
	s->host = (void *)p;
	s->len = len;
	if (len == 0 || !cpu_is_device_ptr(p))
		return (0);
	if ((s->host = malloc(len)) == NULL)
		return (RDZV_ENOMEM);
	s->dev = (void *)p;
	if (copy && cudart.cudaMemcpy(s->host, p, len, cudaMemcpyDeviceToHost)
	    != cudaSuccess) {
		free(s->host);
		s->host = NULL;
		return (comm_fail(c, RDZV_EIO, "cudaMemcpy to host failed"));
	}
	return (0);
}

static int
stage_out(struct rdzv_comm *c, struct stage *s, int copy, int rc)
{
	if (s->dev == NULL)
		return (rc);
	if (rc == 0 && copy && cudart.cudaMemcpy(s->dev, s->host, s->len,
	    cudaMemcpyHostToDevice) != cudaSuccess)
		rc = comm_fail(c, RDZV_EIO, "cudaMemcpy to device failed");
	free(s->host);
	return (rc);
}
#endif

/*
 * The backend entries: with CUDA, device buffers are copied to host
 * memory, the collective runs there, and results are copied back.
 */
#ifdef HAVE_CUDA
#define STAGE2(c, sb, sl, rb, rl, call) do {				\
	struct stage	ss, rs;						\
	int		srv, inplace = (sb) == (rb);			\
	if ((srv = stage_in(c, &ss, sb, sl, 1)) != 0)			\
		return (srv);						\
	if (inplace)							\
		rs = ss;						\
	else if ((srv = stage_in(c, &rs, rb, rl, 0)) != 0)		\
		return (stage_out(c, &ss, 0, srv));			\
	srv = (call);							\
	if (!inplace)							\
		srv = stage_out(c, &ss, 0, srv);			\
	return (stage_out(c, &rs, 1, srv));				\
} while (0)
#define SB	ss.host
#define RB	rs.host
#else
#define STAGE2(c, sb, sl, rb, rl, call)	return (call)
#define SB	sbuf
#define RB	rbuf
#endif

static int
e_allreduce(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int64_t dl)
{
	size_t	b = count * rdzv_dtype_size(dt);

	STAGE2(c, sbuf, b, rbuf, b,
	    cpu_allreduce(c, SB, RB, count, dt, op, dl));
}

static int
e_broadcast(struct rdzv_comm *c, void *rbuf, size_t count,
    enum rdzv_dtype dt, int root, int64_t dl)
{
	size_t	b = count * rdzv_dtype_size(dt);
	void	*sbuf = rbuf;

	STAGE2(c, sbuf, b, rbuf, b, cpu_broadcast(c, RB, count, dt, root, dl));
}

static int
e_reduce(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int root, int64_t dl)
{
	size_t	b = count * rdzv_dtype_size(dt);

	STAGE2(c, sbuf, b, rbuf, c->rank == root ? b : 0,
	    cpu_reduce(c, SB, RB, count, dt, op, root, dl));
}

static int
e_allgather(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int64_t dl)
{
	size_t	b = count * rdzv_dtype_size(dt);

	STAGE2(c, sbuf, b, rbuf, b * (size_t)c->size,
	    cpu_allgather(c, SB, RB, count, dt, dl));
}

static int
e_reduce_scatter(struct rdzv_comm *c, const void *sbuf, void *rbuf,
    size_t count, enum rdzv_dtype dt, enum rdzv_op op, int64_t dl)
{
	size_t	b = count * rdzv_dtype_size(dt);

	STAGE2(c, sbuf, b * (size_t)c->size, rbuf, b,
	    cpu_reduce_scatter(c, SB, RB, count, dt, op, dl));
}

static int
e_gather(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int root, int64_t dl)
{
	size_t	b = count * rdzv_dtype_size(dt);

	STAGE2(c, sbuf, b, rbuf, c->rank == root ? b * (size_t)c->size : 0,
	    cpu_gather(c, SB, RB, count, dt, root, dl));
}

static int
e_scatter(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int root, int64_t dl)
{
	size_t	b = count * rdzv_dtype_size(dt);

	STAGE2(c, sbuf, c->rank == root ? b * (size_t)c->size : 0, rbuf, b,
	    cpu_scatter(c, SB, RB, count, dt, root, dl));
}

static int
e_alltoall(struct rdzv_comm *c, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, int64_t dl)
{
	size_t	b = count * rdzv_dtype_size(dt) * (size_t)c->size;

	STAGE2(c, sbuf, b, rbuf, b, cpu_alltoall(c, SB, RB, count, dt, dl));
}


const struct backend_ops cpu_backend_ops = {
	.name = "cpu",
	.kind = RDZV_BACKEND_CPU,
	.init = cpu_init,
	.fini = cpu_fini,
	.abort = cpu_abort,
	.allreduce = e_allreduce,
	.broadcast = e_broadcast,
	.reduce = e_reduce,
	.allgather = e_allgather,
	.reduce_scatter = e_reduce_scatter,
	.gather = e_gather,
	.scatter = e_scatter,
	.alltoall = e_alltoall,
	.barrier = cpu_barrier,
	.p2p = cpu_p2p,
};
