/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cmd_jobs.c: rdzvctl's job commands: what rdzvd knows of them (jobs,
 * members, events and its --follow, the live view top) and what an
 * operator does to one (close, evict, forget), and credential, a job's
 * credential derived from the operator's secret without asking rdzvd.
 */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "auth.h"
#include "client.h"
#include "ctl.h"
#include "rdzv_err.h"
#include "wire.h"

#define CTL_FOLLOW_WAIT_MS	10000	/* rdzvd holds an ADMIN_EVENTS this long */
#define CTL_TOP_PERIOD_MS	1000	/* top: one view a second */
#define CTL_TOP_STALL_MS	5000	/* top: no new step this long: 0/s */
#define CTL_TOP_EVENTS		8	/* top: events shown on a terminal */

int
cmd_jobs(struct ctl *ctl, int argc, char **argv)
{
	struct ctl_table	*t;
	json_t			*doc, *j;
	char			*text;
	size_t			 len, i;
	int			 rv;

	if ((rv = ctl_request(ctl, "jobs", NULL, &text, &len,
	    NAT_OP_ADMIN_JOBS, "")) != 0)
		return rv;
	if ((rv = ctl_document(ctl, text, len, &doc)) != 0 || doc == NULL)
		return rv;
	if (json_array_size(doc) == 0) {
		printf("no jobs\n");
		json_decref(doc);
		return CTL_EXIT_OK;
	}
	if ((t = ctl_table_new("JOB|STATE|>ROUND|>NODES|>MIN:MAX|>WORLD|"
	    ">RESTARTS")) == NULL) {
		json_decref(doc);
		return CTL_EXIT_SERVER;
	}
	json_array_foreach(doc, i, j) {
		ctl_table_cell(t, "%s", ctl_jstr(j, "job"));
		ctl_table_cell(t, "%s", ctl_jstr(j, "state"));
		ctl_table_cell(t, "%" PRId64, ctl_jint(j, "round"));
		ctl_table_cell(t, "%" PRId64, ctl_jint(j, "nodes"));
		ctl_table_cell(t, "%" PRId64 ":%" PRId64,
		    ctl_jint(j, "min_nodes"), ctl_jint(j, "max_nodes"));
		ctl_table_cell(t, "%" PRId64, ctl_jint(j, "world_size"));
		ctl_table_cell(t, "%" PRId64 "/%" PRId64,
		    ctl_jint(j, "restarts"), ctl_jint(j, "max_restarts"));
	}
	ctl_table_print(t);
	json_decref(doc);
	return CTL_EXIT_OK;
}

/*
 * A member's STEP and LAST REPORT cells from its "progress" (null, or
 * absent from an older rdzvd: "-").
 */
static void
cmd_members_progress(struct ctl_table *t, const json_t *m)
{
	const json_t	*p = json_object_get(m, "progress");
	char		 steps[64], ranks[64], age[32];
	int64_t		 lo, hi, n, lws;

	if (!json_is_object(p) || (n = ctl_jint(p, "ranks_reporting")) <= 0) {
		ctl_table_cell(t, "-");
		ctl_table_cell(t, "-");
		return;
	}
	lo = ctl_jint(p, "min_step");
	hi = ctl_jint(p, "max_step");
	lws = ctl_jint(m, "local_world_size");
	if (lo == hi)
		snprintf(steps, sizeof steps, "%" PRId64, hi);
	else
		snprintf(steps, sizeof steps, "%" PRId64 "-%" PRId64, lo, hi);
	ranks[0] = '\0';
	if (n < lws)
		snprintf(ranks, sizeof ranks, " (%" PRId64 " of %" PRId64 ")",
		    n, lws);
	ctl_table_cell(t, "%s%s", steps, ranks);
	ctl_table_cell(t, "%s ago", ctl_fmt_duration(age, sizeof age,
	    ctl_jint(p, "oldest_report_ms_ago")));
}

/* A line per rank rdzvd names a straggler now (progress.stragglers). */
static void
cmd_members_stragglers(const json_t *members)
{
	const json_t	*m, *r;
	size_t		 i, k;

	json_array_foreach(members, i, m)
		json_array_foreach(json_object_get(json_object_get(m,
		    "progress"), "stragglers"), k, r)
			printf("straggler: rank %" PRId64 " on node %" PRId64
			    " (%s)\n", (int64_t)json_integer_value(r),
			    ctl_jint(m, "node_id"), ctl_jstr(m, "host"));
}

int
cmd_members(struct ctl *ctl, int argc, char **argv)
{
	struct ctl_table	*t;
	json_t			*doc, *m, *members;
	const char		*failure;
	char			*text, what[300], buf[64];
	size_t			 len, i;
	int			 rv;

	snprintf(what, sizeof what, "job \"%s\"", argv[0]);
	if ((rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them", &text,
	    &len, NAT_OP_ADMIN_JOB, "b", argv[0])) != 0)
		return rv;
	if ((rv = ctl_document(ctl, text, len, &doc)) != 0 || doc == NULL)
		return rv;
	printf("job %s: %s, round %" PRId64 ", %" PRId64 " node%s (%" PRId64
	    ":%" PRId64 "), world size %" PRId64 ", restarts %" PRId64 "/%"
	    PRId64, ctl_jstr(doc, "job"), ctl_jstr(doc, "state"),
	    ctl_jint(doc, "round"),
	    ctl_jint(doc, "nodes"), ctl_jint(doc, "nodes") == 1 ? "" : "s",
	    ctl_jint(doc, "min_nodes"), ctl_jint(doc, "max_nodes"),
	    ctl_jint(doc, "world_size"), ctl_jint(doc, "restarts"),
	    ctl_jint(doc, "max_restarts"));
	if (ctl_jint(doc, "store_port") > 0)
		printf(", store port %" PRId64, ctl_jint(doc, "store_port"));
	putchar('\n');
	failure = ctl_jstr(doc, "failure");
	if (*failure != '\0' && strcmp(failure, "-") != 0)
		printf("failure: %s\n", failure);
	members = json_object_get(doc, "members");
	if (json_array_size(members) == 0) {
		printf("no nodes\n");
		json_decref(doc);
		return CTL_EXIT_OK;
	}
	if ((t = ctl_table_new(">NODE|STATE|>RANK|HOST|ADDR|>PID|>WORKERS|"
	    ">LEASE LEFT|CONNECTED|>STEP|>LAST REPORT")) == NULL) {
		json_decref(doc);
		return CTL_EXIT_SERVER;
	}
	json_array_foreach(members, i, m) {
		ctl_table_cell(t, "%" PRId64, ctl_jint(m, "node_id"));
		ctl_table_cell(t, "%s", ctl_jstr(m, "state"));
		if (ctl_jint(m, "group_rank") >= 0)
			ctl_table_cell(t, "%" PRId64,
			    ctl_jint(m, "group_rank"));
		else
			ctl_table_cell(t, "-");
		ctl_table_cell(t, "%s", ctl_jstr(m, "host"));
		ctl_table_cell(t, "%s", ctl_jstr(m, "addr"));
		ctl_table_cell(t, "%" PRId64, ctl_jint(m, "pid"));
		ctl_table_cell(t, "%" PRId64, ctl_jint(m, "local_world_size"));
		ctl_table_cell(t, "%s", ctl_jint(m, "lease_left_ms") < 0 ?
		    "expired" : ctl_fmt_duration(buf, sizeof buf,
		    ctl_jint(m, "lease_left_ms")));
		ctl_table_cell(t, "%s", json_is_true(json_object_get(m,
		    "connected")) ? "yes" : "no");
		cmd_members_progress(t, m);
	}
	ctl_table_print(t);
	cmd_members_stragglers(members);
	json_decref(doc);
	return CTL_EXIT_OK;
}

/* Prints a batch of events; *last gets the highest sequence number. */
static void
cmd_events_print(struct ctl *ctl, json_t *arr, int follow, int64_t *last)
{
	struct ctl_table	*t = NULL;
	json_t			*ev;
	char			 tbuf[64];
	size_t			 i;

	if (!follow && !ctl->json &&
	    (t = ctl_table_new(">SEQ|TIME|EVENT")) == NULL)
		return;
	json_array_foreach(arr, i, ev) {
		if (ctl_jint(ev, "seq") > *last)
			*last = ctl_jint(ev, "seq");
		ctl_fmt_time(tbuf, sizeof tbuf, ctl_jint(ev, "time_ms"));
		if (ctl->json)
			ctl_print_json(ev);
		else if (t != NULL) {
			ctl_table_cell(t, "%" PRId64, ctl_jint(ev, "seq"));
			ctl_table_cell(t, "%s", tbuf);
			ctl_table_cell(t, "%s", ctl_jstr(ev, "text"));
		} else
			/* Streaming: fixed widths, the header came first. */
			printf("%5" PRId64 "  %-23s  %s\n", ctl_jint(ev, "seq"),
			    tbuf, ctl_jstr(ev, "text"));
	}
	if (t != NULL)
		ctl_table_print(t);
	fflush(stdout);
}

/* 1 when the job is closed (succeeded or failed), 0 if not, <0 error. */
static int
cmd_events_job_closed(struct ctl *ctl, struct rdzv_client *c, const char *job)
{
	json_t		*doc;
	const char	*state;
	char		*text;
	size_t		 len;
	int		 rv;

	rv = ctl_admin(c, ctl->o.timeout_ms, &text, &len, ctl->errmsg,
	    sizeof ctl->errmsg, NAT_OP_ADMIN_JOB, "b", job);
	if (rv != 0)
		return rv;
	if ((doc = ctl_parse(ctl, text, len)) == NULL) {
		free(text);
		return RDZV_EPROTO;
	}
	free(text);
	state = ctl_jstr(doc, "state");
	rv = strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0;
	json_decref(doc);
	return rv;
}

/*
 * events --follow: asks for what is new without waiting until nothing
 * is, then waits in rdzvd for the next batch, reconnecting (within
 * --timeout) when rdzvd restarts, until the job closes or a signal ends
 * it.  The non-waiting look comes first because rdzvd's wait is for the
 * next event to be written, not for any after --after.
 */
static int
cmd_events_follow(struct ctl *ctl, const char *job, const char *what,
    const char *hint)
{
	struct rdzv_client	*c = NULL;
	json_t			*arr;
	char			*text;
	size_t			 len, n;
	int64_t			 last = ctl->after;
	int			 status, rv, waiting = 0, closed = -1;

	ctl_catch_signals();
	for (;;) {
		if (c == NULL && (c = ctl_connect(&ctl->o, closed != -1,
		    &status)) == NULL)
			return status;
		if (closed == -1) {
			/* Also tells an unknown job before any output. */
			if ((rv = cmd_events_job_closed(ctl, c, job)) < 0)
				break;
			closed = rv;
			if (!ctl->json) {
				printf("%5s  %-23s  %s\n", "SEQ", "TIME", "EVENT");
				fflush(stdout);
			}
		}
		rv = ctl_admin(c, CTL_FOLLOW_WAIT_MS + ctl->o.timeout_ms, &text,
		    &len, ctl->errmsg, sizeof ctl->errmsg, NAT_OP_ADMIN_EVENTS,
		    "bii", job, last, (int64_t)(waiting ? CTL_FOLLOW_WAIT_MS :
		    0));
		n = 0;
		if (rv == 0 && (arr = ctl_parse(ctl, text, len)) != NULL) {
			n = json_array_size(arr);
			cmd_events_print(ctl, arr, 1, &last);
			json_decref(arr);
		}
		free(text);
		if (rv == 0 && !waiting) {
			if (n > 0)
				continue;
			if (closed == 1)
				break;		/* all read, nothing more comes */
			/* Closed since: one more look for its last events. */
			if ((rv = cmd_events_job_closed(ctl, c, job)) >= 0) {
				closed = rv;
				waiting = !closed;
				continue;
			}
		} else if (rv == 0) {
			waiting = 0;
			continue;
		}
		if (ctl_interrupted) {
			rv = 0;
			break;
		}
		if (rv == RDZV_ECONN || rv == RDZV_ETIMEDOUT) {
			/* rdzvd went away: a restart keeps the events. */
			fprintf(stderr, "rdzvctl: lost the connection to %s, "
			    "reconnecting\n", ctl->o.endpoint);
			rdzv_client_close(c);
			c = NULL;
			waiting = 0;
			continue;
		}
		break;
	}
	rdzv_client_close(c);
	if (rv < 0)
		return ctl_fail(ctl, rv, what, hint);
	return CTL_EXIT_OK;
}

int
cmd_events(struct ctl *ctl, int argc, char **argv)
{
	json_t	*doc;
	char	*text, what[300];
	size_t	 len;
	int64_t	 last = -1;
	int	 rv;

	snprintf(what, sizeof what, "job \"%s\"", argv[0]);
	if (ctl->follow)
		return cmd_events_follow(ctl, argv[0], what,
		    "`rdzvctl jobs` lists them");
	if ((rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them", &text,
	    &len, NAT_OP_ADMIN_EVENTS, "bii", argv[0], ctl->after,
	    (int64_t)0)) != 0)
		return rv;
	if ((rv = ctl_document(ctl, text, len, &doc)) != 0 || doc == NULL)
		return rv;
	if (json_array_size(doc) == 0)
		printf("no events\n");
	else
		cmd_events_print(ctl, doc, 0, &last);
	json_decref(doc);
	return CTL_EXIT_OK;
}

/* What `top` remembers between views. */
struct top_state {
	int64_t	 last_ev;		/* highest event seq seen */
	char	*ev[CTL_TOP_EVENTS];	/* newest last, malloc'ed */
	int64_t	 step, step_ms;		/* lowest step, when it last moved */
	double	 rate;
	int	 have_step;
};

static int64_t
cmd_top_now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Takes the new events of arr: kept for the screen, or printed at once
 * when plain. */
static void
cmd_top_events(struct top_state *ts, json_t *arr, int tty)
{
	json_t	*ev;
	char	 tbuf[64], line[512];
	size_t	 i;

	json_array_foreach(arr, i, ev) {
		if (ctl_jint(ev, "seq") > ts->last_ev)
			ts->last_ev = ctl_jint(ev, "seq");
		ctl_fmt_time(tbuf, sizeof tbuf, ctl_jint(ev, "time_ms"));
		snprintf(line, sizeof line, "%s  %s", tbuf,
		    ctl_jstr(ev, "text"));
		if (!tty) {
			printf("event %s\n", line);
			continue;
		}
		free(ts->ev[0]);
		memmove(ts->ev, ts->ev + 1, sizeof ts->ev - sizeof ts->ev[0]);
		ts->ev[CTL_TOP_EVENTS - 1] = strdup(line);
	}
}

/*
 * One view of doc (ADMIN_JOB's): the lowest step over the running
 * round's members, its rate (updated in ts), the slowest member.
 */
static void
cmd_top_view(struct top_state *ts, json_t *doc, int tty)
{
	json_t		*members, *m, *p, *slow = NULL;
	char		 age[32], stepbuf[64], ratebuf[32];
	int64_t		 lo = 0, n = 0, oldest = 0, now = cmd_top_now_ms();
	size_t		 i;
	int		 k;

	members = json_object_get(doc, "members");
	json_array_foreach(members, i, m) {
		p = json_object_get(m, "progress");
		if (!json_is_object(p) || ctl_jint(p, "ranks_reporting") <= 0)
			continue;
		if (n == 0 || ctl_jint(p, "min_step") < lo) {
			lo = ctl_jint(p, "min_step");
			slow = m;
		}
		if (ctl_jint(p, "oldest_report_ms_ago") > oldest)
			oldest = ctl_jint(p, "oldest_report_ms_ago");
		n += ctl_jint(p, "ranks_reporting");
	}
	if (n > 0 && ts->have_step && lo > ts->step)
		ts->rate = (double)(lo - ts->step) * 1000.0 /
		    (double)(now > ts->step_ms ? now - ts->step_ms : 1);
	if (n == 0 || !ts->have_step || lo != ts->step) {
		ts->step = lo;
		ts->step_ms = now;
		ts->have_step = n > 0;
	}
	if (n == 0 || now - ts->step_ms > CTL_TOP_STALL_MS)
		ts->rate = 0;
	if (n > 0)
		snprintf(stepbuf, sizeof stepbuf, "step %" PRId64 " (%" PRId64
		    " rank%s, %s ago)", lo, n, n == 1 ? "" : "s",
		    ctl_fmt_duration(age, sizeof age, oldest));
	else
		snprintf(stepbuf, sizeof stepbuf, "no progress reported");
	snprintf(ratebuf, sizeof ratebuf, "%.1f steps/s", ts->rate);
	if (!tty) {
		printf("job %s %s round %" PRId64 " world %" PRId64
		    " restarts %" PRId64 "/%" PRId64 " %s %s",
		    ctl_jstr(doc, "job"),
		    ctl_jstr(doc, "state"), ctl_jint(doc, "round"),
		    ctl_jint(doc, "world_size"), ctl_jint(doc, "restarts"),
		    ctl_jint(doc, "max_restarts"), stepbuf, ratebuf);
		if (slow != NULL)
			printf(" slowest node %" PRId64 " (%s)",
			    ctl_jint(slow, "node_id"), ctl_jstr(slow, "host"));
		putchar('\n');
		fflush(stdout);
		return;
	}
	/* Home, clear: one screen, redrawn in place. */
	printf("\033[H\033[2J");
	printf("\033[1mjob %s\033[0m  %s  round %" PRId64 "  world size %"
	    PRId64 "  restarts %" PRId64 "/%" PRId64 "\n\n",
	    ctl_jstr(doc, "job"), ctl_jstr(doc, "state"),
	    ctl_jint(doc, "round"), ctl_jint(doc, "world_size"),
	    ctl_jint(doc, "restarts"), ctl_jint(doc, "max_restarts"));
	printf("  progress  %s\n  rate      %s\n", stepbuf, ratebuf);
	if (slow != NULL)
		printf("  slowest   node %" PRId64 " on %s (rank %" PRId64
		    ")\n", ctl_jint(slow, "node_id"), ctl_jstr(slow, "host"),
		    ctl_jint(slow, "group_rank"));
	printf("\n  recent events\n");
	for (k = 0; k < CTL_TOP_EVENTS; k++)
		if (ts->ev[k] != NULL)
			printf("  %s\n", ts->ev[k]);
	fflush(stdout);
}

int
cmd_top(struct ctl *ctl, int argc, char **argv)
{
	struct top_state	 ts;
	struct timespec		 pause = { CTL_TOP_PERIOD_MS / 1000,
				    (CTL_TOP_PERIOD_MS % 1000) * 1000000L };
	json_t			*doc;
	char			*text, what[300];
	const char		*st;
	size_t			 len;
	int64_t			 views = 0;
	int			 rv, tty = isatty(STDOUT_FILENO), closed, k;

	if (ctl->json)
		return ctl_usage("top has no --json: `rdzvctl --json "
		    "members JOB` and `events JOB --follow` give the same");
	memset(&ts, 0, sizeof ts);
	ts.last_ev = -1;
	snprintf(what, sizeof what, "job \"%s\"", argv[0]);
	for (;;) {
		if ((rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them",
		    &text, &len, NAT_OP_ADMIN_EVENTS, "bii", argv[0],
		    ts.last_ev, (int64_t)0)) != 0)
			break;
		if ((doc = ctl_parse(ctl, text, len)) == NULL) {
			free(text);
			rv = CTL_EXIT_SERVER;
			break;
		}
		free(text);
		cmd_top_events(&ts, doc, tty);
		json_decref(doc);
		if ((rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them",
		    &text, &len, NAT_OP_ADMIN_JOB, "b", argv[0])) != 0)
			break;
		doc = ctl_parse(ctl, text, len);
		free(text);
		if (doc == NULL) {
			rv = CTL_EXIT_SERVER;
			break;
		}
		cmd_top_view(&ts, doc, tty);
		st = ctl_jstr(doc, "state");
		closed = strcmp(st, "succeeded") == 0 ||
		    strcmp(st, "failed") == 0;
		json_decref(doc);
		if (closed || (ctl->count > 0 && ++views >= ctl->count)) {
			rv = CTL_EXIT_OK;
			break;
		}
		nanosleep(&pause, NULL);
	}
	for (k = 0; k < CTL_TOP_EVENTS; k++)
		free(ts.ev[k]);
	return rv;
}

/*
 * close and forget: one request about job JOB that answers nothing, then
 * one line (or one JSON object) saying what was done.  Closing sends
 * the reason its nodes are given with their FAILED.
 */
static int
cmd_job_end(struct ctl *ctl, const char *job, int closing)
{
	json_t	*o;
	char	*text, what[300];
	size_t	 len;
	int	 rv;

	snprintf(what, sizeof what, "job \"%s\"", job);
	if (closing)
		rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them", &text,
		    &len, NAT_OP_ADMIN_CLOSE, "bb", job, ctl->reason);
	else
		rv = ctl_request(ctl, what, "`rdzvctl jobs` lists them", &text,
		    &len, NAT_OP_ADMIN_FORGET, "b", job);
	free(text);
	if (rv != 0)
		return rv;
	if (ctl->json) {
		if (closing)
			o = json_pack("{s:s, s:b, s:s}", "job", job, "closed",
			    1, "reason", ctl->reason);
		else
			o = json_pack("{s:s, s:b}", "job", job, "forgotten",
			    1);
		ctl_print_json(o);
		json_decref(o);
	} else if (closing)
		printf("closed job %s: its nodes get FAILED (%s)\n", job,
		    ctl->reason);
	else
		printf("forgot job %s: its id may be used again\n", job);
	return CTL_EXIT_OK;
}

int
cmd_close(struct ctl *ctl, int argc, char **argv)
{
	return cmd_job_end(ctl, argv[0], 1);
}

int
cmd_forget(struct ctl *ctl, int argc, char **argv)
{
	return cmd_job_end(ctl, argv[0], 0);
}

int
cmd_evict(struct ctl *ctl, int argc, char **argv)
{
	json_t		*o;
	const char	*errstr;
	char		*text, what[300];
	size_t		 len;
	long long	 node;
	int		 rv, leave;

	node = strtonum(argv[1], 0, LLONG_MAX, &errstr);
	if (errstr != NULL)
		return ctl_usage("evict: NODE_ID \"%s\" is %s: a node id "
		    "from `rdzvctl members %s`", argv[1], errstr, argv[0]);
	snprintf(what, sizeof what, "node %lld in job \"%s\"", node, argv[0]);
	rv = ctl_request(ctl, what, "`rdzvctl members JOB` lists its nodes",
	    &text, &len, NAT_OP_ADMIN_EVICT, "bii", argv[0], (int64_t)node,
	    (int64_t)ctl->now);
	/* "leave" or "now"; nothing from an rdzvd before leaving existed. */
	leave = text != NULL && strcmp(text, "leave") == 0;
	free(text);
	if (rv != 0)
		return rv;
	if (ctl->json) {
		o = json_pack("{s:s, s:I, s:b, s:s}", "job", argv[0], "node_id",
		    (json_int_t)node, "evicted", 1, "how",
		    leave ? "leave" : "now");
		ctl_print_json(o);
		json_decref(o);
	} else if (leave)
		printf("asked node %lld of job %s to leave: its workers finish "
		    "the step in flight, then the others go on without it "
		    "(`rdzvctl events %s` says when; --now drops it at "
		    "once)\n", node, argv[0], argv[0]);
	else
		printf("evicted node %lld from job %s: the job repairs around "
		    "it or a new round forms without it\n", node, argv[0]);
	return CTL_EXIT_OK;
}

/*
 * credential JOB: the job's credential, derived here from the operator's
 * secret; nothing is sent to rdzvd.
 */
int
cmd_credential(struct ctl *ctl, int argc, char **argv)
{
	struct rdzv_cred	 cred;
	uint8_t			*tok = NULL;
	size_t			 toklen = 0;
	char			 text[RDZV_CRED_FILE_MAX + 1], why[512];
	int			 insecure, n, fd, rv = CTL_EXIT_SERVER;
	FILE			*f;

	if (ctl->o.token_file == NULL) {
		fprintf(stderr, "rdzvctl: credential needs the operator's "
		    "secret: --token-file FILE or RDZV_TOKEN_FILE\n");
		return CTL_EXIT_USAGE;
	}
	if (!rdzv_cred_job_ok(argv[0], strlen(argv[0])))
		return ctl_usage("credential: \"%s\" is not a job id (1 to "
		    "%d printable characters, no space)", argv[0],
		    RDZV_CRED_JOB_MAX);
	if (rdzv_token_load(ctl->o.token_file, &tok, &toklen, &insecure, why,
	    sizeof why) != 0) {
		fprintf(stderr, "rdzvctl: %s\n", why);
		return CTL_EXIT_SERVER;
	}
	if (rdzv_cred_parse(tok, toklen, &cred, why, sizeof why) != 0) {
		fprintf(stderr, "rdzvctl: %s is a job credential, not the "
		    "operator's secret: a credential is derived from the "
		    "secret (rdzvd's --token-file)\n", ctl->o.token_file);
		goto out;
	}
	memcpy(cred.job, argv[0], strlen(argv[0]) + 1);
	cred.joblen = strlen(argv[0]);
	if (rdzv_cred_derive(tok, toklen, cred.job, cred.joblen,
	    cred.key) != 0 ||
	    (n = rdzv_cred_format(&cred, text, sizeof text)) < 0) {
		fprintf(stderr, "rdzvctl: cannot derive the credential\n");
		goto out;
	}
	if (ctl->out == NULL) {
		fwrite(text, 1, (size_t)n, stdout);
		rv = fflush(stdout) == 0 ? CTL_EXIT_OK : CTL_EXIT_SERVER;
		goto out;
	}
	if ((fd = open(ctl->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
	    0600)) == -1 || fchmod(fd, 0600) != 0 ||
	    (f = fdopen(fd, "w")) == NULL) {
		fprintf(stderr, "rdzvctl: cannot write %s: %s\n", ctl->out,
		    strerror(errno));
		goto out;
	}
	fwrite(text, 1, (size_t)n, f);
	if (fclose(f) != 0) {
		fprintf(stderr, "rdzvctl: cannot write %s: %s\n", ctl->out,
		    strerror(errno));
		goto out;
	}
	if (!ctl->json)
		fprintf(stderr, "wrote job %s's credential to %s\n", cred.job,
		    ctl->out);
	rv = CTL_EXIT_OK;
out:
	explicit_bzero(text, sizeof text);
	explicit_bzero(&cred, sizeof cred);
	if (tok != NULL) {
		explicit_bzero(tok, toklen);
		free(tok);
	}
	return rv;
}
