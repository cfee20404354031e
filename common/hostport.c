/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hostport.c: splitting "HOST:PORT" and "[IPV6]:PORT" endpoints and
 * writing them back (hostport.h), for every program that takes one.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostport.h"
#include "rdzv_err.h"

/* Puts "\"s\": <reason>" in why; returns RDZV_EINVAL. */
static int
hostport_bad(char *why, size_t whysz, const char *s, const char *fmt, ...)
{
	va_list	ap;
	int	n;

	if (why == NULL || whysz == 0)
		return (RDZV_EINVAL);
	n = snprintf(why, whysz, "\"%s\": ", s);
	if (n >= 0 && (size_t)n < whysz) {
		va_start(ap, fmt);
		vsnprintf(why + n, whysz - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return (RDZV_EINVAL);
}

int
hostport_split(const char *s, int flags, char *host, size_t hostsz,
    int *port, char *why, size_t whysz)
{
	const char	*h, *end, *p, *errstr;
	size_t		 hl;
	long long	 n = -1;
	int		 lo = (flags & HOSTPORT_PORT_ZERO) ? 0 : 1;

	if (s == NULL)
		return (hostport_bad(why, whysz, "", "no endpoint given"));
	if (s[0] == '[') {
		if ((end = strchr(s, ']')) == NULL)
			return (hostport_bad(why, whysz, s, "no ']' closes "
			    "the IPv6 address"));
		h = s + 1;
		hl = (size_t)(end - h);
		if (end[1] == ':')
			p = end + 2;
		else if (end[1] == '\0' && (flags & HOSTPORT_PORT_OPT))
			p = NULL;
		else
			return (hostport_bad(why, whysz, s, "expected "
			    "[IPV6]:PORT"));
	} else {
		end = strrchr(s, ':');
		if (end != NULL && memchr(s, ':', (size_t)(end - s)) != NULL)
			return (hostport_bad(why, whysz, s, "an IPv6 address "
			    "goes in brackets: [IPV6]:PORT"));
		if (end == NULL && !(flags & HOSTPORT_PORT_OPT))
			return (hostport_bad(why, whysz, s, "expected "
			    "HOST:PORT or [IPV6]:PORT"));
		h = s;
		hl = end != NULL ? (size_t)(end - s) : strlen(s);
		p = end != NULL ? end + 1 : NULL;
	}
	if (hl == 0 && !(flags & HOSTPORT_HOST_EMPTY))
		return (hostport_bad(why, whysz, s, "no host before the "
		    "port"));
	if (hl >= hostsz)
		return (hostport_bad(why, whysz, s, "the host is longer than "
		    "%zu bytes", hostsz - 1));
	if (p != NULL) {
		/* Digits only: strtonum alone would take " 80" or "+80". */
		errstr = *p == '\0' || p[strspn(p, "0123456789")] != '\0' ?
		    "not digits" : NULL;
		if (errstr == NULL)
			n = strtonum(p, lo, 65535, &errstr);
		if (errstr != NULL)
			return (hostport_bad(why, whysz, s, "the port is not "
			    "a number from %d to 65535", lo));
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (int)n;
	return (0);
}

int
hostport_join(char *buf, size_t sz, const char *host, int port)
{
	int	v6 = strchr(host, ':') != NULL, n;

	n = snprintf(buf, sz, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "",
	    port);
	if (n < 0 || (size_t)n >= sz)
		return (RDZV_EINVAL);
	return (0);
}

size_t
hostport_list_count(const char *list)
{
	size_t	n = 1;

	for (; *list != '\0'; list++)
		if (*list == ',')
			n++;
	return (n);
}

int
hostport_list_get(const char *list, size_t i, char *buf, size_t bufsz)
{
	const char	*end;
	size_t		 len;

	for (; i > 0; i--) {
		if ((list = strchr(list, ',')) == NULL)
			return (RDZV_ENOTFOUND);
		list++;
	}
	end = strchr(list, ',');
	len = end != NULL ? (size_t)(end - list) : strlen(list);
	if (len >= bufsz)
		return (RDZV_EINVAL);
	memcpy(buf, list, len);
	buf[len] = '\0';
	return (0);
}

/* One port of a range: 1-65535, digits only; -1 if not. */
static int
hostport_range_port(const char *p, size_t len)
{
	char		 buf[8];
	const char	*errstr;
	long long	 n;

	if (len == 0 || len >= sizeof buf)
		return (-1);
	memcpy(buf, p, len);
	buf[len] = '\0';
	if (buf[strspn(buf, "0123456789")] != '\0')
		return (-1);
	n = strtonum(buf, 1, 65535, &errstr);
	return (errstr != NULL ? -1 : (int)n);
}

int
hostport_range(const char *s, int *lo, int *hi, char *why, size_t whysz)
{
	const char	*dash;
	int		 a, b;

	if (s == NULL || *s == '\0')
		return (hostport_bad(why, whysz, s != NULL ? s : "",
		    "expected a port range LO-HI"));
	dash = strchr(s, '-');
	a = hostport_range_port(s, dash != NULL ? (size_t)(dash - s) :
	    strlen(s));
	b = dash != NULL ? hostport_range_port(dash + 1, strlen(dash + 1)) :
	    a;
	if (a == -1 || b == -1)
		return (hostport_bad(why, whysz, s, "expected a port range "
		    "LO-HI, ports from 1 to 65535 (e.g. 30000-30999)"));
	if (a > b)
		return (hostport_bad(why, whysz, s, "the range is empty: its "
		    "low port %d is above its high port %d (LO-HI)", a, b));
	*lo = a;
	*hi = b;
	return (0);
}
