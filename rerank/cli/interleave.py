"""Compare two rankers by team-draft interleaving: ``rerank interleave --run_a A.run --run_b B.run --config C``.

Interleaves the top ``clicks.depth`` of the two runs (:mod:`rerank.clicks.interleaving`) for ``clicks.impressions``
pages of the judged queries both runs hold (``clicks.queries: train`` keeps the training folds' queries of
``data.folds``; by default ``all``), drawn with Zipf-like frequencies (``clicks.zipf``) and clicked by
``clicks.click_model`` over the collection's qrels. Prints and writes ``DIR/interleaving.json``: wins, losses and
ties of A, the preference (positive: A preferred), the sign test over impressions and over queries, and each
query's tally.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lightning.pytorch.cli import LightningArgumentParser

from ..clicks.interleaving import interleave
from ..clicks.simulator import ClickSimulationConfig, judged_queries
from ..core.atomic import atomic_write
from ..core.logs import configure_logging
from ..data.candidates import read_candidates
from ..data.collection import Collection
from ..data.folds import FoldsConfig
from .arguments import RerankCLI
from .failures import run

DESCRIPTION = __doc__.splitlines()[0]
RESULT = "interleaving.json"


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("--run_a", type=str, required=True, help="ranker A's TREC run")
    parser.add_argument("--run_b", type=str, required=True, help="ranker B's TREC run")
    parser.add_argument("--clicks", type=ClickSimulationConfig, default=ClickSimulationConfig(queries="all"),
                        help="impressions, depth, zipf, queries (all or train), seed and the click_model")


def main(argv: list[str] | None = None) -> dict:
    """Interleave, write and print the outcome; returns it."""
    configure_logging()
    cli = RerankCLI(sys.argv[1:] if argv is None else argv, prog="rerank interleave", description=DESCRIPTION,
                    arguments=_arguments, instantiate=False)
    config = cli.option("clicks", ClickSimulationConfig)
    collection = Collection(cli.run_options.collection)
    qrels, query_ids = judged_queries(collection, cli.option("data.folds", FoldsConfig) or FoldsConfig(),
                                      config.queries)
    queries = collection.queries
    a, b = (read_candidates(path, queries).select(query_ids, config.depth, queries, qrels)
            for path in (cli.config.run_a, cli.config.run_b))
    outcome = interleave(a, b, qrels, config)
    result = {"run_a": cli.config.run_a, "run_b": cli.config.run_b, **outcome.summary(),
              "per_query": {qid: [outcome.wins.get(qid, 0), outcome.losses.get(qid, 0), outcome.ties.get(qid, 0)]
                            for qid in sorted(set(outcome.wins) | set(outcome.losses) | set(outcome.ties))}}
    output = Path(cli.config.output_dir) / RESULT
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(output) as handle:
        handle.write(json.dumps(result, indent=2) + "\n")
    print(json.dumps({key: value for key, value in result.items() if key != "per_query"}, indent=2))
    return result


if __name__ == "__main__":
    run(main)
