"""A training that a signal stops at a saved state: :class:`Resumable`, a Lightning callback.

It writes a checkpoint at the end of an optimizer step every ``minutes`` of training, one when training ends (the
fit's, so that a command stopped while it tests or exports resumes without training again), and, when SIGTERM or
SIGINT comes (:mod:`rerank.core.preemption`), one at the end of the step under way, after which the fit stops with
:class:`~rerank.core.preemption.Preempted`. A re-run that resumes from that checkpoint (``rerank fit``'s own, or a
stage's) trains on exactly as the uninterrupted run does: the loaders skip the batches already trained on and the
dropout masks follow the step (:mod:`rerank.training.lightning_module`). Under DDP the processes agree on the step
to stop at.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import lightning.pytorch as pl

from ..core import preemption

logger = logging.getLogger(__name__)

EVERY_MINUTES = 5.0
"""Minutes of training between two checkpoints: what a SIGKILL (no time to save) can lose at most."""


class Resumable(pl.Callback):
    """Keeps a training resumable from ``path`` (see the module docstring).

    Args:
        path: the checkpoint to write.
        what: the training, as the stopping message names it (``the training``, ``the judgment-free stage``).
        minutes: minutes of training between two checkpoints.
        at_end: also write one when training ends (else the caller keeps what the training made, and stops when
            :func:`rerank.core.preemption.pending` says a signal came).
    """

    def __init__(self, path: Path, what: str = "the training", minutes: float = EVERY_MINUTES,
                 at_end: bool = True) -> None:
        self.path, self.what, self.minutes, self.at_end = Path(path), what, minutes, at_end
        self._saved_at = 0.0
        self._step = 0
        self._deferral: contextlib.AbstractContextManager | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        preemption.reinstall()  # Lightning's own SIGTERM handler would stop the loop after any batch
        self._deferral = preemption.deferred()
        self._deferral.__enter__()
        self._saved_at, self._step = time.monotonic(), trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object,
                           batch: object, batch_idx: int) -> None:
        if trainer.global_step == self._step:  # within an accumulation: not a step's end
            return
        self._step = trainer.global_step
        stopping = trainer.strategy.reduce_boolean_decision(preemption.pending() is not None, all=False)
        if stopping or time.monotonic() - self._saved_at >= self.minutes * 60:
            self._save(trainer)
        if stopping:
            self._end_deferral()
            raise preemption.stop(f"{self.what} is saved at step {self._step} ({self.path})")

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The end of training: its checkpoint (with ``at_end``), and the stop a signal asked for meanwhile (without
        ``at_end``, the caller stops once it has kept what the training made)."""
        self._end_deferral()
        if self.at_end:
            self._save(trainer)
            if preemption.pending() is not None:
                raise preemption.stop(f"{self.what} is done and saved ({self.path})")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._end_deferral()

    def _save(self, trainer: pl.Trainer) -> None:
        trainer.save_checkpoint(self.path)
        self._saved_at = time.monotonic()
        logger.debug("%s: checkpoint at step %d (%s)", self.what, trainer.global_step, self.path)

    def _end_deferral(self) -> None:
        if self._deferral is not None:
            self._deferral.__exit__(None, None, None)
            self._deferral = None
