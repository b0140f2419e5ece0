"""Validate a tiny re-ranker on Cranfield with N processes (DDP, gloo on CPU); write the metrics as JSON.

    python tests/ddp_validate.py WORKDIR OUTPUT DEVICES

Run by ``tests/test_training.py`` in a subprocess: Lightning's DDP launcher starts the other processes by
running this script again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning.pytorch as pl
from helpers import CRANFIELD

from rerank.callbacks.evaluator import Evaluator
from rerank.config.tokenization import TokenizationConfig
from rerank.data.collection_config import CollectionConfig
from rerank.data.folds import FoldsConfig
from rerank.data.trec import read_run
from rerank.first_stage import FirstStageConfig
from rerank.training.datamodule import RerankDataModule
from rerank.training.lightning_module import RerankModule


def main(workdir: Path, output: Path, devices: int) -> None:
    pl.seed_everything(0)
    data = RerankDataModule(
        collection=CollectionConfig(**CRANFIELD),
        first_stage=FirstStageConfig(backend="run", run=str(workdir / "bm25.run")),
        folds=FoldsConfig(scheme="kfold", count=5, seed=42, test=1), model_name=str(workdir / "bert"),
        tokenization=TokenizationConfig(max_length=64, max_query_length=16), output_dir=str(output),
        rerank_depth=20, eval_batch_size=7)
    module = RerankModule(model_name=str(workdir / "bert"), loss="listnet")
    trainer = pl.Trainer(accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(output), callbacks=[Evaluator()])
    (metrics,) = trainer.validate(module, datamodule=data)
    if trainer.is_global_zero:
        run = read_run(output / "runs" / "validation.run")
        pairs = sorted((qid, doc) for qid, docs in run.items() for doc in docs)
        result = {"world_size": trainer.world_size, "metrics": metrics, "pairs": pairs}
        (output / "validation.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
