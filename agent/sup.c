/*
 * sup.c: spawning and supervising workers; the only file that forks.
 *
 * Each worker runs in a session (and process group) of its own, as
 * torchrun's do, with a parent-death SIGKILL, so killing the agent, even
 * with SIGKILL, leaves no worker behind.  A session of its own means the
 * agent's terminal is not the worker's controlling terminal: a worker
 * handed the terminal as its stdout writes to it (isatty() is true)
 * without job control ever stopping it (SIGTTOU).
 * Exits are noticed from a SIGCHLD event (no polling): the handler peeks
 * at each exited child with waitid(WNOWAIT), SIGKILLs whatever is left
 * of its process group while the zombie still pins the group id (so the
 * id cannot have been reused), then reaps it.  Stopping sends a signal
 * to every group, then SIGKILL after a grace period.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent.h"
#include "log.h"
#include "rdzv_err.h"

struct sup_worker {
	pid_t		 pid;		/* 0: slot free */
	int		 local_rank;
	int		 stopping;
};

static struct event_base	*sup_base;
static struct event		*sup_chld_ev;
static struct event		*sup_grace_ev;
static struct event		*sup_done_ev;
static sup_exit_cb		 sup_exit_fn;
static void			*sup_exit_arg;
static sup_done_cb		 sup_done_fn;
static void			*sup_done_arg;
static struct sup_worker	*sup_workers;
static size_t			 sup_nworkers;

/*
 * Signals pid's process group; before the child has made its session
 * (a signal right after the fork) the group does not exist yet, and the
 * signal goes to the child itself, which holds it blocked until then.
 */
static int
sup_kill_group(pid_t pid, int sig)
{
	if (kill(-pid, sig) == 0)
		return (0);
	if (errno != ESRCH)
		return (-1);
	return (kill(pid, sig));
}

static struct sup_worker *
sup_find(pid_t pid)
{
	size_t	i;

	for (i = 0; i < sup_nworkers; i++)
		if (sup_workers[i].pid == pid)
			return (&sup_workers[i]);
	return (NULL);
}

int
sup_live(void)
{
	size_t	i;
	int	n = 0;

	for (i = 0; i < sup_nworkers; i++)
		if (sup_workers[i].pid != 0)
			n++;
	return (n);
}

/* Calls the stop callback once nothing is left, from the loop. */
static void
sup_check_done(void)
{
	if (sup_done_fn != NULL && sup_live() == 0)
		event_active(sup_done_ev, 0, 0);
}

static void
sup_done_cb_ev(evutil_socket_t fd, short ev, void *arg)
{
	sup_done_cb	 fn = sup_done_fn;

	if (fn == NULL || sup_live() != 0)
		return;
	sup_done_fn = NULL;
	evtimer_del(sup_grace_ev);
	fn(sup_done_arg);
}

static void
sup_chld_cb(evutil_socket_t sig, short ev, void *arg)
{
	struct sup_worker	*w;
	struct sup_exit		 x;
	siginfo_t		 si;
	pid_t			 pid;
	int			 status;

	for (;;) {
		memset(&si, 0, sizeof si);
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == -1) {
			if (errno == EINTR)
				continue;
			break;	/* ECHILD: nothing left */
		}
		if ((pid = si.si_pid) == 0)
			break;
		/*
		 * The zombie still holds its pid as a group id: whatever the
		 * worker left in its group is killed before the id is freed.
		 */
		if ((w = sup_find(pid)) != NULL)
			(void)kill(-pid, SIGKILL);
		if (waitpid(pid, &status, 0) == -1)
			continue;
		if (w == NULL)
			continue;
		x.local_rank = w->local_rank;
		x.pid = pid;
		x.status = status;
		clock_gettime(CLOCK_REALTIME, &x.when);
		w->pid = 0;
		log_debug("worker %d (pid %ld) exited, status 0x%x",
		    x.local_rank, (long)pid, status);
		if (sup_exit_fn != NULL)
			sup_exit_fn(&x, sup_exit_arg);
	}
	sup_check_done();
}

static void
sup_grace_cb(evutil_socket_t fd, short ev, void *arg)
{
	size_t	i;

	for (i = 0; i < sup_nworkers; i++) {
		if (sup_workers[i].pid == 0)
			continue;
		log_info("worker %d (pid %ld) still running after the grace "
		    "period: SIGKILL", sup_workers[i].local_rank,
		    (long)sup_workers[i].pid);
		(void)sup_kill_group(sup_workers[i].pid, SIGKILL);
	}
}

int
sup_init(struct event_base *base, sup_exit_cb cb, void *arg)
{
	sup_base = base;
	sup_exit_fn = cb;
	sup_exit_arg = arg;
	sup_chld_ev = evsignal_new(base, SIGCHLD, sup_chld_cb, NULL);
	sup_grace_ev = evtimer_new(base, sup_grace_cb, NULL);
	sup_done_ev = event_new(base, -1, 0, sup_done_cb_ev, NULL);
	if (sup_chld_ev == NULL || sup_grace_ev == NULL || sup_done_ev == NULL)
		return (RDZV_ENOMEM);
	if (evsignal_add(sup_chld_ev, NULL) == -1)
		return (RDZV_EIO);
	return (0);
}

/* In the child, before exec: only async-signal-safe calls. */
static void __attribute__((noreturn))
sup_child(pid_t parent, char *const argv[], char *const envp[], int out_fd,
    int err_fd, int prog_fd)
{
	struct sigaction	sa;
	sigset_t		none;
	const char		*why;
	int			sig, saved;

	(void)setsid();
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1)
		_exit(127);
	/* The agent may have died before the prctl took effect. */
	if (getppid() != parent)
		_exit(127);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	sigemptyset(&sa.sa_mask);
	for (sig = 1; sig < NSIG; sig++)
		(void)sigaction(sig, &sa, NULL);
	if (out_fd >= 0 && out_fd != STDOUT_FILENO &&
	    dup2(out_fd, STDOUT_FILENO) == -1)
		_exit(127);
	if (err_fd >= 0 && err_fd != STDERR_FILENO &&
	    dup2(err_fd, STDERR_FILENO) == -1)
		_exit(127);
	/* The streams are in place, so fd 3 may be overwritten now. */
	if (prog_fd >= 0 && (prog_fd == PROGRESS_CHILD_FD ?
	    fcntl(prog_fd, F_SETFD, 0) : dup2(prog_fd, PROGRESS_CHILD_FD)) == -1)
		_exit(127);
	closefrom(prog_fd >= 0 ? PROGRESS_CHILD_FD + 1 : STDERR_FILENO + 1);
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	execvpe(argv[0], argv, envp);
	saved = errno;
	(void)!write(STDERR_FILENO, "rdzv-agent: cannot run ", 23);
	(void)!write(STDERR_FILENO, argv[0], strlen(argv[0]));
	(void)!write(STDERR_FILENO, ": ", 2);
	why = strerrordesc_np(saved);
	if (why == NULL)
		why = "error";
	(void)!write(STDERR_FILENO, why, strlen(why));
	(void)!write(STDERR_FILENO, "\n", 1);
	_exit(127);
}

int
sup_spawn(int local_rank, char *const argv[], char *const envp[], int out_fd,
    int err_fd, int prog_fd, pid_t *pidp)
{
	struct sup_worker	*w = NULL, *nw;
	sigset_t		 all, old;
	pid_t			 pid, parent = getpid();
	size_t			 i;

	if (argv == NULL || argv[0] == NULL)
		return (RDZV_EINVAL);
	for (i = 0; i < sup_nworkers; i++)
		if (sup_workers[i].pid == 0) {
			w = &sup_workers[i];
			break;
		}
	if (w == NULL) {
		nw = reallocarray(sup_workers, sup_nworkers + 8, sizeof *nw);
		if (nw == NULL)
			return (RDZV_ENOMEM);
		memset(nw + sup_nworkers, 0, 8 * sizeof *nw);
		sup_workers = nw;
		w = &sup_workers[sup_nworkers];
		sup_nworkers += 8;
	}

	/*
	 * Signals stay blocked across fork so that no handler of the agent
	 * runs in the child before it resets them.
	 */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid = fork();
	if (pid == 0)
		sup_child(parent, argv, envp, out_fd, err_fd, prog_fd);
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid == -1) {
		log_warn("fork");
		return (RDZV_EIO);
	}
	w->pid = pid;
	w->local_rank = local_rank;
	w->stopping = 0;
	if (pidp != NULL)
		*pidp = pid;
	log_debug("worker %d started, pid %ld", local_rank, (long)pid);
	return (0);
}

void
sup_signal(int sig)
{
	size_t	i;

	for (i = 0; i < sup_nworkers; i++)
		if (sup_workers[i].pid != 0)
			(void)sup_kill_group(sup_workers[i].pid, sig);
}

int
sup_forward(int sig)
{
	size_t	i;
	int	n = 0;

	for (i = 0; i < sup_nworkers; i++)
		if (sup_workers[i].pid != 0 &&
		    kill(sup_workers[i].pid, sig) == 0)
			n++;
	return (n);
}

int
sup_signal_rank(int local_rank, int sig)
{
	size_t	i;

	for (i = 0; i < sup_nworkers; i++)
		if (sup_workers[i].pid != 0 &&
		    sup_workers[i].local_rank == local_rank)
			return (sup_kill_group(sup_workers[i].pid, sig) == 0 ?
			    0 : RDZV_EIO);
	return (RDZV_ENOTFOUND);
}

void
sup_stop(int sig, int grace_ms, sup_done_cb done, void *arg)
{
	struct timeval	tv;
	size_t		i;

	sup_done_fn = done;
	sup_done_arg = arg;
	for (i = 0; i < sup_nworkers; i++) {
		if (sup_workers[i].pid == 0)
			continue;
		sup_workers[i].stopping = 1;
		(void)sup_kill_group(sup_workers[i].pid, sig);
	}
	if (sup_live() > 0) {
		tv.tv_sec = grace_ms / 1000;
		tv.tv_usec = (grace_ms % 1000) * 1000;
		evtimer_add(sup_grace_ev, &tv);
	}
	sup_check_done();
}

void
sup_kill_now(void)
{
	sup_signal(SIGKILL);
}

int
sup_capture(char *const argv[], char *out, size_t outsz, int timeout_ms)
{
	struct pollfd	 pfd;
	struct timespec	 t0, t1;
	sigset_t	 all, old;
	pid_t		 pid;
	size_t		 got = 0;
	ssize_t		 n;
	int		 p[2], devnull, status, left;

	if (outsz == 0 || pipe2(p, O_CLOEXEC) == -1)
		return (RDZV_EIO);
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid = fork();
	if (pid == 0) {
		devnull = open("/dev/null", O_RDWR);
		if (devnull >= 0)
			(void)dup2(devnull, STDERR_FILENO);
		if (dup2(p[1], STDOUT_FILENO) == -1)
			_exit(127);
		sup_child(getppid(), argv, environ, -1, -1, -1);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(p[1]);
	if (pid == -1) {
		close(p[0]);
		return (RDZV_EIO);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		left = timeout_ms - (int)((t1.tv_sec - t0.tv_sec) * 1000 +
		    (t1.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0)
			break;
		pfd.fd = p[0];
		pfd.events = POLLIN;
		if (poll(&pfd, 1, left) <= 0)
			break;
		n = read(p[0], out + got, outsz - 1 - got);
		if (n <= 0)
			break;
		got += n;
		if (got == outsz - 1)
			break;
	}
	close(p[0]);
	(void)sup_kill_group(pid, SIGKILL);
	while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
		;
	out[got] = '\0';
	return ((int)got);
}

const char *
sup_describe(int status, char *buf, size_t len)
{
	const char	*name;

	if (WIFSIGNALED(status)) {
		name = sigabbrev_np(WTERMSIG(status));
		snprintf(buf, len, "signal %d (SIG%s)", WTERMSIG(status),
		    name != NULL ? name : "?");
	} else if (WIFEXITED(status))
		snprintf(buf, len, "exit code %d", WEXITSTATUS(status));
	else
		snprintf(buf, len, "status 0x%x", status);
	return (buf);
}
