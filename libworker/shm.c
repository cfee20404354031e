/* shm.c: the same-host arena (being written; TCP until then). */
#include "config.h"

#include "cpu.h"

int
shm_setup(struct cpu *cpu, const char *key)
{
	return (RDZV_EINVAL);
}

void
shm_free(struct shm_arena *a)
{
}

int
shm_allreduce(struct cpu *cpu, const void *s, void *r, size_t n,
    enum rdzv_dtype dt, enum rdzv_op op, int64_t dl)
{
	return (RDZV_EINVAL);
}

int
shm_broadcast(struct cpu *cpu, void *b, size_t n, int root, int64_t dl)
{
	return (RDZV_EINVAL);
}

void
shm_abort(struct shm_arena *a)
{
}
