"""Cross-validation: ``python -m rerank.cv --config robust04.yaml --output_dir DIR [--folds 1,2,3,4,5] [fit options]``.

Runs ``rerank.fit`` once per test fold (``DIR/fold<k>``, each in its own process; the fold rotation is the one of
:mod:`rerank.data.folds`: validation is the fold before the test fold, training the others), skipping folds whose
``metrics.json`` already exists, so an interrupted cross-validation resumes where it stopped. Then it
concatenates the per-fold test runs into ``DIR/test.run`` (and ``DIR/bm25.run``, the re-ranked candidates,
``DIR/test.interpolated.run`` when interpolation is on) and writes ``DIR/cv_metrics.json``: the metrics over all
queries, each fold's, and their mean and standard error over folds. Options after the known ones go to ``rerank.fit``
(e.g. ``--trainer.max_epochs 3``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .config import build, load_config
from .data.collection import Collection, CollectionConfig
from .data.trec import Run, atomic_write, read_run, write_run
from .evaluation import METRICS, evaluate

logger = logging.getLogger(__name__)
SYSTEMS = {"reranker": "test.run", "bm25": "bm25.run", "interpolated": "test.interpolated.run"}


def fold_count(config: dict) -> int:
    """How many folds the config's ``data.folds`` defines."""
    folds = (config.get("data") or {}).get("folds") or {}
    scheme = folds.get("scheme", "kfold")
    return 5 if scheme == "robust04" else len(folds.get("lists", [])) if scheme == "explicit" else folds.get("count", 5)


def run_fold(configs: list[str], fold: int, folder: Path, extra: list[str]) -> None:
    """``rerank.fit`` on one fold in a child process; raises when it fails."""
    command = [sys.executable, "-m", "rerank.fit", *[part for name in configs for part in ("--config", name)],
               "--data.folds.test", str(fold), "--output_dir", str(folder), *extra]
    if (folder / "checkpoints" / "last.ckpt").exists():
        command += ["--ckpt_path", "last"]  # an interrupted fold resumes
    logger.info("fold %d: %s", fold, " ".join(command))
    done = subprocess.run(command)
    if done.returncode != 0:
        raise RuntimeError(f"fold {fold} failed (exit {done.returncode}); rerun the same command to resume")


def first_stage_of(folder: Path, test: Run) -> Run:
    """The first-stage candidates that were re-ranked for the test queries (the fold's ``first_stage.trec``)."""
    first_stage = read_run(folder / "first_stage.trec")
    return {qid: {doc: first_stage[qid][doc] for doc in docs} for qid, docs in test.items()}


def summarise(folder: Path, folds: list[int], qrels: dict) -> dict:
    """Concatenated runs and their metrics over all queries, and mean +- standard error over folds."""
    runs: dict[str, Run] = {system: {} for system in SYSTEMS}
    per_fold: dict[str, list[dict[str, float]]] = {system: [] for system in SYSTEMS}
    for fold in folds:
        fold_dir = folder / f"fold{fold}"
        metrics = json.loads((fold_dir / "metrics.json").read_text())
        test = read_run(fold_dir / "runs" / "test.run")
        runs["reranker"].update(test)
        runs["bm25"].update(first_stage_of(fold_dir, test))
        if (fold_dir / "runs" / "test.interpolated.run").exists():
            runs["interpolated"].update(read_run(fold_dir / "runs" / "test.interpolated.run"))
        for system, values in metrics.items():
            per_fold[system].append({name: values[name] for name in METRICS})
    report: dict = {"folds": folds, "all_queries": {}, "over_folds": {}, "per_fold": {}}
    for system, run in runs.items():
        if not run:
            continue
        write_run(run, folder / SYSTEMS[system], tag=system)
        report["all_queries"][system] = evaluate(run, {q: qrels[q] for q in run if q in qrels}, METRICS).mean
        values = per_fold[system]
        report["per_fold"][system] = values  # in the order of ``folds``
        report["over_folds"][system] = {
            name: {"mean": statistics.fmean(v[name] for v in values),
                   "stderr": statistics.stdev(v[name] for v in values) / math.sqrt(len(values)) if len(values) > 1
                   else 0.0} for name in METRICS}
    with atomic_write(folder / "cv_metrics.json") as handle:
        json.dump(report, handle, indent=2)
    return report


def print_report(report: dict) -> None:
    table = Table(title=f"folds {report['folds']}: all queries (mean +- s.e. over folds)")
    table.add_column("system")
    for name in METRICS:
        table.add_column(name, justify="right")
    for system, values in report["all_queries"].items():
        spread = report["over_folds"][system]
        table.add_row(system, *(f"{values[n]:.4f} ({spread[n]['mean']:.3f}+-{spread[n]['stderr']:.3f})"
                                for n in METRICS))
    Console().print(table)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m rerank.cv", description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", required=True, help="YAML config (repeat to stack)")
    parser.add_argument("--output_dir", required=True, type=Path)
    parser.add_argument("--folds", help="comma-separated test folds (default: all folds of the config)")
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = load_config(args.config)
    count = fold_count(config)
    folds = [int(k) for k in args.folds.split(",")] if args.folds else list(range(1, count + 1))
    wrong = [k for k in folds if not 1 <= k <= count]
    if wrong:
        parser.error(f"--folds {args.folds}: the config defines folds 1..{count}")
    for fold in folds:
        if (args.output_dir / f"fold{fold}" / "metrics.json").exists():
            logger.info("fold %d: done already (%s), skipped", fold, args.output_dir / f"fold{fold}")
            continue
        run_fold(args.config, fold, args.output_dir / f"fold{fold}", extra)
    collection = build(CollectionConfig, (config.get("data") or {}).get("collection"), "data.collection")
    report = summarise(args.output_dir, folds, Collection(collection).qrels)
    print_report(report)
    return report


if __name__ == "__main__":
    main()
