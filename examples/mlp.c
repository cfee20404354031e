/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mlp.c: the MLP's layout and initialisation, and its CPU implementation:
 * matrix products through OpenBLAS (cblas_sgemm), the element-wise parts
 * (bias, ReLU, softmax) in plain loops.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "mlp.h"

/* splitmix64: a small, well-mixed generator for reproducible weights. */
static uint64_t
mlp_rand64(uint64_t *s)
{
	uint64_t	z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

/* Uniform in [-bound, bound). */
static float
mlp_uniform(uint64_t *s, float bound)
{
	double	u = (double)(mlp_rand64(s) >> 11) * 0x1.0p-53;

	return ((float)((2.0 * u - 1.0) * bound));
}

int
mlp_new(struct mlp *m, const struct mlp_ops *ops, size_t in, size_t hidden,
    size_t out, size_t max_batch)
{
	memset(m, 0, sizeof *m);
	m->ops = ops;
	m->in = in;
	m->hidden = hidden;
	m->out = out;
	m->max_batch = max_batch;
	m->off_w1 = 0;
	m->off_b1 = m->off_w1 + hidden * in;
	m->off_w2 = m->off_b1 + hidden;
	m->off_b2 = m->off_w2 + out * hidden;
	m->nparams = m->off_b2 + out;
	if (ops->init(m) != 0) {
		memset(m, 0, sizeof *m);
		return (-1);
	}
	return (0);
}

void
mlp_free(struct mlp *m)
{
	if (m->ops != NULL)
		m->ops->free(m);
	memset(m, 0, sizeof *m);
}

void
mlp_init_params(const struct mlp *m, uint64_t seed, float *p)
{
	uint64_t	s = seed;
	float		b1 = 1.0f / sqrtf((float)m->in);
	float		b2 = 1.0f / sqrtf((float)m->hidden);
	size_t		i;

	for (i = 0; i < m->hidden * m->in; i++)
		p[m->off_w1 + i] = mlp_uniform(&s, b1);
	for (i = 0; i < m->hidden; i++)
		p[m->off_b1 + i] = mlp_uniform(&s, b1);
	for (i = 0; i < m->out * m->hidden; i++)
		p[m->off_w2 + i] = mlp_uniform(&s, b2);
	for (i = 0; i < m->out; i++)
		p[m->off_b2 + i] = mlp_uniform(&s, b2);
}

/* CPU workspace, sized for max_batch. */
struct mlp_cpu {
	float	*x;	/* b x in, the batch as floats in [0, 1] */
	float	*z1;	/* b x H, pre-activation; then ReLU'd in place */
	float	*z2;	/* b x out, logits; then dLoss/dlogits */
	float	*d1;	/* b x H, dLoss/dhidden */
};

static int
mlp_cpu_init(struct mlp *m)
{
	struct mlp_cpu	*c;
	size_t		 b = m->max_batch;

	if ((c = calloc(1, sizeof *c)) == NULL)
		return (-1);
	m->impl = c;
	m->params = calloc(m->nparams, sizeof (float));
	m->grads = calloc(m->nparams, sizeof (float));
	c->x = calloc(b * m->in, sizeof (float));
	c->z1 = calloc(b * m->hidden, sizeof (float));
	c->z2 = calloc(b * m->out, sizeof (float));
	c->d1 = calloc(b * m->hidden, sizeof (float));
	if (m->params == NULL || m->grads == NULL || c->x == NULL ||
	    c->z1 == NULL || c->z2 == NULL || c->d1 == NULL) {
		m->ops->free(m);
		return (-1);
	}
	return (0);
}

static void
mlp_cpu_free(struct mlp *m)
{
	struct mlp_cpu	*c = m->impl;

	if (c != NULL) {
		free(c->x);
		free(c->z1);
		free(c->z2);
		free(c->d1);
		free(c);
	}
	free(m->params);
	free(m->grads);
	m->impl = NULL;
	m->params = m->grads = NULL;
}

static int
mlp_cpu_set_params(struct mlp *m, const float *host)
{
	memcpy(m->params, host, m->nparams * sizeof (float));
	return (0);
}

static int
mlp_cpu_get_params(struct mlp *m, float *host)
{
	memcpy(host, m->params, m->nparams * sizeof (float));
	return (0);
}

/* Forward pass into c->z1 (ReLU'd) and c->z2 (logits). */
static void
mlp_cpu_forward(struct mlp *m, const uint8_t *x, size_t b)
{
	struct mlp_cpu	*c = m->impl;
	const float	*p = m->params;
	size_t		 nh = m->hidden, no = m->out, ni = m->in, i;

	for (i = 0; i < b * ni; i++)
		c->x[i] = (float)x[i] * (1.0f / 255.0f);
	/* z1 = x W1^T + b1, bias first so the product accumulates onto it. */
	for (i = 0; i < b; i++)
		memcpy(c->z1 + i * nh, p + m->off_b1, nh * sizeof (float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)nh,
	    (int)ni, 1.0f, c->x, (int)ni, p + m->off_w1, (int)ni, 1.0f, c->z1,
	    (int)nh);
	for (i = 0; i < b * nh; i++)
		if (!(c->z1[i] > 0.0f))
			c->z1[i] = 0.0f;
	for (i = 0; i < b; i++)
		memcpy(c->z2 + i * no, p + m->off_b2, no * sizeof (float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)no,
	    (int)nh, 1.0f, c->z1, (int)nh, p + m->off_w2, (int)nh, 1.0f, c->z2,
	    (int)no);
}

static size_t
mlp_argmax(const float *v, size_t n)
{
	size_t	i, best = 0;

	for (i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return (best);
}

static int
mlp_cpu_step(struct mlp *m, const uint8_t *x, const uint8_t *y, size_t b,
    float scale, double *loss, size_t *correct, mlp_ready_cb ready, void *arg)
{
	struct mlp_cpu	*c = m->impl;
	const float	*p = m->params;
	float		*g = m->grads;
	size_t		 nh = m->hidden, no = m->out, ni = m->in, i, j;
	double		 lsum = 0.0;
	size_t		 ok = 0;
	int		 rc;

	if (b == 0 || b > m->max_batch)
		return (-1);
	mlp_cpu_forward(m, x, b);

	/*
	 * Softmax cross-entropy, shifted by the row maximum so exp() cannot
	 * overflow; z2 becomes scale * (softmax - onehot).
	 */
	for (i = 0; i < b; i++) {
		float	*z = c->z2 + i * no;
		float	 mx = z[mlp_argmax(z, no)], s = 0.0f;

		if (mlp_argmax(z, no) == y[i])
			ok++;
		for (j = 0; j < no; j++) {
			z[j] = expf(z[j] - mx);
			s += z[j];
		}
		lsum -= log((double)z[y[i]] / s);
		for (j = 0; j < no; j++)
			z[j] = z[j] / s * scale;
		z[y[i]] -= scale;
	}

	/* Second layer: dW2 = dz2^T a1, db2 = column sums of dz2. */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)no, (int)nh,
	    (int)b, 1.0f, c->z2, (int)no, c->z1, (int)nh, 0.0f, g + m->off_w2,
	    (int)nh);
	memset(g + m->off_b2, 0, no * sizeof (float));
	for (i = 0; i < b; i++)
		for (j = 0; j < no; j++)
			g[m->off_b2 + j] += c->z2[i * no + j];
	if (ready != NULL &&
	    (rc = ready(m->off_w2, m->nparams - m->off_w2, arg)) != 0)
		return (rc);

	/* Back through W2 and the ReLU (whose output is zero where it cut). */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)nh,
	    (int)no, 1.0f, c->z2, (int)no, p + m->off_w2, (int)nh, 0.0f, c->d1,
	    (int)nh);
	for (i = 0; i < b * nh; i++)
		if (c->z1[i] == 0.0f)
			c->d1[i] = 0.0f;
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nh, (int)ni,
	    (int)b, 1.0f, c->d1, (int)nh, c->x, (int)ni, 0.0f, g + m->off_w1,
	    (int)ni);
	memset(g + m->off_b1, 0, nh * sizeof (float));
	for (i = 0; i < b; i++)
		for (j = 0; j < nh; j++)
			g[m->off_b1 + j] += c->d1[i * nh + j];
	if (ready != NULL && (rc = ready(0, m->off_w2, arg)) != 0)
		return (rc);

	*loss = lsum;
	*correct = ok;
	return (0);
}

static int
mlp_cpu_eval(struct mlp *m, const uint8_t *x, const uint8_t *y, size_t b,
    size_t *correct)
{
	struct mlp_cpu	*c = m->impl;
	size_t		 i, ok = 0;

	if (b == 0 || b > m->max_batch)
		return (-1);
	mlp_cpu_forward(m, x, b);
	for (i = 0; i < b; i++)
		if (mlp_argmax(c->z2 + i * m->out, m->out) == y[i])
			ok++;
	*correct = ok;
	return (0);
}

static int
mlp_cpu_sgd(struct mlp *m, float lr)
{
	cblas_saxpy((int)m->nparams, -lr, m->grads, 1, m->params, 1);
	return (0);
}

const struct mlp_ops mlp_cpu_ops = {
	.name = "cpu",
	.init = mlp_cpu_init,
	.free = mlp_cpu_free,
	.set_params = mlp_cpu_set_params,
	.get_params = mlp_cpu_get_params,
	.step = mlp_cpu_step,
	.eval = mlp_cpu_eval,
	.sgd = mlp_cpu_sgd,
};
