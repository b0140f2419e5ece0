"""TREC run and qrels files, and the two types every layer shares: :data:`Run` and :data:`Qrels`.

Run lines are ``query_id Q0 doc_id rank score tag``; qrels lines are ``query_id iteration doc_id relevance``.
Malformed input fails with :class:`TrecFormatError`, which names the file, the line number and the line. Files
are read as UTF-8 with or without a byte-order mark (a byte that is not UTF-8 is named with its line,
:mod:`rerank.data.lines`), and written atomically (:mod:`rerank.core.atomic`); an id that such a file cannot hold (with
whitespace) is refused when written.

Rankings break score ties by doc id, ascending (:func:`ranked`), the same way everywhere: in written runs, in
the candidates cut from a first stage (:func:`top_k`) and in training lists. A written run holds each score in the
fewest digits that read back as the same number (Python's ``repr``), so that trec_eval on the file ranks and
measures exactly as the run in memory did: rounded to a fixed number of decimals, two scores closer than the last
one would tie in the file and be ordered by trec_eval's own rule instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path

from ..core.atomic import atomic_write
from .lines import check_id, text_lines

Run = dict[str, dict[str, float]]
"""query id -> {doc id: score}; higher scores rank first."""
Qrels = dict[str, dict[str, int]]
"""query id -> {doc id: graded relevance}."""


class TrecFormatError(ValueError):
    """A malformed line in a TREC file."""

    def __init__(self, path: str | Path, line_number: int, line: str, problem: str) -> None:
        super().__init__(f"{path}:{line_number}: {problem}: {line.rstrip()!r}")
        self.path, self.line_number, self.line = str(path), line_number, line


def _lines(path: str | Path) -> Iterator[tuple[int, str, list[str]]]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    for number, line in text_lines(path):
        fields = line.split()
        if fields:
            yield number, line, fields


def run_lines(path: str | Path, queries: Collection[str] | None = None) -> Iterator[tuple[int, str, str, str, float]]:
    """``(line number, line, query id, doc id, score)`` of each line of a TREC run file, checked one by one (the
    duplicate pairs that :func:`read_run` refuses are the reader's to find).

    Raises:
        TrecFormatError: wrong column count, non-numeric or non-finite score, or (``queries`` given) an unknown
            query id.
    """
    for number, line, fields in _lines(path):
        if len(fields) != 6:
            raise TrecFormatError(path, number, line,
                                  f"expected 6 columns (qid Q0 docid rank score tag), got {len(fields)}")
        qid, _, doc_id, _, score_text, _ = fields
        try:
            score = float(score_text)
        except ValueError:
            raise TrecFormatError(path, number, line, f"score {score_text!r} is not a number") from None
        if not math.isfinite(score):
            raise TrecFormatError(path, number, line, f"score {score_text!r} is not finite")
        if queries is not None and qid not in queries:
            raise TrecFormatError(path, number, line, f"unknown query id {qid!r}")
        yield number, line, qid, doc_id, score


def read_run(path: str | Path, queries: Collection[str] | None = None) -> Run:
    """Read a TREC run file into a :data:`Run` (for runs that are evaluated or merged; the candidates that data
    loaders hold are read as arrays, :func:`rerank.data.candidates.read_candidates`).

    Args:
        path: the run file (6 whitespace-separated columns a line; blank lines are skipped).
        queries: if given, every query id of the run must be one of these.

    Raises:
        TrecFormatError: as :func:`run_lines`, or a duplicate (query, doc) pair.
    """
    run: Run = {}
    for number, line, qid, doc_id, score in run_lines(path, queries):
        ranked = run.setdefault(qid, {})
        if doc_id in ranked:
            raise TrecFormatError(path, number, line, f"duplicate pair ({qid}, {doc_id})")
        ranked[doc_id] = score
    return run


def check_scored(path: str | Path, why: str) -> None:
    """Fail when some query of the run at ``path`` has several candidates that all carry one score: a run of ranks
    whose scores were dropped or set to a constant, which a ranker that mixes the first stage's scores cannot use.

    Raises:
        TrecFormatError: naming the file and the line of that query's first candidate, with ``why`` it matters.
    """
    first: dict[str, tuple[int, str, float]] = {}
    varied: set[str] = set()
    counts: dict[str, int] = {}
    for number, line, qid, _, score in run_lines(path):
        counts[qid] = counts.get(qid, 0) + 1
        if qid not in first:
            first[qid] = (number, line, score)
        elif score != first[qid][2]:
            varied.add(qid)
    for qid, (number, line, score) in first.items():
        if counts[qid] > 1 and qid not in varied:
            raise TrecFormatError(path, number, line, f"all {counts[qid]} candidates of query {qid} score {score:g}, "
                                                      f"so the run carries no scores to mix: {why}")


def read_qrels(
    path: str | Path, label_map: Mapping[int, int] | None = None, binarize_at: int | None = None
) -> Qrels:
    """Read a TREC qrels file.

    Args:
        path: the qrels file (4 columns a line: ``qid iteration docid relevance``).
        label_map: maps raw judgments to labels (e.g. ``{-1: 0, 1: 4, 2: 3, 3: 2, 4: 1}`` for Cranfield);
            judgments it does not list are kept as they are.
        binarize_at: if given, labels become 1 when ``>= binarize_at`` and 0 otherwise (after ``label_map``).

    Raises:
        TrecFormatError: wrong column count, non-integer relevance, duplicate (query, doc) pair.
    """
    qrels: Qrels = {}
    for number, line, fields in _lines(path):
        if len(fields) != 4:
            raise TrecFormatError(path, number, line,
                                  f"expected 4 columns (qid iteration docid relevance), got {len(fields)}")
        qid, _, doc_id, relevance_text = fields
        try:
            relevance = int(relevance_text)
        except ValueError:
            raise TrecFormatError(path, number, line, f"relevance {relevance_text!r} is not an integer") from None
        judged = qrels.setdefault(qid, {})
        if doc_id in judged:
            raise TrecFormatError(path, number, line, f"duplicate pair ({qid}, {doc_id})")
        judged[doc_id] = map_label(relevance, label_map, binarize_at)
    return qrels


def map_label(relevance: int, label_map: Mapping[int, int] | None, binarize_at: int | None) -> int:
    """Apply ``label_map`` then ``binarize_at`` to one judgment."""
    label = label_map.get(relevance, relevance) if label_map else relevance
    return int(label >= binarize_at) if binarize_at is not None else label


def ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """``(doc id, score)`` pairs best first; equal scores by doc id, ascending."""
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def restrict(run: Mapping[str, Mapping[str, float]], like: Mapping[str, Iterable[str]]) -> Run:
    """``run``'s scores of the candidates of ``like`` (query id -> its doc ids), query by query."""
    return {qid: {doc: float(run[qid][doc]) for doc in docs} for qid, docs in like.items()}


def top_k(run: Mapping[str, Mapping[str, float]], k: int) -> Run:
    """The ``k`` best documents of each query (ties as :func:`ranked`), each query's in rank order."""
    return {qid: dict(ranked(scores)[:k]) for qid, scores in run.items()}


def write_run(run: Mapping[str, Mapping[str, float]], path: str | Path, tag: str = "rerank",
              finish: Callable[[Path], None] | None = None) -> None:
    """Write a run atomically, each query's documents by decreasing score (ties by doc id, see :func:`ranked`),
    each score exactly (it reads back as the same float); ``finish``: as :func:`rerank.core.atomic.atomic_write`'s (a
    cache entry's seal)."""
    with atomic_write(path, finish=finish) as handle:
        for qid in sorted(run, key=natural_key):
            check_id(qid, "query id", f"{path} (written)")
            for rank, (doc_id, score) in enumerate(ranked(run[qid]), start=1):
                check_id(doc_id, "doc_id", f"{path} (written)")
                handle.write(f"{qid} Q0 {doc_id} {rank} {float(score)!r} {tag}\n")


def write_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | Path) -> None:
    """Write qrels atomically."""
    with atomic_write(path) as handle:
        for qid in sorted(qrels, key=natural_key):
            check_id(qid, "query id", f"{path} (written)")
            for doc_id, relevance in sorted(qrels[qid].items()):
                handle.write(f"{qid} 0 {check_id(doc_id, 'doc_id', f'{path} (written)')} {relevance}\n")


def natural_key(qid: str) -> tuple[int, int | str]:
    """Numeric ids in numeric order, before the others in text order."""
    return (0, int(qid)) if qid.isdigit() else (1, qid)
