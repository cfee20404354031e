/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rdzvctl.c: the operator's command line for rdzvd: status, jobs,
 * members, events, top, kv, close, evict and forget.
 *
 * Owns option parsing (global options anywhere on the line, each
 * command's own options checked against it), one function per command,
 * and the two outputs: the server's JSON as is with --json, aligned
 * tables otherwise.  Exit statuses are part of the interface (ctl.h,
 * rdzvctl(1)): 0 done, 1 rdzvd said no, 2 usage, 3 no connection or no
 * answer in time, 4 authentication or TLS refused or failed.
 */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "auth.h"
#include "client.h"
#include "ctl.h"
#include "hostport.h"
#include "rdzv_err.h"
#include "tls.h"
#include "wire.h"

#define CTL_TIMEOUT_MS		10000
#define CTL_FOLLOW_WAIT_MS	10000	/* rdzvd holds an ADMIN_EVENTS this long */
#define CTL_CLOSE_REASON	"closed with rdzvctl"
#define CTL_VALUE_MAX		((size_t)64 << 20)	/* kv set VALUE from stdin */
#define CTL_TOP_PERIOD_MS	1000	/* top: one view a second */
#define CTL_TOP_STALL_MS	5000	/* top: no new step this long: 0/s */
#define CTL_TOP_EVENTS		8	/* top: events shown on a terminal */

/* Command options; each command lists the ones it takes. */
#define OPT_NS		0x01
#define OPT_REASON	0x02
#define OPT_FOLLOW	0x04
#define OPT_AFTER	0x08
#define OPT_COUNT	0x10
#define OPT_NOW		0x20
#define OPT_OUT		0x40
#define OPT_LAST	OPT_OUT		/* the highest */

struct ctl {
	struct ctl_opts	 o;
	int		 json;
	unsigned	 given;		/* OPT_* seen on the line */
	const char	*ns;
	const char	*reason;
	int		 follow;
	int64_t		 after;
	int64_t		 count;		/* top: views, 0 until closed */
	int		 now;		/* evict: drop at once */
	const char	*out;		/* credential: the file to write */
	const char	*cmd;
	char		 errmsg[256];
};

struct cmd {
	const char	*name;
	const char	*synopsis;
	const char	*help;
	unsigned	 opts;
	int		 minargs, maxargs;
	int		(*fn)(struct ctl *, int, char **);
};

static int	cmd_status(struct ctl *, int, char **);
static int	cmd_jobs(struct ctl *, int, char **);
static int	cmd_members(struct ctl *, int, char **);
static int	cmd_events(struct ctl *, int, char **);
static int	cmd_top(struct ctl *, int, char **);
static int	cmd_kv(struct ctl *, int, char **);
static int	cmd_close(struct ctl *, int, char **);
static int	cmd_evict(struct ctl *, int, char **);
static int	cmd_forget(struct ctl *, int, char **);
static int	cmd_credential(struct ctl *, int, char **);

static const struct cmd cmds[] = {
	{ "status", "status",
	  "rdzvd's version, uptime, durability, database, keys, waiters,\n"
	  "connections, and how many jobs are forming, running and closed.\n",
	  0, 0, 0, cmd_status },
	{ "jobs", "jobs",
	  "Every job rdzvd knows, sorted by id: its state (forming, running,\n"
	  "succeeded, failed), round, nodes (min:max), world size and\n"
	  "restarts used of those allowed.\n",
	  0, 0, 0, cmd_jobs },
	{ "members", "members JOB",
	  "One job and its nodes: node id, state (member, waiting, standby),\n"
	  "group rank, host, address, agent pid, workers, time left on its\n"
	  "lease, whether its agent is connected, and how far its workers\n"
	  "got in the running round: STEP is the step they last reported\n"
	  "(lowest-highest when they differ; \"(N of M)\" when only N of its\n"
	  "M workers reported), LAST REPORT the age of the oldest of those\n"
	  "reports, \"-\" when none reported; the failure that closed the job,\n"
	  "if any.\n",
	  0, 1, 1, cmd_members },
	{ "events", "events JOB [--follow] [--after SEQ]",
	  "The job's event log (joins, rounds, failures, evictions), oldest\n"
	  "first.\n"
	  "  -f, --follow   keep waiting for new events and print each as it\n"
	  "                 comes, until interrupted (exit 0); with --json,\n"
	  "                 one event object per line\n"
	  "  --after SEQ    only events after sequence number SEQ\n",
	  OPT_FOLLOW | OPT_AFTER, 1, 1, cmd_events },
	{ "top", "top JOB [--count N]",
	  "A live view of one job, redrawn in place every second: state,\n"
	  "round, world size, restarts, progress (the lowest step the\n"
	  "running round's ranks reported, how many reported, the oldest\n"
	  "report's age), steps per second (from when that step last\n"
	  "moved; 0 after 5 s without), the slowest node and the latest\n"
	  "events.  Ends when the job closes (exit 0) or when interrupted.\n"
	  "When stdout is not a terminal: one plain line per view, and each\n"
	  "new event on a line of its own.  No --json (use members, events).\n"
	  "  --count N      stop after N views\n",
	  OPT_COUNT, 1, 1, cmd_top },
	{ "kv", "kv get|set|del|list [--ns NS] [KEY [VALUE]]",
	  "The key-value store, in namespace NS (default: the empty one,\n"
	  "which unmodified PyTorch clients see; a round's store is\n"
	  "job/JOB/round/N).\n"
	  "  kv get KEY          print the value (and a newline)\n"
	  "  kv set KEY VALUE    store VALUE; \"-\" reads it from stdin\n"
	  "  kv del KEY          delete KEY (exit 1 if it did not exist)\n"
	  "  kv list [PREFIX]    the keys, sorted, one per line\n"
	  "  --ns NS             the namespace\n"
	  "With --json: {\"ns\", \"key\", \"value\"} (\"value_hex\" when the value\n"
	  "is not UTF-8 text), {\"ns\", \"key\", \"bytes\"}, {\"ns\", \"key\",\n"
	  "\"deleted\"}, {\"ns\", \"keys\": [...]}.\n",
	  OPT_NS, 1, 3, cmd_kv },
	{ "close", "close JOB [--reason R]",
	  "Closes a job: every node gets FAILED with the reason, agents stop\n"
	  "their workers and exit 1, and later joins are refused.\n"
	  "  --reason R     the reason (default \"" CTL_CLOSE_REASON "\")\n",
	  OPT_REASON, 1, 1, cmd_close },
	{ "evict", "evict JOB NODE_ID [--now]",
	  "Makes a node leave its job.  A member of a running job whose\n"
	  "workers repair in place leaves at their next step boundary, as on\n"
	  "SIGTERM to its agent: they finish the step in flight, the others go\n"
	  "on without it (no step dropped, no restart), its agent exits 0; if\n"
	  "it is still there 120 s later, it is dropped.  Otherwise, or with\n"
	  "--now, it is dropped at once as if its lease had lapsed: the job\n"
	  "repairs around it or a new round forms, and its agent gets FAILED\n"
	  "(\"evicted by an operator\").  Node ids are in `rdzvctl members JOB`.\n"
	  "  --now          drop it at once\n",
	  OPT_NOW, 2, 2, cmd_evict },
	{ "forget", "forget JOB",
	  "Forgets a closed job (succeeded or failed) now, as rdzvd does\n"
	  "once its --job-retention has passed: its record, members, events,\n"
	  "progress and keys go, and its id may be used again (a JOIN with it\n"
	  "starts a new job from round 1).  A job that is forming or running\n"
	  "is refused: close it first.\n",
	  0, 1, 1, cmd_forget },
	{ "credential", "credential JOB [--out FILE]",
	  "Prints the credential of job JOB, derived from the operator's\n"
	  "secret (--token-file; rdzvd is not asked).  Give it to the job's\n"
	  "nodes instead of the secret (a Slurm prolog, a Kubernetes Secret):\n"
	  "rdzv-agent --token_file takes it, and the job's agents and workers\n"
	  "then reach that job's rounds, keys, events and progress only, never\n"
	  "another job's, the root namespace, or close of another job, evict,\n"
	  "forget, status and jobs (doc/security.md).\n"
	  "  --out FILE     write it to FILE (mode 0600) instead of stdout\n",
	  OPT_OUT, 1, 1, cmd_credential },
};
#define NCMDS	(sizeof cmds / sizeof cmds[0])

static void
usage_global(FILE *f)
{
	size_t	i;

	fprintf(f,
"usage: rdzvctl [-e HOST:PORT] [--token-file FILE] [--tls-ca FILE] [--json]\n"
"               [--timeout S] COMMAND [ARGS...]\n"
"\n"
"Shows and steers what rdzvd, the rdzv rendezvous daemon, is doing.\n"
"\n"
"Commands:\n");
	for (i = 0; i < NCMDS; i++)
		fprintf(f, "  %s\n", cmds[i].synopsis);
	fprintf(f,
"\n"
"Options (anywhere on the line):\n"
"  -e, --endpoint HOST:PORT  rdzvd's main port (default $RDZV_ENDPOINT,\n"
"                            else " CTL_DEFAULT_ENDPOINT "); [IPV6]:PORT;\n"
"                            A,B,C: rdzvds of which one leads, in turn\n"
"      --token-file FILE     the shared token (default $RDZV_TOKEN_FILE)\n"
"      --tls-ca FILE         connect with TLS, verifying rdzvd's certificate\n"
"                            and host name against this CA bundle (PEM;\n"
"                            \"system\": the system's); default $RDZV_TLS_CA,\n"
"                            else plaintext\n"
"  -j, --json                print rdzvd's JSON as is (a JSON object for kv)\n"
"  -t, --timeout S           seconds to connect and for each answer (%d)\n"
"  -h, --help                this help; `rdzvctl COMMAND -h` for a command\n"
"  -V, --version             the version\n"
"\n"
"Exit status: 0 done; 1 rdzvd answered with an error (e.g. no such job or\n"
"key); 2 usage error; 3 cannot connect, connection lost, or no answer in\n"
"time; 4 authentication refused, or TLS required or failed.  See\n"
"rdzvctl(1).\n", CTL_TIMEOUT_MS / 1000);
}

static void
usage_cmd(FILE *f, const struct cmd *c)
{
	fprintf(f, "usage: rdzvctl [options] %s\n\n%s\n"
	    "Global options: -e HOST:PORT, --token-file FILE, --tls-ca FILE,\n"
	    "--json, --timeout S (`rdzvctl --help`).\n", c->synopsis, c->help);
}

static int	usage_error(const char *, ...)
		    __attribute__((format(printf, 1, 2)));

static int
usage_error(const char *fmt, ...)
{
	va_list	ap;

	fputs("rdzvctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (rdzvctl --help)\n", stderr);
	return CTL_EXIT_USAGE;
}

/*
 * Reports a failed request in words that say what happened and what to
 * try, and returns the exit status.  what names the object for not-found
 * errors ("job \"x\"").
 */
static int
ctl_fail(struct ctl *ctl, int code, const char *what, const char *hint)
{
	const char	*msg = ctl->errmsg[0] != '\0' ? ctl->errmsg :
			    rdzv_strerror(code);

	switch (code) {
	case RDZV_ENOTFOUND:
		fprintf(stderr, "rdzvctl: no %s%s%s\n", what,
		    hint != NULL ? " — " : "", hint != NULL ? hint : "");
		break;
	case RDZV_ECLOSED:
		fprintf(stderr, "rdzvctl: %s is already closed\n", what);
		break;
	case RDZV_ETIMEDOUT:
		fprintf(stderr, "rdzvctl: rdzvd at %s did not answer within "
		    "%d ms (--timeout to wait longer)\n", ctl->o.endpoint,
		    ctl->o.timeout_ms);
		break;
	case RDZV_ECONN:
		fprintf(stderr, "rdzvctl: lost the connection to rdzvd at %s "
		    "— did it stop or restart?\n", ctl->o.endpoint);
		break;
	case RDZV_EPROTO:
		fprintf(stderr, "rdzvctl: rdzvd at %s sent a reply rdzvctl "
		    "cannot read — are both from the same release?\n",
		    ctl->o.endpoint);
		return CTL_EXIT_CONN;
	case RDZV_EAUTH:
		fprintf(stderr, "rdzvctl: rdzvd at %s refused us: %s — give "
		    "the token rdzvd uses (--token-file or RDZV_TOKEN_FILE)\n",
		    ctl->o.endpoint, msg);
		break;
	default:
		fprintf(stderr, "rdzvctl: %s: rdzvd answered: %s\n", ctl->cmd,
		    msg);
	}
	return ctl_exit_code(code);
}

/* ---- JSON helpers ---- */

static json_t *
ctl_parse(struct ctl *ctl, const char *text, size_t len)
{
	json_error_t	 e;
	json_t		*doc;

	if (text == NULL || (doc = json_loadb(text, len, 0, &e)) == NULL) {
		fprintf(stderr, "rdzvctl: %s: rdzvd's reply is not JSON "
		    "(%s)\n", ctl->cmd, text == NULL ? "empty" : e.text);
		return NULL;
	}
	return doc;
}

static int64_t
jint(const json_t *o, const char *key)
{
	const json_t	*v = json_object_get(o, key);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

static const char *
jstr(const json_t *o, const char *key)
{
	const char	*s = json_string_value(json_object_get(o, key));

	return s != NULL ? s : "-";
}

/* Prints a JSON value compactly on one line. */
static int
ctl_print_json(const json_t *v)
{
	if (json_dumpf(v, stdout, JSON_COMPACT) != 0)
		return CTL_EXIT_SERVER;
	putchar('\n');
	return CTL_EXIT_OK;
}

/* Prints the server's JSON as is, one document per line. */
static void
ctl_print_raw(const char *text, size_t len)
{
	fwrite(text, 1, len, stdout);
	putchar('\n');
}

/*
 * Takes a reply's JSON text (freed here): with --json prints it as it is
 * and returns CTL_EXIT_OK with *doc NULL; otherwise returns CTL_EXIT_OK
 * with *doc parsed, or CTL_EXIT_SERVER when it is not JSON.
 */
static int
ctl_document(struct ctl *ctl, char *text, size_t len, json_t **doc)
{
	*doc = NULL;
	if (ctl->json)
		ctl_print_raw(text, len);
	else
		*doc = ctl_parse(ctl, text, len);
	free(text);
	return ctl->json || *doc != NULL ? CTL_EXIT_OK : CTL_EXIT_SERVER;
}

/* ---- commands ---- */

/*
 * Connects, makes one operator request and closes.  Returns 0 with *text
 * (the reply's JSON, malloc'ed; NULL for an empty reply), or the exit
 * status after reporting the failure, with *text NULL (so the caller may
 * free it either way); what and hint word a not-found answer.
 */
static int
ctl_request(struct ctl *ctl, const char *what, const char *hint,
    char **text, size_t *len, uint16_t op, const char *fmt, ...)
{
	struct rdzv_client	*c;
	va_list			 ap;
	int			 status, rv;

	/* Set before connecting: a refused connection is a failure too. */
	*text = NULL;
	*len = 0;
	if ((c = ctl_connect(&ctl->o, 0, &status)) == NULL)
		return status;
	va_start(ap, fmt);
	rv = ctl_vadmin(c, ctl->o.timeout_ms, text, len, ctl->errmsg,
	    sizeof ctl->errmsg, op, fmt, ap);
	va_end(ap);
	rdzv_client_close(c);
	if (rv != 0)
		return ctl_fail(ctl, rv, what, hint);
	return 0;
}

static int
cmd_status(struct ctl *ctl, int argc, char **argv)
{
	json_t	*doc, *jobs, *ld;
	char	*text, buf[64];
	size_t	 len;
	int	 rv;

	if ((rv = ctl_request(ctl, "status", NULL, &text, &len,
	    NAT_OP_ADMIN_STATUS, "")) != 0)
		return rv;
	if ((rv = ctl_document(ctl, text, len, &doc)) != 0 || doc == NULL)
		return rv;
	jobs = json_object_get(doc, "jobs");
	printf("rdzvd %s at %s\n", jstr(doc, "version"), ctl->o.endpoint);
	printf("uptime       %s\n", ctl_fmt_duration(buf, sizeof buf,
	    jint(doc, "uptime_s") * 1000));
	printf("durability   %s\n", jstr(doc, "durability"));
	if ((ld = json_object_get(doc, "leader")) != NULL) {
		printf("store        %s\n", jstr(ld, "store"));
		printf("leader       %s, term %" PRId64 ", for %s, after %"
		    PRId64 " other leaderships\n",
		    json_is_true(json_object_get(ld, "leading")) ?
		    "this rdzvd" : "another rdzvd", jint(ld, "term"),
		    ctl_fmt_duration(buf, sizeof buf, jint(ld, "since_s") *
		    1000), jint(ld, "failovers"));
		if (json_is_string(json_object_get(ld, "listen")))
			printf("leader at    %s (clients %s, http %s)\n",
			    jstr(ld, "host"), jstr(ld, "listen"),
			    json_is_string(json_object_get(ld, "http")) ?
			    jstr(ld, "http") : "off");
	} else
		printf("database     %s\n",
		    json_is_string(json_object_get(doc, "db")) ?
		    jstr(doc, "db") : "none (nothing persists)");
	printf("keys         %" PRId64 "\n", jint(doc, "keys"));
	printf("waiters      %" PRId64 "\n", jint(doc, "waiters"));
	printf("connections  %" PRId64 "\n", jint(doc, "connections"));
	printf("jobs         %" PRId64 " running, %" PRId64 " forming, %"
	    PRId64 " closed\n", jint(jobs, "running"), jint(jobs, "forming"),
	    jint(jobs, "closed"));
	if (json_object_get(doc, "rounds_total") != NULL)
		printf("rounds       %" PRId64 " (%" PRId64 " restarts)\n",
		    jint(doc, "rounds_total"), jint(doc, "restarts_total"));
	json_decref(doc);
	return CTL_EXIT_OK;
}

static int
cmd_jobs(struct ctl *ctl, int argc, char **argv)
{
	struct ctl_table	*t;
	json_t			*doc, *j;
	char			*text;
	size_t			 len, i;
	int			 rv;

	if ((rv = ctl_request(ctl, "jobs", NULL, &text, &len,
	    NAT_OP_ADMIN_JOBS, "")) != 0)
		return rv;
	if ((rv = ctl_document(ctl, text, len, &doc)) != 0 || doc == NULL)
		return rv;
	if (json_array_size(doc) == 0) {
		printf("no jobs\n");
		json_decref(doc);
		return CTL_EXIT_OK;
	}
	if ((t = ctl_table_new("JOB|STATE|>ROUND|>NODES|>MIN:MAX|>WORLD|"
	    ">RESTARTS")) == NULL) {
		json_decref(doc);
		return CTL_EXIT_SERVER;
	}
	json_array_foreach(doc, i, j) {
		ctl_table_cell(t, "%s", jstr(j, "job"));
		ctl_table_cell(t, "%s", jstr(j, "state"));
		ctl_table_cell(t, "%" PRId64, jint(j, "round"));
		ctl_table_cell(t, "%" PRId64, jint(j, "nodes"));
		ctl_table_cell(t, "%" PRId64 ":%" PRId64, jint(j, "min_nodes"),
		    jint(j, "max_nodes"));
		ctl_table_cell(t, "%" PRId64, jint(j, "world_size"));
		ctl_table_cell(t, "%" PRId64 "/%" PRId64, jint(j, "restarts"),
		    jint(j, "max_restarts"));
	}
	ctl_table_print(t);
	json_decref(doc);
	return CTL_EXIT_OK;
}

/*
 * A member's STEP and LAST REPORT cells from its "progress" (null, or
 * absent from an older rdzvd: "-").
 */
static void
members_progress(struct ctl_table *t, const json_t *m)
{
	const json_t	*p = json_object_get(m, "progress");
	char		 steps[64], ranks[64], age[32];
	int64_t		 lo, hi, n, lws;

	if (!json_is_object(p) || (n = jint(p, "ranks_reporting")) <= 0) {
		ctl_table_cell(t, "-");
		ctl_table_cell(t, "-");
		return;
	}
	lo = jint(p, "min_step");
	hi = jint(p, "max_step");
	lws = jint(m, "local_world_size");
	if (lo == hi)
		snprintf(steps, sizeof steps, "%" PRId64, hi);
	else
		snprintf(steps, sizeof steps, "%" PRId64 "-%" PRId64, lo, hi);
	ranks[0] = '\0';
	if (n < lws)
		snprintf(ranks, sizeof ranks, " (%" PRId64 " of %" PRId64 ")",
		    n, lws);
	ctl_table_cell(t, "%s%s", steps, ranks);
	ctl_table_cell(t, "%s ago", ctl_fmt_duration(age, sizeof age,
	    jint(p, "oldest_report_ms_ago")));
}

/* A line per rank rdzvd names a straggler now (progress.stragglers). */
static void
members_stragglers(const json_t *members)
{
	const json_t	*m, *r;
	size_t		 i, k;

	json_array_foreach(members, i, m)
		json_array_foreach(json_object_get(json_object_get(m,
		    "progress"), "stragglers"), k, r)
			printf("straggler: rank %" PRId64 " on node %" PRId64
			    " (%s)\n", (int64_t)json_integer_value(r),
			    jint(m, "node_id"), jstr(m, "host"));
}

static int
cmd_members(struct ctl *ctl, int argc, char **argv)
{
	struct ctl_table	*t;
	json_t			*doc, *m, *members;
	const char		*failure;
	char			*text, what[300], buf[64];
	size_t			 len, i;
	int			 rv;

	snprintf(what, sizeof what, "job \"%s\"", argv[0]);
	if ((rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them", &text,
	    &len, NAT_OP_ADMIN_JOB, "b", argv[0])) != 0)
		return rv;
	if ((rv = ctl_document(ctl, text, len, &doc)) != 0 || doc == NULL)
		return rv;
	printf("job %s: %s, round %" PRId64 ", %" PRId64 " node%s (%" PRId64
	    ":%" PRId64 "), world size %" PRId64 ", restarts %" PRId64 "/%"
	    PRId64, jstr(doc, "job"), jstr(doc, "state"), jint(doc, "round"),
	    jint(doc, "nodes"), jint(doc, "nodes") == 1 ? "" : "s",
	    jint(doc, "min_nodes"), jint(doc, "max_nodes"),
	    jint(doc, "world_size"), jint(doc, "restarts"),
	    jint(doc, "max_restarts"));
	if (jint(doc, "store_port") > 0)
		printf(", store port %" PRId64, jint(doc, "store_port"));
	putchar('\n');
	failure = jstr(doc, "failure");
	if (*failure != '\0' && strcmp(failure, "-") != 0)
		printf("failure: %s\n", failure);
	members = json_object_get(doc, "members");
	if (json_array_size(members) == 0) {
		printf("no nodes\n");
		json_decref(doc);
		return CTL_EXIT_OK;
	}
	if ((t = ctl_table_new(">NODE|STATE|>RANK|HOST|ADDR|>PID|>WORKERS|"
	    ">LEASE LEFT|CONNECTED|>STEP|>LAST REPORT")) == NULL) {
		json_decref(doc);
		return CTL_EXIT_SERVER;
	}
	json_array_foreach(members, i, m) {
		ctl_table_cell(t, "%" PRId64, jint(m, "node_id"));
		ctl_table_cell(t, "%s", jstr(m, "state"));
		if (jint(m, "group_rank") >= 0)
			ctl_table_cell(t, "%" PRId64, jint(m, "group_rank"));
		else
			ctl_table_cell(t, "-");
		ctl_table_cell(t, "%s", jstr(m, "host"));
		ctl_table_cell(t, "%s", jstr(m, "addr"));
		ctl_table_cell(t, "%" PRId64, jint(m, "pid"));
		ctl_table_cell(t, "%" PRId64, jint(m, "local_world_size"));
		ctl_table_cell(t, "%s", jint(m, "lease_left_ms") < 0 ?
		    "expired" : ctl_fmt_duration(buf, sizeof buf,
		    jint(m, "lease_left_ms")));
		ctl_table_cell(t, "%s", json_is_true(json_object_get(m,
		    "connected")) ? "yes" : "no");
		members_progress(t, m);
	}
	ctl_table_print(t);
	members_stragglers(members);
	json_decref(doc);
	return CTL_EXIT_OK;
}

/* Prints a batch of events; *last gets the highest sequence number. */
static void
events_print(struct ctl *ctl, json_t *arr, int follow, int64_t *last)
{
	struct ctl_table	*t = NULL;
	json_t			*ev;
	char			 tbuf[64];
	size_t			 i;

	if (!follow && !ctl->json &&
	    (t = ctl_table_new(">SEQ|TIME|EVENT")) == NULL)
		return;
	json_array_foreach(arr, i, ev) {
		if (jint(ev, "seq") > *last)
			*last = jint(ev, "seq");
		ctl_fmt_time(tbuf, sizeof tbuf, jint(ev, "time_ms"));
		if (ctl->json)
			ctl_print_json(ev);
		else if (t != NULL) {
			ctl_table_cell(t, "%" PRId64, jint(ev, "seq"));
			ctl_table_cell(t, "%s", tbuf);
			ctl_table_cell(t, "%s", jstr(ev, "text"));
		} else
			/* Streaming: fixed widths, the header came first. */
			printf("%5" PRId64 "  %-23s  %s\n", jint(ev, "seq"),
			    tbuf, jstr(ev, "text"));
	}
	if (t != NULL)
		ctl_table_print(t);
	fflush(stdout);
}

/* 1 when the job is closed (succeeded or failed), 0 if not, <0 error. */
static int
events_job_closed(struct ctl *ctl, struct rdzv_client *c, const char *job)
{
	json_t		*doc;
	const char	*state;
	char		*text;
	size_t		 len;
	int		 rv;

	rv = ctl_admin(c, ctl->o.timeout_ms, &text, &len, ctl->errmsg,
	    sizeof ctl->errmsg, NAT_OP_ADMIN_JOB, "b", job);
	if (rv != 0)
		return rv;
	if ((doc = ctl_parse(ctl, text, len)) == NULL) {
		free(text);
		return RDZV_EPROTO;
	}
	free(text);
	state = jstr(doc, "state");
	rv = strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0;
	json_decref(doc);
	return rv;
}

/*
 * events --follow: asks for what is new without waiting until nothing
 * is, then waits in rdzvd for the next batch, reconnecting (within
 * --timeout) when rdzvd restarts, until the job closes or a signal ends
 * it.  The non-waiting look comes first because rdzvd's wait is for the
 * next event to be written, not for any after --after.
 */
static int
events_follow(struct ctl *ctl, const char *job, const char *what,
    const char *hint)
{
	struct rdzv_client	*c = NULL;
	json_t			*arr;
	char			*text;
	size_t			 len, n;
	int64_t			 last = ctl->after;
	int			 status, rv, waiting = 0, closed = -1;

	ctl_catch_signals();
	for (;;) {
		if (c == NULL && (c = ctl_connect(&ctl->o, closed != -1,
		    &status)) == NULL)
			return status;
		if (closed == -1) {
			/* Also tells an unknown job before any output. */
			if ((rv = events_job_closed(ctl, c, job)) < 0)
				break;
			closed = rv;
			if (!ctl->json) {
				printf("%5s  %-23s  %s\n", "SEQ", "TIME", "EVENT");
				fflush(stdout);
			}
		}
		rv = ctl_admin(c, CTL_FOLLOW_WAIT_MS + ctl->o.timeout_ms, &text,
		    &len, ctl->errmsg, sizeof ctl->errmsg, NAT_OP_ADMIN_EVENTS,
		    "bii", job, last, (int64_t)(waiting ? CTL_FOLLOW_WAIT_MS :
		    0));
		n = 0;
		if (rv == 0 && (arr = ctl_parse(ctl, text, len)) != NULL) {
			n = json_array_size(arr);
			events_print(ctl, arr, 1, &last);
			json_decref(arr);
		}
		free(text);
		if (rv == 0 && !waiting) {
			if (n > 0)
				continue;
			if (closed == 1)
				break;		/* all read, nothing more comes */
			/* Closed since: one more look for its last events. */
			if ((rv = events_job_closed(ctl, c, job)) >= 0) {
				closed = rv;
				waiting = !closed;
				continue;
			}
		} else if (rv == 0) {
			waiting = 0;
			continue;
		}
		if (ctl_interrupted) {
			rv = 0;
			break;
		}
		if (rv == RDZV_ECONN || rv == RDZV_ETIMEDOUT) {
			/* rdzvd went away: a restart keeps the events. */
			fprintf(stderr, "rdzvctl: lost the connection to %s, "
			    "reconnecting\n", ctl->o.endpoint);
			rdzv_client_close(c);
			c = NULL;
			waiting = 0;
			continue;
		}
		break;
	}
	rdzv_client_close(c);
	if (rv < 0)
		return ctl_fail(ctl, rv, what, hint);
	return CTL_EXIT_OK;
}

static int
cmd_events(struct ctl *ctl, int argc, char **argv)
{
	json_t	*doc;
	char	*text, what[300];
	size_t	 len;
	int64_t	 last = -1;
	int	 rv;

	snprintf(what, sizeof what, "job \"%s\"", argv[0]);
	if (ctl->follow)
		return events_follow(ctl, argv[0], what,
		    "`rdzvctl jobs` lists them");
	if ((rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them", &text,
	    &len, NAT_OP_ADMIN_EVENTS, "bii", argv[0], ctl->after,
	    (int64_t)0)) != 0)
		return rv;
	if ((rv = ctl_document(ctl, text, len, &doc)) != 0 || doc == NULL)
		return rv;
	if (json_array_size(doc) == 0)
		printf("no events\n");
	else
		events_print(ctl, doc, 0, &last);
	json_decref(doc);
	return CTL_EXIT_OK;
}

/* What `top` remembers between views. */
struct top_state {
	int64_t	 last_ev;		/* highest event seq seen */
	char	*ev[CTL_TOP_EVENTS];	/* newest last, malloc'ed */
	int64_t	 step, step_ms;		/* lowest step, when it last moved */
	double	 rate;
	int	 have_step;
};

static int64_t
top_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Takes the new events of arr: kept for the screen, or printed at once
 * when plain. */
static void
top_events(struct top_state *ts, json_t *arr, int tty)
{
	json_t	*ev;
	char	 tbuf[64], line[512];
	size_t	 i;

	json_array_foreach(arr, i, ev) {
		if (jint(ev, "seq") > ts->last_ev)
			ts->last_ev = jint(ev, "seq");
		ctl_fmt_time(tbuf, sizeof tbuf, jint(ev, "time_ms"));
		snprintf(line, sizeof line, "%s  %s", tbuf, jstr(ev, "text"));
		if (!tty) {
			printf("event %s\n", line);
			continue;
		}
		free(ts->ev[0]);
		memmove(ts->ev, ts->ev + 1, sizeof ts->ev - sizeof ts->ev[0]);
		ts->ev[CTL_TOP_EVENTS - 1] = strdup(line);
	}
}

/*
 * One view of doc (ADMIN_JOB's): the lowest step over the running
 * round's members, its rate (updated in ts), the slowest member.
 */
static void
top_view(struct top_state *ts, json_t *doc, int tty)
{
	json_t		*members, *m, *p, *slow = NULL;
	char		 age[32], stepbuf[64], ratebuf[32];
	int64_t		 lo = 0, n = 0, oldest = 0, now = top_now_ms();
	size_t		 i;
	int		 k;

	members = json_object_get(doc, "members");
	json_array_foreach(members, i, m) {
		p = json_object_get(m, "progress");
		if (!json_is_object(p) || jint(p, "ranks_reporting") <= 0)
			continue;
		if (n == 0 || jint(p, "min_step") < lo) {
			lo = jint(p, "min_step");
			slow = m;
		}
		if (jint(p, "oldest_report_ms_ago") > oldest)
			oldest = jint(p, "oldest_report_ms_ago");
		n += jint(p, "ranks_reporting");
	}
	if (n > 0 && ts->have_step && lo > ts->step)
		ts->rate = (double)(lo - ts->step) * 1000.0 /
		    (double)(now > ts->step_ms ? now - ts->step_ms : 1);
	if (n == 0 || !ts->have_step || lo != ts->step) {
		ts->step = lo;
		ts->step_ms = now;
		ts->have_step = n > 0;
	}
	if (n == 0 || now - ts->step_ms > CTL_TOP_STALL_MS)
		ts->rate = 0;
	if (n > 0)
		snprintf(stepbuf, sizeof stepbuf, "step %" PRId64 " (%" PRId64
		    " rank%s, %s ago)", lo, n, n == 1 ? "" : "s",
		    ctl_fmt_duration(age, sizeof age, oldest));
	else
		snprintf(stepbuf, sizeof stepbuf, "no progress reported");
	snprintf(ratebuf, sizeof ratebuf, "%.1f steps/s", ts->rate);
	if (!tty) {
		printf("job %s %s round %" PRId64 " world %" PRId64
		    " restarts %" PRId64 "/%" PRId64 " %s %s", jstr(doc, "job"),
		    jstr(doc, "state"), jint(doc, "round"),
		    jint(doc, "world_size"), jint(doc, "restarts"),
		    jint(doc, "max_restarts"), stepbuf, ratebuf);
		if (slow != NULL)
			printf(" slowest node %" PRId64 " (%s)",
			    jint(slow, "node_id"), jstr(slow, "host"));
		putchar('\n');
		fflush(stdout);
		return;
	}
	/* Home, clear: one screen, redrawn in place. */
	printf("\033[H\033[2J");
	printf("\033[1mjob %s\033[0m  %s  round %" PRId64 "  world size %"
	    PRId64 "  restarts %" PRId64 "/%" PRId64 "\n\n", jstr(doc, "job"),
	    jstr(doc, "state"), jint(doc, "round"), jint(doc, "world_size"),
	    jint(doc, "restarts"), jint(doc, "max_restarts"));
	printf("  progress  %s\n  rate      %s\n", stepbuf, ratebuf);
	if (slow != NULL)
		printf("  slowest   node %" PRId64 " on %s (rank %" PRId64
		    ")\n", jint(slow, "node_id"), jstr(slow, "host"),
		    jint(slow, "group_rank"));
	printf("\n  recent events\n");
	for (k = 0; k < CTL_TOP_EVENTS; k++)
		if (ts->ev[k] != NULL)
			printf("  %s\n", ts->ev[k]);
	fflush(stdout);
}

static int
cmd_top(struct ctl *ctl, int argc, char **argv)
{
	struct top_state	 ts;
	struct timespec		 pause = { CTL_TOP_PERIOD_MS / 1000,
				    (CTL_TOP_PERIOD_MS % 1000) * 1000000L };
	json_t			*doc;
	char			*text, what[300];
	const char		*st;
	size_t			 len;
	int64_t			 views = 0;
	int			 rv, tty = isatty(STDOUT_FILENO), closed, k;

	if (ctl->json)
		return usage_error("top has no --json: `rdzvctl --json "
		    "members JOB` and `events JOB --follow` give the same");
	memset(&ts, 0, sizeof ts);
	ts.last_ev = -1;
	snprintf(what, sizeof what, "job \"%s\"", argv[0]);
	for (;;) {
		if ((rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them",
		    &text, &len, NAT_OP_ADMIN_EVENTS, "bii", argv[0],
		    ts.last_ev, (int64_t)0)) != 0)
			break;
		if ((doc = ctl_parse(ctl, text, len)) == NULL) {
			free(text);
			rv = CTL_EXIT_SERVER;
			break;
		}
		free(text);
		top_events(&ts, doc, tty);
		json_decref(doc);
		if ((rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them",
		    &text, &len, NAT_OP_ADMIN_JOB, "b", argv[0])) != 0)
			break;
		doc = ctl_parse(ctl, text, len);
		free(text);
		if (doc == NULL) {
			rv = CTL_EXIT_SERVER;
			break;
		}
		top_view(&ts, doc, tty);
		st = jstr(doc, "state");
		closed = strcmp(st, "succeeded") == 0 ||
		    strcmp(st, "failed") == 0;
		json_decref(doc);
		if (closed || (ctl->count > 0 && ++views >= ctl->count)) {
			rv = CTL_EXIT_OK;
			break;
		}
		nanosleep(&pause, NULL);
	}
	for (k = 0; k < CTL_TOP_EVENTS; k++)
		free(ts.ev[k]);
	return rv;
}

/* Reads all of stdin (kv set KEY -). */
static int
ctl_read_stdin(char **buf, size_t *len)
{
	char	*p = NULL, *np;
	size_t	 n = 0, cap = 0, r;

	for (;;) {
		if (cap - n < 4096) {
			if (cap > CTL_VALUE_MAX) {
				free(p);
				return RDZV_ETOOBIG;
			}
			cap = cap == 0 ? 65536 : cap * 2;
			if ((np = realloc(p, cap)) == NULL) {
				free(p);
				return RDZV_ENOMEM;
			}
			p = np;
		}
		r = fread(p + n, 1, cap - n, stdin);
		n += r;
		if (r == 0)
			break;
	}
	if (ferror(stdin)) {
		free(p);
		return RDZV_EIO;
	}
	*buf = p;
	*len = n;
	return 0;
}

static int
ctl_strcmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A JSON object {"ns": ns, "key": key} for the kv outputs. */
static json_t *
kv_json(const char *ns, const char *key)
{
	return json_pack("{s:s, s:s}", "ns", ns, "key", key);
}

static int
kv_get(struct ctl *ctl, struct rdzv_client *c, const char *key)
{
	json_t	*o, *v;
	void	*val;
	size_t	 len, i;
	char	*hex;
	int	 rv;

	if ((rv = rdzv_client_get(c, key, &val, &len, ctl->o.timeout_ms)) != 0)
		return rv;
	if (!ctl->json) {
		fwrite(val, 1, len, stdout);
		putchar('\n');
		free(val);
		return 0;
	}
	o = kv_json(ctl->ns, key);
	if ((v = json_stringn(val, len)) != NULL)
		json_object_set_new(o, "value", v);
	else if ((hex = malloc(len * 2 + 1)) != NULL) {
		/* Not UTF-8: hex keeps every byte, readable by any tool. */
		for (i = 0; i < len; i++)
			snprintf(hex + 2 * i, 3, "%02x",
			    ((unsigned char *)val)[i]);
		hex[2 * len] = '\0';
		json_object_set_new(o, "value_hex", json_string(hex));
		free(hex);
	}
	free(val);
	ctl_print_json(o);
	json_decref(o);
	return 0;
}

static int
kv_set(struct ctl *ctl, struct rdzv_client *c, const char *key,
    const char *arg)
{
	json_t	*o;
	char	*val;
	size_t	 len;
	int	 rv;

	if (strcmp(arg, "-") == 0) {
		if ((rv = ctl_read_stdin(&val, &len)) != 0) {
			fprintf(stderr, "rdzvctl: kv set: cannot read the value "
			    "from stdin: %s\n", rdzv_strerror(rv));
			return CTL_EXIT_USAGE;
		}
	} else {
		len = strlen(arg);
		if ((val = strdup(arg)) == NULL)
			return RDZV_ENOMEM;
	}
	rv = rdzv_client_set(c, key, val, len, ctl->o.timeout_ms);
	free(val);
	if (rv != 0)
		return rv;
	if (ctl->json) {
		o = kv_json(ctl->ns, key);
		json_object_set_new(o, "bytes", json_integer((json_int_t)len));
		ctl_print_json(o);
		json_decref(o);
	}
	return 0;
}

static int
kv_del(struct ctl *ctl, struct rdzv_client *c, const char *key)
{
	json_t	*o;
	int	 rv;

	if ((rv = rdzv_client_delete(c, key, ctl->o.timeout_ms)) < 0)
		return rv;
	if (ctl->json) {
		o = kv_json(ctl->ns, key);
		json_object_set_new(o, "deleted", json_boolean(rv == 1));
		ctl_print_json(o);
		json_decref(o);
	}
	return rv == 1 ? 0 : RDZV_ENOTFOUND;
}

static int
kv_list(struct ctl *ctl, struct rdzv_client *c, const char *prefix)
{
	json_t	*o, *arr;
	char	**keys;
	size_t	 n, i, plen;
	int	 rv;

	if ((rv = rdzv_client_list_keys(c, &keys, &n, ctl->o.timeout_ms)) < 0)
		return rv;
	qsort(keys, n, sizeof *keys, ctl_strcmp);
	plen = prefix != NULL ? strlen(prefix) : 0;
	arr = json_array();
	for (i = 0; i < n; i++) {
		if (plen > 0 && strncmp(keys[i], prefix, plen) != 0)
			continue;
		if (ctl->json)
			json_array_append_new(arr, json_string(keys[i]));
		else
			printf("%s\n", keys[i]);
	}
	rdzv_client_free_keys(keys, n);
	if (ctl->json) {
		o = json_pack("{s:s, s:o}", "ns", ctl->ns, "keys", arr);
		ctl_print_json(o);
		json_decref(o);
	} else
		json_decref(arr);
	return 0;
}

static int
cmd_kv(struct ctl *ctl, int argc, char **argv)
{
	struct rdzv_client	*c;
	static const struct {
		const char	*name;
		int		 nargs;
	} subs[] = { { "get", 1 }, { "set", 2 }, { "del", 1 }, { "list", 0 } };
	const char		*sub = argv[0];
	char			 what[300];
	size_t			 i;
	int			 rv, status;

	for (i = 0; i < sizeof subs / sizeof subs[0]; i++)
		if (strcmp(sub, subs[i].name) == 0)
			break;
	if (i == sizeof subs / sizeof subs[0])
		return usage_error("kv: unknown subcommand \"%s\": get, set, "
		    "del or list", sub);
	if (argc - 1 != subs[i].nargs && !(i == 3 && argc - 1 <= 1))
		return usage_error("usage: rdzvctl kv %s%s", sub,
		    i == 0 || i == 2 ? " KEY" : i == 1 ? " KEY VALUE" :
		    " [PREFIX]");
	if ((c = ctl_connect(&ctl->o, 0, &status)) == NULL)
		return status;
	if ((rv = rdzv_client_set_namespace(c, ctl->ns)) != 0) {
		rdzv_client_close(c);
		return usage_error("--ns: a namespace is at most 1024 bytes");
	}
	switch (i) {
	case 0:
		rv = kv_get(ctl, c, argv[1]);
		break;
	case 1:
		rv = kv_set(ctl, c, argv[1], argv[2]);
		break;
	case 2:
		rv = kv_del(ctl, c, argv[1]);
		break;
	default:
		rv = kv_list(ctl, c, argc > 1 ? argv[1] : NULL);
	}
	if (rv > 0) {		/* already reported */
		rdzv_client_close(c);
		return rv;
	}
	strlcpy(ctl->errmsg, rdzv_client_errmsg(c), sizeof ctl->errmsg);
	rdzv_client_close(c);
	if (rv == 0)
		return CTL_EXIT_OK;
	/* kv list without a prefix has no argv[1] (NULL): no %s of it. */
	snprintf(what, sizeof what, "key \"%s\" in namespace \"%s\"",
	    argc > 1 ? argv[1] : "", ctl->ns);
	return ctl_fail(ctl, rv, what, "`rdzvctl kv list` shows the keys");
}

static int
cmd_close(struct ctl *ctl, int argc, char **argv)
{
	json_t	*o;
	char	*text, what[300];
	size_t	 len;
	int	 rv;

	snprintf(what, sizeof what, "job \"%s\"", argv[0]);
	rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them", &text, &len,
	    NAT_OP_ADMIN_CLOSE, "bb", argv[0], ctl->reason);
	free(text);
	if (rv != 0)
		return rv;
	if (ctl->json) {
		o = json_pack("{s:s, s:b, s:s}", "job", argv[0], "closed", 1,
		    "reason", ctl->reason);
		ctl_print_json(o);
		json_decref(o);
	} else
		printf("closed job %s: its nodes get FAILED (%s)\n", argv[0],
		    ctl->reason);
	return CTL_EXIT_OK;
}

static int
cmd_forget(struct ctl *ctl, int argc, char **argv)
{
	json_t	*o;
	char	*text, what[300];
	size_t	 len;
	int	 rv;

	snprintf(what, sizeof what, "job \"%s\"", argv[0]);
	rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them", &text, &len,
	    NAT_OP_ADMIN_FORGET, "b", argv[0]);
	free(text);
	if (rv != 0)
		return rv;
	if (ctl->json) {
		o = json_pack("{s:s, s:b}", "job", argv[0], "forgotten", 1);
		ctl_print_json(o);
		json_decref(o);
	} else
		printf("forgot job %s: its id may be used again\n", argv[0]);
	return CTL_EXIT_OK;
}

static int
cmd_evict(struct ctl *ctl, int argc, char **argv)
{
	json_t		*o;
	const char	*errstr;
	char		*text, what[300];
	size_t		 len;
	long long	 node;
	int		 rv, leave;

	node = strtonum(argv[1], 0, LLONG_MAX, &errstr);
	if (errstr != NULL)
		return usage_error("evict: NODE_ID \"%s\" is %s: a node id "
		    "from `rdzvctl members %s`", argv[1], errstr, argv[0]);
	snprintf(what, sizeof what, "node %lld in job \"%s\"", node, argv[0]);
	rv = ctl_request(ctl, what, "`rdzvctl members JOB` lists its nodes",
	    &text, &len, NAT_OP_ADMIN_EVICT, "bii", argv[0], (int64_t)node,
	    (int64_t)ctl->now);
	/* "leave" or "now"; nothing from an rdzvd before leaving existed. */
	leave = text != NULL && strcmp(text, "leave") == 0;
	free(text);
	if (rv != 0)
		return rv;
	if (ctl->json) {
		o = json_pack("{s:s, s:I, s:b, s:s}", "job", argv[0], "node_id",
		    (json_int_t)node, "evicted", 1, "how",
		    leave ? "leave" : "now");
		ctl_print_json(o);
		json_decref(o);
	} else if (leave)
		printf("asked node %lld of job %s to leave: its workers finish "
		    "the step in flight, then the others go on without it "
		    "(`rdzvctl events %s` says when; --now drops it at "
		    "once)\n", node, argv[0], argv[0]);
	else
		printf("evicted node %lld from job %s: the job repairs around "
		    "it or a new round forms without it\n", node, argv[0]);
	return CTL_EXIT_OK;
}

/*
 * credential JOB: the job's credential, derived here from the operator's
 * secret; nothing is sent to rdzvd.
 */
static int
cmd_credential(struct ctl *ctl, int argc, char **argv)
{
	struct rdzv_cred	 cred;
	uint8_t			*tok = NULL;
	size_t			 toklen = 0;
	char			 text[RDZV_CRED_FILE_MAX + 1], why[512];
	int			 insecure, n, fd, rv = CTL_EXIT_SERVER;
	FILE			*f;

	if (ctl->o.token_file == NULL) {
		fprintf(stderr, "rdzvctl: credential needs the operator's "
		    "secret: --token-file FILE or RDZV_TOKEN_FILE\n");
		return CTL_EXIT_USAGE;
	}
	if (!rdzv_cred_job_ok(argv[0], strlen(argv[0])))
		return usage_error("credential: \"%s\" is not a job id (1 to "
		    "%d printable characters, no space)", argv[0],
		    RDZV_CRED_JOB_MAX);
	if (rdzv_token_load(ctl->o.token_file, &tok, &toklen, &insecure, why,
	    sizeof why) != 0) {
		fprintf(stderr, "rdzvctl: %s\n", why);
		return CTL_EXIT_SERVER;
	}
	if (rdzv_cred_parse(tok, toklen, &cred, why, sizeof why) != 0) {
		fprintf(stderr, "rdzvctl: %s is a job credential, not the "
		    "operator's secret: a credential is derived from the "
		    "secret (rdzvd's --token-file)\n", ctl->o.token_file);
		goto out;
	}
	memcpy(cred.job, argv[0], strlen(argv[0]) + 1);
	cred.joblen = strlen(argv[0]);
	if (rdzv_cred_derive(tok, toklen, cred.job, cred.joblen,
	    cred.key) != 0 ||
	    (n = rdzv_cred_format(&cred, text, sizeof text)) < 0) {
		fprintf(stderr, "rdzvctl: cannot derive the credential\n");
		goto out;
	}
	if (ctl->out == NULL) {
		fwrite(text, 1, (size_t)n, stdout);
		rv = fflush(stdout) == 0 ? CTL_EXIT_OK : CTL_EXIT_SERVER;
		goto out;
	}
	if ((fd = open(ctl->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
	    0600)) == -1 || fchmod(fd, 0600) != 0 ||
	    (f = fdopen(fd, "w")) == NULL) {
		fprintf(stderr, "rdzvctl: cannot write %s: %s\n", ctl->out,
		    strerror(errno));
		goto out;
	}
	fwrite(text, 1, (size_t)n, f);
	if (fclose(f) != 0) {
		fprintf(stderr, "rdzvctl: cannot write %s: %s\n", ctl->out,
		    strerror(errno));
		goto out;
	}
	if (!ctl->json)
		fprintf(stderr, "wrote job %s's credential to %s\n", cred.job,
		    ctl->out);
	rv = CTL_EXIT_OK;
out:
	explicit_bzero(text, sizeof text);
	explicit_bzero(&cred, sizeof cred);
	if (tok != NULL) {
		explicit_bzero(tok, toklen);
		free(tok);
	}
	return rv;
}

/* ---- the command line ---- */

enum {
	O_TOKEN_FILE = 256, O_NS, O_REASON, O_AFTER, O_TLS_CA, O_COUNT, O_NOW,
	O_OUT
};

static const struct option longopts[] = {
	{ "endpoint",	required_argument,	NULL,	'e' },
	{ "token-file",	required_argument,	NULL,	O_TOKEN_FILE },
	{ "tls-ca",	required_argument,	NULL,	O_TLS_CA },
	{ "json",	no_argument,		NULL,	'j' },
	{ "timeout",	required_argument,	NULL,	't' },
	{ "help",	no_argument,		NULL,	'h' },
	{ "version",	no_argument,		NULL,	'V' },
	{ "ns",		required_argument,	NULL,	O_NS },
	{ "reason",	required_argument,	NULL,	O_REASON },
	{ "follow",	no_argument,		NULL,	'f' },
	{ "after",	required_argument,	NULL,	O_AFTER },
	{ "count",	required_argument,	NULL,	O_COUNT },
	{ "now",	no_argument,		NULL,	O_NOW },
	{ "out",	required_argument,	NULL,	O_OUT },
	{ NULL,		0,			NULL,	0 }
};

static const char *
opt_name(unsigned bit)
{
	switch (bit) {
	case OPT_NS:		return "--ns";
	case OPT_REASON:	return "--reason";
	case OPT_FOLLOW:	return "--follow";
	case OPT_COUNT:		return "--count";
	case OPT_NOW:		return "--now";
	case OPT_OUT:		return "--out";
	}
	return "--after";
}

/* HOST alone or [V6] alone gets the default port; client.c judges the
 * rest. */
static const char *
ctl_endpoint(const char *ep, char *buf, size_t sz)
{
	char	host[RDZV_HOST_MAX];
	int	port;

	if (hostport_split(ep, HOSTPORT_PORT_OPT, host, sizeof host, &port,
	    NULL, 0) == 0 && port == -1 &&
	    hostport_join(buf, sz, host, 29400) == 0)
		return buf;
	return ep;
}

int
main(int argc, char **argv)
{
	struct ctl		 ctl;
	const struct cmd	*cmd = NULL;
	const char		*errstr, *ep = NULL, *v;
	char			 epbuf[600], *end;
	double			 secs;
	size_t			 i;
	unsigned		 bit;
	int			 ch, help = 0;

	memset(&ctl, 0, sizeof ctl);
	ctl.o.timeout_ms = CTL_TIMEOUT_MS;
	ctl.ns = "";
	ctl.reason = CTL_CLOSE_REASON;
	ctl.after = -1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":e:jt:hVf", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'e':
			ep = optarg;
			break;
		case O_TOKEN_FILE:
			ctl.o.token_file = optarg;
			break;
		case O_TLS_CA:
			if (*optarg == '\0')
				return usage_error("--tls-ca needs a file (or "
				    "\"" RDZV_TLS_CA_SYSTEM "\")");
			ctl.o.tls_ca = optarg;
			break;
		case 'j':
			ctl.json = 1;
			break;
		case 't':
			errno = 0;
			secs = strtod(optarg, &end);
			if (errno != 0 || end == optarg || *end != '\0' ||
			    !(secs > 0 && secs <= 86400))
				return usage_error("--timeout \"%s\": seconds, "
				    "more than 0 and at most 86400", optarg);
			ctl.o.timeout_ms = secs * 1000 < 1 ? 1 :
			    (int)(secs * 1000);
			break;
		case 'h':
			help = 1;
			break;
		case 'V':
			printf("rdzvctl %s\n", PACKAGE_VERSION);
			return CTL_EXIT_OK;
		case O_NS:
			ctl.ns = optarg;
			ctl.given |= OPT_NS;
			break;
		case O_REASON:
			ctl.reason = optarg;
			ctl.given |= OPT_REASON;
			break;
		case 'f':
			ctl.follow = 1;
			ctl.given |= OPT_FOLLOW;
			break;
		case O_AFTER:
			ctl.after = strtonum(optarg, -1, LLONG_MAX, &errstr);
			if (errstr != NULL)
				return usage_error("--after \"%s\" is %s: a "
				    "sequence number", optarg, errstr);
			ctl.given |= OPT_AFTER;
			break;
		case O_COUNT:
			ctl.count = strtonum(optarg, 1, LLONG_MAX, &errstr);
			if (errstr != NULL)
				return usage_error("--count \"%s\" is %s: a "
				    "number of views", optarg, errstr);
			ctl.given |= OPT_COUNT;
			break;
		case O_NOW:
			ctl.now = 1;
			ctl.given |= OPT_NOW;
			break;
		case O_OUT:
			ctl.out = optarg;
			ctl.given |= OPT_OUT;
			break;
		case ':':
			return usage_error("%s needs a value",
			    argv[optind - 1]);
		default:
			if (optopt != 0)
				return usage_error("unknown option -%c",
				    optopt);
			return usage_error("unknown option %s",
			    argv[optind - 1]);
		}
	}
	argc -= optind;
	argv += optind;

	if (argc > 0) {
		for (i = 0; i < NCMDS; i++)
			if (strcmp(argv[0], cmds[i].name) == 0)
				cmd = &cmds[i];
		if (cmd == NULL)
			return usage_error("unknown command \"%s\"", argv[0]);
	}
	if (help) {
		if (cmd != NULL)
			usage_cmd(stdout, cmd);
		else
			usage_global(stdout);
		return CTL_EXIT_OK;
	}
	if (cmd == NULL) {
		usage_global(stderr);
		return CTL_EXIT_USAGE;
	}
	for (bit = 1; bit <= OPT_LAST; bit <<= 1)
		if ((ctl.given & bit) && !(cmd->opts & bit))
			return usage_error("%s is not an option of %s",
			    opt_name(bit), cmd->name);
	if (argc - 1 < cmd->minargs || argc - 1 > cmd->maxargs) {
		fprintf(stderr, "rdzvctl: usage: rdzvctl %s (rdzvctl %s -h)\n",
		    cmd->synopsis, cmd->name);
		return CTL_EXIT_USAGE;
	}

	if (ep == NULL && (v = getenv("RDZV_ENDPOINT")) != NULL && *v != '\0')
		ep = v;
	if (ep == NULL)
		ep = CTL_DEFAULT_ENDPOINT;
	ctl.o.endpoint = ctl_endpoint(ep, epbuf, sizeof epbuf);
	if (ctl.o.token_file == NULL &&
	    (v = getenv("RDZV_TOKEN_FILE")) != NULL && *v != '\0')
		ctl.o.token_file = v;
	if (ctl.o.tls_ca == NULL &&
	    (v = getenv(RDZV_TLS_CA_ENV)) != NULL && *v != '\0')
		ctl.o.tls_ca = v;
	ctl.cmd = cmd->name;
	return cmd->fn(&ctl, argc - 1, argv + 1);
}
