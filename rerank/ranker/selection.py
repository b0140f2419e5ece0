"""The choice of the deployed ranker from a validation fold's runs: one pure function, :func:`select`.

A fit calls it at the end of every validation (:class:`~rerank.callbacks.evaluator.Evaluator`), and every
script that re-applies the rule to a fit's saved runs calls it too
(``scripts/studies/selection-rules/split_half_deploy.py``), so that the rule is written once. Given the re-ranker's run
of the validation queries, the first stage's scores of the same
candidates and, with a teacher, the teacher's, :func:`select`

1. measures each on ``measure`` (:func:`rerank.evaluation.measures.evaluate`, a query without candidates counting 0);
2. with ``interpolate``, searches the weight ``w`` of ``w z(re-ranker) + (1 - w) z(first stage)`` over ``grid``
   and, with a teacher, the 66 weights of the fusion with the teacher and the first stage
   (:mod:`rerank.evaluation.fusion`);
3. deploys by the rule of :mod:`rerank.ranker.deployment`: :func:`~rerank.ranker.deployment.choose` among the
   deployable rankers (``fused`` only with a teacher that scores new queries), then, under ``deploy: auto`` with
   ``fused`` deployable, the teacher alone unless the chosen ranker
   :func:`~rerank.ranker.deployment.beats_teacher` on these queries (``check: one_se``), or unless the search,
   cross-fitted over :data:`CROSS_FIT_PARTS` parts of these queries, beats it on the parts it did not choose on
   (``check: cross_fit``: :func:`cross_fitted`).

Everything it returns is a function of its arguments: the same runs give the same deployment to the last digit,
in a fit or out of one.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.selection import EPOCHS, RANKERS, SelectionRules
from ..config.teacher import TeacherConfig
from ..data.trec import Qrels, Run
from ..evaluation.fusion import best_weight, best_weights
from ..evaluation.measures import evaluate
from .deployment import (
    PARTS,
    TEACHER_ALONE,
    Deployment,
    beats_teacher,
    choose,
    deployable_teacher,
    portable,
    resolution,
)

FUSED = PARTS["fused"]
"""The runs that ``fused`` mixes, in the order of its weights."""
CROSS_FIT_PARTS = 5
"""The parts of the validation queries that ``check: cross_fit`` holds out in turn."""
@dataclass(frozen=True)
class ValidationRuns:
    """A validation fold's runs over the same candidates: the re-ranker's, the first stage's scores of them, and the
    teacher's (None without a teacher) with its specification (what ``fused`` would deploy)."""

    reranker: Run
    first_stage: Run
    teacher: Run | None = None
    teacher_config: TeacherConfig | None = None


@dataclass(frozen=True)
class Selection:
    """What :func:`select` chose: each ranker's validation figure (``reranker``, ``first_stage``, ``teacher``,
    ``interpolated``, ``fused``, as measured), the interpolation weight and the fusion's weights (None where not
    searched; the fusion's put on the teacher alone where the rule fell back to it), and the deployment."""

    figures: dict[str, float]
    interpolation_weight: float | None
    fusion_weights: tuple[float, ...] | None
    deployment: Deployment = field(default_factory=Deployment)

    def as_dict(self) -> dict[str, Any]:
        """Plain values, as checkpoints store them."""
        return {"figures": dict(self.figures), "interpolation_weight": self.interpolation_weight,
                "fusion_weights": None if self.fusion_weights is None else list(self.fusion_weights),
                "deployment": self.deployment.as_dict()}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], where: str) -> Selection:
        """A selection from :meth:`as_dict`'s values; ``where`` (the file) names it in errors."""
        weights = values["fusion_weights"]
        return cls(dict(values["figures"]), values["interpolation_weight"],
                   None if weights is None else tuple(weights), Deployment.from_dict(values["deployment"], where))


@dataclass(frozen=True)
class Search:
    """Every ranker measured on some queries and the best weights of each fusion (:func:`search`): the figures,
    the per-query values of the runs given (re-ranker, first stage, teacher), the weights of each deployable ranker,
    and the fusion left out (with why) when its teacher cannot be deployed."""

    figures: dict[str, float]
    values: dict[str, list[float]]
    interpolation_weight: float | None
    fusion_weights: tuple[float, ...] | None
    candidates: dict[str, float]
    excluded: dict[str, str]

    def weights(self, ranker: str) -> dict[str, float]:
        """What ``ranker`` weighs, as :class:`~rerank.ranker.deployment.Deployment` holds it."""
        return {"reranker": {"reranker": 1.0},
                "interpolated": {"reranker": self.interpolation_weight,
                                 "first_stage": 1 - (self.interpolation_weight or 0.0)},
                "fused": dict(zip(FUSED, self.fusion_weights or ()))}[ranker]


def search(runs: ValidationRuns, qrels: Qrels, rules: SelectionRules) -> Search:
    """Steps 1 and 2 of the module docstring on the queries of ``qrels``: each ranker's figure, and with
    ``interpolate`` the best weights of each fusion."""
    measure = rules.measure
    measured = {name: evaluate(run, qrels, [measure]) for name, run in
                (("reranker", runs.reranker), ("first_stage", runs.first_stage), ("teacher", runs.teacher))
                if run is not None}
    figure = {name: evaluation.mean[measure] for name, evaluation in measured.items()}
    interpolation_weight = fusion_weights = None
    if rules.interpolate:
        interpolation_weight, figure["interpolated"] = best_weight(runs.reranker, runs.first_stage, qrels, measure,
                                                                   rules.grid)
        if runs.teacher is not None:
            fusion_weights, figure["fused"] = best_weights([runs.reranker, runs.teacher, runs.first_stage], qrels,
                                                           measure)
    candidates = {ranker: figure[ranker] for ranker in ("reranker", "interpolated") if ranker in figure}
    excluded = {}
    if "fused" in figure:
        why = deployable_teacher(runs.teacher_config)
        if why is None:
            candidates["fused"] = figure["fused"]
        else:
            excluded["fused"] = why
    return Search(figure, {name: evaluation.values(measure) for name, evaluation in measured.items()},
                  interpolation_weight, fusion_weights, candidates, excluded)


def cross_fitted(runs: ValidationRuns, qrels: Qrels, rules: SelectionRules) -> list[float]:
    """The search's out-of-sample values, in query-id order: the queries of ``qrels`` shuffled (seeded) and dealt
    into :data:`CROSS_FIT_PARTS` parts (one query a part when fewer), each part measured on what :func:`search` and
    :func:`~rerank.ranker.deployment.choose` pick on the other parts."""
    order = sorted(qrels)
    random.Random(0).shuffle(order)
    parts = min(CROSS_FIT_PARTS, len(order))
    values: dict[str, float] = {}
    for k in range(parts):
        held_out = {qid: qrels[qid] for qid in order[k::parts]}
        found = search(runs, {qid: judged for qid, judged in qrels.items() if qid not in held_out}, rules)
        ranker = choose(found.candidates)
        teacher = runs.teacher_config if ranker == "fused" else None
        combined = Deployment(ranker, found.weights(ranker), teacher).combine(runs.reranker, runs.first_stage,
                                                                              runs.teacher)
        values |= {qid: value[rules.measure]
                   for qid, value in evaluate(combined, held_out, [rules.measure]).per_query.items()}
    return [values[qid] for qid in sorted(values)]


def select(runs: ValidationRuns, qrels: Qrels, rules: SelectionRules) -> Selection:
    """The deployed ranker and the weights chosen on ``runs`` against ``qrels`` by ``rules`` (module docstring).

    Raises:
        ValueError: ``rules.deploy`` names a ranker that cannot be deployed here, saying why.
    """
    measure = rules.measure
    found = search(runs, qrels, rules)
    figure, fusion_weights, candidates = dict(found.figures), found.fusion_weights, found.candidates
    weights = {ranker: found.weights(ranker) for ranker in RANKERS}
    ranker = choose(candidates) if rules.deploy == "auto" else rules.deploy
    if ranker not in candidates:
        raise ValueError(f"evaluation.selection.deploy {ranker}: {found.excluded.get(ranker, 'it was not measured')}")
    fineness = resolution(found.values["reranker"], found.values["teacher"]) if "teacher" in found.values else None
    if rules.deploy == "auto" and "fused" in candidates:
        parts = runs.reranker, runs.first_stage, runs.teacher
        alone = evaluate(Deployment("fused", dict(TEACHER_ALONE), runs.teacher_config).combine(*parts), qrels,
                         [measure])
        if rules.check == "cross_fit":
            ours = cross_fitted(runs, qrels, rules)
        else:
            chosen = Deployment(ranker, weights[ranker], runs.teacher_config if ranker == "fused" else None)
            ours = evaluate(chosen.combine(*parts), qrels, [measure]).values(measure)
        if not beats_teacher(ours, alone.values(measure)):
            ranker, fusion_weights = "fused", tuple(TEACHER_ALONE[name] for name in FUSED)
            weights["fused"], figure["fused"] = dict(TEACHER_ALONE), alone.mean[measure]
    teacher = runs.teacher_config if ranker == "fused" else None
    deployment = Deployment(ranker=ranker, weights=weights[ranker], teacher=portable(teacher) if teacher else None,
                            measure=measure, validation=dict(figure), excluded=found.excluded,
                            queries=len(qrels), resolution=fineness)
    return Selection(figure, found.interpolation_weight, fusion_weights, deployment)


def chosen_epoch(values: Sequence[Sequence[float]], rule: str) -> int:
    """Which of a fit's validations (0-based, in order) gives the weights it tests, from each one's per-query
    figures on the same queries: ``best``, the highest mean (the first of equals, as ``ModelCheckpoint`` in mode max
    keeps it); ``one_se``, the last, unless the best beats it by more than one standard error of their per-query
    difference (:func:`~rerank.ranker.deployment.beats_teacher`'s test, the last validation in the teacher's place: the
    schedule's end point is the simpler choice; the evidence: docs/experiments/epoch-rule.md).

    Raises:
        ValueError: ``rule`` unknown, or no validation.
    """
    if rule not in EPOCHS or not values:
        raise ValueError(f"chosen_epoch: rule {rule!r} (one of {', '.join(EPOCHS)}) on {len(values)} validations")
    means = [sum(per) / len(per) if len(per) else 0.0 for per in values]
    best = means.index(max(means))
    if rule == "best" or beats_teacher(values[best], values[-1]):
        return best
    return len(values) - 1
