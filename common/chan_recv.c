/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chan_recv.c: the one read of the worker <-> agent channel, shared by
 * both ends (agent/progress.c, libworker/repair.c): a datagram of the
 * SOCK_SEQPACKET socket, told apart from the end of the channel.
 *
 * recv(2) returns 0 both for a zero-length datagram (legal on a
 * SOCK_SEQPACKET socket, recv(2) "Datagram sockets ... permit zero-length
 * datagrams") and, on Linux, once the peer is gone and nothing is left
 * queued.  Only in the second case is the peer's end shut down, which
 * poll(2) reports as POLLHUP/POLLRDHUP; and whether anything is queued
 * behind an empty datagram SIOCINQ tells (for an AF_UNIX SOCK_SEQPACKET
 * socket the kernel counts the bytes of every queued datagram).  What
 * an EOF can hide is only empty datagrams, which mean nothing.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <errno.h>
#include <poll.h>

#include "chan.h"
#include "rdzv_err.h"

#ifndef POLLRDHUP
#define POLLRDHUP	0
#endif

/* Whether the peer of fd is gone with no byte left queued. */
static int
chan_recv_eof(int fd)
{
	struct pollfd	pfd;
	int		inq;

	pfd.fd = fd;
	pfd.events = POLLIN | POLLRDHUP;
	pfd.revents = 0;
	while (poll(&pfd, 1, 0) == -1)
		if (errno != EINTR)
			return (1);
	if ((pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) == 0)
		return (0);
	/* Gone, but a real datagram may wait behind an empty one. */
	if (ioctl(fd, FIONREAD, &inq) == 0 && inq > 0)
		return (0);
	return (1);
}

ssize_t
chan_recv(int fd, char *buf, size_t len)
{
	ssize_t	n;

	do
		n = recv(fd, buf, len, MSG_DONTWAIT | MSG_TRUNC);
	while (n == -1 && errno == EINTR);
	if (n > 0)
		return (n);
	if (n == 0)
		return (chan_recv_eof(fd) ? RDZV_ECONN : 0);
	switch (errno) {
	case EAGAIN:
#if EWOULDBLOCK != EAGAIN
	case EWOULDBLOCK:
#endif
		return (RDZV_EBUSY);
	case ECONNRESET:
	case ENOTCONN:
	case EPIPE:
		return (RDZV_ECONN);
	default:
		return (RDZV_EIO);
	}
}
