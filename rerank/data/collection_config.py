"""Where a collection comes from and how its queries and judgments are read: :class:`CollectionConfig`, the
``data.collection`` mapping of the YAML."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

QUERY_FIELDS = ("title", "description", "narrative", "text")


@dataclass
class CollectionConfig:
    """Where a collection comes from and how its queries and judgments are read.

    Attributes:
        ir_datasets: an ``ir_datasets`` id (e.g. ``cranfield``, ``beir/scifact/test``,
            ``disks45/nocr/trec-robust-2004/fold1``); or leave empty and give local files.
        docs: local documents, JSONL (``doc_id``, ``title``, ``text``) or TSV (``doc_id``, [``title``,] ``text``).
        queries: local queries, TSV (``query_id``, ``text``) or a TREC topic file (``<top>`` blocks).
        qrels: local TREC qrels.
        query_field: for TREC topics: ``title``, ``description`` or ``narrative``
            (plain queries have a single ``text`` field, used whatever this says).
        query_template: instead of one field, a template such as ``"{title} {description}"``.
        label_map: raw judgment -> label (judgments it does not list are kept).
        binarize_at: labels become 1 when ``>= binarize_at``, else 0 (after ``label_map``).
        cache_dir: where local documents are converted to Arrow (default: ``$RERANK_CACHE/documents``, never beside
            the files, whose folder may be read-only or shared).
    """

    ir_datasets: str | None = None
    docs: str | None = None
    queries: str | None = None
    qrels: str | None = None
    query_field: str = "title"
    query_template: str | None = None
    label_map: dict[int, int] | None = None
    binarize_at: int | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        local = [name for name in ("docs", "queries", "qrels") if getattr(self, name)]
        if self.ir_datasets and local:
            raise ValueError("collection: give either ir_datasets or local files, not both (got ir_datasets and "
                             f"{', '.join(local)})")
        if not self.ir_datasets and not local:
            raise ValueError("collection: give an ir_datasets id or local files (docs, queries, qrels)")
        if self.query_field not in QUERY_FIELDS:
            raise ValueError(f"collection.query_field must be one of {', '.join(QUERY_FIELDS)}; "
                             f"got {self.query_field!r}")
        if self.label_map is not None:
            self.label_map = {int(k): int(v) for k, v in self.label_map.items()}


def as_collection_config(value: CollectionConfig | Mapping[str, Any], where: str) -> CollectionConfig:
    """A :class:`CollectionConfig` from itself or from a config mapping, with ``where`` (the option) in errors.

    The CLI hands collections over as mappings, so that a later ``collection:`` in stacked configs replaces an
    earlier one as a whole instead of merging into it (Cranfield's ``label_map`` must not reach your files).
    """
    if isinstance(value, CollectionConfig):
        return value
    known = set(CollectionConfig.__dataclass_fields__)
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return CollectionConfig(**value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}. In stacked configs, a later {where} replaces an earlier one as a "
                         "whole: write all of it (ir_datasets: ID, or docs:, queries: and qrels:, with label_map: "
                         "if your judgments need one)") from None
