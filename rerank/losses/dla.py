"""The dual learning algorithm (DLA): a ranker and a propensity model learnt together from clicks.

Ai, Bi, Luo, Guo and Croft. *Unbiased Learning to Rank with Unbiased Propensity Estimation.* SIGIR 2018.

Each list holds documents of one query with their naive click rates ``c_j`` (``clicks.estimator: dla``,
:mod:`rerank.clicks.targets`) and the ranks ``k_j`` the log showed them at. The propensity model is one logit
``phi_k`` per rank, ``theta = softmax(phi)`` the examination probabilities; the ranker's scores ``s`` give the
relevance probabilities ``r = softmax(s)``. Each model is trained by a softmax cross-entropy weighted by the
other's inverse (their Eqs. 6 and 9, with ULTRA's normalisation by the list's first-ranked document ``j*``)::

    L_rank = - sum_j c_j * min(theta_1 / theta_{k_j}, 1 / clip) * log softmax(s)_j
    L_exam = - sum_j c_j * min(r_{j*} / r_j,       1 / clip) * log softmax_l(phi_{k_l})_j

The weights are constants (no gradient flows through them), so ``L_rank`` trains the ranker and ``L_exam`` the
propensity model, and the head returns their sum. When clicks follow the position-based model
(``E[c_j] = theta_{k_j} * rel_j``), ``L_exam`` is minimal where ``softmax(phi)`` over the list's ranks is
proportional to ``theta``, and ``L_rank`` is then IPS with those propensities. The logits start at 0 (every rank
examined alike: naive training) and learn at their own rate ``lr``; :meth:`DualLearning.propensities` gives
``theta_k / theta_1``. A list may be any subset of a page: both softmaxes run over the list's own documents.

Example::

    >>> import torch
    >>> from rerank.losses import DualLearning
    >>> head = DualLearning(ranks=10)
    >>> clicks = torch.tensor([[0.30, 0.0, 0.05, 0.0]])     # click rates of the documents at ranks 1, 2, 3, 5
    >>> value = head(torch.randn(1, 4, requires_grad=True), clicks, ranks=torch.tensor([[1, 2, 3, 5]]))
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..core.checks import check_range
from .base import EXCLUDED, RankingLoss, prepare


class DualLearning(RankingLoss):
    """DLA's two inverse-weighted softmax losses over click rates, with one propensity logit per rank.

    Args:
        ranks: how many ranks the propensity model covers (a log's page depth, ``clicks.depth``).
        clip: the smallest propensity or relevance ratio divided by (no weight exceeds ``1 / clip``).
        lr: the propensity logits' learning rate (their own group in the optimizer).
    """

    graded = False
    needs_ranks = True

    def __init__(self, ranks: int = 10, clip: float = 0.01, lr: float = 0.1) -> None:
        super().__init__()
        check_range("dla: ranks", ranks, 2)
        check_range("dla: clip", clip, above=0, maximum=1)
        check_range("dla: lr", lr, above=0)
        self.ranks, self.clip, self.lr = ranks, clip, lr
        self.logits = nn.Parameter(torch.zeros(ranks))

    def propensities(self) -> list[float]:
        """The learnt ``theta_k / theta_1`` for ranks ``1..ranks``."""
        return (self.logits - self.logits[0]).detach().exp().tolist()

    def forward(self, scores: Tensor, labels: Tensor, mask: Tensor | None = None,  # type: ignore[override]
                ranks: Tensor | None = None) -> Tensor:
        """``sum_q weights_q (L_rank + L_exam)_q`` over the contributing queries (the module docstring)."""
        if ranks is None or ranks.shape != scores.shape:
            raise ValueError("the dla head needs the rank each document was shown at, shaped like the scores "
                             "(the lists of a targets: clicks source)")
        scores, labels, mask, weights = prepare(scores, labels, mask, exclude_padded=False, graded=False)
        if bool((labels < 0).any()):
            raise ValueError("click rates must be >= 0")
        # a batch may hold lists of other sources (a teacher's beside the log's): no ranks (0), no clicks, no loss
        from_log = (ranks > 0).any(dim=-1, keepdim=True)
        shown = torch.where(mask & from_log, ranks, 1)
        if bool(((shown < 1) | (shown > self.ranks)).any()):
            raise ValueError(f"a document shown at rank {int(shown[(shown < 1) | (shown > self.ranks)][0])}: the dla "
                             f"head models ranks 1 to {self.ranks} (model.click_loss_args: {{ranks: ...}})")
        with torch.autocast(device_type=scores.device.type, enabled=False):
            logits = self.logits.to(scores.dtype)[shown - 1]
            ranking = scores.masked_fill(~mask, EXCLUDED).log_softmax(dim=-1)
            examination = logits.masked_fill(~mask, EXCLUDED).log_softmax(dim=-1)
            log_ratio = (self.logits[0].to(scores.dtype) - logits).detach()  # log theta_1 / theta_k
            inverse_propensity = log_ratio.clamp(max=-math.log(self.clip)).exp()
            relevance = ranking.detach()  # log r, finite even where r underflows
            first = shown.masked_fill(~mask, self.ranks + 1).argmin(dim=-1, keepdim=True)
            inverse_relevance = (relevance.gather(-1, first) - relevance).clamp(max=-math.log(self.clip)).exp()
            # the weights meet the clicks first: padded slots (click 0) stay 0 against their very low log-probabilities
            per_query = -((labels * inverse_propensity) * ranking + (labels * inverse_relevance) * examination).sum(-1)
            return per_query @ weights.squeeze(-1)
