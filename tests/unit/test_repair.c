/*
 * test_repair.c: the worker <-> agent channel's messages (agent/repair.c):
 * what the agent decodes of a worker's datagrams, and the "round" message
 * it formats, against the text of the contract (common/PROTOCOL.md).
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "agent.h"
#include "rdzv_err.h"

static int
parse(const char *s, struct repair_msg *m)
{
	return (repair_parse(s, strlen(s), m));
}

static void
test_progress(void **state)
{
	struct repair_msg	m;

	assert_int_equal(parse("0", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_PROGRESS);
	assert_true(m.step == 0);
	assert_int_equal(parse("1234", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_PROGRESS);
	assert_true(m.step == 1234);
	assert_int_equal(parse("9223372036854775807", &m), 0);
	assert_true(m.step == INT64_MAX);
	/* Over INT64_MAX, blanks and junk are refused. */
	assert_int_equal(parse("9223372036854775808", &m), RDZV_EPROTO);
	assert_int_equal(parse("99999999999999999999999", &m), RDZV_EPROTO);
	/* A sign makes it a verb this agent does not know: ignored too. */
	assert_int_equal(parse("-1", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_UNKNOWN);
	assert_int_equal(parse("+1", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_UNKNOWN);
	assert_int_equal(parse(" 1", &m), RDZV_EPROTO);
	assert_int_equal(parse("1 ", &m), RDZV_EPROTO);
	assert_int_equal(parse("12x", &m), RDZV_EPROTO);
	assert_int_equal(parse("1\n", &m), RDZV_EPROTO);
	/* Not NUL-terminated: only len bytes count. */
	assert_int_equal(repair_parse("42999", 2, &m), 0);
	assert_true(m.step == 42);
	/* A key=value word a newer worker adds is skipped. */
	assert_int_equal(parse("17 t=3", &m), 0);
	assert_true(m.step == 17);
}

static void
test_hello_ready(void **state)
{
	struct repair_msg	m;

	assert_int_equal(parse("hello repair=1", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_HELLO);
	assert_int_equal(m.repair, 1);
	assert_int_equal(parse("hello", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_HELLO);
	assert_int_equal(m.repair, 0);
	assert_int_equal(parse("hello repair=0", &m), 0);
	assert_int_equal(m.repair, 0);
	assert_int_equal(parse("hello repair=11", &m), 0);
	assert_int_equal(m.repair, 0);
	assert_int_equal(parse("hello repairx=1", &m), 0);
	assert_int_equal(m.repair, 0);
	/* Unknown words around it do not matter; the last repair= wins. */
	assert_int_equal(parse("hello v=2 repair=1 nccl=1", &m), 0);
	assert_int_equal(m.repair, 1);
	assert_int_equal(parse("hello repair=1 repair=0", &m), 0);
	assert_int_equal(m.repair, 0);
	assert_int_equal(parse("ready", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_READY);
	assert_int_equal(parse("ready step=9", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_READY);
	/* repair= means something after hello only. */
	assert_int_equal(parse("ready repair=1", &m), 0);
	assert_int_equal(m.repair, 0);
}

static void
test_unknown_and_malformed(void **state)
{
	struct repair_msg	m;
	char			big[REPAIR_MSG_MAX + 2];

	assert_int_equal(parse("helo repair=1", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_UNKNOWN);
	assert_int_equal(parse("hellox", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_UNKNOWN);
	assert_int_equal(parse("HELLO repair=1", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_UNKNOWN);
	assert_int_equal(parse("stats a=1 b", &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_UNKNOWN);

	assert_int_equal(repair_parse("", 0, &m), RDZV_EPROTO);
	assert_int_equal(parse("hello  repair=1", &m), RDZV_EPROTO);
	assert_int_equal(parse(" hello", &m), RDZV_EPROTO);
	assert_int_equal(parse("ready ", &m), RDZV_EPROTO);
	assert_int_equal(parse(" ", &m), RDZV_EPROTO);
	assert_int_equal(parse("hello\trepair=1", &m), RDZV_EPROTO);
	assert_int_equal(parse("hello repair=\xc3\xa9", &m), RDZV_EPROTO);
	assert_int_equal(repair_parse("ready\0", 6, &m), RDZV_EPROTO);

	/* REPAIR_MSG_MAX bytes go; one more does not. */
	memset(big, 'x', sizeof big);
	memcpy(big, "hello repair=1 ", 15);
	assert_int_equal(repair_parse(big, REPAIR_MSG_MAX, &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_HELLO);
	assert_int_equal(m.repair, 1);
	assert_int_equal(repair_parse(big, REPAIR_MSG_MAX + 1, &m),
	    RDZV_EPROTO);
}

static const struct repair_round round_ok = {
	.round = 7, .kind = REPAIR_GROW, .ns = "job/j1/round/7",
	.rank = 2, .world = 4, .donor = 0, .master_addr = "127.0.0.1",
	.master_port = 29500, .local_rank = 1, .local_world = 2,
};

static void
test_format_round(void **state)
{
	struct repair_round	r = round_ok;
	char			buf[REPAIR_MSG_MAX + 1];
	const char		*want;
	int			n;

	want = "round round=7 kind=grow ns=job/j1/round/7 rank=2 world=4 "
	    "donor=0 master_addr=127.0.0.1 master_port=29500 local_rank=1 "
	    "local_world=2";
	n = repair_format_round(buf, sizeof buf, &r);
	assert_int_equal(n, (int)strlen(want));
	assert_string_equal(buf, want);

	r.kind = REPAIR_SHRINK;
	r.ns = "job/a/b=c/round/8";	/* '/' and '=' may be in a job id */
	r.round = 8;
	r.rank = 0;
	r.world = 1;
	r.master_addr = "::1";
	want = "round round=8 kind=shrink ns=job/a/b=c/round/8 rank=0 "
	    "world=1 donor=0 master_addr=::1 master_port=29500 local_rank=1 "
	    "local_world=2";
	n = repair_format_round(buf, sizeof buf, &r);
	assert_int_equal(n, (int)strlen(want));
	assert_string_equal(buf, want);
}

static void
test_format_refuses(void **state)
{
	struct repair_round	r;
	char			buf[REPAIR_MSG_MAX + 1], ns[600];
	int			n;

#define BAD(field, value, code) do {					\
	r = round_ok;							\
	r.field = value;						\
	assert_int_equal(repair_format_round(buf, sizeof buf, &r), code); \
} while (0)
	BAD(ns, "job/my job/round/1", RDZV_EINVAL);
	BAD(ns, "", RDZV_EINVAL);
	BAD(ns, NULL, RDZV_EINVAL);
	BAD(ns, "job/\x01/round/1", RDZV_EINVAL);
	BAD(ns, "job/\xc3\xa9/round/1", RDZV_EINVAL);
	BAD(master_addr, "host name", RDZV_EINVAL);
	BAD(master_addr, "", RDZV_EINVAL);
	BAD(rank, 4, RDZV_EINVAL);
	BAD(rank, -1, RDZV_EINVAL);
	BAD(donor, 4, RDZV_EINVAL);
	BAD(world, 0, RDZV_EINVAL);
	BAD(round, -1, RDZV_EINVAL);
	BAD(local_rank, 2, RDZV_EINVAL);
	BAD(local_world, 0, RDZV_EINVAL);
	BAD(master_port, 65536, RDZV_EINVAL);
	BAD(master_port, -1, RDZV_EINVAL);
	BAD(kind, (enum repair_kind)7, RDZV_EINVAL);
#undef BAD

	/* A namespace that makes the message pass 512 bytes. */
	memset(ns, 'n', sizeof ns - 1);
	ns[sizeof ns - 1] = '\0';
	r = round_ok;
	r.ns = ns;
	assert_int_equal(repair_format_round(buf, sizeof buf, &r),
	    RDZV_ETOOBIG);
	assert_string_equal(buf, "");
	/* The longest that fits is exactly 512 bytes; one more is not. */
	n = repair_format_round(buf, sizeof buf, &round_ok);
	ns[strlen(round_ok.ns) + REPAIR_MSG_MAX - n] = '\0';
	assert_int_equal(repair_format_round(buf, sizeof buf, &r),
	    REPAIR_MSG_MAX);
	assert_int_equal(strlen(buf), REPAIR_MSG_MAX);
	ns[strlen(ns)] = 'n';
	assert_int_equal(repair_format_round(buf, sizeof buf, &r),
	    RDZV_ETOOBIG);
	/* A small buffer is refused too, never overrun. */
	assert_int_equal(repair_format_round(buf, 20, &round_ok),
	    RDZV_ETOOBIG);
	assert_string_equal(buf, "");
}

static void
test_round_parses_back(void **state)
{
	struct repair_msg	m;
	char			buf[REPAIR_MSG_MAX + 1];
	int			n;

	/* The agent's own message keeps the grammar it enforces. */
	n = repair_format_round(buf, sizeof buf, &round_ok);
	assert_true(n > 0);
	assert_int_equal(repair_parse(buf, n, &m), 0);
	assert_int_equal(m.verb, REPAIR_MSG_UNKNOWN);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_hello_ready),
		cmocka_unit_test(test_unknown_and_malformed),
		cmocka_unit_test(test_format_round),
		cmocka_unit_test(test_format_refuses),
		cmocka_unit_test(test_round_parses_back),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
