/*
 * repair.c: the messages of the worker <-> agent channel; no I/O.
 *
 * progress.c carries them, one per SOCK_SEQPACKET datagram: ASCII text of
 * at most REPAIR_MSG_MAX bytes, no newline, words separated by single
 * spaces, key=value words after the verb (common/PROTOCOL.md, "Worker <->
 * agent channel").  This file decodes what a worker says (its step,
 * "hello", "ready") and formats what the agent says ("round"), so that the
 * unit test and the fuzzer drive both directly.  A verb or a key=value
 * word this agent does not know is not an error: newer workers may say
 * more.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "rdzv_err.h"

/* The step of a message that is all digits; 0 or RDZV_EPROTO. */
static int
repair_step(const char *w, size_t len, uint64_t *step)
{
	uint64_t	v = 0;
	size_t		i;

	for (i = 0; i < len; i++) {
		if (w[i] < '0' || w[i] > '9')
			return (RDZV_EPROTO);
		/* v * 10 + d <= INT64_MAX, written so that it cannot wrap. */
		if (v > (INT64_MAX - (uint64_t)(w[i] - '0')) / 10)
			return (RDZV_EPROTO);
		v = v * 10 + (uint64_t)(w[i] - '0');
	}
	*step = v;
	return (0);
}

/* Whether the word of len bytes at w is key=value with this key. */
static int
repair_is_key(const char *w, size_t len, const char *key, const char **val,
    size_t *vlen)
{
	size_t	kl = strlen(key);

	if (len <= kl || memcmp(w, key, kl) != 0 || w[kl] != '=')
		return (0);
	*val = w + kl + 1;
	*vlen = len - kl - 1;
	return (1);
}

int
repair_parse(const char *buf, size_t len, struct repair_msg *m)
{
	const char	*w, *end, *val;
	size_t		 i, wl, vl, vbl;

	memset(m, 0, sizeof *m);
	if (len == 0 || len > REPAIR_MSG_MAX)
		return (RDZV_EPROTO);
	for (i = 0; i < len; i++)
		if ((unsigned char)buf[i] < 0x20 ||
		    (unsigned char)buf[i] > 0x7e)
			return (RDZV_EPROTO);
	end = buf + len;
	/* Every word, the verb included, is one or more bytes. */
	for (i = 0; i < len; i++)
		if (buf[i] == ' ' && (i == 0 || i == len - 1 ||
		    buf[i + 1] == ' '))
			return (RDZV_EPROTO);

	for (vbl = 0; vbl < len && buf[vbl] != ' '; vbl++)
		;
	if (buf[0] >= '0' && buf[0] <= '9') {
		if (repair_step(buf, vbl, &m->step) != 0)
			return (RDZV_EPROTO);
		m->verb = REPAIR_MSG_PROGRESS;
	} else if (vbl == 5 && memcmp(buf, "hello", 5) == 0)
		m->verb = REPAIR_MSG_HELLO;
	else if (vbl == 5 && memcmp(buf, "ready", 5) == 0)
		m->verb = REPAIR_MSG_READY;
	else
		m->verb = REPAIR_MSG_UNKNOWN;

	for (w = buf + vbl; w < end; w += wl) {
		w++;		/* the space */
		for (wl = 0; w + wl < end && w[wl] != ' '; wl++)
			;
		if (m->verb == REPAIR_MSG_HELLO &&
		    repair_is_key(w, wl, "repair", &val, &vl))
			m->repair = vl == 1 && val[0] == '1';
		/* Any other word is for a newer agent. */
	}
	return (0);
}

/* Whether s is one non-empty word of printable ASCII. */
static int
repair_word_ok(const char *s)
{
	if (s == NULL || *s == '\0')
		return (0);
	for (; *s != '\0'; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s > 0x7e)
			return (0);
	return (1);
}

int
repair_format_round(char *buf, size_t len, const struct repair_round *r)
{
	const char	*kind;
	int		 n;

	switch (r->kind) {
	case REPAIR_SHRINK:
		kind = "shrink";
		break;
	case REPAIR_GROW:
		kind = "grow";
		break;
	default:
		return (RDZV_EINVAL);
	}
	if (r->round < 0 || r->world < 1 || r->rank < 0 ||
	    r->rank >= r->world || r->donor < 0 || r->donor >= r->world ||
	    r->local_world < 1 || r->local_rank < 0 ||
	    r->local_rank >= r->local_world || r->master_port < 0 ||
	    r->master_port > 65535 || !repair_word_ok(r->ns) ||
	    !repair_word_ok(r->master_addr))
		return (RDZV_EINVAL);
	n = snprintf(buf, len, "round round=%lld kind=%s ns=%s rank=%lld "
	    "world=%lld donor=%lld master_addr=%s master_port=%d "
	    "local_rank=%d local_world=%d", (long long)r->round, kind, r->ns,
	    (long long)r->rank, (long long)r->world, (long long)r->donor,
	    r->master_addr, r->master_port, r->local_rank, r->local_world);
	if (n < 0)
		return (RDZV_EINVAL);
	if ((size_t)n >= len || n > REPAIR_MSG_MAX) {
		if (len > 0)
			buf[0] = '\0';
		return (RDZV_ETOOBIG);
	}
	return (n);
}
