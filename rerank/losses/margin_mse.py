"""Margin-MSE: match the student's score margins to the teacher's.

Hofstätter, Althammer, Schröder, Sertkan and Hanbury. *Improving Efficient Neural Ranking Models with
Cross-Architecture Knowledge Distillation.* arXiv:2010.02666, 2020 (Eq. 1, for a query, a relevant and a
non-relevant passage).

Over every pair of real candidates with ``t_i > t_j`` (each unordered pair with different teacher scores once)::

    L = mean_{i, j} ((s_i - s_j) - scale * (t_i - t_j))^2

Parameter: ``scale`` (default 1), multiplying the teacher's margins: a bi-encoder's cosine margins are
hundredths, a cross-encoder's logit margins units. Only margins are matched, so the student keeps its own offset.

Example::

    >>> import torch
    >>> from rerank.losses import MarginMSE
    >>> teacher = torch.tensor([[6.1, 3.5, 4.2, 2.0]])
    >>> value = MarginMSE()(torch.randn(1, 4, requires_grad=True), teacher)
"""

from __future__ import annotations

from torch import Tensor

from ..core.checks import check_range
from .base import RankingLoss
from .functional import mean_over_pairs, ordered_pairs, score_differences


class MarginMSE(RankingLoss):
    """Mean ``((s_i - s_j) - scale (t_i - t_j))^2`` over pairs with ``t_i > t_j``."""

    graded = False

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        check_range("scale", scale, above=0)
        self.scale = float(scale)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        errors = (score_differences(scores) - self.scale * score_differences(labels)) ** 2
        return mean_over_pairs(errors, ordered_pairs(labels, mask))
