/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c: the bootstrap store as librdzvworker sees it: set, get (after
 * waiting for the key), add and barrier, over one of two clients:
 *
 *   native	rdzvd's framed protocol (common/client.h), every key in the
 *		round's namespace (RDZV_NAMESPACE), so a restarted round can
 *		never read the previous round's addresses or ids; with the
 *		agent's token (RDZV_TOKEN_FILE) and over TLS when given a CA
 *		(RDZV_TLS_CA);
 *   tcpstore	PyTorch's TCPStore to MASTER_ADDR:MASTER_PORT, keys sent as
 *		torch's client sends them ("/" + prefix + "/" + key), in
 *		the dialect the server speaks (t_connect): 2.x when it
 *		answers the 2.x handshake (torch 2.x's servers, among them
 *		torchrun 2.5+'s agent store, rdzvd, ours), else 1.13.  When
 *		this rank is the one torch would make the master, it first
 *		serves the store itself (tstore_srv.c) and then talks to it
 *		like everyone else.
 */
#include "config.h"

#include <sys/socket.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "client.h"
#include "rdzv_err.h"
#include "tls.h"
#include "wire.h"
#include "worker.h"

/* TCPStore query bytes, by dialect (shared/reference/tcpstore-wire.md). */
enum t_op { T_SET, T_GET, T_ADD, T_WAIT };
static const uint8_t t_code[2][4] = {
	{ 0, 2, 3, 5 },		/* 1.13 */
	{ 1, 3, 4, 6 },		/* 2.x */
};
#define T2_VALIDATE	0
#define T2_PING		13
/*
 * The 2.x PING nonce.  A 1.13 server reads VALIDATE's 0 as SET and the
 * next 8 bytes (magic, PING's code, the nonce's first 3 bytes) as the key
 * length: 0xff44520d3c85f7ce is beyond any allocation, so it drops the
 * connection at once instead of waiting for the key.
 */
static const uint8_t t_nonce[4] = { 0x52, 0x44, 0xff, 0x7f };

enum t_dialect { T_UNKNOWN, T_113, T_V2 };

#define STORE_KEY_MAX	4096
#define STORE_VAL_MAX	(64u << 20)	/* a sanity bound on replies */

struct wstore {
	enum wenv_store		 kind;
	struct rdzv_client	*nat;
	int			 fd;		/* tcpstore; -1 until connected */
	char			 host[RDZV_HOST_MAX];
	int			 port;
	char			 prefix[64];
	enum t_dialect		 dialect;	/* found by the first connect */
	struct tstore_srv	*srv;		/* hosted here, or NULL */
	char			 local[64];
};

/* ---- TCPStore 1.13 client ---- */

/* A request under construction. */
struct tbuf {
	uint8_t	*p;
	size_t	 len;
	size_t	 cap;
	int	 oom;
};

static void
tb_put(struct tbuf *b, const void *p, size_t n)
{
	uint8_t	*np;
	size_t	 cap;

	if (b->oom)
		return;
	if (b->cap - b->len < n) {
		cap = b->cap == 0 ? 256 : b->cap;
		while (cap - b->len < n)
			cap *= 2;
		if ((np = realloc(b->p, cap)) == NULL) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void
tb_u64(struct tbuf *b, uint64_t v)
{
	uint8_t	le[8];
	int	i;

	for (i = 0; i < 8; i++)
		le[i] = (uint8_t)(v >> (8 * i));
	tb_put(b, le, 8);
}

static void
tb_bytes(struct tbuf *b, const void *p, size_t n)
{
	tb_u64(b, n);
	tb_put(b, p, n);
}

/* A key as torch's client sends it: "/" [prefix "/"] key. */
static void
tb_key(struct tbuf *b, const struct wstore *s, const char *key)
{
	size_t	plen = strlen(s->prefix), klen = strlen(key);

	tb_u64(b, 1 + (plen > 0 ? plen + 1 : 0) + klen);
	tb_put(b, "/", 1);
	if (plen > 0) {
		tb_put(b, s->prefix, plen);
		tb_put(b, "/", 1);
	}
	tb_put(b, key, klen);
}

static uint64_t
le64(const uint8_t *p)
{
	uint64_t	v = 0;
	int		i;

	for (i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return (v);
}

/* Drops the connection: after a timeout its stream is out of step. */
static void
t_drop(struct wstore *s)
{
	if (s->fd != -1)
		close(s->fd);
	s->fd = -1;
}

/*
 * The 2.x handshake (VALIDATE, then PING) on a fresh connection.  Returns
 * 0 when the server echoed the nonce, RDZV_EVERSION when it closed the
 * connection or answered something else (a 1.13 server), or another
 * negative RDZV_E* (a deadline).
 */
static int
t_hello(struct wstore *s, int64_t deadline)
{
	uint8_t	b[10], echo[4];
	int	rc;

	b[0] = T2_VALIDATE;
	b[1] = TCPS_V2_MAGIC & 0xff;
	b[2] = (TCPS_V2_MAGIC >> 8) & 0xff;
	b[3] = (TCPS_V2_MAGIC >> 16) & 0xff;
	b[4] = TCPS_V2_MAGIC >> 24;
	b[5] = T2_PING;
	memcpy(b + 6, t_nonce, sizeof t_nonce);
	if ((rc = net_write_all(s->fd, b, sizeof b, deadline)) == 0)
		rc = net_read_all(s->fd, echo, sizeof echo, deadline);
	if (rc == RDZV_ECONN ||
	    (rc == 0 && memcmp(echo, t_nonce, sizeof echo) != 0))
		return (RDZV_EVERSION);
	return (rc);
}

/*
 * Connects if not connected.  The first connection finds the dialect: the
 * 2.x handshake, and on a 1.13 server (which drops it) a fresh 1.13
 * connection; later ones repeat the 2.x handshake where that worked.
 */
static int
t_connect(struct wstore *s, int64_t deadline)
{
	int	rc;

	if (s->fd != -1)
		return (0);
	if ((rc = net_connect(s->host, s->port, 0, deadline, &s->fd)) != 0)
		return (rc);
	if (s->dialect != T_113) {
		rc = t_hello(s, deadline);
		if (rc == RDZV_EVERSION && s->dialect == T_UNKNOWN) {
			t_drop(s);
			s->dialect = T_113;
			return (t_connect(s, deadline));
		}
		if (rc != 0) {
			t_drop(s);
			return (rc == RDZV_EVERSION ? RDZV_EPROTO : rc);
		}
		s->dialect = T_V2;
	}
	if (net_local_addr(s->fd, s->local, sizeof s->local) != 0)
		s->local[0] = '\0';
	return (0);
}

/* The query byte of op in the connected dialect. */
static uint8_t
t_q(const struct wstore *s, enum t_op op)
{
	return (t_code[s->dialect == T_V2][op]);
}

/* Sends b (then frees it) and reads rlen reply bytes into r. */
static int
t_exchange(struct wstore *s, struct tbuf *b, void *r, size_t rlen,
    int64_t deadline)
{
	int	rc;

	if (b->oom) {
		rc = RDZV_ENOMEM;
		goto out;
	}
	if ((rc = t_connect(s, deadline)) != 0)
		goto out;
	if ((rc = net_write_all(s->fd, b->p, b->len, deadline)) != 0 ||
	    (rlen > 0 && (rc = net_read_all(s->fd, r, rlen, deadline)) != 0))
		t_drop(s);
out:
	free(b->p);
	memset(b, 0, sizeof *b);
	return (rc);
}

static int
t_set(struct wstore *s, const char *key, const void *val, size_t len,
    int64_t deadline)
{
	struct tbuf	b = { 0 };
	uint8_t		q;
	int		rc;

	if ((rc = t_connect(s, deadline)) != 0)
		return (rc);
	q = t_q(s, T_SET);
	tb_put(&b, &q, 1);
	tb_key(&b, s, key);
	tb_bytes(&b, val, len);
	return (t_exchange(s, &b, NULL, 0, deadline));
}

static int
t_wait(struct wstore *s, const char *key, int64_t deadline)
{
	struct tbuf	b = { 0 };
	uint8_t		q, r;
	int		rc;

	if ((rc = t_connect(s, deadline)) != 0)
		return (rc);
	q = t_q(s, T_WAIT);
	tb_put(&b, &q, 1);
	tb_u64(&b, 1);
	tb_key(&b, s, key);
	if ((rc = t_exchange(s, &b, &r, 1, deadline)) != 0)
		return (rc);
	if (r != TCPS_STOP_WAITING) {
		t_drop(s);
		return (RDZV_EPROTO);
	}
	return (0);
}

static int
t_get(struct wstore *s, const char *key, void **val, size_t *len,
    int64_t deadline)
{
	struct tbuf	 b = { 0 };
	uint8_t		 q, hdr[8];
	uint64_t	 n;
	char		*v;
	int		 rc;

	/* A 1.13 server drops a connection that GETs a missing key. */
	if ((rc = t_wait(s, key, deadline)) != 0)
		return (rc);
	q = t_q(s, T_GET);
	tb_put(&b, &q, 1);
	tb_key(&b, s, key);
	if ((rc = t_exchange(s, &b, hdr, sizeof hdr, deadline)) != 0)
		return (rc);
	n = le64(hdr);
	if (n > STORE_VAL_MAX) {
		t_drop(s);
		return (RDZV_ETOOBIG);
	}
	if ((v = malloc(n + 1)) == NULL) {
		t_drop(s);
		return (RDZV_ENOMEM);
	}
	if ((rc = net_read_all(s->fd, v, n, deadline)) != 0) {
		free(v);
		t_drop(s);
		return (rc);
	}
	v[n] = '\0';
	*val = v;
	*len = n;
	return (0);
}

static int
t_add(struct wstore *s, const char *key, int64_t delta, int64_t *out,
    int64_t deadline)
{
	struct tbuf	b = { 0 };
	uint8_t		q, r[8];
	int		rc;

	if ((rc = t_connect(s, deadline)) != 0)
		return (rc);
	q = t_q(s, T_ADD);
	tb_put(&b, &q, 1);
	tb_key(&b, s, key);
	tb_u64(&b, (uint64_t)delta);
	if ((rc = t_exchange(s, &b, r, sizeof r, deadline)) != 0)
		return (rc);
	if (out != NULL)
		*out = (int64_t)le64(r);
	return (0);
}

/* ---- the interface ---- */

static int
timeout_of(int timeout_ms)
{
	return (timeout_ms < 0 ? RDZV_INIT_TIMEOUT_DEFAULT_MS : timeout_ms);
}

int
wstore_open(struct wstore **sp, const struct wenv *e, int timeout_ms,
    char *err, size_t errlen)
{
	struct wstore	*s;
	int64_t		 deadline = mono_ms() + timeout_of(timeout_ms);
	int		 rc, port;

	*sp = NULL;
	if ((s = calloc(1, sizeof *s)) == NULL)
		return (RDZV_ENOMEM);
	s->kind = e->store;
	s->fd = -1;
	switch (e->store) {
	case WENV_STORE_NATIVE: {
		/* rdzv-agent passes rdzvd's token and TLS CA on (PROTOCOL.md
		 * "Authentication", "TLS"). */
		struct rdzv_client_opts	 co;
		const char		*tf = getenv("RDZV_TOKEN_FILE");
		const char		*ca = getenv(RDZV_TLS_CA_ENV);
		uint8_t			*tok = NULL;
		size_t			 toklen = 0;
		int			 insecure;
		char			 why[512];

		if (tf != NULL && *tf != '\0' && (rc = rdzv_token_load(tf, &tok,
		    &toklen, &insecure, why, sizeof why)) != 0) {
			wenv_seterr(err, errlen, "RDZV_TOKEN_FILE: %s", why);
			goto fail;
		}
		memset(&co, 0, sizeof co);
		co.token = tok;
		co.tokenlen = toklen;
		co.tls_ca = ca != NULL && *ca != '\0' ? ca : NULL;
		co.why = why;
		co.whysz = sizeof why;
		s->nat = rdzv_client_connect_opts(e->endpoint,
		    deadline_left(deadline), &co, &rc);
		if (tok != NULL) {
			explicit_bzero(tok, toklen);
			free(tok);
		}
		if (s->nat == NULL && rc == RDZV_ETLS) {
			/* why names rdzvd and the check to make. */
			if (co.tls_ca == NULL)
				wenv_seterr(err, errlen,
				    "%s (" RDZV_TLS_CA_ENV " is "
				    "unset: rdzv-agent sets it from its --tls_ca)",
				    why);
			else
				wenv_seterr(err, errlen,
				    "%s (" RDZV_TLS_CA_ENV "=%s)",
				    why, co.tls_ca);
			goto fail;
		}
		if (s->nat == NULL) {
			wenv_seterr(err, errlen, "cannot reach rdzvd at %s "
			    "(RDZV_ENDPOINT): %s%s", e->endpoint,
			    rdzv_strerror(rc), rc == RDZV_EAUTH ? " (rdzvd has "
			    "a token: set RDZV_TOKEN_FILE, rdzv-agent does)" : "");
			goto fail;
		}
	}
		if ((rc = rdzv_client_set_namespace(s->nat, e->ns)) != 0) {
			wenv_seterr(err, errlen, "RDZV_NAMESPACE: %s",
			    rdzv_strerror(rc));
			goto fail;
		}
		if (net_local_addr(rdzv_client_fd(s->nat), s->local,
		    sizeof s->local) != 0)
			s->local[0] = '\0';
		break;
	case WENV_STORE_TCPSTORE:
		strlcpy(s->host, e->master_addr, sizeof s->host);
		s->port = e->master_port;
		strlcpy(s->prefix, e->prefix, sizeof s->prefix);
		if (e->host_store) {
			rc = tstore_srv_start(&s->srv, "::", e->master_port,
			    &port);
			if (rc != 0)
				rc = tstore_srv_start(&s->srv, "0.0.0.0",
				    e->master_port, &port);
			if (rc != 0) {
				wenv_seterr(err, errlen,
				    "rank 0 cannot serve the "
				    "store on port %d (MASTER_PORT): %s",
				    e->master_port, rdzv_strerror(rc));
				goto fail;
			}
		}
		if ((rc = t_connect(s, deadline)) != 0) {
			wenv_seterr(err, errlen,
			    "cannot reach the store at %s:%d "
			    "(MASTER_ADDR, MASTER_PORT): %s", e->master_addr,
			    e->master_port, rdzv_strerror(rc));
			goto fail;
		}
		break;
	default:
		rc = RDZV_EINVAL;
		wenv_seterr(err, errlen, "no store configured");
		goto fail;
	}
	*sp = s;
	return (0);
fail:
	wstore_close(s);
	return (rc);
}

void
wstore_cut(struct wstore *s)
{
	int	fd = s->kind == WENV_STORE_NATIVE ? rdzv_client_fd(s->nat) :
		    s->fd;

	if (fd >= 0)
		(void)shutdown(fd, SHUT_RDWR);
}

void
wstore_close(struct wstore *s)
{
	if (s == NULL)
		return;
	rdzv_client_close(s->nat);
	t_drop(s);
	if (s->srv != NULL)
		tstore_srv_stop(s->srv);
	free(s);
}

int
wstore_set(struct wstore *s, const char *key, const void *val, size_t len,
    int timeout_ms)
{
	int64_t	deadline = mono_ms() + timeout_of(timeout_ms);

	if (s->kind == WENV_STORE_NATIVE)
		return (rdzv_client_set(s->nat, key, val, len,
		    deadline_left(deadline)));
	return (t_set(s, key, val, len, deadline));
}

int
wstore_get(struct wstore *s, const char *key, void **val, size_t *len,
    int timeout_ms)
{
	int64_t		 deadline = mono_ms() + timeout_of(timeout_ms);
	const char	*keys[1] = { key };
	int		 rc;

	if (s->kind != WENV_STORE_NATIVE)
		return (t_get(s, key, val, len, deadline));
	rc = rdzv_client_wait(s->nat, keys, 1, deadline_left(deadline));
	if (rc != 0)
		return (rc);
	return (rdzv_client_get(s->nat, key, val, len,
	    deadline_left(deadline)));
}

int
wstore_add(struct wstore *s, const char *key, int64_t delta, int64_t *out,
    int timeout_ms)
{
	int64_t	deadline = mono_ms() + timeout_of(timeout_ms);

	if (s->kind == WENV_STORE_NATIVE)
		return (rdzv_client_add(s->nat, key, delta, out,
		    deadline_left(deadline)));
	return (t_add(s, key, delta, out, deadline));
}

int
wstore_barrier(struct wstore *s, const char *key, int world, int timeout_ms)
{
	int64_t	 deadline = mono_ms() + timeout_of(timeout_ms);
	int64_t	 n;
	char	 k[STORE_KEY_MAX];
	int	 rc;

	if (s->kind == WENV_STORE_NATIVE)
		return (rdzv_client_barrier(s->nat, key, world,
		    deadline_left(deadline)));
	/* 1.13 has no BARRIER: count arrivals, the last one opens it. */
	snprintf(k, sizeof k, "%s/count", key);
	if ((rc = t_add(s, k, 1, &n, deadline)) != 0)
		return (rc);
	snprintf(k, sizeof k, "%s/open", key);
	if (n == world && (rc = t_set(s, k, "1", 1, deadline)) != 0)
		return (rc);
	return (t_wait(s, k, deadline));
}

const char *
wstore_local_addr(const struct wstore *s)
{
	return (s->local);
}
