/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mlp.h: a multilayer perceptron with one hidden ReLU layer, softmax
 * cross-entropy and plain SGD, for the data-parallel example.
 *
 * Parameters and gradients each live in one contiguous float buffer laid
 * out [W1 (H x in), b1 (H), W2 (out x H), b2 (out)], weights stored
 * out x in as torch.nn.Linear does, so one call can broadcast or
 * all-reduce them.  Backward produces the second layer's gradients first
 * (the tail of the buffer) and tells the caller through a callback, so
 * their all-reduce can start while the first layer's are computed.
 *
 * Two implementations share the interface: the CPU one (OpenBLAS) and,
 * when built with CUDA, a GPU one (cuBLAS, mlp_cuda.cu) whose buffers are
 * device memory.
 */
#ifndef RDZV_EX_MLP_H
#define RDZV_EX_MLP_H

#include <stddef.h>
#include <stdint.h>

/* Called when grads[off, off + n) are final for this step. */
typedef int	(*mlp_ready_cb)(size_t off, size_t n, void *arg);

struct mlp_ops;

struct mlp {
	const struct mlp_ops	*ops;
	size_t	 in, hidden, out;
	size_t	 max_batch;
	size_t	 nparams;
	size_t	 off_w1, off_b1, off_w2, off_b2;
	float	*params;	/* host or device, per ops */
	float	*grads;
	void	*impl;		/* workspace of the implementation */
};

struct mlp_ops {
	const char	*name;
	int	(*init)(struct mlp *);
	void	(*free)(struct mlp *);
	/* Copies all nparams values in from host memory / out to it. */
	int	(*set_params)(struct mlp *, const float *host);
	int	(*get_params)(struct mlp *, float *host);
	/*
	 * One training step's forward and backward over x (b x in, host
	 * bytes 0..255) and labels y.  Gradients are the sum over the batch
	 * of each sample's loss gradient times scale.  *loss gets the sum of
	 * the b losses, *correct the number of right predictions.  ready is
	 * called for each layer's gradient range as soon as it is final.
	 */
	int	(*step)(struct mlp *, const uint8_t *x, const uint8_t *y,
		    size_t b, float scale, double *loss, size_t *correct,
		    mlp_ready_cb ready, void *arg);
	/* Predictions only: the number of right ones among b samples. */
	int	(*eval)(struct mlp *, const uint8_t *x, const uint8_t *y,
		    size_t b, size_t *correct);
	/* params -= lr * grads. */
	int	(*sgd)(struct mlp *, float lr);
};

extern const struct mlp_ops	mlp_cpu_ops;
#ifdef HAVE_CUDA_EXAMPLE
extern const struct mlp_ops	mlp_cuda_ops;
/* 1 when a CUDA device can be used; never fails otherwise. */
int	mlp_cuda_available(int local_rank);
#endif

/*
 * Sets the sizes and layout and calls ops->init.  Returns 0 or -1 (out of
 * memory or the device refused).
 */
int	mlp_new(struct mlp *, const struct mlp_ops *, size_t in, size_t hidden,
	    size_t out, size_t max_batch);
void	mlp_free(struct mlp *);
/*
 * Fills host (nparams floats) the way torch.nn.Linear does by default:
 * weights and biases uniform in +-1/sqrt(fan_in), from seed.
 */
void	mlp_init_params(const struct mlp *, uint64_t seed, float *host);

#endif /* RDZV_EX_MLP_H */
