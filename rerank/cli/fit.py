"""Train a re-ranker, test the weights chosen on validation, export them: ``rerank fit --config robust04.yaml``.

Every Trainer option works from the command line or the YAML (``--trainer.precision bf16-mixed``,
``--trainer.accumulate_grad_batches 8``, ``--trainer.devices 4 --trainer.strategy ddp``,
``--trainer.num_nodes 2``); ``--print_config`` shows the merged config. ``--config`` takes a path or a bare
name from ``configs/``, and may be repeated to stack files (:mod:`rerank.cli.arguments`). A ``pretrain:``
section runs a first, judgment-free stage, cached across folds and re-runs (:mod:`rerank.training.pretraining`).

``DIR`` receives what :class:`~rerank.run_directory.RunDirectory` lays out: the merged config, the first-stage run,
checkpoints (``best.ckpt`` on ``evaluation.selection.measure``, ``last.ckpt`` every
``last_checkpoint.every_n_train_steps`` steps), the validation and test runs, ``metrics.json`` and ``model/``, the
tested weights exported (:mod:`rerank.export`) with the ranker chosen on validation (:mod:`rerank.selection`, by
the ``evaluation:`` callback, :mod:`rerank.training.evaluator`). The weights tested are the fit's last unless the
best checkpoint beats them on validation by one standard error (``evaluation.selection.epoch``,
:meth:`~rerank.training.evaluator.Evaluator.tested`). The
run ends with a summary (:mod:`rerank.cli.summary`): each ranker's test figure beside the first stage and the
teachers, the deployed one marked, the model's folder and the command to use it. After a crash, the same command
with ``--ckpt_path last`` resumes where ``last.ckpt`` left off.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path

from lightning.pytorch.cli import LightningArgumentParser

from ..atomic import atomic_write
from ..export import card_metrics, export
from ..logs import configure_logging, keep_log
from ..run_directory import Metrics, RunDirectory
from ..training.evaluator import evaluator_of
from ..training.pretraining import pretrain
from ..training.sources import as_source_configs
from .arguments import RerankCLI
from .errors import run
from .summary import fit_summary, show

DESCRIPTION = __doc__.splitlines()[0]


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--ckpt_path", type=str | None, default=None,
                        help='a checkpoint to resume training from ("last": the run directory\'s last.ckpt)')


def main(argv: list[str] | None = None) -> Metrics:
    """Train, test the weights chosen on validation, write ``metrics.json`` and export; returns the test metrics."""
    configure_logging(hold=True)
    arguments = sys.argv[1:] if argv is None else argv
    cli = RerankCLI(arguments, prog="rerank fit", description=DESCRIPTION, arguments=_arguments)
    directory = RunDirectory(Path(cli.config.output_dir))
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    stage = as_source_configs(cli.config_init.pretrain.train, "pretrain.train") if cli.config_init.pretrain else []
    model.check_data(data.list_size, {"data.train": data.sources, "pretrain.train": stage})  # before any work
    with directory.claimed("rerank fit") if trainer.is_global_zero else contextlib.nullcontext():
        if trainer.is_global_zero:
            keep_log(directory.root)
            with atomic_write(directory.config) as handle:
                handle.write(cli.parser.dump(cli.config))
        if cli.config_init.pretrain is not None:
            stage = pretrain(cli.config_init.pretrain, model, data, cli.config.trainer.as_dict(),
                             cli.config.seed_everything)
            if stage.max_steps != cli.config.pretrain.max_steps and trainer.is_global_zero:
                cli.config.pretrain.max_steps = stage.max_steps  # the steps auto chose: a rerun trains the same
                with atomic_write(directory.config) as handle:
                    handle.write(cli.parser.dump(cli.config))
        # checkpoints hold tensors and plain values only: loaded without unpickling arbitrary objects
        trainer.fit(model, datamodule=data, ckpt_path=cli.config.ckpt_path, weights_only=True)
        evaluation = evaluator_of(trainer)
        tested = evaluation.tested(trainer, cli.config_init.checkpoint.best_model_path)  # None: the last weights
        trainer.test(model, datamodule=data, ckpt_path=tested, weights_only=True, verbose=False)
        if trainer.is_global_zero:
            directory.write_metrics(evaluation.report, model.deployment.as_dict())
            options = cli.config.as_dict()
            card = {"model": dict(model.hparams), "evaluation": options.get("evaluation"),
                    "data": options.get("data", {}), "pretrain": options.get("pretrain"),
                    "metrics": card_metrics(evaluation.report), "command": shlex.join(["rerank", "fit", *arguments])}
            export(model.model, directory.model, card, deployment=model.deployment)
            show(fit_summary(evaluation.report, model.deployment, directory, evaluation.selection.measure,
                             len(data.judgments("test")), evaluation.choice))
    return evaluation.report


if __name__ == "__main__":
    run(main)
