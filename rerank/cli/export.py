"""Export a trained re-ranker: ``rerank export --ckpt CHECKPOINT --out DIR [--onnx]``.

Writes the folder of :mod:`rerank.inference.export` (transformers / sentence-transformers layout, the tokenization the
model was trained with, a model card, optionally ONNX) from any ``rerank fit`` checkpoint; facts for the model
card (data, metrics, command) come from the checkpoint's run directory when it has them. The folder appears
complete or not at all. (``rerank fit`` exports the weights it tested to ``<output_dir>/model`` by itself.)
"""

from __future__ import annotations

import sys
from pathlib import Path

from jsonargparse import ActionYesNo, ArgumentParser

from ..core.errors import UserError
from ..core.logs import configure_logging
from ..inference.export import card_from_run, export
from ..training.lightning_module import RerankModule
from .failures import run

DESCRIPTION = __doc__.splitlines()[0]


def parser() -> ArgumentParser:
    commands = ArgumentParser(prog="rerank export", description=DESCRIPTION)
    commands.add_argument("--ckpt", type=str, required=True, help="a rerank fit checkpoint (.ckpt)")
    commands.add_argument("--out", type=str, required=True, help="the folder to write")
    commands.add_argument("--onnx", action=ActionYesNo, default=False,
                          help="also write onnx/model.onnx, the layout sentence-transformers and Optimum load (checked "
                               "with onnxruntime)")
    commands.add_argument("--untrained_head", action=ActionYesNo, default=False,
                          help="export a checkpoint written before any training step (its head as initialised)")
    return commands


def main(argv: list[str] | None = None) -> Path:
    config = parser().parse_args(sys.argv[1:] if argv is None else argv)
    configure_logging()
    checkpoint = Path(config.ckpt)
    if not checkpoint.is_file():
        raise FileNotFoundError(f"--ckpt {checkpoint}: no such checkpoint file")
    if not config.untrained_head and trained_steps(checkpoint) == 0:
        raise UserError(f"--ckpt {checkpoint}: written before any training step, so its scoring head is as it was "
                        "initialised: export a checkpoint of a fit that trained (its checkpoints/best.ckpt or "
                        "last.ckpt), or pass --untrained_head to export it on purpose")
    module = RerankModule.load_from_checkpoint(checkpoint, map_location="cpu", weights_only=True)
    out = export(module.model, config.out, card_from_run(checkpoint, dict(module.hparams)), onnx=config.onnx,
                 deployment=module.deployment)
    print(out)
    return out


def trained_steps(checkpoint: Path) -> int:
    """The optimizer steps a checkpoint's weights were trained for (``global_step``), read without its tensors."""
    import torch

    return int(torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True).get("global_step", 0))


if __name__ == "__main__":
    run(main)
