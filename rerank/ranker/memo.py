"""The deployed ranker's teacher on new queries: a bi-encoder's cosines of query and document texts
(:func:`cosines_of_texts`), as a fit's teacher scores are (:func:`rerank.teacher.scores.bi_encoder_scores`), with a
memo of the document embeddings it has made (:class:`EmbeddingMemo`) that ``rerank serve`` keeps."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from ..core.checks import check_range
from ..data.trec import Run
from ..teacher.scores import COSINE_DECIMALS

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

REMEMBER = 10_000
"""The document embeddings :class:`rerank.inference.reranker.Reranker` keeps by default (about 15 MB for MiniLM)."""


class EmbeddingMemo:
    """The embeddings of the last ``size`` distinct document texts a bi-encoder embedded (least recently used out):
    a deployed ranker's teacher embeds a document it has seen before from memory (``rerank serve``)."""

    def __init__(self, size: int) -> None:
        check_range("size", size, 1)
        self.size = size
        self._kept: OrderedDict[str, torch.Tensor] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, text: str) -> torch.Tensor | None:
        embedding = self._kept.get(text)
        if embedding is not None:
            self._kept.move_to_end(text)
        return embedding

    def put(self, text: str, embedding: torch.Tensor) -> None:
        self._kept[text] = embedding
        self._kept.move_to_end(text)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)


def cosines_of_texts(model: SentenceTransformer, queries: Mapping[str, str],
                     candidates: Mapping[str, Mapping[str, str]], batch_size: int = 64,
                     memo: EmbeddingMemo | None = None) -> Run:
    """The bi-encoder ``model``'s cosine of each query with each of its candidates' texts (``{query id: {doc id:
    text}}``), rounded to :data:`COSINE_DECIMALS` as a fit's are (:func:`bi_encoder_scores`), as the
    deployed ranker's teacher scores new queries (:class:`rerank.inference.reranker.Reranker`). With ``memo``, a text
    embedded before is not embedded again (its cosine may differ from a fresh one's in float noise, below the
    rounding)."""
    texts = sorted({text for docs in candidates.values() for text in docs.values()})
    query_ids = list(candidates)

    def encode(items: list[str]) -> torch.Tensor:
        return model.encode(items, batch_size=batch_size, normalize_embeddings=True, convert_to_tensor=True).cpu()

    remembered = {text: memo.get(text) for text in texts} if memo is not None else {}
    fresh = [text for text in texts if remembered.get(text) is None]
    by_text = {text: embedding for text, embedding in remembered.items() if embedding is not None}
    by_text |= dict(zip(fresh, encode(fresh))) if fresh else {}
    if memo is not None:
        for text in fresh:
            memo.put(text, by_text[text])
    by_query = dict(zip(query_ids, encode([queries[qid] for qid in query_ids]))) if query_ids else {}
    return {qid: {doc: round(float(by_query[qid] @ by_text[text]), COSINE_DECIMALS) for doc, text in docs.items()}
            for qid, docs in candidates.items()}
