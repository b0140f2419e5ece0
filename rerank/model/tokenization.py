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

import torch
from torch import Tensor

from ..config.tokenization import TokenizationConfig
from ..data.pinning import Pinnable


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
    config: TokenizationConfig = TokenizationConfig()  # noqa: RUF009 (frozen)

    def __post_init__(self) -> None:
        self.config.check_resolved()

    def truncate_queries(self, queries: list[str]) -> list[str]:
        """Each query cut after its ``max_query_length``-th token (at the token's end in the text). Each distinct
        query is tokenized once, from its head (:func:`head`), so that the cost grows with neither the number of a
        query's pairs nor the length of its text."""
        distinct = list(dict.fromkeys(queries))
        heads = [head(query, 2 * self.config.max_query_length) for query in distinct]
        encoded = self.tokenizer(heads, add_special_tokens=False, truncation=True,
                                 max_length=self.config.max_query_length, return_offsets_mapping=True)
        cut = {query: text[: offsets[-1][1]] if offsets else text
               for query, text, offsets in zip(distinct, heads, encoded["offset_mapping"])}
        return [cut[query] for query in queries]

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
