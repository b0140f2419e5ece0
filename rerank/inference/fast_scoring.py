"""Faster scoring on a CPU where the quality allows it: int8 and bfloat16, gated on the fit's validation candidates.

Two fast paths beside float32 (``precision`` of :class:`~rerank.inference.reranker.Reranker`, ``rerank serve`` and
``rerank predict``):

- ``int8``: the linear layers' weights quantized to int8 per output channel, their inputs per batch, by PyTorch's
  dynamic quantization (:func:`rerank.model.scorer.int8_model`), made from the float32 weights when the model loads
  (the same weights always give the same int8 model). Its matrix products use the CPU's int8 dot-product
  instructions (AVX512-VNNI, AVX-VNNI, AMX), where it has them (:func:`rerank.core.hardware.cpu_has_int8_dot`).
  Chosen over ONNX Runtime's dynamic quantization, which was slower on this project's CPU
  (docs/experiments/benchmarks.md).
- ``bf16``: autocast to bfloat16, fast only where the CPU computes in bfloat16 (AVX512-BF16 or AMX:
  :func:`rerank.core.hardware.cpu_computes_bf16`).

At the end of a fit, each fast path is measured against float32 on the validation candidates of the weights it
exports (:func:`measure`) and passes :class:`Gate` when its nDCG@10 is within :data:`GATE_NDCG` of float32's and its
ranking of each query's float32 top 10 agrees (Kendall's tau-b, mean over the queries, at least :data:`GATE_TAU`).
The export records each gate's figures in ``config.json`` (``rerank.fast_scoring``) and its model card.
``precision: auto`` (:func:`auto_precision`) scores with the fastest path that passed and that this CPU runs fast:
int8, else bfloat16, else float32; a path asked for by name that failed its gate is refused, saying by how much.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ..core.errors import UserError
from ..core.hardware import cpu_computes_bf16, cpu_has_int8_dot
from ..data.trec import Qrels, Run
from ..evaluation.measures import evaluate
from ..model.cross_encoder import CrossEncoderModel, saved_record
from ..model.scorer import PairScorer

logger = logging.getLogger(__name__)

GATE_NDCG = 0.002
"""The most a fast path's validation nDCG@10 may differ from float32's."""
GATE_TAU = 0.98
"""The least mean Kendall's tau-b between a fast path's and float32's scores of each query's float32 top 10."""
TOP = 10
MAX_PAIRS = 2000
"""The most validation pairs the gates are measured on (each path scores them once)."""
MEASURE = "nDCG@10"
FAST = ("int8", "bf16")
"""The fast paths, fastest first (where the CPU runs each fast)."""
INSTRUCTIONS = {"int8": "int8 dot-product instructions (AVX512-VNNI, AVX-VNNI, AMX)",
                "bf16": "bfloat16 instructions (AVX512-BF16, AMX)"}
RECORD = "fast_scoring"
"""The key of the gates' figures in an export's ``config.json`` ``rerank`` section."""


@dataclass(frozen=True)
class Gate:
    """A fast path's figures against float32's on the same candidates.

    Attributes:
        precision: ``int8`` or ``bf16``.
        reference: float32's nDCG@10.
        fast: the fast path's nDCG@10.
        tau: the mean Kendall's tau-b of the two scorings over each query's float32 top 10.
        queries: the judged queries measured.
    """

    precision: str
    reference: float
    fast: float
    tau: float
    queries: int

    @property
    def passed(self) -> bool:
        return abs(self.fast - self.reference) <= GATE_NDCG and self.tau >= GATE_TAU

    def describe(self) -> str:
        """The figures and the verdict, in words."""
        verdict = "passes" if self.passed else "fails"
        return (f"{self.precision} {verdict} the gate on {self.queries} validation queries: {MEASURE} {self.fast:.4f} "
                f"against float32's {self.reference:.4f} ({self.fast - self.reference:+.4f}; at most {GATE_NDCG} "
                f"apart), Kendall's tau {self.tau:.4f} on each query's top {TOP} (at least {GATE_TAU})")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"passed": self.passed}


def gate(precision: str, reference: Run, fast: Run, qrels: Qrels) -> Gate:
    """The gate's figures of ``fast`` (a fast path's run) against ``reference`` (float32's, of the same candidates)
    on the judged queries of ``qrels``."""
    from scipy.stats import kendalltau

    queries = sorted(qid for qid in reference if qid in qrels)
    judged = {qid: qrels[qid] for qid in queries}
    taus = []
    for qid in queries:
        top = sorted(reference[qid], key=lambda doc: (-reference[qid][doc], doc))[:TOP]
        if len(top) > 1:
            tau = kendalltau([reference[qid][doc] for doc in top], [fast[qid][doc] for doc in top]).statistic
            taus.append(1.0 if tau != tau else float(tau))  # no variation in either: the same order
    return Gate(precision, evaluate(reference, judged, [MEASURE]).mean[MEASURE],
                evaluate(fast, judged, [MEASURE]).mean[MEASURE], statistics.fmean(taus) if taus else 1.0, len(queries))


def saved_gates(config: object) -> dict[str, Gate]:
    """The gates an export's ``config.json`` records (``rerank.fast_scoring``), by precision."""
    saved = saved_record(config, RECORD) or {}
    return {name: Gate(**{key: value for key, value in values.items() if key != "passed"})
            for name, values in saved.items()}


def auto_precision(gates: Mapping[str, Gate], device: torch.device) -> tuple[str, str]:
    """``precision: auto``: the fastest path that passed its gate and that this CPU runs fast, and why, in words."""
    if device.type != "cpu":
        return "32", f"float32 (on {device.type})"
    passed = {name for name, figures in gates.items() if figures.passed}
    fast = {"int8": cpu_has_int8_dot(), "bf16": cpu_computes_bf16()}
    for name in FAST:
        if name in passed and fast[name]:
            return name, f"{name}: it passed its gate ({gates[name].describe()}), and this CPU runs it fast"
    reasons = [f"{name} passed its gate, but this CPU has no {INSTRUCTIONS[name]}" if name in passed
               else gates[name].describe() if name in gates else f"{name} was not measured at export"
               for name in FAST]
    return "32", "float32 (" + "; ".join(reasons) + ")"


def resolve_precision(precision: str, gates: Mapping[str, Gate], device: torch.device, where: str) -> tuple[str, str]:
    """What a model whose export records ``gates`` scores in on ``device`` when ``precision`` is asked for, and why,
    in words: ``auto`` resolved (:func:`auto_precision`); a fast path asked for by name checked (:func:`check_gate`).

    Raises:
        UserError: a fast path asked for by name failed its gate, or int8 was asked for off a CPU.
    """
    if precision == "auto":
        return auto_precision(gates, device)
    if precision == "int8" and device.type != "cpu":
        raise UserError(f"precision int8 scores on a CPU; {where} would score on {device}")
    check_gate(precision, gates, where)
    return precision, f"{precision}: as asked"


def check_gate(precision: str, gates: Mapping[str, Gate], where: str) -> None:
    """Refuse a fast path asked for by name that failed its gate at export (one that was not measured is allowed:
    a model rerank did not export, say).

    Raises:
        UserError: naming the model and by how much it failed.
    """
    if precision in gates and not gates[precision].passed:
        raise UserError(f"precision {precision}: {where} {gates[precision].describe()}; score it in float32, or with "
                        "precision auto")


def measure(folder: Path, run: Run, queries: Mapping[str, str], texts: Callable[[str], str], qrels: Qrels,
            batch_size: int = 64) -> dict[str, Gate]:
    """Each fast path's gate on ``run``'s candidates (the validation candidates of the fit that exported ``folder``:
    its judged queries, in order, up to :data:`MAX_PAIRS` pairs), against float32, each loaded from ``folder`` and
    scored as :class:`~rerank.model.scorer.PairScorer` scores them (what a user who loads the export gets); bf16 only
    where this CPU computes in it."""
    judged: Run = {}
    for qid in sorted(qid for qid in run if qid in qrels):
        if sum(map(len, judged.values())) + len(run[qid]) > MAX_PAIRS:
            break
        judged[qid] = run[qid]
    if not judged:
        return {}
    candidates = {qid: {doc: texts(doc) for doc in docs} for qid, docs in judged.items()}
    scored = {}
    for precision in ("32", *(name for name in FAST if name != "bf16" or cpu_computes_bf16())):
        scorer = PairScorer(CrossEncoderModel.from_pretrained(str(folder)), batch_size=batch_size, device="cpu",
                            precision=precision)
        scored[precision] = scorer.rerank_many(queries, candidates)
    gates = {name: gate(name, scored["32"], scored[name], qrels) for name in scored if name != "32"}
    for figures in gates.values():
        (logger.info if figures.passed else logger.warning)("fast scoring: %s", figures.describe())
    return gates


def gate_lines(gates: Mapping[str, Gate]) -> list[str]:
    """The model card's account of the fast paths."""
    if not gates:
        return []
    lines = ["", "## Faster scoring on a CPU", "",
             f"Measured at export on the fit's validation candidates, against float32 (a fast path passes with "
             f"{MEASURE} within {GATE_NDCG} and Kendall's tau >= {GATE_TAU} on each query's top {TOP}):", "",
             f"| precision | {MEASURE} | float32's | Kendall's tau | queries | gate |", "|---|---:|---:|---:|---:|---|"]
    lines += [f"| {g.precision} | {g.fast:.4f} | {g.reference:.4f} | {g.tau:.4f} | {g.queries} | "
              f"{'passed' if g.passed else 'failed'} |" for g in gates.values()]
    return [*lines, "", '`Reranker.from_pretrained(folder, precision="auto")` and `rerank serve --serve.precision '
            'auto` score with the fastest path that passed and that the CPU runs fast.']
