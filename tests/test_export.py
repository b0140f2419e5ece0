"""Export and re-ranking: the exported folder through transformers, sentence-transformers and ONNX Runtime
gives the Lightning model's scores; ``rerank predict``, ``rerank export`` and the Reranker API; errors on bad
input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import numpy as np
import onnxruntime
import pytest
import torch
from helpers import CRANFIELD, MINILM_VOCAB, cranfield_workdir, tiny_bert
from sentence_transformers import CrossEncoder as SentenceTransformersCrossEncoder
from test_training import REPO, TEST_ENV, data_module, rerank_module, trainer
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import rerank.inference.export as export_module
from rerank.cli import export as export_command
from rerank.cli import fit, predict
from rerank.config.optimizer import OptimizerSettings
from rerank.core.errors import UserError
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.trec import read_run
from rerank.evaluation.measures import evaluate
from rerank.inference.export import export
from rerank.inference.reranker import CandidateTexts, Reranker
from rerank.model.cross_encoder import CrossEncoderModel
from rerank.model.scorer import PairScorer
from rerank.training.lightning_module import RerankModule

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")
QUERIES = ["what similarity laws must be obeyed when constructing aeroelastic models",
           "heat flux to a blunt body", "wind tunnel interference"]
DOCUMENTS = ["experimental investigation of the aerodynamics of a wing in a slipstream . " * 5,
             "the heat transfer to a blunt body in hypersonic flow", "boundary layer",
             "wall interference in a two-dimensional wind tunnel with ventilated walls is studied"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[RerankModule, Path]:
    """A tiny BERT trained for 3 steps, and the folder it was exported to (with ONNX)."""
    folder = cranfield_workdir(tmp_path_factory.mktemp("export"))
    pl.seed_everything(0)
    data = data_module(folder, folder / "fit")
    module = rerank_module(data, loss="smoothi_ndcg", optimizer=OptimizerSettings(head_lr=1e-2))
    trainer(folder, max_steps=3).fit(module, datamodule=data)
    module.eval()
    return module, export(module.model, folder / "model", {"model": dict(module.hparams)}, onnx=True)


def pairs() -> tuple[list[str], list[str]]:
    return [q for q in QUERIES for _ in DOCUMENTS], [d for _ in QUERIES for d in DOCUMENTS]


def lightning_scores(module: RerankModule) -> np.ndarray:
    queries, documents = pairs()
    encoded = module.model.tokenizer(queries, documents, padding=True, truncation="only_second", max_length=128,
                                     return_tensors="pt")
    with torch.no_grad():
        return module.model(**encoded).numpy()


def test_exported_folder_gives_the_same_scores_everywhere(trained: tuple[RerankModule, Path]) -> None:
    module, folder = trained
    expected = lightning_scores(module)
    assert expected.std() > 1e-3  # the scores differ between pairs, so rankings are a real check
    queries, documents = pairs()
    hf_model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    encoded = AutoTokenizer.from_pretrained(folder)(queries, documents, padding=True, truncation="only_second",
                                                    max_length=128, return_tensors="pt")
    with torch.no_grad():
        through_transformers = hf_model(**encoded).logits.squeeze(-1).numpy()
    through_st = SentenceTransformersCrossEncoder(str(folder), max_length=128).predict(list(zip(queries, documents)))
    session = onnxruntime.InferenceSession(str(folder / "onnx" / "model.onnx"))
    names = {i.name for i in session.get_inputs()}
    (logits,) = session.run(["logits"], {k: v.numpy() for k, v in encoded.items() if k in names})
    through_onnx = logits[:, 0]
    through_reranker = np.array(Reranker.from_pretrained(str(folder), max_length=128).score_pairs(queries, documents))
    for scores, tolerance in ((through_transformers, 1e-5), (through_st, 1e-5), (through_reranker, 1e-5),
                              (through_onnx, 1e-4)):
        np.testing.assert_allclose(scores, expected, atol=tolerance, rtol=0)
        for query in range(len(QUERIES)):  # identical rankings per query
            rows = slice(query * len(DOCUMENTS), (query + 1) * len(DOCUMENTS))
            assert np.argsort(-scores[rows]).tolist() == np.argsort(-expected[rows]).tolist()
    card = (folder / "README.md").read_text()
    assert "smoothi_ndcg" in card and str(folder.parent / "bert") in card


def test_reranker_api_ranks_and_batches_across_queries(trained: tuple[RerankModule, Path]) -> None:
    module, folder = trained
    reranker = Reranker.from_pretrained(str(folder), batch_size=2, max_length=128)
    expected = lightning_scores(module)[: len(DOCUMENTS)]
    ranked = reranker.rerank(QUERIES[0], DOCUMENTS, top_k=2)
    assert [index for index, _ in ranked] == np.argsort(-expected)[:2].tolist()
    run = reranker.rerank_many(dict(enumerate(QUERIES)), {0: dict(enumerate(DOCUMENTS)), 2: {"x": DOCUMENTS[3]}})
    assert run[0] == pytest.approx(dict(enumerate(expected.tolist())), abs=1e-5) and list(run) == [0, 2]
    maxp = Reranker.from_pretrained(str(folder), max_length=32, max_query_length=8, passages="maxp", stride=4)
    passages = Reranker.from_pretrained(str(folder), max_length=32, max_query_length=8)
    long_document = DOCUMENTS[0]
    windows = maxp.tokenize.encode([QUERIES[0]], [long_document])[0]["input_ids"]
    texts = [maxp.model.tokenizer.decode(row[row.index(102) + 1: -1]) for row in windows]
    assert len(texts) == 4  # max_passages
    assert maxp.score(QUERIES[0], [long_document])[0] == pytest.approx(
        max(passages.score(QUERIES[0], texts)), abs=1e-4)


def test_rerank_many_reads_texts_one_chunk_at_a_time(trained: tuple[RerankModule, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, folder = trained
    reranker = Reranker.from_pretrained(str(folder), max_length=64, chunk_size=2)
    documents = {f"d{i}": text for i, text in enumerate(DOCUMENTS[:3])}
    read: list[str] = []
    scored_after: list[int] = []  # how many texts had been read when each chunk was scored
    score_chunk = reranker._score_chunk
    monkeypatch.setattr(reranker, "_score_chunk",
                        lambda queries, texts: scored_after.append(len(read)) or score_chunk(queries, texts))
    lazy = CandidateTexts(documents, SimpleNamespace(text=lambda doc: read.append(doc) or documents[doc]))
    run = reranker.rerank_many({"q": QUERIES[0]}, {"q": lazy})
    assert scored_after == [2, 3] and read == list(documents)
    assert run["q"] == pytest.approx(dict(zip(documents, reranker.score(QUERIES[0], DOCUMENTS[:3]))), abs=1e-6)


def test_interrupted_export_leaves_the_old_folder(trained: tuple[RerankModule, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    module, _ = trained
    target = export(module.model, tmp_path / "model")
    before = sorted(p.name for p in target.iterdir())
    monkeypatch.setattr(export_module, "ONNX_TOLERANCE", -1.0)  # every ONNX check fails
    with pytest.raises(ValueError, match="ONNX export: scores differ"):
        export(module.model, tmp_path / "model", onnx=True)
    with pytest.raises(ValueError):
        export(module.model, tmp_path / "fresh", onnx=True)
    assert sorted(p.name for p in target.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no half-written or temporary folders


def predict_arguments(folder: Path, run: Path, output: Path, *extra: str) -> list[str]:
    return ["--model.model_name", str(folder), "--run", str(run), "--data.collection", json.dumps(CRANFIELD),
            "--output_dir", str(output), "--trainer.logger", "false", "--trainer.enable_progress_bar", "false", *extra]


def test_predict_command_writes_a_complete_run_with_its_metrics(trained: tuple[RerankModule, Path],
                                                                tmp_path: Path) -> None:
    _, folder = trained
    bm25 = folder.parent / "bm25.run"
    report = predict.main(predict_arguments(folder, bm25, tmp_path, "--data.rerank_depth", "10"))
    written = read_run(tmp_path / "runs" / "reranked.run")
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    assert sorted(written) == sorted(read_run(bm25)) and len(written) == 225
    assert all(len(docs) == 10 for docs in written.values())
    assert report["reranker"] == pytest.approx(evaluate(written, qrels, list(report["reranker"])).mean, abs=1e-9)
    assert report["first_stage"]["nDCG@10"] == pytest.approx(
        evaluate(read_run(bm25), qrels, ["nDCG@10"]).mean["nDCG@10"])
    assert json.loads((tmp_path / "metrics.json").read_text())["reranker"] == report["reranker"]
    # the model's own tokenization (max_length 64 here, from its export): the Reranker API gives the same scores
    reranker = Reranker.from_pretrained(str(folder))
    assert reranker.tokenize.config.max_length == 64
    query = Collection(CollectionConfig(**CRANFIELD)).queries["1"]
    documents = Collection(CollectionConfig(**CRANFIELD)).documents
    expected = reranker.score(query, [documents.text(doc) for doc in written["1"]])
    assert list(written["1"].values()) == pytest.approx(expected, abs=1e-5)


def test_bad_models_and_runs_fail_clearly(trained: tuple[RerankModule, Path], tmp_path: Path) -> None:
    _, folder = trained
    bm25 = folder.parent / "bm25.run"
    with pytest.raises(OSError, match="'.*no-model' not found"):
        predict.main(predict_arguments(tmp_path / "no-model", bm25, tmp_path / "o"))
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "config.json").write_text("{not json")
    with pytest.raises((OSError, ValueError), match="corrupt"):
        Reranker.from_pretrained(str(corrupt))
    (tmp_path / "stray.run").write_text("1 Q0 184 1 2.0 x\n1 Q0 nosuchdoc 2 1.0 x\n")
    unknown = r"stray.run: 1 document ids are not in collection cranfield \(e.g. nosuchdoc\)"
    with pytest.raises(ValueError, match=unknown):
        predict.main(predict_arguments(folder, tmp_path / "stray.run", tmp_path / "o"))
    assert not (tmp_path / "o").exists()


def fit_checkpoint(module: RerankModule, folder: Path, steps: int = 3) -> Path:
    """``module`` saved as a rerank fit checkpoint after ``steps`` optimizer steps in the run directory ``folder``,
    with a metrics.json."""
    checkpoint = folder / "checkpoints" / "best.ckpt"
    checkpoint.parent.mkdir(parents=True)
    pl.Trainer(logger=False, max_steps=0).strategy.connect(module)
    state = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
             "pytorch-lightning_version": pl.__version__, "global_step": steps}
    module.on_save_checkpoint(state)  # what a fit's checkpoint holds beside the weights: its deployment
    torch.save(state, checkpoint)
    (folder / "metrics.json").write_text(json.dumps({"reranker": {"nDCG@10": 0.4321}}))
    return checkpoint


def test_export_cli_reads_a_fit_checkpoint(trained: tuple[RerankModule, Path], tmp_path: Path) -> None:
    module, _ = trained
    checkpoint = fit_checkpoint(module, tmp_path / "run")
    out = export_command.main(["--ckpt", str(checkpoint), "--out", str(tmp_path / "exported")])
    np.testing.assert_allclose(Reranker.from_pretrained(str(out), max_length=128).score_pairs(*pairs()),
                               lightning_scores(module), atol=1e-5)
    card = (out / "README.md").read_text()
    assert "0.4321" in card and "max_length: 64" in card  # the tokenization the checkpoint was trained with


def test_predict_with_a_fits_export_reproduces_its_test_run(tmp_path: Path) -> None:
    folder = cranfield_workdir(tmp_path)
    folds = {"scheme": "kfold", "count": 5, "seed": 42, "test": 1}
    config = {"model": {"model_name": str(folder / "bert"), "loss": "listnet",
                        "tokenization": {"max_length": 40, "max_query_length": 12}},
              "data": {"collection": CRANFIELD, "first_stage": {"backend": "run", "run": str(folder / "bm25.run")},
                       "folds": folds, "rerank_depth": 20, "list_size": 4, "batch_size": 2},
              "trainer": {"max_epochs": 1, "limit_train_batches": 3, "enable_progress_bar": False, "logger": False,
                          "num_sanity_val_steps": 0}}
    (tmp_path / "fit.yaml").write_text(json.dumps(config))
    fitted = fit.main(["--config", str(tmp_path / "fit.yaml"), "--output_dir", str(tmp_path / "fit")])
    # the collection, the candidates and the split only: the tokenization (40 tokens) comes from the export
    report = predict.main(predict_arguments(tmp_path / "fit" / "model", tmp_path / "fit" / "first_stage.trec",
                                            tmp_path / "predicted", "--data.folds", json.dumps(folds),
                                            "--data.predict_queries", "test", "--data.rerank_depth", "20"))
    expected, reranked = read_run(tmp_path / "fit" / "runs" / "test.run"), read_run(
        tmp_path / "predicted" / "runs" / "reranked.run")
    assert sorted(reranked) == sorted(expected)
    for qid, docs in expected.items():
        assert reranked[qid] == pytest.approx(docs, abs=1e-4)
    assert report["reranker"] == fitted["reranker"] and report["first_stage"] == fitted["first_stage"]


def test_predict_on_two_processes_writes_the_one_process_run(trained: tuple[RerankModule, Path],
                                                            tmp_path: Path) -> None:
    _, folder = trained
    runs = {}
    for devices in (1, 2):
        output = tmp_path / f"devices{devices}"
        arguments = predict_arguments(folder, folder.parent / "bm25.run", output, "--data.rerank_depth", "8",
                                      "--data.eval_batch_size", "16", "--trainer.accelerator", "cpu",
                                      "--trainer.devices", str(devices),
                                      "--trainer.strategy", "ddp" if devices > 1 else "auto")
        if devices == 1:  # the reference, in this process
            predict.main(arguments)
        else:
            done = subprocess.run([sys.executable, "-m", "rerank", "predict", *arguments], cwd=REPO, env=TEST_ENV,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
        runs[devices] = (output / "runs" / "reranked.run").read_text().splitlines()
        assert sorted(path.name for path in (output / "runs").iterdir()) == ["reranked.reranker.run",
                                                                             "reranked.run"]  # no shards left
    one, two = ([line.split() for line in lines] for lines in (runs[1], runs[2]))
    assert len(one) == len(two) == 225 * 8
    assert [row[:4] for row in one] == [row[:4] for row in two]  # the same pairs, in the same order
    assert max(abs(float(a[4]) - float(b[4])) for a, b in zip(one, two)) <= 1e-5


def test_export_killed_while_publishing_leaves_no_staging_folder(trained: tuple[RerankModule, Path],
                                                                 tmp_path: Path) -> None:
    module, _ = trained
    checkpoint = fit_checkpoint(module, tmp_path / "run")
    code = ("import faults, sys; from rerank.cli import main; "
            "faults.kill_before_replace('exported') if sys.argv[1] == 'kill' else None; main(sys.argv[2:])")
    arguments = ["export", "--ckpt", str(checkpoint), "--out", str(tmp_path / "exported")]
    killed = subprocess.run([sys.executable, "-c", code, "kill", *arguments], cwd=REPO, env=TEST_ENV,
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9
    staging = [path for path in tmp_path.iterdir() if path.name.startswith(".exported.tmp-")]
    assert len(staging) == 1 and not (tmp_path / "exported").exists()  # the export was complete, not published
    again = subprocess.run([sys.executable, "-c", code, "run", *arguments], cwd=REPO, env=TEST_ENV,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"removed 1 leftover(s) of interrupted writes: {staging[0]}" in again.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["exported", "run"]
    np.testing.assert_allclose(Reranker.from_pretrained(str(tmp_path / "exported"), max_length=128).score_pairs(
        *pairs()), lightning_scores(module), atol=1e-5)


def test_a_model_whose_weights_hold_no_head_is_refused_unless_asked_for(trained: tuple[RerankModule, Path],
                                                                       tmp_path: Path) -> None:
    """An encoder gets a freshly initialised head: predict, the Python API and export refuse to rank with it, in
    one line that says what to give, and score with it only when asked to, saying so in what they write."""
    raw, headed = tiny_bert(tmp_path / "raw", real_vocabulary=True), tiny_bert(tmp_path / "headed", with_head=True,
                                                                                real_vocabulary=True)
    assert not CrossEncoderModel.from_pretrained(str(raw)).head_trained
    assert CrossEncoderModel.from_pretrained(str(headed)).head_trained
    for load in (Reranker.from_pretrained, PairScorer.from_pretrained):
        with pytest.raises(UserError, match=r"raw: its weights hold no scoring head, .* pass --untrained_head "
                                            r"\(Python: untrained_head=True\)"):
            load(str(raw))
        assert load(str(headed)).model.head_trained
    reranker = Reranker.from_pretrained(str(raw), untrained_head=True)
    assert reranker.untrained_head and len(reranker.score("wind", ["a", "b"])) == 2
    _, folder = trained
    bm25 = folder.parent / "bm25.run"
    with pytest.raises(UserError, match="raw: its weights hold no scoring head"):
        predict.main(predict_arguments(raw, bm25, tmp_path / "refused", "--data.rerank_depth", "3"))
    assert not (tmp_path / "refused").exists()
    predict.main(predict_arguments(raw, bm25, tmp_path / "asked", "--data.rerank_depth", "3", "--untrained_head",
                                   "true"))
    for name in ("reranked.run", "reranked.reranker.run"):
        tags = {line.split()[-1] for line in (tmp_path / "asked" / "runs" / name).read_text().splitlines()}
        assert len(tags) == 1 and tags.pop().endswith("-untrained-head")
    module, _ = trained
    never_trained = fit_checkpoint(module, tmp_path / "run", steps=0)
    with pytest.raises(UserError, match="written before any training step, so its scoring head is as it was "
                                        "initialised"):
        export_command.main(["--ckpt", str(never_trained), "--out", str(tmp_path / "exported")])
    assert not (tmp_path / "exported").exists()
    export_command.main(["--ckpt", str(never_trained), "--out", str(tmp_path / "exported"), "--untrained_head"])
    assert (tmp_path / "exported" / "model.safetensors").is_file()


ONNX_BACKEND = ("transformers==4.57.6", "huggingface_hub==0.36.2", "tokenizers==0.22.1", "datasets==4.4.1",
                "optimum==2.1.0", "optimum-onnx==0.1.0")
"""What sentence-transformers' ONNX backend needs and this environment cannot hold beside transformers 5: Optimum's
ONNX Runtime classes (optimum-onnx) pin transformers below 4.58."""


def test_sentence_transformers_onnx_backend_loads_the_export_and_scores_as_rerank(trained: tuple[RerankModule, Path],
                                                                                  tmp_path: Path) -> None:
    """``CrossEncoder(folder, backend="onnx")`` (in a virtual environment of its own holding the versions it needs
    over this one's packages) reads ``onnx/model.onnx`` and gives rerank's scores, to 1e-5."""
    _, folder = trained
    environment = tmp_path / "onnx-backend"
    venv.create(environment, with_pip=True)
    python = str(environment / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "this-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([python, "-m", "pip", "install", "--no-deps", "-q", *ONNX_BACKEND],
                               capture_output=True, text=True, timeout=600)
    if installed.returncode != 0:
        pytest.skip(f"needs the package index for {', '.join(ONNX_BACKEND)}: {installed.stderr[-300:]}")
    queries, documents = pairs()
    code = ("import json, sys; from sentence_transformers import CrossEncoder; "
            "model = CrossEncoder(sys.argv[1], backend='onnx', max_length=128); "
            "print(json.dumps(model.predict(json.loads(sys.argv[2])).tolist()))")
    done = subprocess.run([python, "-c", code, str(folder), json.dumps(list(zip(queries, documents)))],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    through_backend = np.array(json.loads(done.stdout.splitlines()[-1]))
    ours = np.array(Reranker.from_pretrained(str(folder), max_length=128).score_pairs(queries, documents))
    np.testing.assert_allclose(through_backend, ours, atol=1e-5, rtol=0)
