"""Re-rank a run with a trained model: ``rerank predict --model.model_name DIR --run FILE --output_dir OUT``.

The options are those of every command: the collection (``--config cranfield.yaml``, or
``--data.collection.ir_datasets ID``, or local files), the model (``--model.model_name``: an exported folder, whose
tokenization is used unless ``--model.tokenization.*`` says otherwise, or any one-label cross-encoder), the
candidates (``--run FILE`` is ``--data.first_stage.backend run --data.first_stage.run FILE``; or a BM25 first
stage), ``--data.rerank_depth`` (candidates re-ranked per query), ``--data.eval_batch_size``,
``--data.predict_queries`` (``all``, or a split of ``data.folds``) and the Trainer's options: pairs are scored
through Lightning's predict loop, batched by length, on any number of devices and nodes
(``--trainer.devices 4 --trainer.strategy ddp``), each process scoring its shard.

``OUT/runs/reranked.run`` receives the re-ranked candidates, best first, written once every process is done
(:class:`~rerank.prediction_writer.RunWriter`); when the collection has qrels, ``OUT/metrics.json`` holds the
metrics of the re-ranked run and of the first-stage run cut at the same depth (over the judged queries of
``data.predict_queries``; a judged query without candidates counts as 0), and they are printed. Every
query and document of the run must be in the collection (checked before any scoring).
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from lightning.pytorch.cli import LightningArgumentParser

from ..evaluation import evaluate
from ..logs import configure_logging
from ..prediction_writer import RunWriter
from ..run_directory import Metrics, RunDirectory
from .arguments import RerankCLI
from .errors import run

DESCRIPTION = __doc__.splitlines()[0]
RUN_NAME = "reranked"


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--run", type=str | None, default=None,
                        help="the TREC run to re-rank (sets data.first_stage.backend run and data.first_stage.run)")


def run_shortcut(arguments: list[str]) -> list[str]:
    """``--run FILE`` -> ``--data.first_stage.backend run --data.first_stage.run FILE`` (placed last, so it wins)."""
    kept, files, take = [], [], False
    for argument in arguments:
        if take:
            files.append(argument)
            take = False
        elif argument == "--run":
            take = True
        elif argument.startswith("--run="):
            files.append(argument.split("=", 1)[1])
        else:
            kept.append(argument)
    if files:
        kept += ["--data.first_stage.backend", "run", "--data.first_stage.run", files[-1]]
    return kept


def main(argv: list[str] | None = None) -> Metrics:
    """Re-rank, write the run (and its metrics when there are qrels); returns the metrics (empty without qrels)."""
    configure_logging()
    arguments = run_shortcut(sys.argv[1:] if argv is None else argv)
    cli = RerankCLI(arguments, prog="rerank predict", description=DESCRIPTION, arguments=_arguments)
    directory = RunDirectory(Path(cli.config.output_dir))
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    writer = RunWriter(directory.run(RUN_NAME), tag=f"rerank-{Path(model.hparams.model_name).name}")
    trainer.callbacks.append(writer)
    metrics: Metrics = {}
    with directory.claimed("rerank predict") if trainer.is_global_zero else contextlib.nullcontext():
        trainer.predict(model, datamodule=data, return_predictions=False)
        if trainer.is_global_zero and data.collection.has_qrels:
            split = data.predict_queries
            qrels = data.collection.qrels if split == "all" else data.judgments(split)
            metrics = {system: evaluate(system_run, qrels, model.hparams.metrics).mean
                       for system, system_run in (("reranker", writer.reranked), ("first_stage", writer.first_stage))}
            directory.write_metrics(metrics)
            print(json.dumps(metrics, indent=2))
    return metrics


if __name__ == "__main__":
    run(main)
