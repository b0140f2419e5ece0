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

import hashlib
import json
import logging
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ..atomic import atomic_directory, atomic_write
from ..cache import cache_path, cache_root, file_digest, intact, reseal, sealing
from ..errors import environment_fault
from .lines import check_id, read_text, text_lines
from .trec import Qrels, map_label, read_qrels

logger = logging.getLogger(__name__)

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


class Documents:
    """Documents looked up by id; ``text(doc_id)`` is ``title + " " + text``."""

    def __len__(self) -> int:
        raise NotImplementedError

    def __contains__(self, doc_id: str) -> bool:
        raise NotImplementedError

    def text(self, doc_id: str) -> str:
        raise NotImplementedError

    def iter_texts(self) -> Iterator[tuple[str, str]]:
        """``(doc_id, text)`` for every document, streamed."""
        raise NotImplementedError

    def iter_titles(self) -> Iterator[tuple[str, str]]:
        """``(doc_id, title)`` for every document, streamed (``""`` for a document without a title)."""
        raise NotImplementedError

    def source(self) -> str:
        """A file-name-safe name of where the documents come from, the same while the source is the same."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """A short hash that changes when the documents change (used to key caches such as BM25 indexes)."""
        raise NotImplementedError


def _join(title: str | None, text: str | None) -> str:
    return " ".join(part for part in (title, text) if part)


class Collection:
    """Documents, queries (query id -> text) and qrels (query id -> {doc id: label})."""

    def __init__(self, config: CollectionConfig) -> None:
        self.config = config
        if config.ir_datasets:
            self._source: _Source = _IrDatasetsSource(config)
        else:
            self._source = _LocalSource(config)

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
        self._source.check_references(qrels, self)
        return qrels

    @property
    def has_qrels(self) -> bool:
        """Whether the collection has judgments (local collections may come without a qrels file)."""
        return self._source.has_qrels()


class _Source:
    def __init__(self, config: CollectionConfig) -> None:
        self.config = config

    def documents(self) -> Documents:
        raise NotImplementedError

    def queries(self) -> dict[str, str]:
        raise NotImplementedError

    def qrels(self) -> Qrels:
        raise NotImplementedError

    def has_qrels(self) -> bool:
        raise NotImplementedError

    def check_references(self, qrels: Qrels, collection: Collection) -> None:
        """Check that the qrels name the collection's queries and documents (local files only: an ir_datasets
        collection is consistent by construction)."""

    def query_text(self, fields: Mapping[str, str], where: str) -> str:
        """The query text from a record's fields, by ``query_template`` or ``query_field``."""
        config = self.config
        if config.query_template:
            try:
                return " ".join(config.query_template.format(**fields).split())
            except KeyError as missing:
                raise ValueError(
                    f"collection.query_template {config.query_template!r} names field {missing} that {where} "
                    f"lacks; fields: {', '.join(fields)}"
                ) from None
        if "text" in fields and config.query_field not in fields:
            return " ".join(fields["text"].split())
        if config.query_field not in fields:
            raise ValueError(f"collection.query_field {config.query_field!r}: {where} has fields {', '.join(fields)}")
        return " ".join(fields[config.query_field].split())


class _IrDatasetsSource(_Source):
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
        return _IrDatasetsDocuments(self.config.ir_datasets, dataset)

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


class _IrDatasetsDocuments(Documents):
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
        return _join(fields.get("title"), fields.get("text"))
    return str(fields.get("body") or fields.get("default_text", ""))


class _LocalSource(_Source):
    """A collection from local files."""

    def _path(self, name: str) -> Path:
        value = getattr(self.config, name)
        if not value:
            raise ValueError(f"collection.{name}: no file given")
        path = Path(value)
        if not path.is_file():
            raise FileNotFoundError(f"collection.{name}: {path} does not exist")
        return path

    def documents(self) -> Documents:
        return _ArrowDocuments(self._path("docs"), self.config.cache_dir)

    def queries(self) -> dict[str, str]:
        path = self._path("queries")
        if _looks_like_trec_topics(path):
            from ir_datasets.formats import TrecQueries
            from ir_datasets.util import LocalDownload

            topics = TrecQueries(LocalDownload(path), namespace="local", lang="en")
            return {check_id(q.query_id, "query id", f"{path}, topic {q.query_id!r}"):
                    _with_text(self.query_text(q._asdict(), f"{path} topic {q.query_id}"), q.query_id,
                               f"{path}, topic {q.query_id!r}") for q in topics.queries_iter()}
        queries = {}
        for number, line in text_lines(path):
            row = _tab_separated(line)
            if not row:
                continue
            if len(row) < 2:
                raise ValueError(f"{path}:{number}: expected query_id<TAB>text, got {line.rstrip()!r}")
            qid = check_id(row[0], "query id", f"{path}:{number}")
            if qid in queries:
                raise ValueError(f"{path}:{number}: duplicate query id {qid!r}")
            queries[qid] = _with_text(self.query_text({"text": row[-1]}, f"{path}:{number}"), qid, f"{path}:{number}")
        if not queries:
            raise ValueError(f"{path}: no queries (expected lines query_id<TAB>text, or TREC <top> topics)")
        return queries

    def has_qrels(self) -> bool:
        return bool(self.config.qrels)

    def qrels(self) -> Qrels:
        qrels = read_qrels(self._path("qrels"), self.config.label_map, self.config.binarize_at)
        if not qrels:
            raise ValueError(f"{self.config.qrels}: no judgments (expected lines query_id 0 doc_id relevance)")
        return qrels

    def check_references(self, qrels: Qrels, collection: Collection) -> None:
        """Judged documents and queries that the collection lacks: a warning with how many and examples, an error
        when none is there (a wrong file, or a wrong id column)."""
        if self.config.docs:
            documents = collection.documents
            _check_ids({doc for judged in qrels.values() for doc in judged}, documents.__contains__, "document ids",
                       self.config.qrels, self.config.docs)
        if self.config.queries:
            queries = collection.queries
            _check_ids(set(qrels), queries.__contains__, "query ids", self.config.qrels, self.config.queries)


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


def _with_text(text: str, query_id: str, where: str) -> str:
    """``text``, or a ValueError naming ``where`` (the file and line) when a query of a local file has none."""
    if not text:
        raise ValueError(f"{where}: query {query_id!r} has no text (after the query field or template is read); "
                         "give it one, or leave the line out")
    return text


def _looks_like_trec_topics(path: Path) -> bool:
    """Whether ``path`` holds TREC ``<top>`` blocks (the whole file is read: a byte that is not UTF-8 is named)."""
    return "<top>" in read_text(path)


class _ArrowDocuments(Documents):
    """Local documents converted once to an Arrow file (memory-mapped) with an id -> row index: the ids sorted, as
    fixed-width UTF-8 in a memory-mapped array, and each one's row (``ids.npy``, ``rows.npy``). A look-up is a
    binary search; opening costs nothing whatever the collection's size (a dict of 8.8M ids took a minute and
    about 1.5 GB)."""

    def __init__(self, path: Path, cache_dir: str | None) -> None:
        self.path = path
        self.cache_dir = Path(cache_dir) if cache_dir else cache_root() / "documents"

    def source(self) -> str:
        return f"{self.path.stem}-{hashlib.sha1(str(self.path.resolve()).encode()).hexdigest()[:8]}"

    def fingerprint(self) -> str:
        """A hash of the file's bytes (and of the Arrow layout): a copy with new dates, or a ``touch``, keeps every
        cache made from the documents, an edit makes them again. The bytes are read once per version of the file
        (its size and modification time); the digest is then kept under ``$RERANK_CACHE/fingerprints``."""
        stat = self.path.stat()
        memo = cache_path("fingerprints", str(self.path.resolve()), stat.st_size, stat.st_mtime_ns, suffix=".txt")
        if intact(memo, f"the digest of {self.path}"):
            digest = memo.read_text()
        else:
            digest = file_digest(self.path)
            with atomic_write(memo, finish=sealing(memo)) as handle:
                handle.write(digest)
        return hashlib.sha1(f"{digest}:{_ARROW_SCHEMA}".encode()).hexdigest()[:12]

    @property
    def _table(self):
        return self._indexed[0]

    @cached_property
    def _indexed(self) -> tuple[Any, Any, Any]:
        """The Arrow table (built once per version of the file), its sorted ids and their rows."""
        import numpy as np

        table, folder = self._load()
        if not (folder / "ids.npy").is_file():  # made once, at the first look-up of a table
            self._write_index(table, folder)
        return table, np.load(folder / "ids.npy", mmap_mode="r"), np.load(folder / "rows.npy", mmap_mode="r")

    def _row(self, doc_id: str) -> int | None:
        """The table row of ``doc_id``, or None."""
        _, ids, rows = self._indexed
        key = doc_id.encode()
        if len(key) > ids.dtype.itemsize:  # numpy would compare a cut key
            return None
        at = int(ids.searchsorted(key))
        return int(rows[at]) if at < len(ids) and ids[at] == key else None

    def _write_index(self, table: Any, folder: Path) -> None:
        """``ids.npy`` and ``rows.npy`` of :meth:`_indexed`; a duplicate id fails, naming both lines."""
        import numpy as np

        ids = np.array([doc_id.encode() for doc_id in table["doc_id"]], dtype=bytes)
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        same = np.flatnonzero(ids[1:] == ids[:-1])
        if len(same):  # the first repeat in the file, as a reader going line by line would meet it
            first, later = min(((int(order[i]), int(order[i + 1])) for i in same), key=lambda pair: pair[1])
            lines = table["line"]
            raise ValueError(f"{self.path}:{lines[later]}: duplicate doc_id {table[later]['doc_id']!r} (also on line "
                             f"{lines[first]})")
        for name, array in (("rows.npy", order.astype(np.int64)), ("ids.npy", ids)):  # ids last: it marks a whole index
            with atomic_write(folder / name, "wb") as handle:
                np.save(handle, array)
        reseal(folder)  # the entry now holds its index too

    def _load(self) -> tuple[Any, Path]:
        """The Arrow table and its folder, converted first if this version of the file has none."""
        import datasets

        datasets.disable_progress_bars()
        source, fingerprint = self.source(), self.fingerprint()
        cache = self.cache_dir / f"{source}-{fingerprint}"
        if intact(cache, f"the documents of {self.path} in Arrow"):
            logger.info("documents of %s from the cache: %s", self.path, cache)
        else:
            logger.info("converting the documents of %s to Arrow, once per version of the file: %s", self.path, cache)
            for stale in self.cache_dir.glob(f"{source}-" + "?" * len(fingerprint)):
                shutil.rmtree(stale, ignore_errors=True)
            # two processes converting at once (a cluster array job) each build their own and one table is kept
            with atomic_directory(cache, replace=False, finish=sealing(cache)) as staging:
                try:
                    table = datasets.Dataset.from_generator(_read_documents, gen_kwargs={"path": str(self.path)},
                                                            cache_dir=str(staging / "build"))
                    table.save_to_disk(str(staging / "table"))
                except (datasets.exceptions.DatasetGenerationError, OSError) as error:
                    if isinstance(error.__cause__, ValueError):  # our own message, with file and line
                        raise error.__cause__ from None
                    fault = environment_fault(error)
                    if fault is not None:  # the disk's, not the documents': one line naming where it was writing
                        raise OSError(fault.errno, f"{fault.strerror} while converting the documents of {self.path} "
                                                   f"to Arrow in {self.cache_dir} (RERANK_CACHE, or "
                                                   "data.collection.cache_dir, chooses where)") from None
                    raise
                shutil.rmtree(staging / "build")
        return datasets.load_from_disk(str(cache / "table")), cache

    def __len__(self) -> int:
        return self._table.num_rows

    def __contains__(self, doc_id: str) -> bool:
        return self._row(doc_id) is not None

    def text(self, doc_id: str) -> str:
        row = self._row(doc_id)
        if row is None:
            raise KeyError(f"{self.path}: no document {doc_id!r}")
        return self._table[row]["text"]

    def iter_texts(self) -> Iterator[tuple[str, str]]:
        return self._columns("text")

    def iter_titles(self) -> Iterator[tuple[str, str]]:
        return self._columns("title")

    def _columns(self, column: str) -> Iterator[tuple[str, str]]:
        """``(doc_id, column)`` rows of the table (whose ids are unique: a BM25 index never sees a duplicate)."""
        for batch in self._table.iter(batch_size=4096):
            yield from zip(batch["doc_id"], batch[column])


_ARROW_SCHEMA = 3
"""The version of the Arrow tables' columns (``doc_id``, ``title``, ``text`` = title and body, ``line``) and of
their folder (``<cache>/table``, and ``ids.npy`` and ``rows.npy`` beside it, made at the first look-up)."""


def _read_documents(path: str) -> Iterator[dict[str, str | int]]:
    """Rows ``{doc_id, title, text, line}`` of a JSONL or TSV document file, with the line number of any bad row."""
    source = Path(path)
    json_lines = source.suffix in (".jsonl", ".json")
    for number, line in text_lines(source):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        if json_lines:
            try:
                record = json.loads(line)
                doc_id, title, text = record["doc_id"], record.get("title"), record.get("text")
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
                raise ValueError(f"{where}: expected a JSON object with doc_id ({error}): {line[:200]!r}") from None
            for name, value, kinds in (("doc_id", doc_id, (str, int)), ("title", title, (str, type(None))),
                                       ("text", text, (str, type(None)))):
                if not isinstance(value, kinds) or isinstance(value, bool):  # a float id 1.0 would not match "1"
                    expected = "a string or an integer" if name == "doc_id" else "a string"
                    raise ValueError(f"{where}: {name} is a JSON {_json_type(value)}, expected {expected}: "
                                     f"{line[:200]!r}")
            doc_id, title = str(doc_id), title or ""
        else:
            row = _tab_separated(line)
            if len(row) not in (2, 3):
                raise ValueError(f"{where}: expected doc_id<TAB>[title<TAB>]text, got {len(row)} columns")
            doc_id, title, text = row[0], row[1] if len(row) == 3 else "", row[-1]
        yield {"doc_id": check_id(doc_id, "doc_id", where), "title": title, "text": _join(title, text), "line": number}


def _json_type(value: object) -> str:
    """The JSON name of a parsed value's type: number, boolean, array, object, null or string."""
    names = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object", type(None): "null"}
    return names.get(type(value), "string")


def _tab_separated(line: str) -> list[str]:
    """The columns of a TSV line (no quoting: a tab always separates); ``[]`` for a blank line."""
    stripped = line.rstrip("\r\n")
    return stripped.split("\t") if stripped else []
