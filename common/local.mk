# SPDX-License-Identifier: Apache-2.0
# common/: pure codecs, logging, errors and the native store client.
noinst_LTLIBRARIES += common/libcommon.la
common_libcommon_la_SOURCES = \
	common/rdzv_err.h common/err.c \
	common/log.h common/log.c \
	common/wire.h common/wire.c common/wire_tcpstore.c common/wire_native.c \
	common/handshake.h common/handshake.c \
	common/connect.h common/connect.c \
	common/client.h common/client.c \
	common/auth.h common/auth.c \
	common/tls.h common/tls.c
common_libcommon_la_SOURCES += common/hostport.h common/hostport.c \
	common/mono.h common/mono.c common/chan.h common/chan.c common/chan_recv.c
common_libcommon_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(LIBCRYPTO_CFLAGS) $(LIBSSL_CFLAGS)
common_libcommon_la_LIBADD = $(LIBEVENT_LIBS) $(LIBBSD_LIBS) $(LIBSSL_LIBS) $(LIBCRYPTO_LIBS)
EXTRA_DIST += common/PROTOCOL.md
