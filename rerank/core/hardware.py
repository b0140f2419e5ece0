"""What this CPU computes fast: bfloat16 arithmetic and int8 dot products."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

X86 = ("x86_64", "amd64", "i386", "i686")
ARM = ("aarch64", "arm64")
INT8_DOT = ("avx512_vnni", "avx_vnni", "amx_int8")
"""The x86 flags of int8 dot-product instructions (``/proc/cpuinfo``)."""


def cpu_computes_bf16() -> bool:
    """Whether this processor has bfloat16 arithmetic (AVX512-BF16 or AMX); True off x86, where the check does
    not apply."""
    if platform.machine().lower() not in X86:
        return True
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def cpu_has_int8_dot() -> bool:
    """Whether this processor has int8 dot-product instructions (AVX512-VNNI, AVX-VNNI or AMX-INT8 on x86; ARM's
    dot product on 64-bit ARM)."""
    machine = platform.machine().lower()
    if machine in ARM:
        return True
    if machine not in X86:
        return False
    try:
        flags = set(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return False
    return bool(flags & set(INT8_DOT))


def cpu_flags() -> list[str]:
    """This processor's flags that the fast paths use, as ``/proc/cpuinfo`` lists them (for benchmarks' records)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return []
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", *INT8_DOT)
    return [flag for flag in wanted if flag in flags]
