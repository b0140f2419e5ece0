"""Query folds for cross-validation: the standard Robust04 folds, seeded k-fold, or explicit lists.

The Robust04 folds are Huston and Croft's (2014) 5 x 50 topics, as ``ir_datasets`` ships them
(``disks45/nocr/trec-robust-2004/fold1..fold5``). The rotation is the one of CEDR and capreolus: for test fold
k, validation is fold k-1 (fold 5 when k = 1) and training the three others.

Configured as::

    folds:
      scheme: robust04          # or: kfold (with count and seed), or: explicit (with lists)
      test: 1                   # which fold is the test fold (1-based)
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..core.checks import check_range

SCHEMES = ("robust04", "kfold", "explicit")
SPLITS = ("train", "validation", "test")
ROBUST04_FOLD_COUNT = 5


@dataclass(frozen=True)
class Split:
    """Query ids for training, validation and test."""

    train: list[str]
    validation: list[str]
    test: list[str]


@dataclass
class FoldsConfig:
    """How queries are divided into folds and which fold is tested.

    Attributes:
        scheme: ``robust04`` (the standard 5 folds), ``kfold`` (seeded random folds of the collection's
            judged queries) or ``explicit`` (the lists in ``lists``).
        test: the 1-based test fold; validation is the fold before it (cyclically), training the others.
        count: number of folds for ``kfold``.
        seed: random seed for ``kfold``.
        lists: the folds for ``explicit``, each a list of query ids.
    """

    scheme: str = "kfold"
    test: int = 1
    count: int = 5
    seed: int = 42
    lists: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"folds.scheme must be one of {', '.join(SCHEMES)}; got {self.scheme!r}")
        if self.scheme == "explicit" and len(self.lists) < 3:
            raise ValueError("folds.lists: the explicit scheme needs at least 3 lists of query ids")
        if self.scheme == "kfold":
            check_range("folds.count", self.count, 3)  # a training, a validation and a test fold
        check_range("folds.test", self.test, 1, self.fold_count)

    @property
    def fold_count(self) -> int:
        """How many folds the scheme defines (the test folds a cross-validation rotates through)."""
        if self.scheme == "robust04":
            return ROBUST04_FOLD_COUNT
        return len(self.lists) if self.scheme == "explicit" else self.count


def robust04_folds() -> list[list[str]]:
    """The 5 standard Robust04 folds (Huston and Croft 2014), from ``ir_datasets``."""
    from ir_datasets.datasets.disks45 import ROBUST04_FOLDS

    return [sorted(ROBUST04_FOLDS[f"fold{k}"], key=int) for k in range(1, ROBUST04_FOLD_COUNT + 1)]


def kfold(query_ids: Iterable[str], count: int, seed: int) -> list[list[str]]:
    """``count`` folds of the query ids, shuffled with ``seed`` (sizes differ by at most one)."""
    ordered = sorted(set(query_ids))
    random.Random(seed).shuffle(ordered)
    return [sorted(ordered[k::count]) for k in range(count)]


def rotate(folds: Sequence[Sequence[str]], test: int) -> Split:
    """Test fold ``test`` (1-based), validation the fold before it, training the rest."""
    check_range("folds.test", test, 1, len(folds))
    validation = (test - 2) % len(folds) + 1
    train = [qid for k, fold in enumerate(folds, start=1) if k not in (test, validation) for qid in fold]
    return Split(train=train, validation=list(folds[validation - 1]), test=list(folds[test - 1]))


def make_split(config: FoldsConfig, judged_queries: Iterable[str]) -> Split:
    """The split that ``config`` describes; ``judged_queries`` feeds the ``kfold`` scheme."""
    if config.scheme == "robust04":
        folds = robust04_folds()
    elif config.scheme == "kfold":
        folds = kfold(judged_queries, config.count, config.seed)
    else:
        folds = [list(map(str, fold)) for fold in config.lists]
    return rotate(folds, config.test)
