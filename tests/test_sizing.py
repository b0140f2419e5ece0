"""Rows sized to the collection: ``max_length: auto`` and ``max_query_length: auto`` (rerank.model.sizing), and the
warning that says how many queries a budget cuts and by how much."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from helpers import WORDS, tiny_bert

from rerank.cli.arguments import RerankCLI
from rerank.config.tokenization import TokenizationConfig
from rerank.data.pseudo_queries import are_paragraphs
from rerank.model.cross_encoder import CrossEncoderModel, load_tokenizer
from rerank.model.sizing import cut_queries, percentile, query_lengths, size_tokenization, sized
from rerank.model.tokenization import PairTokenizer
from rerank.training.datamodule import RerankDataModule

QUERIES = {"1": "wind tunnel", "2": " ".join(WORDS), "3": " ".join(WORDS[:6])}  # 2, 10 and 6 tokens


def test_auto_is_the_longest_query_at_most_half_a_row() -> None:
    auto = TokenizationConfig(max_length=32, max_query_length="auto")
    assert sized(auto, [2, 10, 6]).max_query_length == 10
    assert sized(auto, [2, 40]).max_query_length == 16  # the document keeps half of each row
    assert sized(auto, []).max_query_length == 1
    numeric = TokenizationConfig(max_length=32, max_query_length=8)
    assert sized(numeric, [40]) is numeric
    with pytest.raises(ValueError, match="max_query_length must be auto or lie in 1..max_length-4"):
        TokenizationConfig(max_length=32, max_query_length="long")


def test_an_auto_row_reads_what_the_teacher_reads_of_nine_documents_in_ten_within_the_cap() -> None:
    auto = TokenizationConfig(max_length="auto", max_query_length="auto")
    documents = [10 * length for length in range(1, 11)]  # 10 .. 100 tokens: the 90th percentile is 90
    assert percentile(documents, 0.9) == 90 and percentile([], 0.9) == 0 and percentile([7], 0.9) == 7
    # 20 (the longest query) + 90 + 3 special tokens = 113, rounded up to a multiple of 32
    assert (sized(auto, [5, 20], documents).max_length, sized(auto, [5, 20], documents).max_query_length) == (128, 20)
    assert sized(auto, [5, 20], documents, teacher_reads=40).max_length == 64  # 20 + 40 + 3: the teacher reads 40
    assert sized(auto, [5, 20], [4]).max_length == 64  # never below 64
    short = sized(auto, [5, 57], [24])  # short documents: the row holds the longest query whole, beyond half of it
    assert (short.max_length, short.max_query_length) == (96, 57)
    assert sized(auto, [5, 300], [1000]).max_length == 256  # the cap; the query takes at most half of it
    assert sized(auto, [5, 300], [1000]).max_query_length == 128
    capped = TokenizationConfig(max_length="auto", max_query_length=8, max_length_cap=96)
    assert (sized(capped, [50], [500]).max_length, sized(capped, [50], [500]).max_query_length) == (96, 8)
    with pytest.raises(ValueError, match="max_length_cap must be >= 64; got 32"):
        TokenizationConfig(max_length="auto", max_length_cap=32)


def test_an_auto_cap_reads_paragraph_queries_nearly_whole_and_other_queries_as_before() -> None:
    auto = TokenizationConfig(max_length="auto", max_query_length="auto")
    titles, paragraphs = sized(auto, [5, 300], [1000]), sized(auto, [5, 300], [1000], paragraphs=True)
    assert (titles.max_length, titles.max_query_length, titles.max_length_cap) == (256, 128, 256)
    assert (paragraphs.max_length, paragraphs.max_query_length, paragraphs.max_length_cap) == (384, 192, 384)
    assert sized(auto, [5, 40], [100], paragraphs=True).max_length == 160  # the cap bounds; it does not pad
    given = TokenizationConfig(max_length="auto", max_query_length="auto", max_length_cap=256)
    assert sized(given, [5, 300], [1000], paragraphs=True).max_length == 256  # a number given is kept
    assert are_paragraphs([30, 40, 10]) and not are_paragraphs([24, 24, 100]) and not are_paragraphs([])


def test_the_sizing_line_says_why_the_cap_is_what_it_is(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = str(tiny_bert(tmp_path / "bert"))
    auto = TokenizationConfig(max_length="auto", max_query_length="auto")
    paragraph = " ".join(WORDS * 3)  # 30 words
    with caplog.at_level(logging.INFO, logger="rerank.model.sizing"):
        long = size_tokenization(auto, model, [paragraph, paragraph, "wind tunnel"], None, "x")
        short = size_tokenization(auto, model, ["wind tunnel", " ".join(WORDS)], None, "y")
    assert (long.max_length_cap, short.max_length_cap) == (384, 256)
    assert "the cap is 384 (auto: the queries are paragraphs)" in caplog.messages[0]
    assert "the cap is 256 (auto)" in caplog.messages[1]


def test_an_unsized_budget_is_refused_where_pairs_are_made(tmp_path: Path) -> None:
    auto = TokenizationConfig(max_length=32, max_query_length="auto")
    tokenizer = load_tokenizer(str(tiny_bert(tmp_path / "bert")))
    with pytest.raises(ValueError, match="max_length and max_query_length auto must be sized from a collection"):
        PairTokenizer(tokenizer, auto)


def test_the_cut_warning_counts_the_queries_and_the_tokens_cut(tmp_path: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_bert(tmp_path / "bert")))
    lengths = query_lengths(tokenizer, list(QUERIES.values()), batch=2)
    assert lengths == [2, 10, 6]
    assert cut_queries(lengths, 10, "x") is None
    assert cut_queries(lengths, 4, "the test queries of x") == (
        "the test queries of x: 2 of 3 queries are longer than model.tokenization.max_query_length (4 tokens) and "
        "are cut, by 2 to 6 tokens (mean 4.0): the cross-encoder does not read those words; raise "
        "model.tokenization.max_length (max_length_cap when it is auto) to keep them (max_query_length: auto gives "
        "queries up to half of it)")


@pytest.fixture
def collection(tmp_path: Path) -> dict[str, str]:
    docs = {f"d{i}": " ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))}
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"doc_id": d, "text": t}) + "\n" for d, t in docs.items()))
    (tmp_path / "queries.tsv").write_text("".join(f"{qid}\t{text}\n" for qid, text in QUERIES.items()))
    (tmp_path / "qrels.txt").write_text("1 0 d0 1\n2 0 d2 1\n3 0 d4 1\n")
    return {"docs": str(tmp_path / "docs.jsonl"), "queries": str(tmp_path / "queries.tsv"),
            "qrels": str(tmp_path / "qrels.txt"), "cache_dir": str(tmp_path / "arrow")}


def built(tmp_path: Path, collection: dict[str, str], *options: str) -> RerankCLI:
    """``rerank fit``'s model and data module on the local collection (nothing trained)."""
    arguments = ["--data.collection", json.dumps(collection), "--model.model_name", str(tiny_bert(tmp_path / "bert")),
                 "--model.tokenization.max_length", "24", "--data.first_stage.backend", "bm25s",
                 "--data.first_stage.index_dir", str(tmp_path / "index"), "--data.first_stage.retrieval_depth", "10",
                 "--data.rerank_depth", "10", "--data.folds.count", "3", "--output_dir", str(tmp_path / "out"),
                 "--trainer.logger", "false", *options]
    return RerankCLI(arguments, prog="rerank fit", description="")


def test_fit_sizes_an_auto_budget_from_the_collection_for_the_model_and_the_data(
        tmp_path: Path, collection: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    cli = built(tmp_path, collection, "--model.tokenization.max_query_length", "auto")
    assert cli.model.model.tokenization.max_query_length == 10  # the longest of the three queries
    assert cli.datamodule.tokenization == cli.model.model.tokenization
    assert "model.tokenization auto: rows of 24 tokens (max_length 24), queries up to 10 (the longest of the 3 of" in (
        caplog.text)
    cli.model.model.save_pretrained(str(tmp_path / "export"))  # an export keeps the lengths it was trained with
    auto = TokenizationConfig(max_length="auto", max_query_length="auto")
    kept = size_tokenization(auto, str(tmp_path / "export"), ["one"], None, "x")
    assert (kept.max_length, kept.max_query_length) == (24, 10)
    assert CrossEncoderModel.from_pretrained(str(tmp_path / "export")).tokenization.max_query_length == 10


def test_queries_cut_by_the_budget_are_reported_once_per_split(tmp_path: Path, collection: dict[str, str],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    data: RerankDataModule = built(tmp_path, collection, "--model.tokenization.max_query_length", "4").datamodule
    data.prepare_data()
    data.evaluation_lists("test")
    data.evaluation_lists("test")
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    cut = [message for message in warnings if "longer than model.tokenization.max_query_length (4 tokens)" in message]
    assert len(cut) == 1 and cut[0].startswith(f"the test queries of {Path(collection['docs']).parent.name}: ")


def test_fit_sizes_auto_rows_from_the_documents_and_the_teacher(tmp_path: Path, collection: dict[str, str],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    teacher = json.dumps([{"targets": "both", "teacher": {"bi_encoder": "a/bi-encoder", "max_length": 10}}])
    cli = built(tmp_path, collection, "--model.tokenization.max_length", "auto",
                "--model.tokenization.max_query_length", "auto", "--data.train", teacher)
    # queries up to 10 tokens; the documents all have 10 (their 90th percentile), of which the teacher reads 8:
    # 10 + 8 + 3 = 21, below the floor of 64
    assert (cli.model.model.tokenization.max_length, cli.model.model.tokenization.max_query_length) == (64, 10)
    assert cli.datamodule.tokenization == cli.model.model.tokenization
    assert "documents: 9 in 10 of 10 have at most 10 tokens, the teacher reads 8, the cap is 256" in caplog.text
