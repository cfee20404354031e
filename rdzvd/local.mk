# SPDX-License-Identifier: Apache-2.0
# rdzvd/: the rendezvous daemon.  The rendezvous state machine and the
# store with its sqlite and etcd backends (rdzv*.c, store*.c, etcd.c) are
# librdzvstate, a convenience library of their own on kv/libkv (the kv core) so unit tests link them without
# the server; the server is librdzvd (everything but main()), which
# rdzv-agent also links for --standalone (embed.h).
noinst_LTLIBRARIES += rdzvd/librdzvstate.la rdzvd/librdzvd.la
rdzvd_librdzvstate_la_SOURCES = rdzvd/store.h rdzvd/store_impl.h \
	rdzvd/store.c rdzvd/store_sqlite.c rdzvd/store_etcd.c \
	rdzvd/etcd.h rdzvd/etcd.c rdzvd/rdzv.h rdzvd/rdzv_impl.h rdzvd/rdzv.c \
	rdzvd/rdzv_repair.c rdzvd/rdzv_elastic.c rdzvd/rdzv_rows.c \
	rdzvd/rdzv_retain.c rdzvd/straggler.h rdzvd/straggler.c \
	rdzvd/rdzv_strag.c rdzvd/rdzv_topo.c
rdzvd_librdzvstate_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(SQLITE3_CFLAGS) $(JANSSON_CFLAGS) $(LIBCURL_CFLAGS) $(LIBCRYPTO_CFLAGS)
rdzvd_librdzvstate_la_LIBADD = kv/libkv.la common/libcommon.la $(LIBEVENT_LIBS) $(SQLITE3_LIBS) $(JANSSON_LIBS) $(LIBCURL_LIBS) $(LIBCRYPTO_LIBS) $(LIBSYSTEMD_LIBS)

rdzvd_librdzvd_la_SOURCES = \
	rdzvd/rdzvd.h rdzvd/embed.h rdzvd/serve.c rdzvd/config.c \
	rdzvd/server.c rdzvd/proto_tcpstore.c rdzvd/tcps_group.c \
	rdzvd/proto_native.c \
	rdzvd/round.c rdzvd/http.c rdzvd/metrics.c
rdzvd_librdzvd_la_SOURCES += rdzvd/docs.c rdzvd/history.c rdzvd/stragwatch.c
rdzvd_librdzvd_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) $(LIBSYSTEMD_CFLAGS) -DRDZV_STATEDIR='"$(localstatedir)/lib/rdzv"' -DRDZV_SYSCONFDIR='"$(sysconfdir)/rdzv"'
rdzvd_librdzvd_la_LIBADD = rdzvd/librdzvstate.la kv/libkv.la common/libcommon.la $(LIBEVENT_LIBS) $(LIBBSD_LIBS) $(SQLITE3_LIBS) $(JANSSON_LIBS) $(LIBSYSTEMD_LIBS)

sbin_PROGRAMS += rdzvd/rdzvd
rdzvd_rdzvd_SOURCES = rdzvd/rdzvd.c
rdzvd_rdzvd_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
rdzvd_rdzvd_LDADD = rdzvd/librdzvd.la
