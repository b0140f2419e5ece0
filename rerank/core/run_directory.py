"""The layout of what the commands write: one class per kind of directory, the only place paths are spelled.

A **run directory** (``rerank fit --output_dir DIR``)::

    DIR/config.yaml               the merged config (``rerank fit --config DIR/config.yaml`` reruns it)
    DIR/first_stage.trec          the first-stage candidates of every query
    DIR/teacher.trec              (rerank teacher) a teacher's scores of the first-stage candidates
    DIR/checkpoints/best.ckpt     best on evaluation.selection.measure;  last.ckpt: for resuming (the tested
                                  weights: evaluation.selection.epoch, rerank.callbacks.evaluator)
    DIR/runs/validation.run       the tested weights' validation run, whose figures chose the deployed ranker
                                  (the latest epoch's while training runs);  validation.epoch<N>.run: each
                                  epoch's (its last validation);  test.run, test.interpolated.run,
                                  test.fused.run, test.teacher.run (the teacher's scores of the test candidates),
                                  test.teacher_bi_encoder.run (its bi-encoder alone, when the teacher mixes it)
    DIR/metrics.json              {"reranker": {...}, "first_stage": {...}, "teacher": {...},
                                   "teacher_bi_encoder": {...}, "interpolated": {"w": ..., ...},
                                   "fused": {"w_reranker": ..., "w_teacher": ..., "w_first_stage": ..., ...},
                                   "deployment": {"ranker": ..., "weights": ..., ...},
                                   "calibration": {"method": ..., "raw_sigmoid": {...}, "calibrated": {...}, ...}}
    DIR/calibration.png           the deployed ranker's reliability diagram on the test pairs
                                  (rerank.evaluation.calibration)
    DIR/model/                    the tested weights, exported with their deployed ranker (rerank.ranker.deployment)
    DIR/preempted.json            while a fit stopped by SIGTERM or SIGINT waits to be resumed (rerank.core.preemption)
    DIR/pretrain/                 the stage's lists; <key>.resume.ckpt while a stopped stage waits to be resumed

A **cross-validation directory** (``rerank cv --output_dir DIR``)::

    DIR/fold<k>/                  a run directory per test fold
    DIR/test.run                  the folds' test runs, concatenated;  first_stage.run, test.interpolated.run,
                                  test.fused.run, test.teacher.run, test.teacher_bi_encoder.run, and
                                  test.deployed.run (each fold's deployed ranker)
    DIR/cv_metrics.json           {"folds": [...], "all_queries": {system: {...}}, "over_folds": {...},
                                   "per_fold": {system: [{...} per fold]}, "deployed": {"per_fold": [...],
                                   "tests": {...}}}
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .atomic import atomic_write
from .errors import UserError
from .preemption import Preempted

FUSIONS = ("interpolated", "fused")
"""The systems that mix the re-ranker's scores with others' (:mod:`rerank.evaluation.fusion`), with their weights."""
TEACHERS = ("teacher", "teacher_bi_encoder")
"""The zero-shot teacher a fit learns from, and its bi-encoder alone when the teacher mixes it with the first stage."""
SYSTEMS = ("reranker", "first_stage", *TEACHERS, *FUSIONS)
"""The systems a fit reports: the re-ranker, the first-stage run it re-ranks, the teachers, and the fusions."""
DEPLOYMENT = "deployment"
"""The key of ``metrics.json`` that holds the deployed ranker (:meth:`rerank.ranker.deployment.Deployment.as_dict`)."""

CALIBRATION = "calibration"
"""The key of ``metrics.json`` that holds the deployed ranker's calibration figures
(:func:`rerank.evaluation.calibration.calibration_report`)."""

Metrics = dict[str, dict[str, float]]
"""``{system: {measure: value}}``; the fusions also hold their weights (``w``, ``w_<run>``)."""


def measures_of(values: dict[str, float]) -> dict[str, float]:
    """A system's measures, without the fusion weights (``w``, ``w_reranker``, ...)."""
    return {name: value for name, value in values.items() if name != "w" and not name.startswith("w_")}


def write_json(data: Any, path: Path) -> None:
    """``data`` as indented JSON, written atomically."""
    with atomic_write(path) as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")


def read_json(path: Path) -> Any:
    """The JSON document at ``path``, with the file named in any error."""
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None


@dataclass(frozen=True)
class RunDirectory:
    """The files of one ``rerank fit`` run (see the module docstring)."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def first_stage_run(self) -> Path:
        return self.root / "first_stage.trec"

    @property
    def teacher_run(self) -> Path:
        """``rerank teacher``'s scores of the first-stage candidates."""
        return self.root / "teacher.trec"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def best_checkpoint(self) -> Path:
        return self.checkpoints / "best.ckpt"

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / "last.ckpt"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    def run(self, name: str) -> Path:
        """``runs/<name>.run``: ``validation``, ``validation.epoch<N>``, ``test``, ``test.interpolated``,
        ``test.fused`` or ``test.teacher``."""
        return self.runs / f"{name}.run"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def calibration_diagram(self) -> Path:
        return self.root / "calibration.png"

    @property
    def preempted(self) -> Path:
        """What a fit stopped by a signal left: its config's digest, the signal, the phase and the time."""
        return self.root / "preempted.json"

    def claimed(self, command: str) -> contextlib.AbstractContextManager[None]:
        """Hold the directory while ``command`` writes it (see :func:`claimed`); a command that fails before
        a checkpoint or a run exists leaves no directory it created."""
        return claimed(self.root, command, keep=lambda: self.checkpoints.exists() or self.runs.exists())

    def write_metrics(self, metrics: Metrics, deployment: dict[str, Any] | None = None,
                      calibration: dict[str, Any] | None = None) -> None:
        """``metrics.json``, with the deployed ranker and its calibration's figures."""
        document: dict[str, Any] = dict(metrics)
        if deployment is not None:
            document[DEPLOYMENT] = deployment
        if calibration is not None:
            document[CALIBRATION] = calibration
        write_json(document, self.metrics)

    def read_metrics(self) -> Metrics:
        """``metrics.json`` as ``{system: {measure: value}}`` with the current system names."""
        document = read_json(self.metrics)
        document.pop(DEPLOYMENT, None)
        document.pop(CALIBRATION, None)
        return document

    def read_calibration(self) -> dict[str, Any] | None:
        """The deployed ranker's calibration figures that ``metrics.json`` holds (None: none)."""
        return read_json(self.metrics).get(CALIBRATION)

    def read_deployment(self) -> dict[str, Any]:
        """The deployed ranker that a fit's ``metrics.json`` names."""
        return read_json(self.metrics)[DEPLOYMENT]


LOCK = ".rerank.lock"


@contextlib.contextmanager
def claimed(root: Path, command: str, keep: Callable[[], bool] = lambda: True) -> Iterator[None]:
    """Hold ``root`` for this process while ``command`` writes it: a second command writing the same directory at
    the same time refuses to start, instead of interleaving files with the first.

    The claim is a file, ``root/.rerank.lock``, created exclusively and removed on exit; one left by a killed
    process of this host is taken over (so ``--ckpt_path last`` after a crash works). When the command created
    ``root``, it is removed again if the command wrote nothing, or failed before writing anything worth keeping
    (``keep()`` false): a mistake found while preparing leaves no trace. A command stopped by a signal
    (:class:`~rerank.core.preemption.Preempted`) keeps it whole: its re-run continues from there.

    Raises:
        UserError: another live process holds ``root``, with its host, process id, command and start time.
    """
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    lock = root / LOCK
    record = {"host": socket.gethostname(), "pid": os.getpid(), "command": command,
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    for _ in range(2):
        try:
            descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            holder = _holder(lock)
            if (holder is not None and not _gone(holder)) or (holder is None and _recent(lock)):
                holder = holder or {}
                raise UserError(
                    f"{root} is being written by {holder.get('command', 'another rerank command')} (process "
                    f"{holder.get('pid')} on {holder.get('host')}, since {holder.get('started')}): give another "
                    f"--output_dir, or wait until it ends (if it is gone, remove {lock})") from None
            lock.unlink(missing_ok=True)  # a killed process's claim
            continue
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        break
    try:
        yield
    except Preempted:  # stopped by a signal: what it wrote is what a re-run continues from
        lock.unlink(missing_ok=True)
        raise
    except BaseException:
        lock.unlink(missing_ok=True)
        if created and not keep():
            shutil.rmtree(root, ignore_errors=True)
        raise
    lock.unlink(missing_ok=True)
    if created and not any(root.iterdir()):
        root.rmdir()


def _recent(lock: Path, seconds: float = 30.0) -> bool:
    """Whether ``lock`` was made a moment ago (its holder may still be writing it)."""
    try:
        return time.time() - lock.stat().st_mtime < seconds
    except FileNotFoundError:
        return False


def _holder(lock: Path) -> dict[str, Any] | None:
    try:
        return json.loads(lock.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # unreadable: half-written by a process killed while claiming


def _gone(holder: dict[str, Any]) -> bool:
    """Whether the process that made a claim on this host has ended."""
    if holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, TypeError, ValueError):
        return False
    return False


@dataclass(frozen=True)
class CrossValidationDirectory:
    """The files of one ``rerank cv`` run (see the module docstring)."""

    root: Path

    def fold(self, k: int) -> RunDirectory:
        return RunDirectory(self.root / f"fold{k}")

    def run(self, system: str) -> Path:
        """The concatenated test run of ``system`` (see :data:`SYSTEMS`, and ``deployed``)."""
        return self.root / ("test.run" if system == "reranker" else "first_stage.run" if system == "first_stage"
                            else f"test.{system}.run")

    @property
    def metrics(self) -> Path:
        return self.root / "cv_metrics.json"

    def claimed(self, command: str) -> contextlib.AbstractContextManager[None]:
        return claimed(self.root, command, keep=lambda: any(self.root.glob("fold*")))

    def is_cross_validation(self) -> bool:
        return self.run("reranker").is_file()

    def write_metrics(self, report: dict[str, Any]) -> None:
        write_json(report, self.metrics)

    def read_metrics(self) -> dict[str, Any]:
        return read_json(self.metrics)
