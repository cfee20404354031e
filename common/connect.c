/* SPDX-License-Identifier: Apache-2.0 */
/*
 * connect.c: a TCP connect bounded by a timeout and the one wait for a
 * socket under a deadline (see connect.h).
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <netdb.h>

#include <errno.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "connect.h"
#include "mono.h"
#include "rdzv_err.h"

int
connect_poll(int fd, short events, int64_t deadline, const sigset_t *mask,
    volatile sig_atomic_t *flag)
{
	struct pollfd	 pfd;
	struct timespec	 ts, *tsp;
	int64_t		 left;
	int		 n;

	for (;;) {
		if (flag != NULL && *flag)
			return (RDZV_ECANCELED);
		tsp = NULL;
		if (deadline >= 0) {
			left = deadline - mono_ns();
			if (left < 0)
				left = 0;
			ts.tv_sec = left / 1000000000;
			ts.tv_nsec = left % 1000000000;
			tsp = &ts;
		}
		pfd.fd = fd;
		pfd.events = events;
		pfd.revents = 0;
		n = ppoll(&pfd, 1, tsp, mask);
		if (n > 0)
			return (1);
		if (n == 0)
			return (0);
		if (errno != EINTR)
			return (RDZV_EIO);
	}
}

int
connect_addr(const struct addrinfo *ai, int bufsz, int timeout_ms, int *fdp)
{
	socklen_t	sl;
	int		fd, n, soerr;

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, ai->ai_protocol);
	if (fd == -1)
		return (errno == ENOMEM || errno == ENOBUFS ? RDZV_ENOMEM :
		    RDZV_ECONN);
	if (bufsz > 0) {
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz,
		    sizeof bufsz);
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz,
		    sizeof bufsz);
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
		*fdp = fd;
		return (0);
	}
	/* Interrupted, the connect goes on in the background as well. */
	if (errno != EINPROGRESS && errno != EINTR) {
		close(fd);
		return (RDZV_ECONN);
	}
	n = connect_poll(fd, POLLOUT, timeout_ms < 0 ? -1 :
	    mono_ns() + (int64_t)timeout_ms * 1000000, NULL, NULL);
	if (n == 0) {
		close(fd);
		return (RDZV_ETIMEDOUT);
	}
	sl = sizeof soerr;
	if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == -1 ||
	    soerr != 0) {
		close(fd);
		return (RDZV_ECONN);
	}
	*fdp = fd;
	return (0);
}
