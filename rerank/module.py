"""The LightningModule: a cross-encoder, a loss head over each query's list of scores, and TREC evaluation.

Training (one step): the ``[Q, N]`` lists of a batch are flattened into ``Q * N`` (query, document) rows, scored
by the cross-encoder (MaxP: the maximum over a document's passages), put back into ``[Q, N]`` (padded slots
masked) and passed to the loss head named in the config::

    model:
      model_name: bert-base-uncased
      loss: smoothi_ndcg                 # any name of rerank.losses.LOSSES
      loss_args: {alpha: 1.0, delta: 0.1}

Validation and test re-rank every candidate of their queries, gather the scores from all processes, and
evaluate the whole run with trec_eval (:func:`rerank.evaluation.evaluate`) against the split's full qrels,
beside the first-stage run that was re-ranked. Optionally (``interpolate: true``) the re-ranker's scores are
also interpolated with the first stage's (:mod:`rerank.interpolation`), the weight chosen on validation.

Dropout noise is drawn from a generator seeded by (seed, epoch, batch), so a run resumed from a mid-epoch
checkpoint replays the same steps as one that was never interrupted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from torch import Tensor
from transformers import get_linear_schedule_with_warmup

from .data.trec import Run, atomic_write, write_run
from .evaluation import METRICS, evaluate, trec_measure
from .interpolation import DEFAULT_GRID, best_weight, interpolate
from .losses import build as build_loss
from .model import CrossEncoder, max_over_passages


class RerankModule(pl.LightningModule):
    """A cross-encoder trained with a ranking loss head.

    Args:
        model_name: a Hugging Face encoder or one-label cross-encoder (hub id in the local cache, or a folder).
        loss: the loss head's name in :data:`rerank.losses.LOSSES`.
        loss_args: the loss head's parameters (e.g. ``{alpha: 1.0, delta: 0.1}`` for ``smoothi_ndcg``).
        dropout: classifier dropout (default: the model's).
        gradient_checkpointing: recompute encoder activations in the backward pass to save memory.
        forward_chunk_size: encode a batch's rows in length-sorted chunks of this many, each cut to its longest
            row (less padding; None: the whole batch at once).
        encoder_lr: AdamW learning rate of the encoder.
        head_lr: AdamW learning rate of the classification head.
        weight_decay: AdamW weight decay (not applied to biases and LayerNorm weights).
        warmup: linear warmup, as a fraction of all optimizer steps (< 1) or a number of steps; then linear decay.
        metrics: measures reported for validation and test (aliases or trec_eval names).
        selection_metric: the validation measure that selects the best checkpoint and the interpolation weight.
        interpolate: also report ``w * z(re-ranker) + (1 - w) * z(first stage)``, ``w`` chosen on validation.
        interpolation_grid: the weights tried.
    """

    def __init__(
        self,
        model_name: str = "bert-base-uncased",
        loss: str = "smoothi_ndcg",
        loss_args: dict[str, Any] | None = None,
        dropout: float | None = None,
        gradient_checkpointing: bool = False,
        forward_chunk_size: int | None = 8,
        encoder_lr: float = 2e-5,
        head_lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup: float = 0.1,
        metrics: Sequence[str] = METRICS,
        selection_metric: str = "nDCG@20",
        interpolate: bool = False,
        interpolation_grid: Sequence[float] = DEFAULT_GRID,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        for measure in (*metrics, selection_metric):
            trec_measure(measure)  # unknown measure names fail now, not after the first epoch
        if selection_metric not in metrics:
            raise ValueError(f"model.selection_metric {selection_metric!r} must be one of model.metrics {list(metrics)}")
        self.loss = build_loss(loss, **(loss_args or {}))
        self.model = CrossEncoder.from_pretrained(model_name, dropout, gradient_checkpointing).train()
        self.interpolation_weight: float | None = None
        self.test_report: dict[str, Any] = {}
        self._outputs: list[tuple[str, str, float, float]] = []
        self._seed = 0

    def forward(self, batch: dict[str, Any]) -> Tensor:
        """One score per (query, document) pair of the batch (MaxP: the best passage's)."""
        scores = self.model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"),
                            chunk_size=self.hparams.forward_chunk_size)
        if "passage_to_pair" in batch:
            pair_of_row = batch["passage_to_pair"]
            scores = max_over_passages(scores, pair_of_row, int(pair_of_row[-1]) + 1)
        return scores

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self._seed = torch.initial_seed()  # the run's seed (``seed_everything``)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        torch.manual_seed(hash((self._seed, self.current_epoch, batch_idx)) % 2**63)

    def list_loss(self, batch: dict[str, Any]) -> Tensor:
        """The loss head applied to the batch's ``[Q, N]`` lists of scores (padded slots masked)."""
        mask = batch["mask"]
        scores = self(batch)
        lists = scores.new_zeros(mask.numel()).index_copy(0, batch["slots"], scores).view_as(mask)
        return self.loss(lists, batch["labels"], mask)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        loss = self.list_loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["mask"].shape[0])
        return loss

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW with one learning rate for the encoder and one for the head; linear warmup, then linear decay."""
        head = {id(p) for p in self.model.head_parameters()}
        groups: dict[tuple[float, float], list[torch.nn.Parameter]] = {}
        for parameter in self.model.parameters():
            if parameter.requires_grad:
                lr = self.hparams.head_lr if id(parameter) in head else self.hparams.encoder_lr
                decay = self.hparams.weight_decay if parameter.ndim > 1 else 0.0  # no decay on biases, LayerNorm
                groups.setdefault((lr, decay), []).append(parameter)
        optimizer = torch.optim.AdamW([{"params": params, "lr": lr, "weight_decay": decay}
                                       for (lr, decay), params in groups.items()])
        total = int(self.trainer.estimated_stepping_batches)
        warmup = self.hparams.warmup
        warmup_steps = round(warmup * total) if warmup < 1 else int(warmup)
        scheduler = get_linear_schedule_with_warmup(optimizer, warmup_steps, max(total, 1))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # evaluation -------------------------------------------------------------------------------------------------

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        scores = self(batch).float().tolist()
        self._outputs.extend(zip(batch["query_ids"], batch["doc_ids"], scores,
                                 batch["first_stage_scores"].tolist()))

    test_step = validation_step

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

    def _evaluate(self, run: Run, split: str) -> dict[str, float]:
        return evaluate(run, self.trainer.datamodule.judgments(split), self.hparams.metrics).mean

    def on_validation_epoch_end(self) -> None:
        reranker, first_stage = self._gather_runs()
        if self.trainer.sanity_checking:
            return
        # every process evaluates the same gathered run, so the logged values agree without a reduction
        metrics = {f"val/{name}": value for name, value in self._evaluate(reranker, "validation").items()}
        metrics |= {f"val/bm25_{name}": value for name, value in self._evaluate(first_stage, "validation").items()}
        if self.hparams.interpolate:
            selection = self.hparams.selection_metric
            self.interpolation_weight, value = best_weight(
                reranker, first_stage, self.trainer.datamodule.judgments("validation"), selection,
                self.hparams.interpolation_grid)
            metrics |= {"val/interpolation_weight": self.interpolation_weight, f"val/interpolated_{selection}": value}
        self.log_dict(metrics, prog_bar=False)
        self._write_run(reranker, "validation.run")

    def on_test_epoch_end(self) -> None:
        reranker, first_stage = self._gather_runs()
        report: dict[str, Any] = {"reranker": self._evaluate(reranker, "test"),
                                  "bm25": self._evaluate(first_stage, "test")}
        self._write_run(reranker, "test.run")
        if self.hparams.interpolate and self.interpolation_weight is not None:
            weight = self.interpolation_weight
            interpolated = interpolate(reranker, first_stage, weight)
            report["interpolated"] = {"w": weight, **self._evaluate(interpolated, "test")}
            self._write_run(interpolated, "test.interpolated.run")
        self.test_report = report
        self.log_dict({f"test/{system}/{name}": value for system, values in report.items()
                       for name, value in values.items()})

    def _write_run(self, run: Run, name: str) -> None:
        if self.trainer.is_global_zero:
            folder = Path(self.trainer.default_root_dir) / "runs"
            folder.mkdir(parents=True, exist_ok=True)
            write_run(run, folder / name, tag=f"rerank-{self.hparams.loss}")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["interpolation_weight"] = self.interpolation_weight

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.interpolation_weight = checkpoint.get("interpolation_weight")


def write_metrics(report: dict[str, Any], path: Path) -> None:
    """``metrics.json``: ``{"reranker": {...}, "bm25": {...}[, "interpolated": {"w": ..., ...}]}``."""
    with atomic_write(path) as handle:
        json.dump(report, handle, indent=2)
