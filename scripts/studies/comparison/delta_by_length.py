"""Does one re-ranker's loss to another follow the length of the documents? Each query's nDCG@10 difference
(``--run`` B minus A) against the median length, in the model's tokens, of its first stage's top ``--depth``
candidates: Spearman's rho, the mean difference by length band, and the share of candidates that a row reads whole.

    python scripts/studies/comparison/delta_by_length.py --config cranfield.yaml \
        --collection "{docs: $NF/docs.jsonl, queries: $NF/queries.test.tsv, qrels: $NF/qrels.test.txt}" \
        --run RUNS/nfcorpus-previous-default/test.run RUNS/nfcorpus-default/test.run \
        --first-stage RUNS/nfcorpus-default/first_stage.run --rows 128:26 192:48

``--rows LENGTH:QUERY`` is a row length and its query budget: a document is read whole when its tokens fit
``LENGTH - 3 - min(query tokens, QUERY)`` (three special tokens).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

from rerank import Collection, as_collection_config, config_settings, evaluate, ranked, read_run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a config: its data.collection and model.model_name")
    parser.add_argument("--collection", help="a data.collection (YAML) in place of the config's")
    parser.add_argument("--run", type=Path, nargs=2, required=True, metavar=("A", "B"), help="two test runs")
    parser.add_argument("--first-stage", type=Path, required=True, help="the first-stage run they re-ranked")
    parser.add_argument("--depth", type=int, default=30, help="the candidates re-ranked per query")
    parser.add_argument("--rows", nargs="+", default=["128:26"], help="LENGTH:QUERY row lengths and query budgets")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    settings = config_settings(args.config)
    given = yaml.safe_load(args.collection) if args.collection else settings["data"]["collection"]
    collection = Collection(as_collection_config(given, "--collection" if args.collection else "data.collection"))
    tokenizer = AutoTokenizer.from_pretrained(settings["model"]["model_name"])
    first_stage = read_run(args.first_stage)
    queries = sorted(q for q in first_stage if q in collection.qrels)
    per_query = [evaluate(read_run(path), collection.qrels, ["nDCG@10"]).per_query for path in args.run]
    delta = np.array([per_query[1].get(q, {}).get("nDCG@10", 0.0) - per_query[0].get(q, {}).get("nDCG@10", 0.0)
                      for q in queries])

    def tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    tops = {q: [doc for doc, _ in ranked(first_stage[q])[: args.depth]] for q in queries}
    lengths = {doc: tokens(collection.documents.text(doc)) for doc in {doc for top in tops.values() for doc in top}}
    median = [statistics.median(lengths[doc] for doc in tops[q]) for q in queries]
    query_tokens = [tokens(collection.queries[q]) for q in queries]
    median_array = np.array(median)
    rho = stats.spearmanr(delta, median_array)
    print(f"{len(queries)} queries; mean difference B - A {delta.mean():+.4f}; candidates' tokens: median "
          f"{statistics.median(lengths.values()):.0f} (quartiles {np.percentile(list(lengths.values()), 25):.0f}, "
          f"{np.percentile(list(lengths.values()), 75):.0f})")
    print(f"Spearman rho (difference, median candidate length) = {rho.statistic:+.3f}, p = {rho.pvalue:.2g}")
    thirds = np.digitize(median_array, np.percentile(median_array, [100 / 3, 200 / 3]))
    for third in range(3):
        band = thirds == third
        print(f"  third {third + 1} by length (medians {median_array[band].min():.0f} to "
              f"{median_array[band].max():.0f}): {band.sum()} queries, mean difference {delta[band].mean():+.4f}")
    for row in args.rows:
        length, budget = (int(part) for part in row.split(":"))
        whole = [lengths[doc] <= length - 3 - min(query_tokens[i], budget)
                 for i, q in enumerate(queries) for doc in tops[q]]
        print(f"rows of {length} tokens, queries cut at {budget}: {statistics.fmean(whole):.1%} of the candidates "
              "read whole")


if __name__ == "__main__":
    main()
