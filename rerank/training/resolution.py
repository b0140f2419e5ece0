"""A run's options with every ``auto`` resolved, once, before any model or Trainer is built: :func:`resolve`.

The commands parse their options (:mod:`rerank.cli.arguments`) and hand them here; what comes back is typed (the
collection, the training sources of ``data.train`` and of the stage) and holds numbers where the config says
``auto``:

- ``trainer.precision``: what this machine runs it in (:func:`rerank.training.precision.effective_precision`);
- ``model.tokenization``'s rows and query budget, sized from the collection's texts or taken from an exported model
  (:mod:`rerank.model.sizing`);
- ``model.speedups: auto``: the speed-ups measured faster for the accelerator
  (:func:`rerank.model.speedups.for_accelerator`);
- each pseudo-query source's ``max_words: auto`` and ``lengths: queries``, from the queries of the collection the
  model is trained for (:func:`rerank.data.pseudo_queries.sized_to`).

The one ``auto`` left is the stage's ``pretrain.max_steps``, which is this machine's time per step of the built
model (:func:`rerank.training.pretraining.plan_stage`); it is resolved before the stage trains, and the run's
``config.yaml`` is written once, after it, with every value resolved. The constructors take resolved values only.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config.source import SourceConfig, as_source_configs
from ..config.tokenization import TokenizationConfig
from ..core.checks import AUTO
from ..data.collection import Collection
from ..data.collection_config import CollectionConfig, as_collection_config
from ..data.pseudo_queries import MAX_WORDS, QUERIES, PseudoQueryConfig, sized_to
from ..model import speedups as speedups_module
from ..model.sizing import size_tokenization
from .precision import effective_precision

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """What a run's options are once resolved.

    Attributes:
        collection: ``data.collection``.
        train: ``data.train``'s sources, their pseudo-queries sized.
        stage: ``pretrain.train``'s sources, their pseudo-queries sized (empty without a stage).
        tokenization: ``model.tokenization`` in numbers (None: not given; the model's own, or the defaults).
        precision: ``trainer.precision`` as this machine runs it.
        speedups: ``model.speedups`` by name.
        resolved: each ``auto`` resolved, as ``option: value``.
    """

    collection: CollectionConfig
    train: list[SourceConfig]
    stage: list[SourceConfig]
    tokenization: TokenizationConfig | None = None
    precision: Any = None
    speedups: list[str] = dataclasses.field(default_factory=list)
    resolved: list[str] = dataclasses.field(default_factory=list)


def typed(options: Mapping[str, Any]) -> RunOptions:
    """``options`` (a parsed config as plain values) with the collection and the sources typed, nothing resolved."""
    data = options.get("data") or {}
    stage = options.get("pretrain") or {}
    return RunOptions(as_collection_config(data.get("collection") or {}, "data.collection"),
                      as_source_configs(data.get("train") or [{}], "data.train"),
                      as_source_configs(stage.get("train") or [], "pretrain.train"))


def resolve(options: Mapping[str, Any], stage: bool = True) -> RunOptions:
    """``options`` (a parsed config as plain values: ``model``, ``data``, ``trainer``, ``pretrain``) typed and with
    every ``auto`` but the stage's steps resolved, each said in one line; the stage's sources only with ``stage``
    (a command that trains).

    Raises:
        ValueError: a value that cannot be resolved (a collection without queries, say), naming its option.
    """
    run = typed(options)
    model, trainer = options.get("model") or {}, options.get("trainer") or {}
    resolved = []
    precision = effective_precision(trainer.get("precision"), trainer.get("accelerator"))
    speedups = speedups_module.for_accelerator(model.get("speedups", "auto"), trainer.get("accelerator"))
    if model.get("speedups", "auto") == "auto":
        resolved.append(f"model.speedups: {', '.join(speedups) or 'none'}")
    collection = functools.cache(lambda: Collection(run.collection))  # opened only where an auto needs its texts
    tokenization = _tokenization(model, run, collection)
    if tokenization is not None and not TokenizationConfig(**model["tokenization"]).resolved:
        resolved.append(f"model.tokenization: rows of {tokenization.max_length} tokens, queries up to "
                        f"{tokenization.max_query_length}")
    train = _sized(run.train, collection, "data.train", resolved)
    stage_sources = _sized(run.stage, collection, "pretrain.train", resolved) if stage else run.stage
    if resolved:
        logger.info("options resolved: %s", "; ".join(resolved))
    return RunOptions(run.collection, train, stage_sources, tokenization, precision, list(speedups), resolved)


def _tokenization(model: Mapping[str, Any], run: RunOptions,
                  collection: Callable[[], Collection]) -> TokenizationConfig | None:
    """``model.tokenization`` sized (:mod:`rerank.model.sizing`); rows read about what the teacher of the first
    source with one reads."""
    given = model.get("tokenization")
    if not given:
        return None
    tokenization = TokenizationConfig(**given)
    if tokenization.resolved:
        return tokenization
    teacher = next((source.teacher for source in run.train if source.teacher is not None), None)
    texts = collection()
    return size_tokenization(tokenization, model["model_name"], texts.queries.values(), texts.documents, texts.name,
                             teacher.max_length - 2 if teacher is not None else None)


def _sized(sources: Sequence[SourceConfig], collection: Callable[[], Collection], section: str,
           resolved: list[str]) -> list[SourceConfig]:
    """``sources`` with their pseudo-queries sized to ``collection``'s queries, each said in one line."""
    sized = list(sources)
    for index, source in enumerate(sources):
        if source.pseudo is not None and not source.pseudo.sized:
            where = f"{section}[{index}]"
            pseudo = sized_to(source.pseudo, collection().queries.values())
            logger.info("%s: %s", where, _sizing(source.pseudo, pseudo, collection()))
            resolved.append(f"{where}.pseudo: {pseudo.describe()}")
            sized[index] = dataclasses.replace(source, pseudo=pseudo)
    return sized


def _sizing(given: PseudoQueryConfig, pseudo: PseudoQueryConfig, collection: Collection) -> str:
    """What the pseudo-queries ``given`` were sized to, and why."""
    queries = f"the {len(collection.queries)} queries of {collection.name}"
    if pseudo.spans:
        return (f"pseudo-queries are {pseudo.describe()} (lengths: queries: {queries} have a median of more than "
                f"{MAX_WORDS} words)")
    why = ([f"lengths: queries: {queries} have a median of at most {MAX_WORDS} words, titles"]
           if given.lengths == QUERIES else [])
    if given.max_words == AUTO:
        why.append(f"max_words: auto: the longest of {queries}, within {pseudo.min_words} and {MAX_WORDS}")
    return f"pseudo-queries of at most {pseudo.max_words} words ({'; '.join(why)})"
