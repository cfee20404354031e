/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.h: pure codecs for every protocol rdzvd speaks.  No I/O, no
 * allocation while decoding: decoders read a contiguous byte range and
 * return pointers into it, so unit tests and fuzzers drive them directly.
 * Encoders append to a libevent evbuffer.
 *
 * Decoder contract (tcps_decode, nat_decode):
 *   returns > 0   a whole message was decoded; the value is the number of
 *                 bytes it used (the caller drains them);
 *   returns 0     the message is incomplete; *need is set to a total byte
 *                 count (> len) that must be buffered before it is worth
 *                 calling again;
 *   returns < 0   an RDZV_E* code: RDZV_EPROTO (malformed or unknown),
 *                 RDZV_ETOOBIG (over a limit in struct wire_limits).  The
 *                 connection must be closed.
 * A decoder never reads outside [buf, buf + len) and never trusts a count
 * from the peer to size anything: lists are validated in place and walked
 * with an iterator.
 */
#ifndef RDZV_WIRE_H
#define RDZV_WIRE_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

/* A byte range owned by someone else. */
struct slice {
	const uint8_t	*p;
	size_t		 len;
};

struct slice	slice_str(const char *);	/* a C string, without its NUL */
int		slice_eq(struct slice, struct slice);	/* same bytes */

/* Limits enforced while decoding; see wire_limits_default(). */
struct wire_limits {
	size_t	key_max;	/* bytes in one key (default 8 KiB) */
	size_t	value_max;	/* bytes in one value (default 8 MiB) */
	size_t	keys_max;	/* keys in one CHECK/WAIT/MULTI_* (131072) */
	size_t	ns_max;		/* bytes in a native namespace (1 KiB) */
};
void	wire_limits_default(struct wire_limits *);

/* ---- PyTorch TCPStore (see shared/reference/tcpstore-wire.md) ---- */

enum tcps_dialect {
	TCPS_UNKNOWN = 0,
	TCPS_V113 = 1,		/* torch 1.13: no handshake */
	TCPS_V2 = 2,		/* torch 2.x: VALIDATE + PING first */
};

/* Operations, independent of the dialect's numbering. */
enum tcps_op {
	TCPS_VALIDATE = 1,	/* u32: magic */
	TCPS_SET,		/* key, v1 */
	TCPS_COMPARE_SET,	/* key, v1 = expected, v2 = desired */
	TCPS_GET,		/* key */
	TCPS_ADD,		/* key, num = delta */
	TCPS_CHECK,		/* list: nkeys keys */
	TCPS_WAIT,		/* list: nkeys keys */
	TCPS_GETNUMKEYS,	/* - */
	TCPS_WATCH_KEY,		/* key (1.13 only) */
	TCPS_DELETE_KEY,	/* key */
	TCPS_APPEND,		/* key, v1 (2.x) */
	TCPS_MULTI_GET,		/* list: nkeys keys (2.x) */
	TCPS_MULTI_SET,		/* list: nkeys (key, value) pairs (2.x) */
	TCPS_CANCEL_WAIT,	/* - (2.x) */
	TCPS_PING,		/* u32: nonce (2.x) */
	TCPS_QUEUE_PUSH,	/* key, v1 (2.x) */
	TCPS_QUEUE_POP,		/* key (2.x) */
	TCPS_QUEUE_LEN,		/* key (2.x) */
	TCPS_LIST_KEYS,		/* - (2.x) */
	TCPS_BARRIER,		/* key, num = world size (2.x) */
};

#define TCPS_V2_MAGIC		0x3C85F7CEu
/* Reply bytes. */
#define TCPS_READY		0
#define TCPS_NOT_READY		1
#define TCPS_STOP_WAITING	0
#define TCPS_WAIT_CANCELED	1
#define TCPS_WATCH_REGISTERED	3
/* WATCH_KEY push kinds (1.13). */
#define TCPS_WATCH_UPDATED	0
#define TCPS_WATCH_CREATED	1
#define TCPS_WATCH_DELETED	2

struct tcps_req {
	enum tcps_op	op;
	struct slice	key;
	struct slice	v1;
	struct slice	v2;
	int64_t		num;
	uint32_t	u32;
	size_t		nkeys;	/* entries in list (pairs for MULTI_SET) */
	struct slice	list;	/* the encoded entries, walk with tcps_list_next */
};

/*
 * Decodes one request of the given dialect from buf (see the contract
 * above).  On success *req points into buf.
 */
int	tcps_decode(enum tcps_dialect, const uint8_t *buf, size_t len,
	    const struct wire_limits *, struct tcps_req *req, size_t *need);

/*
 * Looks at a connection's first bytes and names its dialect: returns
 * TCPS_V2 for 00 CE F7 85 3C, TCPS_V113 for any other start that cannot
 * be a native or 2.x client, and TCPS_UNKNOWN when len is too short to
 * tell (fewer than 5 bytes that are a prefix of the 2.x or native magic).
 * *native is set to 1 (and TCPS_UNKNOWN returned) when the bytes are the
 * native preamble magic "RDZV".
 */
enum tcps_dialect	tcps_sniff(const uint8_t *buf, size_t len, int *native);

/* Iterates a validated list: sets *key (and *val for MULTI_SET, else
 * val may be NULL).  Returns 1 while entries remain, 0 at the end. */
struct tcps_iter {
	const uint8_t	*p;
	size_t		 left;
	size_t		 n;
};
void	tcps_iter_init(struct tcps_iter *, const struct tcps_req *);
int	tcps_list_next(struct tcps_iter *, struct slice *key, struct slice *val);

/* Reply encoders: append to out.  Return 0 or -1 (allocation). */
int	tcps_put_u8(struct evbuffer *out, uint8_t);
int	tcps_put_i64(struct evbuffer *out, int64_t);
int	tcps_put_u32(struct evbuffer *out, uint32_t);
int	tcps_put_bytes(struct evbuffer *out, const void *, size_t); /* u64 len + bytes */
/* A 1.13 WATCH_KEY push: u8 kind, key, old, new. */
int	tcps_put_watch(struct evbuffer *out, uint8_t kind, struct slice key,
	    struct slice oldv, struct slice newv);

/* ---- the native rdzv protocol (specified in common/PROTOCOL.md) ---- */

#define NAT_MAGIC	"RDZV"
#define NAT_VERSION	1
#define NAT_PREAMBLE_LEN 8	/* "RDZV" u8 version, 3 zero bytes */
#define NAT_HDR_LEN	12	/* u32 len, u16 op, u16 flags, u32 id */

/* Frame flags. */
#define NAT_F_REPLY	0x0001	/* answer to request id */
#define NAT_F_ERROR	0x0002	/* with REPLY: payload is (i code, b message) */
#define NAT_F_PUSH	0x0004	/* server-initiated, id 0 */

/* Field tags inside a payload. */
#define NAT_T_I64	'i'	/* 8 bytes, little-endian two's complement */
#define NAT_T_BYTES	'b'	/* u32 length + bytes */

enum nat_op {
	NAT_OP_PING = 1,	/* b data -> b data */
	NAT_OP_SET = 2,		/* b ns, b key, b value -> - */
	NAT_OP_GET = 3,		/* b ns, b key -> b value | ENOTFOUND */
	NAT_OP_ADD = 4,		/* b ns, b key, i delta -> i value */
	NAT_OP_CAS = 5,		/* b ns, b key, b expected, b desired -> b now */
	NAT_OP_WAIT = 6,	/* b ns, i timeout_ms (<0 forever), i n, n*b key -> - */
	NAT_OP_CHECK = 7,	/* b ns, i n, n*b key -> i ready (0/1) */
	NAT_OP_DELETE = 8,	/* b ns, b key -> i deleted (0/1) */
	NAT_OP_NUM_KEYS = 9,	/* b ns -> i count */
	NAT_OP_APPEND = 10,	/* b ns, b key, b value -> - */
	NAT_OP_MULTI_GET = 11,	/* b ns, i n, n*b key -> n*b value | ENOTFOUND */
	NAT_OP_MULTI_SET = 12,	/* b ns, i n, n*(b key, b value) -> - */
	NAT_OP_QUEUE_PUSH = 13,	/* b ns, b key, b value -> - */
	NAT_OP_QUEUE_POP = 14,	/* b ns, b key, i timeout_ms -> b value | ETIMEDOUT */
	NAT_OP_QUEUE_LEN = 15,	/* b ns, b key -> i length */
	NAT_OP_LIST_KEYS = 16,	/* b ns -> i n, n*b key */
	NAT_OP_BARRIER = 17,	/* b ns, b key, i world, i timeout_ms -> - */
	NAT_OP_CANCEL = 18,	/* i request id -> - (that wait replies ECANCELED) */
	NAT_OP_WATCH = 19,	/* b ns, b key -> -; then WATCH_EVENT pushes */
	NAT_OP_WATCH_EVENT = 20,/* push: b ns, b key, i kind, b old, b new */

	/* Rendezvous (agents); see common/PROTOCOL.md "Rendezvous". */
	NAT_OP_JOIN = 21,	/* b job, b instance, b host, b addr, i pid,
				 * i local_world_size, i min_nodes, i max_nodes,
				 * i max_restarts, i last_call_ms, i lease_ms
				 * [, i node_rank: the group rank wanted, -1
				 * none [, i max_repairs, i repair_timeout_ms
				 * [, i straggler_ratio_pm, i straggler_window_ms,
				 * i straggler_action]]]
				 * -> i node_id, i restart_count, i lease_ms
				 *    (the job's) | ECLOSED */
	NAT_OP_HEARTBEAT = 22,	/* b job, i node_id [, i repairable
				 * [, i unjoined [, i stepped]]]
				 * -> i round | ENOTFOUND */
	NAT_OP_LEAVE = 23,	/* b job, i node_id -> - */
	NAT_OP_FAILURE = 24,	/* b job, i node_id, i round, i local_rank,
				 * i rank, i exit_code, i signal, b message
				 * [, i repair: the agent respawns it] -> - */
	NAT_OP_SUCCEEDED = 25,	/* b job, i node_id, i round [, i unjoined]
				 * -> - */
	NAT_OP_ROUND = 26,	/* push: b job, i round, i state (enum
				 * rdzv_round_state), i node_id, i group_rank,
				 * i group_world_size, i world_size, i rank_base,
				 * i restart_count, i max_restarts, b store_ns,
				 * i store_port, b message [, i kind (enum
				 * nat_round_kind), i donor, i live_local] */
	NAT_OP_JOB_STATUS = 27,	/* b job -> b text (one line per member) */

	/* Operators (rdzvctl); replies are JSON documents, see PROTOCOL.md. */
	NAT_OP_ADMIN_STATUS = 28, /* - -> b json {version, uptime_s, ...} */
	NAT_OP_ADMIN_JOBS = 29,	/* - -> b json [job, ...] */
	NAT_OP_ADMIN_JOB = 30,	/* b job -> b json {job + members} | ENOTFOUND */
	NAT_OP_ADMIN_EVENTS = 31, /* b job, i after_seq, i timeout_ms
				 * -> b json [event, ...] (waits up to
				 * timeout_ms for one past after_seq) */
	NAT_OP_ADMIN_CLOSE = 32, /* b job, b reason -> - (job FAILED) */
	NAT_OP_ADMIN_EVICT = 33, /* b job, i node_id [, i now]
				 * -> [b how] ("leave": asked to leave at a
				 * step boundary, "now": dropped now) */

	/* Authentication (PROTOCOL.md "Authentication"). */
	NAT_OP_AUTH_CHALLENGE = 34, /* push: b server_nonce (32 bytes) */
	NAT_OP_AUTH = 35,	/* b client_nonce (32), b mac (32) [, b job:
				 * the MACs are the job credential's]
				 * -> b server_mac (32) | EAUTH + close */
	/* Repair (PROTOCOL.md "Repair rounds"). */
	NAT_OP_READY = 36,	/* b job, i node_id, i round, i local_rank
				 * -> - (that local rank's replacement is up) */
	NAT_OP_STRAGGLER = 37,	/* push: b job, i node_id, i round,
				 * i local_rank, b message (kill that worker:
				 * the job repairs around it) */
	NAT_OP_DRAIN = 38,	/* push: as STRAGGLER, local_rank -1 (the
				 * whole node leaves at its workers' next step
				 * boundary, then sends LEAVE) */
	NAT_OP_ADMIN_FORGET = 39, /* b job -> - | ENOTFOUND | EBUSY (not
				 * closed): the closed job forgotten, its
				 * id free again */
	NAT_OP_MAX = 39,
};

/* Preamble flags (byte 5 of the server's preamble). */
#define NAT_PRE_AUTH	0x01	/* a token is required: a challenge follows */
#define NAT_PRE_TLS	0x02	/* refusal (version 0): TLS is required */
#define NAT_NONCE_LEN	32
#define NAT_MAC_LEN	32	/* HMAC-SHA256 */
#define NAT_AUTH_CLIENT_TAG	"rdzv-auth-v1 client"
#define NAT_AUTH_SERVER_TAG	"rdzv-auth-v1 server"

/* The state a ROUND push gives its node. */
enum rdzv_round_state {
	RDZV_ROUND_RUNNING = 1,	/* member of this round: (re)start workers */
	RDZV_ROUND_STANDBY = 2,	/* beyond max nodes: wait, workers stopped */
	RDZV_ROUND_STOP = 3,	/* round ended: stop workers, next push follows */
	RDZV_ROUND_DONE = 4,	/* every member succeeded: job closed, exit 0 */
	RDZV_ROUND_FAILED = 5,	/* restarts exhausted or job closed: exit 1;
				 * message names the first failure */
};

/* What kind of RUNNING round a ROUND push gives (a repair round's
 * workers are not restarted: the agent passes the round to them). */
enum nat_round_kind {
	NAT_KIND_NORMAL = 0,	/* a round formed anew: (re)start workers */
	NAT_KIND_SHRINK = 1,	/* a worker died: survivors go on without it */
	NAT_KIND_GROW = 2,	/* its replacement joins; the donor sends */
};

/* A decoded frame; payload points into the caller's buffer. */
struct nat_msg {
	uint16_t	op;
	uint16_t	flags;
	uint32_t	id;
	struct slice	payload;
};

/* Largest frame body the limits allow (for MULTI_SET of keys_max pairs
 * this is large; frames above frame_max(lim) are ETOOBIG). */
size_t	nat_frame_max(const struct wire_limits *);

/*
 * Checks a preamble: returns NAT_PREAMBLE_LEN when buf holds a valid one
 * (sets *version), 0 with *need when short, RDZV_EPROTO when it is not a
 * native preamble, RDZV_EVERSION for an unsupported version.
 */
int	nat_preamble_decode(const uint8_t *buf, size_t len, uint8_t *version,
	    size_t *need);
int	nat_preamble_put(struct evbuffer *out, uint8_t version);
/* The server's preamble: version and NAT_PRE_* flags in byte 5. */
int	nat_preamble_put_flags(struct evbuffer *out, uint8_t version,
	    uint8_t flags);

/*
 * The MACs of the challenge-response: HMAC-SHA256 keyed by the token over
 * tag || first nonce || second nonce.  The client proves itself with
 * NAT_AUTH_CLIENT_TAG over (server nonce, client nonce); the server
 * answers with NAT_AUTH_SERVER_TAG over (client nonce, server nonce).
 * Returns 0, or -1 if OpenSSL fails.  nat_mac_equal compares in constant
 * time.
 */
int	nat_auth_mac(const void *token, size_t tokenlen, const char *tag,
	    const uint8_t first[NAT_NONCE_LEN],
	    const uint8_t second[NAT_NONCE_LEN], uint8_t mac[NAT_MAC_LEN]);
int	nat_mac_equal(const uint8_t a[NAT_MAC_LEN], const uint8_t b[NAT_MAC_LEN]);

/* Decodes one frame (contract above); checks header sanity only. */
int	nat_decode(const uint8_t *buf, size_t len, const struct wire_limits *,
	    struct nat_msg *msg, size_t *need);

/*
 * Payload reader: each get checks the tag and bounds and returns 0 or
 * RDZV_EPROTO; nat_rd_end() returns RDZV_EPROTO unless every byte was
 * consumed (payload lengths are checked exactly).
 */
struct nat_rd {
	const uint8_t	*p;
	size_t		 left;
};
void	nat_rd_init(struct nat_rd *, struct slice payload);
int	nat_get_i64(struct nat_rd *, int64_t *);
int	nat_get_bytes(struct nat_rd *, struct slice *);
int	nat_rd_end(const struct nat_rd *);

/*
 * Frame writer: nat_frame_begin() starts a frame, puts add fields and
 * nat_frame_end() sets its length and finishes the frame on out, at a cost
 * that does not grow with what out queues already.  A frame up to
 * NAT_WR_STAGE bytes is assembled inside the writer and appended whole by
 * nat_frame_end(); a larger one goes onto out as it is written when out
 * queues little (64 KiB), else into an evbuffer of its own that
 * nat_frame_end() moves onto out.  All return 0 or -1 (allocation); after
 * a failure out may hold part of a frame larger than the stage, so the
 * connection must be closed.  Every nat_frame_begin() must be followed by
 * nat_frame_end(), which releases what the writer holds, and nothing else
 * may be appended to out in between.
 */
#define NAT_WR_STAGE	512
struct nat_wr {
	struct evbuffer	*out;
	size_t		 start;	/* offset of the frame in out */
	struct evbuffer	*body;	/* the frame so far, when in its own buffer */
	size_t		 used;	/* bytes in stage; 0 once straight on out */
	int		 failed;	/* or ended */
	uint8_t		 stage[NAT_WR_STAGE];
};
int	nat_frame_begin(struct nat_wr *, struct evbuffer *out, uint16_t op,
	    uint16_t flags, uint32_t id);
int	nat_put_i64(struct nat_wr *, int64_t);
int	nat_put_bytes(struct nat_wr *, const void *, size_t);
/* Appends fields the caller encoded already (a relayed payload). */
int	nat_put_raw(struct nat_wr *, const void *, size_t);
int	nat_frame_end(struct nat_wr *);
/* A whole error reply: flags REPLY|ERROR, payload (i code, b message). */
int	nat_put_error(struct evbuffer *out, uint16_t op, uint32_t id, int code,
	    const char *message);

/*
 * The rendezvous messages (PROTOCOL.md "Rendezvous"), each with its
 * encoder and decoder.  A decoder reads a whole payload (the fields in
 * enum nat_op's order, nothing after them) and returns 0 or RDZV_EPROTO;
 * its slices point into the payload.  An encoder appends a whole frame
 * to out and returns 0 or -1 (allocation).
 */
struct nat_join {
	struct slice	job, instance, host, addr;
	int64_t		pid, local_world_size;
	int64_t		min_nodes, max_nodes, max_restarts;
	int64_t		last_call_ms, lease_ms;	/* < 0: defaults */
	int64_t		rank;	/* the group rank wanted (static), or -1:
				 * encoded only when >= 0 or a field
				 * below is */
	int64_t		max_repairs;	/* < 0: rdzvd's default */
	int64_t		repair_timeout_ms;	/* < 0: rdzvd's default */
	/* Stragglers (PROTOCOL.md "Stragglers"), < 0: rdzvd's defaults;
	 * encoded only when one is >= 0: */
	int64_t		straggler_ratio_pm;	/* of the median, per mille */
	int64_t		straggler_window_ms;
	int64_t		straggler_action;	/* enum nat_straggler_action */
	int64_t		replicas;	/* replica groups; < 1: none */
};
enum nat_straggler_action { NAT_STRAGGLER_OFF = 0, NAT_STRAGGLER_REPLACE = 1 };
int	nat_join_decode(struct slice payload, struct nat_join *);
int	nat_join_put(struct evbuffer *out, uint32_t id,
	    const struct nat_join *);

/* JOIN's reply. */
struct nat_joined {
	int64_t		node_id, restart_count, lease_ms;
};
int	nat_joined_decode(struct slice payload, struct nat_joined *);
int	nat_joined_put(struct evbuffer *out, uint32_t id,
	    const struct nat_joined *);

struct nat_failure {
	struct slice	job;
	int64_t		node_id, round, local_rank, rank, exit_code, signo;
	struct slice	message;
	int64_t		repair;		/* 1: the agent respawns local_rank
					 * (encoded only when 1) */
};
int	nat_failure_decode(struct slice payload, struct nat_failure *);
int	nat_failure_put(struct evbuffer *out, uint32_t id,
	    const struct nat_failure *);

/* A ROUND push: what one node is told of its job's round. */
struct nat_round {
	struct slice	job;
	int64_t		round;
	int64_t		state;		/* enum rdzv_round_state */
	int64_t		node_id;
	int64_t		group_rank;
	int64_t		group_world_size;
	int64_t		world_size;
	int64_t		rank_base;
	int64_t		restart_count;
	int64_t		max_restarts;
	struct slice	store_ns;
	int64_t		store_port;
	struct slice	message;
	/* Trailing, encoded only for a repair round (kind != NORMAL), so an
	 * older agent decodes every other push: */
	int64_t		kind;		/* enum nat_round_kind */
	int64_t		donor;		/* global rank holding the state */
	int64_t		live_local;	/* bit l: local rank l is live */
};
int	nat_round_decode(struct slice payload, struct nat_round *);
int	nat_round_put(struct evbuffer *out, const struct nat_round *);

/* READY: a replacement for local_rank on node_id is up (a repair). */
struct nat_ready {
	struct slice	job;
	int64_t		node_id, round, local_rank;
};
int	nat_ready_decode(struct slice payload, struct nat_ready *);
int	nat_ready_put(struct evbuffer *out, uint32_t id,
	    const struct nat_ready *);

/* STRAGGLER push: local_rank of node_id straggles in round; its agent
 * kills it (the job repairs around it as around any failure).  DRAIN
 * push, the same fields (local_rank -1): node_id leaves on purpose. */
struct nat_straggler {
	struct slice	job;
	int64_t		node_id, round, local_rank;
	struct slice	message;
};
int	nat_straggler_decode(struct slice payload, struct nat_straggler *);
/* op: NAT_OP_STRAGGLER or NAT_OP_DRAIN. */
int	nat_straggler_put(struct evbuffer *out, uint16_t op,
	    const struct nat_straggler *);

#endif /* RDZV_WIRE_H */
