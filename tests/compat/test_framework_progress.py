# SPDX-License-Identifier: Apache-2.0
"""test_framework_progress: rdzv.hooks' ready-made hooks for
transformers' Trainer and torchtitan, in real jobs of each framework (torch
2.13, CPU, gloo) under a real rdzv-agent of two workers and a real rdzvd.
test_plain_jobs runs the plain script, Lightning and Accelerate jobs the
same way, with its start() and finish().

- A transformers Trainer job (a tiny GPT-2 made from its config, data
  in memory) with callbacks=[rdzv.hooks.TransformersProgress()]: its
  steps on every surface (`rdzvctl members`, `top`, the status page's
  history, /metrics).
- A torchtitan job (its llama3 debug model, a word-level tokenizer and a
  few lines of text written by the test) run by torchtitan's own main
  through a config function that returns rdzv.hooks.TorchtitanProgress's
  Config: its steps on every surface too.

Neither job touches the network (HF_HUB_OFFLINE and friends, HF_HOME in
the test's directory).  Each trains until DIR/finish exists, never for a
set time.  A framework that does not import skips its test, visibly;
under RDZV_REQUIRE_TORCH=1 (CI) it fails it.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integ"))
import compatlib                                        # noqa: E402
compatlib.python_layer("transformers' and torchtitan's progress hooks")
compatlib.use_torch2()

import rdzvtest as rt                                   # noqa: E402
from agent_lib import RECORD, Scope                     # noqa: E402
from compatlib import torch_surfaces                    # noqa: E402
from test_plain_jobs import finish, start               # noqa: E402
from titanlib import SHIM, torchtitan_assets            # noqa: E402


def offline(s):
    """The env that keeps Hugging Face's libraries off the network and
    their caches in the test's directory."""
    return {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_HOME": os.path.join(s.tmp, "hf"),
            "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}


need = compatlib.need_module  # (test_torchtitan_repair imports it)


def surfaces_of(module, job, program, assets=None):
    """Job `job` of one agent of two workers running program (offline,
    with assets(DIR) written first) on a new rdzvd: its steps on every
    surface (torch_surfaces).  Skips visibly without module."""
    if not need(module):
        return
    d = rt.Rdzvd()
    with Scope("progress-%s-" % job) as s:
        if assets is not None:
            assets(s.tmp)
        agents = start(s, d, job, report=False, program=program,
                       restarts=0, nodes=1, env=offline(s))
        torch_surfaces(d, job, world=2)
        finish(s, agents)
    d.stop()


# transformers' Trainer on a 1-layer GPT-2 of 16 dims made from its config
# (no download), reporting through rdzv.hooks.TransformersProgress; Until
# stops it once DIR/finish exists (any rank's view, a MAX all-reduce) and
# records each rank's pid at step 3.
TRANSFORMERS = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
from transformers import (GPT2Config, GPT2LMHeadModel, Trainer,
                          TrainerCallback, TrainingArguments)
from rdzv.hooks import TransformersProgress

d = sys.argv[1]
''' + RECORD + r'''


class Tokens(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 64, (256, 16), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class Until(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        stop = torch.tensor([float(os.path.exists(os.path.join(d, "finish")))])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item() > 0 and state.global_step >= 5:
            control.should_training_stop = True
        if state.global_step == 3:
            record("running.%s.%s" % (os.environ["TORCHELASTIC_RESTART_COUNT"],
                                      os.environ["RANK"]), {"pid": os.getpid()})
        time.sleep(0.02)


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16,
                                   n_layer=1, n_head=2, bos_token_id=0,
                                   eos_token_id=0))
args = TrainingArguments(output_dir=os.path.join(d, "out"), use_cpu=True,
                         ddp_backend="gloo", ddp_find_unused_parameters=False,
                         per_device_train_batch_size=4, max_steps=10 ** 6,
                         learning_rate=1e-3, report_to="none",
                         save_strategy="no", logging_strategy="no",
                         disable_tqdm=True, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=Tokens(),
        callbacks=[TransformersProgress(), Until()]).train()
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)        # torch's gloo may abort a finalizing process
'''


def test_transformers_job_on_every_surface():
    """A transformers Trainer job with rdzv.hooks.TransformersProgress:
    its steps where operators look."""
    surfaces_of("transformers", "hf", TRANSFORMERS)


# torchtitan's own main (torchtitan.train.main) with --module train
# --config rdzv_debug: this file, imported again as the module "train",
# gives the config function, its llama3 debug model on the test's
# tokenizer and text, its Trainer rdzv.hooks.TorchtitanProgress (Until
# adds the test's gate).  DDP (replicate) on gloo, 32 tokens a sample, on a
# CPU through titanlib's SHIM.
TORCHTITAN = SHIM + r'''
from dataclasses import dataclass                                 # noqa: E402
import torch.distributed as dist                                  # noqa: E402
from rdzv.hooks import TorchtitanProgress                         # noqa: E402

d = os.path.dirname(os.path.abspath(__file__))
''' + RECORD + r'''


class Until(TorchtitanProgress):
    @dataclass(kw_only=True, slots=True)
    class Config(TorchtitanProgress.Config):
        pass

    def should_continue_training(self):
        stop = torch.tensor([float(os.path.exists(os.path.join(d, "finish")))])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if self.step == 3:
            record("running.%s.%s" % (os.environ["TORCHELASTIC_RESTART_COUNT"],
                                      os.environ["RANK"]), {"pid": os.getpid()})
        time.sleep(0.05)        # the surfaces need steps, not speed
        return not (stop.item() > 0 and self.step >= 5)


def rdzv_debug():
    c = debug_config(Until.Config)
    c.training.steps = 10 ** 6
    c.parallelism.data_parallel_shard_degree = 1
    c.parallelism.data_parallel_replicate_degree = int(os.environ["WORLD_SIZE"])
    c.checkpoint.enable = False
    c.validator.enable = False
    c.metrics.log_freq = 10 ** 6
    return c


if __name__ == "__main__":
    from torchtitan.train import main
    sys.argv[1:] = ["--module", "train", "--config", "rdzv_debug"]
    main()
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)
'''

def test_torchtitan_job_on_every_surface():
    """A torchtitan job whose Trainer is rdzv.hooks.TorchtitanProgress:
    its steps where operators look."""
    surfaces_of("torchtitan", "titan", TORCHTITAN, torchtitan_assets)


if __name__ == "__main__":
    rt.main(globals(), per_test=150.0, total=300.0)
