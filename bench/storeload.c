/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storeload.c: a load generator for key-value stores that speak a
 * TCPStore dialect (1.13, or 2.x with its VALIDATE + PING handshake) or
 * rdzv's native protocol.
 *
 * Three modes, all driven by one libevent loop over non-blocking sockets:
 *   load     K connections, each with one request in flight (TCPStore is
 *            not pipelined), drawing ops from a weighted mix for a fixed
 *            time; prints ops/s and latency percentiles on one line.
 *   barrier  N connections each ADD a counter, the one that sees N SETs a
 *            key, all WAIT on it; prints the time from the first ADD sent
 *            until the last WAIT returned.
 *   idle     N connections opened, one round trip each, then held open
 *            (for measuring a server's memory per connection).
 * Connections are opened at most SL_CONNECT_BATCH at a time and each does
 * one round trip (a GETNUMKEYS, the 2.x PING or the native preamble)
 * before it counts as open, so a server's accept backlog never shapes a
 * measurement.  A barrier may instead time its connects too (--connect):
 *   seq      clients connect one after another, each sending its ADD as
 *            soon as it is connected (after the PING in 2.x, as torch's
 *            client does), before the next connects;
 *   burst    every client connects at once and sends its ADD as soon as
 *            it is connected: the job-start storm.
 * --sources K spreads the clients over 127.0.0.1 .. 127.0.0.K, so more of
 * them than one address has ephemeral ports can connect.
 *
 * Why about 1,400 lines: a benchmark must not measure with the code it
 * measures, so it carries its own encoders of the three dialects and its
 * own event loop, which every mode shares.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <err.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "client.h"
#include "hostport.h"
#include "mono.h"
#include "rdzv_err.h"
#include "wire.h"

#define SL_CONNECT_BATCH	128	/* connections opening at once */
#define SL_DRAIN_SECONDS	10	/* after the run, for replies in flight */
#define SL_FD_SPARE		64	/* descriptors besides the connections */

/* 1.13 query bytes (tcpstore-wire.md section 2). */
#define T113_SET		0
#define T113_COMPARE_SET	1
#define T113_GET		2
#define T113_ADD		3
#define T113_CHECK		4
#define T113_WAIT		5
#define T113_GETNUMKEYS		6

/* 2.x handshake (tcpstore-wire.md section 3). */
#define T2_VALIDATE		0
#define T2_PING			13

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT	24	/* Linux 4.2 */
#endif

enum sl_proto { SL_TCPS113, SL_TCPS2, SL_NATIVE };
enum sl_mode { SL_LOAD, SL_BARRIER, SL_IDLE };
enum sl_connect { SC_READY, SC_SEQ, SC_BURST };
static const char *const sl_proto_names[] = {
	"tcpstore113", "tcpstore2", "native"
};
static const char *const sl_connect_names[] = { "ready", "seq", "burst" };

enum sl_op {
	OP_SET,
	OP_GET,
	OP_ADD,
	OP_WAIT,
	OP_CHECK,
	OP_CAS,
	OP_NUMKEYS,
	OP_COUNT
};
static const char *const sl_op_names[OP_COUNT] = {
	"set", "get", "add", "wait", "check", "cas", "numkeys"
};

/* The shape of a TCPStore reply. */
enum sl_reply { R_NONE, R_U8, R_U32, R_I64, R_BYTES };

/*
 * Connection states:
 *   CS_IDLE -> CS_CONNECTING (sl_connect_more) -> CS_HELLO (conn_connected)
 *   -> CS_READY (conn_reply) -> CS_BUSY (conn_issue) -> CS_READY ...
 */
enum conn_state {
	CS_IDLE,	/* not opened yet */
	CS_CONNECTING,	/* non-blocking connect in progress */
	CS_HELLO,	/* first round trip outstanding */
	CS_READY,	/* open, nothing in flight */
	CS_BUSY,	/* one request in flight */
};

/* Barrier steps of one connection. */
enum bar_step { BAR_ADD, BAR_SET, BAR_WAIT, BAR_RELEASED };

struct sl;

struct conn {
	struct sl	*sl;
	int		 fd;
	enum conn_state	 state;
	struct event	*rev;
	struct event	*wev;
	struct evbuffer	*out;
	uint8_t		*ibuf;		/* received, not yet parsed */
	size_t		 ilen;
	size_t		 icap;
	enum sl_op	 op;		/* in flight */
	enum sl_reply	 expect;	/* 1.13: shape of the reply */
	enum bar_step	 step;
	uint32_t	 id;		/* native: id in flight */
	int64_t		 rval;		/* integer in the last reply */
	uint64_t	 t0;		/* when the request in flight was sent */
	uint64_t	 rng;
};

/* Latency histogram: 1.6% wide buckets over nanoseconds. */
#define HIST_SUB_BITS	6
#define HIST_SUB	(1 << HIST_SUB_BITS)
#define HIST_BUCKETS	(2 * HIST_SUB + 58 * HIST_SUB)

struct sl {
	/* options */
	enum sl_proto		 proto;
	enum sl_mode		 mode;
	enum sl_connect		 connect;
	size_t			 nsources;
	const char		*host;
	const char		*port;
	size_t			 nconns;
	double			 duration;
	double			 warmup;
	double			 hold;
	double			 timeout;
	unsigned		 weight[OP_COUNT];
	unsigned		 wsum;
	size_t			 key_size;
	size_t			 value_size;
	size_t			 nkeys;
	char			 mixstr[128];

	struct event_base	*base;
	struct addrinfo		*ai;
	struct conn		*conns;
	size_t			 next_connect;
	size_t			 connecting;
	size_t			 nready;
	struct wire_limits	 lim;

	char			*vkeys;		/* nkeys keys of key_size bytes */
	char			*ckeys;		/* counters, same shape */
	uint8_t			*value;

	/* load */
	int			 recording;
	int			 stopping;
	size_t			 busy;
	uint64_t		 t_rec_start;
	uint64_t		 t_rec_end;
	uint64_t		 ops;
	uint64_t		 all_ops;	/* warmup and drain included */
	uint64_t		 op_count[OP_COUNT];
	uint64_t		 lat_ops;
	uint64_t		 hist[HIST_BUCKETS];
	uint64_t		 lat_max;

	/* barrier */
	char			 bar_count[96];
	char			 bar_done[96];
	size_t			 released;
	uint64_t		 t_bar_start;
	uint64_t		 t_bar_last;	/* the ADD that returned N came back */
	uint64_t		 t_bar_sent;	/* every ADD written */
	size_t			 adds_sent;
	uint64_t		 t_bar_end;
	int			 finished;
};

static void	conn_read_cb(evutil_socket_t, short, void *);
static void	conn_write_cb(evutil_socket_t, short, void *);
static void	conn_issue(struct conn *);
static void	sl_connect_more(struct sl *);
static void	sl_all_ready(struct sl *);
static void	bar_start(struct sl *, struct conn *);

/* xorshift64*: cheap and good enough to pick ops and keys. */
static uint64_t
rng_next(uint64_t *s)
{
	uint64_t	x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return (x * 0x2545F4914F6CDD1DULL);
}

static size_t
hist_index(uint64_t v)
{
	int	msb, shift;

	if (v < 2 * HIST_SUB)
		return ((size_t)v);
	msb = 63 - __builtin_clzll(v);
	shift = msb - HIST_SUB_BITS;	/* v >> shift is in [SUB, 2 SUB) */
	return ((size_t)(2 * HIST_SUB + (shift - 1) * HIST_SUB +
	    ((v >> shift) - HIST_SUB)));
}

/* The middle of bucket i, in nanoseconds. */
static double
hist_value(size_t i)
{
	size_t	shift;
	double	lo;

	if (i < 2 * HIST_SUB)
		return ((double)i);
	shift = (i - 2 * HIST_SUB) / HIST_SUB + 1;
	lo = (double)((i - 2 * HIST_SUB) % HIST_SUB + HIST_SUB) *
	    (double)((uint64_t)1 << shift);
	return (lo + (double)((uint64_t)1 << shift) / 2);
}

/* The latency at quantile q (0..1) in microseconds. */
static double
hist_quantile(const struct sl *sl, double q)
{
	uint64_t	rank, seen = 0;
	size_t		i;

	if (sl->lat_ops == 0)
		return (0);
	rank = (uint64_t)(q * (double)sl->lat_ops);
	if (rank < 1)
		rank = 1;
	if (rank > sl->lat_ops)
		rank = sl->lat_ops;
	for (i = 0; i < HIST_BUCKETS; i++) {
		seen += sl->hist[i];
		if (seen >= rank)
			return (hist_value(i) / 1000.0);
	}
	return ((double)sl->lat_max / 1000.0);
}

static void
sl_record(struct sl *sl, struct conn *c, uint64_t t)
{
	uint64_t	lat = t - c->t0;

	sl->hist[hist_index(lat)]++;
	sl->lat_ops++;
	if (lat > sl->lat_max)
		sl->lat_max = lat;
}

/* ---- encoding ---- */

static void
out_u8(struct evbuffer *out, uint8_t v)
{
	if (evbuffer_add(out, &v, 1) != 0)
		errx(1, "out of memory");
}

/* TCPStore integers are host order; every platform torch ships on is LE. */
static void
out_i64(struct evbuffer *out, int64_t v)
{
	if (evbuffer_add(out, &v, 8) != 0)
		errx(1, "out of memory");
}

static void
out_u32(struct evbuffer *out, uint32_t v)
{
	if (evbuffer_add(out, &v, 4) != 0)
		errx(1, "out of memory");
}

/* Each op's query byte in 1.13 and in 2.x, indexed by enum sl_op. */
static const uint8_t tcps_codes[2][OP_COUNT] = {
	/* set get add wait check cas numkeys */
	{ T113_SET, T113_GET, T113_ADD, T113_WAIT, T113_CHECK,
	    T113_COMPARE_SET, T113_GETNUMKEYS },
	{ 1, 3, 4, 6, 5, 2, 7 },
};

/* The query bytes of proto (a TCPStore dialect). */
static const uint8_t *
tcps_code(enum sl_proto proto)
{
	return (tcps_codes[proto == SL_TCPS2]);
}

/* The 2.x handshake: VALIDATE (no reply), then a PING echoed back. */
static void
t2_hello(struct evbuffer *out)
{
	out_u8(out, T2_VALIDATE);
	out_u32(out, TCPS_V2_MAGIC);
	out_u8(out, T2_PING);
	out_u32(out, 0x5354524d);
}

static void
out_bytes(struct evbuffer *out, const void *p, size_t n)
{
	uint64_t	len = n;

	if (evbuffer_add(out, &len, 8) != 0 || evbuffer_add(out, p, n) != 0)
		errx(1, "out of memory");
}

static const char *
vkey(const struct sl *sl, size_t i)
{
	return (sl->vkeys + i * sl->key_size);
}

static const char *
ckey(const struct sl *sl, size_t i)
{
	return (sl->ckeys + i * sl->key_size);
}

/*
 * Appends one TCPStore request (c's dialect) to c->out and sets c->expect
 * to the shape of its reply.
 */
static void
tcps_encode(struct conn *c, enum sl_op op, const char *key, size_t klen)
{
	struct sl	*sl = c->sl;
	struct evbuffer	*out = c->out;
	const uint8_t	*code = tcps_code(sl->proto);

	switch (op) {
	case OP_SET:
		out_u8(out, code[OP_SET]);
		out_bytes(out, key, klen);
		out_bytes(out, sl->value, sl->value_size);
		c->expect = R_NONE;
		break;
	case OP_GET:
		out_u8(out, code[OP_GET]);
		out_bytes(out, key, klen);
		c->expect = R_BYTES;
		break;
	case OP_ADD:
		out_u8(out, code[OP_ADD]);
		out_bytes(out, key, klen);
		out_i64(out, 1);
		c->expect = R_I64;
		break;
	case OP_WAIT:
	case OP_CHECK:
		out_u8(out, code[op]);
		out_i64(out, 1);
		out_bytes(out, key, klen);
		c->expect = R_U8;
		break;
	case OP_CAS:
		/* Every value is the same, so this swaps it for itself. */
		out_u8(out, code[OP_CAS]);
		out_bytes(out, key, klen);
		out_bytes(out, sl->value, sl->value_size);
		out_bytes(out, sl->value, sl->value_size);
		c->expect = R_BYTES;
		break;
	case OP_NUMKEYS:
		out_u8(out, code[OP_NUMKEYS]);
		c->expect = R_I64;
		break;
	default:
		errx(1, "bad op %d", op);
	}
}

/* Appends one native request (empty namespace) to c->out. */
static void
nat_encode(struct conn *c, enum sl_op op, const char *key, size_t klen)
{
	static const uint16_t	 nat_ops[OP_COUNT] = {
		NAT_OP_SET, NAT_OP_GET, NAT_OP_ADD, NAT_OP_WAIT, NAT_OP_CHECK,
		NAT_OP_CAS, NAT_OP_NUM_KEYS
	};
	struct sl		*sl = c->sl;
	struct nat_wr		 wr;
	int			 rv;

	if (++c->id == 0)
		c->id = 1;
	rv = nat_frame_begin(&wr, c->out, nat_ops[op], 0, c->id);
	rv |= nat_put_bytes(&wr, "", 0);
	switch (op) {
	case OP_SET:
		rv |= nat_put_bytes(&wr, key, klen);
		rv |= nat_put_bytes(&wr, sl->value, sl->value_size);
		break;
	case OP_GET:
		rv |= nat_put_bytes(&wr, key, klen);
		break;
	case OP_ADD:
		rv |= nat_put_bytes(&wr, key, klen);
		rv |= nat_put_i64(&wr, 1);
		break;
	case OP_WAIT:
		rv |= nat_put_i64(&wr, -1);
		/* FALLTHROUGH */
	case OP_CHECK:
		rv |= nat_put_i64(&wr, 1);
		rv |= nat_put_bytes(&wr, key, klen);
		break;
	case OP_CAS:
		rv |= nat_put_bytes(&wr, key, klen);
		rv |= nat_put_bytes(&wr, sl->value, sl->value_size);
		rv |= nat_put_bytes(&wr, sl->value, sl->value_size);
		break;
	case OP_NUMKEYS:
		break;
	default:
		errx(1, "bad op %d", op);
	}
	rv |= nat_frame_end(&wr);
	if (rv != 0)
		errx(1, "out of memory");
}

static void
conn_encode(struct conn *c, enum sl_op op, const char *key, size_t klen)
{
	c->op = op;
	if (c->sl->proto != SL_NATIVE)
		tcps_encode(c, op, key, klen);
	else
		nat_encode(c, op, key, klen);
}

/* ---- I/O ---- */

static void
conn_send(struct conn *c)
{
	int	n;

	while (evbuffer_get_length(c->out) > 0) {
		n = evbuffer_write(c->out, c->fd);
		if (n > 0)
			continue;
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			event_add(c->wev, NULL);
			return;
		}
		err(1, "connection %zu: send", (size_t)(c - c->sl->conns));
	}
}

static void
conn_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn	*c = arg;
	struct sl	*sl = c->sl;
	socklen_t	 sl_len;
	int		 soerr, one = 1;

	if (c->state != CS_CONNECTING) {
		conn_send(c);
		return;
	}
	sl_len = sizeof soerr;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl_len) == -1)
		err(1, "getsockopt");
	if (soerr != 0) {
		errno = soerr;
		err(1, "connection %zu to %s:%s", (size_t)(c - sl->conns),
		    sl->host, sl->port);
	}
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (event_add(c->rev, NULL) != 0)
		errx(1, "event_add failed");
	if (sl->mode == SL_BARRIER && sl->connect != SC_READY &&
	    sl->proto == SL_TCPS113) {
		/* A 1.13 client sends its first request at once. */
		sl->connecting--;
		bar_start(sl, c);
		sl_connect_more(sl);
		return;
	}
	c->state = CS_HELLO;
	if (sl->proto == SL_NATIVE) {
		if (nat_preamble_put(c->out, NAT_VERSION) != 0)
			errx(1, "out of memory");
		c->expect = R_NONE;
	} else if (sl->proto == SL_TCPS2) {
		t2_hello(c->out);
		c->expect = R_U32;
	} else
		tcps_encode(c, OP_NUMKEYS, NULL, 0);
	conn_send(c);
}

/* Starts connection c: a non-blocking connect completed by conn_write_cb. */
static void
conn_open(struct sl *sl, struct conn *c)
{
	int	fd;

	fd = socket(sl->ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, sl->ai->ai_protocol);
	if (fd == -1)
		err(1, "socket (connection %zu)", (size_t)(c - sl->conns));
	c->fd = fd;
	c->sl = sl;
	c->rev = event_new(sl->base, fd, EV_READ | EV_PERSIST, conn_read_cb, c);
	c->wev = event_new(sl->base, fd, EV_WRITE, conn_write_cb, c);
	c->out = evbuffer_new();
	c->icap = 256;
	c->ibuf = malloc(c->icap);
	if (c->rev == NULL || c->wev == NULL || c->out == NULL ||
	    c->ibuf == NULL)
		errx(1, "out of memory");
	c->state = CS_CONNECTING;
	if (sl->nsources > 0) {
		struct sockaddr_in	src;
		int			one = 1;

		/* The port is picked at connect(), per destination. */
		memset(&src, 0, sizeof src);
		src.sin_family = AF_INET;
		src.sin_addr.s_addr = htonl(INADDR_LOOPBACK +
		    (uint32_t)((size_t)(c - sl->conns) % sl->nsources));
		(void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
		    sizeof one);
		if (bind(fd, (struct sockaddr *)&src, sizeof src) == -1)
			err(1, "bind (connection %zu)", (size_t)(c - sl->conns));
	}
	if (connect(fd, sl->ai->ai_addr, sl->ai->ai_addrlen) == -1 &&
	    errno != EINPROGRESS)
		err(1, "connect (connection %zu) to %s:%s",
		    (size_t)(c - sl->conns), sl->host, sl->port);
	if (event_add(c->wev, NULL) != 0)
		errx(1, "event_add failed");
}

/* Opens connections up to the batch --connect allows. */
static void
sl_connect_more(struct sl *sl)
{
	size_t	batch = SL_CONNECT_BATCH;

	if (sl->mode == SL_BARRIER && sl->connect == SC_SEQ)
		batch = 1;
	else if (sl->mode == SL_BARRIER && sl->connect == SC_BURST)
		batch = SIZE_MAX;
	while (sl->next_connect < sl->nconns && sl->connecting < batch) {
		conn_open(sl, &sl->conns[sl->next_connect++]);
		sl->connecting++;
	}
}

/*
 * Parses one TCPStore reply of shape c->expect from c->ibuf.  Returns its
 * size, or 0 when it is not all there.
 */
static size_t
tcps_parse(struct conn *c)
{
	uint64_t	len;
	int64_t		v;
	uint32_t	u;

	switch (c->expect) {
	case R_U8:
		if (c->ilen < 1)
			return (0);
		c->rval = c->ibuf[0];
		return (1);
	case R_U32:
		if (c->ilen < 4)
			return (0);
		memcpy(&u, c->ibuf, 4);
		c->rval = u;
		return (4);
	case R_I64:
		if (c->ilen < 8)
			return (0);
		memcpy(&v, c->ibuf, 8);
		c->rval = v;
		return (8);
	case R_BYTES:
		if (c->ilen < 8)
			return (0);
		memcpy(&len, c->ibuf, 8);
		if (len > (1u << 30))
			errx(1, "connection %zu: reply of %" PRIu64 " bytes",
			    (size_t)(c - c->sl->conns), len);
		if (c->ilen - 8 < len)
			return (0);
		c->rval = (int64_t)len;
		return (8 + (size_t)len);
	case R_NONE:
		break;
	}
	errx(1, "connection %zu: unexpected %zu bytes from the server",
	    (size_t)(c - c->sl->conns), c->ilen);
}

/* Parses one native reply (or the preamble in CS_HELLO); as tcps_parse. */
static size_t
nat_parse(struct conn *c)
{
	struct nat_msg	 msg;
	struct nat_rd	 rd;
	struct slice	 text;
	uint8_t		 version;
	size_t		 need = 0;
	int64_t		 v;
	int		 rv;

	if (c->state == CS_HELLO) {
		rv = nat_preamble_decode(c->ibuf, c->ilen, &version, &need);
		if (rv < 0)
			errx(1, "connection %zu: bad preamble: %s",
			    (size_t)(c - c->sl->conns), rdzv_strerror(rv));
		return ((size_t)rv);
	}
	rv = nat_decode(c->ibuf, c->ilen, &c->sl->lim, &msg, &need);
	if (rv < 0)
		errx(1, "connection %zu: bad frame: %s",
		    (size_t)(c - c->sl->conns), rdzv_strerror(rv));
	if (rv == 0)
		return (0);
	if (!(msg.flags & NAT_F_REPLY) || msg.id != c->id)
		errx(1, "connection %zu: unexpected frame op %u flags %u id %u",
		    (size_t)(c - c->sl->conns), msg.op, msg.flags, msg.id);
	nat_rd_init(&rd, msg.payload);
	if (msg.flags & NAT_F_ERROR) {
		v = 0;
		text.p = (const uint8_t *)"";
		text.len = 0;
		(void)nat_get_i64(&rd, &v);
		(void)nat_get_bytes(&rd, &text);
		errx(1, "connection %zu: %s failed: %s (%.*s)",
		    (size_t)(c - c->sl->conns), sl_op_names[c->op],
		    rdzv_strerror((int)v), (int)text.len, text.p);
	}
	if (c->op == OP_ADD || c->op == OP_NUMKEYS) {
		if (nat_get_i64(&rd, &v) != 0)
			errx(1, "connection %zu: bad reply to %s",
			    (size_t)(c - c->sl->conns), sl_op_names[c->op]);
		c->rval = v;
	}
	return ((size_t)rv);
}

/* Load mode: a reply (or a fire-and-forget 1.13 SET) completed op. */
static void
load_done(struct sl *sl, struct conn *c, enum sl_op op, uint64_t t,
    int timed)
{
	sl->all_ops++;
	if (!sl->recording)
		return;
	sl->ops++;
	sl->op_count[op]++;
	if (timed)
		sl_record(sl, c, t);
}

static void
bar_finish(struct sl *sl)
{
	sl->t_bar_end = mono_ns();
	sl->finished = 1;
	event_base_loopbreak(sl->base);
}

/* Barrier mode: the next step after a reply. */
static void
bar_reply(struct sl *sl, struct conn *c)
{
	size_t	n = sl->nconns;

	switch (c->step) {
	case BAR_ADD:
		if (c->rval < 1 || (uint64_t)c->rval > n)
			errx(1, "barrier counter reached %" PRId64 " (n=%zu): "
			    "stale key?", c->rval, n);
		if ((uint64_t)c->rval == n) {
			sl->t_bar_last = mono_ns();
			conn_encode(c, OP_SET, sl->bar_done,
			    strlen(sl->bar_done));
			c->step = BAR_SET;
			if (sl->proto == SL_NATIVE)
				break;
			/* A TCPStore SET has no reply: wait right behind it. */
		}
		conn_encode(c, OP_WAIT, sl->bar_done, strlen(sl->bar_done));
		c->step = BAR_WAIT;
		break;
	case BAR_SET:
		conn_encode(c, OP_WAIT, sl->bar_done, strlen(sl->bar_done));
		c->step = BAR_WAIT;
		break;
	case BAR_WAIT:
		if (sl->proto != SL_NATIVE && c->rval != TCPS_STOP_WAITING)
			errx(1, "WAIT answered %" PRId64, c->rval);
		c->step = BAR_RELEASED;
		c->state = CS_READY;
		if (++sl->released == n)
			bar_finish(sl);
		return;
	case BAR_RELEASED:
		errx(1, "reply after release");
	}
	conn_send(c);
}

/* Handles one complete reply on c. */
static void
conn_reply(struct conn *c, uint64_t t)
{
	struct sl	*sl = c->sl;

	if (c->state == CS_HELLO) {
		if (sl->proto == SL_TCPS2 && c->rval != 0x5354524d)
			errx(1, "connection %zu: PING echoed %" PRId64,
			    (size_t)(c - sl->conns), c->rval);
		c->state = CS_READY;
		sl->connecting--;
		if (sl->mode == SL_BARRIER && sl->connect != SC_READY) {
			bar_start(sl, c);
			sl_connect_more(sl);
			return;
		}
		sl->nready++;
		if (sl->nready == sl->nconns)
			sl_all_ready(sl);
		else
			sl_connect_more(sl);
		return;
	}
	if (c->state != CS_BUSY)
		errx(1, "connection %zu: reply with nothing in flight",
		    (size_t)(c - sl->conns));
	switch (sl->mode) {
	case SL_LOAD:
		if (sl->proto != SL_NATIVE && ((c->op == OP_WAIT &&
		    c->rval != TCPS_STOP_WAITING) || ((c->op == OP_GET ||
		    c->op == OP_CAS) && (size_t)c->rval != sl->value_size)))
			errx(1, "connection %zu: odd reply %" PRId64 " to %s",
			    (size_t)(c - sl->conns), c->rval,
			    sl_op_names[c->op]);
		load_done(sl, c, c->op, t, 1);
		c->state = CS_READY;
		sl->busy--;
		if (!sl->stopping)
			conn_issue(c);
		else if (sl->busy == 0)
			event_base_loopbreak(sl->base);
		break;
	case SL_BARRIER:
		bar_reply(sl, c);
		break;
	case SL_IDLE:
		errx(1, "reply on an idle connection");
	}
}

static void
conn_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn	*c = arg;
	struct sl	*sl = c->sl;
	size_t		 used;
	ssize_t		 n;
	uint64_t	 t;
	uint8_t		*p;

	if (c->ilen == c->icap) {
		if (c->icap > SIZE_MAX / 2 ||
		    (p = realloc(c->ibuf, c->icap * 2)) == NULL)
			errx(1, "out of memory");
		c->ibuf = p;
		c->icap *= 2;
	}
	n = read(fd, c->ibuf + c->ilen, c->icap - c->ilen);
	if (n == 0)
		errx(1, "connection %zu closed by the server%s",
		    (size_t)(c - sl->conns), c->state == CS_BUSY &&
		    c->op == OP_GET ? " (a GET of a missing key?)" : "");
	if (n == -1) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return;
		err(1, "connection %zu: read", (size_t)(c - sl->conns));
	}
	c->ilen += (size_t)n;
	t = mono_ns();
	for (;;) {
		if (sl->proto != SL_NATIVE)
			used = tcps_parse(c);
		else
			used = nat_parse(c);
		if (used == 0)
			break;
		c->ilen -= used;
		memmove(c->ibuf, c->ibuf + used, c->ilen);
		conn_reply(c, t);
		if (c->state != CS_BUSY || c->ilen == 0)
			break;
	}
	if (c->ilen > 0 && c->state != CS_BUSY && c->state != CS_HELLO)
		errx(1, "connection %zu: %zu unexpected bytes",
		    (size_t)(c - sl->conns), c->ilen);
}

/* Load mode: picks and sends the next request of c. */
static void
conn_issue(struct conn *c)
{
	struct sl	*sl = c->sl;
	uint64_t	 r;
	unsigned	 w;
	enum sl_op	 op;
	const char	*key;
	size_t		 i;

	for (;;) {
		r = rng_next(&c->rng);
		w = (unsigned)(r % sl->wsum);
		for (op = 0; op < OP_COUNT - 1; op++) {
			if (w < sl->weight[op])
				break;
			w -= sl->weight[op];
		}
		i = (size_t)((r >> 32) % sl->nkeys);
		key = op == OP_ADD ? ckey(sl, i) : vkey(sl, i);
		conn_encode(c, op, key, sl->key_size);
		/*
		 * A 1.13 SET has no reply: like torch's client, it is done
		 * once written, and the next request goes right behind it.
		 */
		if (sl->proto != SL_NATIVE && op == OP_SET) {
			load_done(sl, c, op, 0, 0);
			continue;
		}
		break;
	}
	c->state = CS_BUSY;
	sl->busy++;
	c->t0 = mono_ns();
	conn_send(c);
}

/* ---- modes ---- */

/* CPU time this process used so far (user + system). */
static double
cpu_seconds(void)
{
	struct rusage	ru;

	if (getrusage(RUSAGE_SELF, &ru) == -1)
		return (0);
	return ((double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
}

static void
load_warm_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sl	*sl = arg;

	memset(sl->hist, 0, sizeof sl->hist);
	sl->ops = sl->lat_ops = sl->lat_max = 0;
	memset(sl->op_count, 0, sizeof sl->op_count);
	sl->recording = 1;
	sl->t_rec_start = mono_ns();
}

static void
load_stop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sl	*sl = arg;

	sl->t_rec_end = mono_ns();
	sl->recording = 0;
	sl->stopping = 1;
	if (sl->busy == 0)
		event_base_loopbreak(sl->base);
}

static void
loop_break_cb(evutil_socket_t fd, short what, void *arg)
{
	struct sl	*sl = arg;

	event_base_loopbreak(sl->base);
}

static struct timeval
tv_of(double s)
{
	struct timeval	tv;

	tv.tv_sec = (time_t)s;
	tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
	return (tv);
}

static void
sl_all_ready(struct sl *sl)
{
	struct timeval	tv;
	size_t		i;

	switch (sl->mode) {
	case SL_LOAD:
		tv = tv_of(sl->warmup);
		event_base_once(sl->base, -1, EV_TIMEOUT, load_warm_cb, sl, &tv);
		tv = tv_of(sl->warmup + sl->duration);
		event_base_once(sl->base, -1, EV_TIMEOUT, load_stop_cb, sl, &tv);
		if (sl->warmup == 0)
			load_warm_cb(-1, 0, sl);
		for (i = 0; i < sl->nconns; i++)
			conn_issue(&sl->conns[i]);
		break;
	case SL_BARRIER:
		sl->t_bar_start = mono_ns();
		for (i = 0; i < sl->nconns; i++)
			bar_start(sl, &sl->conns[i]);
		break;
	case SL_IDLE:
		printf("idle n=%zu ready pid=%ld\n", sl->nconns, (long)getpid());
		fflush(stdout);
		if (sl->hold >= 0) {
			tv = tv_of(sl->hold);
			event_base_once(sl->base, -1, EV_TIMEOUT, loop_break_cb,
			    sl, &tv);
		}
		break;
	}
}

/* Barrier mode: c, connected, sends its ADD. */
static void
bar_start(struct sl *sl, struct conn *c)
{
	conn_encode(c, OP_ADD, sl->bar_count, strlen(sl->bar_count));
	c->step = BAR_ADD;
	c->state = CS_BUSY;
	conn_send(c);
	if (++sl->adds_sent == sl->nconns)
		sl->t_bar_sent = mono_ns();
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct sl	*sl = arg;

	event_base_loopbreak(sl->base);
}

/*
 * Writes every value key (and zeroes nothing else: counters start
 * missing, which ADD treats as 0) so GETs never miss: the reference
 * server drops a connection that GETs a missing key.
 */
static void
sl_populate(struct sl *sl)
{
	struct rdzv_client	*cl;
	struct evbuffer		*out;
	char			 hp[300], key[4096];
	uint8_t			 reply[12];
	size_t			 i, got, want;
	ssize_t			 n;
	int			 fd, rv;

	if (sl->proto == SL_NATIVE) {
		(void)hostport_join(hp, sizeof hp, sl->host, atoi(sl->port));
		if ((cl = rdzv_client_connect(hp, 10000, &rv)) == NULL)
			errx(1, "connect %s: %s", hp, rdzv_strerror(rv));
		for (i = 0; i < sl->nkeys; i++) {
			memcpy(key, vkey(sl, i), sl->key_size);
			key[sl->key_size] = '\0';
			rv = rdzv_client_set(cl, key, sl->value, sl->value_size,
			    10000);
			if (rv != 0)
				errx(1, "populate: set: %s", rdzv_strerror(rv));
		}
		rdzv_client_close(cl);
		return;
	}

	/* TCPStore: all SETs then one GETNUMKEYS, whose reply means "all
	 * done" (2.x: after VALIDATE and a PING, whose echo comes first). */
	fd = socket(sl->ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC,
	    sl->ai->ai_protocol);
	if (fd == -1 || connect(fd, sl->ai->ai_addr, sl->ai->ai_addrlen) == -1)
		err(1, "populate: connect %s:%s", sl->host, sl->port);
	if ((out = evbuffer_new()) == NULL)
		errx(1, "out of memory");
	if (sl->proto == SL_TCPS2)
		t2_hello(out);
	for (i = 0; i < sl->nkeys; i++) {
		out_u8(out, tcps_code(sl->proto)[OP_SET]);
		out_bytes(out, vkey(sl, i), sl->key_size);
		out_bytes(out, sl->value, sl->value_size);
		if (evbuffer_get_length(out) > 65536 || i == sl->nkeys - 1) {
			if (i == sl->nkeys - 1)
				out_u8(out, tcps_code(sl->proto)[OP_NUMKEYS]);
			while (evbuffer_get_length(out) > 0)
				if (evbuffer_write(out, fd) < 0)
					err(1, "populate: send");
		}
	}
	want = sl->proto == SL_TCPS2 ? 12 : 8;	/* 2.x: the PING echo too */
	for (got = 0; got < want; got += (size_t)n)
		if ((n = read(fd, reply + got, want - got)) <= 0)
			errx(1, "populate: no reply from the server");
	evbuffer_free(out);
	close(fd);
}

/* Builds the key tables: "k" or "c", then the index zero-padded. */
static void
sl_make_keys(struct sl *sl)
{
	size_t	i, digits;
	char	tmp[32];

	digits = (size_t)snprintf(tmp, sizeof tmp, "%zu", sl->nkeys - 1);
	if (sl->key_size < digits + 1 || sl->key_size > 4000)
		errx(1, "--key-size must be %zu to 4000 for %zu keys",
		    digits + 1, sl->nkeys);
	if (sl->nkeys > SIZE_MAX / sl->key_size)
		errx(1, "too many keys");
	sl->vkeys = malloc(sl->nkeys * sl->key_size + 1);
	sl->ckeys = malloc(sl->nkeys * sl->key_size + 1);
	sl->value = malloc(sl->value_size + 1);
	if (sl->vkeys == NULL || sl->ckeys == NULL || sl->value == NULL)
		errx(1, "out of memory");
	for (i = 0; i < sl->nkeys; i++) {
		snprintf(sl->vkeys + i * sl->key_size, sl->key_size + 1,
		    "k%0*zu", (int)(sl->key_size - 1), i);
		snprintf(sl->ckeys + i * sl->key_size, sl->key_size + 1,
		    "c%0*zu", (int)(sl->key_size - 1), i);
	}
	memset(sl->value, 'v', sl->value_size);
}

static void
sl_parse_mix(struct sl *sl, const char *arg)
{
	char		*copy, *tok, *next, *eq;
	const char	*errstr;
	int		 op;

	if (strlcpy(sl->mixstr, arg, sizeof sl->mixstr) >= sizeof sl->mixstr)
		errx(1, "--mix too long");
	memset(sl->weight, 0, sizeof sl->weight);
	if ((copy = strdup(arg)) == NULL)
		errx(1, "out of memory");
	for (next = copy; (tok = strsep(&next, ",")) != NULL;) {
		if ((eq = strchr(tok, '=')) == NULL)
			errx(1, "--mix: \"%s\" is not op=weight", tok);
		*eq++ = '\0';
		for (op = 0; op < OP_COUNT; op++)
			if (strcmp(tok, sl_op_names[op]) == 0)
				break;
		if (op == OP_COUNT)
			errx(1, "--mix: unknown op \"%s\" (set, get, add, "
			    "wait, check, cas, numkeys)", tok);
		sl->weight[op] = (unsigned)strtonum(eq, 0, 1000000, &errstr);
		if (errstr != NULL)
			errx(1, "--mix: weight of %s is %s", tok, errstr);
	}
	free(copy);
	sl->wsum = 0;
	for (op = 0; op < OP_COUNT; op++)
		sl->wsum += sl->weight[op];
	if (sl->wsum == 0)
		errx(1, "--mix: all weights are 0");
}

/* Raises RLIMIT_NOFILE to the hard limit; fails if that is too low. */
static void
sl_raise_nofile(size_t need)
{
	struct rlimit	rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
		err(1, "getrlimit");
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == -1)
			err(1, "setrlimit");
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
		errx(1, "%zu connections need %zu descriptors but the hard "
		    "limit is %llu: raise it (ulimit -Hn, limits.conf)",
		    need - SL_FD_SPARE, need, (unsigned long long)rl.rlim_max);
}

static double
arg_seconds(const char *opt, const char *s)
{
	char	*end;
	double	 v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || v < 0 || v > 86400)
		errx(1, "%s: bad number of seconds \"%s\"", opt, s);
	return (v);
}

static size_t
arg_count(const char *opt, const char *s, long long min, long long max)
{
	const char	*errstr;
	long long	 v;

	v = strtonum(s, min, max, &errstr);
	if (errstr != NULL)
		errx(1, "%s is %s: \"%s\"", opt, errstr, s);
	return ((size_t)v);
}

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr,
"usage: storeload [--proto tcpstore113|tcpstore2|native] [--host H] --port P\n"
"                 [--conns K] [--duration S] [--warmup S]\n"
"                 [--mix set=40,get=40,add=15,wait=5] [--key-size N]\n"
"                 [--value-size N] [--keys N]\n"
"       storeload --barrier N [--proto P] [--host H] --port P [--timeout S]\n"
"                 [--connect ready|seq|burst] [--sources K]\n"
"       storeload --idle N [--proto P] [--host H] --port P [--hold S]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static const struct option	 longopts[] = {
		{ "proto",	required_argument, NULL, 'P' },
		{ "host",	required_argument, NULL, 'h' },
		{ "port",	required_argument, NULL, 'p' },
		{ "conns",	required_argument, NULL, 'c' },
		{ "duration",	required_argument, NULL, 'd' },
		{ "warmup",	required_argument, NULL, 'w' },
		{ "mix",	required_argument, NULL, 'm' },
		{ "key-size",	required_argument, NULL, 'K' },
		{ "value-size",	required_argument, NULL, 'V' },
		{ "keys",	required_argument, NULL, 'n' },
		{ "barrier",	required_argument, NULL, 'b' },
		{ "idle",	required_argument, NULL, 'i' },
		{ "hold",	required_argument, NULL, 'H' },
		{ "timeout",	required_argument, NULL, 't' },
		{ "connect",	required_argument, NULL, 'C' },
		{ "sources",	required_argument, NULL, 'S' },
		{ NULL,		0,		   NULL, 0 }
	};
	struct sl		*sl;
	struct addrinfo		 hints;
	struct event		*sigint, *sigterm;
	struct timeval		 tv;
	double			 secs;
	size_t			 i, nbar = 0, nidle = 0;
	int			 ch, rv, op;
	char			 buf[64];

	if ((sl = calloc(1, sizeof *sl)) == NULL)
		err(1, "calloc");
	sl->proto = SL_TCPS113;
	sl->mode = SL_LOAD;
	sl->host = "127.0.0.1";
	sl->nconns = 16;
	sl->duration = 5;
	sl->warmup = 1;
	sl->hold = -1;
	sl->timeout = 120;
	sl->key_size = 16;
	sl->value_size = 64;
	sl->nkeys = 1000;
	sl_parse_mix(sl, "set=40,get=40,add=15,wait=5");

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'P':
			for (i = 0; i < 3; i++)
				if (strcmp(optarg, sl_proto_names[i]) == 0)
					break;
			if (i == 3)
				errx(1, "--proto: tcpstore113, tcpstore2 or "
				    "native");
			sl->proto = (enum sl_proto)i;
			break;
		case 'C':
			for (i = 0; i < 3; i++)
				if (strcmp(optarg, sl_connect_names[i]) == 0)
					break;
			if (i == 3)
				errx(1, "--connect: ready, seq or burst");
			sl->connect = (enum sl_connect)i;
			break;
		case 'S':
			sl->nsources = arg_count("--sources", optarg, 1, 254);
			break;
		case 'h':
			sl->host = optarg;
			break;
		case 'p':
			sl->port = optarg;
			(void)arg_count("--port", optarg, 1, 65535);
			break;
		case 'c':
			sl->nconns = arg_count("--conns", optarg, 1, 1000000);
			break;
		case 'd':
			sl->duration = arg_seconds("--duration", optarg);
			break;
		case 'w':
			sl->warmup = arg_seconds("--warmup", optarg);
			break;
		case 'm':
			sl_parse_mix(sl, optarg);
			break;
		case 'K':
			sl->key_size = arg_count("--key-size", optarg, 1, 4000);
			break;
		case 'V':
			sl->value_size = arg_count("--value-size", optarg, 0,
			    1 << 30);
			break;
		case 'n':
			sl->nkeys = arg_count("--keys", optarg, 1, 100000000);
			break;
		case 'b':
			nbar = arg_count("--barrier", optarg, 1, 1000000);
			break;
		case 'i':
			nidle = arg_count("--idle", optarg, 1, 1000000);
			break;
		case 'H':
			sl->hold = arg_seconds("--hold", optarg);
			break;
		case 't':
			sl->timeout = arg_seconds("--timeout", optarg);
			break;
		default:
			usage();
		}
	}
	if (optind != argc || sl->port == NULL || (nbar && nidle))
		usage();
	if (nbar) {
		sl->mode = SL_BARRIER;
		sl->nconns = nbar;
	} else if (nidle) {
		sl->mode = SL_IDLE;
		sl->nconns = nidle;
	}
	if (sl->mode == SL_LOAD && sl->proto != SL_NATIVE &&
	    sl->weight[OP_SET] == sl->wsum)
		errx(1, "--mix: a TCPStore SET has no reply; add an op that "
		    "has");
	if (sl->mode == SL_LOAD && sl->duration <= 0)
		errx(1, "--duration must be > 0");

	signal(SIGPIPE, SIG_IGN);
	sl_raise_nofile(sl->nconns + SL_FD_SPARE);
	wire_limits_default(&sl->lim);
	sl->lim.value_max = (size_t)1 << 30;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if ((rv = getaddrinfo(sl->host, sl->port, &hints, &sl->ai)) != 0)
		errx(1, "%s: %s", sl->host, gai_strerror(rv));
	if (sl->nsources > 0 && sl->ai->ai_family != AF_INET)
		errx(1, "--sources needs an IPv4 --host");

	if ((sl->base = event_base_new()) == NULL)
		errx(1, "event_base_new failed");
	if ((sl->conns = calloc(sl->nconns, sizeof *sl->conns)) == NULL)
		errx(1, "out of memory");
	for (i = 0; i < sl->nconns; i++) {
		sl->conns[i].fd = -1;
		sl->conns[i].rng = 0x9E3779B97F4A7C15ULL * (i + 1) ^
		    (uint64_t)getpid();
	}
	sigint = evsignal_new(sl->base, SIGINT, signal_cb, sl);
	sigterm = evsignal_new(sl->base, SIGTERM, signal_cb, sl);
	if (sigint == NULL || sigterm == NULL || event_add(sigint, NULL) ||
	    event_add(sigterm, NULL))
		errx(1, "signal events failed");

	if (sl->mode == SL_LOAD) {
		sl_make_keys(sl);
		sl_populate(sl);
	}
	if (sl->mode == SL_BARRIER) {
		snprintf(sl->bar_count, sizeof sl->bar_count,
		    "storeload/barrier/%ld.%" PRIu64 "/count", (long)getpid(),
		    mono_ns());
		snprintf(sl->bar_done, sizeof sl->bar_done,
		    "storeload/barrier/%ld.%" PRIu64 "/done", (long)getpid(),
		    mono_ns());
		sl->value_size = 1;
		if ((sl->value = malloc(1)) == NULL)
			errx(1, "out of memory");
		sl->value[0] = '1';
	}

	if (sl->mode == SL_BARRIER) {
		tv = tv_of(sl->timeout);
		event_base_once(sl->base, -1, EV_TIMEOUT, loop_break_cb, sl,
		    &tv);
		/* With --connect seq or burst the connects are timed too. */
		sl->t_bar_start = mono_ns();
	}
	sl_connect_more(sl);
	event_base_dispatch(sl->base);

	switch (sl->mode) {
	case SL_LOAD:
		if (!sl->stopping)
			errx(1, "interrupted");
		/* Replies still in flight get a bounded time to come back. */
		if (sl->busy > 0) {
			tv = tv_of(SL_DRAIN_SECONDS);
			event_base_once(sl->base, -1, EV_TIMEOUT, loop_break_cb,
			    sl, &tv);
			event_base_dispatch(sl->base);
		}
		secs = (double)(sl->t_rec_end - sl->t_rec_start) / 1e9;
		printf("proto=%s conns=%zu mix=%s key_size=%zu value_size=%zu "
		    "keys=%zu duration_s=%.3f ops=%" PRIu64 " ops_per_s=%.0f "
		    "lat_ops=%" PRIu64 " p50_us=%.1f p99_us=%.1f "
		    "p999_us=%.1f max_us=%.1f total_ops=%" PRIu64
		    " client_cpu_s=%.3f",
		    sl_proto_names[sl->proto], sl->nconns, sl->mixstr, sl->key_size, sl->value_size,
		    sl->nkeys, secs, sl->ops, (double)sl->ops / secs,
		    sl->lat_ops, hist_quantile(sl, 0.50),
		    hist_quantile(sl, 0.99), hist_quantile(sl, 0.999),
		    (double)sl->lat_max / 1000.0, sl->all_ops, cpu_seconds());
		for (op = 0; op < OP_COUNT; op++)
			if (sl->weight[op] > 0) {
				snprintf(buf, sizeof buf, " %s=%" PRIu64,
				    sl_op_names[op], sl->op_count[op]);
				fputs(buf, stdout);
			}
		fputs(sl->busy > 0 ? " unanswered=1\n" : "\n", stdout);
		return (sl->busy > 0 ? 1 : 0);
	case SL_BARRIER:
		if (!sl->finished) {
			printf("barrier n=%zu seconds=timeout released=%zu "
			    "proto=%s connect=%s\n", sl->nconns, sl->released,
			    sl_proto_names[sl->proto],
			    sl_connect_names[sl->connect]);
			return (1);
		}
		printf("barrier n=%zu seconds=%.4f proto=%s connect=%s "
		    "sources=%zu adds_sent_s=%.4f last_add_s=%.4f "
		    "client_cpu_s=%.3f\n", sl->nconns,
		    (double)(sl->t_bar_end - sl->t_bar_start) / 1e9,
		    sl_proto_names[sl->proto], sl_connect_names[sl->connect],
		    sl->nsources,
		    (double)(sl->t_bar_sent - sl->t_bar_start) / 1e9,
		    (double)(sl->t_bar_last - sl->t_bar_start) / 1e9,
		    cpu_seconds());
		return (0);
	case SL_IDLE:
		break;
	}
	return (0);
}
