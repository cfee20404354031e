/*
 * http.c: rdzvd's HTTP listener (libevent's evhttp), read-only:
 * /healthz for liveness probes and /metrics in Prometheus text format.
 */
#include "config.h"

#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "log.h"
#include "rdzvd.h"

static struct evhttp	*http;

static void
http_healthz_cb(struct evhttp_request *req, void *arg)
{
	struct evbuffer	*out = evhttp_request_get_output_buffer(req);

	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; charset=utf-8");
	if (server.draining) {
		evbuffer_add_printf(out, "draining\n");
		evhttp_send_reply(req, 503, "Service Unavailable", NULL);
		return;
	}
	evbuffer_add_printf(out, "ok\n");
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void
http_metrics_cb(struct evhttp_request *req, void *arg)
{
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	metrics_write(evhttp_request_get_output_buffer(req));
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void
http_notfound_cb(struct evhttp_request *req, void *arg)
{
	evbuffer_add_printf(evhttp_request_get_output_buffer(req),
	    "not found: try /healthz or /metrics\n");
	evhttp_send_reply(req, HTTP_NOTFOUND, "Not Found", NULL);
}

int
http_start(int *port)
{
	int	fd;

	*port = 0;
	if (server.cfg->http == NULL)
		return 0;
	if ((fd = listen_socket(server.cfg->http, "http", port)) == -1)
		return -1;
	if ((http = evhttp_new(server.base)) == NULL)
		fatalx("evhttp_new");
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_max_headers_size(http, 8192);
	evhttp_set_max_body_size(http, 0);
	evhttp_set_timeout(http, 10);
	evhttp_set_cb(http, "/healthz", http_healthz_cb, NULL);
	evhttp_set_cb(http, "/metrics", http_metrics_cb, NULL);
	evhttp_set_gencb(http, http_notfound_cb, NULL);
	if (evhttp_accept_socket_with_handle(http, fd) == NULL) {
		log_warnx("http: cannot accept on %s", server.cfg->http);
		close(fd);
		return -1;
	}
	log_info("http on %s (port %d)", server.cfg->http, *port);
	return 0;
}

void
http_stop(void)
{
	if (http != NULL) {
		evhttp_free(http);
		http = NULL;
	}
}
