"""First-stage run and its metrics for a collection: ``python -m rerank.bm25 --config configs/x.yaml --output_dir DIR``.

Reads the ``data.collection`` and ``data.first_stage`` sections of the config (see
:class:`rerank.data.collection.CollectionConfig` and :class:`rerank.retrieval.FirstStageConfig`), retrieves the
top ``depth`` documents of every query, and writes ``DIR/run.trec`` and ``DIR/metrics.json`` (nDCG@10, nDCG@20,
P@20, MAP, R@100, R@1000 over all judged queries). Options after the config override it, e.g.
``data.first_stage.backend=bm25s``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from rich.console import Console

from .config import build, load_config
from .data.collection import Collection, CollectionConfig
from .data.trec import atomic_write, write_run
from .evaluation import METRICS, evaluate
from .retrieval import FirstStageConfig, retrieve


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="python -m rerank.bm25", description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", required=True, help="YAML config (repeat to stack)")
    parser.add_argument("--output_dir", required=True, type=Path)
    parser.add_argument("overrides", nargs="*", help="key.path=value")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = load_config(args.config, args.overrides)
    data = config.get("data") or {}
    collection = Collection(build(CollectionConfig, data.get("collection"), "data.collection"))
    first_stage = build(FirstStageConfig, data.get("first_stage"), "data.first_stage")
    console = Console(stderr=True)
    started = time.perf_counter()
    run = retrieve(collection, first_stage)
    metrics = evaluate(run, collection.qrels, METRICS).mean
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_run(run, args.output_dir / "run.trec", tag=f"bm25-{first_stage.backend}")
    with atomic_write(args.output_dir / "metrics.json") as handle:
        json.dump(metrics, handle, indent=2)
    console.print(f"{collection.name}: {len(run)} queries, {first_stage.backend} BM25 (k1={first_stage.k1}, "
                  f"b={first_stage.b}, depth {first_stage.depth}) in {time.perf_counter() - started:.1f}s")
    print(json.dumps(metrics, indent=2))
    return metrics


if __name__ == "__main__":
    main()
