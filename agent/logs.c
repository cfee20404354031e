/* SPDX-License-Identifier: Apache-2.0 */
/*
 * logs.c: where workers' output and error files go.
 *
 * Owns the run directory (<log_dir>/<run_id>_<random>, or one under
 * $TMPDIR removed at exit when no --log_dir was given), one directory
 * per attempt and local rank (attempt_<n>/<local_rank>/ with stdout.log,
 * stderr.log and error.json, as torchrun lays them out), and the pipes
 * the agent reads with libevent: every console line of a worker is
 * prefixed by the line prefix template (torchrun's, default
 * "[${role_name}${local_rank}]:"), and --tee copies the raw bytes to the
 * log file as well.  A stream only redirected goes straight to its file
 * without passing through the agent.  A stream with no prefix to add,
 * neither redirected nor teed, is the agent's own (as torchrun's
 * workers write to its console): a terminal stays a terminal, and the
 * default prefix is only added when the agent's stream is not a
 * terminal (a file or a pipe, where the nodes' lines would mix).
 * --local_ranks_filter sends the other ranks' console output to
 * /dev/null (their log files keep it).  A replacement for one local
 * rank (in-place recovery) gets that rank's streams afresh (logs_rearm),
 * its output appended to the same files after a marker line, and the
 * error file path to itself.  Also reads torch's error file format (with
 * jansson, up to LOGS_ERRFILE_MAX bytes).
 */
#include "config.h"

#include <sys/types.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "agent.h"
#include "log.h"
#include "rdzv_err.h"

#define LOGS_LINE_MAX		65536	/* a longer partial line is cut */
#define LOGS_ERRFILE_MAX	(1 << 20)
#define LOGS_PREFIX_MAX		512
#define LOGS_DEFAULT_PREFIX	"[${role_name}${local_rank}]:"

struct logs_stream {
	int		 rank;		/* local rank, for the prefix */
	int		 which;		/* STDOUT_FILENO or STDERR_FILENO */
	int		 rfd;		/* read end of the pipe, or -1 */
	int		 child_fd;	/* what the child gets, or -1 */
	int		 file_fd;	/* --tee copy, or -1 */
	struct event	*ev;
	struct evbuffer	*line;		/* a partial console line */
};

struct logs_rank {
	struct logs_stream	 s[2];
	char			 dir[PATH_MAX];	/* attempt_<n>/<local_rank> */
	char			 errfile[PATH_MAX];
	char			 prefix[LOGS_PREFIX_MAX]; /* expanded */
	int			 has_prefix;
	int			 replaced;	/* replacements so far */
	char			 moved[32];	/* the last predecessor's
						 * error file, or "" */
};

static struct event_base		*logs_base;
static const struct agent_config	*logs_cfg;
static char				 logs_run[PATH_MAX];
static char				 logs_tmproot[PATH_MAX];
static struct logs_rank			*logs_ranks;
static int				 logs_nranks;
static size_t				 logs_summary_w = 60;
static char				 logs_host[256];

static int
logs_mkdir(const char *path)
{
	if (mkdir(path, 0755) == -1 && errno != EEXIST) {
		log_warn("mkdir %s", path);
		return (RDZV_EIO);
	}
	return (0);
}

/* mkdir -p for the user's --log_dir. */
static int
logs_mkdirs(const char *path)
{
	char	buf[PATH_MAX], *p;

	if (strlcpy(buf, path, sizeof buf) >= sizeof buf)
		return (RDZV_ETOOBIG);
	for (p = buf + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) == -1 && errno != EEXIST) {
			log_warn("mkdir %s", buf);
			return (RDZV_EIO);
		}
		*p = '/';
	}
	return (logs_mkdir(buf));
}

int
logs_init(struct event_base *base, const struct agent_config *cfg)
{
	char		 base_dir[PATH_MAX], rnd[9];
	const char	*tmp;
	uint32_t	 r;
	int		 i;

	logs_base = base;
	logs_cfg = cfg;
	if (gethostname(logs_host, sizeof logs_host) == -1)
		strlcpy(logs_host, "localhost", sizeof logs_host);
	logs_host[sizeof logs_host - 1] = '\0';
	if (cfg->log_dir != NULL) {
		if (strlcpy(base_dir, cfg->log_dir, sizeof base_dir) >=
		    sizeof base_dir || logs_mkdirs(base_dir) != 0)
			return (RDZV_EIO);
	} else {
		if ((tmp = getenv("TMPDIR")) == NULL || *tmp == '\0')
			tmp = "/tmp";
		snprintf(logs_tmproot, sizeof logs_tmproot,
		    "%s/rdzv-agent-XXXXXX", tmp);
		if (mkdtemp(logs_tmproot) == NULL) {
			log_warn("mkdtemp %s", logs_tmproot);
			logs_tmproot[0] = '\0';
			return (RDZV_EIO);
		}
		strlcpy(base_dir, logs_tmproot, sizeof base_dir);
	}
	/* A random suffix keeps two runs of one job apart, like torchrun. */
	for (i = 0; i < 100; i++) {
		r = arc4random();
		snprintf(rnd, sizeof rnd, "%08x", r);
		if (snprintf(logs_run, sizeof logs_run, "%s/%s_%s", base_dir,
		    cfg->rdzv_id, rnd) >= (int)sizeof logs_run)
			return (RDZV_ETOOBIG);
		if (mkdir(logs_run, 0755) == 0)
			return (0);
		if (errno != EEXIST)
			break;
	}
	log_warn("mkdir %s", logs_run);
	return (RDZV_EIO);
}

static int
logs_rm_cb(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)(flag == FTW_DP ? rmdir(path) : unlink(path));
	return (0);
}

void
logs_cleanup(void)
{
	if (logs_tmproot[0] != '\0')
		(void)nftw(logs_tmproot, logs_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	logs_tmproot[0] = '\0';
}

/* Writes all of buf to fd, giving up on errors (a closed console). */
static void
logs_write(int fd, const void *buf, size_t len)
{
	const char	*p = buf;
	ssize_t		 n;

	while (len > 0) {
		n = write(fd, p, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		p += n;
		len -= n;
	}
}

int
logs_prefix(const char *tmpl, const char *role, int local_rank, int64_t rank,
    const char *host, char *out, size_t outsz)
{
	const char	*p = tmpl, *id, *val;
	char		 num[32];
	size_t		 o = 0, n, idlen;
	int		 braced;

	if (outsz == 0)
		return (RDZV_EINVAL);
	out[0] = '\0';
	while (*p != '\0') {
		val = NULL;
		n = 1;
		if (p[0] == '$' && p[1] == '$') {
			val = "$";
			n = 2;
		} else if (p[0] == '$') {
			braced = p[1] == '{';
			id = p + 1 + braced;
			for (idlen = 0; id[idlen] == '_' ||
			    isalpha((unsigned char)id[idlen]) ||
			    (idlen > 0 && isdigit((unsigned char)id[idlen]));
			    idlen++)
				;
			if (idlen > 0 && (!braced || id[idlen] == '}')) {
				n = 1 + braced + idlen + braced;
				if (idlen == 9 &&
				    strncmp(id, "role_name", 9) == 0)
					val = role;
				else if (idlen == 10 &&
				    strncmp(id, "local_rank", 10) == 0) {
					snprintf(num, sizeof num, "%d",
					    local_rank);
					val = num;
				} else if (idlen == 4 &&
				    strncmp(id, "rank", 4) == 0) {
					snprintf(num, sizeof num, "%lld",
					    (long long)rank);
					val = num;
				} else if (idlen == 8 &&
				    strncmp(id, "hostname", 8) == 0)
					val = host;
				else
					n = 1;	/* unknown: left as is */
			}
		}
		if (val == NULL) {
			if (o + 1 >= outsz)
				return (RDZV_ETOOBIG);
			out[o++] = *p;
		} else {
			if (strlen(val) >= outsz - o)
				return (RDZV_ETOOBIG);
			memcpy(out + o, val, strlen(val));
			o += strlen(val);
		}
		out[o] = '\0';
		p += n;
	}
	return (0);
}

/* Writes one console line with the rank's prefix. */
static void
logs_console_line(int which, int rank, const char *line, size_t len)
{
	struct evbuffer	*out;
	const char	*pfx, *cr;
	size_t		 n;

	if ((out = evbuffer_new()) == NULL)
		return;
	if (rank >= 0 && rank < logs_nranks && logs_ranks[rank].has_prefix) {
		pfx = logs_ranks[rank].prefix;
		evbuffer_add(out, pfx, strlen(pfx));
		/* A progress bar's "\r" returns to the prefix, not before. */
		while ((cr = memchr(line, '\r', len)) != NULL &&
		    (size_t)(cr - line) + 1 < len) {
			evbuffer_add(out, line, cr - line + 1);
			evbuffer_add(out, pfx, strlen(pfx));
			len -= cr - line + 1;
			line = cr + 1;
		}
	}
	evbuffer_add(out, line, len);
	evbuffer_add(out, "\n", 1);
	n = evbuffer_get_length(out);
	logs_write(which, evbuffer_pullup(out, n), n);
	evbuffer_free(out);
}

/* Sends the complete lines of s->line to the console; all with flush. */
static void
logs_emit(struct logs_stream *s, int rank, int flush)
{
	struct evbuffer_ptr	 eol;
	size_t			 len;
	char			*p;

	for (;;) {
		len = evbuffer_get_length(s->line);
		if (len == 0)
			return;
		eol = evbuffer_search_eol(s->line, NULL, NULL,
		    EVBUFFER_EOL_LF);
		if (eol.pos == -1) {
			if (!flush && len < LOGS_LINE_MAX)
				return;
			p = (char *)evbuffer_pullup(s->line, len);
			logs_console_line(s->which, rank, p, len);
			evbuffer_drain(s->line, len);
			return;
		}
		p = (char *)evbuffer_pullup(s->line, eol.pos + 1);
		logs_console_line(s->which, rank, p, eol.pos);
		evbuffer_drain(s->line, eol.pos + 1);
	}
}

static void
logs_close_stream(struct logs_stream *s, int rank)
{
	if (s->line != NULL) {
		logs_emit(s, rank, 1);
		evbuffer_free(s->line);
		s->line = NULL;
	}
	if (s->ev != NULL) {
		event_free(s->ev);
		s->ev = NULL;
	}
	if (s->rfd != -1)
		close(s->rfd);
	if (s->child_fd != -1)
		close(s->child_fd);
	if (s->file_fd != -1)
		close(s->file_fd);
	s->rfd = s->child_fd = s->file_fd = -1;
}

/* Reads what the pipe holds; returns 1 at EOF. */
static int
logs_read(struct logs_stream *s, int rank)
{
	char	buf[16384];
	ssize_t	n;

	for (;;) {
		n = read(s->rfd, buf, sizeof buf);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return (errno == EAGAIN ? 0 : 1);
		if (n == 0)
			return (1);
		if (s->file_fd != -1)
			logs_write(s->file_fd, buf, n);
		evbuffer_add(s->line, buf, n);
		logs_emit(s, rank, 0);
	}
}

static void
logs_read_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct logs_stream	*s = arg;
	int			 rank = s->rank;

	if (logs_read(s, rank) == 1) {
		/* EOF: the worker and anything it forked closed the pipe. */
		logs_emit(s, rank, 1);
		event_del(s->ev);
		close(s->rfd);
		s->rfd = -1;
	}
}

/*
 * Marks in local_rank's log file (fd, open for appending, at path) where
 * a replacement's output begins: on a line of its own, after whatever its
 * predecessor left unfinished.
 */
static void
logs_mark(int fd, const char *path, int rank)
{
	struct logs_rank	*r = &logs_ranks[rank];
	struct stat		 st;
	char			 last = '\n', line[256];
	int			 rfd, n;

	if (fstat(fd, &st) == 0 && st.st_size > 0 &&
	    (rfd = open(path, O_RDONLY | O_CLOEXEC)) != -1) {
		if (pread(rfd, &last, 1, st.st_size - 1) != 1)
			last = '\n';
		close(rfd);
	}
	n = snprintf(line, sizeof line, "%s[rdzv-agent] local rank %d "
	    "replaced (replacement %d)%s%s\n", last == '\n' ? "" : "\n",
	    rank, r->replaced, r->moved[0] != '\0' ?
	    "; the error file of the worker it replaces is now " : "",
	    r->moved);
	logs_write(fd, line, n < (int)sizeof line ? (size_t)n :
	    sizeof line - 1);
}

static int
logs_open_stream(struct logs_stream *s, const char *dir, int rank, int which)
{
	char	path[PATH_MAX];
	int	mask, redir, tee, bit, shown, p[2];

	s->rank = rank;
	s->which = which;
	s->rfd = s->child_fd = s->file_fd = -1;
	bit = which == STDOUT_FILENO ? 1 : 2;
	redir = cli_std_for(logs_cfg->redirects, rank);
	tee = cli_std_for(logs_cfg->tee, rank);
	mask = (redir > 0 ? redir : 0) | (tee > 0 ? tee : 0);
	shown = cli_rank_shown(logs_cfg, rank);
	if (mask & bit) {
		snprintf(path, sizeof path, "%s/%s", dir,
		    which == STDOUT_FILENO ? "stdout.log" : "stderr.log");
		s->file_fd = open(path, O_WRONLY | O_CREAT | O_APPEND |
		    O_CLOEXEC, 0644);
		if (s->file_fd == -1) {
			log_warn("open %s", path);
			return (RDZV_EIO);
		}
		if (logs_ranks[rank].replaced > 0)
			logs_mark(s->file_fd, path, rank);
		if (!(tee > 0 && (tee & bit)) || !shown) {
			/* Redirect only (or a teed rank filtered out of the
			 * console): the file is the child's stream. */
			s->child_fd = s->file_fd;
			s->file_fd = -1;
			return (0);
		}
	} else if (!shown) {
		if ((s->child_fd = open("/dev/null", O_WRONLY |
		    O_CLOEXEC)) == -1) {
			log_warn("open /dev/null");
			return (RDZV_EIO);
		}
		return (0);
	} else if (!logs_ranks[rank].has_prefix ||
	    (logs_cfg->prefix_tmpl == NULL && isatty(which))) {
		/* The agent's own stream, inherited: nothing to add. */
		return (0);
	}
	if (pipe2(p, O_CLOEXEC) == -1) {
		log_warn("pipe");
		return (RDZV_EIO);
	}
	(void)fcntl(p[0], F_SETFL, O_NONBLOCK);
	s->rfd = p[0];
	s->child_fd = p[1];
	if ((s->line = evbuffer_new()) == NULL)
		return (RDZV_ENOMEM);
	s->ev = event_new(logs_base, s->rfd, EV_READ | EV_PERSIST,
	    logs_read_cb, s);
	if (s->ev == NULL || event_add(s->ev, NULL) == -1)
		return (RDZV_ENOMEM);
	return (0);
}

int
logs_attempt(int attempt, int nproc, int64_t rank_base)
{
	const char	*tmpl;
	char		 dir[PATH_MAX];
	int		 i, j, rv;

	logs_end_attempt();
	if ((logs_ranks = calloc(nproc, sizeof *logs_ranks)) == NULL)
		return (RDZV_ENOMEM);
	logs_nranks = nproc;
	tmpl = logs_cfg->prefix_tmpl != NULL ? logs_cfg->prefix_tmpl :
	    LOGS_DEFAULT_PREFIX;
	for (i = 0; i < nproc; i++) {
		if (logs_prefix(tmpl, logs_cfg->role, i, rank_base + i,
		    logs_host, logs_ranks[i].prefix,
		    sizeof logs_ranks[i].prefix) != 0)
			log_warnx("the line prefix of local rank %d is cut to "
			    "%d bytes", i, LOGS_PREFIX_MAX - 1);
		logs_ranks[i].has_prefix = logs_ranks[i].prefix[0] != '\0';
	}
	for (i = 0; i < nproc; i++)
		for (j = 0; j < 2; j++)
			logs_ranks[i].s[j].rfd = logs_ranks[i].s[j].child_fd =
			    logs_ranks[i].s[j].file_fd = -1;
	if (snprintf(dir, sizeof dir, "%s/attempt_%d", logs_run, attempt) >=
	    (int)sizeof dir)
		return (RDZV_ETOOBIG);
	if ((rv = logs_mkdir(dir)) != 0)
		return (rv);
	for (i = 0; i < nproc; i++) {
		if (snprintf(dir, sizeof dir, "%s/attempt_%d/%d", logs_run,
		    attempt, i) >= (int)sizeof dir)
			return (RDZV_ETOOBIG);
		if ((rv = logs_mkdir(dir)) != 0)
			return (rv);
		strlcpy(logs_ranks[i].dir, dir, sizeof logs_ranks[i].dir);
		if (snprintf(logs_ranks[i].errfile,
		    sizeof logs_ranks[i].errfile, "%s/error.json", dir) >=
		    (int)sizeof logs_ranks[i].errfile)
			return (RDZV_ETOOBIG);
		/* A file left by an earlier round must not be taken as new. */
		(void)unlink(logs_ranks[i].errfile);
		if ((rv = logs_open_stream(&logs_ranks[i].s[0], dir, i,
		    STDOUT_FILENO)) != 0 ||
		    (rv = logs_open_stream(&logs_ranks[i].s[1], dir, i,
		    STDERR_FILENO)) != 0)
			return (rv);
	}
	return (0);
}

const char *
logs_error_file(int rank)
{
	if (rank < 0 || rank >= logs_nranks)
		return ("");
	return (logs_ranks[rank].errfile);
}

int
logs_child_fds(int rank, int *out_fd, int *err_fd)
{
	if (rank < 0 || rank >= logs_nranks)
		return (RDZV_EINVAL);
	*out_fd = logs_ranks[rank].s[0].child_fd;
	*err_fd = logs_ranks[rank].s[1].child_fd;
	return (0);
}

void
logs_spawned(int rank)
{
	int	j;

	if (rank < 0 || rank >= logs_nranks)
		return;
	for (j = 0; j < 2; j++) {
		if (logs_ranks[rank].s[j].child_fd != -1)
			close(logs_ranks[rank].s[j].child_fd);
		logs_ranks[rank].s[j].child_fd = -1;
	}
}

void
logs_drain(int rank)
{
	struct logs_stream	*s;
	int			 j;

	if (rank < 0 || rank >= logs_nranks)
		return;
	for (j = 0; j < 2; j++) {
		s = &logs_ranks[rank].s[j];
		if (s->rfd == -1)
			continue;
		if (logs_read(s, rank) == 1) {
			logs_emit(s, rank, 1);
			event_del(s->ev);
			close(s->rfd);
			s->rfd = -1;
		}
	}
}

/*
 * Moves local_rank's error file, if its last worker wrote one, out of the
 * way of the next: to error.<k>.json beside it, k the first free number
 * (an earlier round of the same attempt number may have left some).
 * Records the name in r->moved ("" when there was no file).
 */
static int
logs_move_errfile(struct logs_rank *r)
{
	struct stat	st;
	char		path[PATH_MAX];
	int		k;

	r->moved[0] = '\0';
	if (lstat(r->errfile, &st) == -1)
		return (errno == ENOENT ? 0 : RDZV_EIO);
	for (k = 0; k < 100000; k++) {
		snprintf(r->moved, sizeof r->moved, "error.%d.json", k);
		if (snprintf(path, sizeof path, "%s/%s", r->dir, r->moved) >=
		    (int)sizeof path)
			break;
		if (lstat(path, &st) == 0)
			continue;
		if (errno == ENOENT && rename(r->errfile, path) == 0)
			return (0);
		break;
	}
	log_warn("cannot move %s aside", r->errfile);
	r->moved[0] = '\0';
	return (RDZV_EIO);
}

int
logs_rearm(int rank, int *out_fd, int *err_fd, char *moved, size_t movedsz)
{
	struct logs_rank	*r;
	int			 j, rv;

	*out_fd = *err_fd = -1;
	if (moved != NULL && movedsz > 0)
		moved[0] = '\0';
	if (rank < 0 || rank >= logs_nranks)
		return (RDZV_ENOTFOUND);
	r = &logs_ranks[rank];
	/*
	 * What the predecessor wrote is read now; what processes it left
	 * behind write later is lost with the old pipes.
	 */
	logs_drain(rank);
	for (j = 0; j < 2; j++)
		logs_close_stream(&r->s[j], rank);
	if ((rv = logs_move_errfile(r)) != 0)
		return (rv);
	if (moved != NULL && movedsz > 0 && r->moved[0] != '\0' &&
	    snprintf(moved, movedsz, "%s/%s", r->dir, r->moved) >=
	    (int)movedsz)
		moved[0] = '\0';
	r->replaced++;
	for (j = 0; j < 2; j++)
		if ((rv = logs_open_stream(&r->s[j], r->dir, rank,
		    j == 0 ? STDOUT_FILENO : STDERR_FILENO)) != 0) {
			logs_close_stream(&r->s[0], rank);
			logs_close_stream(&r->s[1], rank);
			return (rv);
		}
	return (logs_child_fds(rank, out_fd, err_fd));
}

void
logs_end_attempt(void)
{
	int	i, j;

	for (i = 0; i < logs_nranks; i++) {
		logs_drain(i);
		for (j = 0; j < 2; j++)
			logs_close_stream(&logs_ranks[i].s[j], i);
	}
	free(logs_ranks);
	logs_ranks = NULL;
	logs_nranks = 0;
}

/* ---- torch's error file ---- */

/*
 * The text at path (object keys, NULL-ended) in doc: a string's
 * characters, or a number's or literal's JSON text, cut to fit out.
 * Returns 0, or RDZV_ENOTFOUND when a key is missing or the value is an
 * object or an array.
 */
static int
logs_json_text(json_t *doc, const char *const *path, char *out,
    size_t outsz)
{
	json_t	*v = doc;
	char	*t;

	for (; *path != NULL; path++)
		if ((v = json_object_get(v, *path)) == NULL)
			return (RDZV_ENOTFOUND);
	if (json_is_string(v)) {
		strlcpy(out, json_string_value(v), outsz);
		return (0);
	}
	if (json_is_object(v) || json_is_array(v))
		return (RDZV_ENOTFOUND);
	if ((t = json_dumps(v, JSON_ENCODE_ANY)) == NULL)
		return (RDZV_ENOMEM);
	strlcpy(out, t, outsz);
	free(t);
	return (0);
}

int
logs_read_error(int rank, char *msg, size_t msgsz, char *stack,
    size_t stacksz, char *stamp, size_t stampsz)
{
	static const char *const p_msg[] = { "message", "message", NULL };
	static const char *const p_str[] = { "message", NULL };
	static const char *const p_stack[] = { "message", "extraInfo",
	    "py_callstack", NULL };
	static const char *const p_stamp[] = { "message", "extraInfo",
	    "timestamp", NULL };
	json_error_t	 jerr;
	json_t		*doc;
	char		*buf;
	ssize_t		 n;
	size_t		 got = 0;
	int		 fd, rv;

	msg[0] = stack[0] = stamp[0] = '\0';
	if (rank < 0 || rank >= logs_nranks)
		return (RDZV_EINVAL);
	if ((fd = open(logs_ranks[rank].errfile, O_RDONLY | O_CLOEXEC)) == -1)
		return (RDZV_ENOTFOUND);
	if ((buf = malloc(LOGS_ERRFILE_MAX)) == NULL) {
		close(fd);
		return (RDZV_ENOMEM);
	}
	while (got < LOGS_ERRFILE_MAX &&
	    (n = read(fd, buf + got, LOGS_ERRFILE_MAX - got)) > 0)
		got += n;
	close(fd);
	doc = json_loadb(buf, got, 0, &jerr);
	free(buf);
	if (doc == NULL)
		return (RDZV_EPROTO);
	rv = logs_json_text(doc, p_msg, msg, msgsz);
	if (rv == RDZV_ENOTFOUND)
		rv = logs_json_text(doc, p_str, msg, msgsz);
	if (rv == 0) {
		(void)logs_json_text(doc, p_stack, stack, stacksz);
		(void)logs_json_text(doc, p_stamp, stamp, stampsz);
	}
	json_decref(doc);
	return (rv);
}

/* ---- the failure summary, in torchrun's layout ---- */

#define LOGS_SUMMARY_WIDTH	60	/* torchrun's widest border */

/* torch's timestamp_isoformat(): local time, "YYYY-MM-DD_HH:MM:SS". */
static void
logs_time(time_t t, char *buf, size_t len)
{
	struct tm	tm;

	localtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%d_%H:%M:%S", &tm);
}

/* The failure's time: the error file's timestamp, else the reap's. */
static time_t
logs_failure_time(const struct logs_failure *f)
{
	const char	*errstr;
	long long	 t;

	if (f->stamp[0] != '\0') {
		t = strtonum(f->stamp, 1, LLONG_MAX, &errstr);
		if (errstr == NULL)
			return ((time_t)t);
	}
	return (f->when.tv_sec);
}

/* torch's exit code: -N for signal N. */
static int
logs_exitcode(int status)
{
	if (WIFSIGNALED(status))
		return (-WTERMSIG(status));
	return (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/*
 * What torch shows as the traceback: the error file's py_callstack, else
 * its message, else for a signal "Signal N (SIGX) received by PID P",
 * else where to read about @record.
 */
static void
logs_traceback(const struct logs_failure *f, struct evbuffer *b)
{
	const char	*t, *nl;

	if (f->stack[0] != '\0')
		t = f->stack;
	else if (f->message[0] != '\0')
		t = f->message;
	else if (WIFSIGNALED(f->status)) {
		evbuffer_add_printf(b, "Signal %d (SIG%s) received by PID %ld",
		    WTERMSIG(f->status), sigabbrev_np(WTERMSIG(f->status)) ?
		    sigabbrev_np(WTERMSIG(f->status)) : "?", (long)f->pid);
		return;
	} else
		t = "To enable traceback see: "
		    "https://pytorch.org/docs/stable/elastic/errors.html";
	/* Indented like torch's, line by line. */
	while ((nl = strchr(t, '\n')) != NULL) {
		evbuffer_add(b, t, nl - t + 1);
		evbuffer_add(b, "  ", 2);
		t = nl + 1;
	}
	evbuffer_add(b, t, strlen(t));
}

/* The widest line of s, capped at LOGS_SUMMARY_WIDTH. */
static size_t
logs_width(const char *s, size_t len, size_t w)
{
	const char	*end = s + len, *nl;

	while (s < end && w < LOGS_SUMMARY_WIDTH) {
		if ((nl = memchr(s, '\n', end - s)) == NULL)
			nl = end;
		if ((size_t)(nl - s) > w)
			w = nl - s;
		s = nl + 1;
	}
	return (w > LOGS_SUMMARY_WIDTH ? LOGS_SUMMARY_WIDTH : w);
}

static void
logs_rule(FILE *f, int c, size_t w)
{
	while (w-- > 0)
		fputc(c, f);
	fputc('\n', f);
}

/* One "[idx]:" entry of torchrun's layout. */
static void
logs_entry(struct evbuffer *b, int idx, const struct logs_failure *x,
    const char *host)
{
	char	t[64], sig[32];

	logs_time(logs_failure_time(x), t, sizeof t);
	sig[0] = '\0';
	if (WIFSIGNALED(x->status))
		snprintf(sig, sizeof sig, " (SIG%s)",
		    sigabbrev_np(WTERMSIG(x->status)) ?
		    sigabbrev_np(WTERMSIG(x->status)) : "?");
	evbuffer_add_printf(b, "[%d]:\n"
	    "  time      : %s\n"
	    "  host      : %s\n"
	    "  rank      : %lld (local_rank: %d)\n"
	    "  exitcode  : %d (pid: %ld) %s\n"
	    "  error_file: %s\n"
	    "  traceback : ", idx, t, host, (long long)x->rank, x->local_rank,
	    logs_exitcode(x->status), (long)x->pid, sig,
	    x->has_errfile ? x->errfile : "<N/A>");
	logs_traceback(x, b);
}

void
logs_summary(FILE *f, const char *program, const char *host,
    const struct logs_failure *first, const struct sup_exit *others,
    int nothers, const char *job_msg, int job_here)
{
	struct logs_failure	 o;
	struct evbuffer		*root, *rest;
	size_t			 w, len, rlen;
	int			 i;

	if ((root = evbuffer_new()) == NULL)
		return;
	if ((rest = evbuffer_new()) == NULL) {
		evbuffer_free(root);
		return;
	}
	for (i = 0; first->valid && i < nothers; i++) {
		memset(&o, 0, sizeof o);
		o.local_rank = others[i].local_rank;
		o.rank = first->rank - first->local_rank + o.local_rank;
		o.pid = others[i].pid;
		o.status = others[i].status;
		o.when = others[i].when;
		if (i > 0)
			evbuffer_add(rest, "\n", 1);
		logs_entry(rest, i + 1, &o, host);
	}
	if (evbuffer_get_length(rest) == 0)
		evbuffer_add_printf(rest, "  <NO_OTHER_FAILURES>");
	if (first->valid) {
		logs_entry(root, 0, first, host);
	} else
		evbuffer_add_printf(root, "[0]:\n  on another node: %s",
		    job_msg[0] != '\0' ? job_msg : "<N/A>");
	len = evbuffer_get_length(root);
	rlen = evbuffer_get_length(rest);
	w = logs_width((const char *)evbuffer_pullup(root, len), len,
	    strlen(program) + 7);
	w = logs_width((const char *)evbuffer_pullup(rest, rlen), rlen, w);

	fputc('\n', f);
	logs_rule(f, '=', w);
	fprintf(f, "%s FAILED\n", program);
	logs_rule(f, '-', w);
	fprintf(f, "Failures:\n");
	fwrite(evbuffer_pullup(rest, rlen), 1, rlen, f);
	fputc('\n', f);
	evbuffer_free(rest);
	logs_rule(f, '-', w);
	fprintf(f, "Root Cause (first observed failure):\n");
	fwrite(evbuffer_pullup(root, len), 1, len, f);
	fputc('\n', f);
	evbuffer_free(root);

	logs_rule(f, '-', w);
	fprintf(f, "rdzv-agent:\n");
	if (job_msg[0] != '\0')
		fprintf(f, "  %s: %s\n", job_here ? "stopped   " :
		    "job       ", job_msg);
	if (first->valid && first->message[0] != '\0')
		fprintf(f, "  message   : %s\n", first->message);
	if (first->valid && WIFSIGNALED(first->status))
		fprintf(f, "  signal    : %d (SIG%s)\n",
		    WTERMSIG(first->status), sigabbrev_np(WTERMSIG(first->status)) ?
		    sigabbrev_np(WTERMSIG(first->status)) : "?");
	if (!first->valid && job_msg[0] == '\0')
		fprintf(f, "  (no worker failed on this node)\n");
	logs_summary_w = w;
}

void
logs_summary_end(FILE *f)
{
	logs_rule(f, '=', logs_summary_w);
}

/* Writes len bytes to path through a temporary file and a rename. */
static int
logs_write_file(const char *path, const char *buf, size_t len)
{
	char	tmp[PATH_MAX];
	int	fd;

	if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp)
		return (RDZV_ETOOBIG);
	if ((fd = mkstemp(tmp)) == -1) {
		log_warn("TORCHELASTIC_ERROR_FILE: mkstemp %s", tmp);
		return (RDZV_EIO);
	}
	logs_write(fd, buf, len);
	if (fchmod(fd, 0644) == -1 || close(fd) == -1 ||
	    rename(tmp, path) == -1) {
		log_warn("TORCHELASTIC_ERROR_FILE: %s", path);
		(void)unlink(tmp);
		return (RDZV_EIO);
	}
	return (0);
}

int
logs_error_to_parent(const char *program, const char *host,
    const struct logs_failure *first, const char *job_msg)
{
	const char	*dst = getenv("TORCHELASTIC_ERROR_FILE");
	json_t		*doc;
	char		*buf = NULL, *js, desc[64];
	char		 what[AGENT_MSG_MAX + 512];
	ssize_t		 n;
	size_t		 got = 0;
	int		 fd, rv;

	if (dst == NULL || *dst == '\0')
		return (RDZV_ENOTFOUND);
	if (first->valid && first->has_errfile &&
	    (fd = open(first->errfile, O_RDONLY | O_CLOEXEC)) != -1) {
		/* The worker's own file, as torch's record() copies it. */
		if ((buf = malloc(LOGS_ERRFILE_MAX)) == NULL) {
			close(fd);
			return (RDZV_ENOMEM);
		}
		while (got < LOGS_ERRFILE_MAX && (n = read(fd, buf + got,
		    LOGS_ERRFILE_MAX - got)) > 0)
			got += n;
		close(fd);
		rv = logs_write_file(dst, buf, got);
		free(buf);
		return (rv);
	}
	if (first->valid)
		snprintf(what, sizeof what, "%s FAILED: rank %lld (local_rank "
		    "%d) on %s: %s", program, (long long)first->rank,
		    first->local_rank, host,
		    sup_describe(first->status, desc, sizeof desc));
	else
		snprintf(what, sizeof what, "%s FAILED: %s", program,
		    job_msg[0] != '\0' ? job_msg : "the job failed");
	doc = json_pack("{s:{s:s, s:{s:s, s:s}}}", "message", "message", what,
	    "extraInfo", "py_callstack", what, "timestamp", "");
	if (doc == NULL)
		return (RDZV_ENOMEM);
	snprintf(desc, sizeof desc, "%lld", (long long)(first->valid ?
	    logs_failure_time(first) : time(NULL)));
	json_object_set_new(json_object_get(json_object_get(doc, "message"),
	    "extraInfo"), "timestamp", json_string(desc));
	js = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (js == NULL)
		return (RDZV_ENOMEM);
	rv = logs_write_file(dst, js, strlen(js));
	free(js);
	return (rv);
}
