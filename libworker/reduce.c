/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reduce.c: element-wise reductions for every dtype and op, and the half
 * precision conversions they need.  Pure.
 *
 * The loops run over fixed blocks of REDUCE_BLOCK elements so the
 * compiler vectorises them at -O2 (its cheap cost model refuses loops that
 * would need a scalar epilogue); the tail is done one by one.  f16 and
 * bf16 are reduced through float, one rounding per operation, as NCCL
 * does.  Integer sums and products wrap (computed unsigned: no undefined
 * overflow).  AVG reduces as SUM; reduce_avg_finish() divides once at the
 * end so every rank divides the same sum and gets the same bits.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "worker.h"

#define REDUCE_BLOCK	16

/*
 * Callers pass a destination that is either the first operand itself or
 * overlaps neither operand, so each reduction has a two-operand form
 * (d op= b) and a three-operand one, both restrict-qualified: the
 * compiler vectorises them without alias checks.  With GCC on x86-64 an
 * AVX2 clone is chosen at load time where the CPU has it.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define REDUCE_CLONES	__attribute__((target_clones("avx2", "default")))
#else
#define REDUCE_CLONES
#endif

static inline uint32_t
f_bits(float f)
{
	uint32_t	u;

	memcpy(&u, &f, sizeof u);
	return (u);
}

static inline float
bits_f(uint32_t u)
{
	float	f;

	memcpy(&f, &u, sizeof f);
	return (f);
}

/*
 * The conversions are branch-free (masks, not jumps) so the reduction
 * loops around them vectorise.  pick(c, x, y) is c ? x : y for c 0 or 1.
 */
static inline uint32_t
pick(uint32_t c, uint32_t x, uint32_t y)
{
	uint32_t	m = 0u - c;

	return ((x & m) | (y & ~m));
}

static inline float
h2f(uint16_t h)
{
	uint32_t	sign = (uint32_t)(h & 0x8000) << 16, em = h & 0x7fff;
	uint32_t	r;

	/* Exponent and mantissa moved into float position are off by the
	 * bias difference, 2^112: one multiply fixes normals and
	 * subnormals alike (a subnormal half lands on a subnormal float). */
	r = f_bits(bits_f(em << 13) * 0x1p112f);
	r = pick(em >= 0x7c00, (em << 13) | 0x7f800000, r);	/* inf, NaN */
	return (bits_f(sign | r));
}

static inline uint16_t
f2h(float f)
{
	uint32_t	x = f_bits(f), sign = (x >> 16) & 0x8000;
	uint32_t	ax = x & 0x7fffffff, odd = (ax >> 13) & 1, r, sub;

	/* Normal: rebias and round to nearest even on the dropped bits. */
	r = (ax - 0x38000000 + 0xfff + odd) >> 13;
	/* Below 2^-14: adding 0.5 leaves round(|f| * 2^24) in the low
	 * mantissa bits, rounded to nearest even by the FPU. */
	sub = f_bits(bits_f(ax) + 0.5f) - 0x3f000000;
	r = pick(ax < 0x38800000, sub, r);
	r = pick(ax >= 0x477ff000, 0x7c00, r);	/* >= 65520 and inf */
	r = pick(ax > 0x7f800000, 0x7e00, r);	/* NaN, kept quiet */
	return ((uint16_t)(sign | r));
}

static inline float
b2f(uint16_t h)
{
	return (bits_f((uint32_t)h << 16));
}

static inline uint16_t
f2b(float f)
{
	uint32_t	x = f_bits(f), r;

	r = (x + 0x7fff + ((x >> 16) & 1)) >> 16;
	r = pick((x & 0x7fffffff) > 0x7f800000, (x >> 16) | 0x40, r);
	return ((uint16_t)r);
}

float
half_to_float(uint16_t h)
{
	return (h2f(h));
}

uint16_t
float_to_half(float f)
{
	return (f2h(f));
}

float
bf16_to_float(uint16_t h)
{
	return (b2f(h));
}

uint16_t
float_to_bf16(float f)
{
	return (f2b(f));
}

/*
 * One function per (type, op): d = a OP b over n elements, blocks first.
 * T is the element type; FROM turns an element into the type the
 * operation is computed in (a cast, or h2f/b2f for f16 and bf16) and TO
 * turns the result back.
 */
#define OP_SUM(x, y)	((x) + (y))
#define OP_PROD(x, y)	((x) * (y))
#define OP_MIN(x, y)	((y) < (x) ? (y) : (x))
#define OP_MAX(x, y)	((y) > (x) ? (y) : (x))

#define DEF_REDUCE(name, T, TO, FROM, OP)				\
static void REDUCE_CLONES						\
name##_2(T *restrict d, const T *restrict b, size_t n)			\
{									\
	size_t	i, j;							\
									\
	for (i = 0; n - i >= REDUCE_BLOCK; i += REDUCE_BLOCK)		\
		for (j = 0; j < REDUCE_BLOCK; j++)			\
			d[i + j] = TO(OP(FROM(d[i + j]),		\
			    FROM(b[i + j])));				\
	for (; i < n; i++)						\
		d[i] = TO(OP(FROM(d[i]), FROM(b[i])));			\
}									\
static void REDUCE_CLONES						\
name##_3(T *restrict d, const T *restrict a, const T *restrict b,	\
    size_t n)								\
{									\
	size_t	i, j;							\
									\
	for (i = 0; n - i >= REDUCE_BLOCK; i += REDUCE_BLOCK)		\
		for (j = 0; j < REDUCE_BLOCK; j++)			\
			d[i + j] = TO(OP(FROM(a[i + j]),		\
			    FROM(b[i + j])));				\
	for (; i < n; i++)						\
		d[i] = TO(OP(FROM(a[i]), FROM(b[i])));			\
}									\
static void								\
name(void *d, const void *a, const void *b, size_t n)			\
{									\
	if (d == a)							\
		name##_2(d, b, n);					\
	else								\
		name##_3(d, a, b, n);					\
}

/* CMP: what min and max compare in (FROM, or the element type itself). */
#define DEF_ALL(t, T, TO, FROM, CMP)					\
	DEF_REDUCE(t##_sum, T, TO, FROM, OP_SUM)			\
	DEF_REDUCE(t##_prod, T, TO, FROM, OP_PROD)			\
	DEF_REDUCE(t##_min, T, TO, CMP, OP_MIN)				\
	DEF_REDUCE(t##_max, T, TO, CMP, OP_MAX)

DEF_ALL(f32, float, (float), (float), (float))
DEF_ALL(f64, double, (double), (double), (double))
DEF_ALL(i32, int32_t, (int32_t), (uint32_t), (int32_t))
DEF_ALL(i64, int64_t, (int64_t), (uint64_t), (int64_t))
DEF_ALL(u8, uint8_t, (uint8_t), (uint32_t), (uint8_t))
DEF_ALL(f16, uint16_t, f2h, h2f, h2f)
DEF_ALL(bf16, uint16_t, f2b, b2f, b2f)

/* Indexed by dtype, then op (SUM, PROD, MIN, MAX; AVG uses SUM). */
static const reduce3_fn	table[RDZV_DTYPE_COUNT][4] = {
	[RDZV_F32] = { f32_sum, f32_prod, f32_min, f32_max },
	[RDZV_F64] = { f64_sum, f64_prod, f64_min, f64_max },
	[RDZV_F16] = { f16_sum, f16_prod, f16_min, f16_max },
	[RDZV_BF16] = { bf16_sum, bf16_prod, bf16_min, bf16_max },
	[RDZV_I32] = { i32_sum, i32_prod, i32_min, i32_max },
	[RDZV_I64] = { i64_sum, i64_prod, i64_min, i64_max },
	[RDZV_U8] = { u8_sum, u8_prod, u8_min, u8_max },
};

reduce3_fn
reduce3_get(enum rdzv_dtype dt, enum rdzv_op op)
{
	if ((unsigned)dt >= RDZV_DTYPE_COUNT || (unsigned)op >= RDZV_OP_COUNT)
		return (NULL);
	return (table[dt][op == RDZV_AVG ? RDZV_SUM : op]);
}

void
reduce_avg_finish(void *buf, size_t n, enum rdzv_dtype dt, int size)
{
	size_t		 i;
	uint16_t	*h = buf;

	if (size <= 1)
		return;
	switch (dt) {
	case RDZV_F32:
		for (i = 0; i < n; i++)
			((float *)buf)[i] /= (float)size;
		break;
	case RDZV_F64:
		for (i = 0; i < n; i++)
			((double *)buf)[i] /= (double)size;
		break;
	case RDZV_F16:
		for (i = 0; i < n; i++)
			h[i] = f2h(h2f(h[i]) / (float)size);
		break;
	case RDZV_BF16:
		for (i = 0; i < n; i++)
			h[i] = f2b(b2f(h[i]) / (float)size);
		break;
	case RDZV_I32:
		for (i = 0; i < n; i++)
			((int32_t *)buf)[i] /= size;
		break;
	case RDZV_I64:
		for (i = 0; i < n; i++)
			((int64_t *)buf)[i] /= size;
		break;
	case RDZV_U8:
		for (i = 0; i < n; i++)
			((uint8_t *)buf)[i] = (uint8_t)(((uint8_t *)buf)[i] /
			    size);
		break;
	}
}
