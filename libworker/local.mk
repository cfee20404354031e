# SPDX-License-Identifier: Apache-2.0
# libworker/: librdzvworker, linked into training programs (issue 4).
# Exactly the API of rdzv_worker.h is exported (librdzvworker.sym, one
# symbol a line; tests/integ/worker_abi.sh holds the two together); the
# common/ code and kv/libkv (the kv core and its TCPStore mapping, for
# the TCPStore a torchrun rank 0 hosts) are linked in and stay private.
# Nothing of rdzvd/ is compiled here.
lib_LTLIBRARIES += libworker/librdzvworker.la
include_HEADERS = libworker/rdzv_worker.h
pkgconfigdir = $(libdir)/pkgconfig
pkgconfig_DATA = libworker/rdzvworker.pc
libworker_librdzvworker_la_SOURCES = \
	libworker/rdzv_worker.h libworker/worker.h \
	libworker/comm.c libworker/env.c libworker/net.c libworker/store.c \
	libworker/tstore_srv.c libworker/cpu.h libworker/cpu.c libworker/cpu_coll.c \
	libworker/reduce.c libworker/shm.c libworker/repair.c \
	libworker/dp.c libworker/sampler.c libworker/ckpt.c libworker/errnums.c \
	libworker/progress.c
libworker_librdzvworker_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libworker
libworker_librdzvworker_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) -pthread
libworker_librdzvworker_la_LDFLAGS = -version-info 0:0:0 -export-symbols $(srcdir)/libworker/librdzvworker.sym -pthread
EXTRA_libworker_librdzvworker_la_DEPENDENCIES = libworker/librdzvworker.sym
libworker_librdzvworker_la_LIBADD = kv/libkv.la common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS) -lm
# CUDA and NCCL: headers only; gpulib.c loads the libraries when run.
if HAVE_CUDA
libworker_librdzvworker_la_SOURCES += libworker/gpulib.h libworker/gpulib.c
libworker_librdzvworker_la_CFLAGS += $(CUDA_CFLAGS)
endif
if HAVE_NCCL
libworker_librdzvworker_la_SOURCES += libworker/nccl_be.h libworker/nccl.c \
	libworker/nccl_coll.c libworker/nccl_p2p.c
libworker_librdzvworker_la_CFLAGS += $(NCCL_CFLAGS)
endif
EXTRA_DIST += libworker/rdzvworker.pc.in libworker/librdzvworker.sym
