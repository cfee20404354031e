# SPDX-License-Identifier: Apache-2.0
# bench/: load generators and the scripts that run them beside their peers.
noinst_PROGRAMS += bench/storeload
bench_storeload_SOURCES = bench/storeload.c
bench_storeload_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
bench_storeload_LDADD = common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS) -lm
EXTRA_DIST += bench/README.md bench/RESULTS.md bench/torch_store_server.py bench/store_vs_torch.sh
EXTRA_DIST += bench/runs/2026-11-22.md bench/runs/2026-11-23.md bench/runs/2026-11-26.md \
	bench/runs/2026-11-27.md bench/runs/2026-11-29.md
# librdzvworker's allreduce, timed like nccl-tests (beside torch gloo:
# bench/allreduce_vs_gloo.sh).
noinst_PROGRAMS += bench/allreduce_perf
bench_allreduce_perf_SOURCES = bench/allreduce_perf.c
bench_allreduce_perf_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libworker
bench_allreduce_perf_LDFLAGS = -no-install
bench_allreduce_perf_LDADD = libworker/librdzvworker.la $(LIBBSD_LIBS)
EXTRA_DIST += bench/gloo_allreduce.py bench/allreduce_vs_gloo.sh
# bench/restart: the non-Python worker of restart_vs_torchrun.sh.
noinst_PROGRAMS += bench/restart/startmark
bench_restart_startmark_SOURCES = bench/restart/startmark.c
bench_restart_startmark_LDADD = $(LIBBSD_LIBS)
EXTRA_DIST += bench/restart/restart_vs_torchrun.sh bench/restart/restart.py bench/restart/gloo_ready.py bench/restart/join1000.py \
	bench/restart/join_ab.py
EXTRA_DIST += bench/ddp_vs_torch.sh bench/torch_ddp_mlp.py
# The blocking client's plaintext and TLS paths under load, and its
# connect time (bench/tls_vs_plain.sh).
noinst_PROGRAMS += bench/tlsload
bench_tlsload_SOURCES = bench/tlsload.c
bench_tlsload_CFLAGS = $(AM_CFLAGS) $(LIBSSL_CFLAGS)
bench_tlsload_LDADD = common/libcommon.la $(LIBSSL_LIBS) $(LIBCRYPTO_LIBS) $(LIBEVENT_LIBS) $(LIBBSD_LIBS)
EXTRA_DIST += bench/rdzvd_ab.sh bench/tls_vs_plain.sh bench/lib.sh
# rdzvd on etcd beside sqlite, and its failover (needs etcd).
EXTRA_DIST += bench/etcd_ha.py
# In-place repair of C workers and of a torch DDP job through rdzv.repair
# under rdzv-agent beside a full restart and torchrun 2.13
# (or the fake agent of tests/lib/fakeagent.py); bench/jobs.py starts
# their 2 x 2 jobs, goodput.py's too; bench/figures.py keeps the samples
# of these and the HSDP and straggler benchmarks; bench/harness.py points
# those that use the test helpers at the build.
EXTRA_DIST += bench/repair_c.py bench/repair_torch.py bench/jobs.py
EXTRA_DIST += bench/figures.py bench/harness.py
EXTRA_DIST += bench/straggler.py bench/join_c.py bench/hsdp_repair.py \
	bench/hsdp_heal.py bench/hsdp_goodput.py
# A torchtitan job's goodput: RepairTrainer beside a restart from
# torchtitan's checkpoint (and torchft's integration).
EXTRA_DIST += bench/titan_goodput.py
# A Lightning job's restart, warm and cold, beside torchrun; a checkpoint's
# cost to the loop (job.save, dcp.save, dcp.async_save).
EXTRA_DIST += bench/warm_restart.py bench/ckpt_save.py
# Goodput through repeated worker failures: rdzv-agent with repair,
# without, and torchrun 2.13 (bench/goodput.py).
EXTRA_DIST += bench/goodput.py
# librdzvworker's nccl backend beside raw NCCL (scripts/gpu-check.sh, on
# a GPU): bootstrap, per-call time, bus bandwidth.
if HAVE_NCCL
noinst_PROGRAMS += bench/nccl_vs_rdzv
bench_nccl_vs_rdzv_SOURCES = bench/nccl_vs_rdzv.c
bench_nccl_vs_rdzv_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libworker
bench_nccl_vs_rdzv_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS) $(NCCL_CFLAGS)
bench_nccl_vs_rdzv_LDFLAGS = -no-install
bench_nccl_vs_rdzv_LDADD = libworker/librdzvworker.la -ldl
endif
