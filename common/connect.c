/* SPDX-License-Identifier: Apache-2.0 */
/*
 * connect.c: a TCP connect bounded by a timeout (see connect.h).
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <netdb.h>

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "connect.h"
#include "rdzv_err.h"

int
connect_addr(const struct addrinfo *ai, int bufsz, int timeout_ms, int *fdp)
{
	struct pollfd	pfd;
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
	do {
		pfd.fd = fd;
		pfd.events = POLLOUT;
		pfd.revents = 0;
		n = poll(&pfd, 1, timeout_ms < 0 ? -1 : timeout_ms);
	} while (n == -1 && errno == EINTR);
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
