# SPDX-License-Identifier: Apache-2.0
# rdzvd/: the rendezvous daemon.  The store's journal (store.c) is
# librdzvstate, a convenience library of its own on rz/librz (the
# rendezvous machine) and kv/libkv (the kv core) so unit tests link it
# without the server; the server is librdzvd (everything but main()),
# which rdzv-agent also links for --standalone (embed.h).  The store's
# backends, sqlite and etcd (store_sqlite.c, store_etcd.c, etcd.c), are
# libbackends, linked by rdzvd alone: the agent's embedded rdzvd keeps
# its state in memory, so rdzv-agent needs neither sqlite nor libcurl.
noinst_LTLIBRARIES += rdzvd/librdzvstate.la rdzvd/librdzvd.la \
	rdzvd/libbackends.la
rdzvd_libbackends_la_SOURCES = rdzvd/store_sqlite.c rdzvd/store_etcd.c \
	rdzvd/etcd.h rdzvd/etcd.c
rdzvd_libbackends_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(SQLITE3_CFLAGS) $(JANSSON_CFLAGS) $(LIBCURL_CFLAGS) $(LIBCRYPTO_CFLAGS)
rdzvd_libbackends_la_LIBADD = $(SQLITE3_LIBS) $(JANSSON_LIBS) $(LIBCURL_LIBS) $(LIBCRYPTO_LIBS)
rdzvd_librdzvstate_la_SOURCES = rdzvd/store.h rdzvd/store_impl.h \
	rdzvd/store.c rdzvd/etcd.h
rdzvd_librdzvstate_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) $(LIBCRYPTO_CFLAGS)
rdzvd_librdzvstate_la_LIBADD = rz/librz.la kv/libkv.la common/libcommon.la $(LIBEVENT_LIBS) $(JANSSON_LIBS) $(LIBCRYPTO_LIBS) $(LIBSYSTEMD_LIBS)

rdzvd_librdzvd_la_SOURCES = \
	rdzvd/rdzvd.h rdzvd/embed.h rdzvd/serve.c rdzvd/config.c \
	rdzvd/server.c rdzvd/server_impl.h rdzvd/server_tls.c \
	rdzvd/proto_tcpstore.c rdzvd/tcps_group.c \
	rdzvd/proto_native.c \
	rdzvd/round.c rdzvd/http.c rdzvd/metrics.c
rdzvd_librdzvd_la_SOURCES += rdzvd/docs.c rdzvd/history.c rdzvd/progwatch.c
rdzvd_librdzvd_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(LIBEVENT_OPENSSL_CFLAGS) $(JANSSON_CFLAGS) $(LIBSYSTEMD_CFLAGS) -DRDZV_STATEDIR='"$(localstatedir)/lib/rdzv"' -DRDZV_SYSCONFDIR='"$(sysconfdir)/rdzv"'
rdzvd_librdzvd_la_LIBADD = rdzvd/librdzvstate.la kv/libkv.la common/libcommon.la $(LIBEVENT_OPENSSL_LIBS) $(LIBEVENT_LIBS) $(LIBBSD_LIBS) $(JANSSON_LIBS) $(LIBSYSTEMD_LIBS)

sbin_PROGRAMS += rdzvd/rdzvd
rdzvd_rdzvd_SOURCES = rdzvd/rdzvd.c
rdzvd_rdzvd_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
rdzvd_rdzvd_LDADD = rdzvd/libbackends.la rdzvd/librdzvd.la
