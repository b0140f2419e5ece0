"""scripts/studies/comparison/delta_by_length.py: per-query differences of two runs against their candidates' length, on
a collection whose nDCG@10 values, lengths and rank correlation are worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import load_script, tiny_bert

from rerank.data.trec import write_run

LENGTHS = {"d0": 2, "d1": 4, "d2": 6, "d3": 20, "d4": 30, "d5": 40}  # tokens: one word of the tiny vocabulary each
CANDIDATES = {"1": ["d0", "d1", "d2"], "2": ["d3", "d4", "d5"], "3": ["d0", "d3", "d4"]}  # first-stage order
RELEVANT = {"1": "d0", "2": "d5", "3": "d4"}


def test_differences_lengths_and_rows_read_whole(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"doc_id": doc, "text": " ".join(["wind"] * n)}) + "\n"
                                                 for doc, n in LENGTHS.items()))
    (tmp_path / "queries.tsv").write_text("1\theat\n2\tflux\n3\tlaws\n")
    (tmp_path / "qrels.txt").write_text("".join(f"{q} 0 {doc} 1\n" for q, doc in RELEVANT.items()))
    collection = {name: str(tmp_path / name) for name in ("docs.jsonl", "queries.tsv", "qrels.txt")}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"model_name": str(tiny_bert(tmp_path / "bert"))},
        "data": {"collection": {"docs": collection["docs.jsonl"], "queries": collection["queries.tsv"],
                                "qrels": collection["qrels.txt"], "cache_dir": str(tmp_path / "arrow")}}}))
    write_run({q: {doc: 3.0 - i for i, doc in enumerate(docs)} for q, docs in CANDIDATES.items()},
              tmp_path / "first_stage.run")
    # A: the relevant document 1st, 3rd, 3rd (nDCG@10 1, 1/log2(4), 1/log2(4)); B: 1st, 1st, 2nd (1, 1, 1/log2(3))
    write_run({q: {doc: 3.0 - i for i, doc in enumerate(docs)} for q, docs in CANDIDATES.items()}, tmp_path / "a.run")
    write_run({"1": {"d0": 3, "d1": 2, "d2": 1}, "2": {"d5": 3, "d3": 2, "d4": 1}, "3": {"d0": 3, "d4": 2, "d3": 1}},
              tmp_path / "b.run")
    load_script("delta_by_length").main(["--config", str(config), "--run", str(tmp_path / "a.run"),
                                         str(tmp_path / "b.run"), "--first-stage", str(tmp_path / "first_stage.run"),
                                         "--depth", "3", "--rows", "16:2"])
    shown = capsys.readouterr().out
    mean = (0 + 0.5 + (1 / 1.5849625007211562 - 0.5)) / 3
    assert f"3 queries; mean difference B - A {mean:+.4f}" in shown
    # medians of the candidates' lengths 4, 30 and 20 order the queries as their differences 0, 0.5 and 0.13 do
    assert "Spearman rho (difference, median candidate length) = +1.000" in shown
    # 16-token rows, queries of 1 token: documents of at most 12 tokens read whole, 4 of the 9 candidates
    assert "rows of 16 tokens, queries cut at 2: 44.4% of the candidates read whole" in shown
