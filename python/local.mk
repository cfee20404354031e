# SPDX-License-Identifier: Apache-2.0
# python/: rdzv.repair, the pure-Python helper that lets torch DDP
# programs repair in place (see python/rdzv/repair.py).  `make install`
# puts it in the site directory configure found (pythondir, of
# TORCH_PYTHON or PYTHON=); python/pyproject.toml makes
# `pip install ./python` do the same for any other interpreter.
RDZV_PY = python/rdzv/__init__.py python/rdzv/repair.py \
	python/rdzv/channel.py python/rdzv/collectives.py python/rdzv/data.py \
	python/rdzv/group.py python/rdzv/log.py python/rdzv/state.py \
	python/rdzv/watcher.py python/rdzv/spare.py python/rdzv/waits.py
# rdzv.mesh: FSDP2/HSDP replica groups (python/rdzv/mesh.py).
RDZV_PY += python/rdzv/mesh.py
# rdzv.progress: any job's steps to the agent and rdzvd, no repair needed.
RDZV_PY += python/rdzv/progress.py python/rdzv/hooks.py
# rdzv.torchtitan: torchtitan's HSDP replica groups healed in place.
RDZV_PY += python/rdzv/torchtitan.py
# rdzv.lightning: a Lightning job repaired in place (its RepairStrategy).
RDZV_PY += python/rdzv/lightning.py
# rdzv.accelerate: an Accelerate script repaired in place (its Accelerator).
RDZV_PY += python/rdzv/accelerate.py
# torchrun's `rdzv` rendezvous backend on rdzvd, and its native client.
RDZV_PY += python/rdzv/torchrun.py python/rdzv/native.py
# rdzv.checkpoint: DCP checkpoints of a repairing job (rdzv.repair imports it).
RDZV_PY += python/rdzv/checkpoint.py
if HAVE_PYTHON
rdzvpydir = $(pythondir)/rdzv
rdzvpy_PYTHON = $(RDZV_PY)
endif
EXTRA_DIST += $(RDZV_PY) python/pyproject.toml examples/torch_ddp_repair.py \
	examples/torch_plain_ddp.py examples/torch_repair_ddp.py \
	examples/torch_hsdp_repair.py
# Accelerate repaired in place: the plain script and its twin.
EXTRA_DIST += examples/accelerate_plain.py examples/accelerate_repair.py
