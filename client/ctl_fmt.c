/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctl_fmt.c: rdzvctl's human output: tables whose columns line up
 * whatever the cells hold, and durations and times an operator reads at
 * a glance.  Nothing here talks to rdzvd.
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

#define CTL_TABLE_COLS_MAX	16

struct ctl_table {
	size_t	 ncols;
	char	*head[CTL_TABLE_COLS_MAX];
	int	 right[CTL_TABLE_COLS_MAX];
	char	**cells;	/* row-major, ncells of them */
	size_t	 ncells;
	size_t	 cap;
};

struct ctl_table *
ctl_table_new(const char *spec)
{
	struct ctl_table	*t;
	const char		*p, *bar;
	size_t			 n;

	if ((t = calloc(1, sizeof *t)) == NULL)
		return NULL;
	for (p = spec; t->ncols < CTL_TABLE_COLS_MAX; p = bar + 1) {
		bar = strchr(p, '|');
		n = bar != NULL ? (size_t)(bar - p) : strlen(p);
		if (*p == '>') {
			t->right[t->ncols] = 1;
			p++;
			n--;
		}
		if ((t->head[t->ncols++] = strndup(p, n)) == NULL) {
			ctl_table_free(t);
			return NULL;
		}
		if (bar == NULL)
			break;
	}
	return t;
}

int
ctl_table_cell(struct ctl_table *t, const char *fmt, ...)
{
	va_list	  ap;
	char	**cells, *s;
	size_t	  cap;
	int	  rv;

	if (t->ncells == t->cap) {
		cap = t->cap == 0 ? 64 : t->cap * 2;
		if ((cells = reallocarray(t->cells, cap, sizeof *cells)) ==
		    NULL)
			return -1;
		t->cells = cells;
		t->cap = cap;
	}
	va_start(ap, fmt);
	rv = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (rv == -1)
		return -1;
	t->cells[t->ncells++] = s;
	return 0;
}

/* Display width of a UTF-8 string: continuation bytes take no column. */
static size_t
ctl_width(const char *s)
{
	size_t	w = 0;

	for (; *s != '\0'; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

static void
ctl_table_line(const struct ctl_table *t, char *const *row, size_t n,
    const size_t *width)
{
	size_t	i, pad;

	for (i = 0; i < n; i++) {
		pad = width[i] - ctl_width(row[i]);
		if (t->right[i])
			printf("%*s%s", (int)pad, "", row[i]);
		else if (i + 1 < n)
			printf("%s%*s", row[i], (int)pad, "");
		else
			fputs(row[i], stdout);	/* no trailing blanks */
		if (i + 1 < n)
			fputs("  ", stdout);
	}
	putchar('\n');
}

void
ctl_table_print(struct ctl_table *t)
{
	size_t	width[CTL_TABLE_COLS_MAX], i, w, n;

	for (i = 0; i < t->ncols; i++)
		width[i] = ctl_width(t->head[i]);
	for (i = 0; i < t->ncells; i++) {
		w = ctl_width(t->cells[i]);
		if (w > width[i % t->ncols])
			width[i % t->ncols] = w;
	}
	ctl_table_line(t, t->head, t->ncols, width);
	for (i = 0; i < t->ncells; i += t->ncols) {
		/* A short last row (a caller's slip) prints what it has. */
		n = t->ncells - i < t->ncols ? t->ncells - i : t->ncols;
		ctl_table_line(t, t->cells + i, n, width);
	}
	ctl_table_free(t);
}

void
ctl_table_free(struct ctl_table *t)
{
	size_t	i;

	if (t == NULL)
		return;
	for (i = 0; i < t->ncols; i++)
		free(t->head[i]);
	for (i = 0; i < t->ncells; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

char *
ctl_fmt_duration(char *buf, size_t sz, int64_t ms)
{
	int64_t	s;

	if (ms < 0)
		snprintf(buf, sz, "-");
	else if (ms < 1000)
		snprintf(buf, sz, "%" PRId64 "ms", ms);
	else if (ms < 60000)
		snprintf(buf, sz, "%" PRId64 ".%" PRId64 "s", ms / 1000,
		    (ms % 1000) / 100);
	else if ((s = ms / 1000) < 3600)
		snprintf(buf, sz, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, sz, "%" PRId64 "h%02" PRId64 "m", s / 3600,
		    (s % 3600) / 60);
	else
		snprintf(buf, sz, "%" PRId64 "d%02" PRId64 "h", s / 86400,
		    (s % 86400) / 3600);
	return buf;
}

char *
ctl_fmt_time(char *buf, size_t sz, int64_t epoch_ms)
{
	struct tm	tm;
	time_t		t;
	char		day[32];

	t = (time_t)(epoch_ms / 1000);
	if (epoch_ms < 0 || localtime_r(&t, &tm) == NULL ||
	    strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm) == 0) {
		snprintf(buf, sz, "%" PRId64, epoch_ms);
		return buf;
	}
	snprintf(buf, sz, "%s.%03d", day, (int)(epoch_ms % 1000));
	return buf;
}
