"""Building blocks the loss heads share: gains, discounts, ideal DCG, label pairs and score ranks.

Conventions: tensors are ``[Q, N]``; ranks are 1-based; the DCG discount of rank r is ``1 / log2(1 + r)``
(Jarvelin and Kekalainen 2002, as in trec_eval), and ``k = None`` means the whole list.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

GAINS = ("exp2m1", "exp2", "linear")


def check_gain(gain: str) -> str:
    """Validate a gain name: ``exp2m1`` (2^y - 1, the default), ``exp2`` (2^y, SmoothI authors' code) or
    ``linear`` (y)."""
    if gain not in GAINS:
        raise ValueError(f"gain must be one of {', '.join(GAINS)}; got {gain!r}")
    return gain


def check_k(k: int | None) -> int | None:
    """Validate a rank cut-off: a positive int, or None for the whole list."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"k must be a positive integer or None (the whole list); got {k!r}")
    return k


def gains(labels: Tensor, mask: Tensor, gain: str = "exp2m1") -> Tensor:
    """Gain of each candidate, zero at padded slots."""
    if gain == "exp2m1":
        values = torch.expm1(labels * math.log(2.0))
    elif gain == "exp2":
        values = torch.exp2(labels)
    else:
        values = labels
    return torch.where(mask, values, torch.zeros_like(values))


def float_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """``mask`` as 1.0 / 0.0 values, cast through uint8 (a bool cast is several times slower on CPU)."""
    return mask.view(torch.uint8).to(dtype)


def rank_discounts(length: int, k: int | None, like: Tensor) -> Tensor:
    """``[length]`` discounts ``1 / log2(1 + r)`` of ranks r = 1..length, zero beyond rank k."""
    ranks = torch.arange(1, length + 1, dtype=like.dtype, device=like.device)
    discounts = 1.0 / torch.log2(1.0 + ranks)
    if k is not None:
        discounts = torch.where(ranks <= k, discounts, torch.zeros_like(discounts))
    return discounts


def ideal_dcg(item_gains: Tensor, k: int | None) -> Tensor:
    """``[Q]`` DCG@k of the ideal ordering (gains sorted in decreasing order)."""
    ideal = item_gains.sort(dim=-1, descending=True).values
    return (ideal * rank_discounts(ideal.shape[-1], k, ideal)).sum(dim=-1)


def safe_divide(numerator: Tensor, denominator: Tensor) -> Tensor:
    """``numerator / denominator`` where the denominator is positive, else 0 (no NaN in either pass)."""
    positive = denominator > 0
    return torch.where(positive, numerator / torch.where(positive, denominator, torch.ones_like(denominator)), 0.0)


def ordered_pairs(labels: Tensor, mask: Tensor) -> Tensor:
    """``[Q, N, N]`` bool: ``[q, i, j]`` is True when both are real candidates and ``y_i > y_j``."""
    both = mask.unsqueeze(-1) & mask.unsqueeze(-2)
    return both & (labels.unsqueeze(-1) > labels.unsqueeze(-2))


def score_differences(scores: Tensor) -> Tensor:
    """``[Q, N, N]`` with ``[q, i, j] = s_i - s_j``."""
    return scores.unsqueeze(-1) - scores.unsqueeze(-2)


def mean_over_pairs(values: Tensor, pairs: Tensor) -> Tensor:
    """``[Q]`` mean of ``values`` over each query's pairs (0 for a query without pairs)."""
    total = torch.where(pairs, values, torch.zeros_like(values)).sum(dim=(-2, -1))
    return safe_divide(total, pairs.sum(dim=(-2, -1)).to(values.dtype))


def sum_over_pairs(values: Tensor, pairs: Tensor) -> Tensor:
    """``[Q]`` sum of ``values`` over each query's pairs."""
    return torch.where(pairs, values, torch.zeros_like(values)).sum(dim=(-2, -1))


def score_order(scores: Tensor, mask: Tensor) -> Tensor:
    """``[Q, N]`` indices that sort each list by decreasing score, padded slots last.

    Ties keep list order (a stable sort), so the result is deterministic.
    """
    keyed = torch.where(mask, scores.detach(), torch.full_like(scores, -torch.inf))
    return keyed.sort(dim=-1, descending=True, stable=True).indices


def score_ranks(scores: Tensor, mask: Tensor) -> Tensor:
    """``[Q, N]`` 1-based rank of each candidate by decreasing score (see :func:`score_order` for ties)."""
    order = score_order(scores, mask)
    positions = torch.arange(1, scores.shape[-1] + 1, device=scores.device).expand_as(order)
    return torch.empty_like(order).scatter_(-1, order, positions)
