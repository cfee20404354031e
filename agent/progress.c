/*
 * progress.c: the step counters workers report to their agent.
 *
 * Each worker of an attempt gets one end of its own SOCK_SEQPACKET
 * socket pair as fd RDZV_PROGRESS_FD (see sup_spawn); librdzvworker's
 * rdzv_report_progress() sends the step number on it as one decimal
 * datagram, at most every 100 ms.  The agent keeps the last step of each
 * local rank and when it came, for the failure summary and for the
 * --progress_timeout watchdog.  A datagram socket keeps each report whole
 * and tells the agent which worker sent it without parsing a rank; a
 * worker that never links the library simply never reports.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent.h"
#include "log.h"
#include "mono.h"
#include "rdzv_err.h"

struct progress_rank {
	int		 fd;		/* the agent's end, -1 when closed */
	int		 child_fd;	/* the worker's end until spawned */
	struct event	*ev;
	int		 seen;		/* a report came */
	uint64_t	 step;
	int64_t		 when;		/* mono_ms() of the last one */
};

static struct event_base	*progress_base;
static struct progress_rank	*progress_ranks;
static int			 progress_nranks;

static void
progress_read_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct progress_rank	*p = arg;
	char			 buf[32];
	const char		*errstr;
	long long		 step;
	ssize_t			 n;

	/* Drain everything queued; only the newest report matters. */
	for (;;) {
		n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* 0: every copy of the worker's end is closed. */
			if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
				event_del(p->ev);
			return;
		}
		buf[n] = '\0';
		step = strtonum(buf, 0, LLONG_MAX, &errstr);
		if (errstr != NULL) {
			log_debug("ignoring a malformed progress report");
			continue;
		}
		p->seen = 1;
		p->step = (uint64_t)step;
		p->when = mono_ms();
	}
}

void
progress_init(struct event_base *base)
{
	progress_base = base;
}

/* Closes the sockets of the attempt; the last reports stay readable. */
void
progress_end_attempt(void)
{
	int	i;

	for (i = 0; i < progress_nranks; i++) {
		struct progress_rank	*p = &progress_ranks[i];

		if (p->ev != NULL) {
			/* Read what a worker sent just before it exited. */
			progress_read_cb(p->fd, EV_READ, p);
			event_free(p->ev);
			p->ev = NULL;
		}
		if (p->fd != -1)
			close(p->fd);
		if (p->child_fd != -1)
			close(p->child_fd);
		p->fd = p->child_fd = -1;
	}
}

int
progress_attempt(int nproc)
{
	struct progress_rank	*p;
	int			 i, sv[2];

	progress_end_attempt();
	free(progress_ranks);
	progress_nranks = 0;
	if ((progress_ranks = calloc(nproc, sizeof *progress_ranks)) == NULL)
		return (RDZV_ENOMEM);
	progress_nranks = nproc;
	for (i = 0; i < nproc; i++)
		progress_ranks[i].fd = progress_ranks[i].child_fd = -1;
	for (i = 0; i < nproc; i++) {
		p = &progress_ranks[i];
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0,
		    sv) == -1) {
			log_warn("socketpair");
			return (RDZV_EIO);
		}
		(void)fcntl(sv[0], F_SETFL, O_NONBLOCK);
		/*
		 * A worker must never block on its agent: a full socket
		 * drops the report instead.
		 */
		(void)fcntl(sv[1], F_SETFL, O_NONBLOCK);
		p->fd = sv[0];
		p->child_fd = sv[1];
		p->ev = event_new(progress_base, p->fd, EV_READ | EV_PERSIST,
		    progress_read_cb, p);
		if (p->ev == NULL || event_add(p->ev, NULL) == -1)
			return (RDZV_ENOMEM);
	}
	return (0);
}

int
progress_child_fd(int local_rank)
{
	if (local_rank < 0 || local_rank >= progress_nranks)
		return (-1);
	return (progress_ranks[local_rank].child_fd);
}

void
progress_spawned(int local_rank)
{
	struct progress_rank	*p;

	if (local_rank < 0 || local_rank >= progress_nranks)
		return;
	p = &progress_ranks[local_rank];
	if (p->child_fd != -1)
		close(p->child_fd);
	p->child_fd = -1;
}

int
progress_get(int local_rank, uint64_t *step, int64_t *when)
{
	struct progress_rank	*p;

	if (local_rank < 0 || local_rank >= progress_nranks)
		return (RDZV_ENOTFOUND);
	p = &progress_ranks[local_rank];
	/* A report sent just before an exit may still be queued. */
	if (p->ev != NULL)
		progress_read_cb(p->fd, EV_READ, p);
	if (!p->seen)
		return (RDZV_ENOTFOUND);
	*step = p->step;
	*when = p->when;
	return (0);
}
