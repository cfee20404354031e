# tests/integ/: scripts run against real processes on 127.0.0.1.
INTEG_TESTS =
TESTS += $(INTEG_TESTS)
EXTRA_DIST += $(INTEG_TESTS)
