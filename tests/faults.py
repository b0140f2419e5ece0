"""Fault injection for the fault tests: kill this process (SIGKILL, no clean-up) at a chosen point of a write.

    python -c "import faults; faults.kill_before_replace('last.ckpt'); from rerank.cli import main; main([...])"

:func:`kill_before_replace` arms :mod:`rerank.atomic` so that the process dies once a file or folder whose name
contains ``fragment`` is completely written to its temporary sibling, just before it is renamed into place: the
worst moment for a writer that is not atomic. Used in subprocesses only.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from rerank import atomic


def kill_before_replace(fragment: str) -> None:
    replace = Path.replace

    def killing_replace(self: Path, target: str | os.PathLike) -> Path:
        if fragment in Path(target).name:
            os.kill(os.getpid(), signal.SIGKILL)
        return replace(self, target)

    def killing_os_replace(source: str | os.PathLike, target: str | os.PathLike) -> None:
        if fragment in Path(target).name:
            os.kill(os.getpid(), signal.SIGKILL)
        os.replace(source, target)

    Path.replace = killing_replace  # atomic_directory's rename
    atomic.os = _OsWith(killing_os_replace)  # atomic_write's rename


class _OsWith:
    """The ``os`` module with another ``replace``."""

    def __init__(self, replace: object) -> None:
        self.replace = replace

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)
