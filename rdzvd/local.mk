# rdzvd/: the rendezvous daemon.  The kv core and store are also built as a
# convenience library so unit tests link them without main().
noinst_LTLIBRARIES += rdzvd/libkv.la
rdzvd_libkv_la_SOURCES = rdzvd/kv.h rdzvd/kv.c rdzvd/store.h rdzvd/store.c
rdzvd_libkv_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(SQLITE3_CFLAGS)
rdzvd_libkv_la_LIBADD = common/libcommon.la $(LIBEVENT_LIBS) $(SQLITE3_LIBS)

sbin_PROGRAMS += rdzvd/rdzvd
rdzvd_rdzvd_SOURCES = \
	rdzvd/rdzvd.h rdzvd/rdzvd.c rdzvd/config.c rdzvd/server.c \
	rdzvd/proto_tcpstore.c rdzvd/proto_native.c \
	rdzvd/http.c rdzvd/metrics.c
rdzvd_rdzvd_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) -DRDZV_STATEDIR='"$(localstatedir)/lib/rdzv"' -DRDZV_SYSCONFDIR='"$(sysconfdir)/rdzv"'
rdzvd_rdzvd_LDADD = rdzvd/libkv.la common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS) $(SQLITE3_LIBS)
