"""Score fusion: the re-ranker's scores mixed with the first stage's (Birch: Yilmaz et al., EMNLP 2019) and with
its teacher's, the weights chosen on validation queries.

For each query every run's scores are standardised over the query's candidates, ``z(s) = (s - mean) / std``, and
combined as ``sum_i w_i z(run_i)`` with weights that sum to 1 (CombSUM of z-normalised scores). ``interpolated``
is the re-ranker with the first stage, ``w * z(re-ranker) + (1 - w) * z(first stage)``; ``fused`` adds the
teacher the re-ranker learnt from, for when the pure model is not yet the best ranker (a zero-shot teacher can be
above it). The weights are chosen from a grid (steps of 0.1 on the simplex), on validation queries, by the measure
that also selects checkpoints.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from ..data.trec import Qrels, Run
from .measures import evaluate

STEPS = 10
DEFAULT_GRID = tuple(round(step / STEPS, 1) for step in range(STEPS + 1))


def standardise(scores: dict[str, float]) -> dict[str, float]:
    """Per-query z-scores (all zero when the scores are all equal)."""
    values = list(scores.values())
    mean = statistics.fmean(values)
    spread = statistics.pstdev(values, mu=mean)
    return {doc: (score - mean) / spread if spread > 0 else 0.0 for doc, score in scores.items()}


def fuse(runs: Sequence[Run], weights: Sequence[float]) -> Run:
    """``sum_i weights[i] * z(runs[i])`` for the candidates of each query of ``runs[0]`` (which every run scores)."""
    return _combine(_standardised(runs), weights)


def _standardised(runs: Sequence[Run]) -> dict[str, list[dict[str, float]]]:
    """Each query's z-scores in every run, over the candidates of ``runs[0]``."""
    return {qid: [standardise({doc: run[qid][doc] for doc in scores}) for run in runs]
            for qid, scores in runs[0].items()}


def _combine(standardised: dict[str, list[dict[str, float]]], weights: Sequence[float]) -> Run:
    return {qid: {doc: sum(weight * z[doc] for weight, z in zip(weights, runs)) for doc in runs[0]}
            for qid, runs in standardised.items()}


def interpolate(reranker: Run, first_stage: Run, weight: float) -> Run:
    """``weight * z(reranker) + (1 - weight) * z(first_stage)`` for the candidates of each query."""
    return fuse([reranker, first_stage], [weight, 1 - weight])


def simplex(parts: int) -> list[tuple[float, ...]]:
    """Every weight vector of ``parts`` weights in steps of 0.1 that sum to 1, the first weight largest first."""
    def splits(left: int, count: int) -> Iterable[tuple[int, ...]]:
        if count == 1:
            yield (left,)
            return
        for first in range(left, -1, -1):
            yield from ((first, *rest) for rest in splits(left - first, count - 1))

    return [tuple(round(step / STEPS, 1) for step in split) for split in splits(STEPS, parts)]


def best_weight(reranker: Run, first_stage: Run, qrels: Qrels, measure: str,
                grid: Iterable[float] = DEFAULT_GRID) -> tuple[float, float]:
    """The grid weight with the highest mean ``measure`` (the largest weight among ties), and that value."""
    scored = [(evaluate(interpolate(reranker, first_stage, w), qrels, [measure]).mean[measure], w) for w in grid]
    value, weight = max(scored)
    return weight, value


def best_weights(runs: Sequence[Run], qrels: Qrels, measure: str) -> tuple[tuple[float, ...], float]:
    """The weights of :func:`simplex` whose fusion of ``runs`` has the highest mean ``measure`` (among ties, the
    largest weight of the first run, then of the second), and that value."""
    standardised = _standardised(runs)  # once, for every weight vector
    scored = [(evaluate(_combine(standardised, weights), qrels, [measure]).mean[measure], weights)
              for weights in simplex(len(runs))]
    value, weights = max(scored)
    return weights, value
