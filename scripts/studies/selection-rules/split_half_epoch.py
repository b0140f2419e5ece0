"""How well a rule for choosing the tested epoch generalises, judged on validation queries only.

A fit tests the checkpoint of the epoch whose pure re-ranker scores the highest validation figure (``best``:
Lightning's ``ModelCheckpoint``, mode max, so a later epoch must be strictly higher). This script re-judges that
choice on the runs a ``rerank cv`` folder keeps of every epoch (``fold<k>/runs/validation.epoch<N>.run``). The rules
(:data:`RULES`, :func:`epoch_of`):

- ``best``: the epoch with the highest mean (the first of equals), the fits' rule before 2026-11-29;
- ``one_se``: the last epoch, unless the best beats it by more than one standard error of the mean per-query
  difference, the fits' rule since (:func:`rerank.ranker.selection.chosen_epoch`; with two epochs, the rule as
  pre-registered: an earlier epoch that beats the last so, the best of them);
- ``last``: the last epoch, no choice.

For each fold, the judged validation queries are split in two at random (``--halvings`` times, seeded by the fold);
each rule chooses on one half and is measured on the other, both ways round. A rule's estimate is the mean of
``--measure`` over folds, halvings and halves (docs/experiments/README.md, "Choosing the epoch"). The script first
checks that the fit's own rule (its ``evaluation.selection.epoch``; ``best`` for fits made before the option) on the
whole fold gives the epoch the fit tested (its ``runs/validation.run``) and stops otherwise. It needs each fold's
``config.yaml`` (its collection and folds) and runs; the qrels are the collection's
that the fits read (``--qrels`` to give a file)::

    python scripts/studies/selection-rules/split_half_epoch.py runs/cranfield
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import halves
import numpy as np
import yaml

from rerank import (
    Collection,
    FoldsConfig,
    Qrels,
    as_collection_config,
    chosen_epoch,
    evaluate,
    make_split,
    read_qrels,
    read_run,
    resolution,
)

RULES = ("best", "one_se", "last")
"""The epoch choices compared (module docstring); ``best`` is the fits'."""


def epoch_of(values: Sequence[np.ndarray], rule: str) -> int:
    """The epoch (0-based) ``rule`` chooses from each epoch's per-query values on the same queries: ``last``, or the
    fits' own choice (:func:`rerank.ranker.selection.chosen_epoch`)."""
    return len(values) - 1 if rule == "last" else chosen_epoch(values, rule)


def split_half(values: Sequence[np.ndarray], halvings: int, seed: int) -> dict[str, float]:
    """Each rule's mean measure on the half it did not choose on, over ``halvings`` halvings and both halves."""
    held_out: dict[str, list[float]] = {rule: [] for rule in RULES}
    for pick, judge in halves.halvings(len(values[0]), halvings, seed):
        for rule in RULES:
            epoch = epoch_of([per[pick] for per in values], rule)
            held_out[rule].append(float(np.mean(values[epoch][judge])))
    return {rule: float(np.mean(figures)) for rule, figures in held_out.items()}


def read_fold(path: Path, qrels: Qrels | None, measure: str) -> tuple[list[np.ndarray], Qrels]:
    """Each epoch's per-query ``measure`` on the fold's judged validation queries (sorted; 0 for a query absent from
    a run, as the fit counts it), after checking that the fit's rule gives the epoch it tested (or the script stops).
    Returns the values and the qrels read."""
    config = yaml.safe_load((path / "config.yaml").read_text())
    data = config["data"]
    if qrels is None:
        qrels = Collection(as_collection_config(data["collection"], "data.collection")).qrels
    queries = sorted(make_split(FoldsConfig(**data["folds"]), qrels).validation)
    files = sorted((path / "runs").glob("validation.epoch*.run"),
                   key=lambda file: int(file.name.removeprefix("validation.epoch").removesuffix(".run")))
    if len(files) < 2:
        sys.exit(f"{path / 'runs'}: {len(files)} validation.epoch<N>.run files: a fit of one epoch, or one made "
                 "before fits kept each epoch's validation run")
    if len(queries) < 4:
        sys.exit(f"{path}: {len(queries)} judged validation queries: too few to halve")
    runs = [read_run(file) for file in files]
    judged = {qid: qrels[qid] for qid in queries}
    values = [np.array(evaluate(run, judged, [measure]).values(measure)) for run in runs]
    tested = read_run(path / "runs" / "validation.run")
    rule = ((config.get("evaluation") or {}).get("selection") or {}).get("epoch", "best")
    fits = epoch_of(values, rule)
    if runs[fits] != tested:
        sys.exit(f"{path}: its rule ({rule}) tests epoch {fits} on these runs, but runs/validation.run (the tested "
                 "weights') is not its validation run: these are not the fit's runs")
    return values, qrels


def describe(name: str, values: Sequence[np.ndarray]) -> str:
    """The fold's epochs on its whole validation fold, and each rule's choice there."""
    last = len(values) - 1
    chosen = {rule: epoch_of(values, rule) for rule in RULES}
    margins = ", ".join(f"epoch {epoch} {float(np.mean(values[epoch] - values[last])):+.4f} against the last "
                        f"(one standard error {resolution(values[epoch], values[last]) / 2:.4f})"
                        for epoch in range(last))
    return (f"{name}: {len(values[0])} queries; " + ", ".join(f"epoch {epoch} {np.mean(per):.4f}"
                                                               for epoch, per in enumerate(values))
            + f"; {margins}; " + ", ".join(f"{rule} chooses epoch {epoch}" for rule, epoch in chosen.items()))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a rerank cv output folder (fold1, fold2, ...)")
    parser.add_argument("--qrels", type=Path, help="a qrels file (default: the judgments of the collection the fits "
                        "read, label map included)")
    parser.add_argument("--measure", default="nDCG@10")
    parser.add_argument("--halvings", type=int, default=200)
    args = parser.parse_args(argv)
    paths = sorted((path for path in args.folder.glob("fold*") if (path / "metrics.json").is_file()),
                   key=lambda path: int(path.name.removeprefix("fold")))
    if not paths:
        sys.exit(f"{args.folder}: no fold*/metrics.json: not a rerank cv output folder")
    qrels = read_qrels(args.qrels) if args.qrels else None
    estimates: dict[str, list[float]] = {rule: [] for rule in RULES}
    for path in paths:
        values, qrels = read_fold(path, qrels, args.measure)
        fold = split_half(values, args.halvings, int(path.name.removeprefix("fold")))
        print(describe(path.name, values))
        print(f"{path.name}: split-half " + ", ".join(f"{rule} {value:.4f}" for rule, value in fold.items()))
        for rule, value in fold.items():
            estimates[rule].append(value)
    for rule in RULES:
        print(f"split-half estimate, {rule}: {np.mean(estimates[rule]):.4f} "
              f"(folds: {', '.join(f'{value:.4f}' for value in estimates[rule])})")


if __name__ == "__main__":
    main()
