"""How well a rule for choosing the deployed ranker generalises, judged on validation queries only.

For each fold of a ``rerank cv`` output folder, the script splits the fold's validation queries in two at random
(``--halvings`` times, seeded by the fold); each rule chooses its ranker and weights on one half and is measured
on the other, both ways round. A rule's estimate is the mean of ``--measure`` over folds, halvings and halves.
The rules (:data:`RULES`) choose among ``reranker``, ``interpolated`` and ``fused`` with
:func:`rerank.ranker.deployment.choose`: ``simplex``, the best of the 66 points of the simplex over (re-ranker, teacher,
first stage) in steps of 0.1 (the fits' rule before 2026-11-28); ``line``, the best of the 11 points ``w``
re-ranker + ``1 - w`` teacher; ``smoothed``, the best after each point's figure is averaged with its grid
neighbours' (:func:`smoothed`); ``anchored``, the fits' rule since: :func:`rerank.ranker.selection.select` itself
(simplex's choice if it :func:`~rerank.ranker.deployment.beats_teacher` alone, else the teacher alone;
docs/experiments/README.md), on the half's queries. With ``--pooled``, ``pooled`` is ``anchored`` on the half's
queries together with the other
folds' whole validation folds (each scored by the fit that validated on it), but the one that is this fold's test
fold: what :func:`rerank.ranker.selection.select` would choose under ``rerank cv`` from every fit's validation runs.
With ``--cross-fit``, ``cross_fit`` is ``anchored`` with ``check: cross_fit`` (the search's choice kept only if,
cross-fitted over parts of the half, it beats the teacher alone on the parts it did not choose on).
The script first rebuilds each fold's deployment by the rule its fit used, and stops unless it is the fit's to the
last digit.

With ``--test`` it then applies each rule to each fold's whole validation set and prints, read after the
decision, what the chosen rankers give on the test folds against the teacher (paired t-test over queries).

It needs each fold's ``config.yaml`` (its folds), ``runs/validation.run`` and ``runs/test.run`` (the
re-ranker's), ``first_stage.trec`` and the teacher's run over every query (``--teacher``, default the folder's
``test.teacher.run``); the qrels are the collection's that the fits read (``--qrels`` to give a file)::

    python scripts/studies/selection-rules/split_half_deploy.py runs/cranfield --test
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import halves
import numpy as np
import yaml
from scipy.stats import ttest_rel

from rerank import (
    DEFAULT_GRID,
    RANKERS,
    TEACHER_ALONE,
    Collection,
    FoldsConfig,
    Qrels,
    Run,
    SelectionRules,
    TeacherConfig,
    ValidationRuns,
    as_collection_config,
    choose,
    evaluate,
    fuse,
    make_split,
    read_qrels,
    read_run,
    restrict,
    simplex,
)
from rerank import select_ranker as select

RULES = {"simplex": simplex(3), "line": tuple((w, round(1 - w, 1), 0.0) for w in reversed(DEFAULT_GRID)),
         "smoothed": simplex(3), "anchored": simplex(3)}
"""The weights (re-ranker, teacher, first stage) that ``fused`` searches under each rule (``anchored``: the fit's,
:func:`rerank.ranker.selection.select`)."""
Choice = tuple[str, tuple[float, ...]]
"""A ranker and its weights."""
TEACHER = tuple(TEACHER_ALONE.values())
"""The fused point that is the teacher alone (re-ranker, teacher, first stage)."""

FIT_RULES = ("anchored", "simplex")
"""The rules fits have deployed by: ``anchored`` since 2026-11-28, ``simplex`` before."""


def smoothed(per: dict[tuple[float, ...], np.ndarray], rows: np.ndarray) -> dict[tuple[float, ...], float]:
    """Each weight vector's mean on ``rows``, averaged with its grid neighbours' (at most 0.1 away in every
    weight: up to 6 on the simplex, 2 on a line, none for a single point)."""
    means = {weights: float(np.mean(values[rows])) for weights, values in per.items()}
    return {weights: float(np.mean([mean for other, mean in means.items()
                                     if max(abs(a - b) for a, b in zip(weights, other)) <= 0.1 + 1e-9]))
            for weights in means}


def per_query(run: Run, qrels: Qrels, measure: str, queries: Sequence[str]) -> np.ndarray:
    """``measure`` of each of the sorted ``queries`` (0 for one absent from the run, as the fit counts it)."""
    return np.array(evaluate(run, {qid: qrels[qid] for qid in queries}, [measure]).values(measure))


def candidates(parts: Sequence[Run], qrels: Qrels, measure: str, queries: Sequence[str],
               ) -> dict[str, dict[tuple[float, ...], np.ndarray]]:
    """Each ranker's per-query values for each weight vector any rule searches: ``reranker``, ``interpolated``
    (re-ranker and first stage) and ``fused`` (re-ranker, teacher, first stage)."""
    reranker, _, first_stage = parts
    fused = {weights: per_query(fuse(parts, weights), qrels, measure, queries)
             for weights in {*RULES["simplex"], *RULES["line"]}}
    return {"reranker": {(1.0,): per_query(reranker, qrels, measure, queries)},
            "interpolated": {(w, 1 - w): per_query(fuse([reranker, first_stage], [w, 1 - w]), qrels, measure, queries)
                             for w in DEFAULT_GRID},  # as the fit weighs them (rerank.evaluation.fusion.interpolate)
            "fused": fused}


class FitRule:
    """The fits' rule on a fold's validation runs: :func:`rerank.ranker.selection.select` on the queries at ``rows``,
    and on every query of ``always`` (other folds' validation queries, their runs in ``parts``), its choice checked
    against the teacher by ``check``."""

    def __init__(self, parts: Sequence[Run], qrels: Qrels, queries: Sequence[str], measure: str,
                 teacher: TeacherConfig | None, always: Sequence[str] = (), check: str = "one_se") -> None:
        reranker, teacher_run, first_stage = parts
        self.runs = ValidationRuns(reranker, first_stage, teacher_run, teacher)
        self.qrels, self.queries = qrels, queries
        self.rules = SelectionRules(measure, interpolate=True, check=check)
        self.always = {qid: qrels[qid] for qid in always}

    def __call__(self, rows: np.ndarray) -> Choice:
        deployment = select(self.runs, {self.queries[i]: self.qrels[self.queries[i]] for i in rows} | self.always,
                            self.rules).deployment
        return deployment.ranker, tuple(deployment.weights.values())


@dataclass
class Fold:
    """One fit of a ``rerank cv`` folder, read back: its judged validation and test queries (sorted), each
    deployable ranker's per-query values on both for every weight a rule searches, its validation runs
    (re-ranker, teacher, first stage), its teacher, and its own rule."""

    name: str
    queries: list[str]
    values: dict[str, dict[tuple[float, ...], np.ndarray]]
    test_queries: list[str]
    test_values: dict[str, dict[tuple[float, ...], np.ndarray]]
    parts: list[Run]
    teacher: TeacherConfig | None
    fit: FitRule


def pooled(fold: Fold, folds: Sequence[Fold], qrels: Qrels, measure: str) -> FitRule:
    """``fold``'s rule on its own validation queries and on the other folds' validation folds, but the one that is
    ``fold``'s test fold."""
    pool = [other for other in folds if other is not fold and not set(other.queries) & set(fold.test_queries)]
    parts = [{qid: docs for other in (fold, *pool) for qid, docs in other.parts[i].items()} for i in range(3)]
    return FitRule(parts, qrels, fold.queries, measure, fold.teacher, [qid for other in pool for qid in other.queries])


def chosen(values: dict[str, dict[tuple[float, ...], np.ndarray]], rule: str, rows: np.ndarray,
           fits: dict[str, FitRule]) -> Choice:
    """The ranker and weights ``rule`` deploys from ``values`` on the queries at ``rows``: ``anchored`` and
    ``pooled`` by the fit's own rule (``fits``); the others, each ranker's best weights (ties to the larger first
    weights, as the fit's search), then :func:`choose` among the rankers."""
    if rule in fits:
        return fits[rule](rows)
    searched = {ranker: {weights: per[weights] for weights in RULES[rule]} if ranker == "fused" else per
                for ranker, per in values.items()}
    figures = {ranker: smoothed(per, rows) if rule == "smoothed"
               else {weights: float(np.mean(per[weights][rows])) for weights in per}
               for ranker, per in searched.items()}
    best = {ranker: max((value, weights) for weights, value in per.items()) for ranker, per in figures.items()}
    ranker = choose({name: value for name, (value, _) in best.items()})
    return ranker, best[ranker][1]


def split_half(values: dict[str, dict[tuple[float, ...], np.ndarray]], count: int, halvings: int, seed: int,
               fits: dict[str, FitRule]) -> dict[str, list[float]]:
    """Each rule's measure on the half it did not choose on, for every halving and both halves."""
    rules = [*RULES, *(rule for rule in fits if rule not in RULES)]
    held_out: dict[str, list[float]] = {rule: [] for rule in rules}
    for pick, judge in halves.halvings(count, halvings, seed):
        for rule in rules:
            ranker, weights = chosen(values, rule, pick, fits)
            held_out[rule].append(float(np.mean(values[ranker][weights][judge])))
    return held_out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a rerank cv output folder (fold1, fold2, ...)")
    parser.add_argument("--qrels", type=Path, help="a qrels file (default: the judgments of the collection the fits "
                        "read, label map included)")
    parser.add_argument("--teacher", type=Path, help="the teacher's run over every query "
                        "(default: FOLDER/test.teacher.run)")
    parser.add_argument("--measure", default="nDCG@10")
    parser.add_argument("--halvings", type=int, default=20)
    parser.add_argument("--pooled", action="store_true", help="also the rule on the other folds' validation too")
    parser.add_argument("--cross-fit", action="store_true",
                        help="also the rule with check: cross_fit (the check cross-fitted on the queries)")
    parser.add_argument("--test", action="store_true", help="also read the test folds under each rule")
    args = parser.parse_args(argv)
    teacher = read_run(args.teacher or args.folder / "test.teacher.run")
    paths = sorted((path for path in args.folder.glob("fold*") if (path / "metrics.json").is_file()),
                   key=lambda path: int(path.name.removeprefix("fold")))
    if not paths:
        sys.exit(f"{args.folder}: no fold*/metrics.json: not a rerank cv output folder")
    collection = as_collection_config(yaml.safe_load((paths[0] / "config.yaml").read_text())["data"]["collection"],
                                      "data.collection")
    qrels = read_qrels(args.qrels) if args.qrels else Collection(collection).qrels
    folds = [read_fold(path, qrels, teacher, args.measure) for path in paths]
    rules = [*RULES, *(["pooled"] if args.pooled else []), *(["cross_fit"] if args.cross_fit else [])]
    estimates: dict[str, list[float]] = {rule: [] for rule in rules}
    test: dict[str, dict[str, float]] = {rule: {} for rule in ("teacher", *rules)}
    for fold in folds:
        fits = {"anchored": fold.fit} | ({"pooled": pooled(fold, folds, qrels, args.measure)} if args.pooled else {})
        if args.cross_fit:
            fits["cross_fit"] = FitRule(fold.parts, qrels, fold.queries, args.measure, fold.teacher, check="cross_fit")
        fold_estimates, fold_test = fold_figures(fold, fits, args.halvings)
        for rule, value in fold_estimates.items():
            estimates[rule].append(value)
        for rule, values in fold_test.items():
            test[rule] |= values
    for rule in rules:
        print(f"split-half estimate, {rule}: {np.mean(estimates[rule]):.4f} "
              f"(folds: {', '.join(f'{value:.4f}' for value in estimates[rule])})")
    if args.test:
        queries = sorted(test["teacher"])
        teacher_values = np.array([test["teacher"][qid] for qid in queries])
        print(f"test, {len(queries)} queries: teacher {teacher_values.mean():.4f}")
        for rule in rules:
            deployed = np.array([test[rule][qid] for qid in queries])
            difference, p = deployed.mean() - teacher_values.mean(), ttest_rel(deployed, teacher_values).pvalue
            print(f"test, {rule}: deployed {deployed.mean():.4f}, against the teacher {difference:+.4f}, p = {p:.2g}")


def read_fold(path: Path, qrels: Qrels, teacher: Run, measure: str) -> Fold:
    """One fit's runs and values, its deployment rebuilt from its files (or the script stops: these are not the
    fit's runs)."""
    first_stage = read_run(path / "first_stage.trec")
    metrics = json.loads((path / "metrics.json").read_text())
    deployment = metrics["deployment"]
    data = yaml.safe_load((path / "config.yaml").read_text())["data"]
    fold_queries = make_split(FoldsConfig(**data["folds"]), qrels)
    split, parts = {}, {}
    for name in ("validation", "test"):
        reranker = read_run(path / "runs" / f"{name}.run")
        queries = sorted(getattr(fold_queries, name))  # the fold's judged queries, as the fit measures them
        parts[name] = [reranker, restrict(teacher, reranker), restrict(first_stage, reranker)]
        split[name] = queries, candidates(parts[name], qrels, measure, queries)
    queries, values = split["validation"]
    if len(queries) < 4:
        sys.exit(f"{path}: {len(queries)} judged validation queries: too few to halve")
    deployable = [ranker for ranker in RANKERS
                  if ranker in deployment["validation"] and ranker not in deployment["excluded"]]
    fold = Fold(path.name, queries, {ranker: values[ranker] for ranker in deployable}, *split["test"],
                parts["validation"], teacher_of(data),
                FitRule(parts["validation"], qrels, queries, measure, teacher_of(data)))
    today = _as_the_fit_chose(path, fold.values, deployment, np.arange(len(queries)), fold.fit)
    tested = float(np.mean(fold.test_values[today[0]][today[1]]))
    reported = metrics[today[0]].get(measure, tested)
    if abs(tested - reported) > 1e-9:
        sys.exit(f"{path}: the deployed {today[0]} gives {tested:.4f} on the test queries here, {reported:.4f} "
                 "in metrics.json: these are not the fit's runs")
    return fold


def fold_figures(fold: Fold, fits: dict[str, FitRule], halvings: int,
                 ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Each rule's split-half estimate on ``fold``'s validation queries, and each rule's (and the teacher's) test
    query values, its choice made on the whole validation fold."""
    estimates = {rule: float(np.mean(held_out)) for rule, held_out in
                 split_half(fold.values, len(fold.queries), halvings, int(fold.name.removeprefix("fold")),
                            fits).items()}
    test = {"teacher": dict(zip(fold.test_queries, fold.test_values["fused"][TEACHER]))}
    for rule in estimates:
        ranker, weights = chosen(fold.values, rule, np.arange(len(fold.queries)), fits)
        test[rule] = dict(zip(fold.test_queries, fold.test_values[ranker][weights]))
        print(f"{fold.name}: {rule:7s} deploys {ranker} {weights}, validation "
              f"{np.mean(fold.values[ranker][weights]):.4f}, split-half {estimates[rule]:.4f}")
    return estimates, test


def teacher_of(data: dict) -> TeacherConfig | None:
    """The teacher of the fit's first training source that has one (what its ``fused`` would deploy)."""
    return next((TeacherConfig(**source["teacher"]) for source in data.get("train") or [] if source.get("teacher")),
                None)


def _as_the_fit_chose(fold: Path, values: dict, deployment: dict, whole: np.ndarray, fit: FitRule) -> Choice:
    """The fit's own choice, rebuilt on all its validation queries by the rule it was made with (or the script
    stops)."""
    recorded = (deployment["ranker"], tuple(deployment["weights"].values()))
    fits = {"anchored": fit}
    made_by = next((rule for rule in FIT_RULES if chosen(values, rule, whole, fits) == recorded), None)
    today = chosen(values, made_by or FIT_RULES[0], whole, fits)
    figure = float(np.mean(values[today[0]][today[1]]))
    if made_by is None or abs(figure - deployment["validation"][deployment["ranker"]]) > 1e-9:
        sys.exit(f"{fold}: the fit's rule gives {today} ({figure:.4f}), the fit deployed {recorded} "
                 f"({deployment['validation'][deployment['ranker']]:.4f}): these are not the fit's runs")
    print(f"{fold.name}: the fit deployed {recorded[0]} {recorded[1]}, rebuilt by the {made_by} rule")
    return today


if __name__ == "__main__":
    main()
