"""Does team-draft interleaving agree with nDCG@10, and after how many impressions?

    python scripts/studies/clicks/interleaving_agreement.py --config cranfield.yaml \\
        --run bm25=runs/default-cv/first_stage.run --run pure=runs/default-cv/test.run ... \\
        --pair pure:bm25 --pair ensemble:pure ... --impressions 1000 10000 100000 --json docs/interleaving.json

For each pair ``A:B`` (A the system with the higher nDCG@10), interleaves the two runs' top 10 over the
collection's judged queries with simulated clicks (``--model``, ``--eta``; :mod:`rerank.clicks.interleaving`) at
each number of impressions (queries drawn with Zipf frequencies, ``--zipf``; 0 weighs them alike, as nDCG does),
and reports A's preference, the sign tests over impressions and over queries, and whether interleaving prefers A
significantly (p < 0.05 over impressions), beside each run's nDCG@10.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rerank import (
    ClickModelConfig,
    ClickSimulationConfig,
    Collection,
    as_collection_config,
    config_settings,
    evaluate,
    interleave,
    read_candidates,
    read_run,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="the collection's config (its data.collection)")
    parser.add_argument("--run", action="append", required=True, help="NAME=FILE, a system's run")
    parser.add_argument("--pair", action="append", required=True, help="A:B, two system names")
    parser.add_argument("--impressions", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--model", default="pbm")
    parser.add_argument("--eta", type=float, default=1.0)
    parser.add_argument("--zipf", type=float, default=1.0, help="queries' frequencies (0: uniform)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = config_settings(args.config)
    collection = Collection(as_collection_config(settings["data"]["collection"], "data.collection"))
    qrels, queries = collection.qrels, collection.queries
    files = dict(item.split("=", 1) for item in args.run)
    ndcg = {name: evaluate(read_run(path), qrels, ["nDCG@10"]).mean["nDCG@10"] for name, path in files.items()}
    ranked = {name: read_candidates(path, queries).select(sorted(qrels), 10, queries, qrels)
              for name, path in files.items()}
    rows = []
    for pair in args.pair:
        a, b = pair.split(":")
        for impressions in args.impressions:
            config = ClickSimulationConfig(impressions=impressions, queries="all", seed=args.seed, zipf=args.zipf,
                                           click_model=ClickModelConfig(model=args.model, eta=args.eta))
            outcome = interleave(ranked[a], ranked[b], qrels, config).summary()
            rows.append({"a": a, "b": b, "ndcg_a": round(ndcg[a], 4), "ndcg_b": round(ndcg[b], 4), **outcome,
                         "agrees": bool(outcome["preference"] > 0 and outcome["p_impressions"] < 0.05)})
            print(f"{a:>12} vs {b:<12} {impressions:>8,}: preference {outcome['preference']:+.4f}, "
                  f"p {outcome['p_impressions']:.2g} (impressions), queries {outcome['queries_for_a']}-"
                  f"{outcome['queries_for_b']} p {outcome['p_queries']:.2g}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"config": args.config, "model": args.model, "eta": args.eta, "zipf": args.zipf,
                                         "runs": files, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
