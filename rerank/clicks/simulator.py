"""Simulated click logs: impressions of a ranker's result pages, clicked by a click model over the qrels.

Each impression draws a query with a Zipf-like frequency (the ``i``-th most frequent query, in a seeded random
order of the queries, is drawn with probability proportional to ``1 / i ^ zipf``), shows the top ``depth`` results
of that query's ranking (a first-stage run, or any model's) and clicks them with a click model
(:mod:`rerank.clicks.models`) that reads the qrels' grades (unjudged: 0). With ``swap``, each page first swaps its
top result with the result at a rank drawn uniformly from 1 to ``depth`` (1: no swap): the randomized intervention
from which :mod:`rerank.clicks.propensity` estimates the position bias (Joachims et al., WSDM 2017). The log is
the same for the same arguments and seed. Pages are drawn and clicked in blocks of arrays, so millions of
impressions take minutes, mostly for writing the JSON lines.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..core.checks import check_range
from ..data.candidates import CandidateLists
from ..data.collection import Collection
from ..data.folds import FoldsConfig, make_split
from ..data.trec import Qrels
from .log import Impression
from .models import ClickModelConfig, sample_clicks

BLOCK = 65_536


@dataclass
class ClickSimulationConfig:
    """What ``rerank clicks`` simulates.

    Attributes:
        click_model: the click model and its parameters.
        impressions: how many result pages.
        depth: results shown per page (the top of each query's ranking).
        zipf: the exponent of the queries' frequencies (0: every query equally often).
        queries: ``train`` (the training folds of ``data.folds``: clicks to learn from) or ``all``.
        swap: swap each page's top result with one at a uniformly drawn rank (for propensity estimation).
        seed: seeds the queries' order, the draws and the clicks.
    """

    click_model: ClickModelConfig = field(default_factory=ClickModelConfig)
    impressions: int = 100_000
    depth: int = 10
    zipf: float = 1.0
    queries: str = "train"
    swap: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.click_model, Mapping):
            self.click_model = ClickModelConfig(**self.click_model)
        for name in ("impressions", "depth"):
            check_range(f"clicks.{name}", getattr(self, name), 1)
        check_range("clicks.zipf", self.zipf, 0)
        if self.queries not in ("train", "all"):
            raise ValueError(f"clicks.queries must be train or all; got {self.queries!r}")


def query_frequencies(count: int, zipf: float) -> np.ndarray:
    """``p_i`` proportional to ``1 / i ^ zipf``, ``i = 1..count``."""
    weights = np.arange(1, count + 1, dtype=np.float64) ** -zipf
    return weights / weights.sum()


def simulate(ranking: CandidateLists, qrels: Mapping[str, Mapping[str, int]],
             config: ClickSimulationConfig) -> Iterator[Impression]:
    """The impressions of ``ranking``'s queries (each query's candidates best first), clicked by ``config``'s click
    model over ``qrels``.

    Raises:
        ValueError: ``ranking`` has no query.
    """
    if not len(ranking):
        raise ValueError("no query to show: the ranking has no query with candidates")
    max_grade = max((grade for judged in qrels.values() for grade in judged.values()), default=1)
    pages = ranking.select(ranking.query_ids, config.depth, dict.fromkeys(ranking.query_ids, ""), qrels)
    grades = np.full((len(pages), config.depth), -1, dtype=np.int64)
    for index, candidates in enumerate(pages):
        grades[index, : len(candidates)] = candidates.labels
    rng = np.random.default_rng(config.seed)
    order = rng.permutation(len(pages))  # the i-th most frequent query
    frequencies = query_frequencies(len(pages), config.zipf)
    shown = [tuple(candidates.doc_ids) for candidates in pages]
    for start in range(0, config.impressions, BLOCK):
        drawn = order[rng.choice(len(pages), size=min(BLOCK, config.impressions - start), p=frequencies)]
        page_grades = grades[drawn]
        swapped = np.zeros(len(drawn), dtype=np.int64)
        if config.swap:  # rank 1 <-> rank k + 1, k uniform over the page's results (0: no swap)
            swapped = (rng.random(len(drawn)) * (page_grades >= 0).sum(axis=1)).astype(np.int64)
            rows = np.arange(len(drawn))
            page_grades[rows, 0], page_grades[rows, swapped] = page_grades[rows, swapped], page_grades[rows, 0]
        clicks = sample_clicks(page_grades, max_grade, config.click_model, rng)
        for page, other, clicked in zip(drawn.tolist(), swapped.tolist(), clicks):
            yield Impression(pages.query_ids[page], _swapped(shown[page], other),
                             tuple((np.flatnonzero(clicked) + 1).tolist()))


def _swapped(shown: tuple[str, ...], other: int) -> tuple[str, ...]:
    """``shown`` with its first and ``other``-th (0-based) results swapped."""
    if other == 0:
        return shown
    swapped = list(shown)
    swapped[0], swapped[other] = swapped[other], swapped[0]
    return tuple(swapped)


def judged_queries(collection: Collection, folds: FoldsConfig, queries: str) -> tuple[Qrels, list[str]]:
    """The collection's qrels and the queries users are simulated on: ``queries`` ``train`` (the training folds of
    ``folds``) or ``all`` judged ones (``clicks.queries``).

    Raises:
        ValueError: the collection has no qrels, which the click model clicks by.
    """
    if not collection.has_qrels:
        raise ValueError(f"data.collection {collection.name} has no qrels: the click model clicks by relevance")
    qrels = collection.qrels
    return qrels, make_split(folds, qrels).train if queries == "train" else sorted(qrels)
