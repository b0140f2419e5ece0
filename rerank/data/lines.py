"""Lines of a user's text file and the ids read from them, with the file and line of anything that cannot be used.

Every reader of a user's file (documents, queries, qrels, runs, teacher runs, configs) reads through
:func:`text_lines`, so that a byte that is not UTF-8 (a Latin-1 or Windows-1252 file) fails with the file, the
line and the column, not Python's ``'utf-8' codec can't decode byte 0xe9 in position 2549``; and checks its ids
with :func:`check_id`, so that an id that a TREC run cannot hold (``"d 9"`` would be written as two columns) fails
when it is read, before any work.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

BOM = "\ufeff"


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 file (a byte-order mark at its start is dropped), lines with their ends.

    Raises:
        ValueError: at the first line that is not UTF-8, naming the file, line, column and byte.
    """
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(_not_utf8(path, number, raw, error)) from None
            yield number, line[1:] if number == 1 and line.startswith(BOM) else line


def read_text(path: str | Path) -> str:
    """A whole UTF-8 file as text (without a byte-order mark), with the file and line of a byte that is not UTF-8."""
    return "".join(line for _, line in text_lines(path))


def _not_utf8(path: str | Path, number: int, raw: bytes, error: UnicodeDecodeError) -> str:
    column = len(raw[: error.start].decode("utf-8", errors="replace")) + 1
    return (f"{path}:{number}: not UTF-8 text (byte 0x{raw[error.start]:02x} at column {column}): save the file as "
            "UTF-8, e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8 for a Latin-1 file")


def check_id(identifier: str, what: str, where: str) -> str:
    """``identifier`` if a TREC file can hold it (not empty, no whitespace); else a ValueError naming ``where``.

    Args:
        identifier: a query or document id.
        what: ``doc_id`` or ``query id``, for the message.
        where: ``file:line`` (or another place) it was read from.
    """
    if not identifier or any(character.isspace() for character in identifier):
        raise ValueError(f"{where}: {what} {identifier!r} is empty or holds whitespace, which TREC run and qrels "
                         "files separate columns by: give ids without spaces")
    return identifier


def tab_separated(line: str) -> list[str]:
    """The columns of a TSV line (no quoting: a tab always separates); ``[]`` for a blank line."""
    stripped = line.rstrip("\r\n")
    return stripped.split("\t") if stripped else []
