/* SPDX-License-Identifier: Apache-2.0 */
/*
 * repair_drv.c: drives rdzv-agent's local repair pieces (agent/sup.c,
 * agent/progress.c, common/chan.c) with real worker processes, as the
 * agent's main loop will once rdzvd opens repair rounds; for
 * tests/integ/agent_repair.py, which checks what the workers saw, and
 * routes their output through agent/logs.c as the agent does.
 *
 *   repair_drv hello NPROC [OPTION...] PROG [ARG...]
 *	spawns NPROC workers, waits until each has reported a step, prints
 *	what each said ("can_repair R V", "all V"), sends "stop" to all and
 *	waits for their exits.
 *   repair_drv repair NPROC KILL [OPTION...] PROG [ARG...]
 *	spawns NPROC workers and, once all said "hello repair=1", prints
 *	"all-can-repair"; the test kills local rank KILL.  On that exit
 *	the survivors get a shrink round (2), KILL a fresh socket, fresh
 *	output streams (logs_rearm) and a replacement; on its "ready" every
 *	rank gets a grow round (3); once every worker reports step 3000
 *	(its round times 1000), "stop".
 *
 * OPTIONs are rdzv-agent's (cli_parse, with --nproc_per_node NPROC
 * --no_python before them): --tee, --redirects, --log_dir and the line
 * prefix template decide where the workers' output goes, as in the
 * agent; attempt 1 of the run directory holds the log files.  Workers
 * get RDZV_PROGRESS_FD, RDZV_LOCAL_RANK, RANK, WORLD_SIZE,
 * RDZV_NAMESPACE (job/t/round/1) and TORCHELASTIC_ERROR_FILE on top of
 * the driver's environment.
 * Every event is one line on stdout; exit 0 when the scenario ran to its
 * end, 1 on a deadline (60 s) or an unexpected turn.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent.h"
#include "chan.h"
#include "log.h"
#include "rdzv_err.h"

#define DRV_DEADLINE_S	60
#define DRV_FINAL_STEP	3000

static struct {
	struct event_base	*base;
	struct agent_config	 cfg;
	int			 repair;	/* mode */
	int			 nproc;
	int			 kill;		/* local rank the test kills */
	char			**argv;		/* the worker's */
	int			 all_said;	/* printed all-can-repair */
	int			 respawned;
	int			 grown;
	int			 stopped;
	int			 failed;
	struct event		*tick_ev;
} drv;

static void
drv_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
drv_say(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void
drv_fail(const char *what)
{
	drv_say("error %s", what);
	drv.failed = 1;
	sup_kill_now();
	event_base_loopbreak(drv.base);
}

/* The environment of local rank r: ours plus what an agent sets. */
static char **
drv_env(int r)
{
	extern char	**environ;
	char		**e;
	size_t		  n, i, k = 0;

	for (n = 0; environ[n] != NULL; n++)
		;
	if ((e = calloc(n + 7, sizeof *e)) == NULL)
		fatalx("out of memory");
	for (i = 0; i < n; i++)
		e[k++] = strdup(environ[i]);
	if (asprintf(&e[k++], "RDZV_PROGRESS_FD=%d", PROGRESS_CHILD_FD) == -1 ||
	    asprintf(&e[k++], "RDZV_LOCAL_RANK=%d", r) == -1 ||
	    asprintf(&e[k++], "RANK=%d", r) == -1 ||
	    asprintf(&e[k++], "WORLD_SIZE=%d", drv.nproc) == -1 ||
	    asprintf(&e[k++], "RDZV_NAMESPACE=job/t/round/1") == -1 ||
	    asprintf(&e[k++], "TORCHELASTIC_ERROR_FILE=%s",
	    logs_error_file(r)) == -1)
		fatalx("out of memory");
	e[k] = NULL;
	for (i = 0; i < k; i++)
		if (e[i] == NULL)
			fatalx("out of memory");
	return (e);
}

static void
drv_free_env(char **e)
{
	size_t	i;

	for (i = 0; e[i] != NULL; i++)
		free(e[i]);
	free(e);
}

/* Sends round rnd to local rank r as global rank of world. */
static int
drv_round(int r, int rnd, enum chan_kind kind, int rank, int world,
    int donor)
{
	struct chan_msg	rr;

	memset(&rr, 0, sizeof rr);
	rr.verb = CHAN_ROUND;
	rr.round = rnd;
	rr.kind = kind;
	snprintf(rr.ns, sizeof rr.ns, "job/t/round/%d", rnd);
	rr.rank = rank;
	rr.world = world;
	rr.donor = donor;
	strlcpy(rr.master_addr, "127.0.0.1", sizeof rr.master_addr);
	rr.master_port = 29400 + rnd;
	rr.local_rank = r;
	rr.local_world = drv.nproc;
	return (progress_send(r, &rr));
}

/* Sends "stop" to local rank r, or to every rank when r is -1. */
static int
drv_stop_msg(int r)
{
	struct chan_msg	m;

	memset(&m, 0, sizeof m);
	m.verb = CHAN_STOP;
	return (r == -1 ? progress_send_all(&m) : progress_send(r, &m));
}

static void
drv_note_cb(int r, enum progress_note note, void *arg)
{
	int	i, rv;

	if (note == PROGRESS_HELLO) {
		drv_say("hello %d can_repair=%d all=%d", r,
		    progress_can_repair(r), progress_all_can_repair());
		if (drv.repair && !drv.all_said && progress_all_can_repair()) {
			drv.all_said = 1;
			for (i = 0; i < drv.nproc; i++)
				drv_say("pid %d %ld", i, (long)sup_pid(i));
			drv_say("all-can-repair");
		}
		return;
	}
	if (note == PROGRESS_STEP)
		return;		/* the agent's HEARTBEAT; none here */
	drv_say("ready %d replacement=%d", r, drv.respawned);
	if (!drv.repair || r != drv.kill || !drv.respawned || drv.grown) {
		drv_fail("unexpected ready");
		return;
	}
	drv.grown = 1;
	/* Every rank, the replacement included: round 3 of nproc ranks. */
	for (i = 0; i < drv.nproc; i++) {
		rv = drv_round(i, 3, CHAN_GROW, i, drv.nproc,
		    drv.kill == 0 ? 1 : 0);
		drv_say("grow %d rv=%d", i, rv);
	}
}

/* The test killed local rank kill: shrink the others, replace it. */
static void
drv_replace(int k)
{
	struct chan_msg		bad;
	char			msg[AGENT_MSG_MAX], stack[8192], stamp[64];
	char			moved[4096];
	pid_t			pid;
	int			i, n, rv, out_fd, err_fd;

	/* Its hello still counts: this is the check main.c will make. */
	drv_say("at-exit all=%d", progress_all_can_repair());
	for (i = 0, n = 0; i < drv.nproc; i++) {
		if (i == k)
			continue;
		rv = drv_round(i, 2, CHAN_SHRINK, n++, drv.nproc - 1, 0);
		drv_say("shrink %d rv=%d", i, rv);
	}
	/* The dead worker's socket: nobody reads it any more. */
	drv_say("send-dead rv=%d", drv_stop_msg(k));
	if ((rv = progress_rearm(k)) != 0) {
		drv_fail("progress_rearm");
		return;
	}
	drv_say("rearmed all=%d ready=%d", progress_all_can_repair(),
	    progress_ready(k));
	/* A namespace with a space is refused and nothing goes out. */
	memset(&bad, 0, sizeof bad);
	bad.verb = CHAN_ROUND;
	bad.kind = CHAN_GROW;
	strlcpy(bad.ns, "job/a b/round/3", sizeof bad.ns);
	bad.world = 1;
	strlcpy(bad.master_addr, "127.0.0.1", sizeof bad.master_addr);
	bad.master_port = 29403;
	bad.local_world = 1;
	drv_say("bad-ns rv=%d", progress_send(k, &bad));
	/* The predecessor's error, read before its file moves aside. */
	rv = logs_read_error(k, msg, sizeof msg, stack, sizeof stack, stamp,
	    sizeof stamp);
	drv_say("errfile-old rv=%d stamp=%s msg=%s", rv, stamp, msg);
	drv_say("rearm-bad rv=%d", logs_rearm(drv.nproc, &out_fd, &err_fd,
	    NULL, 0));
	if ((rv = logs_rearm(k, &out_fd, &err_fd, moved, sizeof moved)) !=
	    0) {
		drv_fail("logs_rearm");
		return;
	}
	drv_say("logs-rearm moved=%s", moved);
	rv = logs_read_error(k, msg, sizeof msg, stack, sizeof stack, stamp,
	    sizeof stamp);
	drv_say("errfile-new rv=%d", rv);
	rv = sup_respawn(k, out_fd, err_fd, progress_child_fd(k), &pid,
	    NULL);
	logs_spawned(k);
	progress_spawned(k);
	if (rv != 0) {
		drv_fail("sup_respawn");
		return;
	}
	drv.respawned = 1;
	drv_say("respawned %d %ld", k, (long)pid);
	drv_say("respawn-again rv=%d", sup_respawn(k, -1, -1, -1, NULL, NULL));
}

static void
drv_exit_cb(const struct sup_exit *x, void *arg)
{
	char	desc[64];

	logs_drain(x->local_rank);
	sup_describe(x->status, desc, sizeof desc);
	drv_say("exit %d %ld %s replacement=%d", x->local_rank, (long)x->pid,
	    desc, x->replacement);
	if (drv.stopped) {
		if (sup_live() == 0)
			event_base_loopbreak(drv.base);
		return;
	}
	if (drv.repair && x->local_rank == drv.kill && drv.all_said &&
	    !drv.respawned) {
		drv_replace(x->local_rank);
		return;
	}
	drv_fail("unexpected exit");
}

/* Whether every rank reported a step of at least min. */
static int
drv_steps_at_least(uint64_t min)
{
	int64_t		when;
	uint64_t	step;
	int		i;

	for (i = 0; i < drv.nproc; i++)
		if (progress_get(i, &step, &when) != 0 || step < min)
			return (0);
	return (1);
}

static void
drv_stop(void)
{
	int64_t		when;
	uint64_t	step;
	char		msg[AGENT_MSG_MAX], stack[8192], stamp[64];
	int		i, rv;

	for (i = 0; i < drv.nproc; i++)
		if (progress_get(i, &step, &when) == 0)
			drv_say("step %d %llu", i, (unsigned long long)step);
	if (drv.repair) {
		/* What the replacement wrote at its error file path. */
		rv = logs_read_error(drv.kill, msg, sizeof msg, stack,
		    sizeof stack, stamp, sizeof stamp);
		drv_say("errfile-end rv=%d msg=%s", rv, msg);
	}
	drv.stopped = 1;
	drv_say("stop n=%d", drv_stop_msg(-1));
}

/* The deadline; and, every 20 ms, whether the workers are there yet. */
static void
drv_tick_cb(evutil_socket_t fd, short ev, void *arg)
{
	static int	ticks;
	int		i;

	if (++ticks > DRV_DEADLINE_S * 50) {
		drv_fail("deadline");
		return;
	}
	if (drv.stopped)
		return;
	if (!drv.repair && drv_steps_at_least(1)) {
		for (i = 0; i < drv.nproc; i++)
			drv_say("can_repair %d %d", i, progress_can_repair(i));
		drv_say("all %d", progress_all_can_repair());
		drv_stop();
	} else if (drv.repair && drv.grown &&
	    drv_steps_at_least(DRV_FINAL_STEP))
		drv_stop();
}

int
main(int argc, char **argv)
{
	struct timeval	 tv = { 0, 20000 };
	char		**env, **cargv;
	pid_t		  pid;
	int		  i, a = 3, cargc, out_fd, err_fd, rv;

	log_init("repair_drv", 1, NULL);
	if (getenv("DRV_DEBUG") != NULL)
		log_setlevel(LOG_LVL_DEBUG);
	if (argc < 4)
		goto usage;
	drv.repair = strcmp(argv[1], "repair") == 0;
	if (!drv.repair && strcmp(argv[1], "hello") != 0)
		goto usage;
	drv.nproc = atoi(argv[2]);
	if (drv.repair) {
		drv.kill = atoi(argv[a++]);
		if (argc < 5)
			goto usage;
	}
	if (drv.nproc < 1 || drv.nproc > 64 || drv.kill < 0 ||
	    drv.kill >= drv.nproc)
		goto usage;
	/* rdzv-agent's command line: its options, then the worker's. */
	if ((cargv = calloc(argc - a + 5, sizeof *cargv)) == NULL)
		fatalx("out of memory");
	cargc = 0;
	cargv[cargc++] = "rdzv-agent";
	cargv[cargc++] = "--nproc_per_node";
	cargv[cargc++] = argv[2];
	cargv[cargc++] = "--no_python";
	for (i = a; i < argc; i++)
		cargv[cargc++] = argv[i];
	rv = cli_parse(&drv.cfg, cargc, cargv);
	free(cargv);
	if (rv != 0 || drv.cfg.argv == NULL)
		goto usage;
	drv.argv = drv.cfg.argv;

	if ((drv.base = event_base_new()) == NULL)
		fatalx("event_base_new");
	if (sup_init(drv.base, drv_exit_cb, NULL) != 0)
		fatalx("sup_init");
	progress_init(drv.base);
	progress_set_cb(drv_note_cb, NULL);
	drv.tick_ev = event_new(drv.base, -1, EV_PERSIST, drv_tick_cb, NULL);
	if (drv.tick_ev == NULL || event_add(drv.tick_ev, &tv) == -1)
		fatalx("tick");
	if (progress_attempt(drv.nproc) != 0)
		fatalx("progress_attempt");
	if (logs_init(drv.base, &drv.cfg) != 0 ||
	    logs_attempt(1, drv.nproc, 0) != 0)
		fatalx("logs");
	/* Before any spawn: no rank can repair, nobody is ready. */
	drv_say("before all=%d ready=%d respawn=%d", progress_all_can_repair(),
	    progress_ready(0), sup_respawn(0, -1, -1, -1, NULL, NULL));
	for (i = 0; i < drv.nproc; i++) {
		env = drv_env(i);
		logs_child_fds(i, &out_fd, &err_fd);
		if (sup_spawn(i, drv.argv, env, out_fd, err_fd,
		    progress_child_fd(i), &pid, NULL) != 0)
			fatalx("sup_spawn");
		logs_spawned(i);
		progress_spawned(i);
		drv_free_env(env);
		drv_say("spawned %d %ld", i, (long)pid);
	}
	event_base_dispatch(drv.base);
	progress_end_attempt();
	logs_end_attempt();
	logs_cleanup();
	event_free(drv.tick_ev);
	event_base_free(drv.base);
	drv_say("done %s", drv.failed ? "failed" : "ok");
	return (drv.failed ? 1 : 0);
usage:
	fprintf(stderr, "usage: repair_drv hello NPROC [OPTION...] PROG "
	    "[ARG...]\n"
	    "       repair_drv repair NPROC KILL [OPTION...] PROG [ARG...]\n");
	return (2);
}
