"""The terms of the training loss: one :class:`LossHead` for each kind of target a list can carry, built once from
the module's options by :func:`build_head`.

A batch's loss is the weighted sum of the heads whose targets it has::

    loss = qrels head(lists, labels) + teacher_weight * teacher head(lists, teacher scores) + click head(lists, clicks)

The qrels head applies to every batch (every list has labels); the teacher's and the clicks' heads to the batches that
have their targets. Each head averages over the lists it has targets for (lists without contrast are skipped).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ..losses import RankingLoss, build_loss
from .batches import TrainingBatch

UNGRADED = {"teacher": "a distillation head: distill_listnet, distill_ranknet or margin_mse",
            "clicks": "a click head: click_softmax, click_bce or dla"}
"""The heads whose targets are not graded labels, and what to name in their place."""


class LossHead(torch.nn.Module):
    """One term of the training loss: ``weight * loss(lists, targets, mask)`` over the batches that have the
    targets.

    Args:
        targets: what it learns from: ``qrels`` (the lists' labels), ``teacher`` (teacher scores) or ``clicks``.
        option: the option that names it (``model.loss``), for messages.
        name: the loss as configured (a registry name or a class path mapping), for messages.
        loss: the loss.
        weight: its weight in the sum (> 0).
    """

    def __init__(self, targets: str, option: str, name: object, loss: RankingLoss, weight: float = 1.0) -> None:
        super().__init__()
        self.targets, self.option, self.name, self.loss, self.weight = targets, option, name, loss, weight

    def forward(self, lists: Tensor, batch: TrainingBatch) -> Tensor | None:
        """The head's loss on the batch's ``[Q, N]`` lists of scores (unweighted), or None when the batch lacks its
        targets."""
        if self.targets == "qrels":
            return self.loss(lists, batch.labels, batch.mask)
        if self.targets == "teacher":
            return None if batch.teacher is None else self.loss(lists, batch.teacher, batch.mask)
        if batch.clicks is None:
            return None
        ranks = {"ranks": batch.ranks} if self.loss.needs_ranks else {}
        return self.loss(lists, batch.clicks, batch.mask, **ranks)


def build_head(targets: str, option: str, name: str | Mapping[str, Any], args: Mapping[str, Any] | None,
               weight: float = 1.0) -> LossHead:
    """The head that ``option`` configures: the loss ``name`` with its parameters ``args``
    (:func:`~rerank.losses.build_loss`), learning from ``targets`` at ``weight``.

    Raises:
        ValueError: an unknown loss or parameter, or a teacher's or click head that takes graded labels, naming the
            option.
    """
    loss = build_loss(name, **(args or {}))
    if targets in UNGRADED and loss.graded:
        raise ValueError(f"{option} {name!r} takes graded labels; use {UNGRADED[targets]}")
    return LossHead(targets, option, name, loss, weight)
