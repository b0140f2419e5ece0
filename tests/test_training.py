"""Training: the loss falls, gradient accumulation, mixed precision, DDP evaluation, resume, and early errors.

A 2-layer random BERT with MiniLM's vocabulary stands in for the encoder; Cranfield comes from the seeded
ir_datasets cache with a bm25s first stage written once per module.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from itertools import islice
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import yaml
from helpers import CRANFIELD, MINILM_VOCAB, cranfield_workdir, flat

from rerank.callbacks.evaluator import Evaluator, Validated, evaluator_of
from rerank.cli import fit
from rerank.config.optimizer import OptimizerSettings
from rerank.config.selection import SelectionRules
from rerank.config.tokenization import TokenizationConfig
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.folds import FoldsConfig, kfold
from rerank.data.trec import read_run
from rerank.evaluation.measures import evaluate
from rerank.first_stage import FirstStageConfig
from rerank.training.datamodule import RerankDataModule
from rerank.training.lightning_module import RerankModule

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
REPO = Path(__file__).resolve().parents[1]
TEST_ENV = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT without dropout and a Cranfield bm25s run (depth 20)."""
    return cranfield_workdir(tmp_path_factory.mktemp("training"), dropout=0.0)


def data_module(workdir: Path, output: Path, **options) -> RerankDataModule:
    settings = {"collection": CollectionConfig(**CRANFIELD),
                "first_stage": FirstStageConfig(backend="run", run=str(workdir / "bm25.run")),
                "folds": FoldsConfig(scheme="kfold", count=5, seed=42, test=1),
                "model_name": str(workdir / "bert"), "output_dir": str(output), "rerank_depth": 20, "list_size": 8,
                "strategy": "random", "batch_size": 4, "eval_batch_size": 32,
                "tokenization": TokenizationConfig(max_length=64, max_query_length=16)}
    return RerankDataModule(**{**settings, **options})


def rerank_module(data: RerankDataModule, **options) -> RerankModule:
    """A module for ``data``'s tokenizer, tokenization and judgments."""
    return RerankModule(model_name=data.model_name, tokenization=data.tokenization, **options)


def trainer(output: Path, interpolate: bool = False, **options) -> pl.Trainer:
    """A quiet CPU Trainer with the fit's evaluation (``evaluation.selection.interpolate`` as given)."""
    settings = {"accelerator": "cpu", "devices": 1, "logger": False, "enable_checkpointing": False,
                "enable_progress_bar": False, "enable_model_summary": False, "default_root_dir": str(output),
                "num_sanity_val_steps": 0, "limit_val_batches": 0,
                "callbacks": [Evaluator(selection=SelectionRules(interpolate=interpolate))]}
    return pl.Trainer(**{**settings, **options})


@pytest.mark.parametrize("loss", ["smoothi_ndcg", "hinge", "softndcg", "lambdarank"])
def test_training_loss_falls(workdir: Path, tmp_path: Path, loss: str) -> None:
    judged = sorted(Collection(CollectionConfig(**CRANFIELD)).qrels)
    folds = kfold(judged, 5, 42)
    # train on 16 queries only, so that a few steps make a visible difference on them
    split = FoldsConfig(scheme="explicit", lists=[folds[0][:16], folds[1], folds[2]], test=3)
    data = data_module(workdir, tmp_path, folds=split, strategy="top")
    data.prepare_data()
    data.setup("fit")
    batches = list(data.train_dataloader())
    assert len(batches) == 4 and all(batch.labels.shape == (4, 8) for batch in batches)
    pl.seed_everything(0)
    module = rerank_module(data, loss=loss, optimizer=OptimizerSettings(encoder_lr=1e-3, head_lr=1e-2, warmup=0))

    def mean_loss() -> float:
        module.eval()
        with torch.no_grad():
            return sum(module.list_loss(batch).item() for batch in batches) / len(batches)

    before = mean_loss()
    trainer(tmp_path, max_steps=24).fit(module, datamodule=data)
    after = mean_loss()
    assert after < 0.9 * before, (before, after)


def capture_first_update(workdir: Path, output: Path, batch_size: int, accumulate: int) -> tuple[list, list]:
    """Gradients at the first optimizer step and parameters after it."""
    grads: list[torch.Tensor] = []

    class Capture(pl.Callback):
        def on_before_optimizer_step(self, trainer, module, optimizer) -> None:
            grads.extend(p.grad.detach().clone() for p in module.model.parameters())

    pl.seed_everything(0)
    data = data_module(workdir, output, batch_size=batch_size)
    module = rerank_module(data, loss="listnet", optimizer=OptimizerSettings(warmup=0))
    trainer(output, max_steps=1, accumulate_grad_batches=accumulate, callbacks=[Capture()]).fit(module, datamodule=data)
    return grads, [p.detach().clone() for p in module.model.parameters()]


def test_gradient_accumulation_equals_a_larger_batch(workdir: Path, tmp_path: Path) -> None:
    grads_big, params_big = capture_first_update(workdir, tmp_path / "a", batch_size=4, accumulate=1)
    grads_acc, params_acc = capture_first_update(workdir, tmp_path / "b", batch_size=1, accumulate=4)
    assert len(grads_big) == len(grads_acc) > 0
    assert max((a - b).abs().max().item() for a, b in zip(grads_big, grads_acc)) < 1e-5
    # Adam's first step is lr * g / (|g| + eps): where |g| is near eps it magnifies rounding noise, so the
    # updates are compared where the gradient is clearly above it
    for grad, a, b in zip(grads_big, params_big, params_acc):
        well_conditioned = grad.abs() > 1e-6
        assert torch.allclose(a[well_conditioned], b[well_conditioned], rtol=0, atol=1e-5)
    assert any(g.abs().max() > 1e-3 for g in grads_big)  # a real update, not zeros on both sides


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_on_cpu_keeps_the_loss_finite(workdir: Path, tmp_path: Path, precision: str) -> None:
    losses: list[float] = []

    class Record(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            losses.append(outputs["loss"].item())

    data = data_module(workdir, tmp_path)
    module = rerank_module(data, loss="smoothi_ndcg")
    run = trainer(tmp_path, max_steps=4, precision=precision, callbacks=[Record()])
    # Lightning has no float16 autocast on CPU and runs 16-mixed as bf16-mixed (with a warning)
    assert run.precision == "bf16-mixed"
    run.fit(module, datamodule=data)
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))


def test_evaluation_covers_each_query_once_and_matches_trec_eval(workdir: Path, tmp_path: Path) -> None:
    data = data_module(workdir, tmp_path, eval_batch_size=7)
    module = rerank_module(data, loss="listnet")
    (metrics,) = trainer(tmp_path, interpolate=True, limit_val_batches=1.0).validate(module, datamodule=data)
    run = read_run(tmp_path / "runs" / "validation.run")
    assert sorted(run) == sorted(c.query_id for c in data.lists["validation"])
    assert all(len(run[c.query_id]) == len(c.doc_ids) for c in data.lists["validation"])
    expected = evaluate(run, data.judgments("validation"), ["nDCG@10", "nDCG@20", "AP"]).mean
    for name, value in expected.items():
        assert metrics[f"val/{name}"] == pytest.approx(value, abs=1e-6)
    assert 0.0 <= metrics["val/interpolation_weight"] <= 1.0


def test_the_tested_checkpoints_validation_run_is_the_one_written(workdir: Path, tmp_path: Path) -> None:
    """runs/validation.run ends as the validation of the checkpoint tested (whose figures chose the deployed ranker),
    not as the latest epoch's: a checkpoint saved, a later validation with other weights, then the test."""
    data = data_module(workdir, tmp_path)
    module = rerank_module(data, loss="listnet")
    validator = trainer(tmp_path, interpolate=True, limit_val_batches=1.0)
    validator.validate(module, datamodule=data)
    checkpoint = tmp_path / "chosen.ckpt"
    validator.save_checkpoint(checkpoint)
    chosen, measure = module.deployment.validation["reranker"], module.deployment.measure
    with torch.no_grad():  # other weights, validated later: the latest run on disk is no longer the chosen one
        for parameter in module.model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    validator.validate(module, datamodule=data)
    validation_file = tmp_path / "runs" / "validation.run"
    judged = data.judgments("validation")
    latest = evaluate(read_run(validation_file), judged, [measure]).mean[measure]
    assert latest == module.deployment.validation["reranker"] != chosen
    trainer(tmp_path, interpolate=True, limit_test_batches=1.0).test(module, datamodule=data, ckpt_path=checkpoint,
                                                                     weights_only=True)
    assert evaluate(read_run(validation_file), judged, [measure]).mean[measure] == chosen
    assert module.deployment.validation["reranker"] == chosen


def test_the_evaluator_keeps_each_validations_per_query_figures_and_tests_the_weights_its_rule_chooses(
        workdir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two validations with other weights between them: the evaluator keeps each one's per-query figures (trec_eval's
    on the run it wrote), and a checkpoint's state carries them. Then which weights are tested, on hand-made
    validations: the best checkpoint where it beats the last by one standard error (or under ``epoch: best``), else
    the weights the fit ended with (None), unless the last validation did not come at the last step."""
    data = data_module(workdir, tmp_path)
    module = rerank_module(data, loss="listnet")
    validator = trainer(tmp_path, limit_val_batches=1.0)
    evaluation = evaluator_of(validator)
    judged, written = data.judgments("validation"), []
    for _ in range(2):
        validator.validate(module, datamodule=data)
        written.append(evaluate(read_run(tmp_path / "runs" / "validation.run"), judged, ["nDCG@20"]).values("nDCG@20"))
        with torch.no_grad():
            for parameter in module.model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
    assert [validated.values for validated in evaluation.validations] == written and written[0] != written[1]
    restored = Evaluator()
    restored.load_state_dict(evaluation.state_dict())
    assert restored.validations == evaluation.validations
    last, ahead, close = [0.5, 0.4, 0.6, 0.3], [0.8, 0.7, 0.6, 0.3], [0.8, 0.4, 0.6, 0.28]
    ended = SimpleNamespace(global_step=20, is_global_zero=True)
    for values, rule, step, tested in ((ahead, "one_se", 20, "best.ckpt"), (close, "one_se", 20, None),
                                       (close, "best", 20, "best.ckpt"), (close, "one_se", 25, "best.ckpt")):
        chooser = Evaluator(selection=SelectionRules(epoch=rule))
        chooser.validations = [Validated(0, 10, values), Validated(1, step, last)]
        with caplog.at_level(logging.INFO, logger="rerank.callbacks.evaluator"):
            assert chooser.tested(ended, "best.ckpt") == tested
        assert chooser.choice.startswith(f"the weights of epoch {1 if tested else 2}, by evaluation.selection.epoch "
                                         f"{rule} on 4 validation queries (nDCG@20: epoch 1 ")
    assert "the last validation (step 25) did not come at the end of training (step 20)" in caplog.text


def test_two_processes_give_the_same_validation_metrics_as_one(workdir: Path, tmp_path: Path) -> None:
    results = {}
    for devices in (1, 2):
        output = tmp_path / f"devices{devices}"
        subprocess.run([sys.executable, str(REPO / "tests" / "ddp_validate.py"), str(workdir), str(output),
                        str(devices)], check=True, cwd=REPO, env=TEST_ENV, capture_output=True, timeout=300)
        results[devices] = json.loads((output / "validation.json").read_text())
    assert results[2]["world_size"] == 2
    assert results[2]["metrics"] == pytest.approx(results[1]["metrics"], abs=1e-6)
    assert results[2]["pairs"] == results[1]["pairs"]  # every (query, candidate) pair scored exactly once


def fit_config(workdir: Path, path: Path) -> Path:
    """A small run of ``rerank.fit``: 2 epochs of 8 steps, validation after each, last.ckpt every 2 steps."""
    config = {
        "model": {"model_name": str(workdir / "bert"), "loss": "smoothi_ndcg", "dropout": 0.1,
                  "tokenization": {"max_length": 64, "max_query_length": 16}},
        "data": {"collection": CRANFIELD, "first_stage": {"backend": "run", "run": str(workdir / "bm25.run")},
                 "folds": {"scheme": "kfold", "count": 5, "seed": 42, "test": 1}, "rerank_depth": 20,
                 "list_size": 8, "batch_size": 4},
        "trainer": {"max_epochs": 2, "limit_train_batches": 8, "enable_progress_bar": False,
                    "num_sanity_val_steps": 0, "logger": False},
        "last_checkpoint": {"every_n_train_steps": 2},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_resume_after_a_kill_finishes_like_an_uninterrupted_run(workdir: Path, tmp_path: Path) -> None:
    config = fit_config(workdir, tmp_path / "config.yaml")
    system_temp = tmp_path / "system-tmp"  # the processes' own temporary folder: nothing may be left there
    system_temp.mkdir()
    env = {**TEST_ENV, "TMPDIR": str(system_temp)}

    def run(output: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rerank.fit", "--config", str(config), "--output_dir",
                               str(tmp_path / output), *extra], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600)

    straight = run("straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "resuming" not in straight.stderr  # testing the best checkpoint resumes nothing
    change = "trainer.limit_train_batches 8: each epoch trains on that many batches"  # said at the start and end
    assert f"the recipe is changed by {change}" in straight.stderr
    assert f"note: the recipe was changed by {change}" in straight.stdout
    assert_each_epochs_validation_run_is_kept(tmp_path / "straight", straight.stderr)
    killed = run("resumed", "--trainer.callbacks+=helpers.KillAtStep", "--trainer.callbacks.step=5")
    assert killed.returncode == -9  # SIGKILL in the middle of epoch 0, after last.ckpt at step 4
    assert not (tmp_path / "resumed" / "metrics.json").exists()
    resumed = run("resumed", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stderr.count("resuming epoch") == 1  # said once, when the fit resumes, in rerank's words...
    assert "resuming epoch 0 after its first 4 batches" in resumed.stderr
    assert "not resumable" not in resumed.stderr  # ...not Lightning's warning that the loader would start over
    assert not any(".tmp-" in path.name for path in (tmp_path / "resumed").rglob("*"))  # no half-written files
    assert not any(system_temp.iterdir())  # and no checkpoint staged in the system's temporary folder
    expected = json.loads((tmp_path / "straight" / "metrics.json").read_text())
    resumed_metrics = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert set(expected) == set(resumed_metrics) == {"reranker", "first_stage", "deployment", "calibration"}
    calibrated = resumed_metrics.pop("calibration")  # fitted on the tested checkpoint's validation run, resumed too
    assert flat(calibrated) == pytest.approx(flat(expected.pop("calibration")), abs=1e-6)
    deployed, straight = resumed_metrics.pop("deployment"), expected.pop("deployment")
    assert deployed["ranker"] == straight["ranker"]  # the same ranker, chosen on the same validation figures
    assert deployed["validation"] == pytest.approx(straight["validation"], abs=1e-6)
    for system, values in expected.items():
        assert resumed_metrics[system] == pytest.approx(values, abs=1e-6)
    assert list(expected["reranker"]) == ["nDCG@10", "nDCG@20", "P@20", "AP", "R@100", "R@1000"]
    card = (tmp_path / "straight" / "model" / "README.md").read_text()  # the best checkpoint, exported
    assert "smoothi_ndcg" in card and f"{expected['reranker']['nDCG@10']:.4f}" in card
    front = yaml.safe_load(card.split("---\n")[1])  # the card's metadata: the model, the data, the fit's figures
    assert front["base_model"] == str(workdir / "bert") and front["datasets"] == ["cranfield"]
    figures = {metric["name"]: metric["value"] for result in front["model-index"][0]["results"]
               for metric in result["metrics"]}
    assert figures == {f"{measure} ({system}{', deployed' if system == straight['ranker'] else ''})": value
                       for system, values in expected.items() for measure, value in values.items()}  # metrics.json's
    straight_state = torch.load(tmp_path / "straight" / "checkpoints" / "last.ckpt", weights_only=False)
    resumed_state = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=False)
    assert straight_state["global_step"] == resumed_state["global_step"] == 16
    for name, tensor in straight_state["state_dict"].items():
        torch.testing.assert_close(resumed_state["state_dict"][name], tensor, atol=1e-6, rtol=0)


def assert_each_epochs_validation_run_is_kept(output: Path, log: str) -> None:
    """runs/validation.epoch<N>.run holds epoch N's validation: trec_eval on it gives the figure the fit logged for
    that epoch. The tested weights' (runs/validation.run, whose figure chose the deployment) are the epoch that
    ``evaluation.selection.epoch: one_se`` gives, by hand: the last unless the best beats it by one standard
    error."""
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    measure = json.loads((output / "metrics.json").read_text())["deployment"]["measure"]
    logged = [float(line.split(f"{measure}: reranker ")[1].split(",")[0])
              for line in log.splitlines() if "validation, epoch" in line]
    runs = [read_run(output / "runs" / f"validation.epoch{epoch}.run") for epoch in range(len(logged))]
    assert len(runs) == 2 and runs[0] != runs[1]  # two epochs, other weights
    values = [np.array(evaluate(run, {qid: qrels[qid] for qid in sorted(run)}, [measure]).values(measure))
              for run in runs]
    for per, figure in zip(values, logged):
        assert per.mean() == pytest.approx(figure, abs=5e-5)
    difference = values[0] - values[1]
    first = difference.mean() > difference.std(ddof=1) / np.sqrt(len(difference))
    assert read_run(output / "runs" / "validation.run") == runs[0 if first else 1]
    assert f"tested: the weights of epoch {1 if first else 2}, by evaluation.selection.epoch one_se" in log


def fit_fails(workdir: Path, tmp_path: Path, *overrides: str) -> str:
    """Run ``rerank.fit`` expecting a failure before training; the error message."""
    config = fit_config(workdir, tmp_path / "config.yaml")
    with pytest.raises((ValueError, OSError, SystemExit)) as error:
        fit.main(["--config", str(config), "--output_dir", str(tmp_path / "out"), *overrides])
    assert not (tmp_path / "out" / "checkpoints").exists()
    return str(error.value)


def test_a_top_level_optimizer_or_scheduler_is_refused_naming_the_recipes_option(workdir: Path,
                                                                                   tmp_path: Path) -> None:
    assert "--optimizer: optimizer would replace the recipe's optimizer: set model.optimizer instead" in fit_fails(
        workdir, tmp_path, "--optimizer", "AdamW")
    config = tmp_path / "scheduler.yaml"
    config.write_text("lr_scheduler:\n  class_path: torch.optim.lr_scheduler.StepLR\n")
    assert f"{config}:1: lr_scheduler would replace the recipe's schedule" in fit_fails(workdir, tmp_path,
                                                                                       "--config", str(config))


def test_unknown_loss_fails_before_training(workdir: Path, tmp_path: Path) -> None:
    assert "unknown loss 'smoothi'" in fit_fails(workdir, tmp_path, "--model.loss", "smoothi")


def test_a_head_for_graded_labels_is_refused_for_teacher_scores_and_clicks(workdir: Path, tmp_path: Path) -> None:
    assert "model.teacher_loss 'listnet' takes graded labels; use a distillation head" in fit_fails(
        workdir, tmp_path, "--model.teacher_loss", "listnet")
    assert "model.click_loss 'listnet' takes graded labels; use a click head: click_softmax, click_bce or dla" in (
        fit_fails(workdir, tmp_path, "--model.click_loss", "listnet"))


def test_a_click_head_and_estimator_that_disagree_are_refused(workdir: Path, tmp_path: Path) -> None:
    source = "--data.train=[{{targets: clicks, clicks: {{log: {log}, {estimator}}}}}]"
    dla = source.format(log=tmp_path / "clicks.jsonl", estimator="estimator: dla")
    assert ("data.train[0].clicks.estimator dla leaves the position bias to model.click_loss dla, but "
            "model.click_loss is 'click_softmax'") in fit_fails(workdir, tmp_path, dla)
    ips = source.format(log=tmp_path / "clicks.jsonl", estimator="eta: 2")
    assert ("model.click_loss 'dla' learns the propensities from naive click targets, but data.train[0].clicks."
            "estimator is 'ips'") in fit_fails(workdir, tmp_path, ips, "--model.click_loss", "dla")


def test_missing_model_fails_before_training(workdir: Path, tmp_path: Path) -> None:
    message = fit_fails(workdir, tmp_path, "--model.model_name", str(tmp_path / "no-such-model"))
    assert "no-such-model" in message and "not found" in message


def test_qrels_without_shared_queries_fail_before_training(workdir: Path, tmp_path: Path) -> None:
    (tmp_path / "docs.jsonl").write_text('{"doc_id": "d1", "text": "wind tunnel"}\n{"doc_id": "d2", "text": "heat"}\n')
    (tmp_path / "queries.tsv").write_text("1\twind\n2\theat\n3\ttunnel\n")
    (tmp_path / "qrels.txt").write_text("901 0 d1 1\n902 0 d2 1\n")
    files = {name: str(tmp_path / file) for name, file in
             (("docs", "docs.jsonl"), ("queries", "queries.tsv"), ("qrels", "qrels.txt"))}
    local = f"--data.collection={json.dumps({'ir_datasets': None, **files, 'cache_dir': str(tmp_path)})}"
    message = fit_fails(workdir, tmp_path, local, "--data.first_stage.backend", "bm25s",
                        f"--data.first_stage.index_dir={tmp_path / 'idx'}")
    assert "none of its 2 judged query ids is in" in message and "queries.tsv" in message


def test_collection_without_candidates_fails_before_training(workdir: Path, tmp_path: Path) -> None:
    (tmp_path / "empty.run").write_text("")
    message = fit_fails(workdir, tmp_path, f"--data.first_stage.run={tmp_path / 'empty.run'}")
    assert "225 queries have no first-stage candidates" in message


def test_training_lists_follow_the_strategy(workdir: Path, tmp_path: Path) -> None:
    data = data_module(workdir, tmp_path, strategy="pairs", list_size=4, batch_size=1)
    data.prepare_data()
    data.setup("fit")
    for batch in islice(data.train_dataloader(), 20):
        assert batch.labels.shape == (1, 4) and batch.mask.all()
        assert (batch.labels[0, ::2] > 0).all() and (batch.labels[0, 1::2] == 0).all()
    top = data_module(workdir, tmp_path, strategy="top", list_size=30, batch_size=2)
    top.prepare_data()
    top.setup("fit")
    batch = next(iter(top.train_dataloader()))
    assert batch.labels.shape == (2, 30) and batch.mask.sum(1).tolist() == [20, 20]  # padded past depth 20
    assert batch.slots.tolist() == [*range(20), *range(30, 50)]


def test_gradient_checkpointing_and_maxp_train_the_same_model(workdir: Path, tmp_path: Path) -> None:
    maxp = TokenizationConfig(max_length=40, max_query_length=16, passages="maxp", stride=8, max_passages=3)
    data = data_module(workdir, tmp_path, tokenization=maxp, num_workers=2)
    data.prepare_data()
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))  # tokenized in two worker processes
    pairs = batch.inputs.passage_to_pair
    assert pairs.tolist() == sorted(pairs.tolist()) and int(pairs[-1]) + 1 == len(batch.slots)
    assert len(pairs) > len(batch.slots)  # long documents give several passages, at most 3
    assert torch.bincount(pairs).max() == 3
    losses, grads = [], []
    for checkpointing in (False, True):
        pl.seed_everything(0)
        module = rerank_module(data, loss="lambdarank", gradient_checkpointing=checkpointing)
        loss = module.list_loss(batch)
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.flatten() for p in module.model.parameters()]))
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("overrides", [[], ["losses/hinge.yaml"], ["losses/softndcg.yaml"], ["losses/lambdarank.yaml"]])
def test_robust04_protocol_and_loss_overrides_parse(overrides: list[str], capsys: pytest.CaptureFixture) -> None:
    arguments = ["--config", "robust04.yaml"] + [part for name in overrides for part in ("--config", name)]
    with pytest.raises(SystemExit) as exited:
        fit.main([*arguments, "--print_config"])
    assert exited.value.code in (0, None)
    config = yaml.safe_load(capsys.readouterr().out)
    expected_loss = overrides[0].split("/")[1].removesuffix(".yaml") if overrides else "smoothi_ndcg"
    assert config["model"]["loss"] == expected_loss
    loss_config = REPO / "rerank" / "configs" / (overrides or ["losses/smoothi_ndcg.yaml"])[0]
    assert config["model"]["loss_args"] == yaml.safe_load(loss_config.read_text())["model"]["loss_args"]
    assert config["data"]["rerank_depth"] == 150 and config["data"]["strategy"] == "pairs"
    assert config["data"]["list_size"] == 4 and config["model"]["tokenization"]["passages"] == "maxp"
    assert config["trainer"]["accumulate_grad_batches"] == 8 and config["trainer"]["precision"] == "16-mixed"
    assert config["model"]["model_name"] == "bert-base-uncased"
    assert config["evaluation"]["selection"]["measure"] == "nDCG@20"
