"""Rows sized to the collection: ``model.tokenization.max_length: auto`` and ``max_query_length: auto``, resolved
once, before any work, where the tokenizer is (:func:`size_tokenization`; the commands that train or score call it).

The rule (:func:`sized`), in tokens without the special ones:

- the query budget: the collection's longest query, at most half a row (of a given ``max_length``; of the cap when
  the row is ``auto``), so that no query is cut unless one would take more than that (:func:`cut_queries` says how
  many a budget cuts, and by how much);
- the row: that budget, plus what the teacher reads of 9 in 10 of the documents (their 90th percentile length, at
  most the teacher's own row, ``teacher.max_length``), plus the 3 special tokens, rounded up to a multiple of 32 and
  kept within 64 and the cap: the student reads about what its teacher reads, at a cost per step that the cap
  bounds. The cap (``max_length_cap: auto``) is 256 tokens, or 384 where the collection's queries are paragraphs (a
  median above 24 words), whose budget then holds 192 tokens of them. Documents' lengths are those of the
  collection's first ``SAMPLE`` documents.

A model that rerank exported keeps the lengths it was trained with (its ``config.json``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Sequence
from itertools import islice

from ..config.tokenization import MIN_LENGTH, TokenizationConfig
from ..core.checks import AUTO
from ..data.documents import Documents
from ..data.pseudo_queries import are_paragraphs
from .cross_encoder import exported_tokenization, load_tokenizer
from .tokenization import head

logger = logging.getLogger(__name__)

SAMPLE = 2000
"""How many documents (the collection's first) measure its document lengths."""
PERCENTILE = 0.9
"""The share of documents an ``auto`` row reads whole (up to the teacher's row and the cap)."""
SPECIAL_TOKENS = 3
"""``[CLS] query [SEP] document [SEP]``."""


def sized(tokenization: TokenizationConfig, query_lengths: Sequence[int], document_lengths: Sequence[int] = (),
          teacher_reads: int | None = None, paragraphs: bool = False) -> TokenizationConfig:
    """``tokenization`` with its ``auto`` values resolved from the collection's texts' lengths (numbers are kept):
    the rule of the module docstring; ``teacher_reads``: what the teacher reads of a document (None: no cap);
    ``paragraphs``: whether the queries are paragraphs (the cap of an ``auto`` one)."""
    if tokenization.resolved:
        return tokenization
    budget = tokenization.max_query_length
    cap = tokenization.cap(paragraphs)
    row = cap if tokenization.sizes_rows else tokenization.max_length
    query = min(max(query_lengths, default=1) if budget == AUTO else budget, row // 2)
    if tokenization.sizes_rows:
        document = percentile(document_lengths, PERCENTILE)
        document = min(document, teacher_reads) if teacher_reads is not None else document
        row = min(row, max(MIN_LENGTH, -(-(query + document + SPECIAL_TOKENS) // 32) * 32))
    if budget == AUTO:  # the longest query, at most half a row (of the cap, for a row sized here)
        budget = max(min(query, row - SPECIAL_TOKENS - 1), 1)
    return dataclasses.replace(tokenization, max_length=row, max_query_length=budget, max_length_cap=cap)


def size_tokenization(tokenization: TokenizationConfig, name_or_path: str, queries: Iterable[str],
                      documents: Documents | None, where: str, teacher_reads: int | None = None) -> TokenizationConfig:
    """``tokenization`` with its ``auto`` values resolved, and logged in one line: for a model exported by rerank,
    the lengths it was trained with; else from the texts of the collection named ``where`` (:func:`sized`)."""
    if tokenization.resolved:
        return tokenization
    saved = exported_tokenization(name_or_path)
    if saved is not None:
        kept = dataclasses.replace(tokenization, max_length=saved.max_length,
                                   max_query_length=saved.max_query_length)
        logger.info("model.tokenization auto: rows of %d tokens, queries up to %d, as %s was trained with",
                    kept.max_length, kept.max_query_length, name_or_path)
        return sized(kept, [])
    tokenizer = load_tokenizer(name_or_path)
    texts = list(queries)
    lengths = query_lengths(tokenizer, texts)
    paragraphs = are_paragraphs([len(text.split()) for text in texts])
    document_lengths: list[int] = []
    if tokenization.sizes_rows and documents is not None:
        documents_read = [head(text, 2 * tokenization.cap(paragraphs))
                          for _, text in islice(documents.iter_texts(), SAMPLE)]
        document_lengths = query_lengths(tokenizer, documents_read)
    result = sized(tokenization, lengths, document_lengths, teacher_reads, paragraphs)
    read = percentile(document_lengths, PERCENTILE)
    logger.info("model.tokenization auto: rows of %d tokens (max_length %s), queries up to %d (the longest of the %d "
                "of %s has %d)%s", result.max_length, tokenization.max_length, result.max_query_length, len(lengths),
                where, max(lengths, default=0),
                f"; documents: 9 in 10 of {len(document_lengths)} have at most {read} tokens, the teacher reads "
                f"{teacher_reads if teacher_reads is not None else 'them whole'}, the cap is "
                f"{result.max_length_cap}{cap_reason(tokenization, paragraphs)}" if tokenization.sizes_rows else "")
    return result


def cap_reason(tokenization: TokenizationConfig, paragraphs: bool) -> str:
    """Why an ``auto`` cap is what it is, for the sizing line ('' for a cap given as a number)."""
    if tokenization.max_length_cap != AUTO:
        return ""
    return " (auto: the queries are paragraphs)" if paragraphs else " (auto)"


def percentile(values: Sequence[int], fraction: float) -> int:
    """The smallest value that at least ``fraction`` of ``values`` do not exceed (0 without values)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def query_lengths(tokenizer: object, texts: Sequence[str], batch: int = 4096) -> list[int]:
    """Each text's length in tokens (without special tokens), tokenized in batches."""
    lengths: list[int] = []
    for start in range(0, len(texts), batch):
        encoded = tokenizer(list(texts[start: start + batch]), add_special_tokens=False, verbose=False)["input_ids"]
        lengths += [len(ids) for ids in encoded]
    return lengths


def cut_queries(lengths: Sequence[int], budget: int, where: str) -> str | None:
    """A warning naming how many of the queries of ``where`` a query budget of ``budget`` tokens cuts and by how
    much, or None when it cuts none."""
    cuts = [length - budget for length in lengths if length > budget]
    if not cuts:
        return None
    return (f"{where}: {len(cuts)} of {len(lengths)} queries are longer than model.tokenization.max_query_length "
            f"({budget} tokens) and are cut, by {min(cuts)} to {max(cuts)} tokens (mean {sum(cuts) / len(cuts):.1f}): "
            "the cross-encoder does not read those words; raise model.tokenization.max_length (max_length_cap "
            "when it is auto) to keep them (max_query_length: auto gives queries up to half of it)")
