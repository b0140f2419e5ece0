"""What every loss head shares: input checks, float32 computation, padding masks and the reduction.

A loss head is called as ``loss(scores, labels, mask=None)`` with

- ``scores`` ``[Q, N]``: one list of N candidate scores per query, of any floating dtype;
- ``labels`` ``[Q, N]``: graded relevance (>= 0, unjudged = 0), or for the distillation heads
  (:attr:`RankingLoss.graded` False) a teacher's real-valued scores;
- ``mask`` ``[Q, N]`` bool: True for real candidates, False for padding (default: all real).

Rules every subclass inherits (after TF-Ranking's ``losses_impl``):

- the computation runs in at least float32, outside autocast, whatever dtype the scores arrive in;
- padded slots are replaced by neutral values before the loss sees them, and their gradient is exactly zero;
- a query contributes only if its real candidates have at least two different labels (so at least one relevant
  candidate and one pair to order); the loss is the mean of :meth:`RankingLoss.per_query` over the contributing
  queries (:meth:`RankingLoss.weighted_sum`), and a batch where none contributes gives a graph-connected 0.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .functional import float_mask

EXCLUDED = torch.finfo(torch.float32).min
"""The score of a candidate left out of a softmax: finite in every dtype the losses compute in (float32 and up),
and low enough that ``exp(EXCLUDED - s)`` is exactly 0 for any real score s."""


class RankingLoss(nn.Module):
    """Base class of the loss heads; subclasses implement :meth:`per_query` (or :meth:`weighted_sum`)."""

    #: False: padded slots' scores and labels become 0 (and the loss masks them itself). True: both become
    #: :data:`EXCLUDED`, so that a softmax over the list gives them probability exactly 0, hence zero gradient,
    #: with no masking op of the loss's own (ListNet, ListMLE).
    exclude_padded: bool = False
    #: True: labels are graded relevance, checked to be >= 0. False: real-valued targets (a teacher's scores).
    graded: bool = True
    #: The fewest candidates a list needs for the loss to say anything (2 to compare; 1 for pointwise losses).
    min_list_size: int = 2
    #: True: the head also takes ``ranks=``, the ``[Q, N]`` ranks a click log showed the candidates at (``dla``).
    needs_ranks: bool = False
    #: The learning rate of the head's own parameters, if it has any (``dla``'s propensities); None: ``head_lr``.
    lr: float | None = None

    def propensities(self) -> list[float] | None:
        """The position bias the head has learnt so far (``dla``), for the training log; None for the others."""
        return None

    def forward(self, scores: Tensor, labels: Tensor, mask: Tensor | None = None) -> Tensor:
        """The mean loss over the queries that contribute (a scalar tensor)."""
        scores, labels, mask, weights = prepare(scores, labels, mask, self.exclude_padded, self.graded)
        if torch.is_autocast_enabled(scores.device.type):
            with torch.autocast(device_type=scores.device.type, enabled=False):
                return self.weighted_sum(scores, labels, mask, weights)
        return self.weighted_sum(scores, labels, mask, weights)

    def weighted_sum(self, scores: Tensor, labels: Tensor, mask: Tensor, weights: Tensor) -> Tensor:
        """``sum_q weights_q * loss_q``: the mean over the contributing queries.

        ``weights`` ``[Q, 1]`` holds ``1 / (number of contributing queries)`` for a query that contributes and 0
        for one that does not. A subclass overrides this instead of :meth:`per_query` when folding the weights into
        its own computation saves operations (ListNet).
        """
        return self.per_query(scores, labels, mask) @ weights.squeeze(-1)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        """The loss of each query, ``[Q]``.

        Receives float scores and labels with padded slots replaced (see :attr:`exclude_padded`) and the bool
        mask; must stay finite for every query (including those that will not contribute) so that masked queries
        cannot leak NaN into the gradient.
        """
        raise NotImplementedError

    def extra_repr(self) -> str:
        """The loss's parameters, e.g. ``SmoothINDCG(alpha=1.0, delta=0.1, ...)``."""
        parameters = (name for name in vars(self) if not name.startswith("_") and name != "training")
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in parameters)


def prepare(
    scores: Tensor, labels: Tensor, mask: Tensor | None, exclude_padded: bool, graded: bool = True
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Checked float scores and labels with padded slots replaced (see :attr:`RankingLoss.exclude_padded`), the
    bool mask, and the ``[Q, 1]`` weights of the mean: ``1 / count`` for the ``count`` queries whose real
    candidates have two different labels, 0 for the others.

    Padded slots may hold any score, including inf or NaN, and any finite label (e.g. allRank's -1). Every op
    counts at these sizes (a few microseconds each, more than the arithmetic): labels are zeroed by a product
    with the mask, and the four host-side checks (are the scores finite, are the labels finite, is a label
    negative, how many queries contribute) share one transfer. Finite scores are replaced by an op whose backward
    is cheap (a product with the mask, or the addition of a constant); ``torch.where`` only when some score is not
    finite.
    """
    if scores.dim() != 2:
        raise ValueError(f"scores must be [queries, candidates], got shape {tuple(scores.shape)}")
    if labels.shape != scores.shape:
        raise ValueError(f"labels shape {tuple(labels.shape)} differs from scores shape {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise TypeError(f"scores must be a floating-point tensor, got {scores.dtype}")
    dtype = torch.promote_types(scores.dtype, torch.float32)
    scores = scores if scores.dtype == dtype else scores.to(dtype)
    labels = labels if labels.dtype == dtype else labels.to(dtype)
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
        keep = None
    elif mask.shape != scores.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from scores shape {tuple(scores.shape)}")
    else:
        mask = mask if mask.dtype == torch.bool else mask.bool()
        keep = float_mask(mask, dtype)
        labels = labels * keep
    highest = labels.amax(dim=-1, keepdim=True)
    below_highest = highest - labels if keep is None else (highest * keep).sub_(labels)
    weights = below_highest.amax(dim=-1, keepdim=True).sign_()  # 1 where some real label is below the highest
    total, lowest, label_total, count = torch.stack(
        (scores.detach().sum(), labels.min(), labels.sum(), weights.sum())).tolist()
    if not math.isfinite(label_total):
        raise ValueError("labels must be finite (inf or NaN among the real candidates' labels or teacher scores)")
    if graded and lowest < 0:
        raise ValueError("labels must be >= 0 (graded relevance); map negative judgments before training")
    weights = weights.div_(max(count, 1.0))
    if keep is not None:
        scores, labels = _replace_padded(scores, labels, mask, keep, exclude_padded, finite=math.isfinite(total))
    return scores, labels, mask, weights


def _replace_padded(
    scores: Tensor, labels: Tensor, mask: Tensor, keep: Tensor, exclude_padded: bool, finite: bool
) -> tuple[Tensor, Tensor]:
    """Scores with padded slots set to 0, or scores and labels with padded slots set to :data:`EXCLUDED` when
    ``exclude_padded``. (Built from the float mask by arithmetic: a bool select costs several times more.)"""
    if not exclude_padded:
        return (scores * keep if finite else torch.where(mask, scores, 0.0)), labels
    excluded = torch.add(EXCLUDED, keep, alpha=-EXCLUDED)  # EXCLUDED + |EXCLUDED| * keep: 0 at real slots
    return (scores + excluded if finite else torch.where(mask, scores, EXCLUDED)), labels + excluded
