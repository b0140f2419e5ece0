"""The judgment-free stage validated on pseudo-queries it does not train on: ``pretrain.held_out``.

The stage (:mod:`rerank.training.pretraining`) reads no judgments and is shared by every fold, so it cannot be
validated on a fold's queries. What it learns is its teacher's ranking. So ``held_out`` of its lists (drawn with the
run's seed among those that have teacher scores: pseudo-queries, say) are kept out of its training, and every
``validate_every`` optimizer steps the student scores each of them whole (every candidate, up to
``data.rerank_depth``), and the stage's own distillation head (``model.teacher_loss``: with ``distill_listnet``,
``-sum_j softmax(t_q / T)_j log softmax(s_q)_j``) measures how far that ranking is from the teacher's::

    L_held_out = 1 / |H| * sum over q in H of teacher_loss(s_q, t_q)

The stage keeps the weights of its lowest ``L_held_out``; with ``patience: P`` it stops after ``P``
checks without a lower one (early stopping on a validation loss: the budget and the passes remain its bounds).
The checks are kept beside the cached weights (``<key>.held_out.json``): a run that loads the stage logs which
step's weights it holds.
Every check is logged in one line::

    INFO rerank.training.stage_validation: pre-training, round 1 of 1, step 200: held-out distillation loss 0.8123
    (best)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch.utils.data import DataLoader

from ..core.errors import UserError
from .batches import TrainingCollator
from .datamodule import RerankDataModule
from .lightning_module import RerankModule
from .lists import TrainingLists, TrainingSource

logger = logging.getLogger(__name__)

LISTS_PER_BATCH = 4
"""Held-out lists scored together (each has up to ``data.rerank_depth`` pairs)."""


def hold_out(data: RerankDataModule, count: int, seed: int) -> list[TrainingSource]:
    """Take ``count`` lists with teacher scores out of ``data``'s training sources (chosen with ``seed``, the same
    queries for the same sources) and return them, each source's whole and ranked by the first stage.

    Raises:
        UserError: when ``count`` is more than half of the lists that have teacher scores.
    """
    sources = data.training_sources()
    pool = [(which, index) for which, source in enumerate(sources)
            if source.lists.teacher is not None and not source.clicks for index in range(len(source.lists))]
    if 2 * count > len(pool):
        raise UserError(f"pretrain.held_out: {count} lists asked, but the stage has {len(pool)} lists with teacher "
                        f"scores: hold out at most half of them ({len(pool) // 2})")
    chosen = set(random.Random(f"{seed}/held-out").sample(pool, count))
    training, held = [], []
    for which, source in enumerate(sources):
        out = [(which, index) in chosen for index in range(len(source.lists))]
        training.append(dataclasses.replace(source, lists=source.lists.keep([not flag for flag in out])))
        if any(out):
            held.append(dataclasses.replace(source, lists=source.lists.keep(out), strategy="top", weight=1.0))
    data.training = training
    return held


def distillation_loss(held_out: Sequence[TrainingSource], data: RerankDataModule) -> Callable[[RerankModule], float]:
    """The measure of :class:`HeldOutValidation`: the mean of ``model.teacher_loss`` over the ``held_out`` lists,
    each scored whole by the module in evaluation mode."""
    size = max(int(np.diff(source.lists.offsets).max()) for source in held_out)
    dataset = TrainingLists(held_out, size, data.seed)
    keys = [(0, which, index) for which, source in enumerate(held_out) for index in range(len(source.lists))]
    loader = DataLoader(dataset, batch_size=LISTS_PER_BATCH, sampler=keys,
                        collate_fn=TrainingCollator(data.tokenizer(), size))

    def measure(module: RerankModule) -> float:
        training = module.training
        module.eval()
        total = 0.0
        with torch.no_grad(), module.trainer.precision_plugin.forward_context():
            for lists in loader:
                batch = move_data_to_device(lists, module.device)
                total += float(module.list_losses(batch)["teacher"]) * batch.size
        module.train(training)
        return total / len(keys)

    return measure


class HeldOutValidation(pl.Callback):
    """Every ``every`` optimizer steps (and after the last), ``measure`` the module (lower is better); keep the
    weights of the best check, restore them when training ends, and stop after ``patience`` checks without a better
    one (None: never).

    Args:
        measure: the validation loss of a module (:func:`distillation_loss`).
        every: optimizer steps between two checks.
        patience: checks without improvement before the stage stops.
        name: the stage, for the log.
    """

    def __init__(self, measure: Callable[[RerankModule], float], every: int, patience: int | None,
                 name: str) -> None:
        self.measure, self.every, self.patience, self.name = measure, every, patience, name
        self.curve: list[tuple[int, float]] = []
        self.best_step: int | None = None
        self._best = float("inf")
        self._weights: dict[str, torch.Tensor] = {}

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object,
                           batch: object, batch_idx: int) -> None:
        step = trainer.global_step
        if step and step % self.every == 0 and not (self.curve and self.curve[-1][0] == step):  # once a step
            self._check(trainer, pl_module, step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        step = trainer.global_step
        if not self.curve or self.curve[-1][0] != step:
            self._check(trainer, pl_module, step)
        if self.best_step != step:
            pl_module.model.load_state_dict(self._weights)
            logger.info("%s: the weights of step %d kept (held-out distillation loss %.4f; step %d: %.4f)", self.name,
                        self.best_step, self._best, step, self.curve[-1][1])

    def state_dict(self) -> dict[str, Any]:
        """The checks so far and the best weights: a stage resumed from a checkpoint keeps the same ones."""
        return {"curve": [list(point) for point in self.curve], "best_step": self.best_step, "best": self._best,
                "weights": self._weights}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.curve = [(int(step), float(value)) for step, value in state_dict["curve"]]
        self.best_step, self._best, self._weights = state_dict["best_step"], state_dict["best"], state_dict["weights"]

    def record(self) -> dict[str, object]:
        """The checks as ``{"curve": [[step, loss], ...], "best_step": ..., "last_step": ...}`` (:func:`describe`)."""
        return {"curve": [list(point) for point in self.curve], "best_step": self.best_step,
                "last_step": self.curve[-1][0] if self.curve else None}

    def _check(self, trainer: pl.Trainer, pl_module: pl.LightningModule, step: int) -> None:
        value = self.measure(pl_module)
        if not math.isfinite(value):
            raise FloatingPointError(f"{self.name}, step {step}: the held-out distillation loss is {value}")
        self.curve.append((step, value))
        better = value < self._best
        if better:
            self._best, self.best_step = value, step
            self._weights = {name: tensor.detach().clone() for name, tensor in pl_module.model.state_dict().items()}
        logger.info("%s, step %d: held-out distillation loss %.4f%s", self.name, step, value,
                    " (best)" if better else "")
        checks_since = len(self.curve) - 1 - next(i for i, (at, _) in enumerate(self.curve) if at == self.best_step)
        if self.patience is not None and checks_since >= self.patience and not trainer.should_stop:
            trainer.should_stop = True
            logger.info("%s: stopped at step %d, %d checks without a lower held-out loss than step %d's", self.name,
                        step, checks_since, self.best_step)


def describe(record: dict[str, Any]) -> str:
    """A :meth:`HeldOutValidation.record` in words: which step's weights were kept, and where the stage ended."""
    loss = dict((step, value) for step, value in record["curve"])
    return (f"the weights of step {record['best_step']} (held-out distillation loss {loss[record['best_step']]:.4f}), "
            f"trained to step {record['last_step']}, checked {len(loss)} times")
