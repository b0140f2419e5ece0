"""Pointwise losses: each candidate scored on its own.

- ``PointwiseBCE``: binary cross-entropy of ``sigmoid(s_i)`` against ``y_i > 0`` (relevant or not), as in
  monoBERT (Nogueira and Cho 2019).
- ``PointwiseMSE``: squared error ``(s_i - y_i)^2`` against the graded label.

Both are averaged over each query's real candidates, then over the contributing queries.

Example::

    >>> import torch
    >>> from rerank.losses import PointwiseBCE
    >>> value = PointwiseBCE()(torch.randn(2, 4, requires_grad=True), torch.tensor([[2, 0, 1, 0]] * 2))
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import RankingLoss
from .functional import safe_divide


def mean_over_candidates(values: Tensor, mask: Tensor) -> Tensor:
    total = torch.where(mask, values, torch.zeros_like(values)).sum(dim=-1)
    return safe_divide(total, mask.sum(dim=-1).to(values.dtype))


class PointwiseBCE(RankingLoss):
    """Binary cross-entropy of each candidate's score (a logit) against relevance ``y > 0``."""

    min_list_size = 1

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        losses = F.binary_cross_entropy_with_logits(scores, (labels > 0).to(scores.dtype), reduction="none")
        return mean_over_candidates(losses, mask)


class PointwiseMSE(RankingLoss):
    """Squared error between each candidate's score and its graded label."""

    min_list_size = 1

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        return mean_over_candidates((scores - labels) ** 2, mask)
