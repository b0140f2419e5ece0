"""What every command shares: one config schema, config files that stack, bare names of the shipped configs.

Every command parses its options with :class:`RerankCLI`, a :class:`~lightning.pytorch.cli.LightningCLI` over
:class:`~rerank.training.lightning_module.RerankModule` (``model:``),
:class:`~rerank.training.datamodule.RerankDataModule` (``data:``), the Trainer (``trainer:``) and its callbacks
(``evaluation:``, :class:`~rerank.callbacks.evaluator.Evaluator`; ``checkpoint:``), so an option is
written the same in every command (``--data.first_stage.backend bm25s``), any training config is accepted by every
command (each reads the sections it needs), ``--config`` may be repeated (later files win; a later
``data.collection`` replaces an earlier one as a whole), and ``--config NAME`` resolves ``NAME`` among the shipped
configs (package data) when it is not a file. Commands add their own options (``rerank cv --folds``) and say whether
they build the classes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO

from ..callbacks.evaluator import Evaluator
from ..callbacks.progress import progress_callbacks
from ..callbacks.resumable import Resumable
from ..config.pretrain import PretrainConfig
from ..core.checks import check_range
from ..core.run_directory import RunDirectory
from ..data.pseudo_queries import PseudoQueryConfig
from ..training.checkpoint_io import AtomicCheckpointIO
from ..training.datamodule import RerankDataModule
from ..training.lightning_module import RerankModule
from ..training.resolution import RunOptions, resolve, typed
from .configs import resolve_configs
from .schema import refuse_replacements

T = TypeVar("T")


class RerankCLI(LightningCLI):
    """The config schema of every command; ``instantiate=False`` parses without building anything.

    Args:
        args: the command line (``--config`` names are resolved first).
        prog: the command's name in usage and errors.
        description: the command's one-line description.
        arguments: adds the command's own options to the parser.
        instantiate: build the model, data module and Trainer (``fit``, ``predict``) or only parse.
        trains: the command trains (``fit``): the stage's options are resolved too.
    """

    def __init__(self, args: list[str], prog: str, description: str,
                 arguments: Callable[[LightningArgumentParser], None] | None = None,
                 instantiate: bool = True, trains: bool = False) -> None:
        self._command_arguments, self._instantiate, self._trains = arguments, instantiate, trains
        refuse_replacements(resolve_configs(args))
        super().__init__(RerankModule, RerankDataModule, args=resolve_configs(args), run=False,
                         save_config_callback=None, seed_everything_default=42, auto_configure_optimizers=False,
                         load_from_checkpoint_support=False, trainer_defaults={"callbacks": progress_callbacks()},
                         parser_kwargs={"prog": prog, "description": description})

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--output_dir", type=str, default="runs/default",
                            help="the run directory: config, first-stage run, checkpoints, runs, metrics.json")
        parser.add_argument("--pretrain", type=PretrainConfig | None, default=None,
                            help="a first training stage without data.collection's judgments, cached across folds "
                                 "(rerank.training.pretraining)")
        parser.add_lightning_class_args(Evaluator, "evaluation")
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
        parser.link_arguments("evaluation.selection", "checkpoint.monitor", compute_fn=_monitored)
        parser.link_arguments("output_dir", "data.output_dir")
        parser.link_arguments("output_dir", "trainer.default_root_dir")
        for key in ("checkpoint.dirpath", "last_checkpoint.dirpath"):
            parser.link_arguments("output_dir", key, compute_fn=_checkpoints)
        if self._command_arguments is not None:
            self._command_arguments(parser)

    def before_instantiate_classes(self) -> None:
        """Before anything is built (the classes check their own options; the checks that span model and data are
        :mod:`rerank.training.head_checks`'): every ``auto`` resolved, once (:mod:`rerank.training.resolution`),
        and written into the parsed config, which the run's ``config.yaml`` is made from."""
        config = self.config
        check_range("trainer.accumulate_grad_batches", config.trainer.accumulate_grad_batches, 1)
        if not self._instantiate:
            return
        self.options = resolve(config.as_dict(), stage=self._trains)
        config.trainer.precision = self.options.precision
        config.model.speedups = self.options.speedups
        if self.options.tokenization is not None:
            for section in (config.model, config.data):
                section.tokenization = Namespace(dataclasses.asdict(self.options.tokenization))
        for sources, resolved in ((config.data.train, self.options.train),
                                  (config.pretrain.train if config.pretrain and self._trains else None,
                                   self.options.stage)):
            for index, source in enumerate(sources or []):
                if source and source.get("pseudo") is not None:
                    source["pseudo"] = _plain_pseudo(resolved[index].pseudo)

    def instantiate_classes(self) -> None:
        """The model, the data module (given the typed collection and sources) and the Trainer."""
        if not self._instantiate:
            return
        given = self.config.clone()
        given.data.collection, given.data.train = self.options.collection, self.options.train
        self.config_init = self.parser.instantiate(given)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self.trainer = self.instantiate_trainer()

    @functools.cached_property
    def run_options(self) -> RunOptions:
        """The run's collection and sources, typed (resolved where the command builds the classes)."""
        return self.options if self._instantiate else typed(self.config.as_dict())

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, writing checkpoints crash-safely (:mod:`rerank.training.checkpoint_io`) unless told
        otherwise, and resumable after SIGTERM or SIGINT (:class:`~rerank.callbacks.resumable.Resumable`: the run
        directory's ``last.ckpt``)."""
        plugins = self.config_init.trainer.get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, list | tuple) else [plugins]
        if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
            plugins.append(AtomicCheckpointIO())
        trainer = super().instantiate_trainer(plugins=plugins, **kwargs)
        trainer.callbacks.append(Resumable(RunDirectory(Path(self.config.output_dir)).last_checkpoint))
        return trainer

    def option(self, key: str, cls: type[T] | None = None) -> Any:
        """The parsed value of ``key`` (``data.first_stage``), as plain values or built into dataclass ``cls``."""
        value = _plain(self.config[key])
        if cls is None or isinstance(value, cls):
            return value
        try:
            return cls(**(value or {}))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{key}: {error}") from None


def _plain_pseudo(pseudo: PseudoQueryConfig) -> dict[str, Any]:
    """Sized pseudo-queries as a config writes them (``lengths`` a list)."""
    values = dataclasses.asdict(pseudo)
    values["lengths"] = list(values["lengths"])
    return values


def _plain(value: Any) -> Any:
    """A parsed value as plain data (jsonargparse Namespaces as dicts)."""
    return value.as_dict() if hasattr(value, "as_dict") else value


def _monitored(selection: Namespace) -> str:
    """What the best checkpoint is chosen on: ``val/<evaluation.selection.measure>``."""
    return f"val/{selection.measure}"


def _checkpoints(output_dir: str) -> str:
    return str(RunDirectory(Path(output_dir)).checkpoints)


def add_run_option(parser: LightningArgumentParser, what: str) -> None:
    """``--run FILE``: a command's candidates from a TREC run (:func:`run_shortcut` turns it into the first-stage
    options before parsing; the parser lists it in the help)."""
    parser.add_argument("--run", type=str | None, default=None,
                        help=f"{what} (sets data.first_stage.backend run and data.first_stage.run)")


def add_untrained_head_option(parser: LightningArgumentParser) -> None:
    """``--untrained_head``: score with a model whose weights hold no scoring head (refused otherwise)."""
    parser.add_argument("--untrained_head", type=bool, default=False,
                        help="score with a model whose weights hold no scoring head (a raw encoder), its head "
                             "freshly initialised: its scores rank at random; every output says so")


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


def from_config(arguments: list[str], instantiate: bool = True,
                options: Callable[[LightningArgumentParser], None] | None = None, prog: str = "rerank",
                description: str = "the options of every rerank command") -> RerankCLI:
    """What ``arguments`` (``--config`` files and options, as every command takes them) configure: ``.model``,
    ``.datamodule`` and ``.trainer`` (with ``instantiate``), ``.config`` the parsed options and ``.option(key, cls)``
    one of them as its dataclass. ``options`` adds a script's own options to the parser; ``prog`` and
    ``description`` name it in ``--help`` and errors. The public way for scripts to build what a config describes
    (``rerank.from_config``)."""
    return RerankCLI(arguments, prog=prog, description=description, arguments=options, instantiate=instantiate)
