/*
 * tls.h: TLS contexts for native-protocol connections (OpenSSL), shared
 * by rdzvd (server side) and every client: the blocking client
 * (common/client.c, used by rdzvctl and librdzvworker) and rdzv-agent's
 * libevent connection.
 *
 * Policy, in one place: TLS 1.2 at least; a client always verifies
 * rdzvd's certificate chain against a CA bundle (the operator's file, or
 * the system's store) and the endpoint's host name or IP address against
 * the certificate; there is no "don't verify" switch.  Key material is
 * read once, when the context is made.
 *
 * A TLS connection is recognised by rdzvd from its first byte (a TLS
 * handshake record, RDZV_TLS_FIRST_BYTE), which no TCPStore request and
 * no native preamble starts with.
 */
#ifndef RDZV_TLS_H
#define RDZV_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

#define RDZV_TLS_FIRST_BYTE	0x16	/* TLS record type "handshake" */

/* The environment variable clients read for their CA bundle. */
#define RDZV_TLS_CA_ENV		"RDZV_TLS_CA"
/* A CA "file" naming the system's default trust store. */
#define RDZV_TLS_CA_SYSTEM	"system"

/*
 * A server context from a PEM certificate chain file and its PEM private
 * key file (they must match).  Returns NULL with a reason naming the file
 * and OpenSSL's complaint in why.
 */
SSL_CTX	*rdzv_tls_server_ctx(const char *certfile, const char *keyfile,
	    char *why, size_t whysz);

/*
 * A client context that verifies peers against the PEM bundle cafile, or
 * against the system's default store when cafile is RDZV_TLS_CA_SYSTEM.
 * Returns NULL with a reason in why.
 */
SSL_CTX	*rdzv_tls_client_ctx(const char *cafile, char *why, size_t whysz);

/*
 * A client SSL for a connection to host (a name or a literal IPv4/IPv6
 * address, without brackets): SNI for names, and the name or address
 * rdzvd's certificate must carry.  The caller attaches the socket (or a
 * bufferevent) and runs the handshake.  NULL with a reason in why.
 */
SSL	*rdzv_tls_client_new(SSL_CTX *, const char *host, char *why,
	    size_t whysz);

/*
 * Describes why a handshake failed in why: the certificate verification
 * result when that is the cause (e.g. "certificate verify failed: self-
 * signed certificate"), otherwise OpenSSL's most recent error, prefixed by
 * what.  Clears OpenSSL's error queue.  ssl may be NULL.
 */
void	rdzv_tls_why(const SSL *ssl, const char *what, char *why,
	    size_t whysz);

#endif /* RDZV_TLS_H */
