/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd.c: the blocking etcd v3 JSON-gateway client (contract in etcd.h),
 * on libcurl, the one HTTP client rdzv links.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "hostport.h"
#include "log.h"
#include "mono.h"
#include "rdzv_err.h"
#include "etcd.h"

#define ETCD_ANSWER_MAX		(256U << 20)	/* a range page, bounded */
#define ETCD_CONNECT_MS		1000
#define ETCD_TIMEOUT_DEFAULT	5000
/* gRPC codes the gateway passes on that another member may not share. */
#define GRPC_DEADLINE_EXCEEDED	4
#define GRPC_UNAVAILABLE	14
#define GRPC_UNAUTHENTICATED	16

struct etcd {
	struct etcd_conf	 conf;
	CURL			*curl;
	struct curl_slist	*headers;
	char			*url[ETCD_ENDPOINTS_MAX];
	size_t			 nurl;
	size_t			 cur;		/* endpoint tried first */
	unsigned		 budget_ms;	/* per call; 0: none */
	int64_t			 call_end_us;	/* this call's, with a budget */
	char			*token;		/* etcd auth token */
	char			*answer;	/* the answer being received */
	size_t			 alen, asize;
	char			 err[512];
};

static int	etcd_curl_init_done;

static size_t
etcd_write_cb(char *p, size_t size, size_t n, void *arg)
{
	struct etcd	*e = arg;
	size_t		 len = size * n, nsize;
	char		*np;

	if (len > ETCD_ANSWER_MAX - e->alen)
		return 0;	/* curl fails the transfer */
	if (e->alen + len + 1 > e->asize) {
		nsize = e->asize == 0 ? 4096 : e->asize;
		while (nsize < e->alen + len + 1)
			nsize *= 2;
		if ((np = realloc(e->answer, nsize)) == NULL)
			return 0;
		e->answer = np;
		e->asize = nsize;
	}
	memcpy(e->answer + e->alen, p, len);
	e->alen += len;
	e->answer[e->alen] = '\0';
	return len;
}

struct etcd *
etcd_new(const struct etcd_conf *conf)
{
	struct etcd	*e;
	char		 buf[RDZV_HOSTPORT_MAX * ETCD_ENDPOINTS_MAX], *s, *tok;

	/* Not thread-safe: the first client is made before any thread. */
	if (!etcd_curl_init_done) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
			log_warnx("etcd: curl_global_init failed");
			return NULL;
		}
		etcd_curl_init_done = 1;
	}
	if ((e = calloc(1, sizeof *e)) == NULL)
		return NULL;
	e->conf = *conf;
	if (e->conf.timeout_ms == 0)
		e->conf.timeout_ms = ETCD_TIMEOUT_DEFAULT;
	strlcpy(buf, conf->endpoints, sizeof buf);
	for (s = buf; (tok = strsep(&s, ",")) != NULL &&
	    e->nurl < ETCD_ENDPOINTS_MAX; e->nurl++) {
		if (asprintf(&e->url[e->nurl], "%s://%s",
		    conf->cacert != NULL ? "https" : "http", tok) == -1) {
			e->url[e->nurl] = NULL;
			goto fail;
		}
	}
	if ((e->curl = curl_easy_init()) == NULL)
		goto fail;
	if ((e->headers = curl_slist_append(NULL,
	    "Content-Type: application/json")) == NULL)
		goto fail;
	return e;

fail:
	log_warnx("etcd: cannot make a client for %s", conf->endpoints);
	etcd_free(e);
	return NULL;
}

void
etcd_free(struct etcd *e)
{
	size_t	i;

	if (e == NULL)
		return;
	if (e->curl != NULL)
		curl_easy_cleanup(e->curl);
	curl_slist_free_all(e->headers);
	for (i = 0; i < e->nurl; i++)
		free(e->url[i]);
	if (e->token != NULL) {
		explicit_bzero(e->token, strlen(e->token));
		free(e->token);
	}
	free(e->answer);
	free(e);
}

void
etcd_set_budget(struct etcd *e, unsigned ms)
{
	e->budget_ms = ms;
}

const char *
etcd_errmsg(const struct etcd *e)
{
	return e->err;
}

const char *
etcd_endpoint(const struct etcd *e)
{
	return e->url[e->cur];
}

/*
 * One POST to endpoint i.  Returns 0 with *http set (the answer in
 * e->answer), or RDZV_ECONN with e->err set.
 */
static int
etcd_post(struct etcd *e, size_t i, const char *path, const char *body,
    long *http)
{
	char			 url[RDZV_HOSTPORT_MAX + 128];
	struct curl_slist	*h = e->headers, *auth = NULL;
	char			*hdr = NULL;
	CURLcode		 rc;
	int64_t			 left;
	long			 tmo = (long)e->conf.timeout_ms;

	if (e->budget_ms != 0) {
		left = (e->call_end_us - mono_us()) / 1000;
		if (left < 1) {
			snprintf(e->err, sizeof e->err, "%s: no time left",
			    e->url[i]);
			return RDZV_ECONN;
		}
		if (left < tmo)
			tmo = (long)left;
	}
	snprintf(url, sizeof url, "%s%s", e->url[i], path);
	e->alen = 0;
	if (e->answer != NULL)
		e->answer[0] = '\0';
	curl_easy_reset(e->curl);
	if (e->token != NULL) {
		if (asprintf(&hdr, "Authorization: %s", e->token) == -1 ||
		    (auth = curl_slist_append(NULL, hdr)) == NULL) {
			free(hdr);
			snprintf(e->err, sizeof e->err, "out of memory");
			return RDZV_ECONN;
		}
		auth->next = e->headers;
		h = auth;
	}
	curl_easy_setopt(e->curl, CURLOPT_URL, url);
	curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, etcd_write_cb);
	curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
	curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e->curl, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS,
	    tmo < ETCD_CONNECT_MS ? tmo : (long)ETCD_CONNECT_MS);
	curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, tmo);
	curl_easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	if (e->conf.cacert != NULL)
		curl_easy_setopt(e->curl, CURLOPT_CAINFO, e->conf.cacert);
	if (e->conf.cert != NULL) {
		curl_easy_setopt(e->curl, CURLOPT_SSLCERT, e->conf.cert);
		curl_easy_setopt(e->curl, CURLOPT_SSLKEY, e->conf.key);
	}
	rc = curl_easy_perform(e->curl);
	if (auth != NULL) {
		auth->next = NULL;
		curl_slist_free_all(auth);
		free(hdr);
	}
	if (rc != CURLE_OK) {
		snprintf(e->err, sizeof e->err, "%s: %s", e->url[i],
		    curl_easy_strerror(rc));
		return RDZV_ECONN;
	}
	curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, http);
	return 0;
}

/* Reads the password file and trades name and password for a token. */
static int
etcd_authenticate(struct etcd *e)
{
	FILE	*f;
	char	 pw[256];
	json_t	*req, *resp = NULL;
	char	*body;
	size_t	 i;
	long	 http;
	int	 rc = RDZV_EIO;

	free(e->token);
	e->token = NULL;
	if ((f = fopen(e->conf.password_file, "r")) == NULL) {
		snprintf(e->err, sizeof e->err, "etcd password file %s: %s",
		    e->conf.password_file, strerror(errno));
		return RDZV_EIO;
	}
	if (fgets(pw, sizeof pw, f) == NULL)
		pw[0] = '\0';
	fclose(f);
	pw[strcspn(pw, "\r\n")] = '\0';
	req = json_pack("{s:s, s:s}", "name", e->conf.user, "password", pw);
	explicit_bzero(pw, sizeof pw);
	body = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (body == NULL)
		return RDZV_EIO;
	for (i = 0; i < e->nurl; i++) {
		if (etcd_post(e, e->cur, "/v3/auth/authenticate", body,
		    &http) == 0)
			break;
		e->cur = (e->cur + 1) % e->nurl;
	}
	explicit_bzero(body, strlen(body));
	free(body);
	if (i == e->nurl)
		return RDZV_ECONN;
	if (http == 200 && (resp = json_loads(e->answer, 0, NULL)) != NULL &&
	    json_string_value(json_object_get(resp, "token")) != NULL &&
	    (e->token = strdup(json_string_value(json_object_get(resp,
	    "token")))) != NULL)
		rc = 0;
	else
		snprintf(e->err, sizeof e->err, "etcd refused user %s: %.200s",
		    e->conf.user, e->answer != NULL ? e->answer : "");
	json_decref(resp);
	return rc;
}

int
etcd_call(struct etcd *e, const char *path, json_t *req, json_t **resp)
{
	json_t		*ans, *msg;
	char		*body;
	size_t		 tries;
	long		 http;
	int		 code, rc, authed = 0;

	*resp = NULL;
	e->err[0] = '\0';
	if (e->budget_ms != 0)
		e->call_end_us = mono_us() + (int64_t)e->budget_ms * 1000;
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (body == NULL) {
		snprintf(e->err, sizeof e->err, "out of memory");
		return RDZV_EIO;
	}
	if (e->conf.user != NULL && e->token == NULL &&
	    (rc = etcd_authenticate(e)) != 0)
		goto out;
	rc = RDZV_ECONN;
	for (tries = 0; tries < e->nurl; tries++) {
		if (etcd_post(e, e->cur, path, body, &http) != 0) {
			e->cur = (e->cur + 1) % e->nurl;
			continue;
		}
		ans = json_loads(e->answer, 0, NULL);
		if (http == 200 && json_is_object(ans)) {
			*resp = ans;
			e->err[0] = '\0';
			rc = 0;
			goto out;
		}
		code = (int)json_integer_value(json_object_get(ans, "code"));
		msg = json_object_get(ans, "message");
		if (msg == NULL)
			msg = json_object_get(ans, "error");
		snprintf(e->err, sizeof e->err, "%s%s: HTTP %ld: %.300s",
		    e->url[e->cur], path, http, json_string_value(msg) != NULL ?
		    json_string_value(msg) : e->answer != NULL ? e->answer : "");
		json_decref(ans);
		if (code == GRPC_UNAUTHENTICATED && e->conf.user != NULL &&
		    !authed) {
			/* Tokens expire; one fresh one per call. */
			authed = 1;
			if ((rc = etcd_authenticate(e)) != 0)
				goto out;
			tries--;
			continue;
		}
		if (code != GRPC_UNAVAILABLE && code != GRPC_DEADLINE_EXCEEDED &&
		    http != 503 && http != 504) {
			rc = RDZV_EIO;
			goto out;
		}
		/* This member cannot serve now: ask the next. */
		e->cur = (e->cur + 1) % e->nurl;
	}
out:
	free(body);
	return rc;
}

json_t *
etcd_b64(const void *p, size_t n)
{
	char	*s;
	json_t	*j;

	if (n > (size_t)INT32_MAX / 2 || (s = malloc(4 * ((n + 2) / 3) + 1)) ==
	    NULL)
		return NULL;
	EVP_EncodeBlock((unsigned char *)s, p, (int)n);
	j = json_string(s);
	free(s);
	return j;
}

int
etcd_unb64(json_t *o, const char *name, uint8_t **pp, size_t *lenp)
{
	const char	*s = json_string_value(json_object_get(o, name));
	size_t		 len, pad = 0;
	uint8_t		*p;
	int		 n;

	if (s == NULL)
		s = "";
	len = strlen(s);
	if (len % 4 != 0 || len > (size_t)INT32_MAX)
		return RDZV_EPROTO;
	if ((p = malloc(len / 4 * 3 + 1)) == NULL)
		return RDZV_ENOMEM;
	n = len == 0 ? 0 : EVP_DecodeBlock(p, (const unsigned char *)s,
	    (int)len);
	if (n < 0) {
		free(p);
		return RDZV_EPROTO;
	}
	/* EVP_DecodeBlock counts the bytes that padding stands for. */
	if (len > 0 && s[len - 1] == '=')
		pad++;
	if (len > 1 && s[len - 2] == '=')
		pad++;
	*lenp = (size_t)n - pad;
	p[*lenp] = '\0';
	*pp = p;
	return 0;
}

int64_t
etcd_int(json_t *o, const char *name, int64_t dflt)
{
	json_t		*v = json_object_get(o, name);
	const char	*errstr;
	int64_t		 n;

	if (json_is_integer(v))
		return json_integer_value(v);
	if (!json_is_string(v))
		return dflt;
	n = strtonum(json_string_value(v), INT64_MIN + 1, INT64_MAX, &errstr);
	return errstr != NULL ? dflt : n;
}
