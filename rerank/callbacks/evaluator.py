"""What a fit's validation and test runs give: a Lightning callback, ``evaluation:`` in the YAML.

The module's validation and test steps return the ``(query id, doc id, score, first-stage score)`` rows they scored;
the :class:`Evaluator` gathers them from every process into the re-ranker's run and the first stage's, evaluates both
with trec_eval (:func:`rerank.evaluation.measures.evaluate`, a query without candidates counting 0) against the split's
qrels, which the data module gives (``judgments``; the teacher's scores of the same candidates from its
``teacher_run``), and logs ``val/<measure>`` (what the checkpoints monitor) and ``val/first_stage_<measure>``::

    evaluation:
      metrics: [nDCG@10, nDCG@20, AP, RR@10]       # reported for validation and test (ir_measures' names)
      selection:                                   # rerank.config.selection.SelectionRules
        measure: nDCG@10                           # chooses the checkpoint, the weights and the deployed ranker
        interpolate: true                          # also measure the fusions (interpolated; fused with a teacher)
        deploy: auto                               # or the ranker to deploy whatever validation says
        epoch: one_se                              # the weights tested: the last unless the best beats them

At the end of every validation, :func:`rerank.ranker.selection.select` chooses what the module deploys; the module keeps
it (:meth:`RerankModule.deploy`, saved in its checkpoints), so the tested weights carry the choice made on their
own validation. The evaluator also keeps each validation's per-query figures (:class:`Validated`, in its
checkpointed state), from which :meth:`Evaluator.tested` chooses the weights the fit tests
(:func:`rerank.ranker.selection.chosen_epoch`). At the end of the test, :attr:`Evaluator.report` holds each ranker's
test figures (the re-ranker, the first stage, the teacher, and the fusions at the tested weights) and their runs are
written to the run directory (:class:`~rerank.core.run_directory.RunDirectory`), with the tested weights' validation
run. Each epoch's validation run is kept beside them (``validation.epoch<N>.run``), so that the choice of the epoch can
be re-judged on the saved runs (``scripts/studies/selection-rules/split_half_epoch.py``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch.distributed as dist

from ..config.selection import SelectionRules
from ..core.errors import UserError
from ..core.run_directory import Metrics, RunDirectory
from ..data.trec import Qrels, Run, write_run
from ..evaluation.fusion import fuse, interpolate
from ..evaluation.measures import METRICS, check_measures, evaluate
from ..ranker.deployment import beats_teacher, resolution
from ..ranker.selection import FUSED, ValidationRuns, chosen_epoch, select
from ..teacher.scores import TeacherRuns
from ..training.lightning_module import RerankModule, Scored

logger = logging.getLogger(__name__)


class Evaluator(pl.Callback):
    """Evaluates the runs a fit scores and chooses, on validation, what its module deploys (module docstring).

    Args:
        metrics: the measures reported for validation and test (ir_measures' names: ``nDCG@10``, ``RR@10``, ``AP``).
        selection: how the checkpoint, the fusions' weights and the deployed ranker are chosen on validation
            (:class:`~rerank.config.selection.SelectionRules`; its ``measure`` must be one of ``metrics``).

    Raises:
        ValueError: an unknown measure, or options that disagree, naming them.
    """

    def __init__(self, metrics: Sequence[str] = METRICS, selection: SelectionRules = SelectionRules()) -> None:  # noqa: B008 (frozen)
        self.metrics = list(metrics)
        self.selection = selection
        check_measures(self.metrics, self.selection.measure)
        self.report: Metrics = {}
        """The test figures of every ranker (after ``trainer.test``), as ``metrics.json`` stores them."""
        self.validations: list[Validated] = []
        """Each validation of the fit so far, in order (kept in checkpoints: a resumed fit has them all)."""
        self.deployed_test_run: Run = {}
        """The deployed ranker's run on the test candidates (after ``trainer.test``)."""
        self.choice = ""
        """Which validation's weights were tested and why, in words (after :meth:`tested`)."""
        self._rows: Scored = []

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self._rows.extend(outputs)

    on_test_batch_end = on_validation_batch_end

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        reranker, first_stage = self._gather(trainer)
        if trainer.sanity_checking:
            return
        # every process evaluates the same gathered run, so the logged values agree without a reduction
        qrels = self._qrels(trainer, "validation")
        metrics = {f"val/{name}": value for name, value in self._evaluate(reranker, qrels).items()}
        metrics |= {f"val/first_stage_{name}": value for name, value in self._evaluate(first_stage, qrels).items()}
        teacher = _teacher_run(trainer, "validation")
        runs = ValidationRuns(reranker, first_stage, teacher.scores if teacher is not None else None,
                              teacher.config if teacher is not None else None)
        selection = select(runs, qrels, self.selection)
        measure, figures = self.selection.measure, selection.figures
        metrics |= {f"val/{name}_{measure}": figures[name] for name in ("teacher", "interpolated", "fused")
                    if name in figures}
        if selection.interpolation_weight is not None:
            metrics["val/interpolation_weight"] = selection.interpolation_weight
        if selection.fusion_weights is not None:
            metrics |= {f"val/fusion_weight_{name}": weight for name, weight in zip(FUSED, selection.fusion_weights)}
        if trainer.is_global_zero:
            logger.info("validation, epoch %d, %s: %s", trainer.current_epoch, measure,
                        ", ".join(f"{name} {value:.4f}" for name, value in figures.items()))
        pl_module.log_dict(metrics, prog_bar=False)
        self.validations.append(Validated(trainer.current_epoch, trainer.global_step,
                                          evaluate(reranker, qrels, [measure]).values(measure)))
        deployed = selection.deployment.combine(reranker, first_stage, runs.teacher)
        _module(pl_module).deploy(selection, reranker, deployed)
        self._write(trainer, pl_module, reranker, "validation")  # the latest, while training goes on
        self._write(trainer, pl_module, reranker, f"validation.epoch{trainer.current_epoch}")  # kept: the epoch study

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        module = _module(pl_module)
        reranker, first_stage = self._gather(trainer)
        qrels = self._qrels(trainer, "test")
        report: Metrics = {"reranker": self._evaluate(reranker, qrels),
                           "first_stage": self._evaluate(first_stage, qrels)}
        runs = {"test": reranker}
        if module.validation_run:  # the tested checkpoint's, which its deployment was chosen on, not the latest epoch's
            runs["validation"] = module.validation_run
        teacher = _teacher_run(trainer, "test")
        if teacher is not None:
            report["teacher"], runs["test.teacher"] = self._evaluate(teacher.scores, qrels), teacher.scores
            if teacher.bi_encoder is not None:
                report["teacher_bi_encoder"] = self._evaluate(teacher.bi_encoder, qrels)
                runs["test.teacher_bi_encoder"] = teacher.bi_encoder
        chosen = module.selection
        if self.selection.interpolate and chosen.interpolation_weight is not None:
            weight = chosen.interpolation_weight
            runs["test.interpolated"] = interpolate(reranker, first_stage, weight)
            report["interpolated"] = {"w": weight, **self._evaluate(runs["test.interpolated"], qrels)}
        if self.selection.interpolate and chosen.fusion_weights is not None and teacher is not None:
            runs["test.fused"] = fuse([reranker, teacher.scores, first_stage], chosen.fusion_weights)
            report["fused"] = {**{f"w_{name}": w for name, w in zip(FUSED, chosen.fusion_weights)},
                               **self._evaluate(runs["test.fused"], qrels)}
        for name, run in runs.items():
            self._write(trainer, pl_module, run, name)
        self.report = report
        self.deployed_test_run = chosen.deployment.combine(reranker, first_stage,
                                                           teacher.scores if teacher is not None else None)
        pl_module.log_dict({f"test/{system}/{name}": value for system, values in report.items()
                            for name, value in values.items()})

    def state_dict(self) -> dict[str, Any]:
        return {"validations": [dataclasses.asdict(validated) for validated in self.validations]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.validations = [Validated(**validated) for validated in state_dict.get("validations", [])]

    def tested(self, trainer: pl.Trainer, best: str) -> str | None:
        """The checkpoint the fit tests, by ``selection.epoch`` (:func:`~rerank.ranker.selection.chosen_epoch`) over its
        validations: ``best`` (the best checkpoint's path), or None for the weights the fit ended with, the last
        validation's. Those are kept only when the last validation came at the last step; otherwise the best
        checkpoint is tested, said in the log. Sets :attr:`choice`, the choice in words."""
        if not self.validations or not best:
            return best or None
        values = [validated.values for validated in self.validations]
        chosen = chosen_epoch(values, self.selection.epoch)
        last = self.validations[-1]
        if chosen == len(values) - 1 and last.step != trainer.global_step:
            logger.warning("evaluation.selection.epoch %s: the last validation (step %d) did not come at the end of "
                           "training (step %d), so its weights are not kept: the best checkpoint is tested",
                           self.selection.epoch, last.step, trainer.global_step)
            chosen = chosen_epoch(values, "best")
        self.choice = epoch_choice(self.validations, chosen, self.selection)
        if trainer.is_global_zero:
            logger.info("tested: %s", self.choice)
        return None if chosen == len(values) - 1 and last.step == trainer.global_step else best

    def _gather(self, trainer: pl.Trainer) -> tuple[Run, Run]:
        """The re-ranker's and the first stage's runs over the pairs that every process scored."""
        rows, self._rows = self._rows, []
        if dist.is_available() and dist.is_initialized() and trainer.world_size > 1:
            shards: list[Any] = [None] * trainer.world_size
            dist.all_gather_object(shards, rows)
            rows = [row for shard in shards for row in shard]
        reranker: Run = {}
        first_stage: Run = {}
        for qid, doc, score, first in rows:
            reranker.setdefault(qid, {})[doc] = score
            first_stage.setdefault(qid, {})[doc] = first
        return reranker, first_stage

    @staticmethod
    def _qrels(trainer: pl.Trainer, split: str) -> Qrels:
        judgments = getattr(trainer.datamodule, "judgments", None)
        if judgments is None:
            raise UserError("evaluation needs the qrels of the data module: run the Trainer with "
                            "datamodule=RerankDataModule(...) (the rerank CLI does)")
        return judgments(split)

    def _evaluate(self, run: Run, qrels: Qrels) -> dict[str, float]:
        return evaluate(run, qrels, self.metrics).mean

    @staticmethod
    def _write(trainer: pl.Trainer, pl_module: pl.LightningModule, run: Run, name: str) -> None:
        if trainer.is_global_zero:
            write_run(run, RunDirectory(Path(trainer.default_root_dir)).run(name),
                      tag=f"rerank-{_module(pl_module).heads['qrels'].loss.__class__.__name__}")


def evaluator_of(trainer: pl.Trainer) -> Evaluator:
    """The trainer's :class:`Evaluator`.

    Raises:
        ValueError: the trainer has none.
    """
    found = next((callback for callback in trainer.callbacks if isinstance(callback, Evaluator)), None)
    if found is None:
        raise ValueError("the Trainer has no rerank Evaluator callback: validation and test report nothing")
    return found


def _teacher_run(trainer: pl.Trainer, split: str) -> TeacherRuns | None:
    """The teacher's scores of ``split``'s candidates, None without a teacher (or a data module that has none)."""
    teacher_run = getattr(trainer.datamodule, "teacher_run", None)
    return teacher_run(split) if teacher_run is not None else None


def _module(pl_module: pl.LightningModule) -> RerankModule:
    if not isinstance(pl_module, RerankModule):
        raise TypeError(f"the rerank Evaluator evaluates a RerankModule, not a {type(pl_module).__name__}")
    return pl_module


@dataclass(frozen=True)
class Validated:
    """One validation of a fit: its epoch (0-based), the global step it came after, and the re-ranker's per-query
    values of ``selection.measure`` on the validation queries (in query-id order)."""

    epoch: int
    step: int
    values: list[float]


def epoch_choice(validations: Sequence[Validated], chosen: int, selection: SelectionRules) -> str:
    """Which of ``validations`` gave the tested weights, and why, in words: each one's mean, the margin of the best
    over the last and its standard error, on how many queries."""
    values = [validated.values for validated in validations]
    means = [float(np.mean(per)) for per in values]
    best, last = means.index(max(means)), len(values) - 1
    once = len({validated.epoch for validated in validations}) == len(validations)
    label = [f"epoch {validated.epoch + 1}" if once else f"validation {index + 1} (step {validated.step})"
             for index, validated in enumerate(validations)]
    text = (f"the weights of {label[chosen]}, by evaluation.selection.epoch {selection.epoch} on {len(values[0])} "
            f"validation queries ({selection.measure}: "
            + ", ".join(f"{label[index]} {mean:.4f}" for index, mean in enumerate(means)) + ")")
    if best == last or selection.epoch == "best":
        return text
    relation = "more" if beats_teacher(values[best], values[last]) else "no more"
    return (f"{text}: {label[best]} ahead of the last by {means[best] - means[last]:.4f}, {relation} than one "
            f"standard error ({(resolution(values[best], values[last]) or 0.0) / 2:.4f})")
