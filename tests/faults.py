"""Fault injection for the fault tests: kill this process (SIGKILL, no clean-up) at a chosen point of a write.

    python -c "import faults; faults.kill_before_replace('last.ckpt'); from rerank.cli import main; main([...])"

:func:`kill_before_replace` arms :mod:`rerank.core.atomic` so that the process dies once a file or folder whose name
contains ``fragment`` is completely written to its temporary sibling, just before it is renamed into place: the
worst moment for a writer that is not atomic. Used in subprocesses only.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from rerank.core import atomic


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


def signal_on_call(target: str, signum: int = signal.SIGTERM) -> None:
    """Send ``signum`` to this process when ``target`` (``module:Class.method`` or ``module:function``) is first
    called, before it runs: the signal comes in the middle of that phase of a command."""
    import importlib

    module_name, _, path = target.partition(":")
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original = getattr(owner, name)
    sent = []

    def signalling(*args: object, **kwargs: object) -> object:
        if not sent:
            sent.append(signum)
            os.kill(os.getpid(), signum)
        return original(*args, **kwargs)

    setattr(owner, name, signalling)


def signal_at_step(what: str, step: int, signum: int = signal.SIGTERM) -> None:
    """Send ``signum`` to this process at the end of optimizer step ``step`` of the training that
    :class:`rerank.callbacks.resumable.Resumable` names ``what`` (``the training``, ``the judgment-free stage``)."""
    from rerank.callbacks.resumable import Resumable

    original = Resumable.on_train_batch_end

    def signalling(self: Resumable, trainer: object, *args: object) -> None:
        if self.what == what and trainer.global_step == step:
            os.kill(os.getpid(), signum)
        original(self, trainer, *args)

    Resumable.on_train_batch_end = signalling


def signal_when_exists(pattern: str, signum: int = signal.SIGTERM) -> None:
    """Send ``signum`` to this process once a file matching the glob ``pattern`` exists (watched by a thread): a
    signal from outside, as a scheduler sends it, at the moment a child process has reached that point."""
    import glob
    import threading
    import time

    def watch() -> None:
        while not glob.glob(pattern):
            time.sleep(0.05)
        os.kill(os.getpid(), signum)

    threading.Thread(target=watch, daemon=True).start()
