/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ckpt.c: checkpoints (rdzv_ckpt_*): the training state written by rank 0
 * so that it survives a crash at any instant, and read back by every rank
 * of a restarted job.
 *
 * File format, all integers little-endian:
 *
 *	"RDZVCKPT"		8 bytes of magic
 *	version			u32, CKPT_VERSION
 *	nparts			u32
 *	step			u64, the caller's progress counter
 *	len[nparts]		u64 each
 *	part data		len[0] + ... bytes, back to back
 *	checksum		u64 over every byte before it
 *
 * A checkpoint is written to a temporary file in the target's directory,
 * fsync'ed, renamed over the target and the directory fsync'ed: a reader
 * sees the old file or the new one, never half of one.  The checksum
 * catches what rename cannot: a disk or copy that corrupted it later.
 * zlib's crc32 would do as well, but a word-wise hash here keeps the
 * library free of another link dependency.
 */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdzv_worker.h"

#define CKPT_MAGIC	"RDZVCKPT"
#define CKPT_VERSION	1
#define CKPT_HDR	24		/* magic, version, nparts, step */
#define CKPT_PARTS_MAX	65536
#define CKPT_IOBUF	(1u << 20)

/* The running checksum: FNV-1a over 64-bit words, tail bytes carried. */
struct ckpt_sum {
	uint64_t	h;
	uint8_t		carry[8];
	size_t		ncarry;
};

static void
ckpt_sum_init(struct ckpt_sum *s)
{
	s->h = 0xcbf29ce484222325ULL;
	s->ncarry = 0;
}

static void
ckpt_sum_word(struct ckpt_sum *s, const uint8_t *p)
{
	uint64_t	w = 0;
	int		i;

	for (i = 7; i >= 0; i--)
		w = w << 8 | p[i];
	s->h = (s->h ^ w) * 0x100000001b3ULL;
	/* FNV alone mixes high bits poorly; fold them back in. */
	s->h ^= s->h >> 29;
}

static void
ckpt_sum_add(struct ckpt_sum *s, const void *buf, size_t len)
{
	const uint8_t	*p = buf;

	while (s->ncarry > 0 && len > 0) {
		s->carry[s->ncarry++] = *p++;
		len--;
		if (s->ncarry == 8) {
			ckpt_sum_word(s, s->carry);
			s->ncarry = 0;
		}
	}
	for (; len >= 8; p += 8, len -= 8)
		ckpt_sum_word(s, p);
	while (len-- > 0)
		s->carry[s->ncarry++] = *p++;
}

static uint64_t
ckpt_sum_end(struct ckpt_sum *s)
{
	uint8_t	last[8];

	/* The tail, zero-filled, and then its length so "a" != "a\0". */
	memset(last, 0, sizeof last);
	memcpy(last, s->carry, s->ncarry);
	ckpt_sum_word(s, last);
	memset(last, 0, sizeof last);
	last[0] = (uint8_t)s->ncarry;
	ckpt_sum_word(s, last);
	return (s->h);
}

static void
ckpt_put64(uint8_t *p, uint64_t v)
{
	int	i;

	for (i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
ckpt_get64(const uint8_t *p)
{
	uint64_t	v = 0;
	int		i;

	for (i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return (v);
}

static void
ckpt_put32(uint8_t *p, uint32_t v)
{
	int	i;

	for (i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t
ckpt_get32(const uint8_t *p)
{
	return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24);
}

/* Writes all of buf, through short writes and EINTR. */
static int
ckpt_write(int fd, const void *buf, size_t len, struct ckpt_sum *sum)
{
	const uint8_t	*p = buf;
	ssize_t		 w;

	if (sum != NULL)
		ckpt_sum_add(sum, buf, len);
	while (len > 0) {
		w = write(fd, p, len > CKPT_IOBUF ? CKPT_IOBUF : len);
		if (w == -1 && errno == EINTR)
			continue;
		if (w <= 0)
			return (RDZV_EIO);
		p += w;
		len -= (size_t)w;
	}
	return (0);
}

/* Reads exactly len bytes; a short file is corrupt, not an I/O error. */
static int
ckpt_read(int fd, void *buf, size_t len)
{
	uint8_t	*p = buf;
	ssize_t	 r;

	while (len > 0) {
		r = read(fd, p, len > CKPT_IOBUF ? CKPT_IOBUF : len);
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1)
			return (RDZV_EIO);
		if (r == 0)
			return (RDZV_EPROTO);
		p += r;
		len -= (size_t)r;
	}
	return (0);
}

/* fsync of the directory holding path, so the rename itself is durable. */
static int
ckpt_sync_dir(const char *path)
{
	char	*copy, *dir;
	int	 fd, rc = 0;

	if ((copy = strdup(path)) == NULL)
		return (RDZV_ENOMEM);
	dir = dirname(copy);
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		rc = RDZV_EIO;
	else {
		if (fsync(fd) == -1)
			rc = RDZV_EIO;
		close(fd);
	}
	free(copy);
	return (rc);
}

/* Writes the checkpoint file (no communication). */
static int
ckpt_write_file(const char *path, const struct rdzv_ckpt_part *parts,
    size_t n, uint64_t step)
{
	struct ckpt_sum	 sum;
	uint8_t		 hdr[CKPT_HDR], b8[8];
	char		*tmp = NULL;
	size_t		 i;
	int		 fd = -1, rc;

	if (path == NULL || (n > 0 && parts == NULL) || n > CKPT_PARTS_MAX)
		return (RDZV_EINVAL);
	for (i = 0; i < n; i++)
		if (parts[i].len > 0 && parts[i].data == NULL)
			return (RDZV_EINVAL);
	/*
	 * One writer per job (rank 0), so the pid makes the name unique; a
	 * file left by a crashed process that had the same pid is stale.
	 * open() rather than mkstemp() so the umask decides the mode.
	 */
	if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) == -1)
		return (RDZV_ENOMEM);
	(void)unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd == -1) {
		rc = errno == ENOENT ? RDZV_ENOTFOUND : RDZV_EIO;
		free(tmp);
		return (rc);
	}

	ckpt_sum_init(&sum);
	memcpy(hdr, CKPT_MAGIC, 8);
	ckpt_put32(hdr + 8, CKPT_VERSION);
	ckpt_put32(hdr + 12, (uint32_t)n);
	ckpt_put64(hdr + 16, step);
	if ((rc = ckpt_write(fd, hdr, sizeof hdr, &sum)) != 0)
		goto fail;
	for (i = 0; i < n; i++) {
		ckpt_put64(b8, parts[i].len);
		if ((rc = ckpt_write(fd, b8, 8, &sum)) != 0)
			goto fail;
	}
	for (i = 0; i < n; i++)
		if ((rc = ckpt_write(fd, parts[i].data, parts[i].len,
		    &sum)) != 0)
			goto fail;
	ckpt_put64(b8, ckpt_sum_end(&sum));
	if ((rc = ckpt_write(fd, b8, 8, NULL)) != 0)
		goto fail;
	if (fsync(fd) == -1 || close(fd) == -1) {
		fd = -1;
		rc = RDZV_EIO;
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) == -1) {
		rc = RDZV_EIO;
		goto fail;
	}
	free(tmp);
	return (ckpt_sync_dir(path));
fail:
	if (fd != -1)
		close(fd);
	unlink(tmp);
	free(tmp);
	return (rc);
}

/*
 * The few host-memory collectives load and save need (the nccl backend
 * stages host buffers through the device, so these work with either).
 */
static int
ckpt_coll_i32(struct rdzv_comm *comm, int32_t *v, size_t n, enum rdzv_op op,
    int timeout_ms)
{
	return (rdzv_allreduce(comm, v, v, n, RDZV_I32, op, timeout_ms));
}

static int
ckpt_bcast_i64(struct rdzv_comm *comm, int64_t *v, size_t n, int timeout_ms)
{
	return (rdzv_broadcast(comm, v, n, RDZV_I64, 0, timeout_ms));
}

static int
ckpt_bcast_bytes(struct rdzv_comm *comm, void *p, size_t len, int timeout_ms)
{
	return (rdzv_broadcast(comm, p, len, RDZV_U8, 0, timeout_ms));
}

/*
 * Reads the checkpoint at path into parts (no communication).  The file
 * is checked whole (size, header, lengths, checksum) before any part is
 * touched, so on failure the caller's buffers keep what they held.  The
 * same descriptor serves both passes: a rename meanwhile cannot mix two
 * files.  *sump gets the checksum, to compare files between ranks.
 */
static int
ckpt_read_file(const char *path, const struct rdzv_ckpt_part *parts,
    size_t n, uint64_t *stepp, uint64_t *sump)
{
	struct ckpt_sum	 sum;
	struct stat	 st;
	uint8_t		 hdr[CKPT_HDR], b8[8], *buf = NULL;
	uint64_t	 want, left, len, step;
	size_t		 i, chunk;
	int		 fd, rc;

	if (path == NULL || (n > 0 && parts == NULL) || n > CKPT_PARTS_MAX)
		return (RDZV_EINVAL);
	for (i = 0; i < n; i++)
		if (parts[i].len > 0 && parts[i].data == NULL)
			return (RDZV_EINVAL);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return (errno == ENOENT ? RDZV_ENOTFOUND : RDZV_EIO);
	if (fstat(fd, &st) == -1) {
		rc = RDZV_EIO;
		goto out;
	}
	/* The size the caller's parts imply, checked before reading on. */
	want = CKPT_HDR + 8 * (uint64_t)n + 8;
	for (i = 0; i < n; i++) {
		if (UINT64_MAX - want < parts[i].len) {
			rc = RDZV_EINVAL;
			goto out;
		}
		want += parts[i].len;
	}
	if (st.st_size < 0 || (uint64_t)st.st_size != want) {
		rc = RDZV_EPROTO;
		goto out;
	}
	if ((rc = ckpt_read(fd, hdr, sizeof hdr)) != 0)
		goto out;
	if (memcmp(hdr, CKPT_MAGIC, 8) != 0 ||
	    ckpt_get32(hdr + 8) != CKPT_VERSION ||
	    ckpt_get32(hdr + 12) != n) {
		rc = RDZV_EPROTO;
		goto out;
	}
	step = ckpt_get64(hdr + 16);
	ckpt_sum_init(&sum);
	ckpt_sum_add(&sum, hdr, sizeof hdr);
	for (i = 0; i < n; i++) {
		if ((rc = ckpt_read(fd, b8, 8)) != 0)
			goto out;
		if (ckpt_get64(b8) != parts[i].len) {
			rc = RDZV_EPROTO;
			goto out;
		}
		ckpt_sum_add(&sum, b8, 8);
	}

	/* First pass: the checksum over the data. */
	if ((buf = malloc(CKPT_IOBUF)) == NULL) {
		rc = RDZV_ENOMEM;
		goto out;
	}
	left = want - CKPT_HDR - 8 * (uint64_t)n - 8;
	while (left > 0) {
		chunk = left > CKPT_IOBUF ? CKPT_IOBUF : (size_t)left;
		if ((rc = ckpt_read(fd, buf, chunk)) != 0)
			goto out;
		ckpt_sum_add(&sum, buf, chunk);
		left -= chunk;
	}
	if ((rc = ckpt_read(fd, b8, 8)) != 0)
		goto out;
	*sump = ckpt_sum_end(&sum);
	if (ckpt_get64(b8) != *sump) {
		rc = RDZV_EPROTO;
		goto out;
	}

	/* Second pass: into the caller's parts. */
	if (lseek(fd, (off_t)(CKPT_HDR + 8 * n), SEEK_SET) == -1) {
		rc = RDZV_EIO;
		goto out;
	}
	for (i = 0; i < n; i++) {
		len = parts[i].len;
		if ((rc = ckpt_read(fd, parts[i].data, (size_t)len)) != 0)
			goto out;
	}
	*stepp = step;
	rc = 0;
out:
	free(buf);
	close(fd);
	return (rc);
}

/*
 * Rank 0 writes the file; an allreduce (MIN) of its result with the other
 * ranks' zeros is the barrier and tells everyone whether it worked.  With
 * comm NULL only the local write is done.
 */
int
rdzv_ckpt_save(struct rdzv_comm *comm, const char *path,
    const struct rdzv_ckpt_part *parts, size_t n, uint64_t step,
    int timeout_ms)
{
	int32_t	rc = 0;
	int	crc;

	if (comm == NULL || rdzv_rank(comm) == 0)
		rc = ckpt_write_file(path, parts, n, step);
	if (comm == NULL)
		return (rc);
	crc = ckpt_coll_i32(comm, &rc, 1, RDZV_MIN, timeout_ms);
	if (crc != 0)
		return (crc);
	return (rc);
}

/*
 * Rank 0 reads first and broadcasts its result, step and checksum.  If it
 * failed (no checkpoint, or a corrupt one) every rank returns that, with
 * its buffers untouched.  Otherwise the others read their own copy (a
 * shared file system), and if any of them could not or found a different
 * file (node-local disks), rank 0 broadcasts the parts to everyone: all
 * ranks always resume from rank 0's checkpoint.
 */
int
rdzv_ckpt_load(struct rdzv_comm *comm, const char *path,
    const struct rdzv_ckpt_part *parts, size_t n, uint64_t *stepp,
    int timeout_ms)
{
	int64_t		info[3] = { 0, 0, 0 };	/* rc, step, checksum */
	int32_t		same;
	uint64_t	step = 0, sum = 0;
	size_t		i;
	int		rc;

	if (comm == NULL)
		return (ckpt_read_file(path, parts, n, stepp, &sum));
	if (rdzv_rank(comm) == 0) {
		info[0] = ckpt_read_file(path, parts, n, &step, &sum);
		info[1] = (int64_t)step;
		info[2] = (int64_t)sum;
	}
	if ((rc = ckpt_bcast_i64(comm, info, 3, timeout_ms)) != 0)
		return (rc);
	if (info[0] != 0)
		return ((int)info[0]);
	same = 1;
	if (rdzv_rank(comm) != 0) {
		rc = ckpt_read_file(path, parts, n, &step, &sum);
		same = rc == 0 && step == (uint64_t)info[1] &&
		    sum == (uint64_t)info[2];
	}
	if ((rc = ckpt_coll_i32(comm, &same, 1, RDZV_MIN, timeout_ms)) != 0)
		return (rc);
	if (!same) {
		for (i = 0; i < n; i++) {
			if (parts[i].len == 0)
				continue;
			rc = ckpt_bcast_bytes(comm, parts[i].data,
			    parts[i].len, timeout_ms);
			if (rc != 0)
				return (rc);
		}
	}
	*stepp = (uint64_t)info[1];
	return (0);
}
