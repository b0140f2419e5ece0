"""Collections: documents looked up by id, queries and qrels, from ``ir_datasets`` or from local files.

Both sources are configured the same way (:class:`CollectionConfig`, a YAML mapping)::

    collection:                       # an ir_datasets id ...
      ir_datasets: cranfield
      label_map: {-1: 0, 1: 4, 2: 3, 3: 2, 4: 1}

    collection:                       # ... or local files
      docs: data/cranfield/docs.jsonl         # JSONL (doc_id, title, text) or TSV (doc_id, [title,] text)
      queries: data/cranfield/queries.tsv     # TSV (query_id, text) or a TREC topic file
      qrels: data/cranfield/qrels.txt         # TREC qrels

Documents are never loaded whole: ``ir_datasets`` collections go through its doc store, local files through an
on-disk Arrow table (Hugging Face ``datasets``) with an id -> row index.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from .collection_config import CollectionConfig
from .documents import Documents
from .ir_datasets_source import IrDatasetsSource
from .local_source import LocalSource
from .source import Source
from .trec import Qrels

logger = logging.getLogger(__name__)


class Collection:
    """Documents, queries (query id -> text) and qrels (query id -> {doc id: label})."""

    def __init__(self, config: CollectionConfig) -> None:
        self.config = config
        if config.ir_datasets:
            self._source: Source = IrDatasetsSource(config)
        else:
            self._source = LocalSource(config)

    @property
    def name(self) -> str:
        return self.config.ir_datasets or Path(self.config.docs or self.config.queries or "local").resolve().parent.name

    @cached_property
    def documents(self) -> Documents:
        return self._source.documents()

    @cached_property
    def queries(self) -> dict[str, str]:
        return self._source.queries()

    @cached_property
    def qrels(self) -> Qrels:
        qrels = self._source.qrels()
        self._check_references(qrels)
        return qrels

    def _check_references(self, qrels: Qrels) -> None:
        """Judged documents and queries that local files lack: a warning with how many and examples, an error when
        none is there (a wrong file, or a wrong id column). (An ir_datasets collection is consistent by
        construction.)"""
        if self.config.docs:
            _check_ids({doc for judged in qrels.values() for doc in judged}, self.documents.__contains__,
                       "document ids", self.config.qrels, self.config.docs)
        if self.config.queries:
            _check_ids(set(qrels), self.queries.__contains__, "query ids", self.config.qrels, self.config.queries)

    @property
    def has_qrels(self) -> bool:
        """Whether the collection has judgments (local collections may come without a qrels file)."""
        return self._source.has_qrels()


def _check_ids(ids: set[str], known: Callable[[str], bool], what: str, where: str, against: str) -> None:
    missing = sorted(item for item in ids if not known(item))
    if not missing:
        return
    examples = ", ".join(missing[:5])
    if len(missing) == len(ids):
        raise ValueError(f"{where}: none of its {len(ids)} judged {what} is in {against} (e.g. {examples}): "
                         "a file of another collection, or a wrong id column?")
    logger.warning("%s: %d of %d judged %s are not in %s (e.g. %s)", where, len(missing), len(ids), what, against,
                   examples)
