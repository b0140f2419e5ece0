"""ListMLE: negative log-likelihood of the ideal ordering under the Plackett-Luce model.

Xia, Liu, Wang, Zhang and Li. *Listwise Approach to Learning to Rank: Theory and Algorithm.* ICML 2008.

With ``pi_y`` the ordering by decreasing label (ties kept in list order, so the loss is deterministic)::

    L = sum_{r=1}^{n} ( log sum_{t>=r} exp(s_{pi_y(t)}) - s_{pi_y(r)} )

Example::

    >>> import torch
    >>> from rerank.losses import ListMLE
    >>> value = ListMLE()(torch.randn(2, 4, requires_grad=True), torch.tensor([[2, 0, 1, 0]] * 2))
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import RankingLoss

_UNDERFLOW = 1e-30  # a tail sum below this (relative to the list maximum) may have lost precision


class ListMLE(RankingLoss):
    """Plackett-Luce negative log-likelihood of the label ordering."""

    exclude_padded = True  # padded labels sort last, and padded scores add exactly 0 to every tail sum

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        order = labels.sort(dim=-1, descending=True, stable=True).indices
        ordered = scores.gather(-1, order)
        real = mask.gather(-1, order)
        terms = torch.where(real, _log_tail_sums(ordered, real) - ordered, 0.0)
        return terms.sum(dim=-1)


def _log_tail_sums(values: Tensor, real: Tensor) -> Tensor:
    """``log sum_{t >= r} exp(values_t)`` for every position r (padded values are ``EXCLUDED``: they add 0).

    A cumulative sum of ``exp(values - max)`` is several times faster than ``torch.logcumsumexp`` on CPU and
    exact unless some real tail is so far below the maximum that its exponentials underflow; then it falls back.
    """
    top = values.detach().amax(dim=-1, keepdim=True)
    tails = (values - top).exp().flip(-1).cumsum(dim=-1).flip(-1)
    tails = torch.where(real, tails, 1.0)  # padded positions' tails are 0: log 1 keeps their gradient finite
    if bool(tails.amin() > _UNDERFLOW):
        return tails.log() + top
    return torch.logcumsumexp(values.flip(-1), dim=-1).flip(-1)
