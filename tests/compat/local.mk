# SPDX-License-Identifier: Apache-2.0
# tests/compat/: scripts run against real processes on 127.0.0.1, with the
# real PyTorch clients (Debian's 1.13 and 2.13 from scripts/deps.sh:
# TCPStore, gloo, torchrun) talking to rdzvd.
#
# The longest first (Makefile.am includes this file before the unit and
# integration tests): make -j2 then ends the run on short tests, not with
# one core idle beside a long one.  Times: scripts/test.sh prints them.
#
# FSDP2/HSDP replica groups (python/rdzv/mesh.py) under real agents.
COMPAT_TESTS = tests/compat/test_repair_hsdp.py
# rdzv.progress.report() from a plain torch script: every surface, the
# watchdog.
COMPAT_TESTS += tests/compat/test_plain_jobs.py
COMPAT_TESTS += tests/compat/test_helper_scripts.py
COMPAT_TESTS += tests/compat/test_repair_agent_torch2.py
# In-place repair under a seeded random schedule of kills, rdzvd kill -9
# and SIGSTOPs (two seeds a leg; RDZV_TEST_CHAOS=0 skips it).
COMPAT_TESTS += tests/compat/test_repair_chaos.py
# rdzv.lightning's RepairStrategy: a Lightning job repaired in place.
COMPAT_TESTS += tests/compat/test_lightning_repair.py
# A torch job grows and shrinks in place (nodes join, one leaves on SIGTERM).
COMPAT_TESTS += tests/compat/test_elastic_torch2.py
# rdzv-agent's warm spare (python/rdzv/spare.py) under real agents.
COMPAT_TESTS += tests/compat/test_repair_spare.py
# torchrun's own `rdzv` backend (python/rdzv/torchrun.py) on rdzvd.
COMPAT_TESTS += tests/compat/test_torchrun_backend.py
# torchtitan's HSDP replica groups healed in place (rdzv.torchtitan).
COMPAT_TESTS += tests/compat/test_torchtitan_repair.py
# rdzv.hooks in transformers' Trainer and torchtitan jobs (its start()).
COMPAT_TESTS += tests/compat/test_framework_progress.py
# An Accelerate script repaired in place (examples/accelerate_repair.py).
COMPAT_TESTS += tests/compat/test_accelerate_repair.py
# The shorter ones; test_repair_end_torch2: training that ends while a
# grow round is open; test_repair_waits: rdzv.waits, the wait on peers
# timed, the script's comm hook kept; test_repair_backstop: a gloo call
# a broken group did not end.
COMPAT_TESTS += tests/compat/test_repair_ddp_twin.py \
	tests/compat/test_repair_agent_torch1.py tests/compat/test_repair_torch2.py \
	tests/compat/test_torch2_env.py tests/compat/test_torchrun_dropin.py \
	tests/compat/test_repair_end_torch2.py tests/compat/test_store_semantics.py \
	tests/compat/test_torchrun.py tests/compat/test_torch2_torchrun.py \
	tests/compat/test_repair_torch.py tests/compat/test_tcpstore2_client.py \
	tests/compat/test_tcpstore_client.py tests/compat/test_gloo_pg.py \
	tests/compat/test_repair_data.py tests/compat/test_repair_state.py \
	tests/compat/test_repair_waits.py tests/compat/test_repair_backstop.py
TESTS += $(COMPAT_TESTS)
EXTRA_DIST += $(COMPAT_TESTS) tests/compat/compatlib.py
# test_repair_torch's fake agent, tests/lib/fakeagent.py, is listed in
# tests/integ/local.mk (repair_c.py shares it).
# compatlib.py sits next to the tests, so python finds it by the script's
# own directory; PYTHONPATH (tests/lib) carries rdzvtest.
# The torchtitan jobs' CPU shim, tokenizer and text.
EXTRA_DIST += tests/compat/titanlib.py
