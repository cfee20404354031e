/*
 * http.c: rdzvd's HTTP listener (libevent's evhttp), read-only:
 * /healthz for liveness probes, /metrics in Prometheus text format, the
 * JSON documents of PROTOCOL.md "Operators" under /api/, and a status
 * page at / that renders them and refreshes itself.
 */
#include "config.h"

#include <stdlib.h>
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

/* The status page: static HTML whose script reads /api/ every 2 s. */
static const char status_page[] =
"<!doctype html>\n<html lang=en><head><meta charset=utf-8>\n"
"<title>rdzvd</title>\n<style>\n"
"body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\n"
"h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.2em 0 .4em}\n"
"table{border-collapse:collapse;margin-bottom:1em}\n"
"td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\n"
"th{background:#eee}.running{color:#070}.failed{color:#b00}\n"
".forming{color:#a60}.succeeded{color:#036}#err{color:#b00}\n"
"pre{background:#f6f6f6;padding:6px;max-height:18em;overflow:auto}\n"
"</style></head><body>\n"
"<h1>rdzvd <span id=ver></span></h1><div id=summary></div>"
"<div id=err></div>\n<h2>Jobs</h2><div id=jobs>loading&hellip;</div>\n"
"<div id=detail></div>\n<script>\n"
"'use strict';\n"
"const esc=s=>String(s).replace(/[&<>\"]/g,c=>({'&':'&amp;','<':'&lt;',"
"'>':'&gt;','\"':'&quot;'}[c]));\n"
"const get=p=>fetch(p,{cache:'no-store'}).then(r=>{if(!r.ok)throw "
"new Error(p+': '+r.status);return r.json()});\n"
"function table(cols,rows){return '<table><tr>'+cols.map(c=>'<th>'+esc(c)+"
"'</th>').join('')+'</tr>'+rows.map(r=>'<tr>'+r.map(v=>'<td>'+v+'</td>')"
".join('')+'</tr>').join('')+'</table>'}\n"
"function secs(ms){return (ms<10000?(ms/1000).toFixed(1):"
"String(Math.round(ms/1000)))+' s'}\n"
"function prog(p){if(!p)return '&mdash;';const n=p.ranks_reporting;\n"
"return (p.min_step===p.max_step?'step '+p.max_step:'steps '+p.min_step+"
"'-'+p.max_step)+' ('+n+(n===1?' rank':' ranks')+'), '+"
"secs(p.oldest_report_ms_ago)+' ago'}\n"
"async function refresh(){try{\n"
"const st=await get('/api/status');const jobs=await get('/api/jobs');\n"
"document.getElementById('ver').textContent=st.version;\n"
"document.getElementById('summary').textContent='up '+st.uptime_s+' s, "
"durability '+st.durability+', '+st.keys+' keys, '+st.connections+"
"' connections, '+st.jobs.running+' running, '+st.jobs.forming+"
"' forming, '+st.jobs.closed+' closed jobs';\n"
"document.getElementById('jobs').innerHTML=jobs.length?table(['job','state',"
"'round','restarts','nodes','world size'],jobs.map(j=>['<a href=\"#'+"
"encodeURIComponent(j.job)+'\">'+esc(j.job)+'</a>','<span class='+j.state+"
"'>'+j.state+'</span>',j.round,j.restarts+' / '+j.max_restarts,j.nodes+"
"' ('+j.min_nodes+':'+j.max_nodes+')',j.world_size])):'no jobs yet';\n"
"let d='';for(const j of jobs.filter(j=>j.state==='running'||j.state==="
"'forming'||location.hash==='#'+encodeURIComponent(j.job))){\n"
"const x=await get('/api/jobs/'+encodeURIComponent(j.job));\n"
"const ev=await get('/api/jobs/'+encodeURIComponent(j.job)+'/events');\n"
"d+='<h2>'+esc(j.job)+': members</h2>'+table(['node','state','rank',"
"'host','pid','workers','last heartbeat','progress'],x.members.map(m=>["
"m.node_id,m.state,m.group_rank,esc(m.host),m.pid,m.local_world_size,"
"m.connected?Math.max(0,m.lease_left_ms)+' ms of lease left':"
"'disconnected',prog(m.progress)]))+"
"(x.failure?'<p class=failed>'+esc(x.failure)+'</p>':'')+"
"'<h2>'+esc(j.job)+': recent events</h2><pre>'+ev.slice(-30).map(e=>"
"new Date(e.time_ms).toISOString()+'  '+esc(e.text)).join('\\n')+"
"'</pre>'}\n"
"document.getElementById('detail').innerHTML=d;\n"
"document.getElementById('err').textContent=''}catch(e){\n"
"document.getElementById('err').textContent='cannot reach rdzvd: '+e}}\n"
"refresh();setInterval(refresh,2000);\n"
"</script></body></html>\n";

static void
http_page_cb(struct evhttp_request *req, void *arg)
{
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/html; charset=utf-8");
	evbuffer_add(evhttp_request_get_output_buffer(req), status_page,
	    sizeof status_page - 1);
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void
http_json(struct evhttp_request *req, char *text)
{
	if (text == NULL) {
		evbuffer_add_printf(evhttp_request_get_output_buffer(req),
		    "{\"error\":\"not found\"}\n");
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "Content-Type", "application/json");
		evhttp_send_reply(req, HTTP_NOTFOUND, "Not Found", NULL);
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "application/json");
	evbuffer_add(evhttp_request_get_output_buffer(req), text, strlen(text));
	evbuffer_add(evhttp_request_get_output_buffer(req), "\n", 1);
	free(text);
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

/* /api/status, /api/jobs, /api/jobs/JOB, /api/jobs/JOB/events and
 * /api/jobs/JOB/history. */
static void
http_api(struct evhttp_request *req, const char *path)
{
	char		*job, *slash;
	size_t		 len;
	int		 events = 0, history = 0;

	if (strcmp(path, "/api/status") == 0) {
		http_json(req, docs_status());
		return;
	}
	if (strcmp(path, "/api/jobs") == 0) {
		http_json(req, docs_jobs());
		return;
	}
	if (strncmp(path, "/api/jobs/", 10) != 0) {
		http_json(req, NULL);
		return;
	}
	if ((job = evhttp_uridecode(path + 10, 0, &len)) == NULL) {
		http_json(req, NULL);
		return;
	}
	if ((slash = strrchr(job, '/')) != NULL && strcmp(slash,
	    "/events") == 0) {
		*slash = '\0';
		events = 1;
	} else if (slash != NULL && strcmp(slash, "/history") == 0) {
		*slash = '\0';
		history = 1;
	}
	if (history)
		http_json(req, docs_history(slice_str(job)));
	else if (events)
		http_json(req, docs_events(slice_str(job), -1));
	else
		http_json(req, docs_job(slice_str(job)));
	free(job);
}

static void
http_notfound_cb(struct evhttp_request *req, void *arg)
{
	const struct evhttp_uri	*uri = evhttp_request_get_evhttp_uri(req);
	const char		*path = uri ? evhttp_uri_get_path(uri) : NULL;

	if (!server_bearer_ok(evhttp_find_header(
	    evhttp_request_get_input_headers(req), "Authorization"))) {
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "WWW-Authenticate", "Bearer realm=\"rdzvd\"");
		evbuffer_add_printf(evhttp_request_get_output_buffer(req),
		    "this rdzvd has a token: send Authorization: Bearer "
		    "<token>\n");
		evhttp_send_reply(req, 401, "Unauthorized", NULL);
		return;
	}
	if (path != NULL && (strcmp(path, "/") == 0 ||
	    strcmp(path, "/index.html") == 0)) {
		http_page_cb(req, arg);
		return;
	}
	if (path != NULL && strncmp(path, "/api/", 5) == 0) {
		http_api(req, path);
		return;
	}
	evbuffer_add_printf(evhttp_request_get_output_buffer(req),
	    "not found: try /, /healthz, /metrics or /api/jobs\n");
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
