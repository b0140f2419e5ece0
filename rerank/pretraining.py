"""A first training stage that uses no judgments of the collection, cached and shared by every fold.

Configured next to ``model:`` and ``data:``::

    pretrain:
      train:                                  # training sources (rerank.data.sources), without data.collection's
        - queries: pseudo                     # judgments or real queries: pseudo-queries, other collections
          targets: teacher
          teacher: {bi_encoder: sentence-transformers/all-MiniLM-L6-v2}
      max_steps: 300

``rerank fit`` first trains the model on these sources for ``max_steps`` optimizer steps (same model, loss heads,
learning rates, list size and precision; no validation), then trains on ``data.train`` as usual, from the weights
the stage left, with a fresh optimizer. Since the stage depends on nothing fold-specific, its weights are cached
under ``$RERANK_CACHE/pretrained`` by everything that shapes them (the model's and data's settings, the stage's,
the seed, the documents' fingerprint): every fold of ``rerank cv`` and every re-run of ``rerank fit`` starts from
them instead of training the stage again. The random generators are re-seeded after the stage, so a run that
trained it and one that loaded it continue identically.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from safetensors.torch import load_file, save

from .atomic import atomic_write
from .cache import cache_path
from .data.datamodule import RerankDataModule
from .data.sources import as_source_config
from .lightning_module import RerankModule
from .progress import progress_callbacks

logger = logging.getLogger(__name__)

TRAINER_OPTIONS = ("accelerator", "devices", "num_nodes", "strategy", "precision", "accumulate_grad_batches",
                   "gradient_clip_val", "enable_progress_bar", "log_every_n_steps")
"""The Trainer options the stage takes from ``trainer:``."""
MODEL_OPTIONS_IGNORED = ("metrics", "selection_metric", "interpolate", "interpolation_grid")
"""Model settings that cannot change the stage's weights (evaluation only)."""
DATA_OPTIONS = ("collection", "first_stage", "model_name", "tokenization", "rerank_depth", "list_size", "strategy",
                "batch_size", "seed")
"""The data settings that shape the stage."""


@dataclass
class PretrainConfig:
    """The judgment-free first stage of ``rerank fit``.

    Attributes:
        train: its training sources; none may use data.collection's real queries (``queries: train`` or
            ``all`` without another collection): they would differ between folds.
        max_steps: optimizer steps.
    """

    train: list[dict[str, Any]] = field(default_factory=list)
    max_steps: int = 300

    def __post_init__(self) -> None:
        if not self.train:
            raise ValueError("pretrain.train: give at least one source (e.g. {queries: pseudo, targets: teacher, "
                             "teacher: {bi_encoder: sentence-transformers/all-MiniLM-L6-v2}})")
        if self.max_steps < 1:
            raise ValueError(f"pretrain.max_steps must be positive; got {self.max_steps}")
        for i, source in enumerate(self.train):
            if as_source_config(source, f"pretrain.train[{i}]").uses_judgments:
                raise ValueError(f"pretrain.train[{i}]: a stage shared by every fold cannot use data.collection's "
                                 "queries and judgments (they differ between folds): use queries: pseudo, or another "
                                 "collection")


def pretrain(config: PretrainConfig, module: RerankModule, data: RerankDataModule, trainer: dict[str, Any],
             seed: int) -> Path:
    """Give ``module`` the stage's weights, from the cache or by training it; returns the cached weights' path.

    Args:
        config: the stage.
        module: the module to train (its weights are replaced).
        data: the main data module (the stage uses its collection and settings with ``config.train``).
        trainer: the main run's Trainer options (see :data:`TRAINER_OPTIONS`).
        seed: the run's seed, set again after the stage.
    """
    options = {key: trainer[key] for key in TRAINER_OPTIONS if key in trainer}
    model_settings = {key: value for key, value in module.hparams.items() if key not in MODEL_OPTIONS_IGNORED}
    data_settings = {key: data.settings[key] for key in DATA_OPTIONS}
    documents = data.collection.documents
    path = cache_path("pretrained", dataclasses.asdict(config), model_settings, data_settings,
                      {key: options.get(key) for key in ("precision", "accumulate_grad_batches", "gradient_clip_val")},
                      seed, documents.source(), documents.fingerprint(), suffix=".safetensors")
    if path.is_file():
        logger.info("pre-training stage: weights from the cache (%s)", path)
        module.model.load_state_dict(load_file(path))
    else:
        logger.info("pre-training stage: %d steps on %d source(s)", config.max_steps, len(config.train))
        stage = RerankDataModule(**{**data.settings, "train": config.train,
                                    "output_dir": str(data.directory.root / "pretrain")})
        stage_trainer = pl.Trainer(**options, max_steps=config.max_steps, limit_val_batches=0, num_sanity_val_steps=0,
                                   enable_checkpointing=False, logger=False, callbacks=progress_callbacks(),
                                   default_root_dir=str(data.directory.root / "pretrain"))
        stage_trainer.fit(module, datamodule=stage)
        if stage_trainer.is_global_zero:
            with atomic_write(path, "wb") as handle:
                handle.write(_serialised(module))
        stage_trainer.strategy.barrier()
    pl.seed_everything(seed)
    return path


def _serialised(module: RerankModule) -> bytes:
    return save({name: tensor.detach().contiguous().cpu() for name, tensor in module.model.state_dict().items()})
