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

float
half_to_float(uint16_t h)
{
	uint32_t	sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t	exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
	int		e;
	float		f;

	if (exp == 0) {
		if (mant == 0)
			bits = sign;
		else {
			/* Subnormal: shift the leading one into place. */
			e = -1;
			do {
				mant <<= 1;
				e++;
			} while ((mant & 0x400) == 0);
			bits = sign | ((uint32_t)(112 - e) << 23) |
			    ((mant & 0x3ff) << 13);
		}
	} else if (exp == 31)
		bits = sign | 0x7f800000 | (mant << 13);
	else
		bits = sign | ((exp + 112) << 23) | (mant << 13);
	memcpy(&f, &bits, sizeof f);
	return (f);
}

uint16_t
float_to_half(float f)
{
	uint32_t	x, ax, sign, odd;

	memcpy(&x, &f, sizeof x);
	sign = (x >> 16) & 0x8000;
	ax = x & 0x7fffffff;
	if (ax >= 0x7f800000)		/* inf, or NaN kept quiet */
		return ((uint16_t)(sign | 0x7c00 | (ax > 0x7f800000 ?
		    0x200 : 0)));
	if (ax >= 0x477ff000)		/* >= 65520 rounds to inf */
		return ((uint16_t)(sign | 0x7c00));
	if (ax < 0x38800000) {
		/* Below the smallest normal half: the result is the
		 * mantissa round(|f| * 2^24), exact in float, rounded to
		 * nearest even by nearbyintf in the default mode. */
		return ((uint16_t)(sign | (uint32_t)nearbyintf(fabsf(f) *
		    0x1p24f)));
	}
	odd = (ax >> 13) & 1;
	return ((uint16_t)(sign | ((ax - 0x38000000 + 0xfff + odd) >> 13)));
}

float
bf16_to_float(uint16_t h)
{
	uint32_t	bits = (uint32_t)h << 16;
	float		f;

	memcpy(&f, &bits, sizeof f);
	return (f);
}

uint16_t
float_to_bf16(float f)
{
	uint32_t	x;

	memcpy(&x, &f, sizeof x);
	if ((x & 0x7fffffff) > 0x7f800000)
		return ((uint16_t)((x >> 16) | 0x40));	/* quiet NaN */
	return ((uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16));
}

/*
 * One function per (type, op): d = a OP b over n elements, blocks first.
 * T is the element type, U the type the operation is computed in.
 */
#define OP_SUM(x, y)	((x) + (y))
#define OP_PROD(x, y)	((x) * (y))
#define OP_MIN(x, y)	((y) < (x) ? (y) : (x))
#define OP_MAX(x, y)	((y) > (x) ? (y) : (x))

#define DEF_REDUCE(name, T, U, OP)					\
static void REDUCE_CLONES						\
name##_2(T *restrict d, const T *restrict b, size_t n)			\
{									\
	size_t	i, j;							\
									\
	for (i = 0; n - i >= REDUCE_BLOCK; i += REDUCE_BLOCK)		\
		for (j = 0; j < REDUCE_BLOCK; j++)			\
			d[i + j] = (T)OP((U)d[i + j], (U)b[i + j]);	\
	for (; i < n; i++)						\
		d[i] = (T)OP((U)d[i], (U)b[i]);				\
}									\
static void REDUCE_CLONES						\
name##_3(T *restrict d, const T *restrict a, const T *restrict b,	\
    size_t n)								\
{									\
	size_t	i, j;							\
									\
	for (i = 0; n - i >= REDUCE_BLOCK; i += REDUCE_BLOCK)		\
		for (j = 0; j < REDUCE_BLOCK; j++)			\
			d[i + j] = (T)OP((U)a[i + j], (U)b[i + j]);	\
	for (; i < n; i++)						\
		d[i] = (T)OP((U)a[i], (U)b[i]);				\
}									\
static void								\
name(void *d, const void *a, const void *b, size_t n)			\
{									\
	if (d == a)							\
		name##_2(d, b, n);					\
	else								\
		name##_3(d, a, b, n);					\
}

#define DEF_REDUCE_CONV(name, TO, FROM, OP)				\
static void								\
name(void *dv, const void *av, const void *bv, size_t n)		\
{									\
	uint16_t	*d = dv;					\
	const uint16_t	*a = av, *b = bv;				\
	size_t		 i;						\
									\
	for (i = 0; i < n; i++)						\
		d[i] = TO(OP(FROM(a[i]), FROM(b[i])));			\
}

#define DEF_ALL(t, T, U)						\
	DEF_REDUCE(t##_sum, T, U, OP_SUM)				\
	DEF_REDUCE(t##_prod, T, U, OP_PROD)				\
	DEF_REDUCE(t##_min, T, T, OP_MIN)				\
	DEF_REDUCE(t##_max, T, T, OP_MAX)

DEF_ALL(f32, float, float)
DEF_ALL(f64, double, double)
DEF_ALL(i32, int32_t, uint32_t)
DEF_ALL(i64, int64_t, uint64_t)
DEF_ALL(u8, uint8_t, uint32_t)

#define DEF_ALL_CONV(t, TO, FROM)					\
	DEF_REDUCE_CONV(t##_sum, TO, FROM, OP_SUM)			\
	DEF_REDUCE_CONV(t##_prod, TO, FROM, OP_PROD)			\
	DEF_REDUCE_CONV(t##_min, TO, FROM, OP_MIN)			\
	DEF_REDUCE_CONV(t##_max, TO, FROM, OP_MAX)

DEF_ALL_CONV(f16, float_to_half, half_to_float)
DEF_ALL_CONV(bf16, float_to_bf16, bf16_to_float)

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
			h[i] = float_to_half(half_to_float(h[i]) / (float)size);
		break;
	case RDZV_BF16:
		for (i = 0; i < n; i++)
			h[i] = float_to_bf16(bf16_to_float(h[i]) / (float)size);
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
