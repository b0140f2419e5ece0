"""A fit from its built parts (:func:`fit`): the judgment-free stage, the training folds, the test of the weights
chosen on validation, the export and ``metrics.json``, in the run directory
(:class:`~rerank.core.run_directory.RunDirectory`).

The command line (``rerank fit``, :mod:`rerank.cli.fit`) and the Python API (:func:`rerank.train`) build the parts
from one config and call it, and get a :class:`FitResult`. Each phase is named for :mod:`rerank.core.preemption`: a fit
stopped by SIGTERM or SIGINT keeps its run directory with ``preempted.json`` (its config's digest, the signal, the
phase), and the same fit run again resumes it (from ``last.ckpt``, or the stage from its own checkpoint); under
another config it is refused.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from ..callbacks.evaluator import evaluator_of
from ..config.pretrain import PretrainConfig
from ..core import preemption
from ..core.atomic import atomic_write
from ..core.errors import UserError
from ..core.logs import keep_log
from ..core.preemption import Preempted
from ..core.run_directory import Metrics, RunDirectory, read_json, write_json
from ..data.trec import Run
from ..evaluation.calibration import Calibration, calibration_report, fit_calibration, reliability_diagram
from ..inference.export import card_metrics, export
from ..inference.fast_scoring import measure
from .datamodule import RerankDataModule
from .lightning_module import RerankModule
from .pretraining import plan_stage, pretrain

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitResult:
    """What a fit gave: its run directory, each ranker's test figures (``metrics.json``), the deployed ranker, and
    which weights it tested.

    Attributes:
        folder: the run directory.
        metrics: ``{system: {measure: value}}``, as ``metrics.json`` holds them.
        deployment: the deployed ranker (:meth:`rerank.ranker.deployment.Deployment.as_dict`).
        tested: which validated weights were tested, and why, in words.
        measure: the measure every choice was made on (``evaluation.selection.measure``).
        test_queries: how many judged test queries the figures are over.
        changes: what options changed in the recipe, in words.
        calibration: the deployed ranker's calibration figures on the test fold (``metrics.json``'s
            ``calibration``: :func:`rerank.evaluation.calibration.calibration_report`, or why it was refused).
    """

    folder: Path
    metrics: Metrics
    deployment: dict[str, Any]
    tested: str = ""
    measure: str = ""
    test_queries: int = 0
    changes: list[str] = field(default_factory=list)
    calibration: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> Path:
        """The exported folder (``Reranker.from_pretrained`` and ``rerank serve`` take it)."""
        return RunDirectory(self.folder).model


@dataclass
class FitParts:
    """What :func:`fit` runs, built from a config.

    Attributes:
        model: the module to train.
        data: its data module.
        trainer: the Trainer (with the ``evaluation:`` and checkpoint callbacks).
        config: the run's ``config.yaml``, every value resolved, given the stage's steps (None: no stage).
        digest: the config's digest, without what a re-run may change (``ckpt_path``).
        best_checkpoint: the best checkpoint's path, once training is done.
        pretrain: the judgment-free stage (None: none).
        trainer_options: the Trainer's options as the config gives them (the stage takes some of them).
        seed: the run's seed.
        ckpt_path: a checkpoint to resume from (``last``: the run directory's).
        card: the model card's facts beside the model's and the metrics (``evaluation``, ``data``, ``pretrain``,
            ``command``).
        changes: what options change in the recipe, in words (said in the summary).
    """

    model: RerankModule
    data: RerankDataModule
    trainer: pl.Trainer
    config: Callable[[int | None], str]
    digest: str
    best_checkpoint: Callable[[], str]
    pretrain: PretrainConfig | None = None
    trainer_options: dict[str, Any] = field(default_factory=dict)
    seed: int = 42
    ckpt_path: str | None = None
    card: dict[str, Any] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)

    @property
    def directory(self) -> RunDirectory:
        return self.data.directory


def fit(parts: FitParts, command: str = "rerank fit") -> FitResult:
    """Train, test the weights chosen on validation, export them and write ``metrics.json`` in the data module's
    run directory, claimed for ``command`` (:meth:`RunDirectory.claimed`).

    Raises:
        Preempted: SIGTERM or SIGINT came (the run directory keeps what a re-run continues from).
        UserError: the run directory holds a fit stopped under another config.
    """
    directory, trainer = parts.directory, parts.trainer
    ckpt_path = parts.ckpt_path or resumed(directory, parts.digest)
    with directory.claimed(command) if trainer.is_global_zero else contextlib.nullcontext():
        try:
            result = _phases(parts, ckpt_path)
        except Preempted as stopped:
            if trainer.is_global_zero:
                write_json({"config": parts.digest, "signal": stopped.signum, "phase": stopped.phase,
                            "stopped": time.strftime("%Y-%m-%d %H:%M:%S")}, directory.preempted)
            raise
        if trainer.is_global_zero:
            directory.preempted.unlink(missing_ok=True)
    return result


def _phases(parts: FitParts, ckpt_path: str | None) -> FitResult:
    """The fit's phases, each named for :mod:`rerank.core.preemption`: the stage, training, testing, the export."""
    trainer, model, data, directory = parts.trainer, parts.model, parts.data, parts.directory
    if trainer.is_global_zero:
        keep_log(directory.root)
    stage = None
    if parts.pretrain is not None:
        with preemption.phase("the judgment-free stage"):
            stage = plan_stage(parts.pretrain, model, data, parts.trainer_options, parts.seed)
    if trainer.is_global_zero:  # every value resolved, the stage's steps too: a re-run trains the same
        with atomic_write(directory.config) as handle:
            handle.write(parts.config(None if stage is None else stage.config.max_steps))
    if stage is not None:
        with preemption.phase("the judgment-free stage"):
            pretrain(stage, model, data, parts.seed, trainer.loggers)
    with preemption.phase("the training folds"):
        # checkpoints hold tensors and plain values only: loaded without unpickling arbitrary objects
        trainer.fit(model, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
        if not model.validation_run:  # resumed from a checkpoint of the last step, written before its validation
            trainer.validate(model, datamodule=data, verbose=False)
    evaluation = evaluator_of(trainer)
    tested = evaluation.tested(trainer, parts.best_checkpoint())  # None: the last weights
    with preemption.phase("testing"):
        trainer.test(model, datamodule=data, ckpt_path=tested, weights_only=True, verbose=False)
    calibrated: dict[str, Any] = {}
    if trainer.is_global_zero:
        card = {"model": dict(model.hparams), **parts.card, "metrics": card_metrics(evaluation.report)}
        with preemption.phase("the export"):
            on_cpu = next(model.parameters()).device.type == "cpu"  # a GPU fit's CPU paths would take long to score
            gates = functools.partial(measure, run=model.validation_run, queries=data.collection.queries,
                                      texts=data.collection.documents.text, qrels=data.judgments("validation"))
            calibration, calibrated = calibrate(model.deployed_validation_run, evaluation.deployed_test_run, data)
            export(model.model, directory.model, card | {"calibration": calibrated}, deployment=model.deployment,
                   gates=gates if on_cpu else None, calibration=calibration)
        # last: the fit is done
        directory.write_metrics(evaluation.report, model.deployment.as_dict(), calibration=calibrated)
    return FitResult(directory.root, evaluation.report, model.deployment.as_dict(), evaluation.choice,
                     evaluation.selection.measure, len(data.judgments("test")), parts.changes, calibrated)


def calibrate(validation: Run, test: Run, data: RerankDataModule) -> tuple[Calibration | None, dict[str, Any]]:
    """The deployed ranker's calibration fitted on its ``validation`` run and its figures on its ``test`` run
    (:mod:`rerank.evaluation.calibration`), with the reliability diagram in the run directory; a map that cannot be
    fitted is refused with a warning, and the export keeps the raw scores (its figures say why)."""
    try:
        calibration = fit_calibration(validation, data.judgments("validation"))
    except UserError as refused:
        logger.warning("%s", refused)
        return None, {"refused": str(refused)}
    report = calibration_report(calibration, test, data.judgments("test"))
    reliability_diagram(calibration, test, data.judgments("test"), data.directory.calibration_diagram,
                        f"the deployed ranker on {report['pairs']} test pairs")
    logger.info("calibration: %s; test ECE %.4f (the raw sigmoid's %.4f)", calibration.describe(),
                report["calibrated"]["ece"], report["raw_sigmoid"]["ece"])
    return calibration, report


def resumed(directory: RunDirectory, digest: str) -> str | None:
    """``last`` when ``directory`` holds a fit that a signal stopped, under the config of ``digest``, after its
    training began (its stage, if it had one, resumes from its own checkpoint); else None.

    Raises:
        UserError: the stopped fit had another config.
    """
    if not directory.preempted.is_file():
        return None
    record = read_json(directory.preempted)
    if record.get("config") != digest:
        raise UserError(f"{directory.root} holds a fit stopped by a signal ({record.get('phase')}, "
                        f"{record.get('stopped')}) under another config: resume it with its own command, or give "
                        "another --output_dir")
    if not directory.last_checkpoint.is_file():
        return None
    logger.info("resuming the fit stopped during %s (%s) from %s", record.get("phase"), record.get("stopped"),
                directory.last_checkpoint)
    return "last"
