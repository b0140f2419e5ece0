"""What the deployed ranker costs in ``rerank predict``: pairs per second of ``fused`` (the cross-encoder, the
teacher's bi-encoder mixed with BM25, and BM25) against the pure cross-encoder, and the bi-encoder's share.

One export of ``--model`` (MiniLM with a new head by default) deploying ``fused`` with the default recipe's teacher
(``--bi_encoder``, mixed 0.6 / 0.4 with the first stage), on the BM25 top ``--depth`` of the first ``--queries``
Cranfield queries, re-ranked by ``rerank predict`` in this process, three ways in turn: ``--ranker reranker`` (the
pure cross-encoder), the deployed ranker with an empty ``$RERANK_CACHE`` (the teacher embeds the candidates'
documents and writes them to the cache) and again with the documents' embeddings in the cache (as every later
prediction on the same collection finds them, and as training leaves them), the queries embedded anew. The best of
``--repeats`` passes counts.

    HF_HOME=../shared/hf_home HF_HUB_OFFLINE=1 IR_DATASETS_HOME=... python scripts/benchmarks/bench_deployed.py \\
        --output docs/experiments/bench_deployed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from rerank import (
    Collection,
    CollectionConfig,
    CrossEncoderModel,
    Deployment,
    FirstStageConfig,
    TeacherConfig,
    TokenizationConfig,
    export,
    retrieve,
    run_command,
    write_run,
)

CRANFIELD = {"ir_datasets": "cranfield", "label_map": {-1: 0, 1: 4, 2: 3, 3: 2, 4: 1}}
WAYS = ("pure cross-encoder (--ranker reranker)", "fused, documents embedded", "fused, document embeddings cached")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--bi_encoder", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--max_length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)

    collection = Collection(CollectionConfig(**CRANFIELD))
    query_ids = sorted(collection.queries, key=int)[: args.queries]
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        run = retrieve(collection, FirstStageConfig(backend="bm25s", retrieval_depth=args.depth,
                                                    index_dir=str(root / "index")),
                       {qid: collection.queries[qid] for qid in query_ids})
        write_run(run, root / "bm25.run")
        model = CrossEncoderModel.from_pretrained(args.model, tokenization=TokenizationConfig(
            args.max_length, args.max_length // 2))
        teacher = TeacherConfig(bi_encoder=args.bi_encoder, first_stage_weight=0.4)
        deployment = Deployment("fused", {"reranker": 0.4, "teacher": 0.4, "first_stage": 0.2}, teacher=teacher)
        folder = export(model, root / "model", deployment=deployment)
        pairs = sum(len(docs) for docs in run.values())

        def predicted(way: str, pass_: int) -> float:
            cache = root / "cache" / str(pass_)
            if way == WAYS[1]:
                shutil.rmtree(cache, ignore_errors=True)  # the teacher starts from nothing
            if way == WAYS[2]:
                shutil.rmtree(cache / "teacher", ignore_errors=True)  # documents' embeddings kept, queries embedded
            os.environ["RERANK_CACHE"] = str(cache)
            options = ["--ranker", "reranker"] if way == WAYS[0] else []
            started = time.perf_counter()
            run_command("predict", [
                "--model.model_name", str(folder), "--run", str(root / "bm25.run"), "--data.collection",
                json.dumps(CRANFIELD), "--data.rerank_depth", str(args.depth), "--output_dir",
                str(root / "out" / f"{WAYS.index(way)}-{pass_}"), "--trainer.logger", "false",
                "--trainer.enable_progress_bar", "false", *options])
            return time.perf_counter() - started

        seconds: dict[str, list[float]] = {way: [] for way in WAYS}
        for pass_ in range(args.repeats):
            for way in WAYS:
                seconds[way].append(predicted(way, pass_))

    report = summary(seconds, pairs, args)
    show(report, len(query_ids), args)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
    return report


def summary(seconds: dict[str, list[float]], pairs: int, args: argparse.Namespace) -> dict:
    """Each way's pairs per second (its best pass) and the bi-encoder teacher's share of the deployed ranker's
    time."""
    best = {way: min(times) for way, times in seconds.items()}
    results = {way: {"seconds": times, "pairs_per_second": pairs / best[way]} for way, times in seconds.items()}
    return {"machine": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
            "pairs": pairs, "args": {key: str(value) for key, value in vars(args).items()}, "results": results,
            "bi_encoder_share": {"documents embedded": 1 - best[WAYS[0]] / best[WAYS[1]],
                                 "document embeddings cached": 1 - best[WAYS[0]] / best[WAYS[2]]}}


def show(report: dict, queries: int, args: argparse.Namespace) -> None:
    results = report["results"]
    best = {way: min(results[way]["seconds"]) for way in WAYS}
    table = Table(title=f"rerank predict, {report['pairs']} Cranfield pairs (BM25 top {args.depth} of {queries} "
                        f"queries), {args.max_length}-token rows, {report['threads']} threads (best of "
                        f"{args.repeats})")
    for column in ("ranker", "seconds", "pairs/s", "vs pure"):
        table.add_column(column, justify="left" if column == "ranker" else "right")
    for way in WAYS:
        table.add_row(way, f"{best[way]:.2f}", f"{results[way]['pairs_per_second']:.1f}",
                      f"{best[WAYS[0]] / best[way]:.2f}x")
    Console().print(table)
    print("the bi-encoder teacher's share of the deployed ranker's time:",
          {key: f"{value:.0%}" for key, value in report["bi_encoder_share"].items()})


if __name__ == "__main__":
    main()
