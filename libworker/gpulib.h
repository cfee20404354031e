/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpulib.h: the CUDA runtime and NCCL, loaded at run time (gpulib.c).
 *
 * librdzvworker is built against their headers but linked against
 * neither: a program linked with it starts where neither library is
 * installed (the cpu backend needs none), and uses whichever
 * libcudart/libnccl the machine it runs on has.  Every call goes through
 * one of the two tables below, whose members are named after the
 * functions they point to (cudart.cudaMalloc, libnccl.ncclAllReduce).
 * Included only by builds with CUDA (HAVE_CUDA).
 */
#ifndef GPULIB_H
#define GPULIB_H

#include <stddef.h>

#include <cuda_runtime.h>
#ifdef HAVE_NCCL
/* nccl.h declares a few functions with () parameter lists. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

/* The CUDA runtime functions the library calls: return, name, args. */
#define GPULIB_CUDART(X)						\
	X(cudaError_t, cudaGetDeviceCount, (int *))			\
	X(cudaError_t, cudaGetLastError, (void))			\
	X(const char *, cudaGetErrorString, (cudaError_t))		\
	X(cudaError_t, cudaPointerGetAttributes,			\
	    (struct cudaPointerAttributes *, const void *))		\
	X(cudaError_t, cudaSetDevice, (int))				\
	X(cudaError_t, cudaMalloc, (void **, size_t))			\
	X(cudaError_t, cudaFree, (void *))				\
	X(cudaError_t, cudaHostAlloc, (void **, size_t, unsigned int))	\
	X(cudaError_t, cudaFreeHost, (void *))				\
	X(cudaError_t, cudaMemcpy, (void *, const void *, size_t,	\
	    enum cudaMemcpyKind))					\
	X(cudaError_t, cudaMemcpyAsync, (void *, const void *, size_t,	\
	    enum cudaMemcpyKind, cudaStream_t))				\
	X(cudaError_t, cudaStreamCreateWithFlags, (cudaStream_t *,	\
	    unsigned int))						\
	X(cudaError_t, cudaStreamDestroy, (cudaStream_t))		\
	X(cudaError_t, cudaStreamWaitEvent, (cudaStream_t, cudaEvent_t,	\
	    unsigned int))						\
	X(cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t *,	\
	    unsigned int))						\
	X(cudaError_t, cudaEventRecord, (cudaEvent_t, cudaStream_t))	\
	X(cudaError_t, cudaEventQuery, (cudaEvent_t))			\
	X(cudaError_t, cudaEventDestroy, (cudaEvent_t))

/* NCCL's; those marked optional may be NULL (older NCCL). */
#define GPULIB_NCCL(X, OPT)						\
	X(ncclResult_t, ncclGetVersion, (int *))			\
	X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *))		\
	X(ncclResult_t, ncclCommInitRankConfig, (ncclComm_t *, int,	\
	    ncclUniqueId, int, ncclConfig_t *))				\
	OPT(ncclResult_t, ncclCommInitRankScalable, (ncclComm_t *, int,	\
	    int, int, ncclUniqueId *, ncclConfig_t *))			\
	X(ncclResult_t, ncclCommFinalize, (ncclComm_t))			\
	X(ncclResult_t, ncclCommDestroy, (ncclComm_t))			\
	X(ncclResult_t, ncclCommAbort, (ncclComm_t))			\
	OPT(ncclResult_t, ncclCommShrink, (ncclComm_t, int *, int,	\
	    ncclComm_t *, ncclConfig_t *, int))				\
	X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t,		\
	    ncclResult_t *))						\
	X(ncclResult_t, ncclCommUserRank, (const ncclComm_t, int *))	\
	X(const char *, ncclGetErrorString, (ncclResult_t))		\
	X(const char *, ncclGetLastError, (ncclComm_t))			\
	X(ncclResult_t, ncclAllReduce, (const void *, void *, size_t,	\
	    ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))	\
	X(ncclResult_t, ncclBroadcast, (const void *, void *, size_t,	\
	    ncclDataType_t, int, ncclComm_t, cudaStream_t))		\
	X(ncclResult_t, ncclReduce, (const void *, void *, size_t,	\
	    ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t)) \
	X(ncclResult_t, ncclAllGather, (const void *, void *, size_t,	\
	    ncclDataType_t, ncclComm_t, cudaStream_t))			\
	X(ncclResult_t, ncclReduceScatter, (const void *, void *,	\
	    size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,		\
	    cudaStream_t))						\
	X(ncclResult_t, ncclSend, (const void *, size_t, ncclDataType_t, \
	    int, ncclComm_t, cudaStream_t))				\
	X(ncclResult_t, ncclRecv, (void *, size_t, ncclDataType_t, int,	\
	    ncclComm_t, cudaStream_t))					\
	X(ncclResult_t, ncclGroupStart, (void))				\
	X(ncclResult_t, ncclGroupEnd, (void))

#define GPULIB_MEMBER(ret, name, args)	ret (*name) args;

struct gpulib_cudart {
	GPULIB_CUDART(GPULIB_MEMBER)
};
extern struct gpulib_cudart	cudart;

/*
 * Loads the CUDA runtime once (any thread): $RDZV_CUDART_LIBRARY, else
 * the libcudart.so.MAJOR this library was built for, as the dynamic
 * linker finds it (already loaded, LD_LIBRARY_PATH, ld.so.cache), else
 * in the build's CUDA directory or /usr/local/cuda.  1 when cudart's
 * table is usable; 0 (no CUDA: every pointer is host memory) with the
 * reason in gpulib_cudart_why().
 */
int		 gpulib_cudart(void);
const char	*gpulib_cudart_why(void);

/*
 * What memory p is (cudaMemoryTypeDevice, ...Managed, ...Host for
 * registered host memory); cudaMemoryTypeUnregistered for plain host
 * memory, NULL, or when there is no CUDA runtime.
 */
int		 gpulib_mem_type(const void *p);

#ifdef HAVE_NCCL
struct gpulib_nccl {
	GPULIB_NCCL(GPULIB_MEMBER, GPULIB_MEMBER)
	int	version;	/* ncclGetVersion's code, e.g. 23203 */
};
extern struct gpulib_nccl	libnccl;

/* The oldest NCCL the backend runs on: non-blocking init, finalize. */
#define GPULIB_NCCL_MIN		21400

/*
 * Loads NCCL (and the CUDA runtime) once: $RDZV_NCCL_LIBRARY, else
 * libnccl.so.2 as the dynamic linker finds it, else in the build's NCCL
 * directory.  0, or RDZV_EINVAL with one line in why saying where it
 * looked and what to set.
 */
int	gpulib_nccl(char *why, size_t whylen);
#endif

#endif
