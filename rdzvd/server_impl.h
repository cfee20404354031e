/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server_impl.h: what server.c and server_tls.c share and nothing else
 * includes: the plaintext side of a connection (server.c) that the TLS
 * layer feeds, and the TLS layer (server_tls.c) that server.c hands a
 * connection's socket to once c->ssl is set.  One section per .c file.
 */
#ifndef SERVER_IMPL_H
#define SERVER_IMPL_H

#include <stddef.h>

struct conn;

/* ---- server.c: a connection's plaintext ---- */

/* Decodes and serves everything whole that c's input holds; may close c. */
void	conn_process(struct conn *);
/* How much to read next: a big request on its way comes in large pieces. */
size_t	conn_read_want(const struct conn *);

/* ---- server_tls.c: a connection's TLS layer ---- */

/*
 * The first byte was 0x16: a TLS ClientHello, if TLS is configured (else
 * a refusal preamble and a close).  The bytes the sniffing read put in
 * c->in are OpenSSL's first input.  May close c.
 */
void	server_tls_start(struct conn *);
/* c->ssl's socket is readable: reads ciphertext, serves the plaintext
 * it decrypts.  May close c. */
void	server_tls_read(struct conn *);
/*
 * conn_flush() for a connection with c->ssl: sends the ciphertext, then
 * encrypts and sends c->out, until the socket is full or all is sent; a
 * closing connection ends with close_notify.  Returns -1 if c was closed.
 */
int	server_tls_flush(struct conn *);
/* Frees c->ssl and its BIO pair (conn_close), counting the open TLS
 * connection gone. */
void	server_tls_conn_free(struct conn *);
/* 1 when OpenSSL holds part of a record for c (a started request). */
int	server_tls_pending(const struct conn *);

#endif
