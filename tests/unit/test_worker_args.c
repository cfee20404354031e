/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_worker_args.c: the argument checks of librdzvworker's collectives
 * (libworker/comm.c coll_check), on a world of one, which needs no store
 * or peer: each call with good arguments succeeds, and each bad argument
 * (unknown dtype or op, a root that is no rank, a NULL buffer that must
 * hold data, alltoall in place, an overflowing count) is refused with
 * RDZV_EINVAL and a message naming it, the communicator still usable.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rdzv_worker.h"

static int
setup(void **state)
{
	static const char	*launch_vars[] = { "RANK", "WORLD_SIZE",
	    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
	    "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", NULL };
	struct rdzv_comm	*comm = NULL;
	const char		**v;
	char			 err[256];

	/* Whatever launched the test suite must not make this a job. */
	for (v = launch_vars; *v != NULL; v++)
		unsetenv(*v);
	if (rdzv_init(&comm, NULL, err, sizeof err) != 0 ||
	    rdzv_size(comm) != 1)
		return (-1);
	*state = comm;
	return (0);
}

static int
teardown(void **state)
{
	return (rdzv_finalize(*state) == 0 ? 0 : -1);
}

/* rc is RDZV_EINVAL and the message says what (line: the caller's). */
static void
refused_at(struct rdzv_comm *c, int rc, const char *what, int line)
{
	if (rc != RDZV_EINVAL)
		fail_msg("line %d: %d, not RDZV_EINVAL", line, rc);
	if (strstr(rdzv_comm_errmsg(c), what) == NULL)
		fail_msg("line %d: message \"%s\" does not name \"%s\"",
		    line, rdzv_comm_errmsg(c), what);
}
#define refused(c, rc, what)	refused_at((c), (rc), (what), __LINE__)

static void
test_good_arguments(void **state)
{
	struct rdzv_comm	*c = *state;
	float			 a[4] = { 1, 2, 3, 4 }, b[4];

	assert_int_equal(rdzv_allreduce(c, a, b, 4, RDZV_F32, RDZV_SUM, -1),
	    0);
	assert_true(b[3] == 4);
	assert_int_equal(rdzv_broadcast(c, a, 4, RDZV_F32, 0, -1), 0);
	assert_int_equal(rdzv_reduce(c, a, b, 4, RDZV_F32, RDZV_MAX, 0, -1),
	    0);
	assert_int_equal(rdzv_allgather(c, a, b, 4, RDZV_F32, -1), 0);
	assert_int_equal(rdzv_reduce_scatter(c, a, b, 4, RDZV_F32, RDZV_SUM,
	    -1), 0);
	assert_int_equal(rdzv_gather(c, a, b, 4, RDZV_F32, 0, -1), 0);
	assert_int_equal(rdzv_scatter(c, a, b, 4, RDZV_F32, 0, -1), 0);
	assert_int_equal(rdzv_alltoall(c, a, b, 4, RDZV_F32, -1), 0);
	assert_int_equal(rdzv_barrier(c, -1), 0);
	/* Nothing to move: NULL buffers are fine. */
	assert_int_equal(rdzv_allreduce(c, NULL, NULL, 0, RDZV_F32, RDZV_SUM,
	    -1), 0);
	assert_int_equal(rdzv_alltoall(c, NULL, NULL, 0, RDZV_F32, -1), 0);
}

static void
test_bad_arguments(void **state)
{
	struct rdzv_comm	*c = *state;
	float			 a[4] = { 1, 2, 3, 4 }, b[4];

	refused(c, rdzv_allreduce(c, a, b, 4, (enum rdzv_dtype)99, RDZV_SUM,
	    -1), "unknown dtype");
	refused(c, rdzv_allreduce(c, a, b, 4, RDZV_F32, (enum rdzv_op)99, -1),
	    "unknown op");
	refused(c, rdzv_allreduce(c, NULL, b, 4, RDZV_F32, RDZV_SUM, -1),
	    "sendbuf is NULL");
	refused(c, rdzv_allreduce(c, a, NULL, 4, RDZV_F32, RDZV_SUM, -1),
	    "recvbuf is NULL");
	refused(c, rdzv_allreduce(c, a, b, SIZE_MAX / 2, RDZV_F32, RDZV_SUM,
	    -1), "overflows");
	refused(c, rdzv_broadcast(c, a, 4, RDZV_F32, 1, -1), "root 1");
	refused(c, rdzv_broadcast(c, NULL, 4, RDZV_F32, 0, -1), "is NULL");
	refused(c, rdzv_reduce(c, a, b, 4, RDZV_F32, RDZV_SUM, -1, -1),
	    "root -1");
	refused(c, rdzv_reduce(c, a, NULL, 4, RDZV_F32, RDZV_SUM, 0, -1),
	    "recvbuf is NULL");
	refused(c, rdzv_reduce(c, a, b, 4, RDZV_F32, (enum rdzv_op)-1, 0, -1),
	    "unknown op");
	refused(c, rdzv_allgather(c, a, NULL, 4, RDZV_F32, -1),
	    "recvbuf is NULL");
	refused(c, rdzv_reduce_scatter(c, NULL, b, 4, RDZV_F32, RDZV_SUM, -1),
	    "sendbuf is NULL");
	refused(c, rdzv_gather(c, a, NULL, 4, RDZV_F32, 0, -1),
	    "recvbuf is NULL");
	refused(c, rdzv_gather(c, a, b, 4, RDZV_F32, 2, -1), "root 2");
	refused(c, rdzv_scatter(c, NULL, b, 4, RDZV_F32, 0, -1),
	    "sendbuf is NULL");
	refused(c, rdzv_alltoall(c, a, a, 4, RDZV_F32, -1), "not in place");
	refused(c, rdzv_alltoall(c, a, NULL, 4, RDZV_F32, -1),
	    "recvbuf is NULL");
	/* Refusals do not break the communicator. */
	assert_int_equal(rdzv_allreduce(c, a, b, 4, RDZV_F32, RDZV_SUM, -1),
	    0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_good_arguments, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_bad_arguments, setup,
		    teardown),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
