"""Train a re-ranker, test the weights chosen on validation, export them: ``rerank fit --config robust04.yaml``.

Every Trainer option works from the command line or the YAML (``--trainer.precision bf16-mixed``,
``--trainer.accumulate_grad_batches 8``, ``--trainer.devices 4 --trainer.strategy ddp``,
``--trainer.num_nodes 2``); ``--print_config`` shows the merged config. ``--config`` takes a path or a bare
name of a shipped config, and may be repeated to stack files (:mod:`rerank.cli.arguments`). A ``pretrain:``
section runs a first, judgment-free stage, cached across folds and re-runs (:mod:`rerank.training.pretraining`).

``DIR`` receives what :class:`~rerank.core.run_directory.RunDirectory` lays out: the merged config, the first-stage run,
checkpoints (``best.ckpt`` on ``evaluation.selection.measure``, ``last.ckpt`` every
``last_checkpoint.every_n_train_steps`` steps), the validation and test runs, ``metrics.json`` and ``model/``, the
tested weights exported (:mod:`rerank.inference.export`) with the ranker chosen on validation
(:mod:`rerank.ranker.selection`, by the ``evaluation:`` callback, :mod:`rerank.callbacks.evaluator`). The weights tested
are the fit's last unless the
best checkpoint beats them on validation by one standard error (``evaluation.selection.epoch``,
:meth:`~rerank.callbacks.evaluator.Evaluator.tested`). The
run ends with a summary (:mod:`rerank.cli.summary`): each ranker's test figure beside the first stage and the
teachers, the deployed one marked, the model's folder and the command to use it; options that change the recipe
without being its settings (Trainer limits, extra callbacks) are said when the fit starts and in the summary.
Stopped by SIGTERM or SIGINT, the fit saves where it stands and the same command resumes it; after a crash,
``--ckpt_path last`` resumes where ``last.ckpt`` left off.
"""

from __future__ import annotations

import hashlib
import logging
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningArgumentParser

from ..core.run_directory import Metrics, RunDirectory
from ..ranker.deployment import Deployment
from ..training.fitting import FitParts, FitResult, fit
from . import schema
from .arguments import RerankCLI
from .configs import resolve_configs
from .failures import run
from .summary import fit_summary, recipe_changes, show

logger = logging.getLogger(__name__)

DESCRIPTION = __doc__.splitlines()[0]


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--ckpt_path", type=str | None, default=None,
                        help='a checkpoint to resume training from ("last": the run directory\'s last.ckpt)')


def main(argv: list[str] | None = None) -> Metrics:
    """``rerank fit``: train, test the weights chosen on validation, write ``metrics.json`` and export, then print
    the summary; returns the test metrics. A fit stopped by SIGTERM or SIGINT resumes when run again
    (:mod:`rerank.training.fitting`)."""
    result = fit_from_arguments(sys.argv[1:] if argv is None else argv)
    if result is None:
        return {}
    show(fit_summary(result.metrics, Deployment.from_dict(result.deployment, "the fit"), RunDirectory(result.folder),
                     result.measure, result.test_queries, result.tested, result.changes))
    return result.metrics


def fit_from_arguments(arguments: list[str]) -> FitResult | None:
    """The fit that ``arguments`` (``rerank fit``'s options) configure, run; None in the processes of a multi-device
    fit but the first."""
    from ..core.logs import configure_logging

    configure_logging(hold=True)
    cli = RerankCLI(arguments, prog="rerank fit", description=DESCRIPTION, arguments=_arguments, trains=True)
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    model.check_data(data.list_size, {"data.train": data.sources, "pretrain.train": cli.run_options.stage})
    changes = recipe_changes(cli.config.as_dict())
    for change in changes:
        logger.warning("the recipe is changed by %s", change)
    options = cli.config.as_dict()

    def config(stage_steps: int | None) -> str:
        if stage_steps is not None:  # pretrain.max_steps: auto, resolved
            cli.config.pretrain.max_steps = stage_steps
        return cli.parser.dump(cli.config)

    parts = FitParts(model=model, data=data, trainer=trainer, config=config, digest=_config_digest(cli),
                     best_checkpoint=lambda: cli.config_init.checkpoint.best_model_path,
                     pretrain=cli.config_init.pretrain, trainer_options=cli.config.trainer.as_dict(),
                     seed=cli.config.seed_everything, ckpt_path=cli.config.ckpt_path,
                     card={"evaluation": options.get("evaluation"), "data": options.get("data", {}),
                           "pretrain": options.get("pretrain"), "command": shlex.join(["rerank", "fit", *arguments])},
                     changes=changes)
    result = fit(parts)
    return result if trainer.is_global_zero else None


def train(config: str | Path | Sequence[str | Path], overrides: Mapping[str, Any] | Sequence[str] | None = None,
          output_dir: str | Path | None = None) -> FitResult:
    """Train a re-ranker from Python as ``rerank fit`` does, and return its run directory and test figures.

    Args:
        config: a config file or the name of a shipped one (``cranfield.yaml``), or several, stacked in order.
        overrides: options over them, as ``{"trainer.max_epochs": 1, "data.collection": {...}}`` or as the command
            line writes them (``["--trainer.max_epochs", "1"]``).
        output_dir: the run directory (default: the config's ``output_dir``).

    Returns:
        A :class:`~rerank.training.fitting.FitResult`: ``folder``, ``metrics`` (each ranker's test figures),
        ``deployment``, ``model`` (the exported folder).

    Raises:
        ValueError, OSError: a value or a file the options name is wrong, before any work (as ``rerank fit`` says it).

    Example::

        >>> from rerank import train  # doctest: +SKIP
        >>> result = train("cranfield.yaml", {"data.folds.test": 2}, output_dir="runs/fold2")  # doctest: +SKIP
        >>> result.metrics["reranker"]["nDCG@10"], result.model  # doctest: +SKIP
    """
    configs = [config] if isinstance(config, str | Path) else list(config)
    arguments = [argument for name in configs for argument in ("--config", str(name))]
    if isinstance(overrides, Mapping):
        arguments += [f"--{key}={_text(value)}" for key, value in overrides.items()]
    else:
        arguments += list(overrides or [])
    if output_dir is not None:
        arguments += ["--output_dir", str(output_dir)]
    schema.check("fit", resolve_configs(arguments))  # every value before any work, as the command line checks it
    result = fit_from_arguments(arguments)
    if result is None:
        raise RuntimeError("rerank.train runs in one process; for many devices, launch rerank fit")
    return result


def _text(value: Any) -> str:
    """An option's value as the command line writes it (JSON, which YAML reads as it is)."""
    import json

    return value if isinstance(value, str) else json.dumps(value)


def _config_digest(cli: RerankCLI) -> str:
    """A digest of the run's config but ``ckpt_path``: what a re-run must share with a stopped run to resume it."""
    config = cli.config.clone()
    config.ckpt_path = None
    return hashlib.sha1(cli.parser.dump(config).encode()).hexdigest()[:16]


if __name__ == "__main__":
    run(main)
