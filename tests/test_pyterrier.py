"""rerank in a real PyTerrier pipeline: ``first_stage >> RerankTransformer`` scored and compared by
``pt.Experiment`` (ir_measures' measures, a baseline, Bonferroni's correction), against ``rerank predict``'s figures
and run on the same candidates. The first stage is a PyTerrier transformer over rerank's own BM25 run (PyTerrier's
BM25 needs its Java parts, which download on first use)."""

from __future__ import annotations

import json

import pytest
from helpers import CRANFIELD, MINILM_VOCAB, cranfield_workdir, tiny_bert

from rerank.cli import predict
from rerank.config.tokenization import TokenizationConfig
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.trec import read_run
from rerank.inference.export import export
from rerank.model.cross_encoder import CrossEncoderModel
from rerank.ranker.deployment import Deployment

pt = pytest.importorskip("pyterrier", reason="needs the pyterrier extra")
pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared (MiniLM's vocabulary, Cranfield)")
DEPTH = 10


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("pyterrier")
    workdir = cranfield_workdir(root / "work")
    model = CrossEncoderModel.from_pretrained(str(tiny_bert(root / "bert", with_head=True, real_vocabulary=True)),
                                              tokenization=TokenizationConfig(48, 12))
    deployment = Deployment("interpolated", {"reranker": 0.7, "first_stage": 0.3})  # mixes the first stage's score
    folder = export(model, root / "model", deployment=deployment)
    collection = Collection(CollectionConfig(**CRANFIELD))
    run = read_run(workdir / "bm25.run")
    rows = [{"qid": qid, "query": collection.queries[qid], "docno": doc, "text": collection.documents.text(doc),
             "score": score} for qid, docs in run.items()
            for doc, score in sorted(docs.items(), key=lambda item: -item[1])[:DEPTH]]
    import pandas as pd

    frame = pt.model.add_ranks(pd.DataFrame(rows))
    topics = pd.DataFrame([{"qid": qid, "query": collection.queries[qid]} for qid in run])
    qrels = pd.DataFrame([{"qid": qid, "docno": doc, "label": label} for qid, docs in collection.qrels.items()
                          for doc, label in docs.items()])
    return {"root": root, "workdir": workdir, "folder": folder, "frame": frame, "topics": topics, "qrels": qrels}


def test_a_pyterrier_pipeline_ranks_and_measures_as_rerank_predict(setup: dict) -> None:
    from pyterrier.measures import AP, RR, nDCG

    from rerank import RerankTransformer

    first_stage = pt.Transformer.from_df(setup["frame"])
    reranker = RerankTransformer.from_pretrained(str(setup["folder"]))
    table = pt.Experiment([first_stage, first_stage >> reranker], setup["topics"], setup["qrels"],
                          eval_metrics=[nDCG @ 10, AP, RR @ 10], names=["BM25", "rerank"], baseline=0,
                          correction="bonferroni")
    output = setup["root"] / "predicted"
    metrics = predict.main(["--model.model_name", str(setup["folder"]), "--run", str(setup["workdir"] / "bm25.run"),
                            "--data.collection", json.dumps(CRANFIELD), "--data.rerank_depth", str(DEPTH),
                            "--evaluation.metrics", "[nDCG@10, AP, RR@10]", "--evaluation.selection.measure", "nDCG@10",
                            "--output_dir", str(output),
                            "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"])
    ours = table.set_index("name").loc["rerank"]
    for measure in ("nDCG@10", "AP", "RR@10"):
        assert ours[measure] == pytest.approx(metrics["interpolated"][measure], abs=1e-5), measure
        assert table.set_index("name").loc["BM25"][measure] == pytest.approx(metrics["first_stage"][measure], abs=1e-5)
    assert "nDCG@10 p-value corrected" in table.columns  # Bonferroni, against the baseline
    ranked = (first_stage >> reranker).transform(setup["topics"])
    predicted = read_run(output / "runs" / "reranked.run")
    assert set(ranked["qid"]) == set(predicted)
    for row in ranked.itertuples():
        assert row.score == pytest.approx(predicted[row.qid][row.docno], abs=1e-5)
    first = ranked[ranked["qid"] == ranked["qid"].iloc[0]]
    assert list(first["rank"]) == list(range(len(first))) and first["score"].is_monotonic_decreasing


def test_a_frame_without_texts_is_refused_naming_the_column(setup: dict) -> None:
    from rerank import RerankTransformer

    reranker = RerankTransformer.from_pretrained(str(setup["folder"]))
    with pytest.raises(ValueError, match=r"the input frame has no text column .* put pt.text.get_text"):
        reranker.transform(setup["frame"].drop(columns=["text"]))
