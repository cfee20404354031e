/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mlp_cuda.cu: the MLP of mlp.h on a CUDA device: matrix products in
 * cuBLAS, the element-wise parts (bias, ReLU, softmax cross-entropy) as
 * small kernels.  Built only when configure finds nvcc and cuBLAS.
 *
 * cuBLAS is column-major: a row-major r x c matrix is, to it, its c x r
 * transpose with leading dimension c, so each product below is written
 * for the transposes (C^T = B^T A^T).  Parameters and gradients are
 * device memory, laid out as mlp.h says, so the data-parallel helper
 * hands them to the nccl backend as they are.
 */
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "mlp.h"
}

struct mlp_gpu {
	cublasHandle_t	 h;
	cudaStream_t	 s;
	uint8_t		*x8;	/* b x in bytes */
	uint8_t		*y;	/* b labels */
	float		*x;	/* b x in */
	float		*z1;	/* b x H */
	float		*z2;	/* b x out */
	float		*d1;	/* b x H */
	float		*ones;	/* b ones, for column sums through gemv */
	float		*loss;	/* b per-sample losses */
	int		*right;	/* b: prediction right */
	float		*hloss;	/* pinned host copies */
	int		*hright;
};

#define CK(x)	do { if ((x) != cudaSuccess) return (-1); } while (0)
#define CB(x)	do { if ((x) != CUBLAS_STATUS_SUCCESS) return (-1); } while (0)

static __global__ void
k_to_float(float *x, const uint8_t *x8, size_t n)
{
	size_t	i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;

	if (i < n)
		x[i] = (float)x8[i] * (1.0f / 255.0f);
}

/* Every row of z (b x n) set to bias. */
static __global__ void
k_fill_rows(float *z, const float *bias, size_t b, size_t n)
{
	size_t	i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;

	if (i < b * n)
		z[i] = bias[i % n];
}

static __global__ void
k_relu(float *z, size_t n)
{
	size_t	i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;

	if (i < n && !(z[i] > 0.0f))
		z[i] = 0.0f;
}

/* d = 0 where the ReLU cut (its output is 0 there). */
static __global__ void
k_relu_back(float *d, const float *a, size_t n)
{
	size_t	i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;

	if (i < n && a[i] == 0.0f)
		d[i] = 0.0f;
}

/*
 * One thread per sample: softmax of its logits (shifted by the maximum),
 * its loss and whether the argmax is right; with grad, the logits become
 * scale * (softmax - onehot).
 */
static __global__ void
k_softmax_xent(float *z, const uint8_t *y, size_t b, size_t no, float scale,
    float *loss, int *right, int grad)
{
	size_t	i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, j, best = 0;
	float	*r, mx, s = 0.0f;

	if (i >= b)
		return;
	r = z + i * no;
	for (j = 1; j < no; j++)
		if (r[j] > r[best])
			best = j;
	mx = r[best];
	right[i] = best == y[i];
	if (!grad)
		return;
	for (j = 0; j < no; j++) {
		r[j] = expf(r[j] - mx);
		s += r[j];
	}
	loss[i] = -logf(r[y[i]] / s);
	for (j = 0; j < no; j++)
		r[j] = r[j] / s * scale;
	r[y[i]] -= scale;
}

static __global__ void
k_fill(float *p, float v, size_t n)
{
	size_t	i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = v;
}

/* Every kernel runs THREADS to a block, blocks(n) of them for n items. */
#define THREADS	256

static unsigned
blocks(size_t n)
{
	return ((unsigned)((n + THREADS - 1) / THREADS));
}

int
mlp_cuda_available(int local_rank)
{
	int	n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
		(void)cudaGetLastError();
		return (0);
	}
	if (cudaSetDevice(local_rank % n) != cudaSuccess)
		return (0);
	return (1);
}

static void
mlp_gpu_free(struct mlp *m)
{
	struct mlp_gpu	*g = (struct mlp_gpu *)m->impl;

	if (g != NULL) {
		cudaFree(g->x8);
		cudaFree(g->y);
		cudaFree(g->x);
		cudaFree(g->z1);
		cudaFree(g->z2);
		cudaFree(g->d1);
		cudaFree(g->ones);
		cudaFree(g->loss);
		cudaFree(g->right);
		cudaFreeHost(g->hloss);
		cudaFreeHost(g->hright);
		if (g->h != NULL)
			cublasDestroy(g->h);
		if (g->s != NULL)
			cudaStreamDestroy(g->s);
		free(g);
	}
	cudaFree(m->params);
	cudaFree(m->grads);
	m->impl = NULL;
	m->params = m->grads = NULL;
}

static int
mlp_gpu_alloc(struct mlp *m, struct mlp_gpu *g)
{
	size_t	b = m->max_batch;

	CK(cudaMalloc((void **)&m->params, m->nparams * sizeof (float)));
	CK(cudaMalloc((void **)&m->grads, m->nparams * sizeof (float)));
	CK(cudaMemset(m->grads, 0, m->nparams * sizeof (float)));
	CK(cudaMalloc((void **)&g->x8, b * m->in));
	CK(cudaMalloc((void **)&g->y, b));
	CK(cudaMalloc((void **)&g->x, b * m->in * sizeof (float)));
	CK(cudaMalloc((void **)&g->z1, b * m->hidden * sizeof (float)));
	CK(cudaMalloc((void **)&g->z2, b * m->out * sizeof (float)));
	CK(cudaMalloc((void **)&g->d1, b * m->hidden * sizeof (float)));
	CK(cudaMalloc((void **)&g->ones, b * sizeof (float)));
	CK(cudaMalloc((void **)&g->loss, b * sizeof (float)));
	CK(cudaMalloc((void **)&g->right, b * sizeof (int)));
	CK(cudaMallocHost((void **)&g->hloss, b * sizeof (float)));
	CK(cudaMallocHost((void **)&g->hright, b * sizeof (int)));
	CK(cudaStreamCreateWithFlags(&g->s, cudaStreamNonBlocking));
	CB(cublasCreate(&g->h));
	CB(cublasSetStream(g->h, g->s));
	k_fill<<<blocks(b), THREADS, 0, g->s>>>(g->ones, 1.0f, b);
	CK(cudaStreamSynchronize(g->s));
	return (0);
}

static int
mlp_gpu_init(struct mlp *m)
{
	struct mlp_gpu	*g;

	if ((g = (struct mlp_gpu *)calloc(1, sizeof *g)) == NULL)
		return (-1);
	m->impl = g;
	if (mlp_gpu_alloc(m, g) != 0) {
		mlp_gpu_free(m);
		return (-1);
	}
	return (0);
}

static int
mlp_gpu_set_params(struct mlp *m, const float *host)
{
	CK(cudaMemcpy(m->params, host, m->nparams * sizeof (float),
	    cudaMemcpyHostToDevice));
	return (0);
}

static int
mlp_gpu_get_params(struct mlp *m, float *host)
{
	struct mlp_gpu	*g = (struct mlp_gpu *)m->impl;

	CK(cudaStreamSynchronize(g->s));
	CK(cudaMemcpy(host, m->params, m->nparams * sizeof (float),
	    cudaMemcpyDeviceToHost));
	return (0);
}

/* Forward into g->z1 (ReLU'd) and g->z2 (logits). */
static int
mlp_gpu_forward(struct mlp *m, const uint8_t *x, const uint8_t *y, size_t b)
{
	struct mlp_gpu	*g = (struct mlp_gpu *)m->impl;
	const float	*p = m->params, one = 1.0f;
	int		 ni = (int)m->in, nh = (int)m->hidden, no = (int)m->out;

	CK(cudaMemcpyAsync(g->x8, x, b * m->in, cudaMemcpyHostToDevice, g->s));
	CK(cudaMemcpyAsync(g->y, y, b, cudaMemcpyHostToDevice, g->s));
	k_to_float<<<blocks(b * m->in), THREADS, 0, g->s>>>(g->x, g->x8,
	    b * m->in);
	k_fill_rows<<<blocks(b * m->hidden), THREADS, 0, g->s>>>(g->z1,
	    p + m->off_b1, b, m->hidden);
	/* z1^T (H x b) = W1 (H x in, i.e. (W1^T)^T) x^T. */
	CB(cublasSgemm(g->h, CUBLAS_OP_T, CUBLAS_OP_N, nh, (int)b, ni, &one,
	    p + m->off_w1, ni, g->x, ni, &one, g->z1, nh));
	k_relu<<<blocks(b * m->hidden), THREADS, 0, g->s>>>(g->z1,
	    b * m->hidden);
	k_fill_rows<<<blocks(b * m->out), THREADS, 0, g->s>>>(g->z2,
	    p + m->off_b2, b, m->out);
	CB(cublasSgemm(g->h, CUBLAS_OP_T, CUBLAS_OP_N, no, (int)b, nh, &one,
	    p + m->off_w2, nh, g->z1, nh, &one, g->z2, no));
	return (0);
}

static int
mlp_gpu_step(struct mlp *m, const uint8_t *x, const uint8_t *y, size_t b,
    float scale, double *loss, size_t *correct, mlp_ready_cb ready, void *arg)
{
	struct mlp_gpu	*g = (struct mlp_gpu *)m->impl;
	const float	*p = m->params, one = 1.0f, zero = 0.0f;
	float		*gr = m->grads;
	int		 ni = (int)m->in, nh = (int)m->hidden, no = (int)m->out;
	double		 l = 0.0;
	size_t		 i, ok = 0;
	int		 rc;

	if (b == 0 || b > m->max_batch || mlp_gpu_forward(m, x, y, b) != 0)
		return (-1);
	k_softmax_xent<<<blocks(b), THREADS, 0, g->s>>>(g->z2, g->y, b, m->out,
	    scale, g->loss, g->right, 1);
	CK(cudaMemcpyAsync(g->hloss, g->loss, b * sizeof (float),
	    cudaMemcpyDeviceToHost, g->s));
	CK(cudaMemcpyAsync(g->hright, g->right, b * sizeof (int),
	    cudaMemcpyDeviceToHost, g->s));

	/* dW2^T (H x out) = a1^T dz2; db2 = dz2^T ones. */
	CB(cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_T, nh, no, (int)b, &one,
	    g->z1, nh, g->z2, no, &zero, gr + m->off_w2, nh));
	CB(cublasSgemv(g->h, CUBLAS_OP_N, no, (int)b, &one, g->z2, no,
	    g->ones, 1, &zero, gr + m->off_b2, 1));
	/*
	 * "Ready" must mean computed, not merely queued: the all-reduce
	 * runs on another stream, which does not wait for ours.
	 */
	CK(cudaStreamSynchronize(g->s));
	if (ready != NULL &&
	    (rc = ready(m->off_w2, m->nparams - m->off_w2, arg)) != 0)
		return (rc);

	/* da1^T (H x b) = W2^T dz2^T, then through the ReLU. */
	CB(cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, nh, (int)b, no, &one,
	    p + m->off_w2, nh, g->z2, no, &zero, g->d1, nh));
	k_relu_back<<<blocks(b * m->hidden), THREADS, 0, g->s>>>(g->d1, g->z1,
	    b * m->hidden);
	/* dW1^T (in x H) = x^T dz1. */
	CB(cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_T, ni, nh, (int)b, &one,
	    g->x, ni, g->d1, nh, &zero, gr + m->off_w1, ni));
	CB(cublasSgemv(g->h, CUBLAS_OP_N, nh, (int)b, &one, g->d1, nh,
	    g->ones, 1, &zero, gr + m->off_b1, 1));
	CK(cudaStreamSynchronize(g->s));
	if (ready != NULL && (rc = ready(0, m->off_w2, arg)) != 0)
		return (rc);

	for (i = 0; i < b; i++) {
		l += g->hloss[i];
		ok += (size_t)g->hright[i];
	}
	*loss = l;
	*correct = ok;
	return (0);
}

static int
mlp_gpu_eval(struct mlp *m, const uint8_t *x, const uint8_t *y, size_t b,
    size_t *correct)
{
	struct mlp_gpu	*g = (struct mlp_gpu *)m->impl;
	size_t		 i, ok = 0;

	if (b == 0 || b > m->max_batch || mlp_gpu_forward(m, x, y, b) != 0)
		return (-1);
	k_softmax_xent<<<blocks(b), THREADS, 0, g->s>>>(g->z2, g->y, b, m->out,
	    0.0f, g->loss, g->right, 0);
	CK(cudaMemcpyAsync(g->hright, g->right, b * sizeof (int),
	    cudaMemcpyDeviceToHost, g->s));
	CK(cudaStreamSynchronize(g->s));
	for (i = 0; i < b; i++)
		ok += (size_t)g->hright[i];
	*correct = ok;
	return (0);
}

static int
mlp_gpu_sgd(struct mlp *m, float lr)
{
	struct mlp_gpu	*g = (struct mlp_gpu *)m->impl;
	float		 a = -lr;

	/* The averaged gradients came from another stream, already done. */
	CB(cublasSaxpy(g->h, (int)m->nparams, &a, m->grads, 1, m->params, 1));
	return (0);
}

const struct mlp_ops mlp_cuda_ops = {
	"cuda",
	mlp_gpu_init,
	mlp_gpu_free,
	mlp_gpu_set_params,
	mlp_gpu_get_params,
	mlp_gpu_step,
	mlp_gpu_eval,
	mlp_gpu_sgd,
};
