/* SPDX-License-Identifier: Apache-2.0 */
/*
 * chan_dump.c: common/chan.c's chan_parse() over datagrams read from
 * stdin, for tests/integ/repair_chan.py, which feeds python/rdzv/
 * repair.py's parse_message() the same ones and checks that the two
 * sides agree.
 *
 * Each input line is one datagram in hex ("" for an empty one); each
 * output line says what chan_parse made of it:
 *   err | unknown | progress STEP | hello REPAIR | ready | stop | leave |
 *   round ROUND KIND NS RANK WORLD DONOR ADDR PORT LRANK LWORLD
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan.h"
#include "rdzv_err.h"

/* Decodes the hex of line (len chars) into out; the bytes, or -1. */
static long
dump_unhex(const char *line, size_t len, char *out, size_t size)
{
	size_t		i;
	unsigned	v;

	if (len % 2 != 0 || len / 2 > size)
		return (-1);
	for (i = 0; i < len; i += 2) {
		if (!isxdigit((unsigned char)line[i]) ||
		    !isxdigit((unsigned char)line[i + 1]) ||
		    sscanf(line + i, "%2x", &v) != 1)
			return (-1);
		out[i / 2] = (char)v;
	}
	return ((long)(len / 2));
}

static void
dump_one(const char *buf, size_t len)
{
	struct chan_msg	m;

	if (chan_parse(buf, len, &m) != 0) {
		puts("err");
		return;
	}
	switch (m.verb) {
	case CHAN_UNKNOWN:
		puts("unknown");
		break;
	case CHAN_PROGRESS:
		printf("progress %llu\n", (unsigned long long)m.step);
		break;
	case CHAN_HELLO:
		printf("hello %d\n", m.repair);
		break;
	case CHAN_READY:
		puts("ready");
		break;
	case CHAN_STOP:
		puts("stop");
		break;
	case CHAN_WAIT:
		puts("wait");
		break;
	case CHAN_LEAVE:
		puts("leave");
		break;
	case CHAN_DONE:
		puts("done");
		break;
	case CHAN_ROUND:
		printf("round %d %s %s %d %d %d %s %d %d %d\n", m.round,
		    m.kind == CHAN_GROW ? "grow" : "shrink", m.ns, m.rank,
		    m.world, m.donor, m.master_addr, m.master_port,
		    m.local_rank, m.local_world);
		break;
	default:
		printf("verb %d\n", (int)m.verb);	/* new: say so */
		break;
	}
}

int
main(void)
{
	/* A datagram of up to 2 KiB: past RDZV_CHAN_MSG_MAX, to be refused. */
	static char	line[4 * 2048 + 2], buf[2048];
	size_t		len;
	long		n;

	while (fgets(line, sizeof line, stdin) != NULL) {
		len = strcspn(line, "\n");
		if ((n = dump_unhex(line, len, buf, sizeof buf)) < 0) {
			fprintf(stderr, "chan_dump: bad input line\n");
			return (2);
		}
		dump_one(buf, (size_t)n);
		fflush(stdout);
	}
	return (0);
}
