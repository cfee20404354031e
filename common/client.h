/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.h: the blocking native-protocol store client (common/PROTOCOL.md)
 * that rdzv-agent, librdzvworker, rdzvctl and the benchmarks use to talk
 * to rdzvd.
 *
 * One struct rdzv_client is one TCP connection.  Calls block, one request
 * at a time, each bounded by its own timeout_ms (negative: no limit); a
 * client is not safe to share between threads without a lock.  The
 * library never exits, prints or raises SIGPIPE.
 *
 * Every call returns 0 (or a non-negative count or flag, as documented)
 * on success and a negative RDZV_E* code on failure.  An error reply from
 * rdzvd is decoded into its code (RDZV_ENOTFOUND, RDZV_ETIMEDOUT, ...) and
 * its message is kept for rdzv_client_errmsg().  A local timeout returns
 * RDZV_ETIMEDOUT and leaves the connection usable when the whole request
 * had been sent: the late reply is recognised by its id and skipped.
 * Anything that breaks the stream (I/O error, peer closed, malformed
 * frame, a request cut short by a timeout) makes the client dead: that
 * call and every later one return RDZV_ECONN (or the first cause) until
 * the caller closes it and connects again.
 *
 * Keys and the namespace are C strings; values are byte ranges.  Values
 * returned to the caller are malloc'ed, NUL-terminated for convenience
 * (the NUL is not counted in the length), and owned by the caller.
 *
 * With a CA bundle (rdzv_client_connect_opts) the connection runs over
 * TLS (PROTOCOL.md "TLS"): rdzvd's certificate chain and its name or
 * address are always verified, and everything else behaves the same.
 */
#ifndef RDZV_CLIENT_H
#define RDZV_CLIENT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

struct rdzv_client;

/*
 * Connects to host_port ("host:port", "1.2.3.4:port" or "[v6addr]:port";
 * names are resolved with getaddrinfo and every address is tried in turn;
 * a comma-separated list of them, rdzvds of which one leads, is tried in
 * order, each with its share of the time left)
 * and exchanges the native preamble, all within timeout_ms.  Returns the
 * client, or NULL with *err (if err is non-NULL) set to RDZV_EINVAL (bad
 * address), RDZV_ECONN (refused, unreachable, name not found),
 * RDZV_ETIMEDOUT, RDZV_EVERSION (rdzvd refused our version), RDZV_EPROTO
 * (not an rdzvd), RDZV_ETLS (rdzvd accepts only TLS: see
 * rdzv_client_connect_opts) or RDZV_ENOMEM.
 */
struct rdzv_client	*rdzv_client_connect(const char *host_port,
			    int timeout_ms, int *err);
/*
 * The same, answering rdzvd's challenge with token (PROTOCOL.md
 * "Authentication") when it asks for one.  *err is RDZV_EAUTH when rdzvd
 * wants a token and none was given, refuses this one, or does not prove
 * that it holds the same one.  token may be NULL.
 */
struct rdzv_client	*rdzv_client_connect_auth(const char *host_port,
			    int timeout_ms, const void *token, size_t tokenlen,
			    int *err);
/* How to connect; zero it, then fill in what applies. */
struct rdzv_client_opts {
	const void	*token;		/* NULL: answer no challenge */
	size_t		 tokenlen;
	const char	*tls_ca;	/* NULL: plaintext; a PEM CA bundle file,
					 * or "system" (RDZV_TLS_CA_SYSTEM) */
	char		*why;		/* NULL, or gets a readable reason on */
	size_t		 whysz;		/* failure ("" when there is none) */
};
/*
 * Connects as rdzv_client_connect_auth() does, with TLS when o->tls_ca is
 * set: the handshake (verifying rdzvd's chain against tls_ca and its name
 * or IP address against host_port's host) runs within timeout_ms too.
 * *err is RDZV_ETLS when the CA bundle cannot be loaded, the handshake
 * fails (o->why says why: the certificate check's verdict first), or,
 * without tls_ca, rdzvd refuses plaintext (it requires TLS).  o may be
 * NULL (plaintext, no token).
 */
struct rdzv_client	*rdzv_client_connect_opts(const char *host_port,
			    int timeout_ms, const struct rdzv_client_opts *o,
			    int *err);
/* Closes the connection and frees the client; NULL is allowed. */
void	rdzv_client_close(struct rdzv_client *);

/*
 * Selects the namespace every later request names (default: the empty
 * namespace, the one TCPStore clients see).  Returns 0, RDZV_ETOOBIG
 * (over 1 KiB) or RDZV_ENOMEM.
 */
int	rdzv_client_set_namespace(struct rdzv_client *, const char *ns);
/* The message of the last error reply, or "" (valid until the next call). */
const char	*rdzv_client_errmsg(const struct rdzv_client *);
/*
 * The socket, e.g. to poll() for pushes; -1 once dead.  Over TLS a push
 * may already wait decrypted inside the client while the socket shows
 * nothing: rdzv_client_poll_push() looks there first.
 */
int	rdzv_client_fd(const struct rdzv_client *);
/* 1 while the connection is usable, 0 once dead. */
int	rdzv_client_alive(const struct rdzv_client *);

/*
 * Called with every server push (NAT_F_PUSH frame, e.g. a WATCH_EVENT)
 * read while waiting for a reply or in rdzv_client_poll_push().  payload
 * points into the client's buffer and is valid only during the call.
 */
typedef void	(*rdzv_push_cb)(uint16_t op, const uint8_t *payload,
		    size_t len, void *arg);
void	rdzv_client_set_push_cb(struct rdzv_client *, rdzv_push_cb, void *arg);
/*
 * Waits up to timeout_ms for pushes and hands each to the push callback.
 * Returns the number handled (0 when none came in time) or RDZV_ECONN.
 */
int	rdzv_client_poll_push(struct rdzv_client *, int timeout_ms);

/*
 * Makes every later wait of c an interruptible one: c waits with ppoll()
 * under mask (the signals the caller blocks elsewhere and wants to see
 * while waiting) and returns RDZV_ECANCELED, without breaking the
 * stream, once *flag is non-zero, however early or late the signal
 * came.  mask and flag must outlive c; NULL, NULL undoes it.
 */
void	rdzv_client_set_interrupt(struct rdzv_client *, const sigset_t *mask,
	    volatile sig_atomic_t *flag);

/*
 * One request of any op: payload (len bytes) holds its fields encoded as
 * common/wire.h describes (namespace first for the ops that name one;
 * this call adds nothing).  On success *reply (malloc'ed, NUL-terminated,
 * may be NULL) and *rlen (may be NULL) get the reply's payload, fields
 * still encoded.  An error reply returns its code, its message kept for
 * rdzv_client_errmsg().  A local timeout does not cancel the op in rdzvd.
 */
int	rdzv_client_call(struct rdzv_client *, uint16_t op,
	    const void *payload, size_t len, void **reply, size_t *rlen,
	    int timeout_ms);

/* Round trip with rdzvd; checks the echo.  Returns 0. */
int	rdzv_client_ping(struct rdzv_client *, int timeout_ms);

/* Stores value under key (replacing it) and wakes its waiters. */
int	rdzv_client_set(struct rdzv_client *, const char *key,
	    const void *val, size_t len, int timeout_ms);
/*
 * Reads key into *val (malloc'ed, NUL-terminated) and *len.  Returns 0 or
 * RDZV_ENOTFOUND when the key does not exist.
 */
int	rdzv_client_get(struct rdzv_client *, const char *key, void **val,
	    size_t *len, int timeout_ms);
/*
 * Adds delta to the decimal integer stored at key (missing counts as 0)
 * and sets *value (may be NULL) to the result.  RDZV_ENOTINT when the
 * stored value is not an integer.
 */
int	rdzv_client_add(struct rdzv_client *, const char *key, int64_t delta,
	    int64_t *value, int timeout_ms);
/*
 * Compare-and-set with TCPStore's rules (a missing key matches an empty
 * expected value); *now (malloc'ed, may be NULL) gets the value stored
 * afterwards.
 */
int	rdzv_client_cas(struct rdzv_client *, const char *key,
	    const void *expected, size_t elen, const void *desired, size_t dlen,
	    void **now, size_t *nowlen, int timeout_ms);
/*
 * Waits until all n keys exist.  timeout_ms bounds the wait in rdzvd
 * (negative: forever); returns 0 or RDZV_ETIMEDOUT.  If rdzvd does not
 * answer within timeout_ms plus a grace period the wait is cancelled.
 */
int	rdzv_client_wait(struct rdzv_client *, const char *const *keys,
	    size_t n, int timeout_ms);
/* Returns 1 when all n keys exist, 0 when one does not. */
int	rdzv_client_check(struct rdzv_client *, const char *const *keys,
	    size_t n, int timeout_ms);
/* Returns 1 when key was deleted, 0 when it did not exist. */
int	rdzv_client_delete(struct rdzv_client *, const char *key,
	    int timeout_ms);
/* Sets *count to the number of keys in the namespace. */
int	rdzv_client_num_keys(struct rdzv_client *, int64_t *count,
	    int timeout_ms);
/* Appends value to key (creating it) and wakes its waiters. */
int	rdzv_client_append(struct rdzv_client *, const char *key,
	    const void *val, size_t len, int timeout_ms);
/*
 * Reads n keys at once: vals[i] (malloc'ed) and lens[i] for keys[i].
 * Returns 0, or RDZV_ENOTFOUND (nothing allocated) when one is missing.
 */
int	rdzv_client_multi_get(struct rdzv_client *, const char *const *keys,
	    size_t n, void **vals, size_t *lens, int timeout_ms);
/* Sets n keys in one request (one transaction in rdzvd). */
int	rdzv_client_multi_set(struct rdzv_client *, const char *const *keys,
	    const void *const *vals, const size_t *lens, size_t n,
	    int timeout_ms);
/* Pushes value on the tail of queue key and wakes one popper. */
int	rdzv_client_queue_push(struct rdzv_client *, const char *key,
	    const void *val, size_t len, int timeout_ms);
/*
 * Pops the head of queue key into *val (malloc'ed), waiting up to
 * timeout_ms in rdzvd for one (0: answer at once; RDZV_ETIMEDOUT if
 * empty then).
 */
int	rdzv_client_queue_pop(struct rdzv_client *, const char *key,
	    void **val, size_t *len, int timeout_ms);
/* Sets *length to the number of items in queue key. */
int	rdzv_client_queue_len(struct rdzv_client *, const char *key,
	    int64_t *length, int timeout_ms);
/*
 * Lists the keys of the namespace: *keys is a malloc'ed array of *n
 * malloc'ed C strings (free with rdzv_client_free_keys).  Returns the
 * count.
 */
int	rdzv_client_list_keys(struct rdzv_client *, char ***keys, size_t *n,
	    int timeout_ms);
void	rdzv_client_free_keys(char **keys, size_t n);
/*
 * Arrives at barrier key of world members and returns once all have
 * arrived (0) or after timeout_ms in rdzvd (RDZV_ETIMEDOUT).
 */
int	rdzv_client_barrier(struct rdzv_client *, const char *key,
	    int64_t world, int timeout_ms);
/*
 * Asks for WATCH_EVENT pushes about key; they reach the push callback.
 */
int	rdzv_client_watch(struct rdzv_client *, const char *key,
	    int timeout_ms);

#endif /* RDZV_CLIENT_H */
