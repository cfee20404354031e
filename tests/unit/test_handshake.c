/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_handshake.c: unit tests of the client's handshake machine
 * (common/handshake.c), driven as a connection would: rdzvd's bytes in
 * chunks, split at every offset and one byte at a time, must give the
 * same result and the same bytes out as all at once; every truncation
 * waits for more; the TLS refusal, a version refusal, a missing, wrong or
 * unproven token and bytes that are not rdzvd's each fail with their code
 * and words.  A job credential as the token: AUTH names the job and the
 * MACs are made with the job's key; a malformed one fails only when
 * rdzvd asks for a token.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "auth.h"
#include "handshake.h"
#include "hs_nonce.h"
#include "rdzv_err.h"
#include "wire.h"

#define EP		"10.1.2.3:29400"
#define TOKEN		"the-shared-token"
#define TAIL		"\x0c\0\0\0\x1a\0\x04\0\0\0\0\0"	/* a session frame */
#define TAIL_LEN	12

static int
failing_random(void *buf, size_t n)
{
	return (-1);
}

static const uint8_t	server_nonce[NAT_NONCE_LEN] =
    "0123456789abcdef0123456789abcde";

static struct hs_config
config(const char *token)
{
	struct hs_config	cfg;

	memset(&cfg, 0, sizeof cfg);
	cfg.token = token;
	cfg.tokenlen = token != NULL ? strlen(token) : 0;
	cfg.endpoint = EP;
	cfg.token_flag = "--token_file";
	cfg.ca_flag = "--tls_ca";
	cfg.random = hs_fixed_random;
	return (cfg);
}

/* rdzvd's preamble with flags. */
static void
put_preamble(struct evbuffer *b, uint8_t version, uint8_t flags)
{
	assert_int_equal(nat_preamble_put_flags(b, version, flags), 0);
}

static void
put_challenge(struct evbuffer *b, const uint8_t *nonce, size_t len)
{
	struct nat_wr	wr;

	assert_int_equal(nat_frame_begin(&wr, b, NAT_OP_AUTH_CHALLENGE,
	    NAT_F_PUSH, 0), 0);
	assert_int_equal(nat_put_bytes(&wr, nonce, len), 0);
	assert_int_equal(nat_frame_end(&wr), 0);
}

/* rdzvd's proof for our fixed nonce, made with token. */
static void
put_proof(struct evbuffer *b, const char *token, const uint8_t *cn)
{
	struct nat_wr	wr;
	uint8_t		mac[NAT_MAC_LEN];

	assert_int_equal(nat_auth_mac(token, strlen(token), NAT_AUTH_SERVER_TAG,
	    cn, server_nonce, mac), 0);
	assert_int_equal(nat_frame_begin(&wr, b, NAT_OP_AUTH, NAT_F_REPLY,
	    HS_AUTH_ID), 0);
	assert_int_equal(nat_put_bytes(&wr, mac, sizeof mac), 0);
	assert_int_equal(nat_frame_end(&wr), 0);
}

static void
our_nonce(uint8_t cn[NAT_NONCE_LEN])
{
	hs_fixed_random(cn, NAT_NONCE_LEN);
}

/* The whole stream of an rdzvd that wants token and proves it holds it. */
static struct evbuffer *
auth_stream(const char *token, int tail)
{
	struct evbuffer	*b = evbuffer_new();
	uint8_t		 cn[NAT_NONCE_LEN];

	assert_non_null(b);
	our_nonce(cn);
	put_preamble(b, NAT_VERSION, NAT_PRE_AUTH);
	put_challenge(b, server_nonce, NAT_NONCE_LEN);
	put_proof(b, token, cn);
	if (tail)
		evbuffer_add(b, TAIL, TAIL_LEN);
	return (b);
}

/* What one driver run saw. */
struct run {
	int		 rv;
	size_t		 used;		/* bytes the machine took, in all */
	size_t		 calls;
	struct evbuffer	*out;
	char		 why[512];
};

/*
 * Feeds s (len bytes) to a fresh machine the way a connection delivers
 * it: chunks ending at each of cuts[] (ascending), then the rest.
 * Unused bytes stay pending for the next call, as in a driver's buffer.
 * Stops at the first result that is not 0.
 */
static void
feed(const struct hs_config *cfg, const uint8_t *s, size_t len,
    const size_t *cuts, size_t ncuts, struct run *r)
{
	struct hs	 hs;
	struct evbuffer	*pend = evbuffer_new();
	size_t		 i, at = 0, end, used, before;

	assert_non_null(pend);
	memset(r, 0, sizeof *r);
	assert_non_null(r->out = evbuffer_new());
	assert_int_equal(hs_start(&hs, cfg, r->out), 0);
	for (i = 0; i <= ncuts; i++) {
		end = i < ncuts ? cuts[i] : len;
		assert_true(end >= at && end <= len);
		evbuffer_add(pend, s + at, end - at);
		at = end;
		before = evbuffer_get_length(pend);
		r->rv = hs_input(&hs, before > 0 ? evbuffer_pullup(pend, -1) :
		    (const uint8_t *)"", before, &used, r->out);
		r->calls++;
		assert_true(used <= before);
		evbuffer_drain(pend, used);
		r->used += used;
		if (r->rv != 0)
			break;
	}
	snprintf(r->why, sizeof r->why, "%s", hs_why(&hs));
	/* Done is done: a further call takes nothing and says the same. */
	if (r->rv != 0) {
		assert_int_equal(hs_input(&hs, (const uint8_t *)"RDZV", 4,
		    &used, r->out), r->rv);
		assert_int_equal(used, 0);
	}
	evbuffer_free(pend);
}

static void
run_free(struct run *r)
{
	evbuffer_free(r->out);
}

/* Two runs saw the same thing. */
static void
assert_same(struct run *a, struct run *b)
{
	size_t	n = evbuffer_get_length(a->out);

	assert_int_equal(a->rv, b->rv);
	assert_int_equal(a->used, b->used);
	assert_string_equal(a->why, b->why);
	assert_int_equal(n, evbuffer_get_length(b->out));
	assert_memory_equal(evbuffer_pullup(a->out, -1),
	    evbuffer_pullup(b->out, -1), n);
}

/*
 * Runs s all at once, then split at every offset, then one byte at a
 * time: each must match the first.  Returns the first run.
 */
static void
feed_every_way(const struct hs_config *cfg, const uint8_t *s, size_t len,
    struct run *whole)
{
	struct run	 r;
	size_t		*cuts, k;

	feed(cfg, s, len, NULL, 0, whole);
	for (k = 0; k <= len; k++) {
		feed(cfg, s, len, &k, 1, &r);
		assert_same(whole, &r);
		run_free(&r);
	}
	assert_non_null(cuts = calloc(len + 1, sizeof *cuts));
	for (k = 0; k < len; k++)
		cuts[k] = k + 1;
	feed(cfg, s, len, cuts, len, &r);
	assert_same(whole, &r);
	run_free(&r);
	free(cuts);
}

/* Every proper prefix of s (up to stop) leaves the machine waiting. */
static void
assert_prefixes_wait(const struct hs_config *cfg, const uint8_t *s,
    size_t stop)
{
	struct run	r;
	size_t		p;

	for (p = 0; p < stop; p++) {
		feed(cfg, s, p, NULL, 0, &r);
		assert_int_equal(r.rv, 0);
		assert_true(r.used <= p);
		run_free(&r);
	}
}

/* out holds our preamble and nothing else. */
static void
assert_out_preamble_only(struct evbuffer *out)
{
	uint8_t	version;
	size_t	need;

	assert_int_equal(evbuffer_get_length(out), NAT_PREAMBLE_LEN);
	assert_int_equal(nat_preamble_decode(evbuffer_pullup(out, -1),
	    NAT_PREAMBLE_LEN, &version, &need), NAT_PREAMBLE_LEN);
	assert_int_equal(version, NAT_VERSION);
}

/* ---- tests ---- */

static void
test_plain_open(void **state)
{
	struct hs_config	 cfg = config(NULL);
	struct evbuffer		*b = evbuffer_new();
	struct run		 r;
	const uint8_t		*s;

	put_preamble(b, NAT_VERSION, 0);
	evbuffer_add(b, TAIL, TAIL_LEN);
	s = evbuffer_pullup(b, -1);
	feed_every_way(&cfg, s, evbuffer_get_length(b), &r);
	assert_int_equal(r.rv, 1);
	/* The session's first frame is left for the session. */
	assert_int_equal(r.used, NAT_PREAMBLE_LEN);
	assert_string_equal(r.why, "");
	assert_out_preamble_only(r.out);
	run_free(&r);
	assert_prefixes_wait(&cfg, s, NAT_PREAMBLE_LEN);
	/* A token given to an rdzvd that wants none is simply not used. */
	cfg = config(TOKEN);
	feed(&cfg, s, NAT_PREAMBLE_LEN, NULL, 0, &r);
	assert_int_equal(r.rv, 1);
	assert_out_preamble_only(r.out);
	run_free(&r);
	evbuffer_free(b);
}

static void
test_auth_open(void **state)
{
	struct hs_config	 cfg = config(TOKEN);
	struct evbuffer		*b = auth_stream(TOKEN, 1);
	struct nat_msg		 m;
	struct nat_rd		 rd;
	struct slice		 cn, mac;
	struct wire_limits	 lim;
	struct run		 r;
	const uint8_t		*s, *o;
	uint8_t			 want[NAT_MAC_LEN], fixed[NAT_NONCE_LEN];
	size_t			 len, need;

	wire_limits_default(&lim);
	s = evbuffer_pullup(b, -1);
	len = evbuffer_get_length(b);
	feed_every_way(&cfg, s, len, &r);
	assert_int_equal(r.rv, 1);
	assert_int_equal(r.used, len - TAIL_LEN);
	/* Out: our preamble, then AUTH with our nonce and a MAC that a
	 * server holding the token accepts. */
	assert_true(evbuffer_get_length(r.out) > NAT_PREAMBLE_LEN);
	o = evbuffer_pullup(r.out, -1);
	assert_int_equal(nat_decode(o + NAT_PREAMBLE_LEN,
	    evbuffer_get_length(r.out) - NAT_PREAMBLE_LEN, &lim, &m, &need),
	    (int)(evbuffer_get_length(r.out) - NAT_PREAMBLE_LEN));
	assert_int_equal(m.op, NAT_OP_AUTH);
	assert_int_equal(m.flags, 0);
	assert_int_equal(m.id, HS_AUTH_ID);
	nat_rd_init(&rd, m.payload);
	assert_int_equal(nat_get_bytes(&rd, &cn), 0);
	assert_int_equal(nat_get_bytes(&rd, &mac), 0);
	assert_int_equal(nat_rd_end(&rd), 0);
	assert_int_equal(cn.len, NAT_NONCE_LEN);
	our_nonce(fixed);
	assert_memory_equal(cn.p, fixed, NAT_NONCE_LEN);
	assert_int_equal(mac.len, NAT_MAC_LEN);
	assert_int_equal(nat_auth_mac(TOKEN, strlen(TOKEN),
	    NAT_AUTH_CLIENT_TAG, server_nonce, cn.p, want), 0);
	assert_memory_equal(mac.p, want, NAT_MAC_LEN);
	run_free(&r);
	/* Every cut short of rdzvd's proof waits (and sends AUTH once). */
	assert_prefixes_wait(&cfg, s, len - TAIL_LEN);
	evbuffer_free(b);
}

/* A job credential file's text for job, with key derived from TOKEN. */
static void
cred_text(const char *job, char *buf, size_t bufsz,
    uint8_t key[RDZV_CRED_KEY_LEN])
{
	struct rdzv_cred	cred;

	memset(&cred, 0, sizeof cred);
	strcpy(cred.job, job);
	cred.joblen = strlen(job);
	assert_int_equal(rdzv_cred_derive(TOKEN, strlen(TOKEN), job,
	    strlen(job), cred.key), 0);
	memcpy(key, cred.key, RDZV_CRED_KEY_LEN);
	assert_true(rdzv_cred_format(&cred, buf, bufsz) > 0);
}

static void
test_job_credential(void **state)
{
	struct hs_config	 cfg;
	struct evbuffer		*b = evbuffer_new();
	struct nat_msg		 m;
	struct nat_rd		 rd;
	struct nat_wr		 wr;
	struct slice		 cn, mac, job;
	struct wire_limits	 lim;
	struct run		 r;
	const uint8_t		*s, *o;
	uint8_t			 key[RDZV_CRED_KEY_LEN], want[NAT_MAC_LEN];
	uint8_t			 fixed[NAT_NONCE_LEN];
	char			 text[RDZV_CRED_FILE_MAX + 1];
	size_t			 len, need;

	cred_text("jobA", text, sizeof text, key);
	cfg = config(text);
	our_nonce(fixed);
	put_preamble(b, NAT_VERSION, NAT_PRE_AUTH);
	put_challenge(b, server_nonce, NAT_NONCE_LEN);
	/* rdzvd proves it holds the job's key (it derives it). */
	assert_int_equal(nat_auth_mac(key, sizeof key, NAT_AUTH_SERVER_TAG,
	    fixed, server_nonce, want), 0);
	assert_int_equal(nat_frame_begin(&wr, b, NAT_OP_AUTH, NAT_F_REPLY,
	    HS_AUTH_ID), 0);
	assert_int_equal(nat_put_bytes(&wr, want, sizeof want), 0);
	assert_int_equal(nat_frame_end(&wr), 0);
	s = evbuffer_pullup(b, -1);
	len = evbuffer_get_length(b);
	feed_every_way(&cfg, s, len, &r);
	assert_int_equal(r.rv, 1);
	assert_int_equal(r.used, len);
	wire_limits_default(&lim);
	o = evbuffer_pullup(r.out, -1);
	assert_int_equal(nat_decode(o + NAT_PREAMBLE_LEN,
	    evbuffer_get_length(r.out) - NAT_PREAMBLE_LEN, &lim, &m, &need),
	    (int)(evbuffer_get_length(r.out) - NAT_PREAMBLE_LEN));
	assert_int_equal(m.op, NAT_OP_AUTH);
	nat_rd_init(&rd, m.payload);
	assert_int_equal(nat_get_bytes(&rd, &cn), 0);
	assert_int_equal(nat_get_bytes(&rd, &mac), 0);
	assert_int_equal(nat_get_bytes(&rd, &job), 0);
	assert_int_equal(nat_rd_end(&rd), 0);
	assert_int_equal(job.len, 4);
	assert_memory_equal(job.p, "jobA", 4);
	assert_int_equal(nat_auth_mac(key, sizeof key, NAT_AUTH_CLIENT_TAG,
	    server_nonce, cn.p, want), 0);
	assert_memory_equal(mac.p, want, NAT_MAC_LEN);
	run_free(&r);
	assert_prefixes_wait(&cfg, s, len);

	/* rdzvd refuses it (another secret): the reason names the job. */
	evbuffer_drain(b, len);
	put_preamble(b, NAT_VERSION, NAT_PRE_AUTH);
	put_challenge(b, server_nonce, NAT_NONCE_LEN);
	assert_int_equal(nat_put_error(b, NAT_OP_AUTH, HS_AUTH_ID, RDZV_EAUTH,
	    "wrong job credential"), 0);
	feed_every_way(&cfg, evbuffer_pullup(b, -1), evbuffer_get_length(b),
	    &r);
	assert_int_equal(r.rv, RDZV_EAUTH);
	assert_non_null(strstr(r.why, "credential for job jobA"));
	run_free(&r);

	/* A malformed credential: unused without auth, a failure with. */
	cfg = config(RDZV_CRED_HEADER "\njob jobA\nkey nothex");
	evbuffer_drain(b, evbuffer_get_length(b));
	put_preamble(b, NAT_VERSION, 0);
	feed(&cfg, evbuffer_pullup(b, -1), evbuffer_get_length(b), NULL, 0,
	    &r);
	assert_int_equal(r.rv, 1);
	assert_string_equal(r.why, "");
	run_free(&r);
	evbuffer_drain(b, evbuffer_get_length(b));
	put_preamble(b, NAT_VERSION, NAT_PRE_AUTH);
	put_challenge(b, server_nonce, NAT_NONCE_LEN);
	feed_every_way(&cfg, evbuffer_pullup(b, -1), evbuffer_get_length(b),
	    &r);
	assert_int_equal(r.rv, RDZV_EINVAL);
	assert_non_null(strstr(r.why, "--token_file"));
	assert_non_null(strstr(r.why, "job credential"));
	assert_out_preamble_only(r.out);
	run_free(&r);
	evbuffer_free(b);
}

static void
test_cred_parse(void **state)
{
	struct rdzv_cred	c;
	char			why[256], text[RDZV_CRED_FILE_MAX + 1];
	uint8_t			key[RDZV_CRED_KEY_LEN];
	const char		*bad[] = {
		RDZV_CRED_HEADER,
		RDZV_CRED_HEADER "\njob \nkey 00",
		RDZV_CRED_HEADER "\njob a b\nkey 00",
		RDZV_CRED_HEADER "\nkey 00\njob a",
		RDZV_CRED_HEADER "\njob a\nkey 0011",
	};
	size_t			i;

	/* No header: the operator's secret, whatever else it holds. */
	assert_int_equal(rdzv_cred_parse((const uint8_t *)TOKEN,
	    strlen(TOKEN), &c, why, sizeof why), 0);
	assert_int_equal(rdzv_cred_parse((const uint8_t *)"rdzv job", 8, &c,
	    why, sizeof why), 0);
	cred_text("a/b.c", text, sizeof text, key);
	/* The loader drops one trailing newline; parse what it keeps. */
	assert_int_equal(rdzv_cred_parse((const uint8_t *)text,
	    strlen(text) - 1, &c, why, sizeof why), 1);
	assert_string_equal(c.job, "a/b.c");
	assert_memory_equal(c.key, key, sizeof key);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(rdzv_cred_parse((const uint8_t *)bad[i],
		    strlen(bad[i]), &c, why, sizeof why), RDZV_EINVAL);
	/* One-way and per job: another job's key differs. */
	assert_int_equal(rdzv_cred_derive(TOKEN, strlen(TOKEN), "a/b.d", 5,
	    c.key), 0);
	assert_memory_not_equal(c.key, key, sizeof key);
	assert_int_equal(rdzv_cred_derive(TOKEN, strlen(TOKEN), "a b", 3,
	    c.key), -1);
}

/* The default nonce source, with rdzvd answering what was sent. */
static void
test_auth_real_nonce(void **state)
{
	struct hs_config	 cfg = config(TOKEN);
	struct evbuffer		*in = evbuffer_new(), *out = evbuffer_new();
	struct nat_msg		 m;
	struct nat_rd		 rd;
	struct slice		 cn, mac;
	struct wire_limits	 lim;
	struct hs		 hs;
	uint8_t			 fixed[NAT_NONCE_LEN];
	size_t			 used, need;
	const uint8_t		*o;

	wire_limits_default(&lim);
	cfg.random = NULL;
	assert_int_equal(hs_start(&hs, &cfg, out), 0);
	evbuffer_drain(out, NAT_PREAMBLE_LEN);
	put_preamble(in, NAT_VERSION, NAT_PRE_AUTH);
	put_challenge(in, server_nonce, NAT_NONCE_LEN);
	assert_int_equal(hs_input(&hs, evbuffer_pullup(in, -1),
	    evbuffer_get_length(in), &used, out), 0);
	assert_int_equal(used, evbuffer_get_length(in));
	evbuffer_drain(in, used);
	o = evbuffer_pullup(out, -1);
	assert_true(nat_decode(o, evbuffer_get_length(out), &lim, &m,
	    &need) > 0);
	nat_rd_init(&rd, m.payload);
	assert_int_equal(nat_get_bytes(&rd, &cn), 0);
	assert_int_equal(nat_get_bytes(&rd, &mac), 0);
	our_nonce(fixed);
	assert_memory_not_equal(cn.p, fixed, NAT_NONCE_LEN);
	put_proof(in, TOKEN, cn.p);
	assert_int_equal(hs_input(&hs, evbuffer_pullup(in, -1),
	    evbuffer_get_length(in), &used, out), 1);
	assert_int_equal(used, evbuffer_get_length(in));
	evbuffer_free(in);
	evbuffer_free(out);
}

static void
test_no_token(void **state)
{
	struct hs_config	 cfg = config(NULL);
	struct evbuffer		*b = evbuffer_new();
	struct run		 r;

	put_preamble(b, NAT_VERSION, NAT_PRE_AUTH);
	put_challenge(b, server_nonce, NAT_NONCE_LEN);
	feed_every_way(&cfg, evbuffer_pullup(b, -1), evbuffer_get_length(b),
	    &r);
	assert_int_equal(r.rv, RDZV_EAUTH);
	assert_string_equal(r.why, "rdzvd requires a token: pass "
	    "--token_file or set RDZV_TOKEN_FILE");
	/* Nothing is answered without a token. */
	assert_out_preamble_only(r.out);
	run_free(&r);
	evbuffer_free(b);
}

static void
test_wrong_token(void **state)
{
	struct hs_config	 cfg = config("a-wrong-token");
	struct evbuffer		*b = evbuffer_new();
	struct run		 r;

	put_preamble(b, NAT_VERSION, NAT_PRE_AUTH);
	put_challenge(b, server_nonce, NAT_NONCE_LEN);
	/* What rdzvd answers a wrong MAC, before it hangs up. */
	assert_int_equal(nat_put_error(b, NAT_OP_AUTH, HS_AUTH_ID, RDZV_EAUTH,
	    "wrong token"), 0);
	feed_every_way(&cfg, evbuffer_pullup(b, -1), evbuffer_get_length(b),
	    &r);
	assert_int_equal(r.rv, RDZV_EAUTH);
	assert_string_equal(r.why, "rdzvd refused our token: check "
	    "--token_file against rdzvd's --token-file");
	run_free(&r);
	evbuffer_free(b);
}

/* A server that answers AUTH without holding our token. */
static void
test_server_without_token(void **state)
{
	struct hs_config	 cfg = config(TOKEN);
	struct evbuffer		*b = auth_stream("another-token", 0);
	struct run		 r;

	feed_every_way(&cfg, evbuffer_pullup(b, -1), evbuffer_get_length(b),
	    &r);
	assert_int_equal(r.rv, RDZV_EAUTH);
	assert_non_null(strstr(r.why, "the server at " EP " does not hold "
	    "our token"));
	run_free(&r);
	evbuffer_free(b);
}

/* rdzvd requires TLS: its refusal preamble, then it hangs up. */
static void
test_tls_refusal(void **state)
{
	struct hs_config	 cfg = config(TOKEN);
	struct evbuffer		*b = evbuffer_new();
	struct run		 r;

	put_preamble(b, 0, NAT_PRE_TLS);
	feed_every_way(&cfg, evbuffer_pullup(b, -1), evbuffer_get_length(b),
	    &r);
	assert_int_equal(r.rv, RDZV_ETLS);
	assert_string_equal(r.why, "rdzvd at " EP " requires TLS: give its CA "
	    "certificate with --tls_ca FILE or RDZV_TLS_CA");
	assert_out_preamble_only(r.out);
	run_free(&r);
	assert_prefixes_wait(&cfg, (const uint8_t *)"RDZV\0\2\0\0", 8);
	evbuffer_free(b);
	/* The other driver's option, in the same words. */
	cfg.ca_flag = "--tls-ca";
	feed(&cfg, (const uint8_t *)"RDZV\0\2\0\0", 8, NULL, 0, &r);
	assert_non_null(strstr(r.why, "with --tls-ca FILE"));
	run_free(&r);
}

static void
test_version_refusal(void **state)
{
	struct hs_config	cfg = config(NULL);
	struct run		r;

	/* rdzvd's answer to a version it does not speak. */
	feed(&cfg, (const uint8_t *)"RDZV\0\0\0\0", 8, NULL, 0, &r);
	assert_int_equal(r.rv, RDZV_EVERSION);
	assert_non_null(strstr(r.why, "rdzvd at " EP " does not speak"));
	run_free(&r);
	feed(&cfg, (const uint8_t *)"RDZV\2\0\0\0", 8, NULL, 0, &r);
	assert_int_equal(r.rv, RDZV_EVERSION);
	run_free(&r);
}

static void
test_not_rdzvd(void **state)
{
	static const char *const	 peers[] = {
		"HTTP/1.1 400 Bad Request\r\n\r\n",	/* the HTTP port */
		"\x16\x03\x01",				/* a TLS server */
		"\x01",					/* a TCPStore reply */
		"RDZV\1\x80\0\0",			/* unknown flag */
		"RDZV\1\0\0\1",				/* bytes not zero */
	};
	struct hs_config		 cfg = config(TOKEN);
	struct run			 r;
	size_t				 i, len;

	for (i = 0; i < sizeof peers / sizeof peers[0]; i++) {
		len = strlen(peers[i]);
		if (strncmp(peers[i], "RDZV", 4) == 0)
			len = 8;
		feed_every_way(&cfg, (const uint8_t *)peers[i], len, &r);
		assert_int_equal(r.rv, RDZV_EPROTO);
		assert_string_equal(r.why, EP " is not an rdzvd (bad "
		    "preamble)");
		assert_out_preamble_only(r.out);
		run_free(&r);
	}
	/* The first wrong byte is enough: nothing waits for more. */
	feed(&cfg, (const uint8_t *)"H", 1, NULL, 0, &r);
	assert_int_equal(r.rv, RDZV_EPROTO);
	run_free(&r);
}

/* Frames that do not belong in the challenge-response. */
static void
test_bad_frames(void **state)
{
	struct hs_config	 cfg = config(TOKEN);
	struct evbuffer		*b;
	struct nat_wr		 wr;
	struct run		 r;
	uint8_t			 cn[NAT_NONCE_LEN];
	size_t			 i;
	int			 want;

	our_nonce(cn);
	for (i = 0; i < 9; i++) {
		assert_non_null(b = evbuffer_new());
		put_preamble(b, NAT_VERSION, NAT_PRE_AUTH);
		want = RDZV_EPROTO;
		switch (i) {
		case 0:		/* a nonce one byte short */
			put_challenge(b, server_nonce, NAT_NONCE_LEN - 1);
			break;
		case 1:		/* a reply where the challenge belongs */
			nat_frame_begin(&wr, b, NAT_OP_AUTH, NAT_F_REPLY, 1);
			nat_put_bytes(&wr, cn, sizeof cn);
			nat_frame_end(&wr);
			break;
		case 2:		/* a frame longer than any handshake's */
			evbuffer_add(b, "\0\0\x10\0", 4);
			break;
		case 3:		/* a push where the proof belongs */
			put_challenge(b, server_nonce, NAT_NONCE_LEN);
			put_challenge(b, server_nonce, NAT_NONCE_LEN);
			break;
		case 4:		/* a proof for another request */
			put_challenge(b, server_nonce, NAT_NONCE_LEN);
			nat_frame_begin(&wr, b, NAT_OP_AUTH, NAT_F_REPLY, 7);
			nat_put_bytes(&wr, cn, sizeof cn);
			nat_frame_end(&wr);
			break;
		case 5:		/* a proof of the wrong length */
			put_challenge(b, server_nonce, NAT_NONCE_LEN);
			nat_frame_begin(&wr, b, NAT_OP_AUTH, NAT_F_REPLY,
			    HS_AUTH_ID);
			nat_put_bytes(&wr, cn, 16);
			nat_frame_end(&wr);
			break;
		case 6:		/* an error reply without its message */
			put_challenge(b, server_nonce, NAT_NONCE_LEN);
			nat_frame_begin(&wr, b, NAT_OP_AUTH,
			    NAT_F_REPLY | NAT_F_ERROR, HS_AUTH_ID);
			nat_put_i64(&wr, RDZV_EAUTH);
			nat_frame_end(&wr);
			break;
		case 7:		/* a frame the decoder refuses (length 7) */
			evbuffer_add(b, "\x07\0\0\0\x22\0\x04\0\0\0\0", 11);
			break;
		case 8:		/* another refusal: its code and words */
			put_challenge(b, server_nonce, NAT_NONCE_LEN);
			nat_put_error(b, NAT_OP_AUTH, HS_AUTH_ID, RDZV_EINVAL,
			    "no\ntoken here");
			want = RDZV_EINVAL;
			break;
		}
		feed_every_way(&cfg, evbuffer_pullup(b, -1),
		    evbuffer_get_length(b), &r);
		assert_int_equal(r.rv, want);
		assert_true(r.why[0] != '\0');
		if (i == 8)
			assert_non_null(strstr(r.why, "no\\x0atoken here"));
		run_free(&r);
		evbuffer_free(b);
	}
}

/* No random bytes: a local failure, said so, and nothing sent. */
static void
test_no_random(void **state)
{
	struct hs_config	 cfg = config(TOKEN);
	struct evbuffer		*b = auth_stream(TOKEN, 0);
	struct run		 r;

	cfg.random = failing_random;
	feed(&cfg, evbuffer_pullup(b, -1), evbuffer_get_length(b), NULL, 0,
	    &r);
	assert_int_equal(r.rv, RDZV_EIO);
	assert_out_preamble_only(r.out);
	run_free(&r);
	evbuffer_free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_open),
		cmocka_unit_test(test_auth_open),
		cmocka_unit_test(test_auth_real_nonce),
		cmocka_unit_test(test_no_token),
		cmocka_unit_test(test_wrong_token),
		cmocka_unit_test(test_server_without_token),
		cmocka_unit_test(test_tls_refusal),
		cmocka_unit_test(test_version_refusal),
		cmocka_unit_test(test_not_rdzvd),
		cmocka_unit_test(test_bad_frames),
		cmocka_unit_test(test_no_random),
		cmocka_unit_test(test_job_credential),
		cmocka_unit_test(test_cred_parse),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
