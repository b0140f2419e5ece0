"""Pairwise hinge loss, the SmoothI paper's BERT baseline (after MacAvaney et al., CEDR, SIGIR 2019).

For each query, the mean over the pairs of real candidates with ``y_i > y_j`` of::

    max(0, margin - (s_i - s_j))

Parameter: ``margin`` (default 1).

Example::

    >>> import torch
    >>> from rerank.losses import PairwiseHinge
    >>> value = PairwiseHinge(margin=1.0)(torch.randn(2, 4, requires_grad=True), torch.tensor([[1, 0, 0, 1]] * 2))
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import RankingLoss
from .functional import mean_over_pairs, ordered_pairs, score_differences


class PairwiseHinge(RankingLoss):
    """Mean pairwise hinge ``max(0, margin - (s_i - s_j))`` over pairs with ``y_i > y_j``."""

    def __init__(self, margin: float = 1.0) -> None:
        super().__init__()
        self.margin = float(margin)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        return mean_over_pairs(torch.relu(self.margin - score_differences(scores)), ordered_pairs(labels, mask))
