"""What every command shares: one config schema, config files that stack, bare names from ``configs/``.

Every command parses its options with :class:`RerankCLI`, a :class:`~lightning.pytorch.cli.LightningCLI` over
:class:`~rerank.lightning_module.RerankModule` (``model:``), :class:`~rerank.data.datamodule.RerankDataModule`
(``data:``) and the Trainer (``trainer:``), so an option is written the same in every command
(``--data.first_stage.backend bm25s``), any training config is accepted by every command (each reads the
sections it needs), ``--config`` may be repeated (later files win; a later ``data.collection`` replaces an
earlier one as a whole), and ``--config NAME`` resolves ``NAME`` in the repository's ``configs/`` folder when it
is not a file. Commands add their own options (``rerank cv --folds``) and say whether they build the classes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from ..checkpoint_io import AtomicCheckpointIO
from ..data.datamodule import RerankDataModule
from ..lightning_module import RerankModule, check_list_size
from ..losses import loss_class
from ..precision import effective_precision
from ..pretraining import PretrainConfig
from ..progress import progress_callbacks
from ..run_directory import RunDirectory

T = TypeVar("T")
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
DEBUG = "RERANK_DEBUG"
"""Set this environment variable (to 1) to see the traceback of a user error instead of its message alone."""
RENAMED = {
    "data.depth": "data.rerank_depth",
    "first_stage.depth": "data.first_stage.retrieval_depth",
    "data.max_length": "model.tokenization.max_length",
    "data.max_query_length": "model.tokenization.max_query_length",
    "data.passages": "model.tokenization.passages",
    "data.stride": "model.tokenization.stride",
    "data.max_passages": "model.tokenization.max_passages",
}
"""Options of earlier releases and their names now (named in the error a config using them gets)."""


def resolve_config_path(name: str | Path) -> Path:
    """``name`` if it is a file, else ``configs/<name>`` (with ``.yaml`` added when missing)."""
    path = Path(name)
    if path.is_file():
        return path
    for candidate in (CONFIG_DIR / path, CONFIG_DIR / path.with_suffix(".yaml")):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"config {str(name)!r} not found (looked in the working directory and in {CONFIG_DIR})")


def resolve_configs(argv: list[str]) -> list[str]:
    """``--config NAME`` -> ``--config configs/NAME.yaml`` when NAME is not a file (also ``--config=NAME``)."""
    resolved = list(argv)
    for position, argument in enumerate(resolved):
        if argument in ("--config", "-c") and position + 1 < len(resolved):
            resolved[position + 1] = str(resolve_config_path(resolved[position + 1]))
        elif argument.startswith("--config="):
            resolved[position] = f"--config={resolve_config_path(argument.split('=', 1)[1])}"
    return resolved


class RerankParser(LightningArgumentParser):
    """The Lightning parser, with the new name of any renamed option in its error."""

    def error(self, message: str, *args: Any, **kwargs: Any) -> NoReturn:
        hints = [f"'{old}' is now '{new}'" for old, new in RENAMED.items()
                 if f"'{old.rsplit('.', 1)[-1]}'" in message or f"{old}" in message]
        if hints:
            message = f"{message}\nrenamed options: {'; '.join(hints)}"
        super().error(message, *args, **kwargs)


class RerankCLI(LightningCLI):
    """The config schema of every command; ``instantiate=False`` parses without building anything.

    Args:
        args: the command line (``--config`` names are resolved first).
        prog: the command's name in usage and errors.
        description: the command's one-line description.
        arguments: adds the command's own options to the parser.
        instantiate: build the model, data module and Trainer (``fit``, ``predict``) or only parse.
    """

    def __init__(self, args: list[str], prog: str, description: str,
                 arguments: Callable[[LightningArgumentParser], None] | None = None,
                 instantiate: bool = True) -> None:
        self._command_arguments, self._instantiate = arguments, instantiate
        super().__init__(RerankModule, RerankDataModule, args=resolve_configs(args), run=False,
                         save_config_callback=None, seed_everything_default=42, parser_class=RerankParser,
                         load_from_checkpoint_support=False, trainer_defaults={"callbacks": progress_callbacks()},
                         parser_kwargs={"prog": prog, "description": description})

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--output_dir", type=str, default="runs/default",
                            help="the run directory: config, first-stage run, checkpoints, runs, metrics.json")
        parser.add_argument("--pretrain", type=PretrainConfig | None, default=None,
                            help="a first training stage without data.collection's judgments, cached across folds "
                                 "(rerank.pretraining)")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(ModelCheckpoint, "last_checkpoint")
        parser.set_defaults({
            "checkpoint.filename": "best", "checkpoint.mode": "max", "checkpoint.save_top_k": 1,
            "checkpoint.save_last": False,
            "last_checkpoint.save_top_k": 0, "last_checkpoint.save_last": True,
            "last_checkpoint.every_n_train_steps": 50,
        })
        parser.link_arguments("model.model_name", "data.model_name")
        parser.link_arguments("model.tokenization", "data.tokenization")
        parser.link_arguments("model.selection_metric", "checkpoint.monitor", compute_fn=lambda name: f"val/{name}")
        parser.link_arguments("output_dir", "data.output_dir")
        parser.link_arguments("output_dir", "trainer.default_root_dir")
        for key in ("checkpoint.dirpath", "last_checkpoint.dirpath"):
            parser.link_arguments("output_dir", key, compute_fn=_checkpoints)
        parser.link_arguments("data", "model.judgments", compute_fn=lambda data: data.judgments, apply_on="instantiate")
        if self._command_arguments is not None:
            self._command_arguments(parser)

    def before_instantiate_classes(self) -> None:
        """Checks that span sections, before anything is built (the classes check their own options), and the
        precision the Trainer runs in on this machine (:mod:`rerank.precision`)."""
        config = self.config
        check_list_size(config.data.list_size, config.model.loss, loss_class(_plain(config.model.loss)))
        accumulate = config.trainer.accumulate_grad_batches
        if not accumulate >= 1:
            raise ValueError(f"trainer.accumulate_grad_batches must be >= 1; got {accumulate}")
        if self._instantiate:
            config.trainer.precision = effective_precision(config.trainer.precision, config.trainer.accelerator)

    def instantiate_classes(self) -> None:
        if self._instantiate:
            super().instantiate_classes()

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, writing checkpoints crash-safely (:mod:`rerank.checkpoint_io`) unless told otherwise."""
        plugins = self.config_init.trainer.get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, list | tuple) else [plugins]
        if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
            plugins.append(AtomicCheckpointIO())
        return super().instantiate_trainer(plugins=plugins, **kwargs)

    def option(self, key: str, cls: type[T] | None = None) -> Any:
        """The parsed value of ``key`` (``data.first_stage``), as plain values or built into dataclass ``cls``."""
        value = _plain(self.config[key])
        if cls is None or isinstance(value, cls):
            return value
        try:
            return cls(**(value or {}))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{key}: {error}") from None


def _plain(value: Any) -> Any:
    """A parsed value as plain data (jsonargparse Namespaces as dicts)."""
    return value.as_dict() if hasattr(value, "as_dict") else value


def _checkpoints(output_dir: str) -> str:
    return str(RunDirectory(Path(output_dir)).checkpoints)


def run(main: Callable[[list[str] | None], Any], argv: list[str] | None = None) -> None:
    """Run a command's ``main``; a user error prints one line (its message) and exits 2, unless ``RERANK_DEBUG``
    is set, which shows the traceback."""
    try:
        main(argv)
    except (ValueError, OSError, RuntimeError, MisconfigurationException) as error:
        if os.environ.get(DEBUG):
            raise
        print(f"error: {error}", file=sys.stderr)
        print(f"(set {DEBUG}=1 for the traceback)", file=sys.stderr)
        raise SystemExit(2) from None
