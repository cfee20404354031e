/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shm.c: the shared-memory arena of a communicator whose ranks all live
 * on one host, and the collectives that go through it instead of the
 * sockets: allreduce, broadcast, allgather, reduce_scatter and barrier.
 *
 * Layout of the segment (rank 0 creates it, reserves its pages with
 * posix_fallocate so a full /dev/shm is an error now rather than a
 * SIGBUS later, and unlinks it once every rank has it mapped):
 *
 *	struct shm_hdr			barrier counter and generation, abort
 *	struct shm_rank[n]		pid, buffer addresses (cross-memory
 *					attach), a probe word
 *	slot[rank][2]			SHM_SLOT bytes each
 *	res[rank][2]			SHM_SLOT / n (rounded up): results
 *
 * Every operation alternates the two slots of each rank by an operation
 * counter's parity, and every rank passes at least one barrier between
 * writing a slot and writing it again, so a write never races a reader of
 * the previous chunk or operation.
 *
 * Allreduce, by size:
 *   small	copy in, barrier, every rank reduces the whole message over
 *		all slots in rank order (same bits everywhere): one barrier;
 *   medium	cross-memory attach where the kernel allows it (probed at
 *		setup): inputs read straight out of the peers' buffers, see
 *		cma_allreduce();
 *   otherwise	in chunks of a slot, one barrier per chunk (from 8 MiB
 *		this beats cross-memory attach, whose page pinning and
 *		uncached reads cost more than the arena's extra copies: 64
 *		MiB at 2 and 4 ranks took 0.5x to 0.85x the time, 2026-11-23):
 *		  copy chunk 0 in; barrier
 *		  for each chunk k: reduce my 1/n of chunk k over all slots,
 *		    in rank order, into my result; copy chunk k+1 in;
 *		    barrier; copy every rank's result of chunk k out
 * The chunks stay in the shared cache, so each input byte is read from
 * memory once and each output byte written once (with streaming stores
 * for large messages).
 *
 * Waiting: spin briefly, then yield (only when every rank has a core of
 * its own), then sleep on a futex on the barrier generation.  Sleepers
 * wake every SHM_NAP_MS to check the deadline and their peers' sockets
 * (an EOF there means a peer died), so a dead rank breaks the
 * communicator within that nap; whoever breaks it sets the arena's abort
 * word and wakes everyone, so all ranks fail together.
 */
#include "config.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <linux/futex.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu.h"

#define SHM_MAGIC	0x52445a53484d3031ULL	/* "RDZSHM01" */
#define SHM_SLOT_DEFAULT (1u << 20)
#define SHM_SMALL_DEFAULT (32u << 10)	/* whole-message reduce up to */
#define SHM_NAP_MS	20
#define SHM_SPIN	4000
#define SHM_YIELDS	16
#define CACHELINE	64

struct shm_hdr {
	_Atomic uint64_t	 magic;		/* written last by rank 0 */
	uint32_t		 n;
	uint32_t		 slot;
	_Atomic uint32_t	 abort;
	char			 pad0[CACHELINE - 20];
	_Atomic uint32_t	 count;		/* arrivals at the barrier */
	char			 pad1[CACHELINE - 4];
	_Atomic uint32_t	 gen;		/* barrier generation: futex */
	_Atomic uint32_t	 sleepers;	/* waiters in FUTEX_WAIT */
	char			 pad2[CACHELINE - 8];
};

/* One per rank, after the header: what the others need to read from it
 * directly (cross-memory attach). */
struct shm_rank {
	_Atomic uint64_t	 pid;
	_Atomic uint64_t	 sbuf;		/* this op's buffers */
	_Atomic uint64_t	 rbuf;
	uint64_t		 probe;		/* CMA_PROBE, read by peers */
	char			 pad[CACHELINE - 32];
};

#define CMA_PROBE	0x434d4150524f4245ULL	/* "CMAPROBE" */
#define SHM_CMA_MIN_DEFAULT (256u << 10)
#define CMA_CHUNK	(128u << 10)
#define SHM_CMA_MAX_DEFAULT (8u << 20)
#define SHM_CMA_SEG_DEFAULT (1u << 20)
#define SHM_NT_MIN_DEFAULT (8u << 20)

struct shm_arena {
	struct shm_hdr	*hdr;
	struct shm_rank	*ranks;
	pid_t		*pids;		/* peers' pids, for process_vm_readv */
	size_t		 cma_min;	/* CMA allreduce from this size; 0 off */
	size_t		 cma_max;	/* ... below this size */
	size_t		 cma_seg;	/* bytes a rank reduces per window */
	size_t		 nt_min;	/* streaming stores from this size */
	uint8_t		*ctmp;		/* 2 * CMA_CHUNK scratch */
	uint8_t		*base;
	size_t		 size;
	int		 n;
	size_t		 slot;		/* bytes per input slot */
	size_t		 res;		/* bytes per result slot */
	size_t		 small;
	uint64_t	 parity;	/* op counter: selects buffers */
	int		 spin;		/* iterations before yielding */
	int		 yields;	/* sched_yield()s before sleeping */
};

static uint8_t *
slot_of(struct shm_arena *a, int rank, uint64_t par)
{
	return (a->base + ((size_t)rank * 2 + (par & 1)) * a->slot);
}

static uint8_t *
res_of(struct shm_arena *a, int rank, uint64_t par)
{
	return (a->base + (size_t)a->n * 2 * a->slot +
	    ((size_t)rank * 2 + (par & 1)) * a->res);
}

static size_t
align_up(size_t v, size_t a)
{
	return ((v + a - 1) / a * a);
}

static long
futex(_Atomic uint32_t *addr, int op, uint32_t val,
    const struct timespec *ts)
{
	/* Shared (not PRIVATE): the word lives in memory other processes
	 * map. */
	return (syscall(SYS_futex, addr, op, val, ts, NULL, 0));
}

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/*
 * Checks every peer's socket for a hang-up: a dead rank's sockets close.
 * Returns 0 or breaks the communicator.
 */
static int
peers_alive(struct cpu *cpu, const char *what)
{
	int	j, np = 0, k;

	for (j = 0; j < cpu->n; j++) {
		if (j == cpu->rank)
			continue;
		cpu->pfd[np].fd = cpu->links[j].fd;
		cpu->pfd[np].events = POLLRDHUP;
		cpu->pfd[np].revents = 0;
		np++;
	}
	if (poll(cpu->pfd, (nfds_t)np, 0) <= 0)
		return (0);
	for (k = 0; k < np; k++)
		if (cpu->pfd[k].revents & (POLLRDHUP | POLLHUP | POLLERR))
			break;
	if (k == np)
		return (0);
	for (j = 0; j < cpu->n; j++)
		if (cpu->links[j].fd == cpu->pfd[k].fd)
			break;
	return (comm_fail(cpu->comm, RDZV_ECONN, "%s: rank %d is gone "
	    "(its connection closed)", what, j));
}

static int	shm_barrier_meet(struct cpu *, int64_t, const char *);

/*
 * The barrier every rank of the arena meets at: returns 0 once every
 * rank has arrived, or breaks the communicator (a rank aborted, died, or
 * the deadline passed).  While it spins, yields or sleeps the rank counts
 * as waiting on its peers (comm_waiting).
 */
static int
shm_barrier_wait(struct cpu *cpu, int64_t deadline, const char *what)
{
	int	rc;

	rc = shm_barrier_meet(cpu, deadline, what);
	comm_waiting(cpu->comm, 0);
	return (rc);
}

static int
shm_barrier_meet(struct cpu *cpu, int64_t deadline, const char *what)
{
	struct shm_arena	*a = cpu->shm;
	struct shm_hdr		*h = a->hdr;
	struct timespec		 ts;
	uint32_t		 g;
	int			 i, rc;

	g = atomic_load_explicit(&h->gen, memory_order_acquire);
	if (atomic_fetch_add_explicit(&h->count, 1, memory_order_acq_rel) ==
	    (uint32_t)a->n - 1) {
		atomic_store_explicit(&h->count, 0, memory_order_relaxed);
		atomic_store_explicit(&h->gen, g + 1, memory_order_release);
		if (atomic_load(&h->sleepers) > 0)
			futex(&h->gen, FUTEX_WAKE, INT_MAX, NULL);
		return (0);
	}
	/* Waiting from here (spinning and yielding too): the time counts
	 * in the total progress reports carry, as a nap's does. */
	comm_waiting(cpu->comm, 1);
	/* A barrier that completed counts even if a rank aborts just
	 * after: the abort word is only looked at while still waiting. */
	for (i = 0; i < a->spin; i++) {
		if (atomic_load_explicit(&h->gen, memory_order_acquire) != g)
			return (0);
		if ((i & 255) == 255 && atomic_load(&h->abort))
			break;
		cpu_relax();
	}
	for (i = 0; i < a->yields && !atomic_load(&h->abort); i++) {
		if (atomic_load_explicit(&h->gen, memory_order_acquire) != g)
			return (0);
		sched_yield();
	}
	for (;;) {
		if (atomic_load_explicit(&h->gen, memory_order_acquire) != g)
			return (0);
		if (atomic_load(&h->abort) || comm_broken(cpu->comm))
			return (comm_fail(cpu->comm, RDZV_ECONN, "%s: "
			    "another rank broke the communicator", what));
		if (deadline_left(deadline) == 0)
			return (comm_fail(cpu->comm, RDZV_ETIMEDOUT, "%s: rank "
			    "%d timed out waiting for its peers", what,
			    cpu->rank));
		if ((rc = peers_alive(cpu, what)) != 0)
			return (rc);
		ts.tv_sec = 0;
		ts.tv_nsec = SHM_NAP_MS * 1000000L;
		atomic_fetch_add(&h->sleepers, 1);
		futex(&h->gen, FUTEX_WAIT, g, &ts);
		atomic_fetch_sub(&h->sleepers, 1);
	}
}

static void
wake_all(struct shm_arena *a)
{
	futex(&a->hdr->gen, FUTEX_WAKE, INT_MAX, NULL);
}

void
shm_abort(struct shm_arena *a)
{
	/* Waiters look at the abort word between naps and every few
	 * hundred spins; wake the sleepers so they look now.  The
	 * generation is left alone: it means "barrier complete". */
	atomic_store(&a->hdr->abort, 1);
	wake_all(a);
}

void
shm_free(struct shm_arena *a)
{
	if (a == NULL)
		return;
	if (a->hdr != NULL)
		munmap(a->hdr, a->size);
	free(a->pids);
	free(a->ctmp);
	free(a);
}

/* ---- setup ---- */

static size_t
shm_head_size(int n)
{
	return (align_up(sizeof(struct shm_hdr) +
	    (size_t)n * sizeof(struct shm_rank), 4096));
}

/* Copies len bytes at raddr in pid into dst; 0 or < 0. */
static int
cma_read(pid_t pid, void *dst, uint64_t raddr, size_t len)
{
	struct iovec	l, r;
	ssize_t		n;

	while (len > 0) {
		l.iov_base = dst;
		l.iov_len = len;
		r.iov_base = (void *)(uintptr_t)raddr;
		r.iov_len = len;
		n = process_vm_readv(pid, &l, 1, &r, 1, 0);
		if (n <= 0) {
			if (n == -1 && errno == EINTR)
				continue;
			return (errno == ESRCH ? RDZV_ECONN : RDZV_EIO);
		}
		dst = (uint8_t *)dst + n;
		raddr += (uint64_t)n;
		len -= (size_t)n;
	}
	return (0);
}

/*
 * Every rank publishes its pid and a probe word, then tries to read each
 * peer's word with process_vm_readv; the arena uses cross-memory attach
 * only when every rank could (the same answer everywhere, by an
 * allreduce-min through the barrier).
 */
static int
cma_probe(struct cpu *cpu, struct shm_arena *a, int64_t deadline)
{
	/* A private word: reading it really crosses into the peer. */
	static const uint64_t	 mine = CMA_PROBE;
	uint64_t		 v;
	int			 j, ok = 1, rc;

	/* Short of memory, this rank still takes part, answering no: every
	 * rank must come to the same choice. */
	if ((a->pids = calloc((size_t)a->n, sizeof *a->pids)) == NULL ||
	    (a->ctmp = malloc(3 * CMA_CHUNK)) == NULL)
		ok = 0;
	if (cpu->rank == 0)
		a->ranks[0].probe = CMA_PROBE;	/* the agreement word */
	atomic_store(&a->ranks[cpu->rank].pid, (uint64_t)getpid());
	atomic_store(&a->ranks[cpu->rank].rbuf, (uint64_t)(uintptr_t)&mine);
	if ((rc = shm_barrier_wait(cpu, deadline, "shm setup")) != 0)
		return (rc);
	for (j = 0; j < a->n && ok; j++) {
		a->pids[j] = (pid_t)atomic_load(&a->ranks[j].pid);
		v = 0;
		if (j != cpu->rank && (cma_read(a->pids[j], &v,
		    atomic_load(&a->ranks[j].rbuf), sizeof v) != 0 ||
		    v != CMA_PROBE))
			ok = 0;
	}
	/* Agree: anyone who failed clears the word, all read it after. */
	if (!ok)
		a->ranks[0].probe = 0;
	if ((rc = shm_barrier_wait(cpu, deadline, "shm setup")) != 0)
		return (rc);
	if (a->ranks[0].probe != CMA_PROBE)
		a->cma_min = 0;
	return (shm_barrier_wait(cpu, deadline, "shm setup"));
}

static int
env_size(const char *name, size_t dflt)
{
	const char	*v = getenv(name);
	long		 n;

	if (v == NULL || (n = atol(v)) <= 0)
		return ((int)dflt);
	return ((int)n);
}

int
shm_setup(struct cpu *cpu, const char *key)
{
	struct shm_arena	*a;
	char			 name[96];
	uint8_t			 ok = 0, verdict = 1, b;
	int64_t			 deadline = mono_ms() + 30000;
	long			 ncpu;
	int			 fd = -1, j, rc = RDZV_EIO;
	void			*p;

	if ((a = calloc(1, sizeof *a)) == NULL)
		return (RDZV_ENOMEM);
	a->n = cpu->n;
	a->slot = align_up((size_t)env_size("RDZV_SHM_SLOT",
	    SHM_SLOT_DEFAULT), 4096);
	/* reduce_scatter splits a slot n ways: keep a share >= 64 bytes. */
	if (a->slot < align_up((size_t)a->n * 64, 4096))
		a->slot = align_up((size_t)a->n * 64, 4096);
	a->small = (size_t)env_size("RDZV_SHM_SMALL", SHM_SMALL_DEFAULT);
	if (a->small > a->slot)
		a->small = a->slot;
	a->res = align_up(a->slot / (size_t)a->n + 64, 4096);
	a->size = shm_head_size(a->n);
	a->size += (size_t)a->n * 2 * (a->slot + a->res);
	/* Spinning only pays when every rank has a core of its own. */
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	a->spin = ncpu >= cpu->n + 1 ? SHM_SPIN : SHM_SPIN / 16;
	/* Oversubscribed, a yield can hand the core to an unrelated
	 * process for a whole slice: sleep at once instead. */
	a->yields = ncpu >= cpu->n + 1 ? SHM_YIELDS : 0;
	if (getenv("RDZV_SHM_SPIN") != NULL)
		a->spin = atoi(getenv("RDZV_SHM_SPIN"));
	if (getenv("RDZV_SHM_YIELDS") != NULL)
		a->yields = atoi(getenv("RDZV_SHM_YIELDS"));
	snprintf(name, sizeof name, "/rdzvw-%s-%d", key, (int)getpid());

	if (cpu->rank == 0) {
		/* The name travels to the others with the verdict. */
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
		    0600);
		if (fd != -1 && posix_fallocate(fd, 0, (off_t)a->size) == 0 &&
		    (p = mmap(NULL, a->size, PROT_READ | PROT_WRITE,
		    MAP_SHARED, fd, 0)) != MAP_FAILED) {
			a->hdr = p;
			a->hdr->n = (uint32_t)a->n;
			a->hdr->slot = (uint32_t)a->slot;
			atomic_store(&a->hdr->magic, SHM_MAGIC);
			ok = 1;
		}
		for (j = 1; j < cpu->n; j++) {
			struct { uint8_t ok; char name[95]; } m;

			memset(&m, 0, sizeof m);
			m.ok = ok;
			strlcpy(m.name, name, sizeof m.name);
			if ((rc = net_write_all(cpu->links[j].fd, &m, sizeof m,
			    deadline)) != 0)
				goto fail;
		}
		/* Everyone answers whether it could map it. */
		for (j = 1; j < cpu->n; j++) {
			if ((rc = net_read_all(cpu->links[j].fd, &b, 1,
			    deadline)) != 0)
				goto fail;
			verdict &= b & ok;
		}
		verdict &= ok;
		for (j = 1; j < cpu->n; j++)
			if ((rc = net_write_all(cpu->links[j].fd, &verdict, 1,
			    deadline)) != 0)
				goto fail;
		if (fd != -1) {
			shm_unlink(name);	/* mapped everywhere (or not) */
			close(fd);
			fd = -1;
		}
	} else {
		struct { uint8_t ok; char name[95]; } m;

		if ((rc = net_read_all(cpu->links[0].fd, &m, sizeof m,
		    deadline)) != 0)
			goto fail;
		m.name[sizeof m.name - 1] = '\0';
		if (m.ok && (fd = shm_open(m.name, O_RDWR | O_CLOEXEC, 0)) !=
		    -1 && (p = mmap(NULL, a->size, PROT_READ | PROT_WRITE,
		    MAP_SHARED, fd, 0)) != MAP_FAILED) {
			a->hdr = p;
			ok = atomic_load(&a->hdr->magic) == SHM_MAGIC &&
			    a->hdr->n == (uint32_t)a->n &&
			    a->hdr->slot == (uint32_t)a->slot;
		}
		if (fd != -1)
			close(fd);
		fd = -1;
		if ((rc = net_write_all(cpu->links[0].fd, &ok, 1,
		    deadline)) != 0 ||
		    (rc = net_read_all(cpu->links[0].fd, &verdict, 1,
		    deadline)) != 0)
			goto fail;
	}
	if (!verdict) {
		rc = RDZV_EIO;
		goto fail;
	}
	a->base = (uint8_t *)a->hdr + shm_head_size(a->n);
	a->ranks = (struct shm_rank *)((uint8_t *)a->hdr +
	    sizeof(struct shm_hdr));
	cpu->shm = a;
	/* Cross-memory attach, where the kernel lets us: one copy instead
	 * of three for large messages. */
	a->cma_min = (size_t)env_size("RDZV_SHM_CMA_MIN", SHM_CMA_MIN_DEFAULT);
	if (getenv("RDZV_SHM_CMA") != NULL &&
	    strcmp(getenv("RDZV_SHM_CMA"), "0") == 0)
		a->cma_min = 0;
	a->cma_max = (size_t)env_size("RDZV_SHM_CMA_MAX", SHM_CMA_MAX_DEFAULT);
	/* A window's results live in the arena's slots. */
	a->cma_seg = align_up((size_t)env_size("RDZV_SHM_CMA_SEG",
	    SHM_CMA_SEG_DEFAULT), 64);
	if (a->cma_seg > a->slot)
		a->cma_seg = a->slot;
	a->nt_min = (size_t)env_size("RDZV_SHM_NT_MIN", SHM_NT_MIN_DEFAULT);
	if (a->cma_min > 0 && (rc = cma_probe(cpu, a, deadline)) != 0)
		return (rc);
	return (0);
fail:
	if (fd != -1) {
		shm_unlink(name);
		close(fd);
	}
	if (rc != 0 && rc != RDZV_EIO)
		comm_fail(cpu->comm, rc, "shared memory handshake: %s",
		    rdzv_strerror(rc));
	shm_free(a);
	return (rc);
}

/* ---- collectives ---- */

/*
 * Copies len bytes with streaming (non-temporal) stores where the CPU has
 * them: the destination is not read back into the cache first, which
 * saves a third of the memory traffic of a large copy.  Only for large
 * messages, whose results would not fit in the cache anyway.
 */
static void
copy_nt(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__) && defined(__SSE2__)
	uint8_t		*d = dst;
	const uint8_t	*s = src;
	size_t		 head;

	head = (16 - ((uintptr_t)d & 15)) & 15;
	if (len < 256 || head > len) {
		memcpy(dst, src, len);
		return;
	}
	memcpy(d, s, head);
	d += head;
	s += head;
	len -= head;
	for (; len >= 64; len -= 64, d += 64, s += 64) {
		__m128i	a = _mm_loadu_si128((const __m128i *)s);
		__m128i	b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i	c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i	e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, len);
	_mm_sfence();
#else
	memcpy(dst, src, len);
#endif
}

/*
 * Allreduce by cross-memory attach: inputs are read straight out of the
 * peers' memory, so nothing is copied into the arena first.  The message
 * goes in windows of n * cma_seg bytes.  In each window, rank r reduces
 * segment r by reading it out of every peer's send buffer (in chunks
 * that stay in the cache, in rank order) into its arena slot; all ranks
 * meet at a barrier; then each copies every rank's reduced segment out of
 * the arena (still in the shared cache) into its receive buffer, and goes
 * on.  A first barrier publishes the buffers; a last one keeps every rank
 * in until no peer reads its send buffer any more.  Each input byte
 * comes from memory once and each output byte goes back once.
 */
static int
cma_allreduce(struct cpu *cpu, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	struct shm_arena	*a = cpu->shm;
	reduce3_fn		 red = reduce3_get(dt, op);
	size_t			 es = rdzv_dtype_size(dt), per = CMA_CHUNK / es;
	size_t			 wcount, woff, wlen, base, rem, off, len, c, m;
	size_t			 nwin, k;
	uint8_t			*tA = a->ctmp, *tB = a->ctmp + CMA_CHUNK, *res;
	const uint8_t		*own, *p0 = NULL, *pj;
	uint64_t		 par = a->parity;
	int			 j, rc, me = cpu->rank, n = a->n;
	int			 nt = count * es >= a->nt_min;

	wcount = a->cma_seg / es * (size_t)n;
	nwin = (count + wcount - 1) / wcount;
	a->parity += nwin;
	atomic_store(&a->ranks[me].sbuf, (uint64_t)(uintptr_t)sbuf);
	if ((rc = shm_barrier_wait(cpu, deadline, "allreduce")) != 0)
		return (rc);
	for (k = 0, woff = 0; k < nwin; k++, woff += wlen) {
		wlen = count - woff < wcount ? count - woff : wcount;
		base = wlen / (size_t)n;
		rem = wlen % (size_t)n;
#define SEG_OFF(j) ((size_t)(j) * base + \
	    ((size_t)(j) < rem ? (size_t)(j) : rem))
#define SEG_LEN(j) (base + ((size_t)(j) < rem))
		off = woff + SEG_OFF(me);
		len = SEG_LEN(me);
		res = slot_of(a, me, par + k);
		for (c = 0; c < len; c += m) {
			uint8_t	*acc = res + c * es;

			m = len - c < per ? len - c : per;
			own = (const uint8_t *)sbuf + (off + c) * es;
			for (j = 0; j < n; j++) {
				if (j == me)
					pj = own;
				else {
					pj = j == 0 ? tA : tB;
					rc = cma_read(a->pids[j], (void *)pj,
					    atomic_load(&a->ranks[j].sbuf) +
					    (off + c) * es, m * es);
					if (rc != 0)
						return (comm_fail(cpu->comm, rc,
						    "allreduce: reading rank "
						    "%d's buffer failed", j));
				}
				if (j == 0)
					p0 = pj;
				else if (j == 1)
					red(acc, p0, pj, m);
				else
					red(acc, acc, pj, m);
			}
			if (op == RDZV_AVG)
				reduce_avg_finish(acc, m, dt, n);
		}
		if ((rc = shm_barrier_wait(cpu, deadline, "allreduce")) != 0)
			return (rc);
		for (j = 0; j < n; j++) {
			uint8_t	*dst = (uint8_t *)rbuf +
			    (woff + SEG_OFF(j)) * es;

			if (nt)
				copy_nt(dst, slot_of(a, j, par + k),
				    SEG_LEN(j) * es);
			else
				memcpy(dst, slot_of(a, j, par + k),
				    SEG_LEN(j) * es);
		}
#undef SEG_OFF
#undef SEG_LEN
	}
	return (shm_barrier_wait(cpu, deadline, "allreduce"));
}

int
shm_allreduce(struct cpu *cpu, const void *sbuf, void *rbuf, size_t count,
    enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	struct shm_arena	*a = cpu->shm;
	reduce3_fn		 red = reduce3_get(dt, op);
	size_t			 es = rdzv_dtype_size(dt), bytes = count * es;
	size_t			 per, off, len, nchunk, k, pe, po, pl;
	uint64_t		 par = a->parity;
	int			 j, rc, n = a->n, me = cpu->rank;
	int			 nt = bytes >= a->nt_min;

	if (a->cma_min > 0 && bytes >= a->cma_min && bytes < a->cma_max)
		return (cma_allreduce(cpu, sbuf, rbuf, count, dt, op,
		    deadline));
	if (bytes <= a->small) {
		/* One barrier; every rank reduces all of it, in rank order. */
		memcpy(slot_of(a, me, par), sbuf, bytes);
		a->parity++;
		if ((rc = shm_barrier_wait(cpu, deadline, "allreduce")) != 0)
			return (rc);
		red(rbuf, slot_of(a, 0, par), slot_of(a, 1, par), count);
		for (j = 2; j < n; j++)
			red(rbuf, rbuf, slot_of(a, j, par), count);
		if (op == RDZV_AVG)
			reduce_avg_finish(rbuf, count, dt, n);
		return (0);
	}

	per = a->slot / es;			/* elements per chunk */
	nchunk = (count + per - 1) / per;
	a->parity += nchunk;
	memcpy(slot_of(a, me, par), sbuf, (count < per ? count : per) * es);
	if ((rc = shm_barrier_wait(cpu, deadline, "allreduce")) != 0)
		return (rc);
	for (k = 0; k < nchunk; k++) {
		off = k * per;
		len = count - off < per ? count - off : per;
		/* My part of the chunk: elements [po, po + pl). */
		pe = (len + (size_t)n - 1) / (size_t)n;
		po = pe * (size_t)me;
		pl = po >= len ? 0 : (len - po < pe ? len - po : pe);
		if (pl > 0) {
			uint8_t	*dst = res_of(a, me, par + k);

			red(dst, slot_of(a, 0, par + k) + po * es,
			    slot_of(a, 1, par + k) + po * es, pl);
			for (j = 2; j < n; j++)
				red(dst, dst, slot_of(a, j, par + k) + po * es,
				    pl);
			if (op == RDZV_AVG)
				reduce_avg_finish(dst, pl, dt, n);
		}
		if (k + 1 < nchunk) {
			size_t	noff = off + per;
			size_t	nlen = count - noff < per ? count - noff : per;

			memcpy(slot_of(a, me, par + k + 1),
			    (const uint8_t *)sbuf + noff * es, nlen * es);
		}
		if ((rc = shm_barrier_wait(cpu, deadline, "allreduce")) != 0)
			return (rc);
		for (j = 0; j < n; j++) {
			size_t	qo = pe * (size_t)j;
			size_t	ql = qo >= len ? 0 :
			    (len - qo < pe ? len - qo : pe);

			if (ql == 0)
				continue;
			if (nt)
				copy_nt((uint8_t *)rbuf + (off + qo) * es,
				    res_of(a, j, par + k), ql * es);
			else
				memcpy((uint8_t *)rbuf + (off + qo) * es,
				    res_of(a, j, par + k), ql * es);
		}
	}
	return (0);
}

/*
 * Allgather through the slots: in chunks of a slot, each rank copies its
 * block's chunk in, all meet, each copies every rank's chunk out.  One
 * barrier per chunk (slots alternate by parity).
 */
int
shm_allgather(struct cpu *cpu, const void *sbuf, void *rbuf, size_t bytes,
    int64_t deadline)
{
	struct shm_arena	*a = cpu->shm;
	uint64_t		 par = a->parity;
	size_t			 nchunk, k, off, len;
	int			 j, rc;

	nchunk = (bytes + a->slot - 1) / a->slot;
	a->parity += nchunk;
	for (k = 0; k < nchunk; k++) {
		off = k * a->slot;
		len = bytes - off < a->slot ? bytes - off : a->slot;
		memcpy(slot_of(a, cpu->rank, par + k),
		    (const uint8_t *)sbuf + off, len);
		if ((rc = shm_barrier_wait(cpu, deadline, "allgather")) != 0)
			return (rc);
		for (j = 0; j < a->n; j++) {
			uint8_t	*dst = (uint8_t *)rbuf + (size_t)j * bytes + off;

			if (j != cpu->rank || dst != (const uint8_t *)sbuf + off)
				memcpy(dst, slot_of(a, j, par + k), len);
		}
	}
	return (0);
}

/*
 * Reduce-scatter through the slots: in windows of a slot, each rank
 * copies the same stretch of all n blocks of its input into its slot, all
 * meet, and rank r reduces stretch r over every slot, in rank order,
 * straight into its output.  One barrier per window.
 */
int
shm_reduce_scatter(struct cpu *cpu, const void *sbuf, void *rbuf,
    size_t count, enum rdzv_dtype dt, enum rdzv_op op, int64_t deadline)
{
	struct shm_arena	*a = cpu->shm;
	reduce3_fn		 red = reduce3_get(dt, op);
	size_t			 es = rdzv_dtype_size(dt), bytes = count * es;
	size_t			 w = a->slot / (size_t)a->n / es * es;
	size_t			 nwin, k, off, len;
	uint64_t		 par = a->parity;
	uint8_t			*out;
	int			 j, rc, me = cpu->rank;

	nwin = (bytes + w - 1) / w;
	a->parity += nwin;
	for (k = 0; k < nwin; k++) {
		off = k * w;
		len = bytes - off < w ? bytes - off : w;
		for (j = 0; j < a->n; j++)
			memcpy(slot_of(a, me, par + k) + (size_t)j * w,
			    (const uint8_t *)sbuf + (size_t)j * bytes + off,
			    len);
		if ((rc = shm_barrier_wait(cpu, deadline,
		    "reduce_scatter")) != 0)
			return (rc);
		out = (uint8_t *)rbuf + off;
		red(out, slot_of(a, 0, par + k) + (size_t)me * w,
		    slot_of(a, 1, par + k) + (size_t)me * w, len / es);
		for (j = 2; j < a->n; j++)
			red(out, out, slot_of(a, j, par + k) + (size_t)me * w,
			    len / es);
		if (op == RDZV_AVG)
			reduce_avg_finish(out, len / es, dt, a->n);
	}
	return (0);
}

int
shm_broadcast(struct cpu *cpu, void *buf, size_t bytes, int root,
    int64_t deadline)
{
	struct shm_arena	*a = cpu->shm;
	uint64_t		 par = a->parity;
	size_t			 nchunk, k, off, len;
	int			 rc;

	if (a->cma_min > 0 && bytes >= a->cma_min) {
		/* Everyone reads the root's buffer directly. */
		atomic_store(&a->ranks[cpu->rank].rbuf, (uint64_t)(uintptr_t)buf);
		if ((rc = shm_barrier_wait(cpu, deadline, "broadcast")) != 0)
			return (rc);
		if (cpu->rank != root && (rc = cma_read(a->pids[root], buf,
		    atomic_load(&a->ranks[root].rbuf), bytes)) != 0)
			return (comm_fail(cpu->comm, rc, "broadcast: reading "
			    "rank %d's buffer failed", root));
		return (shm_barrier_wait(cpu, deadline, "broadcast"));
	}
	nchunk = (bytes + a->slot - 1) / a->slot;
	a->parity += nchunk;
	for (k = 0; k < nchunk; k++) {
		off = k * a->slot;
		len = bytes - off < a->slot ? bytes - off : a->slot;
		if (cpu->rank == root)
			memcpy(slot_of(a, root, par + k),
			    (uint8_t *)buf + off, len);
		if ((rc = shm_barrier_wait(cpu, deadline, "broadcast")) != 0)
			return (rc);
		if (cpu->rank != root)
			memcpy((uint8_t *)buf + off,
			    slot_of(a, root, par + k), len);
	}
	return (0);
}

int
shm_barrier(struct cpu *cpu, int64_t deadline)
{
	return (shm_barrier_wait(cpu, deadline, "barrier"));
}
