"""RankNet: logistic loss on score differences.

Burges et al. *Learning to Rank using Gradient Descent.* ICML 2005 (summarised in ``shared/papers/003_*``).

With target probability 1 that i ranks above j when ``y_i > y_j``, the cross-entropy of
``P_ij = 1 / (1 + exp(-sigma (s_i - s_j)))`` is::

    C_ij = log(1 + exp(-sigma * (s_i - s_j)))

averaged over each query's pairs with different labels. Parameter: ``sigma`` (default 1).

Example::

    >>> import torch
    >>> from rerank.losses import RankNet
    >>> value = RankNet()(torch.randn(2, 4, requires_grad=True), torch.tensor([[2, 0, 1, 0]] * 2))
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ..core.checks import check_range
from .base import RankingLoss
from .functional import mean_over_pairs, ordered_pairs, score_differences


class RankNet(RankingLoss):
    """Mean ``log(1 + exp(-sigma (s_i - s_j)))`` over pairs with ``y_i > y_j``."""

    def __init__(self, sigma: float = 1.0) -> None:
        super().__init__()
        check_range("sigma", sigma, above=0)
        self.sigma = float(sigma)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        return mean_over_pairs(F.softplus(-self.sigma * score_differences(scores)), ordered_pairs(labels, mask))
