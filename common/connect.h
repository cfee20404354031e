/* SPDX-License-Identifier: Apache-2.0 */
/*
 * connect.h: a TCP connect bounded by a timeout, and the wait for a socket
 * under a deadline: the ones that the store client (common/client.c) and
 * librdzvworker's sockets (libworker/net.c) both use.
 */
#ifndef RDZV_CONNECT_H
#define RDZV_CONNECT_H

#include <signal.h>
#include <stdint.h>

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

/*
 * Waits until fd is ready for events or deadline passes (a mono_ns()
 * instant; negative: never).  A signal that interrupts the wait starts it
 * again with the time left, unless flag is non-NULL and *flag is up: that
 * is checked before every wait, so a signal that came earlier counts too.
 * mask non-NULL: the wait runs under that signal mask (ppoll), the way a
 * caller that blocks its signals elsewhere sees them only while waiting.
 * Returns 1 ready, 0 timed out, RDZV_ECANCELED (*flag up) or RDZV_EIO.
 */
int	connect_poll(int fd, short events, int64_t deadline,
	    const sigset_t *mask, volatile sig_atomic_t *flag);

#endif /* RDZV_CONNECT_H */
