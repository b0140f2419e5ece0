"""Local documents (JSONL or TSV) converted once to an on-disk Arrow table (Hugging Face ``datasets``) with an
id -> row index, memory-mapped: :class:`ArrowDocuments`."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from ..core.atomic import atomic_directory, atomic_write
from ..core.cache import cache_path, cache_root, file_digest, intact, reseal, sealing
from ..core.errors import environment_fault
from .documents import Documents, joined
from .lines import check_id, tab_separated, text_lines

logger = logging.getLogger(__name__)


class ArrowDocuments(Documents):
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
            row = tab_separated(line)
            if len(row) not in (2, 3):
                raise ValueError(f"{where}: expected doc_id<TAB>[title<TAB>]text, got {len(row)} columns")
            doc_id, title, text = row[0], row[1] if len(row) == 3 else "", row[-1]
        yield {"doc_id": check_id(doc_id, "doc_id", where), "title": title, "text": joined(title, text), "line": number}


def _json_type(value: object) -> str:
    """The JSON name of a parsed value's type: number, boolean, array, object, null or string."""
    names = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object", type(None): "null"}
    return names.get(type(value), "string")
