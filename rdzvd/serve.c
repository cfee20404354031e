/* SPDX-License-Identifier: Apache-2.0 */
/*
 * serve.c: bringing the whole daemon up on an event base and down again:
 * the kv core, its store, the rendezvous, the listeners.  Shared by
 * rdzvd's main() and by the in-process rdzvd of `rdzv-agent --standalone`
 * (embed.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "embed.h"
#include "log.h"
#include "rdzvd.h"

static struct rdzvd_config	embed_cfg;
static int			embed_round_ports[2];
/* With --store etcd, while standing by. */
static struct store_etcd_conf	etcd_conf;
static char			*etcd_info;
static void			(*leading_cb)(int);

void
rdzvd_store_stats(struct store_stats *st)
{
	if (server.store != NULL)
		store_get_stats(server.store, st);
	else
		memset(st, 0, sizeof *st);
}

void
rdzvd_etcd_status(struct store_etcd_status *es)
{
	if (server.stores != NULL)
		server.stores->etcd_status(es);
	else
		memset(es, 0, sizeof *es);
}

/*
 * What a standby shows of the leader: where it listens.  --listen as
 * given (give a fixed port with --store); the HTTP address with the port
 * it got.  NULL when out of memory.
 */
static char *
serve_leader_info(struct rdzvd_config *cfg, int http_port)
{
	char	 host[256], http[300];
	char	*info;
	json_t	*j;
	int	 n;

	if (gethostname(host, sizeof host) != 0)
		strlcpy(host, "?", sizeof host);
	host[sizeof host - 1] = '\0';
	http[0] = '\0';
	if (cfg->http != NULL) {
		n = (int)(strrchr(cfg->http, ':') != NULL ?
		    strrchr(cfg->http, ':') - cfg->http : (int)strlen(cfg->http));
		snprintf(http, sizeof http, "%.*s:%d", n, cfg->http, http_port);
	}
	j = json_pack("{s:s, s:s, s:s?, s:i}", "host", host, "listen",
	    cfg->listen, "http", cfg->http != NULL ? http : NULL,
	    "pid", (int)getpid());
	info = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(j);
	return info;
}

/* After the store is open: the listeners, the rounds, the history. */
static int
serve_open(int *port)
{
	if (server_listen(port) != 0)
		return -1;
	/* After the listener: rounds reopen their ports beside it. */
	if (round_init(server.cfg->last_call_ms, server.cfg->lease_ms) != 0) {
		log_warnx("rendezvous: cannot start");
		return -1;
	}
	if (progwatch_init() != 0) {
		log_warnx("history and stragglers: cannot start");
		return -1;
	}
	return 0;
}

/* This rdzvd leads (se) or cannot (NULL): loads the state and serves. */
static void
serve_leading(struct store_etcd *se, void *arg)
{
	struct rdzvd_config	*cfg = server.cfg;
	int			 port;

	free(etcd_info);
	etcd_info = NULL;
	if (se == NULL || (server.store = server.stores->etcd_serve(se,
	    cfg->durability, cfg->relaxed_window_ms, server.base, server.kv,
	    server_commit_cb, NULL)) == NULL) {
		log_warnx("cannot use --store %s (see above)", cfg->store);
		goto fail;
	}
	kv_set_journal(server.kv, store_journal, server.store);
	if (serve_open(&port) != 0)
		goto fail;
	server.standby = 0;
	if (leading_cb != NULL)
		leading_cb(port);
	return;
fail:
	server.failed = 1;
	event_base_loopexit(server.base, NULL);
}

/*
 * With --store etcd: serves HTTP at once (a standby's /metrics, status
 * page and readiness say who leads) and stands by until this rdzvd
 * leads; serve_leading() opens the rest then.
 */
static int
serve_stand_by(struct rdzvd_config *cfg, int *http_port)
{
	server.standby = 1;
	if (http_start(http_port) != 0)
		return -1;
	if ((etcd_info = serve_leader_info(cfg, *http_port)) == NULL)
		return -1;
	memset(&etcd_conf, 0, sizeof etcd_conf);
	etcd_conf.etcd.endpoints = cfg->store + strlen("etcd://");
	etcd_conf.etcd.cacert = cfg->etcd_cacert;
	etcd_conf.etcd.cert = cfg->etcd_cert;
	etcd_conf.etcd.key = cfg->etcd_key;
	etcd_conf.etcd.user = cfg->etcd_user;
	etcd_conf.etcd.password_file = cfg->etcd_password_file;
	etcd_conf.prefix = cfg->etcd_prefix;
	etcd_conf.leader_ttl_ms = cfg->leader_ttl_ms;
	etcd_conf.compact_ms = cfg->etcd_compact_ms;
	etcd_conf.leader_info = etcd_info;
	return server.stores->etcd_stand_by(&etcd_conf, cfg->durability,
	    server.base, serve_leading, NULL);
}

int
rdzvd_serve_start(struct event_base *base, struct rdzvd_config *cfg,
    const struct rdzvd_stores *stores, int *port, int *http_port,
    void (*leading)(int port))
{
	memset(&server, 0, sizeof server);
	server.stores = stores;
	server.started_ms = mono_ms();
	TAILQ_INIT(&server.conns);
	TAILQ_INIT(&server.held);
	server.base = base;
	server.cfg = cfg;
	leading_cb = leading;
	*port = 0;
	if ((server.kv = kv_new()) == NULL) {
		log_warnx("out of memory");
		return -1;
	}
	if (server_auth_init() != 0 || server_tls_init() != 0)
		return -1;
	if (stores == NULL && (cfg->store != NULL ||
	    cfg->durability != STORE_MEMORY)) {
		log_warnx("the embedded rdzvd keeps its state in memory "
		    "alone: %s is rdzvd's (start rdzvd and give its "
		    "address instead)", cfg->store != NULL ?
		    "--store etcd://" : "a database");
		return -1;
	}
	if (cfg->store != NULL)
		return serve_stand_by(cfg, http_port);
	if (cfg->durability != STORE_MEMORY) {
		server.store = stores->open(cfg->db, cfg->durability,
		    cfg->relaxed_window_ms, base, server.kv, server_commit_cb,
		    NULL);
		if (server.store == NULL) {
			log_warnx("cannot use database %s (see above); choose "
			    "another with --db, or --durability memory",
			    cfg->db);
			return -1;
		}
		kv_set_journal(server.kv, store_journal, server.store);
	}
	if (serve_open(port) != 0)
		return -1;
	if (http_start(http_port) != 0)
		return -1;
	return 0;
}

void
rdzvd_serve_stop(void)
{
	if (server.stores != NULL)
		server.stores->etcd_stand_by_stop();
	free(etcd_info);
	etcd_info = NULL;
	server_shutdown();
	http_stop();
	progwatch_fini();
	round_fini();
	if (server.store != NULL) {
		/* Commits whatever is pending. */
		store_close(server.store);
		server.store = NULL;
	}
	kv_free(server.kv);
	server.kv = NULL;
	if (server.token != NULL) {
		explicit_bzero(server.token, server.tokenlen);
		free(server.token);
		server.token = NULL;
	}
	free(server.tcps_allow);
	server.tcps_allow = NULL;
	server_tls_fini();
}

void
rdzvd_embed_round_ports(int lo, int hi)
{
	embed_round_ports[0] = lo;
	embed_round_ports[1] = hi;
}

int
rdzvd_embed_start(struct event_base *base, const char *listen, int *port)
{
	int	http_port;

	config_defaults(&embed_cfg);
	embed_cfg.round_ports[0] = embed_round_ports[0];
	embed_cfg.round_ports[1] = embed_round_ports[1];
	free(embed_cfg.listen);
	free(embed_cfg.http);
	embed_cfg.http = NULL;
	embed_cfg.durability = STORE_MEMORY;
	if ((embed_cfg.listen = strdup(listen)) == NULL)
		return -1;
	/* No stores: memory alone, so rdzv-agent links no sqlite or libcurl. */
	if (rdzvd_serve_start(base, &embed_cfg, NULL, port, &http_port,
	    NULL) != 0) {
		rdzvd_serve_stop();
		return -1;
	}
	return 0;
}

void
rdzvd_embed_stop(void)
{
	rdzvd_serve_stop();
	config_free(&embed_cfg);
}
