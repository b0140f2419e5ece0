"""The judgment-free stage sized to the collection and a time budget: ``pretrain.max_steps: auto``.

The stage's length is the lever that has moved the student towards its teacher at every doubling measured
(docs/experiments/ablations.md), and what it costs depends on the machine and on the rows. So ``auto`` takes
``pretrain.budget_minutes`` of this machine's time (measured, not assumed) and the size of the stage's data:

    steps = min(budget / seconds per step, passes * lists / batch size), rounded down to a multiple of 50 (>= 50)

where the seconds per step are measured on the stage's own batches (:func:`seconds_per_step`: a few steps of the
stage on a copy of the model's weights, the random generators left as they were), ``lists`` is how many training
lists the stage's sources have (its pseudo-queries, say) and ``passes`` (``pretrain.passes``) bounds how often each
is seen. The measure is cached under ``$RERANK_CACHE/calibration`` by what it depends on (the stage's shape and this
machine's name, cores and threads), so every fold of ``rerank cv`` plans the same steps and shares the stage. The
plan is logged in one line with what the whole run will cost (:func:`plan_line`).
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import time
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.seed import isolate_rng

from ..atomic import atomic_write
from ..cache import cache_path, intact, sealing
from ..run_directory import read_json
from .datamodule import RerankDataModule
from .lightning_module import RerankModule

CALIBRATION_STEPS = 6
"""Steps of a calibration, the first not timed (it builds the optimizer and warms the kernels up)."""
STEP_MULTIPLE = 50


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
    """

    steps: int
    seconds_per_step: float
    lists: int
    budget_minutes: float
    passes: float
    batch_size: int

    @property
    def minutes(self) -> float:
        return self.steps * self.seconds_per_step / 60

    @property
    def bound(self) -> str:
        """Which bound chose the steps."""
        by_size = self.passes * self.lists / self.batch_size
        return "the passes" if by_size * self.seconds_per_step < self.budget_minutes * 60 else "the time budget"


def planned_steps(budget_minutes: float, passes: float, seconds: float, lists: int, batch_size: int) -> int:
    """``min(budget / seconds, passes * lists / batch_size)`` steps, rounded down to a multiple of 50 (at least 50)."""
    by_time = budget_minutes * 60 / seconds
    by_size = passes * lists / batch_size
    return max(int(min(by_time, by_size)) // STEP_MULTIPLE * STEP_MULTIPLE, STEP_MULTIPLE)


def seconds_per_step(module: RerankModule, stage: RerankDataModule, options: dict[str, Any], key: Any) -> float:
    """This machine's seconds per optimizer step of the stage: from the cache, or measured on the batches of
    ``CALIBRATION_STEPS`` steps of ``stage`` (the first not counted; a step is ``accumulate_grad_batches`` of them),
    after which ``module``'s weights and the random generators are as they were."""
    machine = (socket.gethostname(), platform.machine(), os.cpu_count(), torch.get_num_threads())
    path = cache_path("calibration", key, machine, suffix=".json")
    if intact(path, "seconds per step of this machine"):
        return float(read_json(path)["seconds_per_step"])
    timer = _StepTimer()
    weights = {name: tensor.detach().clone() for name, tensor in module.model.state_dict().items()}
    with isolate_rng():
        trainer = pl.Trainer(**{**options, "enable_progress_bar": False}, max_steps=CALIBRATION_STEPS,
                             limit_val_batches=0, num_sanity_val_steps=0, enable_checkpointing=False, logger=False,
                             enable_model_summary=False, callbacks=[timer])
        trainer.fit(module, datamodule=stage)
    module.model.load_state_dict(weights)
    seconds = timer.seconds() * (options.get("accumulate_grad_batches") or 1)  # an optimizer step's batches
    with atomic_write(path, finish=sealing(path)) as handle:
        json.dump({"seconds_per_step": seconds, "machine": list(machine), "steps": CALIBRATION_STEPS - 1}, handle)
    return seconds


class _StepTimer(pl.Callback):
    """The wall time of each training batch after the first."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_end(self, *args: Any) -> None:
        self.times.append(time.perf_counter())

    def seconds(self) -> float:
        return (self.times[-1] - self.times[0]) / max(len(self.times) - 1, 1)


def plan_line(plan: StagePlan, tokenization: Any, training_steps: int, queries: str | None = None) -> str:
    """The one line that says what ``auto`` chose and what the run will cost; ``queries``: what the stage's
    queries are (its pseudo-queries' :meth:`~rerank.data.pseudo_queries.PseudoQueryConfig.describe`)."""
    stage = (f"a {plan.steps:,}-step judgment-free stage{f' on {queries}' if queries else ''} "
             f"({plan.seconds_per_step:.2f} s a step here: "
             f"{plan.minutes:.0f} min; pretrain.budget_minutes {plan.budget_minutes:g}, at most "
             f"{plan.passes:g} passes over its {plan.lists:,} lists: {plan.bound} chose)")
    folds = training_steps * plan.seconds_per_step / 60
    return (f"recipe: rows of {tokenization.max_length} tokens (queries up to {tokenization.max_query_length}), "
            f"{stage}, then about {training_steps:,} steps on the training folds (~{math.ceil(folds)} min): about "
            f"{math.ceil(plan.minutes + folds)} min of training in all")
