/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpulib.c: finds and loads the CUDA runtime and NCCL at run time.
 *
 * Nothing of either is linked in (see gpulib.h): a program linked with
 * librdzvworker starts on a machine with no GPU software at all, and one
 * with a GPU uses the libcudart and libnccl found there, wherever its
 * CUDA, its distribution or a pip wheel put them.  Each library is looked
 * for once, in order:
 *
 *   1. $RDZV_CUDART_LIBRARY / $RDZV_NCCL_LIBRARY, a path (nothing else is
 *      tried when set: what the user names is what runs);
 *   2. the soname (libcudart.so.MAJOR, libnccl.so.2) through the dynamic
 *      linker: already in the process (torch's, the program's own),
 *      LD_LIBRARY_PATH, /etc/ld.so.cache;
 *   3. the directories configure found them in (GPULIB_CUDART_DIR,
 *      GPULIB_NCCL_DIR), then /usr/local/cuda/lib64.
 */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "gpulib.h"

#ifndef GPULIB_CUDART_DIR
#define GPULIB_CUDART_DIR	""
#endif
#ifndef GPULIB_NCCL_DIR
#define GPULIB_NCCL_DIR		""
#endif
#define GPULIB_CUDA_DEFAULT	"/usr/local/cuda/lib64"

struct gpulib_sym {
	const char	*name;
	size_t		 off;
	int		 optional;
};

struct gpulib_cudart	cudart;
static char		cudart_why[1024];
static int		cudart_ok;
static pthread_once_t	cudart_once = PTHREAD_ONCE_INIT;

/* A table entry: function name of struct gpulib_LIB; opt: may be absent. */
#define GPULIB_ENTRY(lib, name, opt)	\
	{ #name, offsetof(struct gpulib_##lib, name), opt },
#define CUDART_SYM(ret, name, args)	GPULIB_ENTRY(cudart, name, 0)
static const struct gpulib_sym	cudart_syms[] = { GPULIB_CUDART(CUDART_SYM) };

/*
 * dlopens soname as the steps above say; env names the override.  Fills
 * where (the places tried, for a message) and returns the handle or NULL.
 */
static void *
gpulib_open(const char *env, const char *soname, const char *builddir,
    char *where, size_t wherelen, char *err, size_t errlen)
{
	const char	*dirs[] = { builddir, GPULIB_CUDA_DEFAULT };
	const char	*p;
	char		 path[1024];
	void		*h;
	size_t		 i;

	err[0] = '\0';
	if ((p = getenv(env)) != NULL && *p != '\0') {
		snprintf(where, wherelen, "%s=%s", env, p);
		if ((h = dlopen(p, RTLD_NOW | RTLD_LOCAL)) == NULL)
			snprintf(err, errlen, "%s", dlerror());
		return (h);
	}
	snprintf(where, wherelen, "%s unset, the dynamic linker's path "
	    "(LD_LIBRARY_PATH%s%s, ld.so.cache)", env,
	    getenv("LD_LIBRARY_PATH") != NULL ? "=" : " unset",
	    getenv("LD_LIBRARY_PATH") != NULL ? getenv("LD_LIBRARY_PATH") :
	    "");
	if ((h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) != NULL)
		return (h);
	for (i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		if (dirs[i][0] == '\0' || (i > 0 &&
		    strcmp(dirs[i], dirs[0]) == 0))
			continue;
		snprintf(path, sizeof path, "%s/%s", dirs[i], soname);
		strlcat(where, ", ", wherelen);
		strlcat(where, dirs[i], wherelen);
		if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) != NULL)
			return (h);
	}
	return (NULL);
}

/* Fills table from h; 0, or -1 naming the first required symbol missing. */
static int
gpulib_resolve(void *h, void *table, const struct gpulib_sym *syms,
    size_t n, char *err, size_t errlen)
{
	void	*f;
	size_t	 i;

	for (i = 0; i < n; i++) {
		f = dlsym(h, syms[i].name);
		if (f == NULL && !syms[i].optional) {
			snprintf(err, errlen, "it has no %s", syms[i].name);
			return (-1);
		}
		memcpy((char *)table + syms[i].off, &f, sizeof f);
	}
	return (0);
}

static void
gpulib_cudart_load(void)
{
	char	 soname[64], where[384], err[256];
	void	*h;

	snprintf(soname, sizeof soname, "libcudart.so.%d",
	    CUDART_VERSION / 1000);
	h = gpulib_open("RDZV_CUDART_LIBRARY", soname, GPULIB_CUDART_DIR,
	    where, sizeof where, err, sizeof err);
	if (h == NULL) {
		snprintf(cudart_why, sizeof cudart_why, "%s not found%s%s "
		    "(looked in: %s)", soname, err[0] ? ": " : "", err, where);
		return;
	}
	if (gpulib_resolve(h, &cudart, cudart_syms, sizeof cudart_syms /
	    sizeof cudart_syms[0], err, sizeof err) != 0) {
		snprintf(cudart_why, sizeof cudart_why, "%s (%s) is not a "
		    "CUDA runtime this library can use: %s", soname, where,
		    err);
		memset(&cudart, 0, sizeof cudart);
		return;
	}
	cudart_ok = 1;
}

int
gpulib_cudart(void)
{
	pthread_once(&cudart_once, gpulib_cudart_load);
	return (cudart_ok);
}

const char *
gpulib_cudart_why(void)
{
	pthread_once(&cudart_once, gpulib_cudart_load);
	return (cudart_ok ? "" : cudart_why);
}

int
gpulib_mem_type(const void *p)
{
	struct cudaPointerAttributes	a;

	if (p == NULL || !gpulib_cudart())
		return (cudaMemoryTypeUnregistered);
	if (cudart.cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudart.cudaGetLastError();	/* not ours to keep */
		return (cudaMemoryTypeUnregistered);
	}
	return (a.type);
}

#ifdef HAVE_NCCL
struct gpulib_nccl	libnccl;
static char		nccl_why[1024];
static int		nccl_ok;
static pthread_once_t	nccl_once = PTHREAD_ONCE_INIT;

#define NCCL_SYM(ret, name, args)	GPULIB_ENTRY(nccl, name, 0)
#define NCCL_OPT(ret, name, args)	GPULIB_ENTRY(nccl, name, 1)
static const struct gpulib_sym	nccl_syms[] = {
	GPULIB_NCCL(NCCL_SYM, NCCL_OPT)
};

static void
gpulib_nccl_load(void)
{
	char	 where[384], err[256];
	void	*h;
	int	 v = 0;

	if (!gpulib_cudart()) {
		snprintf(nccl_why, sizeof nccl_why, "nccl backend: the CUDA "
		    "runtime: %s; set RDZV_CUDART_LIBRARY to its path, or "
		    "RDZV_BACKEND=cpu", gpulib_cudart_why());
		return;
	}
	h = gpulib_open("RDZV_NCCL_LIBRARY", "libnccl.so.2", GPULIB_NCCL_DIR,
	    where, sizeof where, err, sizeof err);
	if (h == NULL) {
		snprintf(nccl_why, sizeof nccl_why, "nccl backend: "
		    "libnccl.so.2 not found%s%s (looked in: %s); set "
		    "RDZV_NCCL_LIBRARY to its path, or RDZV_BACKEND=cpu",
		    err[0] ? ": " : "", err, where);
		return;
	}
	if (gpulib_resolve(h, &libnccl, nccl_syms, sizeof nccl_syms /
	    sizeof nccl_syms[0], err, sizeof err) != 0 ||
	    libnccl.ncclGetVersion(&v) != ncclSuccess || v < GPULIB_NCCL_MIN) {
		if (err[0] == '\0')
			snprintf(err, sizeof err, "version %d, %d or later "
			    "needed", v, GPULIB_NCCL_MIN);
		snprintf(nccl_why, sizeof nccl_why, "nccl backend: the NCCL "
		    "found (%s) cannot be used: %s; set RDZV_NCCL_LIBRARY to "
		    "another, or RDZV_BACKEND=cpu", where, err);
		memset(&libnccl, 0, sizeof libnccl);
		return;
	}
	libnccl.version = v;
	nccl_ok = 1;
}

int
gpulib_nccl(char *why, size_t whylen)
{
	pthread_once(&nccl_once, gpulib_nccl_load);
	if (nccl_ok)
		return (0);
	if (why != NULL && whylen > 0)
		strlcpy(why, nccl_why, whylen);
	return (RDZV_EINVAL);
}
#endif
