"""How well a click log's targets rank the documents it shows, before any training: nDCG@10 of each query's shown
documents ordered by their naive or IPS targets (ties by the rank shown), against the log's own order.

    python scripts/studies/clicks/click_target_quality.py --config cranfield.yaml --log \
        runs/clicks/clicks.jsonl --eta 2 \
        --clip 0.01 0.1

Each line: the estimator (``naive``; ``ips`` with ``(1/k)^eta`` clipped at each ``--clip``), the nDCG@10 of the
targets' order over the judged queries the log shows, and that of the log's order (the logging ranker's).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rerank import ClickTargetConfig, Collection, as_collection_config, click_targets, config_settings, evaluate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the collection's config (its data.collection)")
    parser.add_argument("--log", type=Path, required=True, help="a click log")
    parser.add_argument("--eta", type=float, required=True, help="the position-based model's eta, for ips")
    parser.add_argument("--clip", type=float, nargs="+", default=[0.01])
    args = parser.parse_args(argv)
    settings = config_settings(args.config)
    qrels = Collection(as_collection_config(settings["data"]["collection"], "data.collection")).qrels
    estimators = [("naive", ClickTargetConfig(log=str(args.log), estimator="naive"))] + [
        (f"ips, eta {args.eta}, clip {clip}", ClickTargetConfig(log=str(args.log), eta=args.eta, clip=clip))
        for clip in args.clip]
    for name, config in estimators:
        targets, ranks = click_targets(config)
        judged = {qid: qrels[qid] for qid in targets if qid in qrels}
        by_target = {qid: {doc: value - ranks[qid][doc] * 1e-9 for doc, value in targets[qid].items()}
                     for qid in judged}
        shown = {qid: {doc: -float(rank) for doc, rank in ranks[qid].items()} for qid in judged}
        ours = evaluate(by_target, judged, ["nDCG@10"]).mean["nDCG@10"]
        logged = evaluate(shown, judged, ["nDCG@10"]).mean["nDCG@10"]
        print(f"{name}: the targets' order {ours:.4f}, the log's order {logged:.4f} ({len(judged)} queries)")


if __name__ == "__main__":
    main()
