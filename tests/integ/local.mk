# SPDX-License-Identifier: Apache-2.0
# tests/integ/: scripts run against real processes on 127.0.0.1.  Each
# starts its own rdzvd (tests/lib/rdzvtest.py) under a deadline.
INTEG_TESTS = \
	tests/integ/native_ops.py \
	tests/integ/tcpstore2.py \
	tests/integ/tcpstore113.py \
	tests/integ/bad_input.py \
	tests/integ/memory.py \
	tests/integ/persistence.py \
	tests/integ/daemon.py \
	tests/integ/agent_basic.py tests/integ/agent_elastic.py tests/integ/agent_torch.py tests/integ/agent_slurm.py \
	tests/integ/rendezvous.py \
	tests/integ/auth.py \
	tests/integ/status_page.py
INTEG_TESTS += tests/integ/dp_train.py
TESTS += $(INTEG_TESTS)
EXTRA_DIST += $(INTEG_TESTS)
INTEG_TESTS += tests/integ/ctl_basic.py tests/integ/systemd_units.py \
	tests/integ/ctl_docs.py tests/integ/install_layout.sh \
	tests/integ/license_check.sh tests/integ/python_style.sh
# rdzv-agent links neither libcurl nor sqlite (the stores are rdzvd's).
INTEG_TESTS += tests/integ/lean_agent.sh
# examples/k8s's image recipe against configure.ac and the manifests.
INTEG_TESTS += tests/integ/k8s_image.py
INTEG_TESTS += tests/integ/worker_coll.py tests/integ/worker_fail.py tests/integ/worker_launchers.py
EXTRA_DIST += tests/integ/agent_lib.py
INTEG_TESTS += tests/integ/tls_agent.py
INTEG_TESTS += tests/integ/tls.py
INTEG_TESTS += tests/integ/agent_progress.py
INTEG_TESTS += tests/integ/tls_clients.py
INTEG_TESTS += tests/integ/client_lib.py
INTEG_TESTS += tests/integ/retention.py
INTEG_TESTS += tests/integ/progress_view.py
# librdzvworker exports its header's functions, no more, no fewer.
INTEG_TESTS += tests/integ/worker_abi.sh
INTEG_TESTS += tests/integ/agent_static.py
INTEG_TESTS += tests/integ/agent_cli2.py
INTEG_TESTS += tests/integ/tstore_hosted_ops.py
INTEG_TESTS += tests/integ/storm.py
# Job credentials: a job reaches its own job only.
INTEG_TESTS += tests/integ/security_jobs.py
# The HTTP side: a viewer secret of its own, login cookie, TLS.
INTEG_TESTS += tests/integ/security_http.py
INTEG_TESTS += tests/integ/agent_repair.py
# In-place repair of C workers under the fake agent (issue 12).
INTEG_TESTS += tests/integ/repair_c.py
# The torch helper's side of the channel (python/rdzv/repair.py) against
# common/chan.c on one corpus, and its empty datagrams (no torch needed).
INTEG_TESTS += tests/integ/repair_chan.py
# ... and end to end: rdzvd's repair rounds through real rdzv-agents.
INTEG_TESTS += tests/integ/repair_agent.py
# ... its harder cases: the watchdog, a second failure, rdzvd kill -9.
INTEG_TESTS += tests/integ/repair_agent2.py
# ... and the end of training while a replacement is on its way.
INTEG_TESTS += tests/integ/repair_end.py
# Stragglers named (events, metric, members) and replaced (repair, or a
# standby in the straggling node's place); C workers under real agents.
INTEG_TESTS += tests/integ/straggler.py
# Nodes joining and leaving a running job in place (no restart).
INTEG_TESTS += tests/integ/elastic_inplace.py
# --round-ports: rounds' TCPStores on ports of a range (rdzvd, the agent's).
INTEG_TESTS += tests/integ/round_ports.py
# rdzvctl forget: a closed job's id used again.
INTEG_TESTS += tests/integ/ctl_forget.py
# rdzvd --store etcd: real etcd members on 127.0.0.1-3 (skipped without
# etcd); etcd_lib.py starts them.
INTEG_TESTS += tests/integ/etcd_store.py tests/integ/etcd_failover.py
# ... as an etcd user whose role covers rdzvd's prefix alone.
INTEG_TESTS += tests/integ/etcd_prefix_role.py
EXTRA_DIST += tests/integ/etcd_lib.py
# The fake agent of repair_c.py, test_repair_torch{,2}.py and bench/repair_*.py.
EXTRA_DIST += tests/lib/fakeagent.py

# The README's first command, scripts/demo.sh, against this build: its
# story checked in every run, so a change of behaviour fails here first.
INTEG_TESTS += tests/integ/demo.py

# ---- the C programs these scripts start: built by make check ----
# -no-install: a real binary (no libtool wrapper), so torchrun --no_python
# and the tests run and signal the program itself.
# worker_check: on librdzvworker's public API, started as N ranks by
# worker_*.py, agent_progress.py, auth.py and tls_clients.py.
check_PROGRAMS += tests/integ/worker_check
tests_integ_worker_check_SOURCES = tests/integ/worker_check.c
tests_integ_worker_check_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libworker
tests_integ_worker_check_LDFLAGS = -no-install
tests_integ_worker_check_LDADD = libworker/librdzvworker.la -lm
EXTRA_DIST += tests/integ/worker_lib.py
# gpu_fake_check: the GPU path of librdzvworker on one rank (public API),
# for gpu_fake.py against libfakegpu (a stand-in libcudart + libnccl that
# the library loads as both, built where CUDA and NCCL headers are) and
# for scripts/gpu-check.sh against a real GPU.
check_PROGRAMS += tests/integ/gpu_fake_check
tests_integ_gpu_fake_check_SOURCES = tests/integ/gpu_fake_check.c
tests_integ_gpu_fake_check_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libworker
tests_integ_gpu_fake_check_LDFLAGS = -no-install
tests_integ_gpu_fake_check_LDADD = libworker/librdzvworker.la -ldl -lpthread
if HAVE_NCCL
check_LTLIBRARIES += tests/integ/libfakegpu.la
tests_integ_libfakegpu_la_SOURCES = tests/integ/fakegpu.c
tests_integ_libfakegpu_la_CFLAGS = $(AM_CFLAGS) $(CUDA_CFLAGS) $(NCCL_CFLAGS) -pthread
# -rpath: a shared module, though never installed.
tests_integ_libfakegpu_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
endif
INTEG_TESTS += tests/integ/gpu_fake.py tests/integ/repair_nccl_abort.py \
	tests/integ/gpu_check_script.sh
# dp_check: the data-parallel helpers (rdzv_dp_*) on 1 to 5 ranks, for
# dp_train.py.
check_PROGRAMS += tests/integ/dp_check
tests_integ_dp_check_SOURCES = tests/integ/dp_check.c
tests_integ_dp_check_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/libworker
tests_integ_dp_check_LDFLAGS = -no-install
tests_integ_dp_check_LDADD = libworker/librdzvworker.la
# client_check: every call of common/client.h against a running rdzvd,
# for client_lib.py.
check_PROGRAMS += tests/integ/client_check
tests_integ_client_check_SOURCES = tests/integ/client_check.c
tests_integ_client_check_LDADD = common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS)
# repair_drv drives rdzv-agent's local repair pieces (sup.c, progress.c,
# logs.c, with cli.c's and cli_opts.c's options) with real workers for
# agent_repair.py, as main.c will.
check_PROGRAMS += tests/integ/repair_drv
tests_integ_repair_drv_SOURCES = tests/integ/repair_drv.c agent/agent.h \
	agent/sup.c agent/progress.c agent/logs.c agent/cli.c \
	agent/cli_opts.c
tests_integ_repair_drv_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_integ_repair_drv_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) \
	$(LIBSSL_CFLAGS) $(JANSSON_CFLAGS)
tests_integ_repair_drv_LDADD = common/libcommon.la $(LIBEVENT_LIBS) \
	$(LIBSSL_LIBS) $(JANSSON_LIBS) $(LIBBSD_LIBS) -lm
# chan_dump: common/chan.c's chan_parse() over datagrams from stdin, for
# repair_chan.py (the torch helper's parser must agree with it).
check_PROGRAMS += tests/integ/chan_dump
tests_integ_chan_dump_SOURCES = tests/integ/chan_dump.c
tests_integ_chan_dump_LDADD = common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS)
# ---- end of the C programs ----
# status_page.py keeps its chart's screenshot here (a CI artifact).
CLEANFILES += tests/integ/status_page_job.png
# ... and demo.py the demo's screenshot of the page.
CLEANFILES += tests/integ/demo_status_page.png
# Under a real Slurm (scripts/slurm-cluster.sh: slurmctld, slurmd nodes,
# munge, in namespaces of their own; needs root): sbatch, srun, steps.
INTEG_TESTS += tests/integ/slurm_jobs.py
EXTRA_DIST += tests/integ/slurm_lib.py scripts/slurm-cluster.sh
# ... preemption (scancel --signal=USR1) and scontrol requeue.
INTEG_TESTS += tests/integ/slurm_preempt.py
# ... a node lost mid-job (its agent killed, or set DOWN): repaired,
# COMPLETED.
INTEG_TESTS += tests/integ/slurm_nodeloss.py

# pip install of scripts/wheel.sh's wheel into a fresh virtualenv: its
# programs, library and helper run torch and C jobs with no paths set.
INTEG_TESTS += tests/integ/wheel_install.sh
EXTRA_DIST += scripts/wheel.sh
# The Debian packages of debian/: built, lintian-clean, installed,
# reinstalled and purged in an overlay of / (root only; skipped else).
INTEG_TESTS += tests/integ/debian_pkg.sh
EXTRA_DIST += debian/.gitignore debian/changelog debian/control debian/copyright debian/rules \
	debian/source/format debian/rdzvd.install debian/rdzvd.postrm \
	debian/rdzv-agent.install debian/librdzvworker0.install \
	debian/librdzvworker0.symbols debian/librdzvworker-dev.install \
	debian/python3-rdzv.install
