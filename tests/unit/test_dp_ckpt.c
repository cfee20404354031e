/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dp_ckpt.c: unit tests of checkpoints (libworker/ckpt.c) without a
 * communicator and with a world of one: round trip, replacing a
 * checkpoint, no temporary file left behind, a missing file, and every
 * kind of damage (a flipped byte anywhere, truncation, appended bytes,
 * other part sizes or counts) refused with the caller's buffers left
 * untouched.
 */
#include "config.h"

#include <sys/stat.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "rdzv_worker.h"

struct fixture {
	char	dir[64];
	char	path[128];
	float	model[1000];
	uint8_t	opt[13];	/* odd length: the checksum's tail path */
	struct rdzv_ckpt_part parts[3];
};

static int
setup(void **state)
{
	struct fixture	*f;
	size_t		 i;

	if ((f = calloc(1, sizeof *f)) == NULL)
		return (-1);
	strlcpy(f->dir, "/tmp/test_dp_ckpt.XXXXXX", sizeof f->dir);
	if (mkdtemp(f->dir) == NULL)
		return (-1);
	snprintf(f->path, sizeof f->path, "%s/ckpt.bin", f->dir);
	for (i = 0; i < 1000; i++)
		f->model[i] = (float)i * 0.5f - 3.0f;
	for (i = 0; i < sizeof f->opt; i++)
		f->opt[i] = (uint8_t)(0xa0 + i);
	f->parts[0].data = f->model;
	f->parts[0].len = sizeof f->model;
	f->parts[1].data = NULL;	/* an empty part is allowed */
	f->parts[1].len = 0;
	f->parts[2].data = f->opt;
	f->parts[2].len = sizeof f->opt;
	*state = f;
	return (0);
}

static int
teardown(void **state)
{
	struct fixture	*f = *state;
	struct dirent	*de;
	DIR		*d;
	char		 p[512];

	if ((d = opendir(f->dir)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(p, sizeof p, "%s/%s", f->dir, de->d_name);
			unlink(p);
		}
		closedir(d);
	}
	rmdir(f->dir);
	free(f);
	return (0);
}

/* Number of directory entries other than . and .. */
static int
count_files(const char *dir)
{
	struct dirent	*de;
	DIR		*d;
	int		 n = 0;

	assert_non_null(d = opendir(dir));
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 &&
		    strcmp(de->d_name, "..") != 0)
			n++;
	closedir(d);
	return (n);
}

/* Fresh buffers of the fixture's shape, filled with a marker. */
struct loadbuf {
	float	model[1000];
	uint8_t	opt[13];
	struct rdzv_ckpt_part parts[3];
};

static void
loadbuf_init(struct loadbuf *b)
{
	memset(b->model, 0x55, sizeof b->model);
	memset(b->opt, 0x55, sizeof b->opt);
	b->parts[0].data = b->model;
	b->parts[0].len = sizeof b->model;
	b->parts[1].data = NULL;
	b->parts[1].len = 0;
	b->parts[2].data = b->opt;
	b->parts[2].len = sizeof b->opt;
}

static int
loadbuf_untouched(const struct loadbuf *b)
{
	const uint8_t	*p = (const uint8_t *)b->model;
	size_t		 i;

	for (i = 0; i < sizeof b->model; i++)
		if (p[i] != 0x55)
			return (0);
	for (i = 0; i < sizeof b->opt; i++)
		if (b->opt[i] != 0x55)
			return (0);
	return (1);
}

static void
test_round_trip(void **state)
{
	struct fixture	*f = *state;
	struct loadbuf	 b;
	uint64_t	 step = 0;

	assert_int_equal(rdzv_ckpt_save(NULL, f->path, f->parts, 3, 4242, -1),
	    0);
	assert_int_equal(count_files(f->dir), 1);	/* no temp left */
	loadbuf_init(&b);
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3, &step, -1),
	    0);
	assert_int_equal(step, 4242);
	assert_memory_equal(b.model, f->model, sizeof f->model);
	assert_memory_equal(b.opt, f->opt, sizeof f->opt);
}

static void
test_replace(void **state)
{
	struct fixture	*f = *state;
	struct loadbuf	 b;
	uint64_t	 step = 0;

	assert_int_equal(rdzv_ckpt_save(NULL, f->path, f->parts, 3, 1, -1), 0);
	f->model[7] = 99.0f;
	assert_int_equal(rdzv_ckpt_save(NULL, f->path, f->parts, 3, 2, -1), 0);
	assert_int_equal(count_files(f->dir), 1);
	loadbuf_init(&b);
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3, &step, -1),
	    0);
	assert_int_equal(step, 2);
	assert_true(b.model[7] == 99.0f);
}

static void
test_missing(void **state)
{
	struct fixture	*f = *state;
	struct loadbuf	 b;
	uint64_t	 step = 77;
	char		 p[256];

	loadbuf_init(&b);
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3, &step, -1),
	    RDZV_ENOTFOUND);
	assert_int_equal(step, 77);
	assert_true(loadbuf_untouched(&b));
	/* Saving into a directory that does not exist fails cleanly. */
	snprintf(p, sizeof p, "%s/nodir/ckpt.bin", f->dir);
	assert_int_equal(rdzv_ckpt_save(NULL, p, f->parts, 3, 1, -1),
	    RDZV_ENOTFOUND);
	assert_int_equal(count_files(f->dir), 0);
}

static off_t
file_size(const char *path)
{
	struct stat	st;

	assert_int_equal(stat(path, &st), 0);
	return (st.st_size);
}

static void
flip_byte(const char *path, off_t off)
{
	uint8_t	c;
	int	fd;

	assert_true((fd = open(path, O_RDWR)) != -1);
	assert_int_equal(pread(fd, &c, 1, off), 1);
	c ^= 0x01;
	assert_int_equal(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

/* Every single-bit flip, at every offset of the file, is caught. */
static void
test_corrupt_anywhere(void **state)
{
	struct fixture	*f = *state;
	struct loadbuf	 b;
	uint64_t	 step;
	off_t		 size, off;

	assert_int_equal(rdzv_ckpt_save(NULL, f->path, f->parts, 3, 5, -1), 0);
	size = file_size(f->path);
	/* Header 24, three lengths, data, checksum. */
	assert_int_equal(size, 24 + 3 * 8 + sizeof f->model + sizeof f->opt +
	    8);
	for (off = 0; off < size; off++) {
		flip_byte(f->path, off);
		loadbuf_init(&b);
		assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3,
		    &step, -1), RDZV_EPROTO);
		assert_true(loadbuf_untouched(&b));
		flip_byte(f->path, off);
	}
	loadbuf_init(&b);
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3, &step, -1),
	    0);
}

static void
test_truncated_and_appended(void **state)
{
	struct fixture	*f = *state;
	struct loadbuf	 b;
	uint64_t	 step;
	off_t		 size;
	int		 fd;

	assert_int_equal(rdzv_ckpt_save(NULL, f->path, f->parts, 3, 5, -1), 0);
	size = file_size(f->path);
	assert_int_equal(truncate(f->path, size - 1), 0);
	loadbuf_init(&b);
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3, &step, -1),
	    RDZV_EPROTO);
	assert_true(loadbuf_untouched(&b));
	assert_int_equal(truncate(f->path, 0), 0);
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3, &step, -1),
	    RDZV_EPROTO);

	assert_int_equal(rdzv_ckpt_save(NULL, f->path, f->parts, 3, 5, -1), 0);
	assert_true((fd = open(f->path, O_WRONLY | O_APPEND)) != -1);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3, &step, -1),
	    RDZV_EPROTO);
	assert_true(loadbuf_untouched(&b));
}

static void
test_mismatched_parts(void **state)
{
	struct fixture	*f = *state;
	struct loadbuf	 b;
	uint64_t	 step;

	assert_int_equal(rdzv_ckpt_save(NULL, f->path, f->parts, 3, 5, -1), 0);
	loadbuf_init(&b);
	/* Fewer parts. */
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 2, &step, -1),
	    RDZV_EPROTO);
	/* Same total size, split differently. */
	b.parts[0].len -= 4;
	b.parts[1].data = b.opt;
	b.parts[1].len = 4;
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3, &step, -1),
	    RDZV_EPROTO);
	/* A bigger model. */
	loadbuf_init(&b);
	b.parts[2].len = 12;
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, b.parts, 3, &step, -1),
	    RDZV_EPROTO);
	loadbuf_init(&b);
	assert_true(loadbuf_untouched(&b));
	/* Not a checkpoint at all. */
	assert_int_equal(rdzv_ckpt_load(NULL, "/etc/passwd", b.parts, 3, &step,
	    -1), RDZV_EPROTO);
	assert_true(loadbuf_untouched(&b));
}

static void
test_bad_arguments(void **state)
{
	struct fixture		*f = *state;
	struct rdzv_ckpt_part	 p = { NULL, 4 };
	uint64_t		 step;

	assert_int_equal(rdzv_ckpt_save(NULL, f->path, &p, 1, 0, -1),
	    RDZV_EINVAL);
	assert_int_equal(rdzv_ckpt_save(NULL, NULL, f->parts, 3, 0, -1),
	    RDZV_EINVAL);
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, &p, 1, &step, -1),
	    RDZV_EINVAL);
	assert_int_equal(count_files(f->dir), 0);
	/* No parts at all is a valid (if odd) checkpoint of just a step. */
	assert_int_equal(rdzv_ckpt_save(NULL, f->path, NULL, 0, 9, -1), 0);
	assert_int_equal(rdzv_ckpt_load(NULL, f->path, NULL, 0, &step, -1), 0);
	assert_int_equal(step, 9);
}

/* Through a communicator: a world of one needs no environment. */
static void
test_world_of_one(void **state)
{
	static const char	*launch_vars[] = { "RANK", "WORLD_SIZE",
	    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
	    "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", NULL };
	struct fixture		*f = *state;
	struct rdzv_comm	*comm = NULL;
	struct loadbuf		 b;
	uint64_t		 step = 0;
	char			 err[256];
	const char		**v;

	/* Whatever launched the test suite must not make this a job. */
	for (v = launch_vars; *v != NULL; v++)
		unsetenv(*v);
	assert_int_equal(rdzv_init(&comm, NULL, err, sizeof err), 0);
	assert_int_equal(rdzv_size(comm), 1);
	loadbuf_init(&b);
	assert_int_equal(rdzv_ckpt_load(comm, f->path, b.parts, 3, &step, -1),
	    RDZV_ENOTFOUND);
	assert_true(loadbuf_untouched(&b));
	assert_int_equal(rdzv_ckpt_save(comm, f->path, f->parts, 3, 31, -1),
	    0);
	assert_int_equal(rdzv_ckpt_load(comm, f->path, b.parts, 3, &step, -1),
	    0);
	assert_int_equal(step, 31);
	assert_memory_equal(b.model, f->model, sizeof f->model);
	assert_int_equal(rdzv_finalize(comm), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn)	cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_round_trip),
		T(test_replace),
		T(test_missing),
		T(test_corrupt_anywhere),
		T(test_truncated_and_appended),
		T(test_mismatched_parts),
		T(test_bad_arguments),
		T(test_world_of_one),
#undef T
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
