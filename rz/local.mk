# SPDX-License-Identifier: Apache-2.0
# rz/: the rendezvous machine, librz.  The server-side state machine
# (rz*.c: jobs, rounds, repair, joining in place, rows, retention,
# replica groups, stragglers' rules) and the straggler detector
# (straggler.c), pure: no I/O, no clock, no store.  It sits on kv/ and
# common/ alone: rdzvd/ (librdzvd, and the agent's embedded rdzvd
# through it) drives it and writes its rows; the store's journal and
# backends (rdzvd/store*.c, etcd.c) are not linked here, so the unit
# tests of rz (tests/unit/test_rdzv, test_straggler) link neither sqlite
# nor libcurl.  Like kv/libkv, common/libcommon is left out of LIBADD:
# link it after.
noinst_LTLIBRARIES += rz/librz.la
rz_librz_la_SOURCES = rz/rz.h rz/rz_impl.h rz/rz.c rz/rz_repair.c \
	rz/rz_elastic.c rz/rz_rows.c rz/rz_retain.c rz/rz_strag.c \
	rz/rz_topo.c rz/straggler.h rz/straggler.c
rz_librz_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
rz_librz_la_LIBADD = kv/libkv.la $(JANSSON_LIBS)
