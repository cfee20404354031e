/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chan.c: the worker <-> agent channel's messages (common/PROTOCOL.md
 * "Worker <-> agent channel"), decoded and encoded; no I/O.
 *
 * Both ends carry them one per SOCK_SEQPACKET datagram: printable ASCII,
 * at most RDZV_CHAN_MSG_MAX bytes, no newline, words separated by single
 * spaces, key=value words after the verb.  Every verb's fields are in
 * one table, chan_keys[], which chan_parse() reads them by and
 * chan_format() writes them in, so the two cannot drift apart.  A verb or
 * a key this codec does not know is not an error: newer peers may say
 * more.
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "chan.h"
#include "rdzv_err.h"

enum chan_type {
	CHAN_T_INT,		/* decimal digits, lo..hi */
	CHAN_T_KIND,		/* "shrink" or "grow" */
	CHAN_T_WORD,		/* one word of 1 to hi - 1 bytes, hi = size */
};

/* A key=value word of a verb, and where its value lives in chan_msg. */
struct chan_key {
	enum chan_verb	 verb;
	const char	*key;
	enum chan_type	 type;
	size_t		 off;
	long long	 lo, hi;
	int		 required;
};

#define CHAN_OFF(f)	offsetof(struct chan_msg, f)

/* In the order chan_format() writes them. */
static const struct chan_key chan_keys[] = {
	{ CHAN_HELLO, "repair", CHAN_T_INT, CHAN_OFF(repair), 0, 1, 0 },
	{ CHAN_ROUND, "round", CHAN_T_INT, CHAN_OFF(round), 0, INT_MAX, 1 },
	{ CHAN_ROUND, "kind", CHAN_T_KIND, CHAN_OFF(kind), 0, 0, 1 },
	{ CHAN_ROUND, "ns", CHAN_T_WORD, CHAN_OFF(ns), 0,
	    sizeof(((struct chan_msg *)0)->ns), 1 },
	{ CHAN_ROUND, "rank", CHAN_T_INT, CHAN_OFF(rank), 0, INT_MAX - 1, 1 },
	{ CHAN_ROUND, "world", CHAN_T_INT, CHAN_OFF(world), 1, INT_MAX, 1 },
	{ CHAN_ROUND, "donor", CHAN_T_INT, CHAN_OFF(donor), 0, INT_MAX - 1,
	    1 },
	{ CHAN_ROUND, "master_addr", CHAN_T_WORD, CHAN_OFF(master_addr), 0,
	    sizeof(((struct chan_msg *)0)->master_addr), 1 },
	{ CHAN_ROUND, "master_port", CHAN_T_INT, CHAN_OFF(master_port), 1,
	    65535, 1 },
	{ CHAN_ROUND, "local_rank", CHAN_T_INT, CHAN_OFF(local_rank), 0,
	    INT_MAX - 1, 1 },
	{ CHAN_ROUND, "local_world", CHAN_T_INT, CHAN_OFF(local_world), 1,
	    INT_MAX, 1 },
};
#define CHAN_NKEYS	(sizeof chan_keys / sizeof chan_keys[0])

/* The verbs with a name; CHAN_PROGRESS is its digits. */
static const char *const chan_verbs[] = {
	[CHAN_HELLO] = "hello",
	[CHAN_READY] = "ready",
	[CHAN_ROUND] = "round",
	[CHAN_STOP] = "stop",
	[CHAN_WAIT] = "wait",
	[CHAN_LEAVE] = "leave",
	[CHAN_DONE] = "done",
};
#define CHAN_NVERBS	(sizeof chan_verbs / sizeof chan_verbs[0])

static const char *const chan_kinds[] = {
	[CHAN_SHRINK] = "shrink",
	[CHAN_GROW] = "grow",
};

/*
 * The number of len bytes at s if it is 1..RDZV_CHAN_NUM_MAX digits no
 * greater than hi; 0 or RDZV_EPROTO.
 */
static int
chan_num(const char *s, size_t len, uint64_t hi, uint64_t *out)
{
	uint64_t	v = 0, d;
	size_t		i;

	if (len == 0 || len > RDZV_CHAN_NUM_MAX)
		return (RDZV_EPROTO);
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return (RDZV_EPROTO);
		d = (uint64_t)(s[i] - '0');
		/* v * 10 + d <= hi, written so that it cannot wrap. */
		if (d > hi || v > (hi - d) / 10)
			return (RDZV_EPROTO);
		v = v * 10 + d;
	}
	*out = v;
	return (0);
}

/* Whether s (at most size bytes) is one word: 1..size-1 bytes, no space. */
static int
chan_word_ok(const char *s, size_t size)
{
	size_t	i;

	for (i = 0; i < size && s[i] != '\0'; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] > 0x7e)
			return (0);
	return (i > 0 && i < size);
}

/*
 * The next key of m's verb in chan_keys from *i on, its field of m in *f;
 * *i moves past it.  NULL when the verb has no more keys.
 */
static const struct chan_key *
chan_key_next(const struct chan_msg *m, size_t *i, const char **f)
{
	const struct chan_key	*k;

	while (*i < CHAN_NKEYS) {
		k = &chan_keys[(*i)++];
		if (k->verb == m->verb) {
			*f = (const char *)m + k->off;
			return (k);
		}
	}
	return (NULL);
}

/* Whether the fields of m's verb hold what chan_parse() promises. */
static int
chan_fields_ok(const struct chan_msg *m)
{
	const struct chan_key	*k;
	const char		*f;
	size_t			 i;
	int			 v;

	switch (m->verb) {
	case CHAN_PROGRESS:
		return (m->step <= INT64_MAX);
	case CHAN_HELLO:
	case CHAN_READY:
	case CHAN_ROUND:
	case CHAN_STOP:
	case CHAN_WAIT:
	case CHAN_LEAVE:
	case CHAN_DONE:
		break;
	default:
		return (0);
	}
	for (i = 0; (k = chan_key_next(m, &i, &f)) != NULL;) {
		switch (k->type) {
		case CHAN_T_INT:
			memcpy(&v, f, sizeof v);
			if (v < k->lo || v > k->hi)
				return (0);
			break;
		case CHAN_T_KIND:
			if (m->kind != CHAN_SHRINK && m->kind != CHAN_GROW)
				return (0);
			break;
		case CHAN_T_WORD:
			if (!chan_word_ok(f, (size_t)k->hi))
				return (0);
			break;
		}
	}
	if (m->verb == CHAN_ROUND && (m->rank >= m->world ||
	    m->donor >= m->world || m->local_rank >= m->local_world))
		return (0);
	return (1);
}

/* Decodes value v (vl bytes) of key k into m; 0 or RDZV_EPROTO. */
static int
chan_value(const struct chan_key *k, const char *v, size_t vl,
    struct chan_msg *m)
{
	char		*f = (char *)m + k->off;
	uint64_t	 n;
	int		 iv;
	size_t		 i;

	switch (k->type) {
	case CHAN_T_INT:
		if (chan_num(v, vl, (uint64_t)k->hi, &n) != 0 ||
		    n < (uint64_t)k->lo)
			return (RDZV_EPROTO);
		iv = (int)n;
		memcpy(f, &iv, sizeof iv);
		return (0);
	case CHAN_T_KIND:
		for (i = 0; i < sizeof chan_kinds / sizeof chan_kinds[0]; i++)
			if (chan_kinds[i] != NULL &&
			    strlen(chan_kinds[i]) == vl &&
			    memcmp(chan_kinds[i], v, vl) == 0) {
				m->kind = (enum chan_kind)i;
				return (0);
			}
		return (RDZV_EPROTO);
	case CHAN_T_WORD:
		if (vl == 0 || vl >= (size_t)k->hi)
			return (RDZV_EPROTO);
		/* All of it, so that a key given twice leaves no trace. */
		memset(f, 0, (size_t)k->hi);
		memcpy(f, v, vl);
		return (0);
	}
	return (RDZV_EPROTO);
}

/* The verb of the first word (vl bytes at w); CHAN_UNKNOWN if none. */
static enum chan_verb
chan_verb_of(const char *w, size_t vl)
{
	size_t	i;

	if (w[0] >= '0' && w[0] <= '9')
		return (CHAN_PROGRESS);
	for (i = 0; i < CHAN_NVERBS; i++)
		if (chan_verbs[i] != NULL && strlen(chan_verbs[i]) == vl &&
		    memcmp(chan_verbs[i], w, vl) == 0)
			return ((enum chan_verb)i);
	return (CHAN_UNKNOWN);
}

int
chan_parse(const char *buf, size_t len, struct chan_msg *m)
{
	const struct chan_key	*k;
	const char		*w, *eq, *end;
	unsigned		 seen = 0, need = 0;
	size_t			 i, vl, wl;

	memset(m, 0, sizeof *m);
	if (len == 0 || len > RDZV_CHAN_MSG_MAX)
		return (RDZV_EPROTO);
	for (i = 0; i < len; i++) {
		if ((unsigned char)buf[i] < 0x20 ||
		    (unsigned char)buf[i] > 0x7e)
			return (RDZV_EPROTO);
		/* Every word, the verb included, is one or more bytes. */
		if (buf[i] == ' ' && (i == 0 || i == len - 1 ||
		    buf[i + 1] == ' '))
			return (RDZV_EPROTO);
	}
	end = buf + len;
	for (vl = 0; vl < len && buf[vl] != ' '; vl++)
		;
	m->verb = chan_verb_of(buf, vl);
	if (m->verb == CHAN_UNKNOWN)
		return (0);
	if (m->verb == CHAN_PROGRESS && chan_num(buf, vl, INT64_MAX,
	    &m->step) != 0)
		return (RDZV_EPROTO);

	for (i = 0; i < CHAN_NKEYS; i++)
		if (chan_keys[i].verb == m->verb && chan_keys[i].required)
			need |= 1U << i;
	for (w = buf + vl; w < end; w += wl) {
		w++;		/* the space */
		for (wl = 0; w + wl < end && w[wl] != ' '; wl++)
			;
		if ((eq = memchr(w, '=', wl)) == NULL)
			return (RDZV_EPROTO);
		for (i = 0; i < CHAN_NKEYS; i++) {
			k = &chan_keys[i];
			if (k->verb == m->verb &&
			    strlen(k->key) == (size_t)(eq - w) &&
			    memcmp(k->key, w, (size_t)(eq - w)) == 0)
				break;
		}
		if (i == CHAN_NKEYS)
			continue;	/* for a newer peer */
		if (chan_value(k, eq + 1, wl - (size_t)(eq - w) - 1, m) != 0)
			return (RDZV_EPROTO);
		seen |= 1U << i;
	}
	if ((seen & need) != need || !chan_fields_ok(m))
		return (RDZV_EPROTO);
	return (0);
}

int
chan_format(char *buf, size_t len, const struct chan_msg *m)
{
	const struct chan_key	*k;
	const char		*f;
	/* Room for the longest fields (ns and master_addr just under their
	 * sizes), so that what passes RDZV_CHAN_MSG_MAX is measured whole. */
	char			 out[4 * RDZV_CHAN_MSG_MAX];
	size_t			 i, n;
	int			 v;

	if (!chan_fields_ok(m))
		return (RDZV_EINVAL);
	if (m->verb == CHAN_PROGRESS)
		n = (size_t)snprintf(out, sizeof out, "%llu",
		    (unsigned long long)m->step);
	else
		n = (size_t)snprintf(out, sizeof out, "%s",
		    chan_verbs[m->verb]);
	for (i = 0; (k = chan_key_next(m, &i, &f)) != NULL;) {
		switch (k->type) {
		case CHAN_T_INT:
			memcpy(&v, f, sizeof v);
			n += (size_t)snprintf(out + n, sizeof out - n,
			    " %s=%d", k->key, v);
			break;
		case CHAN_T_KIND:
			n += (size_t)snprintf(out + n, sizeof out - n,
			    " %s=%s", k->key, chan_kinds[m->kind]);
			break;
		case CHAN_T_WORD:
			n += (size_t)snprintf(out + n, sizeof out - n,
			    " %s=%s", k->key, f);
			break;
		}
	}
	if (n >= len || n > RDZV_CHAN_MSG_MAX) {
		if (len > 0)
			buf[0] = '\0';
		return (RDZV_ETOOBIG);
	}
	memcpy(buf, out, n + 1);
	return ((int)n);
}
