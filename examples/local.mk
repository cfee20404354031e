# SPDX-License-Identifier: Apache-2.0
# examples/: training programs on real data (issue 4).
# ddp_mlp: an MLP trained data-parallel on Fashion-MNIST through
# librdzvworker; CPU math in OpenBLAS, and with nvcc + cuBLAS a GPU path
# (mlp_cuda.cu, compiled by nvcc into a plain object and linked in).
# -no-install: a real binary (no libtool wrapper), so torchrun --no_python
# and the tests run and signal the program itself.
EXTRA_DIST += examples/mlp_cuda.cu
if HAVE_EXAMPLES
noinst_PROGRAMS += examples/ddp_mlp
examples_ddp_mlp_SOURCES = examples/ddp_mlp.c examples/idx.c examples/idx.h \
	examples/mlp.c examples/mlp.h
examples_ddp_mlp_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libworker
examples_ddp_mlp_CFLAGS = $(AM_CFLAGS) $(OPENBLAS_CFLAGS) $(ZLIB_CFLAGS)
examples_ddp_mlp_LDFLAGS = -no-install
examples_ddp_mlp_LDADD = libworker/librdzvworker.la $(OPENBLAS_LIBS) $(ZLIB_LIBS) -lm
if HAVE_CUDA_EXAMPLE
NVCCFLAGS = -O2 -DHAVE_CUDA_EXAMPLE \
	-gencode arch=compute_75,code=compute_75 \
	-gencode arch=compute_90,code=sm_90
examples_ddp_mlp_CPPFLAGS += -DHAVE_CUDA_EXAMPLE
examples_ddp_mlp_LDADD += examples/mlp_cuda.$(OBJEXT) $(CUDA_LIBS) -lcublas -lstdc++
EXTRA_examples_ddp_mlp_DEPENDENCIES = examples/mlp_cuda.$(OBJEXT)
CLEANFILES += examples/mlp_cuda.$(OBJEXT)
examples/mlp_cuda.$(OBJEXT): examples/mlp_cuda.cu examples/mlp.h
	$(AM_V_GEN)$(MKDIR_P) examples && \
	$(NVCC) $(NVCCFLAGS) $(CUDA_CFLAGS) -I$(top_srcdir)/examples -c -o $@ \
	    $(top_srcdir)/examples/mlp_cuda.cu
endif
endif
EXTRA_DIST += examples/slurm/README.md examples/slurm/rdzv.sbatch \
	examples/slurm/torchrun_script.sh examples/slurm/elastic_ddp.py
