/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cli_opts.c: rdzv-agent's option table (agent/cli_opts.c), walked
 * row by row: every row is well formed and has help; no two rows share a
 * spelling, a letter, a PET_ name or a field; each row's setter sets
 * what the row says for one sample value (and refuses a bad one); flags
 * read PET_ values as torch does; --help names every row in 79 columns.
 */
#include "config.h"

#include <sys/types.h>

#include <ctype.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "agent.h"
#include "wire.h"

static const struct cli_opt *
row(const char *name)
{
	size_t	i;

	for (i = 0; i < cli_nopts; i++)
		if (strcmp(cli_opts[i].name, name) == 0)
			return (&cli_opts[i]);
	fail_msg("no row %s", name);
	return (NULL);
}

static void *
field(struct cli_state *st, const struct cli_opt *o)
{
	return ((char *)st->cfg + o->off);
}

/* Every row: a lowercase underscore name, help, a kind that fits it. */
static void
test_rows_well_formed(void **state)
{
	const struct cli_opt	*o;
	const char		*p, *nl;
	size_t			 i;

	(void)state;
	assert_true(cli_nopts > 40);
	for (i = 0; i < cli_nopts; i++) {
		o = &cli_opts[i];
		assert_non_null(o->name);
		assert_true(strlen(o->name) > 1);
		for (p = o->name; *p != '\0'; p++)
			assert_true(islower((unsigned char)*p) || *p == '_');
		assert_non_null(o->help);
		assert_true(*o->help != '\0');
		assert_int_not_equal(o->help[strlen(o->help) - 1], '\n');
		/* Each line of help fits beside the option's column. */
		for (p = o->help; p != NULL; p = nl != NULL ? nl + 1 : NULL) {
			nl = strchr(p, '\n');
			assert_true((nl != NULL ? (size_t)(nl - p) :
			    strlen(p)) <= 79 - 28);
		}
		if (o->kind == CLI_FN)
			assert_non_null(o->set);
		else
			assert_null(o->set);
		if (o->kind == CLI_FLAG)
			assert_null(o->arg);
		if (o->kind == CLI_STR || o->kind == CLI_INT ||
		    o->kind == CLI_SECONDS)
			assert_non_null(o->arg);
		if (o->kind == CLI_INT)
			assert_true(o->min <= o->max);
		else
			assert_true(o->min == 0 && o->max == 0);
	}
}

/* No spelling, letter or PET_ name twice: getopt would take the first. */
static void
test_no_duplicate_names(void **state)
{
	char	a[64], b[64], *p;
	size_t	i, j;

	(void)state;
	for (i = 0; i < cli_nopts; i++) {
		strlcpy(a, cli_opts[i].name, sizeof a);
		for (p = a; (p = strchr(p, '_')) != NULL; )
			*p = '-';
		for (j = 0; j < cli_nopts; j++) {
			if (i == j)
				continue;
			/* The PET_ name is the upper case of either. */
			assert_true(strcasecmp(cli_opts[i].name,
			    cli_opts[j].name) != 0);
			strlcpy(b, cli_opts[j].name, sizeof b);
			for (p = b; (p = strchr(p, '_')) != NULL; )
				*p = '-';
			assert_string_not_equal(a, b);
			assert_string_not_equal(a, cli_opts[j].name);
			if (cli_opts[i].shortc != 0)
				assert_int_not_equal(cli_opts[i].shortc,
				    cli_opts[j].shortc);
		}
	}
}

/*
 * No two rows of a kind with a field set the same one, but for a row
 * whose help says it is the same as the other (--shutdown_timeout).
 */
static void
test_one_field_per_row(void **state)
{
	const struct cli_opt	*a, *b;
	char			 same[96];
	size_t			 i, j;

	(void)state;
	for (i = 0; i < cli_nopts; i++) {
		a = &cli_opts[i];
		if (a->kind == CLI_FN || a->kind == CLI_ACCEPT)
			continue;
		for (j = i + 1; j < cli_nopts; j++) {
			b = &cli_opts[j];
			if (b->kind == CLI_FN || b->kind == CLI_ACCEPT ||
			    a->off != b->off)
				continue;
			snprintf(same, sizeof same, "the same as --%s",
			    a->name);
			if (strncmp(b->help, same, strlen(same)) != 0)
				fail_msg("--%s and --%s set one field",
				    a->name, b->name);
		}
	}
}

/*
 * st with a fresh configuration.  The agent's lives as long as the
 * process and is never freed; so is each one made here (kept reachable,
 * not leaked: the sanitizer leg's leak check runs on this test too).
 */
static void
fresh(struct cli_state *st)
{
	static struct agent_config	kept[256];
	static size_t			n;

	assert_true(n < sizeof kept / sizeof kept[0]);
	cli_opts_init(st, &kept[n++]);
}

/* A row of a generic kind sets its field; a bad value is refused. */
static void
test_kind_setters(void **state)
{
	struct cli_state	 st;
	const struct cli_opt	*o;
	char			 buf[32];
	long long		 n;
	size_t			 i;

	(void)state;
	for (i = 0; i < cli_nopts; i++) {
		o = &cli_opts[i];
		fresh(&st);
		switch (o->kind) {
		case CLI_FLAG:
			*(int *)field(&st, o) = 0;
			assert_int_equal(cli_opts_apply(&st, o, NULL), 0);
			assert_int_equal(*(int *)field(&st, o), 1);
			break;
		case CLI_STR:
			assert_int_equal(cli_opts_apply(&st, o, "sample"), 0);
			assert_string_equal(*(char **)field(&st, o), "sample");
			break;
		case CLI_INT:
			n = o->min < o->max ? o->min + 1 : o->min;
			snprintf(buf, sizeof buf, "%lld", n);
			assert_int_equal(cli_opts_apply(&st, o, buf), 0);
			assert_int_equal(*(int *)field(&st, o), n);
			assert_int_equal(cli_opts_apply(&st, o, "x"), -1);
			snprintf(buf, sizeof buf, "%lld", o->max + 1);
			assert_int_equal(cli_opts_apply(&st, o, buf), -1);
			break;
		case CLI_SECONDS:
			assert_int_equal(cli_opts_apply(&st, o, "1.5"), 0);
			assert_int_equal(*(int *)field(&st, o), 1500);
			assert_int_equal(cli_opts_apply(&st, o, "-1"), -1);
			break;
		case CLI_ACCEPT:
			assert_int_equal(cli_opts_apply(&st, o,
			    o->arg != NULL ? "anything" : NULL), 0);
			break;
		case CLI_FN:
			break;
		}
		if (o->kind != CLI_FN && o->kind != CLI_ACCEPT)
			assert_int_equal(st.given, o->given);
	}
}

/* ---- one sample per row with a setter of its own ---- */

static int
ck_nnodes(const struct cli_state *st)
{
	return (st->cfg->nnodes_min == 2 && st->cfg->nnodes_max == 4 &&
	    st->given == CLI_GIVEN_NNODES);
}

static int
ck_endpoint(const struct cli_state *st)
{
	return (strcmp(st->cfg->endpoint, "h:1234") == 0 &&
	    st->given == CLI_GIVEN_ENDPOINT);
}

static int
ck_id(const struct cli_state *st)
{
	return (strcmp(st->cfg->rdzv_id, "job/7") == 0 &&
	    st->given == CLI_GIVEN_ID);
}

static int
ck_backend(const struct cli_state *st)
{
	return (strcmp(st->cfg->rdzv_backend, "c10d") == 0 &&
	    st->given == CLI_GIVEN_BACKEND);
}

static int
ck_conf(const struct cli_state *st)
{
	return (strcmp(st->cfg->rdzv_conf, "lease=2,timeout=9") == 0 &&
	    st->cfg->lease_ms == 2000 && st->timeout_ms == 9000 &&
	    st->given == CLI_GIVEN_LEASE);
}

static int
ck_monitor(const struct cli_state *st)
{
	return (st->cfg->monitor_interval == 0.5);
}

static int
ck_redirects(const struct cli_state *st)
{
	return (strcmp(st->cfg->redirects, "0:3,1:2") == 0);
}

static int
ck_tee(const struct cli_state *st)
{
	return (strcmp(st->cfg->tee, "2") == 0);
}

static int
ck_signals(const struct cli_state *st)
{
	return (sigismember(&st->cfg->fwd_signals, SIGWINCH) == 1 &&
	    sigismember(&st->cfg->fwd_signals, SIGUSR1) == 1 &&
	    sigismember(&st->cfg->fwd_signals, SIGTERM) == 0);
}

static int
ck_ranks(const struct cli_state *st)
{
	return (strcmp(st->cfg->ranks_filter, "0,2") == 0 &&
	    cli_rank_shown(st->cfg, 2) && !cli_rank_shown(st->cfg, 1));
}

static int
ck_numa(const struct cli_state *st)
{
	return (st->cfg->numa_mode == SUP_NUMA_SOCKET);
}

static int
ck_warm_spare(const struct cli_state *st)
{
	return (st->cfg->warm_spare == 0);
}

static int
ck_round_ports(const struct cli_state *st)
{
	return (st->cfg->round_ports[0] == 3000 &&
	    st->cfg->round_ports[1] == 3010);
}

/* The ignored and printing rows set nothing. */
static int
ck_nothing(const struct cli_state *st)
{
	return (st->given == 0);
}

static const struct fn_case {
	const char	*name;
	const char	*good;	/* NULL for a flag */
	int		 rv;	/* what good returns */
	int		(*check)(const struct cli_state *);
	const char	*bad;	/* refused, or NULL */
} fn_cases[] = {
	{ "nnodes", "2:4", 0, ck_nnodes, "3:2" },
	{ "rdzv_endpoint", "h:1234", 0, ck_endpoint, NULL },
	{ "rdzv_id", "job/7", 0, ck_id, "a b" },
	{ "rdzv_backend", "c10d", 0, ck_backend, "etcd" },
	{ "rdzv_conf", "lease=2,timeout=9", 0, ck_conf, "lease" },
	{ "monitor_interval", "0.5", 0, ck_monitor, NULL },
	{ "redirects", "0:3,1:2", 0, ck_redirects, "0:9" },
	{ "tee", "2", 0, ck_tee, "7" },
	{ "signals_to_handle", "SIGWINCH, usr1,SIGTERM", 0, ck_signals,
	  "SIGKILL" },
	{ "local_ranks_filter", "0,2", 0, ck_ranks, "0," },
	{ "numa_binding", "socket", 0, ck_numa, "bad" },
	{ "duplicate_stdout_filters", "w", 0, ck_nothing, NULL },
	{ "duplicate_stderr_filters", "w", 0, ck_nothing, NULL },
	{ "event_log_handler", "null", 0, ck_nothing, NULL },
	{ "logs_specs", "x", 0, ck_nothing, NULL },
	{ "warm_spare", "0", 0, ck_warm_spare, "" },
	{ "round_ports", "3000-3010", 0, ck_round_ports, "3010-3000" },
	{ "help", NULL, 1, ck_nothing, NULL },
	{ "version", NULL, 1, ck_nothing, NULL },
};

/* Each setter of its own does what its row says, and every one is here. */
static void
test_fn_setters(void **state)
{
	struct cli_state	 st;
	const struct fn_case	*c;
	size_t			 i, j;

	(void)state;
	for (i = 0; i < sizeof fn_cases / sizeof fn_cases[0]; i++) {
		c = &fn_cases[i];
		assert_int_equal(row(c->name)->kind, CLI_FN);
		fresh(&st);
		assert_int_equal(cli_opts_apply(&st, row(c->name), c->good),
		    c->rv);
		if (!c->check(&st))
			fail_msg("--%s %s: not what its row says", c->name,
			    c->good != NULL ? c->good : "");
		if (c->bad != NULL) {
			fresh(&st);
			assert_int_equal(cli_opts_apply(&st, row(c->name),
			    c->bad), -1);
		}
	}
	for (i = 0; i < cli_nopts; i++) {
		if (cli_opts[i].kind != CLI_FN)
			continue;
		for (j = 0; j < sizeof fn_cases / sizeof fn_cases[0]; j++)
			if (strcmp(fn_cases[j].name, cli_opts[i].name) == 0)
				break;
		if (j == sizeof fn_cases / sizeof fn_cases[0])
			fail_msg("--%s has a setter of its own and no case "
			    "here", cli_opts[i].name);
	}
}

/* The row's given bits; an empty endpoint names none (PET_ then ""). */
static void
test_given(void **state)
{
	struct cli_state	 st;

	(void)state;
	fresh(&st);
	assert_int_equal(cli_opts_apply(&st, row("master_port"), "5"), 0);
	assert_int_equal(cli_opts_apply(&st, row("node_rank"), "1"), 0);
	assert_int_equal(st.given, CLI_GIVEN_MASTER | CLI_GIVEN_NODE_RANK);
	assert_int_equal(cli_opts_apply(&st, row("rdzv_endpoint"), "h"), 0);
	assert_true(st.given & CLI_GIVEN_ENDPOINT);
	assert_int_equal(cli_opts_apply(&st, row("rdzv_endpoint"), ""), 0);
	assert_false(st.given & CLI_GIVEN_ENDPOINT);
	/* A refused value sets no bit. */
	fresh(&st);
	assert_int_equal(cli_opts_apply(&st, row("nnodes"), "x"), -1);
	assert_int_equal(st.given, 0);
}

/* A flag's PET_ value is torch's int(): 0 leaves it, 1 sets it. */
static void
test_flag_from_pet(void **state)
{
	struct cli_state	 st;

	(void)state;
	fresh(&st);
	assert_int_equal(cli_opts_apply(&st, row("standalone"), "0"), 0);
	assert_int_equal(st.cfg->standalone, 0);
	assert_int_equal(cli_opts_apply(&st, row("standalone"), ""), 0);
	assert_int_equal(st.cfg->standalone, 0);
	assert_int_equal(cli_opts_apply(&st, row("standalone"), "maybe"), -1);
	assert_int_equal(cli_opts_apply(&st, row("standalone"), "true"), 0);
	assert_int_equal(st.cfg->standalone, 1);
	/* PET_HELP=0 prints nothing. */
	assert_int_equal(cli_opts_apply(&st, row("help"), "0"), 0);
}

/* --help names every row, in both forms where it has a letter. */
static void
test_usage_names_every_row(void **state)
{
	char	*text = NULL, *line, *next, want[96];
	size_t	 len = 0, i;
	FILE	*f;

	(void)state;
	assert_non_null(f = open_memstream(&text, &len));
	cli_opts_usage(f);
	assert_int_equal(fclose(f), 0);
	for (i = 0; i < cli_nopts; i++) {
		if (cli_opts[i].shortc != 0)
			snprintf(want, sizeof want, "\n  -%c, --%s%s",
			    cli_opts[i].shortc, cli_opts[i].name,
			    cli_opts[i].arg != NULL ? " " : "");
		else
			snprintf(want, sizeof want, "\n  --%s%s",
			    cli_opts[i].name,
			    cli_opts[i].arg != NULL ? " " : "");
		if (strstr(text, want) == NULL)
			fail_msg("--help lacks \"%s\"", want + 1);
	}
	for (line = text; line != NULL; line = next) {
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		assert_true(strlen(line) <= 79);
	}
	free(text);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows_well_formed),
		cmocka_unit_test(test_no_duplicate_names),
		cmocka_unit_test(test_one_field_per_row),
		cmocka_unit_test(test_kind_setters),
		cmocka_unit_test(test_fn_setters),
		cmocka_unit_test(test_given),
		cmocka_unit_test(test_flag_from_pet),
		cmocka_unit_test(test_usage_names_every_row),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
