# SPDX-License-Identifier: Apache-2.0
"""rdzv: Python helpers shipped with the rdzv launcher.

rdzv.repair lets a torch DDP script repair in place under rdzv-agent:
survivors of a worker's death keep their processes and go on in a smaller
group, a replacement joins at a step boundary and receives the state;
rdzv.lightning's RepairStrategy does the same for a Lightning script.
rdzv.spare is rdzv-agent's warm spare: a python that has imported torch
and takes a dead worker's rank when the agent hands it over.
rdzv.torchrun is torchrun's own `rdzv` rendezvous backend (registered
under its `torchrun.handlers` entry points): rdzvd keeps the rendezvous of
an unmodified torchrun; rdzv.native is its client of rdzvd's protocol.
"""
