"""The choice of the deployed ranker from a validation fold's runs: one pure function, :func:`select`.

A fit calls it at the end of every validation (:class:`~rerank.training.evaluator.Evaluator`), and every
script that re-applies the rule to a fit's saved runs calls it too (``scripts/split_half_deploy.py``), so that the
rule is written once. Given the re-ranker's run of the validation queries, the first stage's scores of the same
candidates and, with a teacher, the teacher's, :func:`select`

1. measures each on ``measure`` (:func:`rerank.evaluation.evaluate`, a query without candidates counting 0);
2. with ``interpolate``, searches the weight ``w`` of ``w z(re-ranker) + (1 - w) z(first stage)`` over ``grid``
   and, with a teacher, the 66 weights of the fusion with the teacher and the first stage
   (:mod:`rerank.interpolation`);
3. deploys by the rule of :mod:`rerank.deployment`: :func:`~rerank.deployment.choose` among the deployable rankers
   (``fused`` only with a teacher that scores new queries), then, under ``deploy: auto`` with ``fused`` deployable,
   the teacher alone unless the chosen ranker :func:`~rerank.deployment.beats_teacher` on these queries.

Everything it returns is a function of its arguments: the same runs give the same deployment to the last digit,
in a fit or out of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .data.trec import Qrels, Run
from .deployment import (
    PARTS,
    RANKERS,
    TEACHER_ALONE,
    Deployment,
    beats_teacher,
    choose,
    deployable_teacher,
    portable,
    resolution,
)
from .evaluation import evaluate
from .interpolation import DEFAULT_GRID, best_weight, best_weights
from .teacher import TeacherConfig

FUSED = PARTS["fused"]
"""The runs that ``fused`` mixes, in the order of its weights."""


@dataclass(frozen=True)
class SelectionRules:
    """How a fit chooses what it deploys: ``evaluation.selection`` in the YAML
    (:mod:`rerank.training.evaluator`).

    Attributes:
        measure: the validation measure every choice is made on (the checkpoint too).
        interpolate: whether the fusions (``interpolated``; ``fused`` with a teacher) are searched at all.
        grid: the weights ``w`` tried for ``interpolated``.
        deploy: ``auto`` (the rule) or the ranker to deploy whatever validation says: ``reranker``,
            ``interpolated`` or ``fused`` (the fusions need ``interpolate: true``; ``fused`` a bi-encoder teacher).

    Raises:
        ValueError: ``deploy`` unknown, or a fusion without ``interpolate``.
    """

    measure: str = "nDCG@20"
    interpolate: bool = False
    grid: Sequence[float] = DEFAULT_GRID
    deploy: str = "auto"

    def __post_init__(self) -> None:
        if self.deploy not in ("auto", *RANKERS):
            raise ValueError(f"evaluation.selection.deploy must be auto or one of {', '.join(RANKERS)}; "
                             f"got {self.deploy!r}")
        if self.deploy in ("interpolated", "fused") and not self.interpolate:
            raise ValueError(f"evaluation.selection.deploy {self.deploy} is a fusion, measured only with "
                             "evaluation.selection.interpolate: true")


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


def select(runs: ValidationRuns, qrels: Qrels, rules: SelectionRules) -> Selection:
    """The deployed ranker and the weights chosen on ``runs`` against ``qrels`` by ``rules`` (module docstring).

    Raises:
        ValueError: ``rules.deploy`` names a ranker that cannot be deployed here, saying why.
    """
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
    weights = {"reranker": {"reranker": 1.0},
               "interpolated": {"reranker": interpolation_weight, "first_stage": 1 - (interpolation_weight or 0.0)},
               "fused": dict(zip(FUSED, fusion_weights or ()))}
    candidates = {ranker: figure[ranker] for ranker in ("reranker", "interpolated") if ranker in figure}
    excluded = {}
    if "fused" in figure:
        why = deployable_teacher(runs.teacher_config)
        if why is None:
            candidates["fused"] = figure["fused"]
        else:
            excluded["fused"] = why
    ranker = choose(candidates) if rules.deploy == "auto" else rules.deploy
    if ranker not in candidates:
        raise ValueError(f"evaluation.selection.deploy {ranker}: {excluded.get(ranker, 'it was not measured')}")
    fineness = None
    if "teacher" in measured:
        fineness = resolution(measured["reranker"].values(measure), measured["teacher"].values(measure))
    if rules.deploy == "auto" and "fused" in candidates:
        parts = runs.reranker, runs.first_stage, runs.teacher
        chosen = Deployment(ranker, weights[ranker], runs.teacher_config if ranker == "fused" else None)
        alone = Deployment("fused", dict(TEACHER_ALONE), runs.teacher_config)
        ours, teachers = (evaluate(deployment.combine(*parts), qrels, [measure]) for deployment in (chosen, alone))
        if not beats_teacher(ours.values(measure), teachers.values(measure)):
            ranker, fusion_weights = "fused", tuple(TEACHER_ALONE[name] for name in FUSED)
            weights["fused"], figure["fused"] = dict(TEACHER_ALONE), teachers.mean[measure]
    teacher = runs.teacher_config if ranker == "fused" else None
    deployment = Deployment(ranker=ranker, weights=weights[ranker], teacher=portable(teacher) if teacher else None,
                            measure=measure, validation=dict(figure), excluded=excluded,
                            queries=len(qrels), resolution=fineness)
    return Selection(figure, interpolation_weight, fusion_weights, deployment)

