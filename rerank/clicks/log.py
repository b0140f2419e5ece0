"""Click logs: one impression per line, read as a stream that names the file and line of anything wrong.

The format is JSON Lines, one object per impression (a result page shown to a user)::

    {"query_id": "12", "shown": ["d3", "d9", "d1"], "clicks": [2], "session": "s81", "time": 1732550400.0}

- ``query_id``: the query's id in the collection;
- ``shown``: the documents shown, top first (at least one, no repeats; ids as in TREC files: no whitespace);
- ``clicks``: the ranks clicked, 1-based (``[2]`` is a click on ``d9``), ascending, each a rank that was shown;
  ``[]`` for an impression without clicks;
- ``session`` (a string) and ``time`` (seconds, a number): optional, kept for whoever needs them.

:func:`read_click_log` checks every line (JSON, the fields and their types, clicks at shown ranks, and, when given,
that the query and the documents are known) and fails at the first bad one with ``file:line: problem``, before any
training reads the log. :func:`write_click_log` writes atomically.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..core.atomic import atomic_write
from ..data.lines import check_id, text_lines

FIELDS = ("query_id", "shown", "clicks", "session", "time")


@dataclass(frozen=True)
class Impression:
    """One result page: the query, the documents shown top first, the 1-based ranks clicked (and, when read from a
    log, its line there, for errors found later)."""

    query_id: str
    shown: tuple[str, ...]
    clicks: tuple[int, ...]
    session: str | None = None
    time: float | None = None
    line: int | None = field(default=None, compare=False)


class ClickLogError(ValueError):
    """A malformed or unusable line of a click log, named by file and line."""

    def __init__(self, path: str | Path, line_number: int, problem: str) -> None:
        super().__init__(f"{path}:{line_number}: {problem}")
        self.path, self.line_number = str(path), line_number


def read_click_log(path: str | Path, queries: Collection[str] | None = None,
                   known_document: Callable[[str], bool] | None = None) -> Iterator[Impression]:
    """The impressions of a click log, one line at a time (blank lines are skipped).

    Args:
        path: the log (JSON Lines, the module's format).
        queries: if given, every impression's query must be one of these.
        known_document: if given, every shown document must pass it (e.g. the collection's id look-up).

    Raises:
        ClickLogError: at the first line that is not a valid impression, or names an unknown query or document.
        FileNotFoundError: no such file.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such click log")
    if known_document is not None:  # a log shows the same documents again and again: look each up once
        known_document = functools.cache(known_document)
    for number, line in text_lines(path):
        if line.strip():
            yield _impression(path, number, line, queries, known_document)


def _impression(path: str | Path, number: int, line: str, queries: Collection[str] | None,
                known_document: Callable[[str], bool] | None) -> Impression:
    def fail(problem: str) -> ClickLogError:
        return ClickLogError(path, number, problem)

    try:
        record = json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as error:
        raise fail(f"not JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict):
        raise fail("an impression is a JSON object with query_id, shown and clicks")
    missing = [key for key in FIELDS[:3] if key not in record]
    unknown = sorted(set(record) - set(FIELDS))
    if missing or unknown:
        raise fail(f"missing {', '.join(missing)}" if missing else
                   f"unknown field(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}")
    query_id, shown, clicks = record["query_id"], record["shown"], record["clicks"]
    if not isinstance(query_id, str):
        raise fail(f"query_id must be a string; got {query_id!r}")
    _check_id(query_id, "query id", fail)
    if queries is not None and query_id not in queries:
        raise fail(f"unknown query id {query_id!r}")
    if not isinstance(shown, list) or not shown or not all(isinstance(doc, str) for doc in shown):
        raise fail("shown must be a non-empty list of doc ids (strings)")
    for doc in shown:
        _check_id(doc, "doc_id", fail)
    if len(set(shown)) < len(shown):
        raise fail(f"shown lists a document twice: {sorted({d for d in shown if shown.count(d) > 1})[0]!r}")
    if known_document is not None:
        unknown_docs = [doc for doc in shown if not known_document(doc)]
        if unknown_docs:
            raise fail(f"unknown doc id {unknown_docs[0]!r} (not in the collection)")
    if not isinstance(clicks, list) or not all(isinstance(rank, int) and not isinstance(rank, bool)
                                               for rank in clicks):
        raise fail("clicks must be a list of 1-based ranks (integers)")
    bad = [rank for rank in clicks if not 1 <= rank <= len(shown)]
    if bad:
        raise fail(f"a click at rank {bad[0]}, which was not shown (ranks 1 to {len(shown)})")
    if clicks != sorted(set(clicks)):
        raise fail(f"clicks must be ascending ranks without repeats; got {clicks}")
    session, time = record.get("session"), record.get("time")
    if session is not None and not isinstance(session, str):
        raise fail(f"session must be a string; got {session!r}")
    if time is not None and (isinstance(time, bool) or not isinstance(time, (int, float))):
        raise fail(f"time must be a number (seconds); got {time!r}")
    return Impression(query_id, tuple(shown), tuple(clicks), session, None if time is None else float(time), number)


def _check_id(identifier: str, what: str, fail: Callable[[str], ClickLogError]) -> None:
    try:
        check_id(identifier, what, "")
    except ValueError as error:
        raise fail(str(error).removeprefix(": ")) from None


def write_click_log(impressions: Iterable[Impression], path: str | Path) -> int:
    """Write ``impressions`` as a click log (atomically); returns how many were written."""
    count = 0
    with atomic_write(path) as handle:
        for impression in impressions:
            record: dict[str, object] = {"query_id": impression.query_id, "shown": list(impression.shown),
                                         "clicks": list(impression.clicks)}
            if impression.session is not None:
                record["session"] = impression.session
            if impression.time is not None:
                record["time"] = impression.time
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            count += 1
    return count
