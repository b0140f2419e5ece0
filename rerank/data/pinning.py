"""Page-locked copies of batch dataclasses, for copies to a GPU that do not make the host wait.

A copy from ordinary (pageable) host memory to a GPU is staged by the driver and the host waits for the device to
reach it, so the CPU cannot queue the next step's kernels while the current ones run: on an H100, a training loop
fed MiniLM batches from pageable memory took 28.0 ms a step against 25.3 ms with the batches already there
(docs/experiments/benchmarks.md, GPU figures). From page-locked memory, Lightning's ``non_blocking`` copy is
asynchronous. ``DataLoader(pin_memory=True)`` calls a batch's ``pin_memory()``; the data module asks for it when the
trainer's device is a GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor


class Pinnable:
    """Mixin for dataclasses of tensors: ``pin_memory()`` returns a copy whose tensors (also those of nested
    pinnable fields) are page-locked; other fields are shared."""

    def pin_memory(self) -> Any:
        return dataclasses.replace(self, **{field.name: _pinned(getattr(self, field.name))
                                            for field in dataclasses.fields(self) if field.init})


def _pinned(value: Any) -> Any:
    return value.pin_memory() if isinstance(value, Tensor | Pinnable) else value
