/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c: rdzvd's options.  One table serves both the command line
 * (getopt_long) and the configuration file (key = value lines whose keys
 * are the long option names, '-' or '_' alike), so the two never drift.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include "hostport.h"
#include "log.h"
#include "rdzvd.h"

#define RDZVD_DEFAULT_LISTEN	"[::]:29400"
#define RDZVD_DEFAULT_HTTP	"127.0.0.1:29401"
#define RDZVD_DEFAULT_RETENTION	604800	/* seconds: a week */
#define RDZVD_RETENTION_MAX	(100LL * 366 * 86400)
#define RDZVD_ETCD_SCHEME	"etcd://"
#define RDZVD_ETCD_PREFIX	"/rdzv/"
#define RDZVD_COMPACT_MAX	(30LL * 86400)	/* seconds */
/* A value must fit one etcd request (its default limit is 1.5 MiB). */
#define RDZVD_ETCD_VALUE_MAX	(1024 * 1024 - 4096)

enum opt_type {
	OT_STR, OT_SIZE, OT_UINT, OT_DURABILITY, OT_LEVEL, OT_FLAG, OT_TLS,
	OT_SECONDS,	/* int64_t ms, written in seconds; max in seconds */
	OT_PORTS	/* int[2], "LO-HI"; empty: { 0, 0 } */
};

struct opt {
	const char	*name;
	int		 shortopt;
	enum opt_type	 type;
	size_t		 offset;	/* into struct rdzvd_config */
	size_t		 max;		/* for OT_SIZE and OT_UINT */
	const char	*arg;		/* for usage */
	const char	*help;
};

#define OFF(f)	offsetof(struct rdzvd_config, f)
#define NOFIELD	((size_t)-1)	/* options that are not settings */

static const struct opt opts[] = {
	{ "foreground", 'd', OT_FLAG, OFF(foreground), 0, NULL,
	  "stay in the foreground and log to stderr (else syslog)" },
	{ "listen", 'l', OT_STR, OFF(listen), 0, "HOST:PORT",
	  "store listener, IPv4 or [IPv6] (default " RDZVD_DEFAULT_LISTEN
	  "; port 0 = any)" },
	{ "port-file", 0, OT_STR, OFF(port_file), 0, "FILE",
	  "write the listening port here once ready" },
	{ "round-ports", 0, OT_PORTS, OFF(round_ports), 0, "LO-HI",
	  "rounds' TCPStore ports come from LO-HI (default: any free "
	  "port)" },
	{ "http", 0, OT_STR, OFF(http), 0, "HOST:PORT|off",
	  "health and metrics listener (default " RDZVD_DEFAULT_HTTP ")" },
	{ "http-port-file", 0, OT_STR, OFF(http_port_file), 0, "FILE",
	  "write the HTTP port here once ready" },
	{ "db", 0, OT_STR, OFF(db), 0, "PATH",
	  "sqlite database (default " RDZV_STATEDIR "/rdzvd.db; :memory: allowed)" },
	{ "durability", 0, OT_DURABILITY, OFF(durability), 0,
	  "memory|relaxed|strict",
	  "when a write is acknowledged (default relaxed)" },
	{ "store", 0, OT_STR, OFF(store), 0, "etcd://HOST:PORT[,...]",
	  "keep the state in etcd, not --db; rdzvds on one etcd elect a "
	  "leader (values up to 1 MiB)" },
	{ "etcd-prefix", 0, OT_STR, OFF(etcd_prefix), 0, "PREFIX",
	  "etcd: keys start with PREFIX, one per rdzvd cluster "
	  "(default " RDZVD_ETCD_PREFIX ")" },
	{ "leader-ttl-ms", 0, OT_UINT, OFF(leader_ttl_ms), 3600000, "N",
	  "etcd: a silent leader is replaced after N ms (2000; etcd rounds "
	  "up to seconds)" },
	{ "etcd-compact-interval", 0, OT_SECONDS, OFF(etcd_compact_ms),
	  RDZVD_COMPACT_MAX, "SECONDS",
	  "etcd: compact all of etcd this often; 0 = never, leaving it to "
	  "etcd's own auto-compaction (0)" },
	{ "etcd-cacert", 0, OT_STR, OFF(etcd_cacert), 0, "FILE",
	  "etcd: talk https, trusting this PEM CA bundle" },
	{ "etcd-cert", 0, OT_STR, OFF(etcd_cert), 0, "FILE",
	  "etcd: PEM client certificate (with --etcd-key)" },
	{ "etcd-key", 0, OT_STR, OFF(etcd_key), 0, "FILE",
	  "etcd: the client certificate's PEM private key" },
	{ "etcd-user", 0, OT_STR, OFF(etcd_user), 0, "NAME",
	  "etcd: authenticate as NAME (with --etcd-password-file)" },
	{ "etcd-password-file", 0, OT_STR, OFF(etcd_password_file), 0, "FILE",
	  "etcd: NAME's password, first line of FILE" },
	{ "relaxed-window-ms", 0, OT_UINT, OFF(relaxed_window_ms), 60000, "N",
	  "relaxed mode: most ms of acknowledged writes a crash loses (50)" },
	{ "config", 'c', OT_STR, NOFIELD, 0, "FILE",
	  "read options from FILE (key = value; the command line wins)" },
	{ "log-file", 0, OT_STR, OFF(log_file), 0, "FILE",
	  "log to FILE; SIGHUP reopens it" },
	{ "log-level", 0, OT_LEVEL, OFF(log_level), 0, "warn|info|debug",
	  "how much to log (default info)" },
	{ "key-max", 0, OT_SIZE, OFF(limits.key_max), 1 << 20, "BYTES",
	  "largest key (default 8192)" },
	{ "value-max", 0, OT_SIZE, OFF(limits.value_max), 1 << 30, "BYTES",
	  "largest value (default 8388608)" },
	{ "keys-max", 0, OT_SIZE, OFF(limits.keys_max), 1 << 24, "N",
	  "most keys in one CHECK/WAIT/MULTI_* (default 131072)" },
	{ "max-connections", 0, OT_UINT, OFF(max_connections), 1 << 24, "N",
	  "connections beyond N are closed at once (default 65536)" },
	{ "output-max", 0, OT_SIZE, OFF(output_max), SIZE_MAX / 4, "BYTES",
	  "queued replies before a connection is read no more (16 MiB)" },
	{ "memory-budget", 0, OT_SIZE, OFF(memory_budget), SIZE_MAX / 4,
	  "BYTES", "all partially received requests together (default 1 GiB)" },
	{ "request-timeout-ms", 0, OT_UINT, OFF(request_timeout_ms), 86400000,
	  "N", "a started request must arrive whole within N ms (30000)" },
	{ "last-call-ms", 0, OT_UINT, OFF(last_call_ms), 3600000, "N",
	  "rendezvous: wait after the last join above min nodes (1000)" },
	{ "lease-ms", 0, OT_UINT, OFF(lease_ms), 3600000, "N",
	  "rendezvous: a node silent this long is dropped (5000)" },
	{ "job-retention", 0, OT_SECONDS, OFF(job_retention_ms),
	  RDZVD_RETENTION_MAX, "SECONDS",
	  "forget a job this long after it closed; 0 = never (604800)" },
	{ "history-interval-ms", 0, OT_UINT, OFF(history_interval_ms),
	  3600000, "N", "sample each job's progress every N ms (10000)" },
	{ "token-file", 0, OT_STR, OFF(token_file), 0, "FILE",
	  "require this shared secret from native clients" },
	{ "tcpstore-allow", 0, OT_STR, OFF(tcpstore_allow), 0, "CIDR,...",
	  "with a token: TCPStore clients allowed from these networks" },
	{ "tls-cert", 0, OT_STR, OFF(tls_cert), 0, "FILE",
	  "TLS on the store port: PEM certificate chain (with --tls-key)" },
	{ "tls-key", 0, OT_STR, OFF(tls_key), 0, "FILE",
	  "the certificate's PEM private key" },
	{ "tls", 0, OT_TLS, OFF(tls_mode), 0, "required|optional",
	  "plaintext native clients refused or served (default required)" },
	{ "http-token-file", 0, OT_STR, OFF(http_token_file), 0, "FILE",
	  "the status page and /api/ need this viewer secret (never the "
	  "native one)" },
	{ "http-tls", 0, OT_STR, OFF(http_tls), 0, "on|off",
	  "HTTPS on --http with --tls-cert and --tls-key (default off)" },
	{ "help", 'h', OT_FLAG, NOFIELD, 0, NULL, "show this help" },
	{ "version", 'V', OT_FLAG, NOFIELD, 0, NULL, "show the version" },
};
#define NOPTS	(sizeof opts / sizeof opts[0])

static void
usage(FILE *f)
{
	size_t	i;
	char	left[64];

	fprintf(f, "usage: rdzvd [options]\n\n"
	    "The rdzv rendezvous daemon: a durable key-value store and rendezvous\n"
	    "server for distributed training.  It speaks rdzv's native protocol\n"
	    "and PyTorch's TCPStore protocol (1.13 and 2.x) on one port.\n\n");
	for (i = 0; i < NOPTS; i++) {
		if (opts[i].shortopt != 0)
			snprintf(left, sizeof left, "-%c, --%s%s%s",
			    opts[i].shortopt, opts[i].name,
			    opts[i].arg ? " " : "", opts[i].arg ? opts[i].arg : "");
		else
			snprintf(left, sizeof left, "    --%s%s%s", opts[i].name,
			    opts[i].arg ? " " : "", opts[i].arg ? opts[i].arg : "");
		fprintf(f, "  %-36s %s\n", left, opts[i].help);
	}
	fprintf(f, "\nSignals: SIGTERM or SIGINT drain and exit 0; SIGHUP reopens "
	    "the log file\nand reloads the TLS certificate and key.\n"
	    "See rdzvd(8) and " RDZV_SYSCONFDIR "/rdzvd.conf (every key "
	    "documented).\n");
}

/* Parses a byte size with an optional K, M or G (binary) suffix. */
static int
parse_size(const char *s, size_t max, size_t *out)
{
	char			*end;
	unsigned long long	 v, mul = 1;

	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -1;
	if (*end != '\0') {
		switch (toupper((unsigned char)*end)) {
		case 'K': mul = 1ULL << 10; break;
		case 'M': mul = 1ULL << 20; break;
		case 'G': mul = 1ULL << 30; break;
		default: return -1;
		}
		end++;
		if (toupper((unsigned char)*end) == 'I')
			end++;
		if (toupper((unsigned char)*end) == 'B')
			end++;
		if (*end != '\0')
			return -1;
	}
	if (v > max / mul)
		return -1;
	*out = (size_t)(v * mul);
	return 0;
}

/*
 * Parses seconds, with up to three decimals and an optional unit s, m, h
 * or d ("604800", "0.5", "7d"), into ms, at most max seconds.
 */
static int
parse_seconds(const char *s, long long max, int64_t *out)
{
	long long	 v = 0, frac = 0, mul = 1000;
	int		 digits = 0, fd = 0;

	for (; isdigit((unsigned char)*s); s++, digits++) {
		if (v > max)
			return -1;
		v = v * 10 + (*s - '0');
	}
	if (*s == '.') {
		for (s++; isdigit((unsigned char)*s); s++, fd++) {
			if (fd >= 3)
				return -1;	/* finer than a ms */
			frac = frac * 10 + (*s - '0');
		}
		if (fd == 0)
			return -1;
		for (; fd < 3; fd++)
			frac *= 10;
	}
	if (digits == 0)
		return -1;
	switch (*s) {
	case '\0': case 's': break;
	case 'm': mul = 60 * 1000LL; break;
	case 'h': mul = 3600 * 1000LL; break;
	case 'd': mul = 86400 * 1000LL; break;
	default: return -1;
	}
	if (*s != '\0' && s[1] != '\0')
		return -1;
	if (v > max / (mul / 1000) || (v == max / (mul / 1000) && frac > 0))
		return -1;
	*out = v * mul + frac * (mul / 1000);
	return 0;
}

/* The words an option of a few values takes, and the value of each. */
struct opt_word {
	const char	*word;
	int		 value;
};

static const struct opt_word opt_levels[] = {
	{ "warn", LOG_LVL_WARN }, { "info", LOG_LVL_INFO },
	{ "debug", LOG_LVL_DEBUG }, { NULL, 0 }
};
static const struct opt_word opt_tls_modes[] = {
	{ "required", RDZVD_TLS_REQUIRED }, { "optional", RDZVD_TLS_OPTIONAL },
	{ NULL, 0 }
};
static const struct opt_word opt_flags[] = {
	{ "yes", 1 }, { "true", 1 }, { "1", 1 },
	{ "no", 0 }, { "false", 0 }, { "0", 0 }, { NULL, 0 }
};

/*
 * Prints why val is no value of o: "rdzvd: [WHERE: ]--NAME: 'VAL' is "
 * (a flag's name without the dashes: it comes from a file) and then fmt.
 * Returns -1.
 */
static int __attribute__((format(printf, 4, 5)))
opt_bad(const struct opt *o, const char *val, const char *where,
    const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "rdzvd: %s%s%s%s: '%s' is ", where ? where : "",
	    where ? ": " : "", o->type == OT_FLAG ? "" : "--", o->name, val);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -1;
}

/* The value of word val in w (NULL-terminated); -1 when it is none. */
static int
opt_word(const struct opt_word *w, const char *val, int *out)
{
	for (; w->word != NULL; w++)
		if (strcmp(w->word, val) == 0) {
			*out = w->value;
			return 0;
		}
	return -1;
}

/* Applies one option's value; prints the cause and returns -1 if bad. */
static int
opt_apply(struct rdzvd_config *cfg, const struct opt *o, const char *val,
    const char *where)
{
	char		*base = (char *)cfg;
	const char	*errstr;
	size_t		 sz;
	long long	 n;
	int		 d;

	switch (o->type) {
	case OT_STR: {
		char	**dst = (char **)(base + o->offset);

		free(*dst);
		if (strcmp(o->name, "http") == 0 && strcmp(val, "off") == 0) {
			*dst = NULL;
			return 0;
		}
		if ((*dst = strdup(val)) == NULL)
			fatal("strdup");
		return 0;
	}
	case OT_SIZE:
		if (parse_size(val, o->max, &sz) != 0 || sz == 0)
			return opt_bad(o, val, where, "not a size from 1 to %zu "
			    "(a number, optionally with K, M or G)", o->max);
		*(size_t *)(base + o->offset) = sz;
		return 0;
	case OT_UINT:
		n = strtonum(val, 0, (long long)o->max, &errstr);
		if (errstr != NULL)
			return opt_bad(o, val, where, "%s (0 to %zu)", errstr,
			    o->max);
		*(unsigned *)(base + o->offset) = (unsigned)n;
		return 0;
	case OT_SECONDS:
		if (parse_seconds(val, (long long)o->max,
		    (int64_t *)(base + o->offset)) != 0)
			return opt_bad(o, val, where, "not a number of seconds "
			    "from 0 to %zu (up to 3 decimals, optionally with "
			    "s, m, h or d)", o->max);
		return 0;
	case OT_PORTS: {
		int	*r = (int *)(base + o->offset);
		char	 why[256];

		if (*val == '\0') {
			r[0] = r[1] = 0;
			return 0;
		}
		if (hostport_range(val, &r[0], &r[1], why, sizeof why) != 0) {
			fprintf(stderr, "rdzvd: %s%s--%s %s\n", where ? where :
			    "", where ? ": " : "", o->name, why);
			return -1;
		}
		return 0;
	}
	case OT_DURABILITY:
		if ((d = store_durability_parse(val)) < 0)
			return opt_bad(o, val, where,
			    "not one of memory, relaxed, strict");
		*(enum store_durability *)(base + o->offset) = d;
		return 0;
	case OT_LEVEL:
		if (opt_word(opt_levels, val, &d) != 0)
			return opt_bad(o, val, where,
			    "not one of warn, info, debug");
		*(int *)(base + o->offset) = d;
		return 0;
	case OT_TLS:
		if (opt_word(opt_tls_modes, val, &d) != 0)
			return opt_bad(o, val, where,
			    "not one of required, optional");
		*(enum rdzvd_tls_mode *)(base + o->offset) = d;
		return 0;
	case OT_FLAG:
		if (opt_word(opt_flags, val, &d) != 0)
			return opt_bad(o, val, where, "not yes or no");
		*(int *)(base + o->offset) = d;
		return 0;
	}
	return -1;
}

/* Finds an option by name, accepting '_' for '-'. */
static const struct opt *
opt_find(const char *name)
{
	char	norm[64];
	size_t	i;

	if (strlcpy(norm, name, sizeof norm) >= sizeof norm)
		return NULL;
	for (i = 0; norm[i] != '\0'; i++)
		if (norm[i] == '_')
			norm[i] = '-';
	for (i = 0; i < NOPTS; i++)
		if (strcmp(opts[i].name, norm) == 0)
			return &opts[i];
	return NULL;
}

static char *
trim(char *s)
{
	char	*e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* Reads key = value lines from path. */
static int
config_load_file(struct rdzvd_config *cfg, const char *path)
{
	FILE			*f;
	char			*line = NULL, *key, *val, *eq, where[PATH_MAX + 32];
	size_t			 cap = 0;
	unsigned		 lineno = 0;
	const struct opt	*o;
	int			 rc = 0;

	if ((f = fopen(path, "r")) == NULL) {
		fprintf(stderr, "rdzvd: cannot read config file %s: %s\n", path,
		    strerror(errno));
		return -1;
	}
	while (getline(&line, &cap, f) != -1) {
		lineno++;
		key = trim(line);
		if (*key == '\0' || *key == '#')
			continue;
		snprintf(where, sizeof where, "%s:%u", path, lineno);
		if ((eq = strchr(key, '=')) == NULL) {
			fprintf(stderr, "rdzvd: %s: expected 'key = value'\n", where);
			rc = -1;
			break;
		}
		*eq = '\0';
		key = trim(key);
		val = trim(eq + 1);
		if ((o = opt_find(key)) == NULL || o->offset == NOFIELD) {
			fprintf(stderr, "rdzvd: %s: unknown key '%s' (see rdzvd "
			    "--help; keys are the long option names)\n", where, key);
			rc = -1;
			break;
		}
		if (opt_apply(cfg, o, val, where) != 0) {
			rc = -1;
			break;
		}
	}
	free(line);
	fclose(f);
	return rc;
}

void
config_defaults(struct rdzvd_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	if ((cfg->listen = strdup(RDZVD_DEFAULT_LISTEN)) == NULL ||
	    (cfg->http = strdup(RDZVD_DEFAULT_HTTP)) == NULL ||
	    (cfg->db = strdup(RDZV_STATEDIR "/rdzvd.db")) == NULL)
		fatal("strdup");
	cfg->durability = STORE_RELAXED;
	cfg->relaxed_window_ms = 50;
	cfg->log_level = LOG_LVL_INFO;
	wire_limits_default(&cfg->limits);
	cfg->max_connections = 65536;
	cfg->output_max = 16 << 20;
	cfg->memory_budget = 1 << 30;
	cfg->request_timeout_ms = 30000;
	cfg->last_call_ms = 1000;
	cfg->lease_ms = 5000;
	cfg->job_retention_ms = RDZVD_DEFAULT_RETENTION * 1000LL;
	cfg->history_interval_ms = 10000;
	if ((cfg->etcd_prefix = strdup(RDZVD_ETCD_PREFIX)) == NULL)
		fatal("strdup");
	cfg->leader_ttl_ms = 2000;
}

/*
 * The TLS options only make sense together; an empty value (a config
 * file's "tls-cert =") means not set.  The files themselves are read
 * later, by server_tls_init().
 */
static int
config_check_tls(struct rdzvd_config *cfg)
{
	if (cfg->tls_cert != NULL && cfg->tls_cert[0] == '\0') {
		free(cfg->tls_cert);
		cfg->tls_cert = NULL;
	}
	if (cfg->tls_key != NULL && cfg->tls_key[0] == '\0') {
		free(cfg->tls_key);
		cfg->tls_key = NULL;
	}
	if (cfg->tls_cert != NULL && cfg->tls_key == NULL) {
		fprintf(stderr, "rdzvd: --tls-cert %s needs its private key: "
		    "add --tls-key FILE\n", cfg->tls_cert);
		return -1;
	}
	if (cfg->tls_key != NULL && cfg->tls_cert == NULL) {
		fprintf(stderr, "rdzvd: --tls-key %s needs the certificate it "
		    "belongs to: add --tls-cert FILE\n", cfg->tls_key);
		return -1;
	}
	if (cfg->http_tls != NULL && strcmp(cfg->http_tls, "on") != 0 &&
	    strcmp(cfg->http_tls, "off") != 0 && cfg->http_tls[0] != '\0') {
		fprintf(stderr, "rdzvd: --http-tls: '%s' is not one of on, "
		    "off\n", cfg->http_tls);
		return -1;
	}
	if (cfg->http_tls != NULL && strcmp(cfg->http_tls, "on") == 0 &&
	    cfg->tls_cert == NULL) {
		fprintf(stderr, "rdzvd: --http-tls on needs a certificate: add "
		    "--tls-cert FILE and --tls-key FILE\n");
		return -1;
	}
	if (cfg->http_token_file != NULL && cfg->http_token_file[0] == '\0') {
		free(cfg->http_token_file);
		cfg->http_token_file = NULL;
	}
	if (cfg->tls_mode != RDZVD_TLS_UNSET && cfg->tls_cert == NULL) {
		fprintf(stderr, "rdzvd: --tls %s needs a certificate: add "
		    "--tls-cert FILE and --tls-key FILE\n",
		    cfg->tls_mode == RDZVD_TLS_REQUIRED ? "required" :
		    "optional");
		return -1;
	}
	return 0;
}

/*
 * Checks --store's etcd members, "HOST:PORT,..." (at least one); 0, or -1
 * with a sentence naming the bad one in why.  Here, not in etcd.c, so
 * that what shares config.c (rdzv-agent's embedded rdzvd) links no
 * libcurl.
 */
static int
config_check_etcd(const char *endpoints, char *why, size_t whysz)
{
	char		 buf[RDZV_HOSTPORT_MAX * ETCD_ENDPOINTS_MAX];
	char		 host[RDZV_HOST_MAX], *s, *tok;
	size_t		 n = 0;
	int		 port;

	if (strlcpy(buf, endpoints, sizeof buf) >= sizeof buf) {
		snprintf(why, whysz, "etcd endpoint list is too long");
		return -1;
	}
	for (s = buf; (tok = strsep(&s, ",")) != NULL; n++) {
		if (n == ETCD_ENDPOINTS_MAX) {
			snprintf(why, whysz, "more than %d etcd endpoints",
			    ETCD_ENDPOINTS_MAX);
			return -1;
		}
		if (hostport_split(tok, 0, host, sizeof host, &port, why,
		    whysz) != 0)
			return -1;
	}
	return 0;
}

/*
 * --store names an etcd cluster (or nothing: sqlite at --db); the etcd
 * options come in pairs.  A value must fit one etcd request, so
 * --value-max is lowered to it.
 */
static int
config_check_store(struct rdzvd_config *cfg)
{
	char	why[256];

	if (cfg->store != NULL && cfg->store[0] == '\0') {
		free(cfg->store);
		cfg->store = NULL;
	}
	if (cfg->store == NULL)
		return 0;
	if (strncmp(cfg->store, RDZVD_ETCD_SCHEME,
	    strlen(RDZVD_ETCD_SCHEME)) != 0) {
		fprintf(stderr, "rdzvd: --store %s: expected "
		    RDZVD_ETCD_SCHEME "HOST:PORT[,HOST:PORT...] (leave --store "
		    "out to keep the state in sqlite at --db)\n", cfg->store);
		return -1;
	}
	if (config_check_etcd(cfg->store + strlen(RDZVD_ETCD_SCHEME), why,
	    sizeof why) != 0) {
		fprintf(stderr, "rdzvd: --store: %s\n", why);
		return -1;
	}
	if (cfg->durability == STORE_MEMORY) {
		fprintf(stderr, "rdzvd: --store %s keeps nothing with "
		    "--durability memory: choose relaxed or strict\n",
		    cfg->store);
		return -1;
	}
	if ((cfg->etcd_cert != NULL) != (cfg->etcd_key != NULL)) {
		fprintf(stderr, "rdzvd: --etcd-cert and --etcd-key go "
		    "together: give both or neither\n");
		return -1;
	}
	if ((cfg->etcd_user != NULL) != (cfg->etcd_password_file != NULL)) {
		fprintf(stderr, "rdzvd: --etcd-user and --etcd-password-file "
		    "go together: give both or neither\n");
		return -1;
	}
	if (cfg->leader_ttl_ms < 1000) {
		fprintf(stderr, "rdzvd: --leader-ttl-ms %u: etcd leases last "
		    "whole seconds; give 1000 or more\n", cfg->leader_ttl_ms);
		return -1;
	}
	if (cfg->limits.value_max > RDZVD_ETCD_VALUE_MAX)
		cfg->limits.value_max = RDZVD_ETCD_VALUE_MAX;
	return 0;
}

int
config_parse(struct rdzvd_config *cfg, int argc, char **argv)
{
	struct option	 lopts[NOPTS + 1];
	char		 shorts[2 * NOPTS + 1];
	const char	*config_file = NULL;
	size_t		 i, ns = 0;
	int		 ch, idx;

	config_defaults(cfg);
	for (i = 0; i < NOPTS; i++) {
		lopts[i].name = opts[i].name;
		lopts[i].has_arg = opts[i].type == OT_FLAG ? no_argument :
		    required_argument;
		lopts[i].flag = NULL;
		lopts[i].val = 256 + (int)i;
		if (opts[i].shortopt != 0) {
			shorts[ns++] = (char)opts[i].shortopt;
			if (opts[i].type != OT_FLAG)
				shorts[ns++] = ':';
		}
	}
	memset(&lopts[NOPTS], 0, sizeof lopts[NOPTS]);
	shorts[ns] = '\0';

	/* First pass: find --config, --help and --version. */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, shorts, lopts, &idx)) != -1) {
		const struct opt *o = NULL;

		if (ch >= 256)
			o = &opts[ch - 256];
		else
			for (i = 0; i < NOPTS; i++)
				if (opts[i].shortopt == ch)
					o = &opts[i];
		if (o == NULL)
			continue;
		if (strcmp(o->name, "help") == 0) {
			usage(stdout);
			exit(0);
		}
		if (strcmp(o->name, "version") == 0) {
			printf("rdzvd %s\n", PACKAGE_VERSION);
			exit(0);
		}
		if (strcmp(o->name, "config") == 0)
			config_file = optarg;
	}
	if (config_file != NULL && config_load_file(cfg, config_file) != 0)
		return -1;

	/* Second pass: the command line overrides the file. */
	optind = 0;
	opterr = 1;
	while ((ch = getopt_long(argc, argv, shorts, lopts, &idx)) != -1) {
		const struct opt *o = NULL;

		if (ch == '?' || ch == ':') {
			fprintf(stderr, "Try 'rdzvd --help'.\n");
			return -1;
		}
		if (ch >= 256)
			o = &opts[ch - 256];
		else
			for (i = 0; i < NOPTS; i++)
				if (opts[i].shortopt == ch)
					o = &opts[i];
		if (o == NULL || o->offset == NOFIELD)
			continue;
		if (opt_apply(cfg, o, o->type == OT_FLAG ? "yes" : optarg,
		    NULL) != 0)
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, "rdzvd: unexpected argument '%s'; try 'rdzvd "
		    "--help'\n", argv[optind]);
		return -1;
	}
	if (config_check_tls(cfg) != 0)
		return -1;
	return config_check_store(cfg);
}

void
config_free(struct rdzvd_config *cfg)
{
	free(cfg->listen);
	free(cfg->port_file);
	free(cfg->http);
	free(cfg->http_port_file);
	free(cfg->db);
	free(cfg->log_file);
	free(cfg->token_file);
	free(cfg->tcpstore_allow);
	free(cfg->http_token_file);
	free(cfg->http_tls);
	free(cfg->tls_cert);
	free(cfg->tls_key);
	free(cfg->store);
	free(cfg->etcd_prefix);
	free(cfg->etcd_cacert);
	free(cfg->etcd_cert);
	free(cfg->etcd_key);
	free(cfg->etcd_user);
	free(cfg->etcd_password_file);
}
