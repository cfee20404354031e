/*
 * tstore_srv.c: the TCPStore a rank hosts when torch would make it the
 * master (torchrun 1.13 with TORCHELASTIC_USE_AGENT_STORE=False, or a
 * plain env:// launch).  Requests are decoded with common/wire's TCPStore
 * codecs and applied to a private instance of rdzvd's kv core, so there
 * is one store implementation; this file only adds a small poll() loop
 * on its own thread.  It speaks 1.13 and 2.x (every request but 1.13's
 * WATCH_KEY) so unmodified torch clients can share it; the op-to-kv
 * mapping mirrors rdzvd/proto_tcpstore.c's, which is bound to rdzvd's
 * connections, metrics and namespaces.
 *
 * Malformed input closes that connection only, as rdzvd does.
 */
#include "config.h"

#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "kv.h"
#include "worker.h"

#define SRV_CONN_MAX	4096	/* connections served at once */
#define SRV_READ	65536

struct sconn {
	int			 fd;
	enum tcps_dialect	 dialect;	/* UNKNOWN until sniffed */
	struct evbuffer		*in;
	struct evbuffer		*out;
	size_t			 need;
	struct kv_waiter	*wait;		/* a pending WAIT */
	int			 dead;
};

struct tstore_srv {
	pthread_t	 thread;
	int		 lfd;
	int		 wake[2];	/* pipe: stop the thread */
	struct kv	*kv;
	struct sconn	**conns;
	size_t		 nconns;
	struct wire_limits lim;
};

static const struct slice	root_ns = { (const uint8_t *)"", 0 };

static void
sconn_free(struct tstore_srv *srv, struct sconn *c)
{
	if (c->wait != NULL)
		kv_waiter_cancel(srv->kv, c->wait);
	evbuffer_free(c->in);
	evbuffer_free(c->out);
	close(c->fd);
	free(c);
}

static void
wake_cb(struct kv_waiter *w, void *arg)
{
	struct sconn	*c = arg;

	c->wait = NULL;
	tcps_put_u8(c->out, TCPS_STOP_WAITING);
}

struct list_acc {
	struct evbuffer	*buf;
	int64_t		 n;
};

/* LIST_KEYS: one string per key, counted for the reply's header. */
static void
list_cb(void *arg, struct slice key)
{
	struct list_acc	*acc = arg;

	if (tcps_put_bytes(acc->buf, key.p, key.len) == 0)
		acc->n++;
}

/* Serves one decoded request; < 0 closes the connection. */
static int
serve(struct tstore_srv *srv, struct sconn *c, const struct tcps_req *req)
{
	struct slice		 stack[64], *keys = stack, key, val;
	struct tcps_iter	 it;
	int64_t			 n;
	size_t			 i;
	int			 rc = 0;

	/* A new request means an abandoned WAIT (1.13 sends nothing on a
	 * client timeout): drop it so no stray byte answers this one. */
	if (c->wait != NULL && req->op != TCPS_CANCEL_WAIT) {
		kv_waiter_cancel(srv->kv, c->wait);
		c->wait = NULL;
	}
	switch (req->op) {
	case TCPS_VALIDATE:
		return (req->u32 == TCPS_V2_MAGIC ? 0 : RDZV_EPROTO);
	case TCPS_PING:
		return (tcps_put_u32(c->out, req->u32));
	case TCPS_SET:
		return (kv_set(srv->kv, root_ns, req->key, req->v1));
	case TCPS_APPEND:
		return (kv_append(srv->kv, root_ns, req->key, req->v1));
	case TCPS_GET:
		rc = kv_get(srv->kv, root_ns, req->key, &val);
		if (rc == RDZV_ENOTFOUND && c->dialect == TCPS_V2) {
			val.p = NULL;
			val.len = 0;
			rc = 0;
		}
		return (rc != 0 ? rc : tcps_put_bytes(c->out, val.p, val.len));
	case TCPS_ADD:
		if ((rc = kv_add(srv->kv, root_ns, req->key, req->num,
		    &n)) != 0)
			return (rc);
		return (tcps_put_i64(c->out, n));
	case TCPS_COMPARE_SET:
		if ((rc = kv_cas(srv->kv, root_ns, req->key, req->v1,
		    req->v2, &val)) != 0)
			return (rc);
		return (tcps_put_bytes(c->out, val.p, val.len));
	case TCPS_GETNUMKEYS:
		return (tcps_put_i64(c->out, kv_num_keys(srv->kv, root_ns)));
	case TCPS_DELETE_KEY:
		if ((rc = kv_delete(srv->kv, root_ns, req->key)) < 0)
			return (rc);
		return (tcps_put_i64(c->out, rc));
	case TCPS_CANCEL_WAIT:
		if (c->wait != NULL) {
			kv_waiter_cancel(srv->kv, c->wait);
			c->wait = NULL;
		}
		return (tcps_put_u8(c->out, TCPS_WAIT_CANCELED));
	case TCPS_MULTI_SET:
		tcps_iter_init(&it, req);
		while (rc == 0 && tcps_list_next(&it, &key, &val))
			rc = kv_set(srv->kv, root_ns, key, val);
		return (rc);
	case TCPS_MULTI_GET:
		tcps_iter_init(&it, req);
		while (tcps_list_next(&it, &key, NULL)) {
			if (kv_get(srv->kv, root_ns, key, &val) != 0) {
				val.p = NULL;
				val.len = 0;
			}
			tcps_put_bytes(c->out, val.p, val.len);
		}
		return (0);
	case TCPS_CHECK:
	case TCPS_WAIT:
		if (req->nkeys > sizeof stack / sizeof stack[0] &&
		    (keys = calloc(req->nkeys, sizeof *keys)) == NULL)
			return (RDZV_ENOMEM);
		tcps_iter_init(&it, req);
		for (i = 0; tcps_list_next(&it, &keys[i], NULL); i++)
			;
		if (req->op == TCPS_CHECK)
			rc = tcps_put_u8(c->out, kv_check(srv->kv, root_ns, keys,
			    req->nkeys) ? TCPS_READY : TCPS_NOT_READY);
		else {
			rc = kv_wait(srv->kv, root_ns, keys, req->nkeys,
			    wake_cb, c, &c->wait);
			if (rc == 1)
				rc = tcps_put_u8(c->out, TCPS_STOP_WAITING);
			else if (rc > 0)
				rc = 0;
		}
		if (keys != stack)
			free(keys);
		return (rc);
	case TCPS_BARRIER:
		rc = kv_barrier(srv->kv, root_ns, req->key, req->num, wake_cb,
		    c, &c->wait);
		if (rc == 1)
			rc = tcps_put_u8(c->out, TCPS_STOP_WAITING);
		else if (rc > 0)
			rc = 0;
		return (rc);
	case TCPS_QUEUE_PUSH:
		return (kv_qpush(srv->kv, root_ns, req->key, req->v1));
	case TCPS_QUEUE_POP: {
		uint8_t	*item = NULL;
		size_t	 ilen = 0;

		/* Length before the pop, then the item if there was one
		 * (a blocking client WAITs on the name first), as rdzvd. */
		n = kv_qlen(srv->kv, root_ns, req->key);
		rc = tcps_put_i64(c->out, n);
		if (rc == 0 && n > 0 &&
		    (rc = kv_qpop(srv->kv, root_ns, req->key, &item,
		    &ilen)) == 0) {
			rc = tcps_put_bytes(c->out, item, ilen);
			free(item);
		}
		return (rc);
	}
	case TCPS_QUEUE_LEN:
		return (tcps_put_i64(c->out, kv_qlen(srv->kv, root_ns,
		    req->key)));
	case TCPS_LIST_KEYS: {
		struct list_acc	 acc;

		if ((acc.buf = evbuffer_new()) == NULL)
			return (RDZV_ENOMEM);
		acc.n = 0;
		kv_list(srv->kv, root_ns, list_cb, &acc);
		if ((rc = tcps_put_i64(c->out, acc.n)) == 0 &&
		    evbuffer_add_buffer(c->out, acc.buf) != 0)
			rc = RDZV_ENOMEM;
		evbuffer_free(acc.buf);
		return (rc);
	}
	default:
		/* WATCH_KEY (1.13 only, unused by workers): refused like a
		 * malformed request. */
		return (RDZV_EPROTO);
	}
}

/* Decodes and serves what c has buffered; < 0 closes it. */
static int
sconn_input(struct tstore_srv *srv, struct sconn *c)
{
	struct tcps_req	 req;
	const uint8_t	*buf;
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
		if ((r = serve(srv, c, &req)) < 0)
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
		srv->conns = nc;
		srv->conns[srv->nconns++] = c;
	}
}

static void
sconn_io(struct tstore_srv *srv, struct sconn *c, short revents)
{
	ssize_t	n;

	if (revents & (POLLIN | POLLHUP | POLLERR)) {
		n = evbuffer_read(c->in, c->fd, SRV_READ);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			c->dead = 1;
			return;
		}
		if (sconn_input(srv, c) < 0) {
			c->dead = 1;
			return;
		}
	}
	if (evbuffer_get_length(c->out) > 0) {
		n = evbuffer_write(c->out, c->fd);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			c->dead = 1;
	}
}

static void *
srv_main(void *arg)
{
	struct tstore_srv	*srv = arg;
	struct pollfd		*pfd = NULL, *np;
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
		/* A WAIT served for one connection writes to another's
		 * output: flush every connection with output, not only the
		 * ones poll named. */
		for (i = 0; i < srv->nconns; i++)
			sconn_io(srv, srv->conns[i], pfd[i + 2].revents);
		for (i = 0; i < srv->nconns; i++)
			if (evbuffer_get_length(srv->conns[i]->out) > 0 &&
			    !srv->conns[i]->dead)
				sconn_io(srv, srv->conns[i], 0);
		for (i = j = 0; i < srv->nconns; i++) {
			if (srv->conns[i]->dead)
				sconn_free(srv, srv->conns[i]);
			else
				srv->conns[j++] = srv->conns[i];
		}
		srv->nconns = j;
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
