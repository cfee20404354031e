/*
 * fuzz_chan.c: libFuzzer target for the agent -> worker messages of the
 * worker <-> agent channel (libworker/chan.c).  Every input is one
 * datagram.  A round that decodes must hold what the decoder promises
 * (rank and donor below world, a store named, strings terminated and
 * without spaces) and, written again in the agent's format, must decode
 * to the very same fields.  Any broken invariant aborts.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static void
fuzz_check_str(const char *s, size_t size)
{
	if (memchr(s, '\0', size) == NULL || strchr(s, ' ') != NULL)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct chan_round	m, m2;
	char			buf[2 * RDZV_CHANNEL_MSG_MAX + 2048];
	int			verb, n;

	verb = chan_parse((const char *)data, len, &m);
	if (verb < 0 && verb != RDZV_EPROTO)
		abort();
	if (verb != CHAN_MSG_ROUND)
		return (0);
	if (len > RDZV_CHANNEL_MSG_MAX || m.world < 1 || m.rank < 0 ||
	    m.rank >= m.world || m.donor < 0 || m.donor >= m.world ||
	    (m.kind != RDZV_ROUND_SHRINK && m.kind != RDZV_ROUND_GROW))
		abort();
	fuzz_check_str(m.ns, sizeof m.ns);
	fuzz_check_str(m.master_addr, sizeof m.master_addr);
	if (m.ns[0] == '\0' && (m.master_addr[0] == '\0' ||
	    m.master_port <= 0))
		abort();
	n = snprintf(buf, sizeof buf, "round round=%d kind=%s rank=%d "
	    "world=%d donor=%d", m.round, m.kind == RDZV_ROUND_GROW ? "grow" :
	    "shrink", m.rank, m.world, m.donor);
	if (m.ns[0] != '\0')
		n += snprintf(buf + n, sizeof buf - n, " ns=%s", m.ns);
	if (m.master_addr[0] != '\0')
		n += snprintf(buf + n, sizeof buf - n, " master_addr=%s",
		    m.master_addr);
	if (m.master_port > 0)
		n += snprintf(buf + n, sizeof buf - n, " master_port=%d",
		    m.master_port);
	if (m.local_rank >= 0)
		n += snprintf(buf + n, sizeof buf - n, " local_rank=%d",
		    m.local_rank);
	if (m.local_world >= 0)
		n += snprintf(buf + n, sizeof buf - n, " local_world=%d",
		    m.local_world);
	/* Written again it can only be as long or shorter (no leading
	 * zeros, no unknown words), so it decodes. */
	if ((size_t)n > len || chan_parse(buf, (size_t)n, &m2) !=
	    CHAN_MSG_ROUND || m.round != m2.round || m.kind != m2.kind ||
	    m.rank != m2.rank || m.world != m2.world || m.donor != m2.donor ||
	    m.master_port != m2.master_port ||
	    m.local_rank != m2.local_rank || m.local_world != m2.local_world ||
	    strcmp(m.ns, m2.ns) != 0 ||
	    strcmp(m.master_addr, m2.master_addr) != 0)
		abort();
	return (0);
}
