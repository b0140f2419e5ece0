"""The LightningModule: a cross-encoder, the loss heads over each query's list of scores, and its optimizer.

Training (one step): the ``[Q, N]`` lists of a :class:`~rerank.training.batches.TrainingBatch` are flattened into
``Q * N`` (query, document) rows, scored by the cross-encoder (MaxP: the maximum over a document's passages),
put back into ``[Q, N]`` (padded slots masked) and passed to the loss head named in the config::

    model:
      model_name: sentence-transformers/all-MiniLM-L6-v2
      loss: smoothi_ndcg                 # a name of rerank.losses.LOSSES, or {class_path: ..., init_args: ...}
      loss_args: {alpha: 1.0, delta: 0.1}
      teacher_loss: distill_listnet      # for lists with teacher scores (data.train sources with a teacher)
      teacher_loss_args: {temperature: 0.05}
      teacher_weight: 1.0
      click_loss: click_softmax          # for lists from a click log (data.train sources with targets: clicks)
      tokenization: {max_length: 512, max_query_length: 20, passages: maxp}
      optimizer: {encoder_lr: 2.0e-5, head_lr: 1.0e-3, warmup: 0.1}   # rerank.training.optimizer

The three options build the module's loss heads (:mod:`rerank.training.loss_heads`); the training loss of a batch is
``loss(lists, qrels labels) + teacher_weight * teacher_loss(lists, teacher scores) + click_loss(lists, click
targets)``; each head averages over the lists it has targets for (lists without
contrast are skipped), so a batch may mix sources that learn from qrels, from a teacher, both, or clicks.

Validation, test and prediction score every candidate of their queries and return ``(query id, doc id, score,
first-stage score)`` rows: the :class:`~rerank.callbacks.evaluator.Evaluator` callback (``evaluation:``) turns the
validation and test rows into runs, evaluates them and chooses what the module deploys, which the module keeps
(:meth:`RerankModule.deploy`: the ranker, the fusions' weights and the validation run it was chosen on, saved in
checkpoints) for the export. Prediction returns the rows of :meth:`RerankDataModule.predict_dataloader`.

Dropout noise is drawn from a generator seeded by (seed, epoch, batch, process), so a run resumed from a
mid-epoch checkpoint replays the same steps as one that was never interrupted, and under DDP each process draws
its own masks.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor

from ..config.optimizer import OptimizerSettings
from ..config.source import SourceConfig
from ..config.tokenization import TokenizationConfig
from ..core.checks import check_range
from ..data.trec import Run
from ..model import speedups as speedups_module
from ..model.cross_encoder import CrossEncoderModel
from ..ranker.deployment import Deployment
from ..ranker.selection import Selection
from .batches import EvaluationBatch, TrainingBatch
from .head_checks import MODEL_NAME, check_click_head, check_list_size, click_estimators
from .loss_heads import build_head
from .optimizer import adamw, linear_schedule, param_groups

logger = logging.getLogger(__name__)

Scored = list[tuple[str, str, float, float]]
"""``(query id, doc id, score, first-stage score)`` rows."""


class RerankModule(pl.LightningModule):
    """A cross-encoder trained with a ranking loss head.

    Args:
        model_name: a Hugging Face encoder or one-label cross-encoder (hub id in the local cache, or a folder);
            required.
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
        speedups: a list of the names of :mod:`rerank.model.speedups` (``[cls_only_last_layer, cheap_dropout,
            unpadded]``), each applied where it fits the model; ``off``: none; ``auto``: those measured faster for
            the accelerator, which the commands resolve before the module is built
            (:mod:`rerank.training.resolution`; built directly, as on a CPU).
        forward_chunk_size: encode a batch's rows in length-sorted chunks of this many, each cut to its longest
            row (less padding; None: the whole batch at once).
        optimizer: AdamW's learning rates, weight decay and warmup
            (:class:`~rerank.config.optimizer.OptimizerSettings`).
    """

    def __init__(
        self,
        model_name: str | None = None,
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
        optimizer: OptimizerSettings = OptimizerSettings(),  # noqa: B008 (frozen)
    ) -> None:
        super().__init__()
        if model_name is None:
            raise ValueError(MODEL_NAME)
        self.save_hyperparameters()
        _check_options(self.hparams)
        names = speedups_module.resolve(speedups)
        self.heads = torch.nn.ModuleDict({
            "qrels": build_head("qrels", "model.loss", loss, loss_args),
            "teacher": build_head("teacher", "model.teacher_loss", teacher_loss, teacher_loss_args, teacher_weight),
            "clicks": build_head("clicks", "model.click_loss", click_loss, click_loss_args)})
        """The loss heads (:mod:`rerank.training.loss_heads`), keyed by their targets, in the order they are summed."""
        if isinstance(tokenization, Mapping):  # from a checkpoint's hyperparameters
            tokenization = TokenizationConfig(**tokenization)
        self.model = CrossEncoderModel.from_pretrained(model_name, dropout, gradient_checkpointing, tokenization,
                                                       encoder_dropout)
        if freeze_embeddings:
            self.model.freeze_embeddings()
        self.model.train()
        self.hparams["tokenization"] = dataclasses.asdict(self.model.tokenization)  # what export records
        if isinstance(optimizer, Mapping):  # from a checkpoint's hyperparameters
            optimizer = OptimizerSettings(**optimizer)
        self.optimizer_settings = optimizer
        self.hparams["optimizer"] = dataclasses.asdict(optimizer)  # plain values in checkpoints
        self.speedups = speedups_module.enable(self.model.model, names)
        self.selection = Selection({}, None, None)
        """What the latest validation chose (kept in checkpoints): the deployed ranker, which the export deploys, and
        the interpolation's and the fusion's weights, which the test applies."""
        self.validation_run: Run = {}
        """The re-ranker's run on the latest validation, which ``deployment`` was chosen on (kept in checkpoints):
        the test writes the tested checkpoint's as ``runs/validation.run``."""
        self.deployed_validation_run: Run = {}
        """The deployed ranker's run of the same candidates (kept in checkpoints), which its calibration is fitted
        on."""
        self._seed = 0
        self.log_prefix = "train"
        """Where the training losses are logged: ``train/`` (the judgment-free stage's: ``stage/``)."""

    def forward(self, batch: TrainingBatch | EvaluationBatch) -> Tensor:
        """One score per (query, document) pair of the batch (MaxP: the best passage's)."""
        return self.model.score(batch.inputs, chunk_size=self.hparams.forward_chunk_size)

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self._seed = torch.initial_seed()  # the run's seed (``seed_everything``)

    def check_data(self, list_size: int, sources: Mapping[str, Sequence[SourceConfig]]) -> None:
        """Fail when this module's heads cannot learn from lists of ``list_size`` or from the click sources among
        ``sources`` (``{section: its sources}``): :mod:`rerank.training.head_checks`. The data module asks, once per
        fit, before it makes any list.

        Raises:
            ValueError: naming the options that disagree.
        """
        check_list_size(list_size, self.heads["qrels"])
        check_click_head(self.heads["clicks"], click_estimators(sources))

    def on_train_batch_start(self, batch: TrainingBatch, batch_idx: int) -> None:
        torch.manual_seed(dropout_seed(self._seed, self.current_epoch, batch_idx, self.global_rank))

    def list_losses(self, batch: TrainingBatch) -> dict[str, Tensor]:
        """Each head's loss on the batch's ``[Q, N]`` lists of scores (padded slots masked), by its targets
        (``qrels``; ``teacher`` when the batch has teacher scores; ``clicks`` when it has click targets), unweighted,
        and their weighted sum ``loss``."""
        scores = self(batch)
        lists = scores.new_zeros(batch.mask.numel()).index_copy(0, batch.slots, scores).view_as(batch.mask)
        losses: dict[str, Tensor] = {}
        for targets, head in self.heads.items():
            value = head(lists, batch)
            if value is not None:
                losses[targets] = value
                weighted = head.weight * value
                losses["loss"] = losses["loss"] + weighted if "loss" in losses else weighted
        return losses

    def list_loss(self, batch: TrainingBatch) -> Tensor:
        """The training loss of a batch (see :meth:`list_losses`)."""
        return self.list_losses(batch)["loss"]

    def training_step(self, batch: TrainingBatch, batch_idx: int) -> Tensor:
        losses = self.list_losses(batch)
        self.log(f"{self.log_prefix}/loss", losses["loss"], prog_bar=True, batch_size=batch.size)
        for targets in self.heads:
            if targets in losses:
                self.log(f"{self.log_prefix}/{targets}_loss", losses[targets], batch_size=batch.size)
        return losses["loss"]

    def on_train_epoch_end(self) -> None:
        learnt = self.heads["clicks"].loss.propensities()  # dla: what it has learnt of the position bias so far
        if learnt is not None:
            logger.info("epoch %d: propensities learnt by model.click_loss, ranks 1 to %d: %s", self.current_epoch,
                        len(learnt), ", ".join(f"{p:.4f}" for p in learnt))

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW and its linear schedule (:mod:`rerank.training.optimizer`: with ``bf16_weights``, the model's weights
        are cast to bfloat16 here, its float32 masters kept by the optimizer)."""
        if "bf16_weights" in self.speedups:
            self.model.to(torch.bfloat16)
        groups = param_groups(self.model, self.model.head_parameters(), [head.loss for head in self.heads.values()],
                              self.optimizer_settings)
        optimizer = adamw(groups, self.speedups)
        scheduler = linear_schedule(optimizer, self.optimizer_settings, int(self.trainer.estimated_stepping_batches))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # evaluation and prediction: the rows, evaluated by rerank.callbacks.evaluator.Evaluator ---------------------

    def validation_step(self, batch: EvaluationBatch, batch_idx: int) -> Scored:
        scores = self(batch).float().tolist()
        return list(zip(batch.query_ids, batch.doc_ids, scores, batch.first_stage_scores.tolist()))

    test_step = predict_step = validation_step

    @property
    def deployment(self) -> Deployment:
        """The ranker chosen on the latest validation: what the export deploys."""
        return self.selection.deployment

    def deploy(self, selection: Selection, validation_run: Run, deployed_run: Run) -> None:
        """Keep what a validation chose (``selection``, on the re-ranker's ``validation_run``) and the chosen
        ranker's run of the same candidates (``deployed_run``, which the calibration is fitted on), which the test
        and the export use, saved in checkpoints."""
        self.selection, self.validation_run, self.deployed_validation_run = selection, validation_run, deployed_run

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["selection"] = self.selection.as_dict()
        checkpoint["validation_run"] = self.validation_run
        checkpoint["deployed_validation_run"] = self.deployed_validation_run

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.selection = Selection.from_dict(checkpoint["selection"], "checkpoint")
        self.validation_run = checkpoint["validation_run"]
        self.deployed_validation_run = checkpoint["deployed_validation_run"]


def _check_options(options: Mapping[str, Any]) -> None:
    """Fail on a module option out of its range, naming it (before the model loads).

    Raises:
        ValueError: ``model.<option> ...``.
    """
    check_range("model.teacher_weight", options["teacher_weight"], above=0)
    for name in ("dropout", "encoder_dropout"):
        if options[name] is not None:
            check_range(f"model.{name}", options[name], 0, below=1)


def dropout_seed(seed: int, epoch: int, batch: int, rank: int) -> int:
    """The seed of the dropout masks of one training batch in one process: a function of where training stands
    (so a resumed run draws the same masks) and of the process (so DDP processes draw different ones)."""
    return hash((seed, epoch, batch, rank)) % 2**63
