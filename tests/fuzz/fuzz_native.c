/*
 * fuzz_native.c: libFuzzer target for the native protocol codec.  Reads a
 * preamble, then frames back to back as rdzvd would (consume, continue).
 * Each frame's payload is read through its op's field list, as a request,
 * a reply or an error reply according to its flags, and then field by
 * field until the reader refuses; a payload read whole is written again
 * with the frame writer, behind a varying amount of queued data so that
 * the patched length lands across evbuffer chains, and must come out as
 * the very bytes it came from.  Any broken invariant aborts.
 */
#include "config.h"

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
 * count then that many key/value pairs, * bytes until the end.
 */
static const char *fuzz_req[NAT_OP_MAX + 1] = {
	NULL, "b", "bbb", "bb", "bbi", "bbbb", "bin", "bn", "bb", "b", "bbb",
	"bn", "bN", "bbb", "bbi", "bb", "b", "bbii", "i", "bb", "bbibb",
};
static const char *fuzz_rep[NAT_OP_MAX + 1] = {
	NULL, "b", "", "b", "i", "b", "", "i", "i", "i", "", "*", "", "",
	"b", "i", "n", "", "", "", "",
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
 * payload, writes the frame again and compares.
 */
static void
fuzz_generic(const struct nat_msg *msg, const uint8_t *frame, size_t flen)
{
	struct nat_rd	 rd, before;
	struct nat_wr	 w;
	struct slice	 s;
	int64_t		 v;
	size_t		 pad, total;
	uint8_t		*p;
	static uint8_t	 junk[5000];

	pad = (msg->id * 131u + flen) % sizeof(junk);
	evbuffer_drain(fuzz_out, evbuffer_get_length(fuzz_out));
	if (pad != 0 && evbuffer_add(fuzz_out, junk, pad) != 0)
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
		return;
	}
	if (nat_frame_end(&w) != 0)
		abort();
	total = evbuffer_get_length(fuzz_out);
	if (total != pad + flen)
		abort();
	p = evbuffer_pullup(fuzz_out, -1);
	if (memcmp(p + pad, frame, flen) != 0)
		abort();
}

static void
fuzz_frame(const struct nat_msg *msg, const uint8_t *frame, size_t flen)
{
	const char	*spec;

	if (msg->op < 1 || msg->op > NAT_OP_MAX)
		abort();
	if (flen != NAT_HDR_LEN + msg->payload.len ||
	    msg->payload.p != frame + NAT_HDR_LEN)
		abort();
	if ((msg->flags & NAT_F_ERROR) != 0)
		spec = "ib";
	else if ((msg->flags & NAT_F_REPLY) != 0)
		spec = fuzz_rep[msg->op];
	else
		spec = fuzz_req[msg->op];
	(void)fuzz_spec(spec, msg->payload);
	fuzz_generic(msg, frame, flen);
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
		if (ver != NAT_VERSION)
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
