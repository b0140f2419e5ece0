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

from rerank.cache import SEAL
from rerank.cli import fit
from rerank.training import budget
from rerank.training.budget import StagePlan, planned_steps

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


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cranfield_workdir(tmp_path_factory.mktemp("budget"))


def test_auto_steps_measure_this_machine_once_and_every_fold_trains_the_same_stage(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    stage = {"train": [{"queries": "pseudo", "pseudo": {"count": 20},
                        "first_stage": {"backend": "bm25s", "index_dir": str(tmp_path / "idx")},
                        "targets": "teacher", "teacher": {"bi_encoder": str(tiny_bi_encoder(tmp_path))}}],
             "max_steps": "auto", "budget_minutes": 60, "passes": 5}
    config = write_config(workdir, tmp_path / "config.yaml", pretrain=stage)
    measured = []
    seconds_per_step = budget.seconds_per_step

    def measuring(module, stage_data, options, key):  # the real measure, counted
        before = ({name: value.clone() for name, value in module.model.state_dict().items()},
                  torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
        seconds = seconds_per_step(module, stage_data, options, key)
        after = module.model.state_dict()
        assert all(torch.equal(after[name], value) for name, value in before[0].items())  # weights as they were
        assert torch.equal(torch.get_rng_state(), before[1]) and random.getstate() == before[2]
        assert np.array_equal(np.random.get_state()[1], before[3])  # and the random generators
        measured.append(seconds)
        return seconds

    monkeypatch.setattr("rerank.training.pretraining.seconds_per_step", measuring)
    with caplog.at_level(logging.INFO):
        first = fit.main(["--config", str(config), "--output_dir", str(tmp_path / "fold1")])
    # 20 pseudo-queries, 2 lists a step, at most 5 passes: 50 steps (the budget of an hour buys more)
    line = next(record.getMessage() for record in caplog.records if record.getMessage().startswith("recipe: "))
    assert re.search(r"rows of 48 tokens \(queries up to 12\), a 50-step judgment-free stage on titles or first "
                     r"sentences of at most 24 words \(\d+\.\d\d s a step "
                     r"here: \d+ min; pretrain.budget_minutes 60, at most 5 passes over its 20 lists: the passes "
                     r"chose\), then about \d+ steps on the training folds", line), line
    assert "pre-training stage, round 1 of 1: 50 steps on 1 source(s)" in caplog.text
    calibration = [path for path in (tmp_path / "cache" / "calibration").glob("*.json") if SEAL not in path.name]
    assert len(calibration) == 1 and json.loads(calibration[0].read_text())["seconds_per_step"] == measured[0]
    recorded = yaml.safe_load((tmp_path / "fold1" / "config.yaml").read_text())
    assert recorded["pretrain"]["max_steps"] == 50  # the config written beside the run reruns the same stage
    caplog.clear()
    with caplog.at_level(logging.INFO):
        second = fit.main(["--config", str(config), "--output_dir", str(tmp_path / "fold1-again")])
    assert "pre-training stage, round 1 of 1: weights from the cache" in caplog.text  # the same steps, the same key
    assert second == first and len(measured) == 2 and measured[1] == measured[0]  # the measure, from the cache
    calibration[0].write_text("{\"seconds_per_step\": ")  # a damaged entry is measured again, not trusted
    fit.main(["--config", str(config), "--output_dir", str(tmp_path / "fold1-third")])
    assert json.loads(calibration[0].read_text())["seconds_per_step"] > 0
