#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# torchrun_script.sh: the script PyTorch's documentation gives torchrun
# users on Slurm, with the word torchrun replaced by rdzv-agent and nothing
# else changed.  Run on every node of an allocation:
#
#   srun --nodes=2 ./torchrun_script.sh
#
# The agent on the first node hosts the c10d rendezvous on port 29400 (as
# torchrun's would), the others join it; elastic_ddp.py sits beside this
# script.  Any arguments go to elastic_ddp.py.
export MASTER_ADDR=$(scontrol show hostname ${SLURM_NODELIST} | head -n 1)
rdzv-agent --nnodes=2 --nproc_per_node=1 --rdzv_id=100 --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:29400 elastic_ddp.py "$@"
