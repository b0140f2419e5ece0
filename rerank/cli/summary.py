"""What ``rerank fit`` and ``rerank cv`` print when they end: each ranker's test figure beside BM25 and the teachers,
the deployed one marked, where the model is, and the one command that re-ranks with it.

The figures are those of ``metrics.json`` and ``cv_metrics.json`` (the summary is made from the same dictionaries
that are written), rounded to 4 decimals.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..core.run_directory import RunDirectory
from ..ranker.deployment import NAMES, TEACHER_ALONE, Deployment

ROWS = (("first_stage", "first stage"),
        ("teacher_bi_encoder", "teacher: bi-encoder"),
        ("teacher", "teacher"),
        ("reranker", "re-ranker"),
        ("interpolated", "interpolated"),
        ("fused", "fused"))
"""The systems of a summary, in the order shown, and how each is named."""
MARK = "<- deployed"


def recipe_changes(options: dict[str, Any]) -> list[str]:
    """What ``options`` (a fit's merged config, as plain values) set that changes how the recipe trains, validates,
    tests or chooses its weights without being one of its own settings: Trainer limits, extra callbacks, another
    checkpoint rule. Said when a fit starts and again in its summary."""
    trainer, checkpoint = options.get("trainer") or {}, options.get("checkpoint") or {}
    found = []
    if trainer.get("max_steps") not in (None, -1):
        found.append(f"trainer.max_steps {trainer['max_steps']}: the training stops at that step, before "
                     "trainer.max_epochs if it comes first")
    if trainer.get("max_time") is not None:
        found.append(f"trainer.max_time {trainer['max_time']}: the training stops after that time, wherever it stands")
    for key in ("min_steps", "min_epochs"):
        if trainer.get(key) is not None:
            found.append(f"trainer.{key} {trainer[key]}: the training goes on at least that long")
    limits = {"limit_train_batches": "each epoch trains on that many batches (a fraction, or a number), not on all "
                                     "its lists",
              "limit_val_batches": "validation scores only that part of its queries, the others counting 0: the "
                                   "tested weights and the deployed ranker are chosen on them",
              "limit_test_batches": "the test scores only that part of its queries, the others counting 0 in the "
                                    "test figures"}
    for key, what in limits.items():
        if trainer.get(key) not in (None, 1.0):
            found.append(f"trainer.{key} {trainer[key]}: {what}")
    if trainer.get("val_check_interval") is not None or trainer.get("check_val_every_n_epoch") not in (None, 1):
        found.append("trainer.val_check_interval / check_val_every_n_epoch: validation comes at other times than each "
                     "epoch's end, and evaluation.selection.epoch chooses among those validations")
    callbacks = trainer.get("callbacks") or []
    names = [str(item.get("class_path", item)).rsplit(".", 1)[-1] if isinstance(item, dict) else type(item).__name__
             for item in (callbacks if isinstance(callbacks, list) else [callbacks])]
    if names:
        found.append(f"trainer.callbacks adds {', '.join(names)} (which may stop or change the training)")
    if checkpoint.get("mode") not in (None, "max"):
        found.append(f"checkpoint.mode {checkpoint['mode']}: best.ckpt keeps the weights of the lowest validation "
                     "figure, which evaluation.selection.epoch weighs against the last epoch's")
    return found


def fit_summary(metrics: dict[str, dict[str, float]], deployment: Deployment, directory: RunDirectory,
                measure: str, queries: int, tested: str = "", changes: list[str] | None = None) -> list[str | Table]:
    """The end of ``rerank fit``: the test figure of each ranker on ``measure`` (with the validation figure the
    choice was made on), which weights were tested (``tested``, in words), the deployed one marked, its warnings,
    the model's folder and the command to use it."""
    table = Table(title=f"{measure} on the {queries} judged test queries (and on validation)", title_justify="left")
    for column, justify in (("ranker", "left"), ("weights", "left"), ("test", "right"), ("validation", "right"),
                            ("", "left")):
        table.add_column(column, justify=justify)
    for system, name in ROWS:
        if system not in metrics:
            continue
        validation = deployment.validation.get(system)
        table.add_row(name, weights(metrics[system]), f"{metrics[system][measure]:.4f}",
                      "" if validation is None else f"{validation:.4f}", MARK if system == deployment.ranker else "")
    lines: list[str | Table] = [table, *([f"tested: {tested}"] if tested else []),
                                f"deployed: {deployment.describe()}: {rule(deployment)}"
                                + (f", on {deployment.queries} validation queries" if deployment.queries else "")]
    lines += [f"warning: {line}" for line in deployment.warnings()]
    lines += [f"note: the recipe was changed by {line}" for line in changes or []]
    lines += calibration_summary_lines(directory.read_calibration() if directory.metrics.is_file() else None)
    model = directory.model
    lines += [f"model: {model} (rerank predict and rerank.Reranker re-rank with the deployed ranker; transformers "
              "and sentence-transformers load the pure re-ranker)",
              "re-rank with it: " + predict_command(directory)]
    return lines


def calibration_summary_lines(report: dict[str, Any] | None) -> list[str]:
    """The deployed ranker's calibration (``metrics.json``'s ``calibration``), in a line."""
    if not report:
        return []
    if "refused" in report:
        return [f"warning: {report['refused']}"]
    calibrated, raw, cut = report["calibrated"], report["raw_sigmoid"], report["cut_off"]
    return [f"calibrated: {report['method']} on validation; on the {report['pairs']} test pairs ECE "
            f"{calibrated['ece']:.4f} (the raw sigmoid's {raw['ece']:.4f}), Brier {calibrated['brier']:.4f} "
            f"({raw['brier']:.4f}); the cut-off {report['threshold']:.4f} keeps {cut['recall']:.0%} of the relevant "
            f"at precision {cut['precision']:.0%}"]


def weights(values: dict[str, float]) -> str:
    """A fusion's weights as ``metrics.json`` holds them (``w``; ``w_reranker``, ...), as ``0.9 / 0.1``."""
    if "w" in values:
        return f"{values['w']:g} / {1 - values['w']:.10g}"
    return " / ".join(f"{values[key]:g}" for key in ("w_reranker", "w_teacher", "w_first_stage") if key in values)


def rule(deployment: Deployment) -> str:
    """Why the deployed ranker was chosen, in words."""
    if not deployment.validation:
        return "no validation figures (the pure re-ranker)"
    chosen = deployment.validation.get(deployment.ranker)
    others = [f"{NAMES[name]} {value:.4f}" for name, value in deployment.validation.items()
              if name != deployment.ranker and name in ("reranker", "interpolated", "fused")]
    if deployment.ranker == "fused" and deployment.weights == TEACHER_ALONE:
        return (f"the teacher alone: no ranker beat it on validation by more than one standard error of their "
                f"per-query difference ({deployment.measure} {chosen:.4f}" + "".join(f"; {o}" for o in others) + ")")
    return (f"the highest on validation, {deployment.measure} {chosen:.4f}"
            + (f" (against {', '.join(others)}; ties go to the simpler)" if others else ""))


def predict_command(directory: RunDirectory) -> str:
    """``rerank predict`` with the run's own config and model, re-ranking its first-stage run (every query)."""
    output = directory.root.with_name(f"{directory.root.name}-predict")
    return shlex.join(["rerank", "predict", "--config", str(directory.config), "--model.model_name",
                       str(directory.model), "--run", str(directory.first_stage_run), "--output_dir", str(output)])


def cv_summary(report: dict[str, Any], measure: str, root: Path) -> list[str | Table]:
    """The end of ``rerank cv``: each system over all queries and per fold on ``measure``, the deployed ranker of
    each fold, and its paired t-tests against the first stage and the teacher."""
    folds = report["folds"]
    table = Table(title=f"{measure} over all queries of folds {', '.join(map(str, folds))} (and per fold)",
                  title_justify="left")
    table.add_column("ranker")
    table.add_column("all queries", justify="right")
    for fold in folds:
        table.add_column(f"fold {fold}", justify="right")
    deployed = report.get("deployed", {})
    for system, name in (*ROWS, ("deployed", "deployed (each fold's own)")):
        if system not in report["all_queries"]:
            continue
        table.add_row(name, f"{report['all_queries'][system][measure]:.4f}",
                      *(f"{values[measure]:.4f}" for values in report["per_fold"][system]))
    lines: list[str | Table] = [table]
    if deployed:
        lines.append("deployed per fold: " + ", ".join(f"fold {fold} {ranker}"
                                                       for fold, ranker in zip(folds, deployed["per_fold"])))
        for baseline, test in deployed.get("tests", {}).items():
            lines.append(f"deployed against the {NAMES.get(baseline, baseline)}: {test['difference']:+.4f} "
                         f"{measure}, paired t-test over {test['queries']} queries, p = {test['p']:.2g}"
                         + (" (significant at 0.05)" if test["p"] < 0.05 else " (level)"))
    pooled = (report.get("calibration") or {}).get("pooled")
    if pooled:
        calibrated, raw = pooled["calibrated"], pooled["raw_sigmoid"]
        lines.append(f"calibrated: over the {pooled['pairs']} test pairs of {pooled['folds']} folds, each by its "
                     f"fold's map, ECE {calibrated['ece']:.4f} (the raw sigmoid's {raw['ece']:.4f}), Brier "
                     f"{calibrated['brier']:.4f} ({raw['brier']:.4f})")
    lines.append(f"runs and metrics: {root} (cv_metrics.json; test.deployed.run: every query by its fold's deployed "
                 "ranker)")
    return lines


def show(lines: list[str | Table]) -> None:
    """Print a summary (tables through rich, lines as they are)."""
    console = Console(soft_wrap=True)
    for line in lines:
        console.print(line, highlight=False)
