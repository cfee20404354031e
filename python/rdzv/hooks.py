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

    # Accelerate, torchtitan, any loop of your own: one call a step
    from rdzv import progress
    progress.report(step)

A hook's class is made when it is first named (module __getattr__), so
importing rdzv.hooks needs none of the frameworks.
"""

from . import progress

__all__ = ["LightningProgress", "TransformersProgress"]  # noqa: F822 (made by __getattr__)


def _lightning_progress():
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        from pytorch_lightning.callbacks import Callback

    class LightningProgress(Callback):
        """A Lightning Callback: reports trainer.global_step (optimizer
        steps done) after each training batch."""

        def on_train_batch_end(self, trainer, pl_module, outputs,
            batch, batch_idx):
            progress.report(trainer.global_step)

    return LightningProgress


def _transformers_progress():
    from transformers import TrainerCallback

    class TransformersProgress(TrainerCallback):
        """A transformers TrainerCallback: reports state.global_step
        after each optimizer step."""

        def on_step_end(self, args, state, control, **kwargs):
            progress.report(state.global_step)

    return TransformersProgress


_MAKERS = {"LightningProgress": _lightning_progress,
    "TransformersProgress": _transformers_progress}


def __getattr__(name):
    make = _MAKERS.get(name)
    if make is None:
        raise AttributeError("module %r has no attribute %r" % (
            __name__, name))
    cls = make()
    globals()[name] = cls
    return cls
