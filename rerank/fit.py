"""Train a re-ranker, test its best checkpoint: ``python -m rerank.fit --config robust04.yaml --output_dir DIR``.

A :class:`~lightning.pytorch.cli.LightningCLI` over :class:`~rerank.module.RerankModule` (``model:``) and
:class:`~rerank.data.datamodule.RerankDataModule` (``data:``). Every Trainer option works from the command line
or the YAML (``--trainer.precision bf16-mixed``, ``--trainer.accumulate_grad_batches 8``,
``--trainer.devices 4 --trainer.strategy ddp``, ``--trainer.num_nodes 2``); ``--print_config`` shows the merged
config. ``--config`` takes a path or a bare name from ``configs/``, and may be repeated to stack files.

``DIR`` receives ``config.yaml``, ``first_stage.trec``, ``checkpoints/`` (``best.ckpt`` on
``model.selection_metric``, ``last.ckpt`` every ``last_checkpoint.every_n_train_steps`` steps), ``runs/`` and
``metrics.json`` (the test metrics of the re-ranker and of the first-stage run it re-ranked), and ``model/``, the
best checkpoint exported for ``transformers`` and ``sentence-transformers`` (:mod:`rerank.export`). After a crash,
the same command with ``--ckpt_path last`` resumes where ``last.ckpt`` left off.
"""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from .config import resolve_config_path
from .data.datamodule import RerankDataModule
from .export import export
from .module import RerankModule, write_metrics


class RerankCLI(LightningCLI):
    """The Lightning CLI with rerank's run directory, checkpoints and argument links."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--output_dir", type=str, default="runs/default",
                            help="the run directory: config, first-stage run, checkpoints, runs, metrics.json")
        parser.add_argument("--ckpt_path", type=str | None, default=None,
                            help='a checkpoint to resume training from ("last": the run directory\'s last.ckpt)')
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(ModelCheckpoint, "last_checkpoint")
        parser.set_defaults({
            "checkpoint.filename": "best", "checkpoint.mode": "max", "checkpoint.save_top_k": 1,
            "checkpoint.save_last": False,
            "last_checkpoint.save_top_k": 0, "last_checkpoint.save_last": True,
            "last_checkpoint.every_n_train_steps": 50,
        })
        parser.link_arguments("model.model_name", "data.model_name")
        parser.link_arguments("model.selection_metric", "checkpoint.monitor", compute_fn=lambda name: f"val/{name}")
        parser.link_arguments("output_dir", "data.output_dir")
        parser.link_arguments("output_dir", "trainer.default_root_dir")
        for key in ("checkpoint.dirpath", "last_checkpoint.dirpath"):
            parser.link_arguments("output_dir", key, compute_fn=lambda folder: str(Path(folder) / "checkpoints"))


def resolve_configs(argv: list[str]) -> list[str]:
    """``--config NAME`` -> ``--config configs/NAME.yaml`` when NAME is not a file (also ``--config=NAME``)."""
    resolved = list(argv)
    for position, argument in enumerate(resolved):
        if argument == "--config" and position + 1 < len(resolved):
            resolved[position + 1] = str(resolve_config_path(resolved[position + 1]))
        elif argument.startswith("--config="):
            resolved[position] = f"--config={resolve_config_path(argument.split('=', 1)[1])}"
    return resolved


def main(argv: list[str] | None = None) -> dict:
    """Train, test the best checkpoint, write ``metrics.json``; returns the test report."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    arguments = sys.argv[1:] if argv is None else argv
    cli = RerankCLI(RerankModule, RerankDataModule, args=resolve_configs(arguments),
                    run=False, save_config_callback=None, seed_everything_default=42,
                    parser_kwargs={"prog": "python -m rerank.fit", "description": __doc__.splitlines()[0]})
    output_dir = Path(cli.config.output_dir)
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    if trainer.is_global_zero:
        output_dir.mkdir(parents=True, exist_ok=True)
        cli.parser.save(cli.config, output_dir / "config.yaml", overwrite=True)
    trainer.fit(model, datamodule=data, ckpt_path=cli.config.ckpt_path)
    best = cli.config_init.checkpoint.best_model_path
    trainer.test(model, datamodule=data, ckpt_path=best or None)
    if trainer.is_global_zero:
        write_metrics(model.test_report, output_dir / "metrics.json")
        card = {"model": dict(model.hparams), "data": cli.config.as_dict().get("data", {}),
                "metrics": {system: {k: v for k, v in values.items() if k != "w"}
                            for system, values in model.test_report.items()},
                "command": shlex.join(["python", "-m", "rerank.fit", *arguments])}
        export(model.model, output_dir / "model", card)
    return model.test_report


if __name__ == "__main__":
    main()
