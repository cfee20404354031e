/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress.c: the two-way channel between the agent and each worker.
 *
 * Each worker gets one end of its own SOCK_SEQPACKET socket pair as fd
 * RDZV_PROGRESS_FD (see sup_spawn); a datagram socket keeps each message
 * whole and tells the agent which worker sent it without parsing a rank.
 * A worker sends its step as one decimal datagram (librdzvworker's
 * rdzv_report_progress(), at most every 100 ms), "hello repair=1" when it
 * can repair in place, "ready" when it is a replacement done with its
 * start-up, and "wait" (about once a second) while a collective call of
 * its waits on its peers; the agent sends it "round ..." and "stop" (common/chan.c
 * has the grammar).  The agent keeps the last step of each local rank and when
 * it came, for the failure summary and the --progress_timeout watchdog,
 * when it last said it waits on its peers, and which workers can repair; "hello" and "ready" are passed to the
 * main loop through a deferred event.  A worker that never links the
 * library simply never says anything.  A replacement gets a fresh pair
 * (progress_rearm), so nothing its predecessor said is taken as its own.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent.h"
#include "chan.h"
#include "log.h"
#include "mono.h"
#include "rdzv_err.h"

/* Notes for the main loop not delivered yet. */
#define PROGRESS_NOTE_HELLO	0x1
#define PROGRESS_NOTE_READY	0x2
#define PROGRESS_NOTE_STEP	0x4	/* its first step */
#define PROGRESS_NOTE_MOVED	0x8	/* its first past the mark */

struct progress_rank {
	int		 fd;		/* the agent's end, -1 when closed */
	int		 child_fd;	/* the worker's end until spawned */
	struct event	*ev;
	int		 seen;		/* a report came */
	uint64_t	 step;
	int64_t		 when;		/* mono_ms() of the last one */
	int		 can_repair;	/* said "hello repair=1" */
	int		 ready;		/* said "ready" */
	int		 joining;	/* ready, a round sent to it, no
					 * report yet: watched from then */
	int		 marked;	/* a round sent to it, no step
					 * past mark reported since */
	uint64_t	 mark;		/* its step when that round went
					 * (0: none reported yet) */
	int64_t		 waited;	/* mono_ms() of its last "wait" */
	int		 done;		/* said "done", no step since */
	int		 notes;		/* PROGRESS_NOTE_* to deliver */
	int		 warned;	/* a malformed message was logged */
};

static struct event_base	*progress_base;
static struct event		*progress_note_ev;
static progress_note_cb		 progress_note_fn;
static void			*progress_note_arg;
static struct progress_rank	*progress_ranks;
static int			 progress_nranks;

/* One message from local rank r's worker. */
static void
progress_handle(struct progress_rank *p, const char *buf, size_t len)
{
	struct chan_msg	m;
	int		r = (int)(p - progress_ranks);

	if (len == 0) {
		/* A legal datagram with no message in it, not the end. */
		log_debug("worker %d: empty message ignored", r);
		return;
	}
	if (chan_parse(buf, len, &m) != 0) {
		/* A local worker's bug, not an attack: say so once. */
		if (!p->warned)
			log_warnx("worker %d sent a malformed message on its "
			    "progress socket (%zu bytes); ignoring it", r, len);
		else
			log_debug("worker %d: malformed message ignored", r);
		p->warned = 1;
		return;
	}
	switch (m.verb) {
	case CHAN_PROGRESS:
		p->done = 0;	/* it trains again */
		if (!p->seen)
			p->notes |= PROGRESS_NOTE_STEP;
		if (p->marked && (!p->seen || m.step > p->mark)) {
			p->notes |= PROGRESS_NOTE_MOVED;
			p->marked = 0;
		}
		p->seen = 1;
		p->step = m.step;
		p->when = mono_ms();
		break;
	case CHAN_HELLO:
		p->can_repair = m.repair;
		p->notes |= PROGRESS_NOTE_HELLO;
		log_debug("worker %d: hello, repair=%d", r, m.repair);
		break;
	case CHAN_READY:
		p->ready = 1;
		p->notes |= PROGRESS_NOTE_READY;
		log_debug("worker %d: ready", r);
		break;
	case CHAN_WAIT:
		p->waited = mono_ms();
		return;
	case CHAN_DONE:
		/* Its training ended: what it does before it exits (a
		 * final evaluation, a checkpoint) takes no steps. */
		p->done = 1;
		log_debug("worker %d: done", r);
		return;
	default:
		/* A verb for a newer agent, or one only an agent says. */
		log_debug("worker %d: unknown message ignored", r);
		return;
	}
	if (p->notes != 0 && progress_note_ev != NULL)
		event_active(progress_note_ev, 0, 0);
}

static void
progress_read_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct progress_rank	*p = arg;
	char			 buf[RDZV_CHAN_MSG_MAX + 1];
	ssize_t			 n;

	/* Drain everything queued, in order: hello comes before steps. */
	for (;;) {
		/* A datagram over the limit comes cut to the buffer: refused
		 * by chan_parse for its length. */
		n = chan_recv(fd, buf, sizeof buf);
		if (n == RDZV_EBUSY)
			return;
		if (n < 0) {
			/* Every copy of the worker's end is closed. */
			if (n != RDZV_ECONN)
				log_warn("worker %d: recv",
				    (int)(p - progress_ranks));
			event_del(p->ev);
			return;
		}
		/* Cut to what buf holds: still over RDZV_CHAN_MSG_MAX. */
		progress_handle(p, buf, (size_t)n < sizeof buf ? (size_t)n :
		    sizeof buf);
	}
}

/* Local rank local_rank's state, or NULL when there is no such rank. */
static struct progress_rank *
progress_rank(int local_rank)
{
	if (local_rank < 0 || local_rank >= progress_nranks)
		return (NULL);
	return (&progress_ranks[local_rank]);
}

/* Reads everything p's worker sent (it may have exited just after). */
static void
progress_drain(struct progress_rank *p)
{
	if (p->ev != NULL)
		progress_read_cb(p->fd, EV_READ, p);
}

/*
 * Local rank local_rank's state, drained first, or NULL when there is
 * no such rank: the one way the queries below read it.
 */
static struct progress_rank *
progress_rank_read(int local_rank)
{
	struct progress_rank	*p;

	if ((p = progress_rank(local_rank)) != NULL)
		progress_drain(p);
	return (p);
}

/* Delivers the notes from the loop, so that cb never runs nested. */
static void
progress_note_cb_ev(evutil_socket_t fd, short ev, void *arg)
{
	int	i, notes;

	for (i = 0; i < progress_nranks; i++) {
		notes = progress_ranks[i].notes;
		progress_ranks[i].notes = 0;
		if (progress_note_fn == NULL)
			continue;
		/* cb may re-arm or end the attempt: look again each time. */
		if ((notes & PROGRESS_NOTE_HELLO) != 0)
			progress_note_fn(i, PROGRESS_HELLO, progress_note_arg);
		if ((notes & PROGRESS_NOTE_READY) != 0 && i < progress_nranks &&
		    progress_ranks[i].ready)
			progress_note_fn(i, PROGRESS_READY, progress_note_arg);
		if ((notes & PROGRESS_NOTE_STEP) != 0 && i < progress_nranks &&
		    progress_ranks[i].seen)
			progress_note_fn(i, PROGRESS_STEP, progress_note_arg);
		if ((notes & PROGRESS_NOTE_MOVED) != 0 && i < progress_nranks &&
		    progress_ranks[i].seen)
			progress_note_fn(i, PROGRESS_MOVED, progress_note_arg);
	}
}

void
progress_init(struct event_base *base)
{
	progress_base = base;
	progress_note_ev = event_new(base, -1, 0, progress_note_cb_ev, NULL);
	if (progress_note_ev == NULL)
		fatalx("out of memory");
}

void
progress_set_cb(progress_note_cb cb, void *arg)
{
	progress_note_fn = cb;
	progress_note_arg = arg;
}

/* Closes one rank's sockets, reading what its worker sent last. */
static void
progress_close(struct progress_rank *p)
{
	if (p->ev != NULL) {
		progress_drain(p);
		event_free(p->ev);
		p->ev = NULL;
	}
	if (p->fd != -1)
		close(p->fd);
	if (p->child_fd != -1)
		close(p->child_fd);
	p->fd = p->child_fd = -1;
}

/* Closes the sockets of the attempt; the last reports stay readable. */
void
progress_end_attempt(void)
{
	int	i;

	for (i = 0; i < progress_nranks; i++)
		progress_close(&progress_ranks[i]);
}

/* A fresh socket pair for p, whose sockets are closed. */
static int
progress_open(struct progress_rank *p)
{
	int	sv[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == -1) {
		log_warn("socketpair");
		return (RDZV_EIO);
	}
	(void)fcntl(sv[0], F_SETFL, O_NONBLOCK);
	/*
	 * A worker must never block on its agent: a full socket drops the
	 * report instead.  (The flag is on the worker's end: it waits for
	 * the agent's messages with poll(), bounded.)
	 */
	(void)fcntl(sv[1], F_SETFL, O_NONBLOCK);
	p->fd = sv[0];
	p->child_fd = sv[1];
	p->ev = event_new(progress_base, p->fd, EV_READ | EV_PERSIST,
	    progress_read_cb, p);
	if (p->ev == NULL || event_add(p->ev, NULL) == -1)
		return (RDZV_ENOMEM);
	return (0);
}

int
progress_attempt(int nproc)
{
	int	i, rv;

	progress_end_attempt();
	free(progress_ranks);
	progress_nranks = 0;
	if ((progress_ranks = calloc(nproc, sizeof *progress_ranks)) == NULL)
		return (RDZV_ENOMEM);
	progress_nranks = nproc;
	for (i = 0; i < nproc; i++)
		progress_ranks[i].fd = progress_ranks[i].child_fd = -1;
	for (i = 0; i < nproc; i++)
		if ((rv = progress_open(&progress_ranks[i])) != 0)
			return (rv);
	return (0);
}

int
progress_rearm(int local_rank)
{
	struct progress_rank	*p;

	if ((p = progress_rank(local_rank)) == NULL)
		return (RDZV_ENOTFOUND);
	progress_close(p);
	/* Nothing the predecessor said is the replacement's. */
	memset(p, 0, sizeof *p);
	p->fd = p->child_fd = -1;
	return (progress_open(p));
}

int
progress_child_fd(int local_rank)
{
	struct progress_rank	*p;

	return ((p = progress_rank(local_rank)) != NULL ? p->child_fd : -1);
}

void
progress_spawned(int local_rank)
{
	struct progress_rank	*p;

	if ((p = progress_rank(local_rank)) == NULL)
		return;
	if (p->child_fd != -1)
		close(p->child_fd);
	p->child_fd = -1;
}

int
progress_get(int local_rank, uint64_t *step, int64_t *when)
{
	struct progress_rank	*p;

	if ((p = progress_rank_read(local_rank)) == NULL || !p->seen)
		return (RDZV_ENOTFOUND);
	*step = p->step;
	*when = p->when;
	return (0);
}

void
progress_touch(int local_rank)
{
	struct progress_rank	*p;

	if ((p = progress_rank_read(local_rank)) == NULL)
		return;
	if (p->seen || p->ready) {
		p->joining = !p->seen;
		p->when = mono_ms();
	}
	/* What it reports from now on is of the round just sent: a note
	 * still pending from the drain above is of the one before. */
	p->marked = 1;
	p->mark = p->seen ? p->step : 0;
	p->notes &= ~PROGRESS_NOTE_MOVED;
}

int
progress_watch_get(int local_rank, uint64_t *step, int64_t *when,
    int *joining)
{
	struct progress_rank	*p;

	if ((p = progress_rank_read(local_rank)) == NULL ||
	    !(p->seen || p->joining) || p->done)
		return (RDZV_ENOTFOUND);
	*step = p->step;
	*when = p->when;
	*joining = !p->seen;
	return (0);
}

int64_t
progress_waited(int local_rank)
{
	struct progress_rank	*p;

	if ((p = progress_rank_read(local_rank)) == NULL)
		return (0);
	return (p->waited);
}

int
progress_can_repair(int local_rank)
{
	struct progress_rank	*p;

	p = progress_rank_read(local_rank);
	return (p != NULL && p->can_repair);
}

int
progress_all_can_repair(void)
{
	int	i;

	if (progress_nranks == 0)
		return (0);
	for (i = 0; i < progress_nranks; i++)
		if (!progress_can_repair(i))
			return (0);
	return (1);
}

int
progress_ready(int local_rank)
{
	struct progress_rank	*p;

	p = progress_rank_read(local_rank);
	return (p != NULL && p->ready);
}

/* Sends the datagram msg (len bytes) to local_rank; as progress_send. */
static int
progress_send_raw(int local_rank, const char *msg, size_t len)
{
	struct progress_rank	*p;
	ssize_t			 n;

	if ((p = progress_rank(local_rank)) == NULL || p->fd == -1)
		return (RDZV_ENOTFOUND);
	do
		n = send(p->fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n == -1 && errno == EINTR);
	if (n == (ssize_t)len)
		return (0);
	if (n >= 0)
		return (RDZV_EIO);	/* a datagram goes whole or not at all */
	switch (errno) {
	case EAGAIN:
#if EWOULDBLOCK != EAGAIN
	case EWOULDBLOCK:
#endif
	case ENOBUFS:
		log_warnx("worker %d reads none of its agent's messages: "
		    "one dropped", local_rank);
		return (RDZV_EBUSY);
	case EPIPE:
	case ECONNRESET:
	case ENOTCONN:
		return (RDZV_ECONN);
	default:
		log_warn("worker %d: send", local_rank);
		return (RDZV_EIO);
	}
}

int
progress_send(int local_rank, const struct chan_msg *m)
{
	char	buf[RDZV_CHAN_MSG_MAX + 1];
	int	n;

	if ((n = chan_format(buf, sizeof buf, m)) < 0)
		return (n);
	return (progress_send_raw(local_rank, buf, (size_t)n));
}

int
progress_send_all(const struct chan_msg *m)
{
	char	buf[RDZV_CHAN_MSG_MAX + 1];
	int	i, len, n = 0;

	if ((len = chan_format(buf, sizeof buf, m)) < 0)
		return (len);
	for (i = 0; i < progress_nranks; i++)
		if (progress_ranks[i].fd != -1 &&
		    progress_send_raw(i, buf, (size_t)len) == 0)
			n++;
	return (n);
}
