"""Typed batches, and the collators that tokenize them inside DataLoader workers.

- :class:`TrainingBatch`: the rows of ``Q`` training lists of ``N`` slots each, with their ``[Q, N]`` targets;
  ``slots`` says where each scored pair goes in the flattened ``[Q * N]`` list (padded slots get no row).
- :class:`EvaluationBatch`: (query, candidate) pairs to score, with their ids and first-stage scores.

Both hold their tokenized rows as :class:`~rerank.model.tokenization.PairInputs`.
Lightning moves the tensors of these dataclasses to the device (``apply_to_collection`` walks dataclasses); on a
GPU from page-locked memory (:mod:`rerank.data.pinning`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.pinning import Pinnable
from ..model.tokenization import PairInputs, PairTokenizer


@dataclass
class TrainingBatch(Pinnable):
    """``Q`` training lists of ``N`` slots.

    Attributes:
        inputs: the rows of the real (unpadded) slots, list by list.
        labels: ``[Q, N]`` graded relevance (unjudged = 0).
        mask: ``[Q, N]`` True for real candidates.
        slots: ``[pairs]`` the flattened ``[Q * N]`` position of each pair.
        teacher: ``[Q, N]`` teacher scores when some list of the batch has them (0 for the others), else None.
        clicks: ``[Q, N]`` click targets when some list of the batch comes from a click log (0 for the others),
            else None.
        ranks: ``[Q, N]`` the ranks the log showed those lists' documents at (0 elsewhere), with ``clicks``.

    A list whose source does not learn from qrels has labels all 0, and a list without a teacher (or clicks) has
    teacher scores (click targets) all 0: the loss heads skip lists without contrast (:mod:`rerank.losses.base`),
    so each head sees its own lists only.
    """

    inputs: PairInputs
    labels: Tensor
    mask: Tensor
    slots: Tensor
    teacher: Tensor | None = None
    clicks: Tensor | None = None
    ranks: Tensor | None = None

    @property
    def size(self) -> int:
        return self.mask.shape[0]


@dataclass
class EvaluationBatch(Pinnable):
    """(query, candidate) pairs of one evaluation or prediction batch."""

    inputs: PairInputs
    query_ids: list[str]
    doc_ids: list[str]
    first_stage_scores: Tensor


@dataclass
class TrainingList:
    """One training list before tokenization (what :class:`~rerank.training.lists.TrainingLists` yields)."""

    query: str
    documents: list[str]
    labels: list[int]
    teacher: list[float] | None = None
    clicks: list[float] | None = None
    ranks: list[int] | None = None


@dataclass
class TrainingCollator:
    """Tokenizes a batch of :class:`TrainingList` into a :class:`TrainingBatch` of ``list_size`` slots each."""

    tokenize: PairTokenizer
    list_size: int

    def __call__(self, items: Sequence[TrainingList]) -> TrainingBatch:
        shape = (len(items), self.list_size)
        labels = torch.zeros(shape, dtype=torch.long)
        mask = torch.zeros(shape, dtype=torch.bool)
        # lists without a teacher get constant teacher scores: no contrast, so the distillation head skips them
        teacher = torch.zeros(shape, dtype=torch.float32) if any(item.teacher for item in items) else None
        clicks = torch.zeros(shape, dtype=torch.float32) if any(item.clicks for item in items) else None
        ranks = torch.zeros(shape, dtype=torch.long) if clicks is not None else None
        for row, item in enumerate(items):
            length = len(item.labels)
            labels[row, :length] = torch.tensor(item.labels)
            mask[row, :length] = True
            if teacher is not None and item.teacher is not None:
                teacher[row, :length] = torch.tensor(item.teacher)
            if clicks is not None and item.clicks is not None:  # a click list carries its ranks too
                clicks[row, :length] = torch.tensor(item.clicks)
                ranks[row, :length] = torch.tensor(item.ranks)  # type: ignore[index]
        inputs = self.tokenize([item.query for item in items for _ in item.documents],
                               [document for item in items for document in item.documents])
        return TrainingBatch(inputs=inputs, labels=labels, mask=mask, slots=mask.flatten().nonzero().squeeze(1),
                             teacher=teacher, clicks=clicks, ranks=ranks)


@dataclass
class EvaluationCollator:
    """Tokenizes ``(query id, query, doc id, first-stage score, text)`` pairs into an :class:`EvaluationBatch`."""

    tokenize: PairTokenizer

    def __call__(self, pairs: Sequence[tuple[str, str, str, float, str]]) -> EvaluationBatch:
        qids, queries, doc_ids, scores, texts = map(list, zip(*pairs))
        return EvaluationBatch(inputs=self.tokenize(queries, texts), query_ids=qids, doc_ids=doc_ids,
                               first_stage_scores=torch.tensor(scores, dtype=torch.float64))
