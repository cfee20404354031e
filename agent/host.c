/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host.c: whether this agent hosts the rendezvous, before it joins one.
 * --standalone: an rdzvd of its own on 127.0.0.1; node rank 0 of a static
 * rendezvous; under c10d the agent on the endpoint's host that finds its
 * port free (torchrun's is_host).  The rdzvd it hosts is the embedded one
 * (rdzvd/embed.h) on the agent's event loop, and ends with the agent.
 */
#include "config.h"

#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent.h"
#include "hostport.h"
#include "log.h"

#ifdef HAVE_RDZVD_EMBED
#include "embed.h"
#endif

/*
 * Whether host names this machine: some address of it can be bound here
 * (torchrun's is_host test, without listing the interfaces).
 */
static int
host_is_local(const char *host)
{
	struct addrinfo	 hints, *res, *ai;
	int		 fd, local = 0;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_DGRAM;
	if (getaddrinfo(host, "0", &hints, &res) != 0)
		return (0);
	for (ai = res; ai != NULL && !local; ai = ai->ai_next) {
		if ((fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC,
		    0)) == -1)
			continue;
		local = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
		close(fd);
	}
	freeaddrinfo(res);
	return (local);
}

/*
 * Whether nothing listens on port on any address, as a TCPStore server
 * (rdzvd's, torch's) would; spec gets the listen address to host on:
 * every address, IPv6 and IPv4 at once where the kernel has IPv6.
 * Returns 1 free, 0 taken, -1 on another error (logged).
 */
static int
host_port_free(int port, char *spec, size_t specsz)
{
	struct sockaddr_in6	s6;
	struct sockaddr_in	s4;
	int			fd, one = 1, zero = 0, rv, err;

	memset(&s6, 0, sizeof s6);
	s6.sin6_family = AF_INET6;
	s6.sin6_port = htons(port);
	s6.sin6_addr = in6addr_any;
	memset(&s4, 0, sizeof s4);
	s4.sin_family = AF_INET;
	s4.sin_port = htons(port);
	s4.sin_addr.s_addr = htonl(INADDR_ANY);
	if ((fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0)) != -1) {
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero,
		    sizeof zero);
		(void)hostport_join(spec, specsz, "*", port);
	} else if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC,
	    0)) != -1)
		(void)hostport_join(spec, specsz, "0.0.0.0", port);
	else {
		log_warn("socket");
		return (-1);
	}
	/* As the listener will: a port in TIME_WAIT is free, not taken. */
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	rv = spec[0] == '*' ? bind(fd, (struct sockaddr *)&s6, sizeof s6) :
	    bind(fd, (struct sockaddr *)&s4, sizeof s4);
	err = errno;
	close(fd);
	if (rv == 0)
		return (1);
	if (err == EADDRINUSE)
		return (0);
	log_warnx("port %d: %s", port, strerror(err));
	return (-1);
}

/* The endpoint with its port 0 replaced by the one the host got. */
static void
host_endpoint_port(struct agent_config *c, int port)
{
	char	ep[RDZV_HOSTPORT_MAX];

	if (hostport_join(ep, sizeof ep, c->ep_host, port) != 0)
		fatalx("endpoint too long");	/* cli_endpoint split it */
	free(c->endpoint);
	if ((c->endpoint = strdup(ep)) == NULL)
		fatalx("out of memory");
	c->ep_port = port;
}

/* Starts the in-process rdzvd on listen; sets *port.  0 or -1. */
static int
host_embed(struct agent_config *c, struct event_base *base,
    const char *listen, int *port, int *hosted)
{
#ifdef HAVE_RDZVD_EMBED
	rdzvd_embed_round_ports(c->round_ports[0], c->round_ports[1]);
	if (rdzvd_embed_start(base, listen, port) != 0)
		return (-1);
	*hosted = 1;
	return (0);
#else
	log_warnx("this build has no embedded rdzvd: start rdzvd and pass "
	    "--rdzv_endpoint");
	return (-1);
#endif
}

static int
host_standalone(struct agent_config *c, struct event_base *base,
    int *hosted)
{
	int	port;

	if (host_embed(c, base, "127.0.0.1:0", &port, hosted) != 0) {
		log_warnx("--standalone: cannot start the embedded rdzvd");
		return (-1);
	}
	/* cli_rdzv_mode made the endpoint 127.0.0.1:0. */
	host_endpoint_port(c, port);
	log_debug("embedded rdzvd on %s", c->endpoint);
	return (0);
}

/*
 * Hosts the rendezvous where torchrun's agent would: node rank 0 of a
 * static rendezvous, and under c10d (is_host) the agent on the
 * endpoint's host when nothing listens on its port yet.  Every agent,
 * this one too, then joins it at the endpoint.  An agent that finds the
 * port taken joins what listens there (rdzvd, or the agent beside it
 * that was first).  Returns 0, or -1 when the agent cannot go on.
 */
int
host_rendezvous(struct agent_config *c, struct event_base *base, int *hosted)
{
	char	spec[64];
	int	port = c->ep_port, got, free_;

	if (c->standalone)
		return (host_standalone(c, base, hosted));
	if (c->rdzv_mode == AGENT_RDZV_STATIC) {
		if (c->node_rank != 0)
			return (0);
	} else if (c->rdzv_mode == AGENT_RDZV_C10D) {
		if (c->is_host == 0 || (c->is_host == -1 &&
		    !host_is_local(c->ep_host))) {
			if (port != 0)
				return (0);
			log_warnx("c10d endpoint %s: port 0 is for the agent "
			    "that hosts the rendezvous", c->endpoint);
			return (-1);
		}
	} else
		return (0);
	if ((free_ = host_port_free(port, spec, sizeof spec)) == 0) {
		log_info("%s rendezvous: port %d is taken here: joining what "
		    "listens there", c->rdzv_backend, port);
		return (0);
	}
	if (free_ == -1)
		return (-1);
	if (c->tls_ca != NULL) {
		log_warnx("a rendezvous hosted by rdzv-agent speaks no TLS: "
		    "run rdzvd with --tls-cert, or drop --tls_ca");
		return (-1);
	}
	if (host_embed(c, base, spec, &got, hosted) != 0) {
		/* Another agent of this host was quicker: join it. */
		log_info("%s rendezvous: cannot host on port %d: joining what "
		    "listens there", c->rdzv_backend, port);
		return (0);
	}
	if (port == 0)
		host_endpoint_port(c, got);
	log_info("hosting the %s rendezvous of job %s on port %d; it ends "
	    "with this agent (run rdzvd for one that outlives any node)",
	    c->rdzv_backend, c->rdzv_id, got);
	return (0);
}

/* Stops the rdzvd host_rendezvous started (*hosted set). */
void
host_stop(void)
{
#ifdef HAVE_RDZVD_EMBED
	rdzvd_embed_stop();
#endif
}
