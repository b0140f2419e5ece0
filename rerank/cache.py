"""Where rerank caches what it derives and can derive again: BM25 indexes, pseudo-queries, their candidates,
teacher scores, pre-trained stages.

The root is ``$RERANK_CACHE`` (default ``~/.cache/rerank``); each entry is named by a hash of everything it
depends on (:func:`cache_key`), so a changed input gives a new entry and an unchanged one is reused, by a re-run
or by every fold of a cross-validation. Entries are written atomically (:mod:`rerank.atomic`): two jobs building
the same entry at once both finish with a complete one.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

ENVIRONMENT = "RERANK_CACHE"


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
