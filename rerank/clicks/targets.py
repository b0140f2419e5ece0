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

A training source with ``targets: clicks`` (:mod:`rerank.data.sources`) draws its lists from the documents shown
for each query, with these weights where a teacher's scores would go; train them with ``model.teacher_loss:
click_softmax`` (:class:`~rerank.losses.ClickSoftmax`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from ..data.trec import Run
from .log import read_click_log
from .models import examination

ESTIMATORS = ("naive", "ips")


@dataclass
class ClickTargetConfig:
    """Where click targets come from and how they are debiased.

    Attributes:
        log: the click log (:mod:`rerank.clicks.log`).
        estimator: ``naive`` or ``ips``.
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
        if not 0 < self.clip <= 1:
            raise ValueError(f"clicks.clip must be in (0, 1]; got {self.clip}")
        if isinstance(self.propensities, list) and not all(p > 0 for p in self.propensities):
            raise ValueError(f"clicks.propensities must all be > 0; got {self.propensities}")

    def propensity(self) -> Callable[[int], float]:
        """``rank -> max(p_rank, clip)`` (1 for ``naive``).

        Raises:
            ValueError: a propensity file without estimates, or a rank beyond the propensities given.
        """
        if self.estimator == "naive":
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


def click_targets(config: ClickTargetConfig, queries: Collection[str] | None = None,
                  known_document: Callable[[str], bool] | None = None) -> Run:
    """Each query's shown documents with their targets (the module docstring), in one pass over the log: queries
    as they first appear, documents in the order first shown.

    Raises:
        ClickLogError: a malformed line, or one naming a query not in ``queries`` or a document that
            ``known_document`` refuses.
    """
    propensity = config.propensity()
    sums: dict[str, dict[str, float]] = {}
    impressions: dict[str, int] = {}
    for impression in read_click_log(config.log, queries, known_document):
        shown = sums.setdefault(impression.query_id, {})
        impressions[impression.query_id] = impressions.get(impression.query_id, 0) + 1
        for doc in impression.shown:
            shown.setdefault(doc, 0.0)
        for rank in impression.clicks:
            shown[impression.shown[rank - 1]] += 1.0 / propensity(rank)
    return {qid: {doc: total / impressions[qid] for doc, total in docs.items()} for qid, docs in sums.items()}
