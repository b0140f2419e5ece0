"""SoftNDCG: NDCG in expectation over Gaussian-smoothed scores (SoftRank).

Taylor, Guiver, Robertson and Minka. *SoftRank: Optimizing Non-Smooth Rank Metrics.* WSDM 2008
(``shared/papers/000_*``), Eqs. 8-15.

Each score is treated as the mean of a Gaussian with standard deviation ``sigma`` (Eq. 8), so candidate i beats
candidate j with probability (Eq. 9)::

    pi_ij = Phi((s_i - s_j) / (sqrt(2) * sigma))

The rank distribution of j (0-based rank = number of candidates that beat it) is the Rank-Binomial of Eq. 12,
built by adding the other candidates one at a time::

    p_j^(i)(r) = p_j^(i-1)(r - 1) * pi_ij + p_j^(i-1)(r) * (1 - pi_ij),     p_j^(0) = delta(r)

and SoftNDCG is the gain-weighted expected discount (Eqs. 13-15)::

    SoftNDCG = 1/IDCG * sum_j g(y_j) * sum_r D(r) * p_j(r)

The loss is ``1 - SoftNDCG``. Options:

- ``k``: cut the discount at rank k; only ranks below k are then tracked, so the exact recursion costs
  O(N^2 * k) per list instead of O(N^3).
- ``method``: ``exact`` (the recursion above), ``normal`` (Section 3.6: a normal distribution with the
  Rank-Binomial's mean ``sum_i pi_ij`` and variance ``sum_i pi_ij (1 - pi_ij)``, discretised over the ranks,
  O(N^2)), or ``auto`` (exact up to ``exact_max`` candidates per list, normal beyond).
- ``discount``: ``log2`` (``1/log2(2 + r)``, the NDCG discount) or ``linear`` (``1 - r/n`` for a list of n, the
  shallower training discount the paper finds to generalise better, Section 4, Figure 5).

Only candidates with a non-zero gain enter the sum, so only their rank distributions are computed; see
:mod:`rerank.losses.rank_binomial` for how the exact recursion and its gradient are computed.

Example::

    >>> import torch
    >>> from rerank.losses import SoftNDCG
    >>> loss = SoftNDCG(sigma=1.0)
    >>> value = loss(torch.randn(2, 8, requires_grad=True), torch.randint(0, 3, (2, 8)))
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.checks import check_range
from .base import RankingLoss
from .functional import check_gain, check_k, gains, rank_discounts, safe_divide
from .rank_binomial import expected_rank_discounts, win_probabilities

METHODS = ("auto", "exact", "normal")
DISCOUNTS = ("log2", "linear")


def normal_rank_distribution(contests: Tensor, mask: Tensor, ranks: int) -> Tensor:
    """Rank distributions by the normal approximation of Section 3.6, ``[Q, M, ranks]``.

    Mean ``sum_i pi`` and variance ``sum_i pi (1 - pi)``; the probability of rank r is the normal mass on
    ``[r - 0.5, r + 0.5)``, renormalised over the ranks the list has.
    """
    mean = contests.sum(dim=-1, keepdim=True)
    std = (contests * (1.0 - contests)).sum(dim=-1, keepdim=True).clamp(min=1e-6).sqrt()
    edges = torch.arange(ranks + 1, dtype=contests.dtype, device=contests.device) - 0.5
    cdf = torch.special.ndtr((edges - mean) / std)
    mass = cdf[..., 1:] - cdf[..., :-1]
    in_list = torch.arange(ranks, device=contests.device) < mask.sum(dim=-1, keepdim=True).unsqueeze(-1)
    mass = torch.where(in_list, mass, torch.zeros_like(mass))
    return mass / mass.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(mass.dtype).tiny)


class SoftNDCG(RankingLoss):
    """``1 - SoftNDCG`` (SoftRank, Eqs. 8-15); see the module docstring for the options."""

    def __init__(
        self,
        sigma: float = 1.0,
        k: int | None = None,
        gain: str = "exp2m1",
        method: str = "auto",
        discount: str = "log2",
        exact_max: int = 256,
    ) -> None:
        super().__init__()
        check_range("sigma", sigma, above=0)
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
        if discount not in DISCOUNTS:
            raise ValueError(f"discount must be one of {', '.join(DISCOUNTS)}; got {discount!r}")
        self.sigma = float(sigma)
        self.k = check_k(k)
        self.gain = check_gain(gain)
        self.method = method
        self.discount = discount
        self.exact_max = int(exact_max)

    def _discounts(self, mask: Tensor, like: Tensor) -> Tensor:
        """``[Q, N]`` discount of each 0-based rank (zero from rank k on and past the list's end)."""
        length = mask.shape[-1]
        if self.discount == "log2":
            return rank_discounts(length, self.k, like).expand(mask.shape[0], -1)
        ranks = torch.arange(length, dtype=like.dtype, device=like.device)
        linear = (1.0 - ranks / mask.sum(dim=-1, keepdim=True)).clamp(min=0.0)
        return linear if self.k is None else torch.where(ranks < self.k, linear, torch.zeros_like(linear))

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        length = scores.shape[-1]
        ranks = length if self.k is None else min(self.k, length)
        item_gains = gains(labels, mask, self.gain)
        discounts = self._discounts(mask, scores)
        if self.method == "exact" or (self.method == "auto" and length <= self.exact_max):
            expected = expected_rank_discounts(scores, mask, item_gains > 0, self.sigma, discounts[:, :ranks])
        else:
            contests = win_probabilities(scores, mask, self.sigma).transpose(-1, -2)
            dist = normal_rank_distribution(contests, mask, ranks)
            expected = torch.einsum("qmr,qr->qm", dist, discounts[:, :ranks])
        dcg = (item_gains * expected).sum(dim=-1)
        ideal = (item_gains.sort(dim=-1, descending=True).values * discounts).sum(dim=-1)
        return 1.0 - safe_divide(dcg, ideal)
