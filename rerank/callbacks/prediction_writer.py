"""Writing a re-ranked run from Lightning's predict loop, on one process or many.

Each process streams the ``(query id, doc id, score, first-stage score)`` rows of its batches to a shard file
beside the output (written atomically when its pass ends); after a barrier, process 0 merges the shards into one
run, sorted as every run is (:func:`rerank.data.trec.write_run`), writes it atomically and removes the shards.
Every pair is scored by exactly one process (:class:`~rerank.training.lists.ShardSampler`), so the merged run is
the one a single process writes. The shards need a file system that every process sees (as the run directory
does for checkpoints).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import BasePredictionWriter

from ..core.atomic import atomic_write
from ..data.trec import Run, write_run

Scored = list[tuple[str, str, float, float]]


class RunWriter(BasePredictionWriter):
    """Writes the predictions of :meth:`RerankModule.predict_step` as a TREC run to ``path``.

    After the pass, :attr:`reranked` and :attr:`first_stage` hold the merged runs on process 0 (None elsewhere).
    """

    def __init__(self, path: Path, tag: str = "rerank") -> None:
        super().__init__(write_interval="batch")
        self.path, self.tag = Path(path), tag
        self.reranked: Run | None = None
        self.first_stage: Run | None = None
        self._shard: Any = None
        self._handle: IO | None = None

    def _shard_path(self, rank: int, world: int) -> Path:
        return self.path.with_name(f"{self.path.name}.shard-{rank}-of-{world}")

    def on_predict_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._shard = atomic_write(self._shard_path(trainer.global_rank, trainer.world_size))
        self._handle = self._shard.__enter__()

    def write_on_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, prediction: Scored,
                           batch_indices: Any, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
        self._handle.writelines(f"{qid}\t{doc}\t{score!r}\t{first!r}\n" for qid, doc, score, first in prediction)

    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._shard.__exit__(None, None, None)
        self._shard = self._handle = None
        trainer.strategy.barrier()
        if trainer.is_global_zero:
            self.reranked, self.first_stage = {}, {}
            shards = [self._shard_path(rank, trainer.world_size) for rank in range(trainer.world_size)]
            for shard in shards:
                with shard.open(encoding="utf-8") as handle:
                    for line in handle:
                        qid, doc, score, first = line.rstrip("\n").split("\t")
                        self.reranked.setdefault(qid, {})[doc] = float(score)
                        self.first_stage.setdefault(qid, {})[doc] = float(first)
            write_run(self.reranked, self.path, tag=self.tag)
            for shard in shards:
                shard.unlink()
        trainer.strategy.barrier()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self._shard is not None:
            self._shard.__exit__(type(exception), exception, exception.__traceback__)
            self._shard = self._handle = None
