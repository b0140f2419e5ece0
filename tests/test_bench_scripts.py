"""The benchmark scripts that docs/experiments/benchmarks.md's tables come from run and report what their tables
show (the figures themselves are measured by hand, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import MINILM_VOCAB, REPO, load_script, tiny_bert, tiny_bi_encoder


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home (MiniLM's vocabulary)")
def test_the_settings_bench_times_each_setting_at_each_length(tmp_path: Path) -> None:
    model = tiny_bert(tmp_path / "bert", real_vocabulary=True)
    done = subprocess.run([sys.executable, "scripts/benchmarks/bench_train.py", "settings", "--model", str(model),
                           "--list_size", "4", "--lengths", "8", "16", "--steps", "1", "--rounds", "1",
                           "--output", str(tmp_path / "settings.json")], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "settings.json").read_text())["results"]
    assert list(results) == ["8", "16"]
    for row in results.values():
        assert list(row) == ["stock", "encoder dropout 0", "frozen embeddings", "both"]
        assert all(seconds > 0 for seconds in row.values())


def test_the_startup_bench_reports_which_libraries_each_case_loaded(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "scripts/benchmarks/bench_startup.py", "--repeat", "1", "--output",
                           str(tmp_path / "startup.json")], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "startup.json").read_text())["results"]
    assert all(results[case]["loaded"] == "-" for case in results if case != "from rerank import Reranker")
    assert results["from rerank import Reranker"]["loaded"] == "torch"


def test_a_truncated_bert_is_the_first_layers_of_the_original(tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    original = tiny_bert(tmp_path / "bert", dropout=0.0)
    load_script("truncate_bert").main(["--model", str(original), "--layers", "1", "--out", str(tmp_path / "small")])
    small, full = AutoModel.from_pretrained(tmp_path / "small").eval(), AutoModel.from_pretrained(original).eval()
    assert small.config.num_hidden_layers == 1 and len(small.encoder.layer) == 1
    inputs = AutoTokenizer.from_pretrained(tmp_path / "small")(["wind tunnel heat"], return_tensors="pt")
    expected = full(**inputs, output_hidden_states=True).hidden_states[1]
    assert torch.allclose(small(**inputs).last_hidden_state, expected, atol=1e-6)
    with pytest.raises(SystemExit):
        load_script("truncate_bert").main(["--model", str(original), "--layers", "3", "--out", str(tmp_path / "x")])


def test_the_loader_bench_times_training_and_evaluation_loaders_per_worker_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    collection = load_script("make_collection")
    collection.make(collection.ROBUST04.scaled(0.002), tmp_path / "robust04-shaped", seed=3)
    load_script("bench_loaders").main([
        "--config", "robust04.yaml", "--config", str(tmp_path / "robust04-shaped" / "collection.yaml"),
        "--model.model_name", str(tiny_bert(tmp_path / "bert")), "--data.first_stage.backend", "bm25s",
        "--data.first_stage.index_dir", str(tmp_path / "index"), "--output_dir", str(tmp_path / "run"),
        "--data.eval_batch_size", "16", "--workers", "0", "1", "--batches", "3", "--output", str(tmp_path / "l.json")])
    report = json.loads((tmp_path / "l.json").read_text())
    rows = {(row["loader"], row["workers"]): row for row in report["rows"]}
    assert set(rows) == {(loader, workers) for loader in ("train", "validation") for workers in (0, 1)}
    for row in rows.values():
        assert row["batches"] == 3 and row["rows_per_s"] > 0 and row["rows"] >= row["pairs"] > 0
        assert row["tokens_per_row"] <= 512
    assert rows["train", 0]["pairs"] == 3 * 4  # robust04.yaml: one list of 4 documents a batch
    assert rows["validation", 1]["pairs"] == 3 * 16


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home (MiniLM's vocabulary)")
def test_the_deployed_ranker_bench_times_the_pure_and_the_fused_ranker(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    report = load_script("bench_deployed").main([
        "--model", str(tiny_bert(tmp_path / "bert", real_vocabulary=True)), "--bi_encoder",
        str(tiny_bi_encoder(tmp_path / "bi")), "--queries", "3", "--depth", "5", "--max_length", "32", "--repeats",
        "1", "--output", str(tmp_path / "deployed.json")])
    assert json.loads((tmp_path / "deployed.json").read_text()) == json.loads(json.dumps(report))
    assert report["pairs"] == 15 and len(report["results"]) == 3
    assert all(result["pairs_per_second"] > 0 for result in report["results"].values())
    assert set(report["bi_encoder_share"]) == {"documents embedded", "document embeddings cached"}


def test_the_shape_collections_are_made_of_the_shared_texts(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    for name in ("scifact", "cranfield"):
        (shared / name).mkdir(parents=True)
    scifact = [{"doc_id": str(d), "title": f"T{d}", "text": " ".join(f"Sentence {i} of doc {d}." for i in range(7))}
               for d in range(2)] + [{"doc_id": "9", "title": "", "text": "One. Two."}]  # 7 sentences: eligible
    scifact.append({"doc_id": "long", "title": "", "text": "word " * 50})  # a single sentence: not eligible
    (shared / "scifact" / "docs.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in scifact))
    (shared / "scifact" / "queries.test.tsv").write_text("5\ta claim\n")
    (shared / "scifact" / "qrels.test.txt").write_text("5 0 9 1\n")
    (shared / "cranfield" / "docs.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in [
        {"doc_id": "1", "title": "wing flow .", "text": "wing flow . long text"},
        {"doc_id": "2", "title": "heat", "text": "heat  transfer"}, {"doc_id": "3", "title": "drag", "text": "drag"}]))
    (shared / "cranfield" / "queries.tsv").write_text("1\twhat flow\n2\twhat heat\n")
    (shared / "cranfield" / "qrels.txt").write_text("1 0 1 3\n1 0 2 0\n2 0 3 1\n2 0 2 2\n2 0 1 4\n")
    (shared / "cranfield" / "source_docs.tsv").write_text("query_id\tsource_doc_id\n1\t2\n2\t2\n")
    figures = load_script("shape_collections").main(["--shared", str(shared), "--out", str(tmp_path / "out"),
                                                     "--queries", "1"])
    out = tmp_path / "out"
    (qid, query), = (line.split("\t") for line in (out / "long-queries" / "queries.tsv").read_text().splitlines())
    doc = qid[1:]
    assert query == " ".join(f"Sentence {i} of doc {doc}." for i in range(3))
    kept = {d["doc_id"]: d["text"] for d in map(json.loads, (out / "long-queries" / "docs.jsonl").open())}
    assert kept[doc] == " ".join(f"Sentence {i} of doc {doc}." for i in range(3, 7)) and kept["9"] == "One. Two."
    assert (out / "long-queries" / "qrels.txt").read_text() == f"{qid} 0 {doc} 1\n"
    short = (out / "short-documents" / "docs.jsonl").read_text().splitlines()
    assert json.loads(short[0])["text"] == "wing flow"
    assert (out / "short-documents" / "qrels.txt").read_text().splitlines()[0] == "1 0 1 3"
    # query-by-document: document 2 (both queries were written from it) is the query, judged by their union (the
    # highest gain), and is no longer a document
    assert (out / "query-by-document" / "queries.tsv").read_text() == "d2\theat transfer\n"
    assert (out / "query-by-document" / "qrels.txt").read_text() == "d2 0 1 4\nd2 0 3 1\n"
    assert [d["doc_id"] for d in map(json.loads, (out / "query-by-document" / "docs.jsonl").open())] == ["1", "3"]
    abstracts = [d["text"] for d in map(json.loads, (out / "short-abstracts" / "docs.jsonl").open())]
    assert sorted(len(text.split()) for text in abstracts) == [2, 35, 35, 40]  # cut at 40 words
    assert figures["short-abstracts"]["median document words"] == 35
