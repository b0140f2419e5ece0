"""Listwise distillation: ListNet against a teacher's score distribution, with a temperature.

Hinton, Vinyals and Dean. *Distilling the Knowledge in a Neural Network.* 2015; for rankers, the listwise KL of
Rank-DistiLLM (Schlatt et al., 2024) and the top-one ListNet cross-entropy of Cao et al. (ICML 2007).

With the teacher's scores ``t`` as targets and ``T`` the temperature::

    L = - sum_j softmax(t / T)_j * log softmax(s)_j

over each query's real candidates: the KL divergence from the teacher's distribution to the student's, up to the
teacher's entropy, a constant (same gradient). ``T`` sets how peaked the targets are: a bi-encoder's cosine
similarities differ by hundredths, so its scores need ``T`` around 0.05 to say more than "all alike". Lists
whose teacher scores are all equal carry no preference and do not contribute.

Example::

    >>> import torch
    >>> from rerank.losses import DistillListNet
    >>> teacher = torch.tensor([[0.61, 0.35, 0.42, 0.20]])
    >>> value = DistillListNet(temperature=0.05)(torch.randn(1, 4, requires_grad=True), teacher)
"""

from __future__ import annotations

from torch import Tensor

from ..core.checks import check_range
from .listnet import ListNet


class DistillListNet(ListNet):
    """``-sum_j softmax(t / T)_j log softmax(s)_j`` against the teacher's scores ``t``."""

    graded = False

    def __init__(self, temperature: float = 1.0) -> None:
        super().__init__()
        check_range("temperature", temperature, above=0)
        self.temperature = float(temperature)

    def weighted_sum(self, scores: Tensor, labels: Tensor, mask: Tensor, weights: Tensor) -> Tensor:
        # padded slots hold EXCLUDED (dividing by T < 1 may take it to -inf: still probability 0)
        return super().weighted_sum(scores, labels / self.temperature, mask, weights)
