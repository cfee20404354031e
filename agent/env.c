/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env.c: what each worker gets in its environment.  torchrun's variables
 * (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, TORCHELASTIC_*: see
 * shared/reference/tcpstore-wire.md section 6) and rdzv's own (RDZV_*:
 * the job, the round, the agent's channel, the replica group), over the
 * agent's environment; the defaults torchrun sets only when the user has
 * not.  Pure but for the agent's environ and the names rdzv.c and logs.c
 * give (the rdzvd host, the token file, the error file): main.c asks, the
 * supervisor (sup.c) forks with what it gets.
 */
#include "config.h"

#include <sys/types.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "agent.h"
#include "log.h"
#include "rz.h"		/* rz_topo_*: replica groups */
#include "wire.h"

/* Appends NAME=value to a growing NULL-terminated array. */
void
env_set(char ***envp, size_t *n, size_t *cap, const char *name,
    const char *fmt, ...)
{
	va_list	 ap;
	char	*val, *kv, **e;

	va_start(ap, fmt);
	if (vasprintf(&val, fmt, ap) == -1)
		fatalx("out of memory");
	va_end(ap);
	if (asprintf(&kv, "%s=%s", name, val) == -1)
		fatalx("out of memory");
	free(val);
	if (*n + 2 > *cap) {
		*cap = *cap ? *cap * 2 : 64;
		if ((e = reallocarray(*envp, *cap, sizeof *e)) == NULL)
			fatalx("out of memory");
		*envp = e;
	}
	(*envp)[(*n)++] = kv;
	(*envp)[*n] = NULL;
}

/* Whether envp sets the variable named by the first l bytes of name. */
static int
env_has(char **envp, size_t n, const char *name, size_t l)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (strncmp(envp[i], name, l) == 0 && envp[i][l] == '=')
			return (1);
	return (0);
}

/*
 * Whether workers see only their own devices (--gpus_per_worker,
 * --virtual_local_rank): then LOCAL_RANK is 0, the index of a worker's
 * first device, so that torch.cuda.set_device(LOCAL_RANK) works in every
 * worker; the rank on the node stays in RDZV_LOCAL_RANK.
 */
static int
env_own_devices(const struct agent_config *c)
{
	return (c->gpus_per_worker > 0 || c->virtual_local_rank);
}

/* The CUDA_VISIBLE_DEVICES of local_rank: its share of the GPU list. */
static void
env_gpus(const struct agent_config *c, int local_rank, char *out,
    size_t outsz)
{
	const char	*p = c->gpu_list;
	int		 per = c->gpus_per_worker > 0 ?
			    c->gpus_per_worker : 1;
	int		 first = local_rank * per, i = 0;
	size_t		 o = 0, n;

	out[0] = '\0';
	while (p != NULL && *p != '\0') {
		n = strcspn(p, ",");
		if (i >= first && i < first + per &&
		    o + n + 2 < outsz) {
			if (o > 0)
				out[o++] = ',';
			memcpy(out + o, p, n);
			o += n;
			out[o] = '\0';
		}
		i++;
		p += n + (p[n] == ',');
	}
}

/*
 * The world size workers started in round r are told: the round's,
 * or, started into a repair round (a standby taking a lost node's
 * place), the one they will be in once the round grows with them (their
 * ranks from r's rank base are already those).
 */
int64_t
env_world(const struct agent_config *c, const struct rdzv_round *r)
{
	if (r->kind == NAT_KIND_NORMAL)
		return (r->world_size);
	return (r->world_size + c->nproc -
	    __builtin_popcountll((unsigned long long)r->live_local));
}

/*
 * The defaults torchrun sets only when the user has not; a worker and
 * the warm spare (which loads the libraries that read them) get them.
 */
void
env_defaults(const struct agent_config *c, char ***e, size_t *n,
    size_t *cap)
{
	if (getenv("NCCL_ASYNC_ERROR_HANDLING") == NULL)
		env_set(e, n, cap, "NCCL_ASYNC_ERROR_HANDLING", "1");
	if (getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING") == NULL)
		env_set(e, n, cap, "TORCH_NCCL_ASYNC_ERROR_HANDLING",
		    "1");
	if (getenv("OMP_NUM_THREADS") == NULL && c->nproc > 1)
		env_set(e, n, cap, "OMP_NUM_THREADS", "1");
}

/*
 * A job of replica groups (--rdzv_conf replicas=R, which rdzvd checked
 * against the world): where local_rank sits, by its home rank (group
 * rank x nproc + local rank; rz/rz_topo.c).
 */
static void
env_topo(const struct agent_config *c, char ***e, size_t *n, size_t *cap,
    int local_rank, const struct rdzv_round *r, int64_t world)
{
	struct rz_topo	t;
	char		why[256];

	if (c->replicas < 1 || r->group_rank < 0 ||
	    rz_topo_check(world, c->replicas, why, sizeof why) != 0)
		return;
	rz_topo_rank(world, c->replicas, r->group_rank * c->nproc +
	    local_rank, &t);
	env_set(e, n, cap, "RDZV_REPLICAS", "%lld",
	    (long long)t.replicas);
	env_set(e, n, cap, "RDZV_REPLICA", "%lld", (long long)t.replica);
	env_set(e, n, cap, "RDZV_SHARD", "%lld", (long long)t.shard);
}

/*
 * The variables rdzv-agent sets for local_rank in round r (torchrun's,
 * see shared/reference/tcpstore-wire.md section 6, plus RDZV_*).
 */
char **
env_vars(const struct agent_config *c, int local_rank,
    const struct rdzv_round *r, size_t *np)
{
	char		**e = NULL, gpus[1024];
	size_t		  n = 0, cap = 0;
	int64_t		  rank = r->rank_base + local_rank;
	int64_t		  world = env_world(c, r);

	env_set(&e, &n, &cap, "LOCAL_RANK", "%d",
	    env_own_devices(c) ? 0 : local_rank);
	env_set(&e, &n, &cap, "RDZV_LOCAL_RANK", "%d", local_rank);
	env_set(&e, &n, &cap, "RANK", "%lld", (long long)rank);
	env_set(&e, &n, &cap, "GROUP_RANK", "%lld",
	    (long long)r->group_rank);
	env_set(&e, &n, &cap, "ROLE_RANK", "%lld", (long long)rank);
	env_set(&e, &n, &cap, "ROLE_NAME", "%s", c->role);
	env_set(&e, &n, &cap, "LOCAL_WORLD_SIZE", "%d", c->nproc);
	env_set(&e, &n, &cap, "WORLD_SIZE", "%lld", (long long)world);
	env_set(&e, &n, &cap, "GROUP_WORLD_SIZE", "%lld",
	    (long long)r->group_world_size);
	env_set(&e, &n, &cap, "ROLE_WORLD_SIZE", "%lld",
	    (long long)world);
	env_set(&e, &n, &cap, "MASTER_ADDR", "%s", rdzv_master_host());
	env_set(&e, &n, &cap, "MASTER_PORT", "%lld",
	    (long long)r->store_port);
	env_set(&e, &n, &cap, "TORCHELASTIC_RESTART_COUNT", "%lld",
	    (long long)r->restart_count);
	env_set(&e, &n, &cap, "TORCHELASTIC_MAX_RESTARTS", "%lld",
	    (long long)r->max_restarts);
	env_set(&e, &n, &cap, "TORCHELASTIC_RUN_ID", "%s",
	    c->rdzv_id);
	env_set(&e, &n, &cap, "TORCHELASTIC_USE_AGENT_STORE", "True");
	env_set(&e, &n, &cap, "TORCHELASTIC_ERROR_FILE", "%s",
	    logs_error_file(local_rank));
	env_set(&e, &n, &cap, "RDZV_ENDPOINT", "%s", c->endpoint);
	if (rdzv_worker_token_file() != NULL)
		env_set(&e, &n, &cap, "RDZV_TOKEN_FILE", "%s",
		    rdzv_worker_token_file());
	if (c->tls_ca != NULL)
		env_set(&e, &n, &cap, "RDZV_TLS_CA", "%s",
		    c->tls_ca);
	env_set(&e, &n, &cap, "RDZV_PROGRESS_FD", "%d",
	    PROGRESS_CHILD_FD);
	env_set(&e, &n, &cap, "RDZV_JOB", "%s", c->rdzv_id);
	env_set(&e, &n, &cap, "RDZV_ROUND", "%lld", (long long)r->round);
	env_set(&e, &n, &cap, "RDZV_NAMESPACE", "%s", r->store_ns);
	env_set(&e, &n, &cap, "RDZV_NODE_ID", "%lld",
	    (long long)r->node_id);
	env_topo(c, &e, &n, &cap, local_rank, r, world);
	/* Started into a repair round: it takes a lost node's place. */
	if (r->kind != NAT_KIND_NORMAL)
		env_set(&e, &n, &cap, "RDZV_REPLACEMENT", "1");
	if (env_own_devices(c)) {
		env_gpus(c, local_rank, gpus, sizeof gpus);
		env_set(&e, &n, &cap, "CUDA_VISIBLE_DEVICES", "%s", gpus);
	}
	env_defaults(c, &e, &n, &cap);
	*np = n;
	return (e);
}

/* The whole environment: the agent's, less what vars set, plus vars. */
char **
env_merge(char **vars, size_t nv)
{
	extern char	**environ;
	char		**e;
	size_t		  ne = 0, i;

	for (i = 0; environ[i] != NULL; i++)
		;
	if ((e = calloc(i + nv + 1, sizeof *e)) == NULL)
		fatalx("out of memory");
	for (i = 0; environ[i] != NULL; i++) {
		if (strchr(environ[i], '=') == NULL)
			continue;
		if (!env_has(vars, nv, environ[i],
		    strcspn(environ[i], "=")))
			e[ne++] = environ[i];
	}
	for (i = 0; i < nv; i++)
		e[ne++] = vars[i];
	e[ne] = NULL;
	free(vars);	/* the strings now belong to e */
	return (e);
}

/* A worker's whole environment. */
char **
env_worker(const struct agent_config *c, int local_rank,
    const struct rdzv_round *r)
{
	char	**vars;
	size_t	  nv;

	vars = env_vars(c, local_rank, r, &nv);
	return (env_merge(vars, nv));
}

/* Frees what env_worker or env_merge made (our strings only). */
void
env_free(char **e)
{
	extern char	**environ;
	size_t		  i, j;
	int		  ours;

	for (i = 0; e[i] != NULL; i++) {
		ours = 1;
		for (j = 0; environ[j] != NULL; j++)
			if (environ[j] == e[i]) {
				ours = 0;
				break;
			}
		if (ours)
			free(e[i]);
	}
	free(e);
}
