"""int8 and bfloat16 scoring on a CPU, gated at export on the fit's validation candidates
(rerank.inference.fast_scoring)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CRANFIELD, MINILM_VOCAB, cranfield_workdir
from test_training import fit_config

from rerank.cli import fit
from rerank.core.errors import UserError
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.trec import read_run
from rerank.evaluation.measures import evaluate
from rerank.inference import fast_scoring
from rerank.inference.export import export
from rerank.inference.fast_scoring import GATE_NDCG, Gate, gate
from rerank.inference.reranker import Reranker
from rerank.model.cross_encoder import CrossEncoderModel
from rerank.model.scorer import PairScorer

QRELS = {"q1": {"a": 2, "b": 1}, "q2": {"c": 1}}
REFERENCE = {"q1": {doc: 10.0 - i for i, doc in enumerate("abcdefghijkl")},
             "q2": {doc: 10.0 - i for i, doc in enumerate("cdefghijklmn")}}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if MINILM_VOCAB is None:
        pytest.skip("needs ../shared (MiniLM's vocabulary, Cranfield)")
    return cranfield_workdir(tmp_path_factory.mktemp("fast"))


def test_a_fast_path_that_keeps_the_ranking_passes_and_one_that_drifts_fails_by_what_it_lost() -> None:
    shifted = {qid: {doc: score + 0.001 for doc, score in docs.items()} for qid, docs in REFERENCE.items()}
    same = gate("int8", REFERENCE, shifted, QRELS)
    assert same.passed and same.tau == pytest.approx(1.0) and same.fast == same.reference and same.queries == 2
    swapped = {qid: dict(docs) for qid, docs in REFERENCE.items()}
    swapped["q1"]["a"], swapped["q1"]["c"] = swapped["q1"]["c"], swapped["q1"]["a"]  # the best document to third
    drifted = gate("int8", REFERENCE, swapped, QRELS)
    expected = evaluate(swapped, QRELS, ["nDCG@10"]).mean["nDCG@10"]
    assert drifted.fast == pytest.approx(expected) and drifted.reference == pytest.approx(1.0)
    # one swap of positions 1 and 3 among 10: 3 of the 45 pairs discordant, tau = (42 - 3) / 45 on q1
    assert drifted.tau == pytest.approx((1 + 39 / 45) / 2)
    assert not drifted.passed and abs(drifted.fast - drifted.reference) > GATE_NDCG
    assert "int8 fails the gate on 2 validation queries" in drifted.describe()
    with pytest.raises(UserError, match=r"precision int8: m int8 fails the gate .* \(-0\.\d{4}; at most 0\.002"):
        fast_scoring.check_gate("int8", {"int8": drifted}, "m")
    fast_scoring.check_gate("int8", {}, "m")  # not measured (a model rerank did not export): allowed


def test_int8_and_bf16_scores_follow_float32s(workdir: Path) -> None:
    """On MiniLM's real weights (a random head): int8 within the tolerance its quantization gives such a model, bf16
    closer; a tiny random BERT's activations are no test of either."""
    torch.manual_seed(0)
    head = torch.randn(1, 384) / 384**0.5

    def scores(precision: str) -> np.ndarray:
        model = CrossEncoderModel.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")
        model.model.classifier.weight.data = head.clone()
        return np.array(PairScorer(model, precision=precision, device="cpu").score_pairs(queries, documents))

    collection = Collection(CollectionConfig(**CRANFIELD))
    queries = [collection.queries[qid] for qid in sorted(collection.queries, key=int)[:48]]
    documents = [text for _, (_, text) in zip(range(48), collection.documents.iter_texts())]
    reference = scores("32")
    for precision, correlation in (("int8", 0.93), ("bf16", 0.99)):
        assert np.corrcoef(scores(precision), reference)[0, 1] > correlation, precision
    with pytest.raises(ValueError, match="precision int8 scores on a CPU"):
        PairScorer(CrossEncoderModel.from_pretrained(str(workdir / "bert")), precision="int8", device="meta")


def test_a_scorer_in_int8_or_a_cast_precision_leaves_the_model_it_was_given_in_float32(workdir: Path) -> None:
    model = CrossEncoderModel.from_pretrained(str(workdir / "bert"))
    pairs = (["wind tunnel", "boundary layer"], ["a wind tunnel test", "laminar flow"])
    before = PairScorer(model, device="cpu").score_pairs(*pairs)
    for precision in ("int8", "bf16-true"):
        converted = PairScorer(model, precision=precision, device="cpu")
        assert converted.model is not model and converted.model.tokenization == model.tokenization
    layers = {type(module) for module in model.model.modules()}
    assert torch.nn.Linear in layers and not any("quantized" in layer.__module__ for layer in layers)
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}
    assert PairScorer(model, device="cpu").score_pairs(*pairs) == before


def exported(workdir: Path, folder: Path, gates: dict[str, Gate]) -> Path:
    model = CrossEncoderModel.from_pretrained(str(workdir / "bert"))
    model.head_trained = True
    return export(model, folder, gates=gates)


def test_auto_picks_the_fastest_path_that_passed_and_this_cpu_runs_fast_else_float32(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    passed, failed = Gate("int8", 0.40, 0.401, 0.99, 45), Gate("int8", 0.40, 0.39, 0.95, 45)
    folder = exported(workdir, tmp_path / "passed", {"int8": passed})
    assert json.loads((folder / "config.json").read_text())["rerank"]["fast_scoring"]["int8"]["passed"] is True
    assert "| int8 | 0.4010 | 0.4000 | 0.9900 | 45 | passed |" in (folder / "README.md").read_text()
    monkeypatch.setattr(fast_scoring, "cpu_has_int8_dot", lambda: True)
    fast = Reranker.from_pretrained(str(folder), precision="auto", device="cpu", untrained_head=True)
    assert fast.precision == "int8" and "passed its gate" in fast.precision_reason
    monkeypatch.setattr(fast_scoring, "cpu_has_int8_dot", lambda: False)  # a CPU without VNNI: float32
    plain = Reranker.from_pretrained(str(folder), precision="auto", device="cpu", untrained_head=True)
    assert plain.precision == "32" and "no int8 dot-product instructions" in plain.precision_reason
    refused = exported(workdir, tmp_path / "failed", {"int8": failed})
    assert Reranker.from_pretrained(str(refused), precision="auto", device="cpu", untrained_head=True).precision == "32"
    with pytest.raises(UserError, match="precision int8: this model int8 fails the gate"):
        Reranker.from_pretrained(str(refused), precision="int8", device="cpu", untrained_head=True)


def test_a_fit_gates_its_fast_paths_on_its_validation_candidates_and_the_export_carries_them(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    config = fit_config(workdir, tmp_path / "config.yaml")
    fit.main(["--config", str(config), "--output_dir", str(tmp_path / "run")])
    model = tmp_path / "run" / "model"
    figures = json.loads((model / "config.json").read_text())["rerank"]["fast_scoring"]["int8"]
    run = read_run(tmp_path / "run" / "runs" / "validation.run")  # the fit's own float32 run of the same weights
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    judged = {qid: qrels[qid] for qid in run if qid in qrels}
    assert figures["queries"] == len(judged) > 0
    assert figures["reference"] == pytest.approx(evaluate(run, judged, ["nDCG@10"]).mean["nDCG@10"], abs=1e-4)
    assert figures["passed"] == (abs(figures["fast"] - figures["reference"]) <= GATE_NDCG and figures["tau"] >= 0.98)
    assert "## Faster scoring on a CPU" in (model / "README.md").read_text()
