/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tstore_srv.c: the TCPStore a rank hosts when torch would make it the
 * master (torchrun 1.13 with TORCHELASTIC_USE_AGENT_STORE=False, or a
 * plain env:// launch).  Requests are decoded with common/wire's TCPStore
 * codecs and served by kv/tcps_sess.c on a private kv core: the very
 * mapping rdzvd's proto_tcpstore.c drives, so both servers answer every
 * op of 1.13 and 2.x alike.  This file adds only the I/O: a small poll()
 * loop on its own thread.
 *
 * Output: a reply, or a wake that another connection's request caused,
 * puts its connection on srv->dirty (reply_done); after each poll pass
 * only those are written, so a wake costs the connections it wakes, not
 * a walk over every connection.  poll() itself still looks at every
 * descriptor.
 *
 * Malformed input closes that connection only, as rdzvd does.
 */
#include "config.h"

#include <sys/queue.h>
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "kv.h"
#include "rdzv_err.h"
#include "tcps_sess.h"
#include "worker.h"

#define SRV_CONN_MAX	4096	/* connections served at once */
#define SRV_READ	65536

struct tstore_srv;

struct sconn {
	int			 fd;
	struct tstore_srv	*srv;
	enum tcps_dialect	 dialect;	/* UNKNOWN until sniffed */
	struct evbuffer		*in;
	struct evbuffer		*out;
	size_t			 need;
	struct tcps_sess	 sess;		/* started once sniffed */
	int			 dirty;		/* on srv->dirty */
	TAILQ_ENTRY(sconn)	 dirty_entry;
	int			 dead;
};

struct tstore_srv {
	pthread_t		 thread;
	int			 lfd;
	int			 wake[2];	/* pipe: stop the thread */
	struct kv		*kv;
	struct sconn		**conns;
	size_t			 nconns;
	size_t			 ndead;		/* conns marked dead */
	TAILQ_HEAD(, sconn)	 dirty;		/* conns with output to write */
	struct wire_limits	 lim;
};

static const struct slice	root_ns = { (const uint8_t *)"", 0 };

static void
sconn_free(struct tstore_srv *srv, struct sconn *c)
{
	tcps_sess_end(&c->sess);
	if (c->dirty)
		TAILQ_REMOVE(&srv->dirty, c, dirty_entry);
	evbuffer_free(c->in);
	evbuffer_free(c->out);
	close(c->fd);
	free(c);
}

static void
sconn_kill(struct sconn *c)
{
	if (!c->dead) {
		c->dead = 1;
		c->srv->ndead++;
	}
}

static struct evbuffer *
sconn_reply_buf_cb(void *arg)
{
	struct sconn	*c = arg;

	return (c->out);
}

static void
sconn_reply_done_cb(void *arg)
{
	struct sconn	*c = arg;

	if (!c->dirty) {
		c->dirty = 1;
		TAILQ_INSERT_TAIL(&c->srv->dirty, c, dirty_entry);
	}
}

static const struct tcps_sess_io sconn_io_hooks = {
	sconn_reply_buf_cb, sconn_reply_done_cb
};

/* Decodes and serves what c has buffered; < 0 closes it. */
static int
sconn_input(struct tstore_srv *srv, struct sconn *c)
{
	struct tcps_req	 req;
	const uint8_t	*buf;
	const char	*why;
	size_t		 len, need, used;
	int		 native, r;

	for (;;) {
		len = evbuffer_get_length(c->in);
		if (len == 0 || len < c->need)
			return (0);
		buf = evbuffer_pullup(c->in, -1);
		if (c->dialect == TCPS_UNKNOWN) {
			c->dialect = tcps_sniff(buf, len, &native);
			if (native)
				return (RDZV_EPROTO);
			if (c->dialect == TCPS_UNKNOWN)
				return (0);
			tcps_sess_init(&c->sess, srv->kv, root_ns, c->dialect,
			    &sconn_io_hooks, c);
		}
		r = tcps_decode(c->dialect, buf, len, &srv->lim, &req, &need);
		if (r == 0) {
			c->need = need;
			return (0);
		}
		if (r < 0)
			return (r);
		c->need = 0;
		used = (size_t)r;
		/* Any error, a 1.13 GET of a missing key included, closes
		 * the connection as the reference server does. */
		if ((r = tcps_sess_serve(&c->sess, &req, &why)) < 0)
			return (r);
		evbuffer_drain(c->in, used);
	}
}

/*
 * Accepts every connection queued on the listener.  Returns -1 when the
 * process is out of descriptors or memory (the caller stops polling the
 * listener for a while instead of spinning on it), else 0.
 */
static int
srv_accept(struct tstore_srv *srv)
{
	struct sconn	*c, **nc;
	int		 fd;

	for (;;) {
		fd = accept4(srv->lfd, NULL, NULL, SOCK_NONBLOCK |
		    SOCK_CLOEXEC);
		if (fd == -1)
			return (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM ? -1 : 0);
		if (srv->nconns >= SRV_CONN_MAX ||
		    (c = calloc(1, sizeof *c)) == NULL) {
			close(fd);
			continue;
		}
		nc = reallocarray(srv->conns, srv->nconns + 1, sizeof *nc);
		c->in = evbuffer_new();
		c->out = evbuffer_new();
		if (nc == NULL || c->in == NULL || c->out == NULL) {
			if (nc != NULL)
				srv->conns = nc;
			c->fd = fd;
			sconn_free(srv, c);
			continue;
		}
		net_tune(fd, 0);
		c->fd = fd;
		c->srv = srv;
		srv->conns = nc;
		srv->conns[srv->nconns++] = c;
	}
}

/* Writes what c has queued; the rest waits for POLLOUT. */
static void
sconn_flush(struct sconn *c)
{
	ssize_t	n;

	if (evbuffer_get_length(c->out) == 0)
		return;
	n = evbuffer_write(c->out, c->fd);
	if (n < 0 && errno != EAGAIN && errno != EINTR)
		sconn_kill(c);
}

static void
sconn_io(struct tstore_srv *srv, struct sconn *c, short revents)
{
	ssize_t	n;

	if (revents & (POLLIN | POLLHUP | POLLERR)) {
		n = evbuffer_read(c->in, c->fd, SRV_READ);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			sconn_kill(c);
			return;
		}
		if (sconn_input(srv, c) < 0) {
			sconn_kill(c);
			return;
		}
	}
	if (revents & POLLOUT)
		sconn_reply_done_cb(c);
}

static void *
srv_main(void *arg)
{
	struct tstore_srv	*srv = arg;
	struct pollfd		*pfd = NULL, *np;
	struct sconn		*c;
	size_t			 i, j, cap = 0;
	int64_t			 paused = 0;	/* accepts resume then */
	int			 left;

	for (;;) {
		if (cap < srv->nconns + 2) {
			cap = srv->nconns + 64;
			if ((np = reallocarray(pfd, cap, sizeof *pfd)) == NULL) {
				cap = 0;
				poll(NULL, 0, 10);	/* try again */
				continue;
			}
			pfd = np;
		}
		pfd[0].fd = srv->wake[0];
		pfd[0].events = POLLIN;
		left = -1;
		if (paused != 0 && (left = (int)(paused - mono_ms())) <= 0) {
			paused = 0;
			left = -1;
		}
		pfd[1].fd = srv->lfd;
		pfd[1].events = paused == 0 ? POLLIN : 0;
		for (i = 0; i < srv->nconns; i++) {
			pfd[i + 2].fd = srv->conns[i]->fd;
			pfd[i + 2].events = POLLIN;
			if (evbuffer_get_length(srv->conns[i]->out) > 0)
				pfd[i + 2].events |= POLLOUT;
		}
		if (poll(pfd, srv->nconns + 2, left) == -1)
			continue;
		if (pfd[0].revents != 0)
			break;
		for (i = 0; i < srv->nconns; i++)
			if (pfd[i + 2].revents != 0)
				sconn_io(srv, srv->conns[i], pfd[i + 2].revents);
		/* A request on one connection may have woken waiters on
		 * others: write every connection with a new reply. */
		while ((c = TAILQ_FIRST(&srv->dirty)) != NULL) {
			TAILQ_REMOVE(&srv->dirty, c, dirty_entry);
			c->dirty = 0;
			if (!c->dead)
				sconn_flush(c);
		}
		if (srv->ndead > 0) {
			for (i = j = 0; i < srv->nconns; i++) {
				if (srv->conns[i]->dead)
					sconn_free(srv, srv->conns[i]);
				else
					srv->conns[j++] = srv->conns[i];
			}
			srv->nconns = j;
			srv->ndead = 0;
		}
		/* Out of descriptors: pause a second rather than spin. */
		if (pfd[1].revents != 0 && srv_accept(srv) == -1)
			paused = mono_ms() + 1000;
	}
	free(pfd);
	return (NULL);
}

int
tstore_srv_start(struct tstore_srv **sp, const char *addr, int port,
    int *portp)
{
	struct tstore_srv	*srv;
	int			 rc;

	*sp = NULL;
	if ((srv = calloc(1, sizeof *srv)) == NULL)
		return (RDZV_ENOMEM);
	srv->lfd = srv->wake[0] = srv->wake[1] = -1;
	TAILQ_INIT(&srv->dirty);
	wire_limits_default(&srv->lim);
	if ((srv->kv = kv_new()) == NULL) {
		rc = RDZV_ENOMEM;
		goto fail;
	}
	if ((rc = net_listen(addr, port, 0, &srv->lfd, portp)) != 0)
		goto fail;
	if (pipe2(srv->wake, O_CLOEXEC) == -1) {
		rc = RDZV_EIO;
		goto fail;
	}
	if (pthread_create(&srv->thread, NULL, srv_main, srv) != 0) {
		rc = RDZV_ENOMEM;
		goto fail;
	}
	*sp = srv;
	return (0);
fail:
	if (srv->lfd != -1)
		close(srv->lfd);
	if (srv->wake[0] != -1) {
		close(srv->wake[0]);
		close(srv->wake[1]);
	}
	if (srv->kv != NULL)
		kv_free(srv->kv);
	free(srv);
	return (rc);
}

void
tstore_srv_stop(struct tstore_srv *srv)
{
	size_t	i;

	if (srv == NULL)
		return;
	(void)write(srv->wake[1], "x", 1);
	pthread_join(srv->thread, NULL);
	for (i = 0; i < srv->nconns; i++)
		sconn_free(srv, srv->conns[i]);
	free(srv->conns);
	kv_free(srv->kv);
	close(srv->lfd);
	close(srv->wake[0]);
	close(srv->wake[1]);
	free(srv);
}
