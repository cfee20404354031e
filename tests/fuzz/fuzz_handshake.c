/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_handshake.c: libFuzzer target for the client's handshake machine
 * (common/handshake.c), the decoder of what rdzvd sends before a session.
 * The first input byte picks the configuration (bit 0: a token to answer
 * a challenge with; bit 1: that token is a job credential, bit 2: a
 * malformed one) and, with the second, where to cut the stream; the
 * rest is rdzvd's bytes.  Our nonce is fixed, so a seed can carry rdzvd's
 * right answer (tests/fuzz/make-corpus.py) and the fuzzer reaches the
 * open state.  The stream is fed all at once, cut in two, and one byte at
 * a time: every way must give the same result, the same bytes taken, the
 * same bytes sent and the same reason.  Also: nothing taken beyond the
 * input; a reason exactly when failed; done stays done; an open
 * handshake needs no byte past what it took; and what was sent is our
 * preamble, then at most one AUTH whose MAC a server holding the token
 * (or deriving the job's key from it) accepts.  Any broken invariant
 * aborts.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "auth.h"
#include "handshake.h"
#include "hs_nonce.h"
#include "rdzv_err.h"
#include "wire.h"

#define FUZZ_TOKEN	"fuzz-token"
#define FUZZ_JOB	"fuzz-job"

static char	fuzz_cred[RDZV_CRED_FILE_MAX + 1];	/* FUZZ_JOB's */
static uint8_t	fuzz_key[RDZV_CRED_KEY_LEN];

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

struct fuzz_run {
	int		 rv;
	size_t		 used;
	struct evbuffer	*out;
	struct hs	 hs;
};

static void
fuzz_check(int cond)
{
	if (!cond)
		abort();
}

/*
 * Feeds s in chunks of step bytes (0: all at once) after a first chunk
 * of cut bytes, keeping what the machine did not take, as a driver does.
 */
static void
fuzz_feed(const struct hs_config *cfg, const uint8_t *s, size_t len,
    size_t cut, size_t step, struct fuzz_run *r)
{
	struct evbuffer	*pend = evbuffer_new();
	size_t		 at = 0, end, used, have;

	fuzz_check(pend != NULL);
	memset(r, 0, sizeof *r);
	fuzz_check((r->out = evbuffer_new()) != NULL);
	fuzz_check(hs_start(&r->hs, cfg, r->out) == 0);
	while (at < len) {
		end = at == 0 && cut > 0 ? cut : step == 0 ? len : at + step;
		if (end > len)
			end = len;
		evbuffer_add(pend, s + at, end - at);
		at = end;
		have = evbuffer_get_length(pend);
		r->rv = hs_input(&r->hs, evbuffer_pullup(pend, -1), have,
		    &used, r->out);
		fuzz_check(used <= have);
		evbuffer_drain(pend, used);
		r->used += used;
		if (r->rv != 0)
			break;
	}
	evbuffer_free(pend);
}

static void
fuzz_same(struct fuzz_run *a, struct fuzz_run *b)
{
	size_t	n = evbuffer_get_length(a->out);

	fuzz_check(a->rv == b->rv && a->used == b->used);
	fuzz_check(strcmp(hs_why(&a->hs), hs_why(&b->hs)) == 0);
	fuzz_check(n == evbuffer_get_length(b->out));
	fuzz_check(n == 0 || memcmp(evbuffer_pullup(a->out, -1),
	    evbuffer_pullup(b->out, -1), n) == 0);
}

/* Our preamble, then nothing or one AUTH that proves we hold the token. */
static void
fuzz_check_out(const struct hs_config *cfg, struct fuzz_run *r)
{
	struct wire_limits	 lim;
	struct nat_msg		 m;
	struct nat_rd		 rd;
	struct slice		 cn, mac, job;
	const uint8_t		*p;
	uint8_t			 want[NAT_MAC_LEN], version;
	size_t			 len = evbuffer_get_length(r->out), need;
	int			 cred = cfg->token == fuzz_cred;

	fuzz_check(len >= NAT_PREAMBLE_LEN);
	p = evbuffer_pullup(r->out, -1);
	fuzz_check(nat_preamble_decode(p, len, &version, &need) ==
	    NAT_PREAMBLE_LEN && version == NAT_VERSION && p[5] == 0);
	if (len == NAT_PREAMBLE_LEN)
		return;
	fuzz_check(cfg->token != NULL);
	wire_limits_default(&lim);
	fuzz_check(nat_decode(p + NAT_PREAMBLE_LEN, len - NAT_PREAMBLE_LEN,
	    &lim, &m, &need) == (int)(len - NAT_PREAMBLE_LEN));
	fuzz_check(m.op == NAT_OP_AUTH && m.flags == 0 && m.id == HS_AUTH_ID);
	nat_rd_init(&rd, m.payload);
	fuzz_check(nat_get_bytes(&rd, &cn) == 0 &&
	    nat_get_bytes(&rd, &mac) == 0);
	if (cred)
		fuzz_check(nat_get_bytes(&rd, &job) == 0 &&
		    job.len == strlen(FUZZ_JOB) &&
		    memcmp(job.p, FUZZ_JOB, job.len) == 0);
	fuzz_check(nat_rd_end(&rd) == 0);
	fuzz_check(cn.len == NAT_NONCE_LEN && mac.len == NAT_MAC_LEN);
	if (cred)
		fuzz_check(nat_auth_mac(fuzz_key, sizeof fuzz_key,
		    NAT_AUTH_CLIENT_TAG, r->hs.sn, cn.p, want) == 0);
	else
		fuzz_check(nat_auth_mac(cfg->token, cfg->tokenlen,
		    NAT_AUTH_CLIENT_TAG, r->hs.sn, cn.p, want) == 0);
	fuzz_check(memcmp(want, mac.p, NAT_MAC_LEN) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hs_config	cfg;
	struct fuzz_run		whole, r;
	const uint8_t		*s;
	size_t			len, cut, used;

	if (size < 2)
		return (0);
	if (fuzz_cred[0] == '\0') {
		struct rdzv_cred	c;

		memset(&c, 0, sizeof c);
		memcpy(c.job, FUZZ_JOB, sizeof FUZZ_JOB);
		c.joblen = strlen(FUZZ_JOB);
		fuzz_check(rdzv_cred_derive(FUZZ_TOKEN, strlen(FUZZ_TOKEN),
		    c.job, c.joblen, c.key) == 0);
		memcpy(fuzz_key, c.key, sizeof fuzz_key);
		fuzz_check(rdzv_cred_format(&c, fuzz_cred, sizeof fuzz_cred) >
		    0);
	}
	memset(&cfg, 0, sizeof cfg);
	if ((data[0] & 7) == 1) {
		cfg.token = FUZZ_TOKEN;
		cfg.tokenlen = strlen(FUZZ_TOKEN);
	} else if ((data[0] & 7) == 3) {
		cfg.token = fuzz_cred;
		cfg.tokenlen = strlen(fuzz_cred);
	} else if (data[0] & 1) {
		cfg.token = RDZV_CRED_HEADER "\njob " FUZZ_JOB "\nkey 00";
		cfg.tokenlen = strlen(cfg.token);
	}
	cfg.endpoint = "127.0.0.1:29400";
	cfg.random = hs_fixed_random;
	s = data + 2;
	len = size - 2;
	cut = len > 0 ? data[1] % (len + 1) : 0;

	fuzz_feed(&cfg, s, len, 0, 0, &whole);
	fuzz_check(whole.used <= len);
	fuzz_check(whole.rv == 0 || whole.rv == 1 ||
	    (whole.rv < 0 && whole.rv >= RDZV_ERR_MIN));
	fuzz_check((whole.rv < 0) == (hs_why(&whole.hs)[0] != '\0'));
	fuzz_check_out(&cfg, &whole);
	/* Done is done: another call takes nothing and says the same. */
	if (whole.rv != 0) {
		fuzz_check(hs_input(&whole.hs, s, len, &used, whole.out) ==
		    whole.rv && used == 0);
	}

	fuzz_feed(&cfg, s, len, cut, 0, &r);
	fuzz_same(&whole, &r);
	evbuffer_free(r.out);
	fuzz_feed(&cfg, s, len, 0, 1, &r);
	fuzz_same(&whole, &r);
	evbuffer_free(r.out);
	/* Open needs no lookahead: the bytes it took are enough. */
	if (whole.rv == 1) {
		fuzz_feed(&cfg, s, whole.used, 0, 0, &r);
		fuzz_same(&whole, &r);
		evbuffer_free(r.out);
	}
	evbuffer_free(whole.out);
	return (0);
}
