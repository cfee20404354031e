/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_tls.c: TLS on the store port (--tls-cert): the server's
 * certificate context (loaded at start, reloaded on SIGHUP) and the TLS
 * layer of a connection.  A connection whose first byte is 0x16 gets an
 * SSL whose I/O is a BIO pair; this file does that connection's read(2)
 * and write(2), moving ciphertext between the socket and the pair, and
 * OpenSSL turns it into the same plaintext c->in and c->out a plain
 * connection has, which server.c decodes and limits unchanged.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/stat.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "log.h"
#include "rdzv_err.h"
#include "rdzvd.h"
#include "server_impl.h"
#include "tls.h"

/*
 * Each direction of a TLS connection's BIO pair: two full records, so
 * OpenSSL can work while the socket drains.  Fixed per connection, with
 * SSL_MODE_RELEASE_BUFFERS keeping an idle one small otherwise.
 */
#define TLS_BIO_SIZE		(2 * (16 * 1024 + 512))
/* Plaintext handed to one SSL_write (it returns after each record). */
#define TLS_WRITE_MAX		(64 * 1024)

/*
 * The state of one TLS connection, on top of conn_state:
 *
 *   server_tls_start (first byte 0x16) --> handshaking
 *   handshaking --SSL_do_handshake ok--> open (plaintext through
 *     c->in/c->out) --closing--> close_notify sent
 *   handshaking --error, EOF, deadline--> closed, kind tls_handshake
 *
 * Reads: server_tls_read() puts what read(2) got into the pair;
 * stls_pump() runs the handshake, then decrypts everything OpenSSL can
 * into c->in (so no plaintext is left waiting inside OpenSSL for a socket
 * event that may never come) and serves it.  Writes: server_tls_flush()
 * sends the pair's ciphertext, then encrypts more of c->out, until the
 * socket is full or c->out empty.  When OpenSSL must write to go on
 * reading (a TLS 1.3 key update) and the pair is full, reading stops
 * (tls_rstall) until the flush has made room, then stls_pump() runs
 * again.
 */

/* Queues the ciphertext OpenSSL produced for this pass's flush. */
static void
stls_queue(struct conn *c)
{
	if (BIO_ctrl_pending(c->tls_net) > 0)
		conn_mark_dirty(c);
}

/*
 * A failed handshake: log OpenSSL's reason, try once to send the alert
 * it queued (it tells the client why), and close.
 */
static void
stls_fail(struct conn *c, const char *what)
{
	char	 why[512], *p;
	int	 len;
	ssize_t	 n;

	rdzv_tls_why(c->ssl, what, why, sizeof why);
	if ((len = BIO_nread0(c->tls_net, &p)) > 0) {
		n = write(c->fd, p, (size_t)len);
		(void)n;
	}
	conn_close(c, ERRK_TLS_HANDSHAKE, why);
}

/* Runs OpenSSL on what has arrived and serves the plaintext; may close c. */
static void
stls_pump(struct conn *c)
{
	struct evbuffer_iovec	 v;
	char			 why[512];
	int			 n, e;

	/* SSL_get_error() reads the queue: nothing stale may be in it. */
	ERR_clear_error();
	c->tls_want_write = 0;
	if (c->tls_handshaking) {
		if ((n = SSL_do_handshake(c->ssl)) != 1) {
			e = SSL_get_error(c->ssl, n);
			if (e == SSL_ERROR_WANT_READ ||
			    e == SSL_ERROR_WANT_WRITE) {
				c->tls_want_write = e == SSL_ERROR_WANT_WRITE;
				stls_queue(c);
				return;
			}
			stls_fail(c, "TLS handshake failed");
			return;
		}
		c->tls_handshaking = 0;
		evtimer_del(c->req_timer);
		metrics.tls_handshakes++;
		metrics.tls_open++;
		log_debug("%s: TLS handshake done: %s, %s", c->peer,
		    SSL_get_version(c->ssl), SSL_get_cipher_name(c->ssl));
	}
	for (;;) {
		/* Large pieces for a big request, as on the plain path. */
		if (evbuffer_reserve_space(c->in,
		    (ev_ssize_t)conn_read_want(c), &v, 1) < 1) {
			conn_close(c, ERRK_MEMORY_BUDGET, "out of memory for "
			    "input");
			return;
		}
		if ((n = SSL_read(c->ssl, v.iov_base, (int)v.iov_len)) <= 0)
			break;
		v.iov_len = (size_t)n;
		evbuffer_commit_space(c->in, &v, 1);
	}
	switch ((e = SSL_get_error(c->ssl, n))) {
	case SSL_ERROR_WANT_READ:
		break;
	case SSL_ERROR_WANT_WRITE:
		c->tls_want_write = 1;
		break;
	case SSL_ERROR_ZERO_RETURN:
		conn_close(c, ERRK_COUNT, "TLS closed by peer");
		return;
	default:
		rdzv_tls_why(c->ssl, "TLS", why, sizeof why);
		conn_close(c, ERRK_MALFORMED, why);
		return;
	}
	stls_queue(c);
	conn_process(c);
}

/*
 * The first byte was 0x16: a TLS ClientHello, if TLS is configured.  The
 * bytes the sniffing read took are OpenSSL's first input.  May close c.
 */
void
server_tls_start(struct conn *c)
{
	BIO		*inner = NULL;
	struct timeval	 tv;
	size_t		 len = evbuffer_get_length(c->in);

	if (server.tls_ctx == NULL) {
		/*
		 * A refusal preamble rather than a bare close: to the client's
		 * TLS layer it is a protocol error, which a client treats as
		 * the configuration mistake it is; a bare close would look
		 * like rdzvd restarting and be retried.
		 */
		nat_preamble_put(c->out, 0);
		conn_close_after_flush(c, ERRK_TLS_NOT_CONFIGURED, "a TLS "
		    "client, but rdzvd has no --tls-cert: start rdzvd with "
		    "--tls-cert and --tls-key, or connect without a TLS CA");
		return;
	}
	if ((c->ssl = SSL_new(server.tls_ctx)) == NULL ||
	    BIO_new_bio_pair(&inner, TLS_BIO_SIZE, &c->tls_net,
	    TLS_BIO_SIZE) != 1) {
		ERR_clear_error();
		/* conn_close frees a half-made ssl; tls_net is NULL. */
		c->tls_handshaking = 1;
		conn_close(c, ERRK_MEMORY_BUDGET, "out of memory for TLS");
		return;
	}
	SSL_set_bio(c->ssl, inner, inner);
	SSL_set_accept_state(c->ssl);
	c->tls_handshaking = 1;
	c->need = 0;
	/* One deadline for the whole handshake, however it trickles in. */
	tv.tv_sec = server.cfg->request_timeout_ms / 1000;
	tv.tv_usec = (server.cfg->request_timeout_ms % 1000) * 1000;
	evtimer_add(c->req_timer, &tv);
	/* The sniffing read took at most READ_MIN: the pair has room. */
	if (BIO_write(c->tls_net, evbuffer_pullup(c->in, -1), (int)len) !=
	    (int)len) {
		ERR_clear_error();
		conn_close(c, ERRK_TLS_HANDSHAKE, "TLS: cannot queue the "
		    "ClientHello");
		return;
	}
	evbuffer_drain(c->in, len);
	stls_pump(c);
}

/* The socket is readable: ciphertext into the pair, then stls_pump(). */
void
server_tls_read(struct conn *c)
{
	char	*p;
	int	 space;
	ssize_t	 n;

	if ((space = BIO_nwrite0(c->tls_net, &p)) <= 0) {
		/* OpenSSL waits to write first (tls_want_write). */
		event_del(c->rev);
		c->tls_rstall = 1;
		return;
	}
	n = read(c->fd, p, (size_t)space);
	if (n > 0) {
		BIO_nwrite(c->tls_net, &p, (int)n);
		stls_pump(c);
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		return;
	if (c->tls_handshaking)
		conn_close(c, ERRK_TLS_HANDSHAKE, n == 0 ? "peer closed "
		    "during the TLS handshake" : strerror(errno));
	else
		conn_close(c, ERRK_COUNT, n == 0 ? "end of file" :
		    strerror(errno));
}

/*
 * conn_flush() for a TLS connection: the pair's ciphertext to the socket,
 * then c->out through SSL_write, repeated until the socket is full or
 * everything is sent.  A closing connection ends with close_notify.
 * Returns -1 if c was closed.
 */
int
server_tls_flush(struct conn *c)
{
	struct evbuffer_iovec	 v;
	char			*p, why[512];
	int			 len, n, resume = 0;
	ssize_t			 w;

	ERR_clear_error();
again:
	for (;;) {
		/* What OpenSSL made leaves before it makes more. */
		while ((len = BIO_nread0(c->tls_net, &p)) > 0) {
			w = write(c->fd, p, (size_t)len);
			if (w > 0) {
				BIO_nread(c->tls_net, &p, (int)w);
				continue;
			}
			if (w < 0 && (errno == EAGAIN ||
			    errno == EWOULDBLOCK || errno == EINTR)) {
				if (!event_pending(c->wev, EV_WRITE, NULL))
					event_add(c->wev, NULL);
				return 0;
			}
			conn_close(c, ERRK_COUNT, w == 0 ? "peer closed" :
			    strerror(errno));
			return -1;
		}
		if (c->tls_handshaking || c->tls_shutdown ||
		    evbuffer_peek(c->out, -1, NULL, &v, 1) < 1)
			break;
		/*
		 * A retry after WANT_WRITE passes the same first bytes and
		 * at least as many (c->out only grows at its tail).
		 */
		n = SSL_write(c->ssl, v.iov_base, v.iov_len > TLS_WRITE_MAX ?
		    TLS_WRITE_MAX : (int)v.iov_len);
		if (n > 0) {
			evbuffer_drain(c->out, (size_t)n);
			continue;
		}
		if (SSL_get_error(c->ssl, n) == SSL_ERROR_WANT_WRITE &&
		    BIO_ctrl_pending(c->tls_net) > 0)
			continue;
		rdzv_tls_why(c->ssl, "TLS write", why, sizeof why);
		conn_close(c, ERRK_COUNT, why);
		return -1;
	}
	if (event_pending(c->wev, EV_WRITE, NULL))
		event_del(c->wev);
	if (c->closing) {
		if (!c->tls_shutdown && !c->tls_handshaking) {
			c->tls_shutdown = 1;
			if (SSL_shutdown(c->ssl) < 0)
				ERR_clear_error();
			goto again;
		}
		conn_close(c, ERRK_COUNT, "flushed");
		return -1;
	}
	if (c->read_paused && !conn_output_full(c)) {
		c->read_paused = 0;
		resume = 1;
	}
	if (c->tls_rstall) {
		c->tls_rstall = 0;
		resume = 1;
	}
	if (resume && !c->read_paused)
		event_add(c->rev, NULL);
	/* Decrypts what waited and serves requests buffered meanwhile. */
	if (resume || c->tls_want_write)
		stls_pump(c);
	return 0;
}

/* Loads the configured certificate and key into a new context. */
static SSL_CTX *
stls_load(void)
{
	const char	*files[2] = { server.cfg->tls_cert, server.cfg->tls_key };
	const char	*opt[2] = { "--tls-cert", "--tls-key" };
	SSL_CTX		*ctx;
	FILE		*f;
	char		 why[1024];
	int		 i;

	/* OpenSSL says "system lib" for a missing file: ask first. */
	for (i = 0; i < 2; i++) {
		if ((f = fopen(files[i], "r")) == NULL) {
			log_warnx("cannot read TLS %s %s: %s; fix the path or "
			    "its permissions (%s)", i == 0 ? "certificate" :
			    "key", files[i], strerror(errno), opt[i]);
			return NULL;
		}
		fclose(f);
	}
	if ((ctx = rdzv_tls_server_ctx(files[0], files[1], why,
	    sizeof why)) == NULL) {
		log_warnx("%s; --tls-cert %s must be a PEM certificate "
		    "(chain) and --tls-key %s the PEM private key of its "
		    "first certificate", why, files[0], files[1]);
		return NULL;
	}
	/* A client could renegotiate TLS 1.2 over and over for nothing. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	return ctx;
}

int
server_tls_init(void)
{
	struct stat	st;

	if (server.cfg->tls_cert == NULL)
		return 0;
	if ((server.tls_ctx = stls_load()) == NULL)
		return -1;
	if (stat(server.cfg->tls_key, &st) == 0 &&
	    (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
		log_warnx("TLS key %s is readable by group or others; chmod "
		    "600 it", server.cfg->tls_key);
	server.tls_required = server.cfg->tls_mode != RDZVD_TLS_OPTIONAL;
	log_info("TLS on: certificate %s; plaintext native clients %s",
	    server.cfg->tls_cert, server.tls_required ?
	    "refused (--tls required)" : "served too (--tls optional)");
	return 0;
}

int
server_tls_reload(void)
{
	SSL_CTX	*ctx;

	if (server.tls_ctx == NULL)
		return 0;
	if ((ctx = stls_load()) == NULL) {
		log_warnx("SIGHUP: TLS certificate not reloaded (see above); "
		    "new connections keep the previous one");
		return -1;
	}
	/* Open connections hold their own reference to the old one. */
	SSL_CTX_free(server.tls_ctx);
	server.tls_ctx = ctx;
	log_info("SIGHUP: TLS certificate %s and key %s reloaded for new "
	    "connections", server.cfg->tls_cert, server.cfg->tls_key);
	return 0;
}

void
server_tls_fini(void)
{
	SSL_CTX_free(server.tls_ctx);
	server.tls_ctx = NULL;
}

void
server_tls_conn_free(struct conn *c)
{
	if (!c->tls_handshaking)
		metrics.tls_open--;
	SSL_free(c->ssl);	/* and OpenSSL's end of the pair */
	BIO_free(c->tls_net);
}

int
server_tls_pending(const struct conn *c)
{
	return SSL_has_pending(c->ssl);
}
