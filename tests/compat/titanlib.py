# SPDX-License-Identifier: Apache-2.0
"""titanlib: what the torchtitan jobs of the compat tests share: the shim
that runs torchtitan 0.3 on a CPU with gloo (SHIM, the start of a
program's text) and the job's word-level tokenizer and text
(torchtitan_assets)."""

import json
import os
import random

# The shim, for torchtitan 0.3 on a CPU: torchtitan takes "cuda" when no
# accelerator is found; FlexAttention cannot run a backward on CPU in
# eager mode (causal SDPA stands in); torch.cpu lacks what its memory
# monitor asks; its expert-parallel kernels import triton, which torch's
# CPU build lacks (a dense model never runs them); after step 1 it
# shortens its groups' timeouts behind a barrier on device "cpu", which
# gloo refuses (they keep their length); the document masks it builds
# for FlexAttention each step (a compiled create_block_mask, minutes of
# C++ builds on a busy CPU) are for the attention the SDPA replaced, so
# none is built.
SHIM = r'''
import json, os, sys, time, types
import torch
import torch.nn.functional as F

torch._utils._get_available_device_type = lambda: "cpu"
for name, fn in {"get_device_name": lambda d=None: "cpu",
                 "get_device_properties": lambda d=None: types.SimpleNamespace(
                     total_memory=1 << 34),
                 "reset_peak_memory_stats": lambda d=None: None,
                 "empty_cache": lambda: None,
                 "memory_stats": lambda d=None: {}}.items():
    if not hasattr(torch.cpu, name):
        setattr(torch.cpu, name, fn)


class Inert(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *a, **kw):
        return self


KERNELS = "torchtitan.distributed.minimal_async_ep.kernels"
sys.modules.setdefault(KERNELS, Inert(KERNELS))

from torchtitan.distributed import utils as dist_utils            # noqa: E402
from torchtitan.models.common.attention import FlexAttention      # noqa: E402
from torchtitan.models.common.decoder import Decoder              # noqa: E402


def causal_sdpa(self, q_BLNH, k_BLNH, v_BLNH, *, scale=None,
                enable_gqa=False, **kw):
    out = F.scaled_dot_product_attention(
        q_BLNH.transpose(1, 2), k_BLNH.transpose(1, 2),
        v_BLNH.transpose(1, 2), scale=scale, is_causal=True,
        enable_gqa=enable_gqa)
    return out.transpose(1, 2)


FlexAttention.forward = causal_sdpa
Decoder.get_attention_masks = lambda self, positions: None
dist_utils.set_pg_timeouts = lambda **kw: None



def debug_config(trainer_config):
    """torchtitan's llama3 debug model as the tests run it: derived into
    trainer_config, the test's tokenizer and text (beside this file),
    32 tokens a sample, 2 samples a rank, the partial_dtensor backend."""
    from torchtitan.config.override import derive
    from torchtitan.models.llama3.config_registry import llama3_debugmodel
    d = os.path.dirname(os.path.abspath(__file__))
    c = derive(llama3_debugmodel(), trainer_config)
    c.hf_assets_path = os.path.join(d, "tokenizer")
    c.dump_folder = os.path.join(d, "outputs")
    c.dataloader.dataset_path = os.path.join(d, "text")
    c.training.seq_len = 32
    c.training.local_batch_size = 2
    c.parallelism.spmd_backend = "partial_dtensor"
    return c
'''

# The words of the torchtitan job's tokenizer and text.
WORDS = ("the a of to and in is on for with rank step train model data "
         "loss").split()


def torchtitan_assets(tmp, lines=64):
    """A word-level tokenizer (DIR/tokenizer/tokenizer.json) and a json
    text set (DIR/text) of lines lines for the torchtitan job.  Each line
    is its own (seeded by its number): a word follows the one before it
    by a fixed rule 7 times in 10, else it is drawn at random, so ranks
    that read different lines train on different tokens and the loss has
    something to learn and a floor above 0."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>"] + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    os.makedirs(os.path.join(tmp, "tokenizer"))
    tok.save(os.path.join(tmp, "tokenizer", "tokenizer.json"))
    os.makedirs(os.path.join(tmp, "text"))
    with open(os.path.join(tmp, "text", "train.json"), "w") as f:
        for i in range(lines):
            rng, n = random.Random(i), len(WORDS)
            w, words = rng.randrange(n), []
            for _ in range(40):
                words.append(WORDS[w])
                w = (w * 5 + 3) % n if rng.random() < 0.7 else rng.randrange(n)
            f.write(json.dumps({"text": " ".join(words)}) + "\n")
