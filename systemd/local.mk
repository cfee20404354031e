# SPDX-License-Identifier: Apache-2.0
# systemd/: the units for rdzvd and rdzv-agent (issue 5), and etc/: the
# configuration files they read, installed under $(sysconfdir)/rdzv.
# The units' paths are filled in at make time, so `make prefix=...` and
# DESTDIR installs get units that point at the installed programs.
SYSTEMD_UNITS = systemd/rdzvd.service systemd/rdzv-agent@.service
EXTRA_DIST += systemd/rdzvd.service.in systemd/rdzv-agent@.service.in \
	systemd/rdzvd-etcd.conf.in
CLEANFILES += $(SYSTEMD_UNITS) systemd/rdzvd-etcd.conf
# The three-host layout on etcd: a drop-in for rdzvd.service, not
# installed as one (it would turn every rdzvd to etcd); its copy goes to
# the documentation, to be put in /etc/systemd/system/rdzvd.service.d/.
rdzvdocexdir = $(docdir)/examples
rdzvdocex_DATA = systemd/rdzvd-etcd.conf
if HAVE_SYSTEMD_UNITS
systemdsystemunit_DATA = $(SYSTEMD_UNITS)
else
# Still built: the tests check them.
noinst_DATA = $(SYSTEMD_UNITS)
endif

rdzv_edit = $(SED) -e 's|@sbindir[@]|$(sbindir)|g' \
	-e 's|@bindir[@]|$(bindir)|g' -e 's|@sysconfdir[@]|$(sysconfdir)|g'
systemd/rdzvd.service: $(srcdir)/systemd/rdzvd.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && rm -f $@ $@.tmp && \
	$(rdzv_edit) $(srcdir)/systemd/rdzvd.service.in > $@.tmp && mv $@.tmp $@
systemd/rdzvd-etcd.conf: $(srcdir)/systemd/rdzvd-etcd.conf.in Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && rm -f $@ $@.tmp && \
	$(rdzv_edit) $(srcdir)/systemd/rdzvd-etcd.conf.in > $@.tmp && \
	mv $@.tmp $@
systemd/rdzv-agent@.service: $(srcdir)/systemd/rdzv-agent@.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && rm -f $@ $@.tmp && \
	$(rdzv_edit) $(srcdir)/systemd/rdzv-agent@.service.in > $@.tmp && \
	mv $@.tmp $@

# rdzvd.conf and agent.conf (the template of agent-JOB.conf), every key
# documented in the file.
rdzvconfdir = $(sysconfdir)/rdzv
dist_rdzvconf_DATA = etc/rdzvd.conf etc/agent.conf etc/rdzvd-etcd.conf

# The other way to run rdzv as a service: examples/k8s (Kubernetes).
EXTRA_DIST += examples/k8s/README.md examples/k8s/rdzvd.yaml \
	examples/k8s/agents.yaml examples/k8s/kustomization.yaml \
	examples/k8s/Dockerfile examples/k8s/ha/etcd.yaml \
	examples/k8s/ha/rdzvd.yaml examples/k8s/ha/kustomization.yaml

# make distcheck installs as a user into a scratch prefix: the units too.
AM_DISTCHECK_CONFIGURE_FLAGS = \
	--with-systemdsystemunitdir='$$dc_install_base/lib/systemd/system'
