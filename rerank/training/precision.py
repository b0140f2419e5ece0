"""Half precision on a CPU: bfloat16 where the processor computes in it, float32 where it would only emulate it.

Lightning's ``bf16-mixed`` autocasts matrix products to bfloat16 (``16-mixed`` too, which it runs as ``bf16-mixed``
on a CPU). x86 processors with bfloat16 instructions (AVX512-BF16, AMX: Intel since Cooper Lake and Sapphire Rapids,
AMD since Zen 4) train a MiniLM cross-encoder about 1.5x faster that way than in float32; the others have no
bfloat16 arithmetic and convert every operand, which makes the same training 3x (AVX-512) to 22x (AVX2) slower than
float32 (docs/experiments/benchmarks.md, ``scripts/benchmarks/bench_train.py precision``, which emulates such
processors). A recipe that asks for ``bf16-mixed`` (the previous default did) therefore trains in
``32-true`` on such a processor, with a warning that names the option, rather than at a fraction of the speed it was
budgeted for. Other
devices (GPUs) and other processor families keep what the config says.
"""

from __future__ import annotations

import logging

import torch

from ..core.hardware import cpu_computes_bf16

logger = logging.getLogger(__name__)

CPU_HALF_PRECISIONS = ("bf16-mixed", "bf16", "16-mixed", "16")
"""The precisions that Lightning runs as bfloat16 autocast on a CPU."""

def trains_on_cpu(accelerator: object) -> bool:
    """Whether Lightning's ``trainer.accelerator`` setting resolves to the CPU here."""
    if accelerator == "cpu":
        return True
    return accelerator == "auto" and not torch.cuda.is_available() and not torch.backends.mps.is_available()


def effective_precision(precision: object, accelerator: object) -> object:
    """``precision`` as configured, or ``32-true`` where it asks for bfloat16 autocast on a CPU that lacks
    bfloat16 arithmetic (logged as a warning naming ``trainer.precision``)."""
    if str(precision) not in CPU_HALF_PRECISIONS or not trains_on_cpu(accelerator) or cpu_computes_bf16():
        return precision
    logger.warning("trainer.precision %s: this CPU has no bfloat16 instructions (AVX512-BF16 or AMX), on which "
                   "bfloat16 autocast runs slower than float32; training in 32-true instead", precision)
    return "32-true"
