/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handshake.c: the client's opening of a native connection, with no I/O
 * (see handshake.h for the contract and the state diagram).  Owns the
 * checks of rdzvd's preamble, the answer to its challenge and the check
 * of its proof, and the words of every refusal, so that the blocking
 * client and rdzv-agent tell a user the same thing; each names its own
 * options through hs_config.
 */
#include "config.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "handshake.h"
#include "log.h"
#include "rdzv_err.h"
#include "tls.h"
#include "wire.h"

/* Moves hs to state; the only place hs->state changes. */
static void
hs_set_state(struct hs *hs, enum hs_state state)
{
	/* Forward only: nothing leaves OPEN or FAILED. */
	assert(hs->state != HS_OPEN && hs->state != HS_FAILED);
	assert(state > hs->state || state == HS_FAILED);
	hs->state = state;
}

/* Fails hs with code and a reason; returns code. */
static int
hs_fail(struct hs *hs, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
hs_fail(struct hs *hs, int code, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(hs->why, sizeof hs->why, fmt, ap);
	va_end(ap);
	hs->code = code;
	hs_set_state(hs, HS_FAILED);
	return (code);
}

int
hs_start(struct hs *hs, const struct hs_config *cfg, struct evbuffer *out)
{
	char	why[sizeof hs->why];

	memset(hs, 0, sizeof *hs);
	hs->cfg = *cfg;
	if (hs->cfg.endpoint == NULL)
		hs->cfg.endpoint = "the endpoint";
	if (hs->cfg.token_flag == NULL)
		hs->cfg.token_flag = "--token-file";
	if (hs->cfg.ca_flag == NULL)
		hs->cfg.ca_flag = "--tls-ca";
	if (hs->cfg.random == NULL)
		hs->cfg.random = rdzv_random;
	hs->state = HS_PREAMBLE;
	/* A malformed credential fails only if rdzvd asks for a token. */
	if (hs->cfg.token != NULL)
		hs->cred_kind = rdzv_cred_parse(hs->cfg.token,
		    hs->cfg.tokenlen, &hs->cred, why, sizeof why);
	if (nat_preamble_put(out, NAT_VERSION) != 0)
		return (hs_fail(hs, RDZV_ENOMEM, "out of memory"));
	return (0);
}

/*
 * rdzvd's preamble: sets *used (0 until all of it is there) or fails.
 * A plaintext connection to an rdzvd that requires TLS gets a refusal
 * preamble (version 0, NAT_PRE_TLS) before rdzvd hangs up.
 */
static int
hs_preamble(struct hs *hs, const uint8_t *p, size_t len, size_t *used)
{
	uint8_t	version = 0;
	size_t	need = 0;
	int	rv;

	rv = nat_preamble_decode(p, len, &version, &need);
	if (rv == 0)
		return (0);
	if (rv == RDZV_EVERSION && version == 0 && (p[5] & NAT_PRE_TLS))
		return (hs_fail(hs, RDZV_ETLS, "rdzvd at %s requires TLS: "
		    "give its CA certificate with %s FILE or " RDZV_TLS_CA_ENV,
		    hs->cfg.endpoint, hs->cfg.ca_flag));
	if (rv == RDZV_EVERSION)
		return (hs_fail(hs, RDZV_EVERSION, "rdzvd at %s does not "
		    "speak native protocol version %d", hs->cfg.endpoint,
		    NAT_VERSION));
	if (rv != NAT_PREAMBLE_LEN)
		return (hs_fail(hs, RDZV_EPROTO, "%s is not an rdzvd (bad "
		    "preamble)", hs->cfg.endpoint));
	*used = NAT_PREAMBLE_LEN;
	if (!(p[5] & NAT_PRE_AUTH)) {
		hs_set_state(hs, HS_OPEN);
		return (0);
	}
	if (hs->cfg.token == NULL)
		return (hs_fail(hs, RDZV_EAUTH, "rdzvd requires a token: pass "
		    "%s or set RDZV_TOKEN_FILE", hs->cfg.token_flag));
	if (hs->cred_kind < 0) {
		char	why[sizeof hs->why];
		struct rdzv_cred	cred;

		(void)rdzv_cred_parse(hs->cfg.token, hs->cfg.tokenlen, &cred,
		    why, sizeof why);
		return (hs_fail(hs, RDZV_EINVAL, "the file given with %s is "
		    "%s", hs->cfg.token_flag, why));
	}
	hs_set_state(hs, HS_CHALLENGE);
	return (0);
}

/* The key our MACs are made with: the job's, or the operator's secret. */
static void
hs_key(const struct hs *hs, const void **key, size_t *len)
{
	if (hs->cred_kind == 1) {
		*key = hs->cred.key;
		*len = sizeof hs->cred.key;
	} else {
		*key = hs->cfg.token;
		*len = hs->cfg.tokenlen;
	}
}

/*
 * The challenge: answers rdzvd's nonce with ours and our MAC, and, with
 * a job credential, the job it speaks for (rdzvd derives its key).
 */
static int
hs_challenge(struct hs *hs, const struct nat_msg *m, struct evbuffer *out)
{
	struct nat_rd	rd;
	struct nat_wr	wr;
	struct slice	s;
	const void	*key;
	size_t		 keylen;
	uint8_t		mac[NAT_MAC_LEN];

	if (m->op != NAT_OP_AUTH_CHALLENGE || m->flags != NAT_F_PUSH)
		return (hs_fail(hs, RDZV_EPROTO, "unexpected frame (op %u) "
		    "from %s while waiting for its challenge", m->op,
		    hs->cfg.endpoint));
	nat_rd_init(&rd, m->payload);
	if (nat_get_bytes(&rd, &s) != 0 || nat_rd_end(&rd) != 0 ||
	    s.len != NAT_NONCE_LEN)
		return (hs_fail(hs, RDZV_EPROTO, "malformed challenge from %s",
		    hs->cfg.endpoint));
	memcpy(hs->sn, s.p, NAT_NONCE_LEN);
	hs_key(hs, &key, &keylen);
	if (hs->cfg.random(hs->cn, sizeof hs->cn) != 0 ||
	    nat_auth_mac(key, keylen, NAT_AUTH_CLIENT_TAG,
	    hs->sn, hs->cn, mac) != 0)
		return (hs_fail(hs, RDZV_EIO, "cannot answer the challenge: "
		    "no random bytes or no HMAC"));
	if (nat_frame_begin(&wr, out, NAT_OP_AUTH, 0, HS_AUTH_ID) != 0 ||
	    nat_put_bytes(&wr, hs->cn, sizeof hs->cn) != 0 ||
	    nat_put_bytes(&wr, mac, sizeof mac) != 0 ||
	    (hs->cred_kind == 1 &&
	    nat_put_bytes(&wr, hs->cred.job, hs->cred.joblen) != 0) ||
	    nat_frame_end(&wr) != 0)
		return (hs_fail(hs, RDZV_ENOMEM, "out of memory"));
	hs_set_state(hs, HS_PROVE);
	return (0);
}

/* rdzvd's answer to our AUTH: its own MAC, or a refusal. */
static int
hs_prove(struct hs *hs, const struct nat_msg *m)
{
	struct nat_rd	rd;
	struct slice	s;
	int64_t		code;
	const void	*key;
	size_t		 keylen;
	uint8_t		mac[NAT_MAC_LEN];
	char		text[256];

	if (m->op != NAT_OP_AUTH || m->id != HS_AUTH_ID ||
	    !(m->flags & NAT_F_REPLY) || (m->flags & NAT_F_PUSH))
		return (hs_fail(hs, RDZV_EPROTO, "unexpected frame (op %u) "
		    "from %s while authenticating", m->op, hs->cfg.endpoint));
	nat_rd_init(&rd, m->payload);
	if (m->flags & NAT_F_ERROR) {
		if (nat_get_i64(&rd, &code) != 0 ||
		    nat_get_bytes(&rd, &s) != 0 || nat_rd_end(&rd) != 0 ||
		    code >= 0 || code < RDZV_ERR_MIN)
			return (hs_fail(hs, RDZV_EPROTO, "malformed error reply "
			    "from %s", hs->cfg.endpoint));
		if (code == RDZV_EAUTH && hs->cred_kind == 1)
			return (hs_fail(hs, RDZV_EAUTH, "rdzvd refused our "
			    "credential for job %s: make it again with "
			    "rdzvctl credential (%s)", hs->cred.job,
			    hs->cfg.token_flag));
		if (code == RDZV_EAUTH)
			return (hs_fail(hs, RDZV_EAUTH, "rdzvd refused our "
			    "token: check %s against rdzvd's --token-file",
			    hs->cfg.token_flag));
		log_escape(text, sizeof text, s.p, s.len);
		return (hs_fail(hs, (int)code, "rdzvd at %s refused AUTH: %s",
		    hs->cfg.endpoint, text));
	}
	if (nat_get_bytes(&rd, &s) != 0 || nat_rd_end(&rd) != 0 ||
	    s.len != NAT_MAC_LEN)
		return (hs_fail(hs, RDZV_EPROTO, "malformed AUTH reply from %s",
		    hs->cfg.endpoint));
	hs_key(hs, &key, &keylen);
	if (nat_auth_mac(key, keylen, NAT_AUTH_SERVER_TAG,
	    hs->cn, hs->sn, mac) != 0)
		return (hs_fail(hs, RDZV_EIO, "cannot check rdzvd's proof: no "
		    "HMAC"));
	if (!nat_mac_equal(mac, s.p))
		return (hs_fail(hs, RDZV_EAUTH, "the server at %s does not hold "
		    "our token: not our rdzvd", hs->cfg.endpoint));
	hs_set_state(hs, HS_OPEN);
	return (0);
}

/*
 * One whole frame of the challenge-response: sets *used (0 until all of
 * it is there) or fails.  The length is checked before anything waits
 * for it, so a peer cannot make us buffer more than HS_FRAME_MAX.
 */
static int
hs_frame(struct hs *hs, const uint8_t *p, size_t len, size_t *used,
    struct evbuffer *out)
{
	struct wire_limits	lim;
	struct nat_msg		m;
	size_t			flen, need = 0;
	int			rv;

	if (len < 4)
		return (0);
	flen = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 |
	    (size_t)p[3] << 24;
	if (flen > HS_FRAME_MAX)
		return (hs_fail(hs, RDZV_EPROTO, "frame of %zu bytes from %s "
		    "while authenticating", flen, hs->cfg.endpoint));
	if (len - 4 < flen)
		return (0);
	wire_limits_default(&lim);
	if ((rv = nat_decode(p, flen + 4, &lim, &m, &need)) <= 0)
		return (hs_fail(hs, RDZV_EPROTO, "malformed frame from %s "
		    "while authenticating", hs->cfg.endpoint));
	*used = (size_t)rv;
	if (hs->state == HS_CHALLENGE)
		return (hs_challenge(hs, &m, out));
	return (hs_prove(hs, &m));
}

int
hs_input(struct hs *hs, const uint8_t *buf, size_t len, size_t *used,
    struct evbuffer *out)
{
	size_t	n;
	int	rv;

	*used = 0;
	while (hs->state != HS_OPEN && hs->state != HS_FAILED && *used < len) {
		n = 0;
		if (hs->state == HS_PREAMBLE)
			rv = hs_preamble(hs, buf + *used, len - *used, &n);
		else
			rv = hs_frame(hs, buf + *used, len - *used, &n, out);
		if (rv < 0)
			return (rv);
		if (n == 0)
			return (0);	/* a unit is not all there yet */
		*used += n;
	}
	if (hs->state == HS_OPEN)
		return (1);
	if (hs->state == HS_FAILED)
		return (hs->code);
	return (0);
}

const char *
hs_why(const struct hs *hs)
{
	return (hs->why);
}
