"""Ranking evaluation with trec_eval (through ``pytrec_eval``).

``evaluate(run, qrels, measures)`` returns per-query and mean values. Measures are named in trec_eval's own
spelling (``ndcg_cut.10``, ``P.20``, ``map``, ``recip_rank``, ``recall.100``) or by a friendly alias
(``nDCG@10``, ``P@20``, ``MAP``, ``MRR``, ``R@100``); results are keyed by the name the caller used.

Unlike plain trec_eval, a query that has judgments but is absent from the run is not silently dropped: it counts
as 0 for every measure and is listed in :attr:`Evaluation.missing` (and logged), so that a system which forgets
queries cannot look better than one that answers them all.

Example::

    >>> from rerank.evaluation import evaluate
    >>> result = evaluate({"q1": {"d1": 2.0, "d2": 1.0}}, {"q1": {"d2": 1}, "q2": {"d9": 1}}, ["nDCG@10", "MRR"])
    >>> result.mean["MRR"], result.missing
    (0.25, ['q2'])
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pytrec_eval

from .data.trec import Qrels, Run

logger = logging.getLogger(__name__)


_REPORTED: set[tuple[tuple[str, ...], int]] = set()
"""The (missing queries, judged queries) already warned about: each is said once a process, then at debug level
(a fit measures the same validation queries every epoch and for every fusion weight; NFCorpus's cv said it 498
times)."""

DEFAULT_MEASURES = ("nDCG@10", "nDCG@20", "P@20", "MAP")
# What the commands report by default (evaluation.metrics: metrics.json of rerank fit, bm25, predict and cv)
METRICS = ("nDCG@10", "nDCG@20", "P@20", "MAP", "R@100", "R@1000")

_ALIASES = {
    "map": "map",
    "mrr": "recip_rank",
    "ndcg": "ndcg",
}
_ALIAS_AT = {"ndcg": "ndcg_cut", "p": "P", "r": "recall", "recall": "recall", "map": "map_cut", "success": "success"}
_ALIAS_AT_PATTERN = re.compile(r"^(?P<name>[A-Za-z]+)@(?P<k>\d+)$")


def trec_measure(name: str) -> str:
    """The trec_eval spelling of a measure name or alias: ``nDCG@10 -> ndcg_cut.10``, ``MRR -> recip_rank``.

    Raises:
        ValueError: the name is neither a trec_eval measure nor a known alias.
    """
    match = _ALIAS_AT_PATTERN.match(name)
    if match and match["name"].lower() in _ALIAS_AT:
        return f"{_ALIAS_AT[match['name'].lower()]}.{match['k']}"
    if name.lower() in _ALIASES:
        return _ALIASES[name.lower()]
    base = name.split(".", 1)[0]
    if base in pytrec_eval.supported_measures:
        return name
    raise ValueError(
        f"unknown measure {name!r}: use trec_eval's spelling (e.g. 'ndcg_cut.10', 'P.20', 'map', 'recip_rank', "
        f"'recall.100') or an alias ('nDCG@10', 'P@20', 'R@100', 'MAP', 'MRR')"
    )


def check_measures(metrics: Sequence[str], measure: str) -> None:
    """Fail on an unknown measure among ``metrics`` (``evaluation.metrics``) or on a selection ``measure``
    (``evaluation.selection.measure``) that they do not report, naming the option.

    Raises:
        ValueError: ``unknown measure ...``, or ``evaluation.selection.measure ... must be one of evaluation.metrics``.
    """
    for name in (*metrics, measure):
        trec_measure(name)
    if measure not in metrics:
        raise ValueError(f"evaluation.selection.measure {measure!r} must be one of evaluation.metrics {list(metrics)}")


def _result_key(trec_name: str) -> str:
    """The key pytrec_eval uses in its output for a trec_eval measure (``ndcg_cut.10 -> ndcg_cut_10``)."""
    return trec_name.replace(".", "_")


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
    """Evaluate ``run`` against ``qrels`` with trec_eval.

    Args:
        run: query id -> {doc id: score}; higher scores rank first (trec_eval breaks ties by doc id, descending).
        qrels: query id -> {doc id: graded relevance}; queries are the ones that count.
        measures: trec_eval names or aliases (see :func:`trec_measure`).

    Returns:
        An :class:`Evaluation` over the judged queries (queries of the run without judgments are ignored, as
        trec_eval does); a judged query absent from the run scores 0 and is listed in ``missing``.
    """
    names = list(dict.fromkeys(measures))
    if not names:
        raise ValueError("no measures given")
    trec_names = {name: trec_measure(name) for name in names}
    judged = {qid: {doc: int(rel) for doc, rel in docs.items()} for qid, docs in qrels.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(judged, set(trec_names.values()))
    answered = {qid: {doc: float(s) for doc, s in docs.items()} for qid, docs in run.items() if qid in judged and docs}
    raw = evaluator.evaluate(answered)
    per_query: dict[str, dict[str, float]] = {}
    missing = sorted(qid for qid in judged if qid not in raw)
    for qid in judged:
        values = raw.get(qid, {})
        per_query[qid] = {name: float(values.get(_result_key(trec), 0.0)) for name, trec in trec_names.items()}
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
