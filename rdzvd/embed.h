/* SPDX-License-Identifier: Apache-2.0 */
/*
 * embed.h: an rdzvd inside another program's event loop, for
 * `rdzv-agent --standalone`: the store and the rendezvous in memory, on
 * the caller's libevent base.  One per process.
 */
#ifndef RDZVD_EMBED_H
#define RDZVD_EMBED_H

struct event_base;

/*
 * Serves on listen ("127.0.0.1:0" for any free port) from base, which
 * must have been created after evthread_use_pthreads() if the caller
 * uses threads.  Sets *port.  Returns 0, or -1 after logging the cause.
 */
int	rdzvd_embed_start(struct event_base *base, const char *listen, int *port);
/* Rounds' TCPStore ports from lo..hi (rdzvd's --round-ports) in the
 * next rdzvd_embed_start; lo 0: any free port (the default). */
void	rdzvd_embed_round_ports(int lo, int hi);
/* Closes every connection and frees everything rdzvd_embed_start made. */
void	rdzvd_embed_stop(void);

#endif /* RDZVD_EMBED_H */
