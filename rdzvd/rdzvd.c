/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rdzvd.c: main(): options, logging, the event base, serve.c's start and
 * stop, and the signals that stop rdzvd (SIGTERM, SIGINT: drain and exit
 * 0) or reopen its log and reload its TLS certificate (SIGHUP).
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "log.h"
#include "rdzvd.h"

static struct rdzvd_config	cfg;
static struct event_base	*base;
/*
 * The daemon keeps its state in sqlite or etcd; rdzv-agent's embedded
 * rdzvd (serve.c) hands over none of these, so it links neither.
 */
static const struct rdzvd_stores stores = {
	.open = store_open,
	.etcd_stand_by = store_etcd_stand_by,
	.etcd_stand_by_stop = store_etcd_stand_by_stop,
	.etcd_serve = store_etcd_serve,
	.etcd_status = store_etcd_get_status,
};

static void
sig_stop_cb(evutil_socket_t sig, short ev, void *arg)
{
	if (server.draining)
		return;
	log_info("%s: draining and exiting", strsignal((int)sig));
#ifdef HAVE_LIBSYSTEMD
	sd_notify(0, "STOPPING=1");
#endif
	server_shutdown();
	http_stop();
	event_base_loopexit(base, NULL);
}

static void
sig_hup_cb(evutil_socket_t sig, short ev, void *arg)
{
#ifdef HAVE_LIBSYSTEMD
	sd_notify(0, "RELOADING=1");
#endif
	if (log_reopen() != 0)
		log_warn("SIGHUP: cannot reopen log file %s", cfg.log_file);
	else
		log_info("SIGHUP: log reopened");
	/* Certificate rotation; a bad new pair keeps the old one. */
	server_tls_reload();
#ifdef HAVE_LIBSYSTEMD
	sd_notify(0, "READY=1");
#endif
}

/* Serving (at once, or once this rdzvd leads the others on etcd). */
static void
serving(int port)
{
	/* The port file last: its existence tells a supervisor we serve. */
	if (cfg.port_file != NULL && write_port_file(cfg.port_file, port) != 0) {
		server.failed = 1;
		event_base_loopexit(base, NULL);
		return;
	}
	log_info("rdzvd %s ready: durability %s%s%s, %zu keys", PACKAGE_VERSION,
	    store_durability_name(cfg.durability),
	    server.store == NULL ? "" : cfg.store != NULL ? ", store " :
	    ", database ", server.store == NULL ? "" : cfg.store != NULL ?
	    cfg.store : cfg.db, (size_t)kv_total_keys(server.kv));
#ifdef HAVE_LIBSYSTEMD
	/* Type=notify: ready once the port files exist. */
	sd_notifyf(0, "READY=1\nSTATUS=serving on port %d", port);
#endif
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
	if ((base = event_base_new()) == NULL)
		fatalx("event_base_new failed");
	if (rdzvd_serve_start(base, &cfg, &stores, &port, &http_port,
	    serving) != 0)
		goto out;
	if (cfg.http_port_file != NULL && cfg.http != NULL &&
	    write_port_file(cfg.http_port_file, http_port) != 0)
		goto out;

	for (i = 0; signos[i] != 0; i++) {
		sigs[i] = evsignal_new(base, signos[i],
		    signos[i] == SIGHUP ? sig_hup_cb : sig_stop_cb, NULL);
		if (sigs[i] == NULL || evsignal_add(sigs[i], NULL) != 0)
			fatalx("evsignal_new failed");
	}
	sigs[i] = NULL;
	if (!server.standby)
		serving(port);
#ifdef HAVE_LIBSYSTEMD
	/* A standby is ready as one: its HTTP says who leads. */
	if (server.standby)
		sd_notify(0, "READY=1\nSTATUS=standing by (the leader: "
		    "/api/status)");
#endif
	if (!server.failed)
		event_base_dispatch(base);

	for (i = 0; sigs[i] != NULL; i++)
		event_free(sigs[i]);
	rc = server.failed ? 1 : 0;
out:
	rdzvd_serve_stop();
	event_base_free(base);
	if (rc == 0)
		log_info("exited cleanly");
	config_free(&cfg);
	return rc;
}
