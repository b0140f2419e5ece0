"""ApproxNDCG: NDCG with ranks replaced by a sigmoid approximation.

Qin, Liu and Li. *A General Approximation Framework for Direct Optimization of Information Retrieval
Measures.* Information Retrieval 13(4), 2010, Eqs. 12 and 18.

The rank of candidate i is approximated by (Eq. 18, with temperature ``T = 1 / alpha``)::

    rank_i = 1 + sum_{j != i} sigmoid((s_j - s_i) / T)

and ``ApproxNDCG = 1/IDCG * sum_i g(y_i) / log2(1 + rank_i)``; the loss is ``1 - ApproxNDCG``, which tends to
``1 - NDCG`` as T goes to 0. Parameter: ``temperature`` (default 0.1, i.e. the paper's alpha = 10).

Example::

    >>> import torch
    >>> from rerank.losses import ApproxNDCG
    >>> value = ApproxNDCG(temperature=0.1)(torch.randn(2, 4, requires_grad=True), torch.tensor([[2, 0, 1, 0]] * 2))
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.checks import check_range
from .base import RankingLoss
from .functional import gains, ideal_dcg, safe_divide, score_differences


class ApproxNDCG(RankingLoss):
    """``1 - ApproxNDCG`` with sigmoid-approximated ranks."""

    def __init__(self, temperature: float = 0.1) -> None:
        super().__init__()
        check_range("temperature", temperature, above=0)
        self.temperature = float(temperature)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        beaten_by = torch.sigmoid(-score_differences(scores) / self.temperature)  # [q, i, j] = P(s_j > s_i)
        others = mask.unsqueeze(-2) & ~torch.eye(scores.shape[-1], dtype=torch.bool, device=scores.device)
        approx_ranks = 1.0 + torch.where(others, beaten_by, torch.zeros_like(beaten_by)).sum(dim=-1)
        item_gains = gains(labels, mask)
        dcg = (item_gains / torch.log2(1.0 + approx_ranks)).sum(dim=-1)
        return 1.0 - safe_divide(dcg, ideal_dcg(item_gains, None))
