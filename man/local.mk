# SPDX-License-Identifier: Apache-2.0
# man/: the manual pages (mdoc), written from each program's --help;
# tests/integ/ctl_docs.py checks they are lint-clean and complete.
dist_man_MANS = man/rdzvd.8 man/rdzv-agent.1 man/rdzvctl.1
