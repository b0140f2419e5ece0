"""LambdaRank: pairwise logistic loss weighted by the NDCG change of a swap.

Burges, Ragno and Le. *Learning to Rank with Nonsmooth Cost Functions.* NIPS 2006 (``shared/papers/002_*``);
the lambda form as summarised by Burges (2010, ``shared/papers/003_*``).

LambdaRank defines the gradient rather than a cost: for each pair with ``y_i > y_j``::

    lambda_ij = sigma * |dNDCG_ij| / (1 + exp(sigma * (s_i - s_j)))

where ``|dNDCG_ij|`` is the change in NDCG@k from swapping i and j in the ranking by the current scores. This
module implements the cost whose gradient is exactly that, with ``|dNDCG|`` held constant::

    L = sum_{y_i > y_j} |dNDCG_ij| * log(1 + exp(-sigma * (s_i - s_j)))

so ``-dL/ds_i = sum_j lambda_ij - sum_j lambda_ji``. The gain is ``2^y - 1``; tied scores are ranked in list
order. Parameters: ``sigma`` (default 1), ``k`` (NDCG cut-off, default the whole list).

Example::

    >>> import torch
    >>> from rerank.losses import LambdaRank
    >>> value = LambdaRank(sigma=1.0, k=10)(torch.randn(2, 8, requires_grad=True), torch.randint(0, 3, (2, 8)))
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ..core.checks import check_range
from .base import RankingLoss
from .functional import (
    check_k,
    gains,
    ideal_dcg,
    ordered_pairs,
    rank_discounts,
    safe_divide,
    score_differences,
    score_ranks,
    sum_over_pairs,
)


def swap_ndcg_deltas(scores: Tensor, item_gains: Tensor, mask: Tensor, k: int | None) -> Tensor:
    """``[Q, N, N]`` ``|dNDCG@k|`` of swapping candidates i and j in the ranking by the current scores."""
    ranks = score_ranks(scores, mask)
    discounts = rank_discounts(scores.shape[-1], k, scores)[ranks - 1]
    gain_gap = item_gains.unsqueeze(-1) - item_gains.unsqueeze(-2)
    discount_gap = discounts.unsqueeze(-1) - discounts.unsqueeze(-2)
    ideal = ideal_dcg(item_gains, k)[:, None, None]
    return safe_divide((gain_gap * discount_gap).abs(), ideal.expand_as(gain_gap))


class LambdaRank(RankingLoss):
    """LambdaRank with NDCG@k deltas (see the module docstring)."""

    def __init__(self, sigma: float = 1.0, k: int | None = None) -> None:
        super().__init__()
        check_range("sigma", sigma, above=0)
        self.sigma = float(sigma)
        self.k = check_k(k)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        deltas = swap_ndcg_deltas(scores, gains(labels, mask), mask, self.k)
        pair_loss = deltas * F.softplus(-self.sigma * score_differences(scores))
        return sum_over_pairs(pair_loss, ordered_pairs(labels, mask))
