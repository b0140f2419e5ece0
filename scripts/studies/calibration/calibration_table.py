"""The calibration study's table (docs/experiments/calibration.md) from ``rerank cv`` directories.

    python scripts/studies/calibration/calibration_table.py runs/calibration/cranfield runs/calibration/scifact

For each cross-validation directory: each fold's ECE and Brier score of the deployed ranker's calibrated
probability and of its raw sigmoid on the test pairs, the map chosen, the cut-off's recall and precision, and the
pooled figures over the folds (``cv_metrics.json``'s ``calibration``), as a Markdown table; ``--transfer
PREDICT_DIR...`` adds a row per ``rerank predict`` output (one collection's export on another's queries).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def fold_row(name: str, figures: dict) -> str:
    if "refused" in figures:
        return f"| {name} | refused: {figures['refused']} | | | | | |"
    calibrated, raw, cut = figures["calibrated"], figures["raw_sigmoid"], figures.get("cut_off")
    kept = f"{cut['recall']:.3f} / {cut['precision']:.3f}" if cut else ""
    return (f"| {name} | {figures.get('method', 'each fold its own')} | {figures['pairs']} | {raw['ece']:.4f} | "
            f"{calibrated['ece']:.4f} | {raw['brier']:.4f} / {calibrated['brier']:.4f} | {kept} |")


def table(folders: list[Path], transfers: list[Path]) -> str:
    lines = ["| collection, fold | map | test pairs | ECE, raw sigmoid | ECE, calibrated | Brier, raw / calibrated | "
             "cut-off: recall / precision |", "|---|---|---:|---:|---:|---:|---:|"]
    for folder in folders:
        report = json.loads((folder / "cv_metrics.json").read_text(encoding="utf-8"))
        calibration = report["calibration"]
        for fold, figures in zip(report["folds"], calibration["per_fold"]):
            lines.append(fold_row(f"{folder.name}, fold {fold}", figures or {"refused": "none recorded"}))
        if calibration["pooled"]:
            lines.append(fold_row(f"**{folder.name}, pooled**", calibration["pooled"]))
    for folder in transfers:
        figures = json.loads((folder / "metrics.json").read_text(encoding="utf-8")).get("calibration")
        lines.append(fold_row(f"transfer: {folder.name}", figures or {"refused": "the export has no calibration"}))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="rerank cv output directories")
    parser.add_argument("--transfer", nargs="*", type=Path, default=[], help="rerank predict output directories")
    arguments = parser.parse_args()
    print(table(arguments.folders, arguments.transfer))


if __name__ == "__main__":
    main()
