/*
 * chan.c: the agent -> worker messages of the worker <-> agent channel
 * (common/PROTOCOL.md "Worker <-> agent channel"), decoded.  Pure: no
 * I/O, no state; repair.c reads the datagrams, tests/fuzz/fuzz_chan.c
 * drives this directly.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"

/* A decimal in lo..hi from s (len bytes); 0 or RDZV_EPROTO. */
static int
chan_num(const char *s, size_t len, long long lo, long long hi, int *out)
{
	char		 buf[24], *end;
	long long	 v;

	if (len == 0 || len >= sizeof buf)
		return (RDZV_EPROTO);
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (buf[0] == '-' || buf[0] == '+' || buf[0] == ' ')
		return (RDZV_EPROTO);
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return (RDZV_EPROTO);
	*out = (int)v;
	return (0);
}

/* Copies a value of len bytes into dst (size bytes); 0 or RDZV_EPROTO. */
static int
chan_str(const char *s, size_t len, char *dst, size_t size)
{
	if (len == 0 || len >= size)
		return (RDZV_EPROTO);
	memcpy(dst, s, len);
	dst[len] = '\0';
	return (0);
}

int
chan_parse(const char *buf, size_t len, struct chan_round *m)
{
	const char	*p, *end, *w, *eq;
	size_t		 vlen, wlen;
	unsigned	 seen = 0;
	int		 rc, kind;

	memset(m, 0, sizeof *m);
	m->local_rank = m->local_world = -1;
	if (len > RDZV_CHANNEL_MSG_MAX)
		return (RDZV_EPROTO);
	end = buf + len;
	for (p = buf; p < end && *p != ' '; p++)
		;
	wlen = (size_t)(p - buf);
	if (wlen == 4 && memcmp(buf, "stop", 4) == 0)
		return (CHAN_MSG_STOP);
	if (wlen != 5 || memcmp(buf, "round", 5) != 0)
		return (CHAN_MSG_IGNORE);
	while (p < end) {
		p++;		/* the space */
		for (w = p; p < end && *p != ' '; p++)
			;
		wlen = (size_t)(p - w);
		if ((eq = memchr(w, '=', wlen)) == NULL)
			return (RDZV_EPROTO);
		vlen = wlen - (size_t)(eq - w) - 1;
		wlen = (size_t)(eq - w);
		eq++;
#define KEY(k)	(wlen == sizeof(k) - 1 && memcmp(w, k, wlen) == 0)
		rc = 0;
		if (KEY("round")) {
			rc = chan_num(eq, vlen, 0, INT_MAX, &m->round);
			seen |= 0x01;
		} else if (KEY("kind")) {
			if (vlen == 6 && memcmp(eq, "shrink", 6) == 0)
				kind = RDZV_ROUND_SHRINK;
			else if (vlen == 4 && memcmp(eq, "grow", 4) == 0)
				kind = RDZV_ROUND_GROW;
			else
				return (RDZV_EPROTO);
			m->kind = kind;
			seen |= 0x02;
		} else if (KEY("ns"))
			rc = chan_str(eq, vlen, m->ns, sizeof m->ns);
		else if (KEY("rank")) {
			rc = chan_num(eq, vlen, 0, INT_MAX - 1, &m->rank);
			seen |= 0x04;
		} else if (KEY("world")) {
			rc = chan_num(eq, vlen, 1, INT_MAX, &m->world);
			seen |= 0x08;
		} else if (KEY("donor")) {
			rc = chan_num(eq, vlen, 0, INT_MAX - 1, &m->donor);
			seen |= 0x10;
		} else if (KEY("master_addr"))
			rc = chan_str(eq, vlen, m->master_addr,
			    sizeof m->master_addr);
		else if (KEY("master_port"))
			rc = chan_num(eq, vlen, 1, 65535, &m->master_port);
		else if (KEY("local_rank"))
			rc = chan_num(eq, vlen, 0, INT_MAX - 1,
			    &m->local_rank);
		else if (KEY("local_world"))
			rc = chan_num(eq, vlen, 1, INT_MAX, &m->local_world);
#undef KEY
		if (rc != 0)
			return (rc);
	}
	if (seen != 0x1f || m->rank >= m->world || m->donor >= m->world)
		return (RDZV_EPROTO);
	if (m->ns[0] == '\0' && (m->master_addr[0] == '\0' ||
	    m->master_port == 0))
		return (RDZV_EPROTO);
	if (m->local_rank >= 0 && m->local_world > 0 &&
	    m->local_rank >= m->local_world)
		return (RDZV_EPROTO);
	return (CHAN_MSG_ROUND);
}
