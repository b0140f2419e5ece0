"""Simulate a click log: ``rerank clicks --config cranfield.yaml --clicks.impressions 100000 --output_dir DIR``.

Shows the top ``clicks.depth`` results of a ranking (``--run FILE``, or the config's first stage: BM25 of
``data.collection``, from the cache when it was retrieved before) for queries drawn with Zipf-like frequencies
(``clicks.zipf``) among ``clicks.queries`` (``train``: the training folds of ``data.folds``, whose clicks a model
may learn from; ``all``), and clicks them with a click model over the collection's qrels
(``clicks.click_model.model``: ``pbm`` with position bias ``clicks.click_model.eta``, ``cascade`` or ``dbn``;
:mod:`rerank.clicks.models`). Writes ``DIR/clicks.jsonl`` (the log, :mod:`rerank.clicks.log`) and
``DIR/clicks.json`` (the settings, the click-through rate per rank and per grade; with ``--clicks.swap true``,
the position bias estimated from the log's swap interventions, :mod:`rerank.clicks.propensity`, beside the click
model's own for ``pbm``). The same options and seed (``clicks.seed``) give the same log.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from lightning.pytorch.cli import LightningArgumentParser
from rich.console import Console
from tqdm.auto import tqdm

from ..clicks.log import Impression, read_click_log, write_click_log
from ..clicks.models import examination
from ..clicks.propensity import estimate_propensities
from ..clicks.simulator import ClickSimulationConfig, judged_queries, simulate
from ..core.atomic import atomic_write
from ..core.logs import configure_logging
from ..core.run_directory import RunDirectory
from ..data.candidates import read_candidates
from ..data.collection import Collection
from ..data.folds import FoldsConfig
from ..first_stage import FirstStageConfig, write_first_stage_run
from .arguments import RerankCLI, add_run_option, run_shortcut
from .failures import run

DESCRIPTION = __doc__.splitlines()[0]
LOG, SUMMARY = "clicks.jsonl", "clicks.json"


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--clicks", type=ClickSimulationConfig, default=ClickSimulationConfig(),
                        help="what to simulate: impressions, depth, zipf, queries (train or all), seed, and the "
                             "click_model (model: pbm, cascade or dbn; eta, noise, top, gamma)")
    add_run_option(parser, "the ranking shown")


def main(argv: list[str] | None = None) -> dict:
    """Simulate and write the log and its summary; returns the summary."""
    configure_logging()
    cli = RerankCLI(run_shortcut(sys.argv[1:] if argv is None else argv), prog="rerank clicks",
                    description=DESCRIPTION, arguments=_arguments, instantiate=False)
    config = cli.option("clicks", ClickSimulationConfig)
    collection_config = cli.run_options.collection
    collection = Collection(collection_config)
    qrels, query_ids = judged_queries(collection, cli.option("data.folds", FoldsConfig) or FoldsConfig(),
                                      config.queries)
    directory = RunDirectory(Path(cli.config.output_dir))
    write_first_stage_run(collection_config, cli.option("data.first_stage", FirstStageConfig) or FirstStageConfig(),
                          directory.first_stage_run)
    ranking = read_candidates(directory.first_stage_run)
    pages = ranking.select(query_ids, config.depth, collection.queries, qrels)
    impressions = simulate(pages, qrels, config)
    counts: Counter = Counter()
    log = directory.root / LOG
    written = write_click_log(tqdm(_counting(impressions, counts, qrels), total=config.impressions,
                                   desc=f"clicks of {collection.name}", unit="impression", mininterval=1.0), log)
    summary = {"settings": dataclasses.asdict(config), "impressions": written, "queries": len(pages),
               "log": LOG, **_rates(counts)}
    if config.swap:
        estimate = estimate_propensities(read_click_log(log), {c.query_id: c.doc_id(0) for c in pages}, config.depth)
        summary["propensities"] = {"estimated": estimate.propensities.round(6).tolist(),
                                   "standard_error": estimate.errors.round(6).tolist()}
        if config.click_model.model == "pbm":
            ranks = range(1, config.depth + 1)
            summary["propensities"]["click_model"] = examination(ranks, config.click_model.eta).round(6).tolist()
    with atomic_write(directory.root / SUMMARY) as handle:
        handle.write(json.dumps(summary, indent=2) + "\n")
    Console(stderr=True).print(f"{written:,} impressions of {len(pages)} queries of {collection.name} -> {log}")
    print(json.dumps({key: summary[key] for key in ("impressions", "queries", "ctr_per_rank")}, indent=2))
    return summary


def _counting(impressions: Iterable[Impression], counts: Counter,
              qrels: Mapping[str, Mapping[str, int]]) -> Iterator[Impression]:
    """``impressions`` as they pass, tallying what was shown and clicked per rank and per grade into ``counts``."""
    for impression in impressions:
        judged = qrels.get(impression.query_id, {})
        for rank, doc in enumerate(impression.shown, start=1):
            clicked = rank in impression.clicks
            grade = max(judged.get(doc, 0), 0)
            counts[("rank", rank)] += 1
            counts[("grade", grade)] += 1
            counts[("rank_clicks", rank)] += clicked
            counts[("grade_clicks", grade)] += clicked
        yield impression


def _rates(counts: Counter) -> dict[str, dict[str, float]]:
    """Click-through rates per rank and per grade, from the tallies."""
    return {f"ctr_per_{kind}": {str(key): round(counts[(f"{kind}_clicks", key)] / shown, 6)
                                for (name, key), shown in sorted(counts.items()) if name == kind}
            for kind in ("rank", "grade")}


if __name__ == "__main__":
    run(main)
