# tests/fuzz/: libFuzzer targets, one per decoder.  With --enable-fuzzing
# they are built as check programs and `make check` runs each briefly over
# its seed corpus (tests/fuzz/run-fuzzer.sh).
FUZZ_TARGETS = tests/fuzz/fuzz_tcps113 tests/fuzz/fuzz_tcps2 tests/fuzz/fuzz_native
EXTRA_DIST += tests/fuzz/README tests/fuzz/corpus tests/fuzz/run-fuzzer.sh
if ENABLE_FUZZING
check_PROGRAMS += $(FUZZ_TARGETS)
FUZZ_LDADD = common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS)
tests_fuzz_fuzz_tcps113_SOURCES = tests/fuzz/fuzz_tcps113.c
tests_fuzz_fuzz_tcps113_LDFLAGS = $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_tcps113_LDADD = $(FUZZ_LDADD)
tests_fuzz_fuzz_tcps2_SOURCES = tests/fuzz/fuzz_tcps2.c
tests_fuzz_fuzz_tcps2_LDFLAGS = $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_tcps2_LDADD = $(FUZZ_LDADD)
tests_fuzz_fuzz_native_SOURCES = tests/fuzz/fuzz_native.c
tests_fuzz_fuzz_native_LDFLAGS = $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_native_LDADD = $(FUZZ_LDADD)
FUZZ_TESTS = tests/fuzz/fuzz_tcps113.sh tests/fuzz/fuzz_tcps2.sh tests/fuzz/fuzz_native.sh
endif
