"""One source of training lists: :class:`SourceConfig` (an item of ``data.train`` or ``pretrain.train`` in the
YAML). The lists themselves are :mod:`rerank.training.sources`'s, whose docstring shows the options."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..clicks.targets import ClickTargetConfig
from ..core.checks import check_range
from ..data.collection_config import CollectionConfig, as_collection_config
from ..data.pseudo_queries import PseudoQueryConfig
from .first_stage import FirstStageConfig
from .teacher import TeacherConfig

QUERY_SETS = ("train", "all", "pseudo")
TARGETS = ("qrels", "teacher", "both", "clicks")


@dataclass
class SourceConfig:
    """One source of training lists (see the module docstring).

    Attributes:
        name: a label for logs and errors (default: ``<queries>`` and its position).
        collection: another collection (written as ``data.collection`` is); None: ``data.collection``.
        first_stage: the candidates' first stage; None: ``data.first_stage`` for ``data.collection``, else the
            defaults of :class:`~rerank.config.first_stage.FirstStageConfig`.
        queries: ``train``, ``all`` or ``pseudo``.
        targets: ``qrels``, ``teacher``, ``both`` or ``clicks``.
        teacher: where teacher scores come from (``targets: teacher`` or ``both``).
        clicks: the click log and its estimator (``targets: clicks``).
        pseudo: how pseudo-queries are drawn (``queries: pseudo``).
        weight: the source's share of the training lists, relative to the other sources' (> 0).
        max_queries: at most this many queries (a seeded sample), e.g. of a large collection.
    """

    name: str | None = None
    collection: CollectionConfig | None = None
    first_stage: FirstStageConfig | None = None
    queries: str = "train"
    targets: str = "qrels"
    teacher: TeacherConfig | None = None
    clicks: ClickTargetConfig | None = None
    pseudo: PseudoQueryConfig | None = None
    weight: float = 1.0
    max_queries: int | None = None
    seed: int = 42

    def __post_init__(self) -> None:
        if self.queries not in QUERY_SETS:
            raise ValueError(f"queries must be one of {', '.join(QUERY_SETS)}; got {self.queries!r}")
        if self.targets not in TARGETS:
            raise ValueError(f"targets must be one of {', '.join(TARGETS)}; got {self.targets!r}")
        check_range("weight", self.weight, above=0)
        if (self.targets == "clicks") != (self.clicks is not None):
            raise ValueError("targets clicks needs clicks: {log: FILE, estimator: naive, ips or dla, ...}, and clicks "
                             f"needs targets clicks (got targets {self.targets})")
        if self.targets == "clicks" and self.queries == "pseudo":
            raise ValueError("targets clicks learns from the log's queries: queries train or all, not pseudo")
        if self.targets in ("teacher", "both") and self.teacher is None:
            raise ValueError(f"targets {self.targets} needs a teacher: {{bi_encoder: MODEL}} or {{run: FILE}}")
        if self.queries == "train" and self.collection is not None:
            raise ValueError("queries train means the training folds of data.collection; for another collection "
                             "use queries: all")
        if self.max_queries is not None:
            check_range("max_queries", self.max_queries, 1)
        if self.queries == "pseudo" and self.pseudo is None:
            self.pseudo = PseudoQueryConfig()

    @property
    def uses_judgments(self) -> bool:
        """Whether the source reads data.collection's judgments or real queries (and so depends on the fold)."""
        return self.collection is None and self.queries != "pseudo"


def as_source_configs(values: Sequence[SourceConfig | Mapping[str, Any]], section: str) -> list[SourceConfig]:
    """:func:`as_source_config` of each source listed under ``section`` (``data.train``), named by its place."""
    return [as_source_config(value, f"{section}[{index}]") for index, value in enumerate(values)]


def as_source_config(value: SourceConfig | Mapping[str, Any], where: str) -> SourceConfig:
    """A :class:`SourceConfig` from itself or a config mapping, with ``where`` (``data.train[0]``) in errors."""
    if isinstance(value, SourceConfig):
        return value
    known = {item.name for item in dataclasses.fields(SourceConfig)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    nested = {"first_stage": FirstStageConfig, "teacher": TeacherConfig, "pseudo": PseudoQueryConfig,
              "clicks": ClickTargetConfig}
    try:
        values = {key: nested[key](**item) if key in nested and isinstance(item, Mapping) else item
                  for key, item in value.items()}
        if isinstance(values.get("collection"), Mapping):
            values["collection"] = as_collection_config(values["collection"], f"{where}.collection")
        return SourceConfig(**values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None
