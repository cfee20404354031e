/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctl.h: rdzvctl's internal index, one section per file.
 *
 * rdzvctl.c owns the command line, the table of commands and what the
 * commands share (one request, failures worded for the operator, JSON
 * output); the commands are in cmd_admin.c (status), cmd_jobs.c (jobs,
 * members, events, top, close, evict, forget, credential) and cmd_kv.c
 * (kv get, set, del, list); ctl_conn.c the connection to rdzvd
 * (plaintext or TLS, through common/client.h) and the operator requests
 * (ADMIN_*), which client.h has no calls of their own for; ctl_fmt.c the
 * human output (aligned tables, durations, wall-clock times).
 */
#ifndef RDZV_CTL_H
#define RDZV_CTL_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct rdzv_client;

/* Exit statuses scripts rely on (rdzvctl --help, rdzvctl(1)). */
#define CTL_EXIT_OK	0	/* done */
#define CTL_EXIT_SERVER	1	/* rdzvd answered with an error */
#define CTL_EXIT_USAGE	2	/* bad command line */
#define CTL_EXIT_CONN	3	/* cannot connect, connection lost, timeout */
#define CTL_EXIT_AUTH	4	/* authentication refused or impossible,
				 * TLS refused or failed */

#define CTL_DEFAULT_ENDPOINT	"127.0.0.1:29400"

/* ---- ctl_conn.c ---- */

struct ctl_opts {
	const char	*endpoint;	/* HOST:PORT */
	const char	*token_file;	/* NULL: no token */
	const char	*tls_ca;	/* NULL: plaintext; a file or "system" */
	int		 timeout_ms;	/* connect and each request */
};

/* The exit status for an RDZV_E* code (CTL_EXIT_*). */
int	ctl_exit_code(int code);

/*
 * Connects to o->endpoint (over TLS when o->tls_ca is set, authenticating
 * with the token when one is set); with retry, a refused or unanswered
 * connection is tried again for o->timeout_ms.  Returns the client, or
 * NULL after printing an error that says what to do, with *status set to
 * the exit status.
 */
struct rdzv_client	*ctl_connect(const struct ctl_opts *o, int retry,
			    int *status);

/*
 * One operator request with op and fields as described in wire.h: fmt is
 * a string of 'i' (int64_t) and 'b' (const char *, a C string) naming
 * the variadic arguments in order.  On success *reply (malloc'ed,
 * NUL-terminated, may be NULL when the reply has no fields) and *len hold
 * the reply's only bytes field.  timeout_ms < 0 waits forever.  Returns
 * 0 or a negative RDZV_E* code; an error reply's message is copied into
 * errmsg.  RDZV_ECANCELED when a signal interrupted the wait and
 * ctl_interrupted was set.
 */
int	ctl_admin(struct rdzv_client *, int timeout_ms, char **reply,
	    size_t *len, char *errmsg, size_t errsz, uint16_t op,
	    const char *fmt, ...);
int	ctl_vadmin(struct rdzv_client *, int timeout_ms, char **reply,
	    size_t *len, char *errmsg, size_t errsz, uint16_t op,
	    const char *fmt, va_list ap);

/*
 * Catches SIGINT and SIGTERM: from then on they set ctl_interrupted and
 * a waiting ctl_admin() returns RDZV_ECANCELED, however late or early
 * the signal comes.
 */
void	ctl_catch_signals(void);
extern volatile sig_atomic_t	ctl_interrupted;

/* ---- ctl_fmt.c ---- */

struct ctl_table;

/*
 * A table printed with aligned columns: header names, separated by '|'
 * in spec; a name starting with '>' is right-aligned (the '>' is not
 * printed).  Returns NULL on allocation failure.
 */
struct ctl_table	*ctl_table_new(const char *spec);
/*
 * Appends one cell, printf-formatted; cells fill rows left to right.
 * Returns 0 or -1 on allocation failure.
 */
int	ctl_table_cell(struct ctl_table *, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));
/* Prints the header and rows to stdout and frees the table. */
void	ctl_table_print(struct ctl_table *);
void	ctl_table_free(struct ctl_table *);

/* "850ms", "4.2s", "3m05s", "2h03m", "5d02h"; "-" for negative. */
char	*ctl_fmt_duration(char *buf, size_t sz, int64_t ms);
/* Local time "2026-11-22 10:51:03.123" of a wall-clock time in ms. */
char	*ctl_fmt_time(char *buf, size_t sz, int64_t epoch_ms);

/* ---- rdzvctl.c ---- */

/* The command line, as parsed: what every command is handed. */
struct ctl {
	struct ctl_opts	 o;
	int		 json;
	unsigned	 given;		/* OPT_* (rdzvctl.c) seen on the line */
	const char	*ns;
	const char	*reason;
	int		 follow;
	int64_t		 after;
	int64_t		 count;		/* top: views, 0 until closed */
	int		 now;		/* evict: drop at once */
	const char	*out;		/* credential: the file to write */
	const char	*cmd;
	char		 errmsg[256];
};

/* Prints "rdzvctl: <message> (rdzvctl --help)"; returns CTL_EXIT_USAGE. */
int	ctl_usage(const char *fmt, ...)
	    __attribute__((format(printf, 1, 2)));
/*
 * Reports a failed request (code, an RDZV_E* code) in words that say
 * what happened and what to try, and returns the exit status.  what
 * names the object for not-found errors ("job \"x\""), hint says where
 * to look (may be NULL).
 */
int	ctl_fail(struct ctl *, int code, const char *what, const char *hint);
/*
 * Connects, makes one operator request (op, fmt and the arguments as in
 * ctl_admin()) and closes.  Returns 0 with *text (the reply's JSON,
 * malloc'ed; NULL for an empty reply), or the exit status after
 * reporting the failure, with *text NULL (so the caller may free it
 * either way); what and hint word a not-found answer.
 */
int	ctl_request(struct ctl *, const char *what, const char *hint,
	    char **text, size_t *len, uint16_t op, const char *fmt, ...);
/*
 * Takes a reply's JSON text (freed here): with --json prints it as it is
 * and returns CTL_EXIT_OK with *doc NULL; otherwise returns CTL_EXIT_OK
 * with *doc parsed, or CTL_EXIT_SERVER when it is not JSON.
 */
int	ctl_document(struct ctl *, char *text, size_t len, json_t **doc);
/* Parses a reply's JSON text; NULL (after saying so) if it is not JSON
 * or text is NULL. */
json_t	*ctl_parse(struct ctl *, const char *text, size_t len);
/* o's member key: an integer (-1 when absent or not one), a string ("-"
 * when absent or not one). */
int64_t		 ctl_jint(const json_t *o, const char *key);
const char	*ctl_jstr(const json_t *o, const char *key);
/* Prints a JSON value compactly on one line; returns the exit status. */
int	ctl_print_json(const json_t *);

/*
 * The commands: each takes the parsed line and its operands (argc within
 * the table's minargs..maxargs, options checked against its opts) and
 * returns the exit status (CTL_EXIT_*).
 */

/* ---- cmd_admin.c ---- */

int	cmd_status(struct ctl *, int argc, char **argv);

/* ---- cmd_jobs.c ---- */

int	cmd_jobs(struct ctl *, int argc, char **argv);
int	cmd_members(struct ctl *, int argc, char **argv);
int	cmd_events(struct ctl *, int argc, char **argv);
int	cmd_top(struct ctl *, int argc, char **argv);
int	cmd_close(struct ctl *, int argc, char **argv);
int	cmd_evict(struct ctl *, int argc, char **argv);
int	cmd_forget(struct ctl *, int argc, char **argv);
/* Derives the job's credential from --token-file; rdzvd is not asked. */
int	cmd_credential(struct ctl *, int argc, char **argv);

/* ---- cmd_kv.c ---- */

/* kv get|set|del|list, in namespace ctl->ns. */
int	cmd_kv(struct ctl *, int argc, char **argv);

#endif /* RDZV_CTL_H */
