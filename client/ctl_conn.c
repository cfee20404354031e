/*
 * ctl_conn.c: rdzvctl's connection to rdzvd.
 *
 * Connecting (and the preamble, and authentication with the token file's
 * token) is common/client.c's job; this file turns its failures into
 * messages that say what to do, and sends the operator requests (ADMIN_*,
 * common/PROTOCOL.md "Operators"), which client.h has no calls for.  Those go straight over
 * the client's socket: rdzvctl makes one request at a time and never
 * mixes them with client.h calls on one connection, and after connect
 * the stream is at a frame boundary, so nothing of the client's state is
 * disturbed.  Request ids start high so they cannot match one of the
 * client's own.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
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
#include "rdzv_err.h"
#include "wire.h"

volatile sig_atomic_t	ctl_interrupted;

/* With ctl_catch_signals(): SIGINT and SIGTERM open only inside ppoll. */
static sigset_t	ctl_pollmask;
static int	ctl_catching;

static uint32_t	ctl_next_id = 0x40000000;

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
		return CTL_EXIT_AUTH;
	}
	return CTL_EXIT_SERVER;
}

static int64_t
ctl_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The host part of HOST:PORT or [V6]:PORT, for a name lookup of our own. */
static int
ctl_host(const char *ep, char *host, size_t sz)
{
	const char	*colon, *end;
	size_t		 n;

	if (ep[0] == '[') {
		if ((end = strchr(ep, ']')) == NULL)
			return -1;
		n = end - ep - 1;
		ep++;
	} else {
		if ((colon = strrchr(ep, ':')) == NULL)
			return -1;
		n = colon - ep;
	}
	if (n == 0 || n >= sz)
		return -1;
	memcpy(host, ep, n);
	host[n] = '\0';
	return 0;
}

/* Prints why connecting failed and what to try; returns the exit status. */
static int
ctl_connect_error(const struct ctl_opts *o, int code)
{
	struct addrinfo	 hints, *res;
	char		 host[256];
	int		 rv = -1;

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
		if (ctl_host(o->endpoint, host, sizeof host) == 0 &&
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
	}
	fprintf(stderr, "rdzvctl: cannot connect to %s: %s\n", o->endpoint,
	    rdzv_strerror(code));
	return ctl_exit_code(code);
}

struct rdzv_client *
ctl_connect(const struct ctl_opts *o, int retry, int *status)
{
	struct rdzv_client	*c;
	struct timespec		 pause = { 0, 200 * 1000000 };
	uint8_t			*tok = NULL;
	size_t			 toklen = 0;
	char			 why[256];
	int64_t			 deadline;
	int			 err = RDZV_ECONN, insecure = 0;

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
	deadline = ctl_now_ms() + o->timeout_ms;
	for (;;) {
		c = rdzv_client_connect_auth(o->endpoint, o->timeout_ms, tok,
		    toklen, &err);
		if (c != NULL)
			break;
		/* A restarting rdzvd refuses for a moment: try again. */
		if (!retry || (err != RDZV_ECONN && err != RDZV_ETIMEDOUT) ||
		    ctl_now_ms() >= deadline || ctl_interrupted)
			break;
		nanosleep(&pause, NULL);
	}
	if (tok != NULL) {
		explicit_bzero(tok, toklen);
		free(tok);
	}
	if (c == NULL)
		*status = ctl_connect_error(o, err);
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

/* Waits for events on fd until deadline (-1: none); 1 ready, else <0. */
static int
ctl_poll(int fd, short events, int64_t deadline)
{
	struct pollfd	 pfd;
	struct timespec	 ts, *tsp;
	int64_t		 left;
	int		 n;

	for (;;) {
		tsp = NULL;
		if (deadline >= 0) {
			left = deadline - ctl_now_ms();
			if (left < 0)
				left = 0;
			ts.tv_sec = left / 1000;
			ts.tv_nsec = (left % 1000) * 1000000;
			tsp = &ts;
		}
		pfd.fd = fd;
		pfd.events = events;
		pfd.revents = 0;
		if (ctl_interrupted)
			return RDZV_ECANCELED;
		n = ppoll(&pfd, 1, tsp, ctl_catching ? &ctl_pollmask : NULL);
		if (n > 0)
			return 1;
		if (n == 0)
			return RDZV_ETIMEDOUT;
		if (errno != EINTR)
			return RDZV_ECONN;
		if (ctl_interrupted)
			return RDZV_ECANCELED;
	}
}

static int
ctl_send(int fd, struct evbuffer *out, int64_t deadline)
{
	const uint8_t	*p;
	size_t		 len;
	ssize_t		 n;
	int		 rv;

	len = evbuffer_get_length(out);
	if ((p = evbuffer_pullup(out, -1)) == NULL)
		return RDZV_ENOMEM;
	while (len > 0) {
		if ((rv = ctl_poll(fd, POLLOUT, deadline)) < 0)
			return rv;
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return RDZV_ECONN;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Decodes an error reply into its code, copying its message. */
static int
ctl_error_reply(const struct nat_msg *m, char *errmsg, size_t errsz)
{
	struct nat_rd	rd;
	struct slice	text;
	int64_t		code;
	size_t		n;

	nat_rd_init(&rd, m->payload);
	if (nat_get_i64(&rd, &code) != 0 || nat_get_bytes(&rd, &text) != 0 ||
	    nat_rd_end(&rd) != 0 || code >= 0 || code < RDZV_ERR_MIN)
		return RDZV_EPROTO;
	if (errsz > 0) {
		n = text.len < errsz - 1 ? text.len : errsz - 1;
		memcpy(errmsg, text.p, n);
		errmsg[n] = '\0';
	}
	return (int)code;
}

/* Copies the reply's only bytes field (or nothing) out. */
static int
ctl_ok_reply(const struct nat_msg *m, char **reply, size_t *len)
{
	struct nat_rd	rd;
	struct slice	s;

	*reply = NULL;
	*len = 0;
	if (m->payload.len == 0)
		return 0;
	nat_rd_init(&rd, m->payload);
	if (nat_get_bytes(&rd, &s) != 0 || nat_rd_end(&rd) != 0)
		return RDZV_EPROTO;
	if ((*reply = malloc(s.len + 1)) == NULL)
		return RDZV_ENOMEM;
	memcpy(*reply, s.p, s.len);
	(*reply)[s.len] = '\0';
	*len = s.len;
	return 0;
}

/* Reads frames until the reply to id; pushes and strays are skipped. */
static int
ctl_await(int fd, uint32_t id, int64_t deadline, char **reply, size_t *len,
    char *errmsg, size_t errsz)
{
	struct evbuffer		*in;
	struct wire_limits	 lim;
	struct nat_msg		 m;
	const uint8_t		*p;
	size_t			 need = 0, have;
	ssize_t			 n;
	int			 rv;

	wire_limits_default(&lim);
	lim.value_max = (size_t)1 << 30;	/* rdzvd bounds its replies */
	if ((in = evbuffer_new()) == NULL)
		return RDZV_ENOMEM;
	for (;;) {
		have = evbuffer_get_length(in);
		if (have > 0 && have >= need) {
			if ((p = evbuffer_pullup(in, -1)) == NULL) {
				rv = RDZV_ENOMEM;
				break;
			}
			if ((rv = nat_decode(p, have, &lim, &m, &need)) < 0)
				break;
			if (rv > 0) {
				if ((m.flags & NAT_F_REPLY) && m.id == id) {
					rv = (m.flags & NAT_F_ERROR) ?
					    ctl_error_reply(&m, errmsg, errsz) :
					    ctl_ok_reply(&m, reply, len);
					break;
				}
				evbuffer_drain(in, (size_t)rv);
				need = 0;
				continue;
			}
		}
		if ((rv = ctl_poll(fd, POLLIN, deadline)) < 0)
			break;
		n = evbuffer_read(in, fd, 65536);
		if (n == 0 || (n == -1 && errno != EINTR && errno != EAGAIN)) {
			rv = RDZV_ECONN;
			break;
		}
	}
	evbuffer_free(in);
	return rv;
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
	int64_t		 deadline;
	uint32_t	 id;
	int		 fd, rv = 0;

	*reply = NULL;
	*len = 0;
	if (errsz > 0)
		errmsg[0] = '\0';
	if ((fd = rdzv_client_fd(c)) < 0)
		return RDZV_ECONN;
	deadline = timeout_ms < 0 ? -1 : ctl_now_ms() + timeout_ms;
	if ((out = evbuffer_new()) == NULL)
		return RDZV_ENOMEM;
	id = ctl_next_id++;
	if (nat_frame_begin(&wr, out, op, 0, id) != 0)
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
	if (rv == 0)
		rv = ctl_send(fd, out, deadline);
	evbuffer_free(out);
	if (rv == 0)
		rv = ctl_await(fd, id, deadline, reply, len, errmsg, errsz);
	return rv;
}
