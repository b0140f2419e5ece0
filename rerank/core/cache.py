"""Where rerank caches what it derives and can derive again: BM25 indexes, documents converted to Arrow,
first-stage runs, pseudo-queries, teacher scores and document embeddings, pre-trained stages, step timings.

The root is ``$RERANK_CACHE`` (default ``~/.cache/rerank``); each entry is named by a hash of everything it
depends on (:func:`cache_key`), so a changed input gives a new entry and an unchanged one is reused, by a re-run
or by every fold of a cross-validation. Entries are written atomically (:mod:`rerank.core.atomic`): two jobs building
the same entry at once both finish with a complete one.

Every entry is **sealed** when it is complete (:func:`sealing`, called by the atomic write just before the entry
appears): a file's size and SHA-1 in ``NAME.rerank-seal.json`` beside it, a folder's files and their sizes in
``.rerank-seal.json`` inside it. An entry is used only when it matches its seal (:func:`intact`); one that does not
(a file cut short by a full disk or a killed copy, a folder missing a file, no seal at all), or that cannot be read
(:func:`discard`), is removed with a warning that names it, and made again. A damaged cache is rebuilt, never
trusted, and never met as a parser's error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .atomic import atomic_write

logger = logging.getLogger(__name__)

ENVIRONMENT = "RERANK_CACHE"
SEAL = ".rerank-seal.json"
"""A folder entry's seal inside it; a file entry's beside it, as ``NAME.rerank-seal.json``."""


def cache_root() -> Path:
    """``$RERANK_CACHE``, or ``~/.cache/rerank``."""
    return Path(os.environ.get(ENVIRONMENT) or Path.home() / ".cache" / "rerank")


def cache_key(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable ``parts`` (dataclasses and paths by their ``str``)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def cache_path(kind: str, *parts: Any, suffix: str = "") -> Path:
    """``<root>/<kind>/<key><suffix>`` for the entry that ``parts`` determine."""
    return cache_root() / kind / f"{cache_key(*parts)}{suffix}"


def file_digest(path: Path) -> str:
    """A short hash of a file's bytes, for entries derived from a file that may change in place (a model's
    weights)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha1").hexdigest()[:16]


def seal_of(path: Path) -> Path:
    """Where the seal of the entry ``path`` is."""
    return path / SEAL if path.is_dir() else path.with_name(path.name + SEAL)


def sealing(path: Path) -> Callable[[Path], None]:
    """What the atomic write of the entry ``path`` calls with its complete temporary file or folder, just before it
    appears (``atomic_write(path, finish=sealing(path))``): writes the entry's seal."""
    def finish(temporary: Path) -> None:
        if temporary.is_dir():
            _write_seal(temporary / SEAL, _record(temporary))
        else:
            _write_seal(path.with_name(path.name + SEAL), _record(temporary))
    return finish


def reseal(folder: Path) -> None:
    """Seal the folder entry ``folder`` again, after files were added to it (an index built at first use)."""
    _write_seal(folder / SEAL, _record(folder))


def intact(path: Path, what: str) -> bool:
    """Whether ``path`` holds a complete entry (it matches its seal). An entry that does not is removed with a
    warning naming it and ``what`` it is, and False returned: the caller makes it again."""
    if not path.exists():
        seal_of(path).unlink(missing_ok=True)
        return False
    try:
        sealed = json.loads(seal_of(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        sealed = None
    if sealed is None:
        problem = "has no complete seal (written by an older rerank, or not to the end)"
    else:
        found = _record(path, with_digest="sha1" in sealed)
        problem = None if _matches(found, sealed) else _difference(found, sealed)
    if problem is None:
        return True
    discard(path, what, problem)
    return False


def discard(path: Path, what: str, why: object) -> None:
    """Remove the damaged entry ``path`` (and its seal) with a warning naming it, ``what`` it is and ``why``."""
    logger.warning("cache entry %s (%s) %s: removed, and made again", path, what, why)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)  # its seal with it
    else:
        path.unlink(missing_ok=True)
        path.with_name(path.name + SEAL).unlink(missing_ok=True)


def _record(path: Path, with_digest: bool = True) -> dict[str, Any]:
    """A file's size (and SHA-1), or a folder's files and their sizes."""
    if path.is_dir():
        return {"files": {str(item.relative_to(path)): item.stat().st_size for item in sorted(path.rglob("*"))
                          if item.is_file() and item.name != SEAL}}
    record: dict[str, Any] = {"size": path.stat().st_size}
    if with_digest:
        with open(path, "rb") as handle:
            record["sha1"] = hashlib.file_digest(handle, "sha1").hexdigest()
    return record


def _matches(found: dict[str, Any], sealed: dict[str, Any]) -> bool:
    if "files" in sealed:  # a folder: every sealed file there with its size (files added since were resealed)
        return all(found.get("files", {}).get(name) == size for name, size in sealed["files"].items())
    return found == sealed


def _difference(found: dict[str, Any], sealed: dict[str, Any]) -> str:
    if "files" in sealed:
        wrong = [name for name, size in sealed["files"].items() if found.get("files", {}).get(name) != size]
        return f"does not match its seal ({len(wrong)} of its files missing or of another size, e.g. {wrong[0]})"
    if found.get("size") != sealed.get("size"):
        return f"does not match its seal ({found.get('size')} bytes where it was {sealed.get('size')})"
    return "does not match its seal (its content changed)"


def _write_seal(path: Path, record: dict[str, Any]) -> None:
    with atomic_write(path) as handle:
        json.dump(record, handle)
