/* SPDX-License-Identifier: Apache-2.0 */
/*
 * connect.h: a TCP connect bounded by a timeout, the one that the store
 * client (common/client.c) and librdzvworker's sockets (libworker/net.c)
 * both use.
 */
#ifndef RDZV_CONNECT_H
#define RDZV_CONNECT_H

struct addrinfo;

/*
 * Connects a new non-blocking, close-on-exec socket to ai, waiting at
 * most timeout_ms (negative: no limit; a wait a signal interrupts starts
 * again) for the connection to be made.  bufsz > 0 sets SO_SNDBUF and
 * SO_RCVBUF before connecting, where TCP agrees the window scale.
 * Returns 0 with the socket in *fdp, RDZV_ETIMEDOUT, RDZV_ENOMEM (no
 * socket for lack of memory) or RDZV_ECONN (refused, unreachable, or the
 * wait failed).  Raises no signal.
 */
int	connect_addr(const struct addrinfo *ai, int bufsz, int timeout_ms,
	    int *fdp);

#endif /* RDZV_CONNECT_H */
