/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idx.c: the IDX file format (a big-endian header of magic and
 * dimensions, then unsigned bytes) read through zlib, which also reads
 * files that are not compressed.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "idx.h"

static void
idx_err(char *err, size_t errsz, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

/* Reads exactly n bytes; gzread takes an unsigned int, so go in slices. */
static int
idx_read(gzFile f, void *buf, size_t n)
{
	uint8_t	*p = buf;
	int	 r;

	while (n > 0) {
		unsigned int	want = n > (1u << 30) ? (1u << 30) : (unsigned)n;

		r = gzread(f, p, want);
		if (r <= 0)
			return (-1);
		p += r;
		n -= (size_t)r;
	}
	return (0);
}

static uint32_t
idx_be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3]);
}

/* Opens DIR/NAME.gz, or DIR/NAME when no compressed file is there. */
static gzFile
idx_open(const char *dir, const char *name, char *path, size_t pathsz)
{
	snprintf(path, pathsz, "%s/%s.gz", dir, name);
	if (access(path, R_OK) != 0)
		snprintf(path, pathsz, "%s/%s", dir, name);
	return (gzopen(path, "rb"));
}

/*
 * Reads one IDX file of unsigned bytes with ndim dimensions; dims gets
 * them and *out the data (malloc'ed).
 */
static int
idx_read_file(const char *dir, const char *name, unsigned ndim,
    uint32_t *dims, uint8_t **out, char *err, size_t errsz)
{
	char	 path[4096];
	uint8_t	 hdr[4 + 4 * 3];
	gzFile	 f;
	size_t	 total = 1;
	unsigned i;

	*out = NULL;
	if ((f = idx_open(dir, name, path, sizeof path)) == NULL) {
		idx_err(err, errsz, "%s: %s", path, strerror(errno));
		return (-1);
	}
	if (idx_read(f, hdr, 4 + 4 * ndim) != 0) {
		idx_err(err, errsz, "%s: short header", path);
		goto fail;
	}
	/* Magic: two zero bytes, type 0x08 (unsigned byte), dimension count. */
	if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != 0x08 || hdr[3] != ndim) {
		idx_err(err, errsz, "%s: not an IDX file of %u-d bytes", path,
		    ndim);
		goto fail;
	}
	for (i = 0; i < ndim; i++) {
		dims[i] = idx_be32(hdr + 4 + 4 * i);
		if (dims[i] == 0 || dims[i] > (i == 0 ? IDX_IMAGES_MAX :
		    IDX_DIM_MAX)) {
			idx_err(err, errsz, "%s: dimension %u is %u", path, i,
			    dims[i]);
			goto fail;
		}
		total *= dims[i];	/* bounded: 2^24 * 4096 * 4096 < 2^64 */
	}
	if ((*out = malloc(total)) == NULL) {
		idx_err(err, errsz, "%s: out of memory", path);
		goto fail;
	}
	if (idx_read(f, *out, total) != 0) {
		idx_err(err, errsz, "%s: truncated", path);
		goto fail;
	}
	gzclose(f);
	return (0);
fail:
	free(*out);
	*out = NULL;
	gzclose(f);
	return (-1);
}

int
idx_load(struct idx_set *set, const char *dir, const char *prefix,
    char *err, size_t errsz)
{
	char		name[256];
	uint32_t	idims[3], ldims[1];
	size_t		i;

	memset(set, 0, sizeof *set);
	snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
	if (idx_read_file(dir, name, 3, idims, &set->images, err, errsz) != 0)
		return (-1);
	snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
	if (idx_read_file(dir, name, 1, ldims, &set->labels, err, errsz) != 0)
		goto fail;
	if (idims[0] != ldims[0]) {
		idx_err(err, errsz, "%s: %u images but %u labels", prefix,
		    idims[0], ldims[0]);
		goto fail;
	}
	for (i = 0; i < ldims[0]; i++) {
		if (set->labels[i] >= 10) {
			idx_err(err, errsz, "%s: label %zu is %u", prefix, i,
			    set->labels[i]);
			goto fail;
		}
	}
	set->n = idims[0];
	set->rows = idims[1];
	set->cols = idims[2];
	return (0);
fail:
	idx_free(set);
	return (-1);
}

void
idx_free(struct idx_set *set)
{
	free(set->images);
	free(set->labels);
	memset(set, 0, sizeof *set);
}
