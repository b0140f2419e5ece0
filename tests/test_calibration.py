"""Scores as probabilities of relevance (rerank.evaluation.calibration): the map, its rule, its cut-off, its figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rerank.core.errors import UserError
from rerank.core.run_directory import RunDirectory
from rerank.evaluation.calibration import (
    BINS,
    Calibration,
    best_f1_threshold,
    calibration_report,
    fit_calibration,
    fit_map,
    pairs_of,
    reliability,
    sigmoid,
)
from rerank.training.fitting import calibrate


def toy(queries: range, seed: int) -> tuple[dict, dict]:
    """A ranker whose sigmoid is miscalibrated: P(relevant | s) = sigmoid(3 s - 2), 20 candidates a query."""
    rng = np.random.default_rng(seed)
    run, qrels = {}, {}
    for q in queries:
        scores = rng.normal(size=20)
        labels = rng.random(20) < sigmoid(3 * scores - 2)
        run[f"q{q}"] = {f"d{d}": float(s) for d, s in enumerate(scores)}
        qrels[f"q{q}"] = {f"d{d}": int(label) for d, label in enumerate(labels)}
    return run, qrels


def test_a_miscalibrated_toy_is_corrected_on_held_out_queries() -> None:
    validation, test = toy(range(100), 0), toy(range(100, 200), 1)
    calibration = fit_calibration(*validation)
    report = calibration_report(calibration, *test)
    assert report["calibrated"]["ece"] < report["raw_sigmoid"]["ece"] / 2
    assert report["calibrated"]["brier"] < report["raw_sigmoid"]["brier"]
    assert report["calibrated"]["log_loss"] < report["raw_sigmoid"]["log_loss"]
    fitted = calibration.fitted
    assert fitted == {"queries": 100, "pairs": 2000, "relevant": fitted["relevant"], "log_loss": fitted["log_loss"]}
    assert calibration.method == min(("platt", "isotonic"), key=lambda name: fitted["log_loss"][name])
    if calibration.method == "platt":  # the true map is a logistic one: Platt finds its slope and intercept
        assert calibration.parameters["slope"] == pytest.approx(3, abs=0.5)
    assert Calibration.from_dict(calibration.as_dict()) == calibration


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_each_map_is_non_decreasing_so_ranking_by_it_keeps_the_scores_order(method: str) -> None:
    _, scores, labels = pairs_of(*toy(range(30), 2))
    calibration = Calibration(method, fit_map(method, scores, labels), 0.5, {})
    grid = np.linspace(scores.min() - 3, scores.max() + 3, 5001)
    assert np.all(np.diff(calibration.probabilities(grid)) >= 0)
    assert np.all((calibration.probabilities(grid) >= 0) & (calibration.probabilities(grid) <= 1))
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression

    reference = (LogisticRegression().fit(scores[:, None], labels).predict_proba(grid[:, None])[:, 1]
                 if method == "platt" else
                 IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(scores, labels).predict(grid))
    np.testing.assert_allclose(calibration.probabilities(grid), reference, atol=1e-9)


def test_validation_pairs_of_one_class_are_refused_saying_the_raw_scores_are_kept() -> None:
    run, qrels = toy(range(5), 3)
    nothing_relevant = {qid: {doc: 0 for doc in docs} for qid, docs in qrels.items()}
    with pytest.raises(UserError, match=r"calibration: the validation candidates hold 100 judged pairs, 0 of them "
                                        r"relevant: .*the raw scores are kept"):
        fit_calibration(run, nothing_relevant)
    inverted = {qid: {doc: -score for doc, score in docs.items()} for qid, docs in run.items()}
    with pytest.raises(UserError, match="the scores do not rise with relevance"):
        fit_calibration(inverted, qrels)  # the same labels, the scores turned round


def test_the_cut_off_is_the_best_f1_by_brute_force() -> None:
    rng = np.random.default_rng(4)
    probabilities, labels = rng.random(300).round(2), (rng.random(300) < 0.3).astype(float)

    def f1(cut: float) -> float:
        kept = probabilities >= cut
        hits = (kept * labels).sum()
        return 2 * hits / (kept.sum() + labels.sum())

    best = max(f1(cut) for cut in np.unique(probabilities))
    assert f1(best_f1_threshold(probabilities, labels)) == pytest.approx(best)


def test_ece_brier_and_log_loss_by_their_formulas() -> None:
    probabilities = np.array([0.05, 0.1, 0.5, 0.52, 0.9, 0.99])
    labels = np.array([0, 1, 0, 1, 1, 1.0])
    figures = reliability(probabilities, labels)
    bins = [int(p * BINS) for p in probabilities]  # 0, 1, 7, 7, 13, 14
    expected = sum(abs(np.mean([labels[i] for i in range(6) if bins[i] == b])
                       - np.mean([probabilities[i] for i in range(6) if bins[i] == b])) * bins.count(b) / 6
                   for b in set(bins))
    assert figures["ece"] == pytest.approx(expected)
    assert figures["brier"] == pytest.approx(np.mean((probabilities - labels) ** 2))
    assert figures["log_loss"] == pytest.approx(-np.mean(labels * np.log(probabilities)
                                                         + (1 - labels) * np.log(1 - probabilities)))


def test_a_fit_whose_validation_holds_one_class_exports_the_raw_scores_saying_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run, qrels = toy(range(5), 5)

    class Data:
        directory = RunDirectory(tmp_path)

        @staticmethod
        def judgments(split: str) -> dict:
            return {qid: {doc: 0 for doc in docs} for qid, docs in qrels.items()} if split == "validation" else qrels

    calibration, report = calibrate(run, run, Data())
    assert calibration is None and "0 of them relevant" in report["refused"]
    assert "the raw scores are kept" in caplog.text and not Data.directory.calibration_diagram.exists()
    calibration, report = calibrate(run, run, type("Judged", (Data,), {"judgments": staticmethod(lambda _: qrels)})())
    assert calibration is not None and report["pairs"] == 100 and Data.directory.calibration_diagram.is_file()
