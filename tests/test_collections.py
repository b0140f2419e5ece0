"""Collections from ir_datasets and from local files, configured the same way."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SHARED
from helpers import CRANFIELD as CRANFIELD_CONFIG

from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.ir_datasets_source import MissingDataError
from rerank.data.trec import read_qrels

CRANFIELD = SHARED / "data" / "cranfield"
ROBUST = SHARED / "data" / "robust04-topics"
CRANFIELD_MAP = CRANFIELD_CONFIG["label_map"]


def local_cranfield(tmp_path: Path) -> Collection:
    return Collection(CollectionConfig(docs=str(CRANFIELD / "docs.jsonl"), queries=str(CRANFIELD / "queries.tsv"),
                                       qrels=str(CRANFIELD / "qrels.txt"), cache_dir=str(tmp_path / "arrow")))


def test_cranfield_from_ir_datasets_with_label_map_equals_local_files(tmp_path: Path) -> None:
    remote = Collection(CollectionConfig(ir_datasets="cranfield", label_map=CRANFIELD_MAP))
    local = local_cranfield(tmp_path)
    assert remote.qrels == local.qrels
    assert remote.qrels == read_qrels(CRANFIELD / "qrels.raw.txt", CRANFIELD_MAP)
    assert remote.queries == local.queries and len(remote.queries) == 225
    assert len(remote.documents) == len(local.documents) == 1400
    assert remote.documents.text("486").split() == local.documents.text("486").split()
    assert "486" in local.documents and "nope" not in local.documents


def test_raw_cranfield_codes_rank_the_most_relevant_lowest() -> None:
    raw = Collection(CollectionConfig(ir_datasets="cranfield")).qrels
    assert {label for judged in raw.values() for label in judged.values()} == {-1, 1, 2, 3, 4}


def test_local_documents_stream_and_are_cached_on_disk(tmp_path: Path) -> None:
    documents = local_cranfield(tmp_path).documents
    ids = [doc_id for doc_id, _ in documents.iter_texts()]
    assert len(ids) == 1400 and ids[0] == "1"
    assert any((tmp_path / "arrow").iterdir())
    again = local_cranfield(tmp_path).documents
    assert again.text("1") == documents.text("1") and again.fingerprint() == documents.fingerprint()


def test_local_documents_keep_their_caches_while_their_bytes_are_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"doc_id": f"d{i}", "text": f"text {i}"}) + "\n" for i in range(5)))

    def fingerprint() -> str:
        return Collection(CollectionConfig(docs=str(docs))).documents.fingerprint()

    first = fingerprint()
    assert len(Collection(CollectionConfig(docs=str(docs))).documents) == 5  # converted once
    os.utime(docs, ns=(10**18, 10**18))  # a copy laid down again, or a touch: new dates, the same bytes
    caplog.set_level("INFO", logger="rerank.data.arrow_documents")
    assert fingerprint() == first
    assert len(Collection(CollectionConfig(docs=str(docs))).documents) == 5
    assert "from the cache" in caplog.text and "converting" not in caplog.text
    memo = [path for path in (tmp_path / "cache" / "fingerprints").glob("*.txt")]
    assert len(memo) == 2  # one digest per version of the file (size and dates)
    for path in memo:  # a damaged digest is computed again, not trusted
        path.write_text("0" * 16)
    assert fingerprint() == first
    docs.write_text(docs.read_text().replace("text 3", "text 8"))  # an edit of the same size, dated now
    assert fingerprint() != first
    caplog.clear()
    assert Collection(CollectionConfig(docs=str(docs))).documents.text("d3") == "text 8"
    assert "converting the documents" in caplog.text


def test_local_documents_are_cached_under_rerank_cache_not_beside_the_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "lab-share"  # a folder the user may not be able (or allowed) to write to
    data.mkdir()
    (data / "docs.jsonl").write_text("".join(json.dumps({"doc_id": f"d{i}", "text": f"text {i}"}) + "\n"
                                             for i in range(5)))
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    caplog.set_level("INFO", logger="rerank.data.arrow_documents")
    assert Collection(CollectionConfig(docs=str(data / "docs.jsonl"))).documents.text("d3") == "text 3"
    assert sorted(path.name for path in data.iterdir()) == ["docs.jsonl"]
    assert len(list((tmp_path / "cache" / "documents").iterdir())) == 1
    assert "converting the documents" in caplog.text
    caplog.clear()
    assert len(Collection(CollectionConfig(docs=str(data / "docs.jsonl"))).documents) == 5
    assert "from the cache" in caplog.text and "converting" not in caplog.text


def test_tsv_documents_and_trec_topics_with_fields_and_template(tmp_path: Path) -> None:
    (tmp_path / "docs.tsv").write_text("a\tTitle A\tbody a\nb\tbody b\n")
    topics = str(ROBUST / "topics.robust04.301-450.601-700.txt")
    titles = Collection(CollectionConfig(docs=str(tmp_path / "docs.tsv"), queries=topics, cache_dir=str(tmp_path)))
    assert titles.documents.text("a") == "Title A body a" and titles.documents.text("b") == "body b"
    assert titles.queries["301"] == "International Organized Crime" and len(titles.queries) == 250
    described = Collection(CollectionConfig(queries=topics, query_field="description"))
    assert described.queries["302"] == "Is the disease of Poliomyelitis (polio) under control in the world?"
    both = Collection(CollectionConfig(queries=topics, query_template="{title}. {description}"))
    assert both.queries["302"].startswith("Poliomyelitis and Post-Polio. Is the disease")
    with pytest.raises(ValueError, match="names field 'summary'"):
        _ = Collection(CollectionConfig(queries=topics, query_template="{summary}")).queries


def test_robust04_queries_and_folds_load_offline() -> None:
    fold1 = Collection(CollectionConfig(ir_datasets="disks45/nocr/trec-robust-2004/fold1"))
    assert len(fold1.queries) == 50 and fold1.queries["302"] == "Poliomyelitis and Post-Polio"
    described = Collection(CollectionConfig(ir_datasets="disks45/nocr/trec-robust-2004/fold1",
                                            query_field="description"))
    assert described.queries["302"].startswith("Is the disease of Poliomyelitis")
    reference = json.loads((ROBUST / "folds.huston_croft_2014.json").read_text())
    for k in range(1, 6):
        fold = Collection(CollectionConfig(ir_datasets=f"disks45/nocr/trec-robust-2004/fold{k}"))
        assert set(fold.queries) == set(reference[f"fold{k}"])


def test_robust04_documents_and_qrels_absent_say_where_to_put_them() -> None:
    robust = Collection(CollectionConfig(ir_datasets="disks45/nocr/trec-robust-2004"))
    with pytest.raises(MissingDataError, match=r"TREC Disks 4&5.*disks45/corpus"):
        list(robust.documents.iter_texts())
    with pytest.raises(MissingDataError, match=r"qrels.robust2004.txt.*downloads/123c2a0ba2ec31178cb1050995dcfdfa"):
        _ = robust.qrels


def test_bad_collection_configs_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown ir_datasets id 'no/such/dataset'"):
        _ = Collection(CollectionConfig(ir_datasets="no/such/dataset")).queries
    with pytest.raises(ValueError, match="either ir_datasets or local files"):
        CollectionConfig(ir_datasets="cranfield", docs="x.jsonl")
    with pytest.raises(ValueError, match="query_field must be one of"):
        CollectionConfig(ir_datasets="cranfield", query_field="abstract")
    with pytest.raises(FileNotFoundError, match="collection.queries: .*missing.tsv does not exist"):
        _ = Collection(CollectionConfig(queries=str(tmp_path / "missing.tsv"))).queries
    (tmp_path / "bad.jsonl").write_text('{"doc_id": "1", "text": "ok"}\n{"text": "no id"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: expected a JSON object with doc_id"):
        len(Collection(CollectionConfig(docs=str(tmp_path / "bad.jsonl"), cache_dir=str(tmp_path))).documents)
    (tmp_path / "queries.tsv").write_text("1\tfine\n2\n")
    with pytest.raises(ValueError, match=r"queries.tsv:2: expected query_id<TAB>text"):
        _ = Collection(CollectionConfig(queries=str(tmp_path / "queries.tsv"))).queries


def test_local_documents_are_found_by_id_through_the_sorted_index(tmp_path: Path) -> None:
    ids = ["b", "a10", "a9", "ü-1", "zzz", "a1"]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"doc_id": doc, "text": f"text of {doc}"}) + "\n"
                                                 for doc in ids), encoding="utf-8")
    documents = Collection(CollectionConfig(docs=str(tmp_path / "docs.jsonl"), cache_dir=str(tmp_path))).documents
    assert [documents.text(doc) for doc in ids] == [f"text of {doc}" for doc in ids]
    assert all(doc in documents for doc in ids) and len(documents) == len(ids)
    for absent in ("a", "a100", "zzzz", "ü", ""):  # between, after, longer than any id, a prefix
        assert absent not in documents
    with pytest.raises(KeyError, match="no document 'c'"):
        documents.text("c")


# Reads every Cranfield document through rerank once a file named by argv[1] exists (so that the processes start
# reading together), then prints the texts and the number of entries in the doc store.
READER = """
import json, sys, time
from pathlib import Path
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
documents = Collection(CollectionConfig(ir_datasets="cranfield")).documents
ids = [line.split()[0] for line in open(sys.argv[2]) if line.strip()]
while not Path(sys.argv[1]).exists():
    time.sleep(0.001)
iterated = dict(documents.iter_texts())  # ir_datasets reads Cranfield's documents in order from the store too
texts = {doc_id: documents.text(doc_id) for doc_id in ids}
assert iterated == texts, "the documents read in order are not the ones looked up"
print(json.dumps({"entries": len(documents._store.lookup), "texts": texts}))
"""
# Builds the store the way two processes did before the lock: twice, each unaware of the other.
DOUBLE_BUILD = """
import ir_datasets
store = ir_datasets.load("cranfield").docs_store()
store.build()
store.built = lambda: False
store.build()
print(len(store.lookup))
"""


def fresh_cranfield_home(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``IR_DATASETS_HOME`` holds Cranfield's raw files only (its doc store not built)."""
    home = tmp_path / "irds_home"
    shutil.copytree(SHARED / "irds_home" / "cranfield", home / "cranfield")
    for path in home.rglob("*"):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(json.loads(line)["doc_id"] + "\n" for line in open(CRANFIELD / "docs.jsonl")))
    return {**os.environ, "IR_DATASETS_HOME": str(home)}


def read_together(tmp_path: Path, env: dict[str, str], processes: int, prelude: str = "") -> list[dict]:
    """What ``processes`` READERs, started together, read (each after running ``prelude``)."""
    go = tmp_path / "go"
    go.unlink(missing_ok=True)
    readers = [subprocess.Popen([sys.executable, "-c", prelude + READER, str(go), str(tmp_path / "ids.txt")],
                                env={**env, "RERANK_CACHE": str(tmp_path / f"cache{i}")},  # as the suite's tests
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(processes)]
    go.touch()  # the readers wait on it after their imports: their first reads come together
    outputs = [reader.communicate(timeout=300) for reader in readers]
    assert all(reader.returncode == 0 for reader in readers), [err[-2000:] for _, err in outputs]
    return [json.loads(out) for out, _ in outputs]


def local_texts() -> dict[str, list[str]]:
    """Each document's title and text, the words of the local copy of Cranfield."""
    docs = map(json.loads, open(CRANFIELD / "docs.jsonl"))
    return {doc["doc_id"]: f"{doc['title']} {doc['text']}".split() for doc in docs}


@pytest.mark.skipif(not (SHARED / "irds_home" / "cranfield").is_dir(), reason="needs ../shared/irds_home/cranfield")
def test_processes_that_open_a_fresh_doc_store_at_once_build_it_once(tmp_path: Path) -> None:
    """ir_datasets alone lets each of them build it (2,800 entries for 1,400 documents, with two)."""
    env = fresh_cranfield_home(tmp_path)
    expected = local_texts()
    for result in read_together(tmp_path, env, processes=3):
        assert result["entries"] == len(expected) == 1400
        assert {doc_id: text.split() for doc_id, text in result["texts"].items()} == expected


@pytest.mark.skipif(not (SHARED / "irds_home" / "cranfield").is_dir(), reason="needs ../shared/irds_home/cranfield")
def test_a_doc_store_built_twice_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    env = fresh_cranfield_home(tmp_path)
    doubled = subprocess.run([sys.executable, "-c", DOUBLE_BUILD], env=env, capture_output=True, text=True, check=True)
    assert doubled.stdout.split() == ["2800"]
    (result,) = read_together(tmp_path, env, processes=1)
    assert result["entries"] == 1400
    assert {doc_id: text.split() for doc_id, text in result["texts"].items()} == local_texts()


@pytest.mark.skipif(not (SHARED / "irds_home" / "cranfield").is_dir(), reason="needs ../shared/irds_home/cranfield")
def test_a_built_doc_store_in_a_home_that_cannot_be_written_to_is_read_without_a_lock(tmp_path: Path) -> None:
    """A shared, read-only ``IR_DATASETS_HOME`` (a cluster's): no lock can be made beside its store, none is needed."""
    env = fresh_cranfield_home(tmp_path)
    read_together(tmp_path, env, processes=1)  # built once, writable
    (lock,) = Path(env["IR_DATASETS_HOME"]).rglob("*.lock")
    lock.unlink()
    # as root every file can be written, so the home refuses as a read-only mount does
    refusing = ("import pathlib\n"
                "def touch(self, *args, **kwargs):\n"
                "    raise PermissionError(13, 'Read-only file system', str(self))\n"
                "pathlib.Path.touch = touch\n")
    (result,) = read_together(tmp_path, env, processes=1, prelude=refusing)
    assert result["entries"] == 1400 and not lock.exists()
    assert {doc_id: text.split() for doc_id, text in result["texts"].items()} == local_texts()
