/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chan.h: the messages of the worker <-> agent channel (common/PROTOCOL.md
 * "Worker <-> agent channel"), decoded and encoded in one place for both
 * ends: rdzv-agent (agent/progress.c) and librdzvworker (libworker/
 * repair.c, comm.c).  chan_parse and chan_format are pure (no I/O, no
 * state); chan_recv (chan_recv.c) is the one read both ends share.
 */
#ifndef RDZV_CHAN_H
#define RDZV_CHAN_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

#include "hostport.h"

#define RDZV_CHAN_MSG_MAX	512	/* bytes of one message, either way */
#define RDZV_CHAN_NUM_MAX	20	/* digits of a number (UINT64_MAX's) */

enum chan_verb {
	CHAN_UNKNOWN = 0,	/* a verb this codec does not know: ignored */
	CHAN_PROGRESS,		/* worker: "<digits>", its step */
	CHAN_HELLO,		/* worker: "hello repair=<0|1>" */
	CHAN_READY,		/* worker: "ready", a replacement can join */
	CHAN_ROUND,		/* agent: "round round=R kind=K ..." */
	CHAN_STOP,		/* agent: "stop", the repair failed */
	CHAN_WAIT,		/* worker: "wait", blocked on its peers */
	CHAN_LEAVE,		/* agent: "leave", at the next step boundary */
	CHAN_DONE,		/* worker: "done", its training ended */
};

enum chan_kind {
	CHAN_SHRINK = 1,	/* survivors go on without the dead ranks */
	CHAN_GROW = 2,		/* replacements join; the donor sends */
};

/* One message, either way; only the verb's own fields mean anything. */
struct chan_msg {
	enum chan_verb	 verb;
	uint64_t	 step;			/* PROGRESS: 0..INT64_MAX */
	int		 repair;		/* HELLO: 0 or 1 (default 0) */
	/* ROUND: every field below is required. */
	int		 round;			/* 0..INT_MAX */
	enum chan_kind	 kind;
	char		 ns[RDZV_CHAN_MSG_MAX];	/* the round's store scope */
	int		 rank;			/* 0..world-1 */
	int		 world;			/* 1..INT_MAX */
	int		 donor;			/* 0..world-1 */
	char		 master_addr[RDZV_HOST_MAX]; /* the round's TCPStore */
	int		 master_port;		/* 1..65535 */
	int		 local_rank;		/* 0..local_world-1 */
	int		 local_world;		/* 1..INT_MAX */
};

/*
 * Decodes one datagram of len bytes (no NUL needed) into *m.  Returns 0
 * with m->verb set (CHAN_UNKNOWN for a verb it does not know: the rest
 * of such a message is only held to the byte and space rules; a
 * key=value word a known verb does not use is skipped; of a key given
 * twice the last counts), or RDZV_EPROTO when the message breaks the
 * grammar: empty or over RDZV_CHAN_MSG_MAX bytes; a byte outside
 * printable ASCII (0x20..0x7e); an empty word (a leading, trailing or
 * doubled space); a word after a known verb without '='; a number that
 * is not 1..RDZV_CHAN_NUM_MAX decimal digits or lies outside its
 * field's range (a step over INT64_MAX, repair not 0 or 1, ...); a verb
 * that starts with a digit but is not all digits; a round without one
 * of its fields, with an unknown kind, an empty or too long ns or
 * master_addr, or rank, donor or local_rank not below world or
 * local_world.
 */
int	chan_parse(const char *buf, size_t len, struct chan_msg *m);

/*
 * Formats m as its channel message into buf (len bytes, NUL-terminated),
 * every field of its verb written (a hello always says repair=).
 * Returns the message's length; RDZV_EINVAL when m is one chan_parse
 * would refuse (CHAN_UNKNOWN, a field out of its range, ns or
 * master_addr empty, unterminated, or holding a space or a byte outside
 * printable ASCII); RDZV_ETOOBIG when it would pass RDZV_CHAN_MSG_MAX or
 * len (buf is then "").  What it writes, chan_parse decodes to the same
 * fields.
 */
int	chan_format(char *buf, size_t len, const struct chan_msg *m);

/*
 * Receives one datagram from the channel's SOCK_SEQPACKET socket fd into
 * buf (len bytes), without blocking.  Returns the datagram's whole
 * length (0: an empty datagram, which is a message, not the end; over
 * len: it came cut to len bytes), RDZV_EBUSY when nothing is queued,
 * RDZV_ECONN when the peer's end is closed and nothing but empty
 * datagrams is left, or RDZV_EIO (errno says why).
 */
ssize_t	chan_recv(int fd, char *buf, size_t len);

#endif /* RDZV_CHAN_H */
