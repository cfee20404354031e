/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctl.h: rdzvctl's internal index, one section per file.
 *
 * rdzvctl.c owns the command line and the commands; ctl_conn.c the
 * connection to rdzvd (plaintext or TLS, through common/client.h) and
 * the operator requests (ADMIN_*), which client.h has no calls of their
 * own for; ctl_fmt.c the human output (aligned tables, durations,
 * wall-clock times).
 */
#ifndef RDZV_CTL_H
#define RDZV_CTL_H

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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

#endif /* RDZV_CTL_H */
