"""The GPU suite cannot rot: its dry run executes every part on the CPU with a tiny model."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from helpers import MINILM_VOCAB, load_script

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home (the convergence part)")


def load_suite() -> ModuleType:
    return load_script("bench_gpu")


def test_every_part_of_the_gpu_suite_runs_in_a_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    suite = load_suite()
    suite.main(["--dry-run", "--output", str(tmp_path / "gpu.json"), "--markdown", str(tmp_path / "gpu.md")])
    report = json.loads((tmp_path / "gpu.json").read_text())
    rows = report["rows"]
    assert {row["part"] for row in rows} == set(suite.PARTS) and not any("error" in row for row in rows)
    train = [row for row in rows if row["part"] == "train"]
    assert {(row["precision"], row["compile"]) for row in train} == {
        ("32-true", False), ("bf16-mixed", False), ("16-mixed", False), ("bf16-mixed", True)}
    assert all(row["sequences_per_s"] > 0 and row["mfu"] is None for row in train)  # no GPU peak on a CPU
    convergence = {row["precision"]: row for row in rows if row["part"] == "convergence"}
    assert set(convergence) == {"16-mixed", "32-true"} and all(row["finite"] for row in convergence.values())
    assert 0 < next(row["padding_efficiency"] for row in rows if "padding_efficiency" in row) <= 1
    assert "### train" in (tmp_path / "gpu.md").read_text()
    check, *levers = [row for row in rows if row["part"] == "levers"]
    # on the CPU the unpadded path is the padded arithmetic: as far from float32 as bf16-mixed's own step, not further
    assert check["unpadded_gradient_relative_difference"] <= 1.01 * check["bf16_gradient_relative_difference"]
    assert 0 < check["unpadded_max_score_difference"] < 0.05
    today, *alone, together = [row["levers"] for row in levers[:6]]
    assert today.startswith("none") and alone == list(suite.LEVERS) and together == "+".join(suite.LEVERS)
    assert {row["workload"] for row in levers} == {"512 tokens", "MS MARCO lengths"}
    assert [row["candidates"] for row in levers if row["candidates"] != 4] == [8]  # a longer list, every lever on
    assert all(row["sequences_per_s"] > 0 and row["tflops"] > 0 for row in levers)
    trainer = [row for row in rows if row["part"] == "trainer"]
    assert len(trainer) == 2 and all(row["ratio"] > 0 for row in trainer)
    phases = [row["phase"] for row in rows if row["part"] == "scale"]
    assert phases[:2] == ["the collection generated", "first stage, training lists, model on the device"]
    assert "training epoch 1" in phases and "validation after epoch 1" in phases and phases[-1] == "test"


def test_training_flops_follow_the_stated_formula() -> None:
    suite = load_suite()
    base = suite.SIZES["bert-base"]
    model = suite.random_model(base, "cpu")
    parameters = suite.non_embedding_parameters(model)
    assert 85_000_000 < parameters < 86_000_000  # BERT-base: 85.1M outside the embeddings (12 x 7.1M + pooler)
    assert suite.training_flops(base, parameters, 512) == 6 * parameters * 512 + 12 * 12 * 768 * 512**2
