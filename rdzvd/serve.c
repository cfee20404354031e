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

void
rdzvd_store_stats(struct store_stats *st)
{
	if (server.store != NULL)
		store_get_stats(server.store, st);
	else
		memset(st, 0, sizeof *st);
}

/*
 * Stands by until this rdzvd leads the others on the same etcd, then
 * loads the state from there.  What standbys show of the leader is where
 * it listens.
 */
static struct store *
serve_open_etcd(struct rdzvd_config *cfg)
{
	struct store_etcd_conf	 c;
	struct store		*st;
	char			 host[256];
	char			*info;
	json_t			*j;

	if (gethostname(host, sizeof host) != 0)
		strlcpy(host, "?", sizeof host);
	host[sizeof host - 1] = '\0';
	j = json_pack("{s:s, s:s, s:s?, s:i}", "host", host, "listen",
	    cfg->listen, "http", cfg->http, "pid", (int)getpid());
	info = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(j);
	memset(&c, 0, sizeof c);
	c.etcd.endpoints = cfg->store + strlen("etcd://");
	c.etcd.cacert = cfg->etcd_cacert;
	c.etcd.cert = cfg->etcd_cert;
	c.etcd.key = cfg->etcd_key;
	c.etcd.user = cfg->etcd_user;
	c.etcd.password_file = cfg->etcd_password_file;
	c.prefix = cfg->etcd_prefix;
	c.leader_ttl_ms = cfg->leader_ttl_ms;
	c.leader_info = info != NULL ? info : "{}";
	st = store_open_etcd(&c, cfg->durability, cfg->relaxed_window_ms,
	    server.base, server.kv, server_commit_cb, NULL);
	free(info);
	return st;
}

int
rdzvd_serve_start(struct event_base *base, struct rdzvd_config *cfg,
    int *port, int *http_port)
{
	memset(&server, 0, sizeof server);
	server.started_ms = mono_ms();
	TAILQ_INIT(&server.conns);
	TAILQ_INIT(&server.held);
	server.base = base;
	server.cfg = cfg;
	if ((server.kv = kv_new()) == NULL) {
		log_warnx("out of memory");
		return -1;
	}
	if (server_auth_init() != 0 || server_tls_init() != 0)
		return -1;
	if (cfg->store != NULL) {
		if ((server.store = serve_open_etcd(cfg)) == NULL) {
			log_warnx("cannot use --store %s (see above)",
			    cfg->store);
			return -1;
		}
		kv_set_journal(server.kv, store_journal, server.store);
	} else if (cfg->durability != STORE_MEMORY) {
		server.store = store_open(cfg->db, cfg->durability,
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
	if (server_listen(port) != 0)
		return -1;
	/* After the listener: rounds reopen their ports beside it. */
	if (round_init(cfg->last_call_ms, cfg->lease_ms) != 0) {
		log_warnx("rendezvous: cannot start");
		return -1;
	}
	if (history_init() != 0) {
		log_warnx("history: cannot start");
		return -1;
	}
	if (stragwatch_init() != 0) {
		log_warnx("stragglers: cannot start");
		return -1;
	}
	if (http_start(http_port) != 0)
		return -1;
	return 0;
}

void
rdzvd_serve_stop(void)
{
	server_shutdown();
	http_stop();
	history_fini();
	stragwatch_fini();
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

int
rdzvd_embed_start(struct event_base *base, const char *listen, int *port)
{
	int	http_port;

	config_defaults(&embed_cfg);
	free(embed_cfg.listen);
	free(embed_cfg.http);
	embed_cfg.http = NULL;
	embed_cfg.durability = STORE_MEMORY;
	if ((embed_cfg.listen = strdup(listen)) == NULL)
		return -1;
	if (rdzvd_serve_start(base, &embed_cfg, port, &http_port) != 0) {
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
