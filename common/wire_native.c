/*
 * wire_native.c: the native rdzv protocol codec (common/PROTOCOL.md): the
 * preamble, frame headers, the typed-field payload reader and the frame
 * writer.  All integers are little-endian whatever the host.
 */
#include "config.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include <event2/buffer.h>

#include "rdzv_err.h"
#include "wire.h"

/*
 * Every frame body must fit the decoder's int return, with its 4-byte
 * length field in front.
 */
#define NAT_BODY_CAP	((size_t)INT_MAX - 4)

static uint16_t
nat_le16(const uint8_t *p)
{
	return ((uint16_t)(p[0] | (p[1] << 8)));
}

static uint32_t
nat_le32(const uint8_t *p)
{
	return ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
	    (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static uint64_t
nat_le64(const uint8_t *p)
{
	return ((uint64_t)nat_le32(p) | (uint64_t)nat_le32(p + 4) << 32);
}

static void
nat_put16(uint8_t *p, uint16_t v)
{
	p[0] = v;
	p[1] = v >> 8;
}

static void
nat_put32(uint8_t *p, uint32_t v)
{
	p[0] = v;
	p[1] = v >> 8;
	p[2] = v >> 16;
	p[3] = v >> 24;
}

static void
nat_put64(uint8_t *p, uint64_t v)
{
	nat_put32(p, (uint32_t)v);
	nat_put32(p + 4, (uint32_t)(v >> 32));
}

static size_t
nat_sat_add(size_t a, size_t b)
{
	return (a > SIZE_MAX - b ? SIZE_MAX : a + b);
}

/*
 * Returns the largest frame body (the u32 len field) the limits allow.
 *
 * The bound is the largest fixed-shape frame, a WATCH_EVENT push (b ns,
 * b key, i kind, b old, b new), which is also just above the largest
 * request, COMPARE_SET: op/flags/id, four byte fields and one integer,
 * with ns_max + key_max + 2 * value_max bytes of data.  List frames
 * (WAIT, CHECK, MULTI_GET, MULTI_SET, their replies and LIST_KEYS) must
 * fit their entries into the same budget rather than keys_max times the
 * largest entry, which would be about 1 TiB for MULTI_SET at the default
 * limits: a frame is buffered whole before it is decoded, so this figure
 * is what one connection can make rdzvd hold.  With the defaults it is
 * 16 MiB + 9 KiB + 37, room for a WAIT on all 131072 keys of up to about
 * 120 bytes each.  A sender with more must split its request, and a
 * server must answer a MULTI_GET or LIST_KEYS whose reply would not fit
 * with RDZV_ETOOBIG.  Capped so that a whole frame fits in an int.
 */
size_t
nat_frame_max(const struct wire_limits *lim)
{
	size_t	m;

	m = NAT_HDR_LEN - 4 + 4 * 5 + 9;
	m = nat_sat_add(m, lim->ns_max);
	m = nat_sat_add(m, lim->key_max);
	m = nat_sat_add(m, lim->value_max);
	m = nat_sat_add(m, lim->value_max);
	return (m > NAT_BODY_CAP ? NAT_BODY_CAP : m);
}

/*
 * Checks a preamble (contract in wire.h).  The magic is checked on the
 * bytes present, so a wrong one is refused without waiting for all 8.
 * Version 0 is what a server sends to refuse, so it is never accepted.
 */
int
nat_preamble_decode(const uint8_t *buf, size_t len, uint8_t *version,
    size_t *need)
{
	size_t	n;

	n = len < 4 ? len : 4;
	if (memcmp(buf, NAT_MAGIC, n) != 0)
		return (RDZV_EPROTO);
	if (len < NAT_PREAMBLE_LEN) {
		*need = NAT_PREAMBLE_LEN;
		return (0);
	}
	if (buf[5] != 0 || buf[6] != 0 || buf[7] != 0)
		return (RDZV_EPROTO);
	*version = buf[4];
	if (buf[4] == 0 || buf[4] > NAT_VERSION)
		return (RDZV_EVERSION);
	return (NAT_PREAMBLE_LEN);
}

/* Appends a preamble carrying version.  Returns 0 or -1. */
int
nat_preamble_put(struct evbuffer *out, uint8_t version)
{
	uint8_t	p[NAT_PREAMBLE_LEN];

	memcpy(p, NAT_MAGIC, 4);
	p[4] = version;
	p[5] = p[6] = p[7] = 0;
	return (evbuffer_add(out, p, sizeof(p)) == 0 ? 0 : -1);
}

/* Returns 0 when a flags word makes sense, else RDZV_EPROTO. */
static int
nat_flags_ok(uint16_t f)
{
	if (f & ~(NAT_F_REPLY | NAT_F_ERROR | NAT_F_PUSH))
		return (RDZV_EPROTO);
	if ((f & NAT_F_ERROR) && !(f & NAT_F_REPLY))
		return (RDZV_EPROTO);
	if ((f & NAT_F_REPLY) && (f & NAT_F_PUSH))
		return (RDZV_EPROTO);
	return (0);
}

/*
 * Decodes one frame (contract in wire.h).  Each header field is checked
 * as soon as its bytes are present: the length (at least the 8 header
 * bytes after it, at most nat_frame_max(): RDZV_ETOOBIG), the op (1 to
 * NAT_OP_MAX) and the flags (known bits; ERROR only with REPLY; never
 * REPLY with PUSH), so a bad frame is refused before its body arrives.
 * The payload is not looked at.
 */
int
nat_decode(const uint8_t *buf, size_t len, const struct wire_limits *lim,
    struct nat_msg *msg, size_t *need)
{
	uint32_t	flen;
	uint16_t	op;
	int		r;

	if (len < 4) {
		*need = NAT_HDR_LEN;
		return (0);
	}
	flen = nat_le32(buf);
	if (flen < NAT_HDR_LEN - 4)
		return (RDZV_EPROTO);
	if (flen > nat_frame_max(lim))
		return (RDZV_ETOOBIG);
	if (len >= 6) {
		op = nat_le16(buf + 4);
		if (op < 1 || op > NAT_OP_MAX)
			return (RDZV_EPROTO);
	}
	if (len >= 8 && (r = nat_flags_ok(nat_le16(buf + 6))) != 0)
		return (r);
	if (len - 4 < flen) {
		*need = (size_t)flen + 4;
		return (0);
	}
	msg->op = nat_le16(buf + 4);
	msg->flags = nat_le16(buf + 6);
	msg->id = nat_le32(buf + 8);
	msg->payload.p = buf + NAT_HDR_LEN;
	msg->payload.len = flen - (NAT_HDR_LEN - 4);
	return ((int)flen + 4);
}

/* Starts reading the typed fields of payload. */
void
nat_rd_init(struct nat_rd *rd, struct slice payload)
{
	rd->p = payload.p;
	rd->left = payload.len;
}

/*
 * Reads an 'i' field.  Returns 0, or RDZV_EPROTO (wrong tag, short) and
 * leaves the reader where it was.
 */
int
nat_get_i64(struct nat_rd *rd, int64_t *v)
{
	if (rd->left < 9 || rd->p[0] != NAT_T_I64)
		return (RDZV_EPROTO);
	*v = (int64_t)nat_le64(rd->p + 1);
	rd->p += 9;
	rd->left -= 9;
	return (0);
}

/*
 * Reads a 'b' field; s points into the payload.  Returns 0, or
 * RDZV_EPROTO (wrong tag, length past the payload) and leaves the reader
 * where it was.
 */
int
nat_get_bytes(struct nat_rd *rd, struct slice *s)
{
	uint32_t	n;

	if (rd->left < 5 || rd->p[0] != NAT_T_BYTES)
		return (RDZV_EPROTO);
	n = nat_le32(rd->p + 1);
	if (rd->left - 5 < n)
		return (RDZV_EPROTO);
	s->p = rd->p + 5;
	s->len = n;
	rd->p += 5 + (size_t)n;
	rd->left -= 5 + (size_t)n;
	return (0);
}

/* Returns 0 when the whole payload was read, else RDZV_EPROTO. */
int
nat_rd_end(const struct nat_rd *rd)
{
	return (rd->left == 0 ? 0 : RDZV_EPROTO);
}

/*
 * Appends a frame header with a zero length and remembers where it starts.
 * Nothing else may be appended to out until nat_frame_end().  On failure
 * out may hold part of a frame: the connection is beyond saving.
 */
int
nat_frame_begin(struct nat_wr *w, struct evbuffer *out, uint16_t op,
    uint16_t flags, uint32_t id)
{
	uint8_t	h[NAT_HDR_LEN];

	w->out = out;
	w->start = evbuffer_get_length(out);
	nat_put32(h, 0);
	nat_put16(h + 4, op);
	nat_put16(h + 6, flags);
	nat_put32(h + 8, id);
	return (evbuffer_add(out, h, sizeof(h)) == 0 ? 0 : -1);
}

/* Appends an 'i' field. */
int
nat_put_i64(struct nat_wr *w, int64_t v)
{
	uint8_t	f[9];

	f[0] = NAT_T_I64;
	nat_put64(f + 1, (uint64_t)v);
	return (evbuffer_add(w->out, f, sizeof(f)) == 0 ? 0 : -1);
}

/*
 * Appends a 'b' field.  Short data is copied with its tag in one call,
 * as most fields are keys and small values.  More than UINT32_MAX bytes
 * cannot be encoded: -1.
 */
int
nat_put_bytes(struct nat_wr *w, const void *p, size_t n)
{
	uint8_t	f[5 + 123];

	if (n > UINT32_MAX)
		return (-1);
	f[0] = NAT_T_BYTES;
	nat_put32(f + 1, (uint32_t)n);
	if (n <= sizeof(f) - 5) {
		if (n != 0)
			memcpy(f + 5, p, n);
		return (evbuffer_add(w->out, f, 5 + n) == 0 ? 0 : -1);
	}
	if (evbuffer_add(w->out, f, 5) != 0 || evbuffer_add(w->out, p, n) != 0)
		return (-1);
	return (0);
}

/*
 * Patches the frame's length field.  The field may straddle evbuffer
 * chains, so it is found with evbuffer_ptr_set() and written through the
 * extents evbuffer_peek() returns; the header came from evbuffer_add(), so
 * those chains are the buffer's own, writable memory.  A body over
 * UINT32_MAX cannot be framed: -1.
 */
int
nat_frame_end(struct nat_wr *w)
{
	struct evbuffer_ptr	 pos;
	struct evbuffer_iovec	 v[4];
	uint8_t			 lenb[4];
	size_t			 total, body, i, k;
	uint8_t			*q;
	int			 n, j;

	total = evbuffer_get_length(w->out);
	if (total < w->start || total - w->start < NAT_HDR_LEN)
		return (-1);
	body = total - w->start - 4;
	if (body > UINT32_MAX)
		return (-1);
	nat_put32(lenb, (uint32_t)body);
	if (evbuffer_ptr_set(w->out, &pos, w->start, EVBUFFER_PTR_SET) != 0)
		return (-1);
	n = evbuffer_peek(w->out, sizeof(lenb), &pos, v, 4);
	if (n < 1 || n > 4)
		return (-1);
	k = 0;
	for (j = 0; j < n && k < sizeof(lenb); j++) {
		q = v[j].iov_base;
		for (i = 0; i < v[j].iov_len && k < sizeof(lenb); i++)
			q[i] = lenb[k++];
	}
	return (k == sizeof(lenb) ? 0 : -1);
}

/*
 * Appends a whole error reply to request id of op: flags REPLY|ERROR,
 * payload (i code, b message).  A NULL message sends rdzv_strerror(code).
 */
int
nat_put_error(struct evbuffer *out, uint16_t op, uint32_t id, int code,
    const char *message)
{
	struct nat_wr	w;

	if (message == NULL)
		message = rdzv_strerror(code);
	if (nat_frame_begin(&w, out, op, NAT_F_REPLY | NAT_F_ERROR, id) != 0 ||
	    nat_put_i64(&w, code) != 0 ||
	    nat_put_bytes(&w, message, strlen(message)) != 0 ||
	    nat_frame_end(&w) != 0)
		return (-1);
	return (0);
}
