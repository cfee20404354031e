/*
 * fuzz_repair.c: libFuzzer target for rdzv-agent's worker channel
 * messages (agent/repair.c).  The input is one datagram a worker sent:
 * repair_parse() must accept exactly the grammar (1..REPAIR_MSG_MAX
 * bytes of printable ASCII, single spaces between non-empty words, a
 * step of digits within INT64_MAX) and report what it says.  The input is
 * also cut into the strings of a round message: repair_format_round()
 * must refuse a namespace or address with a space or a non-printable
 * byte, never write past its buffer, and what it formats must be one
 * message of the same grammar.  Any broken invariant aborts.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "rdzv_err.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Whether buf[0..len) keeps the grammar, worked out the plain way. */
static int
fuzz_grammar_ok(const uint8_t *buf, size_t len)
{
	size_t	i;

	if (len == 0 || len > REPAIR_MSG_MAX)
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

static int
fuzz_word_ok(const char *s)
{
	if (*s == '\0')
		return (0);
	for (; *s != '\0'; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s > 0x7e)
			return (0);
	return (1);
}

static void
fuzz_parse(const uint8_t *data, size_t size)
{
	struct repair_msg	m;
	uint64_t		v = 0;
	size_t			vl, i;
	int			rv, over = 0;

	rv = repair_parse((const char *)data, size, &m);
	for (vl = 0; vl < size && data[vl] != ' '; vl++)
		;
	if (!fuzz_grammar_ok(data, size)) {
		if (rv != RDZV_EPROTO)
			abort();
		return;
	}
	if (data[0] >= '0' && data[0] <= '9') {
		for (i = 0; i < vl; i++) {
			if (data[i] < '0' || data[i] > '9') {
				over = 1;
				break;
			}
			if (v > (uint64_t)INT64_MAX / 10 ||
			    v * 10 + (data[i] - '0') > (uint64_t)INT64_MAX) {
				over = 1;
				break;
			}
			v = v * 10 + (data[i] - '0');
		}
		if (over) {
			if (rv != RDZV_EPROTO)
				abort();
			return;
		}
		if (rv != 0 || m.verb != REPAIR_MSG_PROGRESS || m.step != v)
			abort();
		return;
	}
	if (rv != 0)
		abort();
	if (vl == 5 && memcmp(data, "hello", 5) == 0) {
		if (m.verb != REPAIR_MSG_HELLO)
			abort();
		/* repair=1 can only come from those very bytes. */
		if (m.repair && memmem(data, size, " repair=1", 9) == NULL)
			abort();
	} else if (vl == 5 && memcmp(data, "ready", 5) == 0) {
		if (m.verb != REPAIR_MSG_READY || m.repair)
			abort();
	} else if (m.verb != REPAIR_MSG_UNKNOWN || m.repair)
		abort();
}

static void
fuzz_format(const uint8_t *data, size_t size)
{
	struct repair_round	 r;
	struct repair_msg	 m;
	char			*ns, *addr, buf[REPAIR_MSG_MAX + 8];
	size_t			 cut, out;
	int			 n;

	if (size < 2)
		return;
	cut = data[0] % size;
	if ((ns = strndup((const char *)data + 1, cut)) == NULL ||
	    (addr = strndup((const char *)data + 1 + cut, size - 1 - cut)) ==
	    NULL)
		abort();
	memset(&r, 0, sizeof r);
	r.kind = data[0] & 1 ? REPAIR_GROW : REPAIR_SHRINK;
	r.round = INT64_MAX;
	r.rank = INT64_MAX - 1;
	r.world = INT64_MAX;
	r.donor = 0;
	r.ns = ns;
	r.master_addr = addr;
	r.master_port = 65535;
	r.local_rank = 0;
	r.local_world = 1;
	/* The buffer's size comes from the input too: never overrun. */
	out = size % sizeof buf;
	memset(buf, 'Z', sizeof buf);
	n = repair_format_round(buf, out, &r);
	if (!fuzz_word_ok(ns) || !fuzz_word_ok(addr)) {
		if (n != RDZV_EINVAL)
			abort();
	} else if (n >= 0) {
		if ((size_t)n >= out || n > REPAIR_MSG_MAX ||
		    strlen(buf) != (size_t)n)
			abort();
		if (repair_parse(buf, n, &m) != 0 ||
		    m.verb != REPAIR_MSG_UNKNOWN)
			abort();
	} else if (n != RDZV_ETOOBIG || (out > 0 && buf[0] != '\0'))
		abort();
	if (out < sizeof buf && buf[out] != 'Z')
		abort();
	free(ns);
	free(addr);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_parse(data, size);
	fuzz_format(data, size);
	return (0);
}
