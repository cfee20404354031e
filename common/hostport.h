/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hostport.h: "HOST:PORT" endpoints as every rdzv program reads and
 * writes them: a name or IPv4 address, or an IPv6 address in brackets
 * ("[::1]:29400").  A bare IPv6 address is refused: its last group and
 * a port cannot be told apart.  Where several rdzvds stand in for one, a
 * comma-separated list of them is tried in turn.
 */
#ifndef RDZV_HOSTPORT_H
#define RDZV_HOSTPORT_H

#include <stddef.h>

#define RDZV_HOST_MAX		256	/* bytes for a host, NUL included */
#define RDZV_HOSTPORT_MAX	(RDZV_HOST_MAX + 8)	/* "[" "]:" 5 digits */

#define HOSTPORT_PORT_ZERO	0x01	/* port 0 (any free port) allowed */
#define HOSTPORT_PORT_OPT	0x02	/* ":PORT" may be left out */
#define HOSTPORT_HOST_EMPTY	0x04	/* an empty host (every address) */

/*
 * Splits s into its host (brackets dropped) and port.  The port is
 * decimal digits from 1 (0 with HOSTPORT_PORT_ZERO) to 65535; with
 * HOSTPORT_PORT_OPT "HOST" or "[IPV6]" alone gives *port = -1.  The host
 * must not be empty unless HOSTPORT_HOST_EMPTY, and fits host (size
 * hostsz) with its NUL.  Returns 0, or RDZV_EINVAL with a sentence that
 * quotes s in why (size whysz; why may be NULL).
 */
int	hostport_split(const char *s, int flags, char *host, size_t hostsz,
	    int *port, char *why, size_t whysz);

/*
 * Writes "HOST:PORT" into buf (size sz), "[HOST]:PORT" when host is an
 * IPv6 address (it holds a ':').  Returns 0, or RDZV_EINVAL when it
 * does not fit.
 */
int	hostport_join(char *buf, size_t sz, const char *host, int port);

/*
 * Endpoint lists, "A,B,C" (rdzvds of which one leads; etcd members):
 * how many entries list has (an empty one counts), and a copy of the
 * i-th (from 0) into buf.  Returns 0, RDZV_ENOTFOUND past the last entry,
 * or RDZV_EINVAL when it does not fit bufsz.
 */
size_t	hostport_list_count(const char *list);
int	hostport_list_get(const char *list, size_t i, char *buf, size_t bufsz);

/*
 * Parses a port range "LO-HI" (decimal, 1 <= LO <= HI <= 65535; "P"
 * alone is P-P), as --round-ports takes it.  Returns 0, or RDZV_EINVAL
 * with a sentence that quotes s in why (size whysz; why may be NULL).
 */
int	hostport_range(const char *s, int *lo, int *hi, char *why,
	    size_t whysz);

#endif /* RDZV_HOSTPORT_H */
