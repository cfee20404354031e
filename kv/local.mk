# SPDX-License-Identifier: Apache-2.0
# kv/: the pure core below every program that serves a store.  libkv holds
# the kv core (kv.c: no I/O, no clock) and the one mapping of TCPStore
# requests onto it (tcps_sess.c).  Layers, each knowing only those below:
#   common/     wire codecs (TCPStore, native), log, errors
#   kv/         kv core + TCPStore op -> kv mapping       (this library)
#   rdzvd/      rdzvd's connections, adapters, rendezvous, sqlite
#   libworker/  the TCPStore a rank 0 hosts: a poll() loop on this mapping
# Not installed.  Link common/libcommon.la after it: it is left out of
# LIBADD so that librdzvworker, a shared library that takes both whole,
# gets each object once.  (Not "core/": configure's `rm -f core` would
# trip over a directory of that name.)
noinst_LTLIBRARIES += kv/libkv.la
kv_libkv_la_SOURCES = kv/kv.h kv/kv.c kv/tcps_sess.h kv/tcps_sess.c
kv_libkv_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
