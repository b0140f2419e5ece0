"""Compare systems the way the papers report them: ``rerank compare A B ... --config cranfield.yaml``.

Each system is a TREC run file or a ``rerank cv`` directory (its re-ranker's test run, and its interpolated and
fused runs as ``<dir>/interpolated`` and ``<dir>/fused``; the first directory also brings its first-stage run, the
candidates, as the system ``first_stage``); the first system is the baseline. The qrels come from ``--qrels FILE``
or from the collection of the config (``data.collection``, as in every command). For P@1/5/10/20, AP,
nDCG@1/5/10/20 and nDCG over the judged queries of the baseline's run, it prints (and writes to ``--output
DIR/report.md``) a markdown table in the style of SmoothI's Table 4, with a paired two-sided t-test over queries
against the baseline, Bonferroni-corrected over the comparisons made (systems x measures): ``*`` marks p < alpha /
comparisons. It saves two plots: per-fold bars per measure (for cv directories) and the sorted per-query nDCG@20
difference of each system against the baseline.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.cli import LightningArgumentParser

from ..core.atomic import atomic_write
from ..core.figures import save_figure
from ..core.logs import configure_logging
from ..core.run_directory import FUSIONS, CrossValidationDirectory
from ..data.collection import Collection
from ..data.trec import Qrels, Run, read_qrels, read_run
from ..evaluation.measures import evaluate, paired_p, parse_measure
from .arguments import RerankCLI
from .failures import run

MEASURES = ("P@1", "P@5", "P@10", "P@20", "AP", "nDCG@1", "nDCG@5", "nDCG@10", "nDCG@20", "nDCG")
PER_FOLD_MEASURES = ("nDCG@10", "nDCG@20", "P@20", "AP")
"""The measures of the per-fold plot, among those the cv directory reports (``evaluation.metrics``; its first four
when it reports none of these)."""
DESCRIPTION = __doc__.splitlines()[0]


def load_systems(paths: list[str]) -> dict[str, tuple[Run, Path | None]]:
    """``name -> (run, cv directory or None)``; a cv directory gives its re-ranker, first-stage, interpolated and
    fused runs; a run file is named by its stem, or ``folder/stem`` when another system has that name."""
    systems: dict[str, tuple[Run, Path | None]] = {}
    files = [Path(name) for name in paths if not Path(name).is_dir()]
    stems_unique = len({path.stem for path in files}) == len(files)  # else name files parent/stem: hinge/test
    for name in paths:
        path = Path(name)
        if path.is_dir():
            folder = CrossValidationDirectory(path)
            if not folder.is_cross_validation():
                raise FileNotFoundError(f"{path}: not a rerank cv directory (no {folder.run('reranker').name})")
            systems.setdefault("first_stage", (read_run(folder.run("first_stage")), path))  # the first one's
            systems[path.name] = (read_run(folder.run("reranker")), path)
            for fusion in FUSIONS:
                if folder.run(fusion).is_file():
                    systems[f"{path.name}/{fusion}"] = (read_run(folder.run(fusion)), path)
        else:
            label = path.stem if stems_unique and path.stem not in systems else f"{path.parent.name}/{path.stem}"
            if label in systems:
                raise ValueError(f"{path}: two systems would be named {label!r}; give the run files distinct names")
            systems[label] = (read_run(path), None)
    return systems


def compare(systems: dict[str, Run], qrels: Qrels, alpha: float = 0.05) -> dict:
    """Mean measures, per-query values, and Bonferroni-corrected paired t-tests against the first system."""
    baseline, *others = list(systems)
    queries = {qid: qrels[qid] for qid in systems[baseline] if qid in qrels}  # the queries the baseline ran
    results = {name: evaluate(run, queries, MEASURES) for name, run in systems.items()}
    comparisons = max(len(others) * len(MEASURES), 1)
    tests = {}
    for name in others:
        for measure in MEASURES:
            ours = [results[name].per_query[q][measure] for q in sorted(queries)]
            theirs = [results[baseline].per_query[q][measure] for q in sorted(queries)]
            p = paired_p(ours, theirs)
            tests[(name, measure)] = {"p": p, "significant": p < alpha / comparisons}
    return {"baseline": baseline, "results": results, "tests": tests, "comparisons": comparisons, "alpha": alpha}


def markdown(report: dict) -> str:
    """The comparison as a markdown table (``*``: significantly different from the baseline)."""
    lines = ["| system | " + " | ".join(MEASURES) + " |", "|---|" + "---:|" * len(MEASURES)]
    for name, result in report["results"].items():
        cells = []
        for measure in MEASURES:
            test = report["tests"].get((name, measure))
            cells.append(f"{result.mean[measure]:.4f}{'*' if test and test['significant'] else ''}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"`*`: paired two-sided t-test over {len(next(iter(report['results'].values())).per_query)} queries "
                 f"against `{report['baseline']}`, p < {report['alpha']} / {report['comparisons']} (Bonferroni).")
    return "\n".join(lines)


def fold_values(folder: Path, system: str, measures: tuple[str, ...]) -> dict[int, dict[str, float]]:
    """``{test fold: {measure: value}}`` of ``system`` (``first_stage``, a cv directory's name, or
    ``<name>/interpolated``, ``<name>/fused``) from the cv directory's ``cv_metrics.json``, for those of
    ``measures`` it reports, under the names it reports them by (its first four when none)."""
    suffix = system.rsplit("/", 1)[-1]
    key = "first_stage" if system == "first_stage" else suffix if "/" in system and suffix in FUSIONS else "reranker"
    directory = CrossValidationDirectory(folder)
    report = directory.read_metrics()
    if "per_fold" not in report:
        raise ValueError(f"{directory.metrics} has no per-fold values (an older rerank cv wrote it); rerun the "
                         "same rerank cv command to refresh it (finished folds are not retrained)")
    reported = list(report["per_fold"][key][0])
    wanted = {str(parse_measure(measure)) for measure in measures}  # ir_measures' own names: MAP is AP
    chosen = [name for name in reported if str(parse_measure(name)) in wanted] or reported[:4]
    return {fold: {measure: values[measure] for measure in chosen}
            for fold, values in zip(report["folds"], report["per_fold"][key])}


def _color(index: int) -> tuple[float, ...]:
    """System ``index`` (0: the baseline, grey) in tab20 pairs, so that ``x`` and ``x/interpolated`` share a hue."""
    import matplotlib

    return (0.35, 0.35, 0.35, 1.0) if index == 0 else matplotlib.colormaps["tab20"]((index - 1) % 20)


def plot(report: dict, folders: dict[str, Path | None], output: Path) -> list[Path]:
    """Per-fold bars per measure (cv directories) and the sorted per-query nDCG@20 differences; the PNG paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    baseline = report["baseline"]
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for index, (name, result) in enumerate(report["results"].items()):
        if name == baseline:
            continue
        differences = sorted(result.per_query[q]["nDCG@20"] - report["results"][baseline].per_query[q]["nDCG@20"]
                             for q in result.per_query)
        axis.plot(range(len(differences)), differences, label=name, color=_color(index))
    axis.axhline(0, color="black", linewidth=0.8)
    axis.set(xlabel="queries (sorted)", ylabel=f"nDCG@20 - nDCG@20 of {baseline}", title="Per-query differences")
    axis.legend(fontsize="small")
    written.append(save_figure(figure, output / "per_query_ndcg20.png"))
    per_fold = {name: fold_values(folder, name, PER_FOLD_MEASURES) for name, folder in folders.items()
                if folder is not None and CrossValidationDirectory(folder).metrics.is_file()}
    if per_fold:
        measures = list(next(iter(next(iter(per_fold.values())).values())))
        figure, axes = plt.subplots(1, len(measures), figsize=(5 * len(measures), 4), squeeze=False)
        axes = axes[0]
        width = 1 / (len(per_fold) + 1)
        for axis, measure in zip(axes, measures):
            for offset, (name, values) in enumerate(per_fold.items()):
                axis.bar([index + offset * width for index in range(len(values))],
                         [folds[measure] for folds in values.values()], width=width, label=name,
                         color=_color(offset))
            folds = list(next(iter(per_fold.values())))
            axis.set_xticks([index + (len(per_fold) - 1) * width / 2 for index in range(len(folds))], folds)
            axis.set(title=measure, xlabel="test fold")
        figure.legend(*axes[0].get_legend_handles_labels(), loc="upper center", ncol=min(len(per_fold), 6),
                      fontsize="small", bbox_to_anchor=(0.5, 0.0))
        written.append(save_figure(figure, output / "per_fold.png"))
    return written


def _arguments(parser: LightningArgumentParser) -> None:
    parser.add_argument("systems", type=str, nargs="+",
                        help="run files or rerank cv directories; the first is the baseline")
    parser.add_argument("--qrels", type=str | None, default=None,
                        help="a TREC qrels file (default: the qrels of data.collection)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level before the correction")
    parser.add_argument("--output", type=str | None, default=None, help="write report.md and the plots here")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    configure_logging()
    cli = RerankCLI(sys.argv[1:] if argv is None else argv, prog="rerank compare", description=DESCRIPTION,
                    arguments=_arguments, instantiate=False)
    config = cli.config
    if config.qrels:
        qrels = read_qrels(config.qrels)
    else:
        qrels = Collection(cli.run_options.collection).qrels
    loaded = load_systems(config.systems)
    report = compare({name: system_run for name, (system_run, _) in loaded.items()}, qrels, config.alpha)
    table = markdown(report)
    print(table)
    if config.output:
        output = Path(config.output)
        output.mkdir(parents=True, exist_ok=True)
        with atomic_write(output / "report.md") as handle:
            handle.write(table + "\n")
        for path in plot(report, {name: folder for name, (_, folder) in loaded.items()}, output):
            print(path)
    return report


if __name__ == "__main__":
    run(main)
