"""The judgment-free first stage of ``rerank fit``: :class:`PretrainConfig` (``pretrain:`` in the YAML). The stage
itself is :mod:`rerank.training.pretraining`'s, whose docstring shows the options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.checks import AUTO, check_range
from .optimizer import check_settings
from .source import as_source_configs


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
            5.0e-5}``; :class:`~rerank.config.optimizer.OptimizerSettings`); empty, the model's. With it a fit can
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
