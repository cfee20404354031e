/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_native.c: libFuzzer target for the native protocol codec.  Reads a
 * preamble, then frames back to back as rdzvd would (consume, continue).
 * Each frame's payload is read through its op's field list, as a request,
 * a reply or an error reply according to its flags, and then field by
 * field until the reader refuses; a payload read whole is written again
 * with the frame writer, behind a varying amount of queued data so that
 * the patched length lands across evbuffer chains, and must come out as
 * the very bytes it came from; so must error replies through
 * nat_put_error() and preambles through nat_preamble_put_flags().  The
 * rendezvous messages also go through their own decoders and encoders
 * (JOIN, its reply, FAILURE, ROUND).  Any broken invariant aborts.
 */
#include "config.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "rdzv_err.h"
#include "wire.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Small limits, so that frames at the limit stay small. */
static const struct wire_limits fuzz_lim = { 64, 256, 8, 16 };

/*
 * Field lists: b bytes, i integer, n a count then that many keys, N a
 * count then that many key/value pairs, * bytes until the end, ? what
 * follows is optional (the payload may end here).
 */
static const char *fuzz_req[NAT_OP_MAX + 1] = {
	[NAT_OP_PING] = "b", [NAT_OP_SET] = "bbb", [NAT_OP_GET] = "bb",
	[NAT_OP_ADD] = "bbi", [NAT_OP_CAS] = "bbbb", [NAT_OP_WAIT] = "bin",
	[NAT_OP_CHECK] = "bn", [NAT_OP_DELETE] = "bb", [NAT_OP_NUM_KEYS] = "b",
	[NAT_OP_APPEND] = "bbb", [NAT_OP_MULTI_GET] = "bn",
	[NAT_OP_MULTI_SET] = "bN", [NAT_OP_QUEUE_PUSH] = "bbb",
	[NAT_OP_QUEUE_POP] = "bbi", [NAT_OP_QUEUE_LEN] = "bb",
	[NAT_OP_LIST_KEYS] = "b", [NAT_OP_BARRIER] = "bbii",
	[NAT_OP_CANCEL] = "i", [NAT_OP_WATCH] = "bb",
	[NAT_OP_WATCH_EVENT] = "bbibb",
	[NAT_OP_JOIN] = "bbbbiiiiiii?i?ii?iii?i",
	[NAT_OP_HEARTBEAT] = "bi?i", [NAT_OP_LEAVE] = "bi",
	[NAT_OP_FAILURE] = "biiiiiib?i", [NAT_OP_SUCCEEDED] = "bii?i",
	[NAT_OP_ROUND] = "biiiiiiiiibib?iii", [NAT_OP_JOB_STATUS] = "b",
	[NAT_OP_ADMIN_STATUS] = "", [NAT_OP_ADMIN_JOBS] = "",
	[NAT_OP_ADMIN_JOB] = "b", [NAT_OP_ADMIN_EVENTS] = "bii",
	[NAT_OP_ADMIN_CLOSE] = "bb", [NAT_OP_ADMIN_EVICT] = "bi?i",
	[NAT_OP_AUTH_CHALLENGE] = "b", [NAT_OP_AUTH] = "bb",
	[NAT_OP_READY] = "biii",
	[NAT_OP_STRAGGLER] = "biiib", [NAT_OP_DRAIN] = "biiib",
	[NAT_OP_ADMIN_FORGET] = "b",
};
static const char *fuzz_rep[NAT_OP_MAX + 1] = {
	[NAT_OP_PING] = "b", [NAT_OP_GET] = "b", [NAT_OP_ADD] = "i",
	[NAT_OP_CAS] = "b", [NAT_OP_CHECK] = "i", [NAT_OP_DELETE] = "i",
	[NAT_OP_NUM_KEYS] = "i", [NAT_OP_MULTI_GET] = "*",
	[NAT_OP_QUEUE_POP] = "b", [NAT_OP_QUEUE_LEN] = "i",
	[NAT_OP_LIST_KEYS] = "n", [NAT_OP_JOIN] = "iii",
	[NAT_OP_HEARTBEAT] = "i", [NAT_OP_JOB_STATUS] = "b",
	[NAT_OP_ADMIN_STATUS] = "b", [NAT_OP_ADMIN_JOBS] = "b",
	[NAT_OP_ADMIN_JOB] = "b", [NAT_OP_ADMIN_EVENTS] = "b",
	[NAT_OP_AUTH] = "b", [NAT_OP_ADMIN_EVICT] = "?i",
};

static struct evbuffer	*fuzz_out;

/* Reads payload by spec, as a server would; returns 0 or RDZV_EPROTO. */
static int
fuzz_spec(const char *spec, struct slice payload)
{
	struct nat_rd	rd;
	struct slice	s;
	int64_t		v, n, i;
	int		r;

	nat_rd_init(&rd, payload);
	for (; *spec != '\0'; spec++) {
		switch (*spec) {
		case 'b':
			if ((r = nat_get_bytes(&rd, &s)) != 0)
				return (r);
			break;
		case 'i':
			if ((r = nat_get_i64(&rd, &v)) != 0)
				return (r);
			break;
		case 'n':
		case 'N':
			if ((r = nat_get_i64(&rd, &n)) != 0)
				return (r);
			if (n < 0)
				return (RDZV_EPROTO);
			/* Never sized from n: each entry must be there. */
			for (i = 0; i < n; i++) {
				if ((r = nat_get_bytes(&rd, &s)) != 0)
					return (r);
				if (*spec == 'N' &&
				    (r = nat_get_bytes(&rd, &s)) != 0)
					return (r);
			}
			break;
		case '*':
			while (nat_get_bytes(&rd, &s) == 0)
				;
			break;
		case '?':
			if (rd.left == 0)
				return (0);
			break;
		default:
			abort();
		}
		if ((size_t)(rd.p - payload.p) + rd.left != payload.len)
			abort();
	}
	return (nat_rd_end(&rd));
}

/*
 * Reads any fields until the reader refuses; when that is the whole
 * payload, writes the frame again behind queued data (by reference, of a
 * size drawn from the frame, past 64 KiB for some) and compares.
 */
static void
fuzz_generic(const struct nat_msg *msg, const uint8_t *frame, size_t flen)
{
	struct nat_rd		 rd, before;
	struct nat_wr		 w;
	struct evbuffer_ptr	 ptr;
	struct slice		 s;
	int64_t			 v;
	size_t			 pad;
	static uint8_t		 junk[70000], copy[8192];

	pad = (msg->id * 131u + flen) % 5000;
	if (msg->id & 1)
		pad += 65000;
	evbuffer_drain(fuzz_out, evbuffer_get_length(fuzz_out));
	if (pad != 0 &&
	    evbuffer_add_reference(fuzz_out, junk, pad, NULL, NULL) != 0)
		abort();
	if (nat_frame_begin(&w, fuzz_out, msg->op, msg->flags, msg->id) != 0)
		abort();

	nat_rd_init(&rd, msg->payload);
	for (;;) {
		before = rd;
		if (nat_get_i64(&rd, &v) == 0) {
			if (nat_put_i64(&w, v) != 0)
				abort();
			continue;
		}
		if (rd.p != before.p || rd.left != before.left)
			abort();
		if (nat_get_bytes(&rd, &s) == 0) {
			if (s.len != 0 && (s.p < msg->payload.p ||
			    s.p + s.len > msg->payload.p + msg->payload.len))
				abort();
			if (nat_put_bytes(&w, s.p, s.len) != 0)
				abort();
			continue;
		}
		if (rd.p != before.p || rd.left != before.left)
			abort();
		break;
	}
	if (nat_rd_end(&rd) != 0) {
		if (rd.left == 0)
			abort();
		/* The writer must be ended all the same. */
		(void)nat_frame_end(&w);
		return;
	}
	if (nat_frame_end(&w) != 0)
		abort();
	if (evbuffer_get_length(fuzz_out) != pad + flen || flen > sizeof(copy))
		abort();
	if (evbuffer_ptr_set(fuzz_out, &ptr, pad, EVBUFFER_PTR_SET) != 0 ||
	    evbuffer_copyout_from(fuzz_out, &ptr, copy, flen) != (ssize_t)flen)
		abort();
	if (memcmp(copy, frame, flen) != 0)
		abort();
}

/*
 * An error reply (i code, b message) whose message is a C string must come
 * out of nat_put_error() as it came in.
 */
static void
fuzz_error(const struct nat_msg *msg, const uint8_t *frame, size_t flen)
{
	struct nat_rd		 rd;
	struct slice		 s;
	int64_t			 code;
	static char		 text[8192];
	static uint8_t		 copy[8192];

	nat_rd_init(&rd, msg->payload);
	if (nat_get_i64(&rd, &code) != 0 || nat_get_bytes(&rd, &s) != 0 ||
	    nat_rd_end(&rd) != 0 || code < INT_MIN || code > INT_MAX ||
	    s.len >= sizeof(text) || (s.len != 0 && memchr(s.p, 0, s.len)))
		return;
	if (s.len != 0)
		memcpy(text, s.p, s.len);
	text[s.len] = '\0';
	evbuffer_drain(fuzz_out, evbuffer_get_length(fuzz_out));
	if (nat_put_error(fuzz_out, msg->op, msg->id, (int)code, text) != 0 ||
	    evbuffer_get_length(fuzz_out) != flen ||
	    evbuffer_copyout(fuzz_out, copy, flen) != (ssize_t)flen ||
	    memcmp(copy, frame, flen) != 0)
		abort();
}

/* out must hold exactly the flen bytes of frame. */
static void
fuzz_same(const uint8_t *frame, size_t flen)
{
	static uint8_t	copy[8192];

	if (flen > sizeof(copy))
		return;
	if (evbuffer_get_length(fuzz_out) != flen ||
	    evbuffer_copyout(fuzz_out, copy, flen) != (ssize_t)flen ||
	    memcmp(copy, frame, flen) != 0)
		abort();
}

/*
 * The rendezvous messages' own decoders (JOIN, its reply, FAILURE, the
 * ROUND push, READY, the STRAGGLER push) must accept exactly what their field list reads,
 * and a message they accept must come out of its encoder as it came in.
 * The exceptions: a JOIN's trailing fields in a form the encoder does
 * not write (a group of trailing fields all negative where no later
 * group follows: they decode like absent ones), and
 * the values the decoders refuse in well-formed fields (a FAILURE's
 * repair other than 1, a ROUND's kind other than shrink or grow).
 */
static void
fuzz_message(const struct nat_msg *msg, const uint8_t *frame, size_t flen,
    int spec_rc)
{
	struct nat_join		j;
	struct nat_joined	jd;
	struct nat_failure	f;
	struct nat_round	r;
	struct nat_ready	rd;
	struct nat_straggler	sg;
	size_t			base;
	int			strag;
	int			rc, put;

	evbuffer_drain(fuzz_out, evbuffer_get_length(fuzz_out));
	if (msg->op == NAT_OP_JOIN && msg->flags == 0) {
		rc = nat_join_decode(msg->payload, &j);
		put = rc == 0 ? nat_join_put(fuzz_out, msg->id, &j) : 0;
		base = j.job.len + j.instance.len + j.host.len + j.addr.len +
		    4 * 5 + 7 * 9 + NAT_HDR_LEN;
		strag = j.straggler_ratio_pm >= 0 ||
		    j.straggler_window_ms >= 0 || j.straggler_action >= 0 ||
		    j.replicas > 0;
		if (rc != 0 && spec_rc == 0)
			return;		/* replicas present, not >= 1 */
		if (rc == 0 && (j.rank < -1 || flen != base + (j.rank >= 0 ||
		    j.max_repairs >= 0 || j.repair_timeout_ms >= 0 || strag ?
		    9 : 0) + (j.max_repairs >= 0 || j.repair_timeout_ms >= 0 ||
		    strag ? 18 : 0) + (strag ? 27 : 0) +
		    (j.replicas > 0 ? 9 : 0)))
			return;		/* not the encoder's form */
	} else if (msg->op == NAT_OP_JOIN && msg->flags == NAT_F_REPLY) {
		rc = nat_joined_decode(msg->payload, &jd);
		spec_rc = fuzz_spec("iii", msg->payload);
		put = rc == 0 ? nat_joined_put(fuzz_out, msg->id, &jd) : 0;
	} else if (msg->op == NAT_OP_FAILURE && msg->flags == 0) {
		rc = nat_failure_decode(msg->payload, &f);
		put = rc == 0 ? nat_failure_put(fuzz_out, msg->id, &f) : 0;
		if (rc != 0 && spec_rc == 0)
			return;		/* repair present, not 1 */
	} else if (msg->op == NAT_OP_ROUND && msg->flags == NAT_F_PUSH &&
	    msg->id == 0) {
		rc = nat_round_decode(msg->payload, &r);
		put = rc == 0 ? nat_round_put(fuzz_out, &r) : 0;
		if (rc != 0 && spec_rc == 0)
			return;		/* kind present, not a repair's */
	} else if (msg->op == NAT_OP_READY && msg->flags == 0) {
		rc = nat_ready_decode(msg->payload, &rd);
		put = rc == 0 ? nat_ready_put(fuzz_out, msg->id, &rd) : 0;
	} else if ((msg->op == NAT_OP_STRAGGLER || msg->op == NAT_OP_DRAIN) &&
	    msg->flags == NAT_F_PUSH && msg->id == 0) {
		rc = nat_straggler_decode(msg->payload, &sg);
		put = rc == 0 ? nat_straggler_put(fuzz_out, msg->op, &sg) : 0;
	} else
		return;
	if ((rc == 0) != (spec_rc == 0) || put != 0)
		abort();
	if (rc == 0)
		fuzz_same(frame, flen);
}

static void
fuzz_frame(const struct nat_msg *msg, const uint8_t *frame, size_t flen)
{
	const char	*spec;
	int		 rc;

	if (msg->op < 1 || msg->op > NAT_OP_MAX)
		abort();
	if (flen != NAT_HDR_LEN + msg->payload.len ||
	    msg->payload.p != frame + NAT_HDR_LEN)
		abort();
	if ((msg->flags & NAT_F_ERROR) != 0)
		spec = "ib";
	else if ((msg->flags & NAT_F_REPLY) != 0)
		spec = fuzz_rep[msg->op] != NULL ? fuzz_rep[msg->op] : "";
	else
		spec = fuzz_req[msg->op];
	if (spec == NULL)
		abort();	/* a new op needs its field list here */
	rc = fuzz_spec(spec, msg->payload);
	fuzz_message(msg, frame, flen, rc);
	fuzz_generic(msg, frame, flen);
	if (msg->flags == (NAT_F_REPLY | NAT_F_ERROR))
		fuzz_error(msg, frame, flen);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nat_msg	msg;
	size_t		pos, left, need, fmax;
	uint8_t		ver;
	int		rc;

	if (fuzz_out == NULL && (fuzz_out = evbuffer_new()) == NULL)
		abort();
	fmax = nat_frame_max(&fuzz_lim);

	/* A preamble if there is one; frames from the start if not. */
	need = 0;
	rc = nat_preamble_decode(data, size, &ver, &need);
	if (rc == NAT_PREAMBLE_LEN) {
		if (ver != NAT_VERSION ||
		    (data[5] & ~(NAT_PRE_AUTH | NAT_PRE_TLS)) != 0 ||
		    data[6] != 0 || data[7] != 0)
			abort();
		/* And it encodes back to the same bytes. */
		evbuffer_drain(fuzz_out, evbuffer_get_length(fuzz_out));
		if (nat_preamble_put_flags(fuzz_out, ver, data[5]) != 0 ||
		    evbuffer_get_length(fuzz_out) != NAT_PREAMBLE_LEN ||
		    memcmp(evbuffer_pullup(fuzz_out, -1), data,
		    NAT_PREAMBLE_LEN) != 0)
			abort();
		pos = NAT_PREAMBLE_LEN;
	} else if (rc == RDZV_EVERSION) {
		if (size < NAT_PREAMBLE_LEN || ver != data[4])
			abort();
		pos = NAT_PREAMBLE_LEN;
	} else if (rc == 0) {
		if (need != NAT_PREAMBLE_LEN || size >= NAT_PREAMBLE_LEN)
			abort();
		pos = 0;
	} else if (rc == RDZV_EPROTO) {
		pos = 0;
	} else
		abort();

	for (; pos < size; pos += rc) {
		left = size - pos;
		need = 0;
		rc = nat_decode(data + pos, left, &fuzz_lim, &msg, &need);
		if (rc < 0) {
			if (rc != RDZV_EPROTO && rc != RDZV_ETOOBIG)
				abort();
			return (0);
		}
		if (rc == 0) {
			if (need <= left || need > fmax + 4)
				abort();
			return (0);
		}
		if ((size_t)rc > left || (size_t)rc > fmax + 4)
			abort();
		fuzz_frame(&msg, data + pos, rc);
		/* One byte short: wait for exactly this frame. */
		need = 0;
		if (nat_decode(data + pos, rc - 1, &fuzz_lim, &msg, &need) != 0 ||
		    need != (size_t)rc)
			abort();
	}
	return (0);
}
