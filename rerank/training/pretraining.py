"""A first training stage that uses no judgments of the collection, cached and shared by every fold.

Configured next to ``model:`` and ``data:``::

    pretrain:
      train:                                  # training sources (rerank.training.sources), without data.collection's
        - queries: pseudo                     # judgments or real queries: pseudo-queries, other collections
          targets: teacher
          teacher: {bi_encoder: sentence-transformers/all-MiniLM-L6-v2}
      max_steps: 300

``rerank fit`` first trains the model on these sources for ``max_steps`` optimizer steps (same model, loss heads,
list size and precision, and learning rates unless ``optimizer`` gives the stage its own; no validation), then
trains on ``data.train`` as usual, from the weights the stage left, with a fresh optimizer. Since the stage depends
on nothing fold-specific, its weights are cached under ``$RERANK_CACHE/pretrained`` by everything that shapes them
(the model's and data's settings, the stage's, the seed, the documents' fingerprint): every fold of ``rerank cv``
and every re-run of ``rerank fit`` starts from them instead of training the stage again. The random generators are
re-seeded after the stage, so a run that trained it and one that loaded it continue identically.

With ``rounds: R`` (default 1) the stage is born-again distillation (Furlanello et al., ICML 2018): round r + 1
trains, for another ``max_steps`` steps from where round r left the weights, on the same sources with each teacher
mixed with round r's student (``teacher.student``, :mod:`rerank.teacher`; ``student_weight``, half and half by
default), which scores every candidate of the sources in the stage's precision. Such a mix ranks better than either
of its parts, but on Cranfield a second round of 1,200 steps did not make a better student than one round of 2,400
(docs/experiments/ablations.md). The training sources of ``data.train`` then learn from the last round's teacher.
Every round is cached, round 1 under the key a one-round stage has, so ``rounds: 2`` continues from a cached
``rounds: 1``.

With ``held_out: N`` the stage validates itself on N of its lists that it does not train on, keeps its best weights
and, with ``patience``, stops early (:mod:`rerank.training.stage_validation`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
from safetensors.torch import load_file, save

from ..atomic import atomic_write
from ..cache import cache_path, intact, sealing
from ..checks import AUTO, check_range
from ..data.pseudo_queries import QUERIES
from ..export import export
from ..run_directory import read_json, write_json
from .budget import StagePlan, plan_line, planned_steps, seconds_per_step
from .datamodule import RerankDataModule
from .lightning_module import RerankModule
from .optimizer import OptimizerSettings, check_settings
from .progress import stage_callbacks
from .sources import SourceConfig, as_source_configs, sized_pseudo_queries
from .stage_validation import HeldOutValidation, describe, distillation_loss, hold_out

logger = logging.getLogger(__name__)

TRAINER_OPTIONS = ("accelerator", "devices", "num_nodes", "strategy", "precision", "accumulate_grad_batches",
                   "gradient_clip_val", "enable_progress_bar", "log_every_n_steps")
"""The Trainer options the stage takes from ``trainer:``."""
CLICK_OPTIONS = ("click_loss", "click_loss_args")
"""Model settings that change the stage's weights only when one of its sources learns from clicks."""
QRELS_OPTIONS = ("loss", "loss_args")
"""Model settings that change the stage's weights only when one of its sources learns from judgments (``targets:
qrels`` or ``both``): a batch without a relevant candidate gives the qrels head a graph-connected 0, so a stage of
teacher targets trains the same weights whatever the head, and is shared by every head (the loss study)."""


@dataclass
class PretrainConfig:
    """The judgment-free first stage of ``rerank fit``.

    Attributes:
        train: its training sources; none may use data.collection's real queries (``queries: train`` or
            ``all`` without another collection): they would differ between folds.
        max_steps: optimizer steps (of each round); ``auto``: as many as ``budget_minutes`` of this machine's time
            buys, at most ``passes`` over the stage's lists (:mod:`rerank.training.budget`).
        budget_minutes: the time ``max_steps: auto`` spends on the stage.
        passes: the most passes over the stage's lists that ``max_steps: auto`` takes.
        rounds: born-again rounds; from the second on, every teacher is mixed with the last round's student.
        student_weight: the student's share of those mixes.
        held_out: lists with teacher scores kept out of the stage to validate it (0: none): every ``validate_every``
            steps the student's distillation loss on them is logged, and the stage keeps its best weights
            (:mod:`rerank.training.stage_validation`).
        validate_every: optimizer steps between two such checks.
        patience: checks without a lower held-out loss before the stage stops (None: it runs all its steps).
        optimizer: the stage's AdamW settings where they differ from ``model.optimizer``'s (e.g. ``{encoder_lr:
            5.0e-5}``; :class:`~rerank.training.optimizer.OptimizerSettings`); empty, the model's. With it a fit can
            train its folds at another rate and keep the stage, cached under the settings it trained with.
    """

    train: list[dict[str, Any]] = field(default_factory=list)
    max_steps: int | Literal["auto"] = 300
    budget_minutes: float = 30.0
    passes: float = 8.0
    rounds: int = 1
    student_weight: float = 0.5
    held_out: int = 0
    validate_every: int = 100
    patience: int | None = None
    optimizer: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_settings(self.optimizer, "pretrain.optimizer")
        if not self.train:
            raise ValueError("pretrain.train: give at least one source (e.g. {queries: pseudo, targets: teacher, "
                             "teacher: {bi_encoder: sentence-transformers/all-MiniLM-L6-v2}})")
        if self.max_steps != AUTO:
            check_range("pretrain.max_steps", self.max_steps, 1)
        check_range("pretrain.budget_minutes", self.budget_minutes, above=0)
        check_range("pretrain.passes", self.passes, above=0)
        check_range("pretrain.rounds", self.rounds, 1)
        check_range("pretrain.student_weight", self.student_weight, above=0, below=1)
        check_range("pretrain.held_out", self.held_out, 0)
        check_range("pretrain.validate_every", self.validate_every, 1)
        if self.patience is not None:
            check_range("pretrain.patience", self.patience, 1)
            if not self.held_out:
                raise ValueError("pretrain.patience stops the stage on its held-out lists: give pretrain.held_out too "
                                 "(e.g. 100)")
        for i, source in enumerate(as_source_configs(self.train, "pretrain.train")):
            if source.uses_judgments:
                raise ValueError(f"pretrain.train[{i}]: a stage shared by every fold cannot use data.collection's "
                                 "queries and judgments (they differ between folds): use queries: pseudo, or another "
                                 "collection")


def pretrain(config: PretrainConfig, module: RerankModule, data: RerankDataModule, trainer: dict[str, Any],
             seed: int) -> PretrainConfig:
    """Give ``module`` the stage's weights, from the cache or by training it; returns ``config`` with its steps
    resolved (``max_steps: auto``, :mod:`rerank.training.budget`, logged in one line). With several rounds,
    ``data``'s training sources learn from the last round's teacher.

    Args:
        config: the stage.
        module: the module to train (its weights are replaced).
        data: the main data module (the stage uses its collection and settings with ``config.train``).
        trainer: the main run's Trainer options (see :data:`TRAINER_OPTIONS`; ``max_epochs`` for the plan).
        seed: the run's seed, set again after the stage.
    """
    options = {key: trainer[key] for key in TRAINER_OPTIONS if key in trainer}
    given = as_source_configs(config.train, "pretrain.train")
    sources = [sized_pseudo_queries(source, data.collection, f"pretrain.train[{i}]") for i, source in enumerate(given)]
    ignored = ((() if any(source.targets == "clicks" for source in sources) else CLICK_OPTIONS)
               + (() if any(source.targets in ("qrels", "both") for source in sources) else QRELS_OPTIONS))
    model_settings = {key: value for key, value in module.hparams.items() if key not in ignored}
    stage_optimizer = dataclasses.replace(module.optimizer_settings, **config.optimizer)
    model_settings["optimizer"] = dataclasses.asdict(stage_optimizer)  # the model's, unless the stage sets its own
    documents = data.collection.documents
    shape = [{"train": _keyed(config.train, given, sources), "max_steps": config.max_steps}, model_settings,
             dataclasses.asdict(data.settings),
             {key: options.get(key) for key in ("precision", "accumulate_grad_batches", "gradient_clip_val")},
             seed, documents.source(), documents.fingerprint()]
    if sources != given:  # pseudo-queries' max_words: auto, keyed by what it resolved to (the queries may change)
        shape.append([source.pseudo.max_words for source in sources if source.pseudo is not None])
        spans = [list(source.pseudo.lengths) for source in sources if source.pseudo is not None and source.pseudo.spans]
        if spans:  # spans follow the queries' lengths (titles keep the key they had before spans existed)
            shape.append(spans)
    stage = data.with_sources(sources, data.directory.root / "pretrain")  # round 1's
    if config.held_out:
        shape[0] |= {"held_out": config.held_out, "validate_every": config.validate_every,
                     "patience": config.patience}
    if config.max_steps == AUTO:
        seconds = seconds_per_step(module, stage, options, shape[1:])
        lists = sum(len(source.lists) for source in stage.training_sources()) - config.held_out  # trained on
        per_step = data.batch_size * (options.get("accumulate_grad_batches") or 1)  # lists an optimizer step takes
        plan = StagePlan(planned_steps(config.budget_minutes, config.passes, seconds, lists, per_step), seconds, lists,
                         config.budget_minutes, config.passes, per_step)
        pseudo = "; ".join(source.pseudo.describe() for source in sources if source.pseudo is not None)
        logger.info(plan_line(plan, data.tokenization, training_steps(data, trainer.get("max_epochs")), pseudo))
        config = dataclasses.replace(config, max_steps=plan.steps)
        shape[0] |= {"max_steps": config.max_steps}
    paths = [cache_path("pretrained", *shape, suffix=".safetensors")] + [
        cache_path("pretrained", *shape, {"round": round_, "student_weight": config.student_weight},
                   suffix=".safetensors") for round_ in range(2, config.rounds + 1)]
    student: str | None = None
    with _optimizer(module, stage_optimizer):
        for round_, path in enumerate(paths, 1):
            taught = [_taught_by(source, student, config, options) for source in sources]
            _round(path, module, stage if round_ == 1 else data.with_sources(taught, stage.directory.root), config,
                   options, f"round {round_} of {config.rounds}", seed)
            if round_ < config.rounds:
                student = _exported(module, path.with_suffix(""))
    data.sources = [_taught_by(source, student, config, options) for source in data.sources]
    pl.seed_everything(seed)
    return config


def _keyed(train: list[Any], given: list[SourceConfig], sources: list[SourceConfig]) -> list[Any]:
    """``pretrain.train`` as the stage's key holds it: a ``pseudo.lengths: queries`` that resolved to titles (queries
    that are not paragraphs) is left out, so that a stage of titles keeps the key, and the cached weights, it had
    before the default asked for spans."""
    return [_without_lengths(raw) if asked.pseudo is not None and asked.pseudo.lengths == QUERIES
            and not resolved.pseudo.spans else raw for raw, asked, resolved in zip(train, given, sources, strict=True)]


def _without_lengths(source: SourceConfig | dict[str, Any]) -> SourceConfig | dict[str, Any]:
    """``source`` (a config or its mapping) without its pseudo-queries' ``lengths``."""
    if isinstance(source, SourceConfig):
        return dataclasses.replace(source, pseudo=dataclasses.replace(source.pseudo, lengths=()))
    return {**source, "pseudo": {key: value for key, value in source["pseudo"].items() if key != "lengths"}}


def training_steps(data: RerankDataModule, epochs: int | None) -> int:
    """About how many steps the training folds take (their queries, visits and epochs), for the plan."""
    queries = len(data.split.train) if any(source.uses_judgments for source in data.sources) else 0
    return math.ceil(queries * data.repeats / data.batch_size) * (epochs or 1)


def _round(path: Path, module: RerankModule, stage: RerankDataModule, config: PretrainConfig,
           options: dict[str, Any], name: str, seed: int) -> None:
    """One round: its weights from the cache, or ``config.max_steps`` steps on ``stage``'s sources from
    ``module``'s (validated on ``config.held_out`` of its lists, held out with ``seed``)."""
    curve = path.with_suffix(".held_out.json")  # the held-out checks, written before the weights
    if intact(path, "pre-trained stage") and (not config.held_out or curve.exists()):
        logger.info("pre-training stage, %s: weights from the cache (%s)", name, path)
        if config.held_out:
            logger.info("pre-training stage, %s: %s", name, describe(read_json(curve)))
        module.model.load_state_dict(load_file(path))
        return
    callbacks = stage_callbacks(f"pre-training, {name}", options.get("enable_progress_bar"))
    validation = None
    if config.held_out:
        validation = HeldOutValidation(distillation_loss(hold_out(stage, config.held_out, seed), stage),
                                       config.validate_every, config.patience, f"pre-training, {name}")
        callbacks.append(validation)
    logger.info("pre-training stage, %s: %d steps on %d source(s)", name, config.max_steps, len(stage.sources))
    stage_trainer = pl.Trainer(**options, max_steps=config.max_steps, limit_val_batches=0, num_sanity_val_steps=0,
                               enable_checkpointing=False, logger=False, callbacks=callbacks,
                               default_root_dir=str(stage.directory.root))
    stage_trainer.fit(module, datamodule=stage)
    if stage_trainer.is_global_zero:
        if validation is not None:  # before the weights: weights sealed in the cache have their curve beside them
            write_json(validation.record(), curve)
        with atomic_write(path, "wb", finish=sealing(path)) as handle:
            handle.write(_serialised(module))
    stage_trainer.strategy.barrier()


@contextmanager
def _optimizer(module: RerankModule, settings: OptimizerSettings) -> Iterator[None]:
    """``module`` trained with ``settings`` (the stage's) inside the block, with its own again after it."""
    own, module.optimizer_settings = module.optimizer_settings, settings
    try:
        yield
    finally:
        module.optimizer_settings = own


def _taught_by(source: SourceConfig, student: str | None, config: PretrainConfig,
               options: dict[str, Any]) -> SourceConfig:
    """``source`` with its teacher mixed with ``student`` (unchanged without a student or a teacher)."""
    if student is None or source.teacher is None or source.targets == "qrels":
        return source
    precision = str(options.get("precision", "32"))
    scoring = "bf16" if precision.startswith("bf16") else "16" if precision.startswith("16") else "32"
    teacher = dataclasses.replace(source.teacher, student=student, student_weight=config.student_weight,
                                  student_precision=scoring)
    return dataclasses.replace(source, teacher=teacher)


def _exported(module: RerankModule, folder: Path) -> str:
    """The module's cross-encoder as a folder (written once: the folder is named by the weights' cache key)."""
    if not intact(folder, "a born-again round's student"):
        export(module.model, folder, {"model": dict(module.hparams)}, finish=sealing(folder))
    return str(folder)


def _serialised(module: RerankModule) -> bytes:
    return save({name: tensor.detach().contiguous().cpu() for name, tensor in module.model.state_dict().items()})
