/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agent.h: rdzv-agent's index header, one section per .c file.
 *
 * rdzv-agent is torchrun's replacement: one per node, it joins a job's
 * rendezvous in rdzvd (rdzv.c), or one it or another agent hosts where
 * torchrun's agent would (main.c), starts the local workers of each round
 * and supervises them (sup.c, the only file that forks), routes their
 * output and error files (logs.c), and ties the three together in one
 * event-driven state machine (main.c).  rank.c keeps what each local
 * rank is (struct agent_rank) and starts every worker of one.
 * cli_opts.c reads torchrun's command line, PET_* and SLURM_* variables
 * through one table of options; cli.c resolves what they mean into a
 * struct agent_config.
 * progress.c is the two-way channel to each worker (steps, "hello",
 * "ready" in; repair rounds and "stop" out); common/chan.c has its
 * messages.
 */
#ifndef AGENT_H
#define AGENT_H

#include <sys/types.h>

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

struct event_base;
struct chan_msg;

#define AGENT_NPROC_MAX		4096	/* local workers, a sanity bound */
#define SUP_SPARES_MAX		64	/* warm spares of one agent */
#define AGENT_MSG_MAX		4096	/* bytes of a failure message sent */

/* ---- cli.c: what the options mean (rendezvous, endpoint, command) ---- */

/* Which rendezvous the agent takes part in (torchrun's backends). */
enum agent_rdzv_mode {
	AGENT_RDZV_RDZVD,	/* rdzvd at the endpoint (or --standalone) */
	AGENT_RDZV_STATIC,	/* node rank 0 hosts at master_addr:port */
	AGENT_RDZV_C10D,	/* hosted by the agent on the endpoint's host
				 * (is_host), or rdzvd running there */
};

#define AGENT_DEFAULT_ID	"none"	/* --rdzv_id when not given (cli.c) */

struct agent_config {
	int		 nnodes_min;
	int		 nnodes_max;
	int		 nproc;		/* resolved local world size */
	char		*nproc_spec;	/* as given: N, auto, gpu or cpu */
	char		*endpoint;	/* rdzvd HOST:PORT ("[v6]:port") */
	char		*ep_host;	/* its host part: MASTER_ADDR */
	int		 ep_port;	/* its port; 0: any, for its host */
	char		*rdzv_id;
	char		*rdzv_backend;	/* static, c10d or rdzv */
	enum agent_rdzv_mode rdzv_mode;
	int		 is_host;	/* c10d: 1 host, 0 never, -1 if local */
	char		*rdzv_conf;
	int		 standalone;
	int		 max_restarts;
	double		 monitor_interval; /* accepted: we are event-driven */
	char		*role;
	char		*log_dir;	/* NULL: a temporary one */
	char		*redirects;	/* "N" or "rank:N,..." (torchrun) */
	char		*tee;
	char		*local_addr;
	char		*token_file;	/* rdzvd's shared secret, or NULL */
	char		*tls_ca;	/* CA for rdzvd's TLS, or NULL */
	int		 no_python;
	int		 module;
	int		 run_path;
	int		 node_rank;	/* static: the group rank to take */
	char		*master_addr;
	int		 master_port;
	int		 round_ports[2]; /* hosted rdzvd's LO, HI; 0: any */
	int		 grace_ms;	/* SIGTERM -> SIGKILL */
	int		 progress_timeout_ms; /* 0: no hang watchdog */
	int		 gpus_per_worker; /* 0: leave CUDA_VISIBLE_DEVICES */
	char		*gpu_list;	/* devices to hand out, comma list */
	int		 dry_run;
	int		 verbose;

	/* --rdzv_conf keys, in milliseconds; -1 lets rdzvd choose. */
	int		 last_call_ms;
	int		 lease_ms;
	int		 heartbeat_ms;	/* resolved: lease / 4 or a default */
	int		 join_timeout_ms;
	int		 reconnect_timeout_ms;
	int		 close_ms;	/* how long LEAVE waits for its reply */
	int		 max_repairs;	/* --rdzv_conf max_repairs; -1 rdzvd's */
	int		 repair_timeout_ms; /* --rdzv_conf repair_timeout */
	/* --rdzv_conf straggler_ratio (per mille; 0 off), straggler_window,
	 * straggler_action (enum nat_straggler_action); -1 rdzvd's. */
	int		 strag_ratio_pm, strag_window_ms, strag_action;
	int		 replicas;	/* --rdzv_conf replicas; 0 none */

	/* torchrun 2.x: the console, signals and devices. */
	char		*ranks_filter;	/* --local_ranks_filter "0,2", or NULL */
	char		*prefix_tmpl;	/* the line prefix template, or NULL */
	sigset_t	 fwd_signals;	/* forwarded; the agent goes on */
	int		 virtual_local_rank; /* LOCAL_RANK 0, one device each */
	int		 numa_mode;	/* enum sup_numa_mode */
	int		 warm_spare;	/* --warm_spare: keep a warm python */

	char		*program;	/* the user's program, for messages */
	char	       **argv;		/* the worker command, NULL-terminated */
	int		 argc;
};

/*
 * Fills cfg from defaults, SLURM_*, PET_* and then argv (which wins).
 * Returns 0; prints --help/--version and returns 1 (exit 0); prints the
 * cause and returns -1 (exit 2) on a bad option.
 */
int	cli_parse(struct agent_config *cfg, int argc, char **argv);
/* Prints the resolved configuration (--dry-run). */
void	cli_print(const struct agent_config *cfg, FILE *);
/* Counts the GPUs this node shows (CUDA_VISIBLE_DEVICES, /proc, /dev,
 * nvidia-smi -L), 0 when none. */
int	cli_count_gpus(char **list);

/* ---- cli_opts.c: the option table, PET_* and SLURM_* defaults ---- */

/* struct cli_state's given: what was named, not left to a default. */
#define CLI_GIVEN_NNODES	0x001
#define CLI_GIVEN_ID		0x002
#define CLI_GIVEN_ENDPOINT	0x004	/* a non-empty --rdzv_endpoint */
#define CLI_GIVEN_BACKEND	0x008
#define CLI_GIVEN_MASTER	0x010	/* --master_addr or --master_port */
#define CLI_GIVEN_NODE_RANK	0x020
#define CLI_GIVEN_LEASE		0x040	/* --rdzv_conf lease */
#define CLI_GIVEN_HEARTBEAT	0x080	/* --rdzv_conf heartbeat */
#define CLI_GIVEN_JOIN		0x100	/* --rdzv_conf join_timeout */
#define CLI_GIVEN_RECONNECT	0x200	/* --rdzv_conf reconnect_timeout */

/*
 * One reading of the options: the configuration it fills, and what cli.c
 * needs besides to resolve it.
 */
struct cli_state {
	struct agent_config	*cfg;
	unsigned		 given;		/* CLI_GIVEN_* */
	/* torchrun's --rdzv_conf keys, mapped onto ours once all are read:
	 * ms (keep_alive_n a count); -1 when not given. */
	int			 read_ms, hb_timeout_ms, timeout_ms;
	int			 keep_alive_ms, keep_alive_n;
};

/* How a row's value is set (CLI_FN: by the row's own setter). */
enum cli_kind {
	CLI_FLAG,	/* takes no value: the int at off becomes 1 */
	CLI_STR,	/* a copy of the value into the char * at off */
	CLI_INT,	/* a whole number min..max into the int at off */
	CLI_SECONDS,	/* seconds, maybe fractional, into the int at off, ms */
	CLI_ACCEPT,	/* torchrun's, accepted: nothing to set */
	CLI_FN		/* set(), which may use off */
};

struct cli_opt;
/* A row's setter: 0, 1 (--help, --version: exit 0) or -1 (printed). */
typedef int	cli_set_fn(struct cli_state *, const struct cli_opt *,
		    const char *v);

/* One option: a row of cli_opts[]. */
struct cli_opt {
	const char	*name;	/* the underscore spelling; the hyphen one
				 * and PET_<NAME> follow from it */
	int		 shortc;	/* its letter, or 0 */
	enum cli_kind	 kind;
	size_t		 off;	/* offsetof(struct agent_config, field) */
	long long	 min, max;	/* CLI_INT's bounds */
	unsigned	 given;	/* CLI_GIVEN_* bits it sets */
	cli_set_fn	*set;	/* CLI_FN's setter, else NULL */
	const char	*arg;	/* its value in --help; NULL: a flag */
	const char	*help;	/* --help's lines for it, '\n' between */
};

extern const struct cli_opt	 cli_opts[];
extern const size_t		 cli_nopts;
/* --numa_binding's words, in enum sup_numa_mode order ("" for none). */
extern const char *const	 cli_numa_modes[];

/* Starts a reading: st over cfg, which gets every option's default. */
void	cli_opts_init(struct cli_state *st, struct agent_config *cfg);
/*
 * The environment's defaults: SLURM_*, torch's own variables, then
 * PET_<OPTION> for every option.  Returns 0, or -1 (printed).
 */
int	cli_opts_env(struct cli_state *st);
/*
 * The command line, both spellings, up to PROGRAM, whose index goes in
 * *first.  Returns 0, 1 (--help or --version printed) or -1 (printed).
 */
int	cli_opts_argv(struct cli_state *st, int argc, char **argv,
	    int *first);
/*
 * Applies one row's value: v is NULL for a flag on the command line, and
 * a flag's PET_ value ("1", "0", "true" ...) otherwise.  Returns as a
 * setter does.
 */
int	cli_opts_apply(struct cli_state *st, const struct cli_opt *o,
	    const char *v);
/* --help, from the table. */
void	cli_opts_usage(FILE *);
/* strdup that cannot fail (fatal), and *dst replaced by a copy of v. */
char	*cli_strdup(const char *);
void	cli_setstr(char **dst, const char *v);
/* A whole number min..max into *out; else prints why, naming --name. */
int	cli_int(const char *name, const char *v, long long min,
	    long long max, int *out);
/*
 * The redirect/tee mask (0 none, 1 stdout, 2 stderr, 3 both) for
 * local_rank from a torchrun spec ("3", or "0:3,1:2"); -1 when malformed.
 */
int	cli_std_for(const char *spec, int local_rank);
/*
 * Whether local_rank's console output is shown (--local_ranks_filter):
 * 1 or 0.
 */
int	cli_rank_shown(const struct agent_config *, int local_rank);

/* ---- rank.c: what one local rank is, and how its worker starts ---- */

struct rdzv_round;

/*
 * One local rank of this node (0 .. nproc - 1), as the state machine
 * (main.c) keeps it: rank.c's table, one for each, for the agent's life.
 * The rest of a local rank lives with the file that serves it, under the
 * same number, private there: its running worker and the argv and
 * environment it was last started with in sup.c (sup_pid; sup_respawn
 * starts a replacement from them), its output streams and error file in
 * logs.c, its channel and the steps it reported in progress.c.  Every
 * worker a local rank gets (the first of a round, a replacement in place
 * after a death, a warm spare handed the rank for either) is started by
 * rank_spawn().  Only local ranks below RZ_REPAIR_LWS_MAX, the ranks
 * rdzvd's masks hold, are ever replaced in place.
 */
struct agent_rank {
	int		 local_rank;
	int64_t		 hung_at;	/* mono_ms() the watchdog sent it
					 * SIGABRT; 0: not hung */
	int		 strag_killed;	/* killed as a straggler (rdzvd's
					 * straggler_action=replace) */
	int		 pending;	/* replaced in place, its READY not
					 * sent yet */
	int		 fresh;		/* a replacement in place, until the
					 * round changes */
	int		 unjoined;	/* a replacement that never stepped,
					 * reported with SUCCEEDED: stopped
					 * at DONE */
};

/* Makes the table: cfg->nproc ranks, none marked (cfg is kept). */
void	rank_init(const struct agent_config *cfg);
/* Local rank local_rank's state; a rank out of range is fatal. */
struct agent_rank *rank_get(int local_rank);
/* A new round: no rank is hung, pending, fresh or unjoined any more. */
void	rank_new_round(void);
/* Whether any rank is pending: a replacement on its way, READY unsent. */
int	rank_any_pending(void);
/* Whether any rank's worker is a replacement in place (fresh). */
int	rank_any_fresh(void);
/*
 * The one way a worker is started for ar: the first of round r
 * (replacement 0: env_worker's environment for r, on the output streams
 * and channel that logs_attempt and progress_attempt made), or a
 * replacement in place for the worker that just died, its exit reaped
 * (replacement 1: fresh streams and channel, logs_rearm and
 * progress_rearm, and sup_respawn's launch: the predecessor's argv and
 * environment plus RDZV_REPLACEMENT=1; ar is then pending and fresh,
 * rdzvd hears of it with the next HEARTBEAT and one line is logged).
 * Either way a warm spare, when one waits, takes the launch instead of
 * a fork (sup.c); *warm says so.  Returns 0, or an RDZV_E* code with no
 * worker started.
 */
int	rank_spawn(struct agent_rank *ar, const struct rdzv_round *r,
	    int replacement, int *warm);

/* ---- sup.c: spawning and supervising workers (the only fork) ---- */

/* --numa_binding, torch's modes. */
enum sup_numa_mode {
	SUP_NUMA_NONE,
	SUP_NUMA_NODE,		/* the CPUs of the worker's NUMA node */
	SUP_NUMA_SOCKET,	/* of every node of that node's socket */
	SUP_NUMA_EXCLUSIVE,	/* the node's cores split among its workers */
	SUP_NUMA_CORE_COMPLEX,	/* one L3 cache group of the node each */
};

struct sup_exit {
	int		 local_rank;
	pid_t		 pid;
	int		 status;	/* as from waitpid */
	struct timespec	 when;		/* CLOCK_REALTIME of the reap */
	int		 replacement;	/* it was started by sup_respawn */
};
typedef void	(*sup_exit_cb)(const struct sup_exit *, void *);
typedef void	(*sup_done_cb)(void *);

/*
 * --numa_binding: works out each local rank's CPUs and preferred memory
 * node from the topology under /sys (nodes, their CPUs that the agent
 * may use, sockets, cores, L3 caches) and the NUMA node of the rank's GPU
 * (nvidia-smi's PCI bus id); without GPUs the ranks are spread over the
 * nodes in blocks.  With one node it logs that there is nothing to bind.
 * sup_spawn applies it in the child.  Returns 0.
 */
int	sup_numa_init(const struct agent_config *);
/* Installs the SIGCHLD event.  cb hears of every worker exit. */
int	sup_init(struct event_base *, sup_exit_cb cb, void *arg);
/*
 * Starts one worker for local_rank (kept as its launch for sup_respawn):
 * fork with every signal blocked; the child gets its own session and
 * process group, a parent-death SIGKILL, default signal handlers,
 * out_fd/err_fd (>= 0) as stdout/stderr, prog_fd (>= 0) as fd
 * PROGRESS_CHILD_FD, no other descriptor, and execs argv[0] (PATH
 * search) with envp.  With a warm spare waiting (and prog_fd >= 0, no
 * --numa_binding for the rank, no stop under way) the spare takes the
 * launch instead, as in sup_respawn (*warm, when not NULL, says which).
 * Returns 0 with *pid set; RDZV_EINVAL (a bad argv or envp, local_rank
 * out of range), RDZV_EEXIST (a worker of local_rank still runs: its
 * exit must be reaped first), RDZV_ENOMEM or RDZV_EIO.
 */
int	sup_spawn(int local_rank, char *const argv[], char *const envp[],
	    int out_fd, int err_fd, int prog_fd, pid_t *pid, int *warm);
/*
 * Starts a replacement for local_rank alone (in-place recovery): the argv
 * and environment of local_rank's last sup_spawn, plus RDZV_REPLACEMENT=1,
 * with these descriptors (as sup_spawn's; a fresh progress socket from
 * progress_rearm).  No other worker is touched or signalled.  A warm
 * spare, when one waits, becomes the replacement as in sup_spawn (*warm,
 * when not NULL, says which).  Returns 0 with *pid set; RDZV_EINVAL
 * (local_rank out of range), RDZV_ENOTFOUND (local_rank was never
 * spawned), RDZV_EEXIST (a worker of local_rank is still running: its
 * exit must be reaped first), RDZV_EBUSY (sup_stop is under way),
 * RDZV_ENOMEM or RDZV_EIO.
 */
int	sup_respawn(int local_rank, int out_fd, int err_fd, int prog_fd,
	    pid_t *pid, int *warm);
/*
 * Starts one more warm spare: a child that is no worker (sup_live,
 * sup_signal and sup_stop leave it alone), started like one (own session,
 * parent-death SIGKILL) with argv and envp, stdout and stderr on
 * /dev/null and a control socket at fd 3 (rdzv.spare, which imports
 * torch and waits).  While spares wait, sup_respawn and sup_spawn hand
 * the oldest the rank instead of forking (with *warm set to 1): the
 * rank's argv, environment and descriptors in one datagram (a spare that
 * cannot take it is killed, with one line, and the worker starts cold).
 * A spare that ends unused is reaped with one line and none is started
 * again.  Returns 0; RDZV_EEXIST (SUP_SPARES_MAX wait), RDZV_EBUSY (one
 * died before, or a sup_stop is under way), RDZV_EINVAL or RDZV_EIO.
 */
int	sup_spare_start(char *const argv[], char *const envp[]);
/* The spares waiting. */
int	sup_spare_count(void);
/* SIGKILLs every spare's group and reaps it (the agent is leaving). */
void	sup_spare_stop(void);
/* The pid of local_rank's running worker, 0 when none runs. */
pid_t	sup_pid(int local_rank);
/* Live workers (replacements included). */
int	sup_live(void);
/* Sends sig to the process group of every live worker. */
void	sup_signal(int sig);
/*
 * Sends sig to every live worker process itself, not its group (the
 * children a worker made, a DataLoader's, would die of a SIGUSR1 they do
 * not expect).  Returns how many were signalled.
 */
int	sup_forward(int sig);
/* Sends sig to local_rank's group: 0, RDZV_ENOTFOUND (not running). */
int	sup_signal_rank(int local_rank, int sig);
/*
 * Stops every live worker: sig (SIGTERM) to each group, and SIGKILL to
 * the groups still alive after grace_ms.  done is called once no worker
 * is left (at once, from the event loop, if none is).
 */
void	sup_stop(int sig, int grace_ms, sup_done_cb done, void *arg);
/* SIGKILLs every live worker's group now (a second signal). */
void	sup_kill_now(void);
/*
 * Runs argv to completion before the event loop starts (nvidia-smi),
 * capturing up to outsz - 1 bytes of stdout; returns the byte count or
 * a negative RDZV_E* code.
 */
int	sup_capture(char *const argv[], char *out, size_t outsz,
	    int timeout_ms);
/* Describes a wait status: "exit code 3" or "signal 9 (SIGKILL)". */
const char	*sup_describe(int status, char *buf, size_t len);

/* ---- logs.c: log directories, worker output, error files ---- */

/* A worker failure as the summary prints it. */
struct logs_failure {
	int		 valid;
	int		 local_rank;
	int64_t		 rank;
	pid_t		 pid;
	int		 status;	/* as from waitpid */
	struct timespec	 when;		/* CLOCK_REALTIME */
	int64_t		 round;
	int		 has_errfile;	/* the worker wrote one */
	char		 errfile[4096];
	char		 message[AGENT_MSG_MAX];
	char		 stack[8192];
	char		 stamp[64];	/* the error file's timestamp */
};

/* Creates the run directory <log_dir>/<run_id>_<random>. */
int	logs_init(struct event_base *, const struct agent_config *);
/* Removes the run directory when it was a temporary one. */
void	logs_cleanup(void);
/*
 * Prepares attempt n for nproc workers, ranks rank_base..: attempt_<n>/
 * <local_rank>/ with stdout.log, stderr.log (per --redirects/--tee) and a
 * path for error.json (removed if left over), and each rank's console
 * line prefix.  Returns 0 or an RDZV_E* code.
 */
int	logs_attempt(int attempt, int nproc, int64_t rank_base);
/*
 * Expands a line prefix template as torch's string.Template does with
 * safe_substitute: ${role_name} (or $role_name), ${local_rank}, ${rank},
 * and rdzv's ${hostname}; "$$" is "$"; anything else is left as it is.
 * Returns 0, or RDZV_ETOOBIG with out cut to outsz - 1 bytes.
 */
int	logs_prefix(const char *tmpl, const char *role, int local_rank,
	    int64_t rank, const char *host, char *out, size_t outsz);
/* The error file path for local_rank (TORCHELASTIC_ERROR_FILE). */
const char	*logs_error_file(int local_rank);
/*
 * The stdout and stderr fds the child of local_rank gets: the write end
 * of a pipe the agent reads (console, tee), or the log file itself
 * (redirect only).  The agent's copies are closed by logs_spawned().
 */
int	logs_child_fds(int local_rank, int *out_fd, int *err_fd);
void	logs_spawned(int local_rank);
/* Reads what the pipes of local_rank hold now (after its exit). */
void	logs_drain(int local_rank);
/*
 * Re-arms local_rank's output for a replacement worker (in-place
 * recovery), after its predecessor's exit and before sup_respawn: the
 * predecessor's pipes are read out (a partial last line ends the line)
 * and closed, and the streams are opened again as logs_attempt opened
 * them: the same --redirects/--tee/--local_ranks_filter choice and
 * console prefix (the attempt's ${rank}), the same stdout.log and
 * stderr.log appended to after a line "[rdzv-agent] local rank N
 * replaced (replacement K)...".  The replacement inherits its
 * predecessor's TORCHELASTIC_ERROR_FILE with the rest of its environment
 * (sup_respawn), so an error file the predecessor wrote is renamed to
 * error.<k>.json beside it (k the first free number) and logs_read_error
 * reads the replacement's own error only: read the predecessor's first.
 * moved (when not NULL) gets the renamed file's path, "" when there was
 * none, for a failure record that named the old path.  *out_fd and
 * *err_fd are as from logs_child_fds: pass them to sup_respawn, then
 * call logs_spawned.  Returns 0; RDZV_ENOTFOUND (no such rank in this
 * attempt), RDZV_EIO or RDZV_ENOMEM, with *out_fd and *err_fd -1 and the
 * rank's output closed: do not respawn then (restart instead).
 */
int	logs_rearm(int local_rank, int *out_fd, int *err_fd, char *moved,
	    size_t movedsz);
/* Closes every pipe and file of the attempt, flushing partial lines. */
void	logs_end_attempt(void);

/*
 * Reads local_rank's error file, if the worker wrote one in torch's
 * format ({"message": {"message": ..., "extraInfo": {"py_callstack":
 * ..., "timestamp": ...}}} or {"message": "..."}).  Returns 0 and fills
 * what it found (NUL-terminated, truncated to fit), RDZV_ENOTFOUND when
 * there is no file, RDZV_EPROTO when it is not such JSON.
 */
int	logs_read_error(int local_rank, char *msg, size_t msgsz, char *stack,
	    size_t stacksz, char *stamp, size_t stampsz);
/*
 * Prints the failure summary to f in torchrun's layout (the title,
 * "Failures:" with the other workers of the round that did not exit 0,
 * as torchrun lists those it stopped, "Root Cause (first observed failure):" with time, host,
 * rank, exitcode, error_file and traceback), then rdzv's own lines: the
 * job's first failure as rdzvd words it (job_msg; job_here when the
 * agent itself could not go on), the worker's message and signal.  The
 * caller adds its own section and ends with logs_summary_end().
 */
void	logs_summary(FILE *f, const char *program, const char *host,
	    const struct logs_failure *first, const struct sup_exit *others,
	    int nothers, const char *job_msg, int job_here);
void	logs_summary_end(FILE *f);
/*
 * For a launcher above this one (torchrun, a wrapper): when the agent
 * itself has TORCHELASTIC_ERROR_FILE, the root cause's error file is
 * copied there, or, when the worker wrote none, one in torch's format
 * naming the failure (job_msg when it was on another node).  Returns 0,
 * RDZV_ENOTFOUND when the agent has no such variable, or RDZV_EIO.
 */
int	logs_error_to_parent(const char *program, const char *host,
	    const struct logs_failure *first, const char *job_msg);

/* ---- host.c: whether this agent hosts the rendezvous ---- */

/*
 * Hosts the rendezvous where torchrun's agent would (--standalone, node
 * rank 0 of a static one, c10d's is_host with its port free), an
 * embedded rdzvd on base: *hosted 1 then, and c's endpoint gets the port
 * it got for a port 0.  0, or -1 (logged) when the agent cannot go on.
 */
int	host_rendezvous(struct agent_config *c, struct event_base *base,
	    int *hosted);
/* Stops the rdzvd host_rendezvous started. */
void	host_stop(void);

/* ---- env.c: what each worker gets in its environment ---- */

struct rdzv_round;

/* Appends NAME=value to a growing NULL-terminated array (*n entries in
 * *cap slots): a worker's variables before env_merge. */
void	env_set(char ***envp, size_t *n, size_t *cap, const char *name,
	    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The defaults torchrun sets only when the user has not (a worker's and
 * the warm spare's, which loads the libraries that read them). */
void	env_defaults(const struct agent_config *, char ***envp, size_t *n,
	    size_t *cap);
/* The agent's environment less what vars set, plus vars (nv of them);
 * takes vars' array. */
char  **env_merge(char **vars, size_t nv);
/* The world size workers started in round r are told (a standby's,
 * started into a repair round: the world once the round grows). */
int64_t	env_world(const struct agent_config *, const struct rdzv_round *r);
/* The variables rdzv-agent sets for local_rank in round r, alone (*np
 * of them, NULL-terminated; --dry_run prints them). */
char  **env_vars(const struct agent_config *, int local_rank,
	    const struct rdzv_round *r, size_t *np);
/* local_rank's whole environment for round r. */
char  **env_worker(const struct agent_config *, int local_rank,
	    const struct rdzv_round *r);
/* Frees what env_worker or env_merge made (our strings only). */
void	env_free(char **);

/* ---- progress.c: the channel to each worker (steps, repair) ---- */

/* The fd number a worker finds its progress socket at. */
#define PROGRESS_CHILD_FD	3

/* What a worker said that the main loop may act on. */
enum progress_note {
	PROGRESS_HELLO,		/* "hello": progress_can_repair() may change */
	PROGRESS_READY,		/* "ready": a replacement can join now */
	PROGRESS_STEP,		/* its first step report (a replacement:
				 * it holds the job's state) */
	PROGRESS_MOVED,		/* its first report past the step it had
				 * at progress_touch: a step in the round
				 * sent then */
};
typedef void	(*progress_note_cb)(int local_rank, enum progress_note,
		    void *);

void	progress_init(struct event_base *);
/*
 * cb hears of each "hello", "ready", first step and first step past a
 * round's mark (progress_touch), always from the event loop (never
 * from inside a progress_* call), and only for the worker whose socket
 * is armed when it runs: a note from a worker whose rank was re-armed
 * since is dropped.  cb may call any progress_* function.
 */
void	progress_set_cb(progress_note_cb cb, void *arg);
/*
 * Makes a socket pair for each of nproc workers of a new attempt (the
 * last reports of the previous attempt are forgotten).  Returns 0 or an
 * RDZV_E* code.
 */
int	progress_attempt(int nproc);
/*
 * Gives local_rank a fresh socket pair for a replacement worker (the
 * old one's socket is closed; its step, hello and ready are forgotten,
 * so the watchdog does not judge the replacement by its predecessor's
 * last report).  Call it after the old worker's exit (read its last step
 * with progress_get first) and before sup_respawn; then pass
 * progress_child_fd() and call progress_spawned() as for a spawn.
 * Returns 0, RDZV_ENOTFOUND (no such rank in this attempt), RDZV_EIO or
 * RDZV_ENOMEM.
 */
int	progress_rearm(int local_rank);
/* The worker's end for local_rank, to pass to sup_spawn; -1 if none. */
int	progress_child_fd(int local_rank);
/* Closes the agent's copy of local_rank's worker end after the fork. */
void	progress_spawned(int local_rank);
/* Reads the last reports and closes the attempt's sockets. */
void	progress_end_attempt(void);
/*
 * The last step local_rank reported and when (mono_ms()).  0, or
 * RDZV_ENOTFOUND when it has reported none in this attempt.
 */
int	progress_get(int local_rank, uint64_t *step, int64_t *when);
/*
 * When (mono_ms()) local_rank's worker last said "wait" (a collective of
 * its blocked on its peers), 0 if never in this attempt.
 */
int64_t	progress_waited(int local_rank);
/*
 * Restarts local_rank's --progress_timeout clock (its last step stays):
 * a repair round was just sent to it, and rebuilding takes its time.  A
 * replacement that said "ready" and has reported no step is watched from
 * then: it must join (and report the step it received) in time.  Its
 * first report past the step it has now is a PROGRESS_MOVED note (a
 * step committed in that round).
 */
void	progress_touch(int local_rank);
/*
 * What the --progress_timeout watchdog watches: as progress_get, or a
 * replacement joining a round since progress_touch (*joining 1, *step 0);
 * RDZV_ENOTFOUND for a worker that said "done" (its training ended) and
 * has reported no step since.
 */
int	progress_watch_get(int local_rank, uint64_t *step, int64_t *when,
	    int *joining);
/*
 * Whether local_rank's current worker (the one on its socket now, running
 * or just exited) said "hello repair=1": 1 or 0.
 */
int	progress_can_repair(int local_rank);
/*
 * Whether every local rank's current worker said "hello repair=1"; 0 with
 * no attempt.  A job repairs only when this holds on every node; a
 * replacement counts from its own hello on.
 */
int	progress_all_can_repair(void);
/* Whether local_rank's current worker said "ready": 1 or 0. */
int	progress_ready(int local_rank);
/*
 * Formats m (chan_format: a "round" or "stop") and sends it to
 * local_rank's worker without blocking; a worker not spawned yet finds it
 * queued.  Returns 0; chan_format's RDZV_EINVAL or RDZV_ETOOBIG (nothing
 * sent); RDZV_ENOTFOUND (no such rank or its socket is closed),
 * RDZV_ECONN (the worker is gone), RDZV_EBUSY (its queue is full: it
 * reads none) or RDZV_EIO.
 */
int	progress_send(int local_rank, const struct chan_msg *m);
/*
 * Sends m (a "stop") to every local rank with an open socket; returns how
 * many took it, or chan_format's RDZV_EINVAL / RDZV_ETOOBIG for a bad m.
 */
int	progress_send_all(const struct chan_msg *m);

/* ---- rdzv.c: the asynchronous connection to rdzvd ---- */

/* A ROUND push, decoded; strings are NUL-terminated copies. */
struct rdzv_round {
	int64_t		 round;
	int64_t		 state;		/* enum rdzv_round_state */
	int64_t		 node_id;
	int64_t		 group_rank;
	int64_t		 group_world_size;
	int64_t		 world_size;
	int64_t		 rank_base;
	int64_t		 restart_count;
	int64_t		 max_restarts;
	int64_t		 store_port;
	int64_t		 kind;		/* enum nat_round_kind */
	int64_t		 donor;		/* repair rounds: the donor rank */
	int64_t		 live_local;	/* repair rounds: bit l live */
	char		 store_ns[1025];
	char		 message[AGENT_MSG_MAX];
};

struct rdzv_cbs {
	/* JOIN acknowledged (first time and after every reconnect). */
	void	(*joined)(int64_t node_id, int64_t restart_count, void *);
	/* A ROUND push for this node. */
	void	(*round)(const struct rdzv_round *, void *);
	/* The job cannot go on: closed, refused, or rdzvd unreachable. */
	void	(*fatal)(int code, const char *msg, void *);
	/* The LEAVE was acknowledged, or could not be sent in time. */
	void	(*left)(void *);
	/* A STRAGGLER push: rdzvd wants local_rank of round replaced. */
	void	(*straggler)(int64_t round, int local_rank, void *);
	/* A DRAIN push: rdzvd asks this node to leave round on purpose
	 * (why: "evicted by an operator"). */
	void	(*drain)(int64_t round, const char *why, void *);
	/* For each HEARTBEAT: the local ranks (bit l) whose workers are
	 * replacements that never stepped, up or on their way (0: none). */
	int64_t	(*unjoined)(void *);
	/* For each HEARTBEAT: the latest round a local worker committed a
	 * step in (0: none yet). */
	int64_t	(*stepped)(void *);
};

/*
 * Starts connecting to cfg->endpoint and joining; everything after is
 * reported through cbs.  Returns 0 or RDZV_EINVAL (bad endpoint).
 */
int	rdzv_start(struct event_base *, const struct agent_config *,
	    const struct rdzv_cbs *, void *arg);
/*
 * The token file the workers get as RDZV_TOKEN_FILE (NULL: none): the
 * job's credential, never the operator's secret.
 */
const char	*rdzv_worker_token_file(void);
/* This agent's instance id (hex) and node id (-1 before JOIN). */
const char	*rdzv_instance(void);
/* Host of the rdzvd last joined (of --rdzv_endpoint's list): MASTER_ADDR. */
const char	*rdzv_master_host(void);
int64_t	rdzv_node_id(void);
/*
 * Reports a worker failure of round (kept and sent again after a
 * reconnect until rdzvd acknowledges it); repair: the agent is starting
 * a replacement for local_rank (rdzvd answers with a shrink round, or
 * STOP when the job cannot repair).
 */
void	rdzv_report_failure(int64_t round, int local_rank, int64_t rank,
	    int exit_code, int signo, int repair, const char *message);
/* Reports that local_rank's replacement said "ready" (READY). */
void	rdzv_report_ready(int64_t round, int local_rank);
/* Whether every local worker can repair, as HEARTBEAT tells rdzvd (a
 * change to 1 is sent at once). */
void	rdzv_set_repairable(int on);
/* The replacements that never stepped changed (a new one): HEARTBEAT
 * tells rdzvd at once (rdzv_cbs.unjoined says which). */
void	rdzv_unjoined_changed(void);
/* A local worker committed its first step in a round (rdzv_cbs.stepped
 * says which): HEARTBEAT tells rdzvd at once, a grow may wait for it. */
void	rdzv_stepped_changed(void);
/*
 * Reports that every local worker of round exited 0, but for the
 * replacements in unjoined (bit l: local rank l), which are up or on
 * their way and never stepped: rdzvd then calls their grow off.
 */
void	rdzv_report_succeeded(int64_t round, int64_t unjoined);
/* Sends LEAVE; cbs->left runs on the reply or after timeout_ms. */
void	rdzv_leave(int timeout_ms);
/* Closes the connection and every timer. */
void	rdzv_shutdown(void);

#endif /* AGENT_H */
