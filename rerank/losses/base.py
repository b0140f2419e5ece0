"""What every loss head shares: input checks, float32 computation, padding masks and the reduction.

A loss head is called as ``loss(scores, labels, mask=None)`` with

- ``scores`` ``[Q, N]``: one list of N candidate scores per query, of any floating dtype;
- ``labels`` ``[Q, N]``: graded relevance (>= 0, unjudged = 0);
- ``mask`` ``[Q, N]`` bool: True for real candidates, False for padding (default: all real).

Rules every subclass inherits (after TF-Ranking's ``losses_impl``):

- the computation runs in at least float32, outside autocast, whatever dtype the scores arrive in;
- padded slots are replaced by neutral values before the loss sees them, and their gradient is exactly zero;
- a query contributes only if its real candidates have at least two different labels (so at least one relevant
  candidate and one pair to order); the loss is the mean of :meth:`RankingLoss.per_query` over the contributing
  queries, and a batch where none contributes gives a graph-connected 0.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .functional import float_mask


class RankingLoss(nn.Module):
    """Base class of the loss heads; subclasses implement :meth:`per_query`."""

    def forward(self, scores: Tensor, labels: Tensor, mask: Tensor | None = None) -> Tensor:
        """The mean loss over the queries that contribute (a scalar tensor)."""
        scores, labels, mask, contributes = _prepare(scores, labels, mask)
        if torch.is_autocast_enabled(scores.device.type):
            with torch.autocast(device_type=scores.device.type, enabled=False):
                return self._mean(scores, labels, mask, contributes)
        return self._mean(scores, labels, mask, contributes)

    def _mean(self, scores: Tensor, labels: Tensor, mask: Tensor, contributes: Tensor) -> Tensor:
        weights = contributes.to(scores.dtype)
        return self.per_query(scores, labels, mask) @ (weights / weights.sum().clamp(min=1.0))

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        """The loss of each query, ``[Q]``.

        Receives float scores and labels already zeroed at padded slots, and the bool mask; must stay finite
        for every query (including those that will not contribute) so that masked queries cannot leak NaN
        into the gradient.
        """
        raise NotImplementedError

    def extra_repr(self) -> str:
        """The loss's parameters, e.g. ``SmoothINDCG(alpha=1.0, delta=0.1, ...)``."""
        parameters = (name for name in vars(self) if not name.startswith("_") and name != "training")
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in parameters)


def _prepare(scores: Tensor, labels: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Checked float scores and labels (zero at padded slots), the bool mask, and ``[Q]`` bool: the query
    contributes (two real candidates with different labels).

    Padded slots may hold any score, including inf or NaN, and any finite label (e.g. allRank's -1). They are
    zeroed by a product with the mask, whose backward is a product too; scores go through ``torch.where``
    instead when their sum is not finite. (Bool selects cost several times more than products on CPU.)
    """
    if scores.dim() != 2:
        raise ValueError(f"scores must be [queries, candidates], got shape {tuple(scores.shape)}")
    if labels.shape != scores.shape:
        raise ValueError(f"labels shape {tuple(labels.shape)} differs from scores shape {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise TypeError(f"scores must be a floating-point tensor, got {scores.dtype}")
    dtype = torch.promote_types(scores.dtype, torch.float32)
    scores, labels = scores.to(dtype), labels.to(dtype)
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
        keep = None
    elif mask.shape != scores.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from scores shape {tuple(scores.shape)}")
    else:
        mask = mask.bool()
        keep = float_mask(mask, dtype)
        labels = labels * keep
        finite = math.isfinite(float(scores.detach().sum()))
        scores = scores * keep if finite else torch.where(mask, scores, 0.0)
    if bool(labels.min() < 0):
        raise ValueError("labels must be >= 0 (graded relevance); map negative judgments before training")
    highest = labels.amax(dim=-1, keepdim=True)
    below_highest = highest - labels if keep is None else highest * keep - labels
    return scores, labels, mask, below_highest.sum(dim=-1) > 0
