"""Interpolation of re-ranker and first-stage scores (Birch: Yilmaz et al., EMNLP 2019).

For each query the two score lists are standardised, ``z(s) = (s - mean) / std`` over the query's candidates,
and combined as ``w * z(re-ranker) + (1 - w) * z(first stage)``. ``w`` is chosen on validation queries from a
grid, by the measure that also selects checkpoints.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from .data.trec import Qrels, Run
from .evaluation import evaluate

DEFAULT_GRID = tuple(round(0.1 * step, 1) for step in range(11))


def standardise(scores: dict[str, float]) -> dict[str, float]:
    """Per-query z-scores (all zero when the scores are all equal)."""
    values = list(scores.values())
    mean = statistics.fmean(values)
    spread = statistics.pstdev(values, mu=mean)
    return {doc: (score - mean) / spread if spread > 0 else 0.0 for doc, score in scores.items()}


def interpolate(reranker: Run, first_stage: Run, weight: float) -> Run:
    """``weight * z(reranker) + (1 - weight) * z(first_stage)`` for the candidates of each query."""
    run = {}
    for qid, scores in reranker.items():
        ours, theirs = standardise(scores), standardise({doc: first_stage[qid][doc] for doc in scores})
        run[qid] = {doc: weight * ours[doc] + (1 - weight) * theirs[doc] for doc in scores}
    return run


def best_weight(reranker: Run, first_stage: Run, qrels: Qrels, measure: str,
                grid: Iterable[float] = DEFAULT_GRID) -> tuple[float, float]:
    """The grid weight with the highest mean ``measure`` (the largest weight among ties), and that value."""
    scored = [(evaluate(interpolate(reranker, first_stage, w), qrels, [measure]).mean[measure], w) for w in grid]
    value, weight = max(scored)
    return weight, value
