"""The judgment-free stage sized to the collection and a time budget: ``pretrain.max_steps: auto``.

The stage's length is the lever that has moved the student towards its teacher at every doubling measured
(docs/experiments/longer-stage-travel.md), and what it costs depends on the machine and on the rows. So ``auto`` plans
by the size of the stage's data and lets ``pretrain.budget_minutes`` of this machine's time cap it:

    steps = min(passes * lists / batch size, budget / seconds per step), rounded down to a multiple of 50 (>= 50)

where ``lists`` is how many training lists the stage's sources have (its pseudo-queries, say), ``passes``
(``pretrain.passes``) bounds how often each is seen, and the seconds per step are this machine's, measured on the
stage's own batches (:func:`calibrate`: ten timed steps on a copy of the model's weights, the random generators left
as they were). A step is taken at the speed of the fastest of them, so that load that comes and goes while they run
(another program starting) does not slow the plan down; steps that vary more than load-free ones do
(:attr:`Calibration.loaded`) mark the measure as taken under load.

A load-free measure is cached under ``$RERANK_CACHE/calibration`` by what it depends on (the stage's shape and this
machine's name, cores and threads), so that later fits plan the same steps; one taken under load is used for this fit
only, and said. The stage checks the measure as it runs (:func:`recheck`): where its own steps were much faster than
the calibration said, the calibration was taken under a load it could not see, and it is dropped from the cache. The
plan is logged in one line with what was measured and what the whole run will cost (:func:`plan_line`); the run
directory keeps it (``pretrain/plan.json``), so that a re-run of a stopped fit trains the same stage.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import socket
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.seed import isolate_rng

from ..core.atomic import atomic_write
from ..core.cache import cache_path, discard, intact, seal_of, sealing
from ..core.run_directory import read_json, write_json
from .datamodule import RerankDataModule
from .lightning_module import RerankModule

CALIBRATION_STEPS = 11
"""Steps of a calibration, the first not timed (it builds the optimizer and warms the kernels up)."""
STEP_MULTIPLE = 50
LOAD_SPREAD = 1.25
"""The median step over the fastest beyond which a calibration is taken as measured under load: load-free steps of
one shape vary by a few percent."""
RECHECK = 0.8
"""A stage whose steps took less than this share of the calibrated time shows the calibration was taken under load."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """This machine's time per optimizer step of a stage: each timed step's wall-clock seconds.

    Attributes:
        seconds: the timed steps, in order.
        cached: read from the cache (measured load-free by an earlier fit) rather than measured now.
    """

    seconds: tuple[float, ...]
    cached: bool = False

    @property
    def fastest(self) -> float:
        """The time a step is planned at: the fastest one's."""
        return min(self.seconds)

    @property
    def loaded(self) -> bool:
        """Whether the steps varied as much as other work on the machine makes them vary."""
        return statistics.median(self.seconds) > LOAD_SPREAD * self.fastest

    def describe(self) -> str:
        """What was measured, in words."""
        where = "from the cache" if self.cached else "measured now"
        state = ("they varied as under load: this measure is used for this fit only, not cached" if self.loaded
                 else "load-free")
        return (f"{self.fastest:.2f} s a step, the fastest of {len(self.seconds)} timed steps {where} (median "
                f"{statistics.median(self.seconds):.2f} s, slowest {max(self.seconds):.2f} s; {state})")


@dataclass(frozen=True)
class StagePlan:
    """What ``pretrain.max_steps: auto`` chose, and why.

    Attributes:
        steps: the stage's optimizer steps.
        seconds_per_step: measured on this machine.
        lists: the stage's training lists.
        budget_minutes: the time budget.
        passes: the bound on passes over the lists.
        batch_size: training lists an optimizer step takes (a batch's, times the batches it accumulates).
        measured: what the seconds per step are, in words (:meth:`Calibration.describe`).
    """

    steps: int
    seconds_per_step: float
    lists: int
    budget_minutes: float
    passes: float
    batch_size: int
    measured: str = ""

    @property
    def minutes(self) -> float:
        return self.steps * self.seconds_per_step / 60

    @property
    def bound(self) -> str:
        """Which bound chose the steps."""
        by_size = self.passes * self.lists / self.batch_size
        return "the passes" if by_size * self.seconds_per_step < self.budget_minutes * 60 else "the time budget"


def planned_steps(budget_minutes: float, passes: float, seconds: float, lists: int, batch_size: int) -> int:
    """``min(passes * lists / batch_size, budget / seconds)`` steps, rounded down to a multiple of 50 (at least 50)."""
    by_time = budget_minutes * 60 / seconds
    by_size = passes * lists / batch_size
    return max(int(min(by_time, by_size)) // STEP_MULTIPLE * STEP_MULTIPLE, STEP_MULTIPLE)


def calibration_path(key: Any) -> Path:
    """Where the load-free calibration of a stage of shape ``key`` on this machine is cached."""
    machine = (socket.gethostname(), platform.machine(), os.cpu_count(), torch.get_num_threads())
    return cache_path("calibration", key, machine, CALIBRATION_STEPS, suffix=".json")


def calibrate(module: RerankModule, stage: RerankDataModule, options: dict[str, Any], key: Any) -> Calibration:
    """This machine's seconds per optimizer step of the stage: from the cache, or measured on the batches of
    ``CALIBRATION_STEPS`` steps of ``stage`` (the first not counted; a step is ``accumulate_grad_batches`` of them),
    after which ``module``'s weights and the random generators are as they were. A measure taken under load
    (:attr:`Calibration.loaded`) is not cached."""
    path = calibration_path(key)
    if intact(path, "seconds per step of this machine"):
        try:
            return Calibration(tuple(float(value) for value in read_json(path)["seconds"]), cached=True)
        except (KeyError, TypeError, ValueError) as error:
            discard(path, "seconds per step of this machine", error)
    timer = StepTimer()
    weights = {name: tensor.detach().clone() for name, tensor in module.model.state_dict().items()}
    with isolate_rng():
        trainer = pl.Trainer(**{**options, "enable_progress_bar": False}, max_steps=CALIBRATION_STEPS,
                             limit_val_batches=0, num_sanity_val_steps=0, enable_checkpointing=False, logger=False,
                             enable_model_summary=False, callbacks=[timer])
        trainer.fit(module, datamodule=stage)
    module.model.load_state_dict(weights)
    accumulated = options.get("accumulate_grad_batches") or 1  # an optimizer step's batches
    calibration = Calibration(tuple(accumulated * seconds for seconds in timer.steps()))
    if not calibration.loaded:
        with atomic_write(path, finish=sealing(path)) as handle:
            json.dump({"seconds": list(calibration.seconds), "steps": CALIBRATION_STEPS - 1}, handle)
    return calibration


def recheck(plan: StagePlan, timer: StepTimer, key: Any) -> None:
    """After the stage: where its own steps (the fastest tenth of them) were much faster than the calibration said,
    say so and drop the calibration from the cache, so that the next fit measures again."""
    steps = sorted(timer.steps())
    if len(steps) < CALIBRATION_STEPS:
        return
    typical = statistics.median(steps[: max(len(steps) // 10, 1)])
    if typical < RECHECK * plan.seconds_per_step:
        path = calibration_path(key)
        cut = ", so the time budget cut the stage short" if plan.bound == "the time budget" else ""
        logger.warning("the stage's steps took %.2f s, its calibration %.2f s: the calibration was measured under "
                       "load%s; it is not kept (%s), and the next fit measures again", typical, plan.seconds_per_step,
                       cut, path)
        path.unlink(missing_ok=True)
        seal_of(path).unlink(missing_ok=True)


def remembered(folder: Path, key: str, make: Any) -> StagePlan:
    """The run directory's plan of the stage of digest ``key`` (``folder/plan.json``), made by ``make()`` and kept
    the first time: a re-run of the same fit (one that a signal stopped, say) trains the same stage."""
    path = folder / "plan.json"
    if path.is_file():
        saved = read_json(path)
        if saved.get("key") == key:
            return StagePlan(**saved["plan"])
    plan = make()
    folder.mkdir(parents=True, exist_ok=True)
    write_json({"key": key, "plan": asdict(plan)}, path)
    return plan


class StepTimer(pl.Callback):
    """The wall time of each training batch after the first."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_end(self, *args: Any) -> None:
        self.times.append(time.perf_counter())

    def steps(self) -> list[float]:
        """Each batch's seconds, the first batch's left out."""
        return [later - earlier for earlier, later in zip(self.times, self.times[1:])]


def plan_line(plan: StagePlan, tokenization: Any, training_steps: int, queries: str | None = None) -> str:
    """The one line that says what ``auto`` chose, on what it measured, and what the run will cost; ``queries``:
    what the stage's queries are (its pseudo-queries'
    :meth:`~rerank.data.pseudo_queries.PseudoQueryConfig.describe`)."""
    stage = (f"a {plan.steps:,}-step judgment-free stage{f' on {queries}' if queries else ''} "
             f"({plan.seconds_per_step:.2f} s a step here: "
             f"{plan.minutes:.0f} min; pretrain.budget_minutes {plan.budget_minutes:g}, at most "
             f"{plan.passes:g} passes over its {plan.lists:,} lists: {plan.bound} chose)")
    folds = training_steps * plan.seconds_per_step / 60
    measured = f"; the step time: {plan.measured}" if plan.measured else ""
    return (f"recipe: rows of {tokenization.max_length} tokens (queries up to {tokenization.max_query_length}), "
            f"{stage}, then about {training_steps:,} steps on the training folds (~{math.ceil(folds)} min): about "
            f"{math.ceil(plan.minutes + folds)} min of training in all{measured}")
