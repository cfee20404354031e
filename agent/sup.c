/* SPDX-License-Identifier: Apache-2.0 */
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
 * For in-place recovery, sup_respawn starts one local rank again, alone,
 * from the argv and environment its last sup_spawn kept, with
 * RDZV_REPLACEMENT=1 added; the other workers are not touched.
 * The warm spares (sup_spare_*) are more children, each started like a
 * worker but counted as none: a python that has imported torch and waits
 * on a control socket at fd 3 (rdzv.spare).  sup_respawn hands the
 * oldest the dead rank's launch (and sup_spawn, in a restart, each new
 * worker's) in one SOCK_SEQPACKET datagram, "rdzv-spare 1\0", the
 * argv count, the argv and the environment as NUL-terminated strings,
 * with its stdout, stderr and progress socket as SCM_RIGHTS; the spare
 * dup2()s them onto 1, 2 and 3, takes the environment and runs the
 * program as __main__.  From then on it is that rank's worker.  A spare
 * that dies before it is used is reaped with one log line and none is
 * started again (workers start cold).
 *
 * One record per local rank (struct sup_rank) holds what sup.c knows of
 * it: its running worker (one at a time), its last launch and its
 * --numa_binding.
 *
 * Why about 1,200 lines: every fork of the agent is here on purpose
 * (spawn, respawn, the spares' handoff, reaping), sharing the ranks'
 * table and the SIGCHLD path.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <linux/mempolicy.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent.h"
#include "log.h"
#include "mono.h"
#include "rdzv_err.h"

/* --numa_binding: where a local rank runs. */
struct sup_bind {
	int		 valid;		/* 0: the rank is not bound */
	int		 node;		/* preferred memory node, -1 none */
	cpu_set_t	 cpus;
};

/*
 * What sup.c knows of one local rank (struct agent_rank in agent.h says
 * what else a local rank has): its worker, one at a time, the launch
 * sup_respawn starts a replacement from, and its --numa_binding.
 */
struct sup_rank {
	pid_t		 pid;		/* its running worker; 0: none */
	int		 replacement;	/* that one started by sup_respawn */
	char		**argv;		/* its last sup_spawn's, NULL- */
	char		**envp;		/* terminated copies; NULL: none */
	struct sup_bind	 bind;
};

/* The variable a replacement worker finds set. */
#define SUP_REPLACEMENT_VAR	"RDZV_REPLACEMENT"

/* A warm spare: a started python waiting for a rank to take over. */
struct sup_spare {
	pid_t		 pid;
	int		 ctl;		/* the agent's end of its socket */
};
/* The handoff's first string, its version. */
#define SUP_SPARE_MAGIC		"rdzv-spare 1"
/* A handoff datagram's bytes at most (one default socket buffer). */
#define SUP_SPARE_MSG_MAX	(160 * 1024)

static struct event_base	*sup_base;
static struct event		*sup_chld_ev;
static struct event		*sup_grace_ev;
static struct event		*sup_done_ev;
static sup_exit_cb		 sup_exit_fn;
static void			*sup_exit_arg;
static sup_done_cb		 sup_done_fn;
static void			*sup_done_arg;
static struct sup_rank		*sup_ranks;	/* by local rank */
static int			 sup_nranks;
static struct sup_spare		 sup_spares[SUP_SPARES_MAX]; /* oldest first */
static int			 sup_nspares;
static int			 sup_spare_dead; /* one died unused: no more */

static int	sup_spare_find(pid_t);
static void	sup_spare_died(int, int);
static int	sup_spare_hand(int, char *const [], char *const [], int, int,
		    int, pid_t *);

static const char		 sup_affinity_msg[] =
    "rdzv-agent: --numa_binding: sched_setaffinity failed\n";

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

/* The local rank whose worker pid is, or -1. */
static int
sup_find(pid_t pid)
{
	int	i;

	for (i = 0; i < sup_nranks; i++)
		if (sup_ranks[i].pid == pid)
			return (i);
	return (-1);
}

/*
 * Local rank local_rank's record, the table grown to hold it (zeroed):
 * NULL for a rank out of range, or out of memory.
 */
static struct sup_rank *
sup_rank(int local_rank)
{
	struct sup_rank	*nr;
	int		 n;

	if (local_rank < 0 || local_rank >= AGENT_NPROC_MAX)
		return (NULL);
	if (local_rank >= sup_nranks) {
		n = local_rank + 1;
		if ((nr = reallocarray(sup_ranks, n, sizeof *nr)) == NULL)
			return (NULL);
		memset(nr + sup_nranks, 0, (n - sup_nranks) * sizeof *nr);
		sup_ranks = nr;
		sup_nranks = n;
	}
	return (&sup_ranks[local_rank]);
}

int
sup_live(void)
{
	int	i, n = 0;

	for (i = 0; i < sup_nranks; i++)
		if (sup_ranks[i].pid != 0)
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
	struct sup_exit		 x;
	siginfo_t		 si;
	pid_t			 pid;
	int			 status, spare, l;

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
		spare = sup_spare_find(pid);
		if ((l = sup_find(pid)) != -1 || spare >= 0)
			(void)kill(-pid, SIGKILL);
		if (waitpid(pid, &status, 0) == -1)
			continue;
		if (spare >= 0)
			sup_spare_died(spare, status);
		if (l == -1)
			continue;
		x.local_rank = l;
		x.pid = pid;
		x.status = status;
		clock_gettime(CLOCK_REALTIME, &x.when);
		x.replacement = sup_ranks[l].replacement;
		sup_ranks[l].pid = 0;
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
	int	i;

	for (i = 0; i < sup_nranks; i++) {
		if (sup_ranks[i].pid == 0)
			continue;
		log_info("worker %d (pid %ld) still running after the grace "
		    "period: SIGKILL", i, (long)sup_ranks[i].pid);
		(void)sup_kill_group(sup_ranks[i].pid, SIGKILL);
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
    int err_fd, int prog_fd, const struct sup_bind *bind)
{
	unsigned long	nodemask[16];
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
	if (bind != NULL && bind->valid) {
		/* Both are kept across execve, and by the worker's children. */
		if (sched_setaffinity(0, sizeof bind->cpus, &bind->cpus) == -1)
			(void)!write(STDERR_FILENO, sup_affinity_msg,
			    sizeof sup_affinity_msg - 1);
		memset(nodemask, 0, sizeof nodemask);
		if (bind->node >= 0 && bind->node < 16 * 64) {
			nodemask[bind->node / 64] |= 1UL << (bind->node % 64);
			(void)syscall(SYS_set_mempolicy, MPOL_PREFERRED,
			    nodemask, sizeof nodemask * 8);
		}
	}
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

/* A NULL-terminated deep copy of v, or NULL when out of memory. */
static char **
sup_copy_vec(char *const v[])
{
	char	**c;
	size_t	  n, i;

	for (n = 0; v[n] != NULL; n++)
		;
	if ((c = calloc(n + 1, sizeof *c)) == NULL)
		return (NULL);
	for (i = 0; i < n; i++)
		if ((c[i] = strdup(v[i])) == NULL) {
			while (i-- > 0)
				free(c[i]);
			free(c);
			return (NULL);
		}
	return (c);
}

static void
sup_free_vec(char **v)
{
	size_t	i;

	if (v == NULL)
		return;
	for (i = 0; v[i] != NULL; i++)
		free(v[i]);
	free(v);
}

/* Keeps argv and envp as r's launch; 0 or RDZV_ENOMEM. */
static int
sup_keep(struct sup_rank *r, char *const argv[], char *const envp[])
{
	char	**a, **e;

	if ((a = sup_copy_vec(argv)) == NULL)
		return (RDZV_ENOMEM);
	if ((e = sup_copy_vec(envp)) == NULL) {
		sup_free_vec(a);
		return (RDZV_ENOMEM);
	}
	sup_free_vec(r->argv);
	sup_free_vec(r->envp);
	r->argv = a;
	r->envp = e;
	return (0);
}

/* Forks a worker (see sup_spawn) bound by bind: 0 with *pidp set. */
static int
sup_fork(const struct sup_bind *bind, char *const argv[], char *const envp[],
    int out_fd, int err_fd, int prog_fd, pid_t *pidp)
{
	sigset_t		 all, old;
	pid_t			 pid, parent = getpid();

	/*
	 * Signals stay blocked across fork so that no handler of the agent
	 * runs in the child before it resets them.
	 */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid = fork();
	if (pid == 0)
		sup_child(parent, argv, envp, out_fd, err_fd, prog_fd, bind);
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid == -1) {
		log_warn("fork");
		return (RDZV_EIO);
	}
	*pidp = pid;
	return (0);
}

/*
 * Starts local_rank's worker with argv and envp, the one way sup_spawn
 * and sup_respawn start one (the rank has its record, and no worker
 * running): the oldest warm spare takes the launch when one waits and
 * can (the worker has a channel, no stop is under way, no --numa_binding
 * for the rank: a spare runs unbound), else a fork.
 */
static int
sup_start(int local_rank, char *const argv[], char *const envp[], int out_fd,
    int err_fd, int prog_fd, int replacement, pid_t *pidp, int *warm)
{
	struct sup_rank	*r = &sup_ranks[local_rank];
	pid_t		 pid;
	int		 hot = 0, rv;

	if (warm != NULL)
		*warm = 0;
	if (sup_nspares > 0 && prog_fd >= 0 && sup_done_fn == NULL &&
	    !r->bind.valid &&
	    sup_spare_hand(local_rank, argv, envp, out_fd, err_fd, prog_fd,
	    &pid) == 0)
		hot = 1;
	else {
		if ((rv = sup_fork(&r->bind, argv, envp, out_fd, err_fd,
		    prog_fd, &pid)) != 0)
			return (rv);
		log_debug("worker %d %s, pid %ld", local_rank, replacement ?
		    "replacement started" : "started", (long)pid);
	}
	r->pid = pid;
	r->replacement = replacement;
	if (pidp != NULL)
		*pidp = pid;
	if (warm != NULL)
		*warm = hot;
	return (0);
}

int
sup_spawn(int local_rank, char *const argv[], char *const envp[], int out_fd,
    int err_fd, int prog_fd, pid_t *pidp, int *warm)
{
	struct sup_rank	*r;
	int		 rv;

	if (argv == NULL || argv[0] == NULL || envp == NULL ||
	    local_rank < 0 || local_rank >= AGENT_NPROC_MAX)
		return (RDZV_EINVAL);
	if ((r = sup_rank(local_rank)) == NULL)
		return (RDZV_ENOMEM);
	/* One worker per rank: the last one's exit is reaped first. */
	if (r->pid != 0)
		return (RDZV_EEXIST);
	if ((rv = sup_keep(r, argv, envp)) != 0)
		return (rv);
	return (sup_start(local_rank, argv, envp, out_fd, err_fd, prog_fd, 0,
	    pidp, warm));
}

pid_t
sup_pid(int local_rank)
{
	if (local_rank < 0 || local_rank >= sup_nranks)
		return (0);
	return (sup_ranks[local_rank].pid);
}

int
sup_respawn(int local_rank, int out_fd, int err_fd, int prog_fd, pid_t *pidp,
    int *warm)
{
	static const char	 var[] = SUP_REPLACEMENT_VAR "=";
	struct sup_rank		*r;
	char			**env;
	size_t			  i, n = 0;
	int			  rv;

	if (local_rank < 0 || local_rank >= AGENT_NPROC_MAX)
		return (RDZV_EINVAL);
	if (local_rank >= sup_nranks || sup_ranks[local_rank].argv == NULL)
		return (RDZV_ENOTFOUND);
	r = &sup_ranks[local_rank];
	if (r->pid != 0)
		return (RDZV_EEXIST);
	/* A stop waits for every worker: a new one would outlive it. */
	if (sup_done_fn != NULL)
		return (RDZV_EBUSY);
	for (i = 0; r->envp[i] != NULL; i++)
		;
	/* The kept strings, less any RDZV_REPLACEMENT, plus ours. */
	if ((env = calloc(i + 2, sizeof *env)) == NULL)
		return (RDZV_ENOMEM);
	for (i = 0; r->envp[i] != NULL; i++)
		if (strncmp(r->envp[i], var, sizeof var - 1) != 0)
			env[n++] = r->envp[i];
	env[n++] = (char *)SUP_REPLACEMENT_VAR "=1";
	env[n] = NULL;
	rv = sup_start(local_rank, r->argv, env, out_fd, err_fd, prog_fd, 1,
	    pidp, warm);
	free(env);
	return (rv);
}

/* ---- the warm spares ---- */

int
sup_spare_start(char *const argv[], char *const envp[])
{
	sigset_t	all, old;
	pid_t		pid, parent = getpid();
	int		sv[2], devnull, sz = 2 * SUP_SPARE_MSG_MAX;

	if (sup_nspares >= SUP_SPARES_MAX)
		return (RDZV_EEXIST);
	if (sup_spare_dead || sup_done_fn != NULL)
		return (RDZV_EBUSY);
	if (argv == NULL || argv[0] == NULL || envp == NULL)
		return (RDZV_EINVAL);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == -1)
		return (RDZV_EIO);
	/* One handoff datagram must fit (capped by the kernel's wmem_max). */
	(void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	if ((devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) == -1) {
		close(sv[0]);
		close(sv[1]);
		return (RDZV_EIO);
	}
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid = fork();
	if (pid == 0)	/* silent until used: stdout and stderr to /dev/null */
		sup_child(parent, argv, envp, devnull, devnull, sv[1], NULL);
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(sv[1]);
	close(devnull);
	if (pid == -1) {
		log_warn("fork");
		close(sv[0]);
		return (RDZV_EIO);
	}
	sup_spares[sup_nspares].pid = pid;
	sup_spares[sup_nspares].ctl = sv[0];
	sup_nspares++;
	log_debug("warm spare started, pid %ld (%d waiting)", (long)pid,
	    sup_nspares);
	return (0);
}

int
sup_spare_count(void)
{
	return (sup_nspares);
}

/* The index of the spare pid, -1 when it is none. */
static int
sup_spare_find(pid_t pid)
{
	int	i;

	for (i = 0; i < sup_nspares; i++)
		if (sup_spares[i].pid == pid)
			return (i);
	return (-1);
}

/*
 * Forgets spare i (already reaped, handed a rank, or to be reaped
 * unrecognized); dead: it died unused, so none is started again.
 */
static void
sup_spare_forget(int i, int dead)
{
	if (sup_spares[i].ctl != -1)
		close(sup_spares[i].ctl);
	memmove(&sup_spares[i], &sup_spares[i + 1],
	    (size_t)(sup_nspares - i - 1) * sizeof sup_spares[0]);
	sup_nspares--;
	if (dead)
		sup_spare_dead = 1;
}

/* Spare i exited unused (reaped by sup_chld_cb): one line, no more. */
static void
sup_spare_died(int i, int status)
{
	char	desc[64];

	log_warnx("warm spare (pid %ld) ended before it was used (%s): "
	    "workers start cold (the workers' python must import "
	    "rdzv.spare; --warm_spare 0 turns it off)",
	    (long)sup_spares[i].pid, sup_describe(status, desc, sizeof desc));
	sup_spare_forget(i, 1);
}

void
sup_spare_stop(void)
{
	pid_t	pid;
	int	status;

	while (sup_nspares > 0) {
		pid = sup_spares[sup_nspares - 1].pid;
		(void)sup_kill_group(pid, SIGKILL);
		while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
			;
		log_debug("warm spare (pid %ld) stopped", (long)pid);
		sup_spare_forget(sup_nspares - 1, 0);
	}
}

/*
 * The handoff datagram for argv and envp (see the header comment) in a
 * new buffer; 0, RDZV_ETOOBIG (over SUP_SPARE_MSG_MAX) or RDZV_ENOMEM.
 */
static int
sup_spare_msg(char *const argv[], char *const envp[], char **out,
    size_t *lenp)
{
	char	 count[24], *buf, *p;
	size_t	 len, n, i;

	for (n = 0; argv[n] != NULL; n++)
		;
	snprintf(count, sizeof count, "%zu", n);
	len = sizeof SUP_SPARE_MAGIC + strlen(count) + 1;
	for (i = 0; argv[i] != NULL; i++)
		len += strlen(argv[i]) + 1;
	for (i = 0; envp[i] != NULL; i++)
		len += strlen(envp[i]) + 1;
	if (len > SUP_SPARE_MSG_MAX)
		return (RDZV_ETOOBIG);
	if ((buf = malloc(len)) == NULL)
		return (RDZV_ENOMEM);
	p = stpcpy(buf, SUP_SPARE_MAGIC) + 1;
	p = stpcpy(p, count) + 1;
	for (i = 0; argv[i] != NULL; i++)
		p = stpcpy(p, argv[i]) + 1;
	for (i = 0; envp[i] != NULL; i++)
		p = stpcpy(p, envp[i]) + 1;
	*out = buf;
	*lenp = len;
	return (0);
}

/*
 * Hands the oldest spare local_rank's launch (sup_respawn's or
 * sup_spawn's argv and envp) and its descriptors (-1 for stdout or
 * stderr: the agent's own, as a worker that inherits them); the spare
 * becomes that rank's worker.  Returns 0 with *pidp set; otherwise the
 * spare is killed and forgotten, with one line, and the caller starts
 * the worker cold.
 */
static int
sup_spare_hand(int local_rank, char *const argv[], char *const envp[],
    int out_fd, int err_fd, int prog_fd, pid_t *pidp)
{
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(3 * sizeof(int))];
	} cm;
	struct cmsghdr		*c;
	struct msghdr		 mh;
	struct iovec		 iov;
	char			*msg = NULL;
	size_t			 len;
	ssize_t			 n;
	pid_t			 pid = sup_spares[0].pid;
	int			 fds[3], rv;

	if (prog_fd < 0)
		rv = RDZV_EINVAL;	/* no channel: nothing to repair with */
	else
		rv = sup_spare_msg(argv, envp, &msg, &len);
	if (rv != 0)
		goto fail;
	fds[0] = out_fd >= 0 ? out_fd : STDOUT_FILENO;
	fds[1] = err_fd >= 0 ? err_fd : STDERR_FILENO;
	fds[2] = prog_fd;
	memset(&mh, 0, sizeof mh);
	memset(&cm, 0, sizeof cm);
	iov.iov_base = msg;
	iov.iov_len = len;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cm.buf;
	mh.msg_controllen = sizeof cm.buf;
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof fds);
	memcpy(CMSG_DATA(c), fds, sizeof fds);
	/* Queued at once (the spare may still be importing): never blocks. */
	n = sendmsg(sup_spares[0].ctl, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	free(msg);
	if (n != (ssize_t)len) {
		rv = n == -1 && errno == EMSGSIZE ? RDZV_ETOOBIG : RDZV_EIO;
		goto fail;
	}
	/* Closing our end leaves the datagram queued for the spare. */
	sup_spare_forget(0, 0);
	*pidp = pid;
	log_debug("worker %d: the warm spare, pid %ld", local_rank,
	    (long)pid);
	return (0);

fail:
	log_warnx("warm spare (pid %ld) cannot take local rank %d (%s): it "
	    "is stopped and the worker starts cold", (long)pid,
	    local_rank, rdzv_strerror(rv));
	/* Not reaped here: sup_chld_cb reaps it as no one's. */
	(void)sup_kill_group(pid, SIGKILL);
	sup_spare_forget(0, 1);
	return (rv);
}

void
sup_signal(int sig)
{
	int	i;

	for (i = 0; i < sup_nranks; i++)
		if (sup_ranks[i].pid != 0)
			(void)sup_kill_group(sup_ranks[i].pid, sig);
}

int
sup_forward(int sig)
{
	int	i, n = 0;

	for (i = 0; i < sup_nranks; i++)
		if (sup_ranks[i].pid != 0 && kill(sup_ranks[i].pid, sig) == 0)
			n++;
	return (n);
}

int
sup_signal_rank(int local_rank, int sig)
{
	pid_t	pid;

	if ((pid = sup_pid(local_rank)) == 0)
		return (RDZV_ENOTFOUND);
	return (sup_kill_group(pid, sig) == 0 ? 0 : RDZV_EIO);
}

void
sup_stop(int sig, int grace_ms, sup_done_cb done, void *arg)
{
	struct timeval	tv;

	sup_done_fn = done;
	sup_done_arg = arg;
	sup_signal(sig);
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
	int64_t		 t0;
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
		sup_child(getppid(), argv, environ, -1, -1, -1, NULL);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(p[1]);
	if (pid == -1) {
		close(p[0]);
		return (RDZV_EIO);
	}
	t0 = mono_ms();
	for (;;) {
		left = timeout_ms - (int)(mono_ms() - t0);
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

/* ---- --numa_binding: the NUMA topology the kernel reports ---- */

#define SUP_NODES_MAX	CPU_SETSIZE

/* The root of sysfs; tests point RDZV_SYSFS_ROOT at a made-up topology. */
static const char *
sup_sysfs(void)
{
	const char	*r = getenv("RDZV_SYSFS_ROOT");

	return (r != NULL && *r != '\0' ? r : "/sys");
}

/* Reads a small sysfs file (one line) into buf; 0 or -1. */
static int
sup_read_line(const char *path, char *buf, size_t len)
{
	ssize_t	n;
	int	fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return (-1);
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return (-1);
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return (0);
}

/* Parses the kernel's list format ("0-3,8,10-11") into set; 0 or -1. */
static int
sup_parse_list(const char *s, cpu_set_t *set)
{
	char	*end;
	long	 a, b;

	CPU_ZERO(set);
	while (*s != '\0') {
		if (!isdigit((unsigned char)*s))
			return (-1);
		a = strtol(s, &end, 10);
		b = a;
		if (*end == '-') {
			if (!isdigit((unsigned char)end[1]))
				return (-1);
			b = strtol(end + 1, &end, 10);
		}
		if (a < 0 || b < a || b >= CPU_SETSIZE)
			return (-1);
		for (; a <= b; a++)
			CPU_SET(a, set);
		if (*end == ',')
			end++;
		else if (*end != '\0')
			return (-1);
		s = end;
	}
	return (0);
}

static int
sup_read_list(const char *path, cpu_set_t *set)
{
	char	buf[8192];

	if (sup_read_line(path, buf, sizeof buf) != 0)
		return (-1);
	return (sup_parse_list(buf, set));
}

/* The lowest CPU of a list file of cpu's topology (a core, an L3). */
static int
sup_cpu_key(int cpu, const char *what)
{
	char		path[256];
	cpu_set_t	set;
	int		i;

	snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/%s",
	    sup_sysfs(), cpu, what);
	if (sup_read_list(path, &set) != 0)
		return (cpu);
	for (i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &set))
			return (i);
	return (cpu);
}

static int
sup_cpu_package(int cpu)
{
	char	path[256], buf[32];

	snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/"
	    "physical_package_id", sup_sysfs(), cpu);
	if (sup_read_line(path, buf, sizeof buf) != 0)
		return (-1);
	return (atoi(buf));
}

static int
sup_first(const cpu_set_t *set)
{
	int	i;

	for (i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, set))
			return (i);
	return (-1);
}

/* "0-3,8" for a log line. */
static void
sup_format_list(const cpu_set_t *set, char *out, size_t len)
{
	char	item[32];
	int	i, j;

	out[0] = '\0';
	for (i = 0; i < CPU_SETSIZE; i = j) {
		if (!CPU_ISSET(i, set)) {
			j = i + 1;
			continue;
		}
		for (j = i + 1; j < CPU_SETSIZE && CPU_ISSET(j, set); j++)
			;
		if (j - 1 > i)
			snprintf(item, sizeof item, "%s%d-%d", out[0] ? "," :
			    "", i, j - 1);
		else
			snprintf(item, sizeof item, "%s%d", out[0] ? "," : "",
			    i);
		strlcat(out, item, len);
	}
}

/*
 * The NUMA node of each visible GPU index, from nvidia-smi's PCI bus ids
 * and the kernel's numa_node of that PCI device (-1: unknown).  Returns
 * how many GPUs nvidia-smi listed.
 */
static int
sup_gpu_nodes(int *node, int max)
{
	char *const	 argv[] = { "nvidia-smi",
			    "--query-gpu=index,pci.bus_id",
			    "--format=csv,noheader", NULL };
	char		 out[16384], path[512], buf[32], *line, *next, *bus;
	int		 n = 0, idx;

	if (sup_capture(argv, out, sizeof out, 10000) <= 0)
		return (0);
	for (line = out; line != NULL && *line != '\0'; line = next) {
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		if ((bus = strchr(line, ',')) == NULL)
			continue;
		*bus++ = '\0';
		while (*bus == ' ')
			bus++;
		idx = atoi(line);
		/* nvidia-smi says 00000000:18:00.0; sysfs 0000:18:00.0. */
		if (strlen(bus) > 12)
			bus += strlen(bus) - 12;
		for (line = bus; *line != '\0'; line++)
			*line = tolower((unsigned char)*line);
		if (idx < 0 || idx >= max)
			continue;
		n = idx + 1 > n ? idx + 1 : n;
		snprintf(path, sizeof path, "%s/bus/pci/devices/%s/numa_node",
		    sup_sysfs(), bus);
		node[idx] = sup_read_line(path, buf, sizeof buf) == 0 ?
		    atoi(buf) : -1;
		if (node[idx] < 0)
			node[idx] = 0;	/* one node: the kernel says -1 */
	}
	return (n);
}

/* The device index local_rank uses: its first entry of list, else r. */
static int
sup_device_of(const struct agent_config *cfg, int local_rank)
{
	const char	*p = cfg->gpu_list, *cvd;
	int		 per, want, i;

	per = cfg->gpus_per_worker > 0 ? cfg->gpus_per_worker : 1;
	want = local_rank * per;

	if (p == NULL && (cvd = getenv("CUDA_VISIBLE_DEVICES")) != NULL)
		p = cvd;
	if (p == NULL)
		return (local_rank);
	for (i = 0; *p != '\0'; i++) {
		if (i == want)
			return (isdigit((unsigned char)*p) ? atoi(p) : -1);
		p += strcspn(p, ",");
		if (*p == ',')
			p++;
	}
	return (-1);
}

/*
 * Cores (groups of hyperthreads, by their lowest CPU) or L3 groups of a
 * node's CPUs, in order: fills keys (distinct, sorted) and returns how
 * many.
 */
static int
sup_groups(const cpu_set_t *cpus, const char *what, int *keys, int max)
{
	int	i, j, k, n = 0;

	for (i = 0; i < CPU_SETSIZE; i++) {
		if (!CPU_ISSET(i, cpus))
			continue;
		k = sup_cpu_key(i, what);
		for (j = 0; j < n && keys[j] != k; j++)
			;
		if (j == n && n < max)
			keys[n++] = k;
	}
	for (i = 1; i < n; i++)		/* insertion sort: a few dozen */
		for (j = i; j > 0 && keys[j - 1] > keys[j]; j--) {
			k = keys[j];
			keys[j] = keys[j - 1];
			keys[j - 1] = k;
		}
	return (n);
}

/* The CPUs of cpus whose group key (core or L3) is in keys[a..b). */
static void
sup_pick(const cpu_set_t *cpus, const char *what, const int *keys, int a,
    int b, cpu_set_t *out)
{
	int	i, j, k;

	CPU_ZERO(out);
	for (i = 0; i < CPU_SETSIZE; i++) {
		if (!CPU_ISSET(i, cpus))
			continue;
		k = sup_cpu_key(i, what);
		for (j = a; j < b; j++)
			if (keys[j] == k)
				CPU_SET(i, out);
	}
}

int
sup_numa_init(const struct agent_config *cfg)
{
	static const char *const modes[] = { "", "node", "socket",
	    "exclusive", "core-complex" };
	static cpu_set_t	 nodecpus[64];
	struct sup_bind		*b;
	const char		*mode = modes[cfg->numa_mode];
	cpu_set_t		 online, allowed, pkg;
	char			 path[256], list[1024];
	int			*gpu_node, *rank_node, nodes[64], keys[1024];
	int			 nnodes = 0, ngpu, i, j, k, n, nw;
	int			 per, extra;
	int			 dev, node, p;

	if (cfg->numa_mode == SUP_NUMA_NONE)
		return (0);
	snprintf(path, sizeof path, "%s/devices/system/node/online",
	    sup_sysfs());
	if (sup_read_list(path, &online) != 0 ||
	    sched_getaffinity(0, sizeof allowed, &allowed) == -1) {
		log_warnx("--numa_binding %s: the kernel reports no NUMA "
		    "topology (%s): workers keep every CPU", mode, path);
		return (0);
	}
	for (i = 0; i < CPU_SETSIZE && nnodes < 64; i++) {
		if (!CPU_ISSET(i, &online))
			continue;
		snprintf(path, sizeof path, "%s/devices/system/node/node%d/"
		    "cpulist", sup_sysfs(), i);
		if (sup_read_list(path, &nodecpus[nnodes]) != 0)
			continue;
		CPU_AND(&nodecpus[nnodes], &nodecpus[nnodes], &allowed);
		if (CPU_COUNT(&nodecpus[nnodes]) == 0)
			continue;	/* memory only, or none of ours */
		nodes[nnodes++] = i;
	}
	if (nnodes <= 1) {
		log_info("--numa_binding %s: one NUMA node with CPUs here: "
		    "workers keep every CPU", mode);
		return (0);
	}
	/* Every rank's record, its bind among them (nproc is in range). */
	if (sup_rank(cfg->nproc - 1) == NULL ||
	    (gpu_node = calloc(1024, sizeof *gpu_node)) == NULL ||
	    (rank_node = calloc(cfg->nproc, sizeof *rank_node)) == NULL)
		fatalx("out of memory");
	ngpu = sup_gpu_nodes(gpu_node, 1024);
	/* Each rank's node: its GPU's, else the ranks spread in blocks. */
	for (i = 0; i < cfg->nproc; i++) {
		rank_node[i] = i * nnodes / cfg->nproc;
		dev = sup_device_of(cfg, i);
		if (ngpu > 0 && dev >= 0 && dev < ngpu)
			for (j = 0; j < nnodes; j++)
				if (nodes[j] == gpu_node[dev])
					rank_node[i] = j;
	}
	for (i = 0; i < cfg->nproc; i++) {
		k = rank_node[i];
		node = nodes[k];
		b = &sup_ranks[i].bind;
		b->valid = 1;
		b->node = node;
		b->cpus = nodecpus[k];
		/* The index of this rank among its node's, and how many. */
		for (j = 0, n = 0, nw = 0; j < cfg->nproc; j++)
			if (rank_node[j] == k) {
				n += j < i;
				nw++;
			}
		switch (cfg->numa_mode) {
		case SUP_NUMA_SOCKET:
			p = sup_cpu_package(sup_first(&nodecpus[k]));
			for (j = 0; j < nnodes && p >= 0; j++)
				if (sup_cpu_package(sup_first(&nodecpus[j])) ==
				    p) {
					pkg = nodecpus[j];
					CPU_OR(&b->cpus,
					    &b->cpus, &pkg);
				}
			break;
		case SUP_NUMA_EXCLUSIVE:
			j = sup_groups(&nodecpus[k], "topology/"
			    "thread_siblings_list", keys, 1024);
			if (j < nw) {
				log_warnx("--numa_binding exclusive: NUMA "
				    "node %d has %d cores for %d workers: local "
				    "rank %d gets the whole node", node, j, nw, i);
				break;
			}
			per = j / nw;
			extra = j % nw;
			p = n * per + (n < extra ? n : extra);
			sup_pick(&nodecpus[k], "topology/thread_siblings_list",
			    keys, p, p + per + (n < extra), &b->cpus);
			break;
		case SUP_NUMA_CORE_COMPLEX:
			j = sup_groups(&nodecpus[k], "cache/index3/"
			    "shared_cpu_list", keys, 1024);
			if (j > 0)
				sup_pick(&nodecpus[k], "cache/index3/"
				    "shared_cpu_list", keys, n % j, n % j + 1,
				    &b->cpus);
			break;
		default:
			break;
		}
		sup_format_list(&b->cpus, list, sizeof list);
		log_info("--numa_binding %s: local rank %d on NUMA node %d%s, "
		    "CPUs %s", mode, i, node, ngpu > 0 && sup_device_of(cfg,
		    i) >= 0 && sup_device_of(cfg, i) < ngpu ? " (its GPU's)" :
		    "", list);
	}
	free(gpu_node);
	free(rank_node);
	return (0);
}
