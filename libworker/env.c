/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env.c: where this process stands, from its environment.  Knows the
 * variables of rdzv-agent and torchrun, Open MPI, MPICH (PMI) and Slurm,
 * and how each says where the bootstrap store is.  Pure apart from the
 * lookup function, so unit tests drive it with a table.
 */
#include "config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"

struct lookup {
	wenv_get_fn	 get;
	void		*arg;
};

static const char *
lk(const struct lookup *l, const char *name)
{
	const char	*v;

	v = l->get(name, l->arg);
	if (v != NULL && *v == '\0')
		return (NULL);	/* set but empty counts as unset */
	return (v);
}

static const char *
getenv_cb(const char *name, void *arg)
{
	return (getenv(name));
}

void
wenv_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list	ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/*
 * Parses variable name as an integer in [lo, hi] into *out.  Returns 0,
 * or RDZV_EINVAL with the reason in err.
 */
static int
num(const struct lookup *l, const char *name, long long lo, long long hi,
    int *out, char *err, size_t errlen)
{
	const char	*v, *why;
	long long	 n;

	v = lk(l, name);
	if (v == NULL) {
		wenv_seterr(err, errlen, "%s is not set", name);
		return (RDZV_EINVAL);
	}
	n = strtonum(v, lo, hi, &why);
	if (why != NULL) {
		wenv_seterr(err, errlen,
		    "%s=\"%.64s\" is %s (expected %lld..%lld)",
		    name, v, why, lo, hi);
		return (RDZV_EINVAL);
	}
	*out = (int)n;
	return (0);
}

/* Like num() but leaves *out at dflt when the variable is unset. */
static int
num_opt(const struct lookup *l, const char *name, long long lo, long long hi,
    int dflt, int *out, char *err, size_t errlen)
{
	if (lk(l, name) == NULL) {
		*out = dflt;
		return (0);
	}
	return (num(l, name, lo, hi, out, err, errlen));
}

/* One family of rank variables. */
struct family {
	const char	*source;
	const char	*rank;
	const char	*size;
	const char	*local_rank;
	const char	*local_size;
};

static const struct family families[] = {
	{ "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE" },
	{ "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	  "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE" },
	{ "mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
	  "MPI_LOCALNRANKS" },
	{ "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL },
};

static int
parse_ranks(struct wenv *e, const struct lookup *l, char *err, size_t errlen)
{
	const struct family	*f = NULL;
	size_t			 i;
	int			 rc;

	for (i = 0; i < sizeof families / sizeof families[0]; i++) {
		if (lk(l, families[i].rank) != NULL ||
		    lk(l, families[i].size) != NULL) {
			f = &families[i];
			break;
		}
	}
	if (f == NULL) {
		/* Nothing at all: a world of one, e.g. a program run by hand. */
		e->source = "single";
		e->rank = 0;
		e->size = 1;
		e->local_rank = 0;
		e->local_size = 1;
		e->dev_index = -1;
		return (0);
	}
	e->source = f->source;
	if (f == &families[0]) {
		if (lk(l, "RDZV_ENDPOINT") != NULL)
			e->source = "rdzv-agent";
		else if (lk(l, "TORCHELASTIC_RUN_ID") == NULL)
			e->source = "env";
	}
	if ((rc = num(l, f->size, 1, INT_MAX, &e->size, err, errlen)) != 0)
		return (rc);
	if ((rc = num(l, f->rank, 0, e->size - 1, &e->rank, err,
	    errlen)) != 0)
		return (rc);
	e->local_rank = e->local_size = e->dev_index = -1;
	/* Each worker's own devices: LOCAL_RANK indexes them (torch's
	 * cuda:LOCAL_RANK), whatever the rank on the host. */
	if (f == &families[0] && lk(l, "RDZV_LOCAL_RANK") != NULL &&
	    (rc = num_opt(l, "LOCAL_RANK", 0, INT_MAX, 0, &e->dev_index, err,
	    errlen)) != 0)
		return (rc);
	if (f->local_size != NULL && (rc = num_opt(l, f->local_size, 1,
	    e->size, -1, &e->local_size, err, errlen)) != 0)
		return (rc);
	/* rdzv-agent with --gpus_per_worker or --virtual_local_rank sets
	 * LOCAL_RANK to 0 (the index of a worker's first visible GPU) and
	 * keeps the rank on the host in RDZV_LOCAL_RANK. */
	if ((rc = num_opt(l, f == &families[0] && lk(l, "RDZV_LOCAL_RANK") !=
	    NULL ? "RDZV_LOCAL_RANK" : f->local_rank, 0,
	    e->local_size > 0 ? e->local_size - 1 : e->size - 1, -1,
	    &e->local_rank, err, errlen)) != 0)
		return (rc);
	return (0);
}

/*
 * A launcher that gave each worker its own devices (rdzv-agent's
 * --gpus_per_worker, --virtual_local_rank: CUDA_VISIBLE_DEVICES per
 * worker, LOCAL_RANK their index, the rank on the host in
 * RDZV_LOCAL_RANK) means device LOCAL_RANK, which torch in the same
 * process uses too.  Otherwise every rank of the host sees every device:
 * the local rank modulo their number, shared when the host has more
 * ranks than devices (NCCL refuses two ranks on one device).
 */
int
wenv_device(const struct wenv *e, int local_rank, int local_size, int ndev,
    int *shared)
{
	*shared = 0;
	if (ndev <= 0)
		return (-1);
	if (e->dev_index >= 0)
		return (e->dev_index % ndev);
	if (local_rank < 0)
		local_rank = 0;
	*shared = local_size > ndev || local_rank >= ndev;
	return (local_rank % ndev);
}

static int
parse_store(struct wenv *e, const struct lookup *l, char *err, size_t errlen)
{
	const char	*ep, *ns, *job, *round, *addr, *agent;
	int		 rc, n;

	ep = lk(l, "RDZV_ENDPOINT");
	if (ep != NULL) {
		if (strlcpy(e->endpoint, ep, sizeof e->endpoint) >=
		    sizeof e->endpoint) {
			wenv_seterr(err, errlen, "RDZV_ENDPOINT is too long");
			return (RDZV_EINVAL);
		}
		ns = lk(l, "RDZV_NAMESPACE");
		job = lk(l, "RDZV_JOB");
		round = lk(l, "RDZV_ROUND");
		if (ns != NULL)
			n = snprintf(e->ns, sizeof e->ns, "%s", ns);
		else if (job != NULL && round != NULL)
			n = snprintf(e->ns, sizeof e->ns, "%s/%s", job, round);
		else {
			wenv_seterr(err, errlen, "RDZV_ENDPOINT is set but the "
			    "store scope is not: set RDZV_NAMESPACE (or "
			    "RDZV_JOB and RDZV_ROUND)");
			return (RDZV_EINVAL);
		}
		if (n < 0 || (size_t)n >= sizeof e->ns) {
			wenv_seterr(err, errlen, "RDZV_NAMESPACE is too long");
			return (RDZV_EINVAL);
		}
		e->store = WENV_STORE_NATIVE;
		return (0);
	}

	addr = lk(l, "MASTER_ADDR");
	if (addr != NULL || lk(l, "MASTER_PORT") != NULL) {
		if (addr == NULL) {
			wenv_seterr(err, errlen, "MASTER_PORT is set but "
			    "MASTER_ADDR is not");
			return (RDZV_EINVAL);
		}
		if (strlcpy(e->master_addr, addr, sizeof e->master_addr) >=
		    sizeof e->master_addr) {
			wenv_seterr(err, errlen, "MASTER_ADDR is too long");
			return (RDZV_EINVAL);
		}
		if ((rc = num(l, "MASTER_PORT", 1, 65535, &e->master_port,
		    err, errlen)) != 0)
			return (rc);
		e->store = WENV_STORE_TCPSTORE;
		agent = lk(l, "TORCHELASTIC_USE_AGENT_STORE");
		if (agent != NULL && strcmp(agent, "True") == 0) {
			/* torch 1.13's elastic agent hosts the store and
			 * scopes each attempt's keys by this prefix. */
			snprintf(e->prefix, sizeof e->prefix,
			    "/worker/attempt_%d", e->restart_count);
			e->host_store = 0;
		} else
			e->host_store = (e->rank == 0);
		return (0);
	}

	if (e->size == 1) {
		e->store = WENV_STORE_NONE;
		return (0);
	}
	wenv_seterr(err, errlen, "world size %d (from %s) needs a store, but "
	    "neither RDZV_ENDPOINT (with RDZV_NAMESPACE, as rdzv-agent sets) "
	    "nor MASTER_ADDR and MASTER_PORT (as torchrun sets) is set",
	    e->size, e->source);
	return (RDZV_EINVAL);
}

static int
parse_options(struct wenv *e, const struct lookup *l, char *err,
    size_t errlen)
{
	const char	*b;
	int		 rc;

	e->backend = RDZV_BACKEND_AUTO;
	if ((b = lk(l, "RDZV_BACKEND")) != NULL) {
		if (strcmp(b, "auto") == 0)
			e->backend = RDZV_BACKEND_AUTO;
		else if (strcmp(b, "cpu") == 0)
			e->backend = RDZV_BACKEND_CPU;
		else if (strcmp(b, "nccl") == 0)
			e->backend = RDZV_BACKEND_NCCL;
		else {
			wenv_seterr(err, errlen,
			    "RDZV_BACKEND=\"%.32s\" is not "
			    "auto, cpu or nccl", b);
			return (RDZV_EINVAL);
		}
	}
	if ((rc = num_opt(l, "RDZV_TIMEOUT_MS", 1, INT_MAX, -1,
	    &e->timeout_ms, err, errlen)) != 0)
		return (rc);
	if ((rc = num_opt(l, "RDZV_INIT_TIMEOUT_MS", 1, INT_MAX, -1,
	    &e->init_timeout_ms, err, errlen)) != 0)
		return (rc);
	return (num_opt(l, "TORCHELASTIC_RESTART_COUNT", 0, INT_MAX, 0,
	    &e->restart_count, err, errlen));
}

int
wenv_detect(struct wenv *e, wenv_get_fn get, void *arg, char *err,
    size_t errlen)
{
	struct lookup	l;
	int		rc;

	memset(e, 0, sizeof *e);
	l.get = get != NULL ? get : getenv_cb;
	l.arg = arg;
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if ((rc = parse_options(e, &l, err, errlen)) != 0)
		return (rc);
	if ((rc = parse_ranks(e, &l, err, errlen)) != 0)
		return (rc);
	return (parse_store(e, &l, err, errlen));
}
