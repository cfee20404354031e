# SPDX-License-Identifier: Apache-2.0
# man/: the manual pages (mdoc), written from each program's --help;
# tests/integ/ctl_docs.py checks they are lint-clean and complete.
# The pages name the paths of a system install (/etc/rdzv/...); those
# installed, built in man/configured/ (systemd/local.mk's rdzv_paths),
# name the configured ones.
RDZV_MANS = man/configured/rdzvd.8 man/configured/rdzv-agent.1 \
	man/configured/rdzvctl.1
man_MANS = $(RDZV_MANS)
EXTRA_DIST += man/rdzvd.8 man/rdzv-agent.1 man/rdzvctl.1
CLEANFILES += $(RDZV_MANS)
man/configured/rdzvd.8: $(srcdir)/man/rdzvd.8
man/configured/rdzv-agent.1: $(srcdir)/man/rdzv-agent.1
man/configured/rdzvctl.1: $(srcdir)/man/rdzvctl.1
