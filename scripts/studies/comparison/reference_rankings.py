"""Untrained reference orderings of a first-stage run's top k, to read trained re-rankers against
(docs/experiments/results.md).

- ``first stage``: the run itself, cut at ``--depth``;
- ``random``: the same candidates shuffled (mean over ``--seeds`` shuffles): what a re-ranker that learned
  nothing scores;
- ``bi-encoder``: a sentence-transformers model used as it was trained (cosine of mean-pooled embeddings),
  zero-shot: what the encoder knows before any cross-encoder training.

    HF_HOME=../shared/hf_home HF_HUB_OFFLINE=1 python scripts/studies/comparison/reference_rankings.py \\
        --run runs/cranfield-cv/bm25/first_stage.trec --config cranfield --depth 20

Options are parsed as by every rerank command (``--config`` names the collection, ``--data.collection.*``).
"""

from __future__ import annotations

import random
import statistics
import sys

from lightning.pytorch.cli import LightningArgumentParser
from rich.console import Console
from rich.table import Table

from rerank import (
    DEFAULT_BI_ENCODER,
    Collection,
    Run,
    as_collection_config,
    bi_encoder_scores,
    evaluate,
    from_config,
    read_run,
    top_k,
)

MEASURES = ("nDCG@10", "nDCG@20", "MAP")


def shuffled(run: Run, seed: int) -> Run:
    generator = random.Random(seed)
    return {qid: {doc: generator.random() for doc in docs} for qid, docs in run.items()}


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--run", type=str, required=True, help="the first-stage TREC run")
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=20, help="random shuffles averaged")
    parser.add_argument("--bi_encoder", type=str, default=DEFAULT_BI_ENCODER)
    parser.add_argument("--max_length", type=int, default=128)


def main() -> None:
    cli = from_config(sys.argv[1:], instantiate=False, options=_arguments, prog="reference_rankings.py",
                      description=__doc__.splitlines()[0])
    args = cli.config
    collection = Collection(as_collection_config(cli.option("data.collection"), "data.collection"))
    qrels = collection.qrels
    run = top_k(read_run(args.run, queries=collection.queries), args.depth)
    judged = {qid: qrels[qid] for qid in run if qid in qrels}
    rows = {"first stage": evaluate(run, judged, MEASURES).mean}
    shuffles = [evaluate(shuffled(run, seed), judged, MEASURES).mean for seed in range(args.seeds)]
    rows[f"random (mean of {args.seeds})"] = {m: statistics.fmean(s[m] for s in shuffles) for m in MEASURES}
    teacher = bi_encoder_scores(run, collection.queries, collection.documents, args.bi_encoder, args.max_length)
    rows[f"bi-encoder {args.bi_encoder.split('/')[-1]}"] = evaluate(teacher, judged, MEASURES).mean
    table = Table(title=f"{args.run}, top {args.depth}, {len(judged)} judged queries")
    table.add_column("ordering")
    for measure in MEASURES:
        table.add_column(measure, justify="right")
    for name, values in rows.items():
        table.add_row(name, *(f"{values[m]:.4f}" for m in MEASURES))
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
