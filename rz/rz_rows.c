/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rz_rows.c: the rows the state machine keeps in kv's reserved
 * namespaces (a job row, a row per node, the event log), and loading them
 * after a restart (this rdzvd's JSON rows and an older one's k=v text).
 */
#include "config.h"

#include <sys/queue.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uthash.h>

#include "rdzv_err.h"
#include "rz.h"
#include "rz_impl.h"
#include "wire.h"

const struct slice rz_ns_jobs = { (const uint8_t *)"\0rdzv/job", 9 };

/* ---- persistence: rows in reserved kv namespaces ---- */

void
rz_ns_name(char *out, size_t outsz, const char *kind, const struct rz_job *j,
    struct slice *ns)
{
	int	n;

	n = snprintf(out, outsz, "%crdzv/%s/%s", '\0', kind, j->id);
	ns->p = (const uint8_t *)out;
	ns->len = n < 0 ? 0 : (size_t)n < outsz ? (size_t)n : outsz - 1;
}

/* The store namespace of j's round `round`; snprintf's return. */
int
rz_round_ns(char *out, size_t outsz, const struct rz_job *j, int64_t round)
{
	return snprintf(out, outsz, "job/%s/round/%" PRId64, j->id, round);
}

/* Drops the namespace of j's round `round` (nothing when it has none). */
void
rz_drop_round(struct rz *rz, const struct rz_job *j, int64_t round)
{
	char	ns[sizeof j->ns];
	int	n;

	if (round < 1)
		return;
	n = rz_round_ns(ns, sizeof ns, j, round);
	if (n > 0 && (size_t)n < sizeof ns)
		kv_ns_drop(rz->kv, slice_str(ns));
}

/*
 * A text for a JSON row: jansson takes only UTF-8, and a failure message
 * or event line may carry any bytes a worker printed, so bytes past ASCII
 * become '?' when the text is not valid UTF-8.  NULL: no memory.
 */
json_t *
rz_json_text(const char *text)
{
	json_t	*v;
	char	*copy, *p;

	if ((v = json_string(text)) != NULL || (copy = strdup(text)) == NULL)
		return v;
	for (p = copy; *p != '\0'; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	v = json_string(copy);
	free(copy);
	return v;
}

/* Writes doc (taken) as the row ns/key; a row that cannot be made is
 * not written (the next change of the same row writes it). */
static void
rz_put_row(struct rz *rz, struct slice ns, struct slice key, json_t *doc)
{
	char	*text;

	if (doc == NULL)
		return;
	if ((text = json_dumps(doc, JSON_COMPACT)) != NULL)
		kv_set(rz->kv, ns, key, slice_str(text));
	free(text);
	json_decref(doc);
}

void
rz_save_job(struct rz *rz, struct rz_job *j)
{
	rz_put_row(rz, rz_ns_jobs, slice_str(j->id), json_pack(
	    "{s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:i, "
	    "s:I, s:I, s:o, s:o, s:o}",
	    "min", (json_int_t)j->min, "max", (json_int_t)j->max,
	    "max_restarts", (json_int_t)j->max_restarts,
	    "last_call_ms", (json_int_t)j->last_call_ms,
	    "lease_ms", (json_int_t)j->lease_ms, "state", (int)j->state,
	    "round", (json_int_t)j->round,
	    "restarts", (json_int_t)j->restart_count,
	    "next_node", (json_int_t)j->next_node_id,
	    "next_join", (json_int_t)j->next_join_seq,
	    "next_event", (json_int_t)j->next_event, "port", j->port,
	    "world", (json_int_t)j->world_size,
	    "closed_ms", (json_int_t)j->closed_ms,
	    "failure", rz_json_text(j->failure), "straggler",
	    rz_strag_row(j), "repair", json_pack(
	    "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
	    "max", (json_int_t)j->max_repairs,
	    "base", (json_int_t)j->base_round,
	    "timeout_ms", (json_int_t)j->repair_timeout_ms,
	    "count", (json_int_t)j->repairs, "kind", (json_int_t)j->kind,
	    "donor", (json_int_t)j->donor, "pend_node", (json_int_t)j->pend_node,
	    "pend_local", (json_int_t)j->pend_local,
	    "replicas", (json_int_t)j->replicas,
	    "donor_node", (json_int_t)j->donor_node,
	    "donor_local", (json_int_t)j->donor_local)));
}

/* Where node nd's row lives: its namespace and key, with their room. */
struct rz_node_row {
	char		nsbuf[RZ_ID_MAX + 32], keybuf[32];
	struct slice	ns, key;
};

static void
rz_node_row(struct rz_node_row *r, const struct rz_job *j,
    const struct rz_node *nd)
{
	int	k;

	rz_ns_name(r->nsbuf, sizeof r->nsbuf, "node", j, &r->ns);
	k = snprintf(r->keybuf, sizeof r->keybuf, "%" PRId64, nd->id);
	r->key = (struct slice){ (const uint8_t *)r->keybuf, (size_t)k };
}

void
rz_save_node(struct rz *rz, struct rz_job *j, struct rz_node *nd)
{
	struct rz_node_row	row;

	rz_node_row(&row, j, nd);
	rz_put_row(rz, row.ns, row.key,
	    json_pack("{s:s, s:s, s:s, s:I, s:I, s:i, s:I, s:I, s:I, s:i, "
	    "s:I, s:I, s:I, s:I, s:i, s:i}",
	    "instance", nd->instance, "host", nd->host, "addr", nd->addr,
	    "pid", (json_int_t)nd->pid, "lws", (json_int_t)nd->lws,
	    "state", (int)nd->state, "group_rank", (json_int_t)nd->group_rank,
	    "prev_rank", (json_int_t)nd->prev_rank,
	    "join_seq", (json_int_t)nd->join_seq, "succeeded", nd->succeeded,
	    "want_rank", (json_int_t)nd->want_rank,
	    "dead_local", (json_int_t)nd->dead_local,
	    "ready_local", (json_int_t)nd->ready_local,
	    "fresh", (json_int_t)nd->fresh,
	    "repairable", nd->repairable, "joining", nd->joining));
}

void
rz_drop_node_row(struct rz *rz, struct rz_job *j, struct rz_node *nd)
{
	struct rz_node_row	row;

	rz_node_row(&row, j, nd);
	kv_delete(rz->kv, row.ns, row.key);
}

/* Appends one line to the job's event log, dropping the oldest past
 * RZ_EVENTS_KEPT.  `now` is unused: events carry wall-clock time. */
void
rz_event(struct rz *rz, struct rz_job *j, int64_t now, const char *fmt, ...)
{
	char		nsbuf[RZ_ID_MAX + 32], key[32], line[RZ_MSG_MAX + 512];
	struct slice	ns;
	va_list		ap;
	int		k;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	rz_ns_name(nsbuf, sizeof nsbuf, "ev", j, &ns);
	if (j->next_event >= RZ_EVENTS_KEPT) {
		k = snprintf(key, sizeof key, "%020" PRId64,
		    j->next_event - RZ_EVENTS_KEPT);
		kv_delete(rz->kv, ns, (struct slice){ (const uint8_t *)key,
		    (size_t)k });
	}
	k = snprintf(key, sizeof key, "%020" PRId64, j->next_event++);
	rz_put_row(rz, ns, (struct slice){ (const uint8_t *)key, (size_t)k },
	    json_pack("{s:I, s:o}", "time_ms",
	    (json_int_t)rz->hooks.wall_ms(rz->hooks.arg), "text",
	    rz_json_text(line)));
}

/* ---- loading after a restart ---- */

/*
 * Rows of the k=v text format an older rdzvd wrote: one "name=value"
 * line each, integers in decimal; in the job's "failure" and in event
 * lines a newline was written as \\n and a backslash doubled.  Read into
 * the JSON object the row would be now, so one reader takes both.
 */
static const char *const rz_legacy_texts[] = {
	"instance", "host", "addr", "failure"
};
#define RZ_LEGACY_TEXTS	(sizeof rz_legacy_texts / sizeof rz_legacy_texts[0])

static void
rz_legacy_unescape(char *s)
{
	char	*o = s;

	for (; *s != '\0'; s++) {
		if (*s == '\\' && s[1] == 'n') {
			*o++ = '\n';
			s++;
		} else if (*s == '\\' && s[1] == '\\') {
			*o++ = '\\';
			s++;
		} else
			*o++ = *s;
	}
	*o = '\0';
}

static json_t *
rz_legacy_row(char *row)
{
	json_t	*o;
	char	*line, *eq, *next;
	size_t	 i;

	if ((o = json_object()) == NULL)
		return NULL;
	for (line = row; line != NULL && *line != '\0'; line = next) {
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		if ((eq = strchr(line, '=')) == NULL)
			continue;
		*eq++ = '\0';
		for (i = 0; i < RZ_LEGACY_TEXTS; i++)
			if (strcmp(line, rz_legacy_texts[i]) == 0)
				break;
		if (i == RZ_LEGACY_TEXTS) {
			json_object_set_new(o, line,
			    json_integer(strtoll(eq, NULL, 10)));
			continue;
		}
		if (strcmp(line, "failure") == 0)
			rz_legacy_unescape(eq);
		json_object_set_new(o, line, rz_json_text(eq));
	}
	return o;
}

/* A stored row as a JSON object: JSON, or the older k=v text.  NULL
 * when it is neither (or no memory). */
static json_t *
rz_row_parse(struct slice v)
{
	json_t	*o;
	char	*text;

	if (v.len > 0 && v.p[0] == '{') {
		o = json_loadb((const char *)v.p, v.len, 0, NULL);
		if (o != NULL && !json_is_object(o)) {
			json_decref(o);
			o = NULL;
		}
		return o;
	}
	if ((text = malloc(v.len + 1)) == NULL)
		return NULL;
	memcpy(text, v.p, v.len);
	text[v.len] = '\0';
	o = rz_legacy_row(text);
	free(text);
	return o;
}

static int64_t
row_i64(const json_t *row, const char *name, int64_t dflt)
{
	json_t	*v = json_object_get(row, name);

	return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static void
row_str(const json_t *row, const char *name, char *out, size_t outsz)
{
	const char	*s = json_string_value(json_object_get(row, name));

	strlcpy(out, s != NULL ? s : "", outsz);
}

/*
 * An event row: {"time_ms", "text"}, or the older "<wall ms> <text>"
 * with the text escaped.  Sets *ms and *text (malloc'ed); 0, or -1 when
 * it is neither or there is no memory.
 */
int
rz_event_parse(struct slice v, int64_t *ms, char **text)
{
	json_t		*o;
	const char	*t;
	char		*line, *sp;

	if (v.len > 0 && v.p[0] == '{') {
		if ((o = rz_row_parse(v)) == NULL)
			return -1;
		*ms = row_i64(o, "time_ms", 0);
		t = json_string_value(json_object_get(o, "text"));
		*text = strdup(t != NULL ? t : "");
		json_decref(o);
		return *text != NULL ? 0 : -1;
	}
	if ((line = malloc(v.len + 1)) == NULL)
		return -1;
	memcpy(line, v.p, v.len);
	line[v.len] = '\0';
	rz_legacy_unescape(line);
	*ms = strtoll(line, NULL, 10);
	sp = strchr(line, ' ');
	*text = strdup(sp != NULL ? sp + 1 : "");
	free(line);
	return *text != NULL ? 0 : -1;
}

struct rz_load_ctx {
	struct rz	*rz;
	struct rz_job	*job;
	int64_t		 now;
	int		 err;
};

static char *
slice_cstr(struct slice s)
{
	char	*p;

	if ((p = malloc(s.len + 1)) == NULL)
		return NULL;
	memcpy(p, s.p, s.len);
	p[s.len] = '\0';
	return p;
}

static void
rz_load_node_cb(void *arg, struct slice key)
{
	struct rz_load_ctx	*ctx = arg;
	struct rz_job		*j = ctx->job;
	struct rz_node		*nd;
	struct slice		 v, ns;
	char			 nsbuf[RZ_ID_MAX + 32], *k;
	json_t			*row;

	rz_ns_name(nsbuf, sizeof nsbuf, "node", j, &ns);
	if (kv_get(ctx->rz->kv, ns, key, &v) != 0 ||
	    (row = rz_row_parse(v)) == NULL)
		return;
	if ((nd = calloc(1, sizeof *nd)) == NULL ||
	    (k = slice_cstr(key)) == NULL) {
		free(nd);
		json_decref(row);
		ctx->err = RDZV_ENOMEM;
		return;
	}
	nd->id = strtoll(k, NULL, 10);
	free(k);
	row_str(row, "instance", nd->instance, sizeof nd->instance);
	row_str(row, "host", nd->host, sizeof nd->host);
	row_str(row, "addr", nd->addr, sizeof nd->addr);
	nd->pid = row_i64(row, "pid", 0);
	nd->lws = row_i64(row, "lws", 1);
	nd->state = (enum rz_node_state)row_i64(row, "state", RZN_WAITING);
	nd->group_rank = row_i64(row, "group_rank", -1);
	nd->prev_rank = row_i64(row, "prev_rank", -1);
	nd->join_seq = row_i64(row, "join_seq", 0);
	nd->want_rank = row_i64(row, "want_rank", -1);
	nd->succeeded = (int)row_i64(row, "succeeded", 0);
	nd->dead_local = row_i64(row, "dead_local", 0);
	nd->ready_local = row_i64(row, "ready_local", 0);
	nd->fresh = row_i64(row, "fresh", 0);
	nd->repairable = (int)row_i64(row, "repairable", 0);
	nd->joining = (int)row_i64(row, "joining", 0);
	nd->lease_end = ctx->now + j->lease_ms;
	json_decref(row);
	rz_node_add(j, nd);
}

/* A job row's "repair" object (absent in older rows: defaults); a
 * pending replacement gets the whole timeout again from now. */
static void
rz_load_repair(struct rz_load_ctx *ctx, struct rz_job *j, const json_t *rp)
{
	j->max_repairs = row_i64(rp, "max", RZ_MAX_REPAIRS);
	j->repair_timeout_ms = row_i64(rp, "timeout_ms", RZ_REPAIR_TIMEOUT_MS);
	j->repairs = row_i64(rp, "count", 0);
	j->base_round = row_i64(rp, "base", j->round);
	j->kind = row_i64(rp, "kind", NAT_KIND_NORMAL);
	j->donor = row_i64(rp, "donor", -1);
	j->donor_node = row_i64(rp, "donor_node", 0);
	j->donor_local = row_i64(rp, "donor_local", -1);
	j->pend_node = row_i64(rp, "pend_node", 0);
	j->pend_local = row_i64(rp, "pend_local", -1);
	j->replicas = row_i64(rp, "replicas", 0);
	j->pend_deadline = j->pend_node != 0 ?
	    ctx->now + j->repair_timeout_ms : -1;
	/* A node joining in place grows the round at its last READY. */
	j->join_at = j->join_deadline = -1;
}

static void
rz_load_job_cb(void *arg, struct slice key)
{
	struct rz_load_ctx	*ctx = arg;
	struct rz_job		*j;
	struct slice		 v, ns;
	char			 nsbuf[RZ_ID_MAX + 32];
	json_t			*row;

	if (key.len > RZ_ID_MAX || kv_get(ctx->rz->kv, rz_ns_jobs, key, &v) != 0 ||
	    (row = rz_row_parse(v)) == NULL)
		return;
	if ((j = calloc(1, sizeof *j)) == NULL) {
		json_decref(row);
		ctx->err = RDZV_ENOMEM;
		return;
	}
	memcpy(j->id, key.p, key.len);
	TAILQ_INIT(&j->nodes);
	j->min = row_i64(row, "min", 1);
	j->max = row_i64(row, "max", 1);
	j->max_restarts = row_i64(row, "max_restarts", 0);
	j->last_call_ms = row_i64(row, "last_call_ms", ctx->rz->def_last_call);
	j->lease_ms = row_i64(row, "lease_ms", ctx->rz->def_lease);
	j->state = (enum rz_job_state)row_i64(row, "state", RZJ_FORMING);
	j->round = row_i64(row, "round", 0);
	j->restart_count = row_i64(row, "restarts", 0);
	j->next_node_id = row_i64(row, "next_node", 1);
	j->next_join_seq = row_i64(row, "next_join", 0);
	j->next_event = row_i64(row, "next_event", 0);
	j->world_size = row_i64(row, "world", 0);
	j->port = (int)row_i64(row, "port", 0);
	j->closed_ms = row_i64(row, "closed_ms", -1);
	row_str(row, "failure", j->failure, sizeof j->failure);
	rz_load_repair(ctx, j, json_object_get(row, "repair"));
	rz_strag_load(j, json_object_get(row, "straggler"));
	json_decref(row);
	if (j->round > 0)
		rz_round_ns(j->ns, sizeof j->ns, j, j->round);
	j->last_join = ctx->now;
	HASH_ADD_STR(ctx->rz->jobs, id, j);

	ctx->job = j;
	rz_ns_name(nsbuf, sizeof nsbuf, "node", j, &ns);
	kv_list(ctx->rz->kv, ns, rz_load_node_cb, ctx);
}

/* Wall ms of the job's newest event (its close, for a closed job). */
static int64_t
rz_last_event_ms(struct rz *rz, struct rz_job *j)
{
	char		nsbuf[RZ_ID_MAX + 32], key[32], *text;
	struct slice	ns, v;
	int64_t		ms;
	int		k;

	if (j->next_event < 1)
		return -1;
	rz_ns_name(nsbuf, sizeof nsbuf, "ev", j, &ns);
	k = snprintf(key, sizeof key, "%020" PRId64, j->next_event - 1);
	if (kv_get(rz->kv, ns, (struct slice){ (const uint8_t *)key,
	    (size_t)k }, &v) != 0 || rz_event_parse(v, &ms, &text) != 0)
		return -1;
	free(text);
	return ms;
}

static int
rz_closed_cmp(const void *a, const void *b)
{
	const struct rz_job	*x = *(struct rz_job * const *)a;
	const struct rz_job	*y = *(struct rz_job * const *)b;

	if (x->closed_ms != y->closed_ms)
		return x->closed_ms < y->closed_ms ? -1 : 1;
	return strcmp(x->id, y->id);
}

/* Puts the loaded closed jobs on rz->closed, oldest close first. */
static int
rz_load_closed(struct rz *rz)
{
	struct rz_job	*j, *tmp, **v;
	size_t		 n = 0, i;
	int64_t		 now = rz->hooks.wall_ms(rz->hooks.arg);

	HASH_ITER(hh, rz->jobs, j, tmp) {
		if (!rz_closed(j))
			continue;
		/* Rows written before closed_ms existed: the close event's
		 * time, or else now, so they are kept a whole retention. */
		if (j->closed_ms < 0)
			j->closed_ms = rz_last_event_ms(rz, j);
		/* A close "in the future" was stamped by a clock since set
		 * back: count from now rather than keep it that much longer. */
		if (j->closed_ms < 0 || j->closed_ms > now)
			j->closed_ms = now;
		n++;
	}
	if (n == 0)
		return 0;
	if ((v = reallocarray(NULL, n, sizeof *v)) == NULL) {
		/* Unsorted still purges them, just not in order. */
		HASH_ITER(hh, rz->jobs, j, tmp)
			if (rz_closed(j))
				TAILQ_INSERT_TAIL(&rz->closed, j, closed_entry);
		return RDZV_ENOMEM;
	}
	n = 0;
	HASH_ITER(hh, rz->jobs, j, tmp)
		if (rz_closed(j))
			v[n++] = j;
	qsort(v, n, sizeof *v, rz_closed_cmp);
	for (i = 0; i < n; i++)
		TAILQ_INSERT_TAIL(&rz->closed, v[i], closed_entry);
	free(v);
	return 0;
}

int
rz_load(struct rz *rz, int64_t now, struct rz_outbox *ob)
{
	struct rz_load_ctx	 ctx = { rz, NULL, now, 0 };
	struct rz_job		*j, *tmp;
	int			 want;

	kv_list(rz->kv, rz_ns_jobs, rz_load_job_cb, &ctx);
	if (rz_load_closed(rz) != 0)
		ctx.err = RDZV_ENOMEM;
	HASH_ITER(hh, rz->jobs, j, tmp) {
		if (j->state != RZJ_RUNNING)
			continue;
		if (rz_rank_bases(rz, j) != 0)
			ctx.err = RDZV_ENOMEM;
		/* Workers were told this port: serve it again if we can
		 * (rz_settle writes the row if it changes). */
		want = j->port;
		rz_out_port_open(ob, j, want);
		rz_event(rz, j, now, "rdzvd restarted: round %" PRId64
		    " resumes, %" PRId64 " nodes have %" PRId64 " ms to "
		    "reconnect", j->round, j->nnodes, j->lease_ms);
	}
	return ctx.err;
}
