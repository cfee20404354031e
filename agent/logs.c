/*
 * logs.c: where workers' output and error files go.
 *
 * Owns the run directory (<log_dir>/<run_id>_<random>, or one under
 * $TMPDIR removed at exit when no --log_dir was given), one directory
 * per attempt and local rank (attempt_<n>/<local_rank>/ with stdout.log,
 * stderr.log and error.json, as torchrun lays them out), and the pipes
 * the agent reads with libevent: every console line of a worker is
 * prefixed "[<role><local_rank>]:" like torchrun's tee, and --tee copies
 * the raw bytes to the log file as well.  A stream only redirected goes
 * straight to its file without passing through the agent.  Also reads
 * torch's error file format with a small bounded JSON reader.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "agent.h"
#include "log.h"
#include "rdzv_err.h"

#define LOGS_LINE_MAX		65536	/* a longer partial line is cut */
#define LOGS_ERRFILE_MAX	(1 << 20)
#define LOGS_JSON_DEPTH		64

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
	char			 errfile[PATH_MAX];
};

static struct event_base		*logs_base;
static const struct agent_config	*logs_cfg;
static char				 logs_run[PATH_MAX];
static char				 logs_tmproot[PATH_MAX];
static struct logs_rank			*logs_ranks;
static int				 logs_nranks;

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

/* Writes one console line with the rank's prefix. */
static void
logs_console_line(int which, int rank, const char *line, size_t len)
{
	struct evbuffer	*out;
	size_t		 n;

	if ((out = evbuffer_new()) == NULL)
		return;
	evbuffer_add_printf(out, "[%s%d]:", logs_cfg->role, rank);
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

static int
logs_open_stream(struct logs_stream *s, const char *dir, int rank, int which)
{
	char	path[PATH_MAX];
	int	mask, redir, tee, bit, p[2];

	s->rank = rank;
	s->which = which;
	s->rfd = s->child_fd = s->file_fd = -1;
	bit = which == STDOUT_FILENO ? 1 : 2;
	redir = cli_std_for(logs_cfg->redirects, rank);
	tee = cli_std_for(logs_cfg->tee, rank);
	mask = (redir > 0 ? redir : 0) | (tee > 0 ? tee : 0);
	if (mask & bit) {
		snprintf(path, sizeof path, "%s/%s", dir,
		    which == STDOUT_FILENO ? "stdout.log" : "stderr.log");
		s->file_fd = open(path, O_WRONLY | O_CREAT | O_APPEND |
		    O_CLOEXEC, 0644);
		if (s->file_fd == -1) {
			log_warn("open %s", path);
			return (RDZV_EIO);
		}
		if (!(tee > 0 && (tee & bit))) {
			/* Redirect only: the file is the child's stream. */
			s->child_fd = s->file_fd;
			s->file_fd = -1;
			return (0);
		}
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
logs_attempt(int attempt, int nproc)
{
	char	dir[PATH_MAX];
	int	i, j, rv;

	logs_end_attempt();
	if ((logs_ranks = calloc(nproc, sizeof *logs_ranks)) == NULL)
		return (RDZV_ENOMEM);
	logs_nranks = nproc;
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

/* ---- a bounded JSON reader, enough for torch's error file ---- */

struct json {
	const char	*p;
	const char	*end;
};

static void
json_ws(struct json *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' ||
	    *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int
json_hex4(struct json *j, unsigned *v)
{
	int	i, c;

	if (j->end - j->p < 4)
		return (-1);
	*v = 0;
	for (i = 0; i < 4; i++) {
		c = (unsigned char)*j->p++;
		if (c >= '0' && c <= '9')
			c -= '0';
		else if (c >= 'a' && c <= 'f')
			c -= 'a' - 10;
		else if (c >= 'A' && c <= 'F')
			c -= 'A' - 10;
		else
			return (-1);
		*v = *v << 4 | c;
	}
	return (0);
}

/* Appends one byte to out if there is room (always leaving the NUL). */
static void
json_out(char *out, size_t outsz, size_t *o, char c)
{
	if (out != NULL && *o + 1 < outsz)
		out[(*o)++] = c;
	else if (out != NULL)
		(*o)++;
}

/* Decodes the string at j->p (at its '"') into out (NULL: skip). */
static int
json_string(struct json *j, char *out, size_t outsz)
{
	size_t		o = 0;
	unsigned	cp, lo;
	char		c;

	if (j->p >= j->end || *j->p != '"')
		return (-1);
	j->p++;
	for (;;) {
		if (j->p >= j->end)
			return (-1);
		c = *j->p++;
		if (c == '"')
			break;
		if ((unsigned char)c < 0x20)
			return (-1);
		if (c != '\\') {
			json_out(out, outsz, &o, c);
			continue;
		}
		if (j->p >= j->end)
			return (-1);
		switch ((c = *j->p++)) {
		case '"': case '\\': case '/':
			json_out(out, outsz, &o, c);
			continue;
		case 'b': json_out(out, outsz, &o, '\b'); continue;
		case 'f': json_out(out, outsz, &o, '\f'); continue;
		case 'n': json_out(out, outsz, &o, '\n'); continue;
		case 'r': json_out(out, outsz, &o, '\r'); continue;
		case 't': json_out(out, outsz, &o, '\t'); continue;
		case 'u':
			break;
		default:
			return (-1);
		}
		if (json_hex4(j, &cp) != 0)
			return (-1);
		if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 &&
		    j->p[0] == '\\' && j->p[1] == 'u') {
			j->p += 2;
			if (json_hex4(j, &lo) != 0 || lo < 0xdc00 ||
			    lo > 0xdfff)
				return (-1);
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		}
		if (cp < 0x80)
			json_out(out, outsz, &o, cp);
		else if (cp < 0x800) {
			json_out(out, outsz, &o, 0xc0 | cp >> 6);
			json_out(out, outsz, &o, 0x80 | (cp & 0x3f));
		} else if (cp < 0x10000) {
			json_out(out, outsz, &o, 0xe0 | cp >> 12);
			json_out(out, outsz, &o, 0x80 | ((cp >> 6) & 0x3f));
			json_out(out, outsz, &o, 0x80 | (cp & 0x3f));
		} else {
			json_out(out, outsz, &o, 0xf0 | cp >> 18);
			json_out(out, outsz, &o, 0x80 | ((cp >> 12) & 0x3f));
			json_out(out, outsz, &o, 0x80 | ((cp >> 6) & 0x3f));
			json_out(out, outsz, &o, 0x80 | (cp & 0x3f));
		}
	}
	if (out != NULL && outsz > 0)
		out[o < outsz ? o : outsz - 1] = '\0';
	return (0);
}

/* A number or a literal: its characters. */
static int
json_atom(struct json *j, const char **start, size_t *len)
{
	*start = j->p;
	while (j->p < j->end && (strchr("+-.0123456789eE", *j->p) != NULL ||
	    (*j->p >= 'a' && *j->p <= 'z')))
		j->p++;
	*len = j->p - *start;
	if (*len == 0)
		return (-1);
	if (strchr("-0123456789", **start) != NULL)
		return (0);
	if ((*len == 4 && (memcmp(*start, "true", 4) == 0 ||
	    memcmp(*start, "null", 4) == 0)) ||
	    (*len == 5 && memcmp(*start, "false", 5) == 0))
		return (0);
	return (-1);
}

static int
json_skip(struct json *j, int depth)
{
	const char	*s;
	size_t		 n;
	char		 close;

	if (depth > LOGS_JSON_DEPTH)
		return (-1);
	json_ws(j);
	if (j->p >= j->end)
		return (-1);
	if (*j->p == '"')
		return (json_string(j, NULL, 0));
	if (*j->p != '{' && *j->p != '[')
		return (json_atom(j, &s, &n));
	close = *j->p == '{' ? '}' : ']';
	j->p++;
	json_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return (0);
	}
	for (;;) {
		if (close == '}') {
			json_ws(j);
			if (json_string(j, NULL, 0) != 0)
				return (-1);
			json_ws(j);
			if (j->p >= j->end || *j->p++ != ':')
				return (-1);
		}
		if (json_skip(j, depth + 1) != 0)
			return (-1);
		json_ws(j);
		if (j->p >= j->end)
			return (-1);
		if (*j->p == close) {
			j->p++;
			return (0);
		}
		if (*j->p++ != ',')
			return (-1);
	}
}

int
logs_json_get(const char *js, size_t len, const char *const *path,
    char *out, size_t outsz)
{
	struct json	 j = { js, js + len };
	char		 key[256];
	const char	*s;
	size_t		 n;
	int		 found;

	if (outsz == 0)
		return (RDZV_EINVAL);
	for (; *path != NULL; path++) {
		json_ws(&j);
		if (j.p >= j.end || *j.p != '{')
			return (RDZV_ENOTFOUND);
		j.p++;
		found = 0;
		json_ws(&j);
		if (j.p < j.end && *j.p == '}')
			return (RDZV_ENOTFOUND);
		while (!found) {
			json_ws(&j);
			if (json_string(&j, key, sizeof key) != 0)
				return (RDZV_EPROTO);
			json_ws(&j);
			if (j.p >= j.end || *j.p++ != ':')
				return (RDZV_EPROTO);
			if (strcmp(key, *path) == 0) {
				found = 1;
				break;
			}
			if (json_skip(&j, 0) != 0)
				return (RDZV_EPROTO);
			json_ws(&j);
			if (j.p >= j.end)
				return (RDZV_EPROTO);
			if (*j.p == '}')
				return (RDZV_ENOTFOUND);
			if (*j.p++ != ',')
				return (RDZV_EPROTO);
		}
	}
	json_ws(&j);
	if (j.p >= j.end)
		return (RDZV_EPROTO);
	if (*j.p == '"')
		return (json_string(&j, out, outsz) == 0 ? 0 : RDZV_EPROTO);
	if (*j.p == '{' || *j.p == '[')
		return (RDZV_ENOTFOUND);
	if (json_atom(&j, &s, &n) != 0)
		return (RDZV_EPROTO);
	if (n >= outsz)
		n = outsz - 1;
	memcpy(out, s, n);
	out[n] = '\0';
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
	rv = logs_json_get(buf, got, p_msg, msg, msgsz);
	if (rv == RDZV_ENOTFOUND)
		rv = logs_json_get(buf, got, p_str, msg, msgsz);
	if (rv == 0) {
		(void)logs_json_get(buf, got, p_stack, stack, stacksz);
		(void)logs_json_get(buf, got, p_stamp, stamp, stampsz);
	}
	free(buf);
	return (rv);
}
