/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c: the daemon's counters and their Prometheus text form
 * (served on /metrics by http.c).  Everything here runs on the loop
 * thread; store figures are copied from the store under its lock.
 */
#include "config.h"

#include <inttypes.h>
#include <string.h>

#include <event2/buffer.h>

#include "rdzvd.h"

struct metrics	metrics;

static const char *op_names[OPK_COUNT] = {
	[OPK_SET] = "set", [OPK_GET] = "get", [OPK_ADD] = "add",
	[OPK_COMPARE_SET] = "compare_set", [OPK_WAIT] = "wait",
	[OPK_CHECK] = "check", [OPK_DELETE] = "delete",
	[OPK_NUM_KEYS] = "num_keys", [OPK_APPEND] = "append",
	[OPK_MULTI_GET] = "multi_get", [OPK_MULTI_SET] = "multi_set",
	[OPK_QUEUE_PUSH] = "queue_push", [OPK_QUEUE_POP] = "queue_pop",
	[OPK_QUEUE_LEN] = "queue_len", [OPK_LIST_KEYS] = "list_keys",
	[OPK_BARRIER] = "barrier", [OPK_CANCEL] = "cancel",
	[OPK_PING] = "ping", [OPK_WATCH] = "watch",
	[OPK_VALIDATE] = "validate", [OPK_JOIN] = "join",
	[OPK_HEARTBEAT] = "heartbeat", [OPK_LEAVE] = "leave",
	[OPK_FAILURE] = "failure", [OPK_SUCCEEDED] = "succeeded",
	[OPK_JOB_STATUS] = "job_status", [OPK_ADMIN] = "admin",
	[OPK_READY] = "ready",
};

static const char *err_names[ERRK_COUNT] = {
	[ERRK_MALFORMED] = "malformed", [ERRK_TOO_BIG] = "too_big",
	[ERRK_REQUEST_TIMEOUT] = "request_timeout",
	[ERRK_MEMORY_BUDGET] = "memory_budget",
	[ERRK_OUTPUT_LIMIT] = "output_limit", [ERRK_ACCEPT] = "accept",
	[ERRK_STORE] = "store", [ERRK_AUTH] = "auth",
	[ERRK_TCPSTORE_DENIED] = "tcpstore_denied",
	[ERRK_TLS_HANDSHAKE] = "tls_handshake",
	[ERRK_TLS_REQUIRED] = "tls_required",
	[ERRK_TLS_NOT_CONFIGURED] = "tls_not_configured",
	[ERRK_FORBIDDEN] = "forbidden",
};

static const char *dialect_names[DIALECT_COUNT] = {
	[DIALECT_UNKNOWN] = "unknown", [DIALECT_NATIVE] = "native",
	[DIALECT_TCPS113] = "tcpstore113", [DIALECT_TCPS2] = "tcpstore2",
};

const char *
metrics_op_name(enum op_kind k)
{
	return op_names[k];
}

const char *
metrics_err_name(enum err_kind k)
{
	return err_names[k];
}

/* With --store etcd: whether this rdzvd leads, its term, failovers. */
static void
metrics_write_leader(struct evbuffer *out)
{
	struct store_etcd_status	es;

	rdzvd_etcd_status(&es);
	if (!es.enabled)
		return;
	evbuffer_add_printf(out,
	    "# HELP rdzvd_leader Whether this rdzvd leads the rdzvds on its "
	    "etcd.\n"
	    "# TYPE rdzvd_leader gauge\nrdzvd_leader %d\n"
	    "# HELP rdzvd_leader_term The leader key's etcd revision.\n"
	    "# TYPE rdzvd_leader_term gauge\nrdzvd_leader_term %" PRId64 "\n"
	    "# HELP rdzvd_leader_failovers Leaderships before this one on "
	    "this etcd prefix.\n"
	    "# TYPE rdzvd_leader_failovers gauge\n"
	    "rdzvd_leader_failovers %" PRId64 "\n",
	    es.leader, es.term, es.failovers);
}

void
metrics_write(struct evbuffer *out)
{
	static const char	*le[6] = { "0.0001", "0.001", "0.01", "0.1",
				    "1", "+Inf" };
	struct store_stats	 st;
	struct rz_stats		 rz;
	uint64_t		 cum = 0;
	int			 i;

	if (server.standby) {
		/* The leader has the rest. */
		metrics_write_leader(out);
		return;
	}
	rdzvd_store_stats(&st);
	memset(&rz, 0, sizeof rz);
	if (server.rz != NULL)
		rz_get_stats(server.rz, &rz);
	evbuffer_add_printf(out,
	    "# HELP rdzvd_jobs Rendezvous jobs by state.\n"
	    "# TYPE rdzvd_jobs gauge\n"
	    "rdzvd_jobs{state=\"forming\"} %" PRId64 "\n"
	    "rdzvd_jobs{state=\"running\"} %" PRId64 "\n"
	    "rdzvd_jobs{state=\"closed\"} %" PRId64 "\n"
	    "# HELP rdzvd_nodes Nodes (agents) in all jobs.\n"
	    "# TYPE rdzvd_nodes gauge\nrdzvd_nodes %" PRId64 "\n"
	    "# HELP rdzvd_rounds_total Rounds completed since start.\n"
	    "# TYPE rdzvd_rounds_total counter\nrdzvd_rounds_total %" PRId64 "\n"
	    "# HELP rdzvd_restarts_total Failure restarts since start.\n"
	    "# TYPE rdzvd_restarts_total counter\nrdzvd_restarts_total %" PRId64
	    "\n"
	    "# HELP rdzvd_repairs_total Repair rounds (shrink and grow) "
	    "since start.\n"
	    "# TYPE rdzvd_repairs_total counter\nrdzvd_repairs_total %" PRId64
	    "\n"
	    "# HELP rdzvd_lease_expiries_total Nodes dropped for a lapsed "
	    "lease since start.\n"
	    "# TYPE rdzvd_lease_expiries_total counter\n"
	    "rdzvd_lease_expiries_total %" PRId64 "\n"
	    "# HELP rdzvd_jobs_purged_total Closed jobs forgotten after "
	    "--job-retention, or by rdzvctl forget, since start.\n"
	    "# TYPE rdzvd_jobs_purged_total counter\n"
	    "rdzvd_jobs_purged_total %" PRId64 "\n",
	    rz.jobs_forming, rz.jobs_running, rz.jobs_closed, rz.nodes,
	    rz.rounds_total, rz.restarts_total, rz.repairs_total,
	    rz.lease_expiries_total,
	    rz.jobs_purged_total);
	evbuffer_add_printf(out,
	    "# HELP rdzvd_up Whether rdzvd is serving.\n"
	    "# TYPE rdzvd_up gauge\nrdzvd_up 1\n"
	    "# HELP rdzvd_connections Open store connections by protocol.\n"
	    "# TYPE rdzvd_connections gauge\n");
	for (i = 0; i < DIALECT_COUNT; i++)
		evbuffer_add_printf(out, "rdzvd_connections{dialect=\"%s\"} %"
		    PRIu64 "\n", dialect_names[i], metrics.conns[i]);
	evbuffer_add_printf(out,
	    "# HELP rdzvd_connections_accepted_total Connections accepted.\n"
	    "# TYPE rdzvd_connections_accepted_total counter\n"
	    "rdzvd_connections_accepted_total %" PRIu64 "\n"
	    "# HELP rdzvd_connections_rejected_total Connections refused at "
	    "the --max-connections limit.\n"
	    "# TYPE rdzvd_connections_rejected_total counter\n"
	    "rdzvd_connections_rejected_total %" PRIu64 "\n"
	    "# HELP rdzvd_tls_connections Open connections that speak TLS.\n"
	    "# TYPE rdzvd_tls_connections gauge\n"
	    "rdzvd_tls_connections %" PRIu64 "\n"
	    "# HELP rdzvd_tls_connections_total TLS handshakes completed.\n"
	    "# TYPE rdzvd_tls_connections_total counter\n"
	    "rdzvd_tls_connections_total %" PRIu64 "\n"
	    "# HELP rdzvd_ops_total Requests served, by operation.\n"
	    "# TYPE rdzvd_ops_total counter\n",
	    metrics.accepted, metrics.rejected, metrics.tls_open,
	    metrics.tls_handshakes);
	for (i = 0; i < OPK_COUNT; i++)
		evbuffer_add_printf(out, "rdzvd_ops_total{op=\"%s\"} %" PRIu64
		    "\n", op_names[i], metrics.ops[i]);
	evbuffer_add_printf(out,
	    "# HELP rdzvd_errors_total Connections closed or refused for "
	    "cause, and other errors, by kind.\n"
	    "# TYPE rdzvd_errors_total counter\n");
	for (i = 0; i < ERRK_COUNT; i++)
		evbuffer_add_printf(out, "rdzvd_errors_total{kind=\"%s\"} %"
		    PRIu64 "\n", err_names[i], metrics.errors[i] +
		    (i == ERRK_STORE ? st.errors : 0));
	evbuffer_add_printf(out,
	    "# HELP rdzvd_keys Keys stored, all namespaces.\n"
	    "# TYPE rdzvd_keys gauge\nrdzvd_keys %" PRId64 "\n"
	    "# HELP rdzvd_waiters Waits and watches registered.\n"
	    "# TYPE rdzvd_waiters gauge\nrdzvd_waiters %" PRId64 "\n",
	    kv_total_keys(server.kv), kv_total_waiters(server.kv));

	evbuffer_add_printf(out,
	    "# HELP rdzvd_store_pending_bytes Writes queued for the database.\n"
	    "# TYPE rdzvd_store_pending_bytes gauge\n"
	    "rdzvd_store_pending_bytes %" PRIu64 "\n"
	    "# HELP rdzvd_store_commit_errors_total Failed database "
	    "transactions (retried).\n"
	    "# TYPE rdzvd_store_commit_errors_total counter\n"
	    "rdzvd_store_commit_errors_total %" PRIu64 "\n"
	    "# HELP rdzvd_store_rows_total Mutations written to the database.\n"
	    "# TYPE rdzvd_store_rows_total counter\n"
	    "rdzvd_store_rows_total %" PRIu64 "\n"
	    "# HELP rdzvd_commit_seconds Database group-commit latency.\n"
	    "# TYPE rdzvd_commit_seconds histogram\n",
	    st.pending_bytes, st.errors, st.rows);
	for (i = 0; i < 6; i++) {
		cum += st.commit_hist[i];
		evbuffer_add_printf(out, "rdzvd_commit_seconds_bucket{le=\"%s\"} %"
		    PRIu64 "\n", le[i], cum);
	}
	evbuffer_add_printf(out, "rdzvd_commit_seconds_sum %.6f\n"
	    "rdzvd_commit_seconds_count %" PRIu64 "\n",
	    (double)st.commit_usec_sum / 1e6, st.commits);
	metrics_write_leader(out);
	progwatch_metrics(out);
}
