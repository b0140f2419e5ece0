"""The deployed ranker as a PyTerrier transformer: ``first_stage >> RerankTransformer.from_pretrained(folder)``.

PyTerrier (``pip install "rerank-lightning[pyterrier]"``) is how IR researchers compose and compare pipelines:
``pt.Experiment([bm25, bm25 >> reranker], topics, qrels, eval_metrics=[nDCG@10, RR@10], baseline=0,
correction="bonferroni")``. :class:`RerankTransformer` takes PyTerrier's frame of candidates (``qid``, ``query``,
``docno``, the document's ``text`` and its first-stage ``score``) and returns PyTerrier's ranked frame: the same rows
scored by the export's deployed ranker (:class:`~rerank.inference.reranker.Reranker`; the first-stage scores it mixes
are the input's ``score``), best first within each query, ``rank`` from 0. Its scores are those of ``rerank predict``
and ``Reranker.rerank_many`` on the same candidates.

    >>> import pyterrier as pt  # doctest: +SKIP
    >>> from rerank import RerankTransformer  # doctest: +SKIP
    >>> reranker = RerankTransformer.from_pretrained("runs/x/model")  # doctest: +SKIP
    >>> pipeline = bm25 >> pt.text.get_text(dataset, "text") >> reranker  # doctest: +SKIP
    >>> pt.Experiment([bm25, pipeline], topics, qrels, eval_metrics=[pt.measures.nDCG @ 10])  # doctest: +SKIP

The first stage may be PyTerrier's own BM25 (which needs its Java parts) or any frame of candidates, such as
rerank's own BM25 run read with ``pt.io.read_results`` and given its texts.
"""

from __future__ import annotations

from typing import Any

import pyterrier as pt

from .reranker import Reranker

COLUMNS = ("qid", "query", "docno")
"""What every input frame needs, beside the text column."""


class RerankTransformer(pt.Transformer):
    """Re-ranks PyTerrier's candidates with a :class:`~rerank.inference.reranker.Reranker` (the export's deployed
    ranker).

    Args:
        reranker: the ranker.
        text_field: the input column that holds each document's text.
    """

    def __init__(self, reranker: Reranker, text_field: str = "text") -> None:
        self.reranker, self.text_field = reranker, text_field

    @classmethod
    def from_pretrained(cls, name_or_path: str, text_field: str = "text", **options: Any) -> RerankTransformer:
        """Over ``Reranker.from_pretrained(name_or_path, **options)`` (``ranker="reranker"`` for the pure
        cross-encoder)."""
        return cls(Reranker.from_pretrained(name_or_path, **options), text_field)

    def transform(self, inp: Any) -> Any:
        """``inp``'s rows with ``score`` the deployed ranker's and ``rank`` recomputed, best first per query.

        Raises:
            ValueError: a column is missing (the text, or the first stage's ``score`` where the ranker mixes it).
        """
        missing = [column for column in (*COLUMNS, self.text_field) if column not in inp.columns]
        if self.reranker.deployment.needs_first_stage and "score" not in inp.columns:
            missing.append("score")
        if missing:
            raise ValueError(f"RerankTransformer: the input frame has no {', '.join(missing)} column (it has "
                             f"{', '.join(inp.columns)}); put pt.text.get_text(dataset, {self.text_field!r}) before "
                             "it for the documents' texts")
        if inp.empty:
            return pt.model.add_ranks(inp.assign(score=[]))
        queries = dict(zip(inp["qid"], inp["query"]))
        candidates: dict[str, dict[str, str]] = {}
        for qid, docno, text in zip(inp["qid"], inp["docno"], inp[self.text_field]):
            candidates.setdefault(qid, {})[docno] = text
        first_stage = None
        if self.reranker.deployment.needs_first_stage:
            first_stage = {}
            for qid, docno, score in zip(inp["qid"], inp["docno"], inp["score"]):
                first_stage.setdefault(qid, {})[docno] = float(score)
        run = self.reranker.rerank_many(queries, candidates, first_stage)
        scored = inp.assign(score=[run[qid][docno] for qid, docno in zip(inp["qid"], inp["docno"])])
        return pt.model.add_ranks(scored).sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)

    def __repr__(self) -> str:
        return f"RerankTransformer({self.reranker.deployment.describe()})"
