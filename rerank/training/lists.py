"""Training lists and evaluation pairs drawn from a first-stage run, and the samplers that share them out.

Training: one example per query and visit, a list of ``list_size`` candidates from the query's top-k with
their labels (unjudged = 0) and, for sources with a teacher, the teacher's scores. Strategies:

- ``top``: the first ``list_size`` candidates;
- ``random``: one relevant candidate and ``list_size - 1`` others drawn at random from the top-k;
- ``pairs``: ``list_size / 2`` (relevant, non-relevant) pairs (the CEDR / SmoothI protocol with
  ``list_size: 4``: two pairs from one query per example);
- ``sample``: ``list_size`` candidates drawn at random (sources that learn from a teacher only).

The lists of several sources (:mod:`rerank.training.sources`) are drawn in the proportions of their weights. The
draw for visit ``index`` of source ``source`` in epoch ``epoch`` depends only on ``(seed, epoch, source,
index)``, so a resumed run sees the same lists. Shorter lists are padded; ``mask`` marks the real candidates.

Evaluation: every (query, candidate) pair of the split once, in batches of similar document length; the
batches are dealt to the processes without padding, so each pair is scored by exactly one process.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, DistributedSampler

from ..data.candidates import CandidateLists, Candidates
from ..data.documents import Documents
from .batches import TrainingList

STRATEGIES = ("top", "random", "pairs", "sample")
QRELS_STRATEGIES = STRATEGIES[:3]
"""The strategies ``data.strategy`` may name (for sources that learn from qrels; ``sample`` is the teacher's)."""


@dataclass
class TrainingSource:
    """A source's training lists, ready to draw from.

    Attributes:
        name: for logs and errors.
        lists: each query's candidates with labels (all 0 when the source does not learn from qrels) and teacher
            scores (none without a teacher), as compact arrays.
        documents: where the candidates' texts are looked up.
        weight: the source's share of the lists.
        strategy: how lists are drawn (:data:`rerank.training.lists.STRATEGIES`).
        clicks: the lists come from a click log: their teacher scores are its click targets, and their first-stage
            scores the negated ranks it showed the documents at (the log's own ranking), for ``model.click_loss``.
    """

    name: str
    lists: CandidateLists
    documents: Documents
    weight: float = 1.0
    strategy: str = "random"
    clicks: bool = False


def select(candidates: Candidates, list_size: int, strategy: str, rng: random.Random) -> list[int]:
    """Positions (into ``candidates``) of one training list."""
    positions = range(len(candidates))
    if strategy == "top" or (len(positions) <= list_size and strategy in ("random", "sample")):
        return list(positions[:list_size])
    if strategy == "sample":
        return sorted(rng.sample(positions, list_size))
    relevant = np.flatnonzero(candidates.labels > 0).tolist()
    if strategy == "random":
        first = rng.choice(relevant)
        return sorted([first, *rng.sample([p for p in positions if p != first], list_size - 1)])
    others = np.flatnonzero(candidates.labels == 0).tolist()
    pairs = list_size // 2
    return [p for pair in zip(_draw(relevant, pairs, rng), _draw(others, pairs, rng)) for p in pair]


def _draw(population: list[int], count: int, rng: random.Random) -> list[int]:
    """``count`` items, without replacement when there are enough."""
    return rng.sample(population, count) if len(population) >= count else rng.choices(population, k=count)


def trainable(candidates: Candidates, strategy: str) -> bool:
    """Whether a list can be drawn and teaches something: a relevant candidate (and, for ``pairs``, a
    non-relevant one); for ``sample``, teacher scores that are not all equal."""
    if strategy == "sample":
        return candidates.teacher is not None and bool((candidates.teacher != candidates.teacher[0]).any())
    relevant = int((candidates.labels > 0).sum())
    return relevant > 0 and (strategy != "pairs" or relevant < len(candidates))


class TrainingLists(Dataset):
    """Item ``(epoch, source, index)``: a training list for query ``index`` of source ``source``."""

    def __init__(self, sources: Sequence[TrainingSource], list_size: int, seed: int) -> None:
        for source in sources:
            if source.strategy not in STRATEGIES:
                raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {source.strategy!r}")
            if source.strategy == "pairs" and list_size % 2:
                raise ValueError(f"the pairs strategy needs an even data.list_size; got {list_size}")
        self.sources, self.list_size, self.seed = list(sources), list_size, seed

    def __len__(self) -> int:
        return sum(len(source.lists) for source in self.sources)

    def __getitem__(self, key: tuple[int, int, int]) -> TrainingList:
        epoch, which, index = key
        source = self.sources[which]
        candidates = source.lists[index]
        rng = random.Random(f"{self.seed}/{epoch}/{which}/{index}")
        positions = select(candidates, self.list_size, source.strategy, rng)
        teacher = None if candidates.teacher is None else candidates.teacher[positions].tolist()
        documents = [source.documents.text(candidates.doc_id(p)) for p in positions]
        labels = candidates.labels[positions].tolist()
        if source.clicks:  # a click log's lists: targets in the teacher slot, the log's ranks as first-stage scores
            return TrainingList(query=candidates.query, documents=documents, labels=labels, clicks=teacher,
                                ranks=(-candidates.scores[positions]).astype(int).tolist())
        return TrainingList(query=candidates.query, documents=documents, labels=labels, teacher=teacher)


class EvaluationBatches(Dataset):
    """Item ``b``: the b-th batch of (query, candidate) pairs; pairs sorted by document length, then cut.

    The pairs stay in ``lists``' arrays: a batch is a run of positions in their length order (8 bytes a pair).
    """

    def __init__(self, lists: CandidateLists, documents: Documents, batch_size: int,
                 length: Callable[[str], int] | None = None) -> None:
        self.lists, self.documents, self.batch_size = lists, documents, batch_size
        self.owner = np.repeat(np.arange(len(lists), dtype=np.int64), np.diff(lists.offsets))
        self.order = np.arange(len(lists.ids), dtype=np.int64)
        if length is not None:
            lengths = np.fromiter((length(doc.decode()) for doc in lists.ids.tolist()), dtype=np.int64,
                                  count=len(lists.ids))
            self.order = np.argsort(lengths, kind="stable")

    def __len__(self) -> int:
        return math.ceil(len(self.order) / self.batch_size)

    def __getitem__(self, index: int) -> list[tuple[str, str, str, float, str]]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        lists, pairs = self.lists, []
        for position in self.order[index * self.batch_size: (index + 1) * self.batch_size].tolist():
            query = self.owner[position]
            doc = lists.ids[position].decode()
            pairs.append((lists.query_ids[query], lists.queries[query], doc, float(lists.scores[position]),
                          self.documents.text(doc)))
        return pairs


class TrainingSampler(DistributedSampler):
    """This process's share of each epoch's training lists, as ``(epoch, source, index)`` keys.

    An epoch holds ``repeats`` times as many lists as the sources have queries, each source's share in proportion
    to its weight (rounded to whole lists, the total kept): a source's queries are visited in seeded random order,
    again and again as its share needs. ``resume(epoch, batches)`` makes the next pass over ``epoch`` skip the
    batches a checkpoint had consumed.
    """

    def __init__(self, dataset: TrainingLists, repeats: int, batch_size: int, num_replicas: int, rank: int,
                 seed: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
        self.repeats, self.batch_size = repeats, batch_size
        self.shares = proportions([source.weight for source in dataset.sources], len(dataset) * repeats)
        self.num_samples = math.ceil(len(dataset) * repeats / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self._skip: tuple[int, int] | None = None

    def resume(self, epoch: int, batches: int) -> None:
        self._skip = (epoch, batches)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        skip = 0
        if self._skip is not None:  # Lightning may create a resumed run's iterator before it calls set_epoch
            self.epoch, skip = self._skip[0], self._skip[1] * self.batch_size
            self._skip = None
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        keys = []
        for which, (source, share) in enumerate(zip(self.dataset.sources, self.shares)):
            laps = math.ceil(share / len(source.lists))
            order = torch.cat([torch.randperm(len(source.lists), generator=generator) for _ in range(laps)])
            keys += [(which, index) for index in order[:share].tolist()]
        if len(self.dataset.sources) > 1:
            keys = [keys[i] for i in torch.randperm(len(keys), generator=generator).tolist()]
        keys += keys[: self.total_size - len(keys)]  # pad so that every process takes as many steps
        mine = keys[self.rank: self.total_size: self.num_replicas][skip:]
        return iter([(self.epoch, which, index) for which, index in mine])


def proportions(weights: Sequence[float], total: int) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders), at least one each."""
    exact = [total * weight / sum(weights) for weight in weights]
    shares = [max(1, math.floor(value)) for value in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - math.floor(exact[i]), reverse=True)
    for i in by_remainder[: max(0, total - sum(shares))]:
        shares[i] += 1
    return shares


class ShardSampler(DistributedSampler):
    """Evaluation batches ``rank, rank + world, ...``: no padding, so nothing is scored twice."""

    def __init__(self, dataset: EvaluationBatches, num_replicas: int, rank: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False)
        self.num_samples = len(range(rank, len(dataset), num_replicas))

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, len(self.dataset), self.num_replicas))
