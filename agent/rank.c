/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rank.c: this node's local ranks, and the one way a worker is started.
 *
 * Owns the table of struct agent_rank (agent.h), one for each local rank
 * for the agent's life, which main.c's state machine reads and marks,
 * and rank_spawn(), through which every worker of a local rank starts:
 * the first of a round (a restart's and a standby's too), a replacement
 * in place after a death, and a warm spare handed the rank for either
 * (sup.c decides that, and is the one that forks).  What else a local
 * rank has stays private to the file that serves it, under the same
 * number: its process and its last launch in sup.c, its output streams
 * and error file in logs.c, its channel in progress.c.
 */
#include "config.h"

#include <sys/types.h>

#include <stdint.h>
#include <stdlib.h>

#include "agent.h"
#include "log.h"

static const struct agent_config	*rank_cfg;
static struct agent_rank		*rank_table;	/* cfg->nproc */

void
rank_init(const struct agent_config *cfg)
{
	int	l;

	rank_cfg = cfg;
	if ((rank_table = calloc(cfg->nproc, sizeof *rank_table)) == NULL)
		fatalx("out of memory");
	for (l = 0; l < cfg->nproc; l++)
		rank_table[l].local_rank = l;
}

struct agent_rank *
rank_get(int local_rank)
{
	/* Every caller's rank came from this node's own 0..nproc - 1. */
	if (rank_table == NULL || local_rank < 0 ||
	    local_rank >= rank_cfg->nproc)
		fatalx("rank: no local rank %d", local_rank);
	return (&rank_table[local_rank]);
}

void
rank_new_round(void)
{
	struct agent_rank	*ar;
	int			 l;

	for (l = 0; l < rank_cfg->nproc; l++) {
		ar = &rank_table[l];
		ar->hung_at = 0;
		ar->pending = 0;
		ar->fresh = 0;
		ar->unjoined = 0;
	}
}

int
rank_any_pending(void)
{
	int	l;

	for (l = 0; l < rank_cfg->nproc; l++)
		if (rank_table[l].pending)
			return (1);
	return (0);
}

int
rank_any_fresh(void)
{
	int	l;

	for (l = 0; l < rank_cfg->nproc; l++)
		if (rank_table[l].fresh)
			return (1);
	return (0);
}

int
rank_spawn(struct agent_rank *ar, const struct rdzv_round *r,
    int replacement, int *warm)
{
	char	**env, moved[4096];
	pid_t	  pid;
	int	  l = ar->local_rank, out_fd, err_fd, rv;

	*warm = 0;
	if (replacement) {
		/* The predecessor's output read out, its error file moved
		 * aside (moved: where; its failure was recorded already). */
		if ((rv = logs_rearm(l, &out_fd, &err_fd, moved,
		    sizeof moved)) != 0 || (rv = progress_rearm(l)) != 0)
			return (rv);
		rv = sup_respawn(l, out_fd, err_fd, progress_child_fd(l),
		    &pid, warm);
	} else {
		env = env_worker(rank_cfg, l, r);
		(void)logs_child_fds(l, &out_fd, &err_fd);
		rv = sup_spawn(l, rank_cfg->argv, env, out_fd, err_fd,
		    progress_child_fd(l), &pid, warm);
		env_free(env);
	}
	/* The child has its copies of the descriptors, or none was made. */
	logs_spawned(l);
	progress_spawned(l);
	if (rv != 0)
		return (rv);
	/* A new process: never hung, never killed as a straggler (a
	 * restart's first start too, not only a replacement's). */
	ar->hung_at = 0;
	ar->strag_killed = 0;
	ar->pending = ar->fresh = replacement;
	if (!replacement)
		return (0);
	rdzv_unjoined_changed();
	log_info("worker %d (rank %lld): replacement pid %ld started%s; the "
	    "others go on", l, (long long)(r->rank_base + l), (long)pid,
	    *warm ? " (the warm spare)" : "");
	return (0);
}
