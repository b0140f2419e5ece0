"""Fold schemes and the train 3 / validation 1 / test 1 rotation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rerank.data.folds import FoldsConfig, kfold, make_split, robust04_folds, rotate

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "robust04-topics"


def test_robust04_folds_are_the_huston_croft_folds() -> None:
    folds = robust04_folds()
    reference = json.loads((SHARED / "folds.huston_croft_2014.json").read_text())
    assert [sorted(f) for f in folds] == [sorted(reference[f"fold{k}"]) for k in range(1, 6)]
    assert sum(len(f) for f in folds) == 250


@pytest.mark.parametrize("test", [1, 2, 3, 4, 5])
def test_rotation_matches_the_cedr_capreolus_splits(test: int) -> None:
    split = rotate(robust04_folds(), test)
    reference = json.loads((SHARED / "splits.capreolus_rob04_cedr_folds.json").read_text())[f"s{test}"]
    def same(ours: list[str], theirs: list[str]) -> bool:  # capreolus drops topic 672 from some folds
        return set(ours) - {"672"} == set(theirs) - {"672"}

    assert same(split.test, reference["predict"]["test"])
    assert same(split.validation, reference["predict"]["dev"])
    assert same(split.train, reference["train_qids"])
    assert len(split.train) == 150 and not set(split.train) & (set(split.validation) | set(split.test))


def test_kfold_is_seeded_and_partitions_the_queries() -> None:
    queries = [str(q) for q in range(1, 226)]
    folds = kfold(queries, 5, seed=7)
    assert folds == kfold(reversed(queries), 5, seed=7)
    assert folds != kfold(queries, 5, seed=8)
    assert sorted(q for f in folds for q in f) == sorted(queries) and {len(f) for f in folds} == {45}


def test_explicit_lists_and_errors() -> None:
    split = make_split(FoldsConfig(scheme="explicit", lists=[["1"], ["2"], ["3"]], test=1), [])
    assert (split.train, split.validation, split.test) == (["2"], ["3"], ["1"])
    with pytest.raises(ValueError, match=r"folds.test must be in \[1, 3\]"):
        make_split(FoldsConfig(scheme="explicit", lists=[["1"], ["2"], ["3"]], test=4), [])
    with pytest.raises(ValueError, match="folds.scheme must be one of"):
        FoldsConfig(scheme="random")
