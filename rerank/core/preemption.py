"""Stopping on SIGTERM and SIGINT without losing work: what a scheduler (SLURM, Kubernetes, a spot instance) sends
before it kills a job, and what Ctrl-C sends.

Every command runs inside :func:`handled` (:func:`rerank.cli.failures.run`). A signal then ends the command with
:class:`Preempted`, which says in one line what was kept and how to go on, and the exit status ``128 + signal``
(143 for SIGTERM, 130 for SIGINT):

- outside training (reading, the first stage, the teacher, testing, the export) it is raised at once: whatever was
  finished is in its cache or run directory (every write is atomic, :mod:`rerank.core.atomic`), and the run directory
  is kept;
- while a model trains, the signal is deferred (:func:`deferred`): the training loop finishes its optimizer step,
  writes a checkpoint and only then stops (:class:`rerank.callbacks.resumable.Resumable`), so a re-run of the same
  command continues from that step.

Further signals while a step finishes are noted and do not cut the checkpoint short (SIGKILL does).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Exception):
    """The command was stopped by a signal: where it stood, and what it kept.

    Attributes:
        signum: the signal.
        phase: what the command was doing (``the judgment-free stage``, ``testing``, ...).
        kept: what a re-run continues from, in words (empty: what was finished before this phase).
    """

    def __init__(self, signum: int, phase: str, kept: str = "") -> None:
        self.signum, self.phase, self.kept = signum, phase, kept
        name = signal.Signals(signum).name
        saved = f"; {kept}" if kept else "; what was finished before it is kept"
        super().__init__(f"stopped by {name} during {phase}{saved}: run the same command again to resume")

    @property
    def exit_status(self) -> int:
        """``128 + signal``, as a shell reports a process ended by that signal."""
        return 128 + self.signum


@dataclass
class _State:
    received: int | None = None
    deferring: bool = False
    phase: str = "its start"
    forward: Any = None


_STATE = _State()


def _handler(signum: int, frame: object) -> None:
    first = _STATE.received is None
    if first:
        _STATE.received = signum
    if _STATE.forward is not None:
        _STATE.forward.send_signal(signum)
    if _STATE.deferring or _STATE.forward is not None:
        if first:
            logger.warning("%s: stopping once %s has saved where it stands", signal.Signals(signum).name,
                           _STATE.phase)
        return
    raise Preempted(signum, _STATE.phase)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGTERM and SIGINT end the block with :class:`Preempted` (deferred where :func:`deferred` says); the handlers
    before it are restored after it. Only the main thread can take signals: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _handler) for signum in SIGNALS}
    _STATE.received, _STATE.phase = None, "its start"
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def reinstall() -> None:
    """Take the signals back from a library that put its own handlers in (Lightning's Trainer does at each fit),
    when :func:`handled` is in force."""
    if threading.current_thread() is threading.main_thread() and any(
            signal.getsignal(signum) not in (_handler, signal.SIG_DFL, signal.SIG_IGN) for signum in SIGNALS):
        for signum in SIGNALS:
            signal.signal(signum, _handler)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """What the command is doing inside the block, as :class:`Preempted` names it."""
    previous, _STATE.phase = _STATE.phase, name
    try:
        yield
    finally:
        _STATE.phase = previous


@contextlib.contextmanager
def deferred(forward: Any = None) -> Iterator[None]:
    """A signal inside the block is noted (:func:`pending`) instead of raised: the block stops at a point where it
    can save its state, and then calls :func:`stop`. ``forward``: a child process (a ``subprocess.Popen``) that the
    signal is passed on to, which saves its own state."""
    _STATE.deferring, _STATE.forward = True, forward
    try:
        yield
    finally:
        _STATE.deferring, _STATE.forward = False, None


def pending() -> int | None:
    """The signal received since :func:`handled` began, if any."""
    return _STATE.received


def stop(kept: str = "") -> Preempted:
    """The :class:`Preempted` to raise once the state is saved (``kept``: what was saved, in words)."""
    return Preempted(_STATE.received or signal.SIGTERM, _STATE.phase, kept)
