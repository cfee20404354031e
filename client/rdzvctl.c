/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rdzvctl.c: the operator's command line for rdzvd: status, jobs,
 * members, events, top, kv, close, evict, forget and credential.
 *
 * Owns option parsing (global options anywhere on the line, each
 * command's own options checked against it), the table of commands
 * (cmds[]), and what the commands share: one request to rdzvd, failures
 * worded for the operator, and the two outputs: the server's JSON as is
 * with --json, aligned tables otherwise.  The commands themselves are in
 * cmd_admin.c, cmd_jobs.c and cmd_kv.c.  Exit statuses are part of the
 * interface (ctl.h, rdzvctl(1)): 0 done, 1 rdzvd said no, 2 usage, 3 no
 * connection or no answer in time, 4 authentication or TLS refused or
 * failed.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client.h"
#include "ctl.h"
#include "hostport.h"
#include "rdzv_err.h"
#include "tls.h"

#define CTL_TIMEOUT_MS		10000
#define CTL_CLOSE_REASON	"closed with rdzvctl"

/* Command options; each command lists the ones it takes. */
#define OPT_NS		0x01
#define OPT_REASON	0x02
#define OPT_FOLLOW	0x04
#define OPT_AFTER	0x08
#define OPT_COUNT	0x10
#define OPT_NOW		0x20
#define OPT_OUT		0x40
#define OPT_LAST	OPT_OUT		/* the highest */

struct cmd {
	const char	*name;
	const char	*synopsis;
	const char	*help;
	unsigned	 opts;
	int		 minargs, maxargs;
	int		(*fn)(struct ctl *, int, char **);
};

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

int
ctl_usage(const char *fmt, ...)
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
int
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

json_t *
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

int64_t
ctl_jint(const json_t *o, const char *key)
{
	const json_t	*v = json_object_get(o, key);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

const char *
ctl_jstr(const json_t *o, const char *key)
{
	const char	*s = json_string_value(json_object_get(o, key));

	return s != NULL ? s : "-";
}

/* Prints a JSON value compactly on one line. */
int
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
int
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

/* ---- one request ---- */

/*
 * Connects, makes one operator request and closes.  Returns 0 with *text
 * (the reply's JSON, malloc'ed; NULL for an empty reply), or the exit
 * status after reporting the failure, with *text NULL (so the caller may
 * free it either way); what and hint word a not-found answer.
 */
int
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
				return ctl_usage("--tls-ca needs a file (or "
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
				return ctl_usage("--timeout \"%s\": seconds, "
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
				return ctl_usage("--after \"%s\" is %s: a "
				    "sequence number", optarg, errstr);
			ctl.given |= OPT_AFTER;
			break;
		case O_COUNT:
			ctl.count = strtonum(optarg, 1, LLONG_MAX, &errstr);
			if (errstr != NULL)
				return ctl_usage("--count \"%s\" is %s: a "
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
			return ctl_usage("%s needs a value",
			    argv[optind - 1]);
		default:
			if (optopt != 0)
				return ctl_usage("unknown option -%c",
				    optopt);
			return ctl_usage("unknown option %s",
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
			return ctl_usage("unknown command \"%s\"", argv[0]);
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
			return ctl_usage("%s is not an option of %s",
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
