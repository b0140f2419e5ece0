"""TREC run and qrels files: round trips and precise errors for malformed input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rerank.data.candidates import read_candidates
from rerank.data.trec import TrecFormatError, read_qrels, read_run, write_qrels, write_run
from rerank.evaluation.measures import evaluate


def test_run_round_trip_orders_by_score_then_doc_id(tmp_path: Path) -> None:
    run = {"2": {"b": 1.0, "a": 1.0, "c": 3.0}, "10": {"x": 0.5}}
    write_run(run, tmp_path / "run.trec", tag="t")
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert lines[0] == "2 Q0 c 1 3.0 t" and lines[1].startswith("2 Q0 a 2") and lines[2].startswith("2 Q0 b 3")
    assert lines[3].startswith("10 Q0 x 1")
    assert read_run(tmp_path / "run.trec") == run


def test_a_written_run_measures_as_the_run_in_memory(tmp_path: Path) -> None:
    """Scores closer than a millionth keep their order in the file, so trec_eval on a written run gives the figure
    the fit measured in memory (rounded to 6 decimals, they would tie and trec_eval would order them its own way)."""
    run = {"q": {"a": 0.5 + 1e-7, "b": 0.5, "c": float(np.float32(0.123456789)), "d": -2.5e-9}}
    qrels = {"q": {"a": 1}}
    write_run(run, tmp_path / "run.trec")
    written = read_run(tmp_path / "run.trec")
    assert written == run  # every score exactly
    assert evaluate(written, qrels, ["nDCG@10"]).per_query == evaluate(run, qrels, ["nDCG@10"]).per_query
    assert evaluate(written, qrels, ["nDCG@10"]).mean["nDCG@10"] == 1.0  # "a" first, as in memory


def test_qrels_round_trip_with_label_map_and_binarization(tmp_path: Path) -> None:
    (tmp_path / "qrels").write_text("1 0 d1 1\n1 0 d2 -1\n1 0 d3 4\n")
    assert read_qrels(tmp_path / "qrels", {-1: 0, 1: 4, 4: 1}) == {"1": {"d1": 4, "d2": 0, "d3": 1}}
    assert read_qrels(tmp_path / "qrels", {-1: 0, 1: 4, 4: 1}, binarize_at=2) == {"1": {"d1": 1, "d2": 0, "d3": 0}}
    write_qrels({"1": {"d1": 4}}, tmp_path / "out")
    assert read_qrels(tmp_path / "out") == {"1": {"d1": 4}}


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ("1 Q0 d1 1 0.5 t\n1 Q0 d2 2 0.4\n", 2, "expected 6 columns"),
        ("1 Q0 d1 1 high t\n", 1, "score 'high' is not a number"),
        ("1 Q0 d1 1 nan t\n", 1, "not finite"),
        ("1 Q0 d1 1 0.5 t\n\n1 Q0 d1 2 0.4 t\n", 3, r"duplicate pair \(1, d1\)"),
        ("1 Q0 d1 1 0.5 t\n7 Q0 d1 1 0.5 t\n", 2, "unknown query id '7'"),
    ],
)
@pytest.mark.parametrize("reader", [read_run, read_candidates])
def test_malformed_runs_name_file_line_and_text(tmp_path: Path, content: str, line: int, message: str,
                                                reader: Callable) -> None:
    path = tmp_path / "bad.run"
    path.write_text(content)
    with pytest.raises(TrecFormatError, match=message) as error:
        reader(path, queries={"1"})
    assert str(error.value).startswith(f"{path}:{line}: ")
    assert content.splitlines()[line - 1] in str(error.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [("1 0 d1\n", "expected 4 columns"), ("1 0 d1 yes\n", "relevance 'yes' is not an integer"),
     ("1 0 d1 1\n1 0 d1 2\n", "duplicate pair")],
)
def test_malformed_qrels_name_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.qrels"
    path.write_text(content)
    with pytest.raises(TrecFormatError, match=message):
        read_qrels(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nothing.run"):
        read_run(tmp_path / "nothing.run")


def test_interrupted_write_leaves_no_file(tmp_path: Path) -> None:
    class Boom(dict):
        def items(self):
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_run({"1": Boom()}, tmp_path / "run.trec")
    assert list(tmp_path.iterdir()) == []
