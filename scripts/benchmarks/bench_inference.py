"""Inference throughput: rerank's ``Reranker`` vs ``sentence_transformers.CrossEncoder.predict`` vs ONNX Runtime.

The same exported model (MiniLM from the Hugging Face cache with a new head, unless ``--model`` names a folder),
the same (query, document) pairs (the BM25 top ``--depth`` of the first ``--queries`` Cranfield queries: mixed
lengths), the same batch size and maximum length, in one process; passes alternate between implementations and
the best of ``--repeats`` passes counts. Scores are checked to agree before anything is timed.

    HF_HOME=../shared/hf_home HF_HUB_OFFLINE=1 IR_DATASETS_HOME=... python scripts/benchmarks/bench_inference.py
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from rerank import (
    ONNX,
    ONNX_OUTPUT,
    Collection,
    CollectionConfig,
    CrossEncoderModel,
    FirstStageConfig,
    Reranker,
    export,
    onnx_session,
    retrieve,
)

CRANFIELD = CollectionConfig(ir_datasets="cranfield", label_map={-1: 0, 1: 4, 2: 3, 3: 2, 4: 1})


def cranfield_pairs(queries: int, depth: int) -> tuple[list[str], list[str]]:
    collection = Collection(CRANFIELD)
    query_ids = sorted(collection.queries, key=int)[:queries]
    run = retrieve(collection, FirstStageConfig(backend="bm25s", retrieval_depth=depth),
                   {qid: collection.queries[qid] for qid in query_ids})
    keys = [(qid, doc) for qid in query_ids for doc in run[qid]]
    return [collection.queries[qid] for qid, _ in keys], [collection.documents.text(doc) for _, doc in keys]


def onnx_scorer(folder: Path, reranker: Reranker) -> Callable[[list[str], list[str]], list[float]]:
    """Scores through ONNX Runtime with the Reranker's tokenization and length-sorted batches."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = onnx_session(folder / ONNX, options)
    names = [i.name for i in session.get_inputs()]

    def score(queries: list[str], documents: list[str]) -> list[float]:
        rows, _ = reranker.tokenize.encode(queries, documents)
        order = sorted(range(len(documents)), key=lambda row: len(rows["input_ids"][row]))
        scores = np.empty(len(documents), dtype=np.float32)
        for start in range(0, len(order), reranker.batch_size):
            batch = order[start: start + reranker.batch_size]
            inputs = reranker.tokenize.pad({key: [values[row] for row in batch] for key, values in rows.items()})
            (logits,) = session.run([ONNX_OUTPUT], {name: getattr(inputs, name).numpy() for name in names})
            scores[batch] = logits[:, 0]
        return scores.tolist()

    return score


def padding_efficiency(reranker: Reranker, queries: list[str], documents: list[str], sort: bool) -> float:
    """Real tokens / computed tokens over the batches (sorted by length, or in input order)."""
    rows, _ = reranker.tokenize.encode(queries, documents)
    lengths = [len(ids) for ids in rows["input_ids"]]
    lengths = sorted(lengths) if sort else lengths
    batches = [lengths[start: start + reranker.batch_size] for start in range(0, len(lengths), reranker.batch_size)]
    return sum(lengths) / sum(max(batch) * len(batch) for batch in batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    queries, documents = cranfield_pairs(args.queries, args.depth)
    with tempfile.TemporaryDirectory() as scratch:
        folder = export(CrossEncoderModel.from_pretrained(args.model), Path(scratch) / "model", onnx=True)
        from sentence_transformers import CrossEncoder as SentenceTransformersCrossEncoder

        reranker = Reranker.from_pretrained(str(folder), batch_size=args.batch_size, max_length=args.max_length,
                                            max_query_length=args.max_length // 2)
        st_model = SentenceTransformersCrossEncoder(str(folder), max_length=args.max_length, device="cpu")
        systems: dict[str, Callable[[list[str], list[str]], object]] = {
            "rerank Reranker": reranker.score_pairs,
            "sentence-transformers CrossEncoder.predict": lambda q, d: st_model.predict(
                list(zip(q, d)), batch_size=args.batch_size, show_progress_bar=False),
            "rerank + ONNX Runtime": onnx_scorer(folder, reranker),
        }
        sample = slice(0, 64)
        st_predict = systems["sentence-transformers CrossEncoder.predict"]
        reference = np.asarray(st_predict(queries[sample], documents[sample]))
        for name, score in systems.items():
            difference = float(np.abs(np.asarray(score(queries[sample], documents[sample])) - reference).max())
            if difference > 1e-3:
                raise SystemExit(f"{name}: scores differ from sentence-transformers' by {difference:.1e}")
        seconds = {name: [] for name in systems}
        for _ in range(args.repeats):
            for name, score in systems.items():
                started = time.perf_counter()
                score(queries, documents)
                seconds[name].append(time.perf_counter() - started)

    baseline = len(queries) / min(seconds["sentence-transformers CrossEncoder.predict"])
    results = {name: {"pairs_per_second": len(queries) / min(times), "seconds": times}
               for name, times in seconds.items()}
    table = Table(title=f"{len(queries)} Cranfield pairs, batch {args.batch_size}, max length {args.max_length}, "
                        f"{torch.get_num_threads()} threads")
    for column in ("implementation", "pairs/s", "vs sentence-transformers"):
        table.add_column(column, justify="left" if column == "implementation" else "right")
    for name, result in results.items():
        table.add_row(name, f"{result['pairs_per_second']:.1f}", f"{result['pairs_per_second'] / baseline:.2f}x")
    Console().print(table)
    efficiency = {"length-sorted": padding_efficiency(reranker, queries, documents, sort=True),
                  "input order": padding_efficiency(reranker, queries, documents, sort=False)}
    print("padding efficiency (real / computed tokens):", {k: round(v, 3) for k, v in efficiency.items()})
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "args": vars(args) | {
            "output": str(args.output)}, "pairs": len(queries), "results": results, "padding_efficiency": efficiency},
            indent=2))


if __name__ == "__main__":
    main()
