"""Index and search a generated collection of short documents; report times and the process's peak memory.

    python scripts/benchmarks/bench_index_memory.py --documents 500000 --queries 1000 --backend pyserini

The documents (10-60 words drawn from a Zipf-like vocabulary of 50,000 words) are written as JSONL into a
temporary folder and go through the same path as any local collection: an on-disk Arrow table, then the BM25
index. Peak memory is the process's peak resident set size (``ru_maxrss``), which includes pyserini's JVM.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from rerank import Collection, CollectionConfig, FirstStageConfig, retrieve


def _words(count: int) -> list[str]:
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=rng.integers(3, 10))) for _ in range(count)]


def generate(folder: Path, documents: int, queries: int, seed: int = 0) -> CollectionConfig:
    """Write ``documents`` short documents and ``queries`` queries; return the collection's config."""
    vocabulary = np.array(_words(50_000))
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    with (folder / "docs.jsonl").open("w") as handle:
        for start in range(0, documents, 10_000):
            size = min(10_000, documents - start)
            lengths = rng.integers(10, 61, size=size)
            drawn = rng.choice(len(vocabulary), size=int(lengths.sum()), p=weights)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            for i in range(size):
                text = " ".join(vocabulary[drawn[offsets[i] : offsets[i + 1]]])
                handle.write(json.dumps({"doc_id": f"d{start + i}", "title": "", "text": text}) + "\n")
    with (folder / "queries.tsv").open("w") as handle:
        for q in range(queries):
            handle.write(f"q{q}\t{' '.join(vocabulary[rng.integers(0, 5000, size=3)])}\n")
    return CollectionConfig(docs=str(folder / "docs.jsonl"), queries=str(folder / "queries.tsv"),
                            cache_dir=str(folder / "arrow"))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=500_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--backend", choices=["pyserini", "bm25s"], default="pyserini")
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--output", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rerank-bench-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        config = generate(folder, args.documents, args.queries)
        generated = time.perf_counter()
        collection = Collection(config)
        first_stage = FirstStageConfig(backend=args.backend, retrieval_depth=args.depth,
                                       index_dir=str(folder / "indexes"))
        count = len(collection.documents)
        converted = time.perf_counter()
        first = next(iter(collection.queries))
        retrieve(collection, first_stage, {first: collection.queries[first]})  # builds the index
        indexed = time.perf_counter()
        run = retrieve(collection, first_stage)
        searched = time.perf_counter()
    figures = {
        "backend": args.backend,
        "documents": count,
        "queries": len(run),
        "depth": args.depth,
        "generate_s": round(generated - started, 1),
        "arrow_table_s": round(converted - generated, 1),
        "index_s": round(indexed - converted, 1),
        "search_s": round(searched - indexed, 1),
        "peak_rss_mib": round(peak_rss_mib()),
    }
    print(json.dumps(figures, indent=2))
    if args.output:
        args.output.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
