"""Documents looked up by id: :class:`Documents`, what every source of documents gives."""

from __future__ import annotations

from collections.abc import Iterator


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


def joined(title: str | None, text: str | None) -> str:
    """A document's text: its title and its body, joined by a space (either may be missing)."""
    return " ".join(part for part in (title, text) if part)
