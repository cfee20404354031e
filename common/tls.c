/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls.c: the TLS contexts rdzvd and the clients build (tls.h): versions,
 * key material, and peer verification.  The record layer itself lives
 * with each connection's I/O (rdzvd/server_tls.c, common/client.c,
 * agent/rdzv.c).
 */
#include "config.h"

#include <arpa/inet.h>

#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "tls.h"

void
rdzv_tls_why(const SSL *ssl, const char *what, char *why, size_t whysz)
{
	unsigned long	e;
	long		vr;
	char		buf[256];

	if (ssl != NULL && (vr = SSL_get_verify_result(ssl)) != X509_V_OK) {
		snprintf(why, whysz, "%s: certificate verify failed: %s", what,
		    X509_verify_cert_error_string(vr));
		ERR_clear_error();
		return;
	}
	/* The last error is the most specific one. */
	if ((e = ERR_peek_last_error()) == 0) {
		snprintf(why, whysz, "%s", what);
		return;
	}
	ERR_error_string_n(e, buf, sizeof buf);
	snprintf(why, whysz, "%s: %s", what,
	    ERR_reason_error_string(e) != NULL ?
	    ERR_reason_error_string(e) : buf);
	ERR_clear_error();
}

static SSL_CTX *
tls_ctx(const SSL_METHOD *m, char *why, size_t whysz)
{
	SSL_CTX	*ctx;

	if ((ctx = SSL_CTX_new(m)) == NULL) {
		rdzv_tls_why(NULL, "TLS context", why, whysz);
		return NULL;
	}
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		rdzv_tls_why(NULL, "TLS minimum version", why, whysz);
		SSL_CTX_free(ctx);
		return NULL;
	}
	/*
	 * Both ends write whole frames as they are produced; a partial
	 * SSL_write must be resumable from a moved buffer because the
	 * callers' output buffers move as they grow.
	 */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	return ctx;
}

SSL_CTX *
rdzv_tls_server_ctx(const char *certfile, const char *keyfile, char *why,
    size_t whysz)
{
	SSL_CTX	*ctx;
	char	 what[512];

	if ((ctx = tls_ctx(TLS_server_method(), why, whysz)) == NULL)
		return NULL;
	if (SSL_CTX_use_certificate_chain_file(ctx, certfile) != 1) {
		snprintf(what, sizeof what, "TLS certificate %s", certfile);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, keyfile, SSL_FILETYPE_PEM) != 1) {
		snprintf(what, sizeof what, "TLS key %s", keyfile);
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(what, sizeof what, "TLS key %s does not match "
		    "certificate %s", keyfile, certfile);
		goto fail;
	}
	return ctx;
fail:
	rdzv_tls_why(NULL, what, why, whysz);
	SSL_CTX_free(ctx);
	return NULL;
}

SSL_CTX *
rdzv_tls_client_ctx(const char *cafile, char *why, size_t whysz)
{
	SSL_CTX	*ctx;
	char	 what[512];
	int	 ok;

	if ((ctx = tls_ctx(TLS_client_method(), why, whysz)) == NULL)
		return NULL;
	if (strcmp(cafile, RDZV_TLS_CA_SYSTEM) == 0) {
		ok = SSL_CTX_set_default_verify_paths(ctx);
		snprintf(what, sizeof what, "the system's TLS CA store");
	} else {
		ok = SSL_CTX_load_verify_locations(ctx, cafile, NULL);
		snprintf(what, sizeof what, "TLS CA file %s", cafile);
	}
	if (ok != 1) {
		rdzv_tls_why(NULL, what, why, whysz);
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	return ctx;
}

SSL *
rdzv_tls_client_new(SSL_CTX *ctx, const char *host, char *why, size_t whysz)
{
	SSL			*ssl;
	X509_VERIFY_PARAM	*vp;
	unsigned char		 addr[16];
	int			 ok;

	if ((ssl = SSL_new(ctx)) == NULL) {
		rdzv_tls_why(NULL, "TLS session", why, whysz);
		return NULL;
	}
	vp = SSL_get0_param(ssl);
	if (inet_pton(AF_INET, host, addr) == 1 ||
	    inet_pton(AF_INET6, host, addr) == 1)
		ok = X509_VERIFY_PARAM_set1_ip_asc(vp, host);
	else {
		X509_VERIFY_PARAM_set_hostflags(vp,
		    X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		ok = SSL_set1_host(ssl, host) == 1 &&
		    SSL_set_tlsext_host_name(ssl, host) == 1;
	}
	if (ok != 1) {
		snprintf(why, whysz, "TLS: cannot verify against host %s",
		    host);
		ERR_clear_error();
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}
