/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c: the store listener and every connection's life: accepting
 * (with a connection cap and an EMFILE back-off), telling the protocol
 * apart from the first bytes, feeding whole requests to the adapters,
 * and the limits that keep memory bounded under slow or hostile peers:
 * a memory budget for partially received requests, a deadline for a
 * started request, and back-pressure when replies go unread.  In strict
 * durability it also holds replies until the store has committed them.
 *
 * TLS (--tls-cert) shares the port: a connection whose first byte is
 * 0x16 is handed to server_tls.c, which does its socket I/O and gives
 * back the same plaintext c->in and c->out a plain connection has; so the
 * limits above work unchanged, and a plaintext connection pays one
 * pointer test per read and per flush.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "auth.h"
#include "hostport.h"
#include "log.h"
#include "rdzv_err.h"
#include "rdzvd.h"
#include "server_impl.h"
#include "tls.h"

struct server	server;

/* Partial requests smaller than this are not charged to the budget. */
#define BUDGET_FREE_BYTES	(64 * 1024)
/* Relaxed mode: uncommitted bytes past which replies wait for commits. */
#define RELAXED_BACKLOG_MAX	(64 * 1024 * 1024)
/* Bytes read at a time: small, unless a known big request is arriving. */
#define READ_MIN		(16 * 1024)
#define READ_MAX		(1024 * 1024)

static void	conn_read_cb(evutil_socket_t, short, void *);
static void	conn_write_cb(evutil_socket_t, short, void *);
static int	conn_flush(struct conn *);

void
conn_set_state(struct conn *c, enum conn_state state)
{
	log_debug("%s: state %d -> %d", c->peer, c->state, state);
	c->state = state;
}

static void
conn_set_dialect(struct conn *c, enum conn_dialect d)
{
	metrics.conns[c->dialect]--;
	c->dialect = d;
	metrics.conns[d]++;
}

static void
conn_release_budget(struct conn *c)
{
	server.budget_used -= c->budget;
	c->budget = 0;
}

static void
held_remove(struct conn *c)
{
	if (c->on_held_list) {
		TAILQ_REMOVE(&server.held, c, held_entry);
		c->on_held_list = 0;
	}
}

void
conn_close(struct conn *c, enum err_kind ek, const char *why)
{
	if (ek != ERRK_COUNT) {
		metrics.errors[ek]++;
		log_warnx("closing %s: %s", c->peer, why);
	} else
		log_debug("closing %s: %s", c->peer, why);

	if (c->ssl != NULL)
		server_tls_conn_free(c);
	tcps_conn_free(c);
	native_conn_free(c);
	if (server.rz != NULL)
		round_conn_gone(c);
	ns_ref_put(c->ns);
	held_remove(c);
	if (c->held != NULL)
		evbuffer_free(c->held);
	conn_release_budget(c);
	if (c->req_timer != NULL)
		event_free(c->req_timer);
	metrics.conns[c->dialect]--;
	TAILQ_REMOVE(&server.conns, c, entry);
	server.nconns--;
	if (c->dirty)
		TAILQ_REMOVE(&server.dirty, c, dirty_entry);
	event_free(c->rev);
	event_free(c->wev);
	evbuffer_free(c->in);
	evbuffer_free(c->out);
	close(c->fd);
	free(c);
}

void
conn_close_after_flush(struct conn *c, enum err_kind ek, const char *why)
{
	struct timeval	tv = { 1, 0 };

	metrics.errors[ek]++;
	log_warnx("closing %s: %s", c->peer, why);
	c->closing = 1;
	event_del(c->rev);
	evbuffer_drain(c->in, evbuffer_get_length(c->in));
	/* The request deadline doubles as the flush deadline. */
	evtimer_add(c->req_timer, &tv);
	conn_flush(c);
}

int
conn_output_full(struct conn *c)
{
	size_t	out;

	out = evbuffer_get_length(c->out);
	if (c->held != NULL)
		out += evbuffer_get_length(c->held);
	return out > server.cfg->output_max;
}

/*
 * Whether replies must wait for the store: always in strict mode while
 * anything is uncommitted; in relaxed mode only when the backlog passes
 * RELAXED_BACKLOG_MAX, so a disk slower than the clients bounds what a
 * crash can lose (and the memory the backlog takes) instead of growing.
 */
static int
replies_wait_for_store(void)
{
	if (server.store == NULL)
		return 0;
	if (server.cfg->durability == STORE_STRICT)
		return 1;
	return store_backlog(server.store) > RELAXED_BACKLOG_MAX;
}

struct ns_ref *
ns_ref_new(struct slice ns)
{
	struct ns_ref	*r;

	if ((r = malloc(sizeof *r + ns.len)) == NULL)
		return NULL;
	r->refs = 1;
	r->len = ns.len;
	if (ns.len > 0)
		memcpy(r->p, ns.p, ns.len);
	return r;
}

void
ns_ref_put(struct ns_ref *r)
{
	if (r != NULL && --r->refs == 0)
		free(r);
}

struct evbuffer *
conn_reply_buf(struct conn *c)
{
	return conn_reply_buf_durable(c, 0);
}

struct evbuffer *
conn_reply_buf_durable(struct conn *c, int durable)
{
	uint64_t	last;

	if (c->on_held_list || (durable && server.store != NULL) ||
	    replies_wait_for_store()) {
		last = store_last_seq(server.store);
		if (last > store_committed(server.store) || c->on_held_list) {
			/* A membership change waits for no commit window:
			 * every agent of the job is waiting on this push. */
			if (durable && last > c->hold_seq)
				store_kick(server.store);
			if (c->held == NULL && (c->held = evbuffer_new()) == NULL)
				fatal("evbuffer_new");
			if (last > c->hold_seq)
				c->hold_seq = last;
			if (!c->on_held_list) {
				TAILQ_INSERT_TAIL(&server.held, c, held_entry);
				c->on_held_list = 1;
			}
			return c->held;
		}
	}
	return c->out;
}

static void
conn_release_held(struct conn *c)
{
	evbuffer_add_buffer(c->out, c->held);
	held_remove(c);
	conn_mark_dirty(c);
}

void
conn_mark_dirty(struct conn *c)
{
	if (c->dirty)
		return;
	c->dirty = 1;
	TAILQ_INSERT_TAIL(&server.dirty, c, dirty_entry);
	event_active(server.flush_ev, EV_TIMEOUT, 0);
}

void
conn_reply_done(struct conn *c)
{
	if (c->on_held_list &&
	    store_committed(server.store) >= c->hold_seq)
		conn_release_held(c);
	else if (!c->on_held_list)
		conn_mark_dirty(c);
}

/*
 * Writes what c has queued, straight to the socket: no event is armed
 * unless the socket takes less than everything.  Returns -1 if c was
 * closed (write error, or a closing connection now flushed).
 */
static int
conn_flush(struct conn *c)
{
	int	n, e;

	if (c->dirty) {
		TAILQ_REMOVE(&server.dirty, c, dirty_entry);
		c->dirty = 0;
	}
	if (c->ssl != NULL)
		return server_tls_flush(c);
	while (evbuffer_get_length(c->out) > 0) {
		n = evbuffer_write(c->out, c->fd);
		if (n > 0)
			continue;
		e = errno;
		if (n < 0 && (e == EAGAIN || e == EWOULDBLOCK || e == EINTR)) {
			if (!event_pending(c->wev, EV_WRITE, NULL))
				event_add(c->wev, NULL);
			return 0;
		}
		conn_close(c, ERRK_COUNT, n == 0 ? "peer closed" :
		    strerror(e));
		return -1;
	}
	if (event_pending(c->wev, EV_WRITE, NULL))
		event_del(c->wev);
	if (c->closing) {
		conn_close(c, ERRK_COUNT, "flushed");
		return -1;
	}
	if (c->read_paused && !conn_output_full(c)) {
		c->read_paused = 0;
		event_add(c->rev, NULL);
		conn_process(c);	/* requests buffered while paused */
	}
	return 0;
}

/* Sends every connection's queued replies: once per loop pass. */
static void
server_flush_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct conn	*c;

	while ((c = TAILQ_FIRST(&server.dirty)) != NULL)
		conn_flush(c);
}

void
server_commit_cb(void *arg, uint64_t seq)
{
	struct conn	*c, *next;

	for (c = TAILQ_FIRST(&server.held); c != NULL; c = next) {
		next = TAILQ_NEXT(c, held_entry);
		if (c->hold_seq <= seq)
			conn_release_held(c);
	}
}

static void
conn_timeout_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct conn	*c = arg;
	char		 why[96];

	if (c->closing) {
		conn_close(c, ERRK_COUNT, "flush deadline");
		return;
	}
	if (c->ssl != NULL && c->tls_handshaking) {
		snprintf(why, sizeof why, "TLS handshake incomplete after %u "
		    "ms", server.cfg->request_timeout_ms);
		conn_close(c, ERRK_TLS_HANDSHAKE, why);
		return;
	}
	snprintf(why, sizeof why, "request incomplete after %u ms",
	    server.cfg->request_timeout_ms);
	conn_close(c, ERRK_REQUEST_TIMEOUT, why);
}

/*
 * After input was consumed: arm or clear the started-request deadline,
 * charge a large partial request to the memory budget, and stop reading
 * a connection whose replies pile up.  Returns -1 if c was closed.
 */
static int
conn_after_input(struct conn *c, int progressed)
{
	size_t		 len = evbuffer_get_length(c->in), want;
	struct timeval	 tv;

	/* Part of a TLS record inside OpenSSL is a started request too. */
	if (len == 0 && (c->ssl == NULL || !server_tls_pending(c))) {
		evtimer_del(c->req_timer);
	} else if (progressed || !evtimer_pending(c->req_timer, NULL)) {
		tv.tv_sec = server.cfg->request_timeout_ms / 1000;
		tv.tv_usec = (server.cfg->request_timeout_ms % 1000) * 1000;
		evtimer_add(c->req_timer, &tv);
	}

	want = c->need > len ? c->need : len;
	if (want < BUDGET_FREE_BYTES)
		want = 0;
	if (want > c->budget &&
	    server.budget_used - c->budget + want > server.cfg->memory_budget) {
		conn_close(c, ERRK_MEMORY_BUDGET, "partial request would exceed "
		    "the memory budget (--memory-budget)");
		return -1;
	}
	server.budget_used = server.budget_used - c->budget + want;
	c->budget = want;

	if (!c->read_paused && conn_output_full(c)) {
		metrics.errors[ERRK_OUTPUT_LIMIT]++;
		log_debug("%s: %zu bytes of replies unread, pausing input",
		    c->peer, evbuffer_get_length(c->out));
		event_del(c->rev);
		c->read_paused = 1;
	}
	return 0;
}

void
conn_process(struct conn *c)
{
	struct evbuffer		*in = c->in;
	const uint8_t		*p;
	const char		*why = "malformed request";
	size_t			 len, n, need;
	ssize_t			 used;
	int			 native, rc, progressed = 0;
	uint8_t			 version;
	enum tcps_dialect	 d;

	for (;;) {
		len = evbuffer_get_length(in);
		if (len == 0 || len < c->need || c->read_paused)
			break;
		switch (c->state) {
		case CONN_SNIFF:
			n = len < NAT_PREAMBLE_LEN ? len : NAT_PREAMBLE_LEN;
			p = evbuffer_pullup(in, n);
			if (p[0] == RDZV_TLS_FIRST_BYTE && c->ssl == NULL) {
				server_tls_start(c);
				return;
			}
			d = tcps_sniff(p, n, &native);
			if (native) {
				conn_set_dialect(c, DIALECT_NATIVE);
				conn_set_state(c, CONN_NATIVE_HELLO);
			} else if (d == TCPS_UNKNOWN) {
				c->need = len + 1;
				goto out;
			} else {
				conn_set_dialect(c, d == TCPS_V2 ?
				    DIALECT_TCPS2 : DIALECT_TCPS113);
				if (c->ssl != NULL) {
					conn_close(c, ERRK_MALFORMED, "TCPStore "
					    "protocol inside TLS: only the native "
					    "protocol is spoken over TLS");
					return;
				}
				if (server.token != NULL && !acl_allows(
				    server.tcps_allow, (struct sockaddr *)&c->sa)) {
					conn_close(c, ERRK_TCPSTORE_DENIED,
					    "TCPStore protocol refused: a token "
					    "is set and the peer is not in "
					    "--tcpstore-allow");
					return;
				}
				conn_set_state(c, CONN_SERVING);
			}
			c->need = 0;
			break;
		case CONN_NATIVE_HELLO:
			n = len < NAT_PREAMBLE_LEN ? len : NAT_PREAMBLE_LEN;
			p = evbuffer_pullup(in, n);
			rc = nat_preamble_decode(p, n, &version, &need);
			if (rc == 0) {
				c->need = need;
				goto out;
			}
			if ((rc > 0 || rc == RDZV_EVERSION) && c->ssl == NULL &&
			    server.tls_required) {
				nat_preamble_put_flags(c->out, 0, NAT_PRE_TLS);
				conn_close_after_flush(c, ERRK_TLS_REQUIRED,
				    "plaintext native connection refused: TLS "
				    "is required (--tls required); the client "
				    "needs rdzvd's CA in --tls-ca or "
				    RDZV_TLS_CA_ENV);
				return;
			}
			if (rc == RDZV_EVERSION) {
				/* Answer with version 0 (none), then hang up. */
				nat_preamble_put(c->out, 0);
				conn_close_after_flush(c, ERRK_MALFORMED,
				    "unsupported native protocol version");
				return;
			}
			if (rc < 0) {
				conn_close(c, ERRK_MALFORMED, "bad native preamble");
				return;
			}
			evbuffer_drain(in, (size_t)rc);
			if (server.token != NULL) {
				struct nat_wr	wr;

				if (rdzv_random(c->nonce, sizeof c->nonce) != 0)
					fatal("getrandom");
				nat_preamble_put_flags(c->out, NAT_VERSION,
				    NAT_PRE_AUTH);
				nat_frame_begin(&wr, c->out,
				    NAT_OP_AUTH_CHALLENGE, NAT_F_PUSH, 0);
				nat_put_bytes(&wr, c->nonce, sizeof c->nonce);
				nat_frame_end(&wr);
			} else
				nat_preamble_put(c->out, NAT_VERSION);
			conn_mark_dirty(c);
			conn_set_state(c, CONN_SERVING);
			c->need = 0;
			progressed = 1;
			break;
		case CONN_SERVING:
			p = evbuffer_pullup(in, -1);
			c->need = 0;
			if (c->dialect == DIALECT_NATIVE)
				used = native_serve(c, p, len, &why);
			else
				used = tcps_serve(c, p, len, &why);
			if (used == RDZV_EAUTH) {
				/* The EAUTH reply goes out first. */
				conn_close_after_flush(c, ERRK_AUTH, why);
				return;
			}
			if (used < 0) {
				conn_close(c, used == RDZV_ETOOBIG ? ERRK_TOO_BIG :
				    ERRK_MALFORMED, why);
				return;
			}
			if (used > 0) {
				evbuffer_drain(in, (size_t)used);
				progressed = 1;
			}
			goto out;
		}
	}
out:
	conn_after_input(c, progressed);
}

size_t
conn_read_want(const struct conn *c)
{
	size_t	len = evbuffer_get_length(c->in);

	if (c->need > len && c->need - len > READ_MIN)
		return (c->need - len < READ_MAX ? c->need - len : READ_MAX);
	return (READ_MIN);
}

static void
conn_read_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct conn		*c = arg;
	struct evbuffer_iovec	 v;
	size_t			 want;
	ssize_t			 n;

	if (c->ssl != NULL) {
		server_tls_read(c);
		return;
	}
	want = conn_read_want(c);
	if (evbuffer_reserve_space(c->in, (ev_ssize_t)want, &v, 1) < 1) {
		conn_close(c, ERRK_MEMORY_BUDGET, "out of memory for input");
		return;
	}
	n = read(fd, v.iov_base, v.iov_len);
	if (n > 0) {
		v.iov_len = (size_t)n;
		evbuffer_commit_space(c->in, &v, 1);
		conn_process(c);
		return;
	}
	if (n == 0)
		conn_close(c, ERRK_COUNT, "end of file");
	else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		conn_close(c, ERRK_COUNT, strerror(errno));
}

static void
conn_write_cb(evutil_socket_t fd, short ev, void *arg)
{
	conn_flush(arg);
}

static void
format_peer(char *out, size_t outsz, const struct sockaddr *sa)
{
	char	host[INET6_ADDRSTRLEN];
	int	port = 0;

	host[0] = '\0';
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const void *)sa;

		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
		port = ntohs(sin->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const void *)sa;

		inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
		port = ntohs(sin6->sin6_port);
	} else {
		snprintf(out, outsz, "unix");
		return;
	}
	(void)hostport_join(out, outsz, host, port);
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct conn	*c;

	if (server.draining) {
		close(fd);
		return;
	}
	if (server.nconns >= server.cfg->max_connections) {
		metrics.rejected++;
		if (metrics.rejected % 1000 == 1)
			log_warnx("refusing connection: %zu open, the limit "
			    "(--max-connections)", server.nconns);
		close(fd);
		return;
	}
	if ((c = calloc(1, sizeof *c)) == NULL) {
		log_warn("calloc");
		close(fd);
		return;
	}
	/* TCP_NODELAY and SO_KEEPALIVE come from the listener. */
	format_peer(c->peer, sizeof c->peer, sa);
	if ((size_t)salen <= sizeof c->sa)
		memcpy(&c->sa, sa, (size_t)salen);
	c->authed = server.token == NULL;
	if ((c->ns = arg) != NULL)
		c->ns->refs++;
	c->fd = fd;
	c->rev = event_new(server.base, fd, EV_READ | EV_PERSIST, conn_read_cb,
	    c);
	c->wev = event_new(server.base, fd, EV_WRITE | EV_PERSIST,
	    conn_write_cb, c);
	c->in = evbuffer_new();
	c->out = evbuffer_new();
	c->req_timer = evtimer_new(server.base, conn_timeout_cb, c);
	if (c->rev == NULL || c->wev == NULL || c->in == NULL ||
	    c->out == NULL || c->req_timer == NULL) {
		log_warnx("out of memory accepting %s", c->peer);
		if (c->rev != NULL)
			event_free(c->rev);
		if (c->wev != NULL)
			event_free(c->wev);
		if (c->in != NULL)
			evbuffer_free(c->in);
		if (c->out != NULL)
			evbuffer_free(c->out);
		if (c->req_timer != NULL)
			event_free(c->req_timer);
		ns_ref_put(c->ns);
		close(fd);
		free(c);
		return;
	}
	LIST_INIT(&c->pending);
	c->state = CONN_SNIFF;
	c->dialect = DIALECT_UNKNOWN;
	event_add(c->rev, NULL);
	TAILQ_INSERT_TAIL(&server.conns, c, entry);
	server.nconns++;
	metrics.conns[DIALECT_UNKNOWN]++;
	metrics.accepted++;
	log_debug("accepted %s", c->peer);
}

static void
accept_resume_cb(evutil_socket_t fd, short ev, void *arg)
{
	if (!server.draining) {
		evconnlistener_enable(server.listener);
		round_set_accepting(1);
	}
}

/* Out of descriptors: stop accepting for a second rather than spin. */
static void
accept_error_cb(struct evconnlistener *l, void *arg)
{
	int		 e = EVUTIL_SOCKET_ERROR();
	struct timeval	 tv = { 1, 0 };

	metrics.errors[ERRK_ACCEPT]++;
	if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
		log_warnx("accept: %s; pausing accepts for 1 s (raise the "
		    "descriptor limit, e.g. LimitNOFILE)", strerror(e));
		/* Descriptors are per process: pause every listener. */
		evconnlistener_disable(server.listener);
		round_set_accepting(0);
		evtimer_add(server.accept_timer, &tv);
	} else
		log_warnx("accept: %s", strerror(e));
}

/*
 * Resolves "HOST:PORT" or "[V6]:PORT" into a passive address; "*" or an
 * empty host mean every address (dual-stack).  Returns a getaddrinfo
 * list the caller frees, or NULL after printing the cause.
 */
static struct addrinfo *
resolve_listen(const char *spec, const char *what)
{
	struct addrinfo	 hints, *res;
	char		 host[RDZV_HOST_MAX], port[8], why[512];
	int		 rc, portnum;

	if (hostport_split(spec, HOSTPORT_PORT_ZERO | HOSTPORT_HOST_EMPTY,
	    host, sizeof host, &portnum, why, sizeof why) != 0) {
		log_warnx("%s %s", what, why);
		return NULL;
	}
	snprintf(port, sizeof port, "%d", portnum);
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host[0] == '\0' || strcmp(host, "*") == 0 ? NULL :
	    host, port, &hints, &res);
	if (rc != 0) {
		log_warnx("%s '%s': %s", what, spec, gai_strerror(rc));
		return NULL;
	}
	return res;
}

/*
 * Opens a listening socket on one of res's addresses, on port instead of
 * theirs when port > 0, backlog as long as the system allows.  Returns
 * the fd, or -1 with *err set (nothing logged).
 */
static int
listen_open(struct addrinfo *res, int port, int *err)
{
	struct addrinfo		*ai;
	int			 fd = -1, one = 1, zero = 0, saved = 0;

	/* Prefer IPv6 for a wildcard so one socket serves both families. */
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		if (port > 0 && ai->ai_family == AF_INET6)
			((struct sockaddr_in6 *)ai->ai_addr)->sin6_port =
			    htons((uint16_t)port);
		else if (port > 0 && ai->ai_family == AF_INET)
			((struct sockaddr_in *)ai->ai_addr)->sin_port =
			    htons((uint16_t)port);
		if (ai->ai_next != NULL && ai->ai_family == AF_INET &&
		    ai->ai_next->ai_family == AF_INET6 &&
		    ((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr ==
		    htonl(INADDR_ANY))
			continue;
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, ai->ai_protocol);
		if (fd == -1) {
			saved = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		/* Accepted sockets inherit these: two system calls fewer
		 * per client, which counts when thousands connect at once. */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero,
			    sizeof zero);
		/* The kernel caps the backlog at its own maximum (Linux:
		 * net.core.somaxconn), so asking for more follows it up.
		 * At job start every rank connects at once: a short accept
		 * queue drops SYNs, each retried only after a second. */
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, 65535) == 0)
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	*err = saved;
	return fd;
}

/* The port fd listens on, or -1. */
static int
listen_port(int fd)
{
	struct sockaddr_storage	ss;
	socklen_t		sl = sizeof ss;

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
		return -1;
	return ss.ss_family == AF_INET6 ?
	    ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) :
	    ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/*
 * Opens a listening socket on spec, backlog as long as the system allows;
 * returns the fd or -1 (logged).
 */
int
listen_socket(const char *spec, const char *what, int *port)
{
	struct addrinfo	*res;
	int		 fd, err = 0;

	if ((res = resolve_listen(spec, what)) == NULL)
		return -1;
	fd = listen_open(res, 0, &err);
	freeaddrinfo(res);
	if (fd == -1) {
		log_warnx("%s %s: %s%s", what, spec, strerror(err),
		    err == EADDRINUSE ? " (another process has the port; "
		    "stop it or choose another with --listen/--http)" : "");
		return -1;
	}
	*port = listen_port(fd);
	return fd;
}

int
listen_socket_range(const char *spec, const char *what, int lo, int hi,
    int *next, int *port)
{
	struct addrinfo	*res;
	int		 fd = -1, err = 0, n, p, i;

	if ((res = resolve_listen(spec, what)) == NULL) {
		errno = EINVAL;
		return -1;
	}
	n = hi - lo + 1;
	p = *next >= lo && *next <= hi ? *next : lo;
	for (i = 0; i < n; i++, p = p == hi ? lo : p + 1) {
		if ((fd = listen_open(res, p, &err)) != -1)
			break;
		/* Held by another listener, or not ours to take. */
		if (err == EADDRINUSE || err == EACCES)
			continue;
		log_warnx("%s %s, port %d: %s", what, spec, p, strerror(err));
		break;
	}
	freeaddrinfo(res);
	if (fd == -1) {
		errno = i == n ? EADDRINUSE : err;
		return -1;
	}
	*port = p;
	*next = p == hi ? lo : p + 1;
	return fd;
}

/* One network of --tcpstore-allow. */
struct acl {
	size_t		n;
	struct {
		int	family;
		uint8_t	addr[16];
		int	prefix;
	}		e[];
};

static int
acl_parse(const char *spec, struct acl **out)
{
	struct acl	*a;
	char		*copy, *tok, *save = NULL, *slash;
	size_t		 n = 1, i;
	const char	*errstr;
	const char	*p;

	for (p = spec; *p != '\0'; p++)
		if (*p == ',')
			n++;
	if ((a = calloc(1, sizeof *a + n * sizeof a->e[0])) == NULL ||
	    (copy = strdup(spec)) == NULL) {
		free(a);
		return -1;
	}
	for (tok = strtok_r(copy, ", ", &save); tok != NULL;
	    tok = strtok_r(NULL, ", ", &save)) {
		i = a->n;
		slash = strchr(tok, '/');
		if (slash != NULL)
			*slash++ = '\0';
		if (inet_pton(AF_INET, tok, a->e[i].addr) == 1)
			a->e[i].family = AF_INET;
		else if (inet_pton(AF_INET6, tok, a->e[i].addr) == 1)
			a->e[i].family = AF_INET6;
		else {
			log_warnx("--tcpstore-allow: '%s' is not an IPv4 or "
			    "IPv6 address", tok);
			goto bad;
		}
		a->e[i].prefix = a->e[i].family == AF_INET ? 32 : 128;
		if (slash != NULL) {
			a->e[i].prefix = (int)strtonum(slash, 0,
			    a->e[i].prefix, &errstr);
			if (errstr != NULL) {
				log_warnx("--tcpstore-allow: prefix '/%s' is %s",
				    slash, errstr);
				goto bad;
			}
		}
		a->n++;
	}
	free(copy);
	*out = a;
	return 0;
bad:
	free(copy);
	free(a);
	return -1;
}

static int
prefix_match(const uint8_t *a, const uint8_t *b, int bits)
{
	int	full = bits / 8, rest = bits % 8;

	if (memcmp(a, b, (size_t)full) != 0)
		return 0;
	if (rest == 0)
		return 1;
	return ((a[full] ^ b[full]) & (0xff << (8 - rest))) == 0;
}

int
acl_allows(const struct acl *a, const struct sockaddr *sa)
{
	const uint8_t	*addr;
	int		 family;
	size_t		 i;
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	    0xff, 0xff };

	if (a == NULL)
		return 0;
	if (sa->sa_family == AF_INET) {
		family = AF_INET;
		addr = (const uint8_t *)&((const struct sockaddr_in *)
		    (const void *)sa)->sin_addr;
	} else if (sa->sa_family == AF_INET6) {
		family = AF_INET6;
		addr = (const uint8_t *)&((const struct sockaddr_in6 *)
		    (const void *)sa)->sin6_addr;
		/* A dual-stack socket shows IPv4 peers as ::ffff:a.b.c.d. */
		if (memcmp(addr, mapped, sizeof mapped) == 0) {
			family = AF_INET;
			addr += 12;
		}
	} else
		return 0;
	for (i = 0; i < a->n; i++)
		if (a->e[i].family == family &&
		    prefix_match(addr, a->e[i].addr, a->e[i].prefix))
			return 1;
	return 0;
}

int
server_auth_init(void)
{
	struct rdzv_cred	cred;
	char			why[512];
	int			insecure;

	if (server.cfg->token_file == NULL) {
		if (server.cfg->tcpstore_allow != NULL)
			log_warnx("--tcpstore-allow has no effect without "
			    "--token-file: TCPStore clients are allowed from "
			    "anywhere");
		return 0;
	}
	if (rdzv_token_load(server.cfg->token_file, &server.token,
	    &server.tokenlen, &insecure, why, sizeof why) != 0) {
		log_warnx("%s", why);
		return -1;
	}
	if (rdzv_cred_parse(server.token, server.tokenlen, &cred, why,
	    sizeof why) != 0) {
		explicit_bzero(&cred, sizeof cred);
		log_warnx("--token-file %s is a job credential, not the "
		    "operator's secret that rdzvd needs", server.cfg->token_file);
		return -1;
	}
	if (insecure)
		log_warnx("token file %s is readable by group or others; "
		    "chmod 600 it", server.cfg->token_file);
	if (server.cfg->tcpstore_allow != NULL &&
	    acl_parse(server.cfg->tcpstore_allow, &server.tcps_allow) != 0)
		return -1;
	log_info("authentication on: native clients need the token or "
	    "their job's credential; "
	    "TCPStore clients %s", server.tcps_allow != NULL ?
	    "only from --tcpstore-allow" : "refused");
	return 0;
}

int
write_port_file(const char *path, int port)
{
	char	tmp[4096];
	FILE	*f;

	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
		log_warnx("port file path too long: %s", path);
		return -1;
	}
	if ((f = fopen(tmp, "w")) == NULL) {
		log_warn("cannot write port file %s", tmp);
		return -1;
	}
	fprintf(f, "%d\n", port);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		log_warn("cannot write port file %s", path);
		unlink(tmp);
		return -1;
	}
	return 0;
}

struct evconnlistener *
server_listen_fd(int fd, struct ns_ref *ns)
{
	struct evconnlistener	*l;

	/* Backlog 0: fd already listens.  -1 would make libevent call
	 * listen() again with 128, shortening listen_socket's queue. */
	l = evconnlistener_new(server.base, accept_cb, ns,
	    LEV_OPT_CLOSE_ON_FREE, 0, fd);
	if (l == NULL) {
		log_warnx("evconnlistener_new failed");
		close(fd);
		return NULL;
	}
	evconnlistener_set_error_cb(l, accept_error_cb);
	return l;
}

int
server_listen(int *port)
{
	int	fd;

	TAILQ_INIT(&server.conns);
	TAILQ_INIT(&server.held);
	TAILQ_INIT(&server.dirty);
	if ((server.flush_ev = event_new(server.base, -1, 0, server_flush_cb,
	    NULL)) == NULL)
		fatalx("event_new");
	if ((fd = listen_socket(server.cfg->listen, "listen", port)) == -1)
		return -1;
	if ((server.listener = server_listen_fd(fd, NULL)) == NULL)
		return -1;
	server.accept_timer = evtimer_new(server.base, accept_resume_cb, NULL);
	if (server.accept_timer == NULL)
		fatalx("evtimer_new");
	log_info("listening on %s (port %d)", server.cfg->listen, *port);
	return 0;
}

void
server_shutdown(void)
{
	struct conn	*c;

	server.draining = 1;
	if (server.listener != NULL) {
		evconnlistener_free(server.listener);
		server.listener = NULL;
	}
	if (server.accept_timer != NULL) {
		event_free(server.accept_timer);
		server.accept_timer = NULL;
	}
	/* Send what is queued, best effort, before closing. */
	while ((c = TAILQ_FIRST(&server.dirty)) != NULL)
		conn_flush(c);
	while ((c = TAILQ_FIRST(&server.conns)) != NULL)
		conn_close(c, ERRK_COUNT, "shutting down");
	if (server.flush_ev != NULL) {
		event_free(server.flush_ev);
		server.flush_ev = NULL;
	}
}
