"""The Rank-Binomial distribution of SoftRank (Taylor et al., WSDM 2008, Eq. 12), exact and differentiable.

The 0-based rank of candidate j is the number of candidates that beat it. With independent pairwise contests,
i beating j with probability ``pi_ij = Phi((s_i - s_j) / (sqrt(2) sigma))`` (Eq. 9), its distribution follows
the recursion (one contest at a time)::

    p_j^(i)(r) = p_j^(i-1)(r - 1) * pi_ij + p_j^(i-1)(r) * (1 - pi_ij),          p_j^(0) = delta(r)

which costs O(N * R) per candidate for R tracked ranks. SoftNDCG needs only the expected discount
``E_j = sum_r D(r) p_j(r)`` of each candidate with a gain, which :func:`expected_rank_discounts` computes:

- on CPU, with compiled kernels (numba): the recursion runs in cache, one query per thread, and the backward
  pass runs the adjoint recursion (the gradient of Eqs. 16-23) and returns the gradient of the scores::

      dE_j/dpi_ij = sum_r p_j^(i-1)(r) * (beta^(i)(r + 1) - beta^(i)(r))
      beta^(i-1)(r) = (1 - pi_ij) * beta^(i)(r) + pi_ij * beta^(i)(r + 1),          beta^(N) = D

  recomputing each candidate's forward states in a private buffer instead of storing them;
- elsewhere (CUDA, or without numba), as batched tensor operations under autograd (:func:`rank_binomial`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; this keeps the module importable without it
    numba = None


def win_probabilities(scores: Tensor, mask: Tensor, sigma: float) -> Tensor:
    """``[Q, N, N]`` with ``[q, i, j] = pi_ij`` (Eq. 9); zero on the diagonal and for padded candidates i."""
    beats = torch.special.ndtr((scores.unsqueeze(-1) - scores.unsqueeze(-2)) / (math.sqrt(2.0) * sigma))
    contest = mask.unsqueeze(-1) & ~torch.eye(scores.shape[-1], dtype=torch.bool, device=scores.device)
    return torch.where(contest, beats, 0.0)


def rank_binomial(contests: Tensor, ranks: int) -> Tensor:
    """Exact rank distributions by the recursion, as tensor operations, ``[Q, M, ranks]``.

    Args:
        contests: ``[Q, M, N]``, ``[q, m, i]`` = probability that candidate i beats candidate m (0 leaves the
            distribution unchanged: use it for m itself and for padding).
        ranks: number of ranks to track (0..ranks-1); mass that falls beyond is dropped.
    """
    queries, candidates, opponents = contests.shape
    dist = F.one_hot(torch.zeros(queries, candidates, dtype=torch.long, device=contests.device), ranks)
    dist = dist.to(contests.dtype)
    for i in range(opponents):
        support = min(i + 2, ranks)  # after i+1 contests the rank is at most i+1
        head = dist[..., :support]
        moved = F.pad(head[..., :-1], (1, 0))
        head = torch.lerp(head, moved, contests[..., i : i + 1])
        dist = torch.cat([head, dist[..., support:]], dim=-1) if support < ranks else head
    return dist


def expected_rank_discounts(scores: Tensor, mask: Tensor, active: Tensor, sigma: float, discounts: Tensor) -> Tensor:
    """``[Q, N]`` expected discount ``E_j = sum_r D(r) p_j(r)`` of each active candidate (0 elsewhere).

    Args:
        scores: ``[Q, N]`` float scores.
        mask: ``[Q, N]`` bool, True for real candidates.
        active: ``[Q, N]`` bool, the candidates whose expected discount is wanted (a subset of ``mask``).
        sigma: the score noise of Eq. 8.
        discounts: ``[Q, R]`` discount of 0-based ranks 0..R-1 (ranks from R on count as 0).
    """
    if scores.device.type == "cpu" and numba is not None:
        return _CompiledExpectedDiscounts.apply(scores, mask, active, sigma, discounts)
    width = max(int(active.sum(dim=-1).max()), 1)
    rows = active.to(torch.int8).sort(dim=-1, descending=True, stable=True).indices[:, :width]
    contests = win_probabilities(scores, mask, sigma).transpose(-1, -2).gather(1, rows.unsqueeze(-1).expand(
        -1, -1, scores.shape[-1]))
    expected = torch.einsum("qmr,qr->qm", rank_binomial(contests, discounts.shape[-1]), discounts)
    expected = torch.where(active.gather(-1, rows), expected, 0.0)
    return torch.zeros_like(scores).scatter_add(-1, rows, expected)


class _CompiledExpectedDiscounts(torch.autograd.Function):
    """The recursion and its adjoint as numba kernels, parallel over queries.

    The contest probabilities are computed by vectorised tensor operations and handed to the kernels as a
    ``[Q, j, i]`` array; the kernels skip the diagonal and padded opponents, return the expected discounts,
    and backward the gradient with respect to the scores directly.
    """

    @staticmethod
    def forward(ctx, scores, mask, active, sigma, discounts):  # type: ignore[override]
        scaled = scores.detach() / (math.sqrt(2.0) * sigma)
        contests = torch.special.ndtr(scaled.unsqueeze(-2) - scaled.unsqueeze(-1))  # [q, j, i] = pi_ij
        out = np.empty(tuple(scores.shape), dtype=_numpy(scores).dtype)
        _forward_kernel(_numpy(contests), _numpy(mask), _numpy(active), _numpy(discounts.to(scores.dtype)), out)
        ctx.save_for_backward(scaled, mask, active, discounts, contests)
        ctx.sigma = sigma
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        scaled, mask, active, discounts, contests = ctx.saved_tensors
        grad = np.zeros(tuple(scaled.shape), dtype=_numpy(scaled).dtype)
        slope = 1.0 / (math.sqrt(2.0 * math.pi) * math.sqrt(2.0) * ctx.sigma)  # d pi / d s at equal scores
        _backward_kernel(_numpy(contests), _numpy(scaled), slope, _numpy(mask), _numpy(active),
                         _numpy(discounts.to(scaled.dtype)), _numpy(grad_output.to(scaled.dtype)), grad)
        return torch.from_numpy(grad), None, None, None, None


def _numpy(tensor: Tensor) -> np.ndarray:
    return tensor.detach().contiguous().numpy()


if numba is not None:
    # Distributions are stored shifted by one behind a zero sentinel (p(r) at index r + 1) so that each contest
    # is one branch-free, in-place loop over the ranks, from the top down, which the compiler vectorises.
    # contests[q, j, i] = pi_ij = Phi(z_i - z_j) with z = s / (sqrt(2) sigma), so that
    # d pi_ij / d s_i = -d pi_ij / d s_j = exp(-(z_i - z_j)^2 / 2) / (sqrt(2 pi) sqrt(2) sigma).

    @numba.njit(parallel=True, cache=True, nogil=True, fastmath=True)
    def _forward_kernel(contests, mask, active, discounts, out):  # pragma: no cover - compiled
        queries, length = active.shape
        ranks = discounts.shape[1]
        for q in numba.prange(queries):
            dist = np.empty(ranks + 1, dtype=contests.dtype)
            for j in range(length):
                out[q, j] = 0.0
                if not active[q, j]:
                    continue
                dist[:] = 0.0
                dist[1] = 1.0
                support = 1  # ranks 0..support-1 can have mass
                for i in range(length):
                    w = contests[q, j, i]
                    if i != j and mask[q, i] and w != 0.0:
                        support = min(support + 1, ranks)
                        for r in range(support, 0, -1):
                            dist[r] = dist[r] + w * (dist[r - 1] - dist[r])
                total = dist[0]  # the zero sentinel, in the array's dtype
                for r in range(support):
                    total += discounts[q, r] * dist[r + 1]
                out[q, j] = total

    @numba.njit(parallel=True, cache=True, nogil=True, fastmath=True)
    def _backward_kernel(contests, scaled, slope, mask, active, discounts, upstream, grad):  # pragma: no cover
        queries, length = active.shape
        ranks = discounts.shape[1]
        for q in numba.prange(queries):
            states = np.empty((length + 1, ranks + 1), dtype=contests.dtype)  # states[t]: before contest t
            supports = np.empty(length + 1, dtype=np.int64)
            opponents = np.empty(length, dtype=np.int64)
            dist = np.empty(ranks + 1, dtype=contests.dtype)
            beta = np.empty(ranks + 1, dtype=contests.dtype)
            step = np.empty(ranks, dtype=contests.dtype)
            for j in range(length):
                if not active[q, j] or upstream[q, j] == 0.0:
                    continue
                dist[:] = 0.0
                dist[1] = 1.0
                support = 1
                played = 0
                for i in range(length):
                    w = contests[q, j, i]
                    if i == j or not mask[q, i] or w == 0.0:
                        continue
                    states[played, : support + 1] = dist[: support + 1]
                    supports[played] = support
                    opponents[played] = i
                    played += 1
                    support = min(support + 1, ranks)
                    for r in range(support, 0, -1):
                        dist[r] = dist[r] + w * (dist[r - 1] - dist[r])
                for r in range(ranks):
                    beta[r] = upstream[q, j] * discounts[q, r]
                beta[ranks] = 0.0  # mass beyond the tracked ranks is dropped
                for t in range(played - 1, -1, -1):
                    support = supports[t]
                    moved = min(support + 1, ranks)
                    total = states[t, 0]  # the zero sentinel, in the array's dtype
                    for r in range(support):
                        step[r] = beta[r + 1] - beta[r]
                        total += states[t, r + 1] * step[r]
                    if moved > support:
                        step[support] = beta[support + 1] - beta[support]
                    i = opponents[t]
                    for r in range(moved):
                        beta[r] += contests[q, j, i] * step[r]
                    gap = scaled[q, i] - scaled[q, j]
                    through = total * slope * math.exp(-0.5 * gap * gap)
                    grad[q, i] += through
                    grad[q, j] -= through
