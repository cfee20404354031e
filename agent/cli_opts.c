/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli_opts.c: rdzv-agent's options, one table of rows.
 *
 * Each row of cli_opts[] is one of torchrun's options (or ours): its
 * underscore spelling, from which the hyphen spelling (--nproc-per-node)
 * and its PET_<OPTION> variable follow; how its value is set, by kind
 * into a field of struct agent_config (a flag, a string, a bounded
 * number, seconds) or by a setter of its own; and its lines of --help,
 * which is printed from the table.  Also here: the environment's
 * defaults (SLURM_JOB_ID.SLURM_STEP_ID, .r<SLURM_RESTART_COUNT> once
 * requeued, as --rdzv_id; SLURM_NNODES; torch's own variables), the
 * command line read onto the table, and --rdzv_conf's keys.
 * Precedence, lowest first: defaults, SLURM_*, PET_*, the command line.
 * What the options mean once all are read (the rendezvous, the
 * endpoint, the worker count and command) is cli.c's.
 * Why about 1,200 lines: the table with its help (210) and the setters
 * (280) stand together on purpose; a row and what sets it are read at once.
 */
#include "config.h"

#include <sys/types.h>

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "hostport.h"
#include "log.h"
#include "wire.h"

#define OFF(f)	offsetof(struct agent_config, f)

/* --numa_binding's words (agent.h). */
const char *const cli_numa_modes[] = {
	"", "node", "socket", "exclusive", "core-complex", NULL
};

/*
 * Signals --signals_to_handle may not name: they cannot be caught, are
 * the agent's own (SIGCHLD, SIGPIPE), or mean the agent itself crashed.
 */
static const int cli_sig_refused[] = {
	SIGKILL, SIGSTOP, SIGCHLD, SIGPIPE, SIGSEGV, SIGBUS, SIGFPE, SIGILL,
	SIGABRT, SIGTRAP, SIGSYS, 0
};

/* ---- parsing values ---- */

char *
cli_strdup(const char *s)
{
	char	*p;

	if ((p = strdup(s)) == NULL)
		fatal("strdup");
	return (p);
}

void
cli_setstr(char **dst, const char *v)
{
	free(*dst);
	*dst = cli_strdup(v);
}

/* Parses a boolean PET_ value (torch: int(value)); -1 if not one. */
static int
cli_bool(const char *v)
{
	if (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 ||
	    strcasecmp(v, "yes") == 0 || strcasecmp(v, "on") == 0 ||
	    strcasecmp(v, "t") == 0 || strcasecmp(v, "y") == 0)
		return (1);
	if (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0 ||
	    strcasecmp(v, "no") == 0 || strcasecmp(v, "off") == 0 ||
	    strcasecmp(v, "f") == 0 || strcasecmp(v, "n") == 0 ||
	    *v == '\0')
		return (0);
	return (-1);
}

int
cli_int(const char *name, const char *v, long long min, long long max,
    int *out)
{
	const char	*errstr;
	long long	 n;

	n = strtonum(v, min, max, &errstr);
	if (errstr != NULL) {
		fprintf(stderr, "rdzv-agent: --%s: \"%s\" is %s\n", name, v,
		    errstr);
		return (-1);
	}
	*out = (int)n;
	return (0);
}

/* A finite decimal lo <= d < hi (hi included when incl) into *d; else
 * says v is not `what`. */
static int
cli_double(const char *name, const char *v, double lo, double hi, int incl,
    const char *what, double *d)
{
	char	*end;

	errno = 0;
	*d = strtod(v, &end);
	if (errno != 0 || end == v || *end != '\0' || !isfinite(*d) ||
	    *d < lo || *d > hi || (!incl && *d == hi)) {
		fprintf(stderr, "rdzv-agent: %s: \"%s\" is not %s\n", name, v,
		    what);
		return (-1);
	}
	return (0);
}

/* Seconds (a decimal, maybe fractional) into milliseconds. */
static int
cli_seconds(const char *name, const char *v, int *ms)
{
	double	d;

	if (cli_double(name, v, 0, 1e6, 1, "a number of seconds", &d) != 0)
		return (-1);
	*ms = (int)(d * 1000 + 0.5);
	return (0);
}

/* A fraction 0 <= v < 1 into per mille (0: off). */
static int
cli_ratio(const char *name, const char *v, int *pm)
{
	double	d;

	if (cli_double(name, v, 0, 1, 0, "a fraction from 0 (off) to below 1",
	    &d) != 0)
		return (-1);
	*pm = (int)(d * 1000 + 0.5);
	if (*pm >= 1000)
		*pm = 999;
	return (0);
}

static int
cli_nnodes(struct agent_config *cfg, const char *v)
{
	char	 buf[64], *colon;
	int	 a, b;

	if (strlcpy(buf, v, sizeof buf) >= sizeof buf)
		goto bad;
	if ((colon = strchr(buf, ':')) != NULL) {
		*colon = '\0';
		if (cli_int("nnodes", buf, 1, 1000000, &a) != 0 ||
		    cli_int("nnodes", colon + 1, 1, 1000000, &b) != 0)
			return (-1);
	} else {
		if (cli_int("nnodes", buf, 1, 1000000, &a) != 0)
			return (-1);
		b = a;
	}
	if (a > b)
		goto bad;
	cfg->nnodes_min = a;
	cfg->nnodes_max = b;
	return (0);
bad:
	fprintf(stderr, "rdzv-agent: --nnodes: \"%s\" is not N or MIN:MAX "
	    "with MIN <= MAX\n", v);
	return (-1);
}

int
cli_std_for(const char *spec, int local_rank)
{
	const char	*p, *errstr;
	char		 item[32], *colon;
	size_t		 n;
	long long	 r, v;

	if (spec == NULL || *spec == '\0')
		return (0);
	if (strchr(spec, ':') == NULL) {
		v = strtonum(spec, 0, 3, &errstr);
		return (errstr != NULL ? -1 : (int)v);
	}
	/* torchrun's mapping form: "0:3,1:2"; ranks not named get 0. */
	for (p = spec; *p != '\0'; p += n + (p[n] == ',')) {
		n = strcspn(p, ",");
		if (n == 0 || n >= sizeof item)
			return (-1);
		memcpy(item, p, n);
		item[n] = '\0';
		if ((colon = strchr(item, ':')) == NULL)
			return (-1);
		*colon = '\0';
		r = strtonum(item, 0, AGENT_NPROC_MAX, &errstr);
		if (errstr != NULL)
			return (-1);
		v = strtonum(colon + 1, 0, 3, &errstr);
		if (errstr != NULL)
			return (-1);
		if (r == local_rank)
			return ((int)v);
	}
	return (0);
}

/*
 * One --rdzv_conf key: ours, and every key torchrun's backends read,
 * mapped onto what it means here (keep_alive_interval and its attempts,
 * heartbeat_timeout: the heartbeat and the lease; read_timeout: how long
 * a lost rendezvous is tried again).  Unknown keys warn.
 */
static int
cli_conf_key(struct cli_state *st, const char *k, const char *v)
{
	struct agent_config	*cfg = st->cfg;
	char			 name[64];
	int			 b;

	snprintf(name, sizeof name, "--rdzv_conf %s", k);
	if (strcmp(k, "last_call_timeout") == 0)
		return (cli_seconds(name, v, &cfg->last_call_ms));
	if (strcmp(k, "lease") == 0 || strcmp(k, "lease_timeout") == 0) {
		st->given |= CLI_GIVEN_LEASE;
		return (cli_seconds(name, v, &cfg->lease_ms));
	}
	if (strcmp(k, "heartbeat") == 0 ||
	    strcmp(k, "heartbeat_interval") == 0) {
		st->given |= CLI_GIVEN_HEARTBEAT;
		return (cli_seconds(name, v, &cfg->heartbeat_ms));
	}
	if (strcmp(k, "join_timeout") == 0) {
		st->given |= CLI_GIVEN_JOIN;
		return (cli_seconds(name, v, &cfg->join_timeout_ms));
	}
	if (strcmp(k, "timeout") == 0)
		return (cli_seconds(name, v, &st->timeout_ms));
	if (strcmp(k, "reconnect_timeout") == 0) {
		st->given |= CLI_GIVEN_RECONNECT;
		return (cli_seconds(name, v, &cfg->reconnect_timeout_ms));
	}
	if (strcmp(k, "read_timeout") == 0)
		return (cli_seconds(name, v, &st->read_ms));
	if (strcmp(k, "heartbeat_timeout") == 0)
		return (cli_seconds(name, v, &st->hb_timeout_ms));
	if (strcmp(k, "keep_alive_interval") == 0)
		return (cli_seconds(name, v, &st->keep_alive_ms));
	if (strcmp(k, "keep_alive_max_attempt") == 0)
		return (cli_int(name + 2, v, 1, 1000, &st->keep_alive_n));
	if (strcmp(k, "close_timeout") == 0)
		return (cli_seconds(name, v, &cfg->close_ms));
	/* In-place repair (doc/repair.md, "Repair or restart"): the job's own. */
	if (strcmp(k, "max_repairs") == 0)
		return (cli_int(name + 2, v, 0, INT_MAX, &cfg->max_repairs));
	if (strcmp(k, "repair_timeout") == 0)
		return (cli_seconds(name, v, &cfg->repair_timeout_ms));
	/* Stragglers (doc/repair.md, "Stragglers"): the job's own, like repair. */
	if (strcmp(k, "straggler_ratio") == 0)
		return (cli_ratio(name, v, &cfg->strag_ratio_pm));
	if (strcmp(k, "straggler_window") == 0)
		return (cli_seconds(name, v, &cfg->strag_window_ms));
	if (strcmp(k, "straggler_action") == 0) {
		if (strcmp(v, "off") == 0)
			cfg->strag_action = NAT_STRAGGLER_OFF;
		else if (strcmp(v, "replace") == 0)
			cfg->strag_action = NAT_STRAGGLER_REPLACE;
		else {
			fprintf(stderr, "rdzv-agent: %s: \"%s\" is neither "
			    "off nor replace\n", name, v);
			return (-1);
		}
		return (0);
	}
	if (strcmp(k, "replicas") == 0)
		return (cli_int(name + 2, v, 1, 1 << 20, &cfg->replicas));
	if (strcmp(k, "is_host") == 0) {
		if ((b = cli_bool(v)) == -1) {
			fprintf(stderr, "rdzv-agent: %s: \"%s\" is not a "
			    "boolean\n", name, v);
			return (-1);
		}
		cfg->is_host = b;	/* given: no guess from the name */
		return (0);
	}
	if (strcmp(k, "store_type") == 0 || strcmp(k, "use_libuv") == 0) {
		log_info("%s: nothing to choose here: the store is rdzvd's "
		    "(embedded when an agent hosts it)", name);
		return (0);
	}
	log_warnx("--rdzv_conf: unknown key \"%s\" ignored", k);
	return (0);
}

static int
cli_conf(struct cli_state *st, const char *conf)
{
	char	*copy, *item, *next, *eq;
	int	 rv = 0;

	copy = cli_strdup(conf);
	for (item = copy; item != NULL && rv == 0; item = next) {
		if ((next = strchr(item, ',')) != NULL)
			*next++ = '\0';
		if (*item == '\0')
			continue;
		if ((eq = strchr(item, '=')) == NULL) {
			fprintf(stderr, "rdzv-agent: --rdzv_conf: \"%s\" is "
			    "not KEY=VALUE\n", item);
			rv = -1;
			break;
		}
		*eq = '\0';
		rv = cli_conf_key(st, item, eq + 1);
	}
	free(copy);
	return (rv);
}

/*
 * Walks torchrun's --local_ranks_filter ("0,1,2": at least one rank
 * below AGENT_NPROC_MAX), calling cb (may be NULL) for each.  Returns 0,
 * 1 as soon as cb returns non-zero, or -1 when v is malformed.
 */
static int
cli_ranks(const char *v, int (*cb)(int, void *), void *arg)
{
	const char	*p, *errstr;
	char		 item[16];
	size_t		 n;
	long long	 r;

	if (*v == '\0')
		return (-1);
	for (p = v; *p != '\0'; p += n + (p[n] == ',')) {
		n = strcspn(p, ",");
		if (n == 0 || n >= sizeof item)
			return (-1);
		memcpy(item, p, n);
		item[n] = '\0';
		r = strtonum(item, 0, AGENT_NPROC_MAX - 1, &errstr);
		if (errstr != NULL)
			return (-1);
		if (cb != NULL && cb((int)r, arg))
			return (1);
		if (p[n] == ',' && p[n + 1] == '\0')
			return (-1);
	}
	return (0);
}

static int
cli_rank_is(int r, void *arg)
{
	return (r == *(int *)arg);
}

int
cli_rank_shown(const struct agent_config *cfg, int local_rank)
{
	if (cfg->ranks_filter == NULL)
		return (1);
	return (cli_ranks(cfg->ranks_filter, cli_rank_is, &local_rank) == 1);
}

/* A signal's number from "SIGUSR1", "usr1" or "10"; -1 if none. */
static int
cli_signo(const char *word)
{
	const char	*name, *errstr;
	long long	 n;
	int		 sig;

	if (isdigit((unsigned char)word[0])) {
		n = strtonum(word, 1, NSIG - 1, &errstr);
		return (errstr != NULL ? -1 : (int)n);
	}
	if (strncasecmp(word, "SIG", 3) == 0)
		word += 3;
	for (sig = 1; sig < NSIG; sig++)
		if ((name = sigabbrev_np(sig)) != NULL &&
		    strcasecmp(name, word) == 0)
			return (sig);
	return (-1);
}

/*
 * --signals_to_handle: torchrun's list of signals the agent catches.
 * SIGTERM, SIGINT, SIGHUP and SIGQUIT always stop the workers and the
 * agent; every other signal named, and SIGUSR1 and SIGUSR2 always, is
 * forwarded to each worker while the agent goes on supervising.
 */
static int
cli_signals(struct agent_config *cfg, const char *v)
{
	char	*copy, *item, *next, *end;
	int	 sig, i, rv = 0;

	sigemptyset(&cfg->fwd_signals);
	sigaddset(&cfg->fwd_signals, SIGUSR1);
	sigaddset(&cfg->fwd_signals, SIGUSR2);
	copy = cli_strdup(v);
	for (item = copy; item != NULL; item = next) {
		if ((next = strchr(item, ',')) != NULL)
			*next++ = '\0';
		while (isspace((unsigned char)*item))
			item++;
		end = item + strlen(item);
		while (end > item && isspace((unsigned char)end[-1]))
			*--end = '\0';
		if (*item == '\0')
			continue;
		if ((sig = cli_signo(item)) == -1) {
			fprintf(stderr, "rdzv-agent: --signals_to_handle: "
			    "\"%s\" is not a signal\n", item);
			rv = -1;
			break;
		}
		for (i = 0; cli_sig_refused[i] != 0; i++)
			if (cli_sig_refused[i] == sig)
				break;
		if (cli_sig_refused[i] != 0) {
			fprintf(stderr, "rdzv-agent: --signals_to_handle: "
			    "SIG%s cannot be forwarded\n", sigabbrev_np(sig));
			rv = -1;
			break;
		}
		if (sig != SIGTERM && sig != SIGINT && sig != SIGHUP &&
		    sig != SIGQUIT)
			sigaddset(&cfg->fwd_signals, sig);
	}
	free(copy);
	return (rv);
}

/* An option torchrun has and rdzv-agent has no use for: one line why. */
static void
cli_ignored(const struct cli_opt *o, const char *v, const char *why)
{
	log_warnx("--%s %s: ignored: %s", o->name, v, why);
}

/*
 * Refuses a job id with a byte outside printable ASCII or a space, naming
 * the first (counted from 1).  torchrun takes any string, but rdzvd has
 * always refused such ids at JOIN (a late, vague failure), and the
 * worker channel's words (the round's namespace job/<id>/round/<n>) are
 * separated by spaces.  Returns 0 or -1 (printed).
 */
static int
cli_id_check(const char *id)
{
	const unsigned char	*p = (const unsigned char *)id;
	char			 shown[256], what[64];

	for (; *p != '\0'; p++) {
		if (*p > ' ' && *p < 0x7f)
			continue;
		if (*p == ' ')
			strlcpy(what, "a space", sizeof what);
		else if (*p == '\t')
			strlcpy(what, "a tab (0x09)", sizeof what);
		else if (*p == '\n')
			strlcpy(what, "a newline (0x0a)", sizeof what);
		else if (*p < ' ' || *p == 0x7f)
			snprintf(what, sizeof what, "a control character "
			    "(0x%02x)", *p);
		else
			snprintf(what, sizeof what, "byte 0x%02x, not ASCII",
			    *p);
		fprintf(stderr, "rdzv-agent: --rdzv_id \"%s\": character %zu "
		    "is %s; a job id is printable ASCII without spaces, as "
		    "rdzvd's job names and the repair channel need (torchrun "
		    "takes any string)\n",
		    log_escape(shown, sizeof shown, id, strlen(id)),
		    (size_t)((const char *)p - id) + 1, what);
		return (-1);
	}
	return (0);
}

/* ---- setters: the kinds', then the rows' own ---- */

static int
cli_set_flag(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	(void)v;
	*(int *)((char *)st->cfg + o->off) = 1;
	return (0);
}

static int
cli_set_str(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	cli_setstr((char **)((char *)st->cfg + o->off), v);
	return (0);
}

static int
cli_set_int(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	return (cli_int(o->name, v, o->min, o->max,
	    (int *)((char *)st->cfg + o->off)));
}

static int
cli_set_seconds(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	char	name[64];

	snprintf(name, sizeof name, "--%s", o->name);
	return (cli_seconds(name, v, (int *)((char *)st->cfg + o->off)));
}

static int
cli_set_accept(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	(void)st;
	(void)o;
	(void)v;
	return (0);
}

/* The setter of each kind but CLI_FN, in enum cli_kind order. */
static cli_set_fn *const cli_kind_set[] = {
	[CLI_FLAG] = cli_set_flag,
	[CLI_STR] = cli_set_str,
	[CLI_INT] = cli_set_int,
	[CLI_SECONDS] = cli_set_seconds,
	[CLI_ACCEPT] = cli_set_accept,
};

static int
cli_set_nnodes(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	(void)o;
	return (cli_nnodes(st->cfg, v));
}

static int
cli_set_endpoint(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	(void)o;
	/* An empty one (PET_RDZV_ENDPOINT= from a launcher) names none. */
	if (*v != '\0')
		st->given |= CLI_GIVEN_ENDPOINT;
	else
		st->given &= ~CLI_GIVEN_ENDPOINT;
	cli_setstr(&st->cfg->endpoint, v);
	return (0);
}

static int
cli_set_id(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	(void)o;
	if (cli_id_check(v) != 0)
		return (-1);
	cli_setstr(&st->cfg->rdzv_id, v);
	return (0);
}

static int
cli_set_backend(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	(void)o;
	if (strncmp(v, "etcd", 4) == 0) {
		fprintf(stderr, "rdzv-agent: --rdzv_backend %s: etcd is not "
		    "supported; use c10d (the agent on the endpoint's host "
		    "hosts the rendezvous), static (node rank 0 hosts it) or "
		    "rdzv (rdzvd at --rdzv_endpoint, which outlives any "
		    "node)\n", v);
		return (-1);
	}
	if (strcmp(v, "c10d") != 0 && strcmp(v, "static") != 0 &&
	    strcmp(v, "rdzv") != 0) {
		fprintf(stderr, "rdzv-agent: --rdzv_backend %s: unknown; c10d, "
		    "static or rdzv\n", v);
		return (-1);
	}
	cli_setstr(&st->cfg->rdzv_backend, v);
	return (0);
}

static int
cli_set_conf(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	(void)o;
	cli_setstr(&st->cfg->rdzv_conf, v);
	return (cli_conf(st, v));
}

/* torchrun reads it; an event-driven agent has nothing to poll. */
static int
cli_set_monitor(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	(void)o;
	st->cfg->monitor_interval = strtod(v, NULL);
	return (0);
}

/* --redirects and --tee: a spec cli_std_for reads, into the field. */
static int
cli_set_std(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	if (cli_std_for(v, 0) == -1) {
		fprintf(stderr, "rdzv-agent: --%s: \"%s\" is not 0-3 or "
		    "LOCAL_RANK:0-3,...\n", o->name, v);
		return (-1);
	}
	cli_setstr((char **)((char *)st->cfg + o->off), v);
	return (0);
}

static int
cli_set_signals(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	(void)o;
	return (cli_signals(st->cfg, v));
}

static int
cli_set_ranks(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	(void)o;
	if (*v == '\0') {
		free(st->cfg->ranks_filter);
		st->cfg->ranks_filter = NULL;
		return (0);
	}
	if (cli_ranks(v, NULL, NULL) != 0) {
		fprintf(stderr, "rdzv-agent: --local_ranks_filter: \"%s\" is "
		    "not a list of local ranks (0,1,2)\n", v);
		return (-1);
	}
	cli_setstr(&st->cfg->ranks_filter, v);
	return (0);
}

static int
cli_set_numa(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	int	m;

	(void)o;
	if (*v == '\0') {
		st->cfg->numa_mode = SUP_NUMA_NONE;
		return (0);
	}
	for (m = 1; cli_numa_modes[m] != NULL; m++)
		if (strcmp(v, cli_numa_modes[m]) == 0)
			break;
	if (cli_numa_modes[m] == NULL) {
		fprintf(stderr, "rdzv-agent: --numa_binding: \"%s\" is not "
		    "node, socket, exclusive or core-complex\n", v);
		return (-1);
	}
	st->cfg->numa_mode = m;
	return (0);
}

static int
cli_set_dup_filters(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	(void)st;
	if (*v != '\0')
		cli_ignored(o, v, "rdzv-agent writes no filtered_std*.log; "
		    "grep the per-rank logs of --tee");
	return (0);
}

static int
cli_set_event_log(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	(void)st;
	if (*v != '\0' && strcmp(v, "null") != 0)
		cli_ignored(o, v, "torch's event handlers are python plugins; "
		    "rdzvd keeps the job's events (rdzvctl events)");
	return (0);
}

static int
cli_set_logs_specs(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	(void)st;
	if (*v != '\0')
		cli_ignored(o, v, "a python entry point; the logs are laid out "
		    "as torchrun's default (--log_dir)");
	return (0);
}

static int
cli_set_warm_spare(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	(void)o;
	if ((st->cfg->warm_spare = cli_bool(v)) == -1 || *v == '\0') {
		fprintf(stderr, "rdzv-agent: --warm_spare: \"%s\" is not 1 or "
		    "0\n", v);
		return (-1);
	}
	return (0);
}

static int
cli_set_round_ports(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	char	why[256];

	(void)o;
	if (*v == '\0') {
		st->cfg->round_ports[0] = st->cfg->round_ports[1] = 0;
		return (0);
	}
	if (hostport_range(v, &st->cfg->round_ports[0],
	    &st->cfg->round_ports[1], why, sizeof why) != 0) {
		fprintf(stderr, "rdzv-agent: --round_ports %s\n", why);
		return (-1);
	}
	return (0);
}

static int
cli_set_help(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	(void)st;
	(void)o;
	(void)v;
	cli_opts_usage(stdout);
	return (1);
}

static int
cli_set_version(struct cli_state *st, const struct cli_opt *o,
    const char *v)
{
	(void)st;
	(void)o;
	(void)v;
	printf("rdzv-agent %s\n", PACKAGE_VERSION);
	return (1);
}

/*
 * Every option once, in --help's order (PET_* are read in this order too:
 * --shutdown_timeout after --grace wins).  A row: name, letter, kind,
 * field, CLI_INT's min and max, the given bits it sets, its own setter,
 * its value's name in --help (NULL: a flag), help.
 */
const struct cli_opt cli_opts[] = {
	{ "nnodes", 0, CLI_FN, 0, 0, 0, CLI_GIVEN_NNODES, cli_set_nnodes,
	  "N|MIN:MAX", "nodes in the job (default 1:1)" },
	{ "nproc_per_node", 0, CLI_STR, OFF(nproc_spec), 0, 0, 0, NULL,
	  "N|auto|gpu|cpu",
	  "workers on this node (default 1); gpu = one per\n"
	  "GPU, cpu = one per CPU, auto = gpu if any GPU" },
	{ "rdzv_endpoint", 0, CLI_FN, OFF(endpoint), 0, 0, 0,
	  cli_set_endpoint, "HOST:PORT",
	  "the rendezvous: rdzvd's address, or where an\n"
	  "agent hosts it (default port 29400);\n"
	  "A,B,C: rdzvds of which one leads, in turn" },
	{ "rdzv_id", 0, CLI_FN, OFF(rdzv_id), 0, 0, CLI_GIVEN_ID, cli_set_id,
	  "ID",
	  "the job's name in rdzvd (default \"" AGENT_DEFAULT_ID "\"):\n"
	  "printable ASCII, no spaces; give each job its\n"
	  "own on a shared rdzvd" },
	{ "rdzv_backend", 0, CLI_FN, OFF(rdzv_backend), 0, 0,
	  CLI_GIVEN_BACKEND, cli_set_backend, "NAME",
	  "static: node rank 0's agent hosts the\n"
	  "  rendezvous at --master_addr:--master_port\n"
	  "  (or the endpoint), group rank = node rank\n"
	  "  (the default without --rdzv_endpoint)\n"
	  "c10d: the agent on the endpoint's host hosts\n"
	  "  it when nothing listens there (is_host),\n"
	  "  else joins what does (rdzvd, an agent)\n"
	  "rdzv: rdzvd at the endpoint (the default\n"
	  "  with --rdzv_endpoint and no --node_rank)\n"
	  "etcd and etcd-v2 are refused" },
	{ "rdzv_conf", 0, CLI_FN, OFF(rdzv_conf), 0, 0, 0, cli_set_conf,
	  "K=V,...",
	  "last_call_timeout=S  round completes S seconds\n"
	  "  after the last join once min nodes wait\n"
	  "lease=S  a node silent S seconds is dropped\n"
	  "  (alias lease_timeout; default: rdzvd's)\n"
	  "heartbeat=S  heartbeat period (alias\n"
	  "  heartbeat_interval; default lease/4, or 1\n"
	  "  when rdzvd picks the lease: give every\n"
	  "  agent of a job the same keys)\n"
	  "max_repairs=N  repairs the job may make, not\n"
	  "  counted as restarts (default 1000; 0 never)\n"
	  "repair_timeout=S  a replacement not ready in\n"
	  "  S seconds restarts the job (default 60)\n"
	  "straggler_ratio=F  a rank whose steps/s of\n"
	  "  work stay below F of the others' median\n"
	  "  is named a straggler (default 0.5; 0 off)\n"
	  "straggler_window=S  ... for S seconds\n"
	  "  (default 30)\n"
	  "straggler_action=off|replace  replace: its\n"
	  "  agent kills it and the job repairs, or a\n"
	  "  standby node takes its node's place\n"
	  "  (default off)\n"
	  "replicas=R  R replica groups of equal size\n"
	  "  (sharded training, rdzv.mesh): workers get\n"
	  "  RDZV_REPLICAS, RDZV_REPLICA, RDZV_SHARD\n"
	  "join_timeout=S  give up when no round starts\n"
	  "  within S seconds (default 600)\n"
	  "reconnect_timeout=S  give up when rdzvd stays\n"
	  "  unreachable S seconds (default 300; 60,\n"
	  "  torchrun's read_timeout, for static/c10d)\n"
	  "torchrun's keys: timeout (static's) =\n"
	  "  join_timeout, which wins over it;\n"
	  "  read_timeout = reconnect_timeout;\n"
	  "  keep_alive_interval=S heartbeat, times\n"
	  "  keep_alive_max_attempt=N the lease;\n"
	  "  heartbeat_timeout = lease; close_timeout:\n"
	  "  how long LEAVE waits (default 2);\n"
	  "  is_host=1|0: c10d hosts, or never does\n"
	  "  (default: when the endpoint is here);\n"
	  "  store_type, use_libuv: nothing to choose\n"
	  "  (the store is rdzvd's)" },
	{ "standalone", 0, CLI_FLAG, OFF(standalone), 0, 0, 0, NULL, NULL,
	  "run an in-process rdzvd (one-node jobs);\n"
	  "implied when --nnodes is 1 and neither an\n"
	  "endpoint, --master_addr/--master_port nor\n"
	  "--rdzv_backend static is given" },
	{ "max_restarts", 0, CLI_INT, OFF(max_restarts), 0, INT_MAX / 2, 0,
	  NULL, "N", "worker-group restarts before the job fails (0)" },
	{ "monitor_interval", 0, CLI_FN, OFF(monitor_interval), 0, 0, 0,
	  cli_set_monitor, "S", "accepted; the agent is event-driven" },
	{ "start_method", 0, CLI_ACCEPT, 0, 0, 0, 0, NULL, "METHOD",
	  "accepted for torchrun; workers are started with\n"
	  "fork and exec" },
	{ "role", 0, CLI_STR, OFF(role), 0, 0, 0, NULL, "NAME",
	  "ROLE_NAME of the workers (default \"default\")" },
	{ "log_dir", 0, CLI_STR, OFF(log_dir), 0, 0, 0, NULL, "DIR",
	  "DIR/<run_id>_<random>/attempt_<n>/<rank>/\n"
	  "{stdout.log,stderr.log,error.json} (default:\n"
	  "a directory in $TMPDIR, removed at exit);\n"
	  "n is the job's restart count" },
	{ "redirects", 'r', CLI_FN, OFF(redirects), 0, 0, 0, cli_set_std,
	  "N|R:N,...",
	  "send stdout (1), stderr (2) or both (3) of a\n"
	  "worker to its log file only" },
	{ "tee", 't', CLI_FN, OFF(tee), 0, 0, 0, cli_set_std, "N|R:N,...",
	  "to the log file and the console (prefixed)" },
	{ "local_addr", 0, CLI_STR, OFF(local_addr), 0, 0, 0, NULL, "ADDR",
	  "this node's address as told to rdzvd" },
	{ "token_file", 0, CLI_STR, OFF(token_file), 0, 0, 0, NULL, "FILE",
	  "rdzvd's secret or this job's credential (rdzvctl\n"
	  "credential; default $RDZV_TOKEN_FILE); workers\n"
	  "get the job's credential as RDZV_TOKEN_FILE" },
	{ "tls_ca", 0, CLI_STR, OFF(tls_ca), 0, 0, 0, NULL, "FILE|system",
	  "talk TLS to rdzvd, verifying its certificate\n"
	  "against the CA bundle FILE or the system's\n"
	  "store (default $RDZV_TLS_CA); passed on to\n"
	  "workers as RDZV_TLS_CA" },
	{ "no_python", 0, CLI_FLAG, OFF(no_python), 0, 0, 0, NULL, NULL,
	  "exec PROGRAM directly, not with python" },
	{ "module", 'm', CLI_FLAG, OFF(module), 0, 0, 0, NULL, NULL,
	  "run PROGRAM as a python module (python -m)" },
	{ "run_path", 0, CLI_FLAG, OFF(run_path), 0, 0, 0, NULL, NULL,
	  "run PROGRAM with python (like the default)" },
	{ "node_rank", 0, CLI_INT, OFF(node_rank), 0, 1000000,
	  CLI_GIVEN_NODE_RANK, NULL, "N",
	  "static: this node's group rank (default 0)" },
	{ "master_addr", 0, CLI_STR, OFF(master_addr), 0, 0, CLI_GIVEN_MASTER,
	  NULL, "A",
	  "static: where node rank 0 hosts the\n"
	  "rendezvous (default 127.0.0.1)" },
	{ "master_port", 0, CLI_INT, OFF(master_port), 1, 65535,
	  CLI_GIVEN_MASTER, NULL, "P",
	  "static: --master_addr's port (default 29500)" },
	{ "grace", 0, CLI_SECONDS, OFF(grace_ms), 0, 0, 0, NULL, "S",
	  "seconds from SIGTERM to SIGKILL when stopping\n"
	  "workers (default 30)" },
	{ "progress_timeout", 0, CLI_SECONDS, OFF(progress_timeout_ms), 0, 0,
	  0, NULL, "S",
	  "a worker that reported a step (librdzvworker's\n"
	  "rdzv_report_progress) and then none for S\n"
	  "seconds is hung: SIGABRT, then SIGKILL after\n"
	  "--grace, and the job restarts (default 0: off)" },
	{ "gpus_per_worker", 0, CLI_INT, OFF(gpus_per_worker), 0, 1024, 0,
	  NULL, "N",
	  "give local rank r CUDA_VISIBLE_DEVICES with\n"
	  "the devices r*N .. r*N+N-1 of this node, and\n"
	  "LOCAL_RANK 0 (its first device; the rank on\n"
	  "the node is RDZV_LOCAL_RANK)" },
	{ "virtual_local_rank", 0, CLI_FLAG, OFF(virtual_local_rank), 0, 0, 0,
	  NULL, NULL,
	  "LOCAL_RANK 0 and one device each: entry r of\n"
	  "CUDA_VISIBLE_DEVICES, else device r (torch's)" },
	{ "shutdown_timeout", 0, CLI_SECONDS, OFF(grace_ms), 0, 0, 0, NULL,
	  "S",
	  "the same as --grace (default\n"
	  "$TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30)" },
	{ "signals_to_handle", 0, CLI_FN, 0, 0, 0, 0, cli_set_signals,
	  "SIG,...",
	  "signals forwarded to every worker while the\n"
	  "agent goes on (SIGUSR1 and SIGUSR2 always);\n"
	  "SIGTERM, SIGINT, SIGHUP, SIGQUIT always stop\n"
	  "the workers and the agent" },
	{ "local_ranks_filter", 0, CLI_FN, OFF(ranks_filter), 0, 0, 0,
	  cli_set_ranks, "R,...",
	  "show only these local ranks on the console\n"
	  "(the log files of -r and -t keep everything)" },
	{ "log_line_prefix_template", 0, CLI_STR, OFF(prefix_tmpl), 0, 0, 0,
	  NULL, "T",
	  "each console line's prefix (default\n"
	  "$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else\n"
	  "\"[${role_name}${local_rank}]:\"); ${rank},\n"
	  "${hostname} too; \"\" for none.  A worker writes\n"
	  "to a terminal directly, with no prefix, unless\n"
	  "a template is given or the stream is teed" },
	{ "numa_binding", 0, CLI_FN, OFF(numa_mode), 0, 0, 0, cli_set_numa,
	  "node|socket|exclusive|core-complex",
	  "bind each worker to the CPUs (and memory) of\n"
	  "its GPU's NUMA node, as torch's modes; workers\n"
	  "without GPUs are spread over the nodes" },
	{ "duplicate_stdout_filters", 0, CLI_FN, 0, 0, 0, 0,
	  cli_set_dup_filters, "W",
	  "accepted for torchrun; ignored with one line\n"
	  "saying why (no filtered_stdout.log: grep the\n"
	  "per-rank logs of --tee)" },
	{ "duplicate_stderr_filters", 0, CLI_FN, 0, 0, 0, 0,
	  cli_set_dup_filters, "W",
	  "the same for stderr" },
	{ "event_log_handler", 0, CLI_FN, 0, 0, 0, 0, cli_set_event_log,
	  "NAME",
	  "accepted for torchrun; ignored with one line\n"
	  "saying why (rdzvd keeps the job's events:\n"
	  "rdzvctl events)" },
	{ "logs_specs", 0, CLI_FN, 0, 0, 0, 0, cli_set_logs_specs, "NAME",
	  "accepted for torchrun; ignored with one line\n"
	  "saying why (the logs are laid out as\n"
	  "torchrun's default: --log_dir)" },
	{ "warm_spare", 0, CLI_FN, OFF(warm_spare), 0, 0, 0,
	  cli_set_warm_spare, "1|0",
	  "keep pythons that have imported torch (and\n"
	  "RDZV_SPARE_IMPORTS) waiting: one per node to\n"
	  "replace a worker of a job that repairs in\n"
	  "place, one per worker of a job that steps\n"
	  "without offering repair (or reports nothing\n"
	  "for 30 s) to make its restart warm (default\n"
	  "1; python programs, not\n"
	  "--no_python or --numa_binding; each costs the\n"
	  "RSS of an idle python with torch)" },
	{ "round_ports", 0, CLI_FN, OFF(round_ports), 0, 0, 0,
	  cli_set_round_ports, "LO-HI",
	  "the rendezvous this agent hosts (--standalone,\n"
	  "static, c10d) opens each round's TCPStore on\n"
	  "a port of LO-HI (default: any free port)" },
	{ "dry_run", 0, CLI_FLAG, OFF(dry_run), 0, 0, 0, NULL, NULL,
	  "print the resolved configuration and the\n"
	  "environment of each worker, then exit" },
	{ "use_env", 0, CLI_ACCEPT, 0, 0, 0, 0, NULL, NULL,
	  "accepted for torchrun: the workers always find\n"
	  "LOCAL_RANK in their environment" },
	{ "verbose", 'v', CLI_FLAG, OFF(verbose), 0, 0, 0, NULL, NULL,
	  "debug logging" },
	{ "help", 'h', CLI_FN, 0, 0, 0, 0, cli_set_help, NULL,
	  "print this help and exit" },
	{ "version", 'V', CLI_FN, 0, 0, 0, 0, cli_set_version, NULL,
	  "print the version and exit" },
};
const size_t cli_nopts = sizeof cli_opts / sizeof cli_opts[0];

/* ---- reading the table ---- */

int
cli_opts_apply(struct cli_state *st, const struct cli_opt *o, const char *v)
{
	cli_set_fn	*set;
	int		 b, rv;

	if (o->arg == NULL && v != NULL) {
		/* A flag from PET_*: torch reads it as an integer. */
		if ((b = cli_bool(v)) == -1) {
			fprintf(stderr, "rdzv-agent: PET_ value \"%s\" for "
			    "--%s is not 0 or 1\n", v, o->name);
			return (-1);
		}
		if (b == 0)
			return (0);
		v = NULL;
	}
	set = o->kind == CLI_FN ? o->set : cli_kind_set[o->kind];
	if ((rv = set(st, o, v)) == 0)
		st->given |= o->given;
	return (rv);
}

void
cli_opts_init(struct cli_state *st, struct agent_config *cfg)
{
	memset(st, 0, sizeof *st);
	st->cfg = cfg;
	st->read_ms = st->hb_timeout_ms = st->timeout_ms = -1;
	st->keep_alive_ms = st->keep_alive_n = -1;

	memset(cfg, 0, sizeof *cfg);
	cfg->nnodes_min = cfg->nnodes_max = 1;
	cfg->nproc_spec = cli_strdup("1");
	cfg->rdzv_id = cli_strdup(AGENT_DEFAULT_ID);
	cfg->rdzv_backend = cli_strdup("static");
	cfg->is_host = -1;
	cfg->close_ms = 2000;
	cfg->role = cli_strdup("default");
	cfg->monitor_interval = 5;
	cfg->master_port = 29500;
	cfg->grace_ms = 30000;
	cfg->warm_spare = 1;
	cfg->last_call_ms = -1;
	cfg->lease_ms = -1;
	cfg->max_repairs = cfg->repair_timeout_ms = -1;
	cfg->strag_ratio_pm = cfg->strag_window_ms = cfg->strag_action = -1;
	cfg->heartbeat_ms = -1;
	cfg->join_timeout_ms = 600000;
	cfg->reconnect_timeout_ms = 300000;
	sigemptyset(&cfg->fwd_signals);
	sigaddset(&cfg->fwd_signals, SIGUSR1);
	sigaddset(&cfg->fwd_signals, SIGUSR2);
}

/* SLURM_JOB_ID.SLURM_STEP_ID[.r<SLURM_RESTART_COUNT>] as --rdzv_id. */
static void
cli_slurm_id(struct agent_config *cfg, const char *job)
{
	const char	*step = getenv("SLURM_STEP_ID");
	const char	*rc = getenv("SLURM_RESTART_COUNT");

	/*
	 * Every srun step is a job of its own: a second step of the
	 * allocation must not JOIN the first one's closed job.  A requeued
	 * job keeps its id and numbers its steps from 0 again: its restart
	 * count keeps it from joining the old run's job (closed, or with
	 * the old run's rounds and keys).
	 */
	if (step == NULL || *step == '\0')
		step = NULL;
	if (rc == NULL || *rc == '\0' || strcmp(rc, "0") == 0)
		rc = NULL;
	free(cfg->rdzv_id);
	if (asprintf(&cfg->rdzv_id, "%s%s%s%s%s", job,
	    step != NULL ? "." : "", step != NULL ? step : "",
	    rc != NULL ? ".r" : "", rc != NULL ? rc : "") == -1)
		fatal("asprintf");
}

int
cli_opts_env(struct cli_state *st)
{
	struct agent_config	*cfg = st->cfg;
	const struct cli_opt	*o;
	char			 name[64];
	const char		*v;
	size_t			 i, j;
	int			 rv;

	/* Slurm, then torch's own variables, then PET_*. */
	if ((v = getenv("SLURM_JOB_ID")) != NULL && *v != '\0')
		cli_slurm_id(cfg, v);
	if ((v = getenv("SLURM_NNODES")) != NULL && *v != '\0' &&
	    cli_nnodes(cfg, v) != 0)
		return (-1);
	if ((v = getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) != NULL &&
	    *v != '\0' && cli_seconds("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", v,
	    &cfg->grace_ms) != 0)
		return (-1);
	if ((v = getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")) != NULL)
		cli_setstr(&cfg->prefix_tmpl, v);
	for (i = 0; i < cli_nopts; i++) {
		o = &cli_opts[i];
		if (o->set == cli_set_help || o->set == cli_set_version)
			continue;
		snprintf(name, sizeof name, "PET_%s", o->name);
		for (j = 4; name[j] != '\0'; j++)
			name[j] = toupper((unsigned char)name[j]);
		if ((v = getenv(name)) == NULL)
			continue;
		if ((rv = cli_opts_apply(st, o, v)) != 0)
			return (rv);
	}
	return (0);
}

/* getopt_long's value for row i (a letter stands for its own row). */
#define CLI_VAL(i)	(256 + (int)(i))

int
cli_opts_argv(struct cli_state *st, int argc, char **argv, int *first)
{
	struct option		 lopts[2 * (sizeof cli_opts /
				    sizeof cli_opts[0]) + 1];
	char			 shorts[64];
	char			 hyphens[sizeof cli_opts /
				    sizeof cli_opts[0]][64];
	const struct cli_opt	*o;
	size_t			 i, n = 0, s = 0;
	int			 c, rv;
	char			*p;

	/* Both spellings of every long option; getopt stops at PROGRAM. */
	shorts[s++] = '+';
	for (i = 0; i < cli_nopts; i++) {
		o = &cli_opts[i];
		lopts[n++] = (struct option){ o->name, o->arg != NULL ?
		    required_argument : no_argument, NULL, CLI_VAL(i) };
		if (strchr(o->name, '_') != NULL) {
			strlcpy(hyphens[i], o->name, sizeof hyphens[i]);
			for (p = hyphens[i]; (p = strchr(p, '_')) != NULL; )
				*p = '-';
			lopts[n++] = (struct option){ hyphens[i], o->arg !=
			    NULL ? required_argument : no_argument, NULL,
			    CLI_VAL(i) };
		}
		if (o->shortc != 0) {
			shorts[s++] = (char)o->shortc;
			if (o->arg != NULL)
				shorts[s++] = ':';
		}
	}
	memset(&lopts[n], 0, sizeof lopts[n]);
	shorts[s] = '\0';

	optind = 1;
	while ((c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
		if (c == '?' || c == ':') {
			fprintf(stderr, "rdzv-agent: see --help\n");
			return (-1);
		}
		for (i = 0; i < cli_nopts; i++)
			if (CLI_VAL(i) == c || cli_opts[i].shortc == c)
				break;
		if (i == cli_nopts)
			return (-1);
		if ((rv = cli_opts_apply(st, &cli_opts[i],
		    cli_opts[i].arg != NULL ? optarg : NULL)) != 0)
			return (rv);
	}
	*first = optind;
	return (0);
}

/* Help's column: an option's lines start here. */
#define CLI_HELP_COL	28

void
cli_opts_usage(FILE *f)
{
	const struct cli_opt	*o;
	const char		*h, *nl;
	char			 left[96];
	size_t			 i;
	int			 col;

	fprintf(f,
"usage: rdzv-agent [options] [--] PROGRAM [ARGS...]\n"
"\n"
"Starts and supervises the local workers of an elastic job, like torchrun.\n"
"The rendezvous is rdzvd's, or hosted by an agent where torchrun's would be\n"
"(static: node rank 0; c10d: the agent on the endpoint's host).  Every\n"
"option may also come from PET_<OPTION> (e.g. PET_NPROC_PER_NODE=4); the\n"
"command line wins.  Under Slurm, SLURM_JOB_ID.SLURM_STEP_ID is the default\n"
"--rdzv_id (.r<SLURM_RESTART_COUNT> added in a requeued job) and\n"
"SLURM_NNODES --nnodes.\n"
"Options are accepted with '_' or '-' (--nproc_per_node, --nproc-per-node).\n"
"\n");
	for (i = 0; i < cli_nopts; i++) {
		o = &cli_opts[i];
		if (o->shortc != 0)
			snprintf(left, sizeof left, "-%c, --%s%s%s", o->shortc,
			    o->name, o->arg ? " " : "", o->arg ? o->arg : "");
		else
			snprintf(left, sizeof left, "--%s%s%s", o->name,
			    o->arg ? " " : "", o->arg ? o->arg : "");
		col = fprintf(f, "  %s", left);
		/* The first line beside the option when it fits. */
		if (col < CLI_HELP_COL)
			fprintf(f, "%*s", CLI_HELP_COL - col, "");
		else
			fprintf(f, "\n%*s", CLI_HELP_COL, "");
		for (h = o->help; (nl = strchr(h, '\n')) != NULL; h = nl + 1)
			fprintf(f, "%.*s\n%*s", (int)(nl - h), h, CLI_HELP_COL,
			    "");
		fprintf(f, "%s\n", h);
	}
	fprintf(f,
"\n"
"The python interpreter is $PYTHON_EXEC, else $PYTHON, else the python3\n"
"beside rdzv-agent when it is installed in a virtualenv (pip install\n"
"rdzv), else python3 on $PATH (the environment's: a virtualenv's, conda's).\n"
"Exit status: 0 when every worker of the job succeeded, 1 when the job\n"
"failed (a summary in torchrun's layout names the first failure), 2 on\n"
"a usage error, 128+N when the agent was stopped by signal N (SIGTERM,\n"
"SIGINT, SIGHUP, SIGQUIT: forwarded to the workers' process groups).\n"
"SIGTERM to a job whose workers repair in place makes this node leave\n"
"at a step boundary (the others shrink around it, losing no step): 0.\n"
"SIGUSR1 and SIGUSR2 go to each worker and the job goes on (Slurm's\n"
"USR1@N preemption notice).\n");
}
