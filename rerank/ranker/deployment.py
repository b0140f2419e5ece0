"""The ranker a fit deploys: the pure re-ranker, ``interpolated`` or ``fused``, chosen on validation.

A fit measures three rankers built on its cross-encoder (:mod:`rerank.evaluation.fusion`):

- ``reranker``: the cross-encoder's scores alone;
- ``interpolated``: ``w z(re-ranker) + (1 - w) z(first stage)``;
- ``fused``: ``w_r z(re-ranker) + w_t z(teacher) + w_f z(first stage)``, with the zero-shot teacher it learnt from.

``z`` standardises a query's scores over its candidates (Eq. 1 of :mod:`rerank.evaluation.fusion`), so a fused score
depends on the other candidates of the same query: a deployed ``interpolated`` or ``fused`` ranker re-ranks a
query's candidate list, given their first-stage scores, not a lone pair.

**The rule** (:func:`choose`): the ranker with the highest validation figure on ``evaluation.selection.measure``
(that of the checkpoint tested), ties to the simpler ranker (``reranker``, then ``interpolated``, then ``fused``).
Since the grids of both fusions hold the pure re-ranker (weight 1), a fusion is deployed only when it is strictly
better on validation. Where the teacher is deployable, the chosen ranker is then kept only if it beats the teacher
alone by more than one standard error of their per-query difference on validation (:func:`beats_teacher`); otherwise
the teacher alone is deployed (``fused`` with :data:`TEACHER_ALONE`): on 45 to 63 validation queries a fold, the
best of 66 fused weights is partly chance. A fusion is deployable only when every part can score new queries:
``fused`` needs a teacher that is a bi-encoder (not a fixed TREC run, nor a mix with a student), and both fusions
need the first stage's scores of the candidates.

What the deployed ranker needs travels with the exported model, in ``config.json`` under ``rerank.ranker.deployment``
(:meth:`Deployment.as_dict`): the ranker, its weights, the normalisation, the teacher's specification (its
bi-encoder's model id or folder, its row length and its own mix with the first stage) and the validation figures
the choice was made on. ``rerank predict`` and :class:`~rerank.inference.reranker.Reranker` read it; ``transformers``
and ``sentence-transformers`` load the same folder as the pure cross-encoder.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config.selection import RANKERS
from ..config.teacher import TeacherConfig
from ..data.trec import Run
from ..evaluation.calibration import RECORD as CALIBRATION
from ..evaluation.calibration import Calibration
from ..evaluation.fusion import fuse
from ..model.cross_encoder import saved_record
from ..teacher.scores import load_bi_encoder

ZERO_SHOT = ("teacher", "first_stage")
"""The rankers that need no training, which the fine-tuned one is compared with on validation."""
PARTS = {"reranker": ("reranker",), "interpolated": ("reranker", "first_stage"),
         "fused": ("reranker", "teacher", "first_stage")}
"""The runs each ranker mixes, in the order of its weights."""
NORMALISATION = "z-score of each run's scores over a query's candidates (mean 0, population standard deviation 1)"
NAMES = {"reranker": "re-ranker", "interpolated": "interpolated with the first stage",
         "fused": "fused with the teacher and the first stage", "teacher": "zero-shot teacher",
         "first_stage": "first stage"}
"""How the summaries and messages name each ranker."""
LABELS = {"reranker": "re-ranker", "teacher": "teacher", "first_stage": "first stage"}
"""How a fusion's weights are labelled."""


@dataclass(frozen=True)
class Deployment:
    """The deployed ranker and everything it needs to re-rank new queries.

    Attributes:
        ranker: ``reranker``, ``interpolated`` or ``fused``.
        weights: each mixed run's weight (:data:`PARTS`), summing to 1.
        teacher: the teacher that ``fused`` mixes in (a bi-encoder), None for the other rankers.
        measure: the validation measure the choice was made on (``evaluation.selection.measure``).
        validation: that measure on the validation queries for each ranker measured there, the zero-shot ones too.
        excluded: the rankers that could not be deployed, each with the reason.
        queries: how many validation queries the choice rests on (None: not recorded).
        resolution: the smallest difference between the fine-tuned re-ranker and the teacher on ``measure`` that
            those queries tell from chance, two standard errors of their per-query difference (None: no teacher).
    """

    ranker: str = "reranker"
    weights: dict[str, float] = field(default_factory=lambda: {"reranker": 1.0})
    teacher: TeacherConfig | None = None
    measure: str | None = None
    validation: dict[str, float] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)
    queries: int | None = None
    resolution: float | None = None

    def __post_init__(self) -> None:
        if self.ranker not in RANKERS:
            raise ValueError(f"deployment.ranker must be one of {', '.join(RANKERS)}; got {self.ranker!r}")
        if set(self.weights) != set(PARTS[self.ranker]):
            raise ValueError(f"deployment.weights of {self.ranker} must name {', '.join(PARTS[self.ranker])}; got "
                             f"{', '.join(self.weights) or 'none'}")
        if not math.isclose(sum(self.weights.values()), 1.0, abs_tol=1e-6):
            raise ValueError(f"deployment.weights must sum to 1; got {self.weights}")
        if (self.ranker == "fused") != (self.teacher is not None):
            raise ValueError("deployment.teacher: the fused ranker needs its teacher, and only it")

    @property
    def needs_first_stage(self) -> bool:
        """Whether re-ranking needs the candidates' first-stage scores (the fusion's or the teacher's mix)."""
        teacher_mix = self.needs_teacher and self.teacher.first_stage_weight > 0
        return self.weights.get("first_stage", 0.0) > 0 or teacher_mix

    @property
    def needs_teacher(self) -> bool:
        """Whether re-ranking needs the teacher's scores (a weight above 0 for it)."""
        return self.weights.get("teacher", 0.0) > 0

    @property
    def uses_reranker(self) -> bool:
        """Whether the fine-tuned cross-encoder has a weight above 0 in the deployed ranker."""
        return self.weights["reranker"] > 0

    def combine(self, reranker: Run, first_stage: Run | None = None, teacher: Run | None = None) -> Run:
        """The deployed ranker's run from its parts' runs over the same candidates (``reranker``'s); a part of
        weight 0 is not needed (it adds exactly 0)."""
        if self.ranker == "reranker":
            return reranker
        runs = {"reranker": reranker, "first_stage": first_stage, "teacher": teacher}
        parts = [part for part in PARTS[self.ranker] if self.weights[part] > 0]
        missing = [part for part in parts if runs[part] is None]
        if missing:
            raise ValueError(f"the deployed ranker {self.ranker} mixes {', '.join(missing)}: give its scores")
        return fuse([runs[part] for part in parts], [self.weights[part] for part in parts])

    def weights_text(self) -> str:
        """``re-ranker 0.2, teacher 0.8, first stage 0``."""
        return ", ".join(f"{LABELS[part]} {self.weights[part]:g}" for part in PARTS[self.ranker])

    def describe(self) -> str:
        """``fused (re-ranker 0.2, teacher 0.8, first stage 0)``: the ranker and its weights, for summaries."""
        return self.ranker if self.ranker == "reranker" else f"{self.ranker} ({self.weights_text()})"

    def warnings(self) -> list[str]:
        """One line for each thing a user must not miss: a fine-tuned model below a zero-shot ranker on
        validation, a deployed ranker that gives it no weight, a ranker left out as undeployable."""
        lines = []
        own = self.validation.get("reranker")
        better = [(name, value) for name, value in self.validation.items()
                  if name in ZERO_SHOT and own is not None and value > own]
        if better:
            name, value = max(better, key=lambda item: item[1])
            lines.append(f"the fine-tuned re-ranker is below the {NAMES[name]} on validation ({self.measure} "
                         f"{own:.4f} against {value:.4f}); deployed: {self.describe()}")
        if not self.uses_reranker:
            lines.append(f"the deployed ranker, {self.describe()}, gives the fine-tuned re-ranker no weight: "
                         "training added nothing that validation could see")
        lines += [f"{ranker} is not deployed: {why}" for ranker, why in self.excluded.items()]
        if self.queries is not None and self.queries < FEW_QUERIES:
            lines.append(f"the choices of this fit (the checkpoint, the deployed ranker) rest on {self.queries} "
                         "validation queries" + ("" if self.resolution is None else
                                                 f", which cannot tell the re-ranker from the teacher by less than "
                                                 f"{self.resolution:.4f} {self.measure}")
                         + ": rerank cv measures every query of the collection")
        return lines

    def as_dict(self) -> dict[str, Any]:
        """Plain values, as stored in ``config.json`` (``rerank.ranker.deployment``) and in checkpoints."""
        return {"ranker": self.ranker, "weights": dict(self.weights), "normalisation": NORMALISATION,
                "teacher": None if self.teacher is None else dataclasses.asdict(self.teacher),
                "measure": self.measure, "validation": dict(self.validation), "excluded": dict(self.excluded),
                "queries": self.queries, "resolution": self.resolution}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], where: str) -> Deployment:
        """A deployment from :meth:`as_dict`'s values; ``where`` (the file) names it in errors."""
        try:
            teacher = values.get("teacher")
            return cls(ranker=values["ranker"], weights=dict(values["weights"]),
                       teacher=None if teacher is None else TeacherConfig(**teacher), measure=values.get("measure"),
                       validation=dict(values.get("validation") or {}), excluded=dict(values.get("excluded") or {}),
                       queries=values.get("queries"), resolution=values.get("resolution"))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{where}: rerank.ranker.deployment is not one rerank wrote ({error})") from None


FEW_QUERIES = 30
"""Below this many validation queries, a fit says that its choices rest on few queries, and how fine they are."""
TEACHER_ALONE = {"reranker": 0.0, "teacher": 1.0, "first_stage": 0.0}
"""The fused weights that deploy the teacher alone: where :func:`beats_teacher` falls back."""


def choose(candidates: Mapping[str, float]) -> str:
    """The ranker with the highest validation figure, ties to the simpler (the earlier in :data:`RANKERS`); the
    fit then keeps it only if it :func:`beats_teacher`, where the teacher is deployable.

    Args:
        candidates: the validation figure of each deployable ranker (``reranker`` among them).
    """
    order = [ranker for ranker in RANKERS if ranker in candidates]
    best = max(candidates[ranker] for ranker in order)
    return next(ranker for ranker in order if math.isclose(candidates[ranker], best, rel_tol=0, abs_tol=1e-12))


def beats_teacher(chosen: Sequence[float], teacher: Sequence[float]) -> bool:
    """Whether a ranker's per-query validation figures beat the teacher alone's by more than one standard error of
    the mean difference, ``mean(d) > sd(d) / sqrt(n)`` with ``d = chosen - teacher`` (Breiman's one-standard-error
    rule, the teacher the simpler model; the evidence: docs/experiments/deployment-rules.md).
    Fewer than two queries never show it."""
    difference = np.asarray(chosen, dtype=float) - np.asarray(teacher, dtype=float)
    return len(difference) > 1 and float(difference.mean()) > float(difference.std(ddof=1)) / math.sqrt(
        len(difference))


def resolution(ours: Sequence[float], teacher: Sequence[float]) -> float | None:
    """Two standard errors of the mean per-query difference ``ours - teacher``: the smallest mean difference these
    queries tell from chance (None with fewer than two queries)."""
    difference = np.asarray(ours, dtype=float) - np.asarray(teacher, dtype=float)
    return 2 * float(difference.std(ddof=1)) / math.sqrt(len(difference)) if len(difference) > 1 else None


def deployable_teacher(teacher: TeacherConfig | None) -> str | None:
    """Why ``fused`` cannot re-rank new queries with ``teacher``, or None when it can."""
    if teacher is None:
        return "the model learnt from no teacher"
    if teacher.run is not None:
        return (f"its teacher is a fixed TREC run ({teacher.run}), which cannot score new queries; give the "
                "training source a bi_encoder teacher to deploy fused")
    if teacher.student is not None:
        return "its teacher mixes in a born-again student, which the export does not carry"
    return None


def portable(teacher: TeacherConfig) -> TeacherConfig:
    """``teacher`` with a bi-encoder folder given relative to the working directory made absolute (a hub id is
    kept), so that the export finds it from anywhere."""
    folder = Path(teacher.bi_encoder)
    if folder.is_dir() and not folder.is_absolute():
        return dataclasses.replace(teacher, bi_encoder=str(folder.resolve()))
    return teacher


def check_teacher(teacher: TeacherConfig, where: str) -> None:
    """Fail unless the deployed ranker's teacher loads (before any scoring).

    Raises:
        OSError: naming ``where`` (the exported folder) and the teacher's bi-encoder.
    """
    try:
        load_bi_encoder(teacher.bi_encoder, teacher.max_length)
    except OSError as error:
        raise type(error)(f"{where}: the deployed ranker's teacher, the bi-encoder {teacher.bi_encoder!r}, cannot be "
                          f"loaded ({error}); put it back where it was, give --ranker reranker for the pure "
                          "re-ranker, or re-export") from None


def saved_deployment(config: object, where: str) -> Deployment:
    """The deployment an exported folder's ``config.json`` records (``rerank.ranker.deployment``); the pure re-ranker
    for a folder without one (exported before deployments were, or any other cross-encoder). ``where`` names the folder
    in errors."""
    saved = saved_record(config, "deployment")
    return Deployment.from_dict(saved, f"{where}/config.json") if saved else Deployment()


def saved_calibration(config: object) -> Calibration | None:
    """The deployed ranker's calibration that an export's ``config.json`` records (``rerank.calibration``);
    ``config``: as :func:`rerank.model.cross_encoder.saved_record`'s."""
    saved = saved_record(config, CALIBRATION)
    return Calibration.from_dict(saved) if saved else None
