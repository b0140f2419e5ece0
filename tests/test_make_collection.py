"""scripts/data/make_collection.py: collections of Robust04's and MS MARCO's shapes, at the small sizes tests afford."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import load_script

from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.folds import robust04_folds
from rerank.evaluation.measures import evaluate
from rerank.first_stage import FirstStageConfig, retrieve

make_collection = load_script("make_collection")


def digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha1(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def robust04(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("robust04-shaped")
    make_collection.make(make_collection.ROBUST04.scaled(0.004), out, seed=7)
    return out


@pytest.fixture(scope="module")
def msmarco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("msmarco-shaped")
    make_collection.make(make_collection.MSMARCO.scaled(0.0004), out, seed=7)
    return out


def test_a_seed_gives_the_same_files_and_another_seed_others(robust04: Path, tmp_path: Path) -> None:
    shape = make_collection.ROBUST04.scaled(0.004)
    make_collection.make(shape, tmp_path / "again", seed=7)
    make_collection.make(shape, tmp_path / "other", seed=8)
    written = digests(robust04)
    assert {"docs.jsonl", "topics.txt", "qrels.txt", "collection.yaml", "shape.json"} <= set(written)
    again = digests(tmp_path / "again")
    assert {name: again[name] for name in ("docs.jsonl", "topics.txt", "qrels.txt")} == {
        name: written[name] for name in ("docs.jsonl", "topics.txt", "qrels.txt")}
    assert digests(tmp_path / "other")["docs.jsonl"] != written["docs.jsonl"]


def test_the_robust04_shape_has_news_like_lengths() -> None:
    """The length law at full size (drawn, not written): the median, 99th percentile and longest stated in the
    script's docstring."""
    lengths = make_collection.lengths(make_collection.ROBUST04, np.random.default_rng(0), 528_155)
    assert 360 <= np.median(lengths) <= 400
    assert 2_300 <= np.percentile(lengths, 99) <= 3_100
    assert lengths.max() == 30_000 and 450 <= lengths.mean() <= 600


def test_robust04_shaped_topics_qrels_and_folds_read_as_a_users_files(robust04: Path) -> None:
    shape = json.loads((robust04 / "shape.json").read_text())
    files = {"docs": str(robust04 / "docs.jsonl"), "queries": str(robust04 / "topics.txt"),
             "qrels": str(robust04 / "qrels.txt"), "cache_dir": str(robust04 / "arrow")}
    titles = Collection(CollectionConfig(**files)).queries
    descriptions = Collection(CollectionConfig(**files, query_field="description")).queries
    collection = Collection(CollectionConfig(**files))
    assert len(titles) == shape["topics"] == shape["judged_topics"] == 10 and set(titles) == set(descriptions)
    assert all(2 <= len(titles[qid].split()) <= 4 < len(descriptions[qid].split()) for qid in titles)
    assert set(titles) <= set(make_collection.ROBUST04_TOPIC_IDS)
    qrels = collection.qrels
    assert sum(map(len, qrels.values())) == shape["judgments"]
    assert {grade for judged in qrels.values() for grade in judged.values()} == {0, 1, 2}
    assert min(sum(grade > 0 for grade in judged.values()) for judged in qrels.values()) >= 3
    assert all(doc in collection.documents for judged in qrels.values() for doc in judged)
    lengths = [len(collection.documents.text(doc).split()) for doc in list(qrels[next(iter(qrels))])[:50]]
    assert min(lengths) >= 1
    folds = shape["folds"]
    assert sum(folds) == 10 and min(folds) >= 2


def test_at_full_size_the_folds_are_huston_and_crofts() -> None:
    assert make_collection._robust04_folds(make_collection.ROBUST04_TOPIC_IDS) == robust04_folds()
    assert len(make_collection.ROBUST04_TOPIC_IDS) == 250 and make_collection.UNJUDGED == {"672"}


def test_msmarco_shaped_queries_each_have_a_relevant_passage(msmarco: Path) -> None:
    shape = json.loads((msmarco / "shape.json").read_text())
    train = Collection(CollectionConfig(docs=str(msmarco / "docs.jsonl"), queries=str(msmarco / "queries.train.tsv"),
                                        qrels=str(msmarco / "qrels.train.txt"), cache_dir=str(msmarco / "arrow")))
    dev = Collection(CollectionConfig(docs=str(msmarco / "docs.jsonl"), queries=str(msmarco / "queries.dev.tsv"),
                                      qrels=str(msmarco / "qrels.dev.txt"), cache_dir=str(msmarco / "arrow")))
    assert len(train.queries) == shape["train_queries"] == 323 and len(dev.queries) == 10
    assert not set(train.queries) & set(dev.queries)
    assert set(train.qrels) == set(train.queries) and set(dev.qrels) == set(dev.queries)
    relevant = [len(judged) for judged in train.qrels.values()]
    assert min(relevant) == 1 and 1 < np.mean(relevant) < 1.15
    assert len(train.documents) == shape["documents"] == 3537
    assert 45 <= shape["words"]["mean"] <= 65


@pytest.mark.parametrize("shape, queries, qrels", [
    ("robust04", "topics.txt", "qrels.txt"), ("msmarco", "queries.train.tsv", "qrels.train.txt")])
def test_bm25_finds_the_relevant_documents_but_not_all(shape: str, queries: str, qrels: str, robust04: Path,
                                                       msmarco: Path, tmp_path: Path) -> None:
    """Well above random and below perfect: what makes the shapes worth measuring a model on."""
    folder = robust04 if shape == "robust04" else msmarco
    collection = Collection(CollectionConfig(docs=str(folder / "docs.jsonl"), queries=str(folder / queries),
                                             qrels=str(folder / qrels), cache_dir=str(folder / "arrow")))
    run = retrieve(collection, FirstStageConfig(backend="bm25s", index_dir=str(tmp_path), retrieval_depth=100))
    ndcg = evaluate(run, collection.qrels, ["nDCG@10"]).mean["nDCG@10"]
    shuffled = {qid: dict(zip(ranked, np.random.default_rng(0).permutation(len(ranked)).tolist(), strict=True))
                for qid, ranked in run.items()}
    random = evaluate(shuffled, collection.qrels, ["nDCG@10"]).mean["nDCG@10"]
    assert random + 0.15 < ndcg < 0.95


def test_a_scale_outside_zero_to_one_is_refused_naming_the_option() -> None:
    with pytest.raises(SystemExit):
        make_collection.main(["robust04", "--out", "x", "--scale", "2"])
    with pytest.raises(ValueError, match="--scale must lie in"):
        make_collection.ROBUST04.scaled(0)
