"""Tokenization of (query, document) pairs for the cross-encoder: ``[CLS] query [SEP] document [SEP]``.

Queries are cut to ``max_query_length`` tokens, documents fill the rest of ``max_length``: a short query leaves
its unused budget to the document. ``auto`` lengths are sized from the collection's texts before any work, once
(:mod:`rerank.model.sizing`). Long documents are
either truncated to their first passage (default) or split into overlapping passages (``passages: maxp``,
Dai and Callan, SIGIR 2019): windows of ``max_length`` tokens overlapping by ``stride`` tokens, at most
``max_passages`` per document, whose scores are max-pooled into the document's score
(``passage_to_pair`` maps each row to its pair). Batches are padded to their longest row only.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Literal

import torch
from torch import Tensor

from ..checks import AUTO, check_range
from ..data.pinning import Pinnable

PASSAGE_MODES = ("first", "maxp")
MIN_LENGTH = 64
"""The shortest row that ``max_length: auto`` gives (:mod:`rerank.model.sizing`), and the smallest cap."""


@dataclass
class PairInputs(Pinnable):
    """Tokenized (query, document) rows padded to the longest (``[rows, length]`` each); with MaxP passages,
    ``passage_to_pair[i]`` is the pair that row ``i`` belongs to."""

    input_ids: Tensor
    attention_mask: Tensor
    token_type_ids: Tensor | None = None
    passage_to_pair: Tensor | None = None

    @property
    def pairs(self) -> int:
        """How many (query, document) pairs the rows belong to."""
        if self.passage_to_pair is None:
            return self.input_ids.shape[0]
        return int(self.passage_to_pair[-1]) + 1 if len(self.passage_to_pair) else 0


CAP = 256
"""``max_length_cap: auto`` where the queries are titles or sentences: about what the teacher (a bi-encoder of 256
tokens) reads of a document, at a step's cost that stays in proportion."""
PARAGRAPH_CAP = 384
"""``max_length_cap: auto`` where the collection's queries are paragraphs (a median above 24 words,
:func:`rerank.data.pseudo_queries.are_paragraphs`): a query budget of up to 192 tokens, so that the student reads
the queries (nearly) whole, as its teacher does, at about 1.5 times a step's cost (adopted on 5 validation folds of
``long-queries``: +0.020 nDCG@10, docs/experiments/ablations.md, lever C)."""


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



def head(text: str, words: int) -> str:
    """``text`` up to its ``words``-th whitespace-separated word. Every word gives at least one token unless it is
    made only of characters that the tokenizer drops (controls, lone accents), so the head of ``2 * max_length *
    max_passages`` words (:meth:`PairTokenizer.encode`) gives the rows that the whole text gives, at a cost that does
    not grow with the document."""
    parts = text.split(None, words)
    return text if len(parts) <= words else text[: len(text) - len(parts[-1])]


@dataclass
class PairTokenizer:
    """Turns lists of queries and documents into model inputs (used inside DataLoader workers).

    Attributes:
        tokenizer: a Hugging Face (fast) tokenizer.
        config: lengths and passages.
    """

    tokenizer: object
    config: TokenizationConfig = TokenizationConfig()

    def __post_init__(self) -> None:
        self.config.check_resolved()

    def truncate_queries(self, queries: list[str]) -> list[str]:
        """Each query cut after its ``max_query_length``-th token (at the token's end in the text)."""
        encoded = self.tokenizer(queries, add_special_tokens=False, truncation=True,
                                 max_length=self.config.max_query_length, return_offsets_mapping=True)
        return [query[: offsets[-1][1]] if offsets else query
                for query, offsets in zip(queries, encoded["offset_mapping"])]

    def encode(self, queries: list[str], documents: list[str]) -> tuple[dict[str, list], list[int]]:
        """Unpadded rows (``input_ids``, ...) and, for each row, the index of its (query, document) pair.

        Each document is cut to its head (:func:`head`) before it is tokenized: the tokenizer would otherwise read a
        30,000-word document whole to keep its first rows."""
        config = self.config
        maxp = config.passages == "maxp"
        words = 2 * config.max_length * (config.max_passages if maxp else 1)
        documents = [head(document, words) for document in documents]
        encoded = self.tokenizer(self.truncate_queries(queries), documents, truncation="only_second",
                                 max_length=config.max_length, stride=config.stride if maxp else 0,
                                 return_overflowing_tokens=maxp)
        rows = {key: value for key, value in encoded.items() if key != "overflow_to_sample_mapping"}
        if not maxp:
            return rows, list(range(len(documents)))
        pair_of_row = encoded["overflow_to_sample_mapping"]
        keep = [row for row, pair in enumerate(pair_of_row)
                if row < config.max_passages or pair_of_row[row - config.max_passages] != pair]
        return {key: [value[row] for row in keep] for key, value in rows.items()}, [pair_of_row[row] for row in keep]

    def cut(self, query: str, documents: list[str]) -> tuple[bool, list[int]]:
        """Whether the rows cut ``query`` (longer than ``max_query_length``), and the indices of the ``documents``
        they cut: longer than what the row leaves them (``first``), or than ``max_passages`` passages hold
        (``maxp``; a passage starts ``stride`` tokens before the previous one's end)."""
        config = self.config
        words = 2 * config.max_length * (config.max_passages if config.passages == "maxp" else 1) + 1
        lengths = self.tokenizer([query, *(head(document, words) for document in documents)],
                                 add_special_tokens=False, verbose=False)["input_ids"]
        query_length, *document_lengths = map(len, lengths)
        window = config.max_length - min(query_length, config.max_query_length) - 3
        held = window if config.passages == "first" else window + (config.max_passages - 1) * (window - config.stride)
        return query_length > config.max_query_length, [i for i, n in enumerate(document_lengths) if n > held]

    def pad(self, rows: dict[str, list], pair_of_row: list[int] | None = None) -> PairInputs:
        """Unpadded rows (from :meth:`encode`) padded to the longest one, on the tokenizer's padding side and with
        its pad ids (what ``tokenizer.pad`` gives); ``pair_of_row`` (MaxP) becomes ``passage_to_pair``.

        One tensor op per key instead of ``tokenizer.pad``'s per-row Python: the token positions of the padded
        batch, in row-major order, are those of the rows concatenated. At 64 rows of ~300 tokens, 2.1 ms a batch
        instead of 5.5 on this project's CPU machine (row selection included): CPU time that a GPU waits for.
        """
        lengths = torch.tensor([len(ids) for ids in rows["input_ids"]], dtype=torch.long)
        width = int(lengths.max()) if len(lengths) else 0
        positions = torch.arange(width)
        if self.tokenizer.padding_side == "left":
            real = positions >= width - lengths[:, None]
        else:
            real = positions < lengths[:, None]

        def padded(key: str, fill: int) -> Tensor:
            tensor = torch.full(real.shape, fill, dtype=torch.long)
            tensor[real] = torch.tensor(list(chain.from_iterable(rows[key])), dtype=torch.long)
            return tensor

        return PairInputs(input_ids=padded("input_ids", self.tokenizer.pad_token_id), attention_mask=real.long(),
                          token_type_ids=(padded("token_type_ids", self.tokenizer.pad_token_type_id)
                                          if "token_type_ids" in rows else None),
                          passage_to_pair=None if pair_of_row is None else torch.tensor(pair_of_row))

    def __call__(self, queries: list[str], documents: list[str]) -> PairInputs:
        """The padded rows of the pairs (with ``passage_to_pair`` for MaxP)."""
        rows, pair_of_row = self.encode(queries, documents)
        return self.pad(rows, pair_of_row if self.config.passages == "maxp" else None)
