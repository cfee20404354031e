/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net.c: the TCP plumbing librdzvworker shares between the store client,
 * the hosted TCPStore and the cpu backend: resolve and connect under a
 * deadline (retrying while the peer is not listening yet), listen, tune
 * sockets, and move exact byte counts under a deadline.  Every socket is
 * non-blocking and close-on-exec; nothing here raises SIGPIPE.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "connect.h"
#include "worker.h"

#define NET_RETRY_MS	20	/* pause between refused connects */
/*
 * Bulk sockets' buffers (the kernel doubles it).  Small enough that what
 * is in flight on loopback is still in cache when the peer copies it out:
 * at 4 MiB a 2-rank 64 MiB allreduce took ~15% more CPU than at 1 MiB
 * (bench/runs/2026-11-23.md); 2 MiB in flight still fills a 10 Gb/s
 * link at 1.6 ms of round trip.
 */
#define NET_SOCKBUF	(1 << 20)

int
net_nonblock(int fd)
{
	int	fl;

	if ((fl = fcntl(fd, F_GETFL)) == -1 ||
	    fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1)
		return (RDZV_EIO);
	return (0);
}

void
net_tune(int fd, int bulk)
{
	int	one = 1, sz = NET_SOCKBUF;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (bulk) {
		/* Room for a few pipeline chunks: the kernel moves them
		 * while this thread reduces the previous one. */
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
	}
}

/* Waits for events on fd until deadline: 1 ready, 0 timed out, <0 error. */
int
net_poll1(int fd, short events, int64_t deadline)
{
	/* libworker's deadlines are mono_ms() instants. */
	return (connect_poll(fd, events, deadline * 1000000, NULL, NULL));
}

int
net_connect(const char *host, int port, int bulk, int64_t deadline, int *fdp)
{
	struct addrinfo	 hints, *res, *ai;
	struct timespec	 ts;
	char		 portstr[16];
	int		 rc, gai;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(portstr, sizeof portstr, "%d", port);
	for (;;) {
		gai = getaddrinfo(host, portstr, &hints, &res);
		rc = RDZV_ECONN;
		if (gai == 0) {
			for (ai = res; ai != NULL; ai = ai->ai_next) {
				rc = connect_addr(ai, bulk ? NET_SOCKBUF : 0,
				    deadline_left(deadline), fdp);
				if (rc == 0 || rc == RDZV_ETIMEDOUT)
					break;
			}
			/* The buffers were sized before connecting. */
			if (rc == 0)
				net_tune(*fdp, 0);
			freeaddrinfo(res);
		}
		if (rc == 0 || rc == RDZV_ETIMEDOUT)
			return (rc);
		/* Refused or not resolvable yet: the peer may still be
		 * starting (rank 0's store, a slow DNS entry). */
		if (deadline_left(deadline) <= NET_RETRY_MS)
			return (gai != 0 ? RDZV_EINVAL : RDZV_ECONN);
		ts.tv_sec = 0;
		ts.tv_nsec = NET_RETRY_MS * 1000000L;
		nanosleep(&ts, NULL);
	}
}

int
net_listen(const char *addr, int port, int bulk, int *fdp, int *portp)
{
	struct addrinfo	 hints, *res, *ai;
	char		 portstr[16];
	int		 fd = -1, one = 1, zero = 0, rc = RDZV_ECONN;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
	snprintf(portstr, sizeof portstr, "%d", port);
	if (getaddrinfo(addr, portstr, &hints, &res) != 0)
		return (RDZV_EINVAL);
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, ai->ai_protocol);
		if (fd == -1)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		net_tune(fd, bulk);	/* accepted sockets inherit it */
		if (ai->ai_family == AF_INET6)	/* dual stack for "::" */
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero,
			    sizeof zero);
		/* As long a queue as the kernel allows (it caps this at
		 * net.core.somaxconn): every rank connects at once. */
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, 65535) == 0) {
			rc = 0;
			break;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (rc != 0)
		return (rc);
	if (portp != NULL && (*portp = net_local_port(fd)) < 0) {
		close(fd);
		return (RDZV_EIO);
	}
	*fdp = fd;
	return (0);
}

int
net_local_port(int fd)
{
	struct sockaddr_storage	ss;
	socklen_t		len = sizeof ss;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) == -1)
		return (RDZV_EIO);
	if (ss.ss_family == AF_INET)
		return (ntohs(((struct sockaddr_in *)&ss)->sin_port));
	if (ss.ss_family == AF_INET6)
		return (ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
	return (RDZV_EIO);
}

int
net_local_addr(int fd, char *buf, size_t len)
{
	struct sockaddr_storage	ss;
	socklen_t		sl = sizeof ss;
	const void		*a;

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == -1)
		return (RDZV_EIO);
	if (ss.ss_family == AF_INET)
		a = &((struct sockaddr_in *)&ss)->sin_addr;
	else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6	*s6 = (struct sockaddr_in6 *)&ss;

		/* A v4 peer reached over a dual-stack socket. */
		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			if (inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12],
			    buf, len) == NULL)
				return (RDZV_EIO);
			return (0);
		}
		a = &s6->sin6_addr;
	} else
		return (RDZV_EIO);
	if (inet_ntop(ss.ss_family, a, buf, len) == NULL)
		return (RDZV_EIO);
	return (0);
}

/*
 * Moves exactly len bytes of buf to (out) or from fd, waiting for the
 * socket as often as it takes until deadline.
 */
static int
net_all(int fd, int out, void *buf, size_t len, int64_t deadline)
{
	uint8_t	*p = buf;
	ssize_t	 n;
	int	 rc;

	while (len > 0) {
		n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return (RDZV_ECONN);	/* peer closed */
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			rc = net_poll1(fd, out ? POLLOUT : POLLIN, deadline);
			if (rc == 0)
				return (RDZV_ETIMEDOUT);
			if (rc < 0)
				return (rc);
			continue;
		}
		return (RDZV_ECONN);
	}
	return (0);
}

int
net_write_all(int fd, const void *buf, size_t len, int64_t deadline)
{
	return (net_all(fd, 1, (void *)buf, len, deadline));
}

int
net_read_all(int fd, void *buf, size_t len, int64_t deadline)
{
	return (net_all(fd, 0, buf, len, deadline));
}
