/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctl_conn.c: rdzvctl's connection to rdzvd.
 *
 * Connecting (TCP, TLS when a CA is given, the preamble, authentication
 * with the token file's token) is common/client.c's job; this file turns
 * its failures into messages that say what to do, and frames the
 * operator requests (ADMIN_*, common/PROTOCOL.md "Operators"), which
 * client.h has no calls of their own for, sending each with
 * rdzv_client_call().  Waits for an answer are interruptible by SIGINT
 * and SIGTERM once ctl_catch_signals() has been called.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "auth.h"
#include "client.h"
#include "ctl.h"
#include "hostport.h"
#include "mono.h"
#include "rdzv_err.h"
#include "tls.h"
#include "wire.h"

volatile sig_atomic_t	ctl_interrupted;

/* With ctl_catch_signals(): SIGINT and SIGTERM open only inside ppoll. */
static sigset_t	ctl_pollmask;
static int	ctl_catching;

int
ctl_exit_code(int code)
{
	switch (code) {
	case 0:
		return CTL_EXIT_OK;
	case RDZV_ECONN:
	case RDZV_ETIMEDOUT:
	case RDZV_EVERSION:
	case RDZV_EPROTO:
		return CTL_EXIT_CONN;
	case RDZV_EAUTH:
	case RDZV_ETLS:
		return CTL_EXIT_AUTH;
	}
	return CTL_EXIT_SERVER;
}

/*
 * Prints why connecting failed and what to try; returns the exit status.
 * why is client.c's reason, used where it says more than the code.
 */
static int
ctl_connect_error(const struct ctl_opts *o, int code, const char *why)
{
	struct addrinfo	 hints, *res;
	char		 host[RDZV_HOST_MAX];
	int		 rv = -1, port;

	switch (code) {
	case RDZV_EINVAL:
		fprintf(stderr, "rdzvctl: bad endpoint \"%s\": expected "
		    "HOST:PORT or [IPV6]:PORT (-e or RDZV_ENDPOINT)\n",
		    o->endpoint);
		return CTL_EXIT_USAGE;
	case RDZV_ECONN:
		/* client.c folds a failed lookup into ECONN: tell them apart. */
		memset(&hints, 0, sizeof hints);
		hints.ai_socktype = SOCK_STREAM;
		if (hostport_split(o->endpoint, 0, host, sizeof host, &port,
		    NULL, 0) == 0 &&
		    (rv = getaddrinfo(host, NULL, &hints, &res)) != 0) {
			/* -1 below: no lookup made. */
			fprintf(stderr, "rdzvctl: cannot connect to %s: cannot "
			    "resolve \"%s\": %s — set -e HOST:PORT or "
			    "RDZV_ENDPOINT\n", o->endpoint, host,
			    gai_strerror(rv));
			return CTL_EXIT_CONN;
		}
		if (rv == 0)
			freeaddrinfo(res);
		fprintf(stderr, "rdzvctl: cannot connect to %s: connection "
		    "refused or host unreachable — is rdzvd running? set -e "
		    "HOST:PORT or RDZV_ENDPOINT\n", o->endpoint);
		return CTL_EXIT_CONN;
	case RDZV_ETIMEDOUT:
		fprintf(stderr, "rdzvctl: cannot connect to %s: no answer "
		    "within %d ms — is it rdzvd's main port (default 29400, "
		    "not its HTTP port), and no firewall in the way? "
		    "(--timeout to wait longer)\n", o->endpoint,
		    o->timeout_ms);
		return CTL_EXIT_CONN;
	case RDZV_EPROTO:
		fprintf(stderr, "rdzvctl: %s does not speak rdzv's native "
		    "protocol — is it rdzvd's main port (default 29400), not "
		    "its HTTP port?\n", o->endpoint);
		return CTL_EXIT_CONN;
	case RDZV_EVERSION:
		fprintf(stderr, "rdzvctl: rdzvd at %s refused protocol version "
		    "%d — rdzvctl and rdzvd are from different releases\n",
		    o->endpoint, NAT_VERSION);
		return CTL_EXIT_CONN;
	case RDZV_EAUTH:
		if (o->token_file == NULL)
			fprintf(stderr, "rdzvctl: rdzvd at %s requires a token "
			    "— give the file of rdzvd's --token-file with "
			    "--token-file or RDZV_TOKEN_FILE\n", o->endpoint);
		else
			fprintf(stderr, "rdzvctl: rdzvd at %s refused the token "
			    "in %s (or could not prove it holds it) — give the "
			    "same token as rdzvd's --token-file\n", o->endpoint,
			    o->token_file);
		return CTL_EXIT_AUTH;
	case RDZV_ETLS:
		/*
		 * Refused plaintext ("requires TLS: give its CA ..."), or a
		 * failed handshake with the check to make in parentheses.
		 */
		if (*why != '\0') {
			fprintf(stderr, "rdzvctl: %s\n", why);
			return CTL_EXIT_AUTH;
		}
		break;
	}
	fprintf(stderr, "rdzvctl: cannot connect to %s: %s\n", o->endpoint,
	    rdzv_strerror(code));
	return ctl_exit_code(code);
}

/*
 * Checks that the CA bundle can be read before anything is sent, so the
 * message names the file rather than a TLS library's words for it.
 */
static int
ctl_check_ca(const char *ca)
{
	FILE	*f;

	if (strcmp(ca, RDZV_TLS_CA_SYSTEM) == 0)
		return 0;
	if ((f = fopen(ca, "r")) == NULL) {
		fprintf(stderr, "rdzvctl: TLS CA file %s: %s — give the CA "
		    "certificate (PEM) that signed rdzvd's --tls-cert with "
		    "--tls-ca FILE or " RDZV_TLS_CA_ENV "\n", ca,
		    strerror(errno));
		return -1;
	}
	fclose(f);
	return 0;
}

struct rdzv_client *
ctl_connect(const struct ctl_opts *o, int retry, int *status)
{
	struct rdzv_client_opts	 co;
	struct rdzv_client	*c;
	struct timespec		 pause = { 0, 200 * 1000000 };
	uint8_t			*tok = NULL;
	size_t			 toklen = 0;
	char			 why[512];
	int64_t			 deadline;
	int			 err = RDZV_ECONN, insecure = 0;

	if (o->tls_ca != NULL && ctl_check_ca(o->tls_ca) != 0) {
		*status = CTL_EXIT_AUTH;
		return NULL;
	}

	if (o->token_file != NULL) {
		if ((err = rdzv_token_load(o->token_file, &tok, &toklen,
		    &insecure, why, sizeof why)) != 0) {
			fprintf(stderr, "rdzvctl: token file %s: %s — it must "
			    "hold rdzvd's token (--token-file or "
			    "RDZV_TOKEN_FILE)\n", o->token_file, why);
			*status = CTL_EXIT_AUTH;
			return NULL;
		}
		if (insecure)
			fprintf(stderr, "rdzvctl: warning: token file %s is "
			    "readable by others (chmod 600 it)\n",
			    o->token_file);
	}
	memset(&co, 0, sizeof co);
	co.token = tok;
	co.tokenlen = toklen;
	co.tls_ca = o->tls_ca;
	co.why = why;
	co.whysz = sizeof why;
	deadline = mono_ms() + o->timeout_ms;
	for (;;) {
		c = rdzv_client_connect_opts(o->endpoint, o->timeout_ms, &co,
		    &err);
		if (c != NULL)
			break;
		/* A restarting rdzvd refuses for a moment: try again. */
		if (!retry || (err != RDZV_ECONN && err != RDZV_ETIMEDOUT) ||
		    mono_ms() >= deadline || ctl_interrupted)
			break;
		nanosleep(&pause, NULL);
	}
	if (tok != NULL) {
		explicit_bzero(tok, toklen);
		free(tok);
	}
	if (c == NULL)
		*status = ctl_connect_error(o, err, why);
	return c;
}

static void
ctl_interrupt_cb(int sig)
{
	ctl_interrupted = 1;
}

void
ctl_catch_signals(void)
{
	struct sigaction	sa;
	sigset_t		block;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = ctl_interrupt_cb;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/*
	 * Blocked everywhere but in ppoll(), so a signal that comes while
	 * we print is seen by the next wait instead of being lost before it.
	 */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &ctl_pollmask);
	sigdelset(&ctl_pollmask, SIGINT);
	sigdelset(&ctl_pollmask, SIGTERM);
	ctl_catching = 1;
}

/* Copies the reply's only bytes field (or nothing) out. */
static int
ctl_ok_reply(const uint8_t *p, size_t plen, char **reply, size_t *len)
{
	struct nat_rd	rd;
	struct slice	s;

	*reply = NULL;
	*len = 0;
	if (plen == 0)
		return 0;
	s.p = p;
	s.len = plen;
	nat_rd_init(&rd, s);
	if (nat_get_bytes(&rd, &s) != 0 || nat_rd_end(&rd) != 0)
		return RDZV_EPROTO;
	if ((*reply = malloc(s.len + 1)) == NULL)
		return RDZV_ENOMEM;
	memcpy(*reply, s.p, s.len);
	(*reply)[s.len] = '\0';
	*len = s.len;
	return 0;
}

int
ctl_admin(struct rdzv_client *c, int timeout_ms, char **reply, size_t *len,
    char *errmsg, size_t errsz, uint16_t op, const char *fmt, ...)
{
	va_list	ap;
	int	rv;

	va_start(ap, fmt);
	rv = ctl_vadmin(c, timeout_ms, reply, len, errmsg, errsz, op, fmt, ap);
	va_end(ap);
	return rv;
}

int
ctl_vadmin(struct rdzv_client *c, int timeout_ms, char **reply, size_t *len,
    char *errmsg, size_t errsz, uint16_t op, const char *fmt, va_list ap)
{
	struct evbuffer	*out;
	struct nat_wr	 wr;
	const char	*s;
	const uint8_t	*p = NULL;
	void		*r = NULL;
	size_t		 flen, rlen = 0;
	int		 rv = 0;

	*reply = NULL;
	*len = 0;
	if (errsz > 0)
		errmsg[0] = '\0';
	if (ctl_interrupted)
		return RDZV_ECANCELED;
	if (ctl_catching)
		rdzv_client_set_interrupt(c, &ctl_pollmask, &ctl_interrupted);
	/* The fields are framed with wire.h's writer; the header is dropped. */
	if ((out = evbuffer_new()) == NULL)
		return RDZV_ENOMEM;
	if (nat_frame_begin(&wr, out, op, 0, 0) != 0)
		rv = RDZV_ENOMEM;
	for (; rv == 0 && *fmt != '\0'; fmt++) {
		if (*fmt == 'i')
			rv = nat_put_i64(&wr, va_arg(ap, int64_t));
		else {
			s = va_arg(ap, const char *);
			rv = nat_put_bytes(&wr, s, strlen(s));
		}
		if (rv != 0)
			rv = RDZV_ENOMEM;
	}
	if (rv == 0 && nat_frame_end(&wr) != 0)
		rv = RDZV_ENOMEM;
	flen = evbuffer_get_length(out);
	if (rv == 0 && (flen < NAT_HDR_LEN ||
	    (p = evbuffer_pullup(out, -1)) == NULL))
		rv = RDZV_ENOMEM;
	if (rv == 0)
		rv = rdzv_client_call(c, op, p + NAT_HDR_LEN, flen - NAT_HDR_LEN,
		    &r, &rlen, timeout_ms);
	evbuffer_free(out);
	if (rv == 0)
		rv = ctl_ok_reply(r, rlen, reply, len);
	else if (errsz > 0)
		strlcpy(errmsg, rdzv_client_errmsg(c), errsz);
	free(r);
	return rv;
}
