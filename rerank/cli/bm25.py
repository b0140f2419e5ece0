"""First-stage run and its metrics for a collection: ``rerank bm25 --config cranfield.yaml --output_dir DIR``.

Reads the ``data.collection`` and ``data.first_stage`` sections of the config (see
:class:`rerank.data.collection_config.CollectionConfig` and :class:`rerank.config.first_stage.FirstStageConfig`;
any training config works, its other sections are ignored), retrieves the top ``retrieval_depth`` documents of every
query, and writes ``DIR/first_stage.trec`` and ``DIR/metrics.json`` (``{"first_stage": {...}}``: ``evaluation.metrics``,
by default nDCG@10, nDCG@20, P@20, AP, R@100, R@1000, over all judged queries). Options override the config as
in every command, e.g. ``--data.first_stage.backend bm25s``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rich.console import Console

from ..core.logs import configure_logging, keep_log
from ..core.run_directory import RunDirectory
from ..data.collection import Collection
from ..data.trec import read_run
from ..evaluation.measures import evaluate
from ..first_stage import FirstStageConfig, write_first_stage_run
from .arguments import RerankCLI
from .failures import run

DESCRIPTION = __doc__.splitlines()[0]


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Retrieve, write the run and its metrics; returns the metrics."""
    configure_logging(hold=True)
    cli = RerankCLI(sys.argv[1:] if argv is None else argv, prog="rerank bm25", description=DESCRIPTION,
                    instantiate=False)
    collection = Collection(cli.run_options.collection)
    first_stage = cli.option("data.first_stage", FirstStageConfig) or FirstStageConfig()
    directory = RunDirectory(Path(cli.config.output_dir))
    qrels = collection.qrels  # read (and checked) before the retrieval, which can take long
    started = time.perf_counter()
    write_first_stage_run(collection.config, first_stage, directory.first_stage_run)  # pyserini in a child process
    keep_log(directory.root)  # the log so far, now that the directory holds a run
    first_stage_run = read_run(directory.first_stage_run)
    metrics = evaluate(first_stage_run, qrels, cli.config.evaluation.metrics).mean
    directory.write_metrics({"first_stage": metrics})
    Console(stderr=True).print(
        f"{collection.name}: {len(first_stage_run)} queries, {first_stage.backend} (k1={first_stage.k1}, "
        f"b={first_stage.b}, retrieval depth {first_stage.retrieval_depth}) in {time.perf_counter() - started:.1f}s")
    print(json.dumps(metrics, indent=2))
    return metrics


if __name__ == "__main__":
    run(main)
