"""Export a trained re-ranker to a folder that ``transformers`` and ``sentence-transformers`` load as is.

The folder holds ``config.json`` (with the tokenization the model was trained and evaluated with, key
``rerank``), ``model.safetensors`` and the tokenizer (``model_max_length`` = the trained ``max_length``) in the
Hugging Face layout, so that ``transformers.AutoModelForSequenceClassification.from_pretrained(DIR)`` and
``sentence_transformers.CrossEncoder(DIR)`` load it (the config tells sentence-transformers to return the raw
score, not a sigmoid of it), plus a model card (``README.md``). With ``onnx``, ``onnx/model.onnx`` (:data:`ONNX`),
in sentence-transformers' and Optimum's layout, takes ``input_ids``, ``attention_mask`` (and ``token_type_ids``) with
dynamic batch and sequence axes and returns ``logits`` ``[batch, 1]``, traced from the stock Hugging Face modules, so
that ``CrossEncoder(folder, backend="onnx")`` and Optimum's ``ORTModelForSequenceClassification`` load it; it is
checked against PyTorch on sample pairs before the folder is published. The folder appears complete or not at
all (:func:`rerank.core.atomic.atomic_directory`). ``rerank fit`` exports the weights it tested to
``<output_dir>/model``; ``rerank export`` exports any checkpoint.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import yaml
from huggingface_hub import EvalResult, ModelCardData

from ..core.atomic import atomic_directory
from ..core.run_directory import RunDirectory, measures_of
from ..evaluation.calibration import RECORD as CALIBRATION
from ..evaluation.calibration import Calibration
from ..model import speedups
from ..model.cross_encoder import CONFIG_KEY, CrossEncoderModel
from ..ranker.deployment import NAMES, PARTS, Deployment
from .fast_scoring import RECORD, Gate, gate_lines

logger = logging.getLogger(__name__)

ONNX = Path("onnx") / "model.onnx"
"""Where an export's ONNX graph is, in its folder (sentence-transformers' and Optimum's layout)."""
ONNX_OUTPUT = "logits"
"""The graph's output: ``[batch, 1]`` scores, as a one-label sequence classifier's."""
ONNX_TOLERANCE = 1e-4
IDENTITY = "torch.nn.modules.linear.Identity"
SAMPLE_PAIRS = [
    ("what similarity laws must be obeyed", "experimental investigation of the aerodynamics of a wing in a slipstream"),
    ("heat flux", "the heat transfer to a blunt body in hypersonic flow is measured in a shock tunnel and compared "
                  "with laminar boundary layer theory " * 3),
    ("a", "b"),
]


def export(model: CrossEncoderModel, out: str | Path, card: dict[str, Any] | None = None,
           onnx: bool = False, deployment: Deployment | None = None,
           finish: Callable[[Path], None] | None = None,
           gates: Mapping[str, Gate] | Callable[[Path], Mapping[str, Gate]] | None = None,
           calibration: Calibration | None = None) -> Path:
    """Write ``model`` to the folder ``out`` (replacing it), atomically, with the ranker it deploys (default: the
    pure cross-encoder), the fast paths' quality gates (:mod:`rerank.inference.fast_scoring`: given, or measured
    on the written folder by ``gates(folder)``) and the deployed ranker's calibration
    (:mod:`rerank.evaluation.calibration`) in ``config.json``, each described in the card; returns ``out``.
    ``finish``: as :func:`rerank.core.atomic.atomic_directory`'s (a cache entry's seal)."""
    out = Path(out)
    deployment = deployment or Deployment()
    with atomic_directory(out, finish=finish) as staging:
        model.model.config.sentence_transformers = {"activation_fn": IDENTITY}
        model.save_pretrained(str(staging), deployment=deployment.as_dict())
        gates = (gates(staging) if callable(gates) else gates) or {}
        records = {RECORD: {name: gate.as_dict() for name, gate in gates.items()} if gates else None,
                   CALIBRATION: calibration.as_dict() if calibration is not None else None}
        if any(records.values()):
            config = json.loads((staging / "config.json").read_text(encoding="utf-8"))
            config[CONFIG_KEY] |= {key: value for key, value in records.items() if value}
            (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        card_text = "\n".join([model_card(card or {}, deployment).rstrip("\n"), *gate_lines(gates),
                               *card_calibration_lines(calibration, (card or {}).get("calibration"))]) + "\n"
        (staging / "README.md").write_text(card_text, encoding="utf-8")
        if onnx:
            (staging / ONNX).parent.mkdir()
            export_onnx(model, staging / ONNX)
    return out


def card_calibration_lines(calibration: Calibration | None, report: Mapping[str, Any] | None = None) -> list[str]:
    """The model card's account of the deployed ranker's calibration, with its test figures (``report``:
    :func:`rerank.evaluation.calibration.calibration_report`'s) when given."""
    if calibration is None:
        return []
    lines = ["", "## Calibrated scores", "",
             f"The deployed ranker's score maps to a probability of relevance by {calibration.describe()}. "
             "`Reranker.rerank(..., calibrated=True)`, `rerank predict` (`runs/reranked.probabilities.tsv`) and "
             "`rerank serve` (`relevance_score`, `score`; `raw_scores` for the raw ones) give it, and `min_score` "
             "keeps the documents at or above a probability."]
    if report:
        lines += ["", f"On the {report['pairs']} test pairs ({report['relevant']} relevant):", "",
                  "| score | ECE | Brier | log-loss |", "|---|---:|---:|---:|"]
        lines += [f"| {name} | {report[key]['ece']:.4f} | {report[key]['brier']:.4f} | {report[key]['log_loss']:.4f} |"
                  for key, name in (("raw_sigmoid", "the raw score's sigmoid"), ("calibrated", "calibrated"))]
        cut = report["cut_off"]
        lines += ["", f"The cut-off keeps {cut['kept']} test pairs: recall {cut['recall']:.4f}, precision "
                      f"{cut['precision']:.4f}."]
    return lines


def export_onnx(model: CrossEncoderModel, path: Path) -> float:
    """ONNX graph of the scoring function (stock modules, ``logits`` ``[batch, 1]``) with dynamic axes; the largest
    difference to PyTorch.

    Raises:
        ValueError: ONNX Runtime's scores differ from PyTorch's by more than ``ONNX_TOLERANCE``.
    """
    model = copy.deepcopy(model).eval()
    speedups.disable(model.model)
    encoded = model.tokenizer([q for q, _ in SAMPLE_PAIRS], [d for _, d in SAMPLE_PAIRS], padding=True,
                              truncation="only_second", max_length=128, return_tensors="pt")
    names = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in encoded]
    axes = {name: {0: "batch", 1: "sequence"} for name in names} | {ONNX_OUTPUT: {0: "batch"}}
    logits = _Logits(model.model, names)
    with torch.no_grad():
        expected = model(**{name: encoded[name] for name in names}).numpy()
        torch.onnx.export(logits, tuple(encoded[name] for name in names), str(path), input_names=names,
                          output_names=[ONNX_OUTPUT], dynamic_axes=axes, opset_version=17, dynamo=False)
    (scores,) = onnx_session(path).run([ONNX_OUTPUT], {name: encoded[name].numpy() for name in names})
    difference = float(abs(scores[:, 0] - expected).max())
    if difference > ONNX_TOLERANCE:
        raise ValueError(f"ONNX export: scores differ from PyTorch's by {difference:.2e} (> {ONNX_TOLERANCE})")
    logger.info("ONNX export checked on %d pairs: max |onnxruntime - torch| = %.1e", len(SAMPLE_PAIRS), difference)
    return difference


def onnx_session(path: Path, options: object = None, providers: tuple[str, ...] = ("CPUExecutionProvider",)):
    """An ONNX Runtime session over an export's graph (``folder / ONNX``): ``session.run([ONNX_OUTPUT], inputs)``
    gives the ``[batch, 1]`` scores."""
    import onnxruntime

    return onnxruntime.InferenceSession(str(path), options, providers=list(providers))


class _Logits(torch.nn.Module):
    """A sequence classifier's ``logits`` from positional inputs (what ``torch.onnx.export`` traces)."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, inputs))).logits


def model_card(card: dict[str, Any], deployment: Deployment | None = None) -> str:
    """The folder's README.md: base model, loss head, training data and fold, the deployed ranker, test metrics,
    command, and how to use it (rerank, transformers, sentence-transformers)."""
    deployment = deployment or Deployment()
    hparams, data = card.get("model", {}), card.get("data", {})
    lines = ["---", card_data(card, deployment).to_yaml(), "---", "", "# Cross-encoder re-ranker trained with rerank",
             "",
             "Scores `[CLS] query [SEP] document [SEP]` with one output (higher = more relevant).", "",
             f"- Base model: `{hparams.get('model_name', 'unknown')}`",
             f"- Loss head: `{hparams.get('loss', 'unknown')}` with parameters `{hparams.get('loss_args') or {}}`"]
    if hparams.get("tokenization"):
        lines.append(f"- Tokenization (used by rerank when re-ranking with this folder): "
                     f"`{yaml.safe_dump(hparams['tokenization'], default_flow_style=True).strip()}`")
    if data:
        lines += [f"- Training data: `{yaml.safe_dump(data.get('collection'), default_flow_style=True).strip()}`",
                  f"- Candidates: `{yaml.safe_dump(data.get('first_stage'), default_flow_style=True).strip()}`, "
                  f"top {data.get('rerank_depth')} re-ranked",
                  f"- Folds: `{yaml.safe_dump(data.get('folds'), default_flow_style=True).strip()}`"]
    if card.get("pretrain"):
        lines.append(f"- Pre-trained first on: `{yaml.safe_dump(card['pretrain'], default_flow_style=True).strip()}`")
    lines += ["", "## The deployed ranker", "", *deployment_lines(deployment)]
    if card.get("metrics"):
        lines += ["", "## Test metrics", "", "| system | " + " | ".join(next(iter(card["metrics"].values()))) + " |",
                  "|---|" + "---|" * len(next(iter(card["metrics"].values())))]
        lines += [f"| {system}{' (deployed)' if system == deployment.ranker else ''} | "
                  + " | ".join(f"{value:.4f}" for value in values.values()) + " |"
                  for system, values in card["metrics"].items()]
    if card.get("command"):
        lines += ["", "## Trained with", "", "```bash", card["command"], "```"]
    scores = ", first_stage_scores=[12.1, 9.8]" if deployment.needs_first_stage else ""
    lines += ["", "## Use", "", "```python", "from rerank import Reranker",
              "reranker = Reranker.from_pretrained(\"path/to/this/folder\")  # the deployed ranker",
              f"reranker.rerank(\"a query\", [\"a document\", \"another\"]{scores})  # [(index, score), ...]",
              "```", "", "The cross-encoder alone (the pure re-ranker), with sentence-transformers or transformers:",
              "", "```python", "from sentence_transformers import CrossEncoder",
              "model = CrossEncoder(\"path/to/this/folder\")",
              "scores = model.predict([(\"a query\", \"a document\")])", "```", ""]
    return "\n".join(lines)


MEASURE_TYPES = {"nDCG": "ndcg_at_{k}", "P": "precision_at_{k}", "R": "recall_at_{k}", "RR": "mrr_at_{k}",
                 "AP": "map_at_{k}", "MAP": "map", "MRR": "mrr"}
"""The Hugging Face metric types of the measures (``nDCG@10`` -> ``ndcg_at_10``); others keep their own name."""


def card_data(card: dict[str, Any], deployment: Deployment) -> ModelCardData:
    """The model card's metadata: the library and task, the base model, the collection, and each ranker's test
    figures from the fit's own metrics (``model-index``; the deployed ranker's first), unrounded."""
    hparams, collection = card.get("model", {}), (card.get("data") or {}).get("collection") or {}
    dataset = collection.get("ir_datasets")
    folds = (card.get("data") or {}).get("folds") or {}
    split = f"test fold {folds['test']} of {folds.get('count', 5)}" if folds.get("test") else "test"
    metrics = card.get("metrics") or {}
    systems = sorted(metrics, key=lambda system: system != deployment.ranker)
    results = [EvalResult(task_type="text-ranking", dataset_type=dataset or "local", dataset_name=dataset or
                          str(collection.get("docs") or "local files"), dataset_split=split,
                          metric_type=_measure_type(measure), metric_value=value,
                          metric_name=f"{measure} ({system}{', deployed' if system == deployment.ranker else ''})")
               for system in systems for measure, value in metrics[system].items()]
    return ModelCardData(library_name="sentence-transformers", pipeline_tag="text-ranking",
                         tags=["cross-encoder", "rerank"], base_model=hparams.get("model_name"),
                         datasets=[dataset] if dataset else None, model_name="rerank cross-encoder",
                         eval_results=results or None)


def _measure_type(measure: str) -> str:
    name, _, depth = measure.partition("@")
    pattern = MEASURE_TYPES.get(name)
    return pattern.format(k=depth) if pattern and "{k}" in pattern and depth else pattern or measure.lower()


def deployment_lines(deployment: Deployment) -> list[str]:
    """The model card's account of the deployed ranker: what it mixes, why it was chosen, what it needs."""
    lines = [f"`{deployment.ranker}`: the {NAMES[deployment.ranker]}"
             + ("" if deployment.ranker == "reranker" else f", {deployment.weights_text()}")
             + (f", chosen on the validation queries by {deployment.measure} (the highest; ties to the simpler)."
                if deployment.validation else ".")]
    if deployment.validation:
        lines += ["", "| validation | " + deployment.measure + " |", "|---|---:|"]
        lines += [f"| {NAMES.get(name, name)} | {value:.4f} |" for name, value in deployment.validation.items()]
    if deployment.ranker != "reranker":
        parts = ", ".join(NAMES[part] for part in PARTS[deployment.ranker])
        lines += ["", f"It mixes the {parts}, each standardised over a query's candidates (z-scores), so it re-ranks a "
                  "query's candidate list given their first-stage scores."]
    if deployment.teacher is not None:
        teacher = deployment.teacher
        mix = (f", mixed with the first stage (weight {teacher.first_stage_weight:g})"
               if teacher.first_stage_weight else "")
        lines.append(f"The teacher is the bi-encoder `{teacher.bi_encoder}` (rows of {teacher.max_length} tokens, "
                     f"cosine of normalised embeddings){mix}; rerank loads it from the Hugging Face cache or that "
                     "folder.")
    lines += ["", "`transformers` and `sentence-transformers` load this folder as the pure cross-encoder"
              + (" (not the deployed ranker)." if deployment.ranker != "reranker" else ".")]
    lines += [f"- {line}" for line in deployment.warnings()]
    return lines


def card_from_run(checkpoint: Path, hparams: dict[str, Any]) -> dict[str, Any]:
    """Model-card facts from a ``rerank fit`` run directory (``DIR/checkpoints/x.ckpt``) when they exist."""
    directory = RunDirectory(checkpoint.resolve().parent.parent)
    card: dict[str, Any] = {"model": hparams}
    if directory.config.is_file():
        config = yaml.safe_load(directory.config.read_text(encoding="utf-8-sig"))
        card["data"] = config.get("data", {})
        card["command"] = f"rerank fit --config {directory.config}"
    if directory.metrics.is_file():
        card["metrics"] = card_metrics(directory.read_metrics())
    return card


def card_metrics(metrics: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The measures of each system, without the fusion weights."""
    return {system: measures_of(values) for system, values in metrics.items()}
