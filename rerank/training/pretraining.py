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

With ``rounds: R`` (default 1) the stage is born-again distillation (Furlanello et al., ICML 2018): round r + 1 trains,
for another ``max_steps`` steps from where round r left the weights, on the same sources with each teacher mixed with
round r's student (``teacher.student``, :mod:`rerank.teacher.scores`; ``student_weight``, half and half by default),
which scores every candidate of the sources in the stage's precision. Such a mix ranks better than either of its parts,
but a second round has not made a better student than one round of twice the steps
(docs/experiments/born-again-and-longer-stage.md). The training sources of ``data.train`` then learn from the last
round's teacher. Every round is cached, round 1 under the key a one-round stage has, so ``rounds: 2`` continues from a
cached ``rounds: 1``.

With ``held_out: N`` the stage validates itself on N of its lists that it does not train on, keeps its best weights
and, with ``patience``, stops early (:mod:`rerank.training.stage_validation`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.loggers import Logger
from safetensors.torch import load_file, save

from ..callbacks.progress import stage_callbacks
from ..callbacks.resumable import Resumable
from ..config.optimizer import OptimizerSettings
from ..config.pretrain import PretrainConfig
from ..config.source import SourceConfig, as_source_configs
from ..core import preemption
from ..core.atomic import atomic_write
from ..core.cache import cache_key, cache_path, intact, sealing
from ..core.checks import AUTO
from ..core.run_directory import read_json, write_json
from ..inference.export import export
from .budget import StagePlan, StepTimer, calibrate, plan_line, planned_steps, recheck, remembered
from .checkpoint_io import AtomicCheckpointIO
from .datamodule import RerankDataModule
from .lightning_module import RerankModule
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


@dataclass(frozen=True)
class Stage:
    """The judgment-free stage as planned, ready to train (:func:`plan_stage`, then :func:`pretrain`).

    Attributes:
        config: the stage, its steps resolved.
        sources: its training sources.
        data: round 1's data module (the main one's collection and settings with the stage's sources).
        shape: what shapes its weights (the seed among them): their cache key.
        options: the Trainer options it takes from the fit's.
        optimizer: its optimizer settings (the model's, unless the stage sets its own).
        checked: checks the plan's step time against the stage's own (None: the steps were given).
    """

    config: PretrainConfig
    sources: list[SourceConfig]
    data: RerankDataModule
    shape: list[Any]
    options: dict[str, Any]
    optimizer: OptimizerSettings
    checked: Callable[[StepTimer], None] | None = None


def plan_stage(config: PretrainConfig, module: RerankModule, data: RerankDataModule, trainer: dict[str, Any],
               seed: int) -> Stage:
    """The stage that ``config`` describes for ``module`` and ``data``, its steps resolved (``max_steps: auto``:
    :mod:`rerank.training.budget`, on this machine's time per step of ``module``, logged in one line).

    Args:
        config: the stage, its sources' options resolved (:mod:`rerank.training.resolution`).
        module: the module the stage trains.
        data: the main data module (the stage uses its collection and settings with ``config.train``).
        trainer: the main run's Trainer options (see :data:`TRAINER_OPTIONS`; ``max_epochs`` for the plan).
        seed: the run's seed.
    """
    options = {key: trainer[key] for key in TRAINER_OPTIONS if key in trainer}
    sources = as_source_configs(config.train, "pretrain.train")
    ignored = ((() if any(source.targets == "clicks" for source in sources) else CLICK_OPTIONS)
               + (() if any(source.targets in ("qrels", "both") for source in sources) else QRELS_OPTIONS))
    model_settings = {key: value for key, value in module.hparams.items() if key not in ignored}
    stage_optimizer = dataclasses.replace(module.optimizer_settings, **config.optimizer)
    model_settings["optimizer"] = dataclasses.asdict(stage_optimizer)  # the model's, unless the stage sets its own
    documents = data.collection.documents
    shape = [{"train": [dataclasses.asdict(source) for source in sources], "max_steps": config.max_steps},
             model_settings, dataclasses.asdict(data.settings),
             {key: options.get(key) for key in ("precision", "accumulate_grad_batches", "gradient_clip_val")},
             seed, documents.source(), documents.fingerprint()]  # the sources as resolved: what the stage trains on
    stage = data.with_sources(sources, data.directory.root / "pretrain")  # round 1's
    if config.held_out:
        shape[0] |= {"held_out": config.held_out, "validate_every": config.validate_every,
                     "patience": config.patience}
    checked = None
    if config.max_steps == AUTO:
        plan = remembered(stage.directory.root, cache_key(*shape),
                          lambda: _plan(config, module, stage, options, shape[1:]))
        pseudo = "; ".join(source.pseudo.describe() for source in sources if source.pseudo is not None)
        logger.info(plan_line(plan, data.tokenization, training_steps(data, trainer.get("max_epochs")), pseudo))
        config = dataclasses.replace(config, max_steps=plan.steps)
        checked = functools.partial(recheck, plan, key=shape[1:])
        shape[0] |= {"max_steps": config.max_steps}
    return Stage(config, sources, stage, shape, options, stage_optimizer, checked)


def pretrain(stage: Stage, module: RerankModule, data: RerankDataModule, seed: int,
             loggers: Sequence[Logger] = ()) -> None:
    """Give ``module`` the planned stage's weights, from the cache or by training it. With several rounds,
    ``data``'s training sources learn from the last round's teacher.

    Args:
        stage: the stage, as :func:`plan_stage` planned it.
        module: the module to train (its weights are replaced).
        data: the main data module.
        seed: the run's seed, set again after the stage.
        loggers: the fit's loggers, which get the stage's losses too (under ``stage/``).
    """
    config, options, shape = stage.config, stage.options, stage.shape
    paths = [cache_path("pretrained", *shape, suffix=".safetensors")] + [
        cache_path("pretrained", *shape, {"round": round_, "student_weight": config.student_weight},
                   suffix=".safetensors") for round_ in range(2, config.rounds + 1)]
    student: str | None = None
    with _optimizer(module, stage.optimizer):
        for round_, path in enumerate(paths, 1):
            taught = [_taught_by(source, student, config, options) for source in stage.sources]
            _round(path, module, stage.data if round_ == 1 else data.with_sources(taught, stage.data.directory.root),
                   config, options | {"logger": list(loggers) or False}, f"round {round_} of {config.rounds}", seed,
                   stage.checked if round_ == 1 else None)
            if round_ < config.rounds:
                student = _exported(module, path.with_suffix(""))
    data.sources = [_taught_by(source, student, config, options) for source in data.sources]
    pl.seed_everything(seed)


def _plan(config: PretrainConfig, module: RerankModule, stage: RerankDataModule, options: dict[str, Any],
          key: Any) -> StagePlan:
    """``max_steps: auto``'s plan: at most ``config.passes`` over the stage's lists, capped by the time budget at
    this machine's calibrated speed (:mod:`rerank.training.budget`)."""
    calibration = calibrate(module, stage, options, key)
    lists = sum(len(source.lists) for source in stage.training_sources()) - config.held_out  # trained on
    per_step = stage.batch_size * (options.get("accumulate_grad_batches") or 1)  # lists an optimizer step takes
    seconds = calibration.fastest
    plan = StagePlan(planned_steps(config.budget_minutes, config.passes, seconds, lists, per_step), seconds, lists,
                     config.budget_minutes, config.passes, per_step, calibration.describe())
    if calibration.loaded and plan.bound == "the time budget":
        logger.warning("the stage's steps were timed under load and the time budget chose its length: on a machine "
                       "left to this fit it may be longer; set pretrain.max_steps for a stage that does not depend on "
                       "the load")
    return plan


def training_steps(data: RerankDataModule, epochs: int | None) -> int:
    """About how many steps the training folds take (their queries, visits and epochs), for the plan."""
    queries = len(data.split.train) if any(source.uses_judgments for source in data.sources) else 0
    return math.ceil(queries * data.repeats / data.batch_size) * (epochs or 1)


def _round(path: Path, module: RerankModule, stage: RerankDataModule, config: PretrainConfig,
           options: dict[str, Any], name: str, seed: int, checked: Callable[[StepTimer], None] | None = None) -> None:
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
    resume = stage.directory.root / f"{path.stem}.resume.ckpt"  # where a stopped stage left off (Resumable)
    timer = StepTimer()
    callbacks += [Resumable(resume, "the judgment-free stage", at_end=False), timer]
    if resume.is_file():
        logger.info("pre-training stage, %s: resuming from %s", name, resume)
    else:
        logger.info("pre-training stage, %s: %d steps on %d source(s)", name, config.max_steps, len(stage.sources))
    stage_trainer = pl.Trainer(**options, max_steps=config.max_steps, limit_val_batches=0, num_sanity_val_steps=0,
                               enable_checkpointing=False, enable_model_summary=False, callbacks=callbacks,
                               default_root_dir=str(stage.directory.root), plugins=[AtomicCheckpointIO()])
    with preemption.phase("the judgment-free stage"):
        stage_trainer.fit(module, datamodule=stage, ckpt_path=resume if resume.is_file() else None,
                          weights_only=True)
    if stage_trainer.is_global_zero:
        if validation is not None:  # before the weights: weights sealed in the cache have their curve beside them
            write_json(validation.record(), curve)
        with atomic_write(path, "wb", finish=sealing(path)) as handle:
            handle.write(_serialised(module))
        resume.unlink(missing_ok=True)
        if checked is not None:  # the plan's step time, against the stage's own
            checked(timer)
    stage_trainer.strategy.barrier()
    if preemption.pending() is not None:  # came as the stage ended: it is cached, the fit stops here
        raise preemption.stop(f"the judgment-free stage is done and cached ({path})")


@contextmanager
def _optimizer(module: RerankModule, settings: OptimizerSettings) -> Iterator[None]:
    """``module`` trained with ``settings`` (the stage's) inside the block, logging its losses under ``stage/``,
    with its own settings again after it."""
    own, module.optimizer_settings, module.log_prefix = module.optimizer_settings, settings, "stage"
    try:
        yield
    finally:
        module.optimizer_settings, module.log_prefix = own, "train"


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
