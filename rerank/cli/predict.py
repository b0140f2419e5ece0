"""Re-rank a run with a trained model: ``rerank predict --model.model_name DIR --run FILE --output_dir OUT``.

The options are those of every command: the collection (``--config cranfield.yaml``, or
``--data.collection.ir_datasets ID``, or local files), the model (``--model.model_name``: an exported folder, whose
tokenization is used unless ``--model.tokenization.*`` says otherwise, or any one-label cross-encoder), the
candidates (``--run FILE`` is ``--data.first_stage.backend run --data.first_stage.run FILE``; or a BM25 first
stage), ``--data.rerank_depth`` (candidates re-ranked per query), ``--data.eval_batch_size``,
``--data.predict_queries`` (``all``, or a split of ``data.folds``) and the Trainer's options: pairs are scored
through Lightning's predict loop, batched by length, on any number of devices and nodes
(``--trainer.devices 4 --trainer.strategy ddp``), each process scoring its shard.

The model re-ranks with the ranker its export deploys (:mod:`rerank.ranker.deployment`, chosen on validation by ``rerank
fit``): the pure cross-encoder, ``interpolated`` with the first stage, or ``fused`` with the teacher and the first
stage, whose scores are the given run's (or BM25's). ``--ranker reranker`` re-ranks with the pure cross-encoder
whatever the export deploys. Before any scoring, the deployed ranker's teacher is loaded (an export whose teacher
cannot be found fails, naming the folder and the teacher), and a run whose query lists all carry one score (ranks
without scores) is refused, naming its file and line, when the deployed ranker mixes the first stage's scores.

``OUT/runs/reranked.run`` receives the deployed ranker's run and ``OUT/runs/reranked.reranker.run`` the pure cross-
encoder's beside it, best first, written once every process is done
(:class:`~rerank.callbacks.prediction_writer.RunWriter`); where the export carries the deployed ranker's calibration
(:mod:`rerank.evaluation.calibration`), ``OUT/runs/reranked.probabilities.tsv`` gives each candidate's score and
probability of relevance, in the run's order, and ``metrics.json`` its calibration figures (``calibration``). When
the collection has qrels, ``OUT/metrics.json`` holds the metrics of both, of the teacher when the deployed ranker
uses it, and of the first-stage run cut at the same depth (over the judged queries of ``data.predict_queries``; a
judged query without candidates counts as 0), with the deployed ranker (``deployment``), and they are printed. Every
query and document of the run must be in the collection (checked before any scoring).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from pathlib import Path
from typing import Literal

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser

from ..callbacks.evaluator import evaluator_of
from ..callbacks.prediction_writer import RunWriter
from ..core.logs import configure_logging, keep_log
from ..core.run_directory import Metrics, RunDirectory
from ..data.trec import check_scored, write_run
from ..evaluation.calibration import calibration_report, write_probabilities
from ..evaluation.measures import evaluate
from ..inference.fast_scoring import resolve_precision, saved_gates
from ..model.cross_encoder import require_trained_head
from ..model.scorer import int8_model
from ..ranker.deployment import Deployment, check_teacher, saved_calibration, saved_deployment
from ..teacher.scores import teacher_scores
from ..training.datamodule import RerankDataModule
from ..training.lightning_module import RerankModule
from .arguments import RerankCLI, add_run_option, add_untrained_head_option, run_shortcut
from .failures import run

logger = logging.getLogger(__name__)

DESCRIPTION = __doc__.splitlines()[0]
RUN_NAME = "reranked"


def _arguments(parser: LightningArgumentParser) -> None:
    add_run_option(parser, "the TREC run to re-rank")
    parser.add_argument("--ranker", type=Literal["deployed", "reranker"], default="deployed",
                        help="deployed: the ranker the model's export deploys (rerank.ranker.deployment); "
                             "reranker: the pure cross-encoder")
    parser.add_argument("--precision", type=Literal["32", "int8", "auto"], default="32",
                        help="what the cross-encoder scores in: 32 (float32), int8 (on a CPU), auto (the fastest that "
                             "passed the export's quality gate and that this CPU runs fast: "
                             "rerank.inference.fast_scoring); bfloat16: --trainer.precision bf16-mixed")
    add_untrained_head_option(parser)


def main(argv: list[str] | None = None) -> Metrics:
    """Re-rank, write the runs (and their metrics when there are qrels); returns the metrics (empty without qrels)."""
    configure_logging(hold=True)
    arguments = run_shortcut(sys.argv[1:] if argv is None else argv)
    cli = RerankCLI(arguments, prog="rerank predict", description=DESCRIPTION, arguments=_arguments)
    directory = RunDirectory(Path(cli.config.output_dir))
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    if not cli.config.untrained_head:
        require_trained_head(model.model, model.hparams.model_name)
    untrained = "-untrained-head" if not model.model.head_trained else ""  # in every line of the runs
    deployment = deployed(model, data, cli.config.ranker)
    scoring = _scoring(model, cli.config.precision, trainer)
    writer = RunWriter(directory.run(f"{RUN_NAME}.reranker"),
                       tag=f"rerank-{Path(model.hparams.model_name).name}{untrained}")
    trainer.callbacks.append(writer)
    metrics: Metrics = {}
    with directory.claimed("rerank predict") if trainer.is_global_zero else contextlib.nullcontext():
        if trainer.is_global_zero:
            keep_log(directory.root)
        with scoring:
            trainer.predict(model, datamodule=data, return_predictions=False)
        if not trainer.is_global_zero:
            return metrics
        collection = data.collection
        teacher = (teacher_scores(deployment.teacher, writer.first_stage, collection.queries, collection.documents)
                   if deployment.needs_teacher else None)
        runs = {"reranker": writer.reranked, "first_stage": writer.first_stage, "teacher": teacher,
                deployment.ranker: deployment.combine(writer.reranked, writer.first_stage, teacher)}
        write_run(runs[deployment.ranker], directory.run(RUN_NAME), tag=f"rerank-{deployment.ranker}{untrained}")
        calibration = saved_calibration(model.model.model.config) if cli.config.ranker == "deployed" else None
        if calibration is not None:
            write_probabilities(runs[deployment.ranker], calibration, directory.runs / f"{RUN_NAME}.probabilities.tsv")
        if collection.has_qrels:
            split = data.predict_queries
            qrels = collection.qrels if split == "all" else data.judgments(split)
            metrics = {system: evaluate(runs[system], qrels, evaluator_of(trainer).metrics).mean
                       for system in (deployment.ranker, "reranker", "teacher", "first_stage")
                       if runs[system] is not None}
            calibrated = (calibration_report(calibration, runs[deployment.ranker], qrels)
                          if calibration is not None else None)
            directory.write_metrics(metrics, deployment.as_dict(), calibration=calibrated)
            print(json.dumps(metrics, indent=2))
        print(f"re-ranked by the deployed ranker, {deployment.describe()}: {directory.run(RUN_NAME)}; the pure "
              f"re-ranker's beside it: {directory.run(f'{RUN_NAME}.reranker')}")
        if calibration is not None:
            print(f"its scores as probabilities of relevance ({calibration.describe()}): "
                  f"{directory.runs / f'{RUN_NAME}.probabilities.tsv'}")
        if untrained:
            print(f"warning: {model.hparams.model_name} scored with an untrained head (--untrained_head): its scores "
                  "come from random weights, and the runs' tags say so")
    return metrics


def _scoring(model: RerankModule, precision: str, trainer: Trainer) -> contextlib.AbstractContextManager:
    """``model`` made to score in ``precision`` (``auto`` resolved and said; a fast path that failed its gate at
    export refused), and the context the predict loop runs in (bfloat16 autocast where ``auto`` chose it)."""
    precision, reason = resolve_precision(precision, saved_gates(model.model.model.config),
                                          trainer.strategy.root_device, model.hparams.model_name)
    logger.info("--precision %s", reason)
    if precision == "int8":
        model.model.model = int8_model(model.model.model)
    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()


def deployed(model: RerankModule, data: RerankDataModule, ranker: str) -> Deployment:
    """The ranker to re-rank with (the export's, or the pure one), once what it needs is checked: its teacher loads,
    and a run given as the first stage carries scores where the ranker mixes them."""
    folder = model.hparams.model_name
    deployment = Deployment() if ranker == "reranker" else saved_deployment(model.model.model.config, folder)
    if deployment.needs_teacher:
        check_teacher(deployment.teacher, folder)
    run_file = data.first_stage_config.run if data.first_stage_config.backend == "run" else None
    if deployment.needs_first_stage and run_file is not None:
        check_scored(run_file, f"the deployed ranker of {folder}, {deployment.describe()}, mixes the first "
                               "stage's scores; give the run with its scores, or --ranker reranker for the pure "
                               "re-ranker")
    return deployment


if __name__ == "__main__":
    run(main)
