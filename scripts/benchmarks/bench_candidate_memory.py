"""Memory per candidate and per query of a first-stage run as rerank holds it: a dict, or compact arrays.

    python scripts/benchmarks/bench_candidate_memory.py --queries 50000 --depth 100 --json \
        docs/experiments/bench_candidates.json

Writes a run of ``queries`` x ``depth`` candidates (MS MARCO's judgment-free stage: 50,000 x 100; ids of 7 digits
as MS MARCO's passages) into a temporary folder, then measures with :mod:`tracemalloc` (every Python and NumPy
allocation) the memory that stays allocated and the peak while reading it:

- ``dict``: :func:`rerank.data.trec.read_run`, ``dict[str, dict[str, float]]`` (how runs are held for evaluation);
- ``arrays``: :func:`rerank.data.candidates.read_candidates` (how the data loaders hold the first-stage run);
- ``lists``: those arrays selected to the training lists (labels from qrels, one relevant candidate a query) with
  teacher scores, as a training source holds them.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rerank import read_candidates, read_run


def write_run(path: Path, queries: int, depth: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    with path.open("w") as handle:
        for query in range(queries):
            docs = rng.integers(0, 8_841_823, size=depth)
            handle.write("".join(f"q{query} Q0 {doc} {rank} {30 - rank / 10:.4f} bm25\n"
                                 for rank, doc in enumerate(sorted(set(docs.tolist())), start=1)))


def measure(build: Callable[[], Any], candidates: int) -> tuple[Any, dict[str, float]]:
    """``build()``'s result, and the bytes it keeps (per candidate) and its peak while it runs."""
    tracemalloc.start()
    start = time.perf_counter()
    result = build()
    seconds = time.perf_counter() - start
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, {"seconds": round(seconds, 2), "kept_mib": round(kept / 2**20, 1),
                    "peak_mib": round(peak / 2**20, 1), "bytes_per_candidate": round(kept / candidates, 1),
                    "kept_bytes": kept}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=50_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--json", type=Path, help="write the figures there too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.trec"
        write_run(path, args.queries, args.depth)
        with path.open() as handle:
            lines = sum(1 for _ in handle)
        run, as_dict = measure(lambda: read_run(path), lines)
        candidates = sum(len(docs) for docs in run.values())
        queries = {qid: f"query {qid}" for qid in run}
        qrels = {qid: {next(iter(docs)): 1} for qid, docs in run.items()}
        teacher = {qid: {doc: -score for doc, score in docs.items()} for qid, docs in run.items()}
        del run
        arrays, as_arrays = measure(lambda: read_candidates(path), candidates)
        lists, as_lists = measure(lambda: arrays.select(arrays.query_ids, args.depth, queries, qrels)
                                  .with_teacher(teacher), candidates)
    per_candidate = sum(column.nbytes for column in (lists.ids, lists.scores, lists.labels, lists.teacher))
    figures = {"queries": args.queries, "candidates": candidates, "python": platform.python_version(),
               "dict": as_dict, "arrays": as_arrays, "lists": as_lists,
               "lists_array_bytes_per_candidate": round(per_candidate / candidates, 1),
               "lists_bytes_per_query": round((as_lists["kept_bytes"] - per_candidate) / args.queries, 1)}
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
