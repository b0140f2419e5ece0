"""Cross-validation: ``rerank cv --config robust04.yaml --output_dir DIR [--folds 1,2,3,4,5] [fit options]``.

The options are ``rerank fit``'s, parsed by the same parser, so the folds rotated here are exactly those the
fits see (``--data.folds.count 10`` rotates 10 folds). Runs ``rerank fit`` once per test fold (``DIR/fold<k>``,
each in its own process; validation is the fold before the test fold, training the others, as in
:mod:`rerank.data.folds`), skipping folds whose ``metrics.json`` exists, so an interrupted cross-validation
resumes where it stopped (an interrupted fold from its ``last.ckpt``); a SIGTERM or SIGINT is passed on to the fold
under way, which saves where it stands (:mod:`rerank.core.preemption`). The folds after the first train the stage steps
the first one planned (``pretrain.max_steps: auto``), so that they share its stage. Then it concatenates the per-fold
test runs and writes ``DIR/cv_metrics.json``: each measure the fits report (``evaluation.metrics``) over all the folds'
judged test queries (a query without candidates counts 0, as in each fold's ``metrics.json``), per fold,
and mean +- standard error over folds (:class:`~rerank.core.run_directory.CrossValidationDirectory`), and the ranker
each fold deployed (``deployed``: each query by its fold's, with paired t-tests against the first stage and the
teacher), and the deployed rankers' calibration (``calibration``: each fold's figures, and ECE, Brier and log-loss
over all the folds' test pairs, each fold's mapped by its own calibration), then prints a summary of them
(:mod:`rerank.cli.summary`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch.cli import LightningArgumentParser

from ..core import preemption
from ..core.errors import UserError
from ..core.logs import configure_logging, keep_log
from ..core.run_directory import (
    CALIBRATION,
    FUSIONS,
    SYSTEMS,
    TEACHERS,
    CrossValidationDirectory,
    RunDirectory,
    measures_of,
    read_json,
)
from ..data.collection import Collection
from ..data.folds import FoldsConfig, make_split
from ..data.trec import Qrels, Run, read_run, restrict, write_run
from ..evaluation.calibration import Calibration, pooled_report
from ..evaluation.measures import evaluate, paired_p
from ..ranker.deployment import saved_calibration
from .arguments import RerankCLI
from .failures import run
from .summary import cv_summary, show

logger = logging.getLogger(__name__)
DEPLOYED = "deployed"
"""The system of every query scored by its fold's deployed ranker (``test.deployed.run``)."""
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


def stage_steps(directory: RunDirectory) -> list[str]:
    """``--pretrain.max_steps N``: the steps a fold's judgment-free stage trained (``auto`` resolved, in its
    config.yaml), for the folds after it, so that they load the same stage whatever the machine's load when they
    start; empty without a stage."""
    if not directory.config.is_file():
        return []
    steps = (yaml.safe_load(directory.config.read_text(encoding="utf-8")) or {}).get("pretrain") or {}
    return ["--pretrain.max_steps", str(steps["max_steps"])] if isinstance(steps.get("max_steps"), int) else []


def first_stage_of(directory: RunDirectory, test: Run) -> Run:
    """The first-stage candidates that were re-ranked for the test queries (the fold's first-stage run)."""
    return restrict(read_run(directory.first_stage_run), test)


def judged_test_queries(folds_config: FoldsConfig, folds: list[int], qrels: Qrels) -> Qrels:
    """The qrels of the judged test queries of ``folds``: those each fold's ``metrics.json`` is measured on."""
    tests = (make_split(dataclasses.replace(folds_config, test=fold), qrels).test for fold in folds)
    return {qid: qrels[qid] for test in tests for qid in test if qid in qrels}


def summarise(folder: CrossValidationDirectory, folds: list[int], qrels: Qrels, measure: str) -> dict[str, Any]:
    """Concatenated runs and their metrics over all ``qrels``' queries (the folds' judged test queries, one without
    candidates counting 0 as in each fold's figures), and mean +- standard error over folds; the deployed ranker of
    each fold (``deployed``: every query by its fold's), with paired t-tests on ``measure`` against the first stage
    and the teacher."""
    runs: dict[str, Run] = {system: {} for system in (*SYSTEMS, DEPLOYED)}
    per_fold: dict[str, list[dict[str, float]]] = {system: [] for system in (*SYSTEMS, DEPLOYED)}
    deployed: list[str] = []
    calibrated: list[tuple[Calibration | None, Run]] = []
    for fold in folds:
        directory = folder.fold(fold)
        test = read_run(directory.run("test"))
        fold_runs = {"reranker": test, "first_stage": first_stage_of(directory, test)}
        fold_runs |= {system: read_run(directory.run(f"test.{system}")) for system in (*TEACHERS, *FUSIONS)
                      if directory.run(f"test.{system}").exists()}
        metrics = directory.read_metrics()
        ranker = directory.read_deployment()["ranker"]
        deployed.append(ranker)
        calibrated.append((saved_calibration(read_json(directory.model / "config.json")), fold_runs[ranker]))
        for system, run_of_fold in (*fold_runs.items(), (DEPLOYED, fold_runs[ranker])):
            runs[system].update(run_of_fold)
        for system, values in (*metrics.items(), (DEPLOYED, metrics[ranker])):
            per_fold[system].append(measures_of(values))
    report: dict[str, Any] = {"folds": folds, "all_queries": {}, "over_folds": {}, "per_fold": {},
                              DEPLOYED: {"per_fold": deployed, "tests": significance(runs, qrels, measure)},
                              CALIBRATION: {"per_fold": [folder.fold(fold).read_calibration() for fold in folds],
                                            "pooled": pooled_report(calibrated, qrels)}}
    for system, system_run in runs.items():
        if not system_run:
            continue
        values = per_fold[system]
        measures = list(values[0])
        write_run(system_run, folder.run(system), tag=system)
        report["all_queries"][system] = evaluate(system_run, qrels, measures).mean
        report["per_fold"][system] = values  # in the order of ``folds``
        report["over_folds"][system] = {
            name: {"mean": statistics.fmean(v[name] for v in values),
                   "stderr": statistics.stdev(v[name] for v in values) / math.sqrt(len(values)) if len(values) > 1
                   else 0.0} for name in measures}
    folder.write_metrics(report)
    return report


def significance(runs: dict[str, Run], qrels: Qrels, measure: str) -> dict[str, dict[str, float]]:
    """The deployed ranker against the first stage and the teacher over ``qrels``' queries: the mean difference on
    ``measure`` and the p-value of a paired two-sided t-test."""
    deployed = runs[DEPLOYED]
    tests = {}
    for baseline in ("first_stage", "teacher"):
        if not qrels or any(qid in deployed and qid not in runs[baseline] for qid in qrels):
            continue  # the baseline lacks some folds' queries (no teacher there)
        ours, theirs = (evaluate(run, qrels, [measure]).per_query for run in (deployed, runs[baseline]))
        ordered = sorted(qrels)
        difference = statistics.fmean(ours[q][measure] - theirs[q][measure] for q in ordered)
        tests[baseline] = {"difference": difference, "queries": len(ordered),
                           "p": paired_p([ours[q][measure] for q in ordered], [theirs[q][measure] for q in ordered])}
    return tests


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
    configure_logging(hold=True)
    arguments = sys.argv[1:] if argv is None else list(argv)
    cli = RerankCLI(arguments, prog="rerank cv", description=DESCRIPTION, arguments=_arguments, instantiate=False)
    folder = CrossValidationDirectory(Path(cli.config.output_dir))
    folds_config = cli.option("data.folds", FoldsConfig)
    folds = test_folds(cli.config.folds, folds_config)
    fit_arguments = _without(arguments, ("--folds", "--output_dir"))
    with folder.claimed("rerank cv"):
        keep_log(folder.root)
        stage: list[str] = []  # the first fold's stage steps, which the others take (the stage is theirs too)
        for fold in folds:
            directory = folder.fold(fold)
            if directory.metrics.exists():
                logger.info("fold %d: done already (%s), skipped", fold, directory.root)
                stage = stage or stage_steps(directory)
                continue
            command = fold_command([*fit_arguments, *stage], fold, directory)
            logger.info("fold %d: %s", fold, " ".join(command))
            code = _run_fold(command, fold, directory.root)
            if code != 0:
                raise UserError(f"fold {fold} failed (exit {code}; its error is above); mend it and rerun "
                                "the same command to resume")
            stage = stage or stage_steps(directory)
        collection = Collection(cli.run_options.collection)
        measure = cli.config.evaluation.selection.measure
        judged = judged_test_queries(folds_config, folds, collection.qrels)
        report = summarise(folder, folds, judged, measure)
    show(cv_summary(report, measure, folder.root))
    return report


def _run_fold(command: list[str], fold: int, root: Path) -> int:
    """Run one fold's ``rerank fit``; a SIGTERM or SIGINT meanwhile is passed on to it, which stops at a saved state,
    and then stops the cross-validation too (:class:`~rerank.core.preemption.Preempted`).

    Returns:
        the fold's exit status (0: done).
    """
    process = subprocess.Popen(command)
    with preemption.phase(f"fold {fold}"), preemption.deferred(forward=process):
        code = process.wait()
    stopped = {128 + signum for signum in preemption.SIGNALS} | {-signum for signum in preemption.SIGNALS}
    if preemption.pending() is not None or code in stopped:
        with preemption.phase(f"fold {fold}"):
            raise preemption.stop(f"fold {fold} saved where it stood in {root}")
    return code


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
