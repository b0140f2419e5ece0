"""Checkpoints written the way every other file rerank writes is (:mod:`rerank.core.atomic`).

Lightning's own checkpoint writer stages a file in the system's temporary folder and moves it over: across file
systems that move is a copy, not atomic, and a process killed meanwhile leaves the staged file behind (84 MB for
MiniLM). :class:`AtomicCheckpointIO` writes a temporary file beside the checkpoint, flushes it, renames it into
place, and removes what killed processes left there. Remote paths (``s3://...``) keep Lightning's writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..core.atomic import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """:class:`~lightning.pytorch.plugins.io.TorchCheckpointIO` with crash-safe local writes."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        with atomic_write(Path(path), "wb") as handle:
            torch.save(checkpoint, handle)
