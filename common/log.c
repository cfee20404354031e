/* SPDX-License-Identifier: Apache-2.0 */
/* log.c: logging to stderr, syslog or a file (see log.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static const char	*log_ident = "rdzv";
static int		 log_stderr = 1;
static char		*log_path;
static FILE		*log_file;
static enum log_level	 log_level = LOG_LVL_INFO;

int
log_init(const char *ident, int to_stderr, const char *path)
{
	log_ident = ident;
	log_stderr = to_stderr;
	free(log_path);
	log_path = NULL;
	if (path != NULL) {
		if ((log_path = strdup(path)) == NULL)
			return -1;
		return log_reopen();
	}
	if (!to_stderr)
		openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
	return 0;
}

int
log_reopen(void)
{
	FILE	*f;

	if (log_path == NULL)
		return 0;
	if ((f = fopen(log_path, "a")) == NULL)
		return -1;
	setvbuf(f, NULL, _IOLBF, 0);
	if (log_file != NULL)
		fclose(log_file);
	log_file = f;
	return 0;
}

void
log_setlevel(enum log_level level)
{
	log_level = level;
}

enum log_level
log_getlevel(void)
{
	return log_level;
}

static void
log_vwrite(int pri, const char *fmt, va_list ap, int with_errno)
{
	char		 msg[2048];
	int		 saved = errno;
	size_t		 n;

	vsnprintf(msg, sizeof msg, fmt, ap);
	if (with_errno) {
		n = strlen(msg);
		snprintf(msg + n, sizeof msg - n, ": %s", strerror(saved));
	}
	if (log_file != NULL || log_stderr) {
		FILE		*f = log_file != NULL ? log_file : stderr;
		struct timespec	 ts;
		struct tm	 tm;
		char		 stamp[32];

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
		fprintf(f, "%s.%03ld %s[%ld]: %s\n", stamp, ts.tv_nsec / 1000000,
		    log_ident, (long)getpid(), msg);
	} else
		syslog(pri, "%s", msg);
	errno = saved;
}

void
log_warn(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vwrite(LOG_WARNING, fmt, ap, 1);
	va_end(ap);
}

void
log_warnx(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vwrite(LOG_WARNING, fmt, ap, 0);
	va_end(ap);
}

void
log_info(const char *fmt, ...)
{
	va_list	ap;

	if (log_level < LOG_LVL_INFO)
		return;
	va_start(ap, fmt);
	log_vwrite(LOG_INFO, fmt, ap, 0);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list	ap;

	if (log_level < LOG_LVL_DEBUG)
		return;
	va_start(ap, fmt);
	log_vwrite(LOG_DEBUG, fmt, ap, 0);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vwrite(LOG_CRIT, fmt, ap, 1);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	log_vwrite(LOG_CRIT, fmt, ap, 0);
	va_end(ap);
	exit(1);
}

char *
log_escape(char *out, size_t outsz, const void *p, size_t n)
{
	const unsigned char	*s = p;
	size_t			 o = 0, i;

	if (outsz == 0)
		return out;
	for (i = 0; i < n && o + 5 < outsz; i++) {
		if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\')
			out[o++] = s[i];
		else
			o += snprintf(out + o, outsz - o, "\\x%02x", s[i]);
	}
	if (i < n && o + 4 < outsz) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
	return out;
}
