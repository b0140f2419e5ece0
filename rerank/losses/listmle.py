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


class ListMLE(RankingLoss):
    """Plackett-Luce negative log-likelihood of the label ordering."""

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        keyed = torch.where(mask, labels, torch.full_like(labels, -1.0))  # padded slots last
        order = keyed.sort(dim=-1, descending=True, stable=True).indices
        ordered = scores.gather(-1, order)
        real = mask.gather(-1, order)
        tails = torch.logcumsumexp(ordered.masked_fill(~real, -torch.inf).flip(-1), dim=-1).flip(-1)
        terms = torch.where(real, tails - ordered, torch.zeros_like(ordered))
        return terms.sum(dim=-1)
