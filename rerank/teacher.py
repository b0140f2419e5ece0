"""Teacher scores without training: a sentence-transformers bi-encoder over a run's candidates.

A bi-encoder embeds queries and documents separately and scores a pair by the cosine of the two embeddings, as
it was trained to (``sentence-transformers/all-MiniLM-L6-v2``: mean pooling, normalised). Used zero-shot it is a
re-ranker in its own right (on Cranfield it beats BM25: ``docs/results.md``), and its scores over every
candidate are soft targets a cross-encoder can learn from (:mod:`rerank.losses.distillation`). Any run with
scores can be a teacher (a bigger cross-encoder's from ``rerank predict``, an LLM ranking); this module makes one
from a bi-encoder (``rerank teacher``).

    >>> teacher = bi_encoder_scores(run, collection.queries, collection.documents,  # doctest: +SKIP
    ...                             "sentence-transformers/all-MiniLM-L6-v2")
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from .data.collection import Documents
from .data.trec import Run

logger = logging.getLogger(__name__)

DEFAULT_BI_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"


def bi_encoder_scores(run: Mapping[str, Mapping[str, float]], queries: Mapping[str, str], documents: Documents,
                      model_name: str = DEFAULT_BI_ENCODER, max_length: int = 256, batch_size: int = 64,
                      device: str | None = None) -> Run:
    """The cosine similarity of each (query, candidate) pair of ``run`` under the bi-encoder ``model_name``.

    Every distinct candidate is embedded once (texts cut at ``max_length`` tokens), every query once.

    Raises:
        OSError: the model is neither a local folder nor in the Hugging Face cache, with where to look.
    """
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(model_name, device=device or "cpu")
    except OSError as error:
        raise OSError(f"bi-encoder {model_name!r} not found: give a local folder, or a hub id present in the Hugging "
                      f"Face cache (HF_HOME; HF_HUB_OFFLINE=1 when offline). Cause: {error}") from None
    model.max_seq_length = max_length
    doc_ids = sorted({doc for docs in run.values() for doc in docs})
    query_ids = sorted(run)
    logger.info("bi-encoder %s: embedding %d documents and %d queries", model_name, len(doc_ids), len(query_ids))
    embedded = model.encode([documents.text(doc) for doc in doc_ids], batch_size=batch_size,
                            normalize_embeddings=True, convert_to_tensor=True, show_progress_bar=True)
    by_doc = dict(zip(doc_ids, embedded))
    by_query = dict(zip(query_ids, model.encode([queries[qid] for qid in query_ids], batch_size=batch_size,
                                                normalize_embeddings=True, convert_to_tensor=True)))
    return {qid: {doc: float(by_query[qid] @ by_doc[doc]) for doc in docs} for qid, docs in run.items()}
