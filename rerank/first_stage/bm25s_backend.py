"""Embedded BM25 (``bm25s``, Lucene's scoring variant) with English stop words and Snowball stemming."""

from __future__ import annotations

import json
import logging

import bm25s
import Stemmer

from ..config.first_stage import FirstStageConfig
from ..core.atomic import atomic_directory
from ..core.cache import intact, sealing
from ..data.collection import Collection
from ..data.trec import Run, top_k

logger = logging.getLogger(__name__)
IDS = "doc_ids.json"
"""The document id of each row of the index (JSON, not a pickle: reading a cache never runs code)."""


def _tokenize(texts: list[str], stemmer: Stemmer.Stemmer, progress: bool) -> bm25s.tokenization.Tokenized:
    return bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=progress)


def search(collection: Collection, queries: dict[str, str], config: FirstStageConfig) -> Run:
    """Top ``retrieval_depth`` documents per query by bm25s; the index is cached beside pyserini's."""
    stemmer = Stemmer.Stemmer("english")
    documents = collection.documents
    cache = config.cache_root / f"bm25s-{documents.source()}-{documents.fingerprint()}-{config.k1}-{config.b}"
    if not intact(cache, "bm25s index"):
        doc_ids, texts = [], []
        for doc_id, text in documents.iter_texts():
            doc_ids.append(doc_id)
            texts.append(text)
        retriever = bm25s.BM25(k1=config.k1, b=config.b, method="lucene")
        retriever.index(_tokenize(texts, stemmer, progress=True), show_progress=True)
        with atomic_directory(cache, replace=False, finish=sealing(cache)) as staging:  # two builders: one index
            retriever.save(str(staging))
            (staging / IDS).write_text(json.dumps(doc_ids), encoding="utf-8")
    retriever = bm25s.BM25.load(str(cache))
    doc_ids = json.loads((cache / IDS).read_text(encoding="utf-8"))
    qids = list(queries)
    tokens = _tokenize([queries[qid] for qid in qids], stemmer, progress=False)
    depth = min(config.retrieval_depth, len(doc_ids))
    rows, scores = retriever.retrieve(tokens, k=depth, n_threads=config.threads or -1, show_progress=True)
    run: Run = {qid: {doc_ids[i]: float(s) for i, s in zip(row, row_scores) if s > 0}
                for qid, row, row_scores in zip(qids, rows, scores)}
    return top_k(run, config.retrieval_depth)
