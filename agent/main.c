/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c: rdzv-agent's state machine.
 *
 * Ties rdzvd's pushes (rdzv.c), worker exits (sup.c) and the agent's own
 * signals together.  Everything is an event; nothing polls.
 *
 *   JOINING --RUNNING push--> RUNNING --all exit 0--> SUCCEEDED
 *      |                        |  |  (or all but replacements that
 *      |                        |  |  never stepped: reported with
 *      |                        |  |  SUCCEEDED, "stop" at DONE)
 *      |                        |  |                     | DONE push: exit 0
 *      | STANDBY push           |  +--worker fails: FAILURE to rdzvd,
 *      v                        |     begin_stop -------> STOPPING
 *   WAITING <--stop done--------+--STOP/STANDBY push: begin_stop
 *      ^                                                 | stop done:
 *      +-------------------------------------------------+ RUNNING push
 *                                                          pending? spawn
 *   any --SIGTERM, SIGINT, SIGHUP, SIGQUIT--> LEAVING: the signal to the
 *                   workers, SIGKILL after the grace, LEAVE, exit 128+signo
 *   RUNNING --SIGTERM or DRAIN push (rdzvctl evict), every worker can
 *                   repair--> LEAVING on purpose:
 *                   "leave" to each worker (it exits 0 at its next step
 *                   boundary), SIGTERM half-way through the grace,
 *                   SIGKILL at its end, then LEAVE (rdzvd shrinks the
 *                   round around this node), exit 0
 *   any --DRAIN push, otherwise--> LEAVING: SIGTERM to the workers,
 *                   LEAVE, exit 0
 *   any --SIGUSR1, SIGUSR2, --signals_to_handle--> the same state: the
 *                   signal to each worker (a preemption notice: they
 *                   checkpoint), supervising goes on
 *   any --FAILED push or fatal--> LEAVING (no LEAVE): stop, summary,
 *                   exit 1
 *
 * Every transition is made by agent_set_state(), which checks it against
 * agent_next[] and logs it at debug.
 *
 * A RUNNING push for the round already running (a re-JOIN after a
 * reconnect) changes nothing; one for another round while workers run
 * stops them first and spawns the new round when they are gone.
 *
 * The warm spares (--warm_spare, python programs): once every local worker
 * said it can repair, and again after a grow round took a replacement in,
 * agent_spare_want() has sup.c start one python that imports torch and
 * waits; a local worker's death then hands it the rank (sup_respawn)
 * instead of starting a cold python.  Workers that all report steps
 * without all saying they can repair (or that have run
 * AGENT_SPARE_SETTLE_MS without either) would restart on a failure:
 * then one spare per local worker waits, and the restart's workers are
 * those spares (sup_spawn), a warm restart.
 * Spares are no workers: they never count toward a round's exits, and
 * they are killed when the agent leaves.
 *
 * Before JOINING, the agent may host the rendezvous itself, an embedded
 * rdzvd on its event loop (host.c): --standalone; node rank 0
 * of a static rendezvous; under c10d the agent on the endpoint's host
 * that finds its port free.  It then joins it like any other agent.
 *
 * Why about 1,250 lines: the state machine's transitions and every
 * callback that drives them; the options (cli.c), the workers'
 * environment (env.c), the local ranks and the one way a worker starts
 * (rank.c) and the hosted rdzvd (host.c) live apart.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent.h"
#include "chan.h"
#include "log.h"
#include "mono.h"
#include "rdzv_err.h"
#include "rz.h"		/* RZ_REPAIR_LWS_MAX */
#include "wire.h"

enum agent_state {
	AS_JOINING = 0,	/* no round yet (the state the agent starts in) */
	AS_RUNNING,	/* workers of ag.cur run */
	AS_SUCCEEDED,	/* every worker exited 0; SUCCEEDED reported */
	AS_STOPPING,	/* stopping workers; then ag.next or WAITING */
	AS_WAITING,	/* no workers; waiting for a push */
	AS_LEAVING,	/* stopping for good: signal, FAILED, fatal */
	AS_NSTATES
};

static const char *const agent_state_names[AS_NSTATES] = {
	"joining", "running", "succeeded", "stopping", "waiting", "leaving"
};

#define AS_BIT(s)	(1u << (s))
/* Spares for a restart start once every local worker reported a step
 * without all saying they can repair (the repair helper says so with its
 * first step), or after this long without either (a job that reports
 * nothing): the workers' own imports and first steps have the CPU first. */
#define AGENT_SPARE_SETTLE_MS	30000
#define AGENT_SPARE_LOOK_MS	1000	/* how often the agent looks */
/*
 * The states each state may move to (the diagram above).  A round push
 * may come in any state but LEAVING, so most states reach most others;
 * SUCCEEDED follows only RUNNING, and nothing leaves LEAVING.
 */
static const unsigned agent_next[AS_NSTATES] = {
	[AS_JOINING] = AS_BIT(AS_RUNNING) | AS_BIT(AS_STOPPING) |
	    AS_BIT(AS_WAITING) | AS_BIT(AS_LEAVING),
	[AS_RUNNING] = AS_BIT(AS_RUNNING) | AS_BIT(AS_SUCCEEDED) |
	    AS_BIT(AS_STOPPING) | AS_BIT(AS_WAITING) | AS_BIT(AS_LEAVING),
	[AS_SUCCEEDED] = AS_BIT(AS_RUNNING) | AS_BIT(AS_STOPPING) |
	    AS_BIT(AS_WAITING) | AS_BIT(AS_LEAVING),
	[AS_STOPPING] = AS_BIT(AS_RUNNING) | AS_BIT(AS_WAITING) |
	    AS_BIT(AS_LEAVING),
	[AS_WAITING] = AS_BIT(AS_RUNNING) | AS_BIT(AS_STOPPING) |
	    AS_BIT(AS_WAITING) | AS_BIT(AS_LEAVING),
	[AS_LEAVING] = 0,
};

static struct {
	struct agent_config	 cfg;
	struct event_base	*base;
	enum agent_state	 state;
	struct rdzv_round	 cur;		/* round of the workers */
	struct rdzv_round	 next;		/* RUNNING push to start */
	int			 have_next;
	int			 nok;		/* workers exited 0 */
	int			 failed_now;	/* a failure this round */
	struct logs_failure	 first;		/* first local failure */
	struct sup_exit		*others;	/* the round's other exits */
	int			 nothers;	/* after first, not 0 */
	char			 job_failure[AGENT_MSG_MAX];
	int			 job_failed;
	int			 job_failure_here; /* the agent's own verdict */
	int			 exit_code;
	int			 signo;
	int			 embedded;
	char			 hostname[256];
	struct event		*sig_ev[4];
	struct event		*fwd_ev[NSIG];	/* forwarded signals */
	struct event		*join_ev;
	struct event		*watch_ev;	/* --progress_timeout */
	struct event		*drain_ev;	/* leaving on purpose: SIGTERM
						 * half-way through the grace */
	struct event		*spare_ev;	/* looks whether spares for a
						 * restart are wanted */
	int			 spare_restart;	/* they are */
	int64_t			 round_ms;	/* mono_ms the round began */
	int64_t			 stepped;	/* the latest round a worker
						 * committed a step in */
} ag;

static const int agent_signals[4] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT };

static void	agent_begin_stop(void);
static int	agent_respawn(int);
static uint64_t	agent_unjoined(void);
static int	agent_can_repair(void);
static void	agent_take_place(const struct rdzv_round *);
static void	agent_arm_join_timer(void);

/* Moves the agent to state s: the only place ag.state changes. */
static void
agent_set_state(enum agent_state s)
{
	if (!(agent_next[ag.state] & AS_BIT(s)))
		fatalx("agent: no transition %s -> %s",
		    agent_state_names[ag.state], agent_state_names[s]);
	if (s != ag.state)
		log_debug("agent: %s -> %s", agent_state_names[ag.state],
		    agent_state_names[s]);
	ag.state = s;
}

/*
 * Starts the warm spare when one is wanted and none runs: --warm_spare,
 * a python program (the spare runs python -u -m rdzv.spare PROGRAM
 * ARGS...: it pre-imports what is safe and waits), no --numa_binding
 * (the spare could not take a rank's CPUs and memory node), workers
 * running that can all repair, and no replacement of theirs still
 * starting (it would share the CPU with the spare's imports).
 */
static void
agent_spare_want(void)
{
	char	**argv, **vars = NULL, **env;
	size_t	  n = 0, cap = 0;
	int	  i, rv = 0, want;

	/* One for a replacement; one per worker for a restart. */
	if (progress_all_can_repair())
		want = 1;
	else if (ag.spare_restart)
		want = ag.cfg.nproc < SUP_SPARES_MAX ? ag.cfg.nproc :
		    SUP_SPARES_MAX;
	else
		return;
	if (!ag.cfg.warm_spare || ag.cfg.no_python || ag.cfg.argc < 3 ||
	    ag.cfg.numa_mode != SUP_NUMA_NONE || sup_spare_count() >= want ||
	    ag.state != AS_RUNNING || rank_any_pending())
		return;
	/* cli_command's python -u [-m] PROGRAM ARGS... */
	if ((argv = calloc(ag.cfg.argc + 3, sizeof *argv)) == NULL)
		fatalx("out of memory");
	argv[0] = ag.cfg.argv[0];
	argv[1] = "-u";
	argv[2] = "-m";
	argv[3] = "rdzv.spare";
	for (i = 2; i < ag.cfg.argc; i++)
		argv[i + 2] = ag.cfg.argv[i];
	env_defaults(&ag.cfg, &vars, &n, &cap);
	env_set(&vars, &n, &cap, "RDZV_SPARE_FD", "%d",
	    PROGRESS_CHILD_FD);
	env = env_merge(vars, n);
	while (rv == 0 && sup_spare_count() < want)
		rv = sup_spare_start(argv, env);
	env_free(env);
	free(argv);
	if (rv != 0 && rv != RDZV_EBUSY)
		log_warnx("cannot start a warm spare: %s; workers start cold",
		    rdzv_strerror(rv));
}

/* Whether every local worker has reported a step this round. */
static int
agent_all_stepped(void)
{
	uint64_t	step;
	int64_t		when;
	int		l;

	for (l = 0; l < ag.cfg.nproc; l++)
		if (progress_get(l, &step, &when) != 0)
			return (0);
	return (1);
}

/* Arms spare_ev to look again in AGENT_SPARE_LOOK_MS. */
static void
agent_spare_look(void)
{
	struct timeval	tv = { AGENT_SPARE_LOOK_MS / 1000,
			    (AGENT_SPARE_LOOK_MS % 1000) * 1000 };

	evtimer_add(ag.spare_ev, &tv);
}

/*
 * Every AGENT_SPARE_LOOK_MS of a running round until it is decided: a
 * job whose workers all said they can repair keeps one spare (the
 * hello starts it); one whose workers all step without saying so, or
 * that has run AGENT_SPARE_SETTLE_MS, keeps one per worker.
 */
static void
agent_spare_cb(evutil_socket_t fd, short ev, void *arg)
{
	if (ag.state != AS_RUNNING || progress_all_can_repair())
		return;
	if (agent_all_stepped() ||
	    mono_ms() - ag.round_ms >= AGENT_SPARE_SETTLE_MS) {
		ag.spare_restart = 1;
		agent_spare_want();
		return;
	}
	agent_spare_look();
}

/* Seconds from t (mono_ms) to now. */
static double
agent_age(int64_t t)
{
	return ((mono_ms() - t) / 1e3);
}

/*
 * The last step each local worker reported, so that a rank that stalled
 * long before the failure stands out from those that were still moving.
 */
static void
agent_summary_progress(const char *thin)
{
	int64_t		when;
	uint64_t	step;
	int		i, any = 0;

	for (i = 0; i < ag.cfg.nproc; i++) {
		if (progress_get(i, &step, &when) != 0)
			continue;
		if (!any)
			fprintf(stderr, "%s\nLast progress reported (step, "
			    "seconds ago):\n", thin);
		any = 1;
		fprintf(stderr, "  rank %lld (local_rank: %d): step %llu, "
		    "%.1f s ago%s\n", (long long)(ag.cur.rank_base + i), i,
		    (unsigned long long)step, agent_age(when),
		    rank_get(i)->hung_at != 0 ? " (no progress: stopped by "
		    "the watchdog)" : "");
	}
}

/* torchrun's failure summary, naming the first failure. */
static void
agent_summary(void)
{
	logs_summary(stderr, ag.cfg.program, ag.hostname, &ag.first,
	    ag.others, ag.nothers, ag.job_failed ? ag.job_failure : "",
	    ag.job_failure_here);
	agent_summary_progress(
	    "------------------------------------------------------------");
	logs_summary_end(stderr);
}

/* Ends the event loop with code (the summary first, for a failure). */
static void
agent_finish(int code)
{
	ag.exit_code = code;
	if (code == 1) {
		agent_summary();
		(void)logs_error_to_parent(ag.cfg.program, ag.hostname,
		    &ag.first, ag.job_failed ? ag.job_failure : "");
	}
	event_base_loopbreak(ag.base);
}

static void
agent_start_round(const struct rdzv_round *r)
{
	int	i, rv, warm, nwarm = 0;

	ag.cur = *r;
	ag.nok = 0;
	ag.failed_now = 0;
	/* The summary names the failure of the round that ended the job. */
	memset(&ag.first, 0, sizeof ag.first);
	ag.nothers = 0;
	agent_set_state(AS_RUNNING);
	log_info("round %lld: group rank %lld of %lld, ranks %lld-%lld of "
	    "%lld, restart %lld", (long long)r->round,
	    (long long)r->group_rank, (long long)r->group_world_size,
	    (long long)r->rank_base,
	    (long long)r->rank_base + ag.cfg.nproc - 1,
	    (long long)env_world(&ag.cfg, r), (long long)r->restart_count);
	rank_new_round();
	ag.spare_restart = 0;
	ag.round_ms = mono_ms();
	agent_spare_look();
	rdzv_set_repairable(0);		/* until every new worker says so */
	if ((rv = progress_attempt(ag.cfg.nproc)) != 0)
		log_warnx("workers cannot report progress this round: %s",
		    rdzv_strerror(rv));
	if ((rv = logs_attempt((int)r->restart_count, ag.cfg.nproc,
	    r->rank_base)) != 0) {
		log_warnx("cannot prepare the log directory: %s",
		    rdzv_strerror(rv));
		rdzv_report_failure(r->round, 0, r->rank_base, 127, 0, 0,
		    "rdzv-agent could not create its log directory");
		ag.failed_now = 1;
		agent_begin_stop();
		return;
	}
	for (i = 0; i < ag.cfg.nproc; i++) {
		rv = rank_spawn(rank_get(i), r, 0, &warm);
		nwarm += rv == 0 && warm;
		if (rv != 0) {
			rdzv_report_failure(r->round, i, r->rank_base + i,
			    127, 0, 0, "rdzv-agent could not fork the worker");
			ag.failed_now = 1;
			agent_begin_stop();
			return;
		}
	}
	if (nwarm > 0)
		log_info("round %lld: %d of %d workers from warm spares",
		    (long long)r->round, nwarm, ag.cfg.nproc);
}

static void
agent_stop_done(void *arg)
{
	logs_end_attempt();
	progress_end_attempt();
	if (ag.state == AS_LEAVING)
		return;		/* agent_leave_stopped runs instead */
	if (ag.have_next) {
		ag.have_next = 0;
		agent_start_round(&ag.next);
		return;
	}
	agent_set_state(AS_WAITING);
}

static void
agent_begin_stop(void)
{
	agent_set_state(AS_STOPPING);
	sup_stop(SIGTERM, ag.cfg.grace_ms, agent_stop_done, NULL);
}

/*
 * Appends what the worker's progress says to the failure message rdzvd
 * keeps in the job's events: the watchdog's verdict, or the last step it
 * reported and how long before it died.
 */
static void
agent_progress_note(int local_rank, char *msg, size_t msgsz)
{
	int64_t		when;
	uint64_t	step;
	char		note[256];
	const char	*sep = msg[0] != '\0' ? "; " : "";

	if (progress_get(local_rank, &step, &when) != 0)
		return;
	if (rank_get(local_rank)->strag_killed)
		snprintf(note, sizeof note, "%slast step %llu: killed by "
		    "rdzv-agent as a straggler (straggler_action=replace)",
		    sep, (unsigned long long)step);
	else if (rank_get(local_rank)->hung_at != 0)
		snprintf(note, sizeof note, "%sno progress for %g s after "
		    "step %llu: stopped by rdzv-agent's --progress_timeout",
		    sep, ag.cfg.progress_timeout_ms / 1000.0,
		    (unsigned long long)step);
	else
		snprintf(note, sizeof note, "%slast step %llu, reported %.1f "
		    "s before", sep, (unsigned long long)step,
		    agent_age(when));
	strlcat(msg, note, msgsz);
}

/*
 * --progress_timeout: a worker that has reported a step and then reports
 * none for the timeout is hung (stopped, stuck in its own code, a
 * collective waiting on a dead peer, a deadlock).  It gets SIGABRT, so
 * that it dumps core or a stack trace, then SIGKILL after the grace
 * period; its exit is an ordinary failure.  A worker that says "wait"
 * (librdzvworker and the torch helper do, about once a second, while a
 * collective of theirs is blocked on its peers) is given twice the
 * timeout plus the grace: the rank they wait on (a stopped one says
 * nothing; SIGCONT lets it take the SIGABRT) is killed first, and they
 * repair around it instead of dying with it; if all of them only wait
 * (a deadlock), they are killed that much later.  A worker that said
 * "done" (its training ended: a final evaluation or checkpoint takes no
 * steps) is not watched until it reports a step again.
 */
static void
agent_watch_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct agent_rank	*ar;
	int64_t		when, waited;
	uint64_t	step;
	double		limit = ag.cfg.progress_timeout_ms / 1000.0;
	double		grace = ag.cfg.grace_ms / 1000.0;
	int		i, peers, joining;

	if (ag.state != AS_RUNNING)
		return;
	for (i = 0; i < ag.cfg.nproc; i++) {
		if (progress_watch_get(i, &step, &when, &joining) != 0)
			continue;
		ar = rank_get(i);
		if (ar->hung_at != 0) {
			if (agent_age(ar->hung_at) * 1000 >= ag.cfg.grace_ms)
				(void)sup_signal_rank(i, SIGKILL);
			continue;
		}
		if (agent_age(when) < limit)
			continue;
		waited = progress_waited(i);
		peers = waited != 0 && agent_age(waited) < limit;
		if (peers && agent_age(when) < 2 * limit + grace)
			continue;
		if (sup_signal_rank(i, SIGABRT) != 0)
			continue;	/* already gone: its exit is reported */
		/* A stopped worker takes the SIGABRT once continued. */
		(void)sup_signal_rank(i, SIGCONT);
		ar->hung_at = mono_ms();
		if (joining)
			log_warnx("worker %d (rank %lld), a replacement, did "
			    "not join its round within %g s%s: sending "
			    "SIGABRT", i, (long long)(ag.cur.rank_base + i),
			    peers ? 2 * limit + grace : limit, peers ?
			    " (all that time waiting on its peers)" : "");
		else
			log_warnx("worker %d (rank %lld) reported no progress "
			    "for %g s after step %llu%s: sending SIGABRT", i,
			    (long long)(ag.cur.rank_base + i), peers ? 2 *
			    limit + grace : limit, (unsigned long long)step,
			    peers ? " (all that time waiting on its peers)" :
			    "");
	}
}

static uint64_t	agent_unjoined(void);

/*
 * This node's part of training is done when every local worker exited 0,
 * or every other one did and the rest are replacements that never
 * stepped (agent_unjoined): reports SUCCEEDED (rdzvd calls their grow
 * off).  Called at each exit 0, and when a replacement says ready after
 * one: a worker that failed after its peers here finished (killed on its
 * way out) is replaced, and that replacement has no step left to join.
 */
static void
agent_maybe_succeeded(void)
{
	struct agent_rank	*ar;
	uint64_t		 un = 0;
	int			 l;

	if (ag.state != AS_RUNNING || (ag.nok != ag.cfg.nproc &&
	    (un = agent_unjoined()) == 0))
		return;
	log_info("round %lld: every local worker succeeded%s",
	    (long long)ag.cur.round, un != 0 ? " but replacements that never "
	    "stepped: reported, rdzvd calls their grow off" : "");
	agent_set_state(AS_SUCCEEDED);
	for (l = 0; l < ag.cfg.nproc; l++) {
		ar = rank_get(l);
		ar->pending = 0;	/* no READY now */
		ar->unjoined = l < RZ_REPAIR_LWS_MAX &&
		    (un & (1ULL << l)) != 0;
	}
	logs_end_attempt();
	progress_end_attempt();
	rdzv_report_succeeded(ag.cur.round, (int64_t)un);
}

/* The exit of one worker. */
static void
agent_exit_cb(const struct sup_exit *x, void *arg)
{
	struct logs_failure	*f = &ag.first;
	char			 desc[64], msg[AGENT_MSG_MAX], stack[8192];
	char			 stamp[64], report[AGENT_MSG_MAX];
	int			 code, signo, rv;

	logs_drain(x->local_rank);
	if (ag.state != AS_RUNNING) {
		/* Stopped after this round's failure: torchrun lists them. */
		if (f->valid && f->round == ag.cur.round &&
		    ag.nothers < ag.cfg.nproc &&
		    !(WIFEXITED(x->status) && WEXITSTATUS(x->status) == 0))
			ag.others[ag.nothers++] = *x;
		return;		/* stopping: expected */
	}
	if (WIFEXITED(x->status) && WEXITSTATUS(x->status) == 0) {
		ag.nok++;
		agent_maybe_succeeded();
		return;
	}
	sup_describe(x->status, desc, sizeof desc);
	rv = logs_read_error(x->local_rank, msg, sizeof msg, stack,
	    sizeof stack, stamp, sizeof stamp);
	strlcpy(report, msg, sizeof report);
	agent_progress_note(x->local_rank, report, sizeof report);
	log_warnx("worker %d (rank %lld, pid %ld) failed: %s%s%s",
	    x->local_rank, (long long)(ag.cur.rank_base + x->local_rank),
	    (long)x->pid, desc, report[0] ? ": " : "", report);
	if (!f->valid) {
		f->valid = 1;
		f->local_rank = x->local_rank;
		f->rank = ag.cur.rank_base + x->local_rank;
		f->pid = x->pid;
		f->status = x->status;
		f->when = x->when;
		f->round = ag.cur.round;
		strlcpy(f->errfile, logs_error_file(x->local_rank),
		    sizeof f->errfile);
		strlcpy(f->message, msg, sizeof f->message);
		strlcpy(f->stack, stack, sizeof f->stack);
		strlcpy(f->stamp, stamp, sizeof f->stamp);
		f->has_errfile = rv == 0 || rv == RDZV_EPROTO;
	}
	if (WIFSIGNALED(x->status)) {
		signo = WTERMSIG(x->status);
		code = -signo;
	} else {
		signo = 0;
		code = WEXITSTATUS(x->status);
	}
	/* rdzvd words the exit code or signal itself. */
	if (agent_respawn(x->local_rank) == 0) {
		rdzv_report_failure(ag.cur.round, x->local_rank,
		    ag.cur.rank_base + x->local_rank, code, signo, 1, report);
		return;
	}
	ag.failed_now = 1;
	rdzv_report_failure(ag.cur.round, x->local_rank,
	    ag.cur.rank_base + x->local_rank, code, signo, 0, report);
	agent_begin_stop();
}

/* The replacements here (bit l: local rank l, up or on their way: a
 * dead one's next is) that reported no step on their channel. */
static uint64_t
agent_unstepped(void)
{
	uint64_t	step, un = 0;
	int64_t		when;
	int		l;

	for (l = 0; l < ag.cfg.nproc && l < RZ_REPAIR_LWS_MAX; l++)
		if (rank_get(l)->fresh && progress_get(l, &step, &when) != 0)
			un |= 1ULL << l;
	return (un);
}

/*
 * The replacements here that never stepped (bit l: local rank l, up or
 * on its way, no step on its channel), when every other local worker
 * exited 0; else 0.  A synchronous group never finishes without its
 * members, so training ended before they joined: the agent reports it
 * with SUCCEEDED, and rdzvd decides (it calls the grow off; the DONE
 * that follows stops them).  A replacement that joined and stepped (an
 * earlier repair's) is a worker like any: it must exit 0 too.
 */
static uint64_t
agent_unjoined(void)
{
	uint64_t	un = agent_unstepped();
	int		l;

	for (l = 0; l < ag.cfg.nproc && l < RZ_REPAIR_LWS_MAX; l++)
		if (sup_pid(l) <= 0)
			un &= ~(1ULL << l);	/* up ones only */
	if (un == 0 || ag.nok != ag.cfg.nproc -
	    __builtin_popcountll((unsigned long long)un))
		return (0);
	return (un);
}

/*
 * HEARTBEAT's mask: the replacements here that never stepped, up or on
 * their way (a dead one's next is), in a running round.  rdzvd closes a
 * job whose training ended once no member has a worker that trained to
 * wait for: a node whose every worker is such a replacement has none,
 * and no worker of it exits 0 to make it report SUCCEEDED.
 */
static int64_t
agent_unjoined_cb(void *arg)
{
	return (ag.state == AS_RUNNING ? (int64_t)agent_unstepped() : 0);
}

static int64_t
agent_stepped_cb(void *arg)
{
	return (ag.stepped);
}

/* DONE while replacements that never stepped still run (unjoined):
 * they have no step to do; each hears "stop" before the SIGTERM. */
static void
agent_stop_unjoined(void)
{
	struct agent_rank	*ar;
	int			 l;

	for (l = 0; l < ag.cfg.nproc; l++) {
		ar = rank_get(l);
		if (ar->unjoined && sup_pid(l) > 0) {
			log_info("worker %d: training ended before its "
			    "replacement joined (rdzvd called the grow off): "
			    "stopping the replacement", l);
			(void)progress_send(l, &(struct chan_msg){
			    .verb = CHAN_STOP });
		}
		ar->unjoined = 0;
	}
}

/*
 * Whether every local worker that is no replacement on its way said it
 * can repair (a replacement says so once it is up).
 */
static int
agent_can_repair(void)
{
	int	l;

	if (ag.cfg.nproc < 1)
		return (0);
	for (l = 0; l < ag.cfg.nproc; l++)
		if (!rank_get(l)->pending && !progress_can_repair(l))
			return (0);
	return (1);
}

/*
 * In-place recovery of local rank l, whose worker just died (a failure,
 * or killed by the watchdog): when every local worker said it can repair,
 * starts a replacement for l alone (no other worker is signalled; another
 * replacement here may be on its way); rdzvd then answers the FAILURE
 * with a shrink round, or STOP.  When l was itself a replacement still on
 * its way (killed while it loaded), this is the next one: rdzvd counts
 * such deaths and restarts the job past a few (rz_failure).  Returns 0
 * when it did, -1 (restart as before).
 */
static int
agent_respawn(int l)
{
	int	rv, warm;

	if (l >= RZ_REPAIR_LWS_MAX || !agent_can_repair())
		return (-1);
	if ((rv = rank_spawn(rank_get(l), &ag.cur, 1, &warm)) != 0) {
		log_warnx("worker %d cannot be replaced in place: %s; the "
		    "job restarts", l, rdzv_strerror(rv));
		return (-1);
	}
	return (0);
}

/*
 * A repair round for this node (kind shrink or grow): each live local
 * worker, the replacement too once it is in, hears its new rank over
 * its channel; no process is started or signalled.
 */
static void
agent_repair_round(const struct rdzv_round *r)
{
	struct chan_msg		rr;
	int			l, idx = 0, nlive = 0, rv;

	for (l = 0; l < ag.cfg.nproc && l < RZ_REPAIR_LWS_MAX; l++)
		if (r->live_local & (1LL << l))
			nlive++;
	log_info("round %lld: repair (%s): ranks from %lld of %lld, donor "
	    "%lld", (long long)r->round, r->kind == NAT_KIND_GROW ? "grow" :
	    "shrink", (long long)r->rank_base, (long long)r->world_size,
	    (long long)r->donor);
	ag.cur = *r;
	for (l = 0; l < ag.cfg.nproc && l < RZ_REPAIR_LWS_MAX; l++) {
		if (!(r->live_local & (1LL << l)))
			continue;
		memset(&rr, 0, sizeof rr);
		rr.verb = CHAN_ROUND;
		rr.round = (int)r->round;
		rr.kind = r->kind == NAT_KIND_GROW ? CHAN_GROW : CHAN_SHRINK;
		if (strlcpy(rr.ns, r->store_ns, sizeof rr.ns) >= sizeof rr.ns ||
		    strlcpy(rr.master_addr, rdzv_master_host(),
		    sizeof rr.master_addr) >= sizeof rr.master_addr) {
			log_warnx("worker %d: round %lld not sent: namespace or "
			    "address too long", l, (long long)r->round);
			continue;
		}
		rr.rank = (int)(r->rank_base + idx);
		rr.world = (int)r->world_size;
		rr.donor = (int)r->donor;
		rr.master_port = (int)r->store_port;
		rr.local_rank = idx++;	/* among the live, as its rank */
		rr.local_world = nlive;
		if ((rv = progress_send(l, &rr)) != 0)
			log_warnx("worker %d: round %lld not sent: %s", l,
			    (long long)r->round, rdzv_strerror(rv));
		else
			progress_touch(l);	/* its rebuild starts now */
	}
	/* A replacement is in: the next one may have a spare again. */
	if (r->kind == NAT_KIND_GROW)
		agent_spare_want();
}

/*
 * A standby takes a lost node's place, or a node joins a running job in
 * place, in repair round r (none of its workers in it yet): every worker
 * starts as a replacement (RDZV_REPLACEMENT=1 by agent_worker_vars),
 * says ready when it is up, and joins when the READYs grow the round.
 */
static void
agent_take_place(const struct rdzv_round *r)
{
	int	l;

	log_info("round %lld: this node takes a lost node's place or joins "
	    "in place (group rank %lld): starting %d workers as replacements",
	    (long long)r->round, (long long)r->group_rank, ag.cfg.nproc);
	logs_end_attempt();
	progress_end_attempt();
	agent_start_round(r);
	if (ag.state == AS_RUNNING && ag.cfg.nproc < RZ_REPAIR_LWS_MAX)
		for (l = 0; l < ag.cfg.nproc; l++)
			rank_get(l)->pending = 1;
}

/* A worker said hello or ready on its channel, or its first step. */
static void
agent_note_cb(int l, enum progress_note note, void *arg)
{
	if (note == PROGRESS_STEP && rank_get(l)->fresh) {
		/* A replacement's first report, the step it received as it
		 * joined (no step of its own): rdzvd may take it for a
		 * donor now. */
		rdzv_unjoined_changed();
		return;
	}
	if (note == PROGRESS_STEP || note == PROGRESS_MOVED) {
		/* A step committed in the round sent last (a worker's first
		 * of the attempt, or its first past the mark a repair round
		 * set): a grow after a shrink waits for one (PROTOCOL.md,
		 * READY), so rdzvd hears of it at once. */
		if (ag.cur.round > ag.stepped) {
			ag.stepped = ag.cur.round;
			rdzv_stepped_changed();
		}
		return;
	}
	if (note == PROGRESS_HELLO) {
		/* A replacement in place not up yet runs the program of the
		 * worker it replaces, which said it can repair. */
		rdzv_set_repairable(progress_all_can_repair() ||
		    (rank_any_fresh() && agent_can_repair()));
		agent_spare_want();
		return;
	}
	if (note == PROGRESS_READY && rank_get(l)->pending &&
	    ag.state == AS_RUNNING) {
		rank_get(l)->pending = 0;
		/* A worker here finished: the group has no step left. */
		if (ag.nok > 0) {
			log_info("worker %d: its replacement is ready, but "
			    "training ended: not reported", l);
			agent_maybe_succeeded();
			return;
		}
		log_info("worker %d: its replacement is ready", l);
		rdzv_report_ready(ag.cur.round, l);
	}
}

/* Workers gone for good: LEAVE (at once a no-op once rdzv is shut). */
static void
agent_leave_stopped(void *arg)
{
	evtimer_del(ag.drain_ev);
	logs_end_attempt();
	progress_end_attempt();
	rdzv_leave(ag.cfg.close_ms);
}

static void
agent_left_cb(void *arg)
{
	agent_finish(ag.exit_code);
}

/* Stops for good: workers get sig (SIGKILL after the grace). */
static void
agent_leave(int sig, int code)
{
	agent_set_state(AS_LEAVING);
	ag.have_next = 0;
	ag.exit_code = code;
	sup_spare_stop();
	sup_stop(sig, ag.cfg.grace_ms, agent_leave_stopped, NULL);
}

/* Leaving on purpose: workers still running get SIGTERM now. */
static void
agent_drain_cb(evutil_socket_t fd, short ev, void *arg)
{
	int	l, n = 0;

	for (l = 0; l < ag.cfg.nproc; l++)
		if (sup_signal_rank(l, SIGTERM) == 0)
			n++;
	if (n > 0)
		log_warnx("%d worker%s did not leave at a step boundary within "
		    "half the grace period: SIGTERM", n, n == 1 ? "" : "s");
}

/*
 * SIGTERM to the agent of a job that repairs in place (every local
 * worker said it can, none is being replaced, other nodes in the
 * round), or rdzvctl evict (cause says which): the node leaves on
 * purpose instead of failing.  Each worker hears "leave", finishes the
 * step in flight and exits 0 at the step boundary after it; once they
 * are gone the agent sends LEAVE and rdzvd shrinks the round around this
 * node, so the others lose no step.  A worker still running half-way
 * through the grace period gets SIGTERM, at its end SIGKILL.  Returns 0
 * when it began, -1 when the agent must stop as before.
 */
static int
agent_leave_on_purpose(const char *cause)
{
	struct timeval	tv;
	int		n, half = ag.cfg.grace_ms / 2;

	/* Alone in the job there is nobody to go on: stop as before. */
	if (ag.state != AS_RUNNING || rank_any_pending() || sup_live() == 0 ||
	    ag.cur.group_world_size < 2 || !progress_all_can_repair())
		return (-1);
	n = progress_send_all(&(struct chan_msg){ .verb = CHAN_LEAVE });
	if (n <= 0)
		return (-1);
	log_info("%s: leaving job %s on purpose: %d worker%s finish "
	    "their step in flight (grace %g s), then rdzvd shrinks the round "
	    "around this node", cause, ag.cfg.rdzv_id, n, n == 1 ? "" : "s",
	    ag.cfg.grace_ms / 1000.0);
	agent_set_state(AS_LEAVING);
	ag.have_next = 0;
	ag.exit_code = 0;
	sup_spare_stop();
	tv.tv_sec = half / 1000;
	tv.tv_usec = (half % 1000) * 1000;
	evtimer_add(ag.drain_ev, &tv);
	/* No signal: they go by themselves; SIGKILL after the grace. */
	sup_stop(0, ag.cfg.grace_ms, agent_leave_stopped, NULL);
	return (0);
}

static void
agent_signal_cb(evutil_socket_t sig, short ev, void *arg)
{
	if (ag.state == AS_LEAVING) {
		log_warnx("signal %d again: killing the workers", (int)sig);
		sup_kill_now();
		return;
	}
	ag.signo = sig;
	if (sig == SIGTERM && agent_leave_on_purpose("SIGTERM") == 0)
		return;
	log_info("signal %d (SIG%s): stopping the workers", (int)sig,
	    sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
	agent_leave(sig, 128 + sig);
}

/*
 * A signal the workers should hear while the job goes on: Slurm's
 * --signal=USR1@N preemption notice, or what --signals_to_handle names.
 */
static void
agent_forward_cb(evutil_socket_t sig, short ev, void *arg)
{
	const char	*name = sigabbrev_np(sig);
	int		 n;

	n = sup_forward(sig);
	log_info("signal %d (SIG%s): forwarded to %d worker%s", (int)sig,
	    name != NULL ? name : "?", n, n == 1 ? "" : "s");
}

static void
agent_round_cb(const struct rdzv_round *r, void *arg)
{
	if (ag.state == AS_LEAVING)
		return;
	switch (r->state) {
	case RDZV_ROUND_RUNNING:
		evtimer_del(ag.join_ev);
		if ((ag.state == AS_RUNNING || ag.state == AS_SUCCEEDED) &&
		    r->round == ag.cur.round) {
			log_debug("round %lld still running", (long long)r->round);
			return;
		}
		/*
		 * After a reconnect rdzvd may tell us of the round we already
		 * reported a failure in, before it reads the report again:
		 * only a later round restarts the workers.
		 */
		if (ag.failed_now && r->round == ag.cur.round) {
			log_debug("round %lld failed here; waiting for the next",
			    (long long)r->round);
			return;
		}
		if (r->kind != NAT_KIND_NORMAL) {
			if (ag.state == AS_RUNNING && r->round > ag.cur.round)
				agent_repair_round(r);
			else if (r->live_local == 0 && sup_live() == 0 &&
			    ag.state != AS_STOPPING && ag.state != AS_SUCCEEDED)
				agent_take_place(r);
			else
				log_warnx("repair round %lld ignored: no "
				    "workers running here", (long long)r->round);
			return;
		}
		if (sup_live() > 0) {
			ag.next = *r;
			ag.have_next = 1;
			if (ag.state != AS_STOPPING)
				agent_begin_stop();
			return;
		}
		if (ag.state == AS_STOPPING) {
			/* The stop callback is still to run. */
			ag.next = *r;
			ag.have_next = 1;
			return;
		}
		logs_end_attempt();
		progress_end_attempt();
		agent_start_round(r);
		return;
	case RDZV_ROUND_STANDBY:
	case RDZV_ROUND_STOP:
		if (r->state == RDZV_ROUND_STANDBY) {
			evtimer_del(ag.join_ev);
			log_info("standby: job %s has its maximum of nodes",
			    ag.cfg.rdzv_id);
		} else {
			log_info("round %lld stopped", (long long)r->round);
			/* The next round, too, must form within the timeout. */
			agent_arm_join_timer();
		}
		ag.have_next = 0;
		/* A repair that escalated: repairing workers exit now. */
		if (r->state == RDZV_ROUND_STOP)
			(void)progress_send_all(&(struct chan_msg){
			    .verb = CHAN_STOP });
		if (sup_live() > 0 || ag.state == AS_STOPPING) {
			if (ag.state != AS_STOPPING)
				agent_begin_stop();
			return;
		}
		agent_set_state(AS_WAITING);
		return;
	case RDZV_ROUND_DONE:
		log_info("job %s succeeded", ag.cfg.rdzv_id);
		agent_stop_unjoined();
		if (sup_live() > 0) {
			agent_leave(SIGTERM, 0);
			return;
		}
		agent_finish(0);
		return;
	case RDZV_ROUND_FAILED:
		ag.job_failed = 1;
		ag.job_failure_here = 0;
		strlcpy(ag.job_failure, r->message, sizeof ag.job_failure);
		log_warnx("job %s failed: %s", ag.cfg.rdzv_id, r->message);
		if (sup_live() > 0) {
			agent_leave(SIGTERM, 1);
			ag.exit_code = 1;
			return;
		}
		agent_finish(1);
		return;
	default:
		log_warnx("ROUND push with unknown state %lld ignored",
		    (long long)r->state);
	}
}

static void
agent_fatal_cb(int code, const char *msg, void *arg)
{
	log_warnx("%s", msg);
	ag.job_failed = 1;
	ag.job_failure_here = 1;
	strlcpy(ag.job_failure, msg, sizeof ag.job_failure);
	if (ag.state == AS_LEAVING)
		return;		/* leaving anyway; LEAVE gives up itself */
	agent_leave(SIGTERM, 1);
}

static void
agent_joined_cb(int64_t node_id, int64_t restarts, void *arg)
{
}

static void
agent_join_timeout_cb(evutil_socket_t fd, short ev, void *arg)
{
	char	buf[128];

	snprintf(buf, sizeof buf, "no round started within the join "
	    "timeout (%d s)", ag.cfg.join_timeout_ms / 1000);
	agent_fatal_cb(RDZV_ETIMEDOUT, buf, NULL);
}

static void
agent_arm_join_timer(void)
{
	struct timeval	tv;

	tv.tv_sec = ag.cfg.join_timeout_ms / 1000;
	tv.tv_usec = (ag.cfg.join_timeout_ms % 1000) * 1000;
	evtimer_add(ag.join_ev, &tv);
}

/*
 * rdzvd named local rank l a straggler in round (straggler_action=
 * replace): it is killed, and its exit is a failure like any other
 * (respawned, the job repairing around it).
 */
static void
agent_straggler_cb(int64_t round, int l, void *arg)
{
	if (ag.state != AS_RUNNING || round != ag.cur.round) {
		log_info("worker %d: straggler of round %lld not replaced: "
		    "this node is past that round", l, (long long)round);
		return;
	}
	log_warnx("worker %d (rank %lld): rdzvd names it a straggler: "
	    "killing it to be replaced", l, (long long)(ag.cur.rank_base + l));
	if (sup_signal_rank(l, SIGKILL) == 0 && l < RZ_REPAIR_LWS_MAX)
		rank_get(l)->strag_killed = 1;
}

/*
 * rdzvd asks this node to leave (rdzvctl evict): at its workers' next
 * step boundary, as SIGTERM does; when they cannot (not every one can
 * repair, none running), they are stopped now.  Either way the agent
 * sends LEAVE and exits 0: it went as asked.
 */
static void
agent_evicted_cb(int64_t round, const char *why, void *arg)
{
	if (ag.state == AS_LEAVING)
		return;
	if (agent_leave_on_purpose(why) == 0)
		return;
	log_info("%s: stopping the workers (they cannot leave at a step "
	    "boundary)", why);
	agent_leave(SIGTERM, 0);
}

static const struct rdzv_cbs agent_rdzv_cbs = {
	.joined = agent_joined_cb,
	.round = agent_round_cb,
	.fatal = agent_fatal_cb,
	.left = agent_left_cb,
	.straggler = agent_straggler_cb,
	.drain = agent_evicted_cb,
	.unjoined = agent_unjoined_cb,
	.stepped = agent_stepped_cb,
};

/* --dry_run: the configuration and each worker's variables. */
static void
agent_dry_run(void)
{
	struct rdzv_round	 r;
	char			**vars;
	size_t			  n, j;
	int			  i;

	cli_print(&ag.cfg, stdout);
	memset(&r, 0, sizeof r);
	r.group_world_size = 1;
	r.world_size = ag.cfg.nproc;
	r.max_restarts = ag.cfg.max_restarts;
	r.node_id = 0;
	r.store_port = 0;
	for (i = 0; i < ag.cfg.nproc; i++) {
		vars = env_vars(&ag.cfg, i, &r, &n);
		for (j = 0; j < n; j++) {
			printf("env[%d] %s\n", i, vars[j]);
			free(vars[j]);
		}
		free(vars);
	}
}

int
main(int argc, char **argv)
{
	int	rv, i;

	signal(SIGPIPE, SIG_IGN);
	log_init("rdzv-agent", 1, NULL);
	rv = cli_parse(&ag.cfg, argc, argv);
	if (rv == 1)
		return (0);
	if (rv != 0)
		return (2);
	if (ag.cfg.verbose)
		log_setlevel(LOG_LVL_DEBUG);
	if (ag.cfg.dry_run) {
		agent_dry_run();
		return (0);
	}
	if (gethostname(ag.hostname, sizeof ag.hostname) == -1)
		strlcpy(ag.hostname, "localhost", sizeof ag.hostname);
	ag.hostname[sizeof ag.hostname - 1] = '\0';
	if ((ag.base = event_base_new()) == NULL)
		fatalx("event_base_new");
	if (host_rendezvous(&ag.cfg, ag.base, &ag.embedded) != 0)
		return (1);
	if ((rv = logs_init(ag.base, &ag.cfg)) != 0) {
		log_warnx("cannot create the log directory: %s",
		    rdzv_strerror(rv));
		return (1);
	}
	if (sup_init(ag.base, agent_exit_cb, NULL) != 0)
		fatalx("cannot watch SIGCHLD");
	(void)sup_numa_init(&ag.cfg);
	for (i = 0; i < 4; i++) {
		ag.sig_ev[i] = evsignal_new(ag.base, agent_signals[i],
		    agent_signal_cb, NULL);
		if (ag.sig_ev[i] == NULL || evsignal_add(ag.sig_ev[i],
		    NULL) == -1)
			fatalx("cannot watch signal %d", agent_signals[i]);
	}
	for (i = 1; i < NSIG; i++) {
		if (sigismember(&ag.cfg.fwd_signals, i) != 1)
			continue;
		ag.fwd_ev[i] = evsignal_new(ag.base, i, agent_forward_cb, NULL);
		if (ag.fwd_ev[i] == NULL || evsignal_add(ag.fwd_ev[i],
		    NULL) == -1)
			fatalx("cannot watch signal %d", i);
	}
	ag.join_ev = evtimer_new(ag.base, agent_join_timeout_cb, NULL);
	ag.drain_ev = evtimer_new(ag.base, agent_drain_cb, NULL);
	ag.spare_ev = evtimer_new(ag.base, agent_spare_cb, NULL);
	if (ag.join_ev == NULL || ag.drain_ev == NULL || ag.spare_ev == NULL)
		fatalx("evtimer_new");
	progress_init(ag.base);
	progress_set_cb(agent_note_cb, NULL);
	rank_init(&ag.cfg);
	if ((ag.others = calloc(ag.cfg.nproc, sizeof *ag.others)) == NULL)
		fatalx("out of memory");
	if (ag.cfg.progress_timeout_ms > 0) {
		struct timeval	tv;
		int		ms = ag.cfg.progress_timeout_ms / 4;

		/* A tick of a quarter of the timeout, at most a second. */
		ms = ms > 1000 ? 1000 : ms < 10 ? 10 : ms;
		tv.tv_sec = ms / 1000;
		tv.tv_usec = (ms % 1000) * 1000;
		ag.watch_ev = event_new(ag.base, -1, EV_PERSIST,
		    agent_watch_cb, NULL);
		if (ag.watch_ev == NULL || event_add(ag.watch_ev, &tv) == -1)
			fatalx("cannot start the progress watchdog");
	}
	agent_arm_join_timer();
	log_info("job %s: %d worker%s here, %d-%d nodes, %s rendezvous %s%s",
	    ag.cfg.rdzv_id, ag.cfg.nproc, ag.cfg.nproc == 1 ? "" : "s",
	    ag.cfg.nnodes_min, ag.cfg.nnodes_max, ag.cfg.rdzv_backend,
	    ag.cfg.endpoint, ag.embedded ? " (hosted here)" : "");
	/* A shared rdzvd: two users who both left the id alone would share
	 * a job, each one's nodes joining the other's rounds. */
	if (!ag.embedded && strcmp(ag.cfg.rdzv_id, AGENT_DEFAULT_ID) == 0)
		log_warnx("--rdzv_id is \"%s\", the default, with the rdzvd at "
		    "%s: every agent started without --rdzv_id there joins "
		    "this same job; give each job an id of its own",
		    AGENT_DEFAULT_ID, ag.cfg.endpoint);
	if ((rv = rdzv_start(ag.base, &ag.cfg, &agent_rdzv_cbs, NULL)) != 0) {
		/* A token or CA problem was logged with its file already. */
		if (rv == RDZV_EINVAL)
			log_warnx("bad rdzvd endpoint %s", ag.cfg.endpoint);
		return (2);
	}
	event_base_dispatch(ag.base);

	sup_spare_stop();
	rdzv_shutdown();
	logs_end_attempt();
	progress_end_attempt();
	logs_cleanup();
	if (ag.embedded)
		host_stop();
	fflush(stdout);
	return (ag.exit_code);
}
