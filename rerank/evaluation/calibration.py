"""A ranker's scores as probabilities of relevance, fitted on judged candidates: :class:`Calibration`.

**The map** (:func:`fit_calibration`), fitted on the pairs of a validation fold's judged queries (a pair is relevant
when its label is at least 1, trec_eval's default; an unjudged candidate is not relevant), with scikit-learn:

- ``platt``: Platt scaling, ``P(relevant | s) = sigmoid(a s + b)``, a logistic regression on the score
  (``LogisticRegression``, its default L2 penalty, C = 1); refused if ``a <= 0`` (scores that do not rise with
  relevance cannot be calibrated by a monotone map);
- ``isotonic``: isotonic regression (``IsotonicRegression``, non-decreasing, clipped to [0, 1] and, outside the
  scores it was fitted on, to its end values), applied as the piecewise-linear map between its thresholds.

**The rule**, written before any figure: each map is cross-fitted over :data:`PARTS` parts of the queries (each part
scored by the map fitted on the others); the map with the lower pooled log-loss of those held-out scores is chosen
(ties: ``platt``, the simpler), then fitted on every pair. Both maps are non-decreasing, so ranking by the
probability orders a query's candidates as the scores do; ``isotonic`` can give two scores one probability, so
rerank ranks by the score and reports the probability.

**The cut-off** (:attr:`Calibration.threshold`): the probability at or above which a candidate is kept that
maximises F1 over the validation pairs (scikit-learn's ``precision_recall_curve``).

**The figures** (:func:`reliability`): expected calibration error (:data:`BINS` equal-width bins of the
probability, each weighed by its share of the pairs), Brier score and log-loss (probabilities clipped to
[:data:`CLIP`, 1 - :data:`CLIP`]), of the calibrated probability and of the raw score's sigmoid (what a server that
knows no calibration returns), with the cut-off's precision and recall (:func:`calibration_report`);
:func:`reliability_diagram` draws both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.atomic import atomic_write
from ..core.errors import UserError
from ..core.figures import save_figure
from ..core.run_directory import CALIBRATION
from ..data.trec import Qrels, Run, natural_key, ranked

METHODS = ("platt", "isotonic")
PARTS = 5
"""The parts of the validation queries the rule cross-fits the maps over."""
BINS = 15
CLIP = 1e-6
RECORD = CALIBRATION
"""The key of the map in an export's ``config.json`` ``rerank`` section (and of its figures in ``metrics.json``)."""


@dataclass(frozen=True)
class Calibration:
    """A non-decreasing map from a ranker's score to the probability that the candidate is relevant.

    Attributes:
        method: ``platt`` or ``isotonic``.
        parameters: ``platt``: ``slope`` and ``intercept``; ``isotonic``: the ``scores`` and ``probabilities`` of
            its thresholds (increasing scores).
        threshold: the probability cut-off that maximised F1 on the pairs it was fitted on.
        fitted: what it was fitted on and chosen by: ``queries``, ``pairs``, ``relevant`` and the cross-fitted
            ``log_loss`` of each method.
    """

    method: str
    parameters: dict[str, Any]
    threshold: float
    fitted: dict[str, Any]

    def probabilities(self, scores: Sequence[float] | np.ndarray) -> np.ndarray:
        """The probability of relevance of each score."""
        scores = np.asarray(scores, dtype=np.float64)
        if self.method == "platt":
            return sigmoid(self.parameters["slope"] * scores + self.parameters["intercept"])
        return np.interp(scores, self.parameters["scores"], self.parameters["probabilities"])

    def describe(self) -> str:
        """The map and its cut-off, in words."""
        fitted = self.fitted
        how = (f"Platt scaling, sigmoid({self.parameters['slope']:.4g} s + {self.parameters['intercept']:.4g})"
               if self.method == "platt" else
               f"isotonic regression ({len(self.parameters['scores'])} thresholds)")
        return (f"{how}, fitted on {fitted['pairs']} validation pairs of {fitted['queries']} queries "
                f"({fitted['relevant']} relevant); cut-off {self.threshold:.4f} (the best F1 on them)")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Calibration:
        return cls(**values)


def pairs_of(run: Run, qrels: Qrels) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The judged queries' candidates of ``run`` as (query id of each pair, scores, 0/1 labels)."""
    queries, scores, labels = [], [], []
    for qid in sorted(qid for qid in run if qid in qrels):
        for doc, score in sorted(run[qid].items()):
            queries.append(qid)
            scores.append(score)
            labels.append(1.0 if qrels[qid].get(doc, 0) >= 1 else 0.0)
    return queries, np.asarray(scores, dtype=np.float64), np.asarray(labels)


def fit_calibration(run: Run, qrels: Qrels, where: str = "the validation candidates") -> Calibration:
    """The map chosen by the module's rule on the judged queries of ``run`` (a ranker's run) and its cut-off.

    Raises:
        UserError: the pairs hold one class only (no relevant candidate, or no other), or the scores do not rise
            with relevance: naming ``where``.
    """
    queries, scores, labels = pairs_of(run, qrels)
    relevant = int(labels.sum())
    if relevant in (0, len(labels)):
        raise UserError(f"calibration: {where} hold {len(labels)} judged pairs, {relevant} of them relevant: a map "
                        "to a probability needs relevant and non-relevant candidates; the raw scores are kept")
    losses = {method: _log_loss(labels, _cross_fitted(method, queries, scores, labels)) for method in METHODS}
    method = min(METHODS, key=lambda name: (losses[name], METHODS.index(name)))
    parameters = fit_map(method, scores, labels)
    if method == "platt" and parameters["slope"] <= 0:
        raise UserError(f"calibration: on {where} the scores do not rise with relevance (Platt slope "
                        f"{parameters['slope']:.4g}); the raw scores are kept")
    fitted = {"queries": len(set(queries)), "pairs": len(labels), "relevant": relevant,
              "log_loss": {name: round(value, 6) for name, value in losses.items()}}
    calibration = Calibration(method, parameters, 0.5, fitted)
    return Calibration(method, parameters, best_f1_threshold(calibration.probabilities(scores), labels), fitted)


def fit_map(method: str, scores: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """The fitted parameters of ``method``."""
    if method == "platt":
        from sklearn.linear_model import LogisticRegression

        regression = LogisticRegression().fit(scores[:, None], labels)
        return {"slope": float(regression.coef_[0, 0]), "intercept": float(regression.intercept_[0])}
    from sklearn.isotonic import IsotonicRegression

    isotonic = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(scores, labels)
    return {"scores": isotonic.X_thresholds_.tolist(), "probabilities": isotonic.y_thresholds_.tolist()}


def _cross_fitted(method: str, queries: list[str], scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each pair's probability by ``method`` fitted on the other parts of the queries (a part's query ``i``-th in
    sorted order is in part ``i % PARTS``); a part whose others hold one class gets their base rate."""
    order = {qid: index for index, qid in enumerate(sorted(set(queries)))}
    part = np.array([order[qid] % PARTS for qid in queries])
    held_out = np.empty_like(scores)
    for k in np.unique(part):
        train, test = part != k, part == k
        if len(np.unique(labels[train])) < 2:
            held_out[test] = labels[train].mean() if train.any() else 0.5
            continue
        fitted = Calibration(method, fit_map(method, scores[train], labels[train]), 0.5, {})
        held_out[test] = fitted.probabilities(scores[test])
    return held_out


def best_f1_threshold(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """The probability cut-off (keep ``p >= cut-off``) with the highest F1 on these pairs (ties: the highest)."""
    from sklearn.metrics import precision_recall_curve

    precision, recall, thresholds = precision_recall_curve(labels, probabilities)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-300), 0.0)[:-1]
    best = np.flatnonzero(f1 == f1.max())[-1]
    return float(thresholds[best])


def reliability(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Expected calibration error, Brier score and log-loss of ``probabilities`` against 0/1 ``labels``."""
    from sklearn.metrics import brier_score_loss

    bins = np.minimum((probabilities * BINS).astype(int), BINS - 1)
    ece = sum(abs(labels[bins == b].mean() - probabilities[bins == b].mean()) * (bins == b).mean()
              for b in np.unique(bins))
    return {"ece": float(ece), "brier": float(brier_score_loss(labels, probabilities)),
            "log_loss": _log_loss(labels, probabilities)}


def _log_loss(labels: np.ndarray, probabilities: np.ndarray) -> float:
    p = np.clip(probabilities, CLIP, 1 - CLIP)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def sigmoid(scores: np.ndarray | float) -> np.ndarray:
    """The logistic function of each score, without overflow."""
    return np.exp(-np.logaddexp(0.0, -np.asarray(scores, dtype=np.float64)))


def calibration_report(calibration: Calibration, run: Run, qrels: Qrels) -> dict[str, Any]:
    """The map's figures on the judged queries of ``run`` (a test fold's): ECE, Brier and log-loss of the calibrated
    probability and of the raw score's sigmoid, and the cut-off's precision, recall and F1."""
    _, scores, labels = pairs_of(run, qrels)
    calibrated = calibration.probabilities(scores)
    kept = calibrated >= calibration.threshold
    true_positives = float((kept * labels).sum())
    precision = true_positives / kept.sum() if kept.any() else 0.0
    recall = true_positives / labels.sum() if labels.any() else 0.0
    return {"method": calibration.method, "threshold": calibration.threshold, "fitted": calibration.fitted,
            "pairs": len(labels), "relevant": int(labels.sum()),
            "raw_sigmoid": reliability(sigmoid(scores), labels), "calibrated": reliability(calibrated, labels),
            "cut_off": {"precision": precision, "recall": recall,
                        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
                        "kept": int(kept.sum())}}


def pooled_report(folds: Sequence[tuple[Calibration | None, Run]], qrels: Qrels) -> dict[str, Any] | None:
    """ECE, Brier and log-loss over the pairs of several folds, each fold's ``run`` mapped by its own calibration,
    against the raw sigmoid over the same pairs (None: no fold has a calibration)."""
    parts = [(calibration, *pairs_of(run, qrels)[1:]) for calibration, run in folds if calibration is not None]
    if not parts:
        return None
    scores = np.concatenate([scores for _, scores, _ in parts])
    labels = np.concatenate([labels for _, _, labels in parts])
    calibrated = np.concatenate([calibration.probabilities(scores) for calibration, scores, _ in parts])
    return {"folds": len(parts), "pairs": len(labels), "raw_sigmoid": reliability(sigmoid(scores), labels),
            "calibrated": reliability(calibrated, labels)}


def write_probabilities(run: Run, calibration: Calibration, path: Path) -> Path:
    """``run`` as a tab-separated file with a header, ``query_id doc_id rank score probability``, each query's
    documents in the run's order (by decreasing score, ties by doc id), written atomically."""
    with atomic_write(path) as handle:
        handle.write("query_id\tdoc_id\trank\tscore\tprobability\n")
        for qid in sorted(run, key=natural_key):
            documents = ranked(run[qid])
            probabilities = calibration.probabilities([score for _, score in documents])
            for rank, ((doc, score), probability) in enumerate(zip(documents, probabilities), start=1):
                handle.write(f"{qid}\t{doc}\t{rank}\t{float(score)!r}\t{float(probability)!r}\n")
    return path


def reliability_diagram(calibration: Calibration, run: Run, qrels: Qrels, path: Path, title: str) -> Path:
    """A PNG of the observed share of relevant pairs against the predicted probability, in :data:`BINS` bins, for
    the calibrated probability and the raw score's sigmoid on the judged queries of ``run``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, scores, labels = pairs_of(run, qrels)
    figure, axis = plt.subplots(figsize=(5, 5))
    axis.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfectly calibrated")
    for name, probabilities in (("raw sigmoid", sigmoid(scores)),
                                (f"calibrated ({calibration.method})", calibration.probabilities(scores))):
        bins = np.minimum((probabilities * BINS).astype(int), BINS - 1)
        present = np.unique(bins)
        axis.plot([probabilities[bins == b].mean() for b in present], [labels[bins == b].mean() for b in present],
                  marker="o", label=f"{name}, ECE {reliability(probabilities, labels)['ece']:.3f}")
    axis.set(xlabel="predicted probability of relevance", ylabel="share relevant", xlim=(0, 1), ylim=(0, 1),
             title=title)
    axis.legend(loc="upper left", fontsize="small")
    return save_figure(figure, path)
