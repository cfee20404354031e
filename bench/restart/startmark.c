/* SPDX-License-Identifier: Apache-2.0 */
/*
 * startmark.c: the non-Python worker of bench/restart: it records when it
 * started, and when it is told to exit or to stop, and does nothing else.
 *
 * usage: startmark FILE
 * Run by rdzv-agent or torchrun (--no_python).  Each event appends one
 * line to FILE with a single O_APPEND write (so lines of concurrent
 * workers never interleave):
 *
 *   KIND RANK RESTART_COUNT MONOTONIC_NS REALTIME_NS PID LOCAL_RANK
 *
 * KIND is "start" (first thing after exec), "exit" (SIGUSR1 received:
 * the line is written, then _exit(1), so the launcher sees a failure whose
 * time is known to the nanosecond) or "term" (SIGTERM received, i.e. the
 * launcher is stopping this worker: the line is written, then the default
 * action of SIGTERM ends the process).  RANK and RESTART_COUNT come from
 * RANK and TORCHELASTIC_RESTART_COUNT (-1 when unset).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int		 mark_fd = -1;
static long long	 mark_rank = -1, mark_restart = -1, mark_local = -1;

/* An integer environment variable, or -1 when unset or not a number. */
static long long
env_int(const char *name)
{
	const char	*v, *errstr;
	long long	 n;

	if ((v = getenv(name)) == NULL)
		return (-1);
	n = strtonum(v, 0, 1LL << 40, &errstr);
	return (errstr != NULL ? -1 : n);
}

static long long
clock_ns(clockid_t id)
{
	struct timespec	ts;

	clock_gettime(id, &ts);
	return ((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
}

/*
 * Appends one line of kind; both clocks are read first so the line's
 * formatting is not in the measured time.  Exits 2 when the line cannot
 * be written: a bench must not go on with a missing mark.
 */
static void
mark(const char *kind)
{
	long long	 mono = clock_ns(CLOCK_MONOTONIC);
	long long	 real = clock_ns(CLOCK_REALTIME);
	char		 line[160];
	int		 n;

	n = snprintf(line, sizeof line, "%s %lld %lld %lld %lld %ld %lld\n",
	    kind, mark_rank, mark_restart, mono, real, (long)getpid(),
	    mark_local);
	if (n < 0 || (size_t)n >= sizeof line ||
	    write(mark_fd, line, n) != n) {
		fprintf(stderr, "startmark: cannot write a mark: %s\n",
		    strerror(errno));
		_exit(2);
	}
}

int
main(int argc, char *argv[])
{
	sigset_t	set;
	int		sig;

	if (argc != 2) {
		fprintf(stderr, "usage: startmark FILE\n");
		return (2);
	}
	/*
	 * The signals are blocked before the start mark is written: a
	 * launcher that signals right after seeing the mark finds them
	 * pending, and sigwait() below takes them in order.
	 */
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	mark_rank = env_int("RANK");
	mark_restart = env_int("TORCHELASTIC_RESTART_COUNT");
	mark_local = env_int("LOCAL_RANK");
	mark_fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
	    0644);
	if (mark_fd == -1) {
		fprintf(stderr, "startmark: %s: %s\n", argv[1],
		    strerror(errno));
		return (2);
	}
	mark("start");
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGUSR1) {
			mark("exit");
			_exit(1);
		}
		mark("term");
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		signal(SIGTERM, SIG_DFL);
		raise(SIGTERM);
		_exit(143);	/* not reached: the default action ends us */
	}
}
