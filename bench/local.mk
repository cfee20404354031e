# bench/: load generators and the scripts that run them beside their peers.
noinst_PROGRAMS += bench/storeload
bench_storeload_SOURCES = bench/storeload.c
bench_storeload_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
bench_storeload_LDADD = common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS) -lm
