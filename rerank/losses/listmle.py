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

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        keyed = torch.where(mask, labels, torch.full_like(labels, -1.0))  # padded slots last
        order = keyed.sort(dim=-1, descending=True, stable=True).indices
        ordered = scores.gather(-1, order)
        real = mask.gather(-1, order)
        terms = torch.where(real, _log_tail_sums(ordered, real) - ordered, 0.0)
        return terms.sum(dim=-1)


def _log_tail_sums(values: Tensor, real: Tensor) -> Tensor:
    """``log sum_{t >= r} exp(values_t)`` over the real entries, for every position r.

    A cumulative sum of ``exp(values - max)`` is several times faster than ``torch.logcumsumexp`` on CPU and
    exact unless some tail is so far below the maximum that its exponentials underflow; then it falls back.
    """
    top = torch.where(real, values, -torch.inf).amax(dim=-1, keepdim=True).detach()
    tails = torch.where(real, (values - top).exp(), 0.0).flip(-1).cumsum(dim=-1).flip(-1)
    if bool(torch.where(real, tails, 1.0).amin() > _UNDERFLOW):
        return tails.log() + top
    return torch.logcumsumexp(torch.where(real, values, -torch.inf).flip(-1), dim=-1).flip(-1)

