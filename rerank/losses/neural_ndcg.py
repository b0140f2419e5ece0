"""NeuralNDCG: NDCG over a NeuralSort relaxation of the sorting permutation.

Pobrotyn and Bialobrzeski. *NeuralNDCG: Direct Optimisation of a Ranking Metric via Differentiable Relaxation
of Sorting.* arXiv:2102.07831, 2021, Eqs. 5-9; NeuralSort from Grover et al., ICLR 2019, Eq. 5.

For a list of n scores, row r (1-based) of the relaxed permutation matrix is (NeuralSort)::

    P[r, :] = softmax( ((n + 1 - 2r) * s - A_s 1) / T ),      (A_s 1)_j = sum_k |s_j - s_k|

made doubly stochastic by Sinkhorn scaling (alternate column and row normalisation, at most ``max_iter``
rounds, stopping when every row and column sums to 1 within 1e-6; computed through scaling vectors, so memory
stays O(N^2) per list whatever the number of rounds), and::

    NeuralNDCG = 1/IDCG * sum_r (P g(y))_r / log2(1 + r)

The loss is ``1 - NeuralNDCG``. Parameters: ``temperature`` T (default 1, as the authors), ``max_iter``
(default 50). n is each query's own number of real candidates, so padding changes nothing.

Example::

    >>> import torch
    >>> from rerank.losses import NeuralNDCG
    >>> value = NeuralNDCG(temperature=1.0)(torch.randn(2, 4, requires_grad=True), torch.tensor([[2, 0, 1, 0]] * 2))
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.checks import check_range
from .base import RankingLoss
from .functional import gains, ideal_dcg, rank_discounts, safe_divide, score_differences

SINKHORN_TOLERANCE = 1e-6
SINKHORN_EPS = 1e-10  # rows and columns summing to less get a zero scaling (empty ones stay 0, gradients finite)


def neural_sort(scores: Tensor, mask: Tensor, temperature: float) -> Tensor:
    """``[Q, N, N]`` NeuralSort matrix: ``[q, r, j]`` ~ probability that candidate j has rank r + 1.

    Rows past a query's length and columns of padded candidates are zero.
    """
    lengths = mask.sum(dim=-1, keepdim=True).to(scores.dtype)
    spread = torch.where(mask.unsqueeze(-2), score_differences(scores).abs(), 0.0).sum(dim=-1)
    ranks = torch.arange(1, scores.shape[-1] + 1, dtype=scores.dtype, device=scores.device)
    scaling = lengths + 1.0 - 2.0 * ranks  # [Q, N]
    logits = (scaling.unsqueeze(-1) * scores.unsqueeze(-2) - spread.unsqueeze(-2)) / temperature
    matrix = torch.softmax(logits.masked_fill(~mask.unsqueeze(-2), -torch.inf), dim=-1)
    return torch.where(_cells(mask), matrix, torch.zeros_like(matrix))


def _cells(mask: Tensor) -> Tensor:
    """``[Q, N, N]`` bool: the (rank, candidate) cells of a list of ``mask.sum()`` real candidates."""
    rows = torch.arange(mask.shape[-1], device=mask.device) < mask.sum(dim=-1, keepdim=True)
    return rows.unsqueeze(-1) & mask.unsqueeze(-2)


def sinkhorn_scalings(matrix: Tensor, max_iter: int) -> tuple[Tensor, Tensor, Tensor]:
    """Row and column scalings ``u, v`` that make ``diag(u) @ matrix @ diag(v)`` doubly stochastic, and the
    transposed matrix (contiguous) used to compute them.

    Sinkhorn and Knopp (1967): alternately normalise columns then rows, as allRank does, but through the
    scaling vectors, so each round is two batched vector-matrix products and the backward pass stores vectors,
    not matrices. Stops after ``max_iter`` rounds or when every column sums to 1 within 1e-6 (rows sum to 1
    after each round). Empty rows and columns (padding) get a zero scaling.
    """
    transposed = matrix.mT.contiguous()  # row-vector products are the fast batched-matmul path
    rows = torch.ones(matrix.shape[:-1], dtype=matrix.dtype, device=matrix.device)
    columns = _reciprocal(vector_times(rows, matrix))
    for _ in range(max_iter):
        rows = _reciprocal(vector_times(columns, transposed))
        column_sums = vector_times(rows, matrix)
        converged = float(torch.where(columns > 0, column_sums.detach() * columns.detach() - 1.0, 0.0).abs().max())
        if converged < SINKHORN_TOLERANCE:
            break
        columns = _reciprocal(column_sums)
    return rows, columns, transposed


def vector_times(vectors: Tensor, matrices: Tensor) -> Tensor:
    """``[Q, N] x [Q, N, M] -> [Q, M]``, each row vector times its matrix."""
    return torch.bmm(vectors.unsqueeze(1), matrices).squeeze(1)


def _reciprocal(sums: Tensor) -> Tensor:
    """``1 / sums`` where ``sums > SINKHORN_EPS``, else 0 (finite in both passes)."""
    large = sums > SINKHORN_EPS
    return torch.where(large, 1.0 / torch.where(large, sums, 1.0), 0.0)


class NeuralNDCG(RankingLoss):
    """``1 - NeuralNDCG`` over a Sinkhorn-scaled NeuralSort permutation matrix."""

    def __init__(self, temperature: float = 1.0, max_iter: int = 50) -> None:
        super().__init__()
        check_range("temperature", temperature, above=0)
        check_range("max_iter", max_iter, 1)
        self.temperature = float(temperature)
        self.max_iter = int(max_iter)

    def per_query(self, scores: Tensor, labels: Tensor, mask: Tensor) -> Tensor:
        relaxed = neural_sort(scores, mask, self.temperature)
        rows, columns, transposed = sinkhorn_scalings(relaxed, self.max_iter)
        item_gains = gains(labels, mask)
        gain_at_rank = rows * vector_times(columns * item_gains, transposed)
        dcg = (gain_at_rank * rank_discounts(scores.shape[-1], None, scores)).sum(dim=-1)
        return 1.0 - safe_divide(dcg, ideal_dcg(item_gains, None))
