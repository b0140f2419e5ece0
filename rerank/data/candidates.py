"""Queries' first-stage candidates as compact arrays: what the data loaders hold, for any number of queries.

A run at scale is millions of (query, document, score) triples: MS MARCO's judgment-free stage draws its lists
from 50,000 queries x 100 candidates, its dev run holds 6,980 x 1,000. Held as a :data:`~rerank.data.trec.Run`
(``dict[str, dict[str, float]]``) a candidate costs about 131 bytes of Python objects; in a
:class:`CandidateLists` it costs its doc id's UTF-8 bytes (a fixed width, the longest id's), 8 bytes of first-stage
score, 2 of label and, when a teacher scored it, 8 of teacher score. A query costs its id, its text and an 8-byte
offset (``scripts/benchmarks/bench_candidate_memory.py``; figures in docs/experiments/scale.md).

Each query's candidates are kept best first, ties by doc id ascending (:func:`~rerank.data.trec.ranked`), so a
list cut at depth ``k`` is the first-stage top ``k``. :func:`read_candidates` reads a TREC run file into one in a
single streaming pass, with the checks of :func:`~rerank.data.trec.read_run`.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .trec import Qrels, Run, TrecFormatError, ranked, run_lines


@dataclass(frozen=True)
class Candidates:
    """One query of :class:`CandidateLists`: its candidates best first (views into the lists' arrays).

    Attributes:
        query_id, query: the query's id and text.
        ids: ``[n]`` the candidates' doc ids as UTF-8 bytes (:meth:`doc_id` decodes one).
        labels: ``[n]`` graded relevance (unjudged and negative judgments: 0).
        scores: ``[n]`` first-stage scores.
        teacher: ``[n]`` the teacher's scores, or None when the query's source has no teacher.
    """

    query_id: str
    query: str
    ids: np.ndarray
    labels: np.ndarray
    scores: np.ndarray
    teacher: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def doc_id(self, position: int) -> str:
        return self.ids[position].decode()

    @property
    def doc_ids(self) -> list[str]:
        return [doc.decode() for doc in self.ids.tolist()]


class CandidateLists(Sequence[Candidates]):
    """Candidates of many queries in flat arrays: query ``i`` owns positions ``offsets[i]:offsets[i + 1]``.

    Args:
        query_ids: one id per query.
        queries: one text per query ("" where no text is needed, e.g. a whole first-stage run).
        offsets: ``[Q + 1]`` int64, from 0 to the number of candidates.
        ids: ``[C]`` doc ids as UTF-8 bytes (NumPy ``S`` dtype).
        scores: ``[C]`` float64 first-stage scores.
        labels: ``[C]`` int16 labels (None: all 0).
        teacher: ``[C]`` float64 teacher scores, or None.
    """

    def __init__(self, query_ids: list[str], queries: list[str], offsets: np.ndarray, ids: np.ndarray,
                 scores: np.ndarray, labels: np.ndarray | None = None, teacher: np.ndarray | None = None) -> None:
        self.query_ids, self.queries, self.offsets = query_ids, queries, offsets
        self.ids, self.scores, self.teacher = ids, scores, teacher
        self.labels = np.zeros(len(ids), dtype=np.int16) if labels is None else labels
        self._positions: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.query_ids)

    def __getitem__(self, index: int) -> Candidates:  # type: ignore[override]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        index %= len(self)
        span = slice(self.offsets[index], self.offsets[index + 1])
        return Candidates(self.query_ids[index], self.queries[index], self.ids[span], self.labels[span],
                          self.scores[span], None if self.teacher is None else self.teacher[span])

    def __iter__(self) -> Iterator[Candidates]:
        return (self[index] for index in range(len(self)))

    @property
    def nbytes(self) -> int:
        """Bytes held by the per-candidate and offset arrays."""
        arrays = (self.offsets, self.ids, self.scores, self.labels, self.teacher)
        return sum(array.nbytes for array in arrays if array is not None)

    def position(self, query_id: str) -> int | None:
        """The index of ``query_id``, or None when it has no candidates here."""
        if self._positions is None:
            self._positions = {qid: index for index, qid in enumerate(self.query_ids)}
        return self._positions.get(query_id)

    def select(self, query_ids: Sequence[str], depth: int, queries: Mapping[str, str],
               qrels: Qrels) -> CandidateLists:
        """The top ``depth`` candidates of each query of ``query_ids`` that has any (in that order), with its text
        from ``queries`` and labels from ``qrels`` (``max(judgment, 0)``, unjudged 0)."""
        kept = [(qid, index) for qid in query_ids
                if (index := self.position(qid)) is not None and self.offsets[index + 1] > self.offsets[index]]
        starts = np.array([self.offsets[index] for _, index in kept], dtype=np.int64)
        sizes = np.array([min(depth, self.offsets[index + 1] - self.offsets[index]) for _, index in kept],
                         dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        taken = np.repeat(starts - offsets[:-1], sizes) + np.arange(offsets[-1], dtype=np.int64)
        ids = self.ids[taken]
        labels = np.zeros(len(taken), dtype=np.int16)
        for number, (qid, _) in enumerate(kept):
            judged = qrels.get(qid)
            if judged:
                span = slice(offsets[number], offsets[number + 1])
                labels[span] = [max(judged.get(doc.decode(), 0), 0) for doc in ids[span].tolist()]
        return CandidateLists([qid for qid, _ in kept], [queries[qid] for qid, _ in kept], offsets, ids,
                              self.scores[taken], labels,
                              None if self.teacher is None else self.teacher[taken])

    def keep(self, which: Sequence[bool]) -> CandidateLists:
        """The queries for which ``which`` is True, in their order."""
        chosen = [index for index, wanted in enumerate(which) if wanted]
        sizes = np.diff(self.offsets)[chosen]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        taken = np.repeat(self.offsets[chosen] - offsets[:-1], sizes) + np.arange(offsets[-1], dtype=np.int64)
        return CandidateLists([self.query_ids[i] for i in chosen], [self.queries[i] for i in chosen], offsets,
                              self.ids[taken], self.scores[taken], self.labels[taken],
                              None if self.teacher is None else self.teacher[taken])

    def with_teacher(self, teacher: Mapping[str, Mapping[str, float]]) -> CandidateLists:
        """These lists with each candidate's score in ``teacher`` (which must score every candidate)."""
        scores = np.empty(len(self.ids), dtype=np.float64)
        for index, qid in enumerate(self.query_ids):
            span = slice(self.offsets[index], self.offsets[index + 1])
            scored = teacher[qid]
            scores[span] = [scored[doc.decode()] for doc in self.ids[span].tolist()]
        return CandidateLists(self.query_ids, self.queries, self.offsets, self.ids, self.scores, self.labels, scores)

    def as_run(self) -> Run:
        """The first-stage scores as a :data:`~rerank.data.trec.Run` (each query's candidates best first)."""
        return {candidates.query_id: dict(zip(candidates.doc_ids, candidates.scores.tolist())) for candidates in self}

    @classmethod
    def from_run(cls, run: Mapping[str, Mapping[str, float]], queries: Mapping[str, str] | None = None,
                 qrels: Qrels | None = None, query_ids: Sequence[str] | None = None,
                 depth: int | None = None) -> CandidateLists:
        """The candidates of a :data:`~rerank.data.trec.Run`, ranked (:func:`~rerank.data.trec.ranked`): those of
        ``query_ids`` (default: every query of the run) that have any, cut at ``depth``, with texts from
        ``queries`` and labels from ``qrels``."""
        query_ids = [qid for qid in (run if query_ids is None else query_ids) if run.get(qid)]
        best = [ranked(run[qid])[:depth] for qid in query_ids]
        offsets = np.concatenate([[0], np.cumsum([len(pairs) for pairs in best])]).astype(np.int64)
        ids = np.array([doc.encode() for pairs in best for doc, _ in pairs] or [b""], dtype=bytes)[: offsets[-1]]
        scores = np.array([score for pairs in best for _, score in pairs], dtype=np.float64)
        judged = qrels or {}
        labels = np.array([max(judged.get(qid, {}).get(doc, 0), 0) for qid, pairs in zip(query_ids, best)
                           for doc, _ in pairs], dtype=np.int16)
        texts = [queries[qid] if queries is not None else "" for qid in query_ids]
        return cls(query_ids, texts, offsets, ids, scores, labels)


def read_candidates(path: str | Path, queries: Collection[str] | None = None) -> CandidateLists:
    """A TREC run file as :class:`CandidateLists` (no texts, no labels), read in one streaming pass: queries in the
    order of their first line, each query's candidates ranked (:func:`~rerank.data.trec.ranked`).

    A file grouped by query (as every run rerank or BM25 writes) is checked for duplicate pairs as it streams, one
    query's doc ids at a time; a file whose queries' lines are interleaved, after the pass, by sorting.

    Raises:
        TrecFormatError: as :func:`~rerank.data.trec.run_lines`, or a duplicate (query, doc) pair (named by its
            second line).
    """
    positions: dict[str, int] = {}
    owners, numbers, scores = array("q"), array("q"), array("d")
    ids: list[bytes] = []
    add_owner, add_number, add_score, add_id = owners.append, numbers.append, scores.append, ids.append
    current, seen, grouped = -1, set(), True
    for number, line, qid, doc_id, score in run_lines(path, queries):
        owner = positions.get(qid)
        if owner is None:
            owner = positions[qid] = len(positions)
        if owner != current:
            grouped &= owner > current  # a query seen before, again: interleaved
            current, seen = owner, set()
        if grouped:
            if doc_id in seen:
                raise TrecFormatError(path, number, line, f"duplicate pair ({qid}, {doc_id})")
            seen.add(doc_id)
        add_owner(owner)
        add_number(number)
        add_score(score)
        add_id(doc_id.encode())
    owner_array, score_array = np.frombuffer(owners, dtype=np.int64), np.frombuffer(scores, dtype=np.float64)
    id_array = np.array(ids or [b""], dtype=bytes)[: len(ids)]
    del ids, seen
    if not grouped:
        _refuse_duplicates(path, owner_array, id_array, np.frombuffer(numbers, dtype=np.int64), list(positions))
    if not _ranked(owner_array, score_array, id_array):
        order = np.lexsort((id_array, -score_array, owner_array))
        id_array, score_array = id_array[order], score_array[order]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(owner_array, minlength=len(positions)))]).astype(np.int64)
    return CandidateLists(list(positions), [""] * len(positions), offsets, id_array, score_array.copy())


def _ranked(owner: np.ndarray, scores: np.ndarray, ids: np.ndarray) -> bool:
    """Whether the lines are already grouped by query and ranked: then the sort is skipped."""
    same = owner[1:] == owner[:-1]
    grouped = bool(np.all(owner[1:] >= owner[:-1]))
    before = (scores[1:] < scores[:-1]) | ((scores[1:] == scores[:-1]) & (ids[1:] > ids[:-1]))
    return grouped and bool(np.all(before | ~same))


def _refuse_duplicates(path: str | Path, owner: np.ndarray, ids: np.ndarray, numbers: np.ndarray,
                       query_ids: list[str]) -> None:
    """Fail at the first line (in file order) that repeats a (query, doc) pair of an earlier line."""
    order = np.lexsort((numbers, ids, owner))
    repeated = (owner[order][1:] == owner[order][:-1]) & (ids[order][1:] == ids[order][:-1])
    if repeated.any():
        line = int(numbers[order][1:][repeated].min())
        at = int(np.flatnonzero(numbers == line)[0])
        raise TrecFormatError(path, line, _line_text(path, line),
                              f"duplicate pair ({query_ids[owner[at]]}, {ids[at].decode()})")


def _line_text(path: str | Path, number: int) -> str:
    with open(path, "rb") as handle:
        for current, raw in enumerate(handle, start=1):
            if current == number:
                return raw.decode("utf-8", errors="replace")
    return ""
