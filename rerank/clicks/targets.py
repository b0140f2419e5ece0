"""Click targets: a click log turned into one weight per (query, shown document), naive or debiased.

For query ``q`` with ``N_q`` impressions in the log, the target of document ``d`` is::

    naive:  w_qd = (1 / N_q) * sum_i c_i(d)
    ips:    w_qd = (1 / N_q) * sum_i c_i(d) / max(p_{k_i(d)}, clip)

where ``c_i(d)`` is 1 when impression ``i`` showed ``d`` and it was clicked, ``k_i(d)`` the rank it was shown at,
and ``p_k`` the examination propensity of rank ``k`` (Joachims et al., WSDM 2017: ``w_qd`` is then an unbiased
estimate of ``d``'s click probability when examined, up to the clipping). Naive targets learn the logging
ranker's position bias back; IPS targets divide it out. The propensities are the position-based model's
``(1 / k) ^ eta`` (``eta``: known, as in a simulation), a list (e.g. the ``estimated`` ones of ``rerank clicks
--clicks.swap true``, :mod:`rerank.clicks.propensity`), or that command's ``clicks.json`` itself.
``dla`` leaves the targets naive and the propensities to be learnt while training: the ``dla`` head
(:class:`~rerank.losses.DualLearning`, Ai et al., SIGIR 2018) divides by them itself, and needs each document's
rank, so every query's documents must keep one rank throughout the log (a log without interventions).

A training source with ``targets: clicks`` (:mod:`rerank.training.sources`) draws its lists from the documents shown
for each query, with these targets and the ranks the documents were first shown at; ``model.click_loss``
(``click_softmax`` by default) trains on them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..core.checks import check_range
from ..data.trec import Run
from .log import ClickLogError, read_click_log
from .models import examination

ESTIMATORS = ("naive", "ips", "dla")


@dataclass
class ClickTargetConfig:
    """Where click targets come from and how they are debiased.

    Attributes:
        log: the click log (:mod:`rerank.clicks.log`).
        estimator: ``naive``, ``ips``, or ``dla`` (naive targets, propensities learnt by the ``dla`` head).
        eta: ``ips`` with the position-based model's propensities ``(1 / k) ^ eta``.
        propensities: ``ips`` with these propensities for ranks 1, 2, ... (a list), or those that a
            ``clicks.json`` of ``rerank clicks --clicks.swap true`` estimated (its path).
        clip: the smallest propensity divided by (so no click weighs more than ``1 / clip``).
    """

    log: str
    estimator: str = "ips"
    eta: float | None = None
    propensities: list[float] | str | None = None
    clip: float = 0.01

    def __post_init__(self) -> None:
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"clicks.estimator must be one of {', '.join(ESTIMATORS)}; got {self.estimator!r}")
        if self.estimator == "ips" and (self.eta is None) == (self.propensities is None):
            raise ValueError("clicks.estimator ips needs the propensities: clicks.eta (the position-based model's) "
                             "or clicks.propensities (a list, or a clicks.json of rerank clicks --clicks.swap true), "
                             f"not {'both' if self.eta is not None else 'neither'}")
        check_range("clicks.clip", self.clip, above=0, maximum=1)
        if isinstance(self.propensities, list) and not all(p > 0 for p in self.propensities):
            raise ValueError(f"clicks.propensities must all be > 0; got {self.propensities}")

    def propensity(self) -> Callable[[int], float]:
        """``rank -> max(p_rank, clip)`` (1 for ``naive`` and ``dla``).

        Raises:
            ValueError: a propensity file without estimates, or a rank beyond the propensities given.
        """
        if self.estimator != "ips":
            return lambda rank: 1.0
        if self.eta is not None:
            eta = self.eta
            return lambda rank: max(float(examination(rank, eta)), self.clip)
        values = self.propensities if isinstance(self.propensities, list) else _estimated(Path(self.propensities))

        def known(rank: int) -> float:
            if rank > len(values):
                raise ValueError(f"clicks.propensities gives {len(values)} ranks; the log shows rank {rank}")
            return max(values[rank - 1], self.clip)

        return known


def _estimated(path: Path) -> list[float]:
    try:
        estimated = json.loads(path.read_text(encoding="utf-8"))["propensities"]["estimated"]
    except FileNotFoundError:
        raise FileNotFoundError(f"clicks.propensities {path}: no such file") from None
    except (KeyError, TypeError, json.JSONDecodeError):
        raise ValueError(f"clicks.propensities {path}: no estimated propensities in it (a clicks.json of rerank "
                         "clicks --clicks.swap true has them)") from None
    if not all(isinstance(p, (int, float)) and p > 0 for p in estimated):
        raise ValueError(f"clicks.propensities {path}: an estimate is not a positive number (too few impressions "
                         "at some rank?)")
    return [float(p) for p in estimated]


class ClickTargets(NamedTuple):
    """What a click log teaches: each query's shown documents with their targets, and the rank each was first
    shown at (1-based)."""

    targets: Run
    ranks: dict[str, dict[str, int]]


def click_targets(config: ClickTargetConfig, queries: Collection[str] | None = None,
                  known_document: Callable[[str], bool] | None = None) -> ClickTargets:
    """Each query's shown documents with their targets (the module docstring) and first ranks, in one pass over
    the log: queries as they first appear, documents in the order first shown.

    Raises:
        ClickLogError: a malformed line, one naming a query not in ``queries`` or a document that
            ``known_document`` refuses, or (``dla``) one showing a document at another rank than before.
    """
    propensity = config.propensity()
    sums: dict[str, dict[str, float]] = {}
    ranks: dict[str, dict[str, int]] = {}
    impressions: dict[str, int] = {}
    for impression in read_click_log(config.log, queries, known_document):
        shown = sums.setdefault(impression.query_id, {})
        first = ranks.setdefault(impression.query_id, {})
        impressions[impression.query_id] = impressions.get(impression.query_id, 0) + 1
        for rank, doc in enumerate(impression.shown, 1):
            if first.setdefault(doc, rank) != rank and config.estimator == "dla":
                raise ClickLogError(config.log, impression.line or 0,
                                    f"query {impression.query_id!r} shows {doc!r} at rank {rank}, earlier at rank "
                                    f"{first[doc]}: estimator dla needs each query's documents at one rank (a log "
                                    "without interventions; for a log with swaps use estimator ips with the "
                                    "propensities they estimate)")
            shown.setdefault(doc, 0.0)
        for rank in impression.clicks:
            shown[impression.shown[rank - 1]] += 1.0 / propensity(rank)
    targets = {qid: {doc: total / impressions[qid] for doc, total in docs.items()} for qid, docs in sums.items()}
    return ClickTargets(targets, ranks)
