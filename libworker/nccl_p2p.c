/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nccl_p2p.c: the nccl backend's sends and receives.  A batch of queued
 * requests is staged in one staging pair and enqueued as one NCCL group;
 * sends to oneself never enter NCCL: the bytes are copied, the send is
 * complete at once, and a later receive from oneself takes them.
 */
#include "config.h"

#include <sys/queue.h>

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_be.h"

/* ---- point to point ---- */

/*
 * Stages a batch's host buffers in one staging pair (under n->lock):
 * off[i] is request i's region, SIZE_MAX for device memory; a send's
 * bytes are copied in through pinned memory.
 */
static int
nccl_p2p_stage(struct rdzv_comm *c, struct nccl *n,
    struct rdzv_request **batch, size_t nb, size_t *off)
{
	struct rdzv_request	*r;
	size_t			 i, need = 0;
	int			 rc;

	for (i = 0; i < nb; i++) {
		r = batch[i];
		off[i] = SIZE_MAX;
		if (r->count == 0 || nccl_is_dev(r->kind == REQ_SEND ?
		    r->sbuf : r->rbuf))
			continue;
		off[i] = need;
		need += nccl_align(r->count);
	}
	if (need == 0)
		return (0);
	if ((rc = nccl_stage(c, n, need)) != 0)
		return (rc);
	for (i = 0; i < nb; i++) {
		r = batch[i];
		if (off[i] == SIZE_MAX || r->kind != REQ_SEND)
			continue;
		memcpy((char *)n->stage->host + off[i], r->sbuf, r->count);
		if ((rc = nccl_cuda(c, n, cudart.cudaMemcpyAsync(
		    (char *)n->stage->dev + off[i],
		    (char *)n->stage->host + off[i], r->count,
		    cudaMemcpyHostToDevice, n->stream), "staging a send")) != 0)
			return (rc);
	}
	return (0);
}

/* A self send: copied now, completed at once, queued for its receive. */
static int
nccl_self_send(struct rdzv_comm *c, struct nccl *n, struct rdzv_request *r)
{
	struct nccl_self	*m;
	int			 rc;

	if ((m = calloc(1, sizeof *m)) == NULL)
		return (comm_fail(c, RDZV_ENOMEM, "nccl: self send"));
	m->len = r->count;
	/* Host memory: cudaFree would wait for every kernel on the device. */
	if (m->len > 0 && (m->buf = malloc(m->len)) == NULL) {
		free(m);
		return (comm_fail(c, RDZV_ENOMEM, "nccl: self send"));
	}
	if (m->len > 0 && (rc = nccl_cuda(c, n, cudart.cudaMemcpy(m->buf,
	    r->sbuf, m->len, cudaMemcpyDefault), "self send")) != 0) {
		free(m->buf);
		free(m);
		return (rc);
	}
	TAILQ_INSERT_TAIL(&n->selfq, m, entry);
	comm_complete(r, 0);
	return (0);
}

/* Matches waiting self receives with queued self sends, in order. */
static int
nccl_self_match(struct rdzv_comm *c, struct nccl *n)
{
	struct rdzv_request	*r;
	struct nccl_self	*m;
	int			 rc = 0;

	while ((r = TAILQ_FIRST(&n->selfwait)) != NULL &&
	    (m = TAILQ_FIRST(&n->selfq)) != NULL) {
		TAILQ_REMOVE(&n->selfwait, r, qentry);
		TAILQ_REMOVE(&n->selfq, m, entry);
		if (m->len != r->count)
			rc = comm_fail(c, RDZV_EINVAL, "nccl: a receive of %zu "
			    "bytes from self matched a send of %zu", r->count,
			    m->len);
		else if (m->len > 0)
			rc = nccl_cuda(c, n, cudart.cudaMemcpy(r->rbuf, m->buf,
			    m->len, cudaMemcpyDefault), "self receive");
		free(m->buf);
		free(m);
		comm_complete(r, rc);
		if (rc != 0)
			return (rc);
	}
	return (0);
}

/*
 * backend_ops.p2p: runs first and whatever else is queued, as one NCCL
 * group per round, until nothing is left.  A group holds every request
 * queued at the time it starts, so an isend and an irecv posted together
 * (the usual exchange) cannot wait on each other.
 */
int
nccl_p2p(struct rdzv_comm *c, struct rdzv_request *first)
{
	struct nccl		*n = c->be;
	struct rdzv_request	*batch[64], *r;
	size_t			 off[64], nb, i;
	void			*d;
	int64_t			 deadline;
	int			 rc = 0, p;
	struct pollfd		 pfd;

	r = first;
	for (;;) {
		if ((rc = nccl_enter(c, n)) != 0) {
			if (r != NULL)
				comm_complete(r, rc);
			while ((r = comm_take_p2p(c)) != NULL)
				comm_complete(r, rc);
			while ((r = TAILQ_FIRST(&n->selfwait)) != NULL) {
				TAILQ_REMOVE(&n->selfwait, r, qentry);
				comm_complete(r, rc);
			}
			return (rc);
		}
		nb = 0;
		deadline = INT64_MAX;
		while (r != NULL && nb < 64) {
			if (r->peer == c->rank) {
				if (r->kind == REQ_SEND &&
				    (rc = nccl_self_send(c, n, r)) != 0)
					comm_complete(r, rc);
				else if (r->kind == REQ_RECV)
					TAILQ_INSERT_TAIL(&n->selfwait, r,
					    qentry);
			} else {
				batch[nb++] = r;
				if (r->deadline < deadline)
					deadline = r->deadline;
			}
			if (rc != 0)
				break;
			r = nb < 64 ? comm_take_p2p(c) : NULL;
		}
		if (rc == 0)
			rc = nccl_self_match(c, n);
		if (rc == 0 && nb > 0)
			rc = nccl_p2p_stage(c, n, batch, nb, off);
		if (rc == 0 && nb > 0) {
			rc = nccl_settle(c, n, libnccl.ncclGroupStart(),
			    deadline, "p2p");
			for (i = 0; i < nb && rc == 0; i++) {
				struct rdzv_request *q = batch[i];
				ncclResult_t	 nr;

				d = off[i] == SIZE_MAX ? NULL :
				    (char *)n->stage->dev + off[i];
				if (q->kind == REQ_SEND)
					nr = libnccl.ncclSend(d != NULL ? d :
					    q->sbuf, q->count, ncclUint8,
					    q->peer, n->comm, n->stream);
				else
					nr = libnccl.ncclRecv(d != NULL ? d :
					    q->rbuf, q->count, ncclUint8,
					    q->peer, n->comm, n->stream);
				if (nr != ncclSuccess && nr != ncclInProgress)
					rc = nccl_settle(c, n, nr, deadline,
					    "p2p");
			}
			if (rc == 0)
				rc = nccl_settle(c, n, libnccl.ncclGroupEnd(),
				    deadline, "p2p");
			else
				(void)libnccl.ncclGroupEnd();
			/* Staged receives: into pinned memory (never a
			 * blocking copy), to the caller's once done. */
			for (i = 0; i < nb && rc == 0; i++)
				if (off[i] != SIZE_MAX &&
				    batch[i]->kind == REQ_RECV)
					rc = nccl_cuda(c, n,
					    cudart.cudaMemcpyAsync(
					    (char *)n->stage->host + off[i],
					    (char *)n->stage->dev + off[i],
					    batch[i]->count,
					    cudaMemcpyDeviceToHost, n->stream),
					    "unstaging a receive");
			if (rc == 0)
				rc = nccl_cuda(c, n, cudart.cudaEventRecord(
				    n->ev, n->stream), "cudaEventRecord");
			if (rc == 0)
				rc = nccl_poll(c, n, n->ev, deadline,
				    "send/recv");
			for (i = 0; i < nb && rc == 0; i++)
				if (off[i] != SIZE_MAX &&
				    batch[i]->kind == REQ_RECV)
					memcpy(batch[i]->rbuf,
					    (char *)n->stage->host + off[i],
					    batch[i]->count);
		}
		pthread_mutex_unlock(&n->lock);
		for (i = 0; i < nb; i++)
			comm_complete(batch[i], rc);
		if (rc != 0) {
			r = NULL;
			continue;	/* nccl_enter fails the rest */
		}
		if ((r = comm_take_p2p(c)) != NULL)
			continue;
		if (TAILQ_EMPTY(&n->selfwait))
			return (0);
		/* A self receive waits for its send: sleep until queued. */
		deadline = TAILQ_FIRST(&n->selfwait)->deadline;
		pfd.fd = comm_wake_fd(c);
		pfd.events = POLLIN;
		p = poll(&pfd, 1, deadline_left(deadline) < 100 ?
		    deadline_left(deadline) : 100);
		(void)p;
		if ((r = comm_take_p2p(c)) == NULL && mono_ms() >= deadline) {
			rc = comm_fail(c, RDZV_ETIMEDOUT, "nccl: a receive from "
			    "self found no send within the timeout");
			r = NULL;
		}
	}
}
