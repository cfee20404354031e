/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_worker_env.c: librdzvworker's pure parts: environment detection
 * (libworker/env.c) for every launcher and its errors, and the
 * reductions and half-precision conversions (libworker/reduce.c).
 */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "worker.h"

/* ---- a fake environment ---- */

struct fenv {
	const char	*kv[64];	/* name, value, name, value, ..., NULL */
};

static const char *
fget(const char *name, void *arg)
{
	struct fenv	*f = arg;
	int		 i;

	for (i = 0; f->kv[i] != NULL; i += 2)
		if (strcmp(f->kv[i], name) == 0)
			return (f->kv[i + 1]);
	return (NULL);
}

#define ENV(...)	(&(struct fenv){ { __VA_ARGS__, NULL } })

static int
detect(struct wenv *e, struct fenv *f, char *err, size_t len)
{
	return (wenv_detect(e, fget, f, err, len));
}

static void
test_nothing_is_world_of_one(void **state)
{
	struct wenv	e;
	char		err[256];

	assert_int_equal(detect(&e, ENV(NULL), err, sizeof err), 0);
	assert_string_equal(e.source, "single");
	assert_int_equal(e.rank, 0);
	assert_int_equal(e.size, 1);
	assert_int_equal(e.local_rank, 0);
	assert_int_equal(e.local_size, 1);
	assert_int_equal(e.store, WENV_STORE_NONE);
	assert_int_equal(e.backend, RDZV_BACKEND_AUTO);
}

static void
test_torchrun_c10d(void **state)
{
	struct wenv	e;
	char		err[256];

	assert_int_equal(detect(&e, ENV("RANK", "0", "WORLD_SIZE", "4",
	    "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "2", "MASTER_ADDR",
	    "node1", "MASTER_PORT", "29500", "TORCHELASTIC_RUN_ID", "x",
	    "TORCHELASTIC_USE_AGENT_STORE", "False",
	    "TORCHELASTIC_RESTART_COUNT", "3"), err, sizeof err), 0);
	assert_string_equal(e.source, "torchrun");
	assert_int_equal(e.size, 4);
	assert_int_equal(e.local_size, 2);
	assert_int_equal(e.store, WENV_STORE_TCPSTORE);
	assert_string_equal(e.master_addr, "node1");
	assert_int_equal(e.master_port, 29500);
	assert_int_equal(e.host_store, 1);	/* rank 0 serves it */
	assert_string_equal(e.prefix, "");
	assert_int_equal(e.restart_count, 3);

	assert_int_equal(detect(&e, ENV("RANK", "3", "WORLD_SIZE", "4",
	    "MASTER_ADDR", "node1", "MASTER_PORT", "29500"), err,
	    sizeof err), 0);
	assert_string_equal(e.source, "env");
	assert_int_equal(e.host_store, 0);
	assert_int_equal(e.local_rank, -1);	/* unknown: from peers */
}

static void
test_torchrun_agent_store(void **state)
{
	struct wenv	e;
	char		err[256];

	assert_int_equal(detect(&e, ENV("RANK", "0", "WORLD_SIZE", "2",
	    "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", "1234",
	    "TORCHELASTIC_USE_AGENT_STORE", "True",
	    "TORCHELASTIC_RESTART_COUNT", "2"), err, sizeof err), 0);
	assert_int_equal(e.host_store, 0);
	assert_string_equal(e.prefix, "/worker/attempt_2");
}

static void
test_rdzv_agent(void **state)
{
	struct wenv	e;
	char		err[256];

	assert_int_equal(detect(&e, ENV("RANK", "1", "WORLD_SIZE", "2",
	    "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", "MASTER_ADDR", "m",
	    "MASTER_PORT", "9", "RDZV_ENDPOINT", "rdzvd:29400",
	    "RDZV_NAMESPACE", "job7/r2"), err, sizeof err), 0);
	assert_string_equal(e.source, "rdzv-agent");
	assert_int_equal(e.local_rank, 1);
	assert_int_equal(e.store, WENV_STORE_NATIVE);	/* wins over MASTER */
	assert_string_equal(e.endpoint, "rdzvd:29400");
	assert_string_equal(e.ns, "job7/r2");

	assert_int_equal(detect(&e, ENV("RANK", "0", "WORLD_SIZE", "2",
	    "RDZV_ENDPOINT", "h:1", "RDZV_JOB", "j", "RDZV_ROUND", "5"), err,
	    sizeof err), 0);
	assert_string_equal(e.ns, "j/5");

	/* --gpus_per_worker: LOCAL_RANK is the device index, 0; the rank on
	 * the host is RDZV_LOCAL_RANK's. */
	assert_int_equal(detect(&e, ENV("RANK", "3", "WORLD_SIZE", "4",
	    "LOCAL_RANK", "0", "RDZV_LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2",
	    "RDZV_ENDPOINT", "h:1", "RDZV_NAMESPACE", "j/1"), err, sizeof err),
	    0);
	assert_int_equal(e.local_rank, 1);
	assert_int_equal(detect(&e, ENV("RANK", "3", "WORLD_SIZE", "4",
	    "LOCAL_RANK", "0", "RDZV_LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "2",
	    "RDZV_ENDPOINT", "h:1", "RDZV_NAMESPACE", "j/1"), err, sizeof err),
	    RDZV_EINVAL);
	assert_non_null(strstr(err, "RDZV_LOCAL_RANK"));

	assert_int_equal(detect(&e, ENV("RANK", "0", "WORLD_SIZE", "2",
	    "RDZV_ENDPOINT", "h:1"), err, sizeof err), RDZV_EINVAL);
	assert_non_null(strstr(err, "RDZV_NAMESPACE"));
}

static void
test_openmpi_pmi_slurm(void **state)
{
	struct wenv	e;
	char		err[256];

	assert_int_equal(detect(&e, ENV("OMPI_COMM_WORLD_RANK", "5",
	    "OMPI_COMM_WORLD_SIZE", "8", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
	    "OMPI_COMM_WORLD_LOCAL_SIZE", "4", "MASTER_ADDR", "a",
	    "MASTER_PORT", "2"), err, sizeof err), 0);
	assert_string_equal(e.source, "openmpi");
	assert_int_equal(e.rank, 5);
	assert_int_equal(e.size, 8);
	assert_int_equal(e.local_rank, 1);
	assert_int_equal(e.local_size, 4);
	assert_int_equal(e.host_store, 0);

	assert_int_equal(detect(&e, ENV("PMI_RANK", "0", "PMI_SIZE", "3",
	    "MPI_LOCALRANKID", "0", "MPI_LOCALNRANKS", "3", "MASTER_ADDR",
	    "a", "MASTER_PORT", "2"), err, sizeof err), 0);
	assert_string_equal(e.source, "mpich");
	assert_int_equal(e.host_store, 1);
	assert_int_equal(e.local_size, 3);

	assert_int_equal(detect(&e, ENV("SLURM_PROCID", "2", "SLURM_NTASKS",
	    "6", "SLURM_LOCALID", "0", "MASTER_ADDR", "a", "MASTER_PORT",
	    "2"), err, sizeof err), 0);
	assert_string_equal(e.source, "slurm");
	assert_int_equal(e.rank, 2);
	assert_int_equal(e.local_rank, 0);
	assert_int_equal(e.local_size, -1);

	/* torchrun's variables win when a launcher sets both. */
	assert_int_equal(detect(&e, ENV("SLURM_PROCID", "2", "SLURM_NTASKS",
	    "6", "RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "a",
	    "MASTER_PORT", "2"), err, sizeof err), 0);
	assert_int_equal(e.size, 2);
}

static void
test_errors_name_the_variable(void **state)
{
	struct wenv	e;
	char		err[256];

	assert_int_equal(detect(&e, ENV("RANK", "2", "WORLD_SIZE", "2",
	    "MASTER_ADDR", "a", "MASTER_PORT", "1"), err, sizeof err),
	    RDZV_EINVAL);
	assert_non_null(strstr(err, "RANK=\"2\""));

	assert_int_equal(detect(&e, ENV("RANK", "0"), err, sizeof err),
	    RDZV_EINVAL);
	assert_non_null(strstr(err, "WORLD_SIZE is not set"));

	assert_int_equal(detect(&e, ENV("RANK", "0", "WORLD_SIZE", "two"),
	    err, sizeof err), RDZV_EINVAL);
	assert_non_null(strstr(err, "WORLD_SIZE"));

	assert_int_equal(detect(&e, ENV("RANK", "0", "WORLD_SIZE", "2"),
	    err, sizeof err), RDZV_EINVAL);
	assert_non_null(strstr(err, "needs a store"));
	assert_non_null(strstr(err, "RDZV_ENDPOINT"));
	assert_non_null(strstr(err, "MASTER_ADDR"));

	assert_int_equal(detect(&e, ENV("RANK", "0", "WORLD_SIZE", "2",
	    "MASTER_PORT", "1"), err, sizeof err), RDZV_EINVAL);
	assert_non_null(strstr(err, "MASTER_ADDR is not"));

	assert_int_equal(detect(&e, ENV("RANK", "0", "WORLD_SIZE", "2",
	    "MASTER_ADDR", "a", "MASTER_PORT", "70000"), err, sizeof err),
	    RDZV_EINVAL);
	assert_non_null(strstr(err, "MASTER_PORT"));

	assert_int_equal(detect(&e, ENV("OMPI_COMM_WORLD_RANK", "0",
	    "OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_LOCAL_SIZE", "2",
	    "OMPI_COMM_WORLD_LOCAL_RANK", "2", "MASTER_ADDR", "a",
	    "MASTER_PORT", "1"), err, sizeof err), RDZV_EINVAL);
	assert_non_null(strstr(err, "OMPI_COMM_WORLD_LOCAL_RANK"));

	assert_int_equal(detect(&e, ENV("RDZV_BACKEND", "gpu"), err,
	    sizeof err), RDZV_EINVAL);
	assert_non_null(strstr(err, "RDZV_BACKEND"));

	assert_int_equal(detect(&e, ENV("RDZV_TIMEOUT_MS", "-5"), err,
	    sizeof err), RDZV_EINVAL);
	assert_non_null(strstr(err, "RDZV_TIMEOUT_MS"));

	/* Empty counts as unset. */
	assert_int_equal(detect(&e, ENV("RANK", "", "WORLD_SIZE", ""), err,
	    sizeof err), 0);
	assert_int_equal(e.size, 1);
}

static void
test_options(void **state)
{
	struct wenv	e;
	char		err[256];

	assert_int_equal(detect(&e, ENV("RDZV_BACKEND", "nccl",
	    "RDZV_TIMEOUT_MS", "1500", "RDZV_INIT_TIMEOUT_MS", "9000"), err,
	    sizeof err), 0);
	assert_int_equal(e.backend, RDZV_BACKEND_NCCL);
	assert_int_equal(e.timeout_ms, 1500);
	assert_int_equal(e.init_timeout_ms, 9000);
	assert_int_equal(detect(&e, ENV("RDZV_BACKEND", "cpu"), err,
	    sizeof err), 0);
	assert_int_equal(e.backend, RDZV_BACKEND_CPU);
	assert_int_equal(e.timeout_ms, -1);
}

/* ---- half precision ---- */

static float
bits_f(uint32_t u)
{
	float	f;

	memcpy(&f, &u, sizeof f);
	return (f);
}

static void
test_half_round_trip(void **state)
{
	uint32_t	h;
	float		f;

	/* Every half value converts to float and back unchanged. */
	for (h = 0; h < 0x10000; h++) {
		f = half_to_float((uint16_t)h);
		if (isnan(f)) {
			assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff));
			assert_true(isnan(half_to_float(float_to_half(f))));
			continue;
		}
		assert_int_equal(float_to_half(f), h);
	}
	assert_true(half_to_float(0x3c00) == 1.0f);
	assert_true(half_to_float(0xc000) == -2.0f);
	assert_true(half_to_float(0x7bff) == 65504.0f);
	assert_true(half_to_float(0x0001) == ldexpf(1, -24));
	assert_true(isinf(half_to_float(0x7c00)));
}

static void
test_half_rounding(void **state)
{
	/* Ties go to even; overflow to infinity; subnormals round. */
	assert_int_equal(float_to_half(1.0f + ldexpf(1, -11)), 0x3c00);
	assert_int_equal(float_to_half(1.0f + 3 * ldexpf(1, -11)), 0x3c02);
	assert_int_equal(float_to_half(1.0f + ldexpf(1, -11) +
	    ldexpf(1, -20)), 0x3c01);
	assert_int_equal(float_to_half(65519.0f), 0x7bff);
	assert_int_equal(float_to_half(65520.0f), 0x7c00);
	assert_int_equal(float_to_half(-1e9f), 0xfc00);
	assert_int_equal(float_to_half(ldexpf(1, -24)), 0x0001);
	assert_int_equal(float_to_half(ldexpf(1, -25)), 0x0000);
	assert_int_equal(float_to_half(3 * ldexpf(1, -25)), 0x0002);
	assert_int_equal(float_to_half(ldexpf(1, -14)), 0x0400);
	assert_int_equal(float_to_half(-0.0f), 0x8000);
	assert_int_equal(float_to_half(bits_f(0x7fc00000)) & 0x7e00, 0x7e00);
}

static void
test_bf16(void **state)
{
	assert_int_equal(float_to_bf16(1.0f), 0x3f80);
	assert_int_equal(float_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);
	assert_int_equal(float_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82);
	assert_int_equal(float_to_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -16)),
	    0x3f81);
	assert_true(isnan(bf16_to_float(float_to_bf16(bits_f(0x7f800001)))));
	assert_true(bf16_to_float(0xc040) == -3.0f);
}

/* ---- reductions ---- */

static double
rd(const void *b, enum rdzv_dtype dt, size_t i)
{
	switch (dt) {
	case RDZV_F32:	return (((const float *)b)[i]);
	case RDZV_F64:	return (((const double *)b)[i]);
	case RDZV_F16:	return (half_to_float(((const uint16_t *)b)[i]));
	case RDZV_BF16:	return (bf16_to_float(((const uint16_t *)b)[i]));
	case RDZV_I32:	return (((const int32_t *)b)[i]);
	case RDZV_I64:	return ((double)((const int64_t *)b)[i]);
	case RDZV_U8:	return (((const uint8_t *)b)[i]);
	}
	return (0);
}

static void
wr(void *b, enum rdzv_dtype dt, size_t i, double v)
{
	switch (dt) {
	case RDZV_F32:	((float *)b)[i] = (float)v; break;
	case RDZV_F64:	((double *)b)[i] = v; break;
	case RDZV_F16:	((uint16_t *)b)[i] = float_to_half((float)v); break;
	case RDZV_BF16:	((uint16_t *)b)[i] = float_to_bf16((float)v); break;
	case RDZV_I32:	((int32_t *)b)[i] = (int32_t)v; break;
	case RDZV_I64:	((int64_t *)b)[i] = (int64_t)v; break;
	case RDZV_U8:	((uint8_t *)b)[i] = (uint8_t)v; break;
	}
}

static size_t
esize(enum rdzv_dtype dt)
{
	static const size_t	sz[] = { 4, 8, 2, 2, 4, 8, 1 };

	return (sz[dt]);
}

static void
test_reduce_all(void **state)
{
	/* 37 elements: two vector blocks and a tail. */
	enum { N = 37 };
	uint8_t		a[N * 8], b[N * 8], d[N * 8];
	double		x, y, want;
	size_t		i;
	int		dt, op;
	int		sign;

	for (dt = 0; dt < RDZV_DTYPE_COUNT; dt++) {
		sign = dt != RDZV_U8 ? -1 : 1;
		for (op = 0; op < RDZV_OP_COUNT; op++) {
			reduce3_fn	f = reduce3_get(dt, op);

			assert_non_null(f);
			for (i = 0; i < N; i++) {
				wr(a, dt, i, (double)(i % 7) * (i % 2 ? sign : 1));
				wr(b, dt, i, (double)((i * 5) % 6));
			}
			f(d, a, b, N);
			for (i = 0; i < N; i++) {
				x = rd(a, dt, i);
				y = rd(b, dt, i);
				switch (op) {
				case RDZV_PROD:	want = x * y; break;
				case RDZV_MIN:	want = x < y ? x : y; break;
				case RDZV_MAX:	want = x > y ? x : y; break;
				default:	want = x + y; break;
				}
				assert_true(rd(d, dt, i) == want);
			}
			/* dst may alias the first operand */
			f(a, a, b, N);
			assert_memory_equal(a, d, N * esize(dt));
		}
	}
	assert_null(reduce3_get(RDZV_DTYPE_COUNT, RDZV_SUM));
	assert_null(reduce3_get(RDZV_F32, RDZV_OP_COUNT));
}

static void
test_wrap_and_avg(void **state)
{
	uint8_t	u[2] = { 200, 3 }, v[2] = { 100, 4 };
	int32_t	i[2] = { INT32_MAX, -7 }, j[2] = { 1, 0 };
	float	f[3] = { 3, 5, -7 };
	uint16_t h[1];

	reduce3_get(RDZV_U8, RDZV_SUM)(u, u, v, 2);
	assert_int_equal(u[0], 44);		/* wraps, no UB */
	reduce3_get(RDZV_I32, RDZV_SUM)(i, i, j, 2);
	assert_int_equal(i[0], INT32_MIN);
	reduce_avg_finish(i, 2, RDZV_I32, 2);
	assert_int_equal(i[1], -3);		/* truncates toward zero */
	reduce_avg_finish(f, 3, RDZV_F32, 2);
	assert_true(f[0] == 1.5f && f[1] == 2.5f && f[2] == -3.5f);
	h[0] = float_to_half(3.0f);
	reduce_avg_finish(h, 1, RDZV_F16, 4);
	assert_true(half_to_float(h[0]) == 0.75f);
	u[0] = 255;
	reduce_avg_finish(u, 1, RDZV_U8, 300);
	assert_int_equal(u[0], 0);
}

/*
 * The CUDA device of a rank: its own devices' first (LOCAL_RANK) when the
 * launcher gave each worker its own (RDZV_LOCAL_RANK set: rdzv-agent's
 * --gpus_per_worker, where torch in the same process uses cuda:0), else
 * the local rank modulo the devices, shared when the host has more ranks
 * than devices.
 */
static void
test_device_mapping(void **state)
{
	struct wenv	e;
	char		err[256];
	int		shared;

	/* --gpus_per_worker 2: local rank 1 sees its 2 GPUs as 0 and 1. */
	assert_int_equal(detect(&e, ENV("RANK", "1", "WORLD_SIZE", "2",
	    "LOCAL_RANK", "0", "RDZV_LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2",
	    "RDZV_ENDPOINT", "h:1", "RDZV_NAMESPACE", "j/1"), err, sizeof err),
	    0);
	assert_int_equal(e.local_rank, 1);
	assert_int_equal(e.dev_index, 0);
	assert_int_equal(wenv_device(&e, e.local_rank, e.local_size, 2,
	    &shared), 0);
	assert_false(shared);

	/* torchrun, 4 ranks on 4 GPUs: one each. */
	assert_int_equal(detect(&e, ENV("RANK", "3", "WORLD_SIZE", "4",
	    "LOCAL_RANK", "3", "LOCAL_WORLD_SIZE", "4", "MASTER_ADDR", "a",
	    "MASTER_PORT", "2"), err, sizeof err), 0);
	assert_int_equal(e.dev_index, -1);
	assert_int_equal(wenv_device(&e, 3, 4, 4, &shared), 3);
	assert_false(shared);
	/* ... on 2 GPUs: shared, by every rank of the host alike. */
	assert_int_equal(wenv_device(&e, 3, 4, 2, &shared), 1);
	assert_true(shared);
	assert_int_equal(wenv_device(&e, 0, 4, 2, &shared), 0);
	assert_true(shared);
	/* Local size unknown (worked out from peers): past the devices. */
	assert_int_equal(wenv_device(&e, 2, -1, 2, &shared), 0);
	assert_true(shared);
	assert_int_equal(wenv_device(&e, 1, -1, 2, &shared), 1);
	assert_false(shared);
	/* No device. */
	assert_int_equal(wenv_device(&e, 0, 1, 0, &shared), -1);
	assert_false(shared);
	/* A bad LOCAL_RANK beside RDZV_LOCAL_RANK is named. */
	assert_int_equal(detect(&e, ENV("RANK", "1", "WORLD_SIZE", "2",
	    "LOCAL_RANK", "x", "RDZV_LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2",
	    "RDZV_ENDPOINT", "h:1", "RDZV_NAMESPACE", "j/1"), err, sizeof err),
	    RDZV_EINVAL);
	assert_non_null(strstr(err, "LOCAL_RANK"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nothing_is_world_of_one),
		cmocka_unit_test(test_torchrun_c10d),
		cmocka_unit_test(test_torchrun_agent_store),
		cmocka_unit_test(test_rdzv_agent),
		cmocka_unit_test(test_openmpi_pmi_slurm),
		cmocka_unit_test(test_errors_name_the_variable),
		cmocka_unit_test(test_options),
		cmocka_unit_test(test_device_mapping),
		cmocka_unit_test(test_half_round_trip),
		cmocka_unit_test(test_half_rounding),
		cmocka_unit_test(test_bf16),
		cmocka_unit_test(test_reduce_all),
		cmocka_unit_test(test_wrap_and_avg),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
