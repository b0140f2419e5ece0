"""LambdaLoss with the NDCG-Loss2++ weighting.

Wang, Li, Golbandi, Bendersky and Najork. *The LambdaLoss Framework for Ranking Metric Optimization.*
CIKM 2018, Eqs. 11-13 (NDCG-Loss2 and NDCG-Loss2++).

With the candidates sorted by the current scores (positions i, j = 1..n), normalised gains
``G_i = g(y_i) / IDCG`` and discounts ``D_i = log2(1 + i)``::

    rho_ij   = | 1/D_i - 1/D_j |                                  (LambdaRank weight)
    delta_ij = | 1/D_{|i-j|} - 1/D_{|i-j|+1} |                    (NDCG-Loss2 weight)
    L = - sum_{y_i > y_j} log2( sigmoid(sigma (s_i - s_j)) ) * (rho_ij + mu * delta_ij) * |G_i - G_j|

Parameters: ``sigma`` (default 1) and ``mu`` (default 10, as in allRank). Ties keep list order.

Example::

    >>> import torch
    >>> from rerank.losses import LambdaLoss
    >>> value = LambdaLoss()(torch.randn(2, 4, requires_grad=True), torch.tensor([[2, 0, 1, 0]] * 2))
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.checks import check_range
from .base import RankingLoss
from .functional import gains, ideal_dcg, ordered_pairs, safe_divide, score_differences, score_order, sum_over_pairs


def ndcg_loss2pp_weights(normalised_gains: Tensor, mu: float) -> Tensor:
    """``[Q, N, N]`` NDCG-Loss2++ weights ``(rho_ij + mu * delta_ij) |G_i - G_j|`` for score-sorted positions."""
    length = normalised_gains.shape[-1]
    positions = torch.arange(1, length + 1, dtype=normalised_gains.dtype, device=normalised_gains.device)
    inverse = 1.0 / torch.log2(1.0 + positions)
    rho = (inverse.unsqueeze(-1) - inverse.unsqueeze(-2)).abs()
    gap = (positions.unsqueeze(-1) - positions.unsqueeze(-2)).abs()
    safe_gap = gap.clamp(min=1.0)
    delta = (1.0 / torch.log2(1.0 + safe_gap) - 1.0 / torch.log2(2.0 + safe_gap)).abs()
    delta = torch.where(gap > 0, delta, torch.zeros_like(delta))
    gain_gap = (normalised_gains.unsqueeze(-1) - normalised_gains.unsqueeze(-2)).abs()
    return (rho + mu * delta) * gain_gap


class LambdaLoss(RankingLoss):
    """LambdaLoss, NDCG-Loss2++ weighting (see the module docstring)."""

    def __init__(self, sigma: float = 1.0, mu: float = 10.0) -> None:
        super().__init__()
        check_range("sigma", sigma, above=0)
        self.sigma = float(sigma)
        self.mu = float(mu)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        order = score_order(scores, mask)
        scores, labels, mask = (values.gather(-1, order) for values in (scores, labels, mask))
        item_gains = gains(labels, mask)
        normalised = safe_divide(item_gains, ideal_dcg(item_gains, None).unsqueeze(-1).expand_as(item_gains))
        weights = ndcg_loss2pp_weights(normalised, self.mu)
        pair_loss = weights * F.softplus(-self.sigma * score_differences(scores)) / math.log(2.0)
        return sum_over_pairs(pair_loss, ordered_pairs(labels, mask))
