"""Export a trained re-ranker: ``rerank export --ckpt CHECKPOINT --out DIR [--onnx]``.

Writes the folder of :mod:`rerank.export` (transformers / sentence-transformers layout, the tokenization the
model was trained with, a model card, optionally ONNX) from any ``rerank fit`` checkpoint; facts for the model
card (data, metrics, command) come from the checkpoint's run directory when it has them. The folder appears
complete or not at all. (``rerank fit`` exports the weights it tested to ``<output_dir>/model`` by itself.)
"""

from __future__ import annotations

import sys
from pathlib import Path

from jsonargparse import ActionYesNo, ArgumentParser

from ..export import card_from_run, export
from ..logs import configure_logging
from ..training.lightning_module import RerankModule
from .errors import run

DESCRIPTION = __doc__.splitlines()[0]


def parser() -> ArgumentParser:
    commands = ArgumentParser(prog="rerank export", description=DESCRIPTION)
    commands.add_argument("--ckpt", type=str, required=True, help="a rerank fit checkpoint (.ckpt)")
    commands.add_argument("--out", type=str, required=True, help="the folder to write")
    commands.add_argument("--onnx", action=ActionYesNo, default=False,
                          help="also write model.onnx (checked with onnxruntime)")
    return commands


def main(argv: list[str] | None = None) -> Path:
    config = parser().parse_args(sys.argv[1:] if argv is None else argv)
    configure_logging()
    checkpoint = Path(config.ckpt)
    if not checkpoint.is_file():
        raise FileNotFoundError(f"--ckpt {checkpoint}: no such checkpoint file")
    module = RerankModule.load_from_checkpoint(checkpoint, map_location="cpu", weights_only=True)
    out = export(module.model, config.out, card_from_run(checkpoint, dict(module.hparams)), onnx=config.onnx,
                 deployment=module.deployment)
    print(out)
    return out


if __name__ == "__main__":
    run(main)
