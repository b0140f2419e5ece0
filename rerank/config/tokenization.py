"""How (query, document) pairs become rows: :class:`TokenizationConfig` (``model.tokenization`` in the YAML), part
of a model and kept with its export. The tokenizer that applies it is :mod:`rerank.model.tokenization`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..core.checks import AUTO, check_range

PASSAGE_MODES = ("first", "maxp")
MIN_LENGTH = 64
"""The shortest row that ``max_length: auto`` gives (:mod:`rerank.model.sizing`), and the smallest cap."""


CAP = 256
"""``max_length_cap: auto`` where the queries are titles or sentences: about what the teacher (a bi-encoder of 256
tokens) reads of a document, at a step's cost that stays in proportion."""
PARAGRAPH_CAP = 384
"""``max_length_cap: auto`` where the collection's queries are paragraphs (a median above 24 words,
:func:`rerank.data.pseudo_queries.are_paragraphs`): a query budget of up to 192 tokens, so that the student reads
the queries (nearly) whole, as its teacher does, at about 1.5 times a step's cost (the evidence:
docs/experiments/paragraph-rows.md)."""


@dataclass(frozen=True)
class TokenizationConfig:
    """How (query, document) pairs become rows: part of a model, kept with its export (``config.json``).

    Attributes:
        max_length: tokens per row, special tokens included; ``auto``: sized from the collection
            (:func:`rerank.model.sizing.sized`): the query budget, plus what the teacher reads of 9 in 10 of its
            documents (their 90th percentile in tokens, at most the teacher's row), rounded up to a multiple of 32,
            within 64 and the cap.
        max_query_length: cap on query tokens (the document gets the rest of the row); ``auto``: the longest query
            of the collection, at most half a row (:func:`rerank.model.sizing.sized`).
        max_length_cap: the most an ``auto`` row may have (a step costs about in proportion to the row); ``auto``:
            ``PARAGRAPH_CAP`` where the collection's queries are paragraphs, else ``CAP`` (:meth:`cap`).
        passages: ``first`` (truncate the document) or ``maxp`` (overlapping passages, max-pooled).
        stride: overlap between consecutive passages, in tokens (``maxp``).
        max_passages: passages kept per document (``maxp``), from its start.
    """

    max_length: int | Literal["auto"] = 512
    max_query_length: int | Literal["auto"] = 64
    passages: str = "first"
    stride: int = 64
    max_passages: int = 4
    max_length_cap: int | Literal["auto"] = AUTO

    def __post_init__(self) -> None:
        if self.passages not in PASSAGE_MODES:
            raise ValueError(f"passages must be one of {', '.join(PASSAGE_MODES)}; got {self.passages!r}")
        if self.max_length_cap != AUTO:
            check_range("max_length_cap", self.max_length_cap, MIN_LENGTH)
        length = self.cap(paragraphs=True) if self.max_length == AUTO else self.max_length
        if not isinstance(length, int) or length < 8:
            raise ValueError(f"max_length must be auto or a number of tokens >= 8; got {self.max_length!r}")
        query = length // 2 if self.max_query_length == AUTO else self.max_query_length
        if not isinstance(query, int) or not 0 < query < length - 3:
            raise ValueError(f"max_query_length must be auto or lie in 1..max_length-4; got {self.max_query_length!r}"
                             f" with max_length {self.max_length}")
        if self.passages == "maxp" and not 0 <= self.stride < length - query - 3:
            raise ValueError(f"stride must be smaller than the passage length; got {self.stride}")
        check_range("max_passages", self.max_passages, 1)

    def cap(self, paragraphs: bool) -> int:
        """The most an ``auto`` row may have: ``max_length_cap`` when it is a number; for ``auto``,
        ``PARAGRAPH_CAP`` where the queries are paragraphs (``paragraphs``), else ``CAP``."""
        if self.max_length_cap != AUTO:
            return self.max_length_cap
        return PARAGRAPH_CAP if paragraphs else CAP

    @property
    def resolved(self) -> bool:
        """Whether the row and the query budget are numbers (``auto`` is sized first: rerank.model.sizing)."""
        return AUTO not in (self.max_length, self.max_query_length)

    @property
    def sizes_rows(self) -> bool:
        """Whether the row length is ``auto`` (sized from the documents as well as the queries)."""
        return self.max_length == AUTO

    def check_resolved(self) -> TokenizationConfig:
        """This tokenization, or a ValueError when its row or query budget is still ``auto``."""
        if not self.resolved:
            raise ValueError("model.tokenization.max_length and max_query_length auto must be sized from a "
                             "collection first (rerank.model.sizing; rerank fit and predict do it): give numbers here")
        return self
