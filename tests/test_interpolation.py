"""Interpolation with the first stage and fusion with the teacher (rerank.evaluation.fusion) against hand computations
and brute-force enumeration."""

from __future__ import annotations

import itertools
import math

import pytest

from rerank.evaluation.fusion import best_weight, best_weights, fuse, interpolate, simplex, standardise

# one relevant document, a; the re-ranker puts b first, the first stage puts c first
RERANKER = {"q": {"a": 1.0, "b": 1.1, "c": 0.0}}
FIRST_STAGE = {"q": {"a": 1.0, "b": 0.0, "c": 1.1}}
QRELS = {"q": {"a": 1}}
DEFAULT_TENTHS = [step / 10 for step in range(11)]


def test_z_scores_use_the_population_standard_deviation() -> None:
    mean = 2.1 / 3
    spread = math.sqrt(((1.0 - mean) ** 2 + (1.1 - mean) ** 2 + mean**2) / 3)
    assert standardise(RERANKER["q"]) == pytest.approx({"a": (1.0 - mean) / spread, "b": (1.1 - mean) / spread,
                                                        "c": -mean / spread})
    assert standardise({"x": 2.0, "y": 2.0}) == {"x": 0.0, "y": 0.0}  # equal scores: no spread, all zero


def test_interpolation_is_the_weighted_sum_of_per_query_z_scores() -> None:
    weight = 0.3
    ours, theirs = standardise(RERANKER["q"]), standardise(FIRST_STAGE["q"])
    mixed = interpolate(RERANKER, FIRST_STAGE, weight)
    assert mixed["q"] == pytest.approx({doc: weight * ours[doc] + (1 - weight) * theirs[doc] for doc in "abc"})
    # by hand: z(a) = 0.604 in both lists; b and c swap +0.805 and -1.409
    assert mixed["q"]["a"] == pytest.approx(0.6040, abs=1e-4)
    assert mixed["q"]["b"] == pytest.approx(0.3 * 0.8054 + 0.7 * -1.4094, abs=1e-3)


def test_the_weight_is_the_largest_of_the_best_on_validation() -> None:
    # a ranks first exactly when 0.091 < w < 0.909 (hand computation from the z-scores above): on the grid
    # 0, 0.1, ..., 1 that is 0.1 ... 0.9, and the largest of the tied best is 0.9
    weight, value = best_weight(RERANKER, FIRST_STAGE, QRELS, "MRR")
    assert (weight, value) == (0.9, 1.0)
    assert best_weight(RERANKER, FIRST_STAGE, QRELS, "MRR", grid=(0.0, 1.0)) == (1.0, 0.5)  # a second either way
    assert best_weight(RERANKER, FIRST_STAGE, QRELS, "MRR", grid=(0.0, 0.05, 1.0)) == (1.0, 0.5)


def test_the_fusion_grid_is_every_tenth_weight_vector_on_the_simplex() -> None:
    enumerated = {weights for weights in itertools.product([step / 10 for step in range(11)], repeat=3)
                  if math.isclose(sum(weights), 1.0)}
    grid = simplex(3)
    assert len(grid) == len(set(grid)) == len(enumerated) == 66
    assert {tuple(round(w, 1) for w in weights) for weights in grid} == {
        tuple(round(w, 1) for w in weights) for weights in enumerated}
    assert simplex(2) == [(w, round(1 - w, 1)) for w in reversed(DEFAULT_TENTHS)]


def test_fusion_is_the_weighted_sum_of_each_runs_z_scores() -> None:
    teacher = {"q": {"a": 3.0, "b": 1.0, "c": 2.0}}
    fused = fuse([RERANKER, teacher, FIRST_STAGE], (0.2, 0.5, 0.3))
    z = [standardise(run["q"]) for run in (RERANKER, teacher, FIRST_STAGE)]
    assert fused["q"] == pytest.approx({doc: 0.2 * z[0][doc] + 0.5 * z[1][doc] + 0.3 * z[2][doc] for doc in "abc"})
    assert fuse([RERANKER, FIRST_STAGE], (0.3, 0.7)) == interpolate(RERANKER, FIRST_STAGE, 0.3)


def test_the_fusion_weights_are_the_best_on_validation_with_the_reranker_first_among_ties() -> None:
    # the teacher ranks perfectly, the re-ranker and the first stage exactly backwards: z(re-ranker) =
    # z(first stage) = -z(teacher), so a fusion ranks perfectly iff w_teacher > w_reranker + w_first_stage, i.e.
    # w_teacher >= 0.6 on the grid; the largest re-ranker weight among those is 0.4, with w_first_stage 0
    ideal = {"q": {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0}}
    backwards = {"q": {doc: -score for doc, score in ideal["q"].items()}}
    qrels = {"q": {"a": 3, "b": 2, "c": 1}}
    weights, value = best_weights([backwards, ideal, backwards], qrels, "nDCG@3")
    assert weights == (0.4, 0.6, 0.0) and value == pytest.approx(1.0)
