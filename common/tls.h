/* SPDX-License-Identifier: Apache-2.0 */
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
 *
 * How an SSL meets its socket: three ways, one per kind of I/O, each
 * where that I/O already lives.  Folding them was weighed (issue 10) and
 * left: each would either lose what its owner needs or add a pump of our
 * own beside one the program already has.
 *  - rdzvd (rdzvd/server_tls.c): a BIO pair.  rdzvd reads a connection's
 *    first bytes before it knows it is TLS (one port for TLS, native and
 *    TCPStore), and those bytes must be OpenSSL's first input; and it
 *    keeps every read(2) and write(2) itself, so its memory budget, one
 *    flush per loop pass, EV_WRITE only while output is stuck and
 *    back-pressure hold for TLS unchanged.  An OpenSSL bufferevent would
 *    take the socket over and could not be handed the sniffed bytes.
 *  - the blocking client (common/client.c): a socket BIO of its own that
 *    sends with MSG_NOSIGNAL.  The client lives in other programs
 *    (librdzvworker in training processes, rdzvctl), which must not die
 *    of SIGPIPE and whose signal dispositions a library may not change;
 *    OpenSSL's socket BIO writes with write(2).  It waits with ppoll()
 *    like the plaintext path, so a pair would only add a copy.
 *  - rdzv-agent (agent/rdzv.c): libevent's OpenSSL bufferevent.  The
 *    agent's link is a bufferevent on the agent's event loop already, the
 *    agent ignores SIGPIPE, and libevent drives the handshake, reads and
 *    writes as it does for the plaintext link.
 * Above all three the native handshake is one machine (handshake.h).
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
