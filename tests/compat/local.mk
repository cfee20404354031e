# tests/compat/: scripts run against real processes on 127.0.0.1.
COMPAT_TESTS =
TESTS += $(COMPAT_TESTS)
EXTRA_DIST += $(COMPAT_TESTS)
