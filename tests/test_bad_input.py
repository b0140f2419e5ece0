"""The bad-input corpus: each row a small broken input or option, the command it is fed to, the message fragment
it must get, and the check that nothing was written; plus inputs that must be accepted (byte-order marks).

Commands are called as the ``rerank`` console script calls them (:func:`rerank.cli.main`): a user mistake prints
one line, ``error: ...``, and exits with status 2, without a traceback.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers import MINILM_VOCAB, REPO, WORDS, tiny_bert, tiny_bi_encoder

from rerank import cli
from rerank.config.teacher import TeacherConfig
from rerank.data.trec import write_run
from rerank.ranker.deployment import Deployment

BOM = "\ufeff"
DOCS = {f"d{i}": " ".join(WORDS[i: i + 4] * 3) for i in range(6)}
QUERIES = {"1": "wind tunnel", "2": "heat flux", "3": "similarity laws", "4": "aircraft model", "5": "query document",
           "6": "tunnel heat"}
QRELS = {"1": {"d0": 2, "d1": 1}, "2": {"d2": 1}, "3": {"d4": 1}, "4": {"d6": 0, "d5": 1}, "5": {"d5": 1},
         "6": {"d1": 1}}


@dataclass
class Files:
    """A small local collection and a tiny model in ``root``."""

    root: Path
    docs: Path = field(init=False)
    queries: Path = field(init=False)
    qrels: Path = field(init=False)
    model: Path = field(init=False)

    def __post_init__(self) -> None:
        self.docs, self.queries = self.root / "docs.jsonl", self.root / "queries.tsv"
        self.qrels = self.root / "qrels.txt"
        self.write_docs()
        self.queries.write_text("".join(f"{qid}\t{text}\n" for qid, text in QUERIES.items()))
        self.qrels.write_text("".join(f"{q} 0 {d} {r}\n" for q, judged in QRELS.items() for d, r in judged.items()))
        self.model = tiny_bert(self.root / "bert")

    def write_docs(self, extra: str = "", prefix: str = "") -> None:
        lines = "".join(json.dumps({"doc_id": doc, "text": text}) + "\n" for doc, text in DOCS.items())
        self.docs.write_text(prefix + lines + extra)

    def collection(self, **changes: str) -> str:
        files = {"docs": str(self.docs), "queries": str(self.queries), "qrels": str(self.qrels),
                 "cache_dir": str(self.root / "arrow")}
        return json.dumps({**files, **changes})

    def arguments(self, command: str, *options: str) -> list[str]:
        common = ["--data.collection", self.collection(), "--data.first_stage.backend", "bm25s",
                  "--data.first_stage.index_dir", str(self.root / "idx"), "--data.first_stage.retrieval_depth", "5",
                  "--output_dir", str(self.root / "out")]
        if command == "fit":
            common += ["--model.model_name", str(self.model), "--model.tokenization.max_length", "32",
                       "--model.tokenization.max_query_length", "8", "--data.folds.count", "3",
                       "--data.rerank_depth", "5", "--data.list_size", "4", "--trainer.max_steps", "1",
                       "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]
        return [command, *common, *options]


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


def fails(files: Files, arguments: list[str], capsys: pytest.CaptureFixture) -> str:
    """Run a command that must fail on bad input: exit status 2, one error line, nothing written; its stderr."""
    with pytest.raises(SystemExit) as exited:
        cli.main(arguments)
    error = capsys.readouterr().err
    assert exited.value.code == 2, error
    assert "Traceback" not in error
    assert error.count("error:") == 1, error  # said once
    assert not (files.root / "out").exists(), sorted(p.name for p in (files.root / "out").iterdir())
    return " ".join(error.split())


STAGE_SOURCE = {"queries": "pseudo", "targets": "teacher", "teacher": {"run": "teacher.run"}}
"""A judgment-free stage's source, for the rows that give ``--pretrain``."""
ROWS = [
    # (row, command, options, expected fragment)
    ("negative encoder learning rate", "fit", ["--model.optimizer.encoder_lr=-1e-5"],
     "model.optimizer.encoder_lr must be > 0"),
    ("zero encoder learning rate", "fit", ["--model.optimizer.encoder_lr", "0"],
     "model.optimizer.encoder_lr must be > 0"),
    ("negative head learning rate", "fit", ["--model.optimizer.head_lr=-0.001"], "model.optimizer.head_lr must be > 0"),
    ("lists of 1 with a listwise head", "fit", ["--data.list_size", "1"],
     "data.list_size 1: the loss head 'smoothi_ndcg' (model.loss) compares candidates"),
    ("re-rank depth beyond the first stage's", "fit", ["--data.rerank_depth", "10"],
     "data.rerank_depth (10) exceeds data.first_stage.retrieval_depth (5)"),
    ("batch size 0", "fit", ["--data.batch_size", "0"], "data.batch_size must be >= 1; got 0"),
    ("two folds", "fit", ["--data.folds.count", "2"], "folds.count must be >= 3; got 2"),
    ("gradient accumulation 0", "fit", ["--trainer.accumulate_grad_batches", "0"], "accumulate_grad_batches"),
    ("a source weight of 0", "fit", ["--data.train", '[{"weight": 0}]'], "data.train[0]: weight must be > 0"),
    ("an unknown loss", "fit", ["--model.loss", "smoothi"], "unknown loss 'smoothi'"),
    ("a selection measure not reported", "fit", ["--evaluation.metrics", "[MAP]"],
     "evaluation.selection.measure 'nDCG@20' must be one of evaluation.metrics ['MAP']"),
    ("a fusion deployed unmeasured", "fit", ["--evaluation.selection.deploy", "fused"],
     "evaluation.selection.deploy fused is a fusion, measured only with evaluation.selection.interpolate: true"),
    ("an unknown check of the deployed ranker", "fit", ["--evaluation.selection.check", "two_se"],
     "evaluation.selection.check must be one of one_se, cross_fit; got 'two_se'"),
    ("an unknown setting of the stage's optimizer", "fit",
     ["--pretrain", json.dumps({"train": [STAGE_SOURCE], "optimizer": {"encoder_rate": 1e-5}})],
     "pretrain.optimizer.encoder_rate: not a setting of the optimizer; give one of encoder_lr, head_lr, weight_decay, "
     "warmup"),
    ("zero stage learning rate", "fit",
     ["--pretrain", json.dumps({"train": [STAGE_SOURCE], "optimizer": {"encoder_lr": 0}})],
     "pretrain.optimizer.encoder_lr must be > 0"),
    ("an option misplaced", "bm25", ["--data.depth", "5"], "unknown option 'data.depth'"),
    ("an unknown option", "bm25", ["--data.first_stage.depht", "5"], "depht"),
]


@pytest.mark.parametrize(("command", "options", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_bad_options_fail_before_work_starts(files: Files, capsys: pytest.CaptureFixture, command: str,
                                             options: list[str], expected: str) -> None:
    assert expected in fails(files, files.arguments(command, *options), capsys)


def test_a_doc_id_twice_is_rejected_with_both_lines(files: Files, capsys: pytest.CaptureFixture) -> None:
    files.write_docs(extra=json.dumps({"doc_id": "d1", "text": "again"}) + "\n")
    message = fails(files, files.arguments("bm25"), capsys)
    assert f"{files.docs}:7: duplicate doc_id 'd1' (also on line 2)" in message
    tsv = files.root / "docs.tsv"
    tsv.write_text("a\twind\nb\theat\na\ttunnel\n")
    message = fails(files, ["bm25", *files.arguments("bm25")[1:], "--data.collection",
                            files.collection(docs=str(tsv))], capsys)
    assert f"{tsv}:3: duplicate doc_id 'a' (also on line 1)" in message


@pytest.mark.parametrize(("record", "expected"), [
    ({"doc_id": "d9", "text": 7}, "text is a JSON number, expected a string"),
    ({"doc_id": "d9", "text": ["wind", "tunnel"]}, "text is a JSON array, expected a string"),
    ({"doc_id": "d9", "title": {"main": "wind"}, "text": "tunnel"}, "title is a JSON object, expected a string"),
    ({"doc_id": 9.0, "text": "tunnel"}, "doc_id is a JSON number, expected a string or an integer"),
    ({"doc_id": True, "text": "tunnel"}, "doc_id is a JSON boolean, expected a string or an integer"),
    ({"doc_id": None, "text": "tunnel"}, "doc_id is a JSON null, expected a string or an integer")])
def test_a_document_field_of_another_json_type_is_named_with_its_line(files: Files, capsys: pytest.CaptureFixture,
                                                                      record: dict, expected: str) -> None:
    """A field of the wrong JSON type would be written into the text as Python prints it, or an id 9.0 would
    never match qrels' 9: each is refused, naming the file, line and field."""
    files.write_docs(extra=json.dumps(record) + "\n")
    assert f"{files.docs}:7: {expected}" in fails(files, files.arguments("bm25"), capsys)


def test_qrels_naming_unknown_documents(files: Files, capsys: pytest.CaptureFixture,
                                        caplog: pytest.LogCaptureFixture) -> None:
    wrong = files.root / "wrong-qrels.txt"
    wrong.write_text("1 0 x1 1\n2 0 x2 1\n")  # another collection's ids
    message = fails(files, [*files.arguments("bm25"), "--data.collection", files.collection(qrels=str(wrong))],
                    capsys)
    assert f"{wrong}: none of its 2 judged document ids is in {files.docs} (e.g. x1, x2)" in message
    cli.main(files.arguments("bm25"))  # QRELS judges d6, which DOCS lacks: a warning, and the run goes on
    assert f"{files.qrels}: 1 of 6 judged document ids are not in {files.docs} (e.g. d6)" in caplog.text


def test_an_empty_queries_file_is_named_once(files: Files, capsys: pytest.CaptureFixture) -> None:
    files.queries.write_text("")
    assert f"{files.queries}: no queries" in fails(files, files.arguments("bm25"), capsys)


def test_a_partial_collection_in_a_stacked_config_says_what_to_write(files: Files, capsys: pytest.CaptureFixture,
                                                                     tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("data:\n  collection:\n    label_map: {1: 2}\n")
    message = fails(files, ["bm25", "--config", "cranfield.yaml", "--config", str(tmp_path / "mine.yaml"),
                            "--output_dir", str(tmp_path / "out")], capsys)
    assert "a later data.collection replaces an earlier one as a whole: write all of it" in message


def test_a_teacher_run_missing_queries_is_named(files: Files, capsys: pytest.CaptureFixture) -> None:
    write_run({"1": {"d0": 1.0}}, files.root / "teacher.run")
    source = json.dumps([{"targets": "both", "teacher": {"run": str(files.root / "teacher.run")}}])
    message = fails(files, files.arguments("fit", "--data.train", source), capsys)
    assert f"teacher.run {files.root / 'teacher.run'}:" in message
    assert "queries of the candidates are not in it" in message


def deployed_export(files: Files, deployment: Deployment) -> Path:
    """The tiny model exported with ``deployment`` as the ranker it deploys (what rerank fit writes)."""
    from rerank.config.tokenization import TokenizationConfig
    from rerank.inference.export import export
    from rerank.model.cross_encoder import CrossEncoderModel

    model = CrossEncoderModel.from_pretrained(str(files.model), tokenization=TokenizationConfig(32, 8))
    return export(model, files.root / "exported", deployment=deployment)


def test_an_export_whose_teacher_cannot_be_found_fails_before_scoring(files: Files,
                                                                      capsys: pytest.CaptureFixture) -> None:
    gone = files.root / "moved" / "bi-encoder"
    teacher = TeacherConfig(bi_encoder=str(gone), first_stage_weight=0.4)
    model = deployed_export(files, Deployment("fused", {"reranker": 0.5, "teacher": 0.5, "first_stage": 0.0},
                                              teacher=teacher))
    message = fails(files, files.arguments("predict", "--model.model_name", str(model), "--data.rerank_depth", "5"),
                    capsys)
    assert f"{model}: the deployed ranker's teacher, the bi-encoder '{gone}', cannot be loaded" in message


def test_a_run_without_scores_is_named_when_the_deployed_ranker_mixes_them(files: Files,
                                                                          capsys: pytest.CaptureFixture) -> None:
    model = deployed_export(files, Deployment("interpolated", {"reranker": 0.7, "first_stage": 0.3}))
    write_run({"1": {"d0": 3.0, "d1": 2.0}, "2": {"d2": 0.0, "d3": 0.0, "d4": 0.0}}, files.root / "ranks.run")
    arguments = files.arguments("predict", "--model.model_name", str(model), "--data.rerank_depth", "5")
    message = fails(files, [*arguments, "--run", str(files.root / "ranks.run")], capsys)
    assert f"{files.root / 'ranks.run'}:3: all 3 candidates of query 2 score 0, so the run carries no scores" in message
    assert "--ranker reranker" in message


def test_byte_order_marks_are_accepted_everywhere(files: Files, tmp_path: Path) -> None:
    plain = cli_metrics(files, "plain")
    for path in (files.queries, files.qrels):
        path.write_text(BOM + path.read_text())
    files.write_docs(prefix=BOM)
    config = tmp_path / "bom.yaml"
    config.write_text(BOM + "data:\n  first_stage:\n    k1: 0.9\n")
    marked = cli_metrics(files, "marked", "--config", str(config))
    assert marked == plain and marked["nDCG@10"] > 0  # query 1 keeps its judgments
    run = files.root / "marked" / "first_stage.trec"
    run.write_text(BOM + run.read_text())
    again = cli_metrics(files, "from-run", "--data.first_stage.backend", "run", "--data.first_stage.run", str(run))
    assert again == plain


def cli_metrics(files: Files, name: str, *options: str) -> dict[str, float]:
    arguments = [*files.arguments("bm25", *options)]
    arguments[arguments.index("--output_dir") + 1] = str(files.root / name)
    cli.main(arguments)
    return json.loads((files.root / name / "metrics.json").read_text())["first_stage"]


def test_the_console_script_prints_one_line_and_no_traceback(files: Files) -> None:
    done = subprocess.run([sys.executable, "-m", "rerank", *files.arguments("fit", "--model.optimizer.encoder_lr=-1")],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "LightningCLI's args parameter" not in done.stderr  # known-harmless warnings are filtered
    assert [line for line in done.stderr.splitlines() if line.startswith("error:")] == [
        "error: --model.optimizer.encoder_lr: model.optimizer.encoder_lr must be > 0; got -1.0"]


def test_the_debug_switch_raises_the_error_with_its_traceback(files: Files, monkeypatch: pytest.MonkeyPatch) -> None:
    from rerank.cli.failures import run

    monkeypatch.setenv("RERANK_DEBUG", "1")
    with pytest.raises(ValueError, match=r"model.optimizer.encoder_lr must be > 0"):
        run(cli.main, files.arguments("fit", "--model.optimizer.encoder_lr=-1"))


def test_a_bug_shows_its_traceback_and_asks_for_a_report(capsys: pytest.CaptureFixture) -> None:
    from rerank.cli.failures import BUG, run
    from rerank.core.errors import UserError

    def shape_mismatch(argv: list[str] | None) -> None:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")  # as torch says it

    with pytest.raises(SystemExit) as exited:
        run(shape_mismatch)
    error = capsys.readouterr().err
    assert exited.value.code == 1 and "Traceback (most recent call last)" in error and "shape_mismatch" in error
    assert error.rstrip().endswith(BUG) and "error:" not in error

    def in_use(argv: list[str] | None) -> None:
        raise UserError("runs/x is being written by rerank fit (process 7 on vm): give another --output_dir")

    with pytest.raises(SystemExit) as exited:
        run(in_use)
    assert exited.value.code == 2 and "Traceback" not in capsys.readouterr().err


LATIN1 = "é".encode("latin-1")  # 0xe9: a Latin-1 file read as UTF-8
TOPICS = "<top>\n<num> Number: 1\n<title> wind tunnel\n<desc> Description:\n{}\n</top>\n"


def bad_file(files: Files, which: str) -> tuple[list[str], Path, int, int]:
    """The options that make a command read ``which`` with a Latin-1 byte, the file, its line and column."""
    if which == "docs.jsonl":
        lines = files.docs.read_bytes().splitlines(keepends=True)
        lines[2] = b'{"doc_id": "d2", "text": "caf' + LATIN1 + b'"}\n'
        files.docs.write_bytes(b"".join(lines))
        return files.arguments("bm25"), files.docs, 3, 30
    path = files.root / which
    if which == "docs.tsv":
        path.write_bytes(b"d0\twind tunnel\nd1\theat caf" + LATIN1 + b"\n")
        return files.arguments("bm25", "--data.collection", files.collection(docs=str(path))), path, 2, 12
    if which == "queries.tsv":
        path.write_bytes(b"1\twind tunnel\n2\theat caf" + LATIN1 + b"\n")
        return files.arguments("bm25", "--data.collection", files.collection(queries=str(path))), path, 2, 11
    if which == "topics.txt":
        path.write_bytes(TOPICS.format("flow caf\0").encode().replace(b"\0", LATIN1))
        return files.arguments("bm25", "--data.collection", files.collection(queries=str(path))), path, 5, 9
    if which == "qrels.txt":
        path.write_bytes(b"1 0 d0 1\n2 0 d2 1 caf" + LATIN1 + b"\n")
        return files.arguments("bm25", "--data.collection", files.collection(qrels=str(path))), path, 2, 13
    if which == "first_stage.run":
        path.write_bytes(b"1 Q0 d0 1 2.0 x\n1 Q0 d1 2 1.0 caf" + LATIN1 + b"\n")
        return files.arguments("bm25", "--data.first_stage.backend", "run", "--data.first_stage.run",
                               str(path)), path, 2, 18
    if which == "teacher.run":
        path.write_bytes(b"1 Q0 d0 1 2.0 x\n1 Q0 d1 2 1.0 caf" + LATIN1 + b"\n")
        source = json.dumps([{"targets": "both", "teacher": {"run": str(path)}}])
        return files.arguments("fit", "--data.train", source), path, 2, 18
    path.write_bytes(b"# caf" + LATIN1 + b"\ndata:\n  rerank_depth: 5\n")  # config.yaml
    return files.arguments("bm25", "--config", str(path)), path, 1, 6


@pytest.mark.parametrize("which", ["docs.jsonl", "docs.tsv", "queries.tsv", "topics.txt", "qrels.txt",
                                   "first_stage.run", "teacher.run", "config.yaml"])
def test_a_byte_that_is_not_utf8_is_named_with_its_file_and_line(files: Files, capsys: pytest.CaptureFixture,
                                                                 which: str) -> None:
    arguments, path, line, column = bad_file(files, which)
    message = fails(files, arguments, capsys)
    assert f"error: {path}:{line}: not UTF-8 text (byte 0xe9 at column {column}): save the file as UTF-8" in message


def test_a_yaml_syntax_error_is_one_line_naming_the_config_file_and_line(files: Files,
                                                                         capsys: pytest.CaptureFixture) -> None:
    config = files.root / "mine.yaml"
    config.write_text("model:\n  loss: listnet\n  optimizer: [1.0e-4\ndata:\n  rerank_depth: 5\n")
    message = fails(files, files.arguments("fit", "--config", str(config)), capsys)
    assert message.startswith(f"error: {config}:4:5: not valid YAML: while parsing a flow sequence expected ',' or "
                              "']', but got ':' (the construct began on line 3)")
    assert "usage:" not in message and "<unicode string>" not in message
    config.write_text("data:\n  rerank_depth: 5\n   list_size: 4\n")  # a key indented one space too far
    assert f"error: {config}:3:13: not valid YAML" in fails(files, files.arguments("bm25", "--config", str(config)),
                                                            capsys)


@pytest.mark.parametrize(("which", "what"), [("docs.jsonl", "doc_id 'd 9'"), ("docs.tsv", "doc_id 'd 9'"),
                                             ("queries.tsv", "query id 'q 7'"), ("empty", "doc_id ''")])
def test_ids_with_whitespace_are_refused_where_they_are_read(files: Files, capsys: pytest.CaptureFixture,
                                                             which: str, what: str) -> None:
    if which in ("docs.jsonl", "empty"):
        files.write_docs(extra=json.dumps({"doc_id": "d 9" if which == "docs.jsonl" else "", "text": "wind"}) + "\n")
        arguments, path, line = files.arguments("bm25"), files.docs, 7
    elif which == "docs.tsv":
        path, line = files.root / "docs.tsv", 2
        path.write_text("d0\twind tunnel\nd 9\theat flux\n")
        arguments = files.arguments("bm25", "--data.collection", files.collection(docs=str(path)))
    else:
        path, line = files.queries, len(QUERIES) + 1
        path.write_text(path.read_text() + "q 7\twind\n")
        arguments = files.arguments("bm25")
    message = fails(files, arguments, capsys)
    assert f"error: {path}:{line}: {what} is empty or holds whitespace, which TREC run and qrels files" in message


def test_a_run_is_never_written_with_an_id_it_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"doc_id 'd 9' is empty or holds whitespace"):
        write_run({"1": {"d0": 2.0, "d 9": 1.0}}, tmp_path / "x.run")
    assert not any(tmp_path.iterdir())  # nothing half-written


DAMAGED = {  # a kind of cache entry -> where the entry is (a glob under the run's folder) and what the warning calls it
    "documents": ("arrow/docs-*/table/*.arrow", "in Arrow"),
    "index": ("idx/bm25s-*/*.npy", "(bm25s index)"),
    "first-stage run": ("cache/first_stage/*.trec", "(first-stage run)"),
    "teacher scores": ("cache/teacher/*.trec", "(teacher scores)"),
    "pre-trained stage": ("cache/pretrained/*.safetensors", "(pre-trained stage)"),
}


@pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home (the tiny bi-encoder's vocabulary)")
def test_a_truncated_cache_entry_of_each_kind_is_rebuilt_with_a_warning(files: Files, monkeypatch: pytest.MonkeyPatch,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(files.root / "cache"))
    stage = {"train": [{"queries": "pseudo", "pseudo": {"count": 6, "min_words": 1},
                        "first_stage": {"backend": "bm25s", "index_dir": str(files.root / "idx")},
                        "targets": "teacher", "teacher": {"bi_encoder": str(tiny_bi_encoder(files.root / "bi"))}}],
             "max_steps": 2}

    def fitted(name: str) -> dict:
        arguments = files.arguments("fit", "--pretrain", json.dumps(stage))
        arguments[arguments.index("--output_dir") + 1] = str(files.root / name)
        cli.main(arguments)
        return json.loads((files.root / name / "metrics.json").read_text())["reranker"]

    first = fitted("first")
    for kind, (pattern, what) in DAMAGED.items():
        (entry, *_) = sorted(files.root.glob(pattern))
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])  # cut short, as by a full disk
        derived = {"index": "first_stage", "teacher scores": "pretrained"}  # what a rerun reads in its place
        if kind in derived:  # without it, the entry is read again
            for path in (files.root / "cache" / derived[kind]).iterdir():
                path.unlink()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            again = fitted(kind.replace(" ", "-"))
        warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cache entry ")]
        assert any(what in message and "does not match its seal" in message and "removed, and made again" in message
                   for message in warnings), (kind, warnings)
        assert again == first, kind  # made again, the same


def test_a_full_disk_while_the_documents_become_arrow_is_one_line_naming_where(files: Files,
                                                                               capsys: pytest.CaptureFixture,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while ``datasets`` writes the Arrow table (it wraps the OSError in a DatasetGenerationError):
    still the user's full disk, in one line naming the documents and the folder, and no half-written table."""
    from rerank.data import arrow_documents

    original = arrow_documents._read_documents

    def filling(path: str):
        for number, record in enumerate(original(path)):
            if number == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            yield record

    monkeypatch.setattr(arrow_documents, "_read_documents", filling)
    message = fails(files, files.arguments("bm25"), capsys)
    assert message.startswith(f"error: [Errno 28] No space left on device while converting the documents of "
                              f"{files.docs} to Arrow in {files.root / 'arrow'}"), message
    assert "bug" not in message
    assert list((files.root / "arrow").glob("*")) == []  # no table, whole or half-written


@pytest.mark.parametrize("line", ["7\t   ", "7\t"])
def test_a_query_without_text_is_refused_naming_its_file_and_line(files: Files, capsys: pytest.CaptureFixture,
                                                                  line: str) -> None:
    files.queries.write_text(files.queries.read_text() + line + "\n")
    message = fails(files, files.arguments("bm25"), capsys)
    assert f"{files.queries}:7: query '7' has no text" in message
