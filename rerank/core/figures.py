"""Figures written as files: a matplotlib figure saved as PNG, atomically (:mod:`rerank.core.atomic`), then closed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .atomic import atomic_write


def save_figure(figure: Any, path: Path) -> Path:
    """Save a matplotlib figure as PNG, atomically, and close it; returns ``path``."""
    import matplotlib.pyplot as plt

    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=120, bbox_inches="tight")
    plt.close(figure)
    return path
