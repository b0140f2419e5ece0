"""Cross-validation: ``rerank cv --config robust04.yaml --output_dir DIR [--folds 1,2,3,4,5] [fit options]``.

The options are ``rerank fit``'s, parsed by the same parser, so the folds rotated here are exactly those the
fits see (``--data.folds.count 10`` rotates 10 folds). Runs ``rerank fit`` once per test fold (``DIR/fold<k>``,
each in its own process; validation is the fold before the test fold, training the others, as in
:mod:`rerank.data.folds`), skipping folds whose ``metrics.json`` exists, so an interrupted cross-validation
resumes where it stopped (an interrupted fold from its ``last.ckpt``). Then it concatenates the per-fold test runs
and writes ``DIR/cv_metrics.json``: each measure the fits report (``model.metrics``) over all queries, per fold,
and mean +- standard error over folds (:class:`~rerank.run_directory.CrossValidationDirectory`).
"""

from __future__ import annotations

import logging
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningArgumentParser
from rich.console import Console
from rich.table import Table

from ..data.collection import Collection, as_collection_config
from ..data.folds import FoldsConfig
from ..data.trec import Qrels, Run, read_run, write_run
from ..evaluation import evaluate
from ..logs import configure_logging
from ..run_directory import FUSIONS, SYSTEMS, CrossValidationDirectory, RunDirectory, measures_of
from .arguments import RerankCLI
from .errors import run

logger = logging.getLogger(__name__)
DESCRIPTION = __doc__.splitlines()[0]


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--folds", type=str | None, default=None,
                        help="comma-separated test folds (default: every fold of data.folds)")


def fold_command(arguments: list[str], fold: int, directory: RunDirectory) -> list[str]:
    """The ``rerank fit`` command of one fold: the cv command's options, this fold, its run directory."""
    command = [sys.executable, "-m", "rerank", "fit", *arguments, "--data.folds.test", str(fold),
               "--output_dir", str(directory.root)]
    if directory.last_checkpoint.exists():
        command += ["--ckpt_path", "last"]  # an interrupted fold resumes
    return command


def first_stage_of(directory: RunDirectory, test: Run) -> Run:
    """The first-stage candidates that were re-ranked for the test queries (the fold's first-stage run)."""
    first_stage = read_run(directory.first_stage_run)
    return {qid: {doc: first_stage[qid][doc] for doc in docs} for qid, docs in test.items()}


def summarise(folder: CrossValidationDirectory, folds: list[int], qrels: Qrels) -> dict[str, Any]:
    """Concatenated runs and their metrics over all queries, and mean +- standard error over folds."""
    runs: dict[str, Run] = {system: {} for system in SYSTEMS}
    per_fold: dict[str, list[dict[str, float]]] = {system: [] for system in SYSTEMS}
    for fold in folds:
        directory = folder.fold(fold)
        test = read_run(directory.run("test"))
        runs["reranker"].update(test)
        runs["first_stage"].update(first_stage_of(directory, test))
        for fusion in FUSIONS:
            if directory.run(f"test.{fusion}").exists():
                runs[fusion].update(read_run(directory.run(f"test.{fusion}")))
        for system, values in directory.read_metrics().items():
            per_fold[system].append(measures_of(values))
    report: dict[str, Any] = {"folds": folds, "all_queries": {}, "over_folds": {}, "per_fold": {}}
    for system, system_run in runs.items():
        if not system_run:
            continue
        values = per_fold[system]
        measures = list(values[0])
        write_run(system_run, folder.run(system), tag=system)
        report["all_queries"][system] = evaluate(system_run, {q: qrels[q] for q in system_run if q in qrels},
                                                 measures).mean
        report["per_fold"][system] = values  # in the order of ``folds``
        report["over_folds"][system] = {
            name: {"mean": statistics.fmean(v[name] for v in values),
                   "stderr": statistics.stdev(v[name] for v in values) / math.sqrt(len(values)) if len(values) > 1
                   else 0.0} for name in measures}
    folder.write_metrics(report)
    return report


def print_report(report: dict[str, Any]) -> None:
    table = Table(title=f"folds {report['folds']}: all queries (mean +- s.e. over folds)")
    measures = list(next(iter(report["all_queries"].values())))
    table.add_column("system")
    for name in measures:
        table.add_column(name, justify="right")
    for system, values in report["all_queries"].items():
        spread = report["over_folds"][system]
        table.add_row(system, *(f"{values[n]:.4f} ({spread[n]['mean']:.3f}+-{spread[n]['stderr']:.3f})"
                                for n in measures))
    Console().print(table)


def test_folds(option: str | None, folds: FoldsConfig) -> list[int]:
    """The test folds ``--folds`` names (default: all of ``data.folds``)."""
    count = folds.fold_count
    if not option:
        return list(range(1, count + 1))
    try:
        chosen = [int(k) for k in option.split(",")]
    except ValueError:
        raise ValueError(f"--folds {option}: expected comma-separated fold numbers") from None
    wrong = [k for k in chosen if not 1 <= k <= count]
    if wrong:
        raise ValueError(f"--folds {option}: data.folds defines folds 1..{count}")
    return chosen


def main(argv: list[str] | None = None) -> dict[str, Any]:
    configure_logging()
    arguments = sys.argv[1:] if argv is None else list(argv)
    cli = RerankCLI(arguments, prog="rerank cv", description=DESCRIPTION, arguments=_arguments, instantiate=False)
    folder = CrossValidationDirectory(Path(cli.config.output_dir))
    folds = test_folds(cli.config.folds, cli.option("data.folds", FoldsConfig))
    fit_arguments = _without(arguments, ("--folds", "--output_dir"))
    with folder.claimed("rerank cv"):
        for fold in folds:
            directory = folder.fold(fold)
            if directory.metrics.exists():
                logger.info("fold %d: done already (%s), skipped", fold, directory.root)
                continue
            command = fold_command(fit_arguments, fold, directory)
            logger.info("fold %d: %s", fold, " ".join(command))
            done = subprocess.run(command)
            if done.returncode != 0:
                raise RuntimeError(f"fold {fold} failed (exit {done.returncode}); rerun the same command to resume")
        collection = Collection(as_collection_config(cli.option("data.collection"), "data.collection"))
        report = summarise(folder, folds, collection.qrels)
    print_report(report)
    return report


def _without(arguments: list[str], options: tuple[str, ...]) -> list[str]:
    """``arguments`` without ``options`` and their values (``--x v`` and ``--x=v``)."""
    kept, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument in options:
            skip = True
        elif not argument.startswith(tuple(f"{option}=" for option in options)):
            kept.append(argument)
    return kept


if __name__ == "__main__":
    run(main)
