# SPDX-License-Identifier: Apache-2.0
# tests/unit/: cmocka tests of the pure parts, linked against the libraries.
if HAVE_CMOCKA
UNIT_TESTS = tests/unit/test_wire tests/unit/test_kv tests/unit/test_store
UNIT_TESTS += tests/unit/test_dp_sampler tests/unit/test_dp_ckpt
DP_UNIT_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) -I$(top_srcdir)/libworker
DP_UNIT_LDADD = libworker/librdzvworker.la $(CMOCKA_LIBS) $(LIBBSD_LIBS)
tests_unit_test_dp_sampler_SOURCES = tests/unit/test_dp_sampler.c
tests_unit_test_dp_sampler_CFLAGS = $(DP_UNIT_CFLAGS)
tests_unit_test_dp_sampler_LDADD = $(DP_UNIT_LDADD)
tests_unit_test_dp_ckpt_SOURCES = tests/unit/test_dp_ckpt.c
tests_unit_test_dp_ckpt_CFLAGS = $(DP_UNIT_CFLAGS)
tests_unit_test_dp_ckpt_LDADD = $(DP_UNIT_LDADD)
UNIT_TESTS += tests/unit/test_worker_args
tests_unit_test_worker_args_SOURCES = tests/unit/test_worker_args.c
tests_unit_test_worker_args_CFLAGS = $(DP_UNIT_CFLAGS)
tests_unit_test_worker_args_LDADD = $(DP_UNIT_LDADD)
check_PROGRAMS += $(UNIT_TESTS)
TESTS += $(UNIT_TESTS)
UNIT_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(LIBEVENT_CFLAGS) -I$(top_srcdir)/rdzvd
UNIT_LDADD = rdzvd/librdzvstate.la kv/libkv.la common/libcommon.la $(CMOCKA_LIBS) $(LIBEVENT_LIBS) $(LIBBSD_LIBS)
tests_unit_test_wire_SOURCES = tests/unit/test_wire.c
tests_unit_test_wire_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_wire_LDADD = $(UNIT_LDADD)
tests_unit_test_kv_SOURCES = tests/unit/test_kv.c
tests_unit_test_kv_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_kv_LDADD = $(UNIT_LDADD)
tests_unit_test_store_SOURCES = tests/unit/test_store.c
tests_unit_test_store_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_store_LDADD = rdzvd/libbackends.la $(UNIT_LDADD)
# Fault injection: store.c's sqlite calls go through the test's wrappers.
tests_unit_test_store_LDFLAGS = -Wl,--wrap=sqlite3_open_v2 \
	-Wl,--wrap=sqlite3_prepare_v2 -Wl,--wrap=sqlite3_prepare_v3 \
	-Wl,--wrap=sqlite3_step -Wl,--wrap=sqlite3_exec
endif
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_worker_env
TESTS += tests/unit/test_worker_env
tests_unit_test_worker_env_SOURCES = tests/unit/test_worker_env.c libworker/env.c libworker/reduce.c
tests_unit_test_worker_env_CFLAGS = $(UNIT_CFLAGS) -I$(top_srcdir)/libworker
tests_unit_test_worker_env_LDADD = $(UNIT_LDADD) -lm
endif
# The rendezvous machine (rz/librz: pure, no I/O) on kv/ and common/
# alone: no sqlite, no libcurl, no libevent.
RZ_UNIT_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(JANSSON_CFLAGS)
RZ_UNIT_LDADD = rz/librz.la common/libcommon.la $(CMOCKA_LIBS) $(JANSSON_LIBS) $(LIBBSD_LIBS)
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_rdzv
TESTS += tests/unit/test_rdzv
tests_unit_test_rdzv_SOURCES = tests/unit/test_rdzv.c
tests_unit_test_rdzv_CFLAGS = $(RZ_UNIT_CFLAGS)
tests_unit_test_rdzv_LDADD = $(RZ_UNIT_LDADD)
endif
# The worker <-> agent channel's messages (common/chan.c: pure, no I/O)
# and its one read (common/chan_recv.c, on a real socket pair).
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_chan
TESTS += tests/unit/test_chan
tests_unit_test_chan_SOURCES = tests/unit/test_chan.c
tests_unit_test_chan_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_chan_LDADD = common/libcommon.la $(CMOCKA_LIBS) $(LIBBSD_LIBS)
endif
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_common
TESTS += tests/unit/test_common
tests_unit_test_common_SOURCES = tests/unit/test_common.c
tests_unit_test_common_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_common_LDADD = common/libcommon.la $(CMOCKA_LIBS) $(LIBBSD_LIBS)
endif
# The TCPStore mapping both servers drive, on kv/libkv alone (no sqlite).
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_tcps_sess
TESTS += tests/unit/test_tcps_sess
tests_unit_test_tcps_sess_SOURCES = tests/unit/test_tcps_sess.c
tests_unit_test_tcps_sess_CFLAGS = $(UNIT_CFLAGS)
tests_unit_test_tcps_sess_LDADD = kv/libkv.la common/libcommon.la $(CMOCKA_LIBS) $(LIBEVENT_LIBS) $(LIBBSD_LIBS)
endif
if HAVE_CMOCKA
# The client's handshake machine (common/handshake.c).
check_PROGRAMS += tests/unit/test_handshake
TESTS += tests/unit/test_handshake
tests_unit_test_handshake_SOURCES = tests/unit/test_handshake.c tests/lib/hs_nonce.h
tests_unit_test_handshake_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests/lib
tests_unit_test_handshake_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) $(LIBEVENT_CFLAGS)
tests_unit_test_handshake_LDADD = common/libcommon.la $(CMOCKA_LIBS) $(LIBEVENT_LIBS) $(LIBBSD_LIBS)
endif
# The straggler detector (rz/straggler.c: pure, no I/O).
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_straggler
TESTS += tests/unit/test_straggler
tests_unit_test_straggler_SOURCES = tests/unit/test_straggler.c
tests_unit_test_straggler_CFLAGS = $(RZ_UNIT_CFLAGS)
tests_unit_test_straggler_LDADD = $(RZ_UNIT_LDADD)
endif
# rdzv-agent's option table (agent/cli_opts.c), row by row.
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_cli_opts
TESTS += tests/unit/test_cli_opts
tests_unit_test_cli_opts_SOURCES = tests/unit/test_cli_opts.c agent/cli_opts.c
tests_unit_test_cli_opts_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/agent
tests_unit_test_cli_opts_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_cli_opts_LDADD = common/libcommon.la $(CMOCKA_LIBS) $(LIBBSD_LIBS)
endif
