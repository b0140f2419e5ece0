"""A collection from ``ir_datasets``, offline from ``$IR_DATASETS_HOME`` when its files are there: its queries and
qrels, and its documents through ir_datasets' doc store, built once under a lock held across processes."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

from .documents import Documents, joined
from .source import Source
from .trec import Qrels, map_label

logger = logging.getLogger(__name__)


class IrDatasetsSource(Source):
    """A collection from ``ir_datasets`` (offline from ``$IR_DATASETS_HOME`` when its files are there)."""

    @cached_property
    def dataset(self):
        import ir_datasets

        try:
            return ir_datasets.load(self.config.ir_datasets)
        except KeyError:
            raise ValueError(
                f"collection.ir_datasets: unknown ir_datasets id {self.config.ir_datasets!r} "
                "(see https://ir-datasets.com for the catalogue)"
            ) from None

    def documents(self) -> Documents:
        dataset = self.dataset
        if not dataset.has_docs():
            raise ValueError(f"ir_datasets {self.config.ir_datasets!r} has no documents")
        return IrDatasetsDocuments(self.config.ir_datasets, dataset)

    def queries(self) -> dict[str, str]:
        where = f"ir_datasets {self.config.ir_datasets!r}"
        with missing_data(self.config.ir_datasets, "queries"):
            records = list(self.dataset.queries_iter())
        queries = {q.query_id: self.query_text(q._asdict(), where) for q in records}
        empty = [qid for qid, text in queries.items() if not text]
        if empty:  # the dataset's own: kept, and said (they get no candidates, and count 0 where judged)
            logger.warning("%s: %d queries have no text (%s%s): they get no candidates, and count 0 where judged",
                           where, len(empty), ", ".join(empty[:5]), ", ..." if len(empty) > 5 else "")
        return queries

    def has_qrels(self) -> bool:
        return self.dataset.has_qrels()

    def qrels(self) -> Qrels:
        with missing_data(self.config.ir_datasets, "qrels"):
            records = list(self.dataset.qrels_iter())
        qrels: Qrels = {}
        for qrel in records:
            label = map_label(qrel.relevance, self.config.label_map, self.config.binarize_at)
            qrels.setdefault(qrel.query_id, {})[qrel.doc_id] = label
        return qrels


class MissingDataError(FileNotFoundError):
    """An ``ir_datasets`` file that is neither cached nor downloadable (e.g. licensed TREC documents)."""

    def __init__(self, dataset_id: str, what: str, error: BaseException) -> None:
        import ir_datasets

        home = ir_datasets.util.home_path()
        hint = _MISSING_HINTS.get((dataset_id.split("/")[0], what), "")
        super().__init__(
            f"ir_datasets {dataset_id!r}: its {what} are not available offline ({type(error).__name__}: "
            f"{str(error)[:300]}). IR_DATASETS_HOME is {home}.{hint}"
        )


_MISSING_HINTS = {
    ("disks45", "documents"): (
        " TREC Disks 4&5 are licensed by NIST (https://trec.nist.gov/data/cd45/index.html): place the "
        "uncompressed disks in IR_DATASETS_HOME/disks45/corpus (with NEWS_data/FBIS, NEWS_data/FR94, ...)."
    ),
    ("msmarco-passage", "queries"): (
        " ir_datasets downloads MS MARCO passage (about 1 GB for the passages, from msmarco.blob.core.windows.net) "
        "into IR_DATASETS_HOME/msmarco-passage/: run once where the network is open, or copy that folder here."
    ),
    ("msmarco-passage", "documents"): (
        " ir_datasets downloads MS MARCO passage (collection.tar.gz, about 1 GB) into "
        "IR_DATASETS_HOME/msmarco-passage/: run once where the network is open, or copy that folder here."
    ),
    ("msmarco-passage", "qrels"): (
        " ir_datasets downloads the MS MARCO qrels into IR_DATASETS_HOME/msmarco-passage/: run once where the "
        "network is open, or copy that folder here."
    ),
    ("disks45", "qrels"): (
        " Place qrels.robust2004.txt (https://trec.nist.gov/data/robust/qrels.robust2004.txt) at "
        "IR_DATASETS_HOME/downloads/123c2a0ba2ec31178cb1050995dcfdfa."
    ),
}


@contextmanager
def missing_data(dataset_id: str, what: str) -> Iterator[None]:
    """Turn ir_datasets' missing-file and failed-download errors into one :class:`MissingDataError`."""
    try:
        yield
    except (FileNotFoundError, RuntimeError, OSError) as error:
        raise MissingDataError(dataset_id, what, error) from error


class IrDatasetsDocuments(Documents):
    def __init__(self, dataset_id: str, dataset) -> None:
        self.dataset_id, self.dataset = dataset_id, dataset

    @cached_property
    def _store(self):
        with missing_data(self.dataset_id, "documents"):
            store = self.dataset.docs_store()
            self._build_once(store)
            return store

    def _build_once(self, store) -> None:
        """Build the doc store of a fresh ``IR_DATASETS_HOME`` under a lock held across processes.

        ir_datasets asks whether a store is built before it takes its own lock, so processes that open a fresh store
        at once (the ranks of a multi-GPU fit, a cluster array) each build it: the later ones append every document
        again and rewrite the index under the earlier ones' reads. A store that holds another count than ir_datasets'
        metadata gives is rebuilt, not trusted. The lock lies beside the store, where every process that reads it
        finds it, whatever its own ``RERANK_CACHE``; a home that cannot be written to holds no store being built.
        (The stores built on first use are ir_datasets' ``PickleLz4FullStore``: Cranfield's, BEIR's, Disks 4&5's.)"""
        from filelock import FileLock
        from ir_datasets.indices import PickleLz4FullStore

        if not isinstance(store, PickleLz4FullStore):
            return
        lock = Path(f"{store.path}.lock")
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            lock.touch()
        except PermissionError:  # a read-only IR_DATASETS_HOME: ir_datasets says so if the store is not built
            return
        with FileLock(lock):
            expected = store.count_hint() if callable(store.count_hint) else store.count_hint  # ir_datasets' metadata
            if expected and store.built() and len(store.lookup) != expected:
                logger.warning("ir_datasets %r: its doc store holds %d documents, not %d; rebuilding it: %s",
                               self.dataset_id, len(store.lookup), expected, store.path)
                store.clear_cache()
            store.build()

    def _store_built(self) -> None:
        """The doc store built first, once (:meth:`_build_once`): ir_datasets counts some collections' documents in
        their store, and reads them in order from it."""
        _ = self._store

    def __len__(self) -> int:
        self._store_built()
        return self.dataset.docs_count()

    def __contains__(self, doc_id: str) -> bool:
        try:
            self.text(doc_id)
        except KeyError:
            return False
        return True

    def text(self, doc_id: str) -> str:
        with missing_data(self.dataset_id, "documents"):
            return _document_text(self._store.get(doc_id))

    def iter_texts(self) -> Iterator[tuple[str, str]]:
        for doc in self._docs():
            yield doc.doc_id, _document_text(doc)

    def iter_titles(self) -> Iterator[tuple[str, str]]:
        for doc in self._docs():
            yield doc.doc_id, str(getattr(doc, "title", "") or "")

    def _docs(self) -> Iterator[Any]:
        """The documents in the collection's order, from a built store."""
        with missing_data(self.dataset_id, "documents"):
            self._store_built()
            yield from self.dataset.docs_iter()

    def source(self) -> str:
        return "irds-" + self.dataset_id.replace("/", "_")

    def fingerprint(self) -> str:
        return hashlib.sha1(f"ir_datasets:{self.dataset_id}:{len(self)}".encode()).hexdigest()[:12]


def _document_text(doc) -> str:
    fields = doc._asdict()
    if "title" in fields or "text" in fields:
        return joined(fields.get("title"), fields.get("text"))
    return str(fields.get("body") or fields.get("default_text", ""))
