"""Tokenization of (query, document) pairs for the cross-encoder: ``[CLS] query [SEP] document [SEP]``.

Queries are cut to ``max_query_length`` tokens, documents fill the rest of ``max_length``. Long documents are
either truncated to their first passage (default) or split into overlapping passages (``passages: maxp``,
Dai and Callan, SIGIR 2019): windows of ``max_length`` tokens overlapping by ``stride`` tokens, at most
``max_passages`` per document, whose scores are max-pooled into the document's score
(``passage_to_pair`` maps each row to its pair). Batches are padded to their longest row only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

PASSAGE_MODES = ("first", "maxp")


@dataclass
class PairTokenizer:
    """Turns lists of queries and documents into model inputs (used inside DataLoader workers).

    Attributes:
        tokenizer: a Hugging Face (fast) tokenizer.
        max_length: tokens per row, special tokens included.
        max_query_length: cap on query tokens.
        passages: ``first`` (truncate the document) or ``maxp`` (overlapping passages, max-pooled).
        stride: overlap between consecutive passages, in tokens (``maxp``).
        max_passages: passages kept per document (``maxp``), from its start.
    """

    tokenizer: object
    max_length: int = 512
    max_query_length: int = 64
    passages: str = "first"
    stride: int = 64
    max_passages: int = 4

    def __post_init__(self) -> None:
        if self.passages not in PASSAGE_MODES:
            raise ValueError(f"passages must be one of {', '.join(PASSAGE_MODES)}; got {self.passages!r}")
        if not 0 < self.max_query_length < self.max_length - 3:
            raise ValueError(f"max_query_length must lie in 1..max_length-4; got {self.max_query_length} "
                             f"with max_length {self.max_length}")
        if self.passages == "maxp" and not 0 <= self.stride < self.max_length - self.max_query_length - 3:
            raise ValueError(f"stride must be smaller than the passage length; got {self.stride}")

    def truncate_queries(self, queries: list[str]) -> list[str]:
        """Each query cut after its ``max_query_length``-th token (at the token's end in the text)."""
        encoded = self.tokenizer(queries, add_special_tokens=False, truncation=True,
                                 max_length=self.max_query_length, return_offsets_mapping=True)
        return [query[: offsets[-1][1]] if offsets else query
                for query, offsets in zip(queries, encoded["offset_mapping"])]

    def encode(self, queries: list[str], documents: list[str]) -> tuple[dict[str, list], list[int]]:
        """Unpadded rows (``input_ids``, ...) and, for each row, the index of its (query, document) pair."""
        maxp = self.passages == "maxp"
        encoded = self.tokenizer(self.truncate_queries(queries), documents, truncation="only_second",
                                 max_length=self.max_length, stride=self.stride if maxp else 0,
                                 return_overflowing_tokens=maxp)
        rows = {key: value for key, value in encoded.items() if key != "overflow_to_sample_mapping"}
        if not maxp:
            return rows, list(range(len(documents)))
        pair_of_row = encoded["overflow_to_sample_mapping"]
        keep = [row for row, pair in enumerate(pair_of_row)
                if row < self.max_passages or pair_of_row[row - self.max_passages] != pair]
        return {key: [value[row] for row in keep] for key, value in rows.items()}, [pair_of_row[row] for row in keep]

    def pad(self, rows: dict[str, list]) -> dict[str, Tensor]:
        """Rows padded to the longest one, as tensors."""
        return dict(self.tokenizer.pad(rows, return_tensors="pt"))

    def __call__(self, queries: list[str], documents: list[str]) -> dict[str, Tensor]:
        """Padded ``input_ids``, ``attention_mask`` (and ``token_type_ids``), plus ``passage_to_pair`` for MaxP."""
        rows, pair_of_row = self.encode(queries, documents)
        batch = self.pad(rows)
        if self.passages == "maxp":
            batch["passage_to_pair"] = torch.tensor(pair_of_row)
        return batch
