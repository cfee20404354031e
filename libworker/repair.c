/* SPDX-License-Identifier: Apache-2.0 */
/*
 * repair.c: in-place repair, the worker's side of the worker <-> agent
 * channel (common/PROTOCOL.md "Worker <-> agent channel").  Owns the
 * messages (hello, ready, round, stop), the watcher thread that hears
 * the agent, the wait of a broken call for its round, and
 * rdzv_comm_repair; comm.c owns rebuilding the communicator itself.
 *
 * A survivor's life through a repair:
 *
 *	healthy ---- peer dies: the call breaks (ECONN) ----> broken
 *	   |                                                    |
 *	   | watcher hears "round" (grow)          the call waits for "round"
 *	   | and breaks it (EREPAIR)                (repair_result)
 *	   v                                                    v
 *	broken, round pending ---- every call returns RDZV_EREPAIR ----
 *	   |
 *	   | rdzv_comm_repair: comm_rebuild on the latest round
 *	   v
 *	healthy in round R (a newer round meanwhile: rebuild again)
 *
 * "leave" (the node leaves on purpose) breaks nothing: the program sees
 * rdzv_leave_requested() at its next step boundary and exits 0; a call
 * broken meanwhile returns its cause without waiting for a round.
 *
 * "stop", the agent's end closing, or RDZV_REPAIR_TIMEOUT_MS without a
 * round leave the call with its own cause: the program exits as it
 * would without repair and the job restarts.
 */
#include "config.h"

#include <sys/socket.h>


#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker.h"

/* A call blocked on its peers this long says "wait", and as often. */
#define REPAIR_WAIT_MS	1000

/* ---- messages ---- */

/*
 * Says verb (CHAN_HELLO with repair=1, CHAN_READY, CHAN_WAIT) to the
 * agent, waiting at most a second for room (an agent that reads nothing
 * must not hold rdzv_init).  0 or RDZV_EIO.
 */
static int
repair_say(struct rdzv_comm *c, enum chan_verb verb)
{
	struct chan_msg	m;
	char		buf[RDZV_CHAN_MSG_MAX + 1];
	int		n;

	memset(&m, 0, sizeof m);
	m.verb = verb;
	m.repair = 1;
	if ((n = chan_format(buf, sizeof buf, &m)) < 0)
		return (comm_note(c, n, "a channel message of verb %d: %s",
		    verb, rdzv_strerror(n)));
	(void)net_poll1(c->progress.fd, POLLOUT, mono_ms() + 1000);
	if (send(c->progress.fd, buf, (size_t)n, MSG_NOSIGNAL |
	    MSG_DONTWAIT) == -1) {
		comm_note(c, RDZV_EIO, "telling the agent \"%s\": %s", buf,
		    strerror(errno));
		return (RDZV_EIO);
	}
	return (0);
}

/* ---- the watcher ---- */

/* Acts on one datagram from the agent (the watcher thread). */
static void
repair_heard(struct rdzv_comm *c, const char *buf, size_t len)
{
	struct chan_msg	m;
	int		brk = 0;

	if (chan_parse(buf, len, &m) != 0) {
		comm_log(c, RDZV_LOG_WARN, "rank %d: the agent sent a "
		    "malformed message (%zu bytes): ignored", c->rank, len);
		return;
	}
	if (m.verb == CHAN_LEAVE) {
		/* Nothing breaks: the step in flight finishes. */
		__atomic_store_n(&c->rleave, 1, __ATOMIC_RELAXED);
		pthread_mutex_lock(&c->rlock);
		pthread_cond_broadcast(&c->rcond);
		pthread_mutex_unlock(&c->rlock);
		comm_log(c, RDZV_LOG_INFO, "rank %d: the agent asks this "
		    "worker to leave at the next step boundary", c->rank);
		return;
	}
	if (m.verb != CHAN_ROUND && m.verb != CHAN_STOP) {
		/* A verb for a newer worker, or one only a worker says. */
		comm_log(c, RDZV_LOG_DEBUG, "rank %d: agent message with an "
		    "unknown verb ignored", c->rank);
		return;
	}
	/*
	 * Under rlock, so that a rebuild (which takes the round and clears
	 * the broken state under it too) either sees this round pending or
	 * is already in it: a round never breaks the communicator built
	 * for it.
	 */
	pthread_mutex_lock(&c->rlock);
	if (m.verb == CHAN_ROUND) {
		/* A newer announcement replaces one not yet taken. */
		c->pend = m;
		c->pend_set = 1;
		/* A bootstrap breaks too: a peer of its round died as it
		 * formed and will never come (its round's waits end now). */
		brk = (c->rlive || c->rbuilding) && m.round != c->round.round;
	} else
		c->rstopped = 1;
	pthread_cond_broadcast(&c->rcond);
	if (m.verb == CHAN_STOP)
		comm_fail(c, RDZV_ECLOSED, "the agent stopped the repair: the "
		    "job restarts");
	else if (brk)
		/* The call in flight returns now, not when its step ends. */
		comm_fail(c, RDZV_EREPAIR, "repair round %d (%s): rank %d "
		    "of %d", m.round, m.kind == CHAN_GROW ? "grow" :
		    "shrink", m.rank, m.world);
	/* A rebuild waiting in the store of a round its peers have left
	 * (one died in it) returns now and takes this one. */
	if (m.verb == CHAN_ROUND && c->rbuilding && c->store != NULL &&
	    m.round != c->round.round)
		wstore_cut(c->store);
	pthread_mutex_unlock(&c->rlock);
}

/*
 * Says "wait" when a call of c has waited on its peers for
 * REPAIR_WAIT_MS, and again every REPAIR_WAIT_MS while it still does;
 * *last: when it last did.
 */
static void
repair_say_wait(struct rdzv_comm *c, int64_t *last)
{
	int64_t	since, now;

	since = __atomic_load_n(&c->wait_since, __ATOMIC_RELAXED);
	now = mono_ms();
	if (since == 0 || now - since < REPAIR_WAIT_MS ||
	    now - *last < REPAIR_WAIT_MS)
		return;
	*last = now;
	(void)repair_say(c, CHAN_WAIT);
}

/*
 * The watcher thread: reads the agent's datagrams until repair_stop()
 * wakes it or the agent's end closes (then nobody waits for a round);
 * says "wait" while the program is blocked on its peers.
 */
static void *
repair_main(void *arg)
{
	struct rdzv_comm	*c = arg;
	struct pollfd		 pfd[2];
	char			 buf[RDZV_CHAN_MSG_MAX + 1];
	ssize_t			 n;
	int64_t			 last = 0;
	int			 rc;

	pfd[0].fd = c->progress.fd;
	pfd[0].events = POLLIN | POLLRDHUP;
	pfd[1].fd = c->wwake[0];
	pfd[1].events = POLLIN;
	for (;;) {
		rc = poll(pfd, 2, REPAIR_WAIT_MS / 2);
		repair_say_wait(c, &last);
		if (rc == 0 || (rc == -1 && errno == EINTR))
			continue;
		if (rc == -1)
			break;
		if (pfd[1].revents != 0)
			return (NULL);
		/* An empty datagram (0) is no message and not the end. */
		if ((n = chan_recv(c->progress.fd, buf, sizeof buf)) == 0 ||
		    n == RDZV_EBUSY)
			continue;
		if (n < 0)
			break;
		if ((size_t)n > RDZV_CHAN_MSG_MAX) {
			comm_log(c, RDZV_LOG_WARN, "rank %d: the agent sent "
			    "%zd bytes, over %d: ignored", c->rank, n,
			    RDZV_CHAN_MSG_MAX);
			continue;
		}
		repair_heard(c, buf, (size_t)n);
	}
	/* No round can come any more: nobody waits for one. */
	pthread_mutex_lock(&c->rlock);
	c->rstopped = 1;
	pthread_cond_broadcast(&c->rcond);
	pthread_mutex_unlock(&c->rlock);
	comm_log(c, RDZV_LOG_WARN, "rank %d: the agent's channel closed: no "
	    "repair possible", c->rank);
	return (NULL);
}

/*
 * Waits until a round is pending, the agent stopped, this node leaves
 * (no round comes for it: a peer of this node that heard "leave" first
 * and left at its step boundary cut this worker's step before it heard
 * "leave" itself), or deadline; the caller holds c->rlock.  Returns 1
 * with a round pending, else 0.
 */
static int
repair_wait_locked(struct rdzv_comm *c, int64_t deadline)
{
	struct timespec	ts;
	int64_t		left;

	while (!c->pend_set && !c->rstopped && !rdzv_leave_requested(c)) {
		if ((left = deadline - mono_ms()) <= 0)
			break;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += left / 1000;
		ts.tv_nsec += (left % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		(void)pthread_cond_timedwait(&c->rcond, &c->rlock, &ts);
	}
	return (c->pend_set);
}

/* ---- the library's side ---- */

/* RDZV_REPAIR: 1 on, 0 off (a veto), -1 unset or unreadable. */
static int
repair_env(void)
{
	const char	*v = getenv("RDZV_REPAIR");

	if (v == NULL || *v == '\0')
		return (-1);
	return (strcmp(v, "0") != 0);
}

int
repair_start(struct rdzv_comm *c)
{
	const char	*v, *errstr;
	int		 on, rc;

	c->round.round = 0;
	if ((v = getenv("RDZV_ROUND")) != NULL) {
		c->round.round = (int)strtonum(v, 0, INT_MAX, &errstr);
		if (errstr != NULL)
			c->round.round = 0;
	}
	c->round.kind = RDZV_ROUND_FIRST;
	c->repair_timeout_ms = RDZV_REPAIR_TIMEOUT_DEFAULT_MS;
	if ((v = getenv("RDZV_REPAIR_TIMEOUT_MS")) != NULL) {
		rc = (int)strtonum(v, 1, INT_MAX, &errstr);
		if (errstr == NULL)
			c->repair_timeout_ms = rc;
	}
	on = repair_env();
	if (on < 0)
		on = c->opts.repair == 1;
	v = getenv("RDZV_REPLACEMENT");
	if (v != NULL && strcmp(v, "1") == 0 && (!on || c->progress.fd == -1))
		/* Its RANK and scope are stale: bootstrapping on them hangs. */
		return (comm_note(c, RDZV_EINVAL, "RDZV_REPLACEMENT=1 but "
		    "repair is off (%s)", !on ? "rdzv_options.repair unset or "
		    "RDZV_REPAIR=0" : "no agent channel in RDZV_PROGRESS_FD"));
	if (!on || c->progress.fd == -1)
		return (0);
	if (pipe2(c->wwake, O_CLOEXEC | O_NONBLOCK) == -1)
		return (comm_note(c, RDZV_EIO, "pipe: %s", strerror(errno)));
	if ((rc = repair_say(c, CHAN_HELLO)) != 0)
		return (rc);
	if (pthread_create(&c->wthread, NULL, repair_main, c) != 0)
		return (comm_note(c, RDZV_ENOMEM, "cannot start the repair "
		    "watcher"));
	c->wthread_on = 1;
	c->repair = 1;

	v = getenv("RDZV_REPLACEMENT");
	if (v == NULL || strcmp(v, "1") != 0)
		return (0);
	/* A replacement: its RANK, WORLD_SIZE and scope are stale. */
	if ((rc = repair_say(c, CHAN_READY)) != 0)
		return (rc);
	pthread_mutex_lock(&c->rlock);
	if (!repair_wait_locked(c, mono_ms() + c->repair_timeout_ms)) {
		rc = c->rstopped ? RDZV_ECLOSED : RDZV_ETIMEDOUT;
		pthread_mutex_unlock(&c->rlock);
		return (comm_note(c, rc, "a replacement waiting for its "
		    "repair round: %s", rc == RDZV_ECLOSED ? "the agent "
		    "stopped or went away" : "none came within "
		    "RDZV_REPAIR_TIMEOUT_MS"));
	}
	comm_take_round(c, &c->pend);
	c->pend_set = 0;
	c->round.joined = 1;
	pthread_mutex_unlock(&c->rlock);
	return (0);
}

void
repair_live(struct rdzv_comm *c)
{
	pthread_mutex_lock(&c->rlock);
	c->rlive = 1;
	pthread_mutex_unlock(&c->rlock);
}

void
repair_stop(struct rdzv_comm *c)
{
	if (c->wthread_on) {
		(void)write(c->wwake[1], "x", 1);
		pthread_join(c->wthread, NULL);
		c->wthread_on = 0;
	}
	if (c->wwake[0] != -1) {
		close(c->wwake[0]);
		close(c->wwake[1]);
		c->wwake[0] = c->wwake[1] = -1;
	}
}

int
repair_superseded(struct rdzv_comm *c)
{
	int	rc;

	pthread_mutex_lock(&c->rlock);
	rc = c->repair && c->pend_set && c->pend.round != c->round.round;
	pthread_mutex_unlock(&c->rlock);
	return (rc);
}

int
repair_result(struct rdzv_comm *c, int rc)
{
	int	got;

	/* Leaving: no round will come for this node. */
	if (rc >= 0 || !c->repair || comm_broken(c) == 0 ||
	    rdzv_leave_requested(c))
		return (rc);
	pthread_mutex_lock(&c->rlock);
	if (c->rgaveup)
		got = c->pend_set;
	else if (!(got = repair_wait_locked(c, mono_ms() +
	    c->repair_timeout_ms)) && !c->rstopped &&
	    !rdzv_leave_requested(c))
		c->rgaveup = 1;
	pthread_mutex_unlock(&c->rlock);
	return (got ? RDZV_EREPAIR : rc);
}

int
rdzv_leave_requested(const struct rdzv_comm *c)
{
	return (c != NULL && __atomic_load_n(&c->rleave, __ATOMIC_RELAXED));
}

int
rdzv_repair_enabled(const struct rdzv_comm *c)
{
	return (c != NULL && c->repair);
}

int
rdzv_comm_round(const struct rdzv_comm *c, struct rdzv_round *r)
{
	if (c == NULL || r == NULL)
		return (RDZV_EINVAL);
	*r = c->round;
	r->rank = c->rank;
	r->size = c->size;
	return (0);
}

int
rdzv_comm_repair(struct rdzv_comm *c, int timeout_ms)
{
	struct chan_msg	m;
	int64_t		deadline;
	int			rc;

	if (c == NULL)
		return (RDZV_EINVAL);
	if (!c->repair)
		return (comm_note(c, RDZV_EINVAL, "repair is off (set "
		    "rdzv_options.repair or RDZV_REPAIR=1, under an agent)"));
	deadline = mono_ms() + (timeout_ms < 0 ? c->repair_timeout_ms :
	    timeout_ms);
	for (;;) {
		pthread_mutex_lock(&c->rlock);
		if (!repair_wait_locked(c, deadline)) {
			rc = c->rstopped || rdzv_leave_requested(c) ?
			    RDZV_ECLOSED : RDZV_ETIMEDOUT;
			pthread_mutex_unlock(&c->rlock);
			return (comm_fail(c, rc, "repair: %s", c->rstopped ?
			    "the agent stopped it or went away" :
			    rdzv_leave_requested(c) ? "this node leaves the "
			    "job: no round comes for it" :
			    "no round came in time"));
		}
		m = c->pend;
		c->pend_set = 0;
		c->rgaveup = 0;
		pthread_mutex_unlock(&c->rlock);
		rc = comm_rebuild(c, &m);
		pthread_mutex_lock(&c->rlock);
		/*
		 * A newer round superseded this one: take it.  A rebuild that
		 * failed because a member of this round died as it formed (a
		 * second failure during a repair) waits for the round that
		 * shrinks around it.
		 */
		if (c->pend_set || (rc != 0 && !c->rstopped &&
		    !rdzv_leave_requested(c) &&
		    repair_wait_locked(c, deadline))) {
			pthread_mutex_unlock(&c->rlock);
			comm_log(c, RDZV_LOG_INFO, "rank %d: round %d "
			    "superseded while it formed%s: taking the next",
			    c->rank, m.round, rc != 0 ? " (it failed)" : "");
			continue;
		}
		pthread_mutex_unlock(&c->rlock);
		if (rc == 0)
			comm_log(c, RDZV_LOG_INFO, "repaired in round %d (%s):"
			    " rank %d of %d, donor %d", m.round, m.kind ==
			    CHAN_GROW ? "grow" : "shrink", c->rank,
			    c->size, m.donor);
		return (rc);
	}
}
