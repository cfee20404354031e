/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.c: the blocking native-protocol store client (see client.h).
 *
 * Owns one TCP connection to rdzvd: address parsing and resolution, a
 * non-blocking connect under a deadline, the TLS handshake when asked
 * for, the native handshake (handshake.h drives it, this file does its
 * I/O), and one request/reply exchange per call.
 * Requests are encoded and replies decoded with the codecs of wire.h; all
 * waiting is ppoll() against a CLOCK_MONOTONIC deadline, so every call is
 * bounded by its timeout.  Every byte goes through client_read() and
 * client_write(), which speak either the bare socket or OpenSSL; with
 * TLS the socket is non-blocking underneath OpenSSL too (through a BIO
 * of our own that never raises SIGPIPE; common/tls.h says why), and a
 * WANT_READ/WANT_WRITE becomes a ppoll() in that direction.
 *
 * Why about 1,400 lines: one connection's blocking I/O (resolution,
 * connect, TLS, the handshake) and one short function per op of the
 * protocol, each through the one request helper (client_request,
 * client_call); the ops are the public API of client.h, one place to
 * read them.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include "client.h"
#include "connect.h"
#include "handshake.h"
#include "hostport.h"
#include "mono.h"
#include "rdzv_err.h"
#include "tls.h"
#include "wire.h"

/* Extra time a blocking wait gives rdzvd to answer after its own timeout. */
#define CLIENT_WAIT_GRACE_MS	2000
/* How long a best-effort CANCEL of an abandoned wait may take to send. */
#define CLIENT_CANCEL_MS	200
/* Namespaces rdzvd accepts (wire_limits.ns_max). */
#define CLIENT_NS_MAX		1024
/* What one SSL_read_ex asks for: a whole TLS record's worth. */
#define CLIENT_TLS_READ		16384

struct rdzv_client {
	int			 fd;
	int			 dead;		/* first fatal cause, 0 alive */
	uint32_t		 next_id;
	char			*ns;
	struct evbuffer		*out;
	struct evbuffer		*in;
	size_t			 in_need;	/* bytes before decoding is worthwhile */
	size_t			 in_used;	/* bytes of the last reply, drained later */
	struct wire_limits	 lim;
	rdzv_push_cb		 push_cb;
	void			*push_arg;
	SSL_CTX			*ssl_ctx;	/* TLS; NULL for plaintext */
	SSL			*ssl;
	int			 tls_eof;	/* the socket read 0 under TLS */
	const sigset_t		*intr_mask;	/* rdzv_client_set_interrupt */
	volatile sig_atomic_t	*intr_flag;
	char			 errmsg[512];
};

/* A deadline from a timeout: -1 is "never". */
static int64_t
client_deadline(int timeout_ms)
{
	if (timeout_ms < 0)
		return (-1);
	return (mono_ns() + (int64_t)timeout_ms * 1000000);
}

/* Milliseconds left before deadline for poll(), rounded up; -1 forever. */
static int
client_left_ms(int64_t deadline)
{
	int64_t	left;

	if (deadline < 0)
		return (-1);
	left = deadline - mono_ns();
	if (left <= 0)
		return (0);
	left = (left + 999999) / 1000000;
	return (left > INT_MAX ? INT_MAX : (int)left);
}

/*
 * Waits for events on the socket; returns 1 ready, 0 timed out,
 * RDZV_ECANCELED when the caller's interrupt flag is up, <0 error.
 */
static int
client_poll(struct rdzv_client *c, short events, int64_t deadline)
{
	return (connect_poll(c->fd, events, deadline, c->intr_mask,
	    c->intr_flag));
}

/* Marks the client dead with its first cause and returns that cause. */
static int
client_kill(struct rdzv_client *c, int code)
{
	if (c->dead == 0) {
		c->dead = code;
		if (c->fd != -1)
			close(c->fd);
		c->fd = -1;
	}
	return (c->dead);
}

/* The code a call on a dead client returns. */
static int
client_dead_code(const struct rdzv_client *c)
{
	return (c->dead == RDZV_ENOMEM ? RDZV_ENOMEM : RDZV_ECONN);
}

/*
 * The BIO under a TLS connection: the client's socket, written with
 * MSG_NOSIGNAL (OpenSSL's own socket BIO uses write(), which would raise
 * SIGPIPE in the caller's process when rdzvd has gone).  The method table
 * is made once and never changes.
 */
static BIO_METHOD	*client_bio_meth;
static pthread_once_t	 client_bio_once = PTHREAD_ONCE_INIT;

static int
client_bio_write(BIO *b, const char *p, int len)
{
	struct rdzv_client	*c = BIO_get_data(b);
	ssize_t			 n;

	BIO_clear_retry_flags(b);
	n = send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		BIO_set_retry_write(b);
	return ((int)n);
}

static int
client_bio_read(BIO *b, char *p, int len)
{
	struct rdzv_client	*c = BIO_get_data(b);
	ssize_t			 n;

	BIO_clear_retry_flags(b);
	n = recv(c->fd, p, len, MSG_DONTWAIT);
	if (n == 0)
		c->tls_eof = 1;
	else if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		BIO_set_retry_read(b);
	return ((int)n);
}

static long
client_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct rdzv_client	*c = BIO_get_data(b);

	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return (1);	/* nothing is held back */
	case BIO_CTRL_EOF:
		return (c != NULL && c->tls_eof);
	}
	return (0);
}

static int
client_bio_create(BIO *b)
{
	BIO_set_init(b, 1);
	return (1);
}

static void
client_bio_init(void)
{
	BIO_METHOD	*m;
	int		 type;

	if ((type = BIO_get_new_index()) == -1 ||
	    (m = BIO_meth_new(type | BIO_TYPE_SOURCE_SINK,
	    "rdzv client socket")) == NULL)
		return;
	if (BIO_meth_set_write(m, client_bio_write) != 1 ||
	    BIO_meth_set_read(m, client_bio_read) != 1 ||
	    BIO_meth_set_ctrl(m, client_bio_ctrl) != 1 ||
	    BIO_meth_set_create(m, client_bio_create) != 1) {
		BIO_meth_free(m);
		return;
	}
	client_bio_meth = m;
}

/* A BIO on c's socket, or NULL. */
static BIO *
client_bio_new(struct rdzv_client *c)
{
	BIO	*b;

	if (pthread_once(&client_bio_once, client_bio_init) != 0 ||
	    client_bio_meth == NULL || (b = BIO_new(client_bio_meth)) == NULL)
		return (NULL);
	BIO_set_data(b, c);
	return (b);
}

/*
 * After an SSL_*_ex call failed: 0 with *want set when OpenSSL waits for
 * the socket in that direction, else RDZV_ECONN (closed, reset, or an
 * alert: the stream is over).
 */
static int
client_tls_want(struct rdzv_client *c, short *want)
{
	switch (SSL_get_error(c->ssl, 0)) {
	case SSL_ERROR_WANT_READ:
		*want = POLLIN;
		return (0);
	case SSL_ERROR_WANT_WRITE:
		*want = POLLOUT;
		return (0);
	}
	ERR_clear_error();
	return (RDZV_ECONN);
}

/*
 * One attempt to send some of c->out: returns 1 after sending (and
 * draining) some, 0 when the socket must first be ready for *want, or a
 * fatal RDZV_E* code.
 */
static int
client_write(struct rdzv_client *c, short *want)
{
	struct evbuffer_iovec	 v[16];
	struct iovec		 iov[16];
	struct msghdr		 mh;
	const uint8_t		*p;
	size_t			 len, done;
	ssize_t			 n;
	int			 i, nv;

	if (c->ssl != NULL) {
		/*
		 * One contiguous run, so OpenSSL fills whole records; a retry
		 * after WANT_* passes the same bytes again, perhaps moved
		 * (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER).
		 */
		len = evbuffer_get_length(c->out);
		if ((p = evbuffer_pullup(c->out, -1)) == NULL)
			return (RDZV_ENOMEM);
		ERR_clear_error();
		if (SSL_write_ex(c->ssl, p, len, &done) == 1) {
			evbuffer_drain(c->out, done);
			return (1);
		}
		return (client_tls_want(c, want));
	}
	for (;;) {
		nv = evbuffer_peek(c->out, -1, NULL, v, 16);
		if (nv > 16)
			nv = 16;
		for (i = 0; i < nv; i++) {
			iov[i].iov_base = v[i].iov_base;
			iov[i].iov_len = v[i].iov_len;
		}
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = iov;
		mh.msg_iovlen = nv;
		n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			evbuffer_drain(c->out, n);
			return (1);
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno != EAGAIN && errno != EWOULDBLOCK)
			return (RDZV_ECONN);
		*want = POLLOUT;
		return (0);
	}
}

/*
 * One attempt to read into c->in: returns 1 after reading some, 0 when
 * the socket must first be ready for *want, or a fatal RDZV_E* code
 * (RDZV_ECONN when the peer closed).  Over TLS this reads what OpenSSL
 * already holds decrypted before the socket is looked at again.
 */
static int
client_read(struct rdzv_client *c, short *want)
{
	struct evbuffer_iovec	v;
	size_t			done;
	int			n;

	if (c->ssl != NULL) {
		if (evbuffer_reserve_space(c->in, CLIENT_TLS_READ, &v, 1) < 1)
			return (RDZV_ENOMEM);
		ERR_clear_error();
		if (SSL_read_ex(c->ssl, v.iov_base, v.iov_len, &done) != 1)
			return (client_tls_want(c, want));
		v.iov_len = done;
		if (evbuffer_commit_space(c->in, &v, 1) != 0)
			return (RDZV_ENOMEM);
		return (1);
	}
	for (;;) {
		n = evbuffer_read(c->in, c->fd, 65536);
		if (n > 0)
			return (1);
		if (n == 0)
			return (RDZV_ECONN);
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return (RDZV_ECONN);
		*want = POLLIN;
		return (0);
	}
}

/*
 * Writes everything queued in c->out.  A timeout (or an interrupt) before
 * the first byte leaves a plaintext stream intact (the code returned,
 * request discarded); one in the middle of a frame cannot be recovered
 * and kills the client, as does any under TLS, where OpenSSL holds the
 * record it began and must be given the same bytes again.
 */
static int
client_flush(struct rdzv_client *c, int64_t deadline)
{
	size_t	total;
	short	want = POLLOUT;
	int	rv;

	total = evbuffer_get_length(c->out);
	while (evbuffer_get_length(c->out) > 0) {
		if ((rv = client_write(c, &want)) < 0)
			return (client_kill(c, rv));
		if (rv > 0)
			continue;
		if ((rv = client_poll(c, want, deadline)) > 0)
			continue;
		if (rv == 0)
			rv = RDZV_ETIMEDOUT;
		if ((rv == RDZV_ETIMEDOUT || rv == RDZV_ECANCELED) &&
		    c->ssl == NULL && evbuffer_get_length(c->out) == total) {
			evbuffer_drain(c->out, total);
			return (rv);
		}
		return (client_kill(c, rv));
	}
	return (0);
}

/*
 * Reads what the connection has into c->in, waiting until deadline:
 * RDZV_ETIMEDOUT or RDZV_ECANCELED leave the stream intact.
 */
static int
client_fill(struct rdzv_client *c, int64_t deadline)
{
	short	want = POLLIN;
	int	rv;

	for (;;) {
		if ((rv = client_read(c, &want)) > 0)
			return (0);
		if (rv < 0)
			return (client_kill(c, rv));
		rv = client_poll(c, want, deadline);
		if (rv == 0)
			return (RDZV_ETIMEDOUT);
		if (rv == RDZV_ECANCELED)
			return (rv);
		if (rv < 0)
			return (client_kill(c, rv));
	}
}

/*
 * Reads the next whole frame into *msg (pointing into c->in) and sets
 * *used to its size.  A partial frame stays buffered across a timeout.
 */
static int
client_read_frame(struct rdzv_client *c, int64_t deadline,
    struct nat_msg *msg, size_t *used)
{
	const uint8_t	*p;
	size_t		 len, need;
	int		 rv;

	for (;;) {
		len = evbuffer_get_length(c->in);
		/* Only make the buffer contiguous once the frame is all there. */
		if (len > 0 && len >= c->in_need) {
			if ((p = evbuffer_pullup(c->in, -1)) == NULL)
				return (client_kill(c, RDZV_ENOMEM));
			need = 0;
			rv = nat_decode(p, len, &c->lim, msg, &need);
			if (rv < 0)
				return (client_kill(c, rv));
			if (rv > 0) {
				c->in_need = 0;
				*used = (size_t)rv;
				return (0);
			}
			c->in_need = need;
		}
		if ((rv = client_fill(c, deadline)) < 0)
			return (rv);
	}
}

/* Drops the bytes of the reply handed out by the previous call. */
static void
client_release(struct rdzv_client *c)
{
	if (c->in_used > 0) {
		evbuffer_drain(c->in, c->in_used);
		c->in_used = 0;
	}
}

/*
 * Reads frames until the reply to id arrives; pushes go to the callback
 * and replies to earlier, abandoned requests are skipped.  On success
 * *msg holds the reply (valid until the next call).  An error reply is
 * decoded into its code.
 */
static int
client_await(struct rdzv_client *c, uint32_t id, int64_t deadline,
    struct nat_msg *msg)
{
	struct nat_rd	rd;
	struct slice	text;
	int64_t		code;
	size_t		used, n;
	int		rv;

	for (;;) {
		if ((rv = client_read_frame(c, deadline, msg, &used)) < 0)
			return (rv);
		if (msg->flags & NAT_F_PUSH) {
			if (c->push_cb != NULL)
				c->push_cb(msg->op, msg->payload.p,
				    msg->payload.len, c->push_arg);
			evbuffer_drain(c->in, used);
			continue;
		}
		if (!(msg->flags & NAT_F_REPLY))
			return (client_kill(c, RDZV_EPROTO));
		if (msg->id != id) {
			evbuffer_drain(c->in, used);
			continue;
		}
		c->in_used = used;
		if (!(msg->flags & NAT_F_ERROR))
			return (0);

		nat_rd_init(&rd, msg->payload);
		if (nat_get_i64(&rd, &code) != 0 ||
		    nat_get_bytes(&rd, &text) != 0 || nat_rd_end(&rd) != 0)
			return (RDZV_EPROTO);
		n = text.len < sizeof c->errmsg - 1 ? text.len :
		    sizeof c->errmsg - 1;
		memcpy(c->errmsg, text.p, n);
		c->errmsg[n] = '\0';
		if (code >= 0 || code < RDZV_ERR_MIN)
			return (RDZV_EPROTO);
		return ((int)code);
	}
}

/* Starts a request: a fresh id and frame header. */
static int
client_begin(struct rdzv_client *c, struct nat_wr *wr, uint16_t op,
    uint32_t *id)
{
	if (c->dead)
		return (client_dead_code(c));
	client_release(c);
	c->errmsg[0] = '\0';
	evbuffer_drain(c->out, evbuffer_get_length(c->out));
	if (++c->next_id == 0)
		c->next_id = 1;
	*id = c->next_id;
	if (nat_frame_begin(wr, c->out, op, 0, *id) != 0)
		return (RDZV_ENOMEM);
	return (0);
}

/* Sends a best-effort CANCEL for an abandoned wait; its reply is skipped. */
static void
client_cancel(struct rdzv_client *c, uint32_t id)
{
	struct nat_wr	wr;
	uint32_t	cid;

	if (client_begin(c, &wr, NAT_OP_CANCEL, &cid) != 0)
		return;
	if (nat_put_i64(&wr, id) != 0 || nat_frame_end(&wr) != 0) {
		evbuffer_drain(c->out, evbuffer_get_length(c->out));
		return;
	}
	(void)client_flush(c, client_deadline(CLIENT_CANCEL_MS));
}

/*
 * Finishes the frame in wr, sends it and waits for its reply until
 * deadline.  cancel_on_timeout: the op waits in rdzvd, so a local timeout
 * also cancels it there.
 */
static int
client_call(struct rdzv_client *c, struct nat_wr *wr, uint32_t id,
    int64_t deadline, int cancel_on_timeout, struct nat_msg *msg)
{
	int	rv;

	if (nat_frame_end(wr) != 0) {
		evbuffer_drain(c->out, evbuffer_get_length(c->out));
		return (RDZV_ENOMEM);
	}
	if ((rv = client_flush(c, deadline)) < 0)
		return (rv);
	rv = client_await(c, id, deadline, msg);
	if (rv == RDZV_ETIMEDOUT && cancel_on_timeout && !c->dead)
		client_cancel(c, id);
	return (rv);
}

/* Copies a slice into a malloc'ed, NUL-terminated buffer. */
static int
client_dup(struct slice s, void **out, size_t *len)
{
	char	*p;

	if (s.len == SIZE_MAX || (p = malloc(s.len + 1)) == NULL)
		return (RDZV_ENOMEM);
	if (s.len > 0)
		memcpy(p, s.p, s.len);
	p[s.len] = '\0';
	*out = p;
	if (len != NULL)
		*len = s.len;
	return (0);
}

/*
 * The one request helper every op goes through.  fmt lists the fields of
 * the request, a letter each, taken from the arguments that follow in
 * this order and of exactly these types (they pass through varargs):
 *	n	the client's namespace (no argument)
 *	s	a C string: const char *
 *	b	bytes: const void *, size_t
 *	i	an integer: int64_t
 *	t	the call's own timeout_ms, the time rdzvd may wait (-1
 *		forever; no argument): such an op gets a grace period to
 *		answer and is cancelled in rdzvd when we stop waiting
 *	K	a key list, "i n, n*b": const char *const *, size_t n
 *	P	n key-value pairs, "i n, n*(b b)": const char *const *keys,
 *		const void *const *vals, const size_t *lens, size_t n
 *	r	fields already encoded: const void *, size_t
 * The format may go on with '>' and the reply's fields (client_vreply);
 * *fmtp is left there.  Sends the request and waits for its reply into
 * *msg (valid until the next call).
 */
static int
client_vrequest(struct rdzv_client *c, uint16_t op, int timeout_ms,
    struct nat_msg *msg, const char **fmtp, va_list *ap)
{
	struct nat_wr		 wr;
	const char *const	*keys;
	const void *const	*vals;
	const size_t		*lens;
	const char		*f, *s;
	const void		*p;
	size_t			 len, n, i;
	uint32_t		 id;
	int			 rv, waits = 0, bad = 0;

	if ((rv = client_begin(c, &wr, op, &id)) != 0)
		return (rv);
	for (f = *fmtp; *f != '\0' && *f != '>' && !bad; f++) {
		switch (*f) {
		case 'n':
			bad = nat_put_bytes(&wr, c->ns, strlen(c->ns));
			break;
		case 's':
			s = va_arg(*ap, const char *);
			bad = nat_put_bytes(&wr, s, strlen(s));
			break;
		case 'b':
		case 'r':
			p = va_arg(*ap, const void *);
			len = va_arg(*ap, size_t);
			bad = *f == 'b' ? nat_put_bytes(&wr, p, len) :
			    nat_put_raw(&wr, p, len);
			break;
		case 'i':
			bad = nat_put_i64(&wr, va_arg(*ap, int64_t));
			break;
		case 't':
			waits = 1;
			bad = nat_put_i64(&wr, timeout_ms < 0 ? -1 : timeout_ms);
			break;
		case 'K':
		case 'P':
			keys = va_arg(*ap, const char *const *);
			vals = *f == 'P' ? va_arg(*ap, const void *const *) :
			    NULL;
			lens = *f == 'P' ? va_arg(*ap, const size_t *) : NULL;
			n = va_arg(*ap, size_t);
			bad = n > INT64_MAX || nat_put_i64(&wr, (int64_t)n);
			for (i = 0; i < n && !bad; i++)
				bad = nat_put_bytes(&wr, keys[i],
				    strlen(keys[i])) || (vals != NULL &&
				    nat_put_bytes(&wr, vals[i], lens[i]));
			break;
		default:
			return (RDZV_EINVAL);
		}
	}
	*fmtp = f;
	if (bad)
		return (RDZV_ENOMEM);
	if (waits && timeout_ms >= 0)
		timeout_ms = timeout_ms > INT_MAX - CLIENT_WAIT_GRACE_MS ?
		    INT_MAX : timeout_ms + CLIENT_WAIT_GRACE_MS;
	return (client_call(c, &wr, id, client_deadline(timeout_ms), waits,
	    msg));
}

/*
 * Decodes a reply of exactly the fields fmt lists, storing each through
 * the arguments ap points at (a NULL pointer drops the field):
 *	i	int64_t *
 *	b	void ** (malloc'ed, NUL-terminated), size_t * (may be NULL);
 *		one such field at most
 *	f	an integer the call returns as a flag, 0 or 1 (no argument)
 * The whole reply is checked before anything is stored.  Returns 0, the
 * flag, RDZV_EPROTO or RDZV_ENOMEM.
 */
static int
client_vreply(const struct nat_msg *msg, const char *fmt, va_list *ap)
{
	struct nat_rd	 rd;
	struct slice	 s;
	const char	*f;
	int64_t		 v, *vp;
	void		**pp;
	size_t		*lp;
	int		 flag = 0;

	nat_rd_init(&rd, msg->payload);
	for (f = fmt; *f != '\0'; f++)
		if ((*f == 'b' ? nat_get_bytes(&rd, &s) :
		    nat_get_i64(&rd, &v)) != 0)
			return (RDZV_EPROTO);
	if (nat_rd_end(&rd) != 0)
		return (RDZV_EPROTO);
	nat_rd_init(&rd, msg->payload);
	for (f = fmt; *f != '\0'; f++) {
		if (*f == 'b') {
			(void)nat_get_bytes(&rd, &s);
			pp = va_arg(*ap, void **);
			lp = va_arg(*ap, size_t *);
			if (pp != NULL && client_dup(s, pp, lp) != 0)
				return (RDZV_ENOMEM);
			continue;
		}
		(void)nat_get_i64(&rd, &v);
		if (*f == 'f')
			flag = v != 0;
		else if ((vp = va_arg(*ap, int64_t *)) != NULL)
			*vp = v;
	}
	return (flag);
}

/* A request (client_vrequest's fmt), its reply left in *msg. */
static int
client_request(struct rdzv_client *c, uint16_t op, int timeout_ms,
    struct nat_msg *msg, const char *fmt, ...)
{
	va_list	ap;
	int	rv;

	va_start(ap, fmt);
	rv = client_vrequest(c, op, timeout_ms, msg, &fmt, &ap);
	va_end(ap);
	return (rv);
}

/*
 * A request and its reply, both in fmt: "nsi>i" sends the namespace, a
 * key and an integer, and stores the reply's integer.
 */
static int
client_rpc(struct rdzv_client *c, uint16_t op, int timeout_ms,
    const char *fmt, ...)
{
	struct nat_msg	msg;
	va_list		ap;
	int		rv;

	va_start(ap, fmt);
	rv = client_vrequest(c, op, timeout_ms, &msg, &fmt, &ap);
	if (rv == 0)
		rv = client_vreply(&msg, *fmt == '>' ? fmt + 1 : fmt, &ap);
	va_end(ap);
	return (rv);
}

/* Tunes a connected socket: no Nagle delay, keepalive to find dead peers. */
static void
client_sockopts(int fd)
{
	int	one = 1, idle = 10, intvl = 5, cnt = 3;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/*
 * The native handshake (handshake.h): our preamble, rdzvd's, and the
 * token's challenge-response when rdzvd asks for it, driven with this
 * client's blocking I/O.  hp names rdzvd in the reason for a refusal,
 * which goes to c->errmsg.  Bytes after the handshake stay in c->in.
 */
static int
client_hello(struct rdzv_client *c, const char *hp, int64_t deadline,
    const void *token, size_t tokenlen)
{
	struct hs_config	 cfg;
	struct hs		 hs;
	const uint8_t		*p;
	size_t			 len, used;
	int			 rv;

	memset(&cfg, 0, sizeof cfg);
	cfg.token = token;
	cfg.tokenlen = tokenlen;
	cfg.endpoint = hp;
	cfg.token_flag = "--token-file";
	cfg.ca_flag = "--tls-ca";
	if (hs_start(&hs, &cfg, c->out) != 0)
		return (RDZV_ENOMEM);
	for (;;) {
		if ((rv = client_flush(c, deadline)) < 0)
			return (rv);
		if ((len = evbuffer_get_length(c->in)) > 0) {
			if ((p = evbuffer_pullup(c->in, -1)) == NULL)
				return (RDZV_ENOMEM);
			rv = hs_input(&hs, p, len, &used, c->out);
			evbuffer_drain(c->in, used);
			if (rv < 0) {
				strlcpy(c->errmsg, hs_why(&hs),
				    sizeof c->errmsg);
				return (rv);
			}
			if (rv > 0)
				return (0);
			if (evbuffer_get_length(c->out) > 0)
				continue;
		}
		if ((rv = client_fill(c, deadline)) < 0)
			return (rv);
	}
}

/*
 * Runs the TLS handshake on c's connected socket before deadline, with a
 * context trusting cafile and host (the part of hp before the port) as
 * the name or address rdzvd's certificate must carry.  On failure
 * c->errmsg says why and what to check.
 */
static int
client_tls_start(struct rdzv_client *c, const char *cafile,
    const char *host, const char *hp, int64_t deadline)
{
	BIO		*bio;
	const char	*hint;
	char		 what[320];
	size_t		 n;
	long		 vr;
	short		 want;
	int		 r, rv;

	c->ssl_ctx = rdzv_tls_client_ctx(cafile, c->errmsg, sizeof c->errmsg);
	if (c->ssl_ctx == NULL)
		return (RDZV_ETLS);
	c->ssl = rdzv_tls_client_new(c->ssl_ctx, host, c->errmsg,
	    sizeof c->errmsg);
	if (c->ssl == NULL)
		return (RDZV_ETLS);
	if ((bio = client_bio_new(c)) == NULL)
		return (RDZV_ENOMEM);
	SSL_set_bio(c->ssl, bio, bio);
	for (;;) {
		ERR_clear_error();
		if ((r = SSL_connect(c->ssl)) == 1)
			return (0);
		switch (SSL_get_error(c->ssl, r)) {
		case SSL_ERROR_WANT_READ:
			want = POLLIN;
			break;
		case SSL_ERROR_WANT_WRITE:
			want = POLLOUT;
			break;
		default:
			want = 0;
		}
		if (want == 0)
			break;
		if ((rv = client_poll(c, want, deadline)) == 0) {
			ERR_clear_error();
			return (RDZV_ETIMEDOUT);
		}
		if (rv < 0) {
			ERR_clear_error();
			return (rv);
		}
	}

	vr = SSL_get_verify_result(c->ssl);
	if (vr == X509_V_ERR_HOSTNAME_MISMATCH ||
	    vr == X509_V_ERR_IP_ADDRESS_MISMATCH)
		hint = "rdzvd's certificate does not name the host or address "
		    "connected to: use one its --tls-cert names";
	else if (vr != X509_V_OK)
		hint = "is --tls-ca the CA that signed rdzvd's --tls-cert?";
	else
		hint = "is rdzvd started with --tls-cert?";
	snprintf(what, sizeof what, "TLS handshake with %s failed", hp);
	rdzv_tls_why(c->ssl, what, c->errmsg, sizeof c->errmsg);
	n = strlen(c->errmsg);
	snprintf(c->errmsg + n, sizeof c->errmsg - n, " (%s)", hint);
	return (RDZV_ETLS);
}

/* Words for a failure to connect that left no message of its own. */
static struct rdzv_client *client_connect_one(const char *, int,
		    const struct rdzv_client_opts *, int *);

static void
client_why(char *why, size_t whysz, const char *hp, int code,
    const char *msg)
{
	if (why == NULL || whysz == 0)
		return;
	if (msg != NULL && *msg != '\0')
		snprintf(why, whysz, "%s", msg);
	else
		snprintf(why, whysz, "cannot connect to %s: %s",
		    hp != NULL ? hp : "(null)", rdzv_strerror(code));
}

struct rdzv_client *
rdzv_client_connect(const char *host_port, int timeout_ms, int *err)
{
	return (rdzv_client_connect_opts(host_port, timeout_ms, NULL, err));
}

struct rdzv_client *
rdzv_client_connect_auth(const char *host_port, int timeout_ms,
    const void *token, size_t tokenlen, int *err)
{
	struct rdzv_client_opts	o;

	memset(&o, 0, sizeof o);
	o.token = token;
	o.tokenlen = tokenlen;
	return (rdzv_client_connect_opts(host_port, timeout_ms, &o, err));
}

/*
 * A list "A,B,C" (rdzvds of which one leads, the others standing by and
 * not listening): each in turn, with an even share of what is left of
 * timeout_ms, until one answers.  The last failure is what is reported.
 */
struct rdzv_client *
rdzv_client_connect_opts(const char *host_port, int timeout_ms,
    const struct rdzv_client_opts *o, int *err)
{
	struct rdzv_client	*c;
	char			 hp[RDZV_HOSTPORT_MAX];
	size_t			 i, n = hostport_list_count(host_port);
	int64_t			 deadline;
	int			 left, rv = RDZV_ECONN;

	if (n == 1)
		return (client_connect_one(host_port, timeout_ms, o, err));
	deadline = client_deadline(timeout_ms);
	for (i = 0; i < n; i++) {
		if (hostport_list_get(host_port, i, hp, sizeof hp) != 0) {
			rv = RDZV_EINVAL;
			if (o != NULL)
				client_why(o->why, o->whysz, host_port, rv,
				    NULL);
			break;
		}
		left = client_left_ms(deadline);
		if (left > 0)
			left = left / (int)(n - i) > 0 ? left / (int)(n - i) :
			    1;
		if ((c = client_connect_one(hp, left, o, &rv)) != NULL)
			return (c);
		if (rv == RDZV_EINVAL || rv == RDZV_ENOMEM)
			break;
	}
	if (err != NULL)
		*err = rv;
	return (NULL);
}

/* Connects to one endpoint: rdzv_client_connect_opts() without lists. */
static struct rdzv_client *
client_connect_one(const char *host_port, int timeout_ms,
    const struct rdzv_client_opts *o, int *err)
{
	struct rdzv_client_opts	 none;
	struct rdzv_client	*c = NULL;
	struct addrinfo		 hints, *res = NULL, *ai;
	char			 host[RDZV_HOST_MAX], port[8];
	int64_t			 deadline;
	int			 rv, fd = -1, portnum;

	if (o == NULL) {
		memset(&none, 0, sizeof none);
		o = &none;
	}
	if (o->why != NULL && o->whysz > 0)
		o->why[0] = '\0';
	deadline = client_deadline(timeout_ms);
	if ((rv = hostport_split(host_port, 0, host, sizeof host, &portnum,
	    NULL, 0)) != 0)
		goto fail;
	snprintf(port, sizeof port, "%d", portnum);

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rv = getaddrinfo(host, port, &hints, &res);
	if (rv != 0) {
		rv = (rv == EAI_MEMORY ? RDZV_ENOMEM : RDZV_ECONN);
		res = NULL;
		goto fail;
	}
	rv = RDZV_ECONN;
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		if ((rv = connect_addr(ai, 0, client_left_ms(deadline),
		    &fd)) == 0)
			break;
		if (rv == RDZV_ETIMEDOUT || rv == RDZV_ENOMEM)
			break;
	}
	freeaddrinfo(res);
	if (fd < 0)
		goto fail;
	client_sockopts(fd);

	if ((c = calloc(1, sizeof *c)) == NULL) {
		rv = RDZV_ENOMEM;
		goto fail;
	}
	c->fd = fd;
	fd = -1;
	wire_limits_default(&c->lim);
	/* rdzvd enforces the real limits; a reply is only bounded loosely. */
	c->lim.value_max = (size_t)1 << 30;
	c->out = evbuffer_new();
	c->in = evbuffer_new();
	c->ns = strdup("");
	if (c->out == NULL || c->in == NULL || c->ns == NULL) {
		rv = RDZV_ENOMEM;
		goto fail;
	}
	if (o->tls_ca != NULL && (rv = client_tls_start(c, o->tls_ca, host,
	    host_port, deadline)) < 0)
		goto fail;
	if ((rv = client_hello(c, host_port, deadline, o->token,
	    o->tokenlen)) < 0)
		goto fail;
	return (c);

fail:
	if (fd >= 0)
		close(fd);
	client_why(o->why, o->whysz, host_port, rv,
	    c != NULL ? c->errmsg : NULL);
	/* A connection that never got going says no goodbye. */
	if (c != NULL && c->dead == 0)
		client_kill(c, rv);
	rdzv_client_close(c);
	if (err != NULL)
		*err = rv;
	return (NULL);
}

void
rdzv_client_close(struct rdzv_client *c)
{
	if (c == NULL)
		return;
	/*
	 * A best-effort close_notify, never waited for, so rdzvd sees an
	 * orderly end rather than a truncated stream.
	 */
	if (c->ssl != NULL && c->dead == 0 && SSL_is_init_finished(c->ssl)) {
		ERR_clear_error();
		(void)SSL_shutdown(c->ssl);
		ERR_clear_error();
	}
	if (c->fd != -1)
		close(c->fd);
	SSL_free(c->ssl);
	SSL_CTX_free(c->ssl_ctx);
	if (c->out != NULL)
		evbuffer_free(c->out);
	if (c->in != NULL)
		evbuffer_free(c->in);
	free(c->ns);
	free(c);
}

int
rdzv_client_set_namespace(struct rdzv_client *c, const char *ns)
{
	char	*copy;

	if (ns == NULL)
		ns = "";
	if (strlen(ns) > CLIENT_NS_MAX)
		return (RDZV_ETOOBIG);
	if ((copy = strdup(ns)) == NULL)
		return (RDZV_ENOMEM);
	free(c->ns);
	c->ns = copy;
	return (0);
}

const char *
rdzv_client_errmsg(const struct rdzv_client *c)
{
	return (c->errmsg);
}

int
rdzv_client_fd(const struct rdzv_client *c)
{
	return (c->fd);
}

int
rdzv_client_alive(const struct rdzv_client *c)
{
	return (c->dead == 0);
}

void
rdzv_client_set_interrupt(struct rdzv_client *c, const sigset_t *mask,
    volatile sig_atomic_t *flag)
{
	c->intr_mask = mask;
	c->intr_flag = flag;
}

int
rdzv_client_call(struct rdzv_client *c, uint16_t op, const void *payload,
    size_t len, void **reply, size_t *rlen, int timeout_ms)
{
	struct nat_msg	msg;
	int		rv;

	if (reply != NULL)
		*reply = NULL;
	if (rlen != NULL)
		*rlen = 0;
	if (len > UINT32_MAX - (NAT_HDR_LEN - 4))
		return (RDZV_ETOOBIG);
	rv = client_request(c, op, timeout_ms, &msg, "r", payload, len);
	if (rv != 0 || reply == NULL)
		return (rv);
	return (client_dup(msg.payload, reply, rlen));
}

void
rdzv_client_set_push_cb(struct rdzv_client *c, rdzv_push_cb cb, void *arg)
{
	c->push_cb = cb;
	c->push_arg = arg;
}

int
rdzv_client_poll_push(struct rdzv_client *c, int timeout_ms)
{
	struct nat_msg	msg;
	int64_t		deadline;
	size_t		used;
	int		rv, n = 0;

	if (c->dead)
		return (client_dead_code(c));
	client_release(c);
	deadline = client_deadline(timeout_ms);
	for (;;) {
		rv = client_read_frame(c, n == 0 ? deadline : 0, &msg, &used);
		if (rv == RDZV_ETIMEDOUT)
			return (n);
		if (rv < 0)
			return (rv);
		if (msg.flags & NAT_F_PUSH) {
			if (c->push_cb != NULL)
				c->push_cb(msg.op, msg.payload.p,
				    msg.payload.len, c->push_arg);
			n++;
		} else if (!(msg.flags & NAT_F_REPLY))
			return (client_kill(c, RDZV_EPROTO));
		/* Anything else is a late reply to an abandoned request. */
		evbuffer_drain(c->in, used);
	}
}

int
rdzv_client_ping(struct rdzv_client *c, int timeout_ms)
{
	static const char	 data[] = "rdzv";
	struct nat_msg		 msg;
	struct nat_rd		 rd;
	struct slice		 s;
	int			 rv;

	rv = client_request(c, NAT_OP_PING, timeout_ms, &msg, "b", data,
	    sizeof data - 1);
	if (rv != 0)
		return (rv);
	nat_rd_init(&rd, msg.payload);
	if (nat_get_bytes(&rd, &s) != 0 || nat_rd_end(&rd) != 0 ||
	    s.len != sizeof data - 1 || memcmp(s.p, data, s.len) != 0)
		return (RDZV_EPROTO);
	return (0);
}

/*
 * The ops of one request and one reply of fixed fields, each a line: what
 * goes out and what comes back is in the format (client_vrequest).
 */

int
rdzv_client_set(struct rdzv_client *c, const char *key, const void *val,
    size_t len, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_SET, timeout_ms, "nsb>", key, val, len));
}

int
rdzv_client_append(struct rdzv_client *c, const char *key, const void *val,
    size_t len, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_APPEND, timeout_ms, "nsb>", key, val,
	    len));
}

int
rdzv_client_queue_push(struct rdzv_client *c, const char *key,
    const void *val, size_t len, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_QUEUE_PUSH, timeout_ms, "nsb>", key, val,
	    len));
}

int
rdzv_client_get(struct rdzv_client *c, const char *key, void **val,
    size_t *len, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_GET, timeout_ms, "ns>b", key, val, len));
}

int
rdzv_client_delete(struct rdzv_client *c, const char *key, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_DELETE, timeout_ms, "ns>f", key));
}

int
rdzv_client_queue_len(struct rdzv_client *c, const char *key,
    int64_t *length, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_QUEUE_LEN, timeout_ms, "ns>i", key,
	    length));
}

int
rdzv_client_watch(struct rdzv_client *c, const char *key, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_WATCH, timeout_ms, "ns>", key));
}

int
rdzv_client_add(struct rdzv_client *c, const char *key, int64_t delta,
    int64_t *value, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_ADD, timeout_ms, "nsi>i", key, delta,
	    value));
}

int
rdzv_client_cas(struct rdzv_client *c, const char *key, const void *expected,
    size_t elen, const void *desired, size_t dlen, void **now, size_t *nowlen,
    int timeout_ms)
{
	return (client_rpc(c, NAT_OP_CAS, timeout_ms, "nsbb>b", key, expected,
	    elen, desired, dlen, now, nowlen));
}

int
rdzv_client_wait(struct rdzv_client *c, const char *const *keys, size_t n,
    int timeout_ms)
{
	return (client_rpc(c, NAT_OP_WAIT, timeout_ms, "ntK>", keys, n));
}

int
rdzv_client_check(struct rdzv_client *c, const char *const *keys, size_t n,
    int timeout_ms)
{
	return (client_rpc(c, NAT_OP_CHECK, timeout_ms, "nK>f", keys, n));
}

int
rdzv_client_num_keys(struct rdzv_client *c, int64_t *count, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_NUM_KEYS, timeout_ms, "n>i", count));
}

int
rdzv_client_multi_set(struct rdzv_client *c, const char *const *keys,
    const void *const *vals, const size_t *lens, size_t n, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_MULTI_SET, timeout_ms, "nP>", keys, vals,
	    lens, n));
}

int
rdzv_client_queue_pop(struct rdzv_client *c, const char *key, void **val,
    size_t *len, int timeout_ms)
{
	return (client_rpc(c, NAT_OP_QUEUE_POP, timeout_ms, "nst>b", key, val,
	    len));
}

int
rdzv_client_barrier(struct rdzv_client *c, const char *key, int64_t world,
    int timeout_ms)
{
	return (client_rpc(c, NAT_OP_BARRIER, timeout_ms, "nsit>", key, world));
}

/* The two replies of a variable number of fields. */

int
rdzv_client_multi_get(struct rdzv_client *c, const char *const *keys,
    size_t n, void **vals, size_t *lens, int timeout_ms)
{
	struct nat_msg	msg;
	struct nat_rd	rd;
	struct slice	s;
	size_t		i;
	int		rv;

	rv = client_request(c, NAT_OP_MULTI_GET, timeout_ms, &msg, "nK", keys,
	    n);
	if (rv != 0)
		return (rv);

	/* Check the whole reply before allocating anything. */
	nat_rd_init(&rd, msg.payload);
	for (i = 0; i < n; i++)
		if (nat_get_bytes(&rd, &s) != 0)
			return (RDZV_EPROTO);
	if (nat_rd_end(&rd) != 0)
		return (RDZV_EPROTO);
	nat_rd_init(&rd, msg.payload);
	for (i = 0; i < n; i++) {
		(void)nat_get_bytes(&rd, &s);
		if (client_dup(s, &vals[i], &lens[i]) != 0) {
			while (i-- > 0) {
				free(vals[i]);
				vals[i] = NULL;
			}
			return (RDZV_ENOMEM);
		}
	}
	return (0);
}

int
rdzv_client_list_keys(struct rdzv_client *c, char ***keys, size_t *n,
    int timeout_ms)
{
	struct nat_msg	msg;
	struct nat_rd	rd;
	struct slice	s;
	int64_t		count;
	size_t		i, have;
	char		**list;
	void		*p;
	int		rv;

	rv = client_request(c, NAT_OP_LIST_KEYS, timeout_ms, &msg, "n");
	if (rv != 0)
		return (rv);

	/* Count the entries present rather than trusting the count field. */
	nat_rd_init(&rd, msg.payload);
	if (nat_get_i64(&rd, &count) != 0 || count < 0 || count > INT_MAX)
		return (RDZV_EPROTO);
	for (have = 0; have < (size_t)count; have++)
		if (nat_get_bytes(&rd, &s) != 0)
			return (RDZV_EPROTO);
	if (nat_rd_end(&rd) != 0)
		return (RDZV_EPROTO);

	if ((list = calloc(have + 1, sizeof *list)) == NULL)
		return (RDZV_ENOMEM);
	nat_rd_init(&rd, msg.payload);
	(void)nat_get_i64(&rd, &count);
	for (i = 0; i < have; i++) {
		(void)nat_get_bytes(&rd, &s);
		if (client_dup(s, &p, NULL) != 0) {
			rdzv_client_free_keys(list, i);
			return (RDZV_ENOMEM);
		}
		list[i] = p;
	}
	*keys = list;
	*n = have;
	return ((int)have);
}

void
rdzv_client_free_keys(char **keys, size_t n)
{
	size_t	i;

	if (keys == NULL)
		return;
	for (i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
}
