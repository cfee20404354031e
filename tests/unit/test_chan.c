/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_chan.c: the worker <-> agent channel's messages (common/chan.c),
 * both ways, against the text of the contract (common/PROTOCOL.md
 * "Worker <-> agent channel"): what a worker says (its step, hello,
 * ready), what the agent says (round, stop), what either refuses, and
 * every verb formatted and decoded back to the same fields.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "chan.h"
#include "rdzv_err.h"

static int
parse(const char *s, struct chan_msg *m)
{
	return (chan_parse(s, strlen(s), m));
}

/* The verb of line s, which must parse. */
static enum chan_verb
verb_of(const char *s)
{
	struct chan_msg	m;

	assert_int_equal(parse(s, &m), 0);
	return (m.verb);
}

#define ROUND_TEXT							\
	"round round=7 kind=grow ns=job/j1/round/7 rank=2 world=4 "	\
	"donor=0 master_addr=127.0.0.1 master_port=29500 local_rank=1 "	\
	"local_world=2"

/* The round of ROUND_TEXT. */
static void
round_ok(struct chan_msg *m)
{
	memset(m, 0, sizeof *m);
	m->verb = CHAN_ROUND;
	m->round = 7;
	m->kind = CHAN_GROW;
	strlcpy(m->ns, "job/j1/round/7", sizeof m->ns);
	m->rank = 2;
	m->world = 4;
	m->donor = 0;
	strlcpy(m->master_addr, "127.0.0.1", sizeof m->master_addr);
	m->master_port = 29500;
	m->local_rank = 1;
	m->local_world = 2;
}

static void
test_progress(void **state)
{
	struct chan_msg	m;

	assert_int_equal(parse("0", &m), 0);
	assert_int_equal(m.verb, CHAN_PROGRESS);
	assert_true(m.step == 0);
	assert_int_equal(parse("1234", &m), 0);
	assert_int_equal(m.verb, CHAN_PROGRESS);
	assert_true(m.step == 1234);
	assert_int_equal(parse("9223372036854775807", &m), 0);
	assert_true(m.step == INT64_MAX);
	assert_int_equal(parse("007", &m), 0);
	assert_true(m.step == 7);
	/* 20 digits at most, leading zeros counted. */
	assert_int_equal(parse("00000000000000000042", &m), 0);
	assert_true(m.step == 42);
	assert_int_equal(parse("000000000000000000042", &m), RDZV_EPROTO);
	/* Over INT64_MAX, blanks and junk are refused. */
	assert_int_equal(parse("9223372036854775808", &m), RDZV_EPROTO);
	assert_int_equal(parse("18446744073709551616", &m), RDZV_EPROTO);
	assert_int_equal(parse("99999999999999999999999", &m), RDZV_EPROTO);
	/* A sign makes it a verb this codec does not know: ignored. */
	assert_int_equal(verb_of("-1"), CHAN_UNKNOWN);
	assert_int_equal(verb_of("+1"), CHAN_UNKNOWN);
	assert_int_equal(parse(" 1", &m), RDZV_EPROTO);
	assert_int_equal(parse("1 ", &m), RDZV_EPROTO);
	assert_int_equal(parse("12x", &m), RDZV_EPROTO);
	assert_int_equal(parse("1\n", &m), RDZV_EPROTO);
	/* Not NUL-terminated: only len bytes count. */
	assert_int_equal(chan_parse("42999", 2, &m), 0);
	assert_true(m.step == 42);
	/* A key=value word a newer worker adds is skipped; a bare word
	 * after a known verb breaks the grammar. */
	assert_int_equal(parse("17 t=3", &m), 0);
	assert_true(m.step == 17);
	assert_int_equal(parse("17 t", &m), RDZV_EPROTO);
}

static void
test_hello_ready(void **state)
{
	struct chan_msg	m;

	assert_int_equal(parse("hello repair=1", &m), 0);
	assert_int_equal(m.verb, CHAN_HELLO);
	assert_int_equal(m.repair, 1);
	assert_int_equal(parse("hello", &m), 0);
	assert_int_equal(m.verb, CHAN_HELLO);
	assert_int_equal(m.repair, 0);
	assert_int_equal(parse("hello repair=0", &m), 0);
	assert_int_equal(m.repair, 0);
	assert_int_equal(parse("hello repairx=1", &m), 0);
	assert_int_equal(m.repair, 0);
	/* repair is a number of 0..1 like any other. */
	assert_int_equal(parse("hello repair=11", &m), RDZV_EPROTO);
	assert_int_equal(parse("hello repair=2", &m), RDZV_EPROTO);
	assert_int_equal(parse("hello repair=", &m), RDZV_EPROTO);
	assert_int_equal(parse("hello repair=yes", &m), RDZV_EPROTO);
	assert_int_equal(parse("hello now", &m), RDZV_EPROTO);
	/* Unknown words around it do not matter; the last repair= wins. */
	assert_int_equal(parse("hello v=2 repair=1 nccl=1", &m), 0);
	assert_int_equal(m.repair, 1);
	assert_int_equal(parse("hello repair=1 repair=0", &m), 0);
	assert_int_equal(m.repair, 0);
	assert_int_equal(parse("hello =1", &m), 0);
	assert_int_equal(m.repair, 0);
	assert_int_equal(verb_of("ready"), CHAN_READY);
	assert_int_equal(verb_of("ready step=9"), CHAN_READY);
	/* repair= means something after hello only. */
	assert_int_equal(parse("ready repair=1", &m), 0);
	assert_int_equal(m.repair, 0);
}

static void
test_unknown_and_malformed(void **state)
{
	struct chan_msg	m;
	char		big[RDZV_CHAN_MSG_MAX + 2];

	assert_int_equal(verb_of("helo repair=1"), CHAN_UNKNOWN);
	assert_int_equal(verb_of("hellox"), CHAN_UNKNOWN);
	assert_int_equal(verb_of("HELLO repair=1"), CHAN_UNKNOWN);
	assert_int_equal(verb_of("rewind to=3"), CHAN_UNKNOWN);
	/* An unknown verb's words are its own business. */
	assert_int_equal(verb_of("stats a=1 b"), CHAN_UNKNOWN);

	assert_int_equal(chan_parse("", 0, &m), RDZV_EPROTO);
	assert_int_equal(parse("hello  repair=1", &m), RDZV_EPROTO);
	assert_int_equal(parse(" hello", &m), RDZV_EPROTO);
	assert_int_equal(parse("ready ", &m), RDZV_EPROTO);
	assert_int_equal(parse("stop ", &m), RDZV_EPROTO);
	assert_int_equal(parse(" stop", &m), RDZV_EPROTO);
	assert_int_equal(parse(" ", &m), RDZV_EPROTO);
	assert_int_equal(parse("hello\trepair=1", &m), RDZV_EPROTO);
	assert_int_equal(parse("hello repair=\xc3\xa9", &m), RDZV_EPROTO);
	assert_int_equal(parse("\x7f", &m), RDZV_EPROTO);
	assert_int_equal(chan_parse("ready\0", 6, &m), RDZV_EPROTO);
	assert_int_equal(parse("future \x01verb=1", &m), RDZV_EPROTO);

	/* RDZV_CHAN_MSG_MAX bytes go; one more does not. */
	memset(big, 'x', sizeof big);
	memcpy(big, "hello repair=1 x=", 17);
	assert_int_equal(chan_parse(big, RDZV_CHAN_MSG_MAX, &m), 0);
	assert_int_equal(m.verb, CHAN_HELLO);
	assert_int_equal(m.repair, 1);
	assert_int_equal(chan_parse(big, RDZV_CHAN_MSG_MAX + 1, &m),
	    RDZV_EPROTO);
}

static void
test_round_stop(void **state)
{
	struct chan_msg	m, want;

	round_ok(&want);
	assert_int_equal(parse(ROUND_TEXT, &m), 0);
	assert_memory_equal(&m, &want, sizeof m);
	/* Any order; a key of a newer agent is skipped; the last wins. */
	assert_int_equal(parse("round local_world=2 local_rank=1 "
	    "master_port=29500 master_addr=127.0.0.1 future=yes donor=0 "
	    "world=4 rank=2 ns=x ns=job/j1/round/7 kind=shrink kind=grow "
	    "round=7", &m), 0);
	assert_memory_equal(&m, &want, sizeof m);
	/* '/' and '=' may be in a job id; "::1" is an address. */
	assert_int_equal(parse("round round=0 kind=shrink ns=job/a/b=c/round/0 "
	    "rank=0 world=1 donor=0 master_addr=::1 master_port=1 "
	    "local_rank=0 local_world=1", &m), 0);
	assert_int_equal(m.kind, CHAN_SHRINK);
	assert_string_equal(m.ns, "job/a/b=c/round/0");
	assert_string_equal(m.master_addr, "::1");
	assert_int_equal(m.master_port, 1);
	assert_int_equal(parse("round round=2147483647 kind=grow ns=n "
	    "rank=2147483646 world=2147483647 donor=2147483646 master_addr=h "
	    "master_port=65535 local_rank=2147483646 local_world=2147483647",
	    &m), 0);
	assert_int_equal(m.round, INT_MAX);
	assert_int_equal(m.world, INT_MAX);

	assert_int_equal(verb_of("stop"), CHAN_STOP);
	assert_int_equal(verb_of("stop reason=x"), CHAN_STOP);
	assert_int_equal(parse("stop now", &m), RDZV_EPROTO);

	assert_int_equal(verb_of("leave"), CHAN_LEAVE);
	assert_int_equal(verb_of("leave at=3"), CHAN_LEAVE);
	assert_int_equal(parse("leave now", &m), RDZV_EPROTO);

	assert_int_equal(verb_of("done"), CHAN_DONE);
	assert_int_equal(parse("done now", &m), RDZV_EPROTO);
}

/* ROUND_TEXT with the word of key replaced by word (NULL: dropped). */
static int
parse_with(const char *key, const char *word, struct chan_msg *m)
{
	char	buf[1024], *w, *end;
	size_t	kl = strlen(key);

	strlcpy(buf, ROUND_TEXT, sizeof buf);
	for (w = buf; (w = strchr(w, ' ')) != NULL; w++)
		if (strncmp(w + 1, key, kl) == 0 && w[1 + kl] == '=')
			break;
	assert_non_null(w);
	end = strchr(w + 1, ' ');
	memmove(w, end != NULL ? end : w + strlen(w), end != NULL ?
	    strlen(end) + 1 : 1);
	if (word != NULL) {
		strlcat(buf, " ", sizeof buf);
		strlcat(buf, word, sizeof buf);
	}
	return (parse(buf, m));
}

static void
test_round_refused(void **state)
{
	static const char *const keys[] = { "round", "kind", "ns", "rank",
	    "world", "donor", "master_addr", "master_port", "local_rank",
	    "local_world" };
	static const char *const bad[] = {
	    "round=-1", "round=+1", "round=2147483648", "round=x", "round=",
	    "kind=sideways", "kind=", "kind=GROW", "ns=", "rank=4", "rank=-1",
	    "rank=+1", "world=0", "world=2", "donor=4", "donor=9",
	    "master_addr=", "master_port=0", "master_port=65536",
	    "local_rank=2", "local_world=0", "local_world=1",
	    "local_rank=0x1" };
	/* What tests/integ/repair_c.py sends a worker to be ignored. */
	static const char *const junk[] = { "round",
	    "round round=5 kind=shrink",
	    "round round=5 kind=sideways ns=a rank=0 world=1 donor=0",
	    "round round=5 kind=grow ns=a rank=3 world=2 donor=0",
	    "round round=-1 kind=grow ns=a rank=0 world=2 donor=0",
	    "round round=5 kind=grow rank=0 world=2 donor=0",
	    "round round=5 kind=grow ns=a rank=0 world=2 donor=9",
	    "round round=5 kind=grow ns=a rank=x world=2 donor=0" };
	struct chan_msg	m;
	char		addr[RDZV_HOST_MAX + 16];
	size_t		i;

	/* Every field is required. */
	for (i = 0; i < sizeof keys / sizeof keys[0]; i++)
		assert_int_equal(parse_with(keys[i], NULL, &m), RDZV_EPROTO);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memcpy(addr, bad[i], strcspn(bad[i], "="));
		addr[strcspn(bad[i], "=")] = '\0';
		assert_int_equal(parse_with(addr, bad[i], &m), RDZV_EPROTO);
	}
	for (i = 0; i < sizeof junk / sizeof junk[0]; i++)
		assert_int_equal(parse(junk[i], &m), RDZV_EPROTO);
	assert_int_equal(parse_with("ns", "bare", &m), RDZV_EPROTO);
	assert_int_equal(parse(ROUND_TEXT " bare", &m), RDZV_EPROTO);
	/* master_addr fits RDZV_HOST_MAX with its NUL. */
	memset(addr, 'a', sizeof addr);
	memcpy(addr, "master_addr=", 12);
	addr[12 + RDZV_HOST_MAX - 1] = '\0';
	assert_int_equal(parse_with("master_addr", addr, &m), 0);
	assert_int_equal(strlen(m.master_addr), RDZV_HOST_MAX - 1);
	addr[12 + RDZV_HOST_MAX - 1] = 'a';
	addr[12 + RDZV_HOST_MAX] = '\0';
	assert_int_equal(parse_with("master_addr", addr, &m), RDZV_EPROTO);
}

static void
test_format_round(void **state)
{
	struct chan_msg	r;
	char		buf[RDZV_CHAN_MSG_MAX + 1];
	const char	*want;
	int		n;

	round_ok(&r);
	n = chan_format(buf, sizeof buf, &r);
	assert_int_equal(n, (int)strlen(ROUND_TEXT));
	assert_string_equal(buf, ROUND_TEXT);

	r.kind = CHAN_SHRINK;
	strlcpy(r.ns, "job/a/b=c/round/8", sizeof r.ns);
	r.round = 8;
	r.rank = 0;
	r.world = 1;
	strlcpy(r.master_addr, "::1", sizeof r.master_addr);
	want = "round round=8 kind=shrink ns=job/a/b=c/round/8 rank=0 "
	    "world=1 donor=0 master_addr=::1 master_port=29500 local_rank=1 "
	    "local_world=2";
	n = chan_format(buf, sizeof buf, &r);
	assert_int_equal(n, (int)strlen(want));
	assert_string_equal(buf, want);
}

static void
test_format_refuses(void **state)
{
	struct chan_msg	r;
	char		buf[RDZV_CHAN_MSG_MAX + 1];
	int		n;

#define BAD(field, value) do {						\
	round_ok(&r);							\
	r.field = value;						\
	assert_int_equal(chan_format(buf, sizeof buf, &r), RDZV_EINVAL); \
} while (0)
#define BADSTR(field, value) do {					\
	round_ok(&r);							\
	strlcpy(r.field, value, sizeof r.field);			\
	assert_int_equal(chan_format(buf, sizeof buf, &r), RDZV_EINVAL); \
} while (0)
	BADSTR(ns, "job/my job/round/1");
	BADSTR(ns, "");
	BADSTR(ns, "job/\x01/round/1");
	BADSTR(ns, "job/\xc3\xa9/round/1");
	BADSTR(ns, "job/\x7f/round/1");
	BADSTR(master_addr, "host name");
	BADSTR(master_addr, "");
	BAD(rank, 4);
	BAD(rank, -1);
	BAD(donor, 4);
	BAD(donor, -1);
	BAD(world, 0);
	BAD(round, -1);
	BAD(local_rank, 2);
	BAD(local_rank, -1);
	BAD(local_world, 0);
	BAD(master_port, 0);
	BAD(master_port, 65536);
	BAD(master_port, -1);
	BAD(kind, (enum chan_kind)7);
	BAD(kind, (enum chan_kind)0);
	BAD(verb, CHAN_UNKNOWN);
	BAD(verb, (enum chan_verb)99);
#undef BAD
#undef BADSTR
	/* A namespace that fills its array has no NUL: refused. */
	round_ok(&r);
	memset(r.ns, 'n', sizeof r.ns);
	assert_int_equal(chan_format(buf, sizeof buf, &r), RDZV_EINVAL);

	/* The longest namespace there is makes the message pass 512. */
	r.ns[sizeof r.ns - 1] = '\0';
	assert_int_equal(chan_format(buf, sizeof buf, &r), RDZV_ETOOBIG);
	assert_string_equal(buf, "");
	/* The longest that fits is exactly 512 bytes; one more is not. */
	round_ok(&r);
	n = (int)strlen(ROUND_TEXT);
	memset(r.ns, 'n', sizeof r.ns);
	r.ns[strlen("job/j1/round/7") + RDZV_CHAN_MSG_MAX - n] = '\0';
	assert_int_equal(chan_format(buf, sizeof buf, &r), RDZV_CHAN_MSG_MAX);
	assert_int_equal(strlen(buf), RDZV_CHAN_MSG_MAX);
	n = (int)strlen(r.ns);
	r.ns[n + 1] = '\0';
	r.ns[n] = 'n';
	assert_int_equal(chan_format(buf, sizeof buf, &r), RDZV_ETOOBIG);
	/* A small buffer is refused too, never overrun. */
	round_ok(&r);
	memset(buf, 'Z', sizeof buf);
	assert_int_equal(chan_format(buf, 20, &r), RDZV_ETOOBIG);
	assert_string_equal(buf, "");
	assert_int_equal(buf[20], 'Z');
	assert_int_equal(chan_format(buf, strlen(ROUND_TEXT), &r),
	    RDZV_ETOOBIG);
	assert_int_equal(chan_format(buf, strlen(ROUND_TEXT) + 1, &r),
	    (int)strlen(ROUND_TEXT));
	assert_int_equal(chan_format(buf, 0, &r), RDZV_ETOOBIG);
}

/* Formats m, expects text, and decodes it back to the same fields. */
static void
round_trip(const struct chan_msg *m, const char *text)
{
	struct chan_msg	back;
	char		buf[RDZV_CHAN_MSG_MAX + 1];
	int		n;

	n = chan_format(buf, sizeof buf, m);
	assert_int_equal(n, (int)strlen(text));
	assert_string_equal(buf, text);
	assert_int_equal(chan_parse(buf, (size_t)n, &back), 0);
	assert_memory_equal(&back, m, sizeof back);
}

static void
test_round_trips(void **state)
{
	struct chan_msg	m;

	memset(&m, 0, sizeof m);
	m.verb = CHAN_PROGRESS;
	round_trip(&m, "0");
	m.step = INT64_MAX;
	round_trip(&m, "9223372036854775807");
	m.step = (uint64_t)INT64_MAX + 1;
	assert_int_equal(chan_format((char [32]){ 0 }, 32, &m), RDZV_EINVAL);

	memset(&m, 0, sizeof m);
	m.verb = CHAN_HELLO;
	round_trip(&m, "hello repair=0");
	m.repair = 1;
	round_trip(&m, "hello repair=1");
	m.repair = 2;
	assert_int_equal(chan_format((char [32]){ 0 }, 32, &m), RDZV_EINVAL);

	memset(&m, 0, sizeof m);
	m.verb = CHAN_READY;
	round_trip(&m, "ready");
	m.verb = CHAN_STOP;
	round_trip(&m, "stop");
	m.verb = CHAN_LEAVE;
	round_trip(&m, "leave");
	m.verb = CHAN_DONE;
	round_trip(&m, "done");

	round_ok(&m);
	round_trip(&m, ROUND_TEXT);
	m.kind = CHAN_SHRINK;
	m.round = INT_MAX;
	m.world = INT_MAX;
	m.rank = INT_MAX - 1;
	m.donor = INT_MAX - 1;
	m.master_port = 65535;
	m.local_rank = INT_MAX - 1;
	m.local_world = INT_MAX;
	round_trip(&m, "round round=2147483647 kind=shrink ns=job/j1/round/7 "
	    "rank=2147483646 world=2147483647 donor=2147483646 "
	    "master_addr=127.0.0.1 master_port=65535 local_rank=2147483646 "
	    "local_world=2147483647");
}

/*
 * chan_recv on a real socket pair: an empty datagram reads as 0 (a
 * message) while the peer is there and while a real one waits behind it
 * after the peer is gone; the end reads as RDZV_ECONN, once only empty
 * datagrams are left; nothing queued is RDZV_EBUSY; a datagram over the
 * buffer gives its whole length.
 */
static void
test_recv_empty_vs_eof(void **state)
{
	char	buf[RDZV_CHAN_MSG_MAX + 1], big[RDZV_CHAN_MSG_MAX + 100];
	int	sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	assert_int_equal(chan_recv(sv[0], buf, sizeof buf), RDZV_EBUSY);
	assert_int_equal(send(sv[1], "", 0, 0), 0);
	assert_int_equal(send(sv[1], "12", 2, 0), 2);
	assert_int_equal(chan_recv(sv[0], buf, sizeof buf), 0);
	assert_int_equal(chan_recv(sv[0], buf, sizeof buf), 2);
	assert_memory_equal(buf, "12", 2);
	assert_int_equal(chan_recv(sv[0], buf, sizeof buf), RDZV_EBUSY);

	memset(big, '7', sizeof big);
	assert_int_equal(send(sv[1], big, sizeof big, 0), (ssize_t)sizeof big);
	assert_int_equal(chan_recv(sv[0], buf, sizeof buf), (ssize_t)sizeof big);

	/* The worker says "" then its step, and exits at once. */
	assert_int_equal(send(sv[1], "", 0, 0), 0);
	assert_int_equal(send(sv[1], "34", 2, 0), 2);
	assert_int_equal(send(sv[1], "", 0, 0), 0);
	close(sv[1]);
	assert_int_equal(chan_recv(sv[0], buf, sizeof buf), 0);
	assert_int_equal(chan_recv(sv[0], buf, sizeof buf), 2);
	assert_memory_equal(buf, "34", 2);
	/* Only an empty datagram is left: that is the end. */
	assert_int_equal(chan_recv(sv[0], buf, sizeof buf), RDZV_ECONN);
	assert_int_equal(chan_recv(sv[0], buf, sizeof buf), RDZV_ECONN);
	close(sv[0]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_hello_ready),
		cmocka_unit_test(test_unknown_and_malformed),
		cmocka_unit_test(test_round_stop),
		cmocka_unit_test(test_round_refused),
		cmocka_unit_test(test_format_round),
		cmocka_unit_test(test_format_refuses),
		cmocka_unit_test(test_round_trips),
		cmocka_unit_test(test_recv_empty_vs_eof),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
