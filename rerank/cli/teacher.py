"""Score a collection's candidates with a teacher: ``rerank teacher --config cranfield.yaml --output_dir DIR``.

The candidates are the top ``data.rerank_depth`` of the first stage (``data.first_stage``, e.g. ``--run FILE``
as ``rerank predict`` takes it) for every query of ``data.collection``; the teacher is a sentence-transformers
bi-encoder (``--teacher.bi_encoder``, default ``sentence-transformers/all-MiniLM-L6-v2``) or a run
(``--teacher.run``), optionally mixed with the first stage (``--teacher.first_stage_weight``) and a student
(``--teacher.student``: an exported cross-encoder; the teacher of a born-again round). Writes
``DIR/first_stage.trec`` and ``DIR/teacher.trec`` (a TREC run to give a training source as
``teacher: {run: DIR/teacher.trec}``), and when the collection has qrels, ``DIR/metrics.json`` with the
teacher's and the first stage's metrics, printed too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lightning.pytorch.cli import LightningArgumentParser

from ..config.teacher import TeacherConfig
from ..core.logs import configure_logging, keep_log
from ..core.run_directory import Metrics, RunDirectory
from ..data.collection import Collection
from ..data.trec import read_run, top_k, write_run
from ..evaluation.measures import evaluate
from ..first_stage import FirstStageConfig, write_first_stage_run
from ..teacher.scores import DEFAULT_BI_ENCODER, teacher_scores
from .arguments import RerankCLI, add_run_option, run_shortcut
from .failures import run

DESCRIPTION = __doc__.splitlines()[0]


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--teacher", type=TeacherConfig | None, default=None,
                        help=f"the teacher: {{bi_encoder: MODEL}} or {{run: FILE}}, and first_stage_weight: W for an "
                             f"ensemble with the first stage (default: {DEFAULT_BI_ENCODER} alone)")
    add_run_option(parser, "the candidates' run")


def main(argv: list[str] | None = None) -> Metrics:
    """Score, write the teacher run (and its metrics when there are qrels); returns the metrics."""
    configure_logging(hold=True)
    cli = RerankCLI(run_shortcut(sys.argv[1:] if argv is None else argv), prog="rerank teacher",
                    description=DESCRIPTION, arguments=_arguments, instantiate=False)
    config = cli.run_options.collection
    collection = Collection(config)
    qrels = collection.qrels if collection.has_qrels else None  # read (and checked) before any scoring
    directory = RunDirectory(Path(cli.config.output_dir))
    write_first_stage_run(config, cli.option("data.first_stage", FirstStageConfig), directory.first_stage_run)
    keep_log(directory.root)  # the log so far, now that the directory holds a run
    candidates = top_k(read_run(directory.first_stage_run), cli.config.data.rerank_depth)
    teacher = (cli.option("teacher", TeacherConfig) if cli.config.teacher
               else TeacherConfig(bi_encoder=DEFAULT_BI_ENCODER))
    write_run(teacher_scores(teacher, candidates, collection.queries, collection.documents), directory.teacher_run,
              tag="teacher")
    metrics: Metrics = {}
    if qrels is not None:
        measures = cli.config.evaluation.metrics
        metrics = {"teacher": evaluate(read_run(directory.teacher_run), qrels, measures).mean,
                   "first_stage": evaluate(candidates, qrels, measures).mean}
        directory.write_metrics(metrics)
        print(json.dumps(metrics, indent=2))
    return metrics


if __name__ == "__main__":
    run(main)
