/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.c: what rdzv-agent's options mean.
 *
 * cli_opts.c reads the options (its table: defaults, SLURM_*, PET_*, the
 * command line); this file resolves them, once all are read, into the
 * struct agent_config the agent runs by: which rendezvous a command line
 * means (torchrun's static and c10d backends, rdzvd, --standalone) and
 * its endpoint, torchrun's --rdzv_conf timeouts mapped onto ours,
 * counting GPUs for --nproc_per_node auto|gpu, the worker command the
 * way torchrun makes it (the user's python unless --no_python; -m), the
 * token file and TLS CA workers are handed; and --dry_run's print.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/stat.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
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

/* Whether the options named what bit b stands for (CLI_GIVEN_*). */
#define GIVEN(st, b)	(((st)->given & (b)) != 0)

/*
 * torchrun's keep-alive and heartbeat keys, where ours (lease,
 * heartbeat) are not given: a node silent for keep_alive_interval times
 * keep_alive_max_attempt (or heartbeat_timeout) is dropped.
 */
static void
cli_conf_resolve(struct cli_state *st)
{
	struct agent_config	*cfg = st->cfg;
	long long		 lease;

	if (!GIVEN(st, CLI_GIVEN_LEASE) && st->hb_timeout_ms > 0)
		cfg->lease_ms = st->hb_timeout_ms;
	else if (!GIVEN(st, CLI_GIVEN_LEASE) &&
	    (st->keep_alive_ms > 0 || st->keep_alive_n > 0)) {
		lease = (long long)(st->keep_alive_ms > 0 ? st->keep_alive_ms :
		    CLI_KEEP_ALIVE_MS) * (st->keep_alive_n > 0 ?
		    st->keep_alive_n : CLI_KEEP_ALIVE_N);
		cfg->lease_ms = lease > INT_MAX / 2 ? INT_MAX / 2 : (int)lease;
	}
	if (!GIVEN(st, CLI_GIVEN_JOIN) && st->timeout_ms > 0)
		cfg->join_timeout_ms = st->timeout_ms;
	if (!GIVEN(st, CLI_GIVEN_HEARTBEAT) && st->keep_alive_ms > 0)
		cfg->heartbeat_ms = st->keep_alive_ms;
	if (!GIVEN(st, CLI_GIVEN_RECONNECT) && st->read_ms > 0)
		cfg->reconnect_timeout_ms = st->read_ms;
	else if (!GIVEN(st, CLI_GIVEN_RECONNECT) &&
	    cfg->rdzv_mode != AGENT_RDZV_RDZVD)
		cfg->reconnect_timeout_ms = CLI_READ_TIMEOUT_MS;
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
cli_master_endpoint(struct cli_state *st)
{
	struct agent_config	*cfg = st->cfg;
	const char	*a = cfg->master_addr != NULL ? cfg->master_addr :
			    CLI_STATIC_ADDR;
	char		 ep[RDZV_HOSTPORT_MAX];

	/* One too long is left to cli_endpoint to refuse. */
	if (hostport_join(ep, sizeof ep, a, cfg->master_port) != 0)
		strlcpy(ep, a, sizeof ep);
	cli_setstr(&cfg->endpoint, ep);
	st->given |= CLI_GIVEN_ENDPOINT;
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
cli_rdzv_mode(struct cli_state *st)
{
	struct agent_config	*cfg = st->cfg;
	char			 idbuf[40];
	int			 is_static;

	if (!cfg->standalone && !GIVEN(st, CLI_GIVEN_ENDPOINT) &&
	    !GIVEN(st, CLI_GIVEN_MASTER) && cfg->nnodes_max == 1 &&
	    (!GIVEN(st, CLI_GIVEN_BACKEND) ||
	    strcmp(cfg->rdzv_backend, "static") != 0))
		cfg->standalone = 1;
	if (cfg->standalone) {
		if (GIVEN(st, CLI_GIVEN_NNODES) && cfg->nnodes_max != 1)
			log_warnx("--standalone: --nnodes is 1");
		cfg->nnodes_min = cfg->nnodes_max = 1;
		if (!GIVEN(st, CLI_GIVEN_ID)) {
			cli_random_id(idbuf, sizeof idbuf);
			cli_setstr(&cfg->rdzv_id, idbuf);
		}
		cli_setstr(&cfg->endpoint, "127.0.0.1:0");
		cli_setstr(&cfg->rdzv_backend, "c10d");
		cfg->rdzv_mode = AGENT_RDZV_RDZVD;
		return (0);
	}
	if (GIVEN(st, CLI_GIVEN_BACKEND))
		is_static = strcmp(cfg->rdzv_backend, "static") == 0;
	else
		is_static = GIVEN(st, CLI_GIVEN_NODE_RANK) ||
		    !GIVEN(st, CLI_GIVEN_ENDPOINT);
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
		if (!GIVEN(st, CLI_GIVEN_ENDPOINT))
			cli_master_endpoint(st);
		return (0);
	}
	if (strcmp(cfg->rdzv_backend, "c10d") == 0 &&
	    GIVEN(st, CLI_GIVEN_BACKEND))
		cfg->rdzv_mode = AGENT_RDZV_C10D;
	else {
		cfg->rdzv_mode = AGENT_RDZV_RDZVD;
		cli_setstr(&cfg->rdzv_backend, "rdzv");
	}
	if (!GIVEN(st, CLI_GIVEN_ENDPOINT) && GIVEN(st, CLI_GIVEN_MASTER))
		cli_master_endpoint(st);
	if (!GIVEN(st, CLI_GIVEN_ENDPOINT)) {
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
	struct cli_state	 st;
	int			 rv, first, ngpu;

	cli_opts_init(&st, cfg);
	if ((rv = cli_opts_env(&st)) != 0)
		return (rv);
	if ((rv = cli_opts_argv(&st, argc, argv, &first)) != 0)
		return (rv);
	if (cli_command(cfg, argc - first, argv + first) != 0)
		return (-1);

	if (cli_rdzv_mode(&st) != 0)
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
	cli_conf_resolve(&st);
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
