"""Pointwise binary cross-entropy against debiased clicks: the pointwise loss of counterfactual learning to rank.

Saito, Yaginuma, Nishino, Sakata and Nakata. *Unbiased Recommender Learning from Missing-Not-At-Random Implicit
Feedback.* WSDM 2020 (the inverse-propensity-weighted log loss, their Eq. 7); Bekker, Robberechts and Davis.
*Beyond the Selected Completely At Random Assumption for Learning from Positive and Unlabeled Data.* ECML-PKDD 2019.

With ``w_j`` the candidate's click target (its clicks divided by their ranks' propensities, averaged over the
query's impressions, :mod:`rerank.clicks.targets`; or its plain click rate for naive training) and ``sigma`` the
logistic function::

    L = - (1 / n) sum_j [ w_j log sigma(s_j) + (1 - w_j) log(1 - sigma(s_j)) ]

over each query's ``n`` real candidates. ``L`` is linear in ``w``, so with IPS targets (an unbiased estimate of
the probability of a click when examined) its expectation is the log loss on that probability; its gradient in
``s_j`` is ``sigma(s_j) - w_j``, bounded by the clipped propensity (``clicks.clip``) even where a single click's
target exceeds 1. Queries whose shown documents all have the same target carry no contrast and do not contribute
(:mod:`rerank.losses.base`).

Example::

    >>> import torch
    >>> from rerank.losses import ClickBCE
    >>> clicks = torch.tensor([[0.8, 0.0, 0.3, 0.0]])    # click targets of four shown documents
    >>> value = ClickBCE()(torch.randn(1, 4, requires_grad=True), clicks)
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from .base import RankingLoss
from .pointwise import mean_over_candidates


class ClickBCE(RankingLoss):
    """``-(1/n) sum_j [w_j log sigma(s_j) + (1 - w_j) log(1 - sigma(s_j))]`` against click targets ``w >= 0``."""

    graded = False
    min_list_size = 1

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        if bool((labels < 0).any()):
            raise ValueError("click targets must be >= 0 (clicks / propensity)")
        losses = F.binary_cross_entropy_with_logits(scores, labels, reduction="none")  # any real target
        return mean_over_candidates(losses, mask)
