"""Progress as log lines when the output is a file (rerank/callbacks/progress.py)."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.demos.boring_classes import BoringModel

from rerank.callbacks.progress import LogProgress, StageProgressBar, progress_callbacks, stage_callbacks


class Losses(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def fit(tmp_path: Path, *callbacks: pl.Callback) -> None:
    trainer = pl.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path), callbacks=list(callbacks))
    trainer.fit(BoringModel())


def test_each_line_gives_the_step_its_loss_and_the_time_left(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    losses = Losses()
    with caplog.at_level(logging.INFO, logger="rerank.callbacks.progress"):
        fit(tmp_path, losses, LogProgress(interval=0))
    lines = [record.getMessage() for record in caplog.records if record.name == "rerank.callbacks.progress"]
    pattern = r"step (\d)/4 \((\d+) %\), loss (\S+), \S+ s/step, about (\d+) min left"
    parsed = [re.fullmatch(pattern, line) for line in lines]
    assert all(parsed), lines
    assert [(int(m[1]), int(m[2])) for m in parsed] == [(1, 25), (2, 50), (3, 75), (4, 100)]
    assert [float(m[3]) for m in parsed] == pytest.approx(losses.losses, abs=1e-4)
    assert parsed[-1][4] == "0"


def test_the_pace_and_time_left_are_those_of_the_steps_since_the_last_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr("rerank.callbacks.progress.time.monotonic", lambda: clock[0])

    class Steps(pl.Callback):  # before LogProgress: steps 1-2 take 10 minutes each, steps 3-4 one minute
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            clock[0] += (600.0, 600.0, 60.0, 60.0)[batch_idx]

    with caplog.at_level(logging.INFO, logger="rerank.callbacks.progress"):
        fit(tmp_path, Steps(), LogProgress(interval=60))
    lines = [record.getMessage() for record in caplog.records if record.name == "rerank.callbacks.progress"]
    paces = [re.search(r"(\S+) s/step, about (\d+) min left", line).groups() for line in lines]
    assert paces == [("600.00", "30"), ("600.00", "20"), ("60.00", "1"), ("60.00", "0")]


def test_lines_come_at_most_once_an_interval_and_only_without_a_terminal(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    with caplog.at_level(logging.INFO, logger="rerank.callbacks.progress"):
        fit(tmp_path, LogProgress(interval=3600))
    assert not [record for record in caplog.records if record.name == "rerank.callbacks.progress"]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert progress_callbacks() == []
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert [type(callback) for callback in progress_callbacks()] == [LogProgress]


class Descriptions(pl.Callback):
    """The training description each progress bar of the Trainer shows in the first epoch."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.shown = self.shown or [bar._get_train_description(trainer.current_epoch) for bar in trainer.callbacks
                                    if isinstance(bar, RichProgressBar)]


@pytest.mark.parametrize(("bar", "expected"), [(RichProgressBar(), "Epoch 0/-2"),  # Lightning's, step-bounded
                                               (StageProgressBar("pre-training, round 1 of 1"),
                                                "pre-training, round 1 of 1")])
def test_a_step_bounded_stage_is_named_not_numbered(tmp_path: Path, bar: RichProgressBar, expected: str) -> None:
    descriptions = Descriptions()
    trainer = pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path), callbacks=[bar, descriptions])
    trainer.fit(BoringModel())
    assert descriptions.shown == [expected]


def test_the_stage_shows_its_bar_unless_bars_are_off() -> None:
    shown = [type(c) for c in stage_callbacks("pre-training, round 1 of 2", None)]
    assert StageProgressBar in shown
    assert StageProgressBar not in [type(c) for c in stage_callbacks("pre-training, round 1 of 2", False)]
