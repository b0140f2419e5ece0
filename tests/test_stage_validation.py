"""The judgment-free stage validated on lists it does not train on: ``pretrain.held_out`` and ``pretrain.patience``
(rerank.training.stage_validation)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from helpers import MINILM_VOCAB, cranfield_workdir, tiny_bi_encoder
from test_sources import write_config

from rerank.cli import fit
from rerank.config.pretrain import PretrainConfig
from rerank.core.errors import UserError
from rerank.model.cross_encoder import load_tokenizer
from rerank.model.tokenization import PairTokenizer
from rerank.training import pretraining
from rerank.training.stage_validation import HeldOutValidation, distillation_loss, hold_out

STAGE_SOURCE = {"queries": "pseudo", "pseudo": {"count": 20}, "targets": "teacher"}


class _Linear(pl.LightningModule):
    """A module with a ``model`` (what the callback keeps and restores) that trains on random data."""

    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Linear(2, 1)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.model(batch).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.randn(64, 2), batch_size=4)


def _scripted(values: list[float], seen: list[dict[str, torch.Tensor]]):
    def measure(module: _Linear) -> float:
        seen.append({name: tensor.clone() for name, tensor in module.model.state_dict().items()})
        return values[len(seen) - 1]
    return measure


def test_the_stage_stops_after_patience_checks_without_a_lower_loss_and_keeps_the_best_weights(tmp_path: Path) -> None:
    seen: list[dict[str, torch.Tensor]] = []
    callback = HeldOutValidation(_scripted([3.0, 2.0, 2.5, 2.6, 1.0], seen), every=2, patience=2, name="stage")
    module = _Linear()
    trainer = pl.Trainer(max_steps=10, callbacks=[callback], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, default_root_dir=str(tmp_path))
    trainer.fit(module)
    # checks at steps 2, 4, 6, 8: the best at 4, then 6 and 8 no lower: stopped at 8, not 10
    assert callback.curve == [(2, 3.0), (4, 2.0), (6, 2.5), (8, 2.6)] and trainer.global_step == 8
    assert callback.best_step == 4
    assert all(torch.equal(module.model.state_dict()[name], value) for name, value in seen[1].items())
    assert not all(torch.equal(module.model.state_dict()[name], value) for name, value in seen[3].items())


@pytest.mark.parametrize("accumulate", [1, 2])
def test_without_patience_the_stage_runs_all_its_steps_and_checks_its_last(tmp_path: Path, accumulate: int) -> None:
    seen: list[dict[str, torch.Tensor]] = []
    callback = HeldOutValidation(_scripted([3.0, 2.0, 2.5, 2.6, 1.0], seen), every=3, patience=None, name="stage")
    module = _Linear()
    trainer = pl.Trainer(max_steps=10, callbacks=[callback], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, default_root_dir=str(tmp_path),
                         accumulate_grad_batches=accumulate)  # once an optimizer step, none before the first
    trainer.fit(module)
    assert callback.curve == [(3, 3.0), (6, 2.0), (9, 2.5), (10, 2.6)] and trainer.global_step == 10
    assert all(torch.equal(module.model.state_dict()[name], value) for name, value in seen[1].items())  # step 6's


def test_a_loss_that_is_not_a_number_stops_the_stage_with_its_step(tmp_path: Path) -> None:
    callback = HeldOutValidation(_scripted([2.0, float("nan")], []), every=1, patience=None, name="stage")
    trainer = pl.Trainer(max_steps=5, callbacks=[callback], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, default_root_dir=str(tmp_path))
    with pytest.raises(FloatingPointError, match="^stage, step 2: the held-out distillation loss is nan$"):
        trainer.fit(_Linear())


def test_patience_needs_held_out_lists() -> None:
    source = {**STAGE_SOURCE, "teacher": {"run": "x.run"}}
    with pytest.raises(ValueError, match="pretrain.patience stops the stage on its held-out lists: give "
                                         "pretrain.held_out too"):
        PretrainConfig(train=[source], patience=3)
    with pytest.raises(ValueError, match=r"^pretrain.held_out must be >= 0; got -1$"):
        PretrainConfig(train=[source], held_out=-1)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cranfield_workdir(tmp_path_factory.mktemp("stage-validation"))


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
def test_held_out_lists_are_not_trained_on_and_measured_whole_against_the_teacher(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    stage = {"train": [{**STAGE_SOURCE, "first_stage": {"backend": "bm25s", "index_dir": str(tmp_path / "idx")},
                        "teacher": {"bi_encoder": str(tiny_bi_encoder(tmp_path))}}],
             "max_steps": 4, "held_out": 5, "validate_every": 2}
    config = write_config(workdir, tmp_path / "config.yaml", pretrain=stage,
                          model={"teacher_loss": "distill_listnet", "teacher_loss_args": {"temperature": 0.05}})
    measured = []

    def recording(held, data):  # the real measure, and what it measures, kept for the checks below
        measure = distillation_loss(held, data)
        trained = {qid for source in data.training for qid in source.lists.query_ids}

        def checked(module):
            value = measure(module)
            measured.append((value, _by_hand(module, held, data)))
            return value
        measured.append((held, trained))
        return checked

    monkeypatch.setattr(pretraining, "distillation_loss", recording)
    with caplog.at_level(logging.INFO):
        fit.main(["--config", str(config), "--output_dir", str(tmp_path / "run")])
    (held, trained), *checks = measured
    held_ids = {qid for source in held for qid in source.lists.query_ids}
    assert len(held_ids) == 5 and not held_ids & trained and len(trained) == 15  # 20 pseudo-queries
    assert all(source.strategy == "top" for source in held)
    assert len(checks) == 2  # steps 2 and 4
    for value, reference in checks:
        assert value == pytest.approx(reference, rel=1e-5)
    assert "pre-training, round 1 of 1, step 2: held-out distillation loss" in caplog.text
    record, = (tmp_path / "cache" / "pretrained").glob("*.held_out.json")
    curve = json.loads(record.read_text())["curve"]
    assert curve == [[2, checks[0][0]], [4, checks[1][0]]]
    best = min(curve, key=lambda point: point[1])[0]
    caplog.clear()
    with caplog.at_level(logging.INFO):  # the stage from the cache says which step's weights it holds
        fit.main(["--config", str(config), "--output_dir", str(tmp_path / "again")])
    assert "round 1 of 1: weights from the cache" in caplog.text and len(measured) == 3  # nothing measured again
    assert f"round 1 of 1: the weights of step {best} (held-out distillation loss " \
           f"{dict(curve)[best]:.4f}), trained to step 4, checked 2 times" in caplog.text
    record.unlink()  # weights without their checks: not trusted, the stage is trained again
    caplog.clear()
    with caplog.at_level(logging.INFO):
        fit.main(["--config", str(config), "--output_dir", str(tmp_path / "rebuilt")])
    assert "round 1 of 1: 4 steps on 1 source(s)" in caplog.text and record.exists() and len(measured) == 6
    with pytest.raises(UserError, match=r"^pretrain.held_out: 11 lists asked, but the stage has 20 lists with "
                                        r"teacher scores: hold out at most half of them \(10\)$"):
        hold_out(_StageLike(held * 4), 11, 0)


def _by_hand(module, held, data) -> float:
    """Each held-out query's candidates scored one by one, then -sum softmax(t / T) log softmax(s), averaged."""
    tokenize = PairTokenizer(load_tokenizer(data.model_name), data.tokenization)
    module.eval()
    losses = []
    with torch.no_grad():
        for source in held:
            for candidates in source.lists:
                texts = [source.documents.text(doc) for doc in candidates.doc_ids]
                scores = torch.cat([module.model.score(tokenize([candidates.query], [text])) for text in texts])
                targets = torch.softmax(torch.tensor(candidates.teacher) / 0.05, dim=0)
                losses.append(float(-(targets * torch.log_softmax(scores.double(), dim=0)).sum()))
    module.train()
    return sum(losses) / len(losses)


class _StageLike:
    """A data module's training sources, for :func:`hold_out` alone."""

    def __init__(self, sources: list) -> None:
        self.training = sources

    def training_sources(self) -> list:
        return self.training
