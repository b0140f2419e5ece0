"""Progress as log lines where no progress bar can be seen: a job whose output goes to a file (a cluster job,
``nohup``, each fold of ``rerank cv``).

Lightning's progress bar (rich, when installed) draws nothing until the end when its output is not a terminal, so
an hours-long fit would print no sign of life. There, every command that trains adds :class:`LogProgress`, which
logs a line at most once a minute::

    INFO rerank.callbacks.progress: step 200/1200 (16 %), loss 0.6120, 1.52 s/step, about 25 min left

A Trainer bounded by steps rather than epochs (the judgment-free stage, :mod:`rerank.training.pretraining`) has no epoch
count (``max_epochs`` -1), which Lightning's bar shows as ``Epoch 0/-2``: :class:`StageProgressBar` names the
stage instead.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import RichProgressBar

logger = logging.getLogger(__name__)


class LogProgress(pl.Callback):
    """Logs the training step, its loss, the time per step and the time left every ``interval`` seconds; the time
    per step is that of the steps since the last line (a run slowed by other work, or sped up after its first
    steps, shows its current pace).

    Args:
        interval: seconds between two lines (the first comes after the first ``interval``).
    """

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self._last = 0.0
        self._last_step = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last = time.monotonic()
        self._last_step = trainer.global_step  # a resumed fit starts later

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        now = time.monotonic()
        if now - self._last < self.interval or not trainer.is_global_zero:
            return
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        per_step = (now - self._last) / max(step - self._last_step, 1)
        self._last, self._last_step = now, step
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        shown = f", loss {float(loss):.4f}" if loss is not None else ""
        if total and total != float("inf"):
            left = (total - step) * per_step / 60
            logger.info("step %d/%d (%d %%)%s, %.2f s/step, about %.0f min left", step, total, 100 * step // total,
                        shown, per_step, left)
        else:
            logger.info("step %d%s, %.2f s/step", step, shown, per_step)


def progress_callbacks() -> list[pl.Callback]:
    """:class:`LogProgress` when the log is not a terminal (where a progress bar shows), else nothing."""
    return [] if sys.stderr.isatty() else [LogProgress()]


class StageProgressBar(RichProgressBar):
    """Lightning's rich progress bar, with ``description`` where it would show ``Epoch 0/-2`` for a Trainer bounded
    by steps."""

    def __init__(self, description: str) -> None:
        super().__init__()
        self.description = description

    def _get_train_description(self, current_epoch: int) -> str:
        return self.description


def stage_callbacks(description: str, enable_progress_bar: bool | None) -> list[pl.Callback]:
    """The progress callbacks of a step-bounded stage: :func:`progress_callbacks` and, unless the progress bar is
    off (``trainer.enable_progress_bar: false``), a :class:`StageProgressBar` showing ``description``."""
    bar = [] if enable_progress_bar is False else [StageProgressBar(description)]
    return [*progress_callbacks(), *bar]
