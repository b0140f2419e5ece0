"""ListNet: cross-entropy between top-one probabilities of labels and scores.

Cao, Qin, Liu, Tsai and Li. *Learning to Rank: From Pairwise Approach to Listwise Approach.* ICML 2007.

With the top-one probability ``P_f(j) = exp(f_j) / sum_k exp(f_k)`` (their Theorem 6, phi = exp)::

    L = - sum_j P_y(j) * log P_s(j)

over each query's real candidates.

Example::

    >>> import torch
    >>> from rerank.losses import ListNet
    >>> value = ListNet()(torch.randn(2, 4, requires_grad=True), torch.tensor([[2, 0, 1, 0]] * 2))
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import RankingLoss


class ListNet(RankingLoss):
    """Top-one cross-entropy ``-sum_j softmax(y)_j log softmax(s)_j``."""

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        excluded = torch.where(mask, scores.new_zeros(()), torch.finfo(scores.dtype).min)  # padded: probability 0
        target = torch.softmax(labels + excluded, dim=-1)
        return F.cross_entropy(scores + excluded, target, reduction="none")  # one fused -sum(t * log_softmax(s))
