"""Training from Python (``rerank.train``, which ``rerank fit`` calls too) and the loggers a config names: the
judgment-free stage's losses and the fit's figures reach TensorBoard and MLflow (a local file store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import CRANFIELD, MINILM_VOCAB, cranfield_workdir, tiny_bi_encoder

import rerank
from rerank.core.run_directory import measures_of

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small staged fit: a 4-step stage of pseudo-queries taught by a tiny bi-encoder, then one epoch of 3 steps."""
    root = tmp_path_factory.mktemp("api")
    workdir = cranfield_workdir(root / "work")
    stage = {"train": [{"queries": "pseudo", "pseudo": {"count": 16},
                        "first_stage": {"backend": "bm25s", "index_dir": str(root / "index")}, "targets": "teacher",
                        "teacher": {"bi_encoder": str(tiny_bi_encoder(root / "bi-encoder"))}}], "max_steps": 4}
    content = {"model": {"model_name": str(workdir / "bert"), "loss": "listnet",
                         "tokenization": {"max_length": 48, "max_query_length": 12}},
               "pretrain": stage,
               "data": {"collection": CRANFIELD, "first_stage": {"backend": "run", "run": str(workdir / "bm25.run")},
                        "folds": {"scheme": "kfold", "count": 5, "test": 1}, "rerank_depth": 10, "list_size": 4,
                        "batch_size": 2},
               "evaluation": {"metrics": ["nDCG@10", "RR@10", "AP"], "selection": {"measure": "nDCG@10"}},
               "trainer": {"max_epochs": 1, "limit_train_batches": 3, "enable_progress_bar": False,
                           "num_sanity_val_steps": 0, "log_every_n_steps": 1}}
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(content))
    return path


def test_train_returns_the_runs_folder_and_metrics_and_tensorboard_sees_the_whole_run(
        config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rerank.train`` refuses a bad value before any work, as the command line does; a fit returns its folder,
    its metrics (metrics.json's) and its model; TensorBoard gets the stage's losses, the folds' and the test's."""
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=r"--data.folds.test: folds.test must be in \[1, 5\]; got 9"):
        rerank.train(config, {"data.folds.test": 9}, output_dir=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    board = {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": str(tmp_path)}}
    result = rerank.train(config, {"trainer.logger": board}, output_dir=tmp_path / "run")
    assert isinstance(result, rerank.FitResult) and result.folder == tmp_path / "run"
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert written.pop("deployment") == result.deployment
    assert written.pop("calibration") == result.calibration  # its figures, or (this tiny model) why it was refused
    assert written == result.metrics and list(measures_of(result.metrics["reranker"])) == ["nDCG@10", "RR@10", "AP"]
    assert result.model == tmp_path / "run" / "model" and (result.model / "model.safetensors").is_file()
    assert rerank.Reranker.from_pretrained(str(result.model), ranker="reranker").score("wind", ["tunnel"])
    scalars: dict[str, list[float]] = {}
    for path in (tmp_path / "lightning_logs").rglob("events.out.tfevents.*"):
        accumulator = event_accumulator.EventAccumulator(str(path))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend(event.value for event in accumulator.Scalars(tag))
    assert len(scalars["stage/loss"]) == 4 and scalars["train/loss"]  # each of the stage's steps, and the folds'
    assert "val/nDCG@10" in scalars
    assert scalars["test/reranker/nDCG@10"] == [pytest.approx(result.metrics["reranker"]["nDCG@10"], abs=1e-6)]


def test_mlflow_gets_the_stages_losses_and_the_fits_figures(config: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a local file store (MLflow 3 would have a database)
    store = f"file:{tmp_path / 'mlruns'}"
    flow = {"class_path": "lightning.pytorch.loggers.MLFlowLogger",
            "init_args": {"experiment_name": "rerank", "tracking_uri": store}}
    result = rerank.train(config, {"trainer.logger": flow}, output_dir=tmp_path / "run")
    client = mlflow.tracking.MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("rerank").experiment_id])
    logged = run.data.metrics  # MLflow's metric names have no "@": Lightning's logger leaves it out
    assert {"stage/loss", "train/loss", "val/nDCG10"} <= set(logged)
    assert logged["test/reranker/nDCG10"] == pytest.approx(result.metrics["reranker"]["nDCG@10"], abs=1e-6)
    assert len(client.get_metric_history(run.info.run_id, "stage/loss")) == 4  # each of the stage's steps
