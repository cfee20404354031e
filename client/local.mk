# SPDX-License-Identifier: Apache-2.0
# client/: rdzvctl, the operator's command line (issue 5).  Connections
# (TLS included) and requests go through common/client.c; the operator
# ops, which it has no calls of their own for, are framed with
# common/wire.h in ctl_conn.c and sent with rdzv_client_call().
bin_PROGRAMS += client/rdzvctl
client_rdzvctl_SOURCES = client/ctl.h client/rdzvctl.c client/cmd_admin.c \
	client/cmd_jobs.c client/cmd_kv.c client/ctl_conn.c client/ctl_fmt.c
client_rdzvctl_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
client_rdzvctl_LDADD = common/libcommon.la $(JANSSON_LIBS) $(LIBEVENT_LIBS) \
	$(LIBBSD_LIBS)
