"""Softmax cross-entropy weighted by debiased clicks: the listwise loss of counterfactual learning to rank.

Joachims, Swaminathan and Schnabel. *Unbiased Learning-to-Rank with Biased Feedback.* WSDM 2017 (inverse propensity
scoring); Ai, Bi, Luo, Guo and Croft. *Unbiased Learning to Rank with Unbiased Propensity Estimation.* SIGIR 2018
(the softmax loss weighted by ``click / propensity``).

With ``w_j`` the candidate's click target (its clicks divided by the propensity of the rank they came from,
averaged over the query's impressions, :mod:`rerank.clicks.targets`; or its plain click rate for naive
training)::

    L = - sum_j w_j * log softmax(s)_j

over each query's real candidates. ``L`` is linear in the clicks, so with ``w_j`` an unbiased estimate of
relevance (IPS) its expectation is the loss on relevance itself. The weights must be >= 0; a list whose weights
are all equal (no click at all) carries no preference and does not contribute.

Example::

    >>> import torch
    >>> from rerank.losses import ClickSoftmax
    >>> clicks = torch.tensor([[4.0, 0.0, 1.0, 0.0]])    # e.g. a click at rank 2 (propensity 0.25), one at rank 1
    >>> value = ClickSoftmax()(torch.randn(1, 4, requires_grad=True), clicks)
"""

from __future__ import annotations

from torch import Tensor

from .base import EXCLUDED, RankingLoss


class ClickSoftmax(RankingLoss):
    """``-sum_j w_j log softmax(s)_j`` against click weights ``w >= 0``."""

    graded = False

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        if bool((labels < 0).any()):
            raise ValueError("click weights must be >= 0 (clicks / propensity)")
        log_probabilities = scores.masked_fill(~mask, EXCLUDED).log_softmax(dim=-1)
        return -(labels * log_probabilities).sum(dim=-1)  # padded labels are 0
