"""Untrained reference orderings of a first-stage run's top k, to read trained re-rankers against (docs/results.md).

- ``first stage``: the run itself, cut at ``--depth``;
- ``random``: the same candidates shuffled (mean over ``--seeds`` shuffles): what a re-ranker that learned
  nothing scores;
- ``bi-encoder``: a sentence-transformers model used as it was trained (cosine of mean-pooled embeddings),
  zero-shot: what the encoder knows before any cross-encoder training.

    HF_HOME=../shared/hf_home HF_HUB_OFFLINE=1 python scripts/reference_rankings.py \\
        --run runs/cranfield-cv/bm25/run.trec --collection cranfield --depth 20
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rerank.data.collection import Collection
from rerank.data.trec import Run, read_run
from rerank.evaluation import evaluate
from rerank.rerank import collection_config, top

MEASURES = ("nDCG@10", "nDCG@20", "MAP")


def shuffled(run: Run, seed: int) -> Run:
    generator = random.Random(seed)
    return {qid: {doc: generator.random() for doc in docs} for qid, docs in run.items()}


def bi_encoder(run: Run, collection: Collection, model_name: str, max_length: int) -> Run:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_name, device="cpu")
    model.max_seq_length = max_length
    doc_ids = sorted({doc for docs in run.values() for doc in docs})
    texts = [collection.documents.text(doc) for doc in doc_ids]
    documents = dict(zip(doc_ids, model.encode(texts, batch_size=64, normalize_embeddings=True,
                                               convert_to_tensor=True, show_progress_bar=True)))
    query_ids = sorted(run)
    queries = dict(zip(query_ids, model.encode([collection.queries[qid] for qid in query_ids],
                                               normalize_embeddings=True, convert_to_tensor=True)))
    return {qid: {doc: float(queries[qid] @ documents[doc]) for doc in docs} for qid, docs in run.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="the first-stage TREC run")
    parser.add_argument("--collection", required=True, help="a config with data.collection, or an ir_datasets id")
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=20, help="random shuffles averaged")
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--max_length", type=int, default=128)
    args = parser.parse_args()
    collection = Collection(collection_config(args.collection))
    qrels = collection.qrels
    run = top(read_run(args.run, queries=collection.queries), args.depth)
    judged = {qid: qrels[qid] for qid in run if qid in qrels}
    rows = {"first stage": evaluate(run, judged, MEASURES).mean}
    shuffles = [evaluate(shuffled(run, seed), judged, MEASURES).mean for seed in range(args.seeds)]
    rows[f"random (mean of {args.seeds})"] = {m: statistics.fmean(s[m] for s in shuffles) for m in MEASURES}
    rows[f"bi-encoder {args.model.split('/')[-1]}"] = evaluate(
        bi_encoder(run, collection, args.model, args.max_length), judged, MEASURES).mean
    table = Table(title=f"{args.run}, top {args.depth}, {len(judged)} judged queries")
    table.add_column("ordering")
    for measure in MEASURES:
        table.add_column(measure, justify="right")
    for name, values in rows.items():
        table.add_row(name, *(f"{values[m]:.4f}" for m in MEASURES))
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
