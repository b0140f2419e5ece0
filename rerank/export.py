"""Export a trained re-ranker: ``python -m rerank.export --ckpt CHECKPOINT --out DIR [--onnx]``.

The folder holds ``config.json``, ``model.safetensors`` and the tokenizer in the Hugging Face layout, so that
``transformers.AutoModelForSequenceClassification.from_pretrained(DIR)`` and
``sentence_transformers.CrossEncoder(DIR)`` load it (the config tells sentence-transformers to return the raw
score, not a sigmoid of it), plus a model card (``README.md``). With ``--onnx``, ``model.onnx`` takes
``input_ids``, ``attention_mask`` (and ``token_type_ids``) with dynamic batch and sequence axes and returns
``scores``; it is checked against PyTorch on sample pairs before the folder is published. The folder appears
complete or not at all. ``rerank.fit`` exports its best checkpoint to ``<output_dir>/model`` by itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml

from .model import CrossEncoder
from .module import RerankModule

logger = logging.getLogger(__name__)

ONNX_TOLERANCE = 1e-4
IDENTITY = "torch.nn.modules.linear.Identity"
SAMPLE_PAIRS = [
    ("what similarity laws must be obeyed", "experimental investigation of the aerodynamics of a wing in a slipstream"),
    ("heat flux", "the heat transfer to a blunt body in hypersonic flow is measured in a shock tunnel and compared "
                  "with laminar boundary layer theory " * 3),
    ("a", "b"),
]


def export(model: CrossEncoder, out: str | Path, card: dict[str, Any] | None = None, onnx: bool = False) -> Path:
    """Write ``model`` to the folder ``out`` (replacing it), atomically; returns ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.model.config.sentence_transformers = {"activation_fn": IDENTITY}
        model.save_pretrained(str(staging))
        (staging / "README.md").write_text(model_card(card or {}), encoding="utf-8")
        if onnx:
            export_onnx(model, staging / "model.onnx")
        _replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _replace(staging: Path, out: Path) -> None:
    """Move ``staging`` to ``out``; an existing ``out`` is removed only once the new folder is in place."""
    if out.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
        out.replace(retired / out.name)
        staging.replace(out)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        staging.replace(out)


def export_onnx(model: CrossEncoder, path: Path) -> float:
    """ONNX graph of the scoring function with dynamic axes; returns the largest difference to PyTorch.

    Raises:
        ValueError: ONNX Runtime's scores differ from PyTorch's by more than ``ONNX_TOLERANCE``.
    """
    import onnxruntime

    model = model.eval()
    encoded = model.tokenizer([q for q, _ in SAMPLE_PAIRS], [d for _, d in SAMPLE_PAIRS], padding=True,
                              truncation="only_second", max_length=128, return_tensors="pt")
    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in encoded]
    axes = {name: {0: "batch", 1: "sequence"} for name in names} | {"scores": {0: "batch"}}
    with torch.no_grad():
        expected = model(**{name: encoded[name] for name in names}).numpy()
        torch.onnx.export(model, tuple(encoded[name] for name in names), str(path), input_names=names,
                          output_names=["scores"], dynamic_axes=axes, opset_version=17, dynamo=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (scores,) = session.run(["scores"], {name: encoded[name].numpy() for name in names})
    difference = float(abs(scores - expected).max())
    if difference > ONNX_TOLERANCE:
        raise ValueError(f"ONNX export: scores differ from PyTorch's by {difference:.2e} (> {ONNX_TOLERANCE})")
    logger.info("ONNX export checked on %d pairs: max |onnxruntime - torch| = %.1e", len(SAMPLE_PAIRS), difference)
    return difference


def model_card(card: dict[str, Any]) -> str:
    """The folder's README.md: base model, loss head, training data and fold, test metrics, command."""
    hparams, data = card.get("model", {}), card.get("data", {})
    lines = ["---", "library_name: sentence-transformers", "pipeline_tag: text-ranking", "tags: [cross-encoder, rerank]",
             "---", "", "# Cross-encoder re-ranker trained with rerank", "",
             "Scores `[CLS] query [SEP] document [SEP]` with one output (higher = more relevant).", "",
             f"- Base model: `{hparams.get('model_name', 'unknown')}`",
             f"- Loss head: `{hparams.get('loss', 'unknown')}` with parameters `{hparams.get('loss_args') or {}}`"]
    if data:
        lines += [f"- Training data: `{yaml.safe_dump(data.get('collection'), default_flow_style=True).strip()}`",
                  f"- Candidates: `{yaml.safe_dump(data.get('first_stage'), default_flow_style=True).strip()}`, "
                  f"top {data.get('depth')} re-ranked",
                  f"- Folds: `{yaml.safe_dump(data.get('folds'), default_flow_style=True).strip()}`"]
    if card.get("metrics"):
        lines += ["", "## Test metrics", "", "| system | " + " | ".join(next(iter(card["metrics"].values()))) + " |",
                  "|---|" + "---|" * len(next(iter(card["metrics"].values())))]
        lines += [f"| {system} | " + " | ".join(f"{value:.4f}" for value in values.values()) + " |"
                  for system, values in card["metrics"].items()]
    if card.get("command"):
        lines += ["", "## Trained with", "", "```bash", card["command"], "```"]
    lines += ["", "## Use", "", "```python", "from sentence_transformers import CrossEncoder",
              "model = CrossEncoder(\"path/to/this/folder\")",
              "scores = model.predict([(\"a query\", \"a document\")])", "```", ""]
    return "\n".join(lines)


def card_from_run(checkpoint: Path, hparams: dict[str, Any]) -> dict[str, Any]:
    """Model-card facts from a ``rerank.fit`` run directory (``DIR/checkpoints/x.ckpt``) when they exist."""
    run_dir = checkpoint.resolve().parent.parent
    card: dict[str, Any] = {"model": hparams}
    if (run_dir / "config.yaml").is_file():
        config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        card["data"] = config.get("data", {})
        card["command"] = f"python -m rerank.fit --config {run_dir / 'config.yaml'}"
    if (run_dir / "metrics.json").is_file():
        card["metrics"] = {system: {k: v for k, v in values.items() if k != "w"}
                           for system, values in json.loads((run_dir / "metrics.json").read_text()).items()}
    return card


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m rerank.export", description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, type=Path, help="a rerank.fit checkpoint (.ckpt)")
    parser.add_argument("--out", required=True, type=Path, help="the folder to write")
    parser.add_argument("--onnx", action="store_true", help="also write model.onnx (checked with onnxruntime)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not args.ckpt.is_file():
        parser.error(f"--ckpt {args.ckpt}: no such checkpoint file")
    module = RerankModule.load_from_checkpoint(args.ckpt, map_location="cpu", weights_only=False)
    out = export(module.model, args.out, card_from_run(args.ckpt, dict(module.hparams)), onnx=args.onnx)
    print(out)
    return out


if __name__ == "__main__":
    main()
