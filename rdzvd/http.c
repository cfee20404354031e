/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http.c: rdzvd's HTTP listener (libevent's evhttp), read-only:
 * /healthz for liveness probes, /readyz for readiness (200 only while
 * this rdzvd serves clients: not while it stands by for the leader on
 * etcd, nor while it drains), /metrics in Prometheus text format, the
 * JSON documents of PROTOCOL.md "Operators" under /api/, and a status
 * page at / that renders them and refreshes itself.
 *
 * A standby (--store etcd, another rdzvd leads) serves /healthz, /readyz,
 * /metrics (rdzvd_leader 0), /api/status (who leads, and where) and the
 * page; the rest of /api/ answers 503 with where the leader is.
 *
 * Who may read what (doc/security.md): /healthz, /readyz and /metrics are
 * open to whoever reaches the port (loopback by default).  The page and
 * /api/ need the viewer secret (--http-token-file) when one is set, and
 * are closed when only the native token is set: the native secret is
 * never accepted here.  The viewer secret comes as "Authorization:
 * Bearer" or as the cookie the login form (/login) sets: HttpOnly,
 * SameSite=Strict, a MAC of the secret and a nonce drawn at start (so a
 * restart signs everyone out).  --http-tls on serves all of it over TLS
 * with the native port's certificate.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <openssl/ssl.h>

#include "auth.h"
#include "log.h"
#include "rdzvd.h"

#define HTTP_COOKIE	"rdzv_view"	/* the login form's cookie */
#define HTTP_BODY_MAX	4096		/* the login form's body */

static struct evhttp	*http;
static uint8_t		*http_token;	/* viewer secret; NULL: none */
static size_t		 http_tokenlen;
static char		 http_session[2 * NAT_MAC_LEN + 1]; /* the cookie */
static int		 http_tls;	/* --http-tls on */

/* "the leader is HOST (clients LISTEN, http HTTP)", from its info. */
static void
http_leader_text(struct evbuffer *out)
{
	struct store_etcd_status	 es;
	json_t				*info;

	rdzvd_etcd_status(&es);
	info = json_loads(es.leader_info, 0, NULL);
	if (info == NULL)
		evbuffer_add_printf(out, "the leader is not known yet");
	else
		evbuffer_add_printf(out, "the leader is %s (clients %s, "
		    "http %s), term %" PRId64,
		    json_string_value(json_object_get(info, "host")),
		    json_string_value(json_object_get(info, "listen")),
		    json_is_string(json_object_get(info, "http")) ?
		    json_string_value(json_object_get(info, "http")) : "off",
		    es.term);
	json_decref(info);
}

/*
 * /healthz (alive: 200 unless draining) and /readyz (ready: 200 only
 * while this rdzvd serves clients; a standby answers 503 naming the
 * leader).
 */
static void
http_probe(struct evhttp_request *req, int ready)
{
	struct evbuffer	*out = evhttp_request_get_output_buffer(req);

	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; charset=utf-8");
	if (server.draining || (ready && server.standby)) {
		if (server.draining)
			evbuffer_add_printf(out, "draining\n");
		else {
			evbuffer_add_printf(out, "standing by: ");
			http_leader_text(out);
			evbuffer_add_printf(out, "\n");
		}
		evhttp_send_reply(req, 503, "Service Unavailable", NULL);
		return;
	}
	evbuffer_add_printf(out, "ok\n");
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void
http_healthz_cb(struct evhttp_request *req, void *arg)
{
	http_probe(req, 0);
}

static void
http_readyz_cb(struct evhttp_request *req, void *arg)
{
	http_probe(req, 1);
}

static void
http_metrics_cb(struct evhttp_request *req, void *arg)
{
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	metrics_write(evhttp_request_get_output_buffer(req));
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

/*
 * The status page: static HTML whose script reads /api/ every 2 s.  For
 * each job shown, a chart the script draws as inline SVG (no external
 * resources): steps/s of /api/jobs/JOB/history's samples, its marks as
 * vertical lines on the same time axis (data-t: the mark's time; the
 * recovery as a bar from it and in its title), then the same facts as
 * tables: marks with recovery times, ranks with last step and age, the
 * slowest one picked out.
 */
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
"svg.chart{background:#fbfbfb;border:1px solid #ccc}\n"
".chart .rate{fill:none;stroke:#1565c0;stroke-width:1.5}\n"
".chart .axis{stroke:#999}.chart text{font-size:11px;fill:#555}\n"
".mark{stroke-width:2}.mark.failure{stroke:#c62828}\n"
".mark.restart{stroke:#ef6c00}.mark.repair{stroke:#6a1b9a}\n"
".mark.rescale{stroke:#00838f}\n"
".mark.rdzvd_restart{stroke:#455a64;stroke-dasharray:4 3}\n"
".rec{fill:#ffab91}tr.slow td{background:#fde0dc;font-weight:bold}\n"
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
"function chart(h){const W=900,H=170,L=50,R=10,T=10,B=22,w=W-L-R,hh=H-T-B;\n"
"const s=h.samples,m=h.marks;\n"
"if(!s.length&&!m.length)return '<p>no progress reported yet</p>';\n"
"const ts=s.map(x=>x.time_ms).concat(m.map(x=>x.time_ms));\n"
"const t0=Math.min(...ts),t1=Math.max(t0+1000,...ts);\n"
"const top=Math.max(1,...s.map(x=>x.steps_per_s))*1.1;\n"
"const X=t=>(L+(t-t0)/(t1-t0)*w).toFixed(1),Y=v=>(T+hh-v/top*hh).toFixed(1);\n"
"let g='<svg class=chart width='+W+' height='+H+' data-t0='+t0+' data-t1='+t1+\n"
"' data-left='+L+' data-width='+w+' role=img aria-label=\"steps per second\">';\n"
"g+='<line class=axis x1='+L+' y1='+(T+hh)+' x2='+(L+w)+' y2='+(T+hh)+\n"
"'></line><line class=axis x1='+L+' y1='+T+' x2='+L+' y2='+(T+hh)+'></line>';\n"
"g+='<text x=2 y='+(T+10)+'>'+top.toFixed(top<10?1:0)+'</text><text x=2 y='+\n"
"(T+hh)+'>0 /s</text><text x='+L+' y='+(H-6)+'>'+\n"
"new Date(t0).toLocaleTimeString()+'</text><text x='+(L+w-60)+' y='+(H-6)+\n"
"'>'+new Date(t1).toLocaleTimeString()+'</text>';\n"
"if(s.length)g+='<polyline class=rate points=\"'+s.map(x=>X(x.time_ms)+','+\n"
"Y(x.steps_per_s)).join(' ')+'\"></polyline>';\n"
"for(const k of m){const x=X(k.time_ms);\n"
"if(k.recovery_ms!=null)g+='<rect class=rec x='+x+' y='+T+' width='+\n"
"Math.max(1,k.recovery_ms/(t1-t0)*w).toFixed(1)+' height=5></rect>';\n"
"g+='<line class=\"mark '+k.kind+'\" data-t='+k.time_ms+' x1='+x+' x2='+x+\n"
"' y1='+T+' y2='+(T+hh)+'><title>'+esc(k.kind+': '+k.text+\n"
"(k.recovery_ms!=null?' (recovered in '+secs(k.recovery_ms)+')':''))+\n"
"'</title></line>'}\n"
"return g+'</svg>'}\n"
"function hist(name,h){let t='<h2>'+esc(name)+': progress</h2>'+chart(h);\n"
"if(h.marks.length)t+=table(['time','mark','recovery','event'],\n"
"h.marks.slice(-20).map(k=>[new Date(k.time_ms).toISOString(),k.kind,\n"
"k.recovery_ms==null?'&mdash;':k.recovery_ms<1000?k.recovery_ms+' ms':\n"
"secs(k.recovery_ms),esc(k.text)]));\n"
"if(h.ranks.length)t+=table(['rank','last step','reported'],\n"
"h.ranks.slice(0,256).map(r=>[r.straggler?r.rank+' (straggler)':\n"
"r.rank===h.slowest?r.rank+' (slowest)':r.rank,\n"
"r.step,secs(r.age_ms)+' ago'])).replace(\n"
"/<tr><td>(\\d+ \\((slowest|straggler)\\))/g,\n"
"'<tr class=slow><td>$1');\n"
"return t}\n"
"function prog(p){if(!p)return '&mdash;';const n=p.ranks_reporting;\n"
"return (p.min_step===p.max_step?'step '+p.max_step:'steps '+p.min_step+"
"'-'+p.max_step)+' ('+n+(n===1?' rank':' ranks')+'), '+"
"secs(p.oldest_report_ms_ago)+' ago'}\n"
"async function refresh(){try{\n"
"const st=await get('/api/status');const ld=st.leader;\n"
"if(ld&&!ld.leading){document.getElementById('ver').textContent=st.version;\n"
"document.getElementById('summary').innerHTML='standing by: the leader is '+"
"esc(ld.host||'not known yet')+(ld.listen?' (clients '+esc(ld.listen)+"
"(ld.http?', <a href=\"http://'+esc(ld.http)+'/\">its status page</a>':'')+"
"')':'')+', term '+ld.term+', '+ld.failovers+' failovers';\n"
"document.getElementById('jobs').textContent='on the leader';\n"
"document.getElementById('detail').innerHTML='';\n"
"document.getElementById('err').textContent='';return}\n"
"const jobs=await get('/api/jobs');\n"
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
"const h=await get('/api/jobs/'+encodeURIComponent(j.job)+'/history');\n"
"d+=hist(j.job,h);\n"
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

/* {"error": why} with the HTTP status code and its reason. */
static void
http_json_error(struct evhttp_request *req, int code, const char *reason,
    const char *why)
{
	evbuffer_add_printf(evhttp_request_get_output_buffer(req),
	    "{\"error\":\"%s\"}\n", why);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "application/json");
	evhttp_send_reply(req, code, reason, NULL);
}

static void
http_json(struct evhttp_request *req, char *text)
{
	if (text == NULL) {
		http_json_error(req, HTTP_NOTFOUND, "Not Found", "not found");
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
	if (server.standby) {
		http_json_error(req, 503, "Service Unavailable", "this rdzvd "
		    "stands by; ask the leader (/api/status says where it is)");
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

/*
 * Whether s (len bytes) is the viewer secret: compares MACs of both, so
 * the time taken says nothing of the secret.
 */
static int
http_secret_ok(const void *s, size_t len)
{
	uint8_t	a[NAT_MAC_LEN], b[NAT_MAC_LEN];
	uint8_t	zero[NAT_NONCE_LEN] = { 0 };

	if (http_token == NULL)
		return 0;
	if (nat_auth_mac(http_token, http_tokenlen, "viewer", zero, zero,
	    a) != 0 || nat_auth_mac(s, len, "viewer", zero, zero, b) != 0)
		return 0;
	return nat_mac_equal(a, b);
}

/* The value of cookie name in a Cookie header, or NULL; copied to buf. */
static const char *
http_cookie(const char *h, const char *name, char *buf, size_t bufsz)
{
	size_t	nl = strlen(name), vl;

	while (h != NULL && *h != '\0') {
		while (*h == ' ' || *h == ';')
			h++;
		vl = strcspn(h, ";");
		if (vl > nl && strncmp(h, name, nl) == 0 && h[nl] == '=') {
			vl -= nl + 1;
			if (vl >= bufsz)
				return NULL;
			memcpy(buf, h + nl + 1, vl);
			buf[vl] = '\0';
			return buf;
		}
		h += vl;
	}
	return NULL;
}

/*
 * Whether req may read the page and /api/: 1 yes; 0 no credential at
 * all; -1 a wrong one (a Bearer or a cookie that is not the viewer's).
 */
static int
http_viewer(struct evhttp_request *req)
{
	struct evkeyvalq	*in = evhttp_request_get_input_headers(req);
	const char		*a, *c;
	char			 buf[2 * NAT_MAC_LEN + 2];
	uint8_t			 x[NAT_MAC_LEN], y[NAT_MAC_LEN];
	uint8_t			 zero[NAT_NONCE_LEN] = { 0 };

	if (http_token == NULL && server.token == NULL)
		return 1;	/* no secret anywhere: open, as always */
	if ((a = evhttp_find_header(in, "Authorization")) != NULL) {
		if (strncmp(a, "Bearer ", 7) == 0 &&
		    http_secret_ok(a + 7, strlen(a + 7)))
			return 1;
		return -1;
	}
	c = http_cookie(evhttp_find_header(in, "Cookie"), HTTP_COOKIE, buf,
	    sizeof buf);
	if (c == NULL)
		return 0;
	if (http_token == NULL || strlen(c) != sizeof http_session - 1)
		return -1;
	/* A constant-time compare of the session value. */
	if (nat_auth_mac(c, strlen(c), "session", zero, zero, x) != 0 ||
	    nat_auth_mac(http_session, strlen(http_session), "session", zero,
	    zero, y) != 0)
		return -1;
	return nat_mac_equal(x, y) ? 1 : -1;
}

/* Logs a refusal of req with its peer, and counts it. */
static void
http_count_refusal(struct evhttp_request *req, const char *what)
{
	struct evhttp_connection	*conn;
	char				*addr = NULL;
	ev_uint16_t			 port = 0;

	if ((conn = evhttp_request_get_connection(req)) != NULL)
		evhttp_connection_get_peer(conn, &addr, &port);
	log_info("http: refused %s:%u: %s", addr != NULL ? addr : "?",
	    (unsigned)port, what);
	metrics.errors[ERRK_FORBIDDEN]++;
}

/* 401 for /api/ (and a wrong credential anywhere), counted. */
static void
http_refuse(struct evhttp_request *req, const char *why)
{
	http_count_refusal(req, "no viewer secret");
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "WWW-Authenticate", "Bearer realm=\"rdzvd\"");
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; charset=utf-8");
	evbuffer_add_printf(evhttp_request_get_output_buffer(req), "%s\n",
	    why);
	evhttp_send_reply(req, 401, "Unauthorized", NULL);
}

static const char login_page[] =
"<!doctype html>\n<html lang=en><head><meta charset=utf-8>\n"
"<title>rdzvd: sign in</title>\n<style>body{font:14px system-ui,"
"sans-serif;margin:1.5em;color:#222}#err{color:#b00}</style></head><body>\n"
"<h1>rdzvd</h1>\n<p>This status page needs the viewer secret: the "
"contents of the file given to rdzvd as <code>--http-token-file</code> "
"(never the native token).</p>\n"
"<form method=post action=/login><label>Viewer secret <input "
"type=password name=token id=token autocomplete=current-password "
"required autofocus></label> <button type=submit id=signin>Sign in"
"</button></form>\n<p id=err>%s</p>\n</body></html>\n";

/* The login form, with a line saying what went wrong (or none). */
static void
http_login_page(struct evhttp_request *req, int code, const char *reason,
    const char *err)
{
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/html; charset=utf-8");
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Cache-Control", "no-store");
	evbuffer_add_printf(evhttp_request_get_output_buffer(req), login_page,
	    err);
	evhttp_send_reply(req, code, reason, NULL);
}

/*
 * POST /login: the form's "token" checked; a right one sets the session
 * cookie and sends the browser to the page, a wrong one gets the form
 * again (401, counted).  GET /login shows the form.
 */
static void
http_login(struct evhttp_request *req)
{
	struct evkeyvalq	 q;
	struct evbuffer		*body;
	char			 buf[HTTP_BODY_MAX + 1], cookie[256];
	const char		*tok;
	size_t			 len;
	int			 ok = 0;

	if (http_token == NULL) {
		http_login_page(req, 403, "Forbidden", server.token != NULL ?
		    "This rdzvd has no viewer secret: start it with "
		    "--http-token-file FILE." : "This rdzvd needs no sign-in.");
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
		http_login_page(req, HTTP_OK, "OK", "");
		return;
	}
	body = evhttp_request_get_input_buffer(req);
	len = evbuffer_get_length(body);
	if (len > HTTP_BODY_MAX)
		len = HTTP_BODY_MAX;
	evbuffer_copyout(body, buf, len);
	buf[len] = '\0';
	TAILQ_INIT(&q);
	if (evhttp_parse_query_str(buf, &q) == 0 &&
	    (tok = evhttp_find_header(&q, "token")) != NULL)
		ok = http_secret_ok(tok, strlen(tok));
	evhttp_clear_headers(&q);
	explicit_bzero(buf, sizeof buf);
	if (!ok) {
		http_count_refusal(req, "a wrong viewer secret at /login");
		http_login_page(req, 401, "Unauthorized", "Wrong viewer "
		    "secret.");
		return;
	}
	snprintf(cookie, sizeof cookie, HTTP_COOKIE "=%s; Path=/; HttpOnly; "
	    "SameSite=Strict%s", http_session, http_tls ? "; Secure" : "");
	evhttp_add_header(evhttp_request_get_output_headers(req), "Set-Cookie",
	    cookie);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Location",
	    "/");
	evhttp_send_reply(req, 303, "See Other", NULL);
}

static void
http_notfound_cb(struct evhttp_request *req, void *arg)
{
	const struct evhttp_uri	*uri = evhttp_request_get_evhttp_uri(req);
	const char		*path = uri ? evhttp_uri_get_path(uri) : NULL;
	int			 page, api, v;

	if (path != NULL && strcmp(path, "/login") == 0) {
		http_login(req);
		return;
	}
	if (evhttp_request_get_command(req) == EVHTTP_REQ_POST) {
		evhttp_send_reply(req, 405, "Method Not Allowed", NULL);
		return;
	}
	page = path != NULL && (strcmp(path, "/") == 0 ||
	    strcmp(path, "/index.html") == 0);
	api = path != NULL && strncmp(path, "/api/", 5) == 0;
	if (!page && !api) {
		/* Nothing to guard (a browser's /favicon.ico): no refusal. */
		evbuffer_add_printf(evhttp_request_get_output_buffer(req),
		    "not found: try /, /healthz, /readyz, /metrics or "
		    "/api/jobs\n");
		evhttp_send_reply(req, HTTP_NOTFOUND, "Not Found", NULL);
		return;
	}
	if ((v = http_viewer(req)) != 1) {
		if (page && v == 0 && http_token != NULL) {
			/* A browser without the cookie: the form. */
			evhttp_add_header(evhttp_request_get_output_headers(
			    req), "Location", "/login");
			evhttp_send_reply(req, 303, "See Other", NULL);
			return;
		}
		http_refuse(req, http_token == NULL ? "this rdzvd has a "
		    "native token, which is never accepted over HTTP: its page "
		    "and /api/ need a viewer secret (start it with "
		    "--http-token-file FILE)" : "the page and /api/ need the "
		    "viewer secret (--http-token-file): send Authorization: "
		    "Bearer <it>, or sign in at /login");
		return;
	}
	if (page)
		http_page_cb(req, arg);
	else
		http_api(req, path);
}

/* --http-tls on: each HTTP connection is a TLS server connection with
 * the native port's certificate (reloaded on SIGHUP for new ones). */
static struct bufferevent *
http_bev_cb(struct event_base *base, void *arg)
{
	SSL	*ssl;

	if (server.tls_ctx == NULL || (ssl = SSL_new(server.tls_ctx)) == NULL)
		return NULL;
	return bufferevent_openssl_socket_new(base, -1, ssl,
	    BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
}

/*
 * Loads --http-token-file: the viewer secret, which must not be the
 * native one; draws the session nonce.  0 or -1 (logged).
 */
static int
http_auth_init(void)
{
	struct rdzvd_config	*cfg = server.cfg;
	uint8_t			 nonce[NAT_NONCE_LEN], mac[NAT_MAC_LEN];
	uint8_t			 zero[NAT_NONCE_LEN] = { 0 };
	char			 why[512];
	size_t			 i;
	int			 insecure;

	if (cfg->http_token_file == NULL) {
		if (server.token != NULL)
			log_info("http: the page and /api/ are closed: the "
			    "native token is never accepted over HTTP; "
			    "--http-token-file gives them a viewer secret");
		return 0;
	}
	if (rdzv_token_load(cfg->http_token_file, &http_token, &http_tokenlen,
	    &insecure, why, sizeof why) != 0) {
		log_warnx("--http-token-file: %s", why);
		return -1;
	}
	if (insecure)
		log_warnx("token file %s is readable by group or others; "
		    "chmod 600 it", cfg->http_token_file);
	if (server.token != NULL && server.tokenlen == http_tokenlen &&
	    http_secret_ok(server.token, server.tokenlen)) {
		log_warnx("--http-token-file %s holds the native token: give "
		    "the page a secret of its own (the native one never goes "
		    "over HTTP)", cfg->http_token_file);
		return -1;
	}
	if (rdzv_random(nonce, sizeof nonce) != 0 ||
	    nat_auth_mac(http_token, http_tokenlen, "rdzv session", nonce,
	    zero, mac) != 0) {
		log_warnx("http: no random bytes for the session");
		return -1;
	}
	for (i = 0; i < sizeof mac; i++)
		snprintf(http_session + 2 * i, 3, "%02x", mac[i]);
	log_info("http: the page and /api/ need the viewer secret of %s",
	    cfg->http_token_file);
	return 0;
}

int
http_start(int *port)
{
	int	fd;

	*port = 0;
	if (server.cfg->http == NULL)
		return 0;
	if (http_auth_init() != 0)
		return -1;
	http_tls = server.cfg->http_tls != NULL &&
	    strcmp(server.cfg->http_tls, "on") == 0;
	if ((fd = listen_socket(server.cfg->http, "http", port)) == -1)
		return -1;
	if ((http = evhttp_new(server.base)) == NULL)
		fatalx("evhttp_new");
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD |
	    EVHTTP_REQ_POST);
	evhttp_set_max_headers_size(http, 8192);
	evhttp_set_max_body_size(http, HTTP_BODY_MAX);
	if (http_tls)
		evhttp_set_bevcb(http, http_bev_cb, NULL);
	evhttp_set_timeout(http, 10);
	evhttp_set_cb(http, "/healthz", http_healthz_cb, NULL);
	evhttp_set_cb(http, "/readyz", http_readyz_cb, NULL);
	evhttp_set_cb(http, "/metrics", http_metrics_cb, NULL);
	evhttp_set_gencb(http, http_notfound_cb, NULL);
	if (evhttp_accept_socket_with_handle(http, fd) == NULL) {
		log_warnx("http: cannot accept on %s", server.cfg->http);
		close(fd);
		return -1;
	}
	log_info("http%s on %s (port %d)", http_tls ? "s" : "",
	    server.cfg->http, *port);
	return 0;
}

void
http_stop(void)
{
	if (http != NULL) {
		evhttp_free(http);
		http = NULL;
	}
	if (http_token != NULL) {
		explicit_bzero(http_token, http_tokenlen);
		free(http_token);
		http_token = NULL;
	}
	explicit_bzero(http_session, sizeof http_session);
}
