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

from torch import Tensor

from .base import RankingLoss


class ListNet(RankingLoss):
    """Top-one cross-entropy ``-sum_j softmax(y)_j log softmax(s)_j``."""

    exclude_padded = True  # padded scores and labels at EXCLUDED: probability exactly 0 in both softmaxes

    def weighted_sum(self, scores: Tensor, labels: Tensor, mask: Tensor, weights: Tensor) -> Tensor:
        """``sum_q w_q L_q = sum_{q,j} (-w_q P_y(j)) log P_s(j)``: the weights ride on the targets.

        One product-sum over the whole batch instead of a per-query sum, a negation and a dot product: at 100
        candidates the loss costs a few dozen microseconds, most of them per op.
        """
        target = labels.softmax(dim=-1).mul_(-weights)
        return (scores.log_softmax(dim=-1) * target).sum()
