/* SPDX-License-Identifier: Apache-2.0 */
/*
 * progress.c: a rank's steps, to its agent and to rdzvd.
 *
 * One way to report for both entry points: rdzv_report_progress (a
 * communicator's rank, its store connection and its wait total) and
 * rdzv_progress_report (no communicator: a program that trains with
 * collectives of its own under rdzv-agent, which opens its own store
 * connection at its first report).  Each step goes to the agent on the
 * channel it passed (RDZV_PROGRESS_FD) at most every PROGRESS_AGENT_MS,
 * never blocking, and to the round's store as "progress/<rank>" = "<step>
 * <unix_ms> <wait_ms>" at most every PROGRESS_EVERY_MS: where rdzvd, the
 * status page and rdzvctl read a job's steps (common/PROTOCOL.md).
 */
#include "config.h"

#include <sys/socket.h>

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker.h"

#define PROGRESS_EVERY_MS	1000	/* to the store */
#define PROGRESS_AGENT_MS	100	/* to the agent */
#define PROGRESS_RETRY_MS	10000	/* a store that failed: again after */
#define PROGRESS_OPEN_MS	2000	/* connecting to it, at most */

int
wprogress_fd(void)
{
	const char	*v = getenv("RDZV_PROGRESS_FD"), *errstr;
	socklen_t	 len;
	int		 fd, type, domain;

	if (v == NULL)
		return (-1);
	fd = strtonum(v, 0, INT_MAX, &errstr);
	if (errstr != NULL)
		return (-1);
	len = sizeof type;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1 ||
	    type != SOCK_SEQPACKET)
		return (-1);
	len = sizeof domain;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == -1 ||
	    domain != AF_UNIX)
		return (-1);
	return (fd);
}

int
wprogress_report(struct wprogress *p, struct wstore *store, int rank,
    uint64_t step, int64_t wait_ms)
{
	struct timespec	ts;
	struct chan_msg	m;
	char		key[128], val[64];
	int64_t		now = mono_ms();
	int		n;

	p->step = step;
	if (p->fd != -1 && (p->sent_ms == 0 ||
	    now - p->sent_ms >= PROGRESS_AGENT_MS)) {
		p->sent_ms = now;
		memset(&m, 0, sizeof m);
		m.verb = CHAN_PROGRESS;
		m.step = step;
		/* Never blocks: a report the agent has no room for is lost.
		 * A step over INT64_MAX, which the agent would refuse, is
		 * not sent. */
		if ((n = chan_format(val, sizeof val, &m)) > 0)
			(void)send(p->fd, val, (size_t)n,
			    MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	if (store == NULL)
		return (0);
	if (p->store_ms != 0 && now - p->store_ms < PROGRESS_EVERY_MS)
		return (0);
	p->store_ms = now;
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(key, sizeof key, "progress/%d", rank);
	snprintf(val, sizeof val, "%llu %lld %lld", (unsigned long long)step,
	    (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
	    (long long)wait_ms);
	return (wstore_set(store, key, val, strlen(val), 1000));
}

/* rdzv_progress_report's state: the process's one reporter. */
static struct {
	pthread_mutex_t	 mu;
	int		 env_done;	/* env read (ok or not) */
	int		 env_ok;
	struct wenv	 env;
	struct wstore	*store;
	int64_t		 store_failed;	/* mono_ms of the last failure */
	struct wprogress p;
} solo = { .mu = PTHREAD_MUTEX_INITIALIZER };

int
rdzv_progress_report(uint64_t step)
{
	char	msg[256];
	int	rc = 0;

	pthread_mutex_lock(&solo.mu);
	if (!solo.env_done) {
		solo.env_done = 1;
		solo.p.fd = wprogress_fd();
		solo.env_ok = wenv_detect(&solo.env, NULL, NULL, msg,
		    sizeof msg) == 0;
	}
	/* rdzvd's round store (rdzv-agent's RDZV_* variables) only: a
	 * TCPStore of torchrun's is the program's own. */
	if (solo.env_ok && solo.store == NULL &&
	    solo.env.store == WENV_STORE_NATIVE && (solo.store_failed == 0 ||
	    mono_ms() - solo.store_failed >= PROGRESS_RETRY_MS)) {
		if ((rc = wstore_open(&solo.store, &solo.env,
		    PROGRESS_OPEN_MS, msg, sizeof msg)) != 0) {
			solo.store = NULL;
			solo.store_failed = mono_ms();
		}
	}
	if (rc == 0)
		rc = wprogress_report(&solo.p, solo.store,
		    solo.env_ok ? solo.env.rank : 0, step, 0);
	if (rc != 0 && solo.store != NULL) {
		/* Broken: a later report connects again. */
		wstore_close(solo.store);
		solo.store = NULL;
		solo.store_failed = mono_ms();
	}
	pthread_mutex_unlock(&solo.mu);
	return (rc);
}
