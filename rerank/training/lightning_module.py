"""The LightningModule: a cross-encoder, a loss head over each query's list of scores, and TREC evaluation.

Training (one step): the ``[Q, N]`` lists of a :class:`~rerank.training.batches.TrainingBatch` are flattened into
``Q * N`` (query, document) rows, scored by the cross-encoder (MaxP: the maximum over a document's passages),
put back into ``[Q, N]`` (padded slots masked) and passed to the loss head named in the config::

    model:
      model_name: bert-base-uncased
      loss: smoothi_ndcg                 # a name of rerank.losses.LOSSES, or {class_path: ..., init_args: ...}
      loss_args: {alpha: 1.0, delta: 0.1}
      teacher_loss: distill_listnet      # for lists with teacher scores (data.train sources with a teacher)
      teacher_loss_args: {temperature: 0.05}
      teacher_weight: 1.0
      click_loss: click_softmax          # for lists from a click log (data.train sources with targets: clicks)
      tokenization: {max_length: 512, max_query_length: 20, passages: maxp}

The training loss of a batch is ``loss(lists, qrels labels) + teacher_weight * teacher_loss(lists, teacher
scores) + click_loss(lists, click targets)``; each head averages over the lists it has targets for (lists without
contrast are skipped), so a batch may mix sources that learn from qrels, from a teacher, both, or clicks.

Validation and test re-rank every candidate of their queries, gather the scores from all processes, and
evaluate the whole run with trec_eval (:func:`rerank.evaluation.evaluate`) against the qrels of the split,
which the module receives as ``judgments`` (the CLI links them from the data module), beside the first-stage
run that was re-ranked (its scores travel with the batches). Optionally (``interpolate: true``) the re-ranker's
scores are also interpolated with the first stage's (``interpolated``) and, when it learns from a teacher, fused
with the teacher's and the first stage's (``fused``; the module receives the teacher's scores as ``teacher_run``,
linked from the data module like ``judgments``), the weights chosen on validation (:mod:`rerank.interpolation`).
Prediction scores the pairs of :meth:`RerankDataModule.predict_dataloader` and returns them.

Dropout noise is drawn from a generator seeded by (seed, epoch, batch, process), so a run resumed from a
mid-epoch checkpoint replays the same steps as one that was never interrupted, and under DDP each process draws
its own masks.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from torch import Tensor
from transformers import get_linear_schedule_with_warmup

from ..checks import check_range
from ..data.trec import Qrels, Run, write_run
from ..deployment import RANKERS, Deployment
from ..errors import UserError
from ..evaluation import METRICS, evaluate, trec_measure
from ..interpolation import DEFAULT_GRID, fuse, interpolate
from ..losses import RankingLoss
from ..losses import build as build_loss
from ..model import speedups as speedups_module
from ..model.cross_encoder import CrossEncoderModel
from ..model.tokenization import TokenizationConfig
from ..run_directory import Metrics, RunDirectory
from ..selection import FUSED, SelectionRules, ValidationRuns, select
from ..teacher import TeacherRuns
from .batches import EvaluationBatch, TrainingBatch
from .checks import check_click_head, check_list_size, click_estimators
from .optimizer import adamw
from .sources import SourceConfig

logger = logging.getLogger(__name__)

Judgments = Callable[[str], Qrels]
"""The qrels of a split (``validation``, ``test``), e.g. :meth:`RerankDataModule.judgments`."""
TeacherRun = Callable[[str], TeacherRuns | None]
"""The teacher's scores of a split's candidates, e.g. :meth:`RerankDataModule.teacher_run`."""
Scored = list[tuple[str, str, float, float]]
"""``(query id, doc id, score, first-stage score)`` rows."""


class RerankModule(pl.LightningModule):
    """A cross-encoder trained with a ranking loss head.

    Args:
        model_name: a Hugging Face encoder or one-label cross-encoder (hub id in the local cache, or a folder).
        loss: the loss head: a name in :data:`rerank.losses.LOSSES`, or ``{class_path: ..., init_args: ...}``
            naming a :class:`~rerank.losses.RankingLoss` subclass.
        loss_args: the loss head's parameters (e.g. ``{alpha: 1.0, delta: 0.1}`` for ``smoothi_ndcg``).
        teacher_loss: the head for teacher scores (``distill_listnet``, ``distill_ranknet``, ``margin_mse``, or a
            class path of a :class:`~rerank.losses.RankingLoss` with ``graded = False``).
        teacher_loss_args: its parameters (``{temperature: 0.05}`` for a bi-encoder's cosine scores).
        teacher_weight: the weight of the teacher head in the sum.
        click_loss: the head for click targets (``click_softmax``, listwise; ``click_bce``, pointwise; ``dla``,
            which learns the propensities too, for sources with ``clicks.estimator: dla``).
        click_loss_args: its parameters (``{ranks: 10, lr: 0.1}`` for ``dla``).
        tokenization: lengths and passages of the (query, document) rows; None: those the model was exported
            with, else the defaults. Exported with the model.
        dropout: classifier dropout (default: the model's).
        encoder_dropout: the encoder's dropout (hidden states and attention probabilities; default: the model's).
        freeze_embeddings: train the encoder above its embeddings only (they keep the loaded weights).
        gradient_checkpointing: recompute encoder activations in the backward pass to save memory.
        speedups: ``auto`` (the speed-ups of :mod:`rerank.model.speedups` measured faster on a CPU, where they fit
            the model, and on a GPU the fused AdamW), ``off``, or a list of their names
            (``[cls_only_last_layer, cheap_dropout, unpadded]``).
        forward_chunk_size: encode a batch's rows in length-sorted chunks of this many, each cut to its longest
            row (less padding; None: the whole batch at once).
        encoder_lr: AdamW learning rate of the encoder.
        head_lr: AdamW learning rate of the classification head.
        weight_decay: AdamW weight decay (not applied to biases and LayerNorm weights).
        warmup: linear warmup, as a fraction of all optimizer steps (< 1) or a number of steps; then linear decay.
        metrics: measures reported for validation and test (aliases or trec_eval names).
        selection_metric: the validation measure that selects the best checkpoint and the interpolation weight.
        interpolate: also report ``w * z(re-ranker) + (1 - w) * z(first stage)`` (``interpolated``) and, with a
            teacher, ``w_r z(re-ranker) + w_t z(teacher) + w_f z(first stage)`` (``fused``), weights chosen on
            validation.
        interpolation_grid: the weights tried for ``interpolated``.
        deploy: the ranker the export deploys (:mod:`rerank.deployment`): ``auto``, the one chosen on validation by
            the rule there; or ``reranker``, ``interpolated`` or ``fused`` whatever validation says (the fusions
            need ``interpolate: true``; ``fused`` a bi-encoder teacher).
        judgments: the qrels of each evaluated split (linked from the data module by the CLI; needed for
            validation and test, not for training or prediction).
        teacher_run: the teacher's scores of each evaluated split's candidates, or None without a teacher
            (linked from the data module by the CLI; for ``fused``).
    """

    def __init__(
        self,
        model_name: str = "bert-base-uncased",
        loss: str | dict[str, Any] = "smoothi_ndcg",
        loss_args: dict[str, Any] | None = None,
        teacher_loss: str | dict[str, Any] = "distill_listnet",
        teacher_loss_args: dict[str, Any] | None = None,
        teacher_weight: float = 1.0,
        click_loss: str | dict[str, Any] = "click_softmax",
        click_loss_args: dict[str, Any] | None = None,
        tokenization: TokenizationConfig | None = None,
        dropout: float | None = None,
        encoder_dropout: float | None = None,
        freeze_embeddings: bool = False,
        gradient_checkpointing: bool = False,
        speedups: str | list[str] = "auto",
        forward_chunk_size: int | None = 8,
        encoder_lr: float = 2e-5,
        head_lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup: float = 0.1,
        metrics: Sequence[str] = METRICS,
        selection_metric: str = "nDCG@20",
        interpolate: bool = False,
        interpolation_grid: Sequence[float] = DEFAULT_GRID,
        deploy: str = "auto",
        judgments: Judgments | None = None,
        teacher_run: TeacherRun | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["judgments", "teacher_run"])
        _check_options(self.hparams)
        names = speedups_module.resolve(speedups)
        self.loss, self.teacher_loss, self.click_loss = _heads(self.hparams)
        if isinstance(tokenization, Mapping):  # from a checkpoint's hyperparameters
            tokenization = TokenizationConfig(**tokenization)
        self.model = CrossEncoderModel.from_pretrained(model_name, dropout, gradient_checkpointing, tokenization,
                                                       encoder_dropout)
        if freeze_embeddings:
            self.model.freeze_embeddings()
        self.model.train()
        self.hparams["tokenization"] = dataclasses.asdict(self.model.tokenization)  # what export records
        self.speedups = speedups_module.enable(self.model.model, names)
        self.judgments, self.teacher_run = judgments, teacher_run
        self.interpolation_weight: float | None = None
        self.fusion_weights: tuple[float, ...] | None = None
        self.deployment = Deployment()
        """The ranker chosen on the latest validation (kept in checkpoints): what the export deploys."""
        self.validation_run: Run = {}
        """The re-ranker's run on the latest validation, which ``deployment`` was chosen on (kept in checkpoints):
        the test writes the tested checkpoint's as ``runs/validation.run``."""
        self.test_report: Metrics = {}
        self._outputs: Scored = []
        self._seed = 0

    def forward(self, batch: TrainingBatch | EvaluationBatch) -> Tensor:
        """One score per (query, document) pair of the batch (MaxP: the best passage's)."""
        return self.model.score(batch.inputs, chunk_size=self.hparams.forward_chunk_size)

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self._seed = torch.initial_seed()  # the run's seed (``seed_everything``)

    def check_data(self, list_size: int, sources: Mapping[str, Sequence[SourceConfig]]) -> None:
        """Fail when this module's heads cannot learn from lists of ``list_size`` or from the click sources among
        ``sources`` (``{section: its sources}``): :mod:`rerank.training.checks`. The data module asks, once per fit,
        before it makes any list.

        Raises:
            ValueError: naming the options that disagree.
        """
        check_list_size(list_size, self.hparams.loss, self.loss)
        check_click_head(self.hparams.click_loss, self.click_loss, click_estimators(sources))

    def on_train_batch_start(self, batch: TrainingBatch, batch_idx: int) -> None:
        torch.manual_seed(dropout_seed(self._seed, self.current_epoch, batch_idx, self.global_rank))

    def list_losses(self, batch: TrainingBatch) -> dict[str, Tensor]:
        """The heads applied to the batch's ``[Q, N]`` lists of scores (padded slots masked): ``qrels``, when the
        batch has teacher scores ``teacher`` (unweighted), when it has click targets ``clicks``, and their
        weighted sum ``loss``."""
        mask = batch.mask
        scores = self(batch)
        lists = scores.new_zeros(mask.numel()).index_copy(0, batch.slots, scores).view_as(mask)
        losses = {"qrels": self.loss(lists, batch.labels, mask)}
        losses["loss"] = losses["qrels"]
        if batch.teacher is not None:
            losses["teacher"] = self.teacher_loss(lists, batch.teacher, mask)
            losses["loss"] = losses["loss"] + self.hparams.teacher_weight * losses["teacher"]
        if batch.clicks is not None:
            ranks = {"ranks": batch.ranks} if self.click_loss.needs_ranks else {}
            losses["clicks"] = self.click_loss(lists, batch.clicks, mask, **ranks)
            losses["loss"] = losses["loss"] + losses["clicks"]
        return losses

    def list_loss(self, batch: TrainingBatch) -> Tensor:
        """The training loss of a batch (see :meth:`list_losses`)."""
        return self.list_losses(batch)["loss"]

    def training_step(self, batch: TrainingBatch, batch_idx: int) -> Tensor:
        losses = self.list_losses(batch)
        self.log("train/loss", losses["loss"], prog_bar=True, batch_size=batch.size)
        for name in ("qrels", "teacher", "clicks"):
            if name in losses:
                self.log(f"train/{name}_loss", losses[name], batch_size=batch.size)
        return losses["loss"]

    def on_train_epoch_end(self) -> None:
        learnt = self.click_loss.propensities()  # dla: what it has learnt of the position bias so far
        if learnt is not None:
            logger.info("epoch %d: propensities learnt by model.click_loss, ranks 1 to %d: %s", self.current_epoch,
                        len(learnt), ", ".join(f"{p:.4f}" for p in learnt))

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW with one learning rate for the encoder and one for the head; linear warmup, then linear decay
        (:mod:`rerank.training.optimizer`: with ``bf16_weights``, the model's weights are cast to bfloat16 here,
        its float32 masters kept by the optimizer)."""
        self.speedups = speedups_module.for_optimizer(self.speedups, self.hparams.speedups, self.device)
        if "bf16_weights" in self.speedups:
            self.model.to(torch.bfloat16)
        head = {id(p) for p in self.model.head_parameters()}
        groups: dict[tuple[float, float], list[torch.nn.Parameter]] = {}
        for parameter in self.model.parameters():
            if parameter.requires_grad:
                lr = self.hparams.head_lr if id(parameter) in head else self.hparams.encoder_lr
                decay = self.hparams.weight_decay if parameter.ndim > 1 else 0.0  # no decay on biases, LayerNorm
                groups.setdefault((lr, decay), []).append(parameter)
        param_groups = [{"params": params, "lr": lr, "weight_decay": decay} for (lr, decay), params in groups.items()]
        for head in (self.loss, self.teacher_loss, self.click_loss):  # heads with parameters of their own (dla)
            if any(True for _ in head.parameters()):
                lr = head.lr if head.lr is not None else self.hparams.head_lr
                param_groups.append({"params": list(head.parameters()), "lr": lr, "weight_decay": 0.0})
        optimizer = adamw(param_groups, self.speedups)
        total = int(self.trainer.estimated_stepping_batches)
        warmup = self.hparams.warmup
        warmup_steps = round(warmup * total) if warmup < 1 else int(warmup)
        scheduler = get_linear_schedule_with_warmup(optimizer, warmup_steps, max(total, 1))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # evaluation and prediction ----------------------------------------------------------------------------------

    def _score_rows(self, batch: EvaluationBatch) -> Scored:
        scores = self(batch).float().tolist()
        return list(zip(batch.query_ids, batch.doc_ids, scores, batch.first_stage_scores.tolist()))

    def validation_step(self, batch: EvaluationBatch, batch_idx: int) -> None:
        self._outputs.extend(self._score_rows(batch))

    test_step = validation_step

    def predict_step(self, batch: EvaluationBatch, batch_idx: int) -> Scored:
        return self._score_rows(batch)

    def _gather_runs(self) -> tuple[Run, Run]:
        """The re-ranker's and the first stage's runs over the pairs that every process scored."""
        outputs, self._outputs = self._outputs, []
        if dist.is_available() and dist.is_initialized() and self.trainer.world_size > 1:
            shards: list[Any] = [None] * self.trainer.world_size
            dist.all_gather_object(shards, outputs)
            outputs = [row for shard in shards for row in shard]
        reranker: Run = {}
        first_stage: Run = {}
        for qid, doc, score, first in outputs:
            reranker.setdefault(qid, {})[doc] = score
            first_stage.setdefault(qid, {})[doc] = first
        return reranker, first_stage

    def _qrels(self, split: str) -> Qrels:
        if self.judgments is None:
            raise UserError("RerankModule evaluates against qrels it was not given: build it with "
                               "judgments=data.judgments (the rerank CLI links them)")
        return self.judgments(split)

    def _evaluate(self, run: Run, split: str) -> dict[str, float]:
        return evaluate(run, self._qrels(split), self.hparams.metrics).mean

    def on_validation_epoch_end(self) -> None:
        reranker, first_stage = self._gather_runs()
        if self.trainer.sanity_checking:
            return
        # every process evaluates the same gathered run, so the logged values agree without a reduction
        qrels = self._qrels("validation")
        metrics = {f"val/{name}": value for name, value in self._evaluate(reranker, "validation").items()}
        metrics |= {f"val/first_stage_{name}": value
                    for name, value in self._evaluate(first_stage, "validation").items()}
        teacher = self.teacher_run("validation") if self.teacher_run is not None else None
        runs = ValidationRuns(reranker, first_stage, teacher.scores if teacher is not None else None,
                              teacher.config if teacher is not None else None)
        selection = select(runs, qrels, self.selection_rules)
        self.interpolation_weight, self.fusion_weights = selection.interpolation_weight, selection.fusion_weights
        self.deployment = selection.deployment
        measure, figures = self.hparams.selection_metric, selection.figures
        metrics |= {f"val/{name}_{measure}": figures[name] for name in ("teacher", "interpolated", "fused")
                    if name in figures}
        if self.interpolation_weight is not None:
            metrics["val/interpolation_weight"] = self.interpolation_weight
        if self.fusion_weights is not None:
            metrics |= {f"val/fusion_weight_{name}": weight for name, weight in zip(FUSED, self.fusion_weights)}
        if self.trainer.is_global_zero:
            logger.info("validation, epoch %d, %s: %s", self.current_epoch, measure,
                        ", ".join(f"{name} {value:.4f}" for name, value in figures.items()))
        self.log_dict(metrics, prog_bar=False)
        self.validation_run = reranker
        self._write_run(reranker, "validation")  # the latest, while training goes on

    @property
    def selection_rules(self) -> SelectionRules:
        """How this module chooses what it deploys (:mod:`rerank.selection`), from its options."""
        return SelectionRules(self.hparams.selection_metric, self.hparams.interpolate,
                              tuple(self.hparams.interpolation_grid), self.hparams.deploy)

    def on_test_epoch_end(self) -> None:
        reranker, first_stage = self._gather_runs()
        report: Metrics = {"reranker": self._evaluate(reranker, "test"),
                           "first_stage": self._evaluate(first_stage, "test")}
        self._write_run(reranker, "test")
        if self.validation_run:  # the tested checkpoint's, which its deployment was chosen on, not the latest epoch's
            self._write_run(self.validation_run, "validation")
        teacher = self.teacher_run("test") if self.teacher_run is not None else None
        if teacher is not None:
            report["teacher"] = self._evaluate(teacher.scores, "test")
            self._write_run(teacher.scores, "test.teacher")
            if teacher.bi_encoder is not None:
                report["teacher_bi_encoder"] = self._evaluate(teacher.bi_encoder, "test")
                self._write_run(teacher.bi_encoder, "test.teacher_bi_encoder")
        if self.hparams.interpolate and self.interpolation_weight is not None:
            weight = self.interpolation_weight
            interpolated = interpolate(reranker, first_stage, weight)
            report["interpolated"] = {"w": weight, **self._evaluate(interpolated, "test")}
            self._write_run(interpolated, "test.interpolated")
        if self.hparams.interpolate and self.fusion_weights is not None and teacher is not None:
            fused = fuse([reranker, teacher.scores, first_stage], self.fusion_weights)
            report["fused"] = {**{f"w_{name}": w for name, w in zip(FUSED, self.fusion_weights)},
                               **self._evaluate(fused, "test")}
            self._write_run(fused, "test.fused")
        self.test_report = report
        self.log_dict({f"test/{system}/{name}": value for system, values in report.items()
                       for name, value in values.items()})

    def _write_run(self, run: Run, name: str) -> None:
        if self.trainer.is_global_zero:
            write_run(run, RunDirectory(Path(self.trainer.default_root_dir)).run(name),
                      tag=f"rerank-{self.loss.__class__.__name__}")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["interpolation_weight"] = self.interpolation_weight
        checkpoint["fusion_weights"] = list(self.fusion_weights) if self.fusion_weights is not None else None
        checkpoint["deployment"] = self.deployment.as_dict()
        checkpoint["validation_run"] = self.validation_run

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.interpolation_weight = checkpoint.get("interpolation_weight")
        weights = checkpoint.get("fusion_weights")
        self.fusion_weights = tuple(weights) if weights is not None else None
        saved = checkpoint.get("deployment")  # absent from checkpoints written before deployments: the pure model
        self.deployment = Deployment.from_dict(saved, "checkpoint") if saved else Deployment()
        self.validation_run = checkpoint.get("validation_run") or {}  # absent from checkpoints written before it


def _check_options(options: Mapping[str, Any]) -> None:
    """Fail on a module option out of its range, or two that disagree, naming them (before the model loads).

    Raises:
        ValueError: ``model.<option> ...``.
    """
    metrics, selection, deploy = options["metrics"], options["selection_metric"], options["deploy"]
    for measure in (*metrics, selection):
        trec_measure(measure)  # unknown measure names fail now, not after the first epoch
    if selection not in metrics:
        raise ValueError(f"model.selection_metric {selection!r} must be one of model.metrics {list(metrics)}")
    if deploy not in ("auto", *RANKERS):
        raise ValueError(f"model.deploy must be auto or one of {', '.join(RANKERS)}; got {deploy!r}")
    if deploy in ("interpolated", "fused") and not options["interpolate"]:
        raise ValueError(f"model.deploy {deploy} is a fusion, measured only with model.interpolate: true")
    for name in ("encoder_lr", "head_lr", "teacher_weight"):
        check_range(f"model.{name}", options[name], above=0)
    for name in ("warmup", "weight_decay"):
        check_range(f"model.{name}", options[name], 0)
    for name in ("dropout", "encoder_dropout"):
        if options[name] is not None:
            check_range(f"model.{name}", options[name], 0, below=1)


def _heads(options: Mapping[str, Any]) -> tuple[RankingLoss, RankingLoss, RankingLoss]:
    """The qrels, teacher and click heads the options name, each checked to take the targets it will get.

    Raises:
        ValueError: a graded head named as the teacher's or the clicks' head.
    """
    heads = tuple(build_loss(options[name], **(options[f"{name}_args"] or {}))
                  for name in ("loss", "teacher_loss", "click_loss"))
    if heads[1].graded:
        raise ValueError(f"model.teacher_loss {options['teacher_loss']!r} takes graded labels; use a distillation "
                         "head: distill_listnet, distill_ranknet or margin_mse")
    if heads[2].graded:
        raise ValueError(f"model.click_loss {options['click_loss']!r} takes graded labels; use a click head: "
                         "click_softmax, click_bce or dla")
    return heads


def dropout_seed(seed: int, epoch: int, batch: int, rank: int) -> int:
    """The seed of the dropout masks of one training batch in one process: a function of where training stands
    (so a resumed run draws the same masks) and of the process (so DDP processes draw different ones)."""
    return hash((seed, epoch, batch, rank)) % 2**63
