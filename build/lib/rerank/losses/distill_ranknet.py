"""Pairwise distillation: RankNet on a teacher's preferences.

Burges et al. *Learning to Rank using Gradient Descent.* ICML 2005, with the pair order given by a teacher
instead of judgments (as in the pairwise distillation of Hofstätter et al., 2020, without their margins).

For each pair of real candidates with ``t_i > t_j`` (the teacher prefers i)::

    C_ij = log(1 + exp(-sigma * (s_i - s_j)))

averaged over the query's pairs. Parameter: ``sigma`` (default 1). Only the teacher's order matters, not its
scale, so any teacher's scores can be used as they are.

Example::

    >>> import torch
    >>> from rerank.losses import DistillRankNet
    >>> teacher = torch.tensor([[0.61, 0.35, 0.42, 0.20]])
    >>> value = DistillRankNet()(torch.randn(1, 4, requires_grad=True), teacher)
"""

from __future__ import annotations

from .ranknet import RankNet


class DistillRankNet(RankNet):
    """Mean ``log(1 + exp(-sigma (s_i - s_j)))`` over pairs the teacher orders ``t_i > t_j``."""

    graded = False
