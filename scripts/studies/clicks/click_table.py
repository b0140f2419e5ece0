"""The click-learning table of docs/clicks.md: nDCG@10 of ``rerank cv`` directories over all their test queries,
with paired two-sided t-tests against chosen references, and what DLA learnt of the position bias.

    python scripts/studies/clicks/click_table.py --config cranfield.yaml --reference bm25=RUNS/qrels \
        --reference qrels=RUNS/qrels \
        --system naive=RUNS/pbm2-naive --system ips=RUNS/pbm2-ips-true ... --against bm25 qrels naive \
        --json docs/clicks_cranfield.json

``--reference NAME=DIR`` and ``--system NAME=DIR`` name ``rerank cv`` directories (the re-ranker's test run; the
reference named ``bm25`` is the directory's first-stage run instead). For a ``dla`` system, the propensities it
learnt on each fold (the ``propensities learnt`` lines of the cv log, ``DIR.log``) are averaged over folds.
``--depth 10`` evaluates each run cut to its first stage's top 10: the documents a top-10 click log showed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from scipy import stats

from rerank import (
    Collection,
    CrossValidationDirectory,
    as_collection_config,
    config_settings,
    evaluate,
    ranked,
    read_run,
)

LEARNT = re.compile(r"propensities learnt by model\.click_loss, ranks 1 to \d+: ([0-9., ]+)")


def _named(items: list[str]) -> dict[str, Path]:
    return {name: Path(path) for name, path in (item.split("=", 1) for item in items)}


def _per_query(path: Path, which: str, qrels: dict, queries: list[str], depth: int | None) -> list[float]:
    folder = CrossValidationDirectory(path)
    run = read_run(folder.run(which))
    if depth is not None:  # as if only the first stage's top ``depth`` had been re-ranked
        first_stage = read_run(folder.run("first_stage"))
        top = {qid: {doc for doc, _ in ranked(first_stage.get(qid, {}))[:depth]} for qid in queries}
        run = {qid: {doc: score for doc, score in run.get(qid, {}).items() if doc in top[qid]} for qid in queries}
    result = evaluate({q: run.get(q, {}) for q in queries}, {q: qrels[q] for q in queries}, ["nDCG@10"])
    return [result.per_query.get(q, {}).get("nDCG@10", 0.0) for q in queries]


def _learnt(path: Path) -> list[float] | None:
    """DLA's propensities averaged over the folds' last reports in the cv log, or None when it reports none."""
    log = path.with_name(path.name + ".log")
    if not log.is_file():
        return None
    per_fold: dict[str, list[float]] = {}
    fold = "?"
    for line in log.read_text(errors="replace").splitlines():
        if "rerank.cli.cv: fold" in line:
            fold = line.split("fold", 2)[1].split(":")[0].strip()
        if match := LEARNT.search(line):
            per_fold[fold] = [float(value) for value in match.group(1).split(",")]
    if not per_fold:
        return None
    return [statistics.fmean(values) for values in zip(*per_fold.values())]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the collection's config (its data.collection)")
    parser.add_argument("--reference", action="append", default=[], help="NAME=DIR (bm25=DIR: its first stage)")
    parser.add_argument("--system", action="append", default=[], help="NAME=DIR, a rerank cv directory")
    parser.add_argument("--against", nargs="+", default=["bm25"], help="the names every system is tested against")
    parser.add_argument("--depth", type=int, help="evaluate each run cut to its first stage's top DEPTH (as if only "
                        "those had been re-ranked)")
    parser.add_argument("--json", type=Path, help="also write the table as JSON")
    args = parser.parse_args(argv)
    settings = config_settings(args.config)
    collection = Collection(as_collection_config(settings["data"]["collection"], "data.collection"))
    references, systems = _named(args.reference), _named(args.system)
    first = next(iter({**references, **systems}.values()))
    queries = sorted(q for q in read_run(CrossValidationDirectory(first).run("first_stage")) if q in collection.qrels)
    scores = {name: _per_query(path, "first_stage" if name == "bm25" else "reranker", collection.qrels, queries,
                               args.depth) for name, path in {**references, **systems}.items()}
    rows = []
    print(f"| system | nDCG@10 ({len(queries)} queries) | " + " | ".join(f"vs {a}" for a in args.against) + " |")
    print("|---|---:|" + "---|" * len(args.against))
    for name, values in scores.items():
        row = {"system": name, "nDCG@10": statistics.fmean(values)}
        cells = []
        for other in args.against:
            if other == name:
                cells.append("")
                continue
            delta = statistics.fmean(values) - statistics.fmean(scores[other])
            p = float(stats.ttest_rel(values, scores[other]).pvalue) if values != scores[other] else 1.0
            row[f"vs {other}"] = {"delta": delta, "p": p}
            cells.append(f"{delta:+.4f}, p = {p:.2g}")
        if name in systems and (learnt := _learnt(systems[name])) is not None:
            row["propensities learnt"] = learnt
        rows.append(row)
        print(f"| {name} | {row['nDCG@10']:.4f} | " + " | ".join(cells) + " |")
    for row in rows:
        if "propensities learnt" in row:
            print(f"{row['system']}: propensities learnt (mean over folds):",
                  ", ".join(f"{p:.3f}" for p in row["propensities learnt"]))
    if args.json:
        args.json.write_text(json.dumps({"queries": len(queries), "rows": rows,
                                         "command": " ".join(["python", *sys.argv])}, indent=2) + "\n")


if __name__ == "__main__":
    main()
