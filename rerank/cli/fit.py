"""Train a re-ranker, test the weights chosen on validation, export them: ``rerank fit --config robust04.yaml``.

Every Trainer option works from the command line or the YAML (``--trainer.precision bf16-mixed``,
``--trainer.accumulate_grad_batches 8``, ``--trainer.devices 4 --trainer.strategy ddp``,
``--trainer.num_nodes 2``); ``--print_config`` shows the merged config. ``--config`` takes a path or a bare
name of a shipped config, and may be repeated to stack files (:mod:`rerank.cli.arguments`). A ``pretrain:``
section runs a first, judgment-free stage, cached across folds and re-runs (:mod:`rerank.training.pretraining`).

``DIR`` receives what :class:`~rerank.run_directory.RunDirectory` lays out: the merged config, the first-stage run,
checkpoints (``best.ckpt`` on ``evaluation.selection.measure``, ``last.ckpt`` every
``last_checkpoint.every_n_train_steps`` steps), the validation and test runs, ``metrics.json`` and ``model/``, the
tested weights exported (:mod:`rerank.export`) with the ranker chosen on validation (:mod:`rerank.selection`, by
the ``evaluation:`` callback, :mod:`rerank.training.evaluator`). The weights tested are the fit's last unless the
best checkpoint beats them on validation by one standard error (``evaluation.selection.epoch``,
:meth:`~rerank.training.evaluator.Evaluator.tested`). The
run ends with a summary (:mod:`rerank.cli.summary`): each ranker's test figure beside the first stage and the
teachers, the deployed one marked, the model's folder and the command to use it; options that change the recipe
without being its settings (Trainer limits, extra callbacks) are said when the fit starts and in the summary.
Stopped by SIGTERM or SIGINT, the fit saves where it stands and the same command resumes it; after a crash,
``--ckpt_path last`` resumes where ``last.ckpt`` left off.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shlex
import sys
import time
from pathlib import Path

from lightning.pytorch.cli import LightningArgumentParser

from .. import preemption
from ..atomic import atomic_write
from ..config.source import as_source_configs
from ..errors import UserError
from ..export import card_metrics, export
from ..logs import configure_logging, keep_log
from ..preemption import Preempted
from ..run_directory import Metrics, RunDirectory, read_json, write_json
from ..training.evaluator import evaluator_of
from ..training.pretraining import pretrain
from .arguments import RerankCLI
from .errors import run
from .summary import fit_summary, recipe_changes, show

logger = logging.getLogger(__name__)

DESCRIPTION = __doc__.splitlines()[0]


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--ckpt_path", type=str | None, default=None,
                        help='a checkpoint to resume training from ("last": the run directory\'s last.ckpt)')


def main(argv: list[str] | None = None) -> Metrics:
    """Train, test the weights chosen on validation, write ``metrics.json`` and export; returns the test metrics.

    A fit stopped by SIGTERM or SIGINT (:mod:`rerank.preemption`) keeps its run directory and says so in
    ``preempted.json``; the same command then resumes it (from ``last.ckpt``, or the stage's own checkpoint)."""
    configure_logging(hold=True)
    arguments = sys.argv[1:] if argv is None else argv
    cli = RerankCLI(arguments, prog="rerank fit", description=DESCRIPTION, arguments=_arguments)
    directory = RunDirectory(Path(cli.config.output_dir))
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    stage = as_source_configs(cli.config_init.pretrain.train, "pretrain.train") if cli.config_init.pretrain else []
    model.check_data(data.list_size, {"data.train": data.sources, "pretrain.train": stage})  # before any work
    changes = recipe_changes(cli.config.as_dict())
    for change in changes:
        logger.warning("the recipe is changed by %s", change)
    digest = _config_digest(cli)
    ckpt_path = cli.config.ckpt_path or _resumed(directory, digest)
    with directory.claimed("rerank fit") if trainer.is_global_zero else contextlib.nullcontext():
        try:
            report = _fit(cli, directory, arguments, ckpt_path, changes)
        except Preempted as stopped:
            if trainer.is_global_zero:
                write_json({"config": digest, "signal": stopped.signum, "phase": stopped.phase,
                            "stopped": time.strftime("%Y-%m-%d %H:%M:%S")}, directory.preempted)
            raise
        if trainer.is_global_zero:
            directory.preempted.unlink(missing_ok=True)
    return report


def _fit(cli: RerankCLI, directory: RunDirectory, arguments: list[str], ckpt_path: str | None,
         changes: list[str]) -> Metrics:
    """The fit's phases, each named for :mod:`rerank.preemption`: the stage, training, testing, the export."""
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    if trainer.is_global_zero:
        keep_log(directory.root)
        with atomic_write(directory.config) as handle:
            handle.write(cli.parser.dump(cli.config))
    if cli.config_init.pretrain is not None:
        with preemption.phase("the judgment-free stage"):
            stage = pretrain(cli.config_init.pretrain, model, data, cli.config.trainer.as_dict(),
                             cli.config.seed_everything)
        if stage.max_steps != cli.config.pretrain.max_steps and trainer.is_global_zero:
            cli.config.pretrain.max_steps = stage.max_steps  # the steps auto chose: a rerun trains the same
            with atomic_write(directory.config) as handle:
                handle.write(cli.parser.dump(cli.config))
    with preemption.phase("the training folds"):
        # checkpoints hold tensors and plain values only: loaded without unpickling arbitrary objects
        trainer.fit(model, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
    evaluation = evaluator_of(trainer)
    tested = evaluation.tested(trainer, cli.config_init.checkpoint.best_model_path)  # None: the last weights
    with preemption.phase("testing"):
        trainer.test(model, datamodule=data, ckpt_path=tested, weights_only=True, verbose=False)
    if trainer.is_global_zero:
        options = cli.config.as_dict()
        card = {"model": dict(model.hparams), "evaluation": options.get("evaluation"),
                "data": options.get("data", {}), "pretrain": options.get("pretrain"),
                "metrics": card_metrics(evaluation.report), "command": shlex.join(["rerank", "fit", *arguments])}
        with preemption.phase("the export"):
            export(model.model, directory.model, card, deployment=model.deployment)
        directory.write_metrics(evaluation.report, model.deployment.as_dict())  # last: the fit is done
        show(fit_summary(evaluation.report, model.deployment, directory, evaluation.selection.measure,
                         len(data.judgments("test")), evaluation.choice, changes))
    return evaluation.report


def _config_digest(cli: RerankCLI) -> str:
    """A digest of the run's config but ``ckpt_path``: what a re-run must share with a stopped run to resume it."""
    config = cli.config.clone()
    config.ckpt_path = None
    return hashlib.sha1(cli.parser.dump(config).encode()).hexdigest()[:16]


def _resumed(directory: RunDirectory, digest: str) -> str | None:
    """``last`` when ``directory`` holds a fit that a signal stopped, under the same config, after its training
    began (its stage, if it had one, resumes from its own checkpoint); else None.

    Raises:
        UserError: the stopped fit had another config.
    """
    if not directory.preempted.is_file():
        return None
    record = read_json(directory.preempted)
    if record.get("config") != digest:
        raise UserError(f"{directory.root} holds a fit stopped by a signal ({record.get('phase')}, "
                        f"{record.get('stopped')}) under another config: resume it with its own command, or give "
                        "another --output_dir")
    if not directory.last_checkpoint.is_file():
        return None
    logger.info("resuming the fit stopped during %s (%s) from %s", record.get("phase"), record.get("stopped"),
                directory.last_checkpoint)
    return "last"


if __name__ == "__main__":
    run(main)
