/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd.h: a small blocking client of etcd's v3 API through its JSON
 * gateway (POST /v3/...; keys and values base64; 64-bit numbers as
 * strings), for the etcd store backend (store_etcd.c).
 *
 * One struct etcd is one libcurl handle with its connection: it belongs
 * to one thread.  A call goes to the endpoint that answered last; when
 * that one cannot be reached or answers that it cannot serve (no leader,
 * timed out, shutting down), the next endpoint is tried, once round.
 */
#ifndef RDZV_ETCD_H
#define RDZV_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Most members in conf->endpoints (rdzvd's config.c checks the list). */
#define ETCD_ENDPOINTS_MAX	16

/* How to reach the cluster; strings are borrowed for the client's life. */
struct etcd_conf {
	const char	*endpoints;	/* "HOST:PORT[,HOST:PORT...]" */
	const char	*cacert;	/* PEM CA: https; NULL: http */
	const char	*cert;		/* client certificate, with key */
	const char	*key;
	const char	*user;		/* etcd auth, with password_file */
	const char	*password_file;
	unsigned	 timeout_ms;	/* per request */
};

struct etcd;

/* A client; NULL (cause logged) on allocation or libcurl failure. */
struct etcd	*etcd_new(const struct etcd_conf *);
void		 etcd_free(struct etcd *);

/*
 * POSTs req (a JSON object; the reference is stolen) to path ("/v3/kv/
 * txn").  Returns 0 with the decoded answer in *resp (the caller's
 * reference), RDZV_ECONN when no endpoint answered (the cause is kept
 * for etcd_errmsg()), or RDZV_EIO when etcd answered with an error (its
 * message kept likewise).
 */
int		 etcd_call(struct etcd *, const char *path, json_t *req,
		    json_t **resp);
/*
 * Bounds the next calls as a whole (every endpoint tried) to ms; 0 goes
 * back to the per-request timeout alone.
 */
void		 etcd_set_budget(struct etcd *, unsigned ms);
/* Why the last call failed ("" after a success). */
const char	*etcd_errmsg(const struct etcd *);
/* The endpoint the next call goes to first. */
const char	*etcd_endpoint(const struct etcd *);

/* base64 of p[0..n) as a new JSON string; NULL on allocation failure. */
json_t		*etcd_b64(const void *p, size_t n);
/*
 * Decodes the base64 string member name of o into a malloc'ed buffer
 * (NUL-terminated, not counted in *lenp).  A missing member is empty
 * (the gateway leaves empty fields out).  RDZV_EPROTO if not base64.
 */
int		 etcd_unb64(json_t *o, const char *name, uint8_t **pp,
		    size_t *lenp);
/* The int64 member name of o (a string or a number); dflt if absent. */
int64_t		 etcd_int(json_t *o, const char *name, int64_t dflt);

#endif /* RDZV_ETCD_H */
