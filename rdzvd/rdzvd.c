/*
 * rdzvd.c: the daemon's start and end: options, logging, the event base,
 * the kv core and its store, the listeners, and the signals that stop it
 * (SIGTERM, SIGINT: drain and exit 0) or reopen its log (SIGHUP).
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "log.h"
#include "rdzvd.h"

static struct rdzvd_config	cfg;

void
rdzvd_store_stats(struct store_stats *st)
{
	if (server.store != NULL)
		store_get_stats(server.store, st);
	else
		memset(st, 0, sizeof *st);
}

static void
sig_stop_cb(evutil_socket_t sig, short ev, void *arg)
{
	if (server.draining)
		return;
	log_info("%s: draining and exiting", strsignal((int)sig));
	server_shutdown();
	http_stop();
	event_base_loopexit(server.base, NULL);
}

static void
sig_hup_cb(evutil_socket_t sig, short ev, void *arg)
{
	if (log_reopen() != 0)
		log_warn("SIGHUP: cannot reopen log file %s", cfg.log_file);
	else
		log_info("SIGHUP: log reopened");
}

int
main(int argc, char **argv)
{
	struct event	*sigs[4];
	int		 signos[4] = { SIGTERM, SIGINT, SIGHUP, 0 }, i, rc = 1;
	int		 port, http_port;

	if (config_parse(&cfg, argc, argv) != 0)
		return 1;
	if (log_init("rdzvd", cfg.foreground, cfg.log_file) != 0) {
		fprintf(stderr, "rdzvd: cannot open log file %s: %m\n",
		    cfg.log_file);
		return 1;
	}
	log_setlevel(cfg.log_level);
	signal(SIGPIPE, SIG_IGN);

	if (evthread_use_pthreads() != 0)
		fatalx("evthread_use_pthreads failed");
	if ((server.base = event_base_new()) == NULL)
		fatalx("event_base_new failed");
	server.cfg = &cfg;
	if ((server.kv = kv_new()) == NULL)
		fatalx("out of memory");

	if (cfg.durability != STORE_MEMORY) {
		server.store = store_open(cfg.db, cfg.durability,
		    cfg.relaxed_window_ms, server.base, server.kv,
		    server_commit_cb, NULL);
		if (server.store == NULL) {
			log_warnx("cannot use database %s (see above); choose "
			    "another with --db, or --durability memory",
			    cfg.db);
			goto out;
		}
		kv_set_journal(server.kv, store_journal, server.store);
	}
	if (server_listen(&port) != 0 || http_start(&http_port) != 0)
		goto out;
	/* Port files last: their existence tells a supervisor we serve. */
	if (cfg.http_port_file != NULL && cfg.http != NULL &&
	    write_port_file(cfg.http_port_file, http_port) != 0)
		goto out;
	if (cfg.port_file != NULL && write_port_file(cfg.port_file, port) != 0)
		goto out;

	for (i = 0; signos[i] != 0; i++) {
		sigs[i] = evsignal_new(server.base, signos[i],
		    signos[i] == SIGHUP ? sig_hup_cb : sig_stop_cb, NULL);
		if (sigs[i] == NULL || evsignal_add(sigs[i], NULL) != 0)
			fatalx("evsignal_new failed");
	}
	sigs[i] = NULL;
	log_info("rdzvd %s ready: durability %s%s%s, %zu keys", PACKAGE_VERSION,
	    store_durability_name(cfg.durability),
	    server.store != NULL ? ", database " : "",
	    server.store != NULL ? cfg.db : "", (size_t)kv_total_keys(server.kv));

	event_base_dispatch(server.base);

	for (i = 0; sigs[i] != NULL; i++)
		event_free(sigs[i]);
	rc = 0;
out:
	server_shutdown();
	http_stop();
	if (server.store != NULL) {
		/* Commits whatever is pending before we exit. */
		store_close(server.store);
		server.store = NULL;
	}
	kv_free(server.kv);
	event_base_free(server.base);
	if (rc == 0)
		log_info("exited cleanly");
	config_free(&cfg);
	return rc;
}
