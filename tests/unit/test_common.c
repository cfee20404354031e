/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_common.c: unit tests of common/'s small helpers: hostport.c
 * (every way to write an endpoint, right and wrong, under each flag, and
 * the way back) and mono.c (the clock's units agree and never go back).
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hostport.h"
#include "mono.h"
#include "rdzv_err.h"

#define Z	HOSTPORT_PORT_ZERO
#define O	HOSTPORT_PORT_OPT
#define E	HOSTPORT_HOST_EMPTY

/* One input under some flags: the host and port, or what why says. */
struct split_case {
	const char	*in;
	int		 flags;
	const char	*host;		/* NULL: refused */
	int		 port;
	const char	*why;		/* a part of the refusal's sentence */
};

static const struct split_case split_cases[] = {
	{ "h:1",		0, "h", 1, NULL },
	{ "example.org:29400",	0, "example.org", 29400, NULL },
	{ "127.0.0.1:65535",	0, "127.0.0.1", 65535, NULL },
	{ "[::1]:80",		0, "::1", 80, NULL },
	{ "[fe80::1%eth0]:80",	0, "fe80::1%eth0", 80, NULL },
	{ "h:0080",		0, "h", 80, NULL },
	{ "::1",		0, NULL, 0, "goes in brackets" },
	{ "::1:80",		0, NULL, 0, "goes in brackets" },
	{ "::1",		O, NULL, 0, "goes in brackets" },
	{ ":5",			0, NULL, 0, "no host" },
	{ "[]:5",		0, NULL, 0, "no host" },
	{ ":5",			E, "", 5, NULL },
	{ "[]:5",		E, "", 5, NULL },
	{ "*:5",		E, "*", 5, NULL },
	{ "h:0",		0, NULL, 0, "from 1 to 65535" },
	{ "h:0",		Z, "h", 0, NULL },
	{ "[::]:0",		Z | E, "::", 0, NULL },
	{ "h:65536",		0, NULL, 0, "from 1 to 65535" },
	{ "h:65536",		Z, NULL, 0, "from 0 to 65535" },
	{ "h:99999999999999999999", 0, NULL, 0, "from 1 to 65535" },
	{ "h:",			0, NULL, 0, "not a number" },
	{ "h:",			O, NULL, 0, "not a number" },
	{ "h:80x",		0, NULL, 0, "not a number" },
	{ "h:80 ",		0, NULL, 0, "not a number" },
	{ "h: 80",		0, NULL, 0, "not a number" },
	{ "h:+80",		0, NULL, 0, "not a number" },
	{ "h:-1",		Z, NULL, 0, "not a number" },
	{ "h:http",		0, NULL, 0, "not a number" },
	{ "[::1]:80x",		0, NULL, 0, "not a number" },
	{ "[::1]x",		0, NULL, 0, "expected [IPV6]:PORT" },
	{ "[::1]x",		O, NULL, 0, "expected [IPV6]:PORT" },
	{ "[::1]",		0, NULL, 0, "expected [IPV6]:PORT" },
	{ "[::1]",		O, "::1", -1, NULL },
	{ "[::1:80",		0, NULL, 0, "no ']'" },
	{ "h",			0, NULL, 0, "expected HOST:PORT" },
	{ "h",			O, "h", -1, NULL },
	{ "h:7",		O, "h", 7, NULL },
	{ "",			0, NULL, 0, "expected HOST:PORT" },
	{ "",			O, NULL, 0, "no host" },
};

static void
test_split_table(void **state)
{
	const struct split_case	*c;
	char			 host[RDZV_HOST_MAX], why[256];
	size_t			 i;
	int			 port, rv;

	for (i = 0; i < sizeof split_cases / sizeof split_cases[0]; i++) {
		c = &split_cases[i];
		port = -2;
		why[0] = '\0';
		rv = hostport_split(c->in, c->flags, host, sizeof host, &port,
		    why, sizeof why);
		print_message("\"%s\" flags %d: %d %s\n", c->in, c->flags, rv,
		    why);
		if (c->host != NULL) {
			assert_int_equal(rv, 0);
			assert_string_equal(host, c->host);
			assert_int_equal(port, c->port);
			continue;
		}
		assert_int_equal(rv, RDZV_EINVAL);
		assert_int_equal(port, -2);	/* untouched */
		assert_non_null(strstr(why, c->why));
		/* Every refusal names the input it refuses. */
		assert_true(strncmp(why, "\"", 1) == 0);
		assert_non_null(strstr(why, c->in));
	}
}

/* The host buffer's size bounds the host; why may be left out. */
static void
test_split_sizes(void **state)
{
	char	long_host[RDZV_HOST_MAX + 8], in[RDZV_HOST_MAX + 16];
	char	host[RDZV_HOST_MAX], small[4], why[512];
	int	port;

	assert_int_equal(hostport_split("abc:1", 0, small, sizeof small,
	    &port, NULL, 0), 0);
	assert_string_equal(small, "abc");
	assert_int_equal(hostport_split("abcd:1", 0, small, sizeof small,
	    &port, why, sizeof why), RDZV_EINVAL);
	assert_non_null(strstr(why, "longer than 3 bytes"));
	assert_int_equal(hostport_split("[abcd]:1", 0, small, sizeof small,
	    &port, NULL, 0), RDZV_EINVAL);
	assert_int_equal(hostport_split(NULL, 0, host, sizeof host, &port,
	    why, sizeof why), RDZV_EINVAL);
	assert_non_null(strstr(why, "no endpoint"));

	memset(long_host, 'a', RDZV_HOST_MAX - 1);
	long_host[RDZV_HOST_MAX - 1] = '\0';
	snprintf(in, sizeof in, "%s:1", long_host);
	assert_int_equal(hostport_split(in, 0, host, sizeof host, &port,
	    why, sizeof why), 0);
	assert_string_equal(host, long_host);
	snprintf(in, sizeof in, "a%s:1", long_host);
	assert_int_equal(hostport_split(in, 0, host, sizeof host, &port,
	    why, sizeof why), RDZV_EINVAL);
	/* A why too small for the sentence is cut, still terminated. */
	assert_int_equal(hostport_split("h", 0, host, sizeof host, &port,
	    small, sizeof small), RDZV_EINVAL);
	assert_string_equal(small, "\"h\"");
}

static void
test_join(void **state)
{
	static const struct {
		const char	*host;
		int		 port;
		const char	*out;
	} cases[] = {
		{ "h", 1, "h:1" },
		{ "127.0.0.1", 29400, "127.0.0.1:29400" },
		{ "::1", 80, "[::1]:80" },
		{ "::", 0, "[::]:0" },
		{ "", 5, ":5" },
		{ "*", 5, "*:5" },
	};
	char	buf[RDZV_HOSTPORT_MAX], host[RDZV_HOST_MAX], small[8];
	size_t	i;
	int	port;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		assert_int_equal(hostport_join(buf, sizeof buf, cases[i].host,
		    cases[i].port), 0);
		assert_string_equal(buf, cases[i].out);
		/* And back. */
		assert_int_equal(hostport_split(buf, Z | E, host, sizeof host,
		    &port, NULL, 0), 0);
		assert_string_equal(host, cases[i].host);
		assert_int_equal(port, cases[i].port);
	}
	assert_int_equal(hostport_join(small, sizeof small, "::1", 80),
	    RDZV_EINVAL);
	assert_int_equal(hostport_join(small, sizeof small, "h", 29400), 0);
	assert_string_equal(small, "h:29400");
	/* The longest host fits RDZV_HOSTPORT_MAX with brackets and port. */
	memset(host, ':', RDZV_HOST_MAX - 1);
	host[RDZV_HOST_MAX - 1] = '\0';
	assert_int_equal(hostport_join(buf, sizeof buf, host, 65535), 0);
}

static void
test_mono(void **state)
{
	int64_t	ms, us, ns, prev, i;

	ms = mono_ms();
	us = mono_us();
	ns = mono_ns();
	assert_true(ms > 0);
	/* Read in that order, each unit's reading is no later. */
	assert_true(ms <= us / 1000);
	assert_true(us <= ns / 1000);
	assert_true(ns / 1000000 - ms < 60000);
	prev = mono_ns();
	for (i = 0; i < 100000; i++) {
		ns = mono_ns();
		assert_true(ns >= prev);
		prev = ns;
	}
}

/* Endpoint lists: counted and cut at commas, entries bounded. */
static void
test_list(void **state)
{
	char	buf[16], small[4];

	assert_int_equal(hostport_list_count("a:1"), 1);
	assert_int_equal(hostport_list_count("a:1,b:2,[::1]:3"), 3);
	assert_int_equal(hostport_list_count(""), 1);
	assert_int_equal(hostport_list_count("a:1,"), 2);
	assert_int_equal(hostport_list_get("a:1,b:2,[::1]:3", 0, buf,
	    sizeof buf), 0);
	assert_string_equal(buf, "a:1");
	assert_int_equal(hostport_list_get("a:1,b:2,[::1]:3", 2, buf,
	    sizeof buf), 0);
	assert_string_equal(buf, "[::1]:3");
	assert_int_equal(hostport_list_get("a:1,b:2", 2, buf, sizeof buf),
	    RDZV_ENOTFOUND);
	assert_int_equal(hostport_list_get("a:1,", 1, buf, sizeof buf), 0);
	assert_string_equal(buf, "");
	/* An entry that does not fit is refused, not cut. */
	assert_int_equal(hostport_list_get("abcd:1,b:2", 0, small,
	    sizeof small), RDZV_EINVAL);
	assert_int_equal(hostport_list_get("abcd:1,b:2", 1, small,
	    sizeof small), 0);
	assert_string_equal(small, "b:2");
}

/* Port ranges (--round-ports): LO-HI within 1..65535, LO <= HI. */
static void
test_range(void **state)
{
	static const char *const bad[] = {
		"", "-", "5-", "-5", "5-3", "0-10", "1-65536", "a-b", "+1-2",
		"1 -2", "1-2-3", "1--2", "123456-123457", " 1-2", NULL
	};
	char	why[256];
	int	lo = -2, hi = -2;
	size_t	i;

	assert_int_equal(hostport_range("30000-30999", &lo, &hi, why,
	    sizeof why), 0);
	assert_int_equal(lo, 30000);
	assert_int_equal(hi, 30999);
	assert_int_equal(hostport_range("1-65535", &lo, &hi, NULL, 0), 0);
	assert_int_equal(lo, 1);
	assert_int_equal(hi, 65535);
	assert_int_equal(hostport_range("7", &lo, &hi, NULL, 0), 0);
	assert_int_equal(lo, 7);
	assert_int_equal(hi, 7);
	for (i = 0; bad[i] != NULL; i++) {
		lo = hi = -2;
		why[0] = '\0';
		assert_int_equal(hostport_range(bad[i], &lo, &hi, why,
		    sizeof why), RDZV_EINVAL);
		print_message("\"%s\": %s\n", bad[i], why);
		assert_int_equal(lo, -2);	/* untouched */
		assert_int_equal(hi, -2);
		assert_true(strncmp(why, "\"", 1) == 0);
		assert_non_null(strstr(why, bad[i]));
	}
	assert_int_equal(hostport_range(NULL, &lo, &hi, NULL, 0),
	    RDZV_EINVAL);
	assert_int_equal(hostport_range("9-8", &lo, &hi, why, sizeof why),
	    RDZV_EINVAL);
	assert_non_null(strstr(why, "empty"));
}

int
main(void)
{
	const struct CMUnitTest	tests[] = {
		cmocka_unit_test(test_split_table),
		cmocka_unit_test(test_split_sizes),
		cmocka_unit_test(test_join),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_range),
		cmocka_unit_test(test_mono),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
