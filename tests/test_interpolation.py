"""Interpolation with the first stage (rerank.interpolation) against hand computations."""

from __future__ import annotations

import math

import pytest

from rerank.interpolation import best_weight, interpolate, standardise

# one relevant document, a; the re-ranker puts b first, the first stage puts c first
RERANKER = {"q": {"a": 1.0, "b": 1.1, "c": 0.0}}
FIRST_STAGE = {"q": {"a": 1.0, "b": 0.0, "c": 1.1}}
QRELS = {"q": {"a": 1}}


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
