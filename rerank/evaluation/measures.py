"""Ranking evaluation with ir_measures' names, computed by trec_eval's code (``pytrec_eval``, through ir_measures).

``evaluate(run, qrels, measures)`` returns per-query and mean values. Measures are named as ir_measures, PyTerrier,
ir_datasets' documentation and papers name them: ``nDCG@10``, ``RR@10``, ``AP``, ``R@100``, ``P@10``,
``Judged@10``, ``P(rel=2)@10`` (and ir_measures' own aliases, such as ``MAP`` for ``AP``); results are keyed by the
name the caller used.

Unlike plain trec_eval, a query that has judgments but is absent from the run is not silently dropped: it counts
as 0 for every measure and is listed in :attr:`Evaluation.missing` (and logged), so that a system which forgets
queries cannot look better than one that answers them all.

Example::

    >>> from rerank.evaluation.measures import evaluate
    >>> result = evaluate({"q1": {"d1": 2.0, "d2": 1.0}}, {"q1": {"d2": 1}, "q2": {"d9": 1}}, ["nDCG@10", "RR"])
    >>> result.mean["RR"], result.missing
    (0.25, ['q2'])
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache

import ir_measures

from ..data.trec import Qrels, Run

logger = logging.getLogger(__name__)


_REPORTED: set[tuple[tuple[str, ...], int]] = set()
"""The (missing queries, judged queries) already warned about: each is said once a process, then at debug level
(a fit measures the same validation queries every epoch and for every fusion weight; NFCorpus's cv said it 498
times)."""

DEFAULT_MEASURES = ("nDCG@10", "nDCG@20", "P@20", "AP")
# What the commands report by default (evaluation.metrics: metrics.json of rerank fit, bm25, predict and cv)
METRICS = ("nDCG@10", "nDCG@20", "P@20", "AP", "R@100", "R@1000")


@cache
def parse_measure(name: str) -> ir_measures.Measure:
    """The ir_measures measure ``name`` names (``nDCG@10``, ``RR@10``, ``AP``, ``P(rel=2)@10``).

    Raises:
        ValueError: ir_measures knows no such measure, naming it.
    """
    try:
        return ir_measures.parse_measure(name)
    except (NameError, ValueError, SyntaxError, TypeError) as error:
        raise ValueError(f"unknown measure {name!r}: use ir_measures' names, e.g. nDCG@10, RR@10, AP, R@100, P@10, "
                         f"Judged@10, P(rel=2)@10 ({error})") from None


def check_measures(metrics: Sequence[str], measure: str) -> None:
    """Fail on an unknown measure among ``metrics`` (``evaluation.metrics``) or on a selection ``measure``
    (``evaluation.selection.measure``) that they do not report, naming the option.

    Raises:
        ValueError: ``unknown measure ...``, or ``evaluation.selection.measure ... must be one of evaluation.metrics``.
    """
    for name in (*metrics, measure):
        parse_measure(name)
    if measure not in metrics:
        raise ValueError(f"evaluation.selection.measure {measure!r} must be one of evaluation.metrics {list(metrics)}")


@dataclass
class Evaluation:
    """Per-query and mean values of each measure, keyed by the measure names the caller gave."""

    per_query: dict[str, dict[str, float]]
    mean: dict[str, float]
    missing: list[str] = field(default_factory=list)
    """Judged queries absent from the run; each counts as 0 in :attr:`mean`."""

    def values(self, measure: str) -> list[float]:
        """``measure`` of every judged query, in query-id order (0 for one absent from the run): the pairs of a
        paired comparison between two runs over the same qrels."""
        return [self.per_query[qid][measure] for qid in sorted(self.per_query)]


def paired_p(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """The two-sided p-value of a paired t-test over queries (1 when the two are equal on every query)."""
    from scipy import stats

    return float(stats.ttest_rel(ours, theirs).pvalue) if list(ours) != list(theirs) else 1.0


def evaluate(run: Run, qrels: Qrels, measures: Iterable[str] = DEFAULT_MEASURES) -> Evaluation:
    """Evaluate ``run`` against ``qrels`` with ir_measures (trec_eval's code, through ``pytrec_eval``).

    Args:
        run: query id -> {doc id: score}; higher scores rank first (trec_eval breaks ties by doc id, descending).
        qrels: query id -> {doc id: graded relevance}; queries are the ones that count.
        measures: ir_measures' names (see :func:`parse_measure`).

    Returns:
        An :class:`Evaluation` over the judged queries (queries of the run without judgments are ignored, as
        trec_eval does); a judged query absent from the run scores 0 and is listed in ``missing``.
    """
    names = list(dict.fromkeys(measures))
    if not names:
        raise ValueError("no measures given")
    named: dict[str, list[str]] = {}  # ir_measures' own name -> the names asked for it (MAP and AP are one)
    for name in names:
        named.setdefault(str(parse_measure(name)), []).append(name)
    judged = {qid: {doc: int(rel) for doc, rel in docs.items()} for qid, docs in qrels.items()}
    answered = {qid: {doc: float(s) for doc, s in docs.items()} for qid, docs in run.items() if qid in judged and docs}
    per_query = {qid: dict.fromkeys(names, 0.0) for qid in judged}
    if answered:
        for metric in ir_measures.iter_calc([parse_measure(name) for name in names], judged, answered):
            for name in named[str(metric.measure)]:
                per_query[metric.query_id][name] = float(metric.value)
    missing = sorted(qid for qid in judged if qid not in answered)
    if missing:
        said = (tuple(missing), len(judged)) in _REPORTED  # a fit evaluates the same queries many times
        _REPORTED.add((tuple(missing), len(judged)))
        logger.log(
            logging.DEBUG if said else logging.WARNING,
            "%d of %d judged queries are absent from the run and count as 0: %s",
            len(missing),
            len(judged),
            ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""),
        )
    count = max(len(per_query), 1)
    mean = {name: sum(values[name] for values in per_query.values()) / count for name in names}
    return Evaluation(per_query=per_query, mean=mean, missing=missing)
