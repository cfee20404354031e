/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tcps_sess.h: the one mapping of PyTorch TCPStore requests onto the kv
 * core, shared by every server that speaks TCPStore (rdzvd's
 * proto_tcpstore.c, librdzvworker's tstore_srv.c).
 *
 * Layering: common/wire_tcpstore.c decodes a request's bytes into a
 * struct tcps_req and encodes reply values; this file gives each request
 * its meaning (which kv call, what reply, in which dialect) and owns the
 * one WAIT/BARRIER and the WATCH_KEY registrations a connection may have;
 * the servers above own sockets, event loops, back-pressure and metrics.
 * No I/O here: replies go to the evbuffer the server's hooks name.
 *
 * A TCPStore client has at most one request in flight, so a session has
 * at most one pending WAIT or BARRIER.  A new request arriving while one
 * is pending means the client gave up on it (a 1.13 client timed out,
 * which sends nothing); the wait is dropped silently so that no stray
 * STOP_WAITING lands in a later exchange.  CANCEL_WAIT (2.x) drops it and
 * answers WAIT_CANCELED whether or not one was pending.
 */
#ifndef RDZV_TCPS_SESS_H
#define RDZV_TCPS_SESS_H

#include <stddef.h>

#include "kv.h"
#include "wire.h"

struct evbuffer;

/* WATCH_KEY registrations one session may hold. */
#define TCPS_SESS_WATCH_MAX	1024

/*
 * How a session hands its replies to the server.  reply_buf names the
 * buffer the next reply goes to (called once per reply, only when one is
 * written); reply_done says that reply is whole and may be sent.  Both
 * run inside tcps_sess_serve() for the session's own request, and inside
 * another session's mutation for a wake or a watch push: they must not
 * call back into the session or the kv core.
 */
struct tcps_sess_io {
	struct evbuffer	*(*reply_buf)(void *arg);
	void		 (*reply_done)(void *arg);
};

/* One TCPStore connection's state in the core; the server embeds it. */
struct tcps_sess {
	struct kv			*kv;
	struct slice			 ns;	/* the namespace it sees */
	enum tcps_dialect		 dialect;
	const struct tcps_sess_io	*io;
	void				*arg;	/* passed to io's hooks */
	struct kv_waiter		*wait;	/* pending WAIT or BARRIER */
	struct kv_waiter		**watch; /* WATCH_KEY registrations */
	size_t				 nwatch;
};

/* Starts a session on kv in namespace ns (whose bytes must outlive it). */
void	tcps_sess_init(struct tcps_sess *, struct kv *, struct slice ns,
	    enum tcps_dialect, const struct tcps_sess_io *, void *arg);

/*
 * Serves one decoded request: applies it to the kv core and writes its
 * reply, if it has one, through the io hooks (a WAIT or BARRIER that
 * cannot answer yet answers later, from the mutation that completes it).
 * Returns 0, or a negative RDZV_E* with *why set to a reason for the log,
 * after which the server must close the connection: a VALIDATE with a
 * wrong magic (RDZV_EPROTO), a 1.13 GET of a missing key (RDZV_ENOTFOUND,
 * as torch's server drops the connection), an ADD or BARRIER on a value
 * that is not a decimal int64 (RDZV_ENOTINT) or an ADD that overflows
 * (RDZV_EINVAL), too many WATCH_KEYs (RDZV_ETOOBIG), RDZV_ENOMEM.
 */
int	tcps_sess_serve(struct tcps_sess *, const struct tcps_req *,
	    const char **why);

/* Drops the session's wait and watches (their callbacks never run).
 * Safe on a zeroed session that was never started. */
void	tcps_sess_end(struct tcps_sess *);

#endif /* RDZV_TCPS_SESS_H */
