"""How fast the data module's loaders alone deliver tokenized batches: training lists and evaluation pairs per
second, with 1 to ``--workers`` DataLoader workers, for any config (nothing is trained or scored).

    python scripts/benchmarks/bench_loaders.py --config robust04.yaml --config \\
        collections/robust04-shaped/collection.yaml \\
        --model.model_name sentence-transformers/all-MiniLM-L6-v2 --output_dir runs/bench-loaders \\
        --workers 1 2 --batches 200 --output docs/experiments/bench_loaders.json

Every option but this script's own (``--workers``, ``--batches``, ``--output``) goes to rerank's config parser,
as for ``rerank fit``: the same collection, first stage, folds, tokenization, list size and batch size. The first
stage's run and the training sources are made (or read from the caches) first, as ``rerank fit`` makes them; the
tokenizer is the model's (MiniLM's is BERT-base-uncased's WordPiece vocabulary, so its rows cost what
BERT-base's do). For each worker count, a fresh DataLoader is timed over ``--batches`` batches after its first one
(the first includes starting the workers): lists, (query, document) pairs, rows (MaxP passages) and real tokens per
second. A GPU consumes rows: compare rows/s with its training or scoring rate (docs/experiments/scale.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[2]


def timed(batches: Iterable, count: int, pairs_of: Callable[[object], int]) -> dict[str, float]:
    """Drain ``count`` batches after the first; rates per second of what they hold."""
    iterator = iter(batches)
    started = time.perf_counter()
    next(iterator)
    first = time.perf_counter() - started
    totals = {"batches": 0, "pairs": 0, "rows": 0, "tokens": 0}
    started = time.perf_counter()
    for batch in iterator:
        inputs = batch.inputs
        totals["batches"] += 1
        totals["pairs"] += pairs_of(batch)
        totals["rows"] += int(inputs.input_ids.shape[0])
        totals["tokens"] += int(inputs.attention_mask.sum())
        if totals["batches"] == count:
            break
    seconds = time.perf_counter() - started
    return {"first_batch_s": round(first, 3), "seconds": round(seconds, 3), **totals,
            **{f"{key}_per_s": round(value / seconds, 1) for key, value in totals.items()},
            "tokens_per_row": round(totals["tokens"] / max(totals["rows"], 1), 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="DataLoader worker counts to time")
    parser.add_argument("--batches", type=int, default=100, help="batches timed per loader (after the first)")
    parser.add_argument("--output", type=Path, help="write the rows as JSON here")
    own, rerank_args = parser.parse_known_args(argv)
    if min(own.workers) < 0 or own.batches < 1:
        parser.error("--workers must be >= 0 and --batches >= 1")

    from rerank import from_config

    cli = from_config(rerank_args)
    data = cli.datamodule
    started = time.perf_counter()
    data.prepare_data()
    data.setup("fit")
    prepared = time.perf_counter() - started
    rows = []
    for workers in own.workers:
        data.num_workers = workers
        training = timed(data.train_dataloader(), own.batches, lambda batch: int(batch.mask.sum()))
        rows.append({"loader": "train", "workers": workers, "lists_per_s": round(
            training["batches"] * data.batch_size / training["seconds"], 1), **training})
        evaluation = timed(data.val_dataloader(), own.batches, lambda batch: len(batch.doc_ids))
        rows.append({"loader": "validation", "workers": workers, **evaluation})

    console = Console()
    table = Table(title=f"loaders ({os.cpu_count()} CPUs)")
    for column in ("loader", "workers", "first batch s", "lists/s", "pairs/s", "rows/s", "tokens/row"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(row["loader"], str(row["workers"]), f"{row['first_batch_s']:.2f}",
                      str(row.get("lists_per_s", "")), f"{row['pairs_per_s']:.1f}", f"{row['rows_per_s']:.1f}",
                      f"{row['tokens_per_row']:.0f}")
    console.print(table)
    if own.output:
        report = {"command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
                  "machine": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
                  "prepare_s": round(prepared, 1), "rows": rows}
        own.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
