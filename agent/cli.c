/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.c: rdzv-agent's command line.
 *
 * Owns torchrun's options in both spellings (--nproc_per_node and
 * --nproc-per-node), their PET_<OPTION> environment defaults, the Slurm
 * defaults (SLURM_JOB_ID.SLURM_STEP_ID, .r<SLURM_RESTART_COUNT> once
 * requeued; SLURM_NNODES), --rdzv_conf keys,
 * which rendezvous a command line means (torchrun's static and c10d
 * backends, rdzvd, --standalone), counting GPUs for --nproc_per_node
 * auto|gpu, and resolving the worker command the way torchrun does (the
 * user's python unless --no_python; -m).
 * Precedence, lowest first: defaults, SLURM_*, PET_*, the command line.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/stat.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "hostport.h"
#include "log.h"
#include "rdzv_err.h"
#include "tls.h"
#include "wire.h"

#define CLI_DEFAULT_PORT	29400
/* torchrun's defaults: --master_addr, and --rdzv_conf read_timeout,
 * keep_alive_interval and keep_alive_max_attempt. */
#define CLI_STATIC_ADDR		"127.0.0.1"
#define CLI_READ_TIMEOUT_MS	60000
#define CLI_KEEP_ALIVE_MS	5000
#define CLI_KEEP_ALIVE_N	3

enum cli_id {
	O_NNODES = 256, O_NPROC, O_ENDPOINT, O_ID, O_BACKEND, O_CONF,
	O_STANDALONE, O_MAX_RESTARTS, O_MONITOR, O_START_METHOD, O_ROLE,
	O_LOG_DIR, O_REDIRECTS, O_TEE, O_LOCAL_ADDR, O_NO_PYTHON, O_MODULE,
	O_RUN_PATH, O_NODE_RANK, O_MASTER_ADDR, O_MASTER_PORT, O_GRACE,
	O_PROGRESS_TIMEOUT,
	O_GPUS_PER_WORKER, O_TOKEN_FILE, O_TLS_CA, O_DRY_RUN, O_USE_ENV, O_HELP,
	O_VERSION, O_VERBOSE,
	/* torchrun 2.x */
	O_RANKS_FILTER, O_PREFIX, O_DUP_STDOUT, O_DUP_STDERR, O_EVENT_LOG,
	O_LOGS_SPECS, O_NUMA, O_SIGNALS, O_SHUTDOWN_TIMEOUT, O_VIRTUAL_LR,
	/* rdzv's own */
	O_WARM_SPARE, O_ROUND_PORTS
};

/*
 * Every option once, in its underscore spelling; the hyphen spelling and
 * the PET_ name are derived from it.  flag options take no value.
 */
static const struct cli_opt {
	const char	*name;
	int		 id;
	int		 flag;
	int		 shortc;
} cli_opts[] = {
	{ "nnodes",		O_NNODES,		0, 0 },
	{ "nproc_per_node",	O_NPROC,		0, 0 },
	{ "rdzv_endpoint",	O_ENDPOINT,		0, 0 },
	{ "rdzv_id",		O_ID,			0, 0 },
	{ "rdzv_backend",	O_BACKEND,		0, 0 },
	{ "rdzv_conf",		O_CONF,			0, 0 },
	{ "standalone",		O_STANDALONE,		1, 0 },
	{ "max_restarts",	O_MAX_RESTARTS,		0, 0 },
	{ "monitor_interval",	O_MONITOR,		0, 0 },
	{ "start_method",	O_START_METHOD,		0, 0 },
	{ "role",		O_ROLE,			0, 0 },
	{ "log_dir",		O_LOG_DIR,		0, 0 },
	{ "redirects",		O_REDIRECTS,		0, 'r' },
	{ "tee",		O_TEE,			0, 't' },
	{ "local_addr",		O_LOCAL_ADDR,		0, 0 },
	{ "no_python",		O_NO_PYTHON,		1, 0 },
	{ "module",		O_MODULE,		1, 'm' },
	{ "run_path",		O_RUN_PATH,		1, 0 },
	{ "node_rank",		O_NODE_RANK,		0, 0 },
	{ "master_addr",	O_MASTER_ADDR,		0, 0 },
	{ "master_port",	O_MASTER_PORT,		0, 0 },
	{ "grace",		O_GRACE,		0, 0 },
	{ "progress_timeout",	O_PROGRESS_TIMEOUT,	0, 0 },
	{ "gpus_per_worker",	O_GPUS_PER_WORKER,	0, 0 },
	{ "token_file",		O_TOKEN_FILE,		0, 0 },
	{ "tls_ca",		O_TLS_CA,		0, 0 },
	{ "dry_run",		O_DRY_RUN,		1, 0 },
	{ "use_env",		O_USE_ENV,		1, 0 },
	{ "help",		O_HELP,			1, 'h' },
	{ "version",		O_VERSION,		1, 'V' },
	{ "verbose",		O_VERBOSE,		1, 'v' },
	{ "local_ranks_filter",	O_RANKS_FILTER,		0, 0 },
	{ "log_line_prefix_template", O_PREFIX,		0, 0 },
	{ "duplicate_stdout_filters", O_DUP_STDOUT,	0, 0 },
	{ "duplicate_stderr_filters", O_DUP_STDERR,	0, 0 },
	{ "event_log_handler",	O_EVENT_LOG,		0, 0 },
	{ "logs_specs",		O_LOGS_SPECS,		0, 0 },
	{ "numa_binding",	O_NUMA,			0, 0 },
	{ "signals_to_handle",	O_SIGNALS,		0, 0 },
	{ "shutdown_timeout",	O_SHUTDOWN_TIMEOUT,	0, 0 },
	{ "virtual_local_rank",	O_VIRTUAL_LR,		1, 0 },
	{ "warm_spare",		O_WARM_SPARE,		0, 0 },
	{ "round_ports",	O_ROUND_PORTS,		0, 0 },
};

/* --numa_binding's words, in enum sup_numa_mode order. */
static const char *const cli_numa_modes[] = {
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
#define CLI_NOPTS	(sizeof cli_opts / sizeof cli_opts[0])

static int	cli_nnodes_set, cli_id_set, cli_endpoint_set, cli_backend_set;
static int	cli_master_set, cli_node_rank_set, cli_lease_set, cli_hb_set;
static int	cli_reconnect_set;
/* torchrun's --rdzv_conf timeouts, ms; -1 when not given. */
static int	cli_read_ms = -1, cli_hb_timeout_ms = -1;
static int	cli_keep_alive_ms = -1, cli_keep_alive_n = -1;
static int	cli_timeout_ms = -1, cli_join_set;

static void
cli_usage(FILE *f)
{
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
"\n"
"  --nnodes N|MIN:MAX        nodes in the job (default 1:1)\n"
"  --nproc_per_node N|auto|gpu|cpu\n"
"                            workers on this node (default 1); gpu = one per\n"
"                            GPU, cpu = one per CPU, auto = gpu if any GPU\n"
"  --rdzv_endpoint HOST:PORT the rendezvous: rdzvd's address, or where an\n"
"                            agent hosts it (default port 29400);\n"
"                            A,B,C: rdzvds of which one leads, in turn\n"
"  --rdzv_id ID              the job's name in rdzvd (default \"none\"):\n"
"                            printable ASCII, no spaces; give each job its\n"
"                            own on a shared rdzvd\n"
"  --rdzv_backend NAME       static: node rank 0's agent hosts the\n"
"                              rendezvous at --master_addr:--master_port\n"
"                              (or the endpoint), group rank = node rank\n"
"                              (the default without --rdzv_endpoint)\n"
"                            c10d: the agent on the endpoint's host hosts\n"
"                              it when nothing listens there (is_host),\n"
"                              else joins what does (rdzvd, an agent)\n"
"                            rdzv: rdzvd at the endpoint (the default\n"
"                              with --rdzv_endpoint and no --node_rank)\n"
"                            etcd and etcd-v2 are refused\n"
"  --rdzv_conf K=V,...       last_call_timeout=S  round completes S seconds\n"
"                              after the last join once min nodes wait\n"
"                            lease=S  a node silent S seconds is dropped\n"
"                              (alias lease_timeout; default: rdzvd's)\n"
"                            heartbeat=S  heartbeat period (alias\n"
"                              heartbeat_interval; default lease/4, or 1\n"
"                              when rdzvd picks the lease: give every\n"
"                              agent of a job the same keys)\n"
"                            max_repairs=N  repairs the job may make, not\n"
"                              counted as restarts (default 1000; 0 never)\n"
"                            repair_timeout=S  a replacement not ready in\n"
"                              S seconds restarts the job (default 60)\n"
"                            straggler_ratio=F  a rank whose steps/s of\n"
"                              work stay below F of the others' median\n"
"                              is named a straggler (default 0.5; 0 off)\n"
"                            straggler_window=S  ... for S seconds\n"
"                              (default 30)\n"
"                            straggler_action=off|replace  replace: its\n"
"                              agent kills it and the job repairs, or a\n"
"                              standby node takes its node's place\n"
"                              (default off)\n"
"                            replicas=R  R replica groups of equal size\n"
"                              (sharded training, rdzv.mesh): workers get\n"
"                              RDZV_REPLICAS, RDZV_REPLICA, RDZV_SHARD\n"
"                            join_timeout=S  give up when no round starts\n"
"                              within S seconds (default 600)\n"
"                            reconnect_timeout=S  give up when rdzvd stays\n"
"                              unreachable S seconds (default 300; 60,\n"
"                              torchrun's read_timeout, for static/c10d)\n"
"                            torchrun's keys: timeout (static's) =\n"
"                              join_timeout, which wins over it;\n"
"                              read_timeout = reconnect_timeout;\n"
"                              keep_alive_interval=S heartbeat, times\n"
"                              keep_alive_max_attempt=N the lease;\n"
"                              heartbeat_timeout = lease; close_timeout:\n"
"                              how long LEAVE waits (default 2);\n"
"                              is_host=1|0: c10d hosts, or never does\n"
"                              (default: when the endpoint is here);\n"
"                              store_type, use_libuv: nothing to choose\n"
"                              (the store is rdzvd's)\n"
"  --standalone              run an in-process rdzvd (one-node jobs);\n"
"                            implied when --nnodes is 1 and neither an\n"
"                            endpoint, --master_addr/--master_port nor\n"
"                            --rdzv_backend static is given\n"
"  --max_restarts N          worker-group restarts before the job fails (0)\n"
"  --monitor_interval S      accepted; the agent is event-driven\n"
"  --role NAME               ROLE_NAME of the workers (default \"default\")\n"
"  --log_dir DIR             DIR/<run_id>_<random>/attempt_<n>/<rank>/\n"
"                            {stdout.log,stderr.log,error.json} (default:\n"
"                            a directory in $TMPDIR, removed at exit);\n"
"                            n is the job's restart count\n"
"  -r, --redirects N|R:N,... send stdout (1), stderr (2) or both (3) of a\n"
"                            worker to its log file only\n"
"  -t, --tee N|R:N,...       to the log file and the console (prefixed)\n"
"  --local_addr ADDR         this node's address as told to rdzvd\n"
"  --token_file FILE         rdzvd's secret or this job's credential (rdzvctl\n"
"                            credential; default $RDZV_TOKEN_FILE); workers\n"
"                            get the job's credential as RDZV_TOKEN_FILE\n"
"  --tls_ca FILE|system      talk TLS to rdzvd, verifying its certificate\n"
"                            against the CA bundle FILE or the system's\n"
"                            store (default $RDZV_TLS_CA); passed on to\n"
"                            workers as RDZV_TLS_CA\n"
"  --no_python               exec PROGRAM directly, not with python\n"
"  -m, --module              run PROGRAM as a python module (python -m)\n"
"  --run_path                run PROGRAM with python (like the default)\n"
"  --node_rank N             static: this node's group rank (default 0)\n"
"  --master_addr A, --master_port P\n"
"                            static: where node rank 0 hosts the\n"
"                            rendezvous (default 127.0.0.1:29500)\n"
"  --grace S                 seconds from SIGTERM to SIGKILL when stopping\n"
"                            workers (default 30)\n"
"  --progress_timeout S      a worker that reported a step (librdzvworker's\n"
"                            rdzv_report_progress) and then none for S\n"
"                            seconds is hung: SIGABRT, then SIGKILL after\n"
"                            --grace, and the job restarts (default 0: off)\n"
"  --gpus_per_worker N       give local rank r CUDA_VISIBLE_DEVICES with\n"
"                            the devices r*N .. r*N+N-1 of this node, and\n"
"                            LOCAL_RANK 0 (its first device; the rank on\n"
"                            the node is RDZV_LOCAL_RANK)\n"
"  --virtual_local_rank      LOCAL_RANK 0 and one device each: entry r of\n"
"                            CUDA_VISIBLE_DEVICES, else device r (torch's)\n"
"  --shutdown_timeout S      the same as --grace (default\n"
"                            $TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30)\n"
"  --signals_to_handle SIG,...\n"
"                            signals forwarded to every worker while the\n"
"                            agent goes on (SIGUSR1 and SIGUSR2 always);\n"
"                            SIGTERM, SIGINT, SIGHUP, SIGQUIT always stop\n"
"                            the workers and the agent\n"
"  --local_ranks_filter R,...\n"
"                            show only these local ranks on the console\n"
"                            (the log files of -r and -t keep everything)\n"
"  --log_line_prefix_template T\n"
"                            each console line's prefix (default\n"
"                            $TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else\n"
"                            \"[${role_name}${local_rank}]:\"); ${rank},\n"
"                            ${hostname} too; \"\" for none.  A worker writes\n"
"                            to a terminal directly, with no prefix, unless\n"
"                            a template is given or the stream is teed\n"
"  --numa_binding node|socket|exclusive|core-complex\n"
"                            bind each worker to the CPUs (and memory) of\n"
"                            its GPU's NUMA node, as torch's modes; workers\n"
"                            without GPUs are spread over the nodes\n"
"  --duplicate_stdout_filters W, --duplicate_stderr_filters W,\n"
"  --event_log_handler NAME, --logs_specs NAME\n"
"                            accepted for torchrun; ignored with one line\n"
"                            saying why\n"
"  --warm_spare 1|0          keep pythons that have imported torch (and\n"
"                            RDZV_SPARE_IMPORTS) waiting: one per node to\n"
"                            replace a worker of a job that repairs in\n"
"                            place, one per worker of a job that steps\n"
"                            without offering repair (or reports nothing\n"
"                            for 30 s) to make its restart warm (default\n"
"                            1; python programs, not\n"
"                            --no_python or --numa_binding; each costs the\n"
"                            RSS of an idle python with torch)\n"
"  --round_ports LO-HI       the rendezvous this agent hosts (--standalone,\n"
"                            static, c10d) opens each round's TCPStore on\n"
"                            a port of LO-HI (default: any free port)\n"
"  --dry_run                 print the resolved configuration and the\n"
"                            environment of each worker, then exit\n"
"  -v, --verbose             debug logging\n"
"  -h, --help, -V, --version\n"
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

static char *
cli_strdup(const char *s)
{
	char	*p;

	if ((p = strdup(s)) == NULL)
		fatal("strdup");
	return (p);
}

static void
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

static int
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
cli_conf_key(struct agent_config *cfg, const char *k, const char *v)
{
	char	 name[64];
	int	 b;

	snprintf(name, sizeof name, "--rdzv_conf %s", k);
	if (strcmp(k, "last_call_timeout") == 0)
		return (cli_seconds(name, v, &cfg->last_call_ms));
	if (strcmp(k, "lease") == 0 || strcmp(k, "lease_timeout") == 0) {
		cli_lease_set = 1;
		return (cli_seconds(name, v, &cfg->lease_ms));
	}
	if (strcmp(k, "heartbeat") == 0 ||
	    strcmp(k, "heartbeat_interval") == 0) {
		cli_hb_set = 1;
		return (cli_seconds(name, v, &cfg->heartbeat_ms));
	}
	if (strcmp(k, "join_timeout") == 0) {
		cli_join_set = 1;
		return (cli_seconds(name, v, &cfg->join_timeout_ms));
	}
	if (strcmp(k, "timeout") == 0)
		return (cli_seconds(name, v, &cli_timeout_ms));
	if (strcmp(k, "reconnect_timeout") == 0) {
		cli_reconnect_set = 1;
		return (cli_seconds(name, v, &cfg->reconnect_timeout_ms));
	}
	if (strcmp(k, "read_timeout") == 0)
		return (cli_seconds(name, v, &cli_read_ms));
	if (strcmp(k, "heartbeat_timeout") == 0)
		return (cli_seconds(name, v, &cli_hb_timeout_ms));
	if (strcmp(k, "keep_alive_interval") == 0)
		return (cli_seconds(name, v, &cli_keep_alive_ms));
	if (strcmp(k, "keep_alive_max_attempt") == 0)
		return (cli_int(name + 2, v, 1, 1000, &cli_keep_alive_n));
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

/*
 * torchrun's keep-alive and heartbeat keys, where ours (lease,
 * heartbeat) are not given: a node silent for keep_alive_interval times
 * keep_alive_max_attempt (or heartbeat_timeout) is dropped.
 */
static void
cli_conf_resolve(struct agent_config *cfg)
{
	long long	lease;

	if (!cli_lease_set && cli_hb_timeout_ms > 0)
		cfg->lease_ms = cli_hb_timeout_ms;
	else if (!cli_lease_set &&
	    (cli_keep_alive_ms > 0 || cli_keep_alive_n > 0)) {
		lease = (long long)(cli_keep_alive_ms > 0 ? cli_keep_alive_ms :
		    CLI_KEEP_ALIVE_MS) * (cli_keep_alive_n > 0 ?
		    cli_keep_alive_n : CLI_KEEP_ALIVE_N);
		cfg->lease_ms = lease > INT_MAX / 2 ? INT_MAX / 2 : (int)lease;
	}
	if (!cli_join_set && cli_timeout_ms > 0)
		cfg->join_timeout_ms = cli_timeout_ms;
	if (!cli_hb_set && cli_keep_alive_ms > 0)
		cfg->heartbeat_ms = cli_keep_alive_ms;
	if (!cli_reconnect_set && cli_read_ms > 0)
		cfg->reconnect_timeout_ms = cli_read_ms;
	else if (!cli_reconnect_set && cfg->rdzv_mode != AGENT_RDZV_RDZVD)
		cfg->reconnect_timeout_ms = CLI_READ_TIMEOUT_MS;
}

static int
cli_conf(struct agent_config *cfg, const char *conf)
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
		rv = cli_conf_key(cfg, item, eq + 1);
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

/* Applies one option's value; returns 0, 1 (help/version) or -1. */
static int
cli_apply(struct agent_config *cfg, const struct cli_opt *o, const char *v)
{
	int	b;

	if (o->flag && v != NULL) {
		/* A flag from PET_*: torch reads it as an integer. */
		if ((b = cli_bool(v)) == -1) {
			fprintf(stderr, "rdzv-agent: PET_ value \"%s\" for "
			    "--%s is not 0 or 1\n", v, o->name);
			return (-1);
		}
		if (b == 0)
			return (0);
	}
	switch (o->id) {
	case O_NNODES:
		cli_nnodes_set = 1;
		return (cli_nnodes(cfg, v));
	case O_NPROC:
		cli_setstr(&cfg->nproc_spec, v);
		return (0);
	case O_ENDPOINT:
		cli_endpoint_set = (*v != '\0');
		cli_setstr(&cfg->endpoint, v);
		return (0);
	case O_ID:
		if (cli_id_check(v) != 0)
			return (-1);
		cli_id_set = 1;
		cli_setstr(&cfg->rdzv_id, v);
		return (0);
	case O_BACKEND:
		if (strncmp(v, "etcd", 4) == 0) {
			fprintf(stderr, "rdzv-agent: --rdzv_backend %s: etcd "
			    "is not supported; use c10d (the agent on the "
			    "endpoint's host hosts the rendezvous), static "
			    "(node rank 0 hosts it) or rdzv (rdzvd at "
			    "--rdzv_endpoint, which outlives any node)\n", v);
			return (-1);
		}
		if (strcmp(v, "c10d") != 0 && strcmp(v, "static") != 0 &&
		    strcmp(v, "rdzv") != 0) {
			fprintf(stderr, "rdzv-agent: --rdzv_backend %s: "
			    "unknown; c10d, static or rdzv\n", v);
			return (-1);
		}
		cli_backend_set = 1;
		cli_setstr(&cfg->rdzv_backend, v);
		return (0);
	case O_CONF:
		cli_setstr(&cfg->rdzv_conf, v);
		return (cli_conf(cfg, v));
	case O_STANDALONE:
		cfg->standalone = 1;
		return (0);
	case O_MAX_RESTARTS:
		return (cli_int(o->name, v, 0, INT_MAX / 2,
		    &cfg->max_restarts));
	case O_MONITOR:
		cfg->monitor_interval = strtod(v, NULL);
		return (0);
	case O_START_METHOD:
		return (0);
	case O_ROLE:
		cli_setstr(&cfg->role, v);
		return (0);
	case O_LOG_DIR:
		cli_setstr(&cfg->log_dir, v);
		return (0);
	case O_REDIRECTS:
	case O_TEE:
		if (cli_std_for(v, 0) == -1) {
			fprintf(stderr, "rdzv-agent: --%s: \"%s\" is not 0-3 "
			    "or LOCAL_RANK:0-3,...\n", o->name, v);
			return (-1);
		}
		cli_setstr(o->id == O_TEE ? &cfg->tee : &cfg->redirects, v);
		return (0);
	case O_LOCAL_ADDR:
		cli_setstr(&cfg->local_addr, v);
		return (0);
	case O_TOKEN_FILE:
		cli_setstr(&cfg->token_file, v);
		return (0);
	case O_TLS_CA:
		cli_setstr(&cfg->tls_ca, v);
		return (0);
	case O_NO_PYTHON:
		cfg->no_python = 1;
		return (0);
	case O_MODULE:
		cfg->module = 1;
		return (0);
	case O_RUN_PATH:
		cfg->run_path = 1;
		return (0);
	case O_NODE_RANK:
		cli_node_rank_set = 1;
		return (cli_int(o->name, v, 0, 1000000, &cfg->node_rank));
	case O_MASTER_ADDR:
		cli_master_set = 1;
		cli_setstr(&cfg->master_addr, v);
		return (0);
	case O_MASTER_PORT:
		cli_master_set = 1;
		return (cli_int(o->name, v, 1, 65535, &cfg->master_port));
	case O_GRACE:
		return (cli_seconds("--grace", v, &cfg->grace_ms));
	case O_PROGRESS_TIMEOUT:
		return (cli_seconds("--progress_timeout", v,
		    &cfg->progress_timeout_ms));
	case O_GPUS_PER_WORKER:
		return (cli_int(o->name, v, 0, 1024, &cfg->gpus_per_worker));
	case O_DRY_RUN:
		cfg->dry_run = 1;
		return (0);
	case O_USE_ENV:
		return (0);
	case O_HELP:
		cli_usage(stdout);
		return (1);
	case O_VERSION:
		printf("rdzv-agent %s\n", PACKAGE_VERSION);
		return (1);
	case O_VERBOSE:
		cfg->verbose = 1;
		return (0);
	case O_RANKS_FILTER:
		if (*v == '\0') {
			free(cfg->ranks_filter);
			cfg->ranks_filter = NULL;
			return (0);
		}
		if (cli_ranks(v, NULL, NULL) != 0) {
			fprintf(stderr, "rdzv-agent: --local_ranks_filter: "
			    "\"%s\" is not a list of local ranks (0,1,2)\n", v);
			return (-1);
		}
		cli_setstr(&cfg->ranks_filter, v);
		return (0);
	case O_PREFIX:
		cli_setstr(&cfg->prefix_tmpl, v);
		return (0);
	case O_DUP_STDOUT:
	case O_DUP_STDERR:
		if (*v != '\0')
			cli_ignored(o, v, "rdzv-agent writes no filtered_"
			    "std*.log; grep the per-rank logs of --tee");
		return (0);
	case O_EVENT_LOG:
		if (*v != '\0' && strcmp(v, "null") != 0)
			cli_ignored(o, v, "torch's event handlers are python "
			    "plugins; rdzvd keeps the job's events (rdzvctl "
			    "events)");
		return (0);
	case O_LOGS_SPECS:
		if (*v != '\0')
			cli_ignored(o, v, "a python entry point; the logs are "
			    "laid out as torchrun's default (--log_dir)");
		return (0);
	case O_NUMA:
		if (*v == '\0') {
			cfg->numa_mode = SUP_NUMA_NONE;
			return (0);
		}
		for (b = 1; cli_numa_modes[b] != NULL; b++)
			if (strcmp(v, cli_numa_modes[b]) == 0)
				break;
		if (cli_numa_modes[b] == NULL) {
			fprintf(stderr, "rdzv-agent: --numa_binding: \"%s\" is "
			    "not node, socket, exclusive or core-complex\n", v);
			return (-1);
		}
		cfg->numa_mode = b;
		return (0);
	case O_SIGNALS:
		return (cli_signals(cfg, v));
	case O_SHUTDOWN_TIMEOUT:
		return (cli_seconds("--shutdown_timeout", v, &cfg->grace_ms));
	case O_WARM_SPARE:
		if ((cfg->warm_spare = cli_bool(v)) == -1 || *v == '\0') {
			fprintf(stderr, "rdzv-agent: --warm_spare: \"%s\" is "
			    "not 1 or 0\n", v);
			return (-1);
		}
		return (0);
	case O_VIRTUAL_LR:
		cfg->virtual_local_rank = 1;
		return (0);
	case O_ROUND_PORTS: {
		char	why[256];

		if (*v == '\0') {
			cfg->round_ports[0] = cfg->round_ports[1] = 0;
			return (0);
		}
		if (hostport_range(v, &cfg->round_ports[0],
		    &cfg->round_ports[1], why, sizeof why) != 0) {
			fprintf(stderr, "rdzv-agent: --round_ports %s\n", why);
			return (-1);
		}
		return (0);
	}
	}
	return (-1);
}

/* Reads PET_<OPTION> for every option. */
static int
cli_env(struct agent_config *cfg)
{
	const struct cli_opt	*o;
	char			 name[64];
	const char		*v;
	size_t			 i, j;
	int			 rv;

	for (i = 0; i < CLI_NOPTS; i++) {
		o = &cli_opts[i];
		if (o->id == O_HELP || o->id == O_VERSION)
			continue;
		snprintf(name, sizeof name, "PET_%s", o->name);
		for (j = 4; name[j] != '\0'; j++)
			name[j] = toupper((unsigned char)name[j]);
		if ((v = getenv(name)) == NULL)
			continue;
		if ((rv = cli_apply(cfg, o, v)) != 0)
			return (rv);
	}
	return (0);
}

static int
cli_count_list(const char *s)
{
	int	n = 0;

	if (*s == '\0')
		return (0);
	for (n = 1; *s != '\0'; s++)
		if (*s == ',')
			n++;
	return (n);
}

int
cli_count_gpus(char **list)
{
	char		 buf[8192], tmp[16], *l = NULL, *p;
	char *const	 smi[] = { "nvidia-smi", "-L", NULL };
	const char	*cvd;
	DIR		*d;
	struct dirent	*de;
	size_t		 len;
	int		 n = 0, rv, i;

	/* torch counts what CUDA_VISIBLE_DEVICES leaves visible. */
	if ((cvd = getenv("CUDA_VISIBLE_DEVICES")) != NULL) {
		if (*cvd == '\0' || strncmp(cvd, "-1", 2) == 0) {
			if (list != NULL)
				*list = cli_strdup("");
			return (0);
		}
		if (list != NULL)
			*list = cli_strdup(cvd);
		return (cli_count_list(cvd));
	}
	if ((d = opendir("/proc/driver/nvidia/gpus")) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (de->d_name[0] != '.')
				n++;
		closedir(d);
	}
	if (n == 0 && (d = opendir("/dev")) != NULL) {
		while ((de = readdir(d)) != NULL)
			if (strncmp(de->d_name, "nvidia", 6) == 0 &&
			    isdigit((unsigned char)de->d_name[6]))
				n++;
		closedir(d);
	}
	if (n == 0 && (rv = sup_capture(smi, buf, sizeof buf, 5000)) > 0) {
		for (p = buf; (p = strstr(p, "GPU ")) != NULL; p += 4)
			if (p == buf || p[-1] == '\n')
				n++;
	}
	if (list != NULL) {
		len = (size_t)n * 8 + 1;
		if ((l = calloc(1, len)) == NULL)
			fatal("calloc");
		for (i = 0; i < n; i++) {
			snprintf(tmp, sizeof tmp, "%s%d", i ? "," : "", i);
			strlcat(l, tmp, len);
		}
		*list = l;
	}
	return (n);
}

/*
 * --virtual_local_rank alone, as torch does it: local rank r gets entry r
 * of CUDA_VISIBLE_DEVICES, or device r when that is unset (no counting:
 * a CPU-only worker never looks).
 */
static int
cli_virtual_gpus(struct agent_config *cfg)
{
	const char	*cvd = getenv("CUDA_VISIBLE_DEVICES");
	char		 tmp[16];
	size_t		 len;
	int		 i;

	if (cvd != NULL) {
		if (cli_count_list(cvd) < cfg->nproc) {
			fprintf(stderr, "rdzv-agent: --virtual_local_rank: %d "
			    "workers, CUDA_VISIBLE_DEVICES=%s names fewer\n",
			    cfg->nproc, cvd);
			return (-1);
		}
		cli_setstr(&cfg->gpu_list, cvd);
		return (0);
	}
	len = (size_t)cfg->nproc * 8 + 1;
	free(cfg->gpu_list);
	if ((cfg->gpu_list = calloc(1, len)) == NULL)
		fatal("calloc");
	for (i = 0; i < cfg->nproc; i++) {
		snprintf(tmp, sizeof tmp, "%s%d", i ? "," : "", i);
		strlcat(cfg->gpu_list, tmp, len);
	}
	return (0);
}

static int
cli_nproc(struct agent_config *cfg)
{
	const char	*s = cfg->nproc_spec;
	long		 ncpu;
	int		 ngpu;

	if (strcmp(s, "cpu") == 0 || strcmp(s, "gpu") == 0 ||
	    strcmp(s, "auto") == 0) {
		ngpu = (strcmp(s, "cpu") == 0) ? 0 : cli_count_gpus(NULL);
		if (strcmp(s, "gpu") == 0 && ngpu == 0) {
			fprintf(stderr, "rdzv-agent: --nproc_per_node gpu: "
			    "no GPU found\n");
			return (-1);
		}
		if (ngpu > 0) {
			cfg->nproc = ngpu;
			return (0);
		}
		ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		cfg->nproc = ncpu > 0 ? (int)ncpu : 1;
		if (cfg->nproc > AGENT_NPROC_MAX)
			cfg->nproc = AGENT_NPROC_MAX;
		return (0);
	}
	return (cli_int("nproc_per_node", s, 1, AGENT_NPROC_MAX,
	    &cfg->nproc));
}

/*
 * Splits the endpoint into its host (for MASTER_ADDR) and port; one
 * without a port gets the default.
 */
static int
cli_endpoint(struct agent_config *cfg)
{
	char	host[RDZV_HOST_MAX], ep[RDZV_HOSTPORT_MAX], why[512];
	size_t	i, n = hostport_list_count(cfg->endpoint);
	int	port;

	/* A list: rdzvds of which one leads, each with its port. */
	for (i = 0; n > 1 && i < n; i++) {
		if (hostport_list_get(cfg->endpoint, i, ep, sizeof ep) != 0)
			strlcpy(why, "too long", sizeof why);
		else if (hostport_split(ep, 0, host, sizeof host, &port, why,
		    sizeof why) == 0)
			why[0] = '\0';
		if (why[0] != '\0') {
			fprintf(stderr, "rdzv-agent: --rdzv_endpoint %s: entry "
			    "%zu: %s (a list is HOST:PORT,HOST:PORT,...)\n",
			    cfg->endpoint, i + 1, why);
			return (-1);
		}
		if (cfg->standalone || cfg->rdzv_mode == AGENT_RDZV_C10D) {
			fprintf(stderr, "rdzv-agent: --rdzv_endpoint %s: a list "
			    "of rdzvds needs --rdzv_backend rdzv\n",
			    cfg->endpoint);
			return (-1);
		}
		if (i == 0) {
			cli_setstr(&cfg->ep_host, host);
			cfg->ep_port = port;
		}
	}
	if (n > 1)
		return (0);
	/* Port 0: any free port, for the agent that hosts it (torchrun's
	 * c10d host does the same; one node only: nobody else can know). */
	if (hostport_split(cfg->endpoint, HOSTPORT_PORT_OPT |
	    (cfg->standalone || cfg->rdzv_mode == AGENT_RDZV_C10D ?
	    HOSTPORT_PORT_ZERO : 0), host, sizeof host, &port, why,
	    sizeof why) != 0) {
		fprintf(stderr, "rdzv-agent: --rdzv_endpoint: %s\n", why);
		return (-1);
	}
	if (port == -1) {
		port = CLI_DEFAULT_PORT;
		if (hostport_join(ep, sizeof ep, host, port) != 0)
			fatalx("endpoint too long");	/* host fit above */
		cli_setstr(&cfg->endpoint, ep);
	}
	cli_setstr(&cfg->ep_host, host);
	cfg->ep_port = port;
	return (0);
}

/*
 * The python3 of the virtualenv this rdzv-agent was installed into (pip
 * install rdzv): the one beside it, when its directory's parent has a
 * pyvenv.cfg, as a virtualenv's torchrun runs its own python (the
 * spare's rdzv.spare is installed there).  NULL elsewhere.
 */
static char *
cli_venv_python(void)
{
	char		 self[PATH_MAX], exe[PATH_MAX];
	char		*slash;
	ssize_t		 n;

	if ((n = readlink("/proc/self/exe", self, sizeof self - 1)) <= 0)
		return (NULL);
	self[n] = '\0';
	if ((slash = strrchr(self, '/')) == NULL || slash == self)
		return (NULL);
	*slash = '\0';
	if ((size_t)snprintf(exe, sizeof exe, "%s/../pyvenv.cfg", self) >=
	    sizeof exe || access(exe, R_OK) != 0)
		return (NULL);
	if ((size_t)snprintf(exe, sizeof exe, "%s/python3", self) >=
	    sizeof exe || access(exe, X_OK) != 0)
		return (NULL);
	return (cli_strdup(exe));
}

/*
 * The user's python: $PYTHON_EXEC (torchrun's), $PYTHON, the python3 of
 * the virtualenv this program is in, else the first python3 on $PATH, as
 * found (a virtualenv's python3 is a link that must stay one).  NULL when
 * there is none.
 */
static char *
cli_python(void)
{
	const char	*v, *path, *p;
	char		 exe[PATH_MAX], *venv;
	size_t		 n;

	if ((v = getenv("PYTHON_EXEC")) != NULL && *v != '\0')
		return (cli_strdup(v));
	if ((v = getenv("PYTHON")) != NULL && *v != '\0')
		return (cli_strdup(v));
	if ((venv = cli_venv_python()) != NULL)
		return (venv);
	if ((path = getenv("PATH")) == NULL || *path == '\0')
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path; *p != '\0'; p += n + (p[n] == ':')) {
		n = strcspn(p, ":");
		if (n == 0)
			continue;	/* "" is the current directory: skip */
		if ((size_t)snprintf(exe, sizeof exe, "%.*s/python3", (int)n,
		    p) >= sizeof exe)
			continue;
		if (access(exe, X_OK) == 0)
			return (cli_strdup(exe));
	}
	return (NULL);
}

/* The worker command: torchrun runs PROGRAM with python -u unless told. */
static int
cli_command(struct agent_config *cfg, int argc, char **argv)
{
	char		*py = NULL;
	int		 n = 0, i, extra;

	if (argc < 1) {
		fprintf(stderr, "rdzv-agent: missing the program to run "
		    "(see --help)\n");
		return (-1);
	}
	if (cfg->no_python && cfg->module) {
		fprintf(stderr, "rdzv-agent: --no_python and -m cannot be "
		    "used together\n");
		return (-1);
	}
	if (!cfg->no_python && (py = cli_python()) == NULL) {
		fprintf(stderr, "rdzv-agent: no python3 on PATH: set "
		    "PYTHON_EXEC or PYTHON, or use --no_python\n");
		return (-1);
	}
	cfg->program = cli_strdup(argv[0]);
	extra = cfg->no_python ? 0 : (cfg->module ? 3 : 2);
	cfg->argv = calloc((size_t)argc + extra + 1, sizeof *cfg->argv);
	if (cfg->argv == NULL)
		fatal("calloc");
	if (!cfg->no_python) {
		cfg->argv[n++] = py;
		cfg->argv[n++] = cli_strdup("-u");
		if (cfg->module)
			cfg->argv[n++] = cli_strdup("-m");
	}
	for (i = 0; i < argc; i++)
		cfg->argv[n++] = cli_strdup(argv[i]);
	cfg->argc = n;
	return (0);
}

static void
cli_random_id(char *out, size_t outsz)
{
	uint8_t	b[16];
	size_t	i;

	arc4random_buf(b, sizeof b);
	b[6] = (b[6] & 0x0f) | 0x40;	/* a version 4 UUID, like torchrun's */
	b[8] = (b[8] & 0x3f) | 0x80;
	out[0] = '\0';
	for (i = 0; i < sizeof b && outsz > 3; i++) {
		snprintf(out, outsz, "%02x", b[i]);
		out += 2;
		outsz -= 2;
		if ((i == 3 || i == 5 || i == 7 || i == 9) && outsz > 1) {
			*out++ = '-';
			*out = '\0';
			outsz--;
		}
	}
}

/*
 * Resolves --tls_ca (else RDZV_TLS_CA) into an absolute path, because
 * workers get it too, and loads it once now so that a bad bundle is a
 * usage error naming the file, not a reconnect loop.  The in-process
 * rdzvd of --standalone speaks plaintext: no CA is used there.
 */
static int
cli_tls_ca(struct agent_config *cfg)
{
	SSL_CTX		*ctx;
	FILE		*f;
	const char	*v;
	char		 why[512], *abs = NULL;
	int		 given;

	if (cfg->tls_ca != NULL && *cfg->tls_ca == '\0') {
		free(cfg->tls_ca);
		cfg->tls_ca = NULL;
	}
	given = cfg->tls_ca != NULL;
	if (!given && (v = getenv(RDZV_TLS_CA_ENV)) != NULL && *v != '\0')
		cli_setstr(&cfg->tls_ca, v);
	if (cfg->tls_ca == NULL)
		return (0);
	if (cfg->standalone) {
		if (given)
			log_warnx("--standalone: the in-process rdzvd does not "
			    "use TLS; --tls_ca ignored");
		free(cfg->tls_ca);
		cfg->tls_ca = NULL;
		/* Nor may the workers, who would inherit it. */
		if (unsetenv(RDZV_TLS_CA_ENV) == -1)
			fatal("unsetenv");
		return (0);
	}
	if (strcmp(cfg->tls_ca, RDZV_TLS_CA_SYSTEM) != 0) {
		/* OpenSSL's own word for a missing file is "system lib". */
		if ((f = fopen(cfg->tls_ca, "r")) == NULL ||
		    (cfg->tls_ca[0] != '/' &&
		    (abs = realpath(cfg->tls_ca, NULL)) == NULL)) {
			fprintf(stderr, "rdzv-agent: --tls_ca %s: %s\n",
			    cfg->tls_ca, strerror(errno));
			if (f != NULL)
				fclose(f);
			return (-1);
		}
		fclose(f);
		if (cfg->tls_ca[0] != '/') {
			free(cfg->tls_ca);
			cfg->tls_ca = abs;
		}
	}
	if ((ctx = rdzv_tls_client_ctx(cfg->tls_ca, why, sizeof why)) == NULL) {
		fprintf(stderr, "rdzv-agent: --tls_ca: %s\n", why);
		return (-1);
	}
	SSL_CTX_free(ctx);
	return (0);
}

/* MASTER_ADDR:MASTER_PORT as an endpoint, brackets for IPv6. */
static void
cli_master_endpoint(struct agent_config *cfg)
{
	const char	*a = cfg->master_addr != NULL ? cfg->master_addr :
			    CLI_STATIC_ADDR;
	char		 ep[RDZV_HOSTPORT_MAX];

	/* One too long is left to cli_endpoint to refuse. */
	if (hostport_join(ep, sizeof ep, a, cfg->master_port) != 0)
		strlcpy(ep, a, sizeof ep);
	cli_setstr(&cfg->endpoint, ep);
	cli_endpoint_set = 1;
}

/*
 * Which rendezvous the command line means, read as torchrun reads it:
 * the static backend (torchrun's default) at --master_addr:--master_port
 * or the endpoint, group rank = --node_rank; c10d at the endpoint; and
 * rdzvd at the endpoint, which an endpoint without --rdzv_backend or
 * --node_rank has always meant here (rdzv).  One node with nothing named,
 * or --standalone, is an in-process rdzvd with a fresh id.
 */
static int
cli_rdzv_mode(struct agent_config *cfg)
{
	char	idbuf[40];
	int	is_static;

	if (!cfg->standalone && !cli_endpoint_set && !cli_master_set &&
	    cfg->nnodes_max == 1 && (!cli_backend_set ||
	    strcmp(cfg->rdzv_backend, "static") != 0))
		cfg->standalone = 1;
	if (cfg->standalone) {
		if (cli_nnodes_set && cfg->nnodes_max != 1)
			log_warnx("--standalone: --nnodes is 1");
		cfg->nnodes_min = cfg->nnodes_max = 1;
		if (!cli_id_set) {
			cli_random_id(idbuf, sizeof idbuf);
			cli_setstr(&cfg->rdzv_id, idbuf);
		}
		cli_setstr(&cfg->endpoint, "127.0.0.1:0");
		cli_setstr(&cfg->rdzv_backend, "c10d");
		cfg->rdzv_mode = AGENT_RDZV_RDZVD;
		return (0);
	}
	if (cli_backend_set)
		is_static = strcmp(cfg->rdzv_backend, "static") == 0;
	else
		is_static = cli_node_rank_set || !cli_endpoint_set;
	if (is_static) {
		cfg->rdzv_mode = AGENT_RDZV_STATIC;
		cli_setstr(&cfg->rdzv_backend, "static");
		if (cfg->nnodes_min != cfg->nnodes_max) {
			fprintf(stderr, "rdzv-agent: the static rendezvous "
			    "needs a fixed --nnodes N, as torchrun's; for "
			    "%d:%d use --rdzv_backend c10d or rdzvd\n",
			    cfg->nnodes_min, cfg->nnodes_max);
			return (-1);
		}
		if (cfg->node_rank >= cfg->nnodes_max) {
			fprintf(stderr, "rdzv-agent: --node_rank %d is not "
			    "below --nnodes %d\n", cfg->node_rank,
			    cfg->nnodes_max);
			return (-1);
		}
		if (!cli_endpoint_set)
			cli_master_endpoint(cfg);
		return (0);
	}
	if (strcmp(cfg->rdzv_backend, "c10d") == 0 && cli_backend_set)
		cfg->rdzv_mode = AGENT_RDZV_C10D;
	else {
		cfg->rdzv_mode = AGENT_RDZV_RDZVD;
		cli_setstr(&cfg->rdzv_backend, "rdzv");
	}
	if (!cli_endpoint_set && cli_master_set)
		cli_master_endpoint(cfg);
	if (!cli_endpoint_set) {
		fprintf(stderr, "rdzv-agent: --nnodes %d:%d needs "
		    "--rdzv_endpoint (or --standalone for one node)\n",
		    cfg->nnodes_min, cfg->nnodes_max);
		return (-1);
	}
	return (0);
}

int
cli_parse(struct agent_config *cfg, int argc, char **argv)
{
	struct option	 lopts[CLI_NOPTS * 2 + 1];
	char		 shorts[64], names[CLI_NOPTS][32];
	const char	*v;
	size_t		 i, j, n = 0, s = 0;
	int		 c, rv, ngpu;

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

	/* Both spellings of every long option; getopt stops at PROGRAM. */
	shorts[s++] = '+';
	for (i = 0; i < CLI_NOPTS; i++) {
		for (j = 0; j < 2; j++) {
			lopts[n].name = cli_opts[i].name;
			if (j == 1) {
				strlcpy(names[i], cli_opts[i].name,
				    sizeof names[i]);
				if (strchr(names[i], '_') == NULL)
					continue;
				for (c = 0; names[i][c] != '\0'; c++)
					if (names[i][c] == '_')
						names[i][c] = '-';
				lopts[n].name = names[i];
			}
			lopts[n].has_arg = cli_opts[i].flag ? no_argument :
			    required_argument;
			lopts[n].flag = NULL;
			lopts[n].val = cli_opts[i].id;
			n++;
		}
		if (cli_opts[i].shortc != 0) {
			shorts[s++] = cli_opts[i].shortc;
			if (!cli_opts[i].flag)
				shorts[s++] = ':';
		}
	}
	memset(&lopts[n], 0, sizeof lopts[n]);
	shorts[s] = '\0';

	/* Slurm, then PET_*, then the command line. */
	if ((v = getenv("SLURM_JOB_ID")) != NULL && *v != '\0') {
		const char	*step = getenv("SLURM_STEP_ID");
		const char	*rc = getenv("SLURM_RESTART_COUNT");

		/*
		 * Every srun step is a job of its own: a second step of the
		 * allocation must not JOIN the first one's closed job.  A
		 * requeued job keeps its id and numbers its steps from 0
		 * again: its restart count keeps it from joining the old
		 * run's job (closed, or with the old run's rounds and keys).
		 */
		if (step == NULL || *step == '\0')
			step = NULL;
		if (rc == NULL || *rc == '\0' || strcmp(rc, "0") == 0)
			rc = NULL;
		free(cfg->rdzv_id);
		if (asprintf(&cfg->rdzv_id, "%s%s%s%s%s", v,
		    step != NULL ? "." : "", step != NULL ? step : "",
		    rc != NULL ? ".r" : "", rc != NULL ? rc : "") == -1)
			fatal("asprintf");
	}
	if ((v = getenv("SLURM_NNODES")) != NULL && *v != '\0' &&
	    cli_nnodes(cfg, v) != 0)
		return (-1);
	/* torch's own variables, below PET_* like the rest. */
	if ((v = getenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) != NULL &&
	    *v != '\0' && cli_seconds("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", v,
	    &cfg->grace_ms) != 0)
		return (-1);
	if ((v = getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE")) != NULL)
		cli_setstr(&cfg->prefix_tmpl, v);
	if ((rv = cli_env(cfg)) != 0)
		return (rv);

	optind = 1;
	while ((c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
		if (c == '?' || c == ':') {
			fprintf(stderr, "rdzv-agent: see --help\n");
			return (-1);
		}
		for (i = 0; i < CLI_NOPTS; i++)
			if (cli_opts[i].id == c || cli_opts[i].shortc == c)
				break;
		if (i == CLI_NOPTS)
			return (-1);
		if ((rv = cli_apply(cfg, &cli_opts[i],
		    cli_opts[i].flag ? NULL : optarg)) != 0)
			return (rv);
	}
	if (cli_command(cfg, argc - optind, argv + optind) != 0)
		return (-1);

	if (cli_rdzv_mode(cfg) != 0)
		return (-1);
	if (cli_endpoint(cfg) != 0)
		return (-1);
	if (cli_nproc(cfg) != 0)
		return (-1);
	if (cfg->virtual_local_rank && cfg->gpus_per_worker == 0 &&
	    cli_virtual_gpus(cfg) != 0)
		return (-1);
	if (cfg->gpus_per_worker > 0) {
		ngpu = cli_count_gpus(&cfg->gpu_list);
		if ((long long)cfg->gpus_per_worker * cfg->nproc > ngpu) {
			fprintf(stderr, "rdzv-agent: --gpus_per_worker %d with "
			    "%d workers needs %d GPUs, %d found\n",
			    cfg->gpus_per_worker, cfg->nproc,
			    cfg->gpus_per_worker * cfg->nproc, ngpu);
			return (-1);
		}
	}
	if (cfg->token_file == NULL && getenv("RDZV_TOKEN_FILE") != NULL &&
	    *getenv("RDZV_TOKEN_FILE") != '\0')
		cli_setstr(&cfg->token_file, getenv("RDZV_TOKEN_FILE"));
	if (cfg->token_file != NULL && cfg->token_file[0] != '/') {
		/* Workers run elsewhere: hand them an absolute path. */
		char	*abs = realpath(cfg->token_file, NULL);

		if (abs == NULL) {
			fprintf(stderr, "rdzv-agent: --token_file %s: %s\n",
			    cfg->token_file, strerror(errno));
			return (-1);
		}
		free(cfg->token_file);
		cfg->token_file = abs;
	}
	if (cli_tls_ca(cfg) != 0)
		return (-1);
	cli_conf_resolve(cfg);
	if (cfg->heartbeat_ms <= 0)
		cfg->heartbeat_ms = cfg->lease_ms > 0 ? cfg->lease_ms / 4 :
		    1000;
	if (cfg->heartbeat_ms < 10)
		cfg->heartbeat_ms = 10;
	return (0);
}

static void
cli_ms(FILE *f, const char *name, int ms)
{
	if (ms < 0)
		fprintf(f, "%s=default\n", name);
	else
		fprintf(f, "%s=%d.%03d\n", name, ms / 1000, ms % 1000);
}

void
cli_print(const struct agent_config *cfg, FILE *f)
{
	int	i, n;

	fprintf(f, "nnodes=%d:%d\n", cfg->nnodes_min, cfg->nnodes_max);
	fprintf(f, "nproc_per_node=%d\n", cfg->nproc);
	fprintf(f, "rdzv_endpoint=%s\n", cfg->endpoint);
	fprintf(f, "master_addr=%s\n", cfg->ep_host);
	fprintf(f, "rdzv_id=%s\n", cfg->rdzv_id);
	fprintf(f, "rdzv_backend=%s\n", cfg->rdzv_backend);
	fprintf(f, "standalone=%d\n", cfg->standalone);
	fprintf(f, "node_rank=%d\nis_host=%d\n", cfg->node_rank, cfg->is_host);
	fprintf(f, "max_restarts=%d\n", cfg->max_restarts);
	fprintf(f, "role=%s\n", cfg->role);
	fprintf(f, "log_dir=%s\n", cfg->log_dir ? cfg->log_dir : "");
	fprintf(f, "redirects=%s\n", cfg->redirects ? cfg->redirects : "0");
	fprintf(f, "tee=%s\n", cfg->tee ? cfg->tee : "0");
	fprintf(f, "local_addr=%s\n", cfg->local_addr ? cfg->local_addr : "");
	fprintf(f, "token_file=%s\n", cfg->token_file ? cfg->token_file : "");
	fprintf(f, "tls_ca=%s\n", cfg->tls_ca ? cfg->tls_ca : "");
	fprintf(f, "no_python=%d\nmodule=%d\n", cfg->no_python, cfg->module);
	cli_ms(f, "grace", cfg->grace_ms);
	cli_ms(f, "progress_timeout", cfg->progress_timeout_ms);
	fprintf(f, "gpus_per_worker=%d\n", cfg->gpus_per_worker);
	fprintf(f, "virtual_local_rank=%d\n", cfg->virtual_local_rank);
	fprintf(f, "warm_spare=%d\n", cfg->warm_spare);
	if (cfg->round_ports[0] > 0)
		fprintf(f, "round_ports=%d-%d\n", cfg->round_ports[0],
		    cfg->round_ports[1]);
	else
		fprintf(f, "round_ports=\n");
	fprintf(f, "local_ranks_filter=%s\n", cfg->ranks_filter ?
	    cfg->ranks_filter : "");
	fprintf(f, "log_line_prefix_template=%s\n", cfg->prefix_tmpl ?
	    cfg->prefix_tmpl : "(default)");
	fprintf(f, "numa_binding=%s\n", cli_numa_modes[cfg->numa_mode]);
	fprintf(f, "forwarded_signals=");
	for (i = 1, n = 0; i < NSIG; i++)
		if (sigismember(&cfg->fwd_signals, i) == 1)
			fprintf(f, "%sSIG%s", n++ ? "," : "", sigabbrev_np(i) ?
			    sigabbrev_np(i) : "?");
	fprintf(f, "\n");
	cli_ms(f, "last_call_timeout", cfg->last_call_ms);
	cli_ms(f, "lease", cfg->lease_ms);
	cli_ms(f, "heartbeat", cfg->heartbeat_ms);
	cli_ms(f, "join_timeout", cfg->join_timeout_ms);
	cli_ms(f, "reconnect_timeout", cfg->reconnect_timeout_ms);
	cli_ms(f, "close_timeout", cfg->close_ms);
	fprintf(f, "command=");
	for (i = 0; i < cfg->argc; i++)
		fprintf(f, "%s%s", i ? " " : "", cfg->argv[i]);
	fprintf(f, "\n");
}
