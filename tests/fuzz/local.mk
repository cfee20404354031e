# SPDX-License-Identifier: Apache-2.0
# tests/fuzz/: libFuzzer targets, one per decoder.  With --enable-fuzzing
# (CC=clang) they are built as check programs and `make check` runs each
# for RDZV_FUZZ_SECONDS (default 20) over a copy of its seed corpus,
# through a small check_*.sh wrapper per target (tests/fuzz/run-fuzzer.sh).
# The seeds are committed; tests/fuzz/make-corpus.py writes them again.
FUZZ_TARGETS = tests/fuzz/fuzz_tcps113 tests/fuzz/fuzz_tcps2 tests/fuzz/fuzz_native \
	tests/fuzz/fuzz_handshake tests/fuzz/fuzz_chan
FUZZ_TESTS = tests/fuzz/check_tcps113.sh tests/fuzz/check_tcps2.sh tests/fuzz/check_native.sh \
	tests/fuzz/check_handshake.sh tests/fuzz/check_chan.sh
EXTRA_DIST += tests/fuzz/README tests/fuzz/corpus tests/fuzz/run-fuzzer.sh \
	tests/fuzz/make-corpus.py $(FUZZ_TESTS)
if ENABLE_FUZZING
check_PROGRAMS += $(FUZZ_TARGETS)
TESTS += $(FUZZ_TESTS)
FUZZ_CFLAGS_ALL = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
FUZZ_LDADD = common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS)
# The TCPStore targets also serve what they decode (kv/tcps_sess.c).
FUZZ_TCPS_LDADD = kv/libkv.la $(FUZZ_LDADD)
tests_fuzz_fuzz_tcps113_SOURCES = tests/fuzz/fuzz_tcps113.c tests/fuzz/tcps_fuzz.h
tests_fuzz_fuzz_tcps113_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_tcps113_LDFLAGS = $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_tcps113_LDADD = $(FUZZ_TCPS_LDADD)
tests_fuzz_fuzz_tcps2_SOURCES = tests/fuzz/fuzz_tcps2.c tests/fuzz/tcps_fuzz.h
tests_fuzz_fuzz_tcps2_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_tcps2_LDFLAGS = $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_tcps2_LDADD = $(FUZZ_TCPS_LDADD)
tests_fuzz_fuzz_native_SOURCES = tests/fuzz/fuzz_native.c
tests_fuzz_fuzz_native_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_native_LDFLAGS = $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_native_LDADD = $(FUZZ_LDADD)
tests_fuzz_fuzz_handshake_SOURCES = tests/fuzz/fuzz_handshake.c tests/lib/hs_nonce.h
tests_fuzz_fuzz_handshake_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests/lib
tests_fuzz_fuzz_handshake_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_handshake_LDFLAGS = $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_handshake_LDADD = $(FUZZ_LDADD)
# The worker <-> agent channel's codec (common/chan.c), both ways.
tests_fuzz_fuzz_chan_SOURCES = tests/fuzz/fuzz_chan.c
tests_fuzz_fuzz_chan_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_chan_LDFLAGS = $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_chan_LDADD = $(FUZZ_LDADD)
endif
