/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_chan.c: libFuzzer target for the worker <-> agent channel's
 * messages (common/chan.c), both ways.  Any broken invariant aborts.
 *
 * Parse: the input is one datagram.  chan_parse() must refuse whatever
 * breaks the grammar worked out plainly here (1..RDZV_CHAN_MSG_MAX bytes
 * of printable ASCII, single spaces between non-empty words, a step of
 * 1..RDZV_CHAN_NUM_MAX digits within INT64_MAX), take any other unknown
 * verb, name a known verb right, take a hello's repair from its last
 * repair= word, and decode a round only when every field is named.  What it decodes, chan_format() must
 * write again without a refusal (no longer than the input, but for a
 * hello that did not say repair=), and that text must decode to the very
 * same message.
 *
 * Format: the input is also read as a message (a verb, numbers small or
 * raw, a namespace and an address cut from its tail) and a buffer size.
 * chan_format() must refuse exactly what the plain rules here refuse,
 * write byte for byte what this file's own snprintf writes, or
 * RDZV_ETOOBIG with "" when that passes RDZV_CHAN_MSG_MAX or the buffer,
 * never write past the buffer, and what it writes must decode to the same
 * message.
 */
#include "config.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan.h"
#include "rdzv_err.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Whether buf[0..len) keeps the byte and space rules. */
static int
fuzz_grammar_ok(const uint8_t *buf, size_t len)
{
	size_t	i;

	if (len == 0 || len > RDZV_CHAN_MSG_MAX)
		return (0);
	for (i = 0; i < len; i++) {
		if (buf[i] < 0x20 || buf[i] > 0x7e)
			return (0);
		if (buf[i] == ' ' && (i == 0 || i + 1 == len ||
		    buf[i + 1] == ' '))
			return (0);
	}
	return (1);
}

/* Formats m and checks that it decodes back to m; returns the length. */
static int
fuzz_back(const struct chan_msg *m, char *buf, size_t size)
{
	struct chan_msg	back;
	int		n;

	if ((n = chan_format(buf, size, m)) < 0)
		abort();
	if (chan_parse(buf, (size_t)n, &back) != 0 ||
	    memcmp(&back, m, sizeof back) != 0)
		abort();
	return (n);
}

static void
fuzz_parse(const uint8_t *data, size_t size)
{
	static const char *const verbs[] = { "hello", "ready", "round",
	    "stop", "wait", "leave", "done" };
	static const enum chan_verb codes[] = { CHAN_HELLO, CHAN_READY,
	    CHAN_ROUND, CHAN_STOP, CHAN_WAIT, CHAN_LEAVE, CHAN_DONE };
	static const char *const rkeys[] = { " round=", " kind=", " ns=",
	    " rank=", " world=", " donor=", " master_addr=", " master_port=",
	    " local_rank=", " local_world=" };
	struct chan_msg	m;
	char		buf[RDZV_CHAN_MSG_MAX + 1];
	uint64_t	v = 0;
	size_t		vl, i;
	int		rv, n, known = -1;

	rv = chan_parse((const char *)data, size, &m);
	if (!fuzz_grammar_ok(data, size)) {
		if (rv != RDZV_EPROTO)
			abort();
		return;
	}
	for (vl = 0; vl < size && data[vl] != ' '; vl++)
		;
	for (i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
		if (strlen(verbs[i]) == vl && memcmp(data, verbs[i], vl) == 0)
			known = (int)i;
	if (data[0] >= '0' && data[0] <= '9') {
		for (i = 0; i < vl; i++) {
			if (data[i] < '0' || data[i] > '9' ||
			    i >= RDZV_CHAN_NUM_MAX ||
			    v > ((uint64_t)INT64_MAX - (data[i] - '0')) / 10) {
				v = UINT64_MAX;
				break;
			}
			v = v * 10 + (data[i] - '0');
		}
		if (v == UINT64_MAX) {
			if (rv != RDZV_EPROTO)
				abort();
			return;
		}
		if (rv == 0 && (m.verb != CHAN_PROGRESS || m.step != v))
			abort();
	} else if (known == -1) {
		if (rv != 0 || m.verb != CHAN_UNKNOWN)
			abort();
		return;
	} else if (rv == 0 && m.verb != codes[known])
		abort();
	if (rv != 0) {
		if (rv != RDZV_EPROTO)
			abort();
		return;
	}
	/* A round names every one of its fields. */
	for (i = 0; m.verb == CHAN_ROUND && i < sizeof rkeys / sizeof rkeys[0];
	    i++)
		if (memmem(data, size, rkeys[i], strlen(rkeys[i])) == NULL)
			abort();
	/* A hello says what its last repair= word says (0 without one). */
	if (m.verb == CHAN_HELLO) {
		const uint8_t	*p, *last = NULL;

		for (p = data; (p = memmem(p, size - (size_t)(p - data),
		    " repair=", 8)) != NULL; p++)
			last = p + 8;
		for (v = 0; last != NULL && last < data + size && *last != ' ';
		    last++)
			v = v * 10 + (*last - '0');
		if ((uint64_t)m.repair != v)
			abort();
	}
	n = fuzz_back(&m, buf, sizeof buf);
	if ((size_t)n > size && (m.verb != CHAN_HELLO ||
	    memmem(data, size, " repair=", 8) != NULL))
		abort();
}

/* Reads the format half's input: bytes, then zeros once it ends. */
struct fuzz_in {
	const uint8_t	*p;
	size_t		 n;
};

static uint8_t
fuzz_byte(struct fuzz_in *in)
{
	if (in->n == 0)
		return (0);
	in->n--;
	return (*in->p++);
}

/* A number: mostly small (-2..61), else four raw bytes. */
static int
fuzz_int(struct fuzz_in *in)
{
	uint32_t	v;
	uint8_t		b = fuzz_byte(in);
	int		i;

	if ((b & 0x80) == 0)
		return ((int)(b & 0x3f) - 2);
	for (v = 0, i = 0; i < 4; i++)
		v = v << 8 | fuzz_byte(in);
	return ((int)v);
}

/* Whether s (an array of size bytes) holds one word, as chan.h says. */
static int
fuzz_word_ok(const char *s, size_t size)
{
	size_t	len;

	if ((len = strnlen(s, size)) == 0 || len == size)
		return (0);
	for (; *s != '\0'; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s > 0x7e)
			return (0);
	return (1);
}

/*
 * Copies len bytes into dst (size bytes, zeroed): a NUL only if there is
 * room or one among them, nothing past it (the string is what counts).
 */
static void
fuzz_fill(char *dst, size_t size, const uint8_t *src, size_t len)
{
	size_t	n = len < size ? len : size;

	memcpy(dst, src, n);
	n = strnlen(dst, size);
	memset(dst + n, 0, size - n);
}

static void
fuzz_format(const uint8_t *data, size_t size)
{
	static const char *const kinds[] = { "?", "shrink", "grow", "?" };
	struct fuzz_in	 in = { data, size };
	struct chan_msg	 m;
	char		 buf[RDZV_CHAN_MSG_MAX + 8], want[4096];
	size_t		 out, cut, i;
	uint64_t	 step;
	int		 n, ok, wn = 0;

	memset(&m, 0, sizeof m);
	m.verb = (enum chan_verb)(fuzz_byte(&in) % 10);	/* 9: none */
	out = fuzz_byte(&in);
	out = (out << 8 | fuzz_byte(&in)) % (sizeof buf + 1);
	switch (m.verb) {
	case CHAN_PROGRESS:
		if (fuzz_byte(&in) & 1)
			for (step = 0, i = 0; i < 8; i++)
				step = step << 8 | fuzz_byte(&in);
		else
			step = fuzz_byte(&in);
		m.step = step;
		ok = step <= INT64_MAX;
		wn = snprintf(want, sizeof want, "%llu",
		    (unsigned long long)step);
		break;
	case CHAN_HELLO:
		m.repair = fuzz_int(&in);
		ok = m.repair == 0 || m.repair == 1;
		wn = snprintf(want, sizeof want, "hello repair=%d", m.repair);
		break;
	case CHAN_READY:
	case CHAN_STOP:
	case CHAN_WAIT:
	case CHAN_LEAVE:
	case CHAN_DONE:
		ok = 1;
		wn = snprintf(want, sizeof want, "%s", m.verb == CHAN_READY ?
		    "ready" : m.verb == CHAN_STOP ? "stop" : m.verb == CHAN_WAIT ?
		    "wait" : m.verb == CHAN_LEAVE ? "leave" : "done");
		break;
	case CHAN_ROUND:
		m.round = fuzz_int(&in);
		m.kind = (enum chan_kind)(fuzz_byte(&in) % 4);
		m.rank = fuzz_int(&in);
		m.world = fuzz_int(&in);
		m.donor = fuzz_int(&in);
		m.master_port = fuzz_int(&in) & 0x1ffff;
		if (fuzz_byte(&in) & 1)
			m.master_port = -m.master_port;
		m.local_rank = fuzz_int(&in);
		m.local_world = fuzz_int(&in);
		cut = fuzz_byte(&in);
		cut = cut * 4 % (in.n + 1);
		fuzz_fill(m.ns, sizeof m.ns, in.p, cut);
		fuzz_fill(m.master_addr, sizeof m.master_addr, in.p + cut,
		    in.n - cut);
		ok = m.round >= 0 && (m.kind == CHAN_SHRINK ||
		    m.kind == CHAN_GROW) && m.world >= 1 && m.rank >= 0 &&
		    m.rank < m.world && m.donor >= 0 && m.donor < m.world &&
		    m.master_port >= 1 && m.master_port <= 65535 &&
		    m.local_world >= 1 && m.local_rank >= 0 &&
		    m.local_rank < m.local_world &&
		    fuzz_word_ok(m.ns, sizeof m.ns) &&
		    fuzz_word_ok(m.master_addr, sizeof m.master_addr);
		if (ok)
			wn = snprintf(want, sizeof want, "round round=%d "
			    "kind=%s ns=%s rank=%d world=%d donor=%d "
			    "master_addr=%s master_port=%d local_rank=%d "
			    "local_world=%d", m.round, kinds[m.kind], m.ns,
			    m.rank, m.world, m.donor, m.master_addr,
			    m.master_port, m.local_rank, m.local_world);
		break;
	default:
		ok = 0;
		break;
	}

	memset(buf, 'Z', sizeof buf);
	n = chan_format(buf, out, &m);
	if (!ok) {
		if (n != RDZV_EINVAL)
			abort();
	} else if (wn < 0 || (size_t)wn >= sizeof want)
		abort();
	else if ((size_t)wn >= out || wn > RDZV_CHAN_MSG_MAX) {
		if (n != RDZV_ETOOBIG || (out > 0 && buf[0] != '\0'))
			abort();
	} else {
		if (n != wn || memcmp(buf, want, (size_t)wn + 1) != 0)
			abort();
		(void)fuzz_back(&m, want, sizeof want);
	}
	for (i = out; i < sizeof buf; i++)
		if (buf[i] != 'Z')
			abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_parse(data, size);
	fuzz_format(data, size);
	return (0);
}
