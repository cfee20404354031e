/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h: logging for the daemons and tools, after OpenBSD's log.c.
 *
 * log_warn() appends strerror(errno); log_warnx() does not.  fatal() and
 * fatalx() are for broken internal invariants only, never for bad input
 * from a peer.  Output goes to stderr (foreground, or a tool) or syslog,
 * or to a file that log_reopen() reopens (SIGHUP).
 */
#ifndef RDZV_LOG_H
#define RDZV_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum log_level { LOG_LVL_WARN = 0, LOG_LVL_INFO = 1, LOG_LVL_DEBUG = 2 };

/*
 * Starts logging as ident.  to_stderr selects stderr, otherwise syslog
 * (LOG_DAEMON).  path, when non-NULL, sends logs to that file instead
 * (appended); returns 0 or -1 with errno set when it cannot be opened.
 */
int	log_init(const char *ident, int to_stderr, const char *path);
/* Reopens the log file, if any (after rotation).  Returns 0 or -1. */
int	log_reopen(void);
void	log_setlevel(enum log_level);
enum log_level	log_getlevel(void);

void	log_warn(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_warnx(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_info(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_debug(const char *, ...) __attribute__((format(printf, 1, 2)));
void	fatal(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));
void	fatalx(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));

/*
 * Writes at most n bytes of p into out (size outsz, NUL-terminated) with
 * non-printable bytes escaped as \xNN, for logging peer-supplied data.
 * Returns out.
 */
char	*log_escape(char *out, size_t outsz, const void *p, size_t n);

#endif /* RDZV_LOG_H */
