"""Every ``auto`` of a run resolved once, before any model is built, and the run's config.yaml written once with the
resolved values (rerank.training.resolution)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import yaml

from rerank.cli import arguments, fit
from rerank.config.source import SourceConfig
from rerank.config.teacher import TeacherConfig
from rerank.config.tokenization import TokenizationConfig
from rerank.data.pseudo_queries import PseudoQueryConfig
from rerank.training import fitting, lightning_module
from rerank.training.datamodule import RerankDataModule
from rerank.training.resolution import resolve
from tests.helpers import CRANFIELD, cranfield_workdir, tiny_bi_encoder


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cranfield_workdir(tmp_path_factory.mktemp("resolution"))


def auto_config(workdir: Path, tmp_path: Path) -> dict:
    """A fit whose rows, query budget, speed-ups, pseudo-query lengths and stage steps are all ``auto``."""
    pseudo = {"count": 20, "max_words": "auto", "lengths": "queries"}
    return {"model": {"model_name": str(workdir / "bert"), "loss": "listnet", "speedups": "auto",
                      "tokenization": {"max_length": "auto", "max_query_length": "auto", "max_length_cap": 64}},
            "data": {"collection": CRANFIELD, "first_stage": {"backend": "run", "run": str(workdir / "bm25.run")},
                     "folds": {"scheme": "kfold", "count": 5, "seed": 42, "test": 1}, "rerank_depth": 20,
                     "list_size": 4, "batch_size": 2},
            "pretrain": {"train": [{"queries": "pseudo", "pseudo": pseudo,
                                    "first_stage": {"backend": "bm25s", "index_dir": str(tmp_path / "idx")},
                                    "targets": "teacher", "teacher": {"bi_encoder": str(tiny_bi_encoder(tmp_path))}}],
                         "max_steps": "auto", "passes": 1, "budget_minutes": 60},
            "trainer": {"max_epochs": 1, "limit_train_batches": 2, "enable_progress_bar": False, "logger": False,
                        "num_sanity_val_steps": 0}}


def test_a_fit_resolves_every_auto_before_the_model_is_built_and_writes_its_config_once(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    config = tmp_path / "auto.yaml"
    config.write_text(yaml.safe_dump(auto_config(workdir, tmp_path)))
    written, events = [], []
    atomic_write = fitting.atomic_write

    def counted(path, *args, **kwargs):
        written.append(Path(path).name)
        return atomic_write(path, *args, **kwargs)

    monkeypatch.setattr(fitting, "atomic_write", counted)
    loaded = lightning_module.CrossEncoderModel.from_pretrained
    monkeypatch.setattr(lightning_module.CrossEncoderModel, "from_pretrained", _noting(loaded, "model built", events))
    monkeypatch.setattr(arguments, "resolve", _noting(arguments.resolve, "resolved", events))
    with caplog.at_level(logging.INFO):
        fit.main(["--config", str(config), "--output_dir", str(tmp_path / "run")])
    messages = [record.getMessage() for record in caplog.records]
    line = next(message for message in messages if message.startswith("options resolved: "))
    assert messages.index(line) < next(i for i, m in enumerate(messages) if m.startswith("recipe: "))
    for said in ("model.speedups: cls_only_last_layer, cheap_dropout", "model.tokenization: rows of ",
                 "pretrain.train[0].pseudo: titles or first sentences of at most "):
        assert said in line, line
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    for section in ("model", "data", "pretrain"):  # every value as resolved: a re-run trains the same
        assert not re.search(r": auto$", yaml.safe_dump(recorded[section]), re.M), recorded[section]
    assert recorded["model"]["tokenization"]["max_length"] <= 64  # data.tokenization is linked to it
    assert recorded["model"]["speedups"] == ["cls_only_last_layer", "cheap_dropout"]
    assert isinstance(recorded["pretrain"]["max_steps"], int) and recorded["pretrain"]["max_steps"] >= 50
    assert isinstance(recorded["pretrain"]["train"][0]["pseudo"]["max_words"], int)
    assert written.count("config.yaml") == 1
    assert events[:2] == ["resolved", "model built"], events


def _noting(function, event: str, events: list[str]):
    """``function``, noting ``event`` in ``events`` when called."""
    def noted(*args, **kwargs):
        events.append(event)
        return function(*args, **kwargs)
    return noted


def test_the_resolved_config_reruns_to_the_same_options(workdir: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """What resolution gives is a fixed point: resolving resolved options changes nothing."""
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    options = auto_config(workdir, tmp_path)
    first = resolve(options)
    stage = {**options["pretrain"]["train"][0], "pseudo": {"count": 20, "max_words": first.stage[0].pseudo.max_words}}
    again = dict(options, model={**options["model"], "speedups": first.speedups,
                                 "tokenization": {"max_length": first.tokenization.max_length,
                                                  "max_query_length": first.tokenization.max_query_length,
                                                  "max_length_cap": 64}},
                 pretrain={**options["pretrain"], "train": [stage]})
    second = resolve(again)
    assert second.resolved == []
    assert (second.tokenization, second.speedups, second.stage) == (first.tokenization, first.speedups, first.stage)


def test_speedups_auto_adds_the_fused_optimizer_on_a_gpu_and_a_command_that_does_not_train_leaves_the_stage(
        workdir: Path, tmp_path: Path) -> None:
    options = auto_config(workdir, tmp_path)
    options["model"]["tokenization"] = {"max_length": 48, "max_query_length": 12}
    gpu = resolve(dict(options, trainer={"accelerator": "gpu", "precision": "bf16-mixed"}), stage=False)
    assert gpu.speedups == ["cls_only_last_layer", "cheap_dropout", "fused_adamw"]
    assert gpu.precision == "bf16-mixed" and gpu.resolved == ["model.speedups: cls_only_last_layer, cheap_dropout, "
                                                              "fused_adamw"]
    assert not gpu.stage[0].pseudo.sized  # predict and the other commands that do not train leave it as given


def test_a_data_module_refuses_pseudo_queries_left_to_size(workdir: Path) -> None:
    source = SourceConfig(queries="pseudo", targets="teacher", pseudo=PseudoQueryConfig(max_words="auto"),
                          teacher=TeacherConfig(bi_encoder="x"))
    with pytest.raises(ValueError, match=r"^data.train\[0\].pseudo: max_words auto and lengths queries are sized"):
        RerankDataModule(collection=CRANFIELD, train=[source], model_name=str(workdir / "bert"),
                         tokenization=TokenizationConfig(max_length=48, max_query_length=12))
