"""Training sources: where training lists come from, what they learn from, and in which proportions.

``data.train`` lists the sources (default: one, the training folds' queries of ``data.collection`` with their
qrels, i.e. plain fine-tuning)::

    data:
      train:
        - queries: pseudo                     # titles as queries (rerank.data.pseudo_queries); no judgments
          pseudo: {count: 1000}
          targets: teacher                    # learn the teacher's scores over the candidates
          teacher: {bi_encoder: sentence-transformers/all-MiniLM-L6-v2}
          weight: 1
        - queries: train                      # data.folds' training queries
          targets: both                       # their qrels, and the teacher's scores (model.teacher_weight)
          teacher: {bi_encoder: sentence-transformers/all-MiniLM-L6-v2}
          weight: 1
        - collection: {ir_datasets: beir/nfcorpus/train}   # another collection (transfer)
          queries: all
          targets: qrels
        - queries: train                      # the training folds' queries, learnt from a click log
          targets: clicks                     # (rerank.clicks.targets; trained by model.click_loss)
          clicks: {log: logs/clicks.jsonl, estimator: ips, eta: 2}

Each source has a collection (default ``data.collection``), candidates from a first stage (default
``data.first_stage`` for ``data.collection``, else BM25 with the defaults; ``backend: run`` reads a run file),
queries (``train``: the training folds of ``data.collection``; ``all``: every judged query of the collection, or
every query for ``targets: teacher``; ``pseudo``), targets (``qrels``: judgments, which for pseudo-queries are
their source documents; ``teacher``; ``both``; ``clicks``: a click log's naive or debiased targets, over the
documents it shows, :mod:`rerank.clicks.targets`) and a mixing ``weight``: an epoch draws from each source its share
``weight / sum(weights)`` of all the lists (:class:`~rerank.training.lists.TrainingSampler`). Candidates of
sources other than data.collection's own queries, and teacher scores, are cached (``$RERANK_CACHE``): they do
not depend on the fold.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass

from ..clicks.targets import click_targets
from ..config.source import SourceConfig
from ..data.candidates import CandidateLists, read_candidates
from ..data.collection import Collection
from ..data.pseudo_queries import pseudo_queries
from ..data.trec import Qrels
from ..first_stage import FirstStageConfig, cached_run
from ..teacher.scores import teacher_scores
from .lists import TrainingSource, trainable

logger = logging.getLogger(__name__)

@dataclass
class SourceContext:
    """What sources default to: the data module's collection, first stage, its run, training queries and depth."""

    collection: Collection
    first_stage: FirstStageConfig
    first_stage_run: CandidateLists | None
    train_query_ids: list[str] | None
    rerank_depth: int
    strategy: str


def resolve(config: SourceConfig, where: str, context: SourceContext) -> TrainingSource:
    """The training lists of one source (retrieving, drawing pseudo-queries and scoring teachers as needed, from
    the caches when they were made before).

    Raises:
        ValueError: the source has no usable query (named by ``where``), or its teacher run misses queries.
    """
    collection = context.collection if config.collection is None else Collection(config.collection)
    name = config.name or f"{where} ({config.queries})"
    queries, qrels = _queries_and_qrels(config, collection, context, where)
    query_ids = _sample(sorted(queries), config)
    if config.targets == "clicks":
        return _click_source(config, collection, queries, query_ids, name, where)
    labels = qrels if config.targets != "teacher" else {}
    lists = _candidates(config, collection, queries, query_ids, context).select(query_ids, context.rerank_depth,
                                                                                 queries, labels)
    if config.queries == "pseudo":
        run = lists.as_run()
        if config.pseudo.spans and config.targets == "teacher":  # a span is its document's words: not a candidate
            run = {qid: _without(run.get(qid, {}), qrels[qid]) for qid in query_ids}
        else:
            run = {qid: _with_source(run.get(qid, {}), qrels[qid], context.rerank_depth) for qid in query_ids}
        lists = CandidateLists.from_run(run, queries, labels, query_ids, context.rerank_depth)
    if config.teacher is not None and config.targets != "qrels":
        lists = lists.with_teacher(teacher_scores(config.teacher, lists.as_run(), queries, collection.documents))
    strategy = context.strategy if config.targets != "teacher" else "sample"
    usable = lists.keep([trainable(c, strategy) for c in lists])
    if not usable:
        raise ValueError(f"{where}: none of its {len(query_ids)} queries can be trained on (no candidates, no "
                         f"relevant candidate in the top {context.rerank_depth} for qrels targets, or teacher scores "
                         "that are all equal)")
    if len(usable) < len(lists) or len(lists) < len(query_ids):
        logger.info("%s: %d of %d queries are trained on (the others have no candidates, no relevant one in the "
                    "top %d, or no contrast)", name, len(usable), len(query_ids), context.rerank_depth)
    return TrainingSource(name=name, lists=usable, documents=collection.documents, weight=config.weight,
                          strategy=strategy)


def _click_source(config: SourceConfig, collection: Collection, queries: Mapping[str, str], query_ids: list[str],
                  name: str, where: str) -> TrainingSource:
    """Lists over the documents that the log shows for each query of ``query_ids``, in the order of the ranks they
    were first shown at (as first-stage scores ``-rank``), with its click targets as teacher scores. A query or
    document of the log that the collection lacks fails, naming the log's line; the collection's other queries (a
    test fold's, say) are left out, and the log says how many."""
    targets, ranks = click_targets(config.clicks, collection.queries.keys(), collection.documents.__contains__)
    kept = [qid for qid in query_ids if qid in targets]
    if len(kept) < len(targets):
        logger.info("%s: the click log's impressions of %d queries outside this source's %d are left out", name,
                    len(targets) - len(kept), len(query_ids))
    shown = {qid: {doc: -float(rank) for doc, rank in ranks[qid].items()} for qid in kept}
    lists = CandidateLists.from_run(shown, queries, {}, kept).with_teacher(targets)
    usable = lists.keep([trainable(c, "sample") for c in lists])
    if not usable:
        raise ValueError(f"{where}: the click log {config.clicks.log} has no click on the {len(query_ids)} queries")
    logger.info("%s: %d of %d queries have clicks in %s", name, len(usable), len(query_ids), config.clicks.log)
    return TrainingSource(name=name, lists=usable, documents=collection.documents, weight=config.weight,
                          strategy="sample", clicks=True)


def _queries_and_qrels(config: SourceConfig, collection: Collection, context: SourceContext,
                       where: str) -> tuple[dict[str, str], Qrels]:
    if config.queries == "pseudo":
        drawn = pseudo_queries(collection.documents, config.pseudo)
        return {q.query_id: q.text for q in drawn}, {q.query_id: {q.doc_id: 1} for q in drawn}
    if config.queries == "train":
        qrels = collection.qrels
        return {qid: collection.queries[qid] for qid in context.train_query_ids}, qrels
    qrels = collection.qrels if config.targets in ("qrels", "both") or collection.has_qrels else {}
    if config.targets in ("teacher", "clicks"):
        return dict(collection.queries), qrels
    judged = {qid: text for qid, text in collection.queries.items() if qid in qrels}
    if not judged:
        raise ValueError(f"{where}: {collection.name} has no judged query for qrels targets")
    return judged, qrels


def _sample(query_ids: list[str], config: SourceConfig) -> list[str]:
    if config.max_queries is None or len(query_ids) <= config.max_queries:
        return query_ids
    return sorted(random.Random(config.seed).sample(query_ids, config.max_queries))


def _candidates(config: SourceConfig, collection: Collection, queries: Mapping[str, str], query_ids: list[str],
                context: SourceContext) -> CandidateLists:
    """The source's first-stage run: data.collection's own run for its real queries, else retrieved (cached)."""
    if config.collection is None and config.first_stage is None and config.queries != "pseudo":
        return context.first_stage_run
    first_stage = config.first_stage or (context.first_stage if config.collection is None else FirstStageConfig())
    if first_stage.backend == "run" and config.queries == "pseudo":
        raise ValueError("pseudo-queries need a BM25 first stage (pyserini or bm25s), not a run file")
    depth = min(first_stage.retrieval_depth, context.rerank_depth)  # what training lists are drawn from
    return source_run(collection, dataclasses.replace(first_stage, retrieval_depth=depth),
                      {qid: queries[qid] for qid in query_ids})


def source_run(collection: Collection, first_stage: FirstStageConfig, queries: Mapping[str, str]) -> CandidateLists:
    """The first-stage run of ``queries`` on ``collection`` (:func:`~rerank.first_stage.cached_run`)."""
    return read_candidates(cached_run(collection, first_stage, queries))


def _without(candidates: dict[str, float], relevant: Mapping[str, int]) -> dict[str, float]:
    """A pseudo-query's candidates without its source document."""
    return {doc: score for doc, score in candidates.items() if doc not in relevant}


def _with_source(candidates: dict[str, float], relevant: Mapping[str, int], depth: int) -> dict[str, float]:
    """A pseudo-query's candidates with its source document among them (in place of the last when it is not)."""
    (source,) = relevant
    if source in candidates:
        return candidates
    kept = dict(list(candidates.items())[: depth - 1])
    kept[source] = min(candidates.values(), default=0.0)
    return kept

