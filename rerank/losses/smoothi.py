"""SmoothI: smooth rank indicators and the IR metrics built on them.

Thonet, Cinar, Gaussier, Li and Renders. *SmoothI: Smooth Rank Indicators for Differentiable IR Metrics.*
SIGIR 2022 (``shared/papers/001_*``).

Smooth rank indicators (Eq. 7, with the stop-gradient of Eq. 9), for ranks r = 1..K and candidates j::

    I_j^r = softmax_j( alpha * S_j * sg[ prod_{l<r} (1 - I_j^l - delta) ] )

where ``S`` are the scores shifted to be non-negative (minus the list minimum, as the authors do), ``alpha``
sharpens the softmax (I tends to the true rank indicator as alpha grows), ``delta`` in (0, 0.5) controls how much
mass is taken from the already-ranked candidates, and ``sg`` stops the gradient through the recursion (switch it
off with ``stop_grad=False`` for the plain Eq. 7). The cost is O(K * N) per list.

With the smooth relevance at rank r, ``rho_r = sum_j y_j I_j^r``, the metrics are (Eqs. 10-12)::

    P@K   = 1/K * sum_{r<=K} sum_j rel_j I_j^r                        (rel = y > 0)
    AP    = 1/R * sum_{r<=K} (sum_j rel_j I_j^r) * P@r                (R = number of relevant candidates)
    NDCG@K = 1/IDCG@K * sum_{r<=K} (sum_j g(y_j) I_j^r) / log2(1 + r)

NDCG applies the gain before mixing (the authors' code does the same with g = 2^y); the gain is ``exp2m1``
(2^y - 1, standard), ``exp2`` (the authors' code) or ``linear``. Each loss is ``1 - metric``, and equals
``1 - trec_eval's metric`` on the same list as alpha grows.

Example::

    >>> import torch
    >>> from rerank.losses import SmoothINDCG
    >>> loss = SmoothINDCG(alpha=1.0, delta=0.1)
    >>> value = loss(torch.randn(2, 8, requires_grad=True), torch.randint(0, 3, (2, 8)))
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.checks import check_range
from .base import RankingLoss
from .functional import check_gain, check_k, gains, ideal_dcg, rank_discounts, safe_divide


def smooth_rank_indicators(
    scores: Tensor, mask: Tensor, alpha: float, delta: float, ranks: int, stop_grad: bool = True
) -> Tensor:
    """``[Q, ranks, N]`` smooth rank indicators ``I_j^r`` of Eq. 7 (Eq. 9 when ``stop_grad``).

    Padded candidates get exactly zero mass at every rank.
    """
    lowest = torch.where(mask, scores, torch.full_like(scores, torch.inf)).amin(dim=-1, keepdim=True)
    shifted = torch.where(mask, scores - lowest, torch.zeros_like(scores))
    remaining = torch.ones_like(scores)
    indicators = []
    for _ in range(ranks):
        factor = remaining.detach() if stop_grad else remaining
        logits = (alpha * shifted * factor).masked_fill(~mask, -torch.inf)
        indicator = torch.where(mask, torch.softmax(logits, dim=-1), torch.zeros_like(scores))
        indicators.append(indicator)
        remaining = remaining * (1.0 - indicator - delta)
    return torch.stack(indicators, dim=1)


class _SmoothILoss(RankingLoss):
    """Shared parameters of the SmoothI losses."""

    def __init__(
        self,
        alpha: float = 1.0,
        delta: float = 0.1,
        k: int | None = None,
        stop_grad: bool = True,
    ) -> None:
        super().__init__()
        check_range("delta", delta, above=0, below=0.5)  # SmoothI Eq. 7
        check_range("alpha", alpha, above=0)
        self.alpha = float(alpha)
        self.delta = float(delta)
        self.k = check_k(k)
        self.stop_grad = bool(stop_grad)

    def _indicators(self, scores: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Indicators for ranks 1..K and ``[Q, K]`` bool: rank r exists in the query's list (r <= its length)."""
        ranks = scores.shape[-1] if self.k is None else min(self.k, scores.shape[-1])
        indicators = smooth_rank_indicators(scores, mask, self.alpha, self.delta, ranks, self.stop_grad)
        lengths = mask.sum(dim=-1, keepdim=True)
        rank_exists = torch.arange(1, ranks + 1, device=scores.device) <= lengths
        return indicators, rank_exists

    def _relevant_at_rank(self, scores: Tensor, labels: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """``[Q, K]`` smooth count of relevant candidates at each rank (zero past the list end), and ``[Q, N]`` rel."""
        relevant = (labels > 0).to(scores.dtype)
        indicators, rank_exists = self._indicators(scores, mask)
        at_rank = torch.einsum("qrn,qn->qr", indicators, relevant)
        return torch.where(rank_exists, at_rank, torch.zeros_like(at_rank)), relevant


class SmoothINDCG(_SmoothILoss):
    """``1 - NDCG@K`` over SmoothI rank indicators (SmoothI Eq. 12, gain before mixing)."""

    def __init__(
        self,
        alpha: float = 1.0,
        delta: float = 0.1,
        k: int | None = None,
        gain: str = "exp2m1",
        stop_grad: bool = True,
    ) -> None:
        super().__init__(alpha=alpha, delta=delta, k=k, stop_grad=stop_grad)
        self.gain = check_gain(gain)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        indicators, rank_exists = self._indicators(scores, mask)
        item_gains = gains(labels, mask, self.gain)
        gain_at_rank = torch.einsum("qrn,qn->qr", indicators, item_gains)
        discounts = torch.where(rank_exists, rank_discounts(rank_exists.shape[-1], None, scores), 0.0)
        dcg = (gain_at_rank * discounts).sum(dim=-1)
        return 1.0 - safe_divide(dcg, ideal_dcg(item_gains, self.k))


class SmoothIPrecision(_SmoothILoss):
    """``1 - P@K`` over SmoothI rank indicators (SmoothI Eq. 10); relevant means label > 0.

    Unlike the other SmoothI losses, ``k`` defaults to 10: P@N over the whole list is the same for every
    ordering, so it gives no training signal.
    """

    def __init__(self, alpha: float = 1.0, delta: float = 0.1, k: int | None = 10, stop_grad: bool = True) -> None:
        super().__init__(alpha=alpha, delta=delta, k=k, stop_grad=stop_grad)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        relevant_at_rank, _ = self._relevant_at_rank(scores, labels, mask)
        cut = mask.sum(dim=-1) if self.k is None else torch.full_like(relevant_at_rank[:, 0], self.k)
        return 1.0 - safe_divide(relevant_at_rank.sum(dim=-1), cut.to(scores.dtype))


class SmoothIAP(_SmoothILoss):
    """``1 - AP`` over SmoothI rank indicators (SmoothI Eq. 11); relevant means label > 0; ``k`` cuts the sum."""

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        relevant_at_rank, relevant = self._relevant_at_rank(scores, labels, mask)
        ranks = torch.arange(1, relevant_at_rank.shape[-1] + 1, dtype=scores.dtype, device=scores.device)
        precision_at_rank = relevant_at_rank.cumsum(dim=-1) / ranks
        average = (relevant_at_rank * precision_at_rank).sum(dim=-1)
        return 1.0 - safe_divide(average, relevant.sum(dim=-1))
