"""The loss heads compared inside the default recipe (docs/experiments/loss-study.md, pre-registered there): one
``rerank cv`` per head, the qrels head swapped (``--config losses/<head>.yaml``), everything else the recipe's, the
judgment-free stage shared by every head (it reads no judgment, so its cache key leaves the qrels head out), then
the heads against ListNet (today's head) over all queries.

    python scripts/studies/loss-study/loss_study.py --out runs/loss-study/cranfield -- --config cranfield.yaml \\
        --pretrain.max_steps 1000
    python scripts/studies/loss-study/loss_study.py --out runs/loss-study/cranfield-qrels --qrels-only -- \\
        --config cranfield.yaml \\
        --pretrain.max_steps 1000

What follows ``--`` is passed to every ``rerank cv`` (the collection, the stage's steps pinned so that a busy machine
cannot give one head a shorter stage). Resumable: a head whose ``cv_metrics.json`` exists is not run again, and an
interrupted head's ``rerank cv`` resumes its folds. Then ``OUT/report.json``, ``OUT/report.md`` and
``OUT/folds.png``: for each head, against the reference on the folds both finished (a study cut short is reported on
the folds it has, and says which), the pure re-ranker and the deployed ranker on nDCG@10 (primary), nDCG@20, MAP and
P@10 over those folds' judged queries (a query without candidates counts 0, as ``rerank cv`` counts it), each fold's
validation nDCG@10, and against the reference head (``--reference``, ListNet) the mean difference, the p-value of a
paired t-test over queries, the Bonferroni-corrected one (times the number of heads compared) and the smallest
difference that test detects at 80 % power from the per-query spread (``(z(1 - a/2m) + z(0.8)) sd / sqrt(n)``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import yaml
from scipy import stats

from rerank import (
    Collection,
    CrossValidationDirectory,
    FoldsConfig,
    Run,
    RunDirectory,
    as_collection_config,
    evaluate,
    make_split,
    paired_p,
    read_run,
    restrict,
)

HEADS = ("listnet", "hinge", "smoothi_ndcg", "softndcg", "lambdarank", "neural_ndcg")
MEASURES = ("nDCG@10", "nDCG@20", "MAP", "P@10")
PRIMARY = "nDCG@10"
RANKERS = {"pure": "reranker", "deployed": "deployed"}
BASELINES = {"first_stage": "BM25", "teacher": "the teacher"}
ALPHA, POWER = 0.05, 0.8


def run_heads(heads: list[str], out: Path, cv_arguments: list[str], qrels_only: bool) -> None:
    """``rerank cv`` for each head not yet done (its ``cv_metrics.json`` absent), one after the other."""
    for head in heads:
        folder = CrossValidationDirectory(out / head)
        if folder.metrics.exists():
            print(f"{head}: done before ({folder.metrics})", flush=True)
            continue
        command = [sys.executable, "-m", "rerank", "cv", *cv_arguments, "--config",
                   f"losses/{head}.yaml",
                   *(["--config", "losses/qrels-only.yaml"] if qrels_only else []),
                   "--output_dir", str(folder.root)]
        print(f"{head}: {' '.join(command)}", flush=True)
        subprocess.run(command, check=True)


def finished_folds(out: Path, head: str) -> list[int]:
    """The folds of the head's cv that finished (their ``metrics.json`` written): every fold once the cv is done, the
    first ones of a cv that was stopped (a study cut short is reported on the folds it has)."""
    folder = CrossValidationDirectory(out / head)
    if folder.metrics.exists():
        return folder.read_metrics()["folds"]
    return sorted(int(path.parent.name.removeprefix("fold")) for path in folder.root.glob("fold*/metrics.json"))


def qrels_of(out: Path, head: str, folds: list[int]) -> dict[str, dict[str, int]]:
    """The judgments of the judged test queries of ``folds``, as ``rerank cv`` measures them."""
    fold = CrossValidationDirectory(out / head).fold(folds[0])
    config = yaml.safe_load(fold.config.read_text())["data"]
    qrels = Collection(as_collection_config(config["collection"], "data.collection")).qrels
    splits = (make_split(FoldsConfig(**{**config["folds"], "test": k}), qrels) for k in folds)
    return {qid: qrels[qid] for split in splits for qid in split.test if qid in qrels}


def deployed_ranker(fold: RunDirectory) -> str:
    """The ranker the fold deployed."""
    return fold.read_deployment()["ranker"]


def test_runs(out: Path, head: str, folds: list[int]) -> dict[str, Run]:
    """The test runs of ``folds`` put together: the pure re-ranker's, each fold's deployed ranker's, and the
    baselines' on the same candidates (the first stage's scores of them; the teacher's, where the folds had one)."""
    folder = CrossValidationDirectory(out / head)
    runs: dict[str, Run] = {name: {} for name in (*RANKERS, *BASELINES)}
    for k in folds:
        fold = folder.fold(k)
        deployed = deployed_ranker(fold)
        test = read_run(fold.run("test"))
        runs["pure"].update(test)
        runs["deployed"].update(read_run(fold.run("test" if deployed == "reranker" else f"test.{deployed}")))
        runs["first_stage"].update(restrict(read_run(fold.first_stage_run), test))
        if fold.run("test.teacher").exists():
            runs["teacher"].update(read_run(fold.run("test.teacher")))
    return {name: run for name, run in runs.items() if run}


def per_query(out: Path, head: str, folds: list[int], qrels: dict[str, dict[str, int]]
              ) -> dict[str, dict[str, list[float]]]:
    """Each ranker's values of each measure over the judged queries, in query-id order (0 without candidates)."""
    return {name: {measure: evaluate(run, qrels, MEASURES).values(measure) for measure in MEASURES}
            for name, run in test_runs(out, head, folds).items()}


def per_fold(out: Path, head: str, folds: list[int]) -> dict[str, list[float]]:
    """Each ranker's test ``PRIMARY`` on each of ``folds``, as the fold measured it."""
    figures: dict[str, list[float]] = {name: [] for name in RANKERS}
    for k in folds:
        fold = CrossValidationDirectory(out / head).fold(k)
        metrics = fold.read_metrics()
        figures["pure"].append(metrics["reranker"][PRIMARY])
        figures["deployed"].append(metrics[deployed_ranker(fold)][PRIMARY])
    return figures


def validation(out: Path, head: str, folds: list[int]) -> list[float]:
    """Each fold's validation nDCG@10 of the pure re-ranker (its tested checkpoint's, the figure its deployment was
    chosen on)."""
    folder = CrossValidationDirectory(out / head)
    return [folder.fold(k).read_deployment()["validation"]["reranker"] for k in folds]


def detectable(differences: list[float], comparisons: int) -> float:
    """The smallest mean difference a two-sided paired t-test at ``ALPHA / comparisons`` detects with ``POWER``."""
    spread = math.sqrt(sum((d - sum(differences) / len(differences)) ** 2 for d in differences)
                       / (len(differences) - 1))
    z = stats.norm.ppf(1 - ALPHA / (2 * comparisons)) + stats.norm.ppf(POWER)
    return z * spread / math.sqrt(len(differences))


def report(out: Path, heads: list[str], reference: str) -> dict:
    """Each head against the reference on the folds both finished (every fold once the study is done), and against
    the baselines."""
    done = {head: finished_folds(out, head) for head in heads}
    compared = [head for head in heads if head != reference]
    everything = qrels_of(out, reference, done[reference])
    baselines = per_query(out, reference, done[reference], everything)
    result: dict = {"queries": len(everything), "reference": reference, "heads": {},
                    "baselines": {name: {measure: statistics.fmean(v) for measure, v in baselines[name].items()}
                                  for name in BASELINES if name in baselines}}
    for head in heads:
        folds = [k for k in done[head] if k in done[reference]]
        qrels = qrels_of(out, head, folds)
        values = per_query(out, head, folds, qrels)
        entry: dict = {"folds": folds, "queries": len(qrels), "validation": validation(out, head, folds),
                       "per_fold": per_fold(out, head, folds)}
        entry["validation_mean"] = sum(entry["validation"]) / len(folds)
        theirs = per_query(out, reference, folds, qrels) if head != reference else None
        for name in RANKERS:
            entry[name] = {measure: sum(v) / len(v) for measure, v in values[name].items()}
            for baseline in result["baselines"]:
                ours, base = values[name][PRIMARY], values[baseline][PRIMARY]
                entry[name][baseline] = {"difference": statistics.fmean(a - b for a, b in zip(ours, base)),
                                         "p": paired_p(ours, base)}
            if theirs is not None:
                ours, reference_values = values[name][PRIMARY], theirs[name][PRIMARY]
                differences = [a - b for a, b in zip(ours, reference_values)]
                p = paired_p(ours, reference_values)
                entry[name] |= {"difference": sum(differences) / len(differences), "p": p,
                                "p_bonferroni": min(1.0, p * len(compared)),
                                "detectable": detectable(differences, len(compared))}
        if head != reference:
            entry["validation_difference"] = entry["validation_mean"] - statistics.fmean(
                validation(out, reference, folds))
        result["heads"][head] = entry
    if {"smoothi_ndcg", "hinge"} <= set(heads):
        result["seeds_claim"] = seeds_claim(out, done)
    (out / "report.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "report.md").write_text(markdown(result))
    plot(result, out / "folds.png")
    return result


def seeds_claim(out: Path, done: dict[str, list[int]]) -> dict:
    """SmoothI-NDCG against hinge on nDCG@20 (the seeds' claim: +0.018 on Robust04), each ranker, over the folds
    both finished: the mean difference, its 95 % confidence interval and the paired t-test's p-value."""
    folds = [k for k in done["smoothi_ndcg"] if k in done["hinge"]]
    qrels = qrels_of(out, "hinge", folds)
    smoothi, hinge = (per_query(out, head, folds, qrels) for head in ("smoothi_ndcg", "hinge"))
    claim: dict = {"folds": folds, "queries": len(qrels)}
    for name in RANKERS:
        differences = [a - b for a, b in zip(smoothi[name]["nDCG@20"], hinge[name]["nDCG@20"])]
        mean, error = statistics.fmean(differences), stats.sem(differences)
        low, high = stats.t.interval(0.95, len(differences) - 1, loc=mean, scale=error)
        claim[name] = {"difference": mean, "low": low, "high": high,
                       "p": paired_p(smoothi[name]["nDCG@20"], hinge[name]["nDCG@20"])}
    return claim


def markdown(result: dict) -> str:
    reference = result["reference"]
    lines = [f"| head | folds (queries) | validation {PRIMARY} (against {reference}) | pure {PRIMARY} | against "
             f"{reference} (p, Bonferroni) | deployed {PRIMARY} | against {reference} (p, Bonferroni) | pure nDCG@20 | "
             "pure MAP | pure P@10 |",
             "|---|---|---:|---:|---|---:|---|---:|---:|---:|"]
    for head, entry in result["heads"].items():
        cells = []
        for name in RANKERS:
            values = entry[name]
            against = ("" if head == reference else f"{values['difference']:+.4f} (p = {values['p']:.2g}, "
                       f"{values['p_bonferroni']:.2g}; detectable {values['detectable']:.4f})")
            cells += [f"{values[PRIMARY]:.4f}", against]
        pure = entry["pure"]
        validation = f"{entry['validation_mean']:.4f}" + (
            f" ({entry['validation_difference']:+.4f})" if "validation_difference" in entry else "")
        folds = ",".join(str(k) for k in entry["folds"])
        lines.append(f"| {head} | {folds} ({entry['queries']}) | {validation} | {' | '.join(cells)} | "
                     f"{pure['nDCG@20']:.4f} | {pure['MAP']:.4f} | {pure['P@10']:.4f} |")
    baselines = {name: BASELINES[name] for name in result["baselines"]}
    figures = " and ".join(f"{label} {result['baselines'][name][PRIMARY]:.4f}" for name, label in baselines.items())
    lines += ["", f"Against the baselines on the same queries ({PRIMARY}; {figures} over all {result['queries']} "
              "queries):", "",
              "| head | pure against " + " | pure against ".join(baselines.values()) + " | deployed against "
              + " | deployed against ".join(baselines.values()) + " |", "|---|" + "---:|" * 2 * len(baselines)]
    for head, entry in result["heads"].items():
        cells = [f"{entry[name][baseline]['difference']:+.4f} (p = {entry[name][baseline]['p']:.2g})"
                 for name in RANKERS for baseline in baselines]
        lines.append(f"| {head} | {' | '.join(cells)} |")
    if "seeds_claim" in result:
        claim = result["seeds_claim"]
        lines += ["", f"SmoothI-NDCG against hinge, nDCG@20 (the seeds' claim: +0.018), folds "
                  f"{','.join(str(k) for k in claim['folds'])} ({claim['queries']} queries): " + "; ".join(
                      f"{name} {claim[name]['difference']:+.4f} (95 % CI {claim[name]['low']:+.4f} to "
                      f"{claim[name]['high']:+.4f}, p = {claim[name]['p']:.2g})" for name in RANKERS) + "."]
    return "\n".join(lines) + (f"\n\nEach head against {reference} over the queries of the folds both finished; "
                               f"{reference}: {result['queries']} queries.\n")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(RANKERS), figsize=(5 * len(RANKERS), 3.6), sharey=True)
    for axis, name in zip(axes, RANKERS):
        for head, entry in result["heads"].items():
            axis.plot(entry["folds"], entry["per_fold"][name], marker="o", label=head)
        axis.set_title(f"{name}: {PRIMARY} per test fold")
        axis.set_xlabel("fold")
        axis.set_xticks(result["heads"][result["reference"]]["folds"])
    axes[0].set_ylabel(PRIMARY)
    axes[-1].legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> dict:
    arguments = sys.argv[1:] if argv is None else argv
    ours, cv_arguments = (arguments[: arguments.index("--")], arguments[arguments.index("--") + 1:]) \
        if "--" in arguments else (arguments, [])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--heads", nargs="+", default=list(HEADS), choices=HEADS)
    parser.add_argument("--reference", default="listnet")
    parser.add_argument("--qrels-only", action="store_true",
                        help="the training folds learn from their qrels alone (no teacher), the stage kept")
    parser.add_argument("--report-only", action="store_true", help="report the heads already run")
    args = parser.parse_args(ours)
    if args.reference not in args.heads:
        parser.error(f"--reference {args.reference} must be one of --heads")
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        run_heads(args.heads, args.out, cv_arguments, args.qrels_only)
    result = report(args.out, args.heads, args.reference)
    print((args.out / "report.md").read_text())
    return result


if __name__ == "__main__":
    main()
