# SPDX-License-Identifier: Apache-2.0
"""rdzv.hooks: ready-made progress hooks for training frameworks.

Each reports the framework's optimizer step through rdzv.progress, so a
framework's job under rdzv-agent shows its steps in `rdzvctl members`,
`top`, the status page and the metrics, and the agent's
--progress_timeout catches a rank that hangs:

    # Lightning
    from rdzv.hooks import LightningProgress
    trainer = Trainer(..., callbacks=[LightningProgress()])

    # transformers' Trainer
    from rdzv.hooks import TransformersProgress
    trainer = Trainer(..., callbacks=[TransformersProgress()])

    # torchtitan: its Trainer with a step hook, named by the config
    # function that --module/--config choose
    from rdzv.hooks import TorchtitanProgress
    from torchtitan.config.override import derive
    def my_run():
        return derive(llama3_8b(), TorchtitanProgress.Config)

    # Accelerate, any loop of your own: one call a step
    from rdzv import progress
    progress.report(step)

A hook's class is made when it is first named (module __getattr__), so
importing rdzv.hooks needs none of the frameworks.  A Lightning job that
repairs in place (rdzv.lightning.RepairStrategy) needs no hook: the
repair helper reports its committed steps, and LightningProgress beside
it stays quiet (rdzv.progress.report does nothing under the helper).
"""

from . import progress

# The names are made by __getattr__.
__all__ = ["LightningProgress", "TorchtitanProgress",  # noqa: F822
    "TransformersProgress"]


def _lightning_progress():
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        from pytorch_lightning.callbacks import Callback

    class LightningProgress(Callback):
        """A Lightning Callback: reports trainer.global_step (optimizer
        steps done) after each training batch, and the end of training
        (progress.done())."""

        def on_train_batch_end(self, trainer, pl_module, outputs,
            batch, batch_idx):
            progress.report(trainer.global_step)

        def on_train_end(self, trainer, pl_module):
            progress.done()

    return LightningProgress


def _transformers_progress():
    from transformers import TrainerCallback

    class TransformersProgress(TrainerCallback):
        """A transformers TrainerCallback: reports state.global_step
        after each optimizer step, and the end of training
        (progress.done())."""

        def on_step_end(self, args, state, control, **kwargs):
            progress.report(state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            progress.done()

    return TransformersProgress


def _torchtitan_progress():
    from dataclasses import dataclass
    from torchtitan.trainer import Trainer

    class TorchtitanProgress(Trainer):
        """torchtitan's Trainer, reporting self.step (optimizer steps
        done) after each train_step.

        torchtitan (0.3) has no per-step callback; its loop,
        Trainer.train(), counts self.step up and calls train_step(),
        which ends with the optimizer's step.  Overriding train_step is
        the boundary torchtitan's own extensions use (torchft's
        FaultTolerantTrainer is such a subclass), and self.step is the
        step a checkpoint resumes from.  A config function returns this
        class's Config (torchtitan.config.override.derive copies any
        Trainer.Config into it; Config.build() makes the class that
        owns the Config), so `python -m torchtitan.train --module M
        --config F` runs it: nothing of torchtitan's is forked or
        patched.  A trainer class of your own (a FaultTolerantTrainer
        subclass, say) calls progress.report(self.step) after its
        super().train_step() instead."""

        @dataclass(kw_only=True, slots=True)
        class Config(Trainer.Config):
            pass

        def train_step(self, data_iterator):
            super().train_step(data_iterator)
            progress.report(self.step)

    return TorchtitanProgress


_MAKERS = {"LightningProgress": _lightning_progress,
    "TorchtitanProgress": _torchtitan_progress,
    "TransformersProgress": _transformers_progress}


def __getattr__(name):
    make = _MAKERS.get(name)
    if make is None:
        raise AttributeError("module %r has no attribute %r" % (
            __name__, name))
    cls = make()
    globals()[name] = cls
    return cls
