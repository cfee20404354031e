# bench/: load generators and the scripts that run them beside their peers.
noinst_PROGRAMS += bench/storeload bench/client_check
bench_storeload_SOURCES = bench/storeload.c
bench_storeload_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
bench_storeload_LDADD = common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS) -lm
# Exercises every call of common/client.h against a running rdzvd.
bench_client_check_SOURCES = bench/client_check.c
bench_client_check_LDADD = common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS)
EXTRA_DIST += bench/README.md bench/RESULTS.md bench/torch_store_server.py bench/store_vs_torch.sh
