# SPDX-License-Identifier: Apache-2.0
# agent/: rdzv-agent, the per-node elastic agent.  Only sup.c forks;
# main.c is the state machine, rank.c the local ranks and the one way a
# worker starts, rdzv.c the connection to rdzvd, env.c each worker's
# environment, host.c an rdzvd the agent hosts itself.
# librdzvd gives --standalone its in-process rdzvd (rdzvd/embed.h).
bin_PROGRAMS += agent/rdzv-agent
agent_rdzv_agent_SOURCES = \
	agent/agent.h agent/main.c agent/cli.c agent/cli_opts.c agent/env.c \
	agent/host.c agent/rank.c agent/rdzv.c agent/sup.c agent/logs.c \
	agent/progress.c
agent_rdzv_agent_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/rdzvd \
	-DHAVE_RDZVD_EMBED=1
agent_rdzv_agent_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) \
	$(LIBEVENT_OPENSSL_CFLAGS) $(LIBSSL_CFLAGS) $(JANSSON_CFLAGS)
agent_rdzv_agent_LDADD = rdzvd/librdzvd.la common/libcommon.la \
	$(LIBEVENT_OPENSSL_LIBS) $(LIBEVENT_LIBS) $(LIBSSL_LIBS) \
	$(JANSSON_LIBS) $(LIBBSD_LIBS) -lm
