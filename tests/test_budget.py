"""The judgment-free stage sized to a time budget and the collection: ``pretrain.max_steps: auto``
(rerank.training.budget)."""

from __future__ import annotations

import json
import logging
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers import MINILM_VOCAB, cranfield_workdir, tiny_bi_encoder
from test_sources import write_config

from rerank.cli import fit
from rerank.core.cache import SEAL
from rerank.training import budget
from rerank.training.budget import Calibration, StagePlan, planned_steps

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")


def test_the_steps_are_what_the_budget_buys_at_most_the_passes_over_the_lists() -> None:
    # 10 minutes at 0.5 s a step buy 1,200 steps; 8 passes over 1,000 lists of 2 a step are 4,000
    assert planned_steps(10, 8, 0.5, 1000, 2) == 1200
    assert planned_steps(10, 1, 0.5, 1000, 2) == 500  # one pass: 500 steps
    assert planned_steps(10, 8, 0.7, 1000, 2) == 850  # 857 rounded down to a multiple of 50
    assert planned_steps(0.01, 8, 0.5, 1000, 2) == 50  # never fewer than 50
    plan = StagePlan(steps=1200, seconds_per_step=0.5, lists=1000, budget_minutes=10, passes=8, batch_size=2)
    assert plan.bound == "the time budget" and plan.minutes == 10
    assert StagePlan(500, 0.5, 1000, 10, 1, 2).bound == "the passes"


def test_a_calibration_is_planned_at_its_fastest_step_and_marked_loaded_where_its_steps_vary() -> None:
    steady = Calibration((1.02, 1.0, 1.05, 1.01))
    assert steady.fastest == 1.0 and not steady.loaded
    assert Calibration((1.0, 3.0, 3.1, 1.1, 2.9)).loaded  # the median is twice the fastest
    assert "used for this fit only, not cached" in Calibration((1.0, 3.0, 3.1)).describe()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cranfield_workdir(tmp_path_factory.mktemp("budget"))


def stage_config(workdir: Path, tmp_path: Path, **stage: object) -> Path:
    """A fit with an ``auto`` stage of 20 pseudo-queries taught by a tiny bi-encoder (2 lists a step)."""
    section = {"train": [{"queries": "pseudo", "pseudo": {"count": 20},
                          "first_stage": {"backend": "bm25s", "index_dir": str(tmp_path / "idx")},
                          "targets": "teacher", "teacher": {"bi_encoder": str(tiny_bi_encoder(tmp_path))}}],
               "max_steps": "auto", "budget_minutes": 60, "passes": 5, **stage}
    return write_config(workdir, tmp_path / "config.yaml", pretrain=section)


def calibration_entries(cache: Path) -> list[Path]:
    return [path for path in (cache / "calibration").glob("*.json") if SEAL not in path.name]


def test_auto_steps_measure_this_machine_once_and_every_fold_trains_the_same_stage(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    config = stage_config(workdir, tmp_path)
    measured = []
    calibrate = budget.calibrate

    def measuring(module, stage_data, options, key):  # the real measure, counted
        before = ({name: value.clone() for name, value in module.model.state_dict().items()},
                  torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
        calibration = calibrate(module, stage_data, options, key)
        after = module.model.state_dict()
        assert all(torch.equal(after[name], value) for name, value in before[0].items())  # weights as they were
        assert torch.equal(torch.get_rng_state(), before[1]) and random.getstate() == before[2]
        assert np.array_equal(np.random.get_state()[1], before[3])  # and the random generators
        measured.append(calibration)
        return calibration

    monkeypatch.setattr("rerank.training.pretraining.calibrate", measuring)
    monkeypatch.setattr(budget, "LOAD_SPREAD", 100.0)  # a tiny model's steps vary as a real one's do under load,
    monkeypatch.setattr(budget, "RECHECK", 0.0)  # and its calibration and its stage differ as much
    with caplog.at_level(logging.INFO):
        first = fit.main(["--config", str(config), "--output_dir", str(tmp_path / "fold1")])
    # 20 pseudo-queries, 2 lists a step, at most 5 passes: 50 steps (the budget of an hour buys more)
    line = next(record.getMessage() for record in caplog.records if record.getMessage().startswith("recipe: "))
    assert re.search(r"rows of 48 tokens \(queries up to 12\), a 50-step judgment-free stage on titles or first "
                     r"sentences of at most 24 words \(\d+\.\d\d s a step "
                     r"here: \d+ min; pretrain.budget_minutes 60, at most 5 passes over its 20 lists: the passes "
                     r"chose\), then about \d+ steps on the training folds", line), line
    assert re.search(r"the step time: \d+\.\d\d s a step, the fastest of 10 timed steps measured now \(median "
                     r"\d+\.\d\d s, slowest \d+\.\d\d s; load-free\)", line), line
    assert "pre-training stage, round 1 of 1: 50 steps on 1 source(s)" in caplog.text
    (entry,) = calibration_entries(tmp_path / "cache")
    assert json.loads(entry.read_text())["seconds"] == list(measured[0].seconds)
    recorded = yaml.safe_load((tmp_path / "fold1" / "config.yaml").read_text())
    assert recorded["pretrain"]["max_steps"] == 50  # the config written beside the run reruns the same stage
    caplog.clear()
    with caplog.at_level(logging.INFO):
        second = fit.main(["--config", str(config), "--output_dir", str(tmp_path / "fold1-again")])
    assert "pre-training stage, round 1 of 1: weights from the cache" in caplog.text  # the same steps, the same key
    assert second == first and len(measured) == 2 and measured[1].cached
    assert measured[1].seconds == measured[0].seconds  # the measure, from the cache
    entry.write_text("{\"seconds\": ")  # a damaged entry is measured again, not trusted
    fit.main(["--config", str(config), "--output_dir", str(tmp_path / "fold1-third")])
    assert len(json.loads(entry.read_text())["seconds"]) == 10 and not measured[2].cached


class Timed(budget.StepTimer):
    """A calibration's timer that reports the step times a test forces (the stage keeps the real timer)."""

    forced: tuple[float, ...] = ()

    def steps(self) -> list[float]:
        return list(self.forced)


def test_load_that_comes_and_goes_during_the_calibration_changes_no_plan_and_is_not_cached(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A forced slow calibration: the same stage's steps timed idle, and with half of them slowed five-fold (another
    program starting): the same plan, the time budget binding (its 1.25 minutes buy 150 steps of 0.5 s, fewer than 5
    passes' 50... so 40 passes ask for 400); the slowed measure said and not cached. Then a calibration slowed
    throughout, which the stage's own (fast) steps show up: dropped from the cache."""
    config = stage_config(workdir, tmp_path, budget_minutes=1.25, passes=40)
    monkeypatch.setattr(budget, "StepTimer", Timed)

    def plan(output: str, forced: tuple[float, ...]) -> tuple[str, Path]:
        monkeypatch.setenv("RERANK_CACHE", str(tmp_path / f"cache-{output}"))
        monkeypatch.setattr(Timed, "forced", forced)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            fit.main(["--config", str(config), "--output_dir", str(tmp_path / output)])
        line = next(record.getMessage() for record in caplog.records if record.getMessage().startswith("recipe: "))
        return line, tmp_path / f"cache-{output}"

    monkeypatch.setattr(budget, "RECHECK", 0.0)  # the forced times are not the stage's: no recheck until the last
    idle, idle_cache = plan("idle", (0.5,) * 10)
    assert "a 150-step judgment-free stage" in idle and "the time budget chose" in idle and "load-free" in idle
    assert len(calibration_entries(idle_cache)) == 1
    transient, transient_cache = plan("transient", (0.5, 2.5, 0.5, 2.5, 2.5, 0.5, 2.5, 0.5, 2.5, 0.5))
    assert "a 150-step judgment-free stage" in transient  # the same plan: the fastest steps are the idle ones
    assert "they varied as under load: this measure is used for this fit only, not cached" in transient
    assert calibration_entries(transient_cache) == []
    assert "timed under load and the time budget chose its length" in caplog.text
    monkeypatch.setattr(budget, "RECHECK", 0.8)
    slowed, slowed_cache = plan("slowed", (2.5,) * 10)  # slow throughout: looks load-free, and is cached at first
    assert "a 50-step judgment-free stage" in slowed
    assert "the calibration was measured under load, so the time budget cut the stage short" in caplog.text
    assert calibration_entries(slowed_cache) == []  # the stage's real steps were far faster: not kept
    assert json.loads((tmp_path / "slowed" / "pretrain" / "plan.json").read_text())["plan"]["steps"] == 50


def test_a_rerun_in_the_same_run_directory_trains_the_stage_it_planned(workdir: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    config = stage_config(workdir, tmp_path, budget_minutes=1.25, passes=40)
    monkeypatch.setattr(budget, "StepTimer", Timed)
    monkeypatch.setattr(Timed, "forced", (0.5,) * 10)
    monkeypatch.setattr(budget, "RECHECK", 0.0)
    fit.main(["--config", str(config), "--output_dir", str(tmp_path / "run")])
    calibrations = []
    monkeypatch.setattr("rerank.training.pretraining.calibrate", lambda *args: calibrations.append(args))
    (tmp_path / "run" / "metrics.json").unlink()
    fit.main(["--config", str(config), "--output_dir", str(tmp_path / "run")])  # no new calibration: the same plan
    assert calibrations == []
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["pretrain"]["max_steps"] == 150


def test_the_folds_after_the_first_train_the_stage_steps_it_planned(tmp_path: Path) -> None:
    from rerank.cli.cv import stage_steps
    from rerank.core.run_directory import RunDirectory

    fold = RunDirectory(tmp_path / "fold1")
    assert stage_steps(fold) == []  # not run yet
    fold.root.mkdir()
    fold.config.write_text(yaml.safe_dump({"pretrain": {"max_steps": 150, "passes": 1.5}}))
    assert stage_steps(fold) == ["--pretrain.max_steps", "150"]
    fold.config.write_text(yaml.safe_dump({"pretrain": None}))
    assert stage_steps(fold) == []
