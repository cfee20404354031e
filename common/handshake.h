/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handshake.h: the client's opening of a native connection (PROTOCOL.md
 * "Preamble", "Authentication" and the TLS refusal), as a machine with no
 * I/O: the bytes rdzvd sends go in, the bytes to send it come out
 * (appended to an evbuffer), until the session may begin or the
 * handshake has failed with an RDZV_E* code and a reason.  The blocking
 * client (common/client.c) and rdzv-agent's libevent connection
 * (agent/rdzv.c) both drive it; tests/unit/test_handshake.c and
 * tests/fuzz/fuzz_handshake.c drive it directly.  The TLS handshake, when
 * there is one, runs below it: these are the bytes inside TLS.
 *
 *   hs_start: our preamble out
 *     |
 *     v
 *   HS_PREAMBLE --rdzvd's preamble, no flags--------------------> HS_OPEN
 *     | preamble with NAT_PRE_AUTH (and a token to answer with)
 *     v
 *   HS_CHALLENGE --AUTH_CHALLENGE push: our nonce and MAC out--> HS_PROVE
 *                  (and our job, when the token is a job credential)
 *                                                                  |
 *   HS_OPEN <--AUTH reply whose MAC proves rdzvd holds the token---+
 *
 *   any state --refusal (TLS required, version, token), bytes that are
 *   not rdzvd's, a MAC that does not check--> HS_FAILED
 * Every transition is made by hs_set_state() in handshake.c.
 */
#ifndef RDZV_HANDSHAKE_H
#define RDZV_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "wire.h"

struct evbuffer;

/* The largest frame the handshake reads (a challenge, an AUTH reply). */
#define HS_FRAME_MAX	4096
/* The request id of our AUTH (the handshake owns the id space until open). */
#define HS_AUTH_ID	1

/* What the driver tells the machine; pointers are borrowed until done. */
struct hs_config {
	const void	*token;		/* NULL: none; a challenge then fails.
					 * The operator's secret or a job
					 * credential file's bytes (auth.h) */
	size_t		 tokenlen;
	const char	*endpoint;	/* names rdzvd in reasons */
	const char	*token_flag;	/* the driver's option for a token file */
	const char	*ca_flag;	/* the driver's option for a CA bundle */
	/* Fills buf with n random bytes, 0 or -1; NULL: rdzv_random(). */
	int		(*random)(void *buf, size_t n);
};

enum hs_state {
	HS_PREAMBLE,	/* our preamble sent, waiting for rdzvd's */
	HS_CHALLENGE,	/* rdzvd wants a token: waiting for its nonce */
	HS_PROVE,	/* our AUTH sent: waiting for rdzvd's proof */
	HS_OPEN,	/* done: the session's frames follow */
	HS_FAILED,	/* done: code and why say what went wrong */
};

/* One handshake; embed it anywhere, no allocation, nothing to free. */
struct hs {
	enum hs_state		 state;
	struct hs_config	 cfg;
	int			 code;		/* the failure's RDZV_E* */
	uint8_t			 sn[NAT_NONCE_LEN];	/* rdzvd's nonce */
	uint8_t			 cn[NAT_NONCE_LEN];	/* ours */
	int			 cred_kind;	/* rdzv_cred_parse() of token */
	struct rdzv_cred	 cred;		/* cred_kind 1: the job's */
	char			 why[512];	/* the failure's reason */
};

/*
 * Starts a handshake with cfg (copied; what it points to is borrowed)
 * and appends our preamble to out.  Returns 0 or RDZV_ENOMEM.
 */
int	hs_start(struct hs *, const struct hs_config *cfg, struct evbuffer *out);

/*
 * Feeds the bytes rdzvd sent: buf holds everything received and not yet
 * used, from the first unused byte.  The machine takes whole units only
 * (the preamble, whole frames), sets *used to how many bytes it took (the
 * caller drains them) and appends what must be sent to out.  Returns 1
 * when the handshake is done (the bytes after *used belong to the
 * session), 0 when it needs more bytes (send out first), or a negative
 * RDZV_E* when it failed (hs_why() says why; close the connection):
 *   RDZV_ETLS      rdzvd requires TLS and this connection is plaintext
 *   RDZV_EVERSION  rdzvd refused our protocol version
 *   RDZV_EAUTH     a token is wanted and none was given, rdzvd refused
 *                  ours, or rdzvd did not prove it holds the same one
 *   RDZV_EINVAL    the token is a malformed job credential
 *   RDZV_EPROTO    the peer is not rdzvd (bad preamble or frame)
 *   RDZV_EIO, RDZV_ENOMEM  a local failure (random bytes, HMAC, memory)
 *   another        rdzvd refused AUTH with that code
 * Once done it returns the same result again, taking nothing.
 */
int	hs_input(struct hs *, const uint8_t *buf, size_t len, size_t *used,
	    struct evbuffer *out);

/* The reason for a failure ("" before one). */
const char	*hs_why(const struct hs *);

#endif /* RDZV_HANDSHAKE_H */
