/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idx.h: reading the IDX files of (Fashion-)MNIST, gzip-compressed as
 * Debian's dataset-fashion-mnist ships them.
 */
#ifndef RDZV_EX_IDX_H
#define RDZV_EX_IDX_H

#include <stddef.h>
#include <stdint.h>

/* One split of the dataset: n images of rows x cols bytes, and n labels. */
struct idx_set {
	size_t		 n;
	size_t		 rows;
	size_t		 cols;
	uint8_t		*images;	/* n * rows * cols, row-major */
	uint8_t		*labels;	/* n, each < 10 */
};

#define IDX_IMAGES_MAX	(1u << 24)	/* refuse absurd counts in a header */
#define IDX_DIM_MAX	4096

/*
 * Loads DIR/PREFIX-images-idx3-ubyte(.gz) and DIR/PREFIX-labels-idx1-ubyte
 * (.gz) (PREFIX is "train" or "t10k") into set.  Checks the magic numbers,
 * that the counts agree and that every label is below 10.  Returns 0, or
 * -1 with a message in err (size errsz); set is then empty.
 */
int	idx_load(struct idx_set *set, const char *dir, const char *prefix,
	    char *err, size_t errsz);
/* Frees what idx_load() allocated; set is left empty. */
void	idx_free(struct idx_set *set);

#endif /* RDZV_EX_IDX_H */
