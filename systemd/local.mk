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
noinst_DATA =
if HAVE_SYSTEMD_UNITS
systemdsystemunit_DATA = $(SYSTEMD_UNITS)
else
# Still built: the tests check them.
noinst_DATA += $(SYSTEMD_UNITS)
endif

rdzv_edit = $(SED) -e 's|@sbindir[@]|$(sbindir)|g' \
	-e 's|@bindir[@]|$(bindir)|g' -e 's|@sysconfdir[@]|$(sysconfdir)|g' \
	-e 's|@localstatedir[@]|$(localstatedir)|g'
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
# documented in the file.  Like the man pages (man/local.mk), the files in
# etc/ name the paths of a system install, /etc/rdzv and
# /var/lib/rdzv/rdzvd.db; the copies built in etc/configured/, which are
# installed, name the configured ones (rdzv_paths).
rdzvconfdir = $(sysconfdir)/rdzv
# rdzvd's default --db is in it; make install creates it.
rdzvstatedir = $(localstatedir)/lib/rdzv
RDZV_CONFS = etc/configured/rdzvd.conf etc/configured/agent.conf \
	etc/configured/rdzvd-etcd.conf
EXTRA_DIST += etc/rdzvd.conf etc/agent.conf etc/rdzvd-etcd.conf
noinst_DATA += $(RDZV_CONFS)
CLEANFILES += $(RDZV_CONFS)
rdzv_paths = $(SED) -e 's|/etc/rdzv/|$(sysconfdir)/rdzv/|g' \
	-e 's|/var/lib/rdzv/rdzvd\.db|$(rdzvstatedir)/rdzvd.db|g'
# The source of etc/configured/F or man/configured/F is etc/F or man/F.
$(RDZV_CONFS) $(RDZV_MANS): Makefile
	$(AM_V_GEN)$(MKDIR_P) `dirname $@` && rm -f $@ $@.tmp && \
	$(rdzv_paths) $(srcdir)/`echo $@ | $(SED) 's|/configured/|/|'` \
	    > $@.tmp && mv $@.tmp $@
etc/configured/rdzvd.conf: $(srcdir)/etc/rdzvd.conf
etc/configured/agent.conf: $(srcdir)/etc/agent.conf
etc/configured/rdzvd-etcd.conf: $(srcdir)/etc/rdzvd-etcd.conf

# A second make install keeps an edited configuration file: a file is
# installed only where none is or where it is the same; beside one that
# differs, the new one goes in as FILE.new.  make uninstall removes a
# file only if it is the one installed, never the database.
install-data-local: $(RDZV_CONFS)
	$(MKDIR_P) '$(DESTDIR)$(rdzvconfdir)' '$(DESTDIR)$(rdzvstatedir)'
	@for f in $(RDZV_CONFS); do \
	  d='$(DESTDIR)$(rdzvconfdir)'/`basename $$f`; \
	  if test ! -f "$$d" || cmp -s "$$f" "$$d"; then \
	    echo " $(INSTALL_DATA) $$f '$$d'"; \
	    $(INSTALL_DATA) "$$f" "$$d" || exit 1; rm -f "$$d.new"; \
	  else \
	    echo "$$d: changed since installed, kept; the new one is $$d.new"; \
	    $(INSTALL_DATA) "$$f" "$$d.new" || exit 1; \
	  fi; \
	done
uninstall-local:
	@for f in $(RDZV_CONFS); do \
	  d='$(DESTDIR)$(rdzvconfdir)'/`basename $$f`; \
	  rm -f "$$d.new"; \
	  if test -f "$$d" && ! cmp -s "$$f" "$$d"; then \
	    echo "$$d: changed since installed, kept"; \
	  else \
	    rm -f "$$d"; \
	  fi; \
	done
	@rmdir '$(DESTDIR)$(rdzvstatedir)' 2>/dev/null || :

# The other way to run rdzv as a service: examples/k8s (Kubernetes).
EXTRA_DIST += examples/k8s/README.md examples/k8s/rdzvd.yaml \
	examples/k8s/agents.yaml examples/k8s/kustomization.yaml \
	examples/k8s/Dockerfile examples/k8s/runtime-packages.sh \
	examples/k8s/ha/etcd.yaml \
	examples/k8s/ha/rdzvd.yaml examples/k8s/ha/kustomization.yaml

# make distcheck installs as a user into a scratch prefix: the units too.
AM_DISTCHECK_CONFIGURE_FLAGS = \
	--with-systemdsystemunitdir='$$dc_install_base/lib/systemd/system'
