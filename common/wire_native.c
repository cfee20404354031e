/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire_native.c: the native rdzv protocol codec (common/PROTOCOL.md): the
 * preamble, frame headers, the typed-field payload reader and the frame
 * writer, and the rendezvous messages (JOIN and its reply, FAILURE, the
 * ROUND push) encoded and decoded field by field in one place for rdzvd,
 * the agent and the tests.  All integers are little-endian whatever the
 * host.  (The
 * authentication MACs declared beside them in wire.h are in auth.c, which
 * links OpenSSL.)
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
 * The bound is the largest store frame of fixed shape, a WATCH_EVENT push
 * (b ns, b key, i kind, b old, b new), just above COMPARE_SET: op, flags
 * and id, four byte fields and one integer around ns_max + key_max +
 * 2 * value_max bytes of data.  The rendezvous, operator and
 * authentication ops carry far less.  List frames (WAIT, CHECK,
 * MULTI_GET, MULTI_SET, their replies and LIST_KEYS) must fit their
 * entries into the same budget rather than keys_max times the largest
 * entry, which would be about 1 TiB for MULTI_SET at the default limits:
 * a frame is buffered whole before it is decoded, so this figure is what
 * one connection can make rdzvd hold.  With the defaults it is 16 MiB +
 * 9 KiB + 37, room for a WAIT on all 131072 keys of up to about 120 bytes
 * each.  A sender with more must split its request, and a server must
 * answer a MULTI_GET or LIST_KEYS whose reply would not fit with
 * RDZV_ETOOBIG.  Capped so that a whole frame fits in an int.
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
 * Byte 5 may carry NAT_PRE_* flags (a server's preamble; the caller reads
 * them from buf[5]); unknown flags and non-zero bytes 6 and 7 are
 * malformed.  Version 0 is what a server sends to refuse, so it is never
 * accepted.
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
	if ((buf[5] & ~(NAT_PRE_AUTH | NAT_PRE_TLS)) != 0 || buf[6] != 0 || buf[7] != 0)
		return (RDZV_EPROTO);
	*version = buf[4];
	if (buf[4] == 0 || buf[4] > NAT_VERSION)
		return (RDZV_EVERSION);
	return (NAT_PREAMBLE_LEN);
}

/* Appends a preamble carrying version and no flags.  Returns 0 or -1. */
int
nat_preamble_put(struct evbuffer *out, uint8_t version)
{
	return (nat_preamble_put_flags(out, version, 0));
}

/* Appends a server's preamble: version, NAT_PRE_* flags.  0 or -1. */
int
nat_preamble_put_flags(struct evbuffer *out, uint8_t version, uint8_t flags)
{
	uint8_t	p[NAT_PREAMBLE_LEN];

	memcpy(p, NAT_MAGIC, 4);
	p[4] = version;
	p[5] = flags;
	p[6] = p[7] = 0;
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
 * A frame that outgrows the stage goes straight onto out when out queues
 * at most this much (its length is then patched where it lies, behind a
 * few chains at most), and into an evbuffer of its own otherwise.
 */
#define NAT_WR_DIRECT_MAX	(64 * 1024)

/*
 * Starts a frame: its header, with the length still zero, goes into the
 * stage.  Nothing reaches out before nat_frame_end() unless the frame
 * outgrows the stage; that is what keeps setting the length cheap: the
 * header is in the writer's own memory, at the start of its own evbuffer,
 * or behind at most NAT_WR_DIRECT_MAX bytes of out, never behind however
 * much out queues, which evbuffer could only reach by walking its chains.
 */
int
nat_frame_begin(struct nat_wr *w, struct evbuffer *out, uint16_t op,
    uint16_t flags, uint32_t id)
{
	w->out = out;
	w->start = evbuffer_get_length(out);
	w->body = NULL;
	w->failed = 0;
	nat_put32(w->stage, 0);
	nat_put16(w->stage + 4, op);
	nat_put16(w->stage + 6, flags);
	nat_put32(w->stage + 8, id);
	w->used = NAT_HDR_LEN;
	return (0);
}

/* Drops the frame being written; nat_frame_end() will add nothing more. */
static void
nat_wr_fail(struct nat_wr *w)
{
	if (w->body != NULL)
		evbuffer_free(w->body);
	w->body = NULL;
	w->failed = 1;
}

/*
 * Adds n bytes of field data: to the stage while they fit, then, stage
 * first, to out directly (w->used = 0) or to an evbuffer of the frame's
 * own (w->body).  A failure drops the frame.
 */
static int
nat_wr_add(struct nat_wr *w, const void *p, size_t n)
{
	struct evbuffer	*dst;

	if (w->failed)
		return (-1);
	if (w->body == NULL && w->used != 0) {
		if (sizeof(w->stage) - w->used >= n) {
			if (n != 0)
				memcpy(w->stage + w->used, p, n);
			w->used += n;
			return (0);
		}
		/* Only where the header will land at w->start. */
		if (evbuffer_get_length(w->out) == w->start &&
		    w->start <= NAT_WR_DIRECT_MAX) {
			if (evbuffer_add(w->out, w->stage, w->used) != 0)
				goto fail;
			w->used = 0;
		} else {
			if ((w->body = evbuffer_new()) == NULL)
				goto fail;
			if (evbuffer_add(w->body, w->stage, w->used) != 0)
				goto fail;
		}
	}
	dst = w->body != NULL ? w->body : w->out;
	if (n != 0 && evbuffer_add(dst, p, n) != 0)
		goto fail;
	return (0);
fail:
	nat_wr_fail(w);
	return (-1);
}

/* Appends an 'i' field. */
int
nat_put_i64(struct nat_wr *w, int64_t v)
{
	uint8_t	f[9];

	f[0] = NAT_T_I64;
	nat_put64(f + 1, (uint64_t)v);
	return (nat_wr_add(w, f, sizeof(f)));
}

int
nat_put_raw(struct nat_wr *w, const void *p, size_t n)
{
	return (nat_wr_add(w, p, n));
}

/*
 * Appends a 'b' field.  More than UINT32_MAX bytes cannot be encoded: -1
 * (and the frame is dropped).
 */
int
nat_put_bytes(struct nat_wr *w, const void *p, size_t n)
{
	uint8_t	f[5];

	if (n > UINT32_MAX) {
		nat_wr_fail(w);
		return (-1);
	}
	f[0] = NAT_T_BYTES;
	nat_put32(f + 1, (uint32_t)n);
	if (nat_wr_add(w, f, sizeof(f)) != 0)
		return (-1);
	return (nat_wr_add(w, p, n));
}

/*
 * Writes the 4-byte little-endian v at offset off of buf, which may
 * straddle chains: found with evbuffer_ptr_set() and written through the
 * extents evbuffer_peek() returns (the chains are the buffer's own memory,
 * filled by evbuffer_add()).  Returns 0 or -1.
 */
static int
nat_patch32(struct evbuffer *buf, size_t off, uint32_t v)
{
	struct evbuffer_ptr	 pos;
	struct evbuffer_iovec	 iov[4];
	uint8_t			 b[4], *q;
	size_t			 i, k;
	int			 n, j;

	nat_put32(b, v);
	if (evbuffer_ptr_set(buf, &pos, off, EVBUFFER_PTR_SET) != 0)
		return (-1);
	n = evbuffer_peek(buf, sizeof(b), &pos, iov, 4);
	if (n < 1 || n > 4)
		return (-1);
	k = 0;
	for (j = 0; j < n && k < sizeof(b); j++) {
		q = iov[j].iov_base;
		for (i = 0; i < iov[j].iov_len && k < sizeof(b); i++)
			q[i] = b[k++];
	}
	return (k == sizeof(b) ? 0 : -1);
}

/*
 * Sets the frame's length and finishes it on out: a staged frame goes with
 * one copy, a frame with its own evbuffer has the length written at that
 * buffer's start and its chains moved onto out, and a frame written
 * straight onto out has it patched in place.  A body over UINT32_MAX
 * cannot be framed.  Returns 0 or -1; the writer is spent either way.
 */
int
nat_frame_end(struct nat_wr *w)
{
	size_t	total;
	int	rc = -1;

	if (w->failed)
		return (-1);
	if (w->body == NULL && w->used != 0) {
		nat_put32(w->stage, (uint32_t)(w->used - 4));
		rc = evbuffer_add(w->out, w->stage, w->used) == 0 ? 0 : -1;
	} else if (w->body == NULL) {
		total = evbuffer_get_length(w->out) - w->start;
		if (total - 4 <= UINT32_MAX)
			rc = nat_patch32(w->out, w->start,
			    (uint32_t)(total - 4));
	} else {
		total = evbuffer_get_length(w->body);
		if (total - 4 <= UINT32_MAX &&
		    nat_patch32(w->body, 0, (uint32_t)(total - 4)) == 0 &&
		    evbuffer_add_buffer(w->out, w->body) == 0)
			rc = 0;
	}
	nat_wr_fail(w);		/* spent: a second end adds nothing */
	return (rc);
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

/* ---- the rendezvous messages (wire.h) ---- */

/* Reads n 'i' fields into v[0..n-1]; 0 or RDZV_EPROTO. */
static int
nat_get_i64s(struct nat_rd *rd, int64_t *const *v, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (nat_get_i64(rd, v[i]) != 0)
			return (RDZV_EPROTO);
	return (0);
}

static int
nat_put_i64s(struct nat_wr *w, const int64_t *const *v, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (nat_put_i64(w, *v[i]) != 0)
			return (-1);
	return (0);
}

static int
nat_put_slice(struct nat_wr *w, struct slice s)
{
	return (nat_put_bytes(w, s.p, s.len));
}

/* Finishes a frame; rc != 0: a field failed (the frame is dropped).
 * Returns 0 or -1. */
static int
nat_frame_close(struct nat_wr *w, int rc)
{
	if (rc != 0) {
		nat_frame_end(w);	/* releases the writer */
		return (-1);
	}
	return (nat_frame_end(w));
}

/*
 * JOIN: b job, b instance, b host, b addr, then the integers; optional
 * trailing i node_rank (a static rendezvous; absent or -1: none), then
 * i max_repairs and i repair_timeout_ms (absent: -1, the defaults),
 * then i straggler_ratio_pm, i straggler_window_ms and i straggler_action
 * (absent: -1), then i replicas (absent: 0, not a job of replica groups).
 */
int
nat_join_decode(struct slice payload, struct nat_join *j)
{
	struct nat_rd	 rd;
	int64_t *const	 v[] = { &j->pid, &j->local_world_size,
	    &j->min_nodes, &j->max_nodes, &j->max_restarts, &j->last_call_ms,
	    &j->lease_ms };

	memset(j, 0, sizeof(*j));
	nat_rd_init(&rd, payload);
	if (nat_get_bytes(&rd, &j->job) != 0 ||
	    nat_get_bytes(&rd, &j->instance) != 0 ||
	    nat_get_bytes(&rd, &j->host) != 0 ||
	    nat_get_bytes(&rd, &j->addr) != 0 ||
	    nat_get_i64s(&rd, v, sizeof(v) / sizeof(v[0])) != 0)
		return (RDZV_EPROTO);
	j->rank = j->max_repairs = j->repair_timeout_ms = -1;
	j->straggler_ratio_pm = j->straggler_window_ms = -1;
	j->straggler_action = -1;
	if (rd.left > 0 && nat_get_i64(&rd, &j->rank) != 0)
		return (RDZV_EPROTO);
	if (rd.left > 0 && (nat_get_i64(&rd, &j->max_repairs) != 0 ||
	    nat_get_i64(&rd, &j->repair_timeout_ms) != 0))
		return (RDZV_EPROTO);
	if (rd.left > 0 && (nat_get_i64(&rd, &j->straggler_ratio_pm) != 0 ||
	    nat_get_i64(&rd, &j->straggler_window_ms) != 0 ||
	    nat_get_i64(&rd, &j->straggler_action) != 0))
		return (RDZV_EPROTO);
	/* Written only when >= 1, so that a frame decodes one way. */
	if (rd.left > 0 && (nat_get_i64(&rd, &j->replicas) != 0 ||
	    j->replicas < 1))
		return (RDZV_EPROTO);
	return (nat_rd_end(&rd));
}

int
nat_join_put(struct evbuffer *out, uint32_t id, const struct nat_join *j)
{
	struct nat_wr		 w;
	const int64_t *const	 v[] = { &j->pid, &j->local_world_size,
	    &j->min_nodes, &j->max_nodes, &j->max_restarts, &j->last_call_ms,
	    &j->lease_ms };
	int			 rc, strag;

	strag = j->straggler_ratio_pm >= 0 || j->straggler_window_ms >= 0 ||
	    j->straggler_action >= 0;
	nat_frame_begin(&w, out, NAT_OP_JOIN, 0, id);
	rc = nat_put_slice(&w, j->job) != 0 ||
	    nat_put_slice(&w, j->instance) != 0 ||
	    nat_put_slice(&w, j->host) != 0 ||
	    nat_put_slice(&w, j->addr) != 0 ||
	    nat_put_i64s(&w, v, sizeof(v) / sizeof(v[0])) != 0;
	if (rc == 0 && (j->rank >= 0 || j->max_repairs >= 0 ||
	    j->repair_timeout_ms >= 0 || strag || j->replicas > 0))
		rc = nat_put_i64(&w, j->rank >= 0 ? j->rank : -1);
	if (rc == 0 && (j->max_repairs >= 0 || j->repair_timeout_ms >= 0 ||
	    strag || j->replicas > 0))
		rc = nat_put_i64(&w, j->max_repairs) != 0 ||
		    nat_put_i64(&w, j->repair_timeout_ms) != 0;
	if (rc == 0 && (strag || j->replicas > 0))
		rc = nat_put_i64(&w, j->straggler_ratio_pm) != 0 ||
		    nat_put_i64(&w, j->straggler_window_ms) != 0 ||
		    nat_put_i64(&w, j->straggler_action) != 0;
	if (rc == 0 && j->replicas > 0)
		rc = nat_put_i64(&w, j->replicas);
	return (nat_frame_close(&w, rc));
}

/* JOIN's reply: i node_id, i restart_count, i lease_ms. */
int
nat_joined_decode(struct slice payload, struct nat_joined *r)
{
	struct nat_rd	 rd;
	int64_t *const	 v[] = { &r->node_id, &r->restart_count, &r->lease_ms };

	nat_rd_init(&rd, payload);
	if (nat_get_i64s(&rd, v, 3) != 0)
		return (RDZV_EPROTO);
	return (nat_rd_end(&rd));
}

int
nat_joined_put(struct evbuffer *out, uint32_t id, const struct nat_joined *r)
{
	struct nat_wr		 w;
	const int64_t *const	 v[] = { &r->node_id, &r->restart_count,
	    &r->lease_ms };

	nat_frame_begin(&w, out, NAT_OP_JOIN, NAT_F_REPLY, id);
	return (nat_frame_close(&w, nat_put_i64s(&w, v, 3)));
}

/* FAILURE: b job, six integers, b message, optional i repair (1). */
int
nat_failure_decode(struct slice payload, struct nat_failure *f)
{
	struct nat_rd	 rd;
	int64_t *const	 v[] = { &f->node_id, &f->round, &f->local_rank,
	    &f->rank, &f->exit_code, &f->signo };

	memset(f, 0, sizeof(*f));
	nat_rd_init(&rd, payload);
	if (nat_get_bytes(&rd, &f->job) != 0 ||
	    nat_get_i64s(&rd, v, sizeof(v) / sizeof(v[0])) != 0 ||
	    nat_get_bytes(&rd, &f->message) != 0)
		return (RDZV_EPROTO);
	/* Written only as 1 (absent: 0), so that a frame decodes one way. */
	if (rd.left > 0 && (nat_get_i64(&rd, &f->repair) != 0 ||
	    f->repair != 1))
		return (RDZV_EPROTO);
	return (nat_rd_end(&rd));
}

int
nat_failure_put(struct evbuffer *out, uint32_t id, const struct nat_failure *f)
{
	struct nat_wr		 w;
	const int64_t *const	 v[] = { &f->node_id, &f->round,
	    &f->local_rank, &f->rank, &f->exit_code, &f->signo };

	nat_frame_begin(&w, out, NAT_OP_FAILURE, 0, id);
	return (nat_frame_close(&w, nat_put_slice(&w, f->job) != 0 ||
	    nat_put_i64s(&w, v, sizeof(v) / sizeof(v[0])) != 0 ||
	    nat_put_slice(&w, f->message) != 0 ||
	    (f->repair && nat_put_i64(&w, 1) != 0)));
}

/*
 * ROUND push: b job, nine integers, b store_ns, i store_port, b message,
 * then for a repair round only i kind, i donor, i live_local (absent: a
 * NORMAL round, donor -1, live_local 0), so a push of any other round is
 * what an agent older than repair rounds decodes.
 */
int
nat_round_decode(struct slice payload, struct nat_round *r)
{
	struct nat_rd	 rd;
	int64_t *const	 v[] = { &r->round, &r->state, &r->node_id,
	    &r->group_rank, &r->group_world_size, &r->world_size,
	    &r->rank_base, &r->restart_count, &r->max_restarts };

	memset(r, 0, sizeof(*r));
	nat_rd_init(&rd, payload);
	if (nat_get_bytes(&rd, &r->job) != 0 ||
	    nat_get_i64s(&rd, v, sizeof(v) / sizeof(v[0])) != 0 ||
	    nat_get_bytes(&rd, &r->store_ns) != 0 ||
	    nat_get_i64(&rd, &r->store_port) != 0 ||
	    nat_get_bytes(&rd, &r->message) != 0)
		return (RDZV_EPROTO);
	r->donor = -1;
	if (rd.left > 0 && (nat_get_i64(&rd, &r->kind) != 0 ||
	    nat_get_i64(&rd, &r->donor) != 0 ||
	    nat_get_i64(&rd, &r->live_local) != 0 ||
	    (r->kind != NAT_KIND_SHRINK && r->kind != NAT_KIND_GROW)))
		return (RDZV_EPROTO);
	return (nat_rd_end(&rd));
}

int
nat_round_put(struct evbuffer *out, const struct nat_round *r)
{
	struct nat_wr		 w;
	const int64_t *const	 v[] = { &r->round, &r->state, &r->node_id,
	    &r->group_rank, &r->group_world_size, &r->world_size,
	    &r->rank_base, &r->restart_count, &r->max_restarts };

	nat_frame_begin(&w, out, NAT_OP_ROUND, NAT_F_PUSH, 0);
	return (nat_frame_close(&w, nat_put_slice(&w, r->job) != 0 ||
	    nat_put_i64s(&w, v, sizeof(v) / sizeof(v[0])) != 0 ||
	    nat_put_slice(&w, r->store_ns) != 0 ||
	    nat_put_i64(&w, r->store_port) != 0 ||
	    nat_put_slice(&w, r->message) != 0 ||
	    (r->kind != NAT_KIND_NORMAL && (nat_put_i64(&w, r->kind) != 0 ||
	    nat_put_i64(&w, r->donor) != 0 ||
	    nat_put_i64(&w, r->live_local) != 0))));
}

/* READY: b job, i node_id, i round, i local_rank. */
int
nat_ready_decode(struct slice payload, struct nat_ready *r)
{
	struct nat_rd	 rd;
	int64_t *const	 v[] = { &r->node_id, &r->round, &r->local_rank };

	memset(r, 0, sizeof(*r));
	nat_rd_init(&rd, payload);
	if (nat_get_bytes(&rd, &r->job) != 0 || nat_get_i64s(&rd, v, 3) != 0)
		return (RDZV_EPROTO);
	return (nat_rd_end(&rd));
}

int
nat_ready_put(struct evbuffer *out, uint32_t id, const struct nat_ready *r)
{
	struct nat_wr		 w;
	const int64_t *const	 v[] = { &r->node_id, &r->round,
	    &r->local_rank };

	nat_frame_begin(&w, out, NAT_OP_READY, 0, id);
	return (nat_frame_close(&w, nat_put_slice(&w, r->job) != 0 ||
	    nat_put_i64s(&w, v, 3) != 0));
}

/* STRAGGLER and DRAIN pushes: b job, i node_id, i round, i local_rank,
 * b message. */
int
nat_straggler_decode(struct slice payload, struct nat_straggler *m)
{
	struct nat_rd	 rd;
	int64_t *const	 v[] = { &m->node_id, &m->round, &m->local_rank };

	memset(m, 0, sizeof(*m));
	nat_rd_init(&rd, payload);
	if (nat_get_bytes(&rd, &m->job) != 0 || nat_get_i64s(&rd, v, 3) != 0 ||
	    nat_get_bytes(&rd, &m->message) != 0)
		return (RDZV_EPROTO);
	return (nat_rd_end(&rd));
}

int
nat_straggler_put(struct evbuffer *out, uint16_t op,
    const struct nat_straggler *m)
{
	struct nat_wr		 w;
	const int64_t *const	 v[] = { &m->node_id, &m->round,
	    &m->local_rank };

	nat_frame_begin(&w, out, op, NAT_F_PUSH, 0);
	return (nat_frame_close(&w, nat_put_slice(&w, m->job) != 0 ||
	    nat_put_i64s(&w, v, 3) != 0 || nat_put_slice(&w, m->message) != 0));
}
